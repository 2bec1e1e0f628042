//! The one way text from the daemon, the agent or another client becomes something on screen.
//! ratatui writes a span's characters to the terminal as they are: an ESC in a span is an ESC on
//! the wire, which can move the cursor, set the title or write the clipboard. So every span of
//! such text is made here: a character a reader cannot see as itself ([`crate::text::is_hidden`])
//! becomes its escape (`\u{1b}`, `\n`) in the client's own "mark" style, and a stack of combining
//! marks is cut as [`crate::text::escape`] cuts it.

use ratatui::style::Style;
use ratatui::text::Span;

use super::theme::Theme;
use crate::text::{escape, is_hidden};

/// `text` as spans in `style`, its hidden characters as escapes in the theme's mark style.
pub(crate) fn spans(text: &str, style: Style, theme: Theme) -> Vec<Span<'static>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (at, c) in text.char_indices() {
        if is_hidden(c) {
            if start < at {
                out.push(Span::styled(escape(&text[start..at]).into_owned(), style));
            }
            out.push(Span::styled(escape(&text[at..at + c.len_utf8()]).into_owned(), theme.mark()));
            start = at + c.len_utf8();
        }
    }
    if start < text.len() {
        out.push(Span::styled(escape(&text[start..]).into_owned(), style));
    }
    out
}

/// `text` as one span in `style`, escaped ([`escape`]): for short labels where marking the escapes
/// apart is not worth the spans.
pub(crate) fn span(text: &str, style: Style) -> Span<'static> {
    Span::styled(escape(text).into_owned(), style)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_characters_become_marked_escapes_and_the_rest_stays() {
        let theme = Theme::COLOUR;
        let got = spans("a\u{1b}[2Jb\u{202e}c", Style::new(), theme);
        let texts: Vec<&str> = got.iter().map(|s| s.content.as_ref()).collect();
        assert_eq!(texts, ["a", "\\u{1b}", "[2Jb", "\\u{202e}", "c"]);
        assert_eq!(got[1].style, theme.mark());
        assert_eq!(got[0].style, Style::new());
        assert!(spans("", Style::new(), theme).is_empty());
        let stack = spans("a\u{300}\u{301}\u{302}", Style::new(), theme);
        assert_eq!(stack[0].content, "a\u{300}\u{301}\\u{302}");
        assert_eq!(span("x\ny", Style::new()).content, "x\\ny");
    }
}

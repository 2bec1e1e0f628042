//! The agent's Markdown for a terminal: CommonMark (with tables, strikethrough and task lists) read
//! by pulldown-cmark, written as styled lines: headings bold, emphasis italic, code in its own
//! colour, code blocks indented, lists with bullets or numbers, quotes with a bar, links followed by
//! their address, tables as rows of cells. Every piece of text goes through [`super::shown`].
//! Lines are not wrapped here (the view wraps them to the width it has).

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::Style;
use ratatui::text::{Line, Span};

use super::shown::spans;
use super::theme::Theme;

/// Builds lines from parser events.
struct Writer {
    theme: Theme,
    lines: Vec<Line<'static>>,
    current: Vec<Span<'static>>,
    /// Inline styles in force (emphasis inside strong inside a link …), innermost last.
    styles: Vec<Style>,
    /// Open lists: the next number of an ordered one, `None` for bullets.
    lists: Vec<Option<u64>>,
    quotes: usize,
    code_block: bool,
    /// Links being read: their address, written after the link's text.
    links: Vec<String>,
    /// A table cell was written on this row already (the next one gets a separator).
    cell_open: bool,
    /// A list bullet was just written: a paragraph that follows continues its line.
    item_open: bool,
}

impl Writer {
    fn style(&self) -> Style {
        self.styles.iter().fold(Style::new(), |s, x| s.patch(*x))
    }

    /// The prefix every line of the current block starts with: quote bars, list indentation.
    fn prefix(&self) -> Vec<Span<'static>> {
        let mut out = Vec::new();
        if self.quotes > 0 {
            out.push(Span::styled("│ ".repeat(self.quotes), self.theme.dim()));
        }
        if self.lists.len() > 1 {
            out.push(Span::raw("  ".repeat(self.lists.len() - 1)));
        }
        out
    }

    fn flush(&mut self) {
        if !self.current.is_empty() {
            let line = std::mem::take(&mut self.current);
            self.lines.push(Line::from(line));
        }
    }

    /// Ends the current line and starts the next with the block's prefix.
    fn newline(&mut self) {
        self.flush();
        self.current = self.prefix();
        if self.lists.is_empty() && self.quotes == 0 {
            self.current.clear();
        }
    }

    /// A blank line between blocks (never two, never first).
    fn gap(&mut self) {
        self.flush();
        if self.lines.last().is_some_and(|l| !l.spans.is_empty()) && self.lists.is_empty() {
            self.lines.push(Line::default());
        }
    }

    fn text(&mut self, text: &str, style: Style) {
        self.item_open = false;
        let mut first = true;
        for piece in text.split('\n') {
            if !first {
                self.newline();
            }
            first = false;
            if self.code_block && self.current.is_empty() {
                self.current = self.prefix();
                self.current.push(Span::raw("    "));
            }
            self.current.extend(spans(piece, style, self.theme));
        }
    }

    fn event(&mut self, event: Event<'_>) {
        let t = self.theme;
        match event {
            Event::Start(tag) => match tag {
                Tag::Paragraph => {
                    // Right after a list bullet the paragraph continues that line.
                    let continues = std::mem::take(&mut self.item_open);
                    if !continues {
                        self.gap();
                        self.current = self.prefix();
                    }
                }
                Tag::Heading { level, .. } => {
                    self.gap();
                    self.current = self.prefix();
                    let marks = match level {
                        HeadingLevel::H1 => "# ",
                        HeadingLevel::H2 => "## ",
                        _ => "### ",
                    };
                    self.current.push(Span::styled(marks, t.heading()));
                    self.styles.push(t.heading());
                }
                Tag::BlockQuote(_) => {
                    self.gap();
                    self.quotes += 1;
                }
                Tag::CodeBlock(_) => {
                    self.gap();
                    self.code_block = true;
                    self.styles.push(t.code());
                }
                Tag::List(start) => {
                    if self.lists.is_empty() {
                        self.gap();
                    } else {
                        self.flush();
                    }
                    self.lists.push(start);
                }
                Tag::Item => {
                    self.flush();
                    self.current = self.prefix();
                    let bullet = match self.lists.last_mut() {
                        Some(Some(n)) => {
                            *n += 1;
                            format!("{}. ", *n - 1)
                        }
                        _ => "• ".to_owned(),
                    };
                    self.current.push(Span::styled(bullet, t.dim()));
                    self.item_open = true;
                }
                Tag::Emphasis => self.styles.push(t.italic()),
                Tag::Strong => self.styles.push(t.bold()),
                Tag::Strikethrough => {
                    self.styles.push(Style::new().add_modifier(ratatui::style::Modifier::CROSSED_OUT))
                }
                Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                    self.styles.push(t.link());
                    self.links.push(dest_url.into_string());
                }
                Tag::Table(_) => self.gap(),
                Tag::TableHead | Tag::TableRow => {
                    self.flush();
                    self.current = self.prefix();
                    self.cell_open = false;
                }
                Tag::TableCell => {
                    if self.cell_open {
                        self.current.push(Span::styled(" │ ", t.dim()));
                    }
                    self.cell_open = true;
                }
                _ => {}
            },
            Event::End(end) => match end {
                TagEnd::Paragraph => self.flush(),
                TagEnd::Heading(_) => {
                    self.styles.pop();
                    self.flush();
                }
                TagEnd::BlockQuote(_) => {
                    self.flush();
                    self.quotes = self.quotes.saturating_sub(1);
                }
                TagEnd::CodeBlock => {
                    self.styles.pop();
                    self.code_block = false;
                    self.flush();
                }
                TagEnd::List(_) => {
                    self.flush();
                    self.lists.pop();
                }
                TagEnd::Item => {
                    self.item_open = false;
                    self.flush();
                }
                TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => {
                    self.styles.pop();
                }
                TagEnd::Link | TagEnd::Image => {
                    self.styles.pop();
                    if let Some(url) = self.links.pop().filter(|u| !u.is_empty()) {
                        self.current.push(Span::styled(" (", t.dim()));
                        self.current.extend(spans(&url, t.dim(), t));
                        self.current.push(Span::styled(")", t.dim()));
                    }
                }
                TagEnd::TableHead => {
                    self.flush();
                    self.lines.push(Line::from(Span::styled("─".repeat(8), t.dim())));
                }
                TagEnd::TableRow | TagEnd::Table => self.flush(),
                _ => {}
            },
            Event::Text(text) => {
                let style = self.style();
                // A code block's text ends with its last newline: that ends the block, not a line.
                let text = if self.code_block {
                    text.strip_suffix('\n').unwrap_or(&text).to_owned()
                } else {
                    text.into_string()
                };
                self.text(&text, style);
            }
            Event::Code(code) => {
                let style = self.style().patch(t.code());
                self.text(&code, style);
            }
            Event::InlineMath(m) | Event::DisplayMath(m) => {
                let style = self.style().patch(t.code());
                self.text(&m, style);
            }
            // HTML is shown as the text it is, never interpreted.
            Event::Html(html) | Event::InlineHtml(html) => {
                let style = self.style();
                self.text(html.trim_end_matches('\n'), style);
            }
            Event::SoftBreak => self.text(" ", Style::new()),
            Event::HardBreak => self.newline(),
            Event::Rule => {
                self.gap();
                self.lines.push(Line::from(Span::styled("─".repeat(24), t.dim())));
            }
            Event::TaskListMarker(done) => {
                self.current.push(Span::styled(if done { "[x] " } else { "[ ] " }, t.dim()));
            }
            Event::FootnoteReference(name) => {
                let style = self.style();
                self.text(&format!("[^{name}]"), style);
            }
        }
    }
}

/// `markdown` as styled lines.
pub(crate) fn lines(markdown: &str, theme: Theme) -> Vec<Line<'static>> {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut w = Writer {
        theme,
        lines: Vec::new(),
        current: Vec::new(),
        styles: Vec::new(),
        lists: Vec::new(),
        quotes: 0,
        code_block: false,
        links: Vec::new(),
        cell_open: false,
        item_open: false,
    };
    for event in Parser::new_ext(markdown, options) {
        w.event(event);
    }
    w.flush();
    w.lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn the_showcase_constructs_render_as_terminal_lines() {
        let md = "## What I found\n\nThe workspace holds **three** entries; `src/` is the *interesting* one.\n\n\
- `Cargo.toml`: the manifest\n- `README.md`: the [documentation](https://example.com/docs)\n\n\
```sh\ncargo test --workspace\n```\n\n> Ask me to `write` a file.\n\n1. one\n2. two\n";
        let got = lines(md, Theme::COLOUR);
        assert_eq!(
            plain(&got),
            [
                "## What I found",
                "",
                "The workspace holds three entries; src/ is the interesting one.",
                "",
                "• Cargo.toml: the manifest",
                "• README.md: the documentation (https://example.com/docs)",
                "",
                "    cargo test --workspace",
                "",
                "│ Ask me to write a file.",
                "",
                "1. one",
                "2. two",
            ]
        );
        let strong = got[2].spans.iter().find(|s| s.content == "three").expect("strong span");
        assert!(strong.style.add_modifier.contains(ratatui::style::Modifier::BOLD));
        let code = got[7].spans.iter().find(|s| s.content.contains("cargo")).expect("code span");
        assert_eq!(code.style.fg, Theme::COLOUR.code().fg);
    }

    #[test]
    fn escape_sequences_in_any_construct_are_written_as_escapes() {
        let md = "# t\u{1b}]0;x\u{7}\n\nsee \u{1b}[2J `c\u{1b}` [l](http://x/\u{1b})\n\n```\n\u{202e}cod\n```\n\n<b>\u{1b}</b>\n";
        let got = lines(md, Theme::PLAIN);
        for line in plain(&got) {
            assert!(!line.chars().any(crate::text::is_hidden), "{line:?}");
        }
        assert!(plain(&got).iter().any(|l| l.contains("\\u{1b}[2J")), "{:?}", plain(&got));
        assert!(plain(&got).iter().any(|l| l.contains("\\u{202e}cod")), "{:?}", plain(&got));
    }

    #[test]
    fn tables_become_rows_of_cells_and_nested_lists_indent() {
        let got = plain(&lines("| a | b |\n|---|---|\n| 1 | 2 |\n\n- x\n  - y\n", Theme::PLAIN));
        assert_eq!(got, ["a │ b", "────────", "1 │ 2", "", "• x", "  • y"]);
    }
}

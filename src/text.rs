//! Showing text that someone else chose — an agent's session ids, tool titles and commands, its
//! stderr, a device's name — where it could do harm: on a terminal (escape sequences move the
//! cursor, set the title, write the clipboard; a newline forges a row) or in front of a person who
//! decides on it (a bidi override reverses a command, a run of spaces pushes its end out of sight,
//! zero-width characters and diacritic stacks hide or cover text).
//!
//! One rule for every door: a character that a reader cannot see as itself is written as an
//! escape (`\n`, `\t`, `\r`, `\u{202e}`), never as itself. [`escape`] does that for terminals,
//! logs and every export (a table's cell, a CSV cell, a transcript's title: a newline in one never
//! starts a line of the output); [`indented`] lays prose out in an export with lines of its own
//! (the Markdown transcript), each of its lines escaped and after the export's own indent, so no
//! line the prose chose starts a line of the document; [`reveal`] also shows runs of blanks and of
//! one invisible character by their length, for one-line summaries a person decides on;
//! [`escape_json`] writes the same characters as `\uXXXX` in text that is already JSON
//! (`mediatord audit --json`, JSON logs), where serde leaves them raw. `web/reveal.js` applies the
//! same tables in the browser.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Combining marks kept on one base character; the rest are escaped. Two covers every real use of
/// the generic diacritic blocks (`ệ` is one base and two marks); a "Zalgo" stack of dozens draws
/// over the lines around it.
pub const MAX_MARKS_PER_BASE: usize = 2;
/// Blanks (or copies of one invisible character) shown as themselves in a row; a longer run is
/// written as its length (`⟪300 spaces⟫`), so it can neither push text out of sight nor hide it.
pub const MAX_BLANK_RUN: usize = 3;

/// Characters that are never shown as themselves: C0 and C1 controls and DEL; bidirectional
/// controls (they reorder what follows); other invisible format characters (zero-width spaces and
/// joiners, word joiner, invisible operators, soft hyphen, BOM, interlinear annotation, tags) and
/// the blank "filler" letters; line and paragraph separators. Sorted, disjoint, inclusive.
const HIDDEN: &[(u32, u32)] = &[
    (0x0000, 0x001F),
    (0x007F, 0x009F),
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x2028, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
];

/// The generic combining diacritic blocks (what stacks are built from). Script-specific marks
/// (Devanagari, Thai, …) are left alone: they stack by design and are bounded by their script.
const STACKING_MARKS: &[(u32, u32)] =
    &[(0x0300, 0x036F), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF), (0xFE20, 0xFE2F)];

fn in_table(table: &[(u32, u32)], c: char) -> bool {
    let c = c as u32;
    table
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// Whether `c` is never shown as itself (see [`HIDDEN`]).
pub fn is_hidden(c: char) -> bool {
    in_table(HIDDEN, c)
}

/// Whether `c` is a combining mark of the generic diacritic blocks.
fn is_stacking_mark(c: char) -> bool {
    in_table(STACKING_MARKS, c)
}

/// A blank: whitespace that shows as empty space (the braille blank too, which is no whitespace
/// but draws nothing).
fn is_blank(c: char) -> bool {
    c.is_whitespace() || c == '\u{2800}'
}

/// Text that needs no work: printable ASCII only.
fn plain(text: &str) -> bool {
    text.bytes().all(|b| (0x20..0x7F).contains(&b))
}

/// Writes `c` as its escape.
fn push_escape(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// Appends `c`, escaped when it is hidden or a mark beyond [`MAX_MARKS_PER_BASE`] on its base;
/// `marks` counts the marks on the current base.
fn push_shown(out: &mut String, c: char, marks: &mut usize) {
    if is_stacking_mark(c) {
        *marks += 1;
        if *marks > MAX_MARKS_PER_BASE {
            push_escape(out, c);
        } else {
            out.push(c);
        }
        return;
    }
    *marks = 0;
    if is_hidden(c) { push_escape(out, c) } else { out.push(c) }
}

/// `text` for a terminal or a log line: every hidden character and every combining mark past
/// [`MAX_MARKS_PER_BASE`] on one base written as an escape. Nothing else changes.
pub fn escape(text: &str) -> Cow<'_, str> {
    if plain(text) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut marks = 0;
    for c in text.chars() {
        push_shown(&mut out, c, &mut marks);
    }
    Cow::Owned(out)
}

/// Prose others wrote (a prompt, an agent's answer), laid out in a document with lines of its own:
/// each of its lines [`escape`]d (a carriage return, a line separator or an escape sequence inside
/// one stays on it, escaped) and written after `indent`; an empty line stays empty. So every
/// physical line the prose takes starts with the document's `indent`, never with what the prose
/// chose (a heading, a forged "Permission asked" line).
pub fn indented(text: &str, indent: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if !line.is_empty() {
            out.push_str(indent);
            out.push_str(&escape(line));
        }
    }
    out
}

/// `text` as one line for a person to decide on: [`escape`], and a run of more than
/// [`MAX_BLANK_RUN`] blanks, or of one hidden character, written as its length (`⟪300 spaces⟫`,
/// `⟪12 × \n⟫`, `⟪40 × \u{200b}⟫`, `⟪7 blanks⟫` for mixed blanks).
pub fn reveal(text: &str) -> Cow<'_, str> {
    let needs_work =
        !plain(text) || text.as_bytes().windows(MAX_BLANK_RUN + 1).any(|w| w.iter().all(|&b| b == b' '));
    if !needs_work {
        return Cow::Borrowed(text);
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 8);
    let mut marks = 0;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let run = if is_blank(c) {
            chars[i..].iter().take_while(|&&b| is_blank(b)).count()
        } else if is_hidden(c) {
            chars[i..].iter().take_while(|&&b| b == c).count()
        } else {
            1
        };
        if run <= MAX_BLANK_RUN {
            for &c in &chars[i..i + run] {
                push_shown(&mut out, c, &mut marks);
            }
        } else {
            marks = 0;
            let same = chars[i..i + run].iter().all(|&b| b == c);
            out.push('⟪');
            match (c, same) {
                (' ', true) => {
                    let _ = write!(out, "{run} spaces");
                }
                // A run of one character that is not a space is of a hidden one or another blank:
                // either is named by its escape.
                (c, true) => {
                    let _ = write!(out, "{run} × ");
                    push_escape(&mut out, c);
                }
                (_, false) => {
                    let _ = write!(out, "{run} blanks");
                }
            }
            out.push('⟫');
        }
        i += run;
    }
    Cow::Owned(out)
}

/// `json` (a JSON text, as serde_json writes it) with every hidden character it left raw written as
/// a `\uXXXX` escape (a surrogate pair above the BMP). Outside strings JSON holds only ASCII, so
/// any such character is inside a string, and the result is the same JSON value. C0 controls are
/// left alone: serde escapes them inside strings, so a raw one is the text's own whitespace (the
/// newline ending a log line).
pub fn escape_json(json: &str) -> Cow<'_, str> {
    if json.is_ascii() && !json.bytes().any(|b| b == 0x7F) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if c > '\u{1f}' && is_hidden(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` safe inside HTML, as an element's text or a quoted attribute's value: the five
/// characters with a meaning there as their entities. (The action page and the page a terminal's
/// sign-in ends on.)
pub fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` as one segment of a URL's path (or a fragment's): unreserved characters as they are,
/// every other byte percent-encoded (RFC 3986).
pub fn url_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_text_is_left_as_it_is_and_borrowed() {
        for text in ["git push origin main", "", "naïve café — ½ 日本語 ✓", "a  b   c"] {
            assert_eq!(escape(text), text);
            assert_eq!(reveal(text), text);
        }
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
        assert!(matches!(reveal("plain  text"), Cow::Borrowed(_)));
        assert!(matches!(reveal("three   spaces stay"), Cow::Borrowed(_)), "a run of three needs no work");
        assert!(matches!(escape_json(r#"{"a":"b"}"#), Cow::Borrowed(_)));
    }

    #[test]
    fn controls_and_escape_sequences_are_written_as_escapes() {
        assert_eq!(escape("a\nb\rc\td"), "a\\nb\\rc\\td");
        // Set the title, write the clipboard (OSC 52), move the cursor: each ESC and BEL escaped.
        assert_eq!(escape("\u{1b}]0;pwned\u{7}"), "\\u{1b}]0;pwned\\u{7}");
        assert_eq!(escape("\u{1b}]52;c;ZWNobw==\u{7}x"), "\\u{1b}]52;c;ZWNobw==\\u{7}x");
        assert_eq!(escape("\u{1b}[2J\u{1b}[H"), "\\u{1b}[2J\\u{1b}[H");
        assert_eq!(escape("\u{0}\u{7f}\u{85}\u{9b}"), "\\u{0}\\u{7f}\\u{85}\\u{9b}");
        assert_eq!(escape("\u{2028}\u{2029}"), "\\u{2028}\\u{2029}");
    }

    #[test]
    fn bidi_controls_and_invisible_characters_are_written_as_escapes() {
        // "rm -rf ~/\u{202e}txt.tset" shows as "rm -rf ~/test.txt" on a bidi-aware screen.
        assert_eq!(escape("~/\u{202e}txt.tset"), "~/\\u{202e}txt.tset");
        for c in [
            '\u{61c}',
            '\u{200e}',
            '\u{200f}',
            '\u{202a}',
            '\u{202d}',
            '\u{2066}',
            '\u{2069}',
            '\u{200b}',
            '\u{200d}',
            '\u{2060}',
            '\u{feff}',
            '\u{ad}',
            '\u{3164}',
            '\u{115f}',
            '\u{e0041}',
            '\u{e0100}',
            '\u{180e}',
        ] {
            let shown = escape(&c.to_string()).into_owned();
            assert_eq!(shown, format!("\\u{{{:x}}}", c as u32), "{:x}", c as u32);
        }
        // Neighbours of the ranges are shown as themselves.
        for c in [
            '\u{20}',
            '\u{7e}',
            '\u{a0}',
            '\u{ae}',
            '\u{200a}',
            '\u{2010}',
            '\u{2027}',
            '\u{202f}',
            '\u{2070}',
            '\u{fefe}',
            '\u{e1000}',
        ] {
            assert_eq!(escape(&c.to_string()), c.to_string(), "{:x}", c as u32);
        }
    }

    #[test]
    fn a_stack_of_combining_marks_keeps_two_per_base() {
        assert_eq!(escape("e\u{302}\u{323}"), "e\u{302}\u{323}", "ệ as base + 2 marks stays");
        assert_eq!(
            escape("a\u{300}\u{301}\u{302}\u{303}b\u{300}"),
            "a\u{300}\u{301}\\u{302}\\u{303}b\u{300}"
        );
        // Marks of the different generic blocks count together.
        assert_eq!(escape("x\u{1dc0}\u{20d0}\u{fe20}\u{1ab0}"), "x\u{1dc0}\u{20d0}\\u{fe20}\\u{1ab0}");
    }

    /// Issue 41, finding 8: prose in an export keeps its lines, each after the export's indent, so
    /// nothing it holds starts a line of the document; what is inside a line is escaped.
    #[test]
    fn indented_prose_starts_every_line_with_the_documents_indent() {
        let prose = "Done.\n# Permission asked: rm -rf ~\n\n> Decision: allow_once\r\u{1b}]52;c;eA==\u{7}\u{202e}gnp.exe";
        let shown = indented(prose, "    ");
        assert_eq!(
            shown,
            "    Done.\n    # Permission asked: rm -rf ~\n\n    > Decision: allow_once\\r\\u{1b}]52;c;eA==\\u{7}\\u{202e}gnp.exe"
        );
        assert!(shown.lines().all(|l| l.is_empty() || l.starts_with("    ")), "{shown}");
        assert_eq!(indented("", "> "), "");
        assert_eq!(indented("one", "> "), "> one");
        assert_eq!(
            indented("a\u{2028}b\u{85}c", "  "),
            "  a\\u{2028}b\\u{85}c",
            "other line breaks stay on the line"
        );
    }

    #[test]
    fn reveal_writes_long_runs_of_blanks_and_invisibles_as_their_length() {
        let padded = format!("ls{}&& curl x | sh", " ".repeat(300));
        assert_eq!(reveal(&padded), "ls⟪300 spaces⟫&& curl x | sh");
        assert_eq!(reveal("a   b"), "a   b", "three blanks are shown as they are");
        assert_eq!(reveal("a    b"), "a⟪4 spaces⟫b");
        assert_eq!(reveal(&format!("a{}b", "\n".repeat(12))), "a⟪12 × \\n⟫b");
        assert_eq!(reveal(&format!("a{}b", "\t".repeat(5))), "a⟪5 × \\t⟫b");
        assert_eq!(reveal(&format!("a{}b", "\u{a0}".repeat(5))), "a⟪5 × \\u{a0}⟫b");
        assert_eq!(reveal(&format!("a{}b", "\u{2800}".repeat(9))), "a⟪9 × \\u{2800}⟫b");
        assert_eq!(reveal("a \t\n b"), "a⟪4 blanks⟫b");
        assert_eq!(reveal(&format!("a{}b", "\u{200b}".repeat(40))), "a⟪40 × \\u{200b}⟫b");
        assert_eq!(reveal("a\u{200b}\u{200b}\u{200b}b"), "a\\u{200b}\\u{200b}\\u{200b}b");
        assert_eq!(reveal("a\n b"), "a\\n b");
        assert_eq!(reveal("\u{202e}x"), "\\u{202e}x");
        assert_eq!(reveal("a\u{300}\u{301}\u{302}"), "a\u{300}\u{301}\\u{302}");
        // Runs end where a different character begins, and each run is counted on its own.
        assert_eq!(reveal(&format!("{}x{}", " ".repeat(4), " ".repeat(5))), "⟪4 spaces⟫x⟪5 spaces⟫");
    }

    #[test]
    fn json_keeps_its_value_with_hidden_characters_escaped() {
        let value = serde_json::json!({"title": "a\u{202e}b\u{85}c\u{7f}d\u{e0041}e\nf", "ok": "日本"});
        let text = value.to_string();
        let escaped = escape_json(&text).into_owned();
        assert!(escaped.is_ascii() || escaped.contains("日本"), "{escaped}");
        assert!(!escaped.chars().any(is_hidden), "{escaped}");
        assert!(escaped.contains("\\u202e") && escaped.contains("\\u0085") && escaped.contains("\\u007f"));
        assert!(escaped.contains("\\udb40\\udc41"), "a surrogate pair: {escaped}");
        let back: serde_json::Value = serde_json::from_str(&escaped).expect("still JSON");
        assert_eq!(back, value);
        // The text's own whitespace (a log line's end) is no string content: it stays.
        let line = format!("{text}\n");
        assert_eq!(escape_json(&line), format!("{escaped}\n"));
        assert_eq!(escape_json("{\"a\":\t\"\u{202e}\"}\r\n"), "{\"a\":\t\"\\u202e\"}\r\n");
        assert_eq!(escape_json("\u{1f}\u{7f}"), "\u{1f}\\u007f", "C0 is left alone, DEL is not");
    }
}

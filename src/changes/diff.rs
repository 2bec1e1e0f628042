//! Line diffs of two versions of a file: the counts a change set shows (`added`, `removed`) and
//! the hunks a file's diff shows, in qwen serve's shape (`oldStart`, `oldLines`, `newStart`,
//! `newLines`, `lines` each prefixed with ` `, `+` or `-`). Myers' algorithm from `similar`, the
//! crate `present` already diffs permission requests with.

use std::time::Duration;

use serde::Serialize;
use similar::{Algorithm, ChangeTag, TextDiff};

/// Bytes of one side of a diff beyond which its lines are not compared (the file shows as
/// changed, `truncated`): qwen serve's `MAX_DIFF_SIZE_BYTES`.
pub const MAX_DIFF_BYTES: usize = 1_000_000;
/// Lines of one file's hunks (context included) a diff returns; past them it is `truncated`.
pub const MAX_HUNK_LINES: usize = 5_000;
/// Lines of context around each change, as `git diff` shows.
const CONTEXT: usize = 3;
/// How long one file's diff may search for the shortest edit before it settles for a longer one
/// (Myers' worst case is quadratic: two unrelated 1 MB files).
const DIFF_TIMEOUT: Duration = Duration::from_millis(500);
/// Bytes looked at for a NUL, as git does, to call a file binary.
const BINARY_PROBE: usize = 8_000;

/// Whether `bytes` is binary: a NUL in its first [`BINARY_PROBE`] bytes, or not UTF-8.
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_PROBE)].contains(&0) || std::str::from_utf8(bytes).is_err()
}

/// A file's change in lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LineStats {
    pub added: u64,
    pub removed: u64,
    /// Either side is binary: no lines are counted.
    pub binary: bool,
    /// A side is over [`MAX_DIFF_BYTES`]: no lines are counted.
    pub truncated: bool,
}

/// One hunk, as qwen serve's `DaemonDiffHunk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hunk {
    pub old_start: usize,
    pub old_lines: usize,
    pub new_start: usize,
    pub new_lines: usize,
    pub lines: Vec<String>,
}

/// Both sides as text, or why not.
enum Sides<'a> {
    Text(&'a str, &'a str),
    Binary,
    TooLarge,
}

fn sides<'a>(old: Option<&'a [u8]>, new: Option<&'a [u8]>) -> Sides<'a> {
    let (old, new) = (old.unwrap_or_default(), new.unwrap_or_default());
    if old.len() > MAX_DIFF_BYTES || new.len() > MAX_DIFF_BYTES {
        return Sides::TooLarge;
    }
    match (std::str::from_utf8(old), std::str::from_utf8(new)) {
        (Ok(o), Ok(n)) if !is_binary(old) && !is_binary(new) => Sides::Text(o, n),
        _ => Sides::Binary,
    }
}

fn text_diff<'a>(old: &'a str, new: &'a str) -> TextDiff<'a, 'a, str> {
    TextDiff::configure().algorithm(Algorithm::Myers).timeout(DIFF_TIMEOUT).diff_lines(old, new)
}

/// The lines `new` adds to `old` and removes from it (`None`: the file is not there).
pub fn line_stats(old: Option<&[u8]>, new: Option<&[u8]>) -> LineStats {
    match sides(old, new) {
        Sides::TooLarge => LineStats { truncated: true, ..LineStats::default() },
        Sides::Binary => LineStats { binary: true, ..LineStats::default() },
        Sides::Text(o, n) => {
            let mut stats = LineStats::default();
            for op in text_diff(o, n).ops() {
                let (tag, old_range, new_range) = op.as_tag_tuple();
                match tag {
                    similar::DiffTag::Equal => {}
                    _ => {
                        stats.removed += old_range.len() as u64;
                        stats.added += new_range.len() as u64;
                    }
                }
            }
            stats
        }
    }
}

/// The hunks turning `old` into `new`, and whether some were left out (over [`MAX_HUNK_LINES`],
/// or a side too large to compare). Binary sides have no hunks.
pub fn hunks(old: Option<&[u8]>, new: Option<&[u8]>) -> (Vec<Hunk>, bool) {
    let (o, n) = match sides(old, new) {
        Sides::Text(o, n) => (o, n),
        Sides::Binary => return (Vec::new(), false),
        Sides::TooLarge => return (Vec::new(), true),
    };
    let diff = text_diff(o, n);
    let mut out = Vec::new();
    let mut budget = MAX_HUNK_LINES;
    // Unified diff's convention: an empty range starts at the line before it.
    let start = |at: usize, len: usize| if len == 0 { at } else { at + 1 };
    for group in diff.grouped_ops(CONTEXT) {
        let Some(first) = group.first() else { continue };
        let (old_at, new_at) = (first.old_range().start, first.new_range().start);
        let (mut old_lines, mut new_lines, mut lines) = (0, 0, Vec::new());
        let mut cut = false;
        'ops: for op in &group {
            for change in diff.iter_changes(op) {
                if budget == 0 {
                    cut = true;
                    break 'ops;
                }
                budget -= 1;
                let sign = match change.tag() {
                    ChangeTag::Delete => '-',
                    ChangeTag::Insert => '+',
                    ChangeTag::Equal => ' ',
                };
                old_lines += usize::from(sign != '+');
                new_lines += usize::from(sign != '-');
                let value = change.value();
                let value = value.strip_suffix('\n').unwrap_or(value);
                let value = value.strip_suffix('\r').unwrap_or(value);
                lines.push(format!("{sign}{value}"));
            }
        }
        if !lines.is_empty() {
            // A hunk cut short says what it holds: its ranges count the lines it shows.
            out.push(Hunk {
                old_start: start(old_at, old_lines),
                old_lines,
                new_start: start(new_at, new_lines),
                new_lines,
                lines,
            });
        }
        if cut {
            return (out, true);
        }
    }
    (out, false)
}

/// A unified diff of one file (`--- a/path`, `+++ b/path`, the hunks), for `mediatord diff` and
/// the terminal client.
pub fn unified(path: &str, old: Option<&[u8]>, new: Option<&[u8]>) -> String {
    let (hunks, truncated) = hunks(old, new);
    let mut out = String::new();
    let (from, to) = match (old.is_some(), new.is_some()) {
        (false, _) => ("/dev/null".to_owned(), format!("b/{path}")),
        (_, false) => (format!("a/{path}"), "/dev/null".to_owned()),
        _ => (format!("a/{path}"), format!("b/{path}")),
    };
    out.push_str(&format!("--- {from}\n+++ {to}\n"));
    if hunks.is_empty() && matches!(sides(old, new), Sides::Binary) {
        out.push_str(&format!("Binary files {from} and {to} differ\n"));
    }
    for h in hunks {
        out.push_str(&format!("@@ -{},{} +{},{} @@\n", h.old_start, h.old_lines, h.new_start, h.new_lines));
        for line in h.lines {
            out.push_str(&line);
            out.push('\n');
        }
    }
    if truncated {
        out.push_str("[diff truncated]\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_lines_added_and_removed_on_each_side() {
        type Case<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, u64, u64);
        let cases: [Case<'_>; 5] = [
            (None, Some(b"a\nb\n"), 2, 0),
            (Some(b"a\nb\n"), None, 0, 2),
            (Some(b"a\nb\nc\n"), Some(b"a\nB\nc\nd\n"), 2, 1),
            (Some(b"same\n"), Some(b"same\n"), 0, 0),
            (Some(b"no newline"), Some(b"no newline\n"), 1, 1),
        ];
        for (old, new, added, removed) in cases {
            let s = line_stats(old, new);
            assert_eq!(
                (s.added, s.removed, s.binary, s.truncated),
                (added, removed, false, false),
                "{old:?} → {new:?}"
            );
        }
    }

    #[test]
    fn binary_and_oversized_sides_count_nothing_and_say_why() {
        let s = line_stats(Some(b"a\0b"), Some(b"text\n"));
        assert_eq!((s.added, s.removed, s.binary, s.truncated), (0, 0, true, false));
        assert!(line_stats(Some(&[0xff, 0xfe]), None).binary, "not UTF-8");
        let big = vec![b'x'; MAX_DIFF_BYTES + 1];
        let s = line_stats(None, Some(&big));
        assert_eq!((s.added, s.truncated, s.binary), (0, true, false));
        assert_eq!(hunks(None, Some(&big)), (Vec::new(), true));
        assert_eq!(hunks(Some(b"\0"), None), (Vec::new(), false));
    }

    #[test]
    fn hunks_have_unified_ranges_and_context() {
        let old: String = (1..=20).map(|i| format!("{i}\n")).collect();
        let new: String =
            (1..=21).map(|i| if i == 5 { "five\n".to_owned() } else { format!("{i}\n") }).collect();
        let (h, truncated) = hunks(Some(old.as_bytes()), Some(new.as_bytes()));
        assert!(!truncated);
        assert_eq!(h.len(), 2, "{h:?}");
        assert_eq!((h[0].old_start, h[0].old_lines, h[0].new_start, h[0].new_lines), (2, 7, 2, 7));
        assert_eq!(h[0].lines, [" 2", " 3", " 4", "-5", "+five", " 6", " 7", " 8"]);
        assert_eq!((h[1].old_start, h[1].old_lines, h[1].new_start, h[1].new_lines), (18, 3, 18, 4));
        assert_eq!(h[1].lines, [" 18", " 19", " 20", "+21"]);
        let (created, _) = hunks(None, Some(b"a\r\nb\n"));
        assert_eq!((created[0].old_start, created[0].old_lines, created[0].new_start), (0, 0, 1));
        assert_eq!(created[0].lines, ["+a", "+b"], "line ends are not part of a line");
    }

    #[test]
    fn hunks_stop_at_their_line_bound() {
        let new: String = (0..MAX_HUNK_LINES + 10).map(|i| format!("{i}\n")).collect();
        let (h, truncated) = hunks(None, Some(new.as_bytes()));
        assert!(truncated);
        assert_eq!(h.len(), 1);
        assert_eq!((h[0].new_start, h[0].new_lines, h[0].lines.len()), (1, MAX_HUNK_LINES, MAX_HUNK_LINES));
        let (h, truncated) = hunks(None, Some(b"a\n"));
        assert!(!truncated && h.len() == 1);
    }

    #[test]
    fn a_unified_diff_names_both_sides() {
        assert_eq!(
            unified("a.txt", Some(b"x\n"), Some(b"y\n")),
            "--- a/a.txt\n+++ b/a.txt\n@@ -1,1 +1,1 @@\n-x\n+y\n"
        );
        assert!(
            unified("n", None, Some(b"1\n")).starts_with("--- /dev/null\n+++ b/n\n@@ -0,0 +1,1 @@\n+1\n")
        );
        assert!(unified("b", Some(b"\0"), Some(b"\x01\0")).contains("Binary files a/b and b/b differ"));
    }
}

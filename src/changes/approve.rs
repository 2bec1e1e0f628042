//! Which changed files an approved permission request covers: the paths the request names, in its
//! tool call's `locations` and in its `rawInput` (any string field, and each word of a command),
//! and for a command with no `rawInput` (Gemini CLI sends its command only as the tool call's
//! `title`) each word of that title: what the person approving was shown.
//! A change no approved request of its turn covers is `unapproved`: the agent wrote it without
//! asking (an agent in an auto-approving mode, a shell command's side effects, a write of its own).
//!
//! Deliberately narrow: a request covers the files it names, and (for a deletion or a move) what
//! lies under a folder it names; a command covers the files its words name, not everything it
//! happened to write. A read, a search or a fetch covers nothing. The workspace itself covers
//! nothing (a `cwd` in a shell command's input would otherwise cover every file).

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Strings read from one request's `rawInput`, at most.
const MAX_STRINGS: usize = 256;
/// Nesting of `rawInput` looked into.
const MAX_DEPTH: usize = 4;
/// Longest string looked at (a file's whole content in an edit's input is not a path).
const MAX_STRING_BYTES: usize = 4096;

/// What an approved request names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Approval {
    /// ACP's `ToolKind` (`edit`, `delete`, `move`, `execute`, …), if the agent said.
    pub kind: Option<String>,
    /// The path-like strings it names, as written.
    pub names: Vec<String>,
}

impl Approval {
    /// What the tool call `tool_call` (a permission request's, laid over what the agent announced
    /// for it) names.
    pub fn of(tool_call: &Value) -> Approval {
        let kind = tool_call.get("kind").and_then(Value::as_str).map(str::to_owned);
        let mut names: Vec<String> = tool_call
            .get("locations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|l| l.get("path").and_then(Value::as_str))
            .map(str::to_owned)
            .collect();
        let mut strings = Vec::new();
        match tool_call.get("rawInput") {
            Some(input) => collect_strings(input, 0, &mut strings),
            None if kind.as_deref() == Some("execute") => {
                let title = tool_call.get("title").and_then(Value::as_str);
                strings.extend(title.filter(|t| t.len() <= MAX_STRING_BYTES));
            }
            None => {}
        }
        for s in strings {
            names.extend(words(s));
        }
        names.sort();
        names.dedup();
        Approval { kind, names }
    }

    /// Whether the request could change files at all.
    fn writes(&self) -> bool {
        !matches!(self.kind.as_deref(), Some("read" | "search" | "fetch" | "think" | "switch_mode"))
    }

    /// Whether a folder it names covers what lies under it.
    fn covers_folders(&self) -> bool {
        matches!(self.kind.as_deref(), Some("delete" | "move"))
    }
}

fn collect_strings<'a>(value: &'a Value, depth: usize, out: &mut Vec<&'a str>) {
    if out.len() >= MAX_STRINGS || depth > MAX_DEPTH {
        return;
    }
    match value {
        Value::String(s) if s.len() <= MAX_STRING_BYTES => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, depth + 1, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, depth + 1, out)),
        _ => {}
    }
}

/// The string itself, and when it holds spaces (a command), each of its words without quotes and
/// redirections.
fn words(s: &str) -> Vec<String> {
    let mut out = vec![s.to_owned()];
    if s.contains(char::is_whitespace) {
        for w in s.split(|c: char| c.is_whitespace() || matches!(c, ';' | '|' | '&' | '(' | ')')) {
            let w = unredirect(w).trim_matches(['"', '\'', '`']);
            if !w.is_empty() && w != s {
                out.push(w.to_owned());
            }
        }
    }
    out
}

/// A word without the redirection it starts with (`>out`, `2>>log`, `&>all`), if it does.
fn unredirect(word: &str) -> &str {
    let digits = word.trim_start_matches(|c: char| c.is_ascii_digit());
    let rest = digits.trim_start_matches(['<', '>', '&']);
    if rest.len() < digits.len() { rest } else { word }
}

/// `name` (absolute, or relative to the workspace) as a path relative to `workspace`, `..` folded;
/// `None` outside it or for the workspace itself.
fn relative(workspace: &Path, name: &str) -> Option<PathBuf> {
    let path = Path::new(name);
    let absolute = if path.is_absolute() { path.to_path_buf() } else { workspace.join(path) };
    let folded = crate::path::normalize_lexically(&absolute);
    let rel = folded.strip_prefix(workspace).ok()?;
    (!rel.as_os_str().is_empty()).then(|| rel.to_path_buf())
}

/// Whether one of `approvals` covers the changed file `path` (relative to `workspace`).
pub fn covered(approvals: &[Approval], workspace: &Path, path: &str) -> bool {
    let changed = Path::new(path);
    approvals.iter().filter(|a| a.writes()).any(|a| {
        a.names
            .iter()
            .filter_map(|n| relative(workspace, n))
            .any(|named| named == changed || (a.covers_folders() && changed.starts_with(&named)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn approval(tool_call: Value) -> Vec<Approval> {
        vec![Approval::of(&tool_call)]
    }

    #[test]
    fn locations_and_raw_input_paths_cover_exactly_their_files() {
        let ws = Path::new("/ws");
        let edit = approval(json!({"kind": "edit", "locations": [{"path": "/ws/a/b.txt"}]}));
        assert!(covered(&edit, ws, "a/b.txt"));
        assert!(!covered(&edit, ws, "a/c.txt"));
        assert!(!covered(&edit, ws, "a"), "a file does not cover its folder");
        let input = approval(json!({"rawInput": {"file_path": "src/../notes.md", "content": "x"}}));
        assert!(covered(&input, ws, "notes.md"), "relative, folded, with no kind");
        let nested = approval(json!({"kind": "edit", "rawInput": {"edits": [{"path": "/ws/x"}]}}));
        assert!(covered(&nested, ws, "x"));
        let outside = approval(json!({"kind": "edit", "locations": [{"path": "/elsewhere/a.txt"}]}));
        assert!(!covered(&outside, ws, "a.txt"));
    }

    #[test]
    fn a_command_covers_the_files_its_words_name() {
        let ws = Path::new("/ws");
        let shell = approval(
            json!({"kind": "execute", "rawInput": {"command": "echo hi > out.txt && rm 'old.txt'", "cwd": "/ws"}}),
        );
        assert!(covered(&shell, ws, "out.txt"));
        assert!(covered(&shell, ws, "old.txt"));
        assert!(!covered(&shell, ws, "other.txt"), "the workspace named as cwd covers nothing");
        let numbered =
            approval(json!({"kind": "execute", "rawInput": {"command": "cp a 2024.txt 2>err.log"}}));
        assert!(covered(&numbered, ws, "2024.txt") && covered(&numbered, ws, "err.log"));
        let dir = approval(json!({"kind": "execute", "rawInput": {"command": "make -C build"}}));
        assert!(!covered(&dir, ws, "build/a.o"), "a command's folder does not cover its contents");
    }

    #[test]
    fn a_command_sent_only_as_its_title_covers_the_files_its_words_name() {
        // Gemini CLI's shell request: no rawInput, the command is the title.
        let ws = Path::new("/ws");
        let gemini =
            approval(json!({"kind": "execute", "title": "echo made > /ws/made.txt", "locations": []}));
        assert!(covered(&gemini, ws, "made.txt"));
        assert!(!covered(&gemini, ws, "other.txt"));
        let edit = approval(json!({"kind": "edit", "title": "Write /ws/made.txt"}));
        assert!(!covered(&edit, ws, "made.txt"), "only a command's title is read: an edit names its files");
        let both =
            approval(json!({"kind": "execute", "title": "rm /ws/t.txt", "rawInput": {"command": "ls"}}));
        assert!(!covered(&both, ws, "t.txt"), "rawInput, when sent, is what the command is");
        let long = format!("rm /ws/x.txt {}", "y".repeat(MAX_STRING_BYTES));
        assert!(!covered(&approval(json!({"kind": "execute", "title": long})), ws, "x.txt"), "within bounds");
    }

    #[test]
    fn deletions_and_moves_cover_a_folder_reads_cover_nothing() {
        let ws = Path::new("/ws");
        let delete = approval(json!({"kind": "delete", "locations": [{"path": "/ws/build"}]}));
        assert!(covered(&delete, ws, "build/deep/a.o"));
        assert!(!covered(&delete, ws, "buildx/a.o"), "by component, not by prefix");
        let read = approval(json!({"kind": "read", "locations": [{"path": "/ws/a.txt"}]}));
        assert!(!covered(&read, ws, "a.txt"));
        let root = approval(json!({"kind": "delete", "locations": [{"path": "/ws"}]}));
        assert!(!covered(&root, ws, "a.txt"), "the workspace itself covers nothing");
        assert!(!covered(&[], ws, "a.txt"));
    }

    #[test]
    fn raw_input_is_read_within_bounds() {
        let many: Vec<Value> = (0..MAX_STRINGS + 10).map(|i| json!(format!("/ws/f{i}"))).collect();
        let a = Approval::of(&json!({"rawInput": {"paths": many}}));
        assert_eq!(a.names.len(), MAX_STRINGS);
        let deep = json!({"rawInput": {"a": {"b": {"c": {"d": {"e": {"path": "/ws/deep"}}}}}}});
        assert!(Approval::of(&deep).names.is_empty(), "too deep");
        // The string at depth MAX_DEPTH (rawInput is depth 0) is read; one level more is not.
        let at_bound = json!({"rawInput": {"a": {"b": {"c": {"path": "/ws/at-bound"}}}}});
        assert_eq!(Approval::of(&at_bound).names, ["/ws/at-bound"]);
        let past_bound = json!({"rawInput": {"a": {"b": {"c": {"d": {"path": "/ws/past"}}}}}});
        assert!(Approval::of(&past_bound).names.is_empty(), "one past the bound");
        let long = "x".repeat(MAX_STRING_BYTES + 1);
        assert!(Approval::of(&json!({"rawInput": {"content": long}})).names.is_empty());
        // Arrays count as levels too.
        let arrays_at_bound = json!({"rawInput": [[[["/ws/arrays"]]]]});
        assert_eq!(Approval::of(&arrays_at_bound).names, ["/ws/arrays"]);
        let arrays_past = json!({"rawInput": {"a": [[[["/ws/arrays-past"]]]]}});
        assert!(Approval::of(&arrays_past).names.is_empty(), "one array past the bound");
    }

    /// A command's names are the command and its words, each once: no empty word from the space
    /// around a separator or between two spaces.
    #[test]
    fn a_commands_names_are_its_words_and_nothing_empty() {
        let a = Approval::of(&json!({"kind": "execute", "rawInput": {"command": "cat  a.txt ; ls | wc"}}));
        assert_eq!(a.names, ["a.txt", "cat", "cat  a.txt ; ls | wc", "ls", "wc"]);
    }
}

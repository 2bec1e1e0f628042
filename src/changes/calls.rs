//! The file routes' calls (`docs/protocol.md` §18.5) as one thing for every door: REST's `GET /file`,
//! `/file/bytes`, `/stat`, `/list`, `/glob`, `POST /file/write`, `/file/edit` (query strings and
//! JSON bodies) and `/acp`'s `_qwen/file/read`, `read_bytes`, `stat`, `list`, `glob`, `write`,
//! `edit` (what `@qwen-code/sdk`'s ACP transports send for the same calls: the query's fields as
//! JSON-RPC params, numbers as numbers). The bounds and the messages are the same whichever door.

use serde_json::Value;

use super::files::{
    EditRequest, FileError, Files, MAX_CURSOR_CHARS, MAX_GLOB_RESULTS, MAX_LINE_LIMIT, MAX_READ_BYTES,
    Window, WriteRequest,
};

/// One call, parsed and bounded, before it touches the workspace.
#[derive(Debug, Clone)]
pub enum FileCall {
    Read { path: String, window: Window },
    ReadBytes { path: String, offset: u64, max: Option<usize> },
    Stat { path: String },
    List { path: String, include_ignored: bool },
    Glob { pattern: String, max: Option<usize> },
    Write(WriteRequest),
    Edit(EditRequest),
}

/// What a call answered: its JSON, and (a write) whether it created the file (REST's `201`).
#[derive(Debug, Clone)]
pub struct Answer {
    pub json: Value,
    pub created: bool,
}

impl FileCall {
    /// The call `op` (`read`, `read_bytes`, `stat`, `list`, `glob`, `write`, `edit`) with its
    /// arguments: `arg(name)` a query parameter (or a JSON-RPC param, written as text), `body` a
    /// write's or edit's JSON. `None` for an unknown `op`.
    pub fn parse(
        op: &str,
        arg: impl Fn(&str) -> Option<String>,
        body: impl FnOnce() -> Value,
    ) -> Option<Result<FileCall, FileError>> {
        let path = || required("path", arg("path"));
        let call = match op {
            "read" => (|| {
                let cursor = arg("cursor");
                if cursor.as_deref().is_some_and(|c| c.is_empty() || c.len() > MAX_CURSOR_CHARS) {
                    return Err(FileError::Parse(format!(
                        "`cursor` must be a non-empty string of at most {MAX_CURSOR_CHARS} characters"
                    )));
                }
                let window = Window {
                    max_bytes: number("maxBytes", arg("maxBytes"), 1, MAX_READ_BYTES as u64)?
                        .map(|n| n as usize),
                    line: number("line", arg("line"), 1, u64::from(u32::MAX))?.map(|n| n as usize),
                    limit: number("limit", arg("limit"), 1, MAX_LINE_LIMIT as u64)?.map(|n| n as usize),
                    cursor,
                };
                Ok(FileCall::Read { path: path()?, window })
            })(),
            "read_bytes" => (|| {
                Ok(FileCall::ReadBytes {
                    path: path()?,
                    offset: number("offset", arg("offset"), 0, 1 << 53)?.unwrap_or(0),
                    max: number("maxBytes", arg("maxBytes"), 1, MAX_READ_BYTES as u64)?.map(|n| n as usize),
                })
            })(),
            "stat" => path().map(|path| FileCall::Stat { path }),
            "list" => path().map(|path| FileCall::List {
                path,
                include_ignored: matches!(arg("includeIgnored").as_deref(), Some("1" | "true")),
            }),
            "glob" => (|| {
                Ok(FileCall::Glob {
                    pattern: required("pattern", arg("pattern"))?,
                    max: number("maxResults", arg("maxResults"), 1, MAX_GLOB_RESULTS as u64)?
                        .map(|n| n as usize),
                })
            })(),
            "write" => body_as(body()).map(FileCall::Write),
            "edit" => body_as(body()).map(FileCall::Edit),
            _ => return None,
        };
        Some(call)
    }

    /// Whether the call changes the workspace (a door lets only a writer make it).
    pub fn writes(&self) -> bool {
        matches!(self, FileCall::Write(_) | FileCall::Edit(_))
    }

    /// Runs the call on `files`. Blocking: the file system and the snapshot store block.
    pub fn run(self, files: &Files<'_>) -> Result<Answer, FileError> {
        let json = |v: Result<Value, serde_json::Error>| v.map_err(|e| FileError::Parse(e.to_string()));
        let (value, created) = match self {
            FileCall::Read { path, window } => {
                (json(serde_json::to_value(files.read_text(&path, &window)?))?, false)
            }
            FileCall::ReadBytes { path, offset, max } => {
                (json(serde_json::to_value(files.read_bytes(&path, offset, max)?))?, false)
            }
            FileCall::Stat { path } => (json(serde_json::to_value(files.stat(&path)?))?, false),
            FileCall::List { path, include_ignored } => {
                (json(serde_json::to_value(files.list(&path, include_ignored)?))?, false)
            }
            FileCall::Glob { pattern, max } => {
                (json(serde_json::to_value(files.glob(&pattern, max)?))?, false)
            }
            FileCall::Write(req) => {
                let written = files.write(&req)?;
                (json(serde_json::to_value(&written))?, written.created())
            }
            FileCall::Edit(req) => (json(serde_json::to_value(files.edit(&req)?))?, false),
        };
        Ok(Answer { json: value, created })
    }
}

/// A JSON-RPC param as the query parameter it stands for: text as is, a number or a boolean
/// written out; anything else (an object, an array, null) as absent.
pub fn param_text(params: &Value, name: &str) -> Option<String> {
    match params.get(name)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A number parameter within `min..=max` (qwen serve's `parseIntInRange`).
fn number(name: &str, raw: Option<String>, min: u64, max: u64) -> Result<Option<u64>, FileError> {
    raw.map(|v| {
        v.parse::<u64>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| FileError::Parse(format!("`{name}` must be an integer in [{min}, {max}]")))
    })
    .transpose()
}

fn required(name: &str, raw: Option<String>) -> Result<String, FileError> {
    raw.filter(|v| !v.is_empty())
        .ok_or_else(|| FileError::Parse(format!("{name} query parameter is required")))
}

/// A JSON body as `T`, or qwen serve's `parse_error` saying what is wrong with it.
fn body_as<T: serde::de::DeserializeOwned>(body: Value) -> Result<T, FileError> {
    serde_json::from_value(body).map_err(|e| FileError::Parse(format!("invalid body: {e}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(op: &str, params: Value) -> Result<FileCall, FileError> {
        let body = params.clone();
        FileCall::parse(op, |n| param_text(&params, n), move || body).expect("a known call")
    }

    #[test]
    fn query_text_and_json_numbers_give_the_same_call_within_the_same_bounds() {
        let from_json = parse("read", json!({"path": "a.txt", "maxBytes": 10, "line": 2, "limit": 3}));
        let from_query = parse("read", json!({"path": "a.txt", "maxBytes": "10", "line": "2", "limit": "3"}));
        for call in [from_json, from_query] {
            let Ok(FileCall::Read { path, window }) = call else { panic!("{call:?}") };
            assert_eq!(
                (path.as_str(), window.max_bytes, window.line, window.limit),
                ("a.txt", Some(10), Some(2), Some(3))
            );
        }
        let too_big = parse("read", json!({"path": "a", "maxBytes": MAX_READ_BYTES + 1}));
        assert!(matches!(too_big, Err(FileError::Parse(m)) if m.contains("maxBytes")));
        assert!(
            matches!(parse("read", json!({"path": "a", "line": 0})), Err(FileError::Parse(m)) if m.contains("line"))
        );
        assert!(matches!(parse("stat", json!({})), Err(FileError::Parse(m)) if m.contains("path")));
        assert!(
            matches!(parse("glob", json!({"pattern": ""})), Err(FileError::Parse(m)) if m.contains("pattern"))
        );
        let cursor = "c".repeat(MAX_CURSOR_CHARS + 1);
        assert!(matches!(parse("read", json!({"path": "a", "cursor": cursor})), Err(FileError::Parse(_))));
        let longest = "c".repeat(MAX_CURSOR_CHARS);
        assert!(parse("read", json!({"path": "a", "cursor": longest})).is_ok(), "the bound itself is taken");
        let bytes = parse("read_bytes", json!({"path": "a", "offset": 1u64 << 53, "maxBytes": 2}));
        assert!(matches!(bytes, Ok(FileCall::ReadBytes { offset, max: Some(2), .. }) if offset == 1 << 53));
        let past = parse("read_bytes", json!({"path": "a", "offset": (1u64 << 53) + 1}));
        assert!(matches!(past, Err(FileError::Parse(m)) if m.contains("offset")));
        assert!(FileCall::parse("delete", |_| None, || Value::Null).is_none(), "an unknown call");
    }

    #[test]
    fn writes_are_known_as_such_and_their_bodies_checked() {
        let write = parse("write", json!({"path": "a", "content": "x", "mode": "create"})).expect("a write");
        assert!(write.writes());
        assert!(!parse("stat", json!({"path": "a"})).expect("stat").writes());
        assert!(
            matches!(parse("edit", json!({"path": "a"})), Err(FileError::Parse(m)) if m.starts_with("invalid body"))
        );
        let list = parse("list", json!({"path": ".", "includeIgnored": true})).expect("list");
        assert!(matches!(list, FileCall::List { include_ignored: true, .. }));
        let bytes = parse("read_bytes", json!({"path": "a"})).expect("bytes");
        assert!(matches!(bytes, FileCall::ReadBytes { offset: 0, max: None, .. }));
    }
}

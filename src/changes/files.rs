//! qwen serve's file routes over a workspace (`GET /file`, `/file/bytes`, `/stat`, `/list`,
//! `/glob`; `POST /file/write`, `/file/edit`), in its shapes and with its bounds and error kinds,
//! so `@qwen-code/sdk`'s `DaemonClient` reads and edits files through the daemon unchanged. Every
//! path goes through [`crate::confine`] (beneath the workspace, never followed out of it); every
//! replacement is checked against the `sha256:` hash its caller read, so a stale write is refused.
//! Blocking: callers run these on a blocking thread.

use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use base64::Engine as _;
use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use serde::{Deserialize, Serialize};

use super::diff::is_binary;
use super::engine::Changes;
use crate::confine::{self, EntryKind, Refusal, WriteMode};
use crate::sync::lock;

/// Largest text returned by one read, and largest file read whole without a window: qwen serve's
/// `MAX_READ_BYTES`.
pub const MAX_READ_BYTES: usize = 256 * 1024;
/// Largest file a windowed read (`line`, `limit`, `maxBytes`, `cursor`) scans: qwen serve's
/// `MAX_TEXT_SCAN_BYTES`.
pub const MAX_TEXT_SCAN_BYTES: u64 = 8 * 1024 * 1024;
/// Default window of `GET /file/bytes`: qwen serve's.
pub const DEFAULT_BYTES_WINDOW: usize = 64 * 1024;
/// Most lines one read returns (`limit`): qwen serve's `MAX_FILE_LINE_LIMIT`.
pub const MAX_LINE_LIMIT: usize = 2_000;
/// Largest content `POST /file/write` and `/file/edit` write: qwen serve's `MAX_WRITE_BYTES`.
pub const MAX_WRITE_BYTES: usize = 5 * 1024 * 1024;
/// Entries `GET /list` returns: qwen serve's `MAX_LIST_ENTRIES`.
pub const MAX_LIST_ENTRIES: usize = 2_000;
/// Matches `GET /glob` returns by default, and at most: qwen serve's.
pub const DEFAULT_GLOB_RESULTS: usize = 5_000;
pub const MAX_GLOB_RESULTS: usize = 50_000;
/// Longest `cursor` accepted: qwen serve's `MAX_TEXT_CURSOR_CHARS`.
pub const MAX_CURSOR_CHARS: usize = 1024;
/// A `.gitignore` read to mark a listing's entries.
const MAX_GITIGNORE_BYTES: u64 = 1024 * 1024;
const BOM: &[u8] = b"\xef\xbb\xbf";

/// Why a file route refused: qwen serve's `errorKind`s, each with its status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("{0}")]
    Parse(String),
    #[error("{0} is outside the workspace")]
    Outside(String),
    #[error("{0} does not exist")]
    NotFound(String),
    #[error("{0} is a binary file: read it with GET /file/bytes")]
    Binary(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("{path} changed: expected {expected}, found {found}; read it again and retry")]
    HashMismatch { path: String, expected: String, found: String },
    #[error("{0} already exists: write it with mode \"replace\" and its expectedHash")]
    Exists(String),
    #[error("oldText was not found in {0}")]
    TextNotFound(String),
    #[error("oldText appears {count} times in {path}: pass a longer span that occurs once")]
    Ambiguous { path: String, count: usize },
    #[error("{0}")]
    Io(String),
}

impl FileError {
    /// qwen serve's `errorKind`.
    pub fn kind(&self) -> &'static str {
        match self {
            FileError::Parse(_) => "parse_error",
            FileError::Outside(_) => "path_outside_workspace",
            FileError::NotFound(_) => "path_not_found",
            FileError::Binary(_) => "binary_file",
            FileError::TooLarge(_) => "file_too_large",
            FileError::HashMismatch { .. } => "hash_mismatch",
            FileError::Exists(_) => "file_already_exists",
            FileError::TextNotFound(_) => "text_not_found",
            FileError::Ambiguous { .. } => "ambiguous_text_match",
            FileError::Io(_) => "io_error",
        }
    }

    /// The HTTP status qwen serve answers it with.
    pub fn status(&self) -> u16 {
        match self {
            FileError::Parse(_) | FileError::Outside(_) => 400,
            FileError::NotFound(_) => 404,
            FileError::Binary(_) | FileError::TextNotFound(_) | FileError::Ambiguous { .. } => 422,
            FileError::TooLarge(_) => 413,
            FileError::HashMismatch { .. } | FileError::Exists(_) => 409,
            FileError::Io(_) => 503,
        }
    }

    /// One instance of each kind (for the OpenAPI document).
    pub fn all() -> Vec<FileError> {
        let s = String::new;
        vec![
            FileError::Parse(s()),
            FileError::Outside(s()),
            FileError::NotFound(s()),
            FileError::Binary(s()),
            FileError::TooLarge(s()),
            FileError::HashMismatch { path: s(), expected: s(), found: s() },
            FileError::Exists(s()),
            FileError::TextNotFound(s()),
            FileError::Ambiguous { path: s(), count: 0 },
            FileError::Io(s()),
        ]
    }
}

fn refused(shown: &str, why: Refusal) -> FileError {
    match why {
        Refusal::Outside => FileError::Outside(shown.to_owned()),
        Refusal::DotDotAfterMissing => {
            FileError::Parse(format!("{shown} has `..` after a folder that does not exist"))
        }
        Refusal::TooManyLinks => FileError::Parse(format!("{shown} has too many levels of symlinks")),
        Refusal::NotFound => FileError::NotFound(shown.to_owned()),
        Refusal::NotAFile => FileError::Parse(format!("{shown} is not a regular file")),
        Refusal::TooLarge => FileError::TooLarge(format!("{shown} is larger than this route reads")),
        Refusal::Exists => FileError::Exists(shown.to_owned()),
        Refusal::Io(e) => FileError::Io(format!("{shown}: {e}")),
    }
}

/// `sha256:<hex>` of `bytes`: qwen serve's content hash.
pub fn content_hash(bytes: &[u8]) -> String {
    format!("sha256:{}", super::manifest::hex(&super::manifest::digest(bytes)))
}

fn valid_hash(hash: &str) -> bool {
    hash.strip_prefix("sha256:").is_some_and(|h| super::manifest::parse_hex(h).is_some())
}

/// A path a client names, relative to the workspace or absolute under it: its absolute form (for
/// [`confine`]) and how answers show it (relative, `.` for the workspace itself).
fn resolve(workspace: &Path, raw: &str) -> Result<(PathBuf, String), FileError> {
    if raw.is_empty() || raw.contains('\0') {
        return Err(FileError::Parse("path must be a non-empty string".into()));
    }
    let absolute = workspace.join(raw);
    let folded = crate::path::normalize_lexically(&absolute);
    let Ok(rel) = folded.strip_prefix(workspace) else { return Err(FileError::Outside(raw.to_owned())) };
    let shown = if rel.as_os_str().is_empty() { ".".to_owned() } else { rel.to_string_lossy().into_owned() };
    Ok((absolute, shown))
}

/// Text as the routes return it: the decoded content and what it was decoded from.
struct Decoded<'a> {
    text: &'a str,
    bom: bool,
    crlf: bool,
}

fn decode<'a>(bytes: &'a [u8], shown: &str) -> Result<Decoded<'a>, FileError> {
    let (bom, body) = match bytes.strip_prefix(BOM) {
        Some(rest) => (true, rest),
        None => (false, bytes),
    };
    if is_binary(body) {
        return Err(FileError::Binary(shown.to_owned()));
    }
    let text = std::str::from_utf8(body).map_err(|_| FileError::Binary(shown.to_owned()))?;
    let crlf_count = text.matches("\r\n").count();
    let lf_count = text.matches('\n').count();
    Ok(Decoded { text, bom, crlf: crlf_count > 0 && crlf_count * 2 >= lf_count })
}

fn line_ending(crlf: bool) -> &'static str {
    if crlf { "crlf" } else { "lf" }
}

/// `GET /file`'s answer: qwen serve's `DaemonWorkspaceFile`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TextRead {
    kind: &'static str,
    path: String,
    content: String,
    encoding: &'static str,
    bom: bool,
    line_ending: &'static str,
    size_bytes: u64,
    returned_bytes: usize,
    truncated: bool,
    hash: String,
    matched_ignore: Option<&'static str>,
    original_line_count: usize,
    next_cursor: Option<String>,
    has_more: bool,
}

/// What a read asks for beyond its path.
#[derive(Debug, Clone, Default)]
pub struct Window {
    pub max_bytes: Option<usize>,
    pub line: Option<usize>,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
}

/// A read's resume point: the next line, and the file it belongs to (a changed file refuses it).
#[derive(Debug, Serialize, Deserialize)]
struct Cursor {
    v: u8,
    line: usize,
    hash: String,
}

fn encode_cursor(line: usize, hash: &str) -> String {
    let json = serde_json::to_vec(&Cursor { v: 1, line, hash: hash.to_owned() }).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

fn decode_cursor(text: &str) -> Option<Cursor> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).ok()?;
    serde_json::from_slice::<Cursor>(&bytes).ok().filter(|c| c.v == 1 && c.line >= 1)
}

/// `GET /file/bytes`'s answer: qwen serve's `DaemonWorkspaceFileBytes`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BytesRead {
    kind: &'static str,
    path: String,
    offset: u64,
    size_bytes: u64,
    returned_bytes: usize,
    truncated: bool,
    content_base64: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    hash: Option<String>,
}

/// `GET /stat`'s answer.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatAnswer {
    kind: &'static str,
    path: String,
    #[serde(rename = "type")]
    file_type: &'static str,
    size_bytes: u64,
    modified_ms: u64,
}

/// One entry of `GET /list`.
#[derive(Debug, Clone, Serialize)]
pub struct ListEntry {
    name: String,
    kind: &'static str,
    ignored: bool,
}

/// `GET /list`'s answer.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listing {
    kind: &'static str,
    path: String,
    entries: Vec<ListEntry>,
    truncated: bool,
    matched_ignore: Option<&'static str>,
}

/// `GET /glob`'s answer.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GlobAnswer {
    kind: &'static str,
    pattern: String,
    cwd: String,
    matches: Vec<String>,
    count: usize,
    truncated: bool,
    duration_ms: u64,
}

/// `POST /file/write`'s body.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteRequest {
    pub path: String,
    pub content: String,
    pub mode: String,
    pub expected_hash: Option<String>,
    pub bom: Option<bool>,
    pub encoding: Option<String>,
    pub line_ending: Option<String>,
}

/// `POST /file/edit`'s body.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EditRequest {
    pub path: String,
    pub old_text: String,
    pub new_text: String,
    pub expected_hash: String,
}

/// `POST /file/write`'s and `/file/edit`'s answer.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Written {
    kind: &'static str,
    path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    created: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replacements: Option<u32>,
    size_bytes: usize,
    hash: String,
    encoding: &'static str,
    bom: bool,
    line_ending: &'static str,
    matched_ignore: Option<&'static str>,
}

impl Written {
    /// Whether the write made the file (`201`) rather than replaced it.
    pub fn created(&self) -> bool {
        self.created == Some(true)
    }
}

/// The file routes of one workspace.
#[derive(Debug)]
pub struct Files<'a> {
    workspace: &'a Path,
    changes: &'a Changes,
}

/// One writer at a time through the routes: a replacement's hash check and its write are one
/// step for every other client of the routes (not for the agent, whose writes the hash catches).
static WRITES: Mutex<()> = Mutex::new(());

impl Changes {
    /// The file routes of `workspace` (canonical).
    pub fn files<'a>(&'a self, workspace: &'a Path) -> Files<'a> {
        Files { workspace, changes: self }
    }
}

impl Files<'_> {
    /// `GET /file`.
    pub fn read_text(&self, raw: &str, window: &Window) -> Result<TextRead, FileError> {
        let (path, shown) = resolve(self.workspace, raw)?;
        if window.cursor.is_some() && window.line.is_some() {
            return Err(FileError::Parse(
                "cursor and line exclude each other: a cursor says where to resume".into(),
            ));
        }
        let windowed = window.max_bytes.is_some()
            || window.line.is_some()
            || window.limit.is_some()
            || window.cursor.is_some();
        let cap = if windowed { MAX_TEXT_SCAN_BYTES } else { MAX_READ_BYTES as u64 };
        let bytes = confine::read_file(self.workspace, &path, cap).map_err(|why| match why {
            Refusal::TooLarge => FileError::TooLarge(format!(
                "{shown} is larger than {cap} bytes: read a window of it (line and limit) or its bytes"
            )),
            why => refused(&shown, why),
        })?;
        let hash = content_hash(&bytes);
        let d = decode(&bytes, &shown)?;
        let start = match &window.cursor {
            Some(c) => {
                let cursor = decode_cursor(c)
                    .ok_or_else(|| FileError::Parse("cursor is not one this daemon gave".into()))?;
                if cursor.hash != hash {
                    return Err(FileError::HashMismatch { path: shown, expected: cursor.hash, found: hash });
                }
                cursor.line
            }
            None => window.line.unwrap_or(1),
        };
        let lines: Vec<&str> = d.text.split_inclusive('\n').collect();
        let total = lines.len();
        let limit = window.limit.unwrap_or(usize::MAX);
        let max_bytes = window.max_bytes.unwrap_or(MAX_READ_BYTES);
        let mut content = String::new();
        let mut taken = 0;
        let mut byte_cut = false;
        for line in lines.iter().skip(start - 1).take(limit) {
            if content.len() + line.len() > max_bytes {
                if taken == 0 {
                    // Not even one line fits: as much of it as does, cut on a character boundary.
                    let mut end = max_bytes.min(line.len());
                    while !line.is_char_boundary(end) {
                        end -= 1;
                    }
                    content.push_str(&line[..end]);
                }
                byte_cut = true;
                break;
            }
            content.push_str(line);
            taken += 1;
        }
        let next = start - 1 + taken;
        let has_more = byte_cut || next < total;
        let next_cursor = (has_more && taken > 0).then(|| encode_cursor(next + 1, &hash));
        Ok(TextRead {
            kind: "file",
            path: shown,
            returned_bytes: content.len(),
            content,
            encoding: "utf-8",
            bom: d.bom,
            line_ending: line_ending(d.crlf),
            size_bytes: bytes.len() as u64,
            truncated: has_more || start > 1,
            hash,
            matched_ignore: None,
            original_line_count: total,
            next_cursor,
            has_more,
        })
    }

    /// `GET /file/bytes`.
    pub fn read_bytes(
        &self,
        raw: &str,
        offset: u64,
        max_bytes: Option<usize>,
    ) -> Result<BytesRead, FileError> {
        use std::io::{Read, Seek, SeekFrom};
        let (path, shown) = resolve(self.workspace, raw)?;
        let max = max_bytes.unwrap_or(DEFAULT_BYTES_WINDOW);
        let mut file = confine::open_file(self.workspace, &path).map_err(|why| refused(&shown, why))?;
        let io = |e: std::io::Error| FileError::Io(format!("{shown}: {e}"));
        let size = file.metadata().map_err(io)?.len();
        file.seek(SeekFrom::Start(offset)).map_err(io)?;
        let mut buf = Vec::with_capacity(max.min(size.saturating_sub(offset) as usize));
        file.take(max as u64).read_to_end(&mut buf).map_err(io)?;
        let whole = offset == 0 && buf.len() as u64 == size;
        Ok(BytesRead {
            kind: "file_bytes",
            path: shown,
            offset,
            size_bytes: size,
            returned_bytes: buf.len(),
            truncated: !whole,
            hash: whole.then(|| content_hash(&buf)),
            content_base64: base64::engine::general_purpose::STANDARD.encode(&buf),
        })
    }

    /// `GET /stat`.
    pub fn stat(&self, raw: &str) -> Result<StatAnswer, FileError> {
        let (path, shown) = resolve(self.workspace, raw)?;
        let st = confine::stat(self.workspace, &path).map_err(|why| refused(&shown, why))?;
        Ok(StatAnswer {
            kind: "stat",
            path: shown,
            file_type: st.kind.as_str(),
            size_bytes: st.size,
            modified_ms: st.modified_ms,
        })
    }

    /// `GET /list`: a directory's entries, `.git` and what `.gitignore` files exclude marked
    /// `ignored` (and left out unless `include_ignored`).
    pub fn list(&self, raw: &str, include_ignored: bool) -> Result<Listing, FileError> {
        let (path, shown) = resolve(self.workspace, raw)?;
        let (mut entries, _) = confine::list_dir(self.workspace, &path, confine::MAX_LIST_ENTRIES)
            .map_err(|why| refused(&shown, why))?;
        entries.sort();
        let rel = if shown == "." { String::new() } else { shown.clone() };
        let ignores = self.ignores_down_to(&rel);
        let mut out = Vec::new();
        let mut truncated = false;
        for (name, kind) in entries {
            let name = name.to_string_lossy().into_owned();
            let child = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            let ignored = name == ".git" || excluded(&ignores, &child, kind == EntryKind::Directory);
            if ignored && !include_ignored {
                continue;
            }
            if out.len() >= MAX_LIST_ENTRIES {
                truncated = true;
                break;
            }
            out.push(ListEntry { name, kind: kind.as_str(), ignored });
        }
        Ok(Listing { kind: "list", path: shown, entries: out, truncated, matched_ignore: None })
    }

    /// The `.gitignore` matchers from the workspace down to the folder `rel` (each with the length
    /// of its folder's prefix), read through the confinement.
    fn ignores_down_to(&self, rel: &str) -> Vec<(usize, Gitignore)> {
        let mut folders = vec![String::new()];
        let mut at = String::new();
        for part in Path::new(rel).components() {
            if let Component::Normal(p) = part {
                if !at.is_empty() {
                    at.push('/');
                }
                at.push_str(&p.to_string_lossy());
                folders.push(at.clone());
            }
        }
        folders
            .into_iter()
            .filter_map(|folder| {
                let file = self.workspace.join(&folder).join(".gitignore");
                let text = confine::read_file(self.workspace, &file, MAX_GITIGNORE_BYTES).ok()?;
                let mut builder = GitignoreBuilder::new(".");
                for line in String::from_utf8_lossy(&text).lines() {
                    let _ = builder.add_line(None, line);
                }
                let base = if folder.is_empty() { 0 } else { folder.len() + 1 };
                builder.build().ok().map(|gi| (base, gi))
            })
            .collect()
    }

    /// `GET /glob`: the workspace's files (as a snapshot sees them: `.gitignore` applied) whose
    /// path matches `pattern` (`*` within a folder, `**` across folders).
    pub fn glob(&self, pattern: &str, max_results: Option<usize>) -> Result<GlobAnswer, FileError> {
        let started = Instant::now();
        if pattern.is_empty() {
            return Err(FileError::Parse("pattern query parameter is required".into()));
        }
        if pattern.split(['/', '\\']).any(|s| s == "..") {
            return Err(FileError::Parse(format!("glob pattern may not contain '..' segments: {pattern}")));
        }
        if pattern.starts_with('/') || pattern.starts_with('\\') {
            return Err(FileError::Parse(format!("glob pattern must be workspace-relative: {pattern}")));
        }
        let matcher = globset::GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| FileError::Parse(format!("invalid glob pattern: {e}")))?
            .compile_matcher();
        let snapshot = self.changes.snapshot(self.workspace).map_err(|e| FileError::Io(e.to_string()))?;
        let cap = max_results.unwrap_or(DEFAULT_GLOB_RESULTS);
        let mut matches = Vec::new();
        let mut truncated = false;
        for path in snapshot.manifest.entries.keys().filter(|p| matcher.is_match(p.as_str())) {
            if matches.len() >= cap {
                truncated = true;
                break;
            }
            matches.push(path.clone());
        }
        Ok(GlobAnswer {
            kind: "glob",
            pattern: pattern.to_owned(),
            cwd: String::new(),
            count: matches.len(),
            matches,
            truncated,
            duration_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// The file's bytes now, checked against `expected` (a `sha256:` hash).
    fn current(&self, path: &Path, shown: &str, expected: &str) -> Result<Vec<u8>, FileError> {
        let bytes =
            confine::read_file(self.workspace, path, MAX_WRITE_BYTES as u64).map_err(|why| match why {
                Refusal::TooLarge => {
                    FileError::TooLarge(format!("{shown} is larger than {MAX_WRITE_BYTES} bytes"))
                }
                why => refused(shown, why),
            })?;
        let found = content_hash(&bytes);
        if found != expected {
            return Err(FileError::HashMismatch {
                path: shown.to_owned(),
                expected: expected.to_owned(),
                found,
            });
        }
        Ok(bytes)
    }

    /// `POST /file/write`.
    pub fn write(&self, req: &WriteRequest) -> Result<Written, FileError> {
        let (path, shown) = resolve(self.workspace, &req.path)?;
        let create = match req.mode.as_str() {
            "create" => true,
            "replace" => false,
            _ => return Err(FileError::Parse("`mode` must be \"create\" or \"replace\"".into())),
        };
        if let Some(h) = &req.expected_hash
            && !valid_hash(h)
        {
            return Err(FileError::Parse("`expectedHash` must match sha256:<64 lowercase hex chars>".into()));
        }
        if !create && req.expected_hash.is_none() {
            return Err(FileError::Parse("`expectedHash` is required with mode \"replace\"".into()));
        }
        if req
            .encoding
            .as_deref()
            .is_some_and(|e| !matches!(e.to_ascii_lowercase().as_str(), "utf-8" | "utf8"))
        {
            return Err(FileError::Parse(
                "`encoding` must be \"utf-8\": this daemon writes UTF-8 only".into(),
            ));
        }
        let crlf_asked = match req.line_ending.as_deref() {
            None => None,
            Some("crlf") => Some(true),
            Some("lf") => Some(false),
            Some(_) => return Err(FileError::Parse("`lineEnding` must be \"crlf\" or \"lf\"".into())),
        };
        if req.content.len() > MAX_WRITE_BYTES {
            return Err(FileError::TooLarge(format!("content is larger than {MAX_WRITE_BYTES} bytes")));
        }
        let _one = lock(&WRITES);
        let existing = match (&req.expected_hash, create) {
            (Some(h), false) => Some(self.current(&path, &shown, h)?),
            _ => None,
        };
        let existing = existing.as_deref().map(|b| decode(b, &shown).map(|d| (d.bom, d.crlf))).transpose()?;
        let bom = req.bom.or(existing.map(|e| e.0)).unwrap_or(false);
        let crlf = crlf_asked.or(existing.map(|e| e.1)).unwrap_or(false);
        let bytes = encode_text(&req.content, bom, crlf);
        if bytes.len() > MAX_WRITE_BYTES {
            return Err(FileError::TooLarge(format!("content is larger than {MAX_WRITE_BYTES} bytes")));
        }
        let mode = if create { WriteMode::CreateNew } else { WriteMode::Replace };
        confine::write_file(self.workspace, &path, &bytes, mode).map_err(|why| refused(&shown, why))?;
        Ok(Written {
            kind: "file_write",
            path: shown,
            mode: Some(req.mode.clone()),
            created: Some(create),
            replacements: None,
            size_bytes: bytes.len(),
            hash: content_hash(&bytes),
            encoding: "utf-8",
            bom,
            line_ending: line_ending(crlf),
            matched_ignore: None,
        })
    }

    /// `POST /file/edit`: replaces the one occurrence of `old_text`.
    pub fn edit(&self, req: &EditRequest) -> Result<Written, FileError> {
        let (path, shown) = resolve(self.workspace, &req.path)?;
        if !valid_hash(&req.expected_hash) {
            return Err(FileError::Parse("`expectedHash` must match sha256:<64 lowercase hex chars>".into()));
        }
        if req.old_text.is_empty() {
            return Err(FileError::Parse("`oldText` must be a non-empty string".into()));
        }
        let _one = lock(&WRITES);
        let bytes = self.current(&path, &shown, &req.expected_hash)?;
        let d = decode(&bytes, &shown)?;
        let count = d.text.matches(req.old_text.as_str()).count();
        match count {
            0 => return Err(FileError::TextNotFound(shown)),
            1 => {}
            count => return Err(FileError::Ambiguous { path: shown, count }),
        }
        let text = d.text.replacen(req.old_text.as_str(), &req.new_text, 1);
        let mut out = Vec::with_capacity(text.len() + 3);
        if d.bom {
            out.extend_from_slice(BOM);
        }
        out.extend_from_slice(text.as_bytes());
        if out.len() > MAX_WRITE_BYTES {
            return Err(FileError::TooLarge(format!(
                "the edited file is larger than {MAX_WRITE_BYTES} bytes"
            )));
        }
        confine::write_file(self.workspace, &path, &out, WriteMode::Replace)
            .map_err(|why| refused(&shown, why))?;
        Ok(Written {
            kind: "file_edit",
            path: shown,
            mode: None,
            created: None,
            replacements: Some(1),
            size_bytes: out.len(),
            hash: content_hash(&out),
            encoding: "utf-8",
            bom: d.bom,
            line_ending: line_ending(d.crlf),
            matched_ignore: None,
        })
    }
}

/// `content` as written: a BOM first when asked, and `\n` as `\r\n` when the file's lines end so
/// (a `\r\n` already there is kept as it is).
fn encode_text(content: &str, bom: bool, crlf: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 3);
    if bom {
        out.extend_from_slice(BOM);
    }
    if crlf {
        let mut prev = '\0';
        for c in content.chars() {
            if c == '\n' && prev != '\r' {
                out.push(b'\r');
            }
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            prev = c;
        }
    } else {
        out.extend_from_slice(content.as_bytes());
    }
    out
}

fn excluded(ignores: &[(usize, Gitignore)], rel: &str, is_dir: bool) -> bool {
    for (base, gi) in ignores.iter().rev() {
        match gi.matched(rel.get(*base..).unwrap_or(rel), is_dir) {
            Match::Ignore(_) => return true,
            Match::Whitelist(_) => return false,
            Match::None => {}
        }
    }
    false
}

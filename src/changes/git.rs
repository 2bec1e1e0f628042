//! The workspace's diff (`GET /workspace/git/diff`): its files now (a snapshot, taken by the
//! engine's own confined walk) against a base: in a git repository its `HEAD`, read from git's
//! object store only (`git ls-tree`, `git cat-file --batch`); in a plain directory the first
//! snapshot of the newest session that ran a turn there.
//!
//! Git is never asked about the working tree: `git diff` and `git status` run the repository's
//! clean filters, fsmonitor hook and the like, programs the repository's own `.git/config` names,
//! and an agent can write that file. Reading objects runs none of them, takes no lock and writes
//! nothing (`--no-optional-locks` regardless), so the user's index, refs and stash stay byte for
//! byte as they were.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Serialize;
use sha1::{Digest as _, Sha1};

use super::diff::{self, Hunk, LineStats};
use super::engine::{Changes, differing};
use super::manifest::{Entry, Kind};
use super::scan::ScanError;

/// How long one git command may take (qwen serve's `GIT_TIMEOUT_MS`).
const GIT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes of output read from one git command.
const MAX_GIT_OUTPUT: u64 = 256 * 1024 * 1024;
/// Files the workspace diff lists with their line counts; the rest are counted (`hiddenCount`).
pub const WORKSPACE_DIFF_FILES: usize = 500;

/// One changed file of the workspace diff, as qwen serve's `DaemonWorkspaceGitDiffFile`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceFile {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    pub added: u64,
    pub removed: u64,
    pub is_binary: bool,
    pub is_untracked: bool,
    pub is_deleted: bool,
    pub truncated: bool,
}

/// The workspace diff, as qwen serve's `DaemonWorkspaceGitDiff` (without `v` and `workspaceCwd`,
/// which the route adds).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceDiff {
    pub available: bool,
    pub files_count: usize,
    pub lines_added: u64,
    pub lines_removed: u64,
    pub files: Vec<WorkspaceFile>,
    pub hidden_count: usize,
    /// What the files are compared with: `head` (git's `HEAD`), `snapshot` (a plain directory's
    /// first snapshot of its newest session), or `none`.
    pub base: &'static str,
}

/// Git's id of a blob holding `content`.
pub fn blob_id(content: &[u8]) -> [u8; 20] {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", content.len()).as_bytes());
    h.update(content);
    h.finalize().into()
}

fn hex20(id: &[u8; 20]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex20(text: &[u8]) -> Option<[u8; 20]> {
    if text.len() != 40 {
        return None;
    }
    let mut out = [0u8; 20];
    for (i, pair) in text.chunks(2).enumerate() {
        out[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

/// Runs `git` in `cwd` with `args` and `input` on its stdin; its stdout when it exits 0.
fn git(cwd: &Path, args: &[&str], input: Option<Vec<u8>>) -> io::Result<Vec<u8>> {
    let mut cmd = Command::new("git");
    cmd.arg("--no-optional-locks").args(["-c", "core.fsmonitor=false"]).args(args).current_dir(cwd);
    for var in
        ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR", "GIT_PREFIX"]
    {
        cmd.env_remove(var);
    }
    cmd.env("GIT_OPTIONAL_LOCKS", "0").env("GIT_TERMINAL_PROMPT", "0").env("LC_ALL", "C");
    cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
    let writer = match (input, child.stdin.take()) {
        (Some(bytes), Some(mut stdin)) => Some(std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        })),
        _ => None,
    };
    let stdout = child.stdout.take().ok_or_else(|| io::Error::other("git has no stdout"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let result = stdout.take(MAX_GIT_OUTPUT).read_to_end(&mut out).map(|_| out);
        let _ = tx.send(result);
    });
    let output = match rx.recv_timeout(GIT_TIMEOUT) {
        Ok(output) => output,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(io::ErrorKind::TimedOut, "git did not answer in time"));
        }
    };
    let status = child.wait()?;
    if let Some(w) = writer {
        let _ = w.join();
    }
    match output {
        Ok(out) if status.success() => Ok(out),
        Ok(_) => Err(io::Error::other(format!("git {} failed ({status})", args.first().unwrap_or(&"")))),
        Err(e) => Err(e),
    }
}

/// A blob of `HEAD`.
#[derive(Debug, Clone, Copy)]
struct HeadFile {
    id: [u8; 20],
    size: u64,
}

/// `HEAD`'s files below the workspace (by path relative to it), and the folders git tracks as
/// other repositories (submodules), whose files are not the workspace's.
struct Head {
    files: HashMap<String, HeadFile>,
    gitlinks: Vec<String>,
}

/// `HEAD` of the repository holding `workspace`: `Ok(None)` when it is not in one (or git is not
/// installed, or it has no commit yet).
fn head(workspace: &Path) -> io::Result<Option<Head>> {
    let Ok(prefix) = git(workspace, &["rev-parse", "--show-prefix"], None) else { return Ok(None) };
    let prefix = String::from_utf8_lossy(&prefix).trim_end_matches('\n').to_owned();
    let Ok(listing) = git(workspace, &["ls-tree", "-r", "-z", "-l", "--full-tree", "HEAD"], None) else {
        return Ok(None);
    };
    let mut files = HashMap::new();
    let mut gitlinks = Vec::new();
    for record in listing.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        // `<mode> SP <type> SP <id> SP+ <size> TAB <path>`
        let Some(tab) = record.iter().position(|b| *b == b'\t') else { continue };
        let (meta, path) = (&record[..tab], &record[tab + 1..]);
        let Ok(path) = std::str::from_utf8(path) else { continue };
        let Some(rel) = path.strip_prefix(prefix.as_str()) else { continue };
        let fields: Vec<&[u8]> = meta.split(|b| *b == b' ').filter(|f| !f.is_empty()).collect();
        match fields.as_slice() {
            [_, b"blob", id, size] => {
                let (Some(id), Ok(size)) = (parse_hex20(id), String::from_utf8_lossy(size).parse()) else {
                    continue;
                };
                files.insert(rel.to_owned(), HeadFile { id, size });
            }
            [_, b"commit", ..] => gitlinks.push(rel.to_owned()),
            _ => {}
        }
    }
    Ok(Some(Head { files, gitlinks }))
}

/// The contents of `ids` from the object store of the repository holding `workspace`.
fn cat(workspace: &Path, ids: &[[u8; 20]]) -> io::Result<HashMap<[u8; 20], Vec<u8>>> {
    let mut out = HashMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let input: String = ids.iter().map(|id| format!("{}\n", hex20(id))).collect();
    let bytes = git(workspace, &["cat-file", "--batch"], Some(input.into_bytes()))?;
    let mut rest = &bytes[..];
    while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
        let header = &rest[..nl];
        rest = &rest[nl + 1..];
        let fields: Vec<&[u8]> = header.split(|b| *b == b' ').collect();
        let [id, b"blob", size] = fields.as_slice() else { continue };
        let (Some(id), Ok(size)) = (parse_hex20(id), String::from_utf8_lossy(size).parse::<usize>()) else {
            break;
        };
        if rest.len() < size {
            break;
        }
        out.insert(id, rest[..size].to_vec());
        rest = rest.get(size + 1..).unwrap_or_default();
    }
    Ok(out)
}

/// One side of a changed file: where its content is.
#[derive(Debug, Clone, Copy)]
enum Side {
    Git(HeadFile),
    Store(Entry),
}

/// A changed file of the workspace diff before its lines are counted.
struct Pending {
    path: String,
    old: Option<Side>,
    new: Option<Entry>,
    untracked: bool,
}

/// Why the workspace diff has no answer.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error(transparent)]
    Snapshot(#[from] ScanError),
    #[error("the repository could not be read: {0}")]
    Git(io::Error),
}

impl Changes {
    /// Git's blob id of an entry's content (memoised by its SHA-256).
    fn git_id(&self, entry: &Entry) -> io::Result<[u8; 20]> {
        if let Some(id) = self.known_git_id(&entry.digest) {
            return Ok(id);
        }
        let id = blob_id(&self.content(entry)?);
        self.remember_git_id(entry.digest, id);
        Ok(id)
    }

    /// The changed files of `workspace` against its base (`head` in a git repository, else the
    /// snapshot `base`), each with what it was and what it is.
    fn pending(
        &self,
        workspace: &Path,
        base: Option<&str>,
    ) -> Result<(Vec<Pending>, &'static str), DiffError> {
        let now = self.snapshot(workspace)?.manifest;
        if let Some(head) = head(workspace).map_err(DiffError::Git)? {
            let inside_gitlink = |p: &str| {
                head.gitlinks.iter().any(|g| p.strip_prefix(g.as_str()).is_some_and(|r| r.starts_with('/')))
            };
            let mut out = Vec::new();
            for (path, entry) in &now.entries {
                if inside_gitlink(path) {
                    continue;
                }
                match head.files.get(path) {
                    None => out.push(Pending {
                        path: path.clone(),
                        old: None,
                        new: Some(*entry),
                        untracked: true,
                    }),
                    Some(h) => {
                        let same = match entry.kind {
                            Kind::Oversized => false,
                            _ if entry.size != h.size => false,
                            _ => self.git_id(entry).map_err(DiffError::Git)? == h.id,
                        };
                        if !same {
                            out.push(Pending {
                                path: path.clone(),
                                old: Some(Side::Git(*h)),
                                new: Some(*entry),
                                untracked: false,
                            });
                        }
                    }
                }
            }
            for (path, h) in &head.files {
                if !now.entries.contains_key(path) {
                    out.push(Pending {
                        path: path.clone(),
                        old: Some(Side::Git(*h)),
                        new: None,
                        untracked: false,
                    });
                }
            }
            out.sort_by(|a, b| a.path.cmp(&b.path));
            return Ok((out, "head"));
        }
        let Some(base) = base.and_then(|id| self.manifest(id).ok()) else { return Ok((Vec::new(), "none")) };
        let out = differing(&base, &now)
            .into_iter()
            .map(|(path, old, new)| Pending {
                path: path.to_owned(),
                old: old.map(|e| Side::Store(*e)),
                new: new.copied(),
                // Not in the base: new since it, as git's untracked files are new since HEAD.
                untracked: old.is_none(),
            })
            .collect();
        Ok((out, "snapshot"))
    }

    /// Both sides' bytes for the files of `pending` (git's in one `cat-file`).
    fn contents(workspace: &Path, pending: &[&Pending]) -> HashMap<[u8; 20], Vec<u8>> {
        let ids: Vec<[u8; 20]> = pending
            .iter()
            .filter_map(|p| match p.old {
                Some(Side::Git(h)) if h.size as usize <= diff::MAX_DIFF_BYTES => Some(h.id),
                _ => None,
            })
            .collect();
        cat(workspace, &ids).unwrap_or_default()
    }

    fn side_bytes(
        &self,
        side: Option<Side>,
        blobs: &HashMap<[u8; 20], Vec<u8>>,
    ) -> Result<Option<Vec<u8>>, ()> {
        match side {
            None => Ok(None),
            Some(Side::Git(h)) => blobs.get(&h.id).cloned().map(Some).ok_or(()),
            Some(Side::Store(e)) if e.kind.kept() => self.content(&e).map(Some).map_err(|_| ()),
            Some(Side::Store(_)) => Err(()),
        }
    }

    fn stats_of(&self, p: &Pending, blobs: &HashMap<[u8; 20], Vec<u8>>) -> LineStats {
        let old = self.side_bytes(p.old, blobs);
        let new = self.side_bytes(p.new.map(Side::Store), blobs);
        match (old, new) {
            (Ok(o), Ok(n)) => diff::line_stats(o.as_deref(), n.as_deref()),
            _ => LineStats { truncated: true, ..LineStats::default() },
        }
    }

    /// The workspace diff (`base`: the snapshot a plain directory is compared with). Blocking.
    pub fn workspace_diff(&self, workspace: &Path, base: Option<&str>) -> Result<WorkspaceDiff, DiffError> {
        let (pending, kind) = self.pending(workspace, base)?;
        let mut out = WorkspaceDiff { available: kind != "none", base: kind, ..WorkspaceDiff::default() };
        out.files_count = pending.len();
        let listed: Vec<&Pending> = pending.iter().take(WORKSPACE_DIFF_FILES).collect();
        out.hidden_count = pending.len() - listed.len();
        let blobs = Self::contents(workspace, &listed);
        for p in listed {
            let stats = self.stats_of(p, &blobs);
            out.lines_added += stats.added;
            out.lines_removed += stats.removed;
            out.files.push(WorkspaceFile {
                path: p.path.clone(),
                old_path: None,
                added: stats.added,
                removed: stats.removed,
                is_binary: stats.binary,
                is_untracked: p.untracked,
                is_deleted: p.new.is_none(),
                truncated: stats.truncated,
            });
        }
        Ok(out)
    }

    /// One file's hunks in the workspace diff: `None` when it has none (unchanged, or not there).
    pub fn workspace_diff_file(
        &self,
        workspace: &Path,
        base: Option<&str>,
        path: &str,
    ) -> Result<Option<(Vec<Hunk>, bool)>, DiffError> {
        let (pending, _) = self.pending(workspace, base)?;
        let Some(p) = pending.iter().find(|p| p.path == path) else { return Ok(None) };
        let blobs = Self::contents(workspace, &[p]);
        let old = self.side_bytes(p.old, &blobs);
        let new = self.side_bytes(p.new.map(Side::Store), &blobs);
        Ok(Some(match (old, new) {
            (Ok(o), Ok(n)) => diff::hunks(o.as_deref(), n.as_deref()),
            _ => (Vec::new(), true),
        }))
    }
}

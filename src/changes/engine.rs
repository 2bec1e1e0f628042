//! The snapshot engine of a daemon ([`Changes`]): its store, each workspace's stat cache, taking a
//! snapshot, and the change set and diffs between two snapshots.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::diff::{self, Hunk, LineStats};
use super::manifest::{self, Digest, Entry, Manifest};
use super::objects::{Collected, Objects};
use super::scan::{self, Index, Limits, ScanError, ScanStats};
use crate::sync::lock;

/// Files a workspace may hold (not counting what `.gitignore` excludes) before its snapshots are
/// refused: a snapshot stats every one of them, twice per turn.
pub const MAX_SNAPSHOT_FILES: usize = 100_000;
/// A file larger than this is recorded by its stat only: its changes show, its content is not
/// kept (nor shown, nor restored by a rewind).
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Directory depth below a workspace that snapshots walk.
pub const MAX_DEPTH: usize = 256;
/// Files a change set lists with their line counts; the rest are counted (`hiddenCount`).
pub const MAX_LISTED_FILES: usize = 1_000;
/// How long an object nothing refers to is kept before [`Changes::collect`] removes it: longer
/// than any snapshot takes, so one being taken never loses an object it reuses.
pub const COLLECT_GRACE: Duration = Duration::from_secs(3600);

/// The bounds snapshots are taken with.
pub const LIMITS: Limits =
    Limits { max_files: MAX_SNAPSHOT_FILES, max_file_bytes: MAX_FILE_BYTES, max_depth: MAX_DEPTH };

/// A snapshot taken.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub id: String,
    pub manifest: Arc<Manifest>,
    pub stats: ScanStats,
}

/// How a file changed between two snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Added,
    Modified,
    Deleted,
}

/// One changed file of a change set (`docs/protocol.md` § changes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileChange {
    pub path: String,
    pub status: Status,
    pub added: u64,
    pub removed: u64,
    pub is_binary: bool,
    /// Its lines were not counted: a side over the diff bound, or its content not kept.
    pub truncated: bool,
    /// No permission request approved in its turn names it.
    #[serde(default)]
    pub unapproved: bool,
}

/// What changed between two snapshots.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeSet {
    pub files_changed: usize,
    pub insertions: u64,
    pub deletions: u64,
    /// The first [`MAX_LISTED_FILES`] changed files, by path.
    pub files: Vec<FileChange>,
    /// Changed files not listed.
    pub hidden_count: usize,
}

/// The paths that differ between two manifests, each with its entry before and after.
pub fn differing<'a>(
    before: &'a Manifest,
    after: &'a Manifest,
) -> Vec<(&'a str, Option<&'a Entry>, Option<&'a Entry>)> {
    let mut out = Vec::new();
    let (mut a, mut b) = (before.entries.iter().peekable(), after.entries.iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some((pa, ea)), Some((pb, eb))) if pa == pb => {
                if ea != eb {
                    out.push((pa.as_str(), Some(*ea), Some(*eb)));
                }
                a.next();
                b.next();
            }
            (Some((pa, ea)), Some((pb, _))) if pa < pb => {
                out.push((pa.as_str(), Some(*ea), None));
                a.next();
            }
            (Some((pa, ea)), None) => {
                out.push((pa.as_str(), Some(*ea), None));
                a.next();
            }
            (_, Some((pb, eb))) => {
                out.push((pb.as_str(), None, Some(*eb)));
                b.next();
            }
        }
    }
    out
}

/// A workspace's stat cache, loaded on first use; the mutex is held by one snapshot at a time, on
/// a blocking thread (never across an `.await`).
type WorkspaceIndex = Arc<Mutex<Option<Index>>>;

/// The snapshot engine of a daemon: its store under the state directory (a private temporary one
/// for `--ephemeral` or a shared store), and each workspace's stat cache.
#[derive(Debug)]
pub struct Changes {
    dir: PathBuf,
    objects: Objects,
    limits: Limits,
    /// One entry per workspace used (bounded by the daemon's workspaces); await-free sections.
    workspaces: Mutex<HashMap<PathBuf, WorkspaceIndex>>,
    /// Removed with the engine: the private directory when there is no state directory.
    temporary: bool,
    /// Git's blob id of contents already hashed for a workspace diff, by their SHA-256.
    git_ids: Mutex<HashMap<Digest, [u8; 20]>>,
}

/// Contents whose git blob id is remembered; the memo is emptied when full.
const MAX_GIT_IDS: usize = 200_000;

impl Drop for Changes {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Changes {
    /// The engine keeping its store in `<state_dir>/changes`, or, without a state directory, in a
    /// directory of the daemon's scratch directory ([`crate::scratch`]), removed when it is dropped
    /// or with the scratch directory when the daemon goes.
    pub fn open(state_dir: Option<&Path>, limits: Limits) -> io::Result<Changes> {
        let (dir, temporary) = match state_dir {
            Some(state) => (state.join("changes"), false),
            None => (crate::scratch::dir()?.join(format!("changes-{}", uuid::Uuid::new_v4())), true),
        };
        let objects = Objects::open(&dir)?;
        Ok(Changes {
            dir,
            objects,
            limits,
            workspaces: Mutex::default(),
            temporary,
            git_ids: Mutex::default(),
        })
    }

    /// Where the store is (never walked by a snapshot when it lies inside a workspace).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn index_path(&self, workspace: &Path) -> PathBuf {
        let key = manifest::hex(&manifest::digest(workspace.as_os_str().as_encoded_bytes()));
        self.dir.join("workspaces").join(&key[..32]).join("index")
    }

    fn workspace(&self, workspace: &Path) -> WorkspaceIndex {
        lock(&self.workspaces).entry(workspace.to_path_buf()).or_default().clone()
    }

    /// The stat cache of `workspace` as kept on disk, if it is whole.
    fn load_index(&self, workspace: &Path) -> Option<Index> {
        let bytes = std::fs::read(self.index_path(workspace)).ok()?;
        let bytes = lz4_flex::decompress_size_prepended(&bytes).ok()?;
        let id_len = u32::from_le_bytes(bytes.get(16..20)?.try_into().ok()?) as usize;
        let id = std::str::from_utf8(bytes.get(20..20 + id_len)?).ok()?;
        let manifest = self.objects.manifest(id).ok()?;
        Index::decode(&bytes, manifest, id)
    }

    fn save_index(&self, workspace: &Path, index: &Index) -> io::Result<()> {
        let path = self.index_path(workspace);
        let dir = path.parent().ok_or_else(|| io::Error::other("an index path has a folder"))?;
        std::fs::create_dir_all(dir)?;
        let temp = dir.join(format!(".{}.tmp", uuid::Uuid::new_v4()));
        let result = std::fs::write(&temp, lz4_flex::compress_prepend_size(&index.encode()))
            .and_then(|()| std::fs::rename(&temp, &path));
        if result.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        result
    }

    /// Takes a snapshot of `workspace` (canonical). Blocking.
    pub fn snapshot(&self, workspace: &Path) -> Result<Snapshot, ScanError> {
        self.snapshot_at(workspace, scan::now_ns())
    }

    /// [`Changes::snapshot`] of a walk starting at `now` (ns since the Unix epoch): the unit tests
    /// pass a later time, so what they wrote counts as settled without waiting out the margin.
    fn snapshot_at(&self, workspace: &Path, now: i64) -> Result<Snapshot, ScanError> {
        let slot = self.workspace(workspace);
        // Held through the walk: one snapshot of a workspace at a time, on a blocking thread.
        let mut guard = lock(&slot);
        let index = guard.get_or_insert_with(|| self.load_index(workspace).unwrap_or_default());
        let known = index.manifest_id.clone();
        let (manifest, id, stats) =
            scan::scan(workspace, index, &self.objects, self.limits, Some(&self.dir), now)?;
        if id != known
            && let Err(e) = self.save_index(workspace, index)
        {
            // The snapshot stands; only the next restart's first snapshot reads more.
            tracing::warn!(error = %e, workspace = %workspace.display(), "cannot keep a workspace's stat cache");
        }
        Ok(Snapshot { id, manifest, stats })
    }

    /// A snapshot taken earlier, by id.
    pub fn manifest(&self, id: &str) -> io::Result<Manifest> {
        self.objects.manifest(id)
    }

    /// The content of an entry the store keeps.
    pub fn content(&self, entry: &Entry) -> io::Result<Vec<u8>> {
        if !entry.kind.kept() {
            return Err(io::Error::other(
                "the file was over the snapshot's size bound: its content was not kept",
            ));
        }
        self.objects.blob(&entry.digest)
    }

    /// Both sides of a changed file, as far as the store keeps them (`None`: absent, or not kept).
    fn sides(
        &self,
        before: Option<&Entry>,
        after: Option<&Entry>,
    ) -> (Option<Vec<u8>>, Option<Vec<u8>>, bool) {
        let read = |e: Option<&Entry>| e.filter(|e| e.kind.kept()).map(|e| self.content(e));
        let unkept = before.is_some_and(|e| !e.kind.kept()) || after.is_some_and(|e| !e.kind.kept());
        let (old, new) = (read(before), read(after));
        let lost = matches!(old, Some(Err(_))) || matches!(new, Some(Err(_)));
        (old.and_then(Result::ok), new.and_then(Result::ok), unkept || lost)
    }

    /// The change set from `before` to `after`, with line counts for the first
    /// [`MAX_LISTED_FILES`] files.
    pub fn change_set(&self, before: &Manifest, after: &Manifest) -> ChangeSet {
        let mut set = ChangeSet::default();
        for (path, old, new) in differing(before, after) {
            set.files_changed += 1;
            if set.files.len() >= MAX_LISTED_FILES {
                set.hidden_count += 1;
                continue;
            }
            let status = match (old, new) {
                (None, _) => Status::Added,
                (_, None) => Status::Deleted,
                _ => Status::Modified,
            };
            let (o, n, unkept) = self.sides(old, new);
            let stats = if unkept {
                LineStats { truncated: true, ..LineStats::default() }
            } else {
                diff::line_stats(o.as_deref(), n.as_deref())
            };
            set.insertions += stats.added;
            set.deletions += stats.removed;
            set.files.push(FileChange {
                path: path.to_owned(),
                status,
                added: stats.added,
                removed: stats.removed,
                is_binary: stats.binary,
                truncated: stats.truncated,
                unapproved: false,
            });
        }
        set
    }

    /// The hunks of one file between two of its entries, and whether some were left out.
    pub fn hunks(&self, before: Option<&Entry>, after: Option<&Entry>) -> (Vec<Hunk>, bool) {
        let (o, n, unkept) = self.sides(before, after);
        if unkept {
            return (Vec::new(), true);
        }
        diff::hunks(o.as_deref(), n.as_deref())
    }

    /// A unified diff of one file between two of its entries.
    pub fn unified(&self, path: &str, before: Option<&Entry>, after: Option<&Entry>) -> String {
        let (o, n, unkept) = self.sides(before, after);
        if unkept {
            return format!("--- a/{path}\n+++ b/{path}\n[not shown: over the snapshot's size bound]\n");
        }
        diff::unified(path, o.as_deref(), n.as_deref())
    }

    /// Removes the objects that neither the snapshots in `keep` nor any workspace's latest one
    /// name (and that are older than [`COLLECT_GRACE`]). Blocking.
    pub fn collect(&self, keep: HashSet<String>) -> io::Result<Collected> {
        self.collect_older_than(keep, COLLECT_GRACE)
    }

    /// [`Changes::collect`] with the grace `grace` (the tests' zero).
    fn collect_older_than(&self, mut keep: HashSet<String>, grace: Duration) -> io::Result<Collected> {
        let slots: Vec<WorkspaceIndex> = lock(&self.workspaces).values().cloned().collect();
        for slot in slots {
            if let Some(index) = lock(&slot).as_ref() {
                keep.insert(index.manifest_id.clone());
            }
        }
        self.objects.collect(&keep, grace)
    }

    /// The git blob id remembered for a content, by its SHA-256.
    pub(super) fn known_git_id(&self, d: &Digest) -> Option<[u8; 20]> {
        lock(&self.git_ids).get(d).copied()
    }

    /// Remembers a content's git blob id (the memo is emptied when full).
    pub(super) fn remember_git_id(&self, d: Digest, id: [u8; 20]) {
        let mut memo = lock(&self.git_ids);
        if memo.len() >= MAX_GIT_IDS {
            memo.clear();
        }
        memo.insert(d, id);
    }
}

#[cfg(test)]
mod tests;

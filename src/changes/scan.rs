//! Taking a snapshot: a walk of the workspace that reads only what changed.
//!
//! Like git's index, a snapshot keeps the stat of every file it recorded (device, inode, mode,
//! size, modification and change times) and of every directory (with the names it held), so the
//! next one stats each file and directory and reads nothing else where nothing changed: no
//! `readdir` of a directory whose times are the same, no `.gitignore` matching there, no read of
//! a file whose stat is the same. A file or directory modified within [`RACY_MARGIN_NS`] of the
//! walk that recorded it is read again next time (git's "racily clean" entries: the clock that
//! stamps files is coarser than the one that starts walks).
//!
//! The walk is by descriptor (`openat`, `statat`, `O_NOFOLLOW`), never by path from `/`: a
//! directory swapped for a symlink mid-walk is never followed out of the workspace. Skipped:
//! `.git` (file or directory) anywhere, what `.gitignore` files and `.git/info/exclude` exclude,
//! the snapshot store itself if it lies inside, names that are not UTF-8, and anything but regular
//! files, symlinks and directories. Files over [`Limits::max_file_bytes`] are recorded by their
//! stat only ([`Kind::Oversized`]); more than [`Limits::max_files`] files refuse the snapshot.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::manifest::{Digest, Entry, Kind, Manifest, digest};
use super::objects::Objects;

/// A file or directory modified this close to the start of the walk that recorded it (or later)
/// is not trusted by the next walk: file times come from the kernel's coarse clock (a tick, up to
/// 10 ms, behind), and a write in the same tick as the walk's stat leaves no trace in them. A
/// second is far above any tick, and costs only a re-read of what was written in the second
/// before a snapshot.
pub(super) const RACY_MARGIN_NS: i64 = 1_000_000_000;
/// Reads of a file that changed while it was read before its content is taken as it is (and its
/// entry left untrusted, so the next snapshot reads it again).
const MAX_READ_TRIES: usize = 3;
/// Bytes read before a read of a regular file gives up waiting for more (a file that grows
/// without end while it is read).
const READ_SLACK: u64 = 64 * 1024;

/// A snapshot's bounds (`docs/protocol.md` § changes).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Files in a workspace; past it the snapshot is refused ([`ScanError::TooManyFiles`]).
    pub max_files: usize,
    /// A file larger than this is recorded by its stat only, its content not kept.
    pub max_file_bytes: u64,
    /// Directory depth below the workspace; deeper directories are skipped (counted).
    pub max_depth: usize,
}

/// What a walk did, for the log and the benchmark.
#[derive(Debug, Clone, Default)]
pub struct ScanStats {
    pub files: usize,
    pub directories: usize,
    /// Directories whose entries were read (the rest came from the cache).
    pub directories_read: usize,
    /// Files whose content was read and hashed.
    pub hashed: usize,
    pub bytes_hashed: u64,
    pub oversized: usize,
    /// Names skipped: not UTF-8, too deep, or unreadable.
    pub skipped: usize,
    pub micros: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error(
        "the workspace has more than {limit} files (not counting what .gitignore excludes): no snapshot is taken"
    )]
    TooManyFiles { limit: usize },
    #[error("the workspace cannot be read: {0}")]
    Workspace(io::Error),
    #[error("the snapshot store cannot be written: {0}")]
    Store(io::Error),
}

/// A stat as the cache compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mode: u32,
    size: u64,
    mtime: i64,
    ctime: i64,
}

impl Stamp {
    fn of(st: &Stat) -> Stamp {
        Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            mode: st.st_mode,
            size: st.st_size.max(0) as u64,
            mtime: st.st_mtime.saturating_mul(1_000_000_000).saturating_add(st.st_mtime_nsec as i64),
            ctime: st.st_ctime.saturating_mul(1_000_000_000).saturating_add(st.st_ctime_nsec as i64),
        }
    }

    /// Whether what this stamp describes may be trusted unchanged by a walk after one started at
    /// `walked_at`, when the stamp is still the same.
    fn settled(&self, walked_at: i64) -> bool {
        self.mtime.max(self.ctime).saturating_add(RACY_MARGIN_NS) < walked_at
    }

    /// A digest standing for the stamp (an oversized file's: a change of its stat is a change).
    fn digest(&self) -> Digest {
        let mut bytes = Vec::with_capacity(48);
        for v in [self.dev, self.ino, self.size, self.mtime as u64, self.ctime as u64] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend_from_slice(&self.mode.to_le_bytes());
        digest(&bytes)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        for v in [self.dev, self.ino, self.size, self.mtime as u64, self.ctime as u64] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.mode.to_le_bytes());
    }

    fn decode(r: &mut Reader<'_>) -> Option<Stamp> {
        let (dev, ino, size, mtime, ctime) = (r.u64()?, r.u64()?, r.u64()?, r.u64()? as i64, r.u64()? as i64);
        Some(Stamp { dev, ino, size, mtime, ctime, mode: r.u32()? })
    }
}

#[derive(Debug, Clone)]
struct CachedFile {
    stamp: Stamp,
    entry: Entry,
    /// The walk that last saw it.
    seen: u64,
    /// Read while it changed: read again next time, whatever its stat.
    unsettled: bool,
}

#[derive(Debug, Clone)]
struct CachedDir {
    stamp: Stamp,
    /// The stat of its `.gitignore` (and, at the root, of `.git/info/exclude`), if it has one.
    ignore: Option<Stamp>,
    /// Its entries that are walked (not excluded), each with whether it is a directory.
    children: Vec<(String, bool)>,
    seen: u64,
}

/// What a workspace's last walk knew: the stat cache, and the snapshot it made.
#[derive(Debug, Default)]
pub(super) struct Index {
    /// When the last walk started (ns since the Unix epoch).
    walked_at: i64,
    generation: u64,
    files: HashMap<String, CachedFile>,
    dirs: HashMap<String, CachedDir>,
    /// Compiled `.gitignore`s, by directory, with the stamp they were read at (not kept on disk).
    ignores: HashMap<String, (Option<Stamp>, Option<Arc<Gitignore>>)>,
    /// The last snapshot, and its id.
    pub(super) manifest: Arc<Manifest>,
    pub(super) manifest_id: String,
}

/// A folder's walked entries (name, whether a folder), the matchers in force below it, and
/// whether its subfolders must be read again.
type Children = (Vec<(String, bool)>, Ignores, bool);

/// The nested `.gitignore` matchers in force in a directory, innermost first.
#[derive(Clone, Default)]
struct Ignores(Vec<(usize, Arc<Gitignore>)>);

impl Ignores {
    /// Whether the entry at `rel` (relative to the workspace) is excluded: the innermost file that
    /// says anything about it decides, as in git.
    fn excluded(&self, rel: &str, is_dir: bool) -> bool {
        for (base, gi) in self.0.iter().rev() {
            let sub = rel.get(*base..).unwrap_or(rel);
            match gi.matched(sub, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    }
}

/// One walk over a workspace, updating `index` in place.
struct Walk<'a> {
    index: &'a mut Index,
    objects: &'a Objects,
    limits: Limits,
    /// The snapshot store's path relative to the workspace, when it lies inside (never walked).
    skip: Option<String>,
    stats: ScanStats,
    /// Whether anything differs from the last snapshot (files added, changed or gone).
    changed: bool,
}

/// Now, in nanoseconds since the Unix epoch (a walk's start).
pub(super) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn errno(e: Errno) -> io::Error {
    io::Error::from(e)
}

/// Walks `workspace` and returns its snapshot (reusing the last one when nothing changed), keeping
/// every new content in `objects`. `skip` is a path inside the workspace never to walk.
pub(super) fn scan(
    workspace: &Path,
    index: &mut Index,
    objects: &Objects,
    limits: Limits,
    skip: Option<&Path>,
    started: i64,
) -> Result<(Arc<Manifest>, String, ScanStats), ScanError> {
    let timer = Instant::now();
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let root = rustix::fs::openat(rustix::fs::CWD, workspace, flags, Mode::empty())
        .map_err(|e| ScanError::Workspace(errno(e)))?;
    index.generation += 1;
    let skip = skip.and_then(|s| s.strip_prefix(workspace).ok()).and_then(|s| s.to_str()).map(str::to_owned);
    let mut walk = Walk { index, objects, limits, skip, stats: ScanStats::default(), changed: false };
    walk.walk(root)?;
    let generation = walk.index.generation;
    let before = walk.index.files.len();
    walk.index.files.retain(|_, f| f.seen == generation);
    walk.index.dirs.retain(|_, d| d.seen == generation);
    let gone = walk.index.files.len() != before;
    let changed = walk.changed || gone || walk.index.manifest_id.is_empty();
    let mut stats = std::mem::take(&mut walk.stats);
    let index = walk.index;
    index.walked_at = started;
    if changed {
        let entries = index.files.iter().map(|(path, f)| (path.clone(), f.entry)).collect();
        let manifest = Manifest { entries };
        index.manifest_id = objects.put_manifest(&manifest).map_err(ScanError::Store)?;
        index.manifest = Arc::new(manifest);
    }
    stats.micros = timer.elapsed().as_micros() as u64;
    Ok((index.manifest.clone(), index.manifest_id.clone(), stats))
}

impl Walk<'_> {
    fn walk(&mut self, root: OwnedFd) -> Result<(), ScanError> {
        // Depth-first, a directory opened only when its turn comes (through its parent's
        // descriptor, shared), so open descriptors stay about the depth, not the breadth.
        struct Todo {
            parent: Option<Arc<OwnedFd>>,
            name: String,
            rel: String,
            ignores: Ignores,
            /// An enclosing `.gitignore` changed: the cached entries of this directory are stale.
            dirty: bool,
            depth: usize,
        }
        let mut root = Some(root);
        let mut todo = vec![Todo {
            parent: None,
            name: String::new(),
            rel: String::new(),
            ignores: Ignores::default(),
            dirty: false,
            depth: 0,
        }];
        while let Some(t) = todo.pop() {
            let fd = match (&t.parent, root.take()) {
                (None, Some(fd)) => fd,
                (Some(parent), _) => {
                    match open_dir(parent, &t.name) {
                        Ok(fd) => fd,
                        // Gone, swapped for a symlink or a file, or unreadable since it was listed.
                        Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR | Errno::ACCESS | Errno::PERM) => {
                            self.stats.skipped += 1;
                            self.changed = true;
                            continue;
                        }
                        Err(e) => return Err(ScanError::Workspace(errno(e))),
                    }
                }
                (None, None) => continue,
            };
            let fd = Arc::new(fd);
            self.stats.directories += 1;
            let (children, ignores, dirty) = self.children(&fd, &t.rel, t.ignores, t.dirty)?;
            for (name, is_dir) in children {
                let rel = if t.rel.is_empty() { name.clone() } else { format!("{}/{name}", t.rel) };
                if is_dir {
                    if self.skip.as_deref() == Some(rel.as_str()) {
                        continue;
                    }
                    if t.depth + 1 > self.limits.max_depth {
                        self.stats.skipped += 1;
                        continue;
                    }
                    todo.push(Todo {
                        parent: Some(fd.clone()),
                        name,
                        rel,
                        ignores: ignores.clone(),
                        dirty,
                        depth: t.depth + 1,
                    });
                } else {
                    self.file(&fd, &name, rel)?;
                }
            }
        }
        Ok(())
    }

    /// The walked entries of the directory `fd` at `rel`: from the cache when its stat, its
    /// `.gitignore`'s and every enclosing one's are unchanged; else read and matched again. Also
    /// the matchers in force below it, and whether its subdirectories must be read again.
    fn children(
        &mut self,
        fd: &OwnedFd,
        rel: &str,
        mut ignores: Ignores,
        dirty: bool,
    ) -> Result<Children, ScanError> {
        let stamp = Stamp::of(&rustix::fs::fstat(fd).map_err(|e| ScanError::Workspace(errno(e)))?);
        let ignore_stamp = Self::ignore_stamp(fd, rel);
        let gitignore = self.gitignore(fd, rel, ignore_stamp);
        if let Some(gi) = gitignore {
            ignores.0.push((if rel.is_empty() { 0 } else { rel.len() + 1 }, gi));
        }
        let generation = self.index.generation;
        let walked_at = self.index.walked_at;
        if let Some(cached) = self.index.dirs.get_mut(rel)
            && !dirty
            && cached.stamp == stamp
            && cached.ignore == ignore_stamp
            && stamp.settled(walked_at)
        {
            cached.seen = generation;
            return Ok((cached.children.clone(), ignores, false));
        }
        // Read again: what it holds, or what is excluded in it, may have changed, and so may what
        // is excluded below it.
        let below_dirty = dirty || self.index.dirs.get(rel).is_none_or(|c| c.ignore != ignore_stamp);
        self.stats.directories_read += 1;
        let mut children = Vec::new();
        let dir = rustix::fs::Dir::read_from(fd).map_err(|e| ScanError::Workspace(errno(e)))?;
        for entry in dir {
            let entry = entry.map_err(|e| ScanError::Workspace(errno(e)))?;
            let raw = entry.file_name().to_bytes();
            if raw == b"." || raw == b".." || raw == b".git" {
                continue;
            }
            let Ok(name) = std::str::from_utf8(raw) else {
                self.stats.skipped += 1;
                continue;
            };
            let is_dir = match entry.file_type() {
                FileType::Directory => true,
                FileType::Unknown => {
                    rustix::fs::statat(fd, OsStr::from_bytes(raw), AtFlags::SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
                }
                _ => false,
            };
            let child_rel = if rel.is_empty() { name.to_owned() } else { format!("{rel}/{name}") };
            if ignores.excluded(&child_rel, is_dir) {
                continue;
            }
            children.push((name.to_owned(), is_dir));
        }
        children.sort();
        self.index.dirs.insert(
            rel.to_owned(),
            CachedDir { stamp, ignore: ignore_stamp, children: children.clone(), seen: generation },
        );
        Ok((children, ignores, below_dirty))
    }

    /// The stat of the exclusion files of the directory at `rel`: its `.gitignore`, and at the
    /// root also `.git/info/exclude` (combined into one stamp).
    fn ignore_stamp(fd: &OwnedFd, rel: &str) -> Option<Stamp> {
        let own =
            rustix::fs::statat(fd, ".gitignore", AtFlags::SYMLINK_NOFOLLOW).ok().map(|st| Stamp::of(&st));
        if !rel.is_empty() {
            return own;
        }
        let exclude = rustix::fs::statat(fd, ".git/info/exclude", AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .map(|st| Stamp::of(&st));
        match (own, exclude) {
            (None, None) => None,
            (a, b) => {
                let mut both = a.unwrap_or(Stamp { dev: 0, ino: 0, mode: 0, size: 0, mtime: 0, ctime: 0 });
                if let Some(b) = b {
                    both.ino ^= b.ino.rotate_left(17);
                    both.size = both.size.wrapping_add(b.size << 32);
                    both.mtime ^= b.mtime.rotate_left(7);
                    both.ctime ^= b.ctime.rotate_left(7);
                    both.dev ^= 1;
                }
                Some(both)
            }
        }
    }

    /// The compiled exclusions of the directory at `rel`, read again only when their stamp changed.
    fn gitignore(&mut self, fd: &OwnedFd, rel: &str, stamp: Option<Stamp>) -> Option<Arc<Gitignore>> {
        if let Some((known, gi)) = self.index.ignores.get(rel)
            && *known == stamp
            && stamp.is_none_or(|s| s.settled(self.index.walked_at))
        {
            return gi.clone();
        }
        let gi = stamp.and_then(|_| {
            let mut builder = GitignoreBuilder::new(".");
            let mut any = false;
            let sources: &[&str] =
                if rel.is_empty() { &[".gitignore", ".git/info/exclude"] } else { &[".gitignore"] };
            for source in sources {
                let Ok(text) = read_small(fd, source, MAX_IGNORE_FILE_BYTES) else { continue };
                for line in String::from_utf8_lossy(&text).lines() {
                    if builder.add_line(None, line).is_ok() {
                        any = true;
                    }
                }
            }
            any.then(|| builder.build().ok().map(Arc::new)).flatten()
        });
        self.index.ignores.insert(rel.to_owned(), (stamp, gi.clone()));
        gi
    }

    /// Records the file, symlink or other entry `name` of the directory `fd`.
    fn file(&mut self, fd: &OwnedFd, name: &str, rel: String) -> Result<(), ScanError> {
        let st = match rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(()),
            Err(Errno::ACCESS | Errno::PERM) => {
                self.stats.skipped += 1;
                return Ok(());
            }
            Err(e) => return Err(ScanError::Workspace(errno(e))),
        };
        let file_type = FileType::from_raw_mode(st.st_mode);
        if !matches!(file_type, FileType::RegularFile | FileType::Symlink) {
            return Ok(());
        }
        self.stats.files += 1;
        if self.stats.files > self.limits.max_files {
            return Err(ScanError::TooManyFiles { limit: self.limits.max_files });
        }
        let stamp = Stamp::of(&st);
        let generation = self.index.generation;
        let walked_at = self.index.walked_at;
        if let Some(cached) = self.index.files.get_mut(&rel)
            && cached.stamp == stamp
            && !cached.unsettled
            && stamp.settled(walked_at)
        {
            cached.seen = generation;
            if cached.entry.kind == Kind::Oversized {
                self.stats.oversized += 1;
            }
            return Ok(());
        }
        let (entry, stamp, unsettled) = if file_type == FileType::Symlink {
            let target = match rustix::fs::readlinkat(fd, name, Vec::new()) {
                Ok(t) => t.into_bytes(),
                Err(Errno::NOENT | Errno::INVAL) => return Ok(()),
                Err(e) => return Err(ScanError::Workspace(errno(e))),
            };
            (self.keep(Kind::Symlink, &target)?, stamp, false)
        } else if stamp.size > self.limits.max_file_bytes {
            self.stats.oversized += 1;
            (Entry { kind: Kind::Oversized, size: stamp.size, digest: stamp.digest() }, stamp, false)
        } else {
            match self.read(fd, name)? {
                None => return Ok(()),
                Some((content, stamp, settled)) => {
                    if content.len() as u64 > self.limits.max_file_bytes {
                        self.stats.oversized += 1;
                        (
                            Entry { kind: Kind::Oversized, size: stamp.size, digest: stamp.digest() },
                            stamp,
                            !settled,
                        )
                    } else {
                        let kind = if stamp.mode & 0o111 != 0 { Kind::Executable } else { Kind::File };
                        (self.keep(kind, &content)?, stamp, !settled)
                    }
                }
            }
        };
        let previous = self.index.files.insert(rel, CachedFile { stamp, entry, seen: generation, unsettled });
        if previous.is_none_or(|p| p.entry != entry) {
            self.changed = true;
        }
        Ok(())
    }

    /// Keeps `content` in the store; its entry.
    fn keep(&mut self, kind: Kind, content: &[u8]) -> Result<Entry, ScanError> {
        let d = digest(content);
        self.objects.put_blob(&d, content).map_err(ScanError::Store)?;
        self.stats.hashed += 1;
        self.stats.bytes_hashed += content.len() as u64;
        Ok(Entry { kind, size: content.len() as u64, digest: d })
    }

    /// Reads the regular file `name` whole, again while it changes under the read (at most
    /// [`MAX_READ_TRIES`] times): its content, the stat it was read at, and whether that stat held
    /// through the read. `None` when it is gone or no longer a regular file.
    fn read(&mut self, fd: &OwnedFd, name: &str) -> Result<Option<(Vec<u8>, Stamp, bool)>, ScanError> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let file = match rustix::fs::openat(fd, name, flags, Mode::empty()) {
            Ok(f) => std::fs::File::from(f),
            Err(Errno::NOENT | Errno::LOOP) => return Ok(None),
            Err(Errno::ACCESS | Errno::PERM) => {
                self.stats.skipped += 1;
                return Ok(None);
            }
            Err(e) => return Err(ScanError::Workspace(errno(e))),
        };
        let cap = self.limits.max_file_bytes.saturating_add(READ_SLACK);
        let mut last = None;
        for _ in 0..MAX_READ_TRIES {
            let before = rustix::fs::fstat(file.as_fd()).map_err(|e| ScanError::Workspace(errno(e)))?;
            if FileType::from_raw_mode(before.st_mode) != FileType::RegularFile {
                return Ok(None);
            }
            let mut content = Vec::with_capacity(before.st_size.clamp(0, cap as i64) as usize);
            let mut reader = (&file).take(cap);
            rustix::fs::seek(&file, rustix::fs::SeekFrom::Start(0))
                .map_err(|e| ScanError::Workspace(errno(e)))?;
            reader.read_to_end(&mut content).map_err(ScanError::Workspace)?;
            let after = rustix::fs::fstat(file.as_fd()).map_err(|e| ScanError::Workspace(errno(e)))?;
            let (b, a) = (Stamp::of(&before), Stamp::of(&after));
            let whole = content.len() as u64 == a.size;
            if b == a && whole {
                return Ok(Some((content, a, true)));
            }
            last = Some((content, a));
        }
        Ok(last.map(|(content, stamp)| (content, stamp, false)))
    }
}

/// Opens the directory `name` of `parent` for a walk: a directory only, never through a symlink
/// (one swapped in since the listing is refused, `ELOOP` or `ENOTDIR`, not followed out).
fn open_dir(parent: &OwnedFd, name: &str) -> rustix::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(parent, name, flags, Mode::empty())
}

/// Reads at most `cap` bytes of the regular file `name` of `dir` (not following a symlink).
fn read_small(dir: &OwnedFd, name: &str, cap: u64) -> io::Result<Vec<u8>> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = std::fs::File::from(rustix::fs::openat(dir, name, flags, Mode::empty()).map_err(errno)?);
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let mut out = Vec::new();
    file.take(cap).read_to_end(&mut out)?;
    Ok(out)
}

/// How much of a `.gitignore` or `.git/info/exclude` is read: bounded like any read of someone
/// else's file. A real one is a few KiB; patterns past the bound are not applied (their files are
/// snapshotted, which loses nothing).
pub(super) const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;

/// The index as kept on disk (`changes/workspaces/<key>/index`), so the first snapshot after a
/// restart stats instead of reading: the walk's time, the manifest's id, then each file's path,
/// stamp and entry, then each directory's path, stamps and walked names.
const INDEX_MAGIC: &[u8; 8] = b"MDIDX01\n";

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn text(&mut self) -> Option<String> {
        let len = self.u32()? as usize;
        Some(std::str::from_utf8(self.take(len)?).ok()?.to_owned())
    }
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

impl Index {
    /// The bytes kept on disk.
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.files.len() * 96);
        out.extend_from_slice(INDEX_MAGIC);
        out.extend_from_slice(&(self.walked_at as u64).to_le_bytes());
        put_text(&mut out, &self.manifest_id);
        out.extend_from_slice(&(self.files.len() as u64).to_le_bytes());
        for (path, f) in &self.files {
            put_text(&mut out, path);
            f.stamp.encode(&mut out);
            // An unsettled entry is kept as one no stat matches: it is read again.
            out.push(u8::from(f.unsettled));
        }
        out.extend_from_slice(&(self.dirs.len() as u64).to_le_bytes());
        for (path, d) in &self.dirs {
            put_text(&mut out, path);
            d.stamp.encode(&mut out);
            match &d.ignore {
                Some(s) => {
                    out.push(1);
                    s.encode(&mut out);
                }
                None => out.push(0),
            }
            out.extend_from_slice(&(d.children.len() as u32).to_le_bytes());
            for (name, is_dir) in &d.children {
                put_text(&mut out, name);
                out.push(u8::from(*is_dir));
            }
        }
        out
    }

    /// An index from [`Index::encode`]'s bytes and the manifest they name (each file's entry is
    /// the manifest's); `None` when they do not fit together (damaged, or another format).
    pub(super) fn decode(bytes: &[u8], manifest: Manifest, manifest_id: &str) -> Option<Index> {
        let mut r = Reader(bytes.strip_prefix(INDEX_MAGIC.as_slice())?);
        let walked_at = r.u64()? as i64;
        if r.text()? != manifest_id {
            return None;
        }
        let mut index = Index { walked_at, manifest_id: manifest_id.to_owned(), ..Index::default() };
        let files = r.u64()?;
        for _ in 0..files {
            let path = r.text()?;
            let stamp = Stamp::decode(&mut r)?;
            let unsettled = r.u8()? != 0;
            let entry = *manifest.entries.get(&path)?;
            index.files.insert(path, CachedFile { stamp, entry, seen: 0, unsettled });
        }
        let dirs = r.u64()?;
        for _ in 0..dirs {
            let path = r.text()?;
            let stamp = Stamp::decode(&mut r)?;
            let ignore = match r.u8()? {
                0 => None,
                _ => Some(Stamp::decode(&mut r)?),
            };
            let count = r.u32()?;
            let mut children = Vec::with_capacity((count as usize).min(65_536));
            for _ in 0..count {
                let name = r.text()?;
                children.push((name, r.u8()? != 0));
            }
            index.dirs.insert(path, CachedDir { stamp, ignore, children, seen: 0 });
        }
        if !r.0.is_empty() || index.files.len() != manifest.entries.len() {
            return None;
        }
        index.manifest = Arc::new(manifest);
        Some(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An index is decoded whole or not at all: a byte after its records, or a manifest with a
    /// file its records do not hold, is a damaged index (a full read), never a partly trusted one.
    #[test]
    fn an_index_with_a_byte_too_many_or_a_file_too_few_is_refused() {
        let index = Index { manifest_id: "m".to_owned(), ..Index::default() };
        let bytes = index.encode();
        assert!(Index::decode(&bytes, Manifest::default(), "m").is_some());
        assert!(Index::decode(&[bytes.as_slice(), &[0]].concat(), Manifest::default(), "m").is_none());
        let mut more = Manifest::default();
        more.entries.insert("a.txt".to_owned(), Entry { kind: Kind::File, size: 1, digest: [0; 32] });
        assert!(Index::decode(&bytes, more, "m").is_none());
    }

    /// A walk opens what its listing called a directory only if it still is one, and not through
    /// a symlink: a file or a symlink (to a directory) put in its place is refused.
    #[test]
    fn a_directory_is_opened_only_as_itself() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(root.path().join("d")).expect("d");
        std::fs::write(root.path().join("f"), "file").expect("f");
        std::os::unix::fs::symlink(root.path().join("d"), root.path().join("l")).expect("l");
        let parent = rustix::fs::open(root.path(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .expect("the parent");
        assert!(open_dir(&parent, "d").is_ok());
        assert_eq!(open_dir(&parent, "f").err(), Some(Errno::NOTDIR), "a file in the directory's place");
        let through = open_dir(&parent, "l").err();
        assert!(
            matches!(through, Some(Errno::LOOP | Errno::NOTDIR)),
            "a symlink is not followed: {through:?}"
        );
    }

    /// The boundary of "racily clean": a stamp whose later time is exactly the margin before the
    /// walk is not trusted yet (a write in the same coarse tick would leave the same times); one
    /// nanosecond more is. The later of the modification and change times counts.
    #[test]
    fn a_stamp_settles_only_past_the_racy_margin_of_its_later_time() {
        let modified_last = Stamp { dev: 1, ino: 2, mode: 0o100_644, size: 3, mtime: 10, ctime: 4 };
        let changed_last = Stamp { mtime: 4, ctime: 10, ..modified_last };
        for stamp in [modified_last, changed_last] {
            assert!(!stamp.settled(10 + RACY_MARGIN_NS), "{stamp:?}");
            assert!(stamp.settled(10 + RACY_MARGIN_NS + 1), "{stamp:?}");
        }
    }
}

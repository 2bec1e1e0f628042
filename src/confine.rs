//! Paths resolved beneath a directory, never from `/`: the one confinement of every file the
//! daemon reads or writes for someone else inside a workspace (the agent's `fs/*` requests in
//! `agent`, the file routes, snapshots and rewinds in `changes`).
//!
//! Every lookup starts from a descriptor of the workspace and never resolves a path string from
//! `/`: the directory part by `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, or, where that is
//! unavailable or refuses, by a walk that opens one component at a time with `O_NOFOLLOW` and
//! follows symlinks itself ([`locate`]). Reads and writes then happen relative to the descriptor of
//! the directory found (`openat`, a temp file and `renameat` in that same directory). So a process
//! that swaps path components for symlinks while a file is read or written cannot make either
//! leave the workspace: at worst it changes which file inside is meant, or makes the call fail.
//!
//! A leaf: it imports nothing from the crate; callers turn a [`Refusal`] into their own error.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, ResolveFlags};
use rustix::io::Errno;

/// Symlinks followed while resolving one path; Linux's own `MAXSYMLINKS`.
pub const MAX_SYMLINK_HOPS: u32 = 40;
/// Lookups started again when a component changed under the walk (a concurrent swap) before the
/// call gives up with an error.
const MAX_RESOLVE_TRIES: u32 = 8;
/// Bytes of the target's name kept in its temp file's name, so the temp name stays under the
/// 255-byte `NAME_MAX` once the prefix, UUID and suffix are added.
const MAX_TEMP_NAME_STEM: usize = 128;
/// Permission bits carried over to a rewritten file. Set-id and sticky bits are dropped, as the
/// kernel itself does when a non-root process writes a set-id file.
const KEPT_MODE_BITS: u32 = 0o777;
/// Entries [`list_dir`] reads at most, whatever its caller asks (a directory of a million names
/// must not become a million-entry answer).
pub const MAX_LIST_ENTRIES: usize = 100_000;

/// Why a path could not be used beneath the workspace.
#[derive(Debug)]
pub enum Refusal {
    /// Not beneath the workspace: as written, or once its symlinks are followed.
    Outside,
    /// A `..` after a component that does not exist (where it would lead cannot be known).
    DotDotAfterMissing,
    /// More than [`MAX_SYMLINK_HOPS`] symlinks.
    TooManyLinks,
    NotFound,
    /// A directory or a special file where a regular file is needed (or the reverse).
    NotAFile,
    /// Larger than the caller's cap.
    TooLarge,
    /// `WriteMode::CreateNew` and something is there.
    Exists,
    Io(io::Error),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Outside => f.write_str("outside the workspace"),
            Refusal::DotDotAfterMissing => f.write_str("a `..` after a folder that does not exist"),
            Refusal::TooManyLinks => write!(f, "more than {MAX_SYMLINK_HOPS} levels of symlinks"),
            Refusal::NotFound => f.write_str("not found"),
            Refusal::NotAFile => f.write_str("not a regular file"),
            Refusal::TooLarge => f.write_str("too large"),
            Refusal::Exists => f.write_str("already exists"),
            Refusal::Io(e) => write!(f, "{e}"),
        }
    }
}

impl From<io::Error> for Refusal {
    fn from(e: io::Error) -> Refusal {
        match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => Refusal::NotFound,
            io::ErrorKind::IsADirectory => Refusal::NotAFile,
            io::ErrorKind::AlreadyExists => Refusal::Exists,
            _ => Refusal::Io(e),
        }
    }
}

/// How [`write_file`] treats what is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Replace a file (keeping its permission bits), or create it.
    Replace,
    /// Create it; refuse ([`Refusal::Exists`]) if anything is there, even a moment before the rename.
    CreateNew,
}

/// What is at a path, not following its last component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EntryKind {
    File,
    Directory,
    Symlink,
    Other,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Directory => "directory",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "other",
        }
    }

    pub fn of(file_type: FileType) -> EntryKind {
        match file_type {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Directory,
            FileType::Symlink => EntryKind::Symlink,
            _ => EntryKind::Other,
        }
    }
}

/// A path's `lstat`, as [`stat`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub kind: EntryKind,
    pub size: u64,
    /// Milliseconds since the Unix epoch.
    pub modified_ms: u64,
}

/// Reads the regular file at `path` (absolute, written under `workspace`), at most `cap` bytes
/// ([`Refusal::TooLarge`] beyond), following symlinks that stay inside.
pub fn read_file(workspace: &Path, path: &Path, cap: u64) -> Result<Vec<u8>, Refusal> {
    let file = open_file(workspace, path)?;
    let metadata = file.metadata()?;
    if metadata.len() > cap {
        return Err(Refusal::TooLarge);
    }
    // The file may grow between the stat and the read; `take` keeps the cap regardless.
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(Refusal::TooLarge);
    }
    Ok(bytes)
}

/// Opens the regular file at `path` for reading (checked on the descriptor, so the check and the
/// read see the same file).
pub fn open_file(workspace: &Path, path: &Path) -> Result<File, Refusal> {
    let root = open_workspace(workspace)?;
    let mut tries = 0;
    let file = loop {
        let found = locate(&root, workspace, path)?;
        match found.kind {
            Kind::Missing => return Err(Refusal::NotFound),
            Kind::Directory | Kind::Other => return Err(Refusal::NotAFile),
            Kind::File(_) => {}
        }
        // O_NOFOLLOW: the name was not a symlink when it was looked at; if it has become one, look
        // again rather than follow it. O_NONBLOCK: a FIFO planted in the workspace cannot hang the
        // read.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        match rustix::fs::openat(&found.dir, found.name.as_os_str(), flags, Mode::empty()) {
            Ok(fd) => break File::from(fd),
            Err(Errno::LOOP | Errno::NOENT) if tries < MAX_RESOLVE_TRIES => tries += 1,
            Err(e) => return Err(io::Error::from(e).into()),
        }
    };
    if !file.metadata()?.is_file() {
        return Err(Refusal::NotAFile);
    }
    Ok(file)
}

/// Writes `content` to `path` atomically (a temp file in the target's directory, fsync, rename),
/// making the file's missing folders, keeping an existing file's permission bits, and writing
/// through a symlink to its target rather than replacing the link.
pub fn write_file(workspace: &Path, path: &Path, content: &[u8], mode: WriteMode) -> Result<(), Refusal> {
    let root = open_workspace(workspace)?;
    if let Ok(rel) = path.strip_prefix(workspace) {
        make_folders(&root, rel);
    }
    let found = locate(&root, workspace, path)?;
    let kept = match found.kind {
        Kind::Missing => None,
        Kind::File(_) if mode == WriteMode::CreateNew => return Err(Refusal::Exists),
        Kind::File(bits) => Some(bits & KEPT_MODE_BITS),
        Kind::Directory | Kind::Other => return Err(Refusal::NotAFile),
    };
    let temp = TempFile::create_in(&found.dir, &found.name)?;
    temp.fill(content, kept)?;
    // Within the one directory the name was found in, by descriptor: whatever happened to the path
    // since, the file lands in that directory, which was inside the workspace.
    let flags = match mode {
        WriteMode::Replace => RenameFlags::empty(),
        WriteMode::CreateNew => RenameFlags::NOREPLACE,
    };
    rustix::fs::renameat_with(&found.dir, temp.name.as_os_str(), &found.dir, found.name.as_os_str(), flags)
        .map_err(|e| Refusal::from(io::Error::from(e)))?;
    temp.disarm();
    // Makes the rename itself durable; the data is already synced, so a failure here only risks
    // seeing the old file after a crash and is not worth failing a completed write for.
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if let Ok(dir) = rustix::fs::openat(&found.dir, c".", flags, Mode::empty()) {
        let _ = rustix::fs::fsync(dir);
    }
    Ok(())
}

/// The directory holding `path`'s last component (its folders' symlinks followed, confined) and
/// that component's name, not followed.
fn parent_of(root: &OwnedFd, workspace: &Path, path: &Path) -> Result<(OwnedFd, OsString), Refusal> {
    let name = match path.components().next_back() {
        Some(Component::Normal(name)) => name.to_os_string(),
        _ => return Err(Refusal::NotAFile),
    };
    let parent = path.parent().ok_or(Refusal::Outside)?;
    let found = locate(root, workspace, parent)?;
    if found.kind != Kind::Directory {
        return Err(if found.kind == Kind::Missing { Refusal::NotFound } else { Refusal::NotAFile });
    }
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = rustix::fs::openat(&found.dir, found.name.as_os_str(), flags, Mode::empty())
        .map_err(|e| Refusal::from(io::Error::from(e)))?;
    Ok((dir, name))
}

/// Removes the file or symlink at `path` (a symlink itself, never its target).
pub fn remove_file(workspace: &Path, path: &Path) -> Result<(), Refusal> {
    let root = open_workspace(workspace)?;
    let (dir, name) = parent_of(&root, workspace, path)?;
    match rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
            return Err(Refusal::NotAFile);
        }
        Ok(_) => {}
        Err(e) => return Err(io::Error::from(e).into()),
    }
    rustix::fs::unlinkat(&dir, name.as_os_str(), AtFlags::empty())
        .map_err(|e| Refusal::from(io::Error::from(e)))
}

/// Makes `path` a symlink to `target` (replacing a file or symlink there), its folders made as
/// [`write_file`] makes them. The link is only written, never followed.
pub fn write_symlink(workspace: &Path, path: &Path, target: &OsStr) -> Result<(), Refusal> {
    let root = open_workspace(workspace)?;
    if let Ok(rel) = path.strip_prefix(workspace) {
        make_folders(&root, rel);
    }
    let (dir, name) = parent_of(&root, workspace, path)?;
    let mut temp = OsString::from(".");
    temp.push(OsStr::from_bytes(&name.as_bytes()[..name.len().min(MAX_TEMP_NAME_STEM)]));
    temp.push(format!(".mediatord-{}.tmp", uuid::Uuid::new_v4()));
    rustix::fs::symlinkat(target, &dir, temp.as_os_str()).map_err(|e| Refusal::from(io::Error::from(e)))?;
    if let Err(e) = rustix::fs::renameat(&dir, temp.as_os_str(), &dir, name.as_os_str()) {
        let _ = rustix::fs::unlinkat(&dir, temp.as_os_str(), AtFlags::empty());
        return Err(io::Error::from(e).into());
    }
    Ok(())
}

/// What is at `path`, its last component not followed (its folders' symlinks are, confined).
pub fn stat(workspace: &Path, path: &Path) -> Result<Stat, Refusal> {
    let root = open_workspace(workspace)?;
    let (dir, name) = match path.strip_prefix(workspace) {
        Ok(rel) if rel.as_os_str().is_empty() => (root.try_clone()?, OsString::from(".")),
        _ => parent_of(&root, workspace, path)?,
    };
    let st = rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| Refusal::from(io::Error::from(e)))?;
    let modified_ms =
        (st.st_mtime.max(0) as u64).saturating_mul(1000) + (st.st_mtime_nsec as u64) / 1_000_000;
    Ok(Stat {
        kind: EntryKind::of(FileType::from_raw_mode(st.st_mode)),
        size: st.st_size.max(0) as u64,
        modified_ms,
    })
}

/// The entries of the directory at `path` (symlinks to directories inside followed), at most
/// `max` of them (and never more than [`MAX_LIST_ENTRIES`]): each name and what it is, not
/// following it; `.` and `..` left out. `true` when entries were left out.
pub fn list_dir(
    workspace: &Path,
    path: &Path,
    max: usize,
) -> Result<(Vec<(OsString, EntryKind)>, bool), Refusal> {
    let root = open_workspace(workspace)?;
    let found = locate(&root, workspace, path)?;
    match found.kind {
        Kind::Directory => {}
        Kind::Missing => return Err(Refusal::NotFound),
        _ => return Err(Refusal::NotAFile),
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&found.dir, found.name.as_os_str(), flags, Mode::empty())
        .map_err(|e| Refusal::from(io::Error::from(e)))?;
    let dir = rustix::fs::Dir::read_from(&fd).map_err(|e| Refusal::from(io::Error::from(e)))?;
    let max = max.min(MAX_LIST_ENTRIES);
    let mut out = Vec::new();
    let mut more = false;
    for entry in dir {
        let entry = entry.map_err(|e| Refusal::from(io::Error::from(e)))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if out.len() >= max {
            more = true;
            break;
        }
        let name = OsStr::from_bytes(name).to_os_string();
        let kind = match entry.file_type() {
            FileType::Unknown => rustix::fs::statat(&fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                .map_or(EntryKind::Other, |st| EntryKind::of(FileType::from_raw_mode(st.st_mode))),
            t => EntryKind::of(t),
        };
        out.push((name, kind));
    }
    Ok((out, more))
}

/// Creates the folders of `rel` (relative to the workspace `root`) that do not exist yet, as a
/// write to `notes/a.txt` is expected to: an agent's write tool makes its file's folder. Only
/// along real directories, one component at a time, each made and opened relative to the one
/// before without following a symlink; at a symlink, a `..` or any error it stops and leaves
/// the path to [`locate`], which refuses what it must, so nothing is ever made outside.
fn make_folders(root: &OwnedFd, rel: &Path) {
    let Some(parent) = rel.parent() else { return };
    if !parent.components().all(|c| matches!(c, Component::Normal(_))) {
        return;
    }
    let Ok(mut dir) = root.try_clone() else { return };
    for component in parent.components() {
        let Component::Normal(name) = component else { return };
        match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(_) => return,
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
            Ok(next) => dir = next,
            Err(_) => return,
        }
    }
}

/// A temp file beside the target, in the same directory (by descriptor), that removes itself on
/// every path but the rename into place: errors, a full disk, a cancelled request (the blocking
/// task runs to its end and drops this).
pub(crate) struct TempFile {
    dir: OwnedFd,
    name: OsString,
    file: File,
    armed: bool,
}

impl TempFile {
    fn create_in(dir: &OwnedFd, target_name: &OsStr) -> io::Result<Self> {
        let stem = &target_name.as_bytes()[..target_name.len().min(MAX_TEMP_NAME_STEM)];
        let mut name = OsString::from(".");
        name.push(OsStr::from_bytes(stem));
        name.push(format!(".mediatord-{}.tmp", uuid::Uuid::new_v4()));
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        // 0o666 less the umask, as a plain create would; a kept mode is set explicitly in `fill`.
        let fd = rustix::fs::openat(dir, name.as_os_str(), flags, Mode::from_raw_mode(0o666))?;
        Ok(Self { dir: dir.try_clone()?, name, file: File::from(fd), armed: true })
    }

    /// Writes, sets the mode (explicitly, so the umask does not narrow a kept mode) and syncs.
    fn fill(&self, content: &[u8], mode: Option<u32>) -> io::Result<()> {
        let mut file = &self.file;
        file.write_all(content)?;
        if let Some(mode) = mode {
            file.set_permissions(fs::Permissions::from_mode(mode))?;
        }
        file.sync_all()
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            let _ = rustix::fs::unlinkat(&self.dir, self.name.as_os_str(), AtFlags::empty());
        }
    }
}

/// What a path names, found beneath the workspace: the directory holding its last component (open,
/// so later calls are relative to it and cannot be redirected by a path swap), the component's
/// name (never a symlink: those are followed), and what is there.
#[derive(Debug)]
pub(crate) struct Found {
    dir: OwnedFd,
    name: OsString,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Missing,
    /// A regular file, with its mode bits.
    File(u32),
    Directory,
    Other,
}

/// Opens the workspace directory itself: the root every lookup starts from.
fn open_workspace(workspace: &Path) -> Result<OwnedFd, Refusal> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    rustix::fs::openat(rustix::fs::CWD, workspace, flags, Mode::empty()).map_err(|e| Refusal::Io(e.into()))
}

/// Finds `path` beneath the workspace `root` (whose path is `workspace`) with the kernel's help.
///
/// The path must be written under the workspace (as the agent was given it); the rest is resolved
/// relative to `root` so that no step can leave it: first with `openat2(RESOLVE_BENEATH |
/// RESOLVE_NO_MAGICLINKS)` for the directory part, in one call; when that is unavailable (an older
/// kernel, a seccomp filter) or refuses (an absolute symlink, a `..` that would leave, a missing
/// component), by a walk that opens one component at a time with `O_NOFOLLOW` relative to the last
/// one it opened, and follows symlinks itself. Either way nothing is ever resolved by a path string
/// from `/`, so swapping a component for a symlink between two steps cannot lead outside.
fn locate(root: &OwnedFd, workspace: &Path, path: &Path) -> Result<Found, Refusal> {
    let Ok(rel) = path.strip_prefix(workspace) else { return Err(Refusal::Outside) };
    if let Some(found) = locate_beneath(root, rel) {
        return Ok(found);
    }
    let mut tries = 0;
    loop {
        match walk(root, workspace, rel) {
            Err(Refusal::Io(e)) if is_race(&e) && tries < MAX_RESOLVE_TRIES => tries += 1,
            result => return result,
        }
    }
}

/// The one-call path: the parent directory by `openat2` beneath `root`, then the last component
/// looked at without following it. `None` sends the caller to [`walk`], which decides every case
/// this one does not (a symlink anywhere it cannot follow, a missing component, an error).
fn locate_beneath(root: &OwnedFd, rel: &Path) -> Option<Found> {
    let name = match rel.components().next_back()? {
        Component::Normal(name) => name.to_os_string(),
        _ => return None,
    };
    let parent = rel.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    let dir = rustix::fs::openat2(root, parent, flags, Mode::empty(), resolve).ok()?;
    let kind = match rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => Kind::Missing,
        Err(_) => return None,
        Ok(stat) => match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => return None,
            file_type => kind_of(file_type, stat.st_mode),
        },
    };
    Some(Found { dir, name, kind })
}

fn kind_of(file_type: FileType, mode: u32) -> Kind {
    match file_type {
        FileType::RegularFile => Kind::File(mode),
        FileType::Directory => Kind::Directory,
        _ => Kind::Other,
    }
}

/// Walks `rel` from `root` one component at a time: each directory is opened `O_NOFOLLOW` relative
/// to the one before, `..` goes back to the directory it came from (and never above `root`), and a
/// symlink is read and its target walked in its place: a relative target from where it is, an
/// absolute one only when it names a place under the workspace, from `root` again.
fn walk(root: &OwnedFd, workspace: &Path, rel: &Path) -> Result<Found, Refusal> {
    let open_dir = |dir: &OwnedFd, name: &OsStr| {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        rustix::fs::openat(dir, name, flags, Mode::empty()).map_err(|e| Refusal::Io(e.into()))
    };
    let dup = |fd: &OwnedFd| fd.try_clone().map_err(Refusal::Io);
    let mut stack: Vec<OwnedFd> = vec![dup(root)?];
    let mut todo: VecDeque<OsString> = components(rel);
    let mut hops = 0;
    while let Some(part) = todo.pop_front() {
        if part == ".." {
            if stack.len() == 1 {
                return Err(Refusal::Outside);
            }
            stack.pop();
            continue;
        }
        let top = stack.last().ok_or(Refusal::Outside)?;
        let last = todo.is_empty();
        let stat = match rustix::fs::statat(top, part.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) if last => {
                return Ok(Found { dir: dup(top)?, name: part, kind: Kind::Missing });
            }
            Err(Errno::NOENT) if todo.iter().any(|p| p == "..") => return Err(Refusal::DotDotAfterMissing),
            Err(Errno::NOENT | Errno::NOTDIR) => return Err(Refusal::NotFound),
            Err(e) => return Err(Refusal::Io(e.into())),
        };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(Refusal::TooManyLinks);
                }
                let target = rustix::fs::readlinkat(top, part.as_os_str(), Vec::new())
                    .map_err(|e| Refusal::Io(e.into()))?;
                let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
                let mut spliced = if target.is_absolute() {
                    let inside = target.strip_prefix(workspace).map_err(|_| Refusal::Outside)?;
                    stack.truncate(1);
                    components(inside)
                } else {
                    components(&target)
                };
                spliced.extend(todo);
                todo = spliced;
            }
            FileType::Directory if !last => stack.push(open_dir(top, &part)?),
            file_type if last => {
                return Ok(Found { dir: dup(top)?, name: part, kind: kind_of(file_type, stat.st_mode) });
            }
            // A file where a directory is needed.
            _ => return Err(Refusal::NotFound),
        }
    }
    // The path named a directory (`ws/sub/..`, or the workspace itself): not a file.
    let dir = stack.pop().ok_or(Refusal::Outside)?;
    Ok(Found { dir, name: OsString::from("."), kind: Kind::Directory })
}

/// The names of `path`'s components; `..` kept as a name, `.` and the root dropped.
fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// An error that means a component changed between two steps of the walk (a swap), worth another
/// walk from the start rather than an answer.
fn is_race(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(code) if code == Errno::LOOP.raw_os_error() || code == Errno::NOTDIR.raw_os_error() || code == Errno::NOENT.raw_os_error())
}

/// The fixture of the confinement tests here and in `agent::fs`: a canonical workspace (tempdirs
/// may sit under a symlinked `/tmp`) and a directory outside it.
#[cfg(test)]
pub(crate) mod fixture {
    use std::fs;
    use std::path::{Path, PathBuf};

    pub(crate) struct Dirs {
        _root: tempfile::TempDir,
        pub(crate) ws: PathBuf,
        pub(crate) outside: PathBuf,
    }

    pub(crate) fn dirs() -> Dirs {
        let root = tempfile::tempdir().expect("tempdir");
        let root_path = fs::canonicalize(root.path()).expect("canonical tempdir");
        let (ws, outside) = (root_path.join("ws"), root_path.join("outside"));
        fs::create_dir(&ws).expect("mkdir ws");
        fs::create_dir(&outside).expect("mkdir outside");
        Dirs { _root: root, ws, outside }
    }

    /// The names in `dir`, sorted: what a test expects to find there and nothing else.
    pub(crate) fn dir_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::{dir_names, dirs};
    use super::*;
    use std::os::unix::fs::symlink;

    /// The fallback walk, on its own (where `openat2` exists, `locate` only falls back to it for the
    /// cases its fast path does not take).
    #[test]
    fn the_walk_alone_confines_and_follows_like_openat2() {
        let d = dirs();
        fs::create_dir_all(d.ws.join("a/b")).expect("mkdir");
        fs::write(d.ws.join("a/f.txt"), "f").expect("write fixture");
        symlink("../f.txt", d.ws.join("a/b/rel")).expect("symlink");
        symlink(&d.outside, d.ws.join("out")).expect("symlink");
        let root = dir_fd(&d.ws);
        let walk_kind = |rel: &str| walk(&root, &d.ws, Path::new(rel)).map(|found| (found.name, found.kind));
        assert!(matches!(walk_kind("a/b/rel"), Ok((name, Kind::File(_))) if name == "f.txt"));
        assert!(matches!(walk_kind("a/new.txt"), Ok((name, Kind::Missing)) if name == "new.txt"));
        assert!(matches!(walk_kind("a/b"), Ok((_, Kind::Directory))));
        assert!(matches!(walk_kind("out/x"), Err(Refusal::Outside)));
        assert!(matches!(walk_kind("a/../.."), Err(Refusal::Outside)));
        assert!(matches!(walk_kind("nope/../x"), Err(Refusal::DotDotAfterMissing)));
        assert!(matches!(walk_kind("nope/x"), Err(Refusal::NotFound)));
        assert!(matches!(walk_kind("a/f.txt/x"), Err(Refusal::NotFound)));
        symlink("loop2", d.ws.join("loop1")).expect("symlink");
        symlink("loop1", d.ws.join("loop2")).expect("symlink");
        assert!(matches!(walk_kind("loop1"), Err(Refusal::TooManyLinks)));
    }

    fn dir_fd(dir: &Path) -> OwnedFd {
        rustix::fs::openat(rustix::fs::CWD, dir, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
            .expect("dir fd")
    }

    #[tokio::test]
    async fn failed_write_removes_its_temp_file() {
        let d = dirs();
        // Stands in for a target swapped for a non-empty directory after resolution, which makes
        // the rename fail: the guard must still remove the temp file.
        let dir = d.ws.join("d");
        fs::create_dir(&dir).expect("mkdir");
        let fd = dir_fd(&dir);
        let temp = TempFile::create_in(&fd, OsStr::new("t")).expect("temp");
        temp.fill(b"x", None).expect("filled");
        fs::create_dir(dir.join("t")).expect("mkdir target");
        fs::write(dir.join("t/inner"), "keep").expect("non-empty dir");
        assert!(rustix::fs::renameat(&fd, temp.name.as_os_str(), &fd, "t").is_err());
        drop(temp);
        assert_eq!(dir_names(&dir), ["t"]);
    }

    #[test]
    fn temp_names_stay_short_for_long_targets() {
        let d = dirs();
        let long = "n".repeat(250);
        let temp =
            TempFile::create_in(&dir_fd(&d.ws), OsStr::new(&long)).expect("temp with a long target name");
        assert!(temp.name.len() <= 255);
        drop(temp);
        assert!(dir_names(&d.ws).is_empty());
    }

    #[test]
    fn create_new_refuses_what_is_there_and_replace_keeps_nothing_behind() {
        let d = dirs();
        let file = d.ws.join("a/b.txt");
        write_file(&d.ws, &file, b"one", WriteMode::CreateNew).expect("created with its folder");
        assert!(matches!(write_file(&d.ws, &file, b"two", WriteMode::CreateNew), Err(Refusal::Exists)));
        write_file(&d.ws, &file, b"two", WriteMode::Replace).expect("replaced");
        assert_eq!(fs::read(&file).expect("read"), b"two");
        assert_eq!(dir_names(&d.ws.join("a")), ["b.txt"]);
    }

    #[test]
    fn remove_stat_list_and_symlinks_stay_beneath_the_workspace() {
        let d = dirs();
        fs::write(d.outside.join("secret"), "s").expect("fixture");
        symlink(&d.outside, d.ws.join("out")).expect("symlink");
        symlink(d.outside.join("secret"), d.ws.join("link")).expect("symlink");
        fs::write(d.ws.join("f"), "f").expect("fixture");
        // The link itself goes, never its target.
        remove_file(&d.ws, &d.ws.join("link")).expect("removed the link");
        assert_eq!(fs::read_to_string(d.outside.join("secret")).expect("kept"), "s");
        assert!(matches!(remove_file(&d.ws, &d.ws.join("out/secret")), Err(Refusal::Outside)));
        assert!(matches!(remove_file(&d.ws, &d.ws.join("missing")), Err(Refusal::NotFound)));
        assert!(matches!(stat(&d.ws, &d.ws.join("out/secret")), Err(Refusal::Outside)));
        assert_eq!(stat(&d.ws, &d.ws.join("out")).expect("the link").kind, EntryKind::Symlink);
        assert_eq!(stat(&d.ws, &d.ws.join("f")).expect("the file").size, 1);
        assert_eq!(stat(&d.ws, &d.ws).expect("the workspace").kind, EntryKind::Directory);
        assert!(matches!(list_dir(&d.ws, &d.ws.join("out"), 10), Err(Refusal::Outside)));
        let (mut names, more) = list_dir(&d.ws, &d.ws, 10).expect("listed");
        names.sort();
        assert_eq!(names, [("f".into(), EntryKind::File), ("out".into(), EntryKind::Symlink)]);
        assert!(!more);
        let (one, more) = list_dir(&d.ws, &d.ws, 1).expect("listed");
        assert_eq!((one.len(), more), (1, true));
        write_symlink(&d.ws, &d.ws.join("new/l"), OsStr::new("../f")).expect("a link made");
        assert_eq!(fs::read_link(d.ws.join("new/l")).expect("readlink"), Path::new("../f"));
        assert!(matches!(write_symlink(&d.ws, &d.ws.join("out/l"), OsStr::new("x")), Err(Refusal::Outside)));
        assert_eq!(dir_names(&d.outside), ["secret"]);
    }
}

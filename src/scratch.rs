//! The daemon's scratch directory: where the private temporary directories of confined commands
//! (`agent::sandbox`) and an ephemeral daemon's change-set store (`changes`) are made, so that
//! what an agent or a shell command leaves there goes when the daemon does. A leaf.
//!
//! One directory per daemon process, `mediatord-run-<uuid>` in the system's temporary directory
//! (`TMPDIR`), mode 0700, made on first use. It holds a file `lock` that the daemon keeps locked
//! (`flock`) for as long as it lives. A private directory's own drop removes it when its command
//! ends; the ones alive when the daemon goes are reached by no drop (the runtime is abandoned at
//! exit, not unwound), so the daemon removes the whole scratch directory on each of its ways out
//! ([`remove`]: after the drain, at a second signal, at a panic). The kernel drops the lock with the
//! process, so one that a SIGKILL or a power cut left behind (or a test binary, which never takes
//! a daemon's way out) is removed by the next daemon of the same user to start, or the next
//! process to make its own ([`sweep`]); one whose process still runs is left alone.

use std::fs::{DirBuilder, File, Metadata};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, TryLockError};
use std::time::Duration;

use rustix::fs::{FlockOperation, flock};

use crate::sync::lock;

/// How a scratch directory's name starts (the rest is a UUID).
const PREFIX: &str = "mediatord-run-";

/// The file in a scratch directory its daemon keeps locked.
const LOCK_FILE: &str = "lock";

/// Mode of the scratch directory: its user's alone.
const SCRATCH_MODE: u32 = 0o700;

/// A scratch directory without its lock file is one another daemon is making (the directory
/// comes first), unless it is older than this: then that daemon died between the two steps.
const UNLOCKED_GRACE: Duration = Duration::from_secs(60);

/// This process's scratch directory, and the open lock file that marks it alive.
struct Scratch {
    dir: PathBuf,
    _lock: File,
}

enum State {
    Unmade,
    Made(Scratch),
    /// The daemon is on its way out: no command may start a directory that nobody would remove.
    Removed,
}

/// The process's one scratch directory. Held for await-free moments only (a `mkdir`, a swap).
static SCRATCH: Mutex<State> = Mutex::new(State::Unmade);

/// The daemon's scratch directory, made and locked on first use in the system's temporary
/// directory.
pub(crate) fn dir() -> io::Result<PathBuf> {
    let mut state = lock(&SCRATCH);
    match &*state {
        State::Made(scratch) => Ok(scratch.dir.clone()),
        State::Removed => Err(io::Error::other("the daemon is stopping: no command starts now")),
        State::Unmade => {
            let scratch = make_swept(&std::env::temp_dir())?;
            let dir = scratch.dir.clone();
            *state = State::Made(scratch);
            Ok(dir)
        }
    }
}

/// Removes the daemon's scratch directory and everything in it, and refuses [`dir`] from then on.
/// For the daemon's ways out: the commands that wrote there are dead, or being killed. Waits for
/// another removal under way (the drain's, when a second signal comes as it ends): returning at
/// once would let the exit that follows cut that removal short and leave the directory behind.
pub fn remove() {
    take(lock(&SCRATCH));
}

/// [`remove`] for the panic hook, which never waits: it may run on the thread that holds the lock,
/// and a directory it cannot take now is the next daemon's to sweep.
pub fn remove_now() {
    match SCRATCH.try_lock() {
        Ok(state) => take(state),
        Err(TryLockError::Poisoned(poisoned)) => take(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => {}
    }
}

/// Marks the scratch directory removed, and removes it if it was made.
fn take(mut state: std::sync::MutexGuard<'_, State>) {
    if let State::Made(scratch) = std::mem::replace(&mut *state, State::Removed) {
        let _ = std::fs::remove_dir_all(&scratch.dir);
    }
}

/// Sweeps `tmp` ([`sweep`]), then makes this process's scratch directory there. Every process
/// that makes one sweeps first, not only a daemon at its start: a test binary, which never reaches
/// a daemon's way out, leaves its directory to the next process instead of piling them up.
fn make_swept(tmp: &Path) -> io::Result<Scratch> {
    sweep(tmp);
    make(tmp)
}

/// Makes a fresh scratch directory in `tmp`, locked.
fn make(tmp: &Path) -> io::Result<Scratch> {
    let dir = tmp.join(format!("{PREFIX}{}", uuid::Uuid::new_v4()));
    DirBuilder::new().mode(SCRATCH_MODE).create(&dir).map_err(|e| {
        io::Error::new(e.kind(), format!("cannot make the scratch directory {}: {e}", dir.display()))
    })?;
    let made = File::create_new(dir.join(LOCK_FILE)).and_then(|file| {
        flock(&file, FlockOperation::NonBlockingLockExclusive)?;
        Ok(file)
    });
    match made {
        Ok(file) => Ok(Scratch { dir, _lock: file }),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(io::Error::new(e.kind(), format!("cannot lock the scratch directory {}: {e}", dir.display())))
        }
    }
}

/// Removes the scratch directories in `tmp` that daemons of this user left when they died (their
/// lock is free); returns how many. Leaves alone those of daemons still running, another user's,
/// and anything that is not a directory (a symbolic link is never followed).
pub fn sweep(tmp: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return 0;
    };
    let me = rustix::process::geteuid().as_raw();
    let mut removed = 0;
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() && meta.uid() == me && remove_abandoned(&path, &meta) {
            removed += 1;
        }
    }
    removed
}

/// Removes the scratch directory `dir` if no living daemon owns it; whether it did. A free lock is
/// taken and held through the removal (the file stays open until it is done), so two daemons
/// sweeping at once do not both remove it; a new daemon never takes an old directory's name.
fn remove_abandoned(dir: &Path, meta: &Metadata) -> bool {
    let _held = match File::open(dir.join(LOCK_FILE)) {
        Ok(file) if flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok() => Some(file),
        Ok(_) => return false,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let age = meta.modified().ok().and_then(|at| at.elapsed().ok());
            if age.is_none_or(|age| age <= UNLOCKED_GRACE) {
                return false;
            }
            None
        }
        Err(_) => return false,
    };
    std::fs::remove_dir_all(dir).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tmp: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(tmp)
            .expect("read")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_live_daemons_scratch_is_kept_and_a_dead_ones_removed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let live = make(tmp.path()).expect("make");
        let dead = make(tmp.path()).expect("make");
        std::fs::write(dead.dir.join("left-behind"), "x").expect("write");
        let dead_name = dead.dir.file_name().expect("name").to_owned();
        drop(dead);
        assert_eq!(sweep(tmp.path()), 1);
        let kept = names(tmp.path());
        assert_eq!(kept, [live.dir.file_name().expect("name").to_string_lossy()]);
        assert!(!kept.contains(&dead_name.to_string_lossy().into_owned()));
        assert!(live.dir.join(LOCK_FILE).exists(), "the live one is whole");
    }

    #[test]
    fn only_this_users_abandoned_scratch_directories_are_touched() {
        let tmp = tempfile::tempdir().expect("tempdir");
        // Another program's directory, a file and a link wearing the prefix.
        let other = tmp.path().join("mediatord-other");
        std::fs::create_dir(&other).expect("dir");
        std::fs::write(tmp.path().join(format!("{PREFIX}file")), "x").expect("file");
        let target = tempfile::tempdir().expect("target");
        std::fs::write(target.path().join(LOCK_FILE), "").expect("lock");
        std::os::unix::fs::symlink(target.path(), tmp.path().join(format!("{PREFIX}link"))).expect("link");
        // A scratch directory being made: no lock file yet, and young.
        let young = tmp.path().join(format!("{PREFIX}young"));
        std::fs::create_dir(&young).expect("dir");
        assert_eq!(sweep(tmp.path()), 0);
        assert_eq!(names(tmp.path()).len(), 4);
        assert!(target.path().join(LOCK_FILE).exists(), "a link is never followed");
        // The same one, past the grace: its daemon died before locking it.
        let old = std::time::SystemTime::now() - UNLOCKED_GRACE - Duration::from_secs(1);
        File::open(&young).expect("open").set_modified(old).expect("mtime");
        assert_eq!(sweep(tmp.path()), 1);
        assert!(!young.exists());
    }

    /// A process making its scratch directory first removes what dead ones left, so a test binary
    /// (which never removes its own) leaves one, not one per run.
    #[test]
    fn making_a_scratch_directory_sweeps_the_abandoned_ones_first() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let live = make(tmp.path()).expect("make");
        for _ in 0..3 {
            drop(make(tmp.path()).expect("make"));
        }
        assert_eq!(names(tmp.path()).len(), 4);
        let mine = make_swept(tmp.path()).expect("make");
        let mut expected =
            [&live, &mine].map(|s| s.dir.file_name().expect("name").to_string_lossy().into_owned());
        expected.sort();
        assert_eq!(names(tmp.path()), expected);
    }

    #[test]
    fn a_missing_temporary_directory_sweeps_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        assert_eq!(sweep(&tmp.path().join("absent")), 0);
    }

    #[test]
    fn a_scratch_directory_is_private_and_locked() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let scratch = make(tmp.path()).expect("make");
        let mode = std::fs::metadata(&scratch.dir).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, SCRATCH_MODE);
        let again = File::open(scratch.dir.join(LOCK_FILE)).expect("open");
        assert!(flock(&again, FlockOperation::NonBlockingLockExclusive).is_err(), "held while it lives");
        let unwritable = tmp.path().join("absent");
        let e = make(&unwritable).err().expect("no parent");
        assert!(e.to_string().contains("cannot make the scratch directory"), "{e}");
    }
}

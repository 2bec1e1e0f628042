//! Where the state lives (`--state-dir`, else `$XDG_STATE_HOME/mediatord`, else
//! `~/.local/state/mediatord`) and the checks that refuse a boot: the directory is created 0700,
//! and one that belongs to another user, or that group or others may use at all (0755 included),
//! is refused, because whoever can replace the database can forge the audit trail and the rules
//! that auto-approve tools, and whoever can read it reads every session's transcript. The docs
//! promised 0700 and the code took 0755 (issue #27): the code now keeps the promise.
//!
//! One daemon per state directory: [`lock`] holds `state.lock` (an exclusive `flock`) for the
//! daemon's life, so a second one refuses to boot instead of marking the first's pending requests
//! abandoned. The kernel releases the lock when the process ends, even by `kill -9`.

use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::config::state_dir::NotOwn;

/// Why the state directory cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateDirError {
    #[error("no state directory: set --state-dir, XDG_STATE_HOME or HOME, or run with --ephemeral")]
    NoHome,
    #[error("cannot create the state directory {path}: {reason}")]
    Create { path: PathBuf, reason: String },
    #[error("the state directory {path} is not a directory")]
    NotADirectory { path: PathBuf },
    #[error(
        "the state directory {path} has mode {mode:04o}: group or others may read or write it; \
         run `chmod 700 {path}` (or choose another --state-dir)"
    )]
    NotPrivate { path: PathBuf, mode: u32 },
    #[error(
        "the state directory {path} is in use by another mediatord (it holds {path}/{LOCK_FILE}); \
         stop that one, or give this one another --state-dir"
    )]
    InUse { path: PathBuf },
    #[error("cannot lock the state directory {path}: {reason}")]
    Lock { path: PathBuf, reason: String },
    #[error(
        "the state directory {path} belongs to uid {owner}, not to this user (uid {me}); \
         choose another --state-dir"
    )]
    NotOwned { path: PathBuf, owner: u32, me: u32 },
}

/// The lock file inside the state directory.
const LOCK_FILE: &str = "state.lock";

/// Creates `dir` (0700, parents as needed) unless it exists, then checks it is ours and closed.
pub(super) fn prepare(dir: &Path) -> Result<(), StateDirError> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| StateDirError::Create { path: dir.to_path_buf(), reason: e.to_string() })?;
        // The mode of a directory created here is 0700 whatever the umask; parents created on the
        // way keep the umask's, as `mkdir -p` would.
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    check(dir)
}

/// Refuses a directory that is not ours or that group or others may use
/// (`config::state_dir`, which the command line applies too before it reads `daemon.json`).
pub(super) fn check(dir: &Path) -> Result<(), StateDirError> {
    let path = dir.to_path_buf();
    crate::config::state_dir::check(dir).map_err(|e| match e {
        NotOwn::Unreadable(reason) => StateDirError::Create { path, reason },
        NotOwn::WrongKind => StateDirError::NotADirectory { path },
        NotOwn::Owner { owner, me } => StateDirError::NotOwned { path, owner, me },
        NotOwn::Mode(mode) => StateDirError::NotPrivate { path, mode },
    })
}

/// Takes the state directory's lock for as long as the returned file is open; `InUse` when
/// another process holds it.
pub(super) fn lock(dir: &Path) -> Result<File, StateDirError> {
    let path = dir.join(LOCK_FILE);
    let failed = |reason: String| StateDirError::Lock { path: dir.to_path_buf(), reason };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| failed(e.to_string()))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(file),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(StateDirError::InUse { path: dir.to_path_buf() }),
        Err(e) => Err(failed(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn a_new_directory_is_0700_and_one_others_may_use_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("a/b/state");
        prepare(&dir).expect("created");
        let mode = std::fs::metadata(&dir).expect("meta").mode() & 0o777;
        assert_eq!(mode, 0o700);
        for bad in [0o770, 0o702, 0o777, 0o755, 0o750, 0o701, 0o710, 0o704] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(bad)).expect("chmod");
            assert_eq!(
                prepare(&dir),
                Err(StateDirError::NotPrivate { path: dir.clone(), mode: bad }),
                "{bad:o}"
            );
        }
        for fine in [0o700, 0o500] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(fine)).expect("chmod");
            assert_eq!(prepare(&dir), Ok(()), "{fine:o}");
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let file = tmp.path().join("f");
        std::fs::write(&file, "").expect("file");
        assert!(matches!(check(&file), Err(StateDirError::NotADirectory { .. })));
    }

    #[test]
    fn one_holder_of_the_lock_at_a_time_until_it_closes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let held = lock(tmp.path()).expect("first");
        assert_eq!(lock(tmp.path()).err(), Some(StateDirError::InUse { path: tmp.path().to_path_buf() }));
        let mode = std::fs::metadata(tmp.path().join(LOCK_FILE)).expect("meta").mode() & 0o777;
        assert_eq!(mode, 0o600);
        drop(held);
        assert!(lock(tmp.path()).is_ok(), "free once closed");
    }
}

//! Where the state lives (`--state-dir`, else `$XDG_STATE_HOME/mediatord`, else
//! `~/.local/state/mediatord`) and the checks that refuse a boot: the directory is created 0700,
//! and one that others could write to, or that belongs to another user, is refused, because whoever
//! can replace the database can forge the audit trail and the rules that auto-approve tools.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

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
        "the state directory {path} has mode {mode:04o}: group or others may write to it; \
         run `chmod 700 {path}` (or choose another --state-dir)"
    )]
    Writable { path: PathBuf, mode: u32 },
    #[error(
        "the state directory {path} belongs to uid {owner}, not to this user (uid {me}); \
         choose another --state-dir"
    )]
    NotOwned { path: PathBuf, owner: u32, me: u32 },
}

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

/// Refuses a directory that is not ours or that group or others may write to.
pub(super) fn check(dir: &Path) -> Result<(), StateDirError> {
    let meta = std::fs::metadata(dir)
        .map_err(|e| StateDirError::Create { path: dir.to_path_buf(), reason: e.to_string() })?;
    if !meta.is_dir() {
        return Err(StateDirError::NotADirectory { path: dir.to_path_buf() });
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(StateDirError::NotOwned { path: dir.to_path_buf(), owner: meta.uid(), me });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(StateDirError::Writable { path: dir.to_path_buf(), mode });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_directory_is_0700_and_a_writable_one_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("a/b/state");
        prepare(&dir).expect("created");
        let mode = std::fs::metadata(&dir).expect("meta").mode() & 0o777;
        assert_eq!(mode, 0o700);
        for bad in [0o770, 0o702, 0o777] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(bad)).expect("chmod");
            assert!(matches!(prepare(&dir), Err(StateDirError::Writable { .. })), "{bad:o}");
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(prepare(&dir), Ok(()));
        let file = tmp.path().join("f");
        std::fs::write(&file, "").expect("file");
        assert!(matches!(check(&file), Err(StateDirError::NotADirectory { .. })));
    }
}

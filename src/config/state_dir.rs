//! Whether a state directory is this user's own: it belongs to this user and neither group nor
//! others may use it at all. The daemon refuses to boot on any other (`store::dir`), and the
//! command line trusts nothing it finds in one (`discovery`): whoever can write a directory can
//! plant a `daemon.json` that sends the operator's token to a listener of theirs, or replace the
//! database that holds the audit trail and the rules that auto-approve tools.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Why a directory (or a file in it) is not this user's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotOwn {
    /// It cannot be read (missing, or no permission), with the system's reason.
    Unreadable(String),
    /// A directory was expected (or a regular file: a symlink or a device is neither).
    WrongKind,
    /// It belongs to uid `owner`, not to this user (`me`).
    Owner { owner: u32, me: u32 },
    /// Group or others may use it: its mode.
    Mode(u32),
}

impl std::fmt::Display for NotOwn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotOwn::Unreadable(reason) => write!(f, "it cannot be read: {reason}"),
            NotOwn::WrongKind => write!(f, "it is not what it should be (a directory, or a regular file)"),
            NotOwn::Owner { owner, me } => {
                write!(f, "it belongs to uid {owner}, not to this user (uid {me})")
            }
            NotOwn::Mode(mode) => write!(f, "it has mode {mode:04o}: group or others may use it"),
        }
    }
}

/// This process's effective user.
fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// `dir` is a directory of this user's that group and others may not use (no mode bit for them).
pub fn check(dir: &Path) -> Result<(), NotOwn> {
    let meta = std::fs::metadata(dir).map_err(|e| NotOwn::Unreadable(e.to_string()))?;
    if !meta.is_dir() {
        return Err(NotOwn::WrongKind);
    }
    owned(&meta, 0o077)
}

/// `meta` (of an open file, never followed through a symlink) is a regular file of this user's
/// that group and others may not write.
pub fn check_file(meta: &std::fs::Metadata) -> Result<(), NotOwn> {
    if !meta.is_file() {
        return Err(NotOwn::WrongKind);
    }
    owned(meta, 0o022)
}

/// Owned by this user, with none of `closed` in its mode.
fn owned(meta: &std::fs::Metadata, closed: u32) -> Result<(), NotOwn> {
    let me = me();
    if meta.uid() != me {
        return Err(NotOwn::Owner { owner: meta.uid(), me });
    }
    let mode = meta.mode() & 0o7777;
    if mode & closed != 0 {
        return Err(NotOwn::Mode(mode));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn only_a_directory_of_this_users_that_nobody_else_may_use_is_its_own() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("state");
        std::fs::create_dir(&dir).expect("mkdir");
        for (mode, ok) in
            [(0o700, true), (0o500, true), (0o750, false), (0o701, false), (0o777, false), (0o710, false)]
        {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).expect("chmod");
            assert_eq!(check(&dir), if ok { Ok(()) } else { Err(NotOwn::Mode(mode)) }, "{mode:o}");
        }
        let file = dir.join("f");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::fs::write(&file, "").expect("file");
        assert_eq!(check(&file), Err(NotOwn::WrongKind));
        assert!(matches!(check(&dir.join("missing")), Err(NotOwn::Unreadable(_))));
        // A file may be read by others, not written.
        for (mode, ok) in
            [(0o600, true), (0o644, true), (0o400, true), (0o620, false), (0o602, false), (0o666, false)]
        {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let meta = std::fs::metadata(&file).expect("meta");
            assert_eq!(check_file(&meta), if ok { Ok(()) } else { Err(NotOwn::Mode(mode)) }, "{mode:o}");
        }
        assert_eq!(check_file(&std::fs::metadata(&dir).expect("meta")), Err(NotOwn::WrongKind));
        // Another user's: `/` is root's (when the tests are root, a file of nobody's is made).
        let root = std::fs::metadata("/").expect("meta");
        if me() != 0 {
            assert_eq!(check(Path::new("/")), Err(NotOwn::Owner { owner: root.uid(), me: me() }));
        } else {
            rustix::fs::chown(&file, Some(rustix::fs::Uid::from_raw(65534)), None).expect("chown");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
            let meta = std::fs::metadata(&file).expect("meta");
            assert_eq!(check_file(&meta), Err(NotOwn::Owner { owner: 65534, me: 0 }));
            rustix::fs::chown(&dir, Some(rustix::fs::Uid::from_raw(65534)), None).expect("chown");
            assert_eq!(check(&dir), Err(NotOwn::Owner { owner: 65534, me: 0 }));
        }
    }
}

//! The credentials `mediatord login` saved, one per daemon URL, for the commands that reach a
//! daemon (`attach`, `watch`, `approve`, `diff`, `connect`, `pair`, `devices`) when they are given
//! no other (`docs/people.md#from-a-terminal`).
//!
//! One JSON file, `$XDG_CONFIG_HOME/mediatord/logins.json` (else `~/.config/...`), readable by its
//! owner only: written `0600` in a `0700` directory, by a new file renamed over the old one (a
//! crash leaves the old file or the new one, never half of one), and refused when anyone else may
//! read or write it (as ssh refuses a key others can read). It holds device credentials of the
//! people who signed in, never a provider's token: the daemon renews a sign-in with the provider
//! itself, and signing out or being disabled there ends the credential on the daemon.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file's name in its directory.
const FILE: &str = "logins.json";
/// The largest file read: a few daemons' logins are a few hundred bytes each.
const MAX_FILE_BYTES: u64 = 64 * 1024;
/// The most daemons one file remembers; signing in to another past it forgets the oldest.
pub const MAX_SAVED_LOGINS: usize = 64;

/// One daemon's saved login.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Saved {
    /// The device credential (`<deviceId>.<secret>`), sent as the bearer.
    pub credential: String,
    /// The person's name, as their provider gave it at the sign-in.
    pub name: String,
    pub role: String,
    /// When it was saved, in milliseconds since the Unix epoch.
    pub saved_at: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    /// By the daemon's URL, without a trailing `/`.
    #[serde(default)]
    logins: BTreeMap<String, Saved>,
}

impl std::fmt::Display for Saved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the credential.
        write!(f, "{} ({})", self.name, self.role)
    }
}

/// Where the file is: `dir` (tests, and a `--config-dir` a command may offer), else
/// `$XDG_CONFIG_HOME/mediatord`, else `$HOME/.config/mediatord`; `None` with neither set.
pub fn path(dir: Option<&Path>) -> Option<PathBuf> {
    path_in(dir, std::env::var_os("XDG_CONFIG_HOME"), std::env::var_os("HOME"))
}

/// [`path`] with the environment given (an empty variable is an unset one, as XDG says).
fn path_in(dir: Option<&Path>, xdg: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => match xdg.filter(|v| !v.is_empty()) {
            Some(x) => PathBuf::from(x).join("mediatord"),
            None => PathBuf::from(home.filter(|v| !v.is_empty())?).join(".config/mediatord"),
        },
    };
    Some(dir.join(FILE))
}

fn key(url: &str) -> String {
    url.trim_end_matches('/').to_owned()
}

/// The login saved for the daemon at `url`; `Ok(None)` when there is none (no file, or nothing for
/// that URL), `Err` when the file cannot be trusted or read (said, with what to do).
pub fn load(file: &Path, url: &str) -> Result<Option<Saved>, String> {
    Ok(read(file)?.logins.remove(&key(url)))
}

fn read(file: &Path) -> Result<File, String> {
    let meta = match std::fs::symlink_metadata(file) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(File::default()),
        Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
    };
    if !meta.is_file() {
        return Err(format!("{} is not a regular file; remove it and sign in again", file.display()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(format!(
                "{} may be read or written by others (mode {mode:o}): its credentials are refused; run `chmod 600 {}` if only you wrote it, else remove it and sign in again",
                file.display(),
                file.display()
            ));
        }
        // A file someone else owns is not this user's login, whatever its mode.
        if meta.uid() != rustix::process::geteuid().as_raw() {
            return Err(format!("{} belongs to another user: its credentials are refused", file.display()));
        }
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{} is larger than {MAX_FILE_BYTES} bytes: not a file of logins",
            file.display()
        ));
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a file of logins ({e}); remove it and sign in again", file.display()))
}

/// The credential saved for the daemon at `url` in this user's file ([`path`]), for a command
/// given none; `Ok(None)` without a file, a home, or a login there.
pub fn credential_for(url: &str) -> Result<Option<String>, String> {
    let Some(file) = path(None) else { return Ok(None) };
    Ok(load(&file, url)?.map(|s| s.credential))
}

/// Saves `saved` as the login for `url` (replacing one there was), forgetting the oldest past
/// [`MAX_SAVED_LOGINS`].
pub fn save(file: &Path, url: &str, saved: Saved) -> Result<(), String> {
    let mut all = read(file)?;
    all.logins.insert(key(url), saved);
    while all.logins.len() > MAX_SAVED_LOGINS {
        let Some(oldest) = all.logins.iter().min_by_key(|(_, s)| s.saved_at).map(|(k, _)| k.clone()) else {
            break;
        };
        all.logins.remove(&oldest);
    }
    write(file, &all)
}

/// Forgets the login for `url`; the one it was, if any.
pub fn forget(file: &Path, url: &str) -> Result<Option<Saved>, String> {
    let mut all = read(file)?;
    let gone = all.logins.remove(&key(url));
    if gone.is_some() {
        write(file, &all)?;
    }
    Ok(gone)
}

fn write(file: &Path, all: &File) -> Result<(), String> {
    let dir = file.parent().ok_or_else(|| format!("{} has no directory", file.display()))?;
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let text = serde_json::to_string_pretty(all).map_err(|e| e.to_string())?;
    let tmp = dir.join(format!(".{FILE}.{}", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options.open(&tmp).and_then(|mut f| {
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()
    });
    let renamed = written.and_then(|()| std::fs::rename(&tmp, file));
    if let Err(e) = renamed {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", file.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ada(at: u64) -> Saved {
        Saved { credential: "dev-1.s".into(), name: "Ada".into(), role: "voter".into(), saved_at: at }
    }

    #[test]
    fn a_login_is_saved_for_its_daemon_only_readable_by_its_owner() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("cfg").join(FILE);
        assert_eq!(load(&file, "http://a").expect("no file"), None);
        save(&file, "http://a/", ada(1)).expect("saved");
        assert_eq!(load(&file, "http://a").expect("read"), Some(ada(1)), "a trailing / is the same daemon");
        assert_eq!(load(&file, "http://b").expect("read"), None);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
            assert_eq!((mode(&file), mode(file.parent().expect("dir"))), (0o600, 0o700));
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
            let refused = load(&file, "http://a").expect_err("others may read it");
            assert!(refused.contains("chmod 600"), "{refused}");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        }
        assert_eq!(forget(&file, "http://a").expect("forgot"), Some(ada(1)));
        assert_eq!(load(&file, "http://a").expect("read"), None);
        assert_eq!(forget(&file, "http://a").expect("nothing"), None);
        assert_eq!(format!("{}", ada(1)), "Ada (voter)", "shown without its credential");
    }

    #[test]
    fn past_the_bound_the_oldest_login_is_forgotten_and_a_bad_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join(FILE);
        for i in 0..=MAX_SAVED_LOGINS as u64 {
            save(&file, &format!("http://d{i}"), ada(i + 1)).expect("saved");
        }
        assert_eq!(load(&file, "http://d0").expect("read"), None, "the oldest went");
        assert_eq!(load(&file, "http://d1").expect("read"), Some(ada(2)));
        assert_eq!(
            load(&file, &format!("http://d{MAX_SAVED_LOGINS}")).expect("read").map(|s| s.saved_at),
            Some(65)
        );
        std::fs::write(&file, "not json").expect("write");
        assert!(load(&file, "http://d1").expect_err("not json").contains("not a file of logins"));
        let mut edge = vec![b' '; MAX_FILE_BYTES as usize - 2];
        edge.extend(b"{}");
        std::fs::write(&file, &edge).expect("write");
        assert_eq!(load(&file, "http://d1").expect("exactly the bound is read"), None);
        edge.push(b' ');
        std::fs::write(&file, &edge).expect("write");
        assert!(load(&file, "http://d1").expect_err("too large").contains("larger than"));
        // A path that cannot be looked at (its directory is a file) is an error, not "no logins".
        assert!(load(&file.join(FILE), "http://d1").is_err());
    }

    #[test]
    fn the_file_is_in_the_given_directory_else_xdgs_else_homes_and_an_empty_variable_is_unset() {
        let os = |s: &str| Some(OsString::from(s));
        let at = |p: &str| Some(PathBuf::from(p).join(FILE));
        assert_eq!(path_in(Some(Path::new("/d")), os("/x"), os("/h")), at("/d"));
        assert_eq!(path_in(None, os("/x"), os("/h")), at("/x/mediatord"));
        assert_eq!(path_in(None, os(""), os("/h")), at("/h/.config/mediatord"));
        assert_eq!(path_in(None, None, os("/h")), at("/h/.config/mediatord"));
        assert_eq!(path_in(None, None, os("")), None);
        assert_eq!(path_in(None, None, None), None);
    }
}

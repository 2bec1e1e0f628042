//! Finding the local daemon. The running daemon writes where it listens to `daemon.json` in its
//! state directory ([`Advert::publish`]): its URL as a client on this machine reaches it, its pid,
//! and, when it serves https, the SHA-256 fingerprint of its certificate, which the command line
//! then trusts exactly (the file is the daemon's own, 0600 in a 0700 directory). With `--mdns` it
//! also advertises itself on the LAN ([`mdns`]). [`locate`] is the one lookup every command that
//! talks to a daemon uses (`mediatord pair`, `devices`, `attach`, `watch`, `approve`, `connect`):
//! an explicit URL wins, then a live daemon's file, then a daemon found on the LAN, then the
//! documented default.
//!
//! The file is believed only from a state directory that is this user's own, as the daemon demands
//! of it (`config::state_dir`: this user's, 0700), and only when the file is this user's too and
//! not a symlink: anyone who could write it could send the operator's token, and the editor's
//! requests, to a listener of their own. One that is not is ignored, and said so
//! ([`Located::ignored`]). The pid it names must be a process of this user's other than init.
//!
//! A leaf: files, a pid and multicast DNS, nothing of the crate but the other leaves.

pub mod mdns;

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// The file's name in the state directory.
pub const FILE: &str = "daemon.json";
/// Where a daemon listens when nothing says otherwise (`--port`'s default on loopback).
pub const DEFAULT_URL: &str = "http://127.0.0.1:7776";
/// The largest advert read: a URL, a pid and a fingerprint are a few hundred bytes.
const MAX_ADVERT_BYTES: u64 = 16 * 1024;

/// What a running daemon says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advert {
    /// `http(s)://host:port`, reachable from this machine (an unspecified bind is written as
    /// loopback).
    pub url: String,
    pub pid: u32,
    /// SHA-256 of the https certificate, `AB:CD:…`; `None` for plain http.
    pub fingerprint: Option<String>,
}

/// Where a command finds the daemon, and why there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub url: String,
    /// The certificate to trust for this URL, when the daemon advertised it.
    pub fingerprint: Option<String>,
    pub source: Source,
    /// Why a `daemon.json` that was there was not believed, for the command to say on stderr.
    pub ignored: Option<String>,
}

impl Located {
    /// The line a command says on stderr, before it sends anything, when the daemon was found on
    /// the LAN: any machine there can answer a browse, so the person sees which one did. The name,
    /// URL and certificate came off the network and are escaped for the terminal; `alternative`
    /// says how to name another daemon (`--url`, a URL argument). `None` for any other source.
    pub fn announcement(&self, alternative: &str) -> Option<String> {
        let Source::Lan(name) = &self.source else { return None };
        let certificate = self
            .fingerprint
            .as_ref()
            .map_or(String::new(), |fp| format!(", certificate {}", crate::text::escape(fp)));
        Some(format!(
            "found {} on the LAN (mDNS) at {}{certificate}; {alternative} names another",
            crate::text::escape(name),
            crate::text::escape(&self.url),
        ))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `--url` or `MEDIATORD_URL`.
    Explicit,
    /// A running daemon's `daemon.json`.
    StateDir,
    /// A daemon that answered an mDNS browse on the LAN, by the instance name it advertised.
    Lan(String),
    /// [`DEFAULT_URL`]: no URL given and no running daemon advertised one.
    Default,
}

/// Removes the advert when the daemon stops (dropped at the end of `server::run`).
#[derive(Debug)]
pub struct Published {
    path: PathBuf,
    pid: u32,
}

impl Drop for Published {
    fn drop(&mut self) {
        // Only our own: a daemon started since may have written its file in our place.
        if read(&self.path).is_some_and(|a| a.pid == self.pid) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Advert {
    /// The advert of a daemon bound to `host` (as the startup line shows it) and `port`.
    pub fn new(https: bool, host: &str, port: u16, fingerprint: Option<String>) -> Advert {
        let host = match host {
            "0.0.0.0" => "127.0.0.1",
            "[::]" => "[::1]",
            other => other,
        };
        let scheme = if https { "https" } else { "http" };
        Advert { url: format!("{scheme}://{host}:{port}"), pid: std::process::id(), fingerprint }
    }

    fn to_json(&self) -> Value {
        json!({"url": self.url, "pid": self.pid, "fingerprint": self.fingerprint, "version": env!("CARGO_PKG_VERSION")})
    }

    /// Writes `state_dir/daemon.json` ([`Advert::write`]); the guard removes it again.
    pub fn publish(&self, state_dir: &Path) -> io::Result<Published> {
        self.write(state_dir)?;
        Ok(Published { path: state_dir.join(FILE), pid: self.pid })
    }

    /// Writes `state_dir/daemon.json`, 0600, replaced atomically so a reader never sees half of
    /// it (a certificate reload writes it again under the guard of the first).
    pub fn write(&self, state_dir: &Path) -> io::Result<()> {
        let path = state_dir.join(FILE);
        let tmp = state_dir.join(format!(".{FILE}.{}", self.pid));
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut file =
                std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
            file.write_all(self.to_json().to_string().as_bytes())?;
            file.sync_all()?;
        }
        std::fs::rename(&tmp, &path)
    }
}

/// A daemon's advert, if the file holds a well-formed one; the file itself is checked as
/// [`advert_in`] says (never followed through a symlink).
fn read(path: &Path) -> Option<Advert> {
    read_checked(path).ok().flatten()
}

/// The advert in `path`: `Ok(None)` when there is none (no file, or not an advert), `Err` with why
/// when there is a file that is not this user's own.
fn read_checked(path: &Path) -> Result<Option<Advert>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let mut file = match std::fs::OpenOptions::new().read(true).custom_flags(flags.bits() as i32).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err("it is a symbolic link".into());
        }
        Err(e) => return Err(format!("it cannot be read: {e}")),
    };
    let meta = file.metadata().map_err(|e| format!("it cannot be read: {e}"))?;
    crate::config::state_dir::check_file(&meta).map_err(|e| e.to_string())?;
    let mut text = String::new();
    if Read::take(&mut file, MAX_ADVERT_BYTES).read_to_string(&mut text).is_err() {
        return Ok(None);
    }
    Ok(parse(&text))
}

/// The advert of `state_dir`, believed only when the directory and the file are this user's own
/// (`config::state_dir`). `Err` says why one that is there is not.
fn advert_in(state_dir: &Path) -> Result<Option<Advert>, String> {
    let path = state_dir.join(FILE);
    let shown = crate::text::escape(&path.to_string_lossy()).into_owned();
    match crate::config::state_dir::check(state_dir) {
        Ok(()) => read_checked(&path).map_err(|why| format!("ignored {shown}: {why}")),
        // No directory, no daemon.
        Err(crate::config::state_dir::NotOwn::Unreadable(_)) => Ok(None),
        Err(why) if std::fs::symlink_metadata(&path).is_ok() => Err(format!(
            "ignored {shown}: its state directory is not this user's own ({why}); a daemon's state \
             directory is this user's and 0700 (run the command as the daemon's user)"
        )),
        Err(_) => Ok(None),
    }
}

/// An advert's JSON, if well-formed.
fn parse(text: &str) -> Option<Advert> {
    let v: Value = serde_json::from_str(text).ok()?;
    let url = v.get("url")?.as_str()?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return None;
    }
    Some(Advert {
        url: url.to_owned(),
        pid: u32::try_from(v.get("pid")?.as_u64()?).ok()?,
        fingerprint: v.get("fingerprint").and_then(Value::as_str).map(str::to_owned),
    })
}

/// Whether process `pid` is one of this user's, other than init, that is running (a daemon killed
/// outright leaves its file behind). The daemon that wrote a file into this user's own directory
/// runs as this user; init and another user's process are never it.
fn alive(pid: u32) -> bool {
    if pid <= 1 {
        return false;
    }
    let Some(raw) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return false };
    if rustix::process::test_kill_process(raw).is_err() {
        return false;
    }
    // Root may signal anyone: the process's owner says whose it is.
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}")).map_or(true, |m| m.uid() == rustix::process::geteuid().as_raw())
}

/// The daemon a command on this machine talks to: `explicit` (`--url`, `MEDIATORD_URL`) if
/// given; else the advert in `state_dir` of a daemon still running; else, when `lan` allows, the
/// first daemon an mDNS browse finds within [`mdns::BROWSE_TIME`]; else [`DEFAULT_URL`].
pub fn locate(explicit: Option<&str>, state_dir: Option<&Path>, lan: bool) -> Located {
    let (advert, ignored) = match state_dir.map(advert_in) {
        Some(Ok(advert)) => (advert.filter(|a| alive(a.pid)), None),
        Some(Err(why)) => (None, Some(why)),
        None => (None, None),
    };
    if let Some(url) = explicit.map(|u| u.trim().trim_end_matches('/')).filter(|u| !u.is_empty()) {
        // An explicit URL that is the advertised one still gets the advertised certificate.
        let advert = advert.filter(|a| a.url == url);
        return Located {
            url: url.to_owned(),
            fingerprint: advert.and_then(|a| a.fingerprint),
            source: Source::Explicit,
            ignored,
        };
    }
    if let Some(advert) = advert {
        return Located {
            url: advert.url,
            fingerprint: advert.fingerprint,
            source: Source::StateDir,
            ignored,
        };
    }
    if lan && let Some(found) = mdns::browse(mdns::BROWSE_TIME) {
        return Located {
            url: found.url,
            fingerprint: found.fingerprint,
            source: Source::Lan(found.name),
            ignored,
        };
    }
    Located { url: DEFAULT_URL.to_owned(), fingerprint: None, source: Source::Default, ignored }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid no process has: above the kernel's maximum (`/proc/sys/kernel/pid_max` ≤ 2^22).
    const NO_SUCH_PID: u32 = 1 << 23;

    fn write(dir: &Path, advert: &Advert) {
        std::fs::write(dir.join(FILE), advert.to_json().to_string()).expect("write");
    }

    #[test]
    fn a_daemon_found_on_the_lan_is_announced_escaped_and_no_other_is() {
        let lan = Located {
            url: "http://10.0.0.2:7776\u{1b}[2J".into(),
            fingerprint: Some("AB:CD\u{7}".into()),
            source: Source::Lan("mediatord on \u{1b}]0;pwned\u{7}evil".into()),
            ignored: None,
        };
        let line = lan.announcement("--url").expect("announced");
        assert!(!line.chars().any(|c| c.is_control()), "{line:?}");
        assert_eq!(
            line,
            format!(
                "found mediatord on {}evil on the LAN (mDNS) at http://10.0.0.2:7776{}, certificate AB:CD{}; --url names another",
                crate::text::escape("\u{1b}]0;pwned\u{7}"),
                crate::text::escape("\u{1b}[2J"),
                crate::text::escape("\u{7}"),
            )
        );
        let plain = Located { fingerprint: None, source: Source::Lan("m".into()), ..lan.clone() };
        assert!(
            plain
                .announcement("a URL argument")
                .expect("announced")
                .ends_with("2J; a URL argument names another")
        );
        for source in [Source::Explicit, Source::StateDir, Source::Default] {
            assert_eq!(Located { source, ..lan.clone() }.announcement("--url"), None);
        }
    }

    #[test]
    fn an_unspecified_bind_is_advertised_as_loopback() {
        assert_eq!(Advert::new(false, "0.0.0.0", 7776, None).url, "http://127.0.0.1:7776");
        assert_eq!(Advert::new(true, "[::]", 1, None).url, "https://[::1]:1");
        assert_eq!(Advert::new(true, "192.168.1.20", 443, None).url, "https://192.168.1.20:443");
        assert_eq!(Advert::new(false, "[::1]", 80, None).url, "http://[::1]:80");
        assert_eq!(Advert::new(false, "127.0.0.1", 80, None).pid, std::process::id());
    }

    #[test]
    fn the_lookup_prefers_an_explicit_url_then_a_live_daemons_file_then_the_default() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let none = locate(None, Some(dir.path()), false);
        assert_eq!(
            none,
            Located { url: DEFAULT_URL.into(), fingerprint: None, source: Source::Default, ignored: None }
        );
        assert_eq!(locate(None, None, false).source, Source::Default);

        let live = Advert {
            url: "https://127.0.0.1:4321".into(),
            pid: std::process::id(),
            fingerprint: Some("AB:CD".into()),
        };
        write(dir.path(), &live);
        assert_eq!(
            locate(None, Some(dir.path()), false),
            Located {
                url: live.url.clone(),
                fingerprint: Some("AB:CD".into()),
                source: Source::StateDir,
                ignored: None
            }
        );
        assert_eq!(
            locate(Some("  "), Some(dir.path()), false).source,
            Source::StateDir,
            "an empty URL is none"
        );
        let explicit = locate(Some("http://127.0.0.1:9"), Some(dir.path()), false);
        assert_eq!(
            (explicit.url.as_str(), explicit.fingerprint, explicit.source),
            ("http://127.0.0.1:9", None, Source::Explicit)
        );
        let same = locate(Some("https://127.0.0.1:4321"), Some(dir.path()), false);
        assert_eq!(
            (same.fingerprint.as_deref(), same.source),
            (Some("AB:CD"), Source::Explicit),
            "pinned all the same"
        );

        // A daemon killed outright left its file: ignored.
        write(dir.path(), &Advert { pid: NO_SUCH_PID, ..live.clone() });
        assert_eq!(locate(None, Some(dir.path()), false).source, Source::Default);
        assert_eq!(locate(Some("https://127.0.0.1:4321"), Some(dir.path()), false).fingerprint, None);
        // Not an advert: ignored.
        for junk in ["", "{}", "[1]", r#"{"url": "ftp://x", "pid": 1}"#, r#"{"url": "http://x", "pid": -1}"#]
        {
            std::fs::write(dir.path().join(FILE), junk).expect("write");
            assert_eq!(locate(None, Some(dir.path()), false).source, Source::Default, "{junk}");
        }
    }

    /// Issue 41, finding 7: a `daemon.json` is believed only in a state directory that is this
    /// user's own and 0700, only when the file is this user's, not writable by others and no
    /// symlink, and only when its pid is a process of this user's other than init. Whatever is not
    /// believed is said, and the lookup goes on as if there were no file.
    #[test]
    fn a_daemon_json_anyone_else_could_have_written_is_ignored_and_said_so() {
        use std::os::unix::fs::PermissionsExt;
        let chmod = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod")
        };
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("state");
        std::fs::create_dir(&dir).expect("mkdir");
        chmod(&dir, 0o700);
        let foreign = Advert {
            url: "http://127.0.0.1:9".into(),
            pid: std::process::id(),
            fingerprint: Some("EV:IL".into()),
        };
        write(&dir, &foreign);
        assert_eq!(locate(None, Some(&dir), false).url, foreign.url, "this user's own: believed");

        // A directory others may write (or read).
        for mode in [0o777, 0o755, 0o770] {
            chmod(&dir, mode);
            let found = locate(None, Some(&dir), false);
            assert_eq!((found.url.as_str(), found.source), (DEFAULT_URL, Source::Default), "{mode:o}");
            let why = found.ignored.expect("said");
            assert!(why.contains("daemon.json") && why.contains(&format!("{mode:04o}")), "{why}");
            // Not even its certificate for the same URL given explicitly.
            let explicit = locate(Some(&foreign.url), Some(&dir), false);
            assert_eq!((explicit.fingerprint, explicit.ignored.is_some()), (None, true));
        }
        chmod(&dir, 0o700);
        // A file others may write.
        chmod(&dir.join(FILE), 0o666);
        let found = locate(None, Some(&dir), false);
        assert_eq!(found.source, Source::Default);
        assert!(found.ignored.as_deref().is_some_and(|w| w.contains("0666")), "{found:?}");
        // A symlink to a file elsewhere (the file itself this user's).
        std::fs::remove_file(dir.join(FILE)).expect("rm");
        let elsewhere = tmp.path().join("planted.json");
        std::fs::write(&elsewhere, foreign.to_json().to_string()).expect("write");
        std::os::unix::fs::symlink(&elsewhere, dir.join(FILE)).expect("symlink");
        let found = locate(None, Some(&dir), false);
        assert_eq!(found.source, Source::Default);
        assert!(
            found.ignored.as_deref().is_some_and(|w| w.ends_with(": it is a symbolic link")),
            "{found:?}"
        );
        std::fs::remove_file(dir.join(FILE)).expect("rm");
        // Something that cannot be opened as a file (a socket) says so, and is no symbolic link.
        let socket = std::os::unix::net::UnixListener::bind(dir.join(FILE)).expect("a socket");
        let found = locate(None, Some(&dir), false);
        drop(socket);
        assert!(found.ignored.as_deref().is_some_and(|w| w.contains(": it cannot be read: ")), "{found:?}");
        std::fs::remove_file(dir.join(FILE)).expect("rm");
        // Init, or no process at all, is no daemon.
        for pid in [1, 0, NO_SUCH_PID] {
            write(&dir, &Advert { pid, ..foreign.clone() });
            let found = locate(None, Some(&dir), false);
            assert_eq!((found.source, found.ignored), (Source::Default, None), "pid {pid}");
        }
        // Another user's file or directory: when the tests are root, one of nobody's is made;
        // otherwise another user's directory cannot be made here, and `config::state_dir`'s test
        // checks the owner against `/`.
        if rustix::process::geteuid().is_root() {
            write(&dir, &foreign);
            let nobody = Some(rustix::fs::Uid::from_raw(65534));
            rustix::fs::chown(dir.join(FILE), nobody, None).expect("chown");
            let found = locate(None, Some(&dir), false);
            assert!(found.ignored.as_deref().is_some_and(|w| w.contains("uid 65534")), "{found:?}");
            rustix::fs::chown(dir.join(FILE), Some(rustix::process::geteuid()), None).expect("chown");
            rustix::fs::chown(&dir, nobody, None).expect("chown");
            let found = locate(None, Some(&dir), false);
            assert!(found.ignored.as_deref().is_some_and(|w| w.contains("uid 65534")), "{found:?}");
            // And another user's process, which root could signal.
            rustix::fs::chown(&dir, Some(rustix::process::geteuid()), None).expect("chown");
            let mut other = std::process::Command::new("setpriv")
                .args([
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "sh",
                    "-c",
                    "echo ready; exec sleep 60",
                ])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("a process of nobody's");
            // Its first line comes once it is nobody's (setpriv changed users before the shell).
            let mut ready = String::new();
            std::io::BufRead::read_line(
                &mut std::io::BufReader::new(other.stdout.take().expect("stdout")),
                &mut ready,
            )
            .expect("ready");
            write(&dir, &Advert { pid: other.id(), ..foreign.clone() });
            let found = locate(None, Some(&dir), false);
            let _ = other.kill();
            let _ = other.wait();
            assert_eq!((found.source, found.ignored), (Source::Default, None), "another user's process");
        }
        // No directory at all: nothing to say.
        let none = locate(None, Some(&tmp.path().join("missing")), false);
        assert_eq!((none.source, none.ignored), (Source::Default, None));
    }

    #[test]
    fn a_published_advert_is_private_and_removed_by_its_own_daemon_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let advert = Advert::new(true, "127.0.0.1", 7776, Some("AB".into()));
        let published = advert.publish(dir.path()).expect("publish");
        let path = dir.path().join(FILE);
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(read(&path), Some(advert.clone()));
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 1, "no temporary file left");
        drop(published);
        assert!(!path.exists(), "removed when the daemon stops");

        // Another daemon wrote its own since: not ours to remove.
        let published = advert.publish(dir.path()).expect("publish");
        write(dir.path(), &Advert { pid: NO_SUCH_PID, ..advert });
        drop(published);
        assert!(path.exists());
    }
}

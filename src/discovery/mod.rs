//! Finding the local daemon. The running daemon writes where it listens to `daemon.json` in its
//! state directory ([`Advert::publish`]): its URL as a client on this machine reaches it, its pid,
//! and, when it serves https, the SHA-256 fingerprint of its certificate, which the command line
//! then trusts exactly (the file is the daemon's own, 0600 in a 0700 directory). With `--mdns` it
//! also advertises itself on the LAN ([`mdns`]). [`locate`] is the one lookup every command that
//! talks to a daemon uses (`mediatord pair`, `devices`, `attach`, `watch`, `approve`, `connect`):
//! an explicit URL wins, then a live daemon's file, then a daemon found on the LAN, then the
//! documented default.
//!
//! A leaf: files, a pid and multicast DNS, nothing of the crate.

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

/// A daemon's advert, if the file holds a well-formed one.
fn read(path: &Path) -> Option<Advert> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path).ok()?.take(MAX_ADVERT_BYTES).read_to_string(&mut text).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
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

/// Whether process `pid` exists (a daemon killed outright leaves its file behind).
fn alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return false };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        // It exists, and belongs to someone else.
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

/// The daemon a command on this machine talks to: `explicit` (`--url`, `MEDIATORD_URL`) if
/// given; else the advert in `state_dir` of a daemon still running; else, when `lan` allows, the
/// first daemon an mDNS browse finds within [`mdns::BROWSE_TIME`]; else [`DEFAULT_URL`].
pub fn locate(explicit: Option<&str>, state_dir: Option<&Path>, lan: bool) -> Located {
    if let Some(url) = explicit.map(|u| u.trim().trim_end_matches('/')).filter(|u| !u.is_empty()) {
        // An explicit URL that is the advertised one still gets the advertised certificate.
        let advert = state_dir.and_then(|d| read(&d.join(FILE))).filter(|a| a.url == url && alive(a.pid));
        return Located {
            url: url.to_owned(),
            fingerprint: advert.and_then(|a| a.fingerprint),
            source: Source::Explicit,
        };
    }
    if let Some(advert) = state_dir.and_then(|d| read(&d.join(FILE))).filter(|a| alive(a.pid)) {
        return Located { url: advert.url, fingerprint: advert.fingerprint, source: Source::StateDir };
    }
    if lan && let Some(found) = mdns::browse(mdns::BROWSE_TIME) {
        return Located { url: found.url, fingerprint: found.fingerprint, source: Source::Lan(found.name) };
    }
    Located { url: DEFAULT_URL.to_owned(), fingerprint: None, source: Source::Default }
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
    fn an_unspecified_bind_is_advertised_as_loopback() {
        assert_eq!(Advert::new(false, "0.0.0.0", 7776, None).url, "http://127.0.0.1:7776");
        assert_eq!(Advert::new(true, "[::]", 1, None).url, "https://[::1]:1");
        assert_eq!(Advert::new(true, "192.168.1.20", 443, None).url, "https://192.168.1.20:443");
        assert_eq!(Advert::new(false, "[::1]", 80, None).url, "http://[::1]:80");
        assert_eq!(Advert::new(false, "127.0.0.1", 80, None).pid, std::process::id());
    }

    #[test]
    fn the_lookup_prefers_an_explicit_url_then_a_live_daemons_file_then_the_default() {
        let dir = tempfile::tempdir().expect("tempdir");
        let none = locate(None, Some(dir.path()), false);
        assert_eq!(none, Located { url: DEFAULT_URL.into(), fingerprint: None, source: Source::Default });
        assert_eq!(locate(None, None, false).source, Source::Default);

        let live = Advert {
            url: "https://127.0.0.1:4321".into(),
            pid: std::process::id(),
            fingerprint: Some("AB:CD".into()),
        };
        write(dir.path(), &live);
        assert_eq!(
            locate(None, Some(dir.path()), false),
            Located { url: live.url.clone(), fingerprint: Some("AB:CD".into()), source: Source::StateDir }
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

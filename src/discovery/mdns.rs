//! Finding the daemon on the LAN: `--mdns` advertises `_mediatord._tcp` (DNS-SD over multicast
//! DNS, RFC 6762/6763) and the command line browses for it when no daemon on this machine wrote
//! its state directory. The record says how to reach the daemon and nothing secret: its port,
//! whether it speaks https, its version, and its certificate's SHA-256 fingerprint over https.
//!
//! What an answer is worth: anyone on the LAN can answer a browse, so a found daemon is a hint the
//! command line names on stderr before it sends a credential (`--url` and `--no-mdns` say where to
//! go instead); over https the fingerprint is pinned, so the connection reaches the advertiser
//! and nobody between.
//!
//! mdns-sd runs its responder on a thread of its own; [`Announcer`] stops it (a goodbye packet
//! first) when dropped.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use mdns_sd::{IfKind, ServiceDaemon, ServiceEvent, ServiceInfo};

/// The DNS-SD service type (RFC 6763 §7: `_name._tcp`, the name at most 15 characters).
pub const SERVICE_TYPE: &str = "_mediatord._tcp.local.";
/// How long the command line browses before it gives up: an mDNS responder answers a query within
/// 20–120 ms (RFC 6762 §6), and mdns-sd repeats its query after 1 s, so two rounds fit.
pub const BROWSE_TIME: Duration = Duration::from_millis(2500);
/// How long a stopped announcer waits for its goodbye packets to be sent.
const GOODBYE_WAIT: Duration = Duration::from_millis(500);

/// What the daemon publishes besides its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub port: u16,
    pub https: bool,
    /// SHA-256 of the certificate, `AB:CD:…` (95 characters, within a TXT string's 255).
    pub fingerprint: Option<String>,
}

impl Record {
    /// The TXT record's key/value pairs (RFC 6763 §6): `https=1|0`, `version`, and `fp` over
    /// https.
    pub fn txt(&self) -> Vec<(&'static str, String)> {
        let mut txt = vec![
            ("https", if self.https { "1" } else { "0" }.to_owned()),
            ("version", env!("CARGO_PKG_VERSION").to_owned()),
        ];
        if let Some(fp) = &self.fingerprint {
            txt.push(("fp", fp.clone()));
        }
        txt
    }
}

/// A daemon found on the LAN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The instance name it advertised (`mediatord on HOST port PORT`).
    pub name: String,
    pub url: String,
    pub fingerprint: Option<String>,
}

/// This machine's name, for the record's host and instance names.
fn hostname() -> String {
    let name = rustix::system::uname().nodename().to_string_lossy().into_owned();
    // A DNS label: letters, digits and hyphens.
    let label: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).collect();
    if label.is_empty() { "mediatord".to_owned() } else { label }
}

/// The running advertisement; dropping it withdraws it.
pub struct Announcer {
    daemon: ServiceDaemon,
    /// The address the daemon listens on, and what it first published: a certificate reload
    /// publishes the record again with the new fingerprint.
    bind: IpAddr,
    record: Record,
    fullname: String,
}

impl std::fmt::Debug for Announcer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Announcer").field("name", &self.fullname).finish()
    }
}

/// The service for a daemon bound to `bind`: every LAN interface's addresses (kept up to date) for
/// an unspecified address, else that address alone.
fn service(bind: IpAddr, record: &Record) -> Result<ServiceInfo, String> {
    let host = hostname();
    let instance = format!("mediatord on {host} port {}", record.port);
    let ip = if bind.is_unspecified() { String::new() } else { bind.to_string() };
    let txt = record.txt();
    let mut info =
        ServiceInfo::new(SERVICE_TYPE, &instance, &format!("{host}.local."), ip, record.port, txt.as_slice())
            .map_err(|e| format!("--mdns: {e}"))?;
    if bind.is_unspecified() {
        info = info.enable_addr_auto();
    } else {
        info.set_interfaces(vec![IfKind::Addr(bind)]);
    }
    Ok(info)
}

impl Announcer {
    /// Advertises a daemon bound to `bind` ([`service`]). A loopback address is refused: no
    /// other machine could reach it.
    pub fn start(bind: IpAddr, record: Record) -> Result<Announcer, String> {
        if bind.is_loopback() {
            return Err(format!(
                "--mdns advertises the daemon on the LAN, but it listens on {bind} (loopback), which no other machine reaches: listen on a LAN address (--hostname 0.0.0.0 or the machine's address), or drop --mdns"
            ));
        }
        let info = service(bind, &record)?;
        let fullname = info.get_fullname().to_owned();
        let daemon = ServiceDaemon::new().map_err(|e| format!("--mdns: cannot start the responder: {e}"))?;
        daemon.register(info).map_err(|e| format!("--mdns: cannot advertise: {e}"))?;
        Ok(Announcer { daemon, bind, record, fullname })
    }

    /// Advertises `fingerprint` from now on (a reloaded certificate).
    pub fn renew(&self, fingerprint: &str) -> Result<(), String> {
        let record = Record { fingerprint: Some(fingerprint.to_owned()), ..self.record.clone() };
        let mut info = service(self.bind, &record)?;
        // The name was probed when first published: it is ours.
        info.set_requires_probe(false);
        self.daemon.register(info).map_err(|e| format!("--mdns: cannot advertise: {e}"))
    }
}

impl Drop for Announcer {
    fn drop(&mut self) {
        // Goodbye packets (TTL 0) tell browsers the daemon is gone instead of leaving it cached.
        if let Ok(done) = self.daemon.unregister(&self.fullname) {
            let _ = done.recv_timeout(GOODBYE_WAIT);
        }
        if let Ok(done) = self.daemon.shutdown() {
            let _ = done.recv_timeout(GOODBYE_WAIT);
        }
    }
}

/// The URL and pin of a resolved service, if it has an address a client can dial (IPv4 first;
/// an IPv6 link-local address needs a zone a URL cannot carry; a loopback address is the
/// advertiser's own, not one to dial from elsewhere).
fn found(name: &str, port: u16, addresses: &[IpAddr], txt: impl Fn(&str) -> Option<String>) -> Option<Found> {
    let mut dialable: Vec<&IpAddr> = addresses
        .iter()
        .filter(|ip| !ip.is_loopback() && !matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local()))
        .collect();
    // IPv4 first, then the lowest address: the same daemon gives the same URL every time.
    dialable.sort_by_key(|ip| (!ip.is_ipv4(), **ip));
    let ip = dialable.first()?;
    let https = txt("https").as_deref() == Some("1");
    let scheme = if https { "https" } else { "http" };
    let host = match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let fingerprint = if https { txt("fp").filter(|fp| !fp.is_empty()) } else { None };
    let name = name.trim_end_matches(SERVICE_TYPE).trim_end_matches('.').to_owned();
    Some(Found { name, url: format!("{scheme}://{host}:{port}"), fingerprint })
}

/// Browses for `_mediatord._tcp` for at most `within`: the first daemon resolved, or `None`.
pub fn browse(within: Duration) -> Option<Found> {
    let daemon = ServiceDaemon::new().ok()?;
    let events = daemon.browse(SERVICE_TYPE).ok()?;
    let deadline = Instant::now() + within;
    let mut first = None;
    while first.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match events.recv_timeout(left) {
            Ok(ServiceEvent::ServiceResolved(service)) => {
                let addresses: Vec<IpAddr> = service.addresses.iter().map(|a| a.to_ip_addr()).collect();
                let props = &service.txt_properties;
                first = found(&service.fullname, service.port, &addresses, |k| {
                    props.get_property_val_str(k).map(str::to_owned)
                });
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    if let Ok(done) = daemon.shutdown() {
        let _ = done.recv_timeout(GOODBYE_WAIT);
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_says_https_the_version_and_the_fingerprint_only_over_https() {
        let plain = Record { port: 7776, https: false, fingerprint: None };
        assert_eq!(
            plain.txt(),
            vec![("https", "0".to_owned()), ("version", env!("CARGO_PKG_VERSION").to_owned())]
        );
        let fp = ["AB"; 32].join(":");
        let tls = Record { port: 7776, https: true, fingerprint: Some(fp.clone()) };
        assert_eq!(tls.txt()[0], ("https", "1".to_owned()));
        assert_eq!(tls.txt()[2], ("fp", fp.clone()));
        // A TXT string is at most 255 bytes, its length byte aside.
        assert!(tls.txt().iter().all(|(k, v)| k.len() + 1 + v.len() <= 255));
    }

    #[test]
    fn a_resolved_service_becomes_a_url_preferring_ipv4_and_pinning_only_https() {
        let txt = |https: &'static str, fp: &'static str| {
            move |k: &str| match k {
                "https" => Some(https.to_owned()),
                "fp" => Some(fp.to_owned()),
                _ => None,
            }
        };
        let v4: IpAddr = "10.9.0.1".parse().expect("ip");
        let v6: IpAddr = "fd00::1".parse().expect("ip");
        let local6: IpAddr = "fe80::1".parse().expect("ip");
        let name = format!("mediatord on box port 7776.{SERVICE_TYPE}");
        assert_eq!(
            found(&name, 7776, &[v6, v4], txt("1", "AB:CD")),
            Some(Found {
                name: "mediatord on box port 7776".into(),
                url: "https://10.9.0.1:7776".into(),
                fingerprint: Some("AB:CD".into())
            })
        );
        let plain = found(&name, 80, &[local6, v6], txt("0", "AB:CD")).expect("found");
        assert_eq!((plain.url.as_str(), plain.fingerprint), ("http://[fd00::1]:80", None));
        let loopback: IpAddr = "127.0.0.1".parse().expect("ip");
        let other: IpAddr = "10.9.0.0".parse().expect("ip");
        assert_eq!(
            found(&name, 80, &[loopback, v6, v4, other], txt("0", "")).expect("found").url,
            "http://10.9.0.0:80"
        );
        assert_eq!(
            found(&name, 80, &[local6, loopback], txt("1", "")),
            None,
            "no address to dial from elsewhere"
        );
        assert_eq!(found(&name, 80, &[v4], txt("1", "")).and_then(|f| f.fingerprint), None);
    }

    #[test]
    fn a_loopback_daemon_is_not_advertised() {
        let record = Record { port: 1, https: false, fingerprint: None };
        let refused =
            Announcer::start("127.0.0.1".parse().expect("ip"), record.clone()).expect_err("refused");
        assert!(refused.contains("loopback"), "{refused}");
        assert!(Announcer::start("::1".parse().expect("ip"), record).is_err());
    }
}

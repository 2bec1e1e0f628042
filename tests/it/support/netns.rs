//! A network namespace a test makes, joined to this one by a veth pair: a client in it is on
//! another host as far as a daemon here can tell (its address is not loopback, and its socket is
//! not in this namespace). Made with `ip netns` (root), removed on drop. Nothing leaves the two
//! namespaces: the pair's /30 is private and no route is added.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Namespaces made by this process so far (each gets its own /30 and names).
static MADE: AtomicU32 = AtomicU32::new(0);

pub(crate) struct Netns {
    pub(crate) name: String,
    /// This namespace's end of the pair (a daemon here binds it to be reached from inside).
    pub(crate) host_ip: String,
    host_if: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {} (network namespaces need root and iproute2)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

impl Netns {
    pub(crate) fn new() -> Netns {
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{n}", std::process::id() % 100_000);
        let (name, host_if, ns_if) = (format!("mdt{tag}"), format!("mdh{tag}"), format!("mdn{tag}"));
        // A /30 out of 10.201.0.0/16 per namespace, picked from the pid and the count.
        let slot = (std::process::id().wrapping_mul(7).wrapping_add(n)) % 16_384;
        let (hi, lo) = (slot / 64, (slot % 64) * 4);
        let host_ip = format!("10.201.{hi}.{}", lo + 1);
        let ns_ip = format!("10.201.{hi}.{}", lo + 2);
        ip(&["netns", "add", &name]);
        let made = Netns { name: name.clone(), host_ip: host_ip.clone(), host_if: host_if.clone() };
        ip(&["link", "add", &host_if, "type", "veth", "peer", "name", &ns_if]);
        ip(&["link", "set", &ns_if, "netns", &name]);
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&["-n", &name, "addr", "add", &format!("{ns_ip}/30"), "dev", &ns_if]);
        ip(&["-n", &name, "link", "set", &ns_if, "up"]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        made
    }

    /// `curl` run inside the namespace: (HTTP status, body). Bounded by `--max-time`.
    pub(crate) fn curl(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (u16, String) {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, "curl", "-sS", "--max-time", "10", "-X", method]);
        cmd.args(["-o", "-", "-w", "\n%{http_code}"]);
        for (k, v) in headers {
            cmd.arg("-H").arg(format!("{k}: {v}"));
        }
        if let Some(b) = body {
            cmd.args(["-H", "Content-Type: application/json", "--data-binary", b]);
        }
        let out = cmd.arg(url).output().expect("run curl in the namespace");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (status.trim().parse().unwrap_or(0), body.to_owned())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace takes its end of the pair, and with it ours.
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
        let _ = Command::new("ip").args(["link", "del", &self.host_if]).output();
    }
}

//! Finding the daemon (`src/discovery/`): the running daemon writes its URL (and, over https, its
//! certificate's fingerprint) to `daemon.json` in its state directory, and `mediatord pair`,
//! `devices`, `attach`, `watch`, `approve` and `connect` go there instead of assuming
//! http://127.0.0.1:7776; with `--mdns` it advertises itself on the LAN, and they browse for it
//! there when no daemon on this machine wrote its file. The LAN is a network namespace each test
//! makes ([`Lan`]): nothing goes out on the machine's own network.

use std::path::Path;
use std::time::Duration;

use crate::support::*;

const TOKEN: &str = "operator-secret";

/// `mediatord <args>` with the operator token and `env`, and nothing pointing at the daemon but
/// what `env` says: (exit code, stdout, stderr).
async fn cli(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let home = tempfile::tempdir().expect("tempdir");
    let mut cmd = tokio::process::Command::new(bin());
    cmd.args(args)
        .env_remove("MEDIATORD_URL")
        .env_remove("MEDIATORD_STATE_DIR")
        // Outside a test's own network namespace, never a browse on the machine's LAN.
        .env("MEDIATORD_NO_MDNS", "1")
        .env("MEDIATORD_TOKEN", TOKEN)
        .env("HOME", home.path())
        .env("XDG_STATE_HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(WAIT, cmd.output()).await.expect("the command ends in time").expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn advert(state: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(state.join("daemon.json")).expect("daemon.json");
    serde_json::from_str(&text).expect("JSON")
}

#[tokio::test]
async fn pair_and_devices_find_a_daemon_on_any_port_through_its_state_dir() {
    let root = tempfile::tempdir().expect("tempdir");
    let state = root.path().join("state");
    let state_dir = state.to_str().expect("utf-8");
    let mut d = Daemon::start(&["--token", TOKEN, "--state-dir", state_dir]);
    let written = advert(&state);
    assert_eq!(written["url"], format!("http://127.0.0.1:{}", d.port));
    assert_eq!(written["pid"], d.pid());
    assert!(written["fingerprint"].is_null());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(state.join("daemon.json")).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let (code, out, err) = cli(&["devices"], &[("MEDIATORD_STATE_DIR", state_dir)]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("no paired devices") || out.contains("ID"), "{out}");
    let (code, out, err) = cli(&["pair", "--state-dir", state_dir, "--name", "phone"], &[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("http://127.0.0.1:{}/#pair=", d.port)), "{out}");

    // Without the state directory, the default address is tried (nothing listens on the test's
    // behalf there: the message names it).
    let (code, _, err) =
        cli(&["devices", "--url", "http://127.0.0.1:1"], &[("MEDIATORD_STATE_DIR", state_dir)]).await;
    assert_eq!(code, 1, "an explicit --url wins over the file: {err}");
    assert!(err.contains("127.0.0.1:1"), "{err}");

    d.signal(rustix::process::Signal::TERM);
    assert!(d.wait_exit(Duration::from_secs(30)).success());
    assert!(!state.join("daemon.json").exists(), "a stopped daemon removes its file");
}

#[tokio::test]
async fn over_https_the_command_line_trusts_the_certificate_the_daemon_advertised() {
    let ca = TestCa::new();
    let root = tempfile::tempdir().expect("tempdir");
    let (crt, key) = ca.leaf(root.path(), "server");
    let state = root.path().join("state");
    let state_dir = state.to_str().expect("utf-8");
    let d = Daemon::start(&[
        "--token",
        TOKEN,
        "--state-dir",
        state_dir,
        "--tls-cert",
        crt.to_str().expect("utf-8"),
        "--tls-key",
        key.to_str().expect("utf-8"),
    ]);
    let written = advert(&state);
    assert_eq!(written["url"], format!("https://127.0.0.1:{}", d.port));
    let der =
        <rustls::pki_types::CertificateDer<'_> as rustls::pki_types::pem::PemObject>::from_pem_file(&crt)
            .expect("der");
    assert_eq!(written["fingerprint"], mediatord::tls::fingerprint_of(&der));

    let (code, out, err) = cli(&["pair", "--name", "phone"], &[("MEDIATORD_STATE_DIR", state_dir)]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("https://127.0.0.1:{}/#pair=", d.port)), "{out}");

    // The same URL without the advert: the system's roots do not know the test's CA.
    let url = format!("https://127.0.0.1:{}", d.port);
    let (code, _, err) = cli(&["devices", "--url", &url], &[]).await;
    assert_eq!(code, 1);
    assert!(err.contains("answered, but its certificate is not trusted"), "{err}");
    // A stranger's fingerprint in the file is refused too: the pin is what is trusted.
    let mut forged = written.clone();
    forged["fingerprint"] = serde_json::json!("00:11");
    std::fs::write(state.join("daemon.json"), forged.to_string()).expect("write");
    let (code, _, err) = cli(&["devices"], &[("MEDIATORD_STATE_DIR", state_dir)]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("it is not the certificate that was pinned"), "{err}");
}

/// Issue #44: a certificate the command line does not trust was "cannot reach the daemon …
/// invalid peer certificate: UnknownIssuer. Is the daemon running?". It says the daemon answered,
/// why its certificate is not trusted in words, and the two ways in: its CA, or the pinned URL.
#[tokio::test]
async fn an_untrusted_certificate_is_said_to_be_the_daemons_answer_with_the_ways_to_trust_it() {
    let ca = TestCa::new();
    let root = tempfile::tempdir().expect("tempdir");
    let (crt, key) = ca.leaf(root.path(), "server");
    let state = root.path().join("state");
    let state_dir = state.to_str().expect("utf-8");
    let (crt, key) = (crt.to_str().expect("utf-8"), key.to_str().expect("utf-8"));
    let d = Daemon::start(&["--token", TOKEN, "--state-dir", state_dir, "--tls-cert", crt, "--tls-key", key]);
    // Another name for the same daemon than the one daemon.json pins (`https://127.0.0.1:…`).
    let other_name = format!("https://localhost:{}", d.port);
    let env = [("MEDIATORD_STATE_DIR", state_dir)];
    let (code, _, err) = cli(&["devices", "--url", &other_name], &env).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "the daemon at {other_name} answered, but its certificate is not trusted: it was issued by a CA this machine does not trust"
        )),
        "{err}"
    );
    assert!(err.contains("trust its CA with SSL_CERT_FILE, or use the URL in daemon.json (pinned"), "{err}");
    assert!(!err.contains("Is the daemon running") && !err.contains("UnknownIssuer"), "{err}");
    assert!(
        !err.contains("state directory; it may have stopped"),
        "how it was found is beside the point: {err}"
    );

    // Both ways in work: the CA in SSL_CERT_FILE, or the URL daemon.json names.
    let ca_file = ca.pem_file(root.path());
    let ca_file = ca_file.to_str().expect("utf-8");
    let (code, out, err) =
        cli(&["devices", "--url", &other_name], &[env[0], ("SSL_CERT_FILE", ca_file)]).await;
    assert_eq!(
        (code, out.starts_with("no paired devices") || out.starts_with("ID")),
        (0, true),
        "{out}{err}"
    );
    let pinned = advert(&state)["url"].as_str().expect("url").to_owned();
    let (code, _, err) = cli(&["devices", "--url", &pinned], &env).await;
    assert_eq!(code, 0, "{err}");
}

/// Issue #44: the most common self-signed certificate (`openssl req -x509`, which marks it
/// CA:TRUE) was the TLS library's `Other(OtherError(CaUsedAsEndEntity))`, and no SSL_CERT_FILE
/// can make it trusted. It is said in words, with the way that works: the pin.
#[tokio::test]
async fn a_self_signed_ca_certificate_is_said_in_words_and_trusted_only_through_the_pin() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-signed");
    let (crt, key_file) = (root.path().join("self.crt"), root.path().join("self.key"));
    std::fs::write(&crt, cert.pem()).expect("write cert");
    std::fs::write(&key_file, key.serialize_pem()).expect("write key");
    // A key others may read refuses the boot (#41 finding 9).
    std::fs::set_permissions(&key_file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod key");
    let state = root.path().join("state");
    let state_dir = state.to_str().expect("utf-8");
    let (crt, key_file) = (crt.to_str().expect("utf-8"), key_file.to_str().expect("utf-8"));
    let d = Daemon::start(&[
        "--token",
        TOKEN,
        "--state-dir",
        state_dir,
        "--tls-cert",
        crt,
        "--tls-key",
        key_file,
    ]);
    let url = format!("https://127.0.0.1:{}", d.port);

    // Trusting the certificate itself does not help: a CA is never a server's own certificate.
    let (code, _, err) = cli(&["devices", "--url", &url], &[("SSL_CERT_FILE", crt)]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("answered, but its certificate is not trusted: it is a CA certificate (CA:TRUE, what a bare `openssl req -x509` makes)"),
        "{err}"
    );
    assert!(err.contains("no CA this machine trusts can change that: use the URL in daemon.json"), "{err}");
    assert!(!err.contains("OtherError") && !err.contains("CaUsedAsEndEntity"), "{err}");
    // The pin trusts exactly that certificate.
    let (code, _, err) = cli(&["devices", "--url", &url], &[("MEDIATORD_STATE_DIR", state_dir)]).await;
    assert_eq!(code, 0, "{err}");
}

#[tokio::test]
async fn watch_and_approve_trust_the_certificate_the_daemon_advertised() {
    let ca = TestCa::new();
    let root = tempfile::tempdir().expect("tempdir");
    let (crt, key) = ca.leaf(root.path(), "server");
    let state = root.path().join("state");
    let state_dir = state.to_str().expect("utf-8");
    let (crt, key) = (crt.to_str().expect("utf-8"), key.to_str().expect("utf-8"));
    let _d =
        Daemon::start(&["--token", TOKEN, "--state-dir", state_dir, "--tls-cert", crt, "--tls-key", key]);
    // The daemon answers (no such session): the connection was made, over the pinned certificate.
    let (code, _, err) =
        cli(&["approve", "no-such-session", "--option", "allow_once"], &[("MEDIATORD_STATE_DIR", state_dir)])
            .await;
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("not trusted") && err.contains("404"), "{err}");
    // Without the file, the same command cannot trust the daemon: the pin made the difference.
    let url = advert(&state)["url"].as_str().expect("url").to_owned();
    let (code, _, err) =
        cli(&["approve", "no-such-session", "--option", "allow_once", "--url", &url], &[]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("it was issued by a CA this machine does not trust"), "{err}");
}

/// A LAN of the test's own: a network namespace (`unshare -n`) held by a process waiting on its
/// stdin, with a veth pair up and multicast routed through it. Commands run in it through
/// `nsenter`; dropping the `Lan` closes the holder's stdin and the namespace goes with it.
struct Lan {
    holder: tokio::process::Child,
    pid: u32,
    /// The daemon's address on this LAN.
    address: &'static str,
}

/// The namespace's setup: loopback up, a veth pair `lan0`/`lan1` with an address on `lan0`,
/// multicast on, and multicast routed through `lan0` (an mDNS responder and browser on the same
/// host meet through the kernel's multicast loopback).
const LAN_SETUP: &str = "set -e
ip link set lo up
ip link add lan0 type veth peer name lan1
ip addr add 10.77.0.1/24 dev lan0
ip link set lan0 multicast on
ip link set lan1 up
ip link set lan0 up
ip route add 224.0.0.0/4 dev lan0
echo ready
exec cat";

impl Lan {
    async fn new() -> Lan {
        use tokio::io::AsyncBufReadExt;
        let mut holder = tokio::process::Command::new("unshare")
            .args(["-n", "sh", "-c", LAN_SETUP])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("unshare (util-linux; the test runs as root, as CI does)");
        let pid = holder.id().expect("pid");
        let mut out = tokio::io::BufReader::new(holder.stdout.take().expect("stdout")).lines();
        let ready = tokio::time::timeout(WAIT, out.next_line()).await.expect("set up in time").expect("read");
        assert_eq!(ready.as_deref(), Some("ready"), "the namespace's setup failed (needs root, ip, veth)");
        Lan { holder, pid, address: "10.77.0.1" }
    }

    /// `program args…` inside the namespace, with a fresh HOME and nothing pointing at a daemon.
    fn command(&self, home: &Path, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("nsenter");
        cmd.args(["-t", &self.pid.to_string(), "-n", "--"])
            .args(args)
            .env_remove("MEDIATORD_URL")
            .env_remove("MEDIATORD_STATE_DIR")
            .env_remove("MEDIATORD_NO_MDNS")
            .env_remove("MEDIATORD_TOKEN")
            .env("HOME", home)
            .env("XDG_STATE_HOME", home)
            .kill_on_drop(true);
        cmd
    }

    /// A command of ours in the namespace: (exit code, stdout, stderr).
    async fn cli(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        let home = tempfile::tempdir().expect("tempdir");
        let mut cmd = self.command(home.path(), &[&[bin()], args].concat());
        cmd.env("MEDIATORD_TOKEN", TOKEN);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = tokio::time::timeout(WAIT, cmd.output()).await.expect("ends in time").expect("run");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `mediatord serve --mdns` on every address of the namespace, with a state directory of its
    /// own (which the commands are not shown): the daemon and its port.
    async fn serve(&self, state: &Path, extra: &[&str]) -> (tokio::process::Child, u16) {
        use tokio::io::AsyncBufReadExt;
        let state = state.to_str().expect("utf-8");
        let home = state; // the daemon's own; nothing else reads it
        let args = [
            &[bin(), "serve", "--mdns", "--hostname", "0.0.0.0", "--port", "0", "--agent", "demo"][..],
            &["--token", TOKEN, "--state-dir", state],
            extra,
        ]
        .concat();
        let mut daemon = self
            .command(Path::new(home), &args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn the daemon");
        let mut out = tokio::io::BufReader::new(daemon.stdout.take().expect("stdout")).lines();
        let line = tokio::time::timeout(WAIT, out.next_line()).await.expect("starts in time").expect("read");
        let line = line.expect("the startup line");
        let port = line.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
        (daemon, port)
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        let _ = self.holder.start_kill();
    }
}

/// Ends a daemon as a person would (SIGTERM) and waits for it.
async fn stop(mut daemon: tokio::process::Child) {
    let pid = daemon.id().and_then(|p| rustix::process::Pid::from_raw(p as i32)).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("signal");
    let status = tokio::time::timeout(WAIT, daemon.wait()).await.expect("stops in time").expect("wait");
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn pair_and_devices_find_a_daemon_on_the_lan_over_mdns_and_say_so() {
    let lan = Lan::new().await;
    let root = tempfile::tempdir().expect("tempdir");
    let (daemon, port) = lan.serve(&root.path().join("state"), &[]).await;
    let at = format!("http://{}:{port}", lan.address);

    // No state directory tells these commands anything: the LAN does.
    let (code, out, err) = lan.cli(&["pair", "--name", "phone"], &[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("on the LAN (mDNS) at {at}")), "it says where it went: {err}");
    assert!(out.contains(&format!("{at}/#pair=")), "{out}");
    let (code, out, err) = lan.cli(&["devices"], &[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("phone") || out.starts_with("ID"), "{out}");

    // --no-mdns (or MEDIATORD_NO_MDNS) keeps to this machine: the default address, where nothing
    // listens in this namespace.
    let (code, _, err) = lan.cli(&["devices", "--no-mdns"], &[]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("127.0.0.1:7776") && !err.contains("mDNS"), "{err}");
    let (code, _, err) = lan.cli(&["devices"], &[("MEDIATORD_NO_MDNS", "1")]).await;
    assert!(code == 1 && err.contains("127.0.0.1:7776"), "{err}");

    // A stopped daemon is no longer found.
    stop(daemon).await;
    let (code, _, err) = lan.cli(&["devices"], &[]).await;
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("mDNS") && err.contains("127.0.0.1:7776"), "{err}");
}

#[tokio::test]
async fn over_https_the_lan_advert_carries_the_fingerprint_and_connect_pins_it() {
    let lan = Lan::new().await;
    let ca = TestCa::new();
    let root = tempfile::tempdir().expect("tempdir");
    let (crt, key) = ca.leaf(root.path(), "server");
    let (crt, key) = (crt.to_str().expect("utf-8"), key.to_str().expect("utf-8"));
    let (daemon, port) = lan.serve(&root.path().join("state"), &["--tls-cert", crt, "--tls-key", key]).await;
    let der =
        <rustls::pki_types::CertificateDer<'_> as rustls::pki_types::pem::PemObject>::from_pem_file(crt)
            .expect("der");
    let fingerprint = mediatord::tls::fingerprint_of(&der);
    let at = format!("https://{}:{port}", lan.address);

    // The test's CA is in no trust store these commands read: only the advertised pin lets them in.
    let (code, out, err) = lan.cli(&["devices"], &[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("at {at}, certificate {fingerprint}")), "{err}");
    assert!(out.starts_with("ID"), "{out}");
    let (code, _, err) = lan.cli(&["devices", "--url", &at], &[]).await;
    assert_eq!(code, 1, "the same daemon without the pin is not trusted: {err}");
    assert!(err.contains("it was issued by a CA this machine does not trust"), "{err}");

    // `connect`, found the same way, speaks ACP over wss:// to the pinned daemon.
    let home = tempfile::tempdir().expect("tempdir");
    let mut editor = lan
        .command(home.path(), &[bin(), "connect"])
        .env("MEDIATORD_TOKEN", TOKEN)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn connect");
    let hello = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}"#;
    let mut stdin = editor.stdin.take().expect("stdin");
    tokio::io::AsyncWriteExt::write_all(&mut stdin, format!("{hello}\n").as_bytes()).await.expect("write");
    let mut out = tokio::io::BufReader::new(editor.stdout.take().expect("stdout"));
    let mut line = String::new();
    tokio::time::timeout(WAIT, tokio::io::AsyncBufReadExt::read_line(&mut out, &mut line))
        .await
        .expect("answered in time")
        .expect("read");
    let answer: serde_json::Value = serde_json::from_str(&line).expect("JSON-RPC");
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["result"]["protocolVersion"], 1, "{answer}");
    drop(stdin);
    let done = tokio::time::timeout(WAIT, editor.wait_with_output()).await.expect("ends").expect("wait");
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(err.contains(&format!("on the LAN (mDNS) at {at}")), "{err}");
    assert!(done.status.success(), "{err}");
    stop(daemon).await;
}

/// Issue #29: `mediatord devices revoke ID --url …` was refused (the flag worked only before the
/// subcommand), and a daemon not found was "connection refused" with no word on how it was looked
/// for. The flags follow any subcommand; an unreachable daemon's message says where the address
/// came from and how to give another.
#[tokio::test]
async fn the_daemon_flags_follow_a_subcommand_and_an_unreachable_daemon_says_how_it_was_found() {
    let d = Daemon::start(&["--token", TOKEN]);
    let url = format!("http://127.0.0.1:{}", d.port);
    let (device_id, _) = d.pair_device(Some(TOKEN), "phone", "voter").await;
    let (code, _, err) = cli(&["devices", "revoke", &device_id, "--url", &url], &[]).await;
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&["devices", "list", "--url", &url], &[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains(&device_id), "revoked: {out}");

    let (code, _, err) = cli(&["pair", "--url", "http://127.0.0.1:1"], &[]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("127.0.0.1:1") && err.contains("--url (or MEDIATORD_URL) names another address"),
        "{err}"
    );
    // An address a daemon left behind in its state directory.
    let root = tempfile::tempdir().expect("tempdir");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    // The pid of a live process (this test's): a dead one's file is ignored.
    let advert = format!(r#"{{"url": "http://127.0.0.1:1", "pid": {}}}"#, std::process::id());
    std::fs::write(root.path().join("daemon.json"), advert).expect("write");
    let state_dir = root.path().to_str().expect("utf-8");
    let (code, _, err) = cli(&["devices", "--state-dir", state_dir], &[]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("wrote to its state directory; it may have stopped"), "{err}");
}

/// Issue 41, finding 7: a `daemon.json` in a state directory anyone may write (0777, and another
/// user's when the tests are root) redirected the operator's token to a listener of the
/// planter's. The command line now believes the file only in a directory that is the user's own
/// and 0700: it says it ignored it, and the planted listener is never reached.
#[tokio::test]
async fn a_daemon_json_planted_in_a_directory_others_may_write_is_ignored_and_gets_no_token() {
    use std::os::unix::fs::PermissionsExt;
    let planted = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    planted.set_nonblocking(true).expect("nonblocking");
    let port = planted.local_addr().expect("addr").port();
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("shared");
    std::fs::create_dir(&dir).expect("mkdir");
    let advert = format!(r#"{{"url": "http://127.0.0.1:{port}", "pid": {}}}"#, std::process::id());
    std::fs::write(dir.join("daemon.json"), advert).expect("write");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    if rustix::process::geteuid().is_root() {
        // As another user would have made it.
        rustix::fs::chown(&dir, Some(rustix::fs::Uid::from_raw(65534)), None).expect("chown");
    }
    let state_dir = dir.to_str().expect("utf-8");
    let (_, _, err) = cli(&["devices", "--state-dir", state_dir], &[]).await;
    assert!(
        err.contains(&format!("ignored {state_dir}/daemon.json")) && err.contains("not this user's own"),
        "{err}"
    );
    // The command has ended: a connection it made would be waiting to be accepted.
    assert!(
        planted.accept().is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "the planted listener was reached"
    );
}

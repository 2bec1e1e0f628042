//! Finding the local daemon (`src/discovery.rs`): the running daemon writes its URL (and, over
//! https, its certificate's fingerprint) to `daemon.json` in its state directory, and `mediatord
//! pair` and `devices` go there instead of assuming http://127.0.0.1:7776.

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
        .env("MEDIATORD_TOKEN", TOKEN)
        .env("HOME", home.path())
        .env("XDG_STATE_HOME", home.path())
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
    assert!(err.contains("over https") && err.contains("UnknownIssuer"), "{err}");
    // A stranger's fingerprint in the file is refused too: the pin is what is trusted.
    let mut forged = written.clone();
    forged["fingerprint"] = serde_json::json!("00:11");
    std::fs::write(state.join("daemon.json"), forged.to_string()).expect("write");
    let (code, _, err) = cli(&["devices"], &[("MEDIATORD_STATE_DIR", state_dir)]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("over https"), "{err}");
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
    // The pid of a live process (this test's): a dead one's file is ignored.
    let advert = format!(r#"{{"url": "http://127.0.0.1:1", "pid": {}}}"#, std::process::id());
    std::fs::write(root.path().join("daemon.json"), advert).expect("write");
    let state_dir = root.path().to_str().expect("utf-8");
    let (code, _, err) = cli(&["devices", "--state-dir", state_dir], &[]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("wrote to its state directory; it may have stopped"), "{err}");
}

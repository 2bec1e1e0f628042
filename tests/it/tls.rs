//! The https listener (`--tls-cert`/`--tls-key`), against a CA each test makes with rcgen and
//! clients that trust only that CA: the quick start over https, plain http to the https port, a
//! bad pair refused at boot, and SIGHUP swapping the certificate under open connections.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

/// A daemon serving https with a fresh leaf of `ca`; the test's clients trust only `ca`.
fn https_daemon(ca: &TestCa, dir: &Path, args: &[&str]) -> (Daemon, PathBuf, PathBuf) {
    let (crt, key) = ca.leaf(dir, "server");
    let mut full =
        vec!["--tls-cert", crt.to_str().expect("utf-8"), "--tls-key", key.to_str().expect("utf-8")];
    full.extend(args);
    let d = Daemon::start(&full).trusting(&ca.pem());
    (d, crt, key)
}

#[tokio::test]
async fn the_quick_start_runs_over_https_for_a_client_that_trusts_the_ca() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, _, _) = https_daemon(&ca, dir.path(), &[]);
    assert!(d.base.starts_with("https://"), "the startup line says https: {}", d.base);

    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write over-tls.txt sealed").await;
    let rid = request_id(&request);
    assert_eq!(d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.status, 200);
    sse.until_type("turn_complete").await;
    assert_eq!(std::fs::read_to_string(d.workspace.join("over-tls.txt")).expect("written"), "sealed");

    // The pairing URL a phone opens is https, like the daemon.
    let pairing = d.post("/devices/pairing", None, json!({"name": "phone"})).await.ok();
    let url = pairing["url"].as_str().expect("url");
    assert!(url.starts_with(&format!("https://127.0.0.1:{}/#pair=", d.port)), "{url}");

    // A client that trusts only the system's roots refuses the daemon's certificate.
    let stranger = reqwest::Client::builder().no_proxy().use_rustls_tls().build().expect("client");
    let err = stranger.get(d.url("/health")).send().await.expect_err("an unknown CA");
    assert!(format!("{err:?}").contains("UnknownIssuer"), "{err:?}");
}

#[tokio::test]
async fn plain_http_to_the_https_port_is_told_to_use_https() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, _, _) = https_daemon(&ca, dir.path(), &[]);
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", d.port)).await.expect("connect");
    let head = format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", d.port);
    tcp.write_all(head.as_bytes()).await.expect("write");
    let mut answer = String::new();
    tokio::time::timeout(WAIT, tcp.read_to_string(&mut answer)).await.expect("answered").expect("read");
    assert!(answer.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{answer}");
    let body = answer.split_once("\r\n\r\n").expect("a body").1;
    let body: serde_json::Value = serde_json::from_str(body).expect("JSON");
    assert_eq!(body["code"], "https_required", "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("https://")), "{body}");

    // reqwest, pointed at http:// by mistake, reads the same answer.
    let reply = send(http().get(format!("http://127.0.0.1:{}/health", d.port))).await;
    assert_eq!((reply.status, reply.body["code"].as_str()), (400, Some("https_required")));
}

#[test]
fn a_mismatched_or_unreadable_pair_refuses_the_boot() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (crt_a, _) = ca.leaf(dir.path(), "a");
    let (_, key_b) = ca.leaf(dir.path(), "b");
    let (status, err) = serve_refusal(
        &["--tls-cert", crt_a.to_str().expect("utf-8"), "--tls-key", key_b.to_str().expect("utf-8")],
        &[],
    );
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("the TLS key") && err.contains("does not belong to the certificate"), "{err}");
    assert!(!err.contains("BEGIN"), "no key material in the message: {err}");

    let missing = dir.path().join("missing.key");
    let (status, err) = serve_refusal(
        &["--tls-cert", crt_a.to_str().expect("utf-8"), "--tls-key", missing.to_str().expect("utf-8")],
        &[],
    );
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("cannot read the TLS key") && err.contains("missing.key"), "{err}");

    let (status, err) = serve_refusal(&["--tls-cert", crt_a.to_str().expect("utf-8")], &[]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("--tls-key"), "{err}");
}

/// One TLS connection kept open, as a browser keeps one: the certificate it was shown, and a
/// sender for requests on that same connection.
struct OpenConnection {
    shown: String,
    sender: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
}

async fn open_connection(ca: &TestCa, port: u16) -> OpenConnection {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der()).expect("CA root");
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("handshake");
    let shown =
        mediatord::tls::fingerprint_of(&tls.get_ref().1.peer_certificates().expect("certificates")[0]);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.expect("http/1.1");
    tokio::spawn(conn);
    OpenConnection { shown, sender }
}

impl OpenConnection {
    /// `GET /health` on this connection; its status.
    async fn health(&mut self, port: u16) -> u16 {
        let req = hyper::Request::get("/health")
            .header("host", format!("127.0.0.1:{port}"))
            .body(Empty::new())
            .expect("request");
        let res = self.sender.send_request(req).await.expect("answer on the open connection");
        let status = res.status().as_u16();
        res.into_body().collect().await.expect("body");
        status
    }
}

#[tokio::test]
async fn sighup_swaps_the_certificate_for_new_connections_and_keeps_open_ones() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, crt, key) = https_daemon(&ca, dir.path(), &[]);
    let mut before = open_connection(&ca, d.port).await;
    assert_eq!(before.health(d.port).await, 200);
    let first = before.shown.clone();

    // A renewal lands (written beside, renamed into place, as certbot and mkcert users do).
    let (new_crt, new_key) = ca.leaf(dir.path(), "renewed");
    std::fs::rename(&new_crt, &crt).expect("mv cert");
    std::fs::rename(&new_key, &key).expect("mv key");
    let renewed = mediatord::tls::fingerprint_of(
        &<rustls::pki_types::CertificateDer<'_> as rustls::pki_types::pem::PemObject>::from_pem_file(&crt)
            .expect("renewed der"),
    );
    assert_ne!(first, renewed);
    d.signal(rustix::process::Signal::HUP);
    wait_stderr(&d, "reloaded the TLS certificate").await;

    assert_eq!(before.health(d.port).await, 200, "the connection opened before the reload still answers");
    let after = open_connection(&ca, d.port).await;
    assert_eq!(after.shown, renewed, "a new connection is shown the new certificate");

    // A broken renewal is refused and the daemon keeps serving the last good pair.
    std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
        .expect("break key");
    d.signal(rustix::process::Signal::HUP);
    wait_stderr(&d, "still serving the previous certificate").await;
    let mut later = open_connection(&ca, d.port).await;
    assert_eq!(later.shown, renewed);
    assert_eq!(later.health(d.port).await, 200);
}

/// Issue 41, finding 9: a TLS key others may read was taken silently. It refuses the boot, saying
/// why and what to run; a renewal that lands world-readable is refused at SIGHUP, and the
/// daemon goes on serving the pair it had.
#[tokio::test]
async fn a_tls_key_others_may_read_refuses_the_boot_and_a_reload_keeps_the_previous_pair() {
    use std::os::unix::fs::PermissionsExt;
    let chmod = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod")
    };
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (crt, key) = ca.leaf(dir.path(), "server");
    let args = ["--tls-cert", crt.to_str().expect("utf-8"), "--tls-key", key.to_str().expect("utf-8")];
    chmod(&key, 0o644);
    let (status, err) = serve_refusal(&args, &[]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("has mode 0644: others may read it")
            && err.contains(&format!("chmod 600 {}", key.display())),
        "{err}"
    );
    chmod(&key, 0o600);
    let d = Daemon::start(&args).trusting(&ca.pem());
    let first = open_connection(&ca, d.port).await.shown;

    let (new_crt, new_key) = ca.leaf(dir.path(), "renewed");
    std::fs::rename(&new_crt, &crt).expect("mv cert");
    std::fs::rename(&new_key, &key).expect("mv key");
    chmod(&key, 0o644);
    d.signal(rustix::process::Signal::HUP);
    let said = wait_stderr(&d, "still serving the previous certificate").await;
    assert!(said.contains("others may read it"), "{said}");
    let mut after = open_connection(&ca, d.port).await;
    assert_eq!(after.shown, first, "the pair in use stays");
    assert_eq!(after.health(d.port).await, 200);
}

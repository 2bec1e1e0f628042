//! A notification target for tests: an HTTP server on a loopback port that records every request
//! it gets (any method) and answers from a script (a status, a JSON body, or never), then 200.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{Daemon, TestCa, WAIT};

/// How the receiver answers one request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Answer {
    Status(u16),
    /// 200 with this JSON body (what Telegram's or Discord's API answers, say).
    Json(&'static str),
    /// Never answers (until the test ends).
    Hang,
}

/// One request a receiver got.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) headers: HeaderMap,
    pub(crate) raw: Vec<u8>,
    pub(crate) body: Value,
}

impl Delivery {
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    /// The action URL of the option `option_id` (json format).
    pub(crate) fn link(&self, option_id: &str) -> String {
        let options = self.body["options"].as_array().expect("options");
        let option = options.iter().find(|o| o["optionId"] == option_id).expect("option offered");
        option["url"].as_str().expect("url").to_owned()
    }
}

#[derive(Clone)]
struct Shared {
    script: Arc<Mutex<VecDeque<Answer>>>,
    seen: mpsc::UnboundedSender<Delivery>,
    hanging: Arc<Mutex<usize>>,
}

/// A running receiver; it stops when dropped (with the test's runtime).
pub(crate) struct Receiver {
    /// `http://127.0.0.1:<port>`.
    pub(crate) base: String,
    rx: mpsc::UnboundedReceiver<Delivery>,
    hanging: Arc<Mutex<usize>>,
    /// Connections accepted (https receivers only): a refused handshake is still one.
    accepted: Arc<Mutex<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(
    State(s): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let _ = s.seen.send(Delivery { method, path: uri.to_string(), headers, raw: raw.to_vec(), body });
    let answer = s.script.lock().expect("script").pop_front().unwrap_or(Answer::Status(200));
    match answer {
        Answer::Status(code) => StatusCode::from_u16(code).expect("status").into_response(),
        Answer::Json(text) => ([("content-type", "application/json")], text).into_response(),
        Answer::Hang => {
            *s.hanging.lock().expect("hanging") += 1;
            std::future::pending::<Response>().await
        }
    }
}

impl Receiver {
    pub(crate) async fn start(script: &[Answer]) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let (seen, rx) = mpsc::unbounded_channel();
        let hanging = Arc::new(Mutex::new(0));
        let shared = Shared {
            script: Arc::new(Mutex::new(script.iter().copied().collect())),
            seen,
            hanging: hanging.clone(),
        };
        let app = axum::Router::new().fallback(record).with_state(shared);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { base, rx, hanging, accepted: Arc::default(), task }
    }

    /// A receiver serving https with a leaf of `ca` for `localhost` and 127.0.0.1; its `base` is
    /// `https://localhost:<port>`, so the daemon checks the certificate against a name.
    pub(crate) async fn start_https(ca: &TestCa) -> Receiver {
        use hyper_util::rt::TokioIo;
        use hyper_util::service::TowerToHyperService;
        use rustls::pki_types::pem::PemObject;

        let dir = tempfile::tempdir().expect("tempdir");
        let (crt, key) = ca.leaf(dir.path(), "receiver");
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(&crt)
            .expect("cert")
            .collect::<Result<Vec<_>, _>>()
            .expect("certs");
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key).expect("key");
        let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
        let port = listener.local_addr().expect("addr").port();
        let (seen, rx) = mpsc::unbounded_channel();
        let hanging = Arc::new(Mutex::new(0));
        let shared = Shared { script: Arc::new(Mutex::new(VecDeque::new())), seen, hanging: hanging.clone() };
        let app = axum::Router::new().fallback(record).with_state(shared);
        let accepted = Arc::new(Mutex::new(0));
        let counted = accepted.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                *counted.lock().expect("accepted") += 1;
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
                    // A client that refuses our certificate ends its handshake here.
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = TowerToHyperService::new(app);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Receiver { base: format!("https://localhost:{port}"), rx, hanging, accepted, task }
    }

    /// Connections accepted so far (https receivers).
    pub(crate) fn accepted(&self) -> usize {
        *self.accepted.lock().expect("accepted")
    }

    /// Whether a request arrived since the last [`Receiver::next`], without waiting.
    pub(crate) fn try_next(&mut self) -> Option<Delivery> {
        self.rx.try_recv().ok()
    }

    /// `base` + `path`: a target URL.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The next request received (bounded by [`WAIT`]).
    pub(crate) async fn next(&mut self) -> Delivery {
        match tokio::time::timeout(WAIT, self.rx.recv()).await {
            Ok(Some(d)) => d,
            _ => panic!("no notification delivered within {WAIT:?}"),
        }
    }

    /// Requests being held unanswered now.
    pub(crate) fn hanging(&self) -> usize {
        *self.hanging.lock().expect("hanging")
    }
}

/// A daemon whose config file holds `notify` (and `extra` serve settings).
pub(crate) fn daemon_notifying(notify: Value, extra: &[&str]) -> (Daemon, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mediatord.json");
    std::fs::write(&path, json!({"serve": {"notify": notify}}).to_string()).expect("write config");
    let mut args = vec!["--config", path.to_str().expect("utf-8")];
    args.extend(extra);
    (Daemon::start(&args), dir)
}

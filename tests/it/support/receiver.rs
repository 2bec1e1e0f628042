//! A notification target for tests: an HTTP server on a loopback port that records every request
//! it gets and answers from a script (a status, or never), then 200.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{Daemon, WAIT};

/// How the receiver answers one request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Answer {
    Status(u16),
    /// Never answers (until the test ends).
    Hang,
}

/// One request a receiver got.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
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
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(State(s): State<Shared>, uri: Uri, headers: HeaderMap, raw: Bytes) -> StatusCode {
    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let _ = s.seen.send(Delivery { path: uri.to_string(), headers, raw: raw.to_vec(), body });
    let answer = s.script.lock().expect("script").pop_front().unwrap_or(Answer::Status(200));
    match answer {
        Answer::Status(code) => StatusCode::from_u16(code).expect("status"),
        Answer::Hang => {
            *s.hanging.lock().expect("hanging") += 1;
            std::future::pending::<StatusCode>().await
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
        let app = axum::Router::new().fallback(axum::routing::post(record)).with_state(shared);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { base, rx, hanging, task }
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

//! mediatord-fake-model — an offline, scripted model server that real coding agents talk to in
//! mediatord's end-to-end tests, in the dialects those agents speak.
//!
//! Crate map:
//! - [`directive`]: the script language (`WRITE`, `SHELL`, `STREAM`, `STALL`), one per prompt line.
//! - [`conversation`]: the dialect-neutral conversation and the rule that picks the next reply.
//! - [`tools`]: a scripted action → a call of one of the tools the agent offered.
//! - [`openai`]: OpenAI Chat Completions (`/v1/chat/completions`; Qwen Code).
//! - [`anthropic`]: Anthropic Messages (`/v1/messages`; Claude Code).
//! - [`gemini`]: Gemini `generateContent` (`/v1beta/models/{model}:streamGenerateContent`; Gemini CLI).
//! - [`review`]: a verdict for a mediatord model reviewer's request, decided from its text.
//! - [`body`]: streaming response bodies with holds (SSE, stalls), and noticing a client that left.
//!
//! A dialect is one module: a function reducing its request body to a
//! [`conversation::Conversation`] (its handlers pass it to `answer`, which decides the reply and
//! journals it), a renderer of the [`conversation::Reply`] as that dialect's JSON or SSE frames, and
//! its routes, which [`app`] merges. OpenAI Responses (codex-acp) would be one more such module.
//!
//! Use it from a test with [`FakeModel::start`] (a loopback server on a thread of its own), or run
//! the `mediatord-fake-model` binary. The server holds no conversation state: everything it answers
//! follows from the request, so any number of agents and sessions can share one.

pub mod anthropic;
pub mod body;
pub mod conversation;
pub mod directive;
pub mod gemini;
pub mod openai;
pub mod review;
pub mod tools;

use std::collections::VecDeque;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

/// The largest request body accepted. Agents send the whole history on every call (a fresh Qwen Code
/// session is about 80 KiB, mostly tool schemas), so this leaves room for very long sessions while
/// still bounding what one request can make the server hold.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// Journal lines kept (the oldest are dropped): enough for a whole e2e run (about 100 model calls).
pub const JOURNAL_LINES: usize = 1024;

/// The model id listed by `GET /v1/models` (any model id is accepted in requests).
pub const MODEL_ID: &str = "fake-model";

/// A bounded log of what the server answered, one line per event, for a failing test to show.
#[derive(Default)]
pub struct Journal {
    // A std mutex: pushing a line never awaits, and the lock is held for that push only.
    lines: Mutex<VecDeque<String>>,
}

impl Journal {
    pub fn note(&self, line: String) {
        tracing::info!(target: "fake_model", "{line}");
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.len() == JOURNAL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect()
    }
}

/// What every handler shares.
pub struct Fake {
    pub journal: Arc<Journal>,
    /// Numbers tool-call and response ids, unique for the server's life: agents reject (or
    /// silently rename) a tool-call id seen before in the session.
    next_id: AtomicU64,
    /// When set, every request body is appended here as one JSON line (for finding out what a new
    /// agent sends; `--dump` of the binary).
    dump: Option<Mutex<std::fs::File>>,
    /// When set, a request without this key (`Authorization: Bearer <key>` or `x-api-key: <key>`)
    /// is refused with 401, as a hosted endpoint does: a test sees the key was sent.
    key: Option<String>,
}

impl Fake {
    pub fn new(dump: Option<PathBuf>) -> std::io::Result<Arc<Fake>> {
        let dump = match dump {
            Some(path) => Some(Mutex::new(std::fs::OpenOptions::new().create(true).append(true).open(path)?)),
            None => None,
        };
        Ok(Arc::new(Fake { journal: Arc::default(), next_id: AtomicU64::new(1), dump, key: None }))
    }

    /// A fresh id with this prefix (`call_`, `toolu_`, `msg_`, ...).
    pub fn id(&self, prefix: &str) -> String {
        format!("{prefix}fake{}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Appends the request to the dump file, if any. A failed write is noted, never fatal.
    pub fn dump(&self, path: &str, body: &serde_json::Value) {
        let Some(file) = &self.dump else { return };
        let line = json!({ "path": path, "body": body }).to_string();
        let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = writeln!(file, "{line}") {
            drop(file);
            self.journal.note(format!("dump: {e}"));
        }
    }
}

/// The whole server: every dialect's routes, the model list, and JSON 404s for anything else.
pub fn app(fake: Arc<Fake>) -> Router {
    Router::new()
        .route("/v1/models", get(models))
        .merge(openai::routes())
        .merge(anthropic::routes())
        .merge(gemini::routes())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(fake.clone(), keyed))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(fake)
}

/// Whether `headers` carry `key` (always, without a key).
fn keyed_right(key: Option<&str>, headers: &axum::http::HeaderMap) -> bool {
    let Some(key) = key else { return true };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    header("authorization").and_then(|v| v.strip_prefix("Bearer ")) == Some(key)
        || header("x-api-key") == Some(key)
}

/// Refuses a request without the server's key, when it has one.
async fn keyed(
    axum::extract::State(fake): axum::extract::State<Arc<Fake>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if keyed_right(fake.key.as_deref(), request.headers()) {
        return next.run(request).await;
    }
    fake.journal.note(format!("{} {}: refused, no key", request.method(), request.uri().path()));
    let body = json!({ "error": { "message": "invalid api key", "type": "authentication_error" } });
    (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
}

async fn models() -> Response {
    axum::Json(
        json!({ "object": "list", "data": [{ "id": MODEL_ID, "object": "model", "owned_by": "mediatord" }] }),
    )
    .into_response()
}

async fn not_found(uri: axum::http::Uri) -> Response {
    let msg = format!("the fake model has no route {}", uri.path());
    (StatusCode::NOT_FOUND, axum::Json(json!({ "error": { "message": msg, "type": "not_found" } })))
        .into_response()
}

/// Serves `app(fake)` on `listener` until `shutdown` resolves. Stops at once: responses still held
/// open (stalls) are cut, which is what a test tearing down wants.
pub async fn serve(
    listener: tokio::net::TcpListener,
    fake: Arc<Fake>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::select! {
        r = axum::serve(listener, app(fake)) => r,
        () = shutdown => Ok(()),
    }
}

/// A fake model server on 127.0.0.1 (a free port), running on a thread with its own tokio runtime
/// so that synchronous tests can use it. Stops when dropped.
pub struct FakeModel {
    addr: SocketAddr,
    fake: Arc<Fake>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeModel {
    pub fn start() -> std::io::Result<FakeModel> {
        FakeModel::start_keyed(None)
    }

    /// [`FakeModel::start`] refusing every request without `key` (401).
    pub fn start_keyed(key: Option<&str>) -> std::io::Result<FakeModel> {
        let fake = Fake::new(None)?;
        let fake = match Arc::try_unwrap(fake) {
            Ok(fake) => Arc::new(Fake { key: key.map(str::to_owned), ..fake }),
            Err(_) => return Err(std::io::Error::other("the fake is shared before it starts")),
        };
        let std_listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = fake.clone();
        let thread = std::thread::Builder::new().name("fake-model".into()).spawn(move || {
            runtime.block_on(async move {
                let journal = served.journal.clone();
                let result = match tokio::net::TcpListener::from_std(std_listener) {
                    Ok(listener) => serve(listener, served, async { _ = stopped.await }).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = result {
                    journal.note(format!("server stopped: {e}"));
                }
            });
        })?;
        Ok(FakeModel { addr, fake, stop: Some(stop), thread: Some(thread) })
    }

    /// `http://127.0.0.1:PORT`: Anthropic and Gemini clients take it as is, OpenAI clients with `/v1`
    /// appended.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn journal(&self) -> Vec<String> {
        self.fake.journal.lines()
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            _ = thread.join();
        }
    }
}

/// A request body as JSON, or the reason it is not.
pub(crate) fn parse_json(body: &[u8]) -> Result<serde_json::Value, String> {
    serde_json::from_slice(body).map_err(|e| format!("the request body is not JSON: {e}"))
}

/// A model call as every dialect handles it: the request, the reply decided for it, and how the
/// journal names it.
pub(crate) struct Call {
    pub req: serde_json::Value,
    pub reply: conversation::Reply,
    pub what: String,
}

/// Parses and dumps the request to `path`, reduces it with the dialect's `reduce`, decides the reply
/// and notes it in the journal. `Err` is the reason the request is malformed.
pub(crate) fn answer(
    fake: &Fake,
    path: &str,
    body: &[u8],
    reduce: fn(&serde_json::Value) -> Result<conversation::Conversation, String>,
) -> Result<Call, String> {
    let req = parse_json(body)?;
    fake.dump(path, &req);
    let conv = reduce(&req)?;
    let reply = conversation::reply(&conv);
    let what = format!("POST {path} ({} messages)", conv.messages.len());
    fake.journal.note(format!("{what}: {}", reply.summary()));
    Ok(Call { req, reply, what })
}

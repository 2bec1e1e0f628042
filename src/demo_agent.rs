//! The built-in ACP agent behind `mediatord demo-agent`: no model, deterministic, fast.
//!
//! It is the mock agent of the test suite and of the benchmark. A prompt's first text block is read
//! as a directive (see [`DIRECTIVES_HELP`]); anything else is echoed back. The process speaks
//! JSON-RPC 2.0 as NDJSON on stdin/stdout and logs only to stderr (through `tracing`).
//!
//! Shape: one reader loop classifies stdin lines and never waits on a prompt; each prompt runs in its
//! own task; every stdout line goes through one writer task, so lines never interleave; the agent's
//! own outgoing calls (`session/request_permission`, `fs/*`) are matched to their answers by id
//! through a pending map.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::acp::{
    Frame, INTERNAL_ERROR, INVALID_PARAMS, RequestId, RpcError, method, notification_line, request_line,
    response_line,
};
use crate::sync::lock;

/// `mediatord demo-agent`'s flags.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Ignore SIGTERM (tests the daemon's kill-after-grace path).
    #[arg(long)]
    pub ignore_sigterm: bool,
    /// Keep running after stdin reaches EOF (tests that the daemon still reaps the agent).
    #[arg(long)]
    pub linger: bool,
    /// Do not advertise or serve `session/load` (tests the daemon's `resume_unsupported`).
    #[arg(long)]
    pub no_load_session: bool,
}

/// Options the CLI passes in.
#[derive(Debug, Clone, Default)]
pub struct DemoOptions {
    /// Ignore SIGTERM from the start (tests of the daemon's kill escalation).
    pub ignore_sigterm: bool,
    /// Keep running after stdin EOF (tests that the daemon kills agents it no longer talks to).
    pub linger_after_eof: bool,
    /// `session/load` is neither advertised nor served.
    pub no_load_session: bool,
    /// Where each session's transcript (its updates, one JSON line each) is kept, so a later
    /// process can `session/load` it; `None` keeps none (and loads nothing).
    pub transcripts: Option<std::path::PathBuf>,
}

/// Text for `mediatord demo-agent --help`: one directive per line, with an example.
pub const DIRECTIVES_HELP: &str = "\
Prompt directives: the first word of the first non-empty line of the prompt's first text block.
Anything else is echoed back as 3 agent_message_chunk updates.
With DEMO_SESSION_ID set, session/new answers that id (tests of what the daemon accepts).
Modes (session/set_mode): default asks before writing, accept-edits writes without asking, plan
refuses to write.

  write <rel-path> <text...>    read the file, ask permission with the     `write notes/a.txt hi`
                                change as a diff (a new file when it is not there), then
                                fs/write_text_file (the text: the rest of the prompt, later lines too)
  edit <rel-path> <text...>     the same as write                          `edit notes/a.txt bye`
  patch <rel-path> <text...>    ask with an option carrying the patch      `patch notes/b.txt hi`
                                (data.diff), then write
  mode <mode-id>                switch mode itself (current_mode_update)   `mode plan`
  showcase                      a thought, a plan, Markdown, a tool call
  hostile                       escape sequences, bidi overrides and a 1 MiB line in every kind
                                of update a client shows (tests that clients escape them)
  shell <command...>            ask permission for a command (never run;   `shell rm -rf build`
                                the prompt's later lines belong to it)
  permissions <K>               ask K permissions in a row                 `permissions 3`
  options <N>                   ask one permission offering N options      `options 5000`
  ask                           Qwen Code's ask_user_question: a library   `ask`
                                (one choice) and features (several), then
                                the answers it got
  elicit                        elicitation/create, a form: name, replicas `elicit`
                                (1-9), region (eu|us), agree, API token
  elicit-url <url> [ms]         elicitation/create, a URL; after `ms`      `elicit-url https://x.example/ 500`
                                elicitation/complete while it is pending,
                                else once accepted
  elicit-raw <json...>          elicitation/create with these params (the  `elicit-raw {\"mode\":\"url\"}`
                                session's id unless given), what it got
  token <bytes> <chunks> <rate> one unbreakable word, streamed in chunks    `token 300000 1000 200`
  stream <N> [<per_sec>]        N chunks `tok<i> `, _meta.emittedAtUs      `stream 100000`
  read <path> [line] [limit]    fs/read_text_file, reply the content       `read src/lib.rs 1 20`
  fswrite <path> <text...>      fs/write_text_file, no permission ask      `fswrite ../x.txt x`
  put <path> <text...>          write the file itself: no ACP, no asking   `put ../x.txt x`
  run <command...>              run `sh -c` itself as a tool call, unasked `run touch /tmp/x`
  sleep <ms>                    wait, then reply (cancellable)             `sleep 250`
  hold <ms>                     wait, ignoring session/cancel, then reply  `hold 8000`
  stall                         never finish unless cancelled
  crash [code]                  exit at once with that status (3)          `crash 7`
  malformed [N]                 write N (2) non-JSON-RPC lines to stdout   `malformed 100000`
  early <N> <bytes>             N updates of <bytes> for an unknown session `early 64 1048576`
  ignore-sigterm                ignore SIGTERM from now on
  linger                        keep running after stdin EOF
  pid                           reply with this process's pid
  env <DEMO_NAME>               reply with that variable's value (DEMO_* only) `env DEMO_ROLE`
  leak <DEMO_NAME>              NAME=value to stderr, then fail with it        `leak DEMO_KEY`
  escapee <pidfile>             start `sleep 300` outside its group (setsid), pid to <pidfile>
  echo-meta                     reply with _meta and an unknown field";

/// Stdout lines queued for the writer task; a full queue back-pressures the producing prompt.
const WRITER_QUEUE_LINES: usize = 4096;
/// Buffered stdout: bursts (the `stream` benchmark) leave in writes of this size.
const WRITE_BUFFER_BYTES: usize = 256 * 1024;
/// Stdin read buffer.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Longest stdin line accepted; the same bound the daemon puts on agent lines
/// (`docs/protocol.md#4-agents-workspaces-and-sessions`).
const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;
/// Live sessions; far above the daemon's default `--max-sessions` of 32.
const MAX_SESSIONS: usize = 10_000;
/// Prompts running at once, all sessions together.
const MAX_CONCURRENT_PROMPTS: usize = 4096;
/// The agent's own calls waiting for an answer, all prompts together.
const MAX_PENDING_CALLS: usize = 16_384;
/// `stream N` is capped here so one prompt cannot run for hours.
const MAX_STREAM_CHUNKS: u64 = 10_000_000;
/// `malformed N` is capped here.
const MAX_MALFORMED_LINES: u64 = 10_000_000;
/// `early N bytes` is capped here: at most 4096 updates of at most 8 MiB.
const MAX_EARLY_UPDATES: u64 = 4096;
const MAX_EARLY_UPDATE_BYTES: usize = 8 * 1024 * 1024;
/// `permissions K` is capped here.
const MAX_PERMISSIONS: u32 = 1000;
/// What `run` replies of a command's output, at most (stdout, then stderr).
const MAX_RUN_OUTPUT: usize = 64 * 1024;
/// `options N` is capped here.
const MAX_OPTIONS: u32 = 100_000;
/// `token B …` is capped here.
const MAX_TOKEN_BYTES: usize = 16 * 1024 * 1024;
/// `crash` with no code exits with this status.
const DEFAULT_CRASH_CODE: i32 = 3;
/// The only variables the `env` directive shows.
const DEMO_ENV_PREFIX: &str = "DEMO_";
/// When set, `session/new` answers this id instead of a fresh `demo-<uuid>` (for tests of what the
/// daemon accepts from an agent).
const SESSION_ID_ENV: &str = "DEMO_SESSION_ID";
/// Plain text is echoed back in this many chunks.
const ECHO_CHUNKS: usize = 3;

const MODELS: [(&str, &str); 2] = [("demo-fast", "Demo fast"), ("demo-smart", "Demo smart")];
/// `(id, name, description)`; the first is where a session starts. What each does to a write:
/// [`WriteGate`].
const MODES: [(&str, &str, &str); 3] = [
    ("default", "Ask every time", "Asks before every edit"),
    ("accept-edits", "Accept edits", "Writes files without asking"),
    ("plan", "Plan", "Reads and plans, never writes"),
];

/// Runs the agent on this process's stdin/stdout until stdin EOF (unless lingering).
pub async fn run(opts: DemoOptions) -> io::Result<()> {
    let stdin = BufReader::with_capacity(READ_BUFFER_BYTES, tokio::io::stdin());
    serve(stdin, tokio::io::stdout(), opts).await
}

/// The agent over any byte streams; [`run`] wires it to stdio, tests to in-memory pipes.
///
/// Returns once `reader` reaches EOF and everything queued has been written, or never when
/// lingering.
pub async fn serve<R, W>(mut reader: R, writer: W, opts: DemoOptions) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, out_rx) = mpsc::channel(WRITER_QUEUE_LINES);
    tokio::spawn(write_loop(out_rx, writer));
    let shared = Arc::new(Shared {
        out,
        sessions: Mutex::new(HashMap::new()),
        pending: Mutex::new(HashMap::new()),
        next_call_id: AtomicI64::new(1),
        next_tool_call: AtomicU64::new(1),
        prompts: Arc::new(Semaphore::new(MAX_CONCURRENT_PROMPTS)),
        linger: AtomicBool::new(opts.linger_after_eof),
        sigterm_ignored: AtomicBool::new(false),
        load_session: !opts.no_load_session,
        transcripts: opts.transcripts.clone(),
        elicitation: Mutex::new(Vec::new()),
    });
    if opts.ignore_sigterm {
        ignore_sigterm(&shared);
    }

    let mut line = Vec::new();
    loop {
        match read_line(&mut reader, &mut line).await? {
            LineRead::Eof => break,
            LineRead::TooLong => tracing::warn!(max = MAX_LINE_BYTES, "input line too long, skipped"),
            LineRead::Line if line.iter().all(u8::is_ascii_whitespace) => {}
            LineRead::Line => handle_frame(&shared, Frame::parse(&line)).await,
        }
    }

    let (done, flushed) = oneshot::channel();
    if shared.out.send(Out::Flush(done)).await.is_ok() {
        // An error only means the writer already stopped on a broken stdout.
        let _ = flushed.await;
    }
    if shared.linger.load(Ordering::SeqCst) {
        tracing::info!("stdin closed; lingering");
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// State shared by the reader loop and the prompt tasks.
struct Shared {
    /// Whether `session/load` is advertised and served.
    load_session: bool,
    /// See [`DemoOptions::transcripts`].
    transcripts: Option<std::path::PathBuf>,
    /// The only way to stdout.
    out: mpsc::Sender<Out>,
    /// Sessions by id. A std mutex: every critical section is a short lookup with no `.await`.
    sessions: Mutex<HashMap<String, Session>>,
    /// The agent's outgoing calls by id, waiting for the client's answer. Std mutex, as above.
    pending: Mutex<HashMap<i64, oneshot::Sender<Result<Value, RpcError>>>>,
    next_call_id: AtomicI64,
    /// Makes `toolCallId`s unique across the process.
    next_tool_call: AtomicU64,
    /// Bounds the prompts running at once.
    prompts: Arc<Semaphore>,
    /// Keep running after stdin EOF.
    linger: AtomicBool,
    /// The SIGTERM-swallowing task is installed at most once.
    sigterm_ignored: AtomicBool,
    /// The elicitation modes the client offered at `initialize` (an agent may use no other).
    elicitation: Mutex<Vec<String>>,
}

struct Session {
    /// Absolute, as the client sent it; relative paths in directives are joined to it.
    cwd: String,
    /// One of [`MODES`]' ids.
    mode: &'static str,
    /// Cancels every prompt of the session running now; `session/cancel` replaces it with a fresh
    /// token, so later prompts are not born cancelled.
    cancel: CancellationToken,
}

enum Out {
    /// One or more complete lines, newline included.
    Line(Vec<u8>),
    /// Answered once everything queued before it is flushed.
    Flush(oneshot::Sender<()>),
}

impl Shared {
    /// Queues a line; an error only means stdout is gone, and then nobody is listening anyway.
    async fn send(&self, line: Vec<u8>) {
        let _ = self.out.send(Out::Line(line)).await;
    }
}

/// Writes queued lines, flushing only when the queue is empty so bursts go out in big writes.
async fn write_loop<W: AsyncWrite + Unpin>(mut rx: mpsc::Receiver<Out>, writer: W) {
    let mut writer = BufWriter::with_capacity(WRITE_BUFFER_BYTES, writer);
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(msg) = next {
            let result = match msg {
                Out::Line(bytes) => writer.write_all(&bytes).await,
                Out::Flush(done) => {
                    let result = writer.flush().await;
                    let _ = done.send(());
                    result
                }
            };
            if let Err(e) = result {
                tracing::error!(error = %e, "stdout write failed; output stops");
                return;
            }
            next = rx.try_recv().ok();
        }
        if let Err(e) = writer.flush().await {
            tracing::error!(error = %e, "stdout flush failed; output stops");
            return;
        }
    }
}

enum LineRead {
    Line,
    TooLong,
    Eof,
}

/// Reads one line (without `\n` / `\r\n`) into `buf`, holding at most [`MAX_LINE_BYTES`].
async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>) -> io::Result<LineRead> {
    buf.clear();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (too_long, buf.is_empty()) {
                (true, _) => LineRead::TooLong,
                (false, true) => LineRead::Eof,
                (false, false) => LineRead::Line,
            });
        }
        let (take, consumed, complete) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i, i + 1, true),
            None => (available.len(), available.len(), false),
        };
        if !too_long {
            buf.extend_from_slice(&available[..take]);
            if buf.len() > MAX_LINE_BYTES {
                too_long = true;
                buf.clear();
            }
        }
        reader.consume(consumed);
        if complete {
            if too_long {
                return Ok(LineRead::TooLong);
            }
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(LineRead::Line);
        }
    }
}

async fn handle_frame(shared: &Arc<Shared>, frame: Frame) {
    match frame {
        Frame::Request { id, method, params } => {
            if method == method::SESSION_PROMPT {
                match start_prompt(shared, params.as_deref()) {
                    Ok((turn, text, permit)) => {
                        tokio::spawn(async move {
                            let result = turn.run(&text).await.map(|stop| json!({"stopReason": stop}));
                            turn.shared.send(response_line(&id, result)).await;
                            drop(permit);
                        });
                    }
                    Err(e) => shared.send(response_line(&id, Err(e))).await,
                }
            } else if method == method::SESSION_LOAD && shared.load_session {
                let result = load_session(shared, params.as_deref()).await;
                shared.send(response_line(&id, result)).await;
            } else {
                let result = answer(shared, &method, params.as_deref());
                shared.send(response_line(&id, result)).await;
            }
        }
        Frame::Notification { method, params } => {
            if method == method::SESSION_CANCEL {
                match parse_params::<SessionRef>(params.as_deref()) {
                    Ok(p) => cancel_session(shared, &p.session_id),
                    Err(e) => tracing::warn!(error = %e, "bad session/cancel"),
                }
            }
        }
        Frame::Response { id, result } => {
            let waiter = match &id {
                RequestId::Number(n) => lock(&shared.pending).remove(n),
                RequestId::Text(_) => None,
            };
            match waiter {
                // The waiter may have given up (cancelled turn); then the answer is dropped.
                Some(waiter) => {
                    let _ = waiter.send(result.and_then(|raw| {
                        serde_json::from_str(raw.get())
                            .map_err(|e| RpcError::new(INTERNAL_ERROR, format!("bad result: {e}")))
                    }));
                }
                None => tracing::debug!(?id, "response to no pending call"),
            }
        }
        Frame::Malformed(reason) => tracing::warn!(%reason, "malformed input line skipped"),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionRef {
    session_id: String,
}

#[derive(Deserialize)]
struct NewSession {
    cwd: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetModel {
    session_id: String,
    model_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetMode {
    session_id: String,
    mode_id: String,
}

/// The `MODES` entry named `id`.
fn mode_named(id: &str) -> Option<&'static str> {
    MODES.iter().map(|(m, _, _)| *m).find(|m| *m == id)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Prompt {
    session_id: String,
    prompt: Vec<Value>,
}

fn parse_params<T: DeserializeOwned>(params: Option<&RawValue>) -> Result<T, RpcError> {
    serde_json::from_str(params.map_or("null", RawValue::get))
        .map_err(|e| RpcError::new(INVALID_PARAMS, format!("invalid params: {e}")))
}

fn unknown_session(id: &str) -> RpcError {
    RpcError::new(INVALID_PARAMS, format!("unknown session: {id}"))
}

/// The answer to `initialize`.
fn initialized(shared: &Shared) -> Result<Value, RpcError> {
    Ok(json!({
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": shared.load_session,
            "promptCapabilities": {"image": false, "audio": false, "embeddedContext": false}
        },
        "authMethods": [],
        "agentInfo": {"name": "mediatord-demo-agent", "version": env!("CARGO_PKG_VERSION")},
        // `qwen serve` refuses agents without this marker.
        "_meta": {"qwen-code/external-tool-guard-ready": "required-v1"}
    }))
}

/// Answers every request but `session/prompt`, synchronously.
fn answer(shared: &Shared, method: &str, params: Option<&RawValue>) -> Result<Value, RpcError> {
    match method {
        method::INITIALIZE => {
            let offered = params
                .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                .and_then(|p| p.pointer("/clientCapabilities/elicitation").cloned());
            if let Some(Value::Object(modes)) = offered {
                *lock(&shared.elicitation) =
                    modes.iter().filter(|(_, v)| v.is_object()).map(|(k, _)| k.clone()).collect();
            }
            initialized(shared)
        }
        method::SESSION_NEW => {
            let p: NewSession = parse_params(params)?;
            if !p.cwd.starts_with('/') {
                return Err(RpcError::new(INVALID_PARAMS, "cwd must be an absolute path"));
            }
            let mut sessions = lock(&shared.sessions);
            if sessions.len() >= MAX_SESSIONS {
                return Err(RpcError::new(INTERNAL_ERROR, "too many sessions"));
            }
            // A test may make the agent answer an id of its choosing (one the daemon must refuse).
            let session_id =
                std::env::var(SESSION_ID_ENV).unwrap_or_else(|_| format!("demo-{}", uuid::Uuid::new_v4()));
            sessions.insert(
                session_id.clone(),
                Session { cwd: p.cwd, mode: MODES[0].0, cancel: CancellationToken::new() },
            );
            let models: Vec<Value> =
                MODELS.iter().map(|(id, name)| json!({"modelId": id, "name": name})).collect();
            let modes: Vec<Value> = MODES
                .iter()
                .map(|(id, name, description)| json!({"id": id, "name": name, "description": description}))
                .collect();
            Ok(json!({
                "sessionId": session_id,
                "models": {"currentModelId": MODELS[0].0, "availableModels": models},
                "modes": {"currentModeId": MODES[0].0, "availableModes": modes}
            }))
        }
        method::SESSION_SET_MODEL => {
            let p: SetModel = parse_params(params)?;
            if !lock(&shared.sessions).contains_key(&p.session_id) {
                return Err(unknown_session(&p.session_id));
            }
            if !MODELS.iter().any(|(id, _)| *id == p.model_id) {
                return Err(RpcError::new(INVALID_PARAMS, format!("unknown model: {}", p.model_id)));
            }
            Ok(json!({}))
        }
        method::SESSION_SET_MODE => {
            let p: SetMode = parse_params(params)?;
            let mut sessions = lock(&shared.sessions);
            let session = sessions.get_mut(&p.session_id).ok_or_else(|| unknown_session(&p.session_id))?;
            session.mode = mode_named(&p.mode_id)
                .ok_or_else(|| RpcError::new(INVALID_PARAMS, format!("unknown mode: {}", p.mode_id)))?;
            Ok(json!({}))
        }
        other => Err(RpcError::method_not_found(other)),
    }
}

/// The transcript file of a session, if transcripts are kept and the id is a plain one (it names a
/// file: nothing but letters, digits, `-` and `_`).
fn transcript(shared: &Shared, session_id: &str) -> Option<std::path::PathBuf> {
    let plain = !session_id.is_empty()
        && session_id.len() <= 128
        && session_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    shared.transcripts.as_ref().filter(|_| plain).map(|dir| dir.join(format!("{session_id}.jsonl")))
}

/// Appends an update to the session's transcript (best effort: a demo's transcript is no reason
/// to fail a turn).
fn record(shared: &Shared, session_id: &str, update: &Value) {
    use std::io::Write as _;
    let Some(path) = transcript(shared, session_id) else { return };
    let write = || -> io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
        writeln!(f, "{update}")
    };
    if let Err(e) = write() {
        tracing::debug!(error = %e, "cannot record the demo transcript");
    }
}

/// `session/load`: replays the session's transcript as `session/update`s (ACP: the whole
/// conversation, before the answer), then answers like `session/new` does, minus the id.
async fn load_session(shared: &Shared, params: Option<&RawValue>) -> Result<Value, RpcError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Load {
        session_id: String,
        cwd: String,
    }
    let p: Load = parse_params(params)?;
    let path = transcript(shared, &p.session_id).ok_or_else(|| unknown_session(&p.session_id))?;
    let text = std::fs::read_to_string(&path).map_err(|_| unknown_session(&p.session_id))?;
    {
        let mut sessions = lock(&shared.sessions);
        if sessions.len() >= MAX_SESSIONS && !sessions.contains_key(&p.session_id) {
            return Err(RpcError::new(INTERNAL_ERROR, "too many sessions"));
        }
        sessions.insert(
            p.session_id.clone(),
            Session { cwd: p.cwd, mode: MODES[0].0, cancel: CancellationToken::new() },
        );
    }
    for line in text.lines() {
        let Ok(update) = serde_json::from_str::<Value>(line) else { continue };
        let params = json!({"sessionId": p.session_id, "update": update});
        shared.send(notification_line(method::SESSION_UPDATE, &params)).await;
    }
    let models: Vec<Value> = MODELS.iter().map(|(id, name)| json!({"modelId": id, "name": name})).collect();
    let modes: Vec<Value> = MODES
        .iter()
        .map(|(id, name, description)| json!({"id": id, "name": name, "description": description}))
        .collect();
    Ok(json!({
        "models": {"currentModelId": MODELS[0].0, "availableModels": models},
        "modes": {"currentModeId": MODES[0].0, "availableModes": modes}
    }))
}

fn cancel_session(shared: &Shared, session_id: &str) {
    match lock(&shared.sessions).get_mut(session_id) {
        Some(session) => std::mem::replace(&mut session.cancel, CancellationToken::new()).cancel(),
        None => tracing::debug!(session_id, "cancel for unknown session"),
    }
}

/// Validates a prompt and prepares its turn; the turn itself runs in its own task.
fn start_prompt(
    shared: &Arc<Shared>,
    params: Option<&RawValue>,
) -> Result<(Turn, String, OwnedSemaphorePermit), RpcError> {
    let p: Prompt = parse_params(params)?;
    let (cwd, cancel) = match lock(&shared.sessions).get(&p.session_id) {
        Some(s) => (s.cwd.clone(), s.cancel.clone()),
        None => return Err(unknown_session(&p.session_id)),
    };
    let permit = Arc::clone(&shared.prompts)
        .try_acquire_owned()
        .map_err(|_| RpcError::new(INTERNAL_ERROR, "too many prompts in flight"))?;
    let text = p
        .prompt
        .iter()
        .find(|block| block.get("type").and_then(Value::as_str) == Some("text"))
        .and_then(|block| block.get("text").and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned();
    record(
        shared,
        &p.session_id,
        &json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}),
    );
    let session_json = serde_json::to_string(&p.session_id).expect("a string always serialises");
    let turn = Turn { shared: Arc::clone(shared), session_id: p.session_id, session_json, cwd, cancel };
    Ok((turn, text, permit))
}

/// Installs (once) a SIGTERM handler that drops the signal. Synchronous registration: once this
/// returns, SIGTERM no longer terminates the process.
fn ignore_sigterm(shared: &Shared) {
    if shared.sigterm_ignored.swap(true, Ordering::SeqCst) {
        return;
    }
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut signals) => {
            tokio::spawn(async move {
                while signals.recv().await.is_some() {
                    tracing::info!("SIGTERM ignored");
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot install a SIGTERM handler"),
    }
}

/// What a prompt asks for.
#[derive(Debug, PartialEq)]
enum Directive<'a> {
    Echo,
    Write {
        path: &'a str,
        text: &'a str,
    },
    Edit {
        path: &'a str,
        text: &'a str,
    },
    /// Ask to apply a patch making `path` hold `text`; the approving option carries the patch as
    /// its `data.diff`.
    Patch {
        path: &'a str,
        text: &'a str,
    },
    Mode {
        id: &'a str,
    },
    Showcase,
    Hostile,
    Shell {
        command: &'a str,
    },
    Permissions {
        count: u32,
    },
    /// One permission request offering `count` options.
    Options {
        count: u32,
    },
    /// Qwen Code's `ask_user_question`.
    Ask,
    /// `elicitation/create` in form mode.
    Elicit,
    /// `elicitation/create` in URL mode; `complete_after_ms`: `elicitation/complete` then, while
    /// the question is pending.
    ElicitUrl {
        url: &'a str,
        complete_after_ms: Option<u64>,
    },
    /// `elicitation/create` with params of the prompt's (bad-input tests).
    ElicitRaw {
        params: &'a str,
    },
    /// One unbreakable word of `bytes` letters, streamed in `chunks` message chunks, `rate` a second.
    Token {
        bytes: usize,
        chunks: u64,
        rate: f64,
    },
    Stream {
        count: u64,
        rate: Option<f64>,
    },
    Read {
        path: &'a str,
        line: Option<u64>,
        limit: Option<u64>,
    },
    FsWrite {
        path: &'a str,
        text: &'a str,
    },
    /// Written by the agent process itself, as an agent's own tool would (the sandbox's concern).
    Put {
        path: &'a str,
        text: &'a str,
    },
    /// Run by the agent itself through `sh -c`, never asking.
    Run {
        command: &'a str,
    },
    Sleep {
        ms: u64,
    },
    Hold {
        ms: u64,
    },
    Stall,
    Crash {
        code: i32,
    },
    /// `None`: the two classic lines; `Some(n)`: n numbered lines.
    Malformed {
        count: Option<u64>,
    },
    Early {
        count: u64,
        bytes: usize,
    },
    IgnoreSigterm,
    Linger,
    Pid,
    /// The value of an environment variable named `DEMO_*` (what an agent's settings added).
    Env {
        name: &'a str,
    },
    /// Write `NAME=value` of a `DEMO_*` variable to stderr, and fail the prompt with an error
    /// holding it (what a failing agent does with its API key; the daemon must redact it).
    Leak {
        name: &'a str,
    },
    /// Start a process that leaves the agent's process group, its pid written to the file.
    Escapee {
        pidfile: &'a str,
    },
    EchoMeta,
    /// A directive word with unusable arguments; the text is the usage line.
    Usage(&'static str),
}

/// Reads the first word of the first non-empty line of `text`.
fn parse_directive(text: &str) -> Directive<'_> {
    let Some(line) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return Directive::Echo;
    };
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim_start()),
        None => (line, ""),
    };
    let mut args = rest.split_whitespace();
    // A file's text is the rest of the prompt, later lines and trailing blanks too.
    let after_word = &text[text.find(line).map_or(text.len(), |at| at + word.len())..];
    let file_text = first_and_tail(after_word.trim_start());
    match word.to_ascii_lowercase().as_str() {
        "write" => match file_text {
            Some((path, text)) => Directive::Write { path, text },
            None => Directive::Usage("usage: write <relative-path> <text...>"),
        },
        "edit" => match file_text {
            Some((path, text)) => Directive::Edit { path, text },
            None => Directive::Usage("usage: edit <relative-path> <text...>"),
        },
        "patch" => match file_text {
            Some((path, text)) => Directive::Patch { path, text },
            None => Directive::Usage("usage: patch <relative-path> <text...>"),
        },
        "mode" => match args.next() {
            Some(id) => Directive::Mode { id },
            None => Directive::Usage("usage: mode <mode-id>"),
        },
        "showcase" => Directive::Showcase,
        "hostile" => Directive::Hostile,
        "fswrite" => match first_and_tail(rest) {
            Some((path, text)) => Directive::FsWrite { path, text },
            None => Directive::Usage("usage: fswrite <path> <text...>"),
        },
        "put" => match first_and_tail(rest) {
            Some((path, text)) => Directive::Put { path, text },
            None => Directive::Usage("usage: put <path> <text...>"),
        },
        "run" if rest.is_empty() => Directive::Usage("usage: run <command...>"),
        "run" => Directive::Run { command: rest },
        "shell" => {
            // The command is the rest of the prompt, later lines too (a script, a heredoc).
            let start = text.find(line).map_or(text.len(), |at| at + word.len());
            match text[start..].trim() {
                "" => Directive::Usage("usage: shell <command...>"),
                command => Directive::Shell { command },
            }
        }
        "permissions" => match args.next().map(str::parse::<u32>) {
            Some(Ok(count)) => Directive::Permissions { count: count.min(MAX_PERMISSIONS) },
            _ => Directive::Usage("usage: permissions <K>"),
        },
        "token" => match (
            args.next().map(str::parse::<usize>),
            args.next().map(str::parse::<u64>),
            args.next().map(str::parse::<f64>),
        ) {
            (Some(Ok(bytes)), Some(Ok(chunks)), Some(Ok(rate)))
                if chunks > 0 && rate.is_finite() && rate > 0.0 =>
            {
                Directive::Token {
                    bytes: bytes.min(MAX_TOKEN_BYTES),
                    chunks: chunks.min(MAX_STREAM_CHUNKS),
                    rate,
                }
            }
            _ => Directive::Usage("usage: token <bytes> <chunks> <per_sec>"),
        },
        "options" => match args.next().map(str::parse::<u32>) {
            Some(Ok(count)) if count > 0 => Directive::Options { count: count.min(MAX_OPTIONS) },
            _ => Directive::Usage("usage: options <N> (1 or more)"),
        },
        "stream" => {
            let count = args.next().map(str::parse::<u64>);
            let rate = args.next().map(str::parse::<f64>);
            match (count, rate) {
                (Some(Ok(count)), None) => {
                    Directive::Stream { count: count.min(MAX_STREAM_CHUNKS), rate: None }
                }
                (Some(Ok(count)), Some(Ok(rate))) if rate.is_finite() && rate > 0.0 => {
                    Directive::Stream { count: count.min(MAX_STREAM_CHUNKS), rate: Some(rate) }
                }
                _ => Directive::Usage("usage: stream <N> [<rate_per_sec>]"),
            }
        }
        "read" => {
            let path = args.next();
            let line = args.next().map(str::parse::<u64>).transpose();
            let limit = args.next().map(str::parse::<u64>).transpose();
            match (path, line, limit) {
                (Some(path), Ok(line), Ok(limit)) => Directive::Read { path, line, limit },
                _ => Directive::Usage("usage: read <path> [line] [limit]"),
            }
        }
        "sleep" => match args.next().map(str::parse::<u64>) {
            Some(Ok(ms)) => Directive::Sleep { ms },
            _ => Directive::Usage("usage: sleep <ms>"),
        },
        "hold" => match args.next().map(str::parse::<u64>) {
            Some(Ok(ms)) => Directive::Hold { ms },
            _ => Directive::Usage("usage: hold <ms>"),
        },
        "stall" => Directive::Stall,
        "crash" => match args.next().map(str::parse::<i32>).transpose() {
            Ok(code) => Directive::Crash { code: code.unwrap_or(DEFAULT_CRASH_CODE) },
            Err(_) => Directive::Usage("usage: crash [code]"),
        },
        "malformed" => match args.next().map(str::parse::<u64>).transpose() {
            Ok(count) => Directive::Malformed { count: count.map(|n| n.min(MAX_MALFORMED_LINES)) },
            Err(_) => Directive::Usage("usage: malformed [N]"),
        },
        "early" => match (args.next().map(str::parse::<u64>), args.next().map(str::parse::<usize>)) {
            (Some(Ok(count)), Some(Ok(bytes))) => Directive::Early {
                count: count.min(MAX_EARLY_UPDATES),
                bytes: bytes.min(MAX_EARLY_UPDATE_BYTES),
            },
            _ => Directive::Usage("usage: early <N> <bytes>"),
        },
        "ignore-sigterm" => Directive::IgnoreSigterm,
        "linger" => Directive::Linger,
        "pid" => Directive::Pid,
        // Only `DEMO_*`: the demo agent must never become a way to read the daemon's credentials.
        "env" => match args.next() {
            Some(name) if name.starts_with(DEMO_ENV_PREFIX) => Directive::Env { name },
            _ => Directive::Usage("usage: env <DEMO_NAME> (variables named DEMO_* only)"),
        },
        "leak" => match args.next() {
            Some(name) if name.starts_with(DEMO_ENV_PREFIX) => Directive::Leak { name },
            _ => Directive::Usage("usage: leak <DEMO_NAME> (variables named DEMO_* only)"),
        },
        "escapee" => match args.next() {
            Some(pidfile) => Directive::Escapee { pidfile },
            None => Directive::Usage("usage: escapee <pidfile>"),
        },
        "echo-meta" => Directive::EchoMeta,
        "ask" => Directive::Ask,
        "elicit" => Directive::Elicit,
        "elicit-url" => match (args.next(), args.next().map(str::parse::<u64>).transpose()) {
            (Some(url), Ok(complete_after_ms)) => Directive::ElicitUrl { url, complete_after_ms },
            _ => Directive::Usage("usage: elicit-url <url> [complete-after-ms]"),
        },
        "elicit-raw" => match text[text.find(line).map_or(text.len(), |at| at + word.len())..].trim() {
            "" => Directive::Usage("usage: elicit-raw <json params>"),
            params => Directive::ElicitRaw { params },
        },
        _ => Directive::Echo,
    }
}

/// The first word of `rest` and the rest of the line after it, verbatim apart from leading
/// whitespace.
fn first_and_tail(rest: &str) -> Option<(&str, &str)> {
    let (first, tail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    (!first.is_empty()).then(|| (first, tail.trim_start()))
}

/// Splits `text` into at most `parts` non-empty pieces on char boundaries; they concatenate back to
/// `text`. Fewer pieces when `text` has fewer chars; none for an empty text.
fn split_chunks(text: &str, parts: usize) -> Vec<&str> {
    let boundaries: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let chars = boundaries.len();
    let parts = parts.min(chars);
    (0..parts)
        .map(|k| {
            let start = boundaries[k * chars / parts];
            let end = boundaries.get((k + 1) * chars / parts).copied().unwrap_or(text.len());
            &text[start..end]
        })
        .collect()
}

/// `path` as the agent sends it to the client: absolute paths as they are, relative ones joined to
/// the session's cwd with no normalisation (so `../x` can escape; the daemon must refuse it).
fn join_path(cwd: &str, path: &str) -> String {
    if path.starts_with('/') { path.to_owned() } else { format!("{}/{path}", cwd.trim_end_matches('/')) }
}

fn micros_since_epoch() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros())
}

fn permission_options() -> Value {
    json!([
        {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
        {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
        {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"}
    ])
}

fn is_allow(option_id: &str) -> bool {
    matches!(option_id, "allow_once" | "allow_always")
}

/// `message [errorKind]`, or just `message` when the error carries no kind.
fn describe(error: &RpcError) -> String {
    match error.data.as_ref().and_then(|d| d.get("errorKind")).and_then(Value::as_str) {
        Some(kind) => format!("{} [{kind}]", error.message),
        None => error.message.clone(),
    }
}

/// What a write does in each mode.
enum WriteGate {
    Ask,
    Allow,
    Refuse,
}

impl WriteGate {
    fn of(mode: &str) -> WriteGate {
        match mode {
            "accept-edits" => WriteGate::Allow,
            "plan" => WriteGate::Refuse,
            _ => WriteGate::Ask,
        }
    }
}

/// The text of `showcase`: each Markdown construct a client is expected to render.
const SHOWCASE_MARKDOWN: &str = "## What I found\n\n\
The workspace holds **three** entries; `src/` is the *interesting* one.\n\n\
- `Cargo.toml`: the manifest\n- `README.md`: the [documentation](https://example.com/docs)\n\n\
```sh\ncargo test --workspace\n```\n\n\
> Ask me to `write` a file to see a permission request.\n";

/// What `hostile` writes: set the window title (OSC 0 and 2), write the clipboard (OSC 52), clear
/// the screen and home the cursor (CSI), ring the bell, switch off the cursor and the alternate
/// screen (DECTCEM, 1049), return the carriage, a C1 "next line", a right-to-left override that
/// reverses a file name, a zero-width space; then a visible end mark.
pub const HOSTILE: &str = "\u{1b}]0;pwned-title\u{7}\u{1b}]2;pwned-title\u{1b}\\\u{1b}]52;c;cHduZWQ=\u{7}\u{1b}[2J\u{1b}[H\u{1b}[?25l\u{1b}[?1049l\r\u{85}\u{202e}gnp.exe\u{200b} HOSTILE-END";
/// The length of `hostile`'s unbroken line.
const HOSTILE_LINE_BYTES: usize = 1024 * 1024;

/// The turn ended because it was cancelled (by `session/cancel` or by a `cancelled` permission
/// outcome).
struct Cancelled;

#[derive(Clone, Copy, serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum StopReason {
    EndTurn,
    Cancelled,
}

enum Permission {
    Selected(String),
    Failed(RpcError),
}

/// One running prompt.
struct Turn {
    shared: Arc<Shared>,
    session_id: String,
    /// `session_id` as a JSON string, for the hand-built `stream` lines.
    session_json: String,
    cwd: String,
    cancel: CancellationToken,
}

/// Removes a pending call's entry however its wait ends.
struct PendingGuard<'a> {
    shared: &'a Shared,
    id: i64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(&self.shared.pending).remove(&self.id);
    }
}

impl Turn {
    /// The prompt's answer: how the turn stopped, or (`leak`) an error.
    async fn run(&self, text: &str) -> Result<StopReason, RpcError> {
        if let Directive::Leak { name } = parse_directive(text) {
            let value = std::env::var(name).unwrap_or_default();
            let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{name}={value}\n").as_bytes());
            let mut error = RpcError::new(INTERNAL_ERROR, format!("failed with {name}={value}"));
            error.data = Some(json!({"details": format!("the value was {value}")}));
            return Err(error);
        }
        match self.directive(text).await {
            Ok(()) => Ok(StopReason::EndTurn),
            Err(Cancelled) => Ok(StopReason::Cancelled),
        }
    }

    async fn directive(&self, text: &str) -> Result<(), Cancelled> {
        match parse_directive(text) {
            Directive::Echo => {
                for piece in split_chunks(text, ECHO_CHUNKS) {
                    self.chunk(piece).await;
                }
            }
            Directive::Write { path, text } | Directive::Edit { path, text } => {
                self.write(path, text).await?
            }
            Directive::Patch { path, text } => self.patch(path, text).await?,
            Directive::Mode { id } => self.switch_mode(id).await,
            Directive::Showcase => self.showcase().await,
            Directive::Hostile => self.hostile().await,
            Directive::Shell { command } => self.shell(command).await?,
            Directive::Permissions { count } => self.permissions(count).await?,
            Directive::Options { count } => self.options(count).await?,
            Directive::Ask => self.ask().await?,
            Directive::Elicit => self.elicit_form().await?,
            Directive::ElicitUrl { url, complete_after_ms } => {
                self.elicit_url(url, complete_after_ms).await?
            }
            Directive::ElicitRaw { params } => match serde_json::from_str::<Value>(params) {
                Ok(Value::Object(mut params)) => {
                    // A test may name another session (one the daemon must refuse).
                    params.entry("sessionId").or_insert_with(|| json!(self.session_id));
                    let reply = self.elicit(Value::Object(params)).await?;
                    self.chunk(&reply).await;
                }
                _ => self.chunk("usage: elicit-raw <a JSON object>").await,
            },
            Directive::Token { bytes, chunks, rate } => self.token(bytes, chunks, rate).await?,
            Directive::Stream { count, rate: None } => self.stream_fast(count).await?,
            Directive::Stream { count, rate: Some(rate) } => self.stream_paced(count, rate).await?,
            Directive::Read { path, line, limit } => {
                let mut params = json!({"sessionId": self.session_id, "path": join_path(&self.cwd, path)});
                if let Some(line) = line {
                    params["line"] = json!(line);
                }
                if let Some(limit) = limit {
                    params["limit"] = json!(limit);
                }
                let reply = match self.call(method::FS_READ_TEXT_FILE, params).await? {
                    Ok(result) => match result.get("content").and_then(Value::as_str) {
                        Some(content) => content.to_owned(),
                        None => "read failed: result has no content".to_owned(),
                    },
                    Err(e) => format!("read failed: {}", describe(&e)),
                };
                self.chunk(&reply).await;
            }
            Directive::FsWrite { path, text } => {
                let params = json!({"sessionId": self.session_id, "path": join_path(&self.cwd, path), "content": text});
                let reply = match self.call(method::FS_WRITE_TEXT_FILE, params).await? {
                    Ok(_) => format!("wrote {path}"),
                    Err(e) => format!("write failed: {}", describe(&e)),
                };
                self.chunk(&reply).await;
            }
            Directive::Put { path, text } => {
                let reply = match std::fs::write(join_path(&self.cwd, path), text) {
                    Ok(()) => format!("put {path}: ok"),
                    Err(e) => format!("put {path}: {e}"),
                };
                self.chunk(&reply).await;
            }
            Directive::Run { command } => self.run_command(command).await?,
            Directive::Sleep { ms } => {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ms)) => self.chunk(&format!("slept {ms}")).await,
                    () = self.cancel.cancelled() => return Err(Cancelled),
                }
            }
            Directive::Hold { ms } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                self.chunk(&format!("held {ms}")).await;
            }
            Directive::Stall => {
                self.cancel.cancelled().await;
                return Err(Cancelled);
            }
            Directive::Crash { code } => {
                tracing::info!(code, "crash directive: exiting");
                std::process::exit(code);
            }
            Directive::Malformed { count: None } => {
                self.shared.send(b"this is not json\n{\"jsonrpc\":\"2.0\"\n".to_vec()).await;
                self.chunk("sent malformed lines").await;
            }
            Directive::Malformed { count: Some(count) } => {
                for i in 0..count {
                    self.shared.send(format!("malformed line {i}\n").into_bytes()).await;
                }
                self.chunk(&format!("sent {count} malformed lines")).await;
            }
            Directive::Early { count, bytes } => {
                // A session id the daemon has never heard of, so every update is held as early.
                let unknown = format!("early-{}", uuid::Uuid::new_v4());
                let text = "x".repeat(bytes);
                for _ in 0..count {
                    let update = json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}});
                    let params = json!({"sessionId": unknown, "update": update});
                    self.shared.send(notification_line(method::SESSION_UPDATE, &params)).await;
                }
                self.chunk(&format!("sent {count} early updates")).await;
            }
            Directive::IgnoreSigterm => {
                ignore_sigterm(&self.shared);
                self.chunk("ignoring SIGTERM").await;
            }
            Directive::Linger => {
                self.shared.linger.store(true, Ordering::SeqCst);
                self.chunk("lingering").await;
            }
            Directive::Pid => self.chunk(&std::process::id().to_string()).await,
            Directive::Env { name } => {
                let value = std::env::var(name).unwrap_or_else(|_| format!("{name} is not set"));
                self.chunk(&value).await;
            }
            // Answered by `run`, before any directive runs.
            Directive::Leak { .. } => {}
            Directive::Escapee { pidfile } => {
                let script = "echo $$ > \"$1\"; exec sleep 300";
                let started = std::process::Command::new("setsid")
                    .args(["sh", "-c", script, "escapee", &join_path(&self.cwd, pidfile)])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn();
                let reply = match started {
                    Ok(_) => "started".to_owned(),
                    Err(e) => format!("cannot start: {e}"),
                };
                self.chunk(&reply).await;
            }
            Directive::EchoMeta => {
                self.update(json!({
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "echo-meta"},
                    "_meta": {"demo": {"nested": [1, 2, 3]}},
                    "extraField": "kept"
                }))
                .await;
            }
            Directive::Usage(usage) => self.chunk(usage).await,
        }
        Ok(())
    }

    async fn update(&self, update: Value) {
        record(&self.shared, &self.session_id, &update);
        let params = json!({"sessionId": self.session_id, "update": update});
        self.shared.send(notification_line(method::SESSION_UPDATE, &params)).await;
    }

    async fn chunk(&self, text: &str) {
        self.update(
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}),
        )
        .await;
    }

    async fn tool_call_status(&self, tool_call_id: &str, status: &str) {
        self.update(
            json!({"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id, "status": status}),
        )
        .await;
    }

    fn new_tool_call_id(&self) -> String {
        format!("call-{}", self.shared.next_tool_call.fetch_add(1, Ordering::Relaxed))
    }

    /// Calls the client and waits for its answer, giving up when the turn is cancelled.
    async fn call(&self, method: &str, params: Value) -> Result<Result<Value, RpcError>, Cancelled> {
        let id = self.shared.next_call_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&self.shared.pending);
            if pending.len() >= MAX_PENDING_CALLS {
                return Ok(Err(RpcError::new(INTERNAL_ERROR, "too many outstanding calls")));
            }
            pending.insert(id, tx);
        }
        let _guard = PendingGuard { shared: &self.shared, id };
        self.shared.send(request_line(id, method, &params)).await;
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(Cancelled),
            answer = rx => Ok(answer.unwrap_or_else(|_| Err(RpcError::new(INTERNAL_ERROR, "call abandoned")))),
        }
    }

    /// Asks `session/request_permission`; a `cancelled` outcome cancels the turn.
    async fn ask_permission(&self, tool_call: Value) -> Result<Permission, Cancelled> {
        self.ask_permission_with(tool_call, permission_options()).await
    }

    async fn ask_permission_with(&self, tool_call: Value, options: Value) -> Result<Permission, Cancelled> {
        let params = json!({"sessionId": self.session_id, "toolCall": tool_call, "options": options});
        let result = match self.call(method::SESSION_REQUEST_PERMISSION, params).await? {
            Ok(result) => result,
            Err(e) => return Ok(Permission::Failed(e)),
        };
        let outcome = &result["outcome"];
        match (outcome["outcome"].as_str(), outcome["optionId"].as_str()) {
            (Some("selected"), Some(option)) => Ok(Permission::Selected(option.to_owned())),
            (Some("cancelled"), _) => Err(Cancelled),
            _ => Ok(Permission::Failed(RpcError::new(
                INVALID_PARAMS,
                format!("bad permission outcome: {result}"),
            ))),
        }
    }

    /// Announces a pending tool call, asks permission for it, and reports a refusal. `Some(id)` when
    /// allowed.
    async fn gated_tool_call(&self, mut tool_call: Value) -> Result<Option<String>, Cancelled> {
        let tool_call_id = self.new_tool_call_id();
        tool_call["toolCallId"] = json!(tool_call_id);
        tool_call["status"] = json!("pending");
        let mut update = tool_call.clone();
        update["sessionUpdate"] = json!("tool_call");
        self.update(update).await;
        match self.ask_permission(tool_call).await? {
            Permission::Selected(option) if is_allow(&option) => return Ok(Some(tool_call_id)),
            Permission::Selected(_) => {
                self.tool_call_status(&tool_call_id, "failed").await;
                self.chunk("permission denied").await;
            }
            Permission::Failed(e) => {
                self.tool_call_status(&tool_call_id, "failed").await;
                self.chunk(&format!("permission request failed: {}", describe(&e))).await;
            }
        }
        Ok(None)
    }

    /// `patch`: a tool call whose approving option carries the patch (`data.diff`, as an
    /// `apply_patch` option does), so the person reads it on the option itself; written on `apply`.
    async fn patch(&self, path: &str, text: &str) -> Result<(), Cancelled> {
        let abs = join_path(&self.cwd, path);
        let tool_call_id = self.new_tool_call_id();
        let tool_call = json!({
            "toolCallId": tool_call_id, "title": format!("Patch {path}"), "kind": "edit",
            "status": "pending", "locations": [{"path": abs}],
        });
        let mut update = tool_call.clone();
        update["sessionUpdate"] = json!("tool_call");
        self.update(update).await;
        let added: String = text.split('\n').map(|l| format!("+{l}\n")).collect();
        let diff =
            format!("--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{} @@\n{added}", text.split('\n').count());
        let options = json!([
            {"optionId": "apply", "name": "Apply patch", "kind": "allow_once", "data": {"diff": diff}},
            {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"}
        ]);
        match self.ask_permission_with(tool_call, options).await? {
            Permission::Selected(option) if option == "apply" => {
                let params = json!({"sessionId": self.session_id, "path": abs, "content": text});
                let done = self.call(method::FS_WRITE_TEXT_FILE, params).await?.is_ok();
                self.tool_call_status(&tool_call_id, if done { "completed" } else { "failed" }).await;
                self.chunk(if done { "patched" } else { "patch failed" }).await;
            }
            _ => {
                self.tool_call_status(&tool_call_id, "failed").await;
                self.chunk("permission denied").await;
            }
        }
        Ok(())
    }

    /// The session's mode now.
    fn mode(&self) -> &'static str {
        lock(&self.shared.sessions).get(&self.session_id).map_or(MODES[0].0, |s| s.mode)
    }

    /// `write` (and `edit`, the same), gated by the session's mode. The file is read first
    /// (`fs/read_text_file`), so the tool call carries the change as an ACP `diff` content with
    /// the file's text as `oldText` — `null` only for a file that is not there (a new file) —, as
    /// real agents send a write, and the text in `rawInput`.
    async fn write(&self, path: &str, text: &str) -> Result<(), Cancelled> {
        let abs = join_path(&self.cwd, path);
        let ask = match WriteGate::of(self.mode()) {
            WriteGate::Refuse => {
                self.chunk(&format!("plan mode: not writing {path}")).await;
                return Ok(());
            }
            WriteGate::Ask => true,
            WriteGate::Allow => false,
        };
        let read = json!({"sessionId": self.session_id, "path": abs});
        let old_text = match self.call(method::FS_READ_TEXT_FILE, read).await? {
            Ok(result) => result.get("content").cloned().unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        let mut tool_call = json!({
            "title": format!("Write {path}"),
            "kind": "edit",
            "locations": [{"path": abs}],
            "content": [{"type": "diff", "path": abs, "oldText": old_text, "newText": text}],
            "rawInput": {"path": abs, "content": text}
        });
        let tool_call_id = if ask {
            match self.gated_tool_call(tool_call).await? {
                Some(id) => id,
                None => return Ok(()),
            }
        } else {
            let id = self.new_tool_call_id();
            tool_call["toolCallId"] = json!(id);
            tool_call["status"] = json!("in_progress");
            tool_call["sessionUpdate"] = json!("tool_call");
            self.update(tool_call).await;
            id
        };
        let params = json!({"sessionId": self.session_id, "path": abs, "content": text});
        match self.call(method::FS_WRITE_TEXT_FILE, params).await? {
            Ok(_) => {
                self.tool_call_status(&tool_call_id, "completed").await;
                self.chunk(&format!("wrote {path}")).await;
            }
            Err(e) => {
                self.tool_call_status(&tool_call_id, "failed").await;
                self.chunk(&format!("write failed: {}", e.message)).await;
            }
        }
        Ok(())
    }

    /// The agent changes its own mode, as an agent leaving plan mode does, and says so.
    async fn switch_mode(&self, id: &str) {
        let Some(mode) = mode_named(id) else {
            let known: Vec<&str> = MODES.iter().map(|(m, _, _)| *m).collect();
            self.chunk(&format!("unknown mode {id}; modes: {}", known.join(", "))).await;
            return;
        };
        if let Some(session) = lock(&self.shared.sessions).get_mut(&self.session_id) {
            session.mode = mode;
        }
        self.update(json!({"sessionUpdate": "current_mode_update", "currentModeId": mode})).await;
        self.chunk(&format!("mode {mode}")).await;
    }

    /// One of each kind of update a client renders: a thought, a plan, Markdown text, a finished
    /// tool call with output.
    async fn showcase(&self) {
        self.update(json!({
            "sessionUpdate": "agent_thought_chunk",
            "content": {"type": "text", "text": "The person wants to see every kind of update; start with a plan."}
        }))
        .await;
        self.update(json!({"sessionUpdate": "plan", "entries": [
            {"content": "Read the request", "priority": "high", "status": "completed"},
            {"content": "Run a command", "priority": "medium", "status": "completed"},
            {"content": "Answer in Markdown", "priority": "low", "status": "in_progress"}
        ]}))
        .await;
        let id = self.new_tool_call_id();
        self.update(json!({
            "sessionUpdate": "tool_call", "toolCallId": id, "title": "List the workspace", "kind": "execute",
            "status": "in_progress", "rawInput": {"command": "ls"}
        }))
        .await;
        self.update(json!({
            "sessionUpdate": "tool_call_update", "toolCallId": id, "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "Cargo.toml\nREADME.md\nsrc/\n"}}]
        }))
        .await;
        for piece in SHOWCASE_MARKDOWN.split_inclusive("\n\n") {
            self.chunk(piece).await;
        }
    }

    /// `hostile`: what a compromised or confused agent could write to take over a client's
    /// terminal or mislead its reader, in every kind of update: [`HOSTILE`] in a thought, a plan
    /// entry, a tool call's title, command and output, and a message; then a line of 1 MiB.
    async fn hostile(&self) {
        self.update(
            json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": HOSTILE}}),
        )
        .await;
        self.update(json!({"sessionUpdate": "plan", "entries": [{"content": HOSTILE, "priority": "high", "status": "pending"}]})).await;
        let id = self.new_tool_call_id();
        self.update(json!({
            "sessionUpdate": "tool_call", "toolCallId": id, "title": HOSTILE, "kind": "execute",
            "status": "completed", "rawInput": {"command": HOSTILE},
            "content": [{"type": "content", "content": {"type": "text", "text": HOSTILE}}]
        }))
        .await;
        self.chunk(&format!("{HOSTILE}\n\n")).await;
        let mut line = "M".repeat(HOSTILE_LINE_BYTES);
        line.push_str(" END-OF-THE-MEGABYTE\n");
        self.chunk(&line).await;
    }

    async fn shell(&self, command: &str) -> Result<(), Cancelled> {
        let tool_call =
            json!({"title": format!("Run {command}"), "kind": "execute", "rawInput": {"command": command}});
        if let Some(tool_call_id) = self.gated_tool_call(tool_call).await? {
            self.tool_call_status(&tool_call_id, "completed").await;
            self.chunk(&format!("would run: {command}")).await;
        }
        Ok(())
    }

    /// `run`: the agent's own shell tool, as Claude Code's or Qwen Code's runs without asking when
    /// they are told to: a `tool_call`, `sh -c` in the session's cwd, then the call `completed` (exit
    /// 0) or `failed` with the output, and the same output as the reply.
    async fn run_command(&self, command: &str) -> Result<(), Cancelled> {
        let tool_call_id = self.new_tool_call_id();
        self.update(json!({
            "sessionUpdate": "tool_call", "toolCallId": tool_call_id, "title": format!("Run {command}"),
            "kind": "execute", "status": "in_progress", "rawInput": {"command": command},
        }))
        .await;
        let run = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(&self.cwd)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let (ok, reply) = tokio::select! {
            out = run => match out {
                Ok(out) => {
                    let code = out.status.code().map_or_else(|| "signal".to_owned(), |c| c.to_string());
                    let mut text = format!("exit {code}\n");
                    text.push_str(&String::from_utf8_lossy(&out.stdout));
                    text.push_str(&String::from_utf8_lossy(&out.stderr));
                    let mut end = text.len().min(MAX_RUN_OUTPUT);
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.truncate(end);
                    (out.status.success(), text)
                }
                Err(e) => (false, format!("cannot run sh: {e}")),
            },
            () = self.cancel.cancelled() => return Err(Cancelled),
        };
        self.update(json!({
            "sessionUpdate": "tool_call_update", "toolCallId": tool_call_id,
            "status": if ok { "completed" } else { "failed" },
            "content": [{"type": "content", "content": {"type": "text", "text": reply}}],
        }))
        .await;
        self.chunk(&reply).await;
        Ok(())
    }

    /// Asks one permission with `count` options (`opt-1`… named `Option 1`…, the first of kind
    /// `allow_once`, the rest alternating `reject_once` and `allow_always`); replies with the one
    /// chosen.
    async fn options(&self, count: u32) -> Result<(), Cancelled> {
        let options: Vec<Value> = (1..=count)
            .map(|i| {
                let kind = match i {
                    1 => "allow_once",
                    i if i % 2 == 0 => "reject_once",
                    _ => "allow_always",
                };
                json!({"optionId": format!("opt-{i}"), "name": format!("Option {i}"), "kind": kind})
            })
            .collect();
        let tool_call = json!({"toolCallId": self.new_tool_call_id(), "title": format!("Choose among {count}"), "kind": "other"});
        let params = json!({"sessionId": self.session_id, "toolCall": tool_call, "options": options});
        let reply = match self.call(method::SESSION_REQUEST_PERMISSION, params).await? {
            Ok(result) => format!("outcome: {}", result["outcome"]),
            Err(e) => format!("failed: {}", describe(&e)),
        };
        self.chunk(&reply).await;
        Ok(())
    }

    /// `ask`: Qwen Code's `ask_user_question` as Qwen Code 0.24 sends it (a permission request
    /// whose tool call's `_meta` holds the questions), then the answers as it reads them.
    async fn ask(&self) -> Result<(), Cancelled> {
        let questions = json!([
            {"question": "Which library should we use?", "header": "Library", "multiSelect": false,
                "options": [{"label": "chrono", "description": "The classic"}, {"label": "jiff", "description": "Newer, with time zones"}]},
            {"question": "Which features do you want?", "header": "Features", "multiSelect": true,
                "options": [{"label": "serde", "description": "Serialization"}, {"label": "tz", "description": "Time zones"}]},
        ]);
        let tool_call_id = self.new_tool_call_id();
        let tool_call = json!({
            "toolCallId": tool_call_id, "status": "pending", "title": "Ask user 2 questions", "kind": "think",
            "rawInput": {"questions": questions},
            "_meta": {"toolName": "ask_user_question", "qwenInteractionKind": "user_question", "qwenQuestions": questions},
        });
        let options = json!([
            {"optionId": "proceed_once", "name": "Submit", "kind": "allow_once"},
            {"optionId": "cancel", "name": "Cancel", "kind": "reject_once"},
        ]);
        let params = json!({"sessionId": self.session_id, "toolCall": tool_call, "options": options});
        let reply = match self.call(method::SESSION_REQUEST_PERMISSION, params).await? {
            Ok(result) if result["outcome"]["optionId"] == "proceed_once" => {
                format!("answers: {}", result.get("answers").unwrap_or(&Value::Null))
            }
            Ok(result) if result["outcome"]["outcome"] == "cancelled" => "question cancelled".to_owned(),
            Ok(_) => "declined to answer".to_owned(),
            Err(e) => format!("failed: {}", describe(&e)),
        };
        self.chunk(&reply).await;
        Ok(())
    }

    /// `elicit`: a form, then what the client answered.
    async fn elicit_form(&self) -> Result<(), Cancelled> {
        let params = json!({
            "sessionId": self.session_id, "mode": "form", "message": "Where should this deploy?",
            "requestedSchema": {"type": "object", "required": ["name", "replicas"], "properties": {
                "name": {"type": "string", "title": "Name", "description": "The service's name", "minLength": 1, "maxLength": 40},
                "replicas": {"type": "integer", "title": "Replicas", "minimum": 1, "maximum": 9},
                "region": {"type": "string", "title": "Region", "oneOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "United States"}]},
                "agree": {"type": "boolean", "title": "Agree to the terms"},
                "token": {"type": "string", "title": "API token", "description": "Kept out of the audit"},
            }},
        });
        let reply = self.elicit(params).await?;
        self.chunk(&reply).await;
        Ok(())
    }

    /// `elicit-url`: a URL for the person to open; `elicitation/complete` after `complete_after_ms`
    /// (while pending), or once accepted.
    async fn elicit_url(&self, url: &str, complete_after_ms: Option<u64>) -> Result<(), Cancelled> {
        let id = format!("demo-elicitation-{}", self.shared.next_tool_call.fetch_add(1, Ordering::Relaxed));
        let params = json!({
            "sessionId": self.session_id, "mode": "url", "elicitationId": id, "url": url,
            "message": "Sign in to continue",
        });
        let complete = notification_line(method::ELICITATION_COMPLETE, &json!({"elicitationId": id}));
        let early = complete_after_ms.map(|ms| {
            let (shared, line) = (self.shared.clone(), complete.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                shared.send(line).await;
            })
        });
        let reply = self.elicit(params).await?;
        match early {
            Some(task) => task.abort(),
            None if reply == "action: accept" => self.shared.send(complete).await,
            None => {}
        }
        self.chunk(&reply).await;
        Ok(())
    }

    /// Sends `elicitation/create` (when the client offered its mode at `initialize`), and says what
    /// came back: `action: accept content: {...}`, `action: decline`, `failed: ...`.
    async fn elicit(&self, params: Value) -> Result<String, Cancelled> {
        let mode = params["mode"].as_str().unwrap_or_default().to_owned();
        if !lock(&self.shared.elicitation).contains(&mode) {
            return Ok(format!("the client did not offer elicitation mode {mode:?}"));
        }
        Ok(match self.call(method::ELICITATION_CREATE, params).await? {
            Ok(result) => match (result["action"].as_str(), result.get("content")) {
                (Some(action), Some(content)) => format!("action: {action} content: {content}"),
                (Some(action), None) => format!("action: {action}"),
                _ => format!("bad elicitation result: {result}"),
            },
            Err(e) => format!("failed: {}", describe(&e)),
        })
    }

    async fn permissions(&self, count: u32) -> Result<(), Cancelled> {
        let mut outcomes = Vec::new();
        for i in 1..=count {
            let tool_call = json!({
                "toolCallId": self.new_tool_call_id(),
                "title": format!("Permission {i} of {count}"),
                "kind": "other",
                "status": "pending"
            });
            // A `cancelled` outcome is recorded; only a cancelled turn stops the sequence.
            let outcome = match self.ask_permission(tool_call).await {
                Ok(Permission::Selected(option)) => option,
                Ok(Permission::Failed(_)) => "error".to_owned(),
                Err(Cancelled) if self.cancel.is_cancelled() => return Err(Cancelled),
                Err(Cancelled) => "cancelled".to_owned(),
            };
            outcomes.push(outcome);
        }
        self.chunk(&format!("outcomes: {}", outcomes.join(","))).await;
        Ok(())
    }

    fn stream_line(&self, i: u64) -> Vec<u8> {
        format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{{\"sessionId\":{},\"update\":\
             {{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{{\"type\":\"text\",\"text\":\"tok{i} \"}},\
             \"_meta\":{{\"emittedAtUs\":{}}}}}}}}}\n",
            self.session_json,
            micros_since_epoch()
        )
        .into_bytes()
    }

    async fn stream_fast(&self, count: u64) -> Result<(), Cancelled> {
        for i in 0..count {
            if self.cancel.is_cancelled() {
                return Err(Cancelled);
            }
            self.shared.send(self.stream_line(i)).await;
        }
        Ok(())
    }

    /// Streams one word of `bytes` letters (`a`…`z` in turn, no space) as `chunks` chunks, paced.
    async fn token(&self, bytes: usize, chunks: u64, rate: f64) -> Result<(), Cancelled> {
        let word: String = (0..bytes).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let parts = chunks.min(bytes.max(1) as u64) as usize;
        let period = Duration::try_from_secs_f64(1.0 / rate).unwrap_or(Duration::ZERO);
        let mut ticks = tokio::time::interval(period.max(Duration::from_micros(1)));
        for k in 0..parts {
            let piece = &word[k * bytes / parts..(k + 1) * bytes / parts];
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Err(Cancelled),
                _ = ticks.tick() => self.chunk(piece).await,
            }
        }
        Ok(())
    }

    async fn stream_paced(&self, count: u64, rate: f64) -> Result<(), Cancelled> {
        let period = match Duration::try_from_secs_f64(1.0 / rate) {
            Ok(period) if !period.is_zero() => period,
            // A rate too high to pace is no pacing at all.
            _ => return self.stream_fast(count).await,
        };
        let mut ticks = tokio::time::interval(period);
        for i in 0..count {
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Err(Cancelled),
                _ = ticks.tick() => self.shared.send(self.stream_line(i)).await,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, DuplexStream, Lines, ReadHalf, WriteHalf};

    #[test]
    fn directive_words_are_case_insensitive_and_plain_text_is_echo() {
        assert_eq!(parse_directive("hello world"), Directive::Echo);
        assert_eq!(parse_directive(""), Directive::Echo);
        assert_eq!(parse_directive("\n  \n  STALL now\nmore"), Directive::Stall);
        assert_eq!(parse_directive("Pid"), Directive::Pid);
        assert_eq!(parse_directive("echo-meta"), Directive::EchoMeta);
        assert_eq!(parse_directive("ask"), Directive::Ask);
        assert_eq!(parse_directive("elicit"), Directive::Elicit);
        assert_eq!(
            parse_directive("elicit-url https://x.example/ 250"),
            Directive::ElicitUrl { url: "https://x.example/", complete_after_ms: Some(250) }
        );
        assert_eq!(
            parse_directive("elicit-url https://x.example/"),
            Directive::ElicitUrl { url: "https://x.example/", complete_after_ms: None }
        );
        assert!(matches!(parse_directive("elicit-url"), Directive::Usage(_)));
        assert!(matches!(parse_directive("elicit-url https://x.example/ soon"), Directive::Usage(_)));
        assert_eq!(
            parse_directive("elicit-raw {\"mode\": \"url\"}\n"),
            Directive::ElicitRaw { params: "{\"mode\": \"url\"}" }
        );
        assert!(matches!(parse_directive("elicit-raw"), Directive::Usage(_)));
        assert_eq!(parse_directive("env DEMO_ROLE"), Directive::Env { name: "DEMO_ROLE" });
        assert!(matches!(parse_directive("env MEDIATORD_TOKEN"), Directive::Usage(_)));
        assert!(matches!(parse_directive("env"), Directive::Usage(_)));
        assert_eq!(parse_directive("ignore-sigterm"), Directive::IgnoreSigterm);
        assert_eq!(parse_directive("linger"), Directive::Linger);
        assert_eq!(parse_directive("malformed"), Directive::Malformed { count: None });
        assert_eq!(parse_directive("malformed 5"), Directive::Malformed { count: Some(5) });
        assert_eq!(parse_directive("early 3 10"), Directive::Early { count: 3, bytes: 10 });
        assert!(matches!(parse_directive("early 3"), Directive::Usage(_)));
        assert_eq!(parse_directive("hold 5"), Directive::Hold { ms: 5 });
        assert_eq!(parse_directive("writer of things"), Directive::Echo);
    }

    #[test]
    fn directive_arguments_parse_or_give_usage() {
        assert_eq!(
            parse_directive("write notes/a.txt  hello   there\nnext line  "),
            Directive::Write { path: "notes/a.txt", text: "hello   there\nnext line  " }
        );
        assert_eq!(parse_directive("write a.txt"), Directive::Write { path: "a.txt", text: "" });
        assert_eq!(parse_directive("patch b.txt hi"), Directive::Patch { path: "b.txt", text: "hi" });
        assert!(matches!(parse_directive("write"), Directive::Usage(_)));
        assert_eq!(parse_directive("fswrite ../x y"), Directive::FsWrite { path: "../x", text: "y" });
        assert_eq!(parse_directive("shell rm -rf  build"), Directive::Shell { command: "rm -rf  build" });
        assert_eq!(parse_directive("put ../x y z"), Directive::Put { path: "../x", text: "y z" });
        assert_eq!(parse_directive("run touch  /tmp/x"), Directive::Run { command: "touch  /tmp/x" });
        assert_eq!(parse_directive("run"), Directive::Usage("usage: run <command...>"));
        assert_eq!(parse_directive("put x"), Directive::Put { path: "x", text: "" }, "an empty file");
        assert_eq!(parse_directive("put"), Directive::Usage("usage: put <path> <text...>"));
        assert_eq!(
            parse_directive("\n shell cat <<EOF\nline 2\nEOF\n"),
            Directive::Shell { command: "cat <<EOF\nline 2\nEOF" }
        );
        assert!(matches!(parse_directive("shell"), Directive::Usage(_)));
        assert_eq!(parse_directive("permissions 3"), Directive::Permissions { count: 3 });
        assert_eq!(
            parse_directive("permissions 99999999"),
            Directive::Permissions { count: MAX_PERMISSIONS }
        );
        assert_eq!(parse_directive("stream 5"), Directive::Stream { count: 5, rate: None });
        assert_eq!(parse_directive("stream 5 2.5"), Directive::Stream { count: 5, rate: Some(2.5) });
        assert_eq!(
            parse_directive("stream 99999999999"),
            Directive::Stream { count: MAX_STREAM_CHUNKS, rate: None }
        );
        assert!(matches!(parse_directive("stream 5 0"), Directive::Usage(_)));
        assert!(matches!(parse_directive("stream 5 nan"), Directive::Usage(_)));
        assert!(matches!(parse_directive("stream x"), Directive::Usage(_)));
        assert_eq!(parse_directive("read a.txt"), Directive::Read { path: "a.txt", line: None, limit: None });
        assert_eq!(
            parse_directive("read /abs 2 10"),
            Directive::Read { path: "/abs", line: Some(2), limit: Some(10) }
        );
        assert!(matches!(parse_directive("read a.txt two"), Directive::Usage(_)));
        assert_eq!(parse_directive("sleep 250"), Directive::Sleep { ms: 250 });
        assert!(matches!(parse_directive("sleep"), Directive::Usage(_)));
        assert_eq!(parse_directive("crash"), Directive::Crash { code: DEFAULT_CRASH_CODE });
        assert_eq!(parse_directive("crash 7"), Directive::Crash { code: 7 });
        assert!(matches!(parse_directive("crash x"), Directive::Usage(_)));
        assert_eq!(
            parse_directive("edit a.txt new text"),
            Directive::Edit { path: "a.txt", text: "new text" }
        );
        assert!(matches!(parse_directive("edit"), Directive::Usage(_)));
        assert_eq!(parse_directive("mode plan"), Directive::Mode { id: "plan" });
        assert!(matches!(parse_directive("mode"), Directive::Usage(_)));
        assert_eq!(parse_directive("showcase"), Directive::Showcase);
    }

    #[test]
    fn echo_chunks_concatenate_to_the_original_text() {
        for text in ["", "a", "ab", "abc", "abcd", "hello world", "héllo wörld ✓", "ü\n\nx  "] {
            let pieces = split_chunks(text, ECHO_CHUNKS);
            assert_eq!(pieces.concat(), text);
            assert_eq!(pieces.len(), text.chars().count().min(ECHO_CHUNKS));
            assert!(pieces.iter().all(|p| !p.is_empty()));
        }
    }

    #[test]
    fn relative_paths_join_the_cwd_without_normalising() {
        assert_eq!(join_path("/ws", "a/b.txt"), "/ws/a/b.txt");
        assert_eq!(join_path("/ws/", "../x"), "/ws/../x");
        assert_eq!(join_path("/", "x"), "/x");
        assert_eq!(join_path("/ws", "/etc/passwd"), "/etc/passwd");
    }

    #[test]
    fn help_lists_every_directive() {
        for word in [
            "write",
            "shell",
            "permissions",
            "options",
            "token",
            "stream",
            "read",
            "fswrite",
            "sleep",
            "hold",
            "early",
            "stall",
            "crash",
            "malformed",
            "ignore-sigterm",
            "linger",
            "pid",
            "env",
            "leak",
            "escapee",
            "echo-meta",
            "edit",
            "mode",
            "showcase",
            "hostile",
        ] {
            assert!(DIRECTIVES_HELP.lines().any(|l| l.trim_start().starts_with(word)), "{word}");
        }
    }

    /// The client side of an in-memory agent.
    struct Client {
        to_agent: WriteHalf<DuplexStream>,
        from_agent: Lines<BufReader<ReadHalf<DuplexStream>>>,
    }

    const TEST_TIMEOUT: Duration = Duration::from_secs(5);

    impl Client {
        fn start() -> Client {
            let (client, agent) = tokio::io::duplex(1 << 20);
            let (agent_read, agent_write) = tokio::io::split(agent);
            tokio::spawn(serve(BufReader::new(agent_read), agent_write, DemoOptions::default()));
            let (from_agent, to_agent) = tokio::io::split(client);
            Client { to_agent, from_agent: BufReader::new(from_agent).lines() }
        }

        async fn send_raw(&mut self, line: &str) {
            self.to_agent.write_all(format!("{line}\n").as_bytes()).await.expect("pipe open");
        }

        async fn send(&mut self, value: Value) {
            self.send_raw(&value.to_string()).await;
        }

        async fn request(&mut self, id: i64, method: &str, params: Value) {
            self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        }

        async fn recv(&mut self) -> Value {
            let line = tokio::time::timeout(TEST_TIMEOUT, self.from_agent.next_line())
                .await
                .expect("agent answers in time")
                .expect("pipe readable")
                .expect("agent still writing");
            serde_json::from_str(&line).expect("agent writes JSON")
        }

        async fn new_session(&mut self, cwd: &str) -> String {
            self.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []})).await;
            let reply = self.recv().await;
            reply["result"]["sessionId"].as_str().expect("a session id").to_owned()
        }

        async fn prompt(&mut self, id: i64, session: &str, text: &str) {
            let params = json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]});
            self.request(id, "session/prompt", params).await;
        }
    }

    #[tokio::test]
    async fn initialize_session_new_and_echo_prompt() {
        let mut client = Client::start();
        client.send_raw("this is not json").await;
        client.request(0, "initialize", json!({"protocolVersion": 1})).await;
        let init = client.recv().await;
        assert_eq!(init["id"], 0);
        assert_eq!(init["result"]["protocolVersion"], 1);
        assert_eq!(init["result"]["_meta"]["qwen-code/external-tool-guard-ready"], "required-v1");

        let session = client.new_session("/ws").await;
        assert!(session.starts_with("demo-"));

        client.prompt(2, &session, "hello world").await;
        let mut echoed = String::new();
        for _ in 0..ECHO_CHUNKS {
            let update = client.recv().await;
            assert_eq!(update["method"], "session/update");
            assert_eq!(update["params"]["sessionId"], session.as_str());
            assert_eq!(update["params"]["update"]["sessionUpdate"], "agent_message_chunk");
            echoed.push_str(update["params"]["update"]["content"]["text"].as_str().expect("text"));
        }
        assert_eq!(echoed, "hello world");
        assert_eq!(
            client.recv().await,
            json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}})
        );

        client.request(3, "session/set_model", json!({"sessionId": session, "modelId": "nope"})).await;
        assert_eq!(client.recv().await["error"]["code"], INVALID_PARAMS);
        client.request(4, "no/such_method", json!({})).await;
        assert_eq!(client.recv().await["error"]["code"], crate::acp::METHOD_NOT_FOUND);
    }

    #[tokio::test]
    async fn write_prompt_allowed_writes_through_the_client() {
        let mut client = Client::start();
        let session = client.new_session("/ws").await;
        client.prompt(2, &session, "write notes/a.txt hi there").await;

        // The file is read first: not there, so the change is a new file's.
        let read = client.recv().await;
        assert_eq!(read["method"], "fs/read_text_file");
        assert_eq!(read["params"]["path"], "/ws/notes/a.txt");
        let missing = json!({"code": crate::acp::RESOURCE_NOT_FOUND, "message": "no such file"});
        client.send(json!({"jsonrpc": "2.0", "id": read["id"], "error": missing})).await;
        let tool_call = client.recv().await["params"]["update"].clone();
        assert_eq!(tool_call["sessionUpdate"], "tool_call");
        assert_eq!(tool_call["content"][0]["oldText"], Value::Null);
        assert_eq!(tool_call["kind"], "edit");
        assert_eq!(tool_call["title"], "Write notes/a.txt");
        assert_eq!(tool_call["locations"], json!([{"path": "/ws/notes/a.txt"}]));

        let ask = client.recv().await;
        assert_eq!(ask["method"], "session/request_permission");
        assert_eq!(ask["params"]["toolCall"]["toolCallId"], tool_call["toolCallId"]);
        assert_eq!(ask["params"]["options"][0]["kind"], "allow_once");
        let outcome = json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});
        client.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": outcome})).await;

        let write = client.recv().await;
        assert_eq!(write["method"], "fs/write_text_file");
        assert_eq!(
            write["params"],
            json!({"sessionId": session, "path": "/ws/notes/a.txt", "content": "hi there"})
        );
        client.send(json!({"jsonrpc": "2.0", "id": write["id"], "result": null})).await;

        let done = client.recv().await["params"]["update"].clone();
        assert_eq!(done["sessionUpdate"], "tool_call_update");
        assert_eq!(done["status"], "completed");
        assert_eq!(client.recv().await["params"]["update"]["content"]["text"], "wrote notes/a.txt");
        assert_eq!(client.recv().await["result"]["stopReason"], "end_turn");
    }

    #[tokio::test]
    async fn cancel_ends_a_stalled_prompt() {
        let mut client = Client::start();
        let session = client.new_session("/ws").await;
        client.prompt(2, &session, "stall").await;
        client
            .send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}))
            .await;
        assert_eq!(
            client.recv().await,
            json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "cancelled"}})
        );

        // The next prompt of the session is not born cancelled.
        client.prompt(3, &session, "pid").await;
        let pid = client.recv().await["params"]["update"]["content"]["text"].clone();
        assert_eq!(pid, std::process::id().to_string());
        assert_eq!(client.recv().await["result"]["stopReason"], "end_turn");
    }

    #[tokio::test]
    async fn cancel_ends_a_turn_waiting_on_an_unanswered_permission() {
        let mut client = Client::start();
        let session = client.new_session("/ws").await;
        client.prompt(2, &session, "shell make deploy").await;
        assert_eq!(client.recv().await["params"]["update"]["kind"], "execute");
        assert_eq!(client.recv().await["method"], "session/request_permission");
        client
            .send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}))
            .await;
        assert_eq!(client.recv().await["result"]["stopReason"], "cancelled");
    }

    #[tokio::test]
    async fn modes_gate_writes_and_the_agent_announces_its_own_switch() {
        let mut client = Client::start();
        client.request(1, "session/new", json!({"cwd": "/ws", "mcpServers": []})).await;
        let created = client.recv().await["result"].clone();
        let session = created["sessionId"].as_str().expect("id").to_owned();
        let modes: Vec<&str> = created["modes"]["availableModes"]
            .as_array()
            .expect("modes")
            .iter()
            .map(|m| m["id"].as_str().expect("id"))
            .collect();
        assert_eq!(modes, ["default", "accept-edits", "plan"]);
        assert_eq!(created["modes"]["currentModeId"], "default");

        client.request(2, "session/set_mode", json!({"sessionId": session, "modeId": "nope"})).await;
        assert_eq!(client.recv().await["error"]["code"], INVALID_PARAMS);
        client.request(3, "session/set_mode", json!({"sessionId": session, "modeId": "accept-edits"})).await;
        assert_eq!(client.recv().await, json!({"jsonrpc": "2.0", "id": 3, "result": {}}));

        // accept-edits: the write is announced and done without a permission request.
        client.prompt(4, &session, "write a.txt hi").await;
        let read = client.recv().await;
        assert_eq!(read["method"], "fs/read_text_file");
        client.send(json!({"jsonrpc": "2.0", "id": read["id"], "result": {"content": "before"}})).await;
        assert_eq!(client.recv().await["params"]["update"]["sessionUpdate"], "tool_call");
        let write = client.recv().await;
        assert_eq!(write["method"], "fs/write_text_file");
        client.send(json!({"jsonrpc": "2.0", "id": write["id"], "result": null})).await;
        assert_eq!(client.recv().await["params"]["update"]["status"], "completed");
        assert_eq!(client.recv().await["params"]["update"]["content"]["text"], "wrote a.txt");
        assert_eq!(client.recv().await["result"]["stopReason"], "end_turn");

        // The agent switches to plan by itself, says so, and then refuses to write.
        client.prompt(5, &session, "mode plan").await;
        let update = client.recv().await["params"]["update"].clone();
        assert_eq!(update, json!({"sessionUpdate": "current_mode_update", "currentModeId": "plan"}));
        assert_eq!(client.recv().await["params"]["update"]["content"]["text"], "mode plan");
        assert_eq!(client.recv().await["result"]["stopReason"], "end_turn");
        client.prompt(6, &session, "write a.txt again").await;
        assert_eq!(
            client.recv().await["params"]["update"]["content"]["text"],
            "plan mode: not writing a.txt"
        );
        assert_eq!(client.recv().await["result"]["stopReason"], "end_turn");
    }

    /// Issue #44: `write` showed "new file" over a file that exists. It reads the file first, as
    /// `edit` does, and asks with the old text in its diff.
    #[tokio::test]
    async fn write_and_edit_read_the_file_and_ask_with_a_diff() {
        for directive in ["write", "edit"] {
            let mut client = Client::start();
            let session = client.new_session("/ws").await;
            client.prompt(2, &session, &format!("{directive} a.txt new text")).await;
            let read = client.recv().await;
            assert_eq!(read["method"], "fs/read_text_file");
            assert_eq!(read["params"]["path"], "/ws/a.txt");
            client.send(json!({"jsonrpc": "2.0", "id": read["id"], "result": {"content": "old text"}})).await;
            let tool_call = client.recv().await["params"]["update"].clone();
            assert_eq!(
                tool_call["content"],
                json!([{"type": "diff", "path": "/ws/a.txt", "oldText": "old text", "newText": "new text"}]),
                "{directive}"
            );
            assert_eq!(client.recv().await["method"], "session/request_permission");
        }
    }

    #[tokio::test]
    async fn stream_emits_numbered_chunks_with_timestamps() {
        let mut client = Client::start();
        let session = client.new_session("/ws").await;
        client.prompt(2, &session, "stream 3").await;
        for i in 0..3 {
            let update = client.recv().await["params"]["update"].clone();
            assert_eq!(update["content"]["text"], format!("tok{i} "));
            assert!(update["_meta"]["emittedAtUs"].as_u64().is_some_and(|us| us > 0));
        }
        assert_eq!(client.recv().await["result"]["stopReason"], "end_turn");
    }
}

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
//!
//! Rooms: this file is the process (stdio, the reader loop, sessions, answers to the client's
//! requests); `directive` reads a prompt into a `Directive`; `turn` carries one out.

mod directive;
#[cfg(test)]
mod tests;
mod turn;

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

pub use turn::HOSTILE;
use turn::Turn;

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
  look <path>                   ask permission to read a file (kind read;  `look src/main.rs`
                                nothing is read)
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
/// When set, `session/new` writes two `available_commands_update`s for the new session before its
/// answer, as Qwen Code announces its slash commands: the first in the usual spelling, the second
/// with its keys in another order (for tests of the updates the daemon holds until it knows the
/// session, on both of its reading paths).
const ANNOUNCE_ENV: &str = "DEMO_ANNOUNCE";
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
    let shared = Arc::new(AgentState {
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
struct AgentState {
    /// Whether `session/load` is advertised and served.
    load_session: bool,
    /// See [`DemoOptions::transcripts`].
    transcripts: Option<std::path::PathBuf>,
    /// The only way to stdout.
    out: mpsc::Sender<Out>,
    /// Sessions by id. A std mutex: every critical section is a short lookup with no `.await`.
    sessions: Mutex<HashMap<String, DemoSession>>,
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

/// One session of the demo agent.
struct DemoSession {
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

impl AgentState {
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

async fn handle_frame(shared: &Arc<AgentState>, frame: Frame) {
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
                if method == method::SESSION_NEW
                    && std::env::var_os(ANNOUNCE_ENV).is_some()
                    && let Ok(created) = &result
                {
                    for line in announcements(&created["sessionId"]) {
                        shared.send(line).await;
                    }
                }
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

/// The lines [`ANNOUNCE_ENV`] has `session/new` write before its answer.
fn announcements(session_id: &Value) -> [Vec<u8>; 2] {
    let update = |name: &str| {
        json!({"sessionId": session_id, "update": {
            "sessionUpdate": "available_commands_update",
            "availableCommands": [{"name": name, "description": format!("the {name} command")}]
        }})
    };
    let usual = notification_line(method::SESSION_UPDATE, &update("first"));
    let reordered = format!(
        "{{\"params\":{},\"method\":\"{}\",\"jsonrpc\":\"2.0\"}}\n",
        update("second"),
        method::SESSION_UPDATE
    );
    [usual, reordered.into_bytes()]
}

fn unknown_session(id: &str) -> RpcError {
    RpcError::new(INVALID_PARAMS, format!("unknown session: {id}"))
}

/// The answer to `initialize`.
fn initialized(shared: &AgentState) -> Result<Value, RpcError> {
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
fn answer(shared: &AgentState, method: &str, params: Option<&RawValue>) -> Result<Value, RpcError> {
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
                DemoSession { cwd: p.cwd, mode: MODES[0].0, cancel: CancellationToken::new() },
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
fn transcript(shared: &AgentState, session_id: &str) -> Option<std::path::PathBuf> {
    let plain = !session_id.is_empty()
        && session_id.len() <= 128
        && session_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    shared.transcripts.as_ref().filter(|_| plain).map(|dir| dir.join(format!("{session_id}.jsonl")))
}

/// Appends an update to the session's transcript (best effort: a demo's transcript is no reason
/// to fail a turn).
fn record(shared: &AgentState, session_id: &str, update: &Value) {
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
async fn load_session(shared: &AgentState, params: Option<&RawValue>) -> Result<Value, RpcError> {
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
            DemoSession { cwd: p.cwd, mode: MODES[0].0, cancel: CancellationToken::new() },
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

fn cancel_session(shared: &AgentState, session_id: &str) {
    match lock(&shared.sessions).get_mut(session_id) {
        Some(session) => std::mem::replace(&mut session.cancel, CancellationToken::new()).cancel(),
        None => tracing::debug!(session_id, "cancel for unknown session"),
    }
}

/// Validates a prompt and prepares its turn; the turn itself runs in its own task.
fn start_prompt(
    shared: &Arc<AgentState>,
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
fn ignore_sigterm(shared: &AgentState) {
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

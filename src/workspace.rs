//! The per-workspace owner of one agent process and the sessions multiplexed onto it.
//!
//! One task (the actor) owns the agent's stdout reader, the table of the daemon's pending calls,
//! the session table and the early-update buffer; everyone else holds an [`AgentHandle`] and talks
//! to it over a channel. A separate writer task owns the agent's stdin so the actor never waits on a
//! full pipe: the actor only `try_send`s lines to it. Requests the agent makes (permission, fs) run
//! in their own tasks so a permission vote that takes minutes never stalls the reader.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use bytes::BytesMut;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::codec::{Decoder, FramedRead};

use crate::agent_process::{self, AgentProcess};
use crate::config::AgentCommand;
use crate::jsonrpc::{self, Frame, RequestId, RpcError};
use crate::session::{EndReason, Session};

/// Longest line accepted from an agent; a longer one ends that agent (SPEC §4).
pub const MAX_AGENT_LINE: usize = 64 * 1024 * 1024;
/// Commands queued to one actor.
const COMMAND_QUEUE: usize = 1024;
/// Lines queued to the agent's stdin writer; when full, new calls fail instead of blocking.
const WRITE_QUEUE: usize = 4096;
/// Daemon → agent calls awaiting an answer.
pub const MAX_PENDING_CALLS: usize = 4096;
/// Agent → daemon requests being served at once (each waits on a vote or the disk).
pub const MAX_AGENT_REQUESTS_IN_FLIGHT: usize = 256;
/// Updates held for a session id the daemon has not been told about yet, and for how long.
const EARLY_UPDATES_MAX: usize = 1024;
const EARLY_UPDATE_TTL: Duration = Duration::from_secs(30);
/// After stdout closes, how long the agent gets to exit on its own before its group is killed.
const EXIT_WAIT: Duration = Duration::from_secs(3);
/// Lines the actor handles before it yields, so the SSE writers it just woke can drain their
/// queues between bursts: one 64 KiB read of a streaming agent is ~350 updates, more than the
/// default 256-frame `--subscriber-queue`, and without a yield even a fast client was evicted.
const LINES_PER_YIELD: u32 = 32;
/// Why the actor stopped when an agent outlived its shutdown grace.
const GRACE_OVER: &str = "shutdown grace period over";
/// The ACP protocol version the daemon speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// Why a call to the agent failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("the agent did not answer in time")]
    Timeout,
    #[error("{0}")]
    Exited(String),
    #[error("{}", .0.message)]
    Rpc(RpcError),
    #[error("the agent is not reading its input")]
    Backlog,
    #[error("{0}")]
    Start(String),
}

/// Exit status of an agent process, for `session_died`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

enum Cmd {
    Call {
        method: &'static str,
        params: Value,
        reply: oneshot::Sender<Result<Box<RawValue>, CallError>>,
    },
    /// `queued` fires once the line is in the stdin queue, so callers can order later lines after it.
    Notify {
        method: &'static str,
        params: Value,
        queued: oneshot::Sender<()>,
    },
    Register(Arc<Session>),
    Unregister {
        session_id: String,
        stop_if_idle: bool,
    },
    Shutdown {
        grace: Duration,
    },
}

type Ready = Option<Result<(), CallError>>;
/// Where the answer to a daemon call goes.
type Waiter = oneshot::Sender<Result<Box<RawValue>, CallError>>;

/// A cloneable handle to one workspace's agent.
#[derive(Clone)]
pub struct AgentHandle {
    tx: mpsc::Sender<Cmd>,
    ready: watch::Receiver<Ready>,
    pub workspace: PathBuf,
}

/// Where the actor reports process groups, so a second signal can kill them all without the actors.
pub type PgidRegistry = Arc<Mutex<std::collections::HashSet<i32>>>;

impl AgentHandle {
    /// Starts the actor, which spawns the agent and sends `initialize`.
    pub fn start(
        cmd: AgentCommand,
        workspace: PathBuf,
        init_timeout: Duration,
        pgids: PgidRegistry,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> AgentHandle {
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let (ready_tx, ready) = watch::channel(None);
        let handle = AgentHandle { tx, ready, workspace: workspace.clone() };
        let init = handle.clone();
        tokio::spawn(async move {
            let actor = match Actor::spawn(&cmd, workspace.clone(), pgids, metrics.clone()) {
                Ok(actor) => actor,
                Err(e) => {
                    metrics.agent_exit("start_failed");
                    tracing::warn!(workspace = %workspace.display(), error = %e, "agent failed to start");
                    // Close the command channel first, so the handle reads as dead before anyone
                    // hears of the failure.
                    drop(rx);
                    let _ = ready_tx.send(Some(Err(CallError::Start(e.to_string()))));
                    return;
                }
            };
            tracing::info!(workspace = %workspace.display(), pid = actor.process.pid, "agent started");
            tokio::spawn(async move {
                let params = json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": false},
                    "clientInfo": {"name": "mediatord", "version": env!("CARGO_PKG_VERSION")},
                });
                let result = init.call("initialize", params, Some(init_timeout)).await.map(|_| ());
                if let Err(e) = &result {
                    tracing::warn!(workspace = %init.workspace.display(), error = %e, "agent initialize failed");
                    init.shutdown(Duration::ZERO).await;
                }
                let _ = ready_tx.send(Some(result));
            });
            actor.run(rx).await;
        });
        handle
    }

    /// Waits until `initialize` succeeded or failed.
    pub async fn ready(&self) -> Result<(), CallError> {
        let mut ready = self.ready.clone();
        match ready.wait_for(Option::is_some).await {
            Ok(state) => state.clone().unwrap_or(Err(CallError::Exited("agent exited".into()))),
            Err(_) => Err(CallError::Exited("agent exited during start-up".into())),
        }
    }

    /// Whether the actor still runs.
    pub fn is_alive(&self) -> bool {
        !self.tx.is_closed()
    }

    /// Calls `method` on the agent; `timeout` bounds the wait (prompts pass `None`).
    pub async fn call(
        &self,
        method: &'static str,
        params: Value,
        timeout: Option<Duration>,
    ) -> Result<Box<RawValue>, CallError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Call { method, params, reply })
            .await
            .map_err(|_| CallError::Exited("the agent has exited".into()))?;
        let answer = match timeout {
            Some(t) => tokio::time::timeout(t, rx).await.map_err(|_| CallError::Timeout)?,
            None => rx.await,
        };
        answer.unwrap_or_else(|_| Err(CallError::Exited("the agent has exited".into())))
    }

    /// Sends a notification; returns once its line is queued for the agent's stdin, so anything
    /// written to the agent afterwards (e.g. permission answers after `session/cancel`) follows it.
    pub async fn notify(&self, method: &'static str, params: Value) {
        let (queued, done) = oneshot::channel();
        if self.tx.send(Cmd::Notify { method, params, queued }).await.is_ok() {
            let _ = done.await;
        }
    }

    pub async fn register(&self, session: Arc<Session>) {
        let _ = self.tx.send(Cmd::Register(session)).await;
    }

    /// Forgets a session; with `stop_if_idle` the agent is stopped when no session is left.
    pub async fn unregister(&self, session_id: &str, stop_if_idle: bool) {
        let _ = self.tx.send(Cmd::Unregister { session_id: session_id.to_owned(), stop_if_idle }).await;
    }

    /// Closes the agent's stdin, gives it `grace` to exit, then kills its group. Returns when gone.
    pub async fn shutdown(&self, grace: Duration) {
        let _ = self.tx.send(Cmd::Shutdown { grace }).await;
        self.tx.closed().await;
    }
}

struct Early {
    at: Instant,
    session_id: String,
    params: Box<RawValue>,
}

struct Actor {
    workspace: PathBuf,
    process: AgentProcess,
    stdout: FramedRead<tokio::process::ChildStdout, LineCodec>,
    /// `None` once stdin is closed (shutdown).
    writer: Option<mpsc::Sender<Bytes>>,
    next_id: i64,
    pending: HashMap<i64, Waiter>,
    sessions: HashMap<String, Arc<Session>>,
    early: VecDeque<Early>,
    in_flight: Arc<AtomicUsize>,
    /// Set by a shutdown: kill the group at this instant if it has not exited.
    deadline: Option<Instant>,
    pgids: PgidRegistry,
    metrics: Arc<crate::metrics::Metrics>,
}

#[derive(Deserialize)]
struct UpdateTarget {
    #[serde(rename = "sessionId")]
    session_id: String,
}

impl Actor {
    fn spawn(
        cmd: &AgentCommand,
        workspace: PathBuf,
        pgids: PgidRegistry,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> std::io::Result<Actor> {
        let (process, pipes) = agent_process::spawn(cmd, &workspace)?;
        if let Some(pgid) = process.pgid() {
            pgids.lock().unwrap_or_else(|p| p.into_inner()).insert(pgid);
        }
        let (writer, lines) = mpsc::channel::<Bytes>(WRITE_QUEUE);
        tokio::spawn(write_lines(pipes.stdin, lines));
        let codec = LineCodec::default();
        Ok(Actor {
            workspace,
            process,
            stdout: FramedRead::with_capacity(pipes.stdout, codec, 64 * 1024),
            writer: Some(writer),
            next_id: 0,
            pending: HashMap::new(),
            sessions: HashMap::new(),
            early: VecDeque::new(),
            in_flight: Arc::new(AtomicUsize::new(0)),
            deadline: None,
            pgids,
            metrics,
        })
    }

    async fn run(mut self, mut commands: mpsc::Receiver<Cmd>) {
        let mut lines = 0u32;
        let reason = loop {
            let deadline = self.deadline;
            tokio::select! {
                line = self.stdout.next() => match line {
                    Some(Ok(line)) => {
                        self.on_line(&line);
                        lines = lines.wrapping_add(1);
                        if lines.is_multiple_of(LINES_PER_YIELD) {
                            tokio::task::yield_now().await;
                        }
                    }
                    Some(Err(e)) => break format!("agent output unreadable: {e}"),
                    None => break "agent closed its output".to_owned(),
                },
                cmd = commands.recv(), if self.deadline.is_none() => match cmd {
                    Some(cmd) => self.on_command(cmd),
                    // Every handle is gone: nobody can use this agent any more.
                    None => self.begin_shutdown(Duration::ZERO),
                },
                _ = sleep_until_opt(deadline) => {
                    // Some agents (Claude Code's adapter) ignore stdin EOF; say why the wait ended.
                    tracing::warn!(
                        workspace = %self.workspace.display(), pid = self.process.pid,
                        "agent did not exit within the shutdown grace period; killing its process group"
                    );
                    break GRACE_OVER.to_owned()
                }
            }
        };
        commands.close();
        self.finish(&reason).await;
    }

    fn on_line(&mut self, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        match Frame::parse(line) {
            Frame::Notification { method, params } => self.on_notification(&method, params),
            Frame::Response { id, result } => {
                let RequestId::Number(n) = id else {
                    tracing::warn!(workspace = %self.workspace.display(), "agent answered an id the daemon never used");
                    return;
                };
                match self.pending.remove(&n) {
                    Some(reply) => {
                        let _ = reply.send(result.map_err(CallError::Rpc));
                    }
                    None => tracing::debug!(id = n, "answer for a call nobody waits for"),
                }
            }
            Frame::Request { id, method, params } => self.on_request(id, &method, params),
            Frame::Malformed(why) => {
                tracing::warn!(workspace = %self.workspace.display(), reason = %why, "skipping a malformed line from the agent")
            }
        }
    }

    fn on_notification(&mut self, method: &str, params: Option<Box<RawValue>>) {
        if method != "session/update" {
            tracing::debug!(method, "ignoring an agent notification");
            return;
        }
        let Some(params) = params else { return };
        let Some(session_id) = update_session_id(&params) else {
            tracing::warn!("session/update without a sessionId");
            return;
        };
        match self.sessions.get(&*session_id) {
            Some(session) => session.publish_update(&params),
            None => {
                let session_id = session_id.into_owned();
                self.hold_early(session_id, params)
            }
        }
    }

    fn hold_early(&mut self, session_id: String, params: Box<RawValue>) {
        let now = Instant::now();
        while self.early.front().is_some_and(|e| now.duration_since(e.at) > EARLY_UPDATE_TTL) {
            self.early.pop_front();
        }
        if self.early.len() >= EARLY_UPDATES_MAX {
            tracing::warn!(session_id, "dropping an update for an unknown session");
            return;
        }
        self.early.push_back(Early { at: now, session_id, params });
    }

    fn on_request(&mut self, id: RequestId, method: &str, params: Option<Box<RawValue>>) {
        let Some(writer) = self.writer.clone() else { return };
        let params: Value = params.and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or(Value::Null);
        let session =
            params.get("sessionId").and_then(Value::as_str).and_then(|s| self.sessions.get(s)).cloned();
        let respond = |result: Result<Value, RpcError>| {
            let _ = writer.try_send(Bytes::from(jsonrpc::response_line(&id, result)));
        };
        if !matches!(method, "session/request_permission" | "fs/read_text_file" | "fs/write_text_file") {
            respond(Err(RpcError::method_not_found(method)));
            return;
        }
        let Some(session) = session else {
            respond(Err(RpcError::new(jsonrpc::INVALID_PARAMS, "unknown sessionId")));
            return;
        };
        if self.in_flight.load(Ordering::Relaxed) >= MAX_AGENT_REQUESTS_IN_FLIGHT {
            respond(Err(RpcError::new(jsonrpc::INTERNAL_ERROR, "too many requests in flight")));
            return;
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let in_flight = self.in_flight.clone();
        let method = method.to_owned();
        let workspace = self.workspace.clone();
        tokio::spawn(async move {
            let result = match method.as_str() {
                "session/request_permission" => Ok(session.mediator.request(&session, params).await),
                "fs/read_text_file" => crate::fs_proxy::read_text_file(&workspace, &params).await,
                _ => crate::fs_proxy::write_text_file(&workspace, &params).await,
            };
            in_flight.fetch_sub(1, Ordering::Relaxed);
            let _ = writer.send(Bytes::from(jsonrpc::response_line(&id, result))).await;
        });
    }

    fn on_command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Call { method, params, reply } => {
                if self.pending.len() >= MAX_PENDING_CALLS {
                    let _ = reply.send(Err(CallError::Backlog));
                    return;
                }
                let id = self.next_id;
                self.next_id += 1;
                let line = Bytes::from(jsonrpc::request_line(id, method, &params));
                match self.writer.as_ref().map(|w| w.try_send(line)) {
                    Some(Ok(())) => {
                        self.pending.insert(id, reply);
                    }
                    Some(Err(mpsc::error::TrySendError::Full(_))) => {
                        let _ = reply.send(Err(CallError::Backlog));
                    }
                    _ => {
                        let _ = reply.send(Err(CallError::Exited("the agent's input is closed".into())));
                    }
                }
            }
            Cmd::Notify { method, params, queued } => {
                if let Some(w) = &self.writer {
                    let _ = w.try_send(Bytes::from(jsonrpc::notification_line(method, &params)));
                }
                let _ = queued.send(());
            }
            Cmd::Register(session) => {
                let id = session.id.clone();
                let (held, rest): (VecDeque<Early>, VecDeque<Early>) =
                    std::mem::take(&mut self.early).into_iter().partition(|e| e.session_id == id);
                self.early = rest;
                for e in held {
                    session.publish_update(&e.params);
                }
                self.sessions.insert(id, session);
            }
            Cmd::Unregister { session_id, stop_if_idle } => {
                self.sessions.remove(&session_id);
                if stop_if_idle && self.sessions.is_empty() {
                    self.begin_shutdown(Duration::ZERO);
                }
            }
            Cmd::Shutdown { grace } => self.begin_shutdown(grace),
        }
    }

    /// Closes stdin (the agent's cue to exit) and arms the kill deadline.
    fn begin_shutdown(&mut self, grace: Duration) {
        self.writer = None;
        self.deadline = Some(Instant::now() + grace);
    }

    /// The agent is gone or going: reap it, fail what waits on it, end its sessions.
    async fn finish(mut self, reason: &str) {
        let expected = self.deadline.is_some();
        self.writer = None;
        // Taken first: `kill_group` forgets it, and the kill list must drop it on every path.
        let pgid = self.process.pgid();
        // After the shutdown grace there is nothing more to wait for.
        let wait = if reason == GRACE_OVER { Duration::ZERO } else { EXIT_WAIT };
        let status = match tokio::time::timeout(wait, self.process.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                self.process.kill_group();
                self.process.child.wait().await.ok()
            }
        };
        // Reap wrappers' leftovers too: the group outlives its leader.
        self.process.kill_group();
        if let Some(pgid) = pgid {
            self.pgids.lock().unwrap_or_else(|p| p.into_inner()).remove(&pgid);
        }
        use std::os::unix::process::ExitStatusExt;
        let exit = ExitInfo { code: status.and_then(|s| s.code()), signal: status.and_then(|s| s.signal()) };
        let tail = self.process.stderr_tail.last_lines(2048);
        self.metrics.agent_exit(match (expected, exit.signal) {
            (true, _) => "stopped",
            (false, Some(_)) => "signal",
            (false, None) => "exited",
        });
        if expected {
            tracing::info!(workspace = %self.workspace.display(), pid = self.process.pid, "agent stopped");
        } else {
            tracing::warn!(
                workspace = %self.workspace.display(), pid = self.process.pid, reason,
                exit_code = ?exit.code, signal = ?exit.signal, "agent exited"
            );
        }
        let message = exit_message(&exit, &tail);
        for (_, reply) in self.pending.drain() {
            let _ = reply.send(Err(CallError::Exited(message.clone())));
        }
        for (_, session) in self.sessions.drain() {
            session.end(EndReason::Died(exit));
        }
    }
}

/// The `sessionId` of a `session/update`'s params. Agents put it first (`{"sessionId":"…"`), so it
/// is read straight from the raw text when it has no escapes; anything else is parsed. This spares
/// every update a second full JSON pass on the reader's hot path.
fn update_session_id(params: &RawValue) -> Option<std::borrow::Cow<'_, str>> {
    let raw = params.get();
    if let Some(rest) = raw.strip_prefix("{\"sessionId\":\"")
        && let Some(end) = rest.find('"')
        && !rest[..end].contains('\\')
    {
        return Some(std::borrow::Cow::Borrowed(&rest[..end]));
    }
    let target = serde_json::from_str::<UpdateTarget>(raw).ok()?;
    Some(std::borrow::Cow::Owned(target.session_id))
}

/// Splits the agent's stdout into lines (newline removed), finding newlines with `memchr`: this
/// is the innermost loop of a streaming agent's reader (the byte-at-a-time `AnyDelimiterCodec` it
/// replaces was the reader's top symbol in `perf`). A line over [`MAX_AGENT_LINE`] is an error,
/// which ends that agent (SPEC §4).
#[derive(Default)]
struct LineCodec {
    /// Bytes at the start of the buffer already known to hold no newline.
    searched: usize,
}

impl Decoder for LineCodec {
    type Item = BytesMut;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<BytesMut>> {
        match memchr::memchr(b'\n', &buf[self.searched..]) {
            Some(at) => {
                let end = self.searched + at;
                self.searched = 0;
                if end > MAX_AGENT_LINE {
                    return Err(line_too_long());
                }
                let mut line = buf.split_to(end + 1);
                line.truncate(end);
                Ok(Some(line))
            }
            None if buf.len() > MAX_AGENT_LINE => Err(line_too_long()),
            None => {
                self.searched = buf.len();
                Ok(None)
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<BytesMut>> {
        match self.decode(buf)? {
            Some(line) => Ok(Some(line)),
            None if buf.is_empty() => Ok(None),
            // A last line without its newline still counts.
            None => {
                self.searched = 0;
                Ok(Some(buf.split_to(buf.len())))
            }
        }
    }
}

fn line_too_long() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a line longer than {MAX_AGENT_LINE} bytes"))
}

/// A human summary of how an agent ended, with the last of its stderr.
fn exit_message(exit: &ExitInfo, tail: &str) -> String {
    let how = match (exit.code, exit.signal) {
        (Some(crate::agent_guard::EXIT_SPAWN_FAILED), _) => "the agent could not be started".to_owned(),
        (Some(code), _) => format!("the agent exited with code {code}"),
        (_, Some(sig)) => format!("the agent was killed by signal {sig}"),
        _ => "the agent exited".to_owned(),
    };
    if tail.is_empty() { how } else { format!("{how}: {tail}") }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Owns the agent's stdin: writes queued lines, flushing only when the queue runs dry so bursts
/// leave in large writes. Ends (closing stdin) when every sender is gone.
async fn write_lines(stdin: tokio::process::ChildStdin, mut lines: mpsc::Receiver<Bytes>) {
    let mut out = tokio::io::BufWriter::with_capacity(64 * 1024, stdin);
    while let Some(line) = lines.recv().await {
        if out.write_all(&line).await.is_err() {
            return;
        }
        while let Ok(line) = lines.try_recv() {
            if out.write_all(&line).await.is_err() {
                return;
            }
        }
        if out.flush().await.is_err() {
            return;
        }
    }
    let _ = out.shutdown().await;
}

#[cfg(test)]
mod line_tests {
    use super::*;

    #[test]
    fn lines_split_on_newlines_across_reads_and_at_eof() {
        let mut codec = LineCodec::default();
        let mut buf = BytesMut::from(&b"{\"a\":1}\n{\"b\""[..]);
        assert_eq!(codec.decode(&mut buf).ok().flatten().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert!(codec.decode(&mut buf).ok().flatten().is_none());
        buf.extend_from_slice(b":2}\n\ntail");
        assert_eq!(codec.decode(&mut buf).ok().flatten().as_deref(), Some(&b"{\"b\":2}"[..]));
        assert_eq!(codec.decode(&mut buf).ok().flatten().as_deref(), Some(&b""[..]));
        assert!(codec.decode(&mut buf).ok().flatten().is_none());
        assert_eq!(codec.decode_eof(&mut buf).ok().flatten().as_deref(), Some(&b"tail"[..]));
        assert!(codec.decode_eof(&mut buf).ok().flatten().is_none());
    }

    #[test]
    fn update_session_id_reads_the_prefix_and_falls_back_to_parsing() {
        let raw = |s: &str| RawValue::from_string(s.to_owned()).expect("json");
        let fast = raw(r#"{"sessionId":"s-1","update":{"x":"\"sessionId\""}}"#);
        assert_eq!(update_session_id(&fast).as_deref(), Some("s-1"));
        let spaced = raw(r#"{ "update": {}, "sessionId" : "s-2" }"#);
        assert_eq!(update_session_id(&spaced).as_deref(), Some("s-2"));
        let escaped = raw(r#"{"sessionId":"s\u002d3"}"#);
        assert_eq!(update_session_id(&escaped).as_deref(), Some("s-3"));
        assert_eq!(update_session_id(&raw(r#"{"update":{}}"#)), None);
    }
}

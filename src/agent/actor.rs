//! The actor: the one task that owns an agent's stdout reader, the table of the daemon's pending
//! calls, the session table and the early-update buffer. Everyone else holds an
//! [`super::AgentHandle`] and talks to it over a channel. A separate writer task
//! ([`super::codec::write_lines`]) owns the agent's stdin so the actor never waits on a full pipe:
//! the actor only `try_send`s lines to it. Requests the agent makes (permission, fs) run in their
//! own tasks so a permission vote that takes minutes never stalls the reader.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;

use super::codec::{LineCodec, split_line, write_lines};
use super::process::{self, AgentProcess};
use super::redact::Redactor;
use crate::acp::{self, CallError, Frame, RequestId, RpcError, Update, method};
use crate::config::{AgentSpec, FsCapabilities};
use crate::exec::{ExitInfo, ProcessGroups};
use crate::log_throttle::LogThrottle;
use crate::metrics::Metrics;

/// Lines queued to the agent's stdin writer; when full, new calls fail instead of blocking.
const WRITE_QUEUE: usize = 4096;
/// Daemon → agent calls awaiting an answer.
const MAX_PENDING_CALLS: usize = 4096;
/// Agent → daemon requests being served at once (each waits on a vote or the disk).
const MAX_AGENT_REQUESTS_IN_FLIGHT: usize = 256;
/// Updates held for a session id the daemon has not been told about yet, and for how long. An
/// update can only race its `session/new` answer by a few lines, so the bounds are far above any
/// real race: 1024 updates, 16 MiB in all (a few large tool outputs), 30 s.
const EARLY_UPDATES_MAX: usize = 1024;
const EARLY_UPDATES_MAX_BYTES: usize = 16 * 1024 * 1024;
const EARLY_UPDATE_TTL: Duration = Duration::from_secs(30);
/// After stdout closes, how long the agent gets to exit on its own before its group is killed.
const EXIT_WAIT: Duration = Duration::from_secs(3);
/// Most `session/update`s handed to a session in one call. A burst is what one read of the
/// agent's pipe holds (64 KiB, a few hundred updates); this bounds the list it is gathered in.
const MAX_BURST: usize = 1024;
/// Why the actor stopped when an agent outlived its shutdown grace.
const GRACE_OVER: &str = "shutdown grace period over";

/// What an [`super::AgentHandle`] asks of the actor.
pub(super) enum Cmd {
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
    Register {
        session_id: String,
        client: Weak<dyn acp::Client>,
    },
    Unregister {
        session_id: String,
        stop_if_idle: bool,
    },
    Shutdown {
        grace: Duration,
    },
}

/// Where the answer to a daemon call goes.
type Waiter = oneshot::Sender<Result<Box<RawValue>, CallError>>;

struct Early {
    at: Instant,
    session_id: String,
    params: Update,
}

/// Updates for sessions not registered yet, oldest first, bounded in count, bytes and age. Entries
/// leave by age on a timer the actor arms ([`EarlyUpdates::next_expiry`]), not only when another
/// early update arrives.
#[derive(Default)]
struct EarlyUpdates {
    queue: VecDeque<Early>,
    bytes: usize,
}

impl EarlyUpdates {
    /// Holds an update; `false` when a bound leaves no room (the update is dropped).
    fn push(&mut self, now: Instant, session_id: String, params: Update) -> bool {
        self.expire(now);
        let size = params.as_bytes().len();
        if self.queue.len() >= EARLY_UPDATES_MAX || self.bytes + size > EARLY_UPDATES_MAX_BYTES {
            return false;
        }
        self.bytes += size;
        self.queue.push_back(Early { at: now, session_id, params });
        true
    }

    /// Drops what is older than the TTL.
    fn expire(&mut self, now: Instant) {
        while let Some(front) = self.queue.front() {
            if now.duration_since(front.at) < EARLY_UPDATE_TTL {
                break;
            }
            self.bytes -= front.params.as_bytes().len();
            self.queue.pop_front();
        }
    }

    /// When the oldest entry expires, if any is held.
    fn next_expiry(&self) -> Option<Instant> {
        self.queue.front().map(|e| e.at + EARLY_UPDATE_TTL)
    }

    /// Takes every update held for `session_id`, in arrival order.
    fn take(&mut self, session_id: &str) -> Vec<Update> {
        let (held, rest): (VecDeque<Early>, VecDeque<Early>) =
            std::mem::take(&mut self.queue).into_iter().partition(|e| e.session_id == session_id);
        self.queue = rest;
        self.bytes = self.queue.iter().map(|e| e.params.as_bytes().len()).sum();
        held.into_iter().map(|e| e.params).collect()
    }
}

pub(super) struct Actor {
    workspace: PathBuf,
    process: AgentProcess,
    stdout: FramedRead<tokio::process::ChildStdout, LineCodec>,
    /// `None` once stdin is closed (shutdown).
    writer: Option<mpsc::Sender<Bytes>>,
    next_id: i64,
    pending: HashMap<i64, Waiter>,
    /// Held weakly: a session's lifetime is the daemon's business, not the agent's.
    sessions: HashMap<String, Weak<dyn acp::Client>>,
    early: EarlyUpdates,
    /// Malformed lines, answers to ids never used, updates without a session id.
    bad_output_log: LogThrottle,
    /// Early updates dropped for want of room.
    dropped_log: LogThrottle,
    in_flight: Arc<AtomicUsize>,
    /// Set by a shutdown: kill the group at this instant if it has not exited.
    deadline: Option<Instant>,
    metrics: Arc<Metrics>,
    /// `session/update`s for `burst_session` read in one go and not yet handed over: the session
    /// publishes a burst at once, so its streams find it whole (fewer, larger writes).
    burst: Vec<Update>,
    burst_session: String,
    /// The `fs/*` methods offered at `initialize`: the only ones served.
    fs: FsCapabilities,
    /// The agent's configured secrets, kept out of its error answers and of the log.
    redactor: Redactor,
}

/// The agent requests the daemon serves; anything else is answered "method not found".
#[derive(Debug, Clone, Copy)]
enum AgentRequest {
    Permission,
    Elicitation,
    ReadTextFile,
    WriteTextFile,
}

#[derive(Deserialize)]
struct UpdateTarget {
    #[serde(rename = "sessionId")]
    session_id: String,
}

impl Actor {
    pub(super) fn spawn(
        spec: &AgentSpec,
        workspace: PathBuf,
        groups: &ProcessGroups,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Actor> {
        let redactor = Redactor::new(&spec.env);
        let (process, pipes) =
            process::spawn(&spec.command, &spec.env, &workspace, groups, &spec.sandbox, redactor.clone())?;
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
            early: EarlyUpdates::default(),
            bad_output_log: LogThrottle::default(),
            dropped_log: LogThrottle::default(),
            in_flight: Arc::new(AtomicUsize::new(0)),
            deadline: None,
            metrics,
            burst: Vec::new(),
            burst_session: String::new(),
            fs: spec.fs,
            redactor,
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.process.pid
    }

    /// Serves `commands` until the agent is gone; then says how it ended on `exited` before the
    /// commands still queued are dropped, so their callers (and later ones) can say it too.
    pub(super) async fn run(
        mut self,
        mut commands: mpsc::Receiver<Cmd>,
        exited: watch::Sender<Option<String>>,
    ) {
        let reason = loop {
            // A burst ends when no complete line is left to read without waiting. Then let the
            // streams it woke write it before reading on: they usually run on this thread next.
            if !self.stdout.decoder().has_line(self.stdout.read_buffer()) && self.hand_over_burst() {
                tokio::task::yield_now().await;
            }
            let deadline = self.deadline;
            let housekeeping =
                [self.early.next_expiry(), self.bad_output_log.report_at(), self.dropped_log.report_at()]
                    .into_iter()
                    .flatten()
                    .min();
            tokio::select! {
                line = self.stdout.next() => match line {
                    Some(Ok(line)) => {
                        self.on_line(line.freeze());
                        if let Err(e) = self.read_ready_lines() {
                            break format!("agent output unreadable: {e}");
                        }
                    }
                    Some(Err(e)) => break format!("agent output unreadable: {e}"),
                    None => break "agent closed its output".to_owned(),
                },
                cmd = commands.recv(), if self.deadline.is_none() => match cmd {
                    Some(cmd) => {
                        // A command may (un)register sessions: the next update looks its session up.
                        self.hand_over_burst();
                        self.burst_session.clear();
                        self.on_command(cmd);
                    }
                    // Every handle is gone: nobody can use this agent any more.
                    None => self.begin_shutdown(Duration::ZERO),
                },
                _ = sleep_until_opt(housekeeping) => self.housekeeping(Instant::now()),
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
        self.hand_over_burst();
        let message = self.finish(&reason).await;
        let _ = exited.send(Some(message));
    }

    /// Expires early updates and closes the log windows that are over.
    fn housekeeping(&mut self, now: Instant) {
        self.early.expire(now);
        let workspace = self.workspace.display();
        if let Some(n) = self.bad_output_log.close(now) {
            tracing::warn!(workspace = %workspace, count = n, "{n} more malformed lines from the agent in the last second (skipped, not logged one by one)");
        }
        if let Some(n) = self.dropped_log.close(now) {
            tracing::warn!(workspace = %workspace, count = n, "{n} more updates for unknown sessions dropped in the last second");
        }
    }

    /// Logs a problem with the agent's output, within the throttle.
    fn bad_output(&mut self, why: &str) {
        let now = Instant::now();
        // A window that is over reports before a new one opens (its timer may not have run yet).
        self.housekeeping(now);
        if self.bad_output_log.admit(now) {
            let why = self.redactor.redact(why);
            tracing::warn!(workspace = %self.workspace.display(), reason = %why, "skipping a malformed line from the agent");
        }
    }

    /// The lines the last read brought beyond the one `select!` took, read here without a trip
    /// through it each (a streaming agent's read holds a hundred): at most what one read left in
    /// the buffer, so a command waits no longer than that.
    fn read_ready_lines(&mut self) -> std::io::Result<()> {
        while let Some(line) = split_line(self.stdout.read_buffer_mut(), 0)? {
            self.on_line(line.freeze());
        }
        Ok(())
    }

    fn on_line(&mut self, line: Bytes) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let line = match Update::parse(line) {
            Ok(update) => return self.on_update(update),
            Err(line) => line,
        };
        let frame = Frame::parse(&line);
        if !matches!(&frame, Frame::Notification { method, .. } if method == method::SESSION_UPDATE) {
            // Whatever else the agent says comes after the updates it wrote before it.
            self.hand_over_burst();
        }
        match frame {
            Frame::Notification { method, params } => self.on_notification(&method, params),
            Frame::Response { id, result } => {
                let RequestId::Number(n) = id else {
                    self.bad_output("an answer to an id the daemon never used");
                    return;
                };
                match self.pending.remove(&n) {
                    Some(reply) => {
                        let _ = reply.send(result.map_err(|e| CallError::Rpc(self.redactor.rpc_error(e))));
                    }
                    None => tracing::debug!(id = n, "answer for a call nobody waits for"),
                }
            }
            Frame::Request { id, method, params } => self.on_request(id, &method, params),
            Frame::Malformed(why) => self.bad_output(&why.to_string()),
        }
    }

    fn on_notification(&mut self, method: &str, params: Option<Box<RawValue>>) {
        if method == method::ELICITATION_COMPLETE {
            self.elicitation_complete(params.as_deref());
            return;
        }
        if method != method::SESSION_UPDATE {
            tracing::debug!(method, "ignoring an agent notification");
            return;
        }
        let Some(params) = params else { return };
        match Update::from_raw(params) {
            Some(update) => self.on_update(update),
            None => self.bad_output("session/update without a sessionId"),
        }
    }

    /// A `session/update`: joins the burst of its session, or waits for its session to register.
    fn on_update(&mut self, params: Update) {
        let Some(session_id) = update_session_id(params.as_bytes()) else {
            self.bad_output("session/update without a sessionId");
            return;
        };
        // The burst's session is known to be registered (a command ends the burst), so only a
        // change of session needs the table.
        if self.burst_session != *session_id {
            self.hand_over_burst();
            if !self.sessions.contains_key(&*session_id) {
                let session_id = session_id.into_owned();
                self.hold_early(session_id, params.detached());
                return;
            }
            self.burst_session.clear();
            self.burst_session.push_str(&session_id);
        } else if self.burst.len() >= MAX_BURST {
            self.hand_over_burst();
        }
        self.burst.push(params);
    }

    /// The agent's `elicitation/complete`: it names an elicitation, not a session, so each of its
    /// sessions is told (the one that asked acts; the id is the agent's, matched only among its
    /// own sessions' questions).
    fn elicitation_complete(&mut self, params: Option<&RawValue>) {
        let id = params
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| p.get("elicitationId").and_then(Value::as_str).map(str::to_owned));
        let Some(id) = id.filter(|id| !id.is_empty()) else {
            self.bad_output("elicitation/complete without an elicitationId");
            return;
        };
        for client in self.sessions.values().filter_map(Weak::upgrade) {
            client.elicitation_complete(&id);
        }
    }

    /// Hands the gathered `session/update`s to their session, in one call; false if there were none.
    fn hand_over_burst(&mut self) -> bool {
        if self.burst.is_empty() {
            return false;
        }
        // A session already dropped (between its end and its unregistering) takes nothing.
        if let Some(client) = self.sessions.get(&self.burst_session).and_then(Weak::upgrade) {
            client.session_updates(&self.burst);
        }
        self.burst.clear();
        true
    }

    fn hold_early(&mut self, session_id: String, params: Update) {
        let now = Instant::now();
        self.housekeeping(now);
        if !self.early.push(now, session_id, params) && self.dropped_log.admit(now) {
            tracing::warn!(workspace = %self.workspace.display(), "dropping an update for an unknown session (the early-update buffer is full)");
        }
    }

    fn on_request(&mut self, id: RequestId, method: &str, params: Option<Box<RawValue>>) {
        let Some(writer) = self.writer.clone() else { return };
        let params = acp::params_value(params);
        let client = params
            .get("sessionId")
            .and_then(Value::as_str)
            .and_then(|s| self.sessions.get(s))
            .and_then(Weak::upgrade);
        let respond = |result: Result<Value, RpcError>| {
            let _ = writer.try_send(Bytes::from(acp::response_line(&id, result)));
        };
        let request = match method {
            method::SESSION_REQUEST_PERMISSION => AgentRequest::Permission,
            method::ELICITATION_CREATE => AgentRequest::Elicitation,
            method::FS_READ_TEXT_FILE if self.fs.read_text_file => AgentRequest::ReadTextFile,
            method::FS_WRITE_TEXT_FILE if self.fs.write_text_file => AgentRequest::WriteTextFile,
            // Not offered at `initialize` (or unknown): as if the daemon had no such method.
            _ => {
                respond(Err(RpcError::method_not_found(method)));
                return;
            }
        };
        let Some(client) = client else {
            // An elicitation scoped to a request rather than a session (ACP allows one before any
            // session exists) has nobody to ask here: only a session has clients.
            let why = match request {
                AgentRequest::Elicitation => {
                    "unknown sessionId: an elicitation must name a session of this agent"
                }
                _ => "unknown sessionId",
            };
            respond(Err(RpcError::new(acp::INVALID_PARAMS, why)));
            return;
        };
        if self.in_flight.load(Ordering::Relaxed) >= MAX_AGENT_REQUESTS_IN_FLIGHT {
            respond(Err(RpcError::new(acp::INTERNAL_ERROR, "too many requests in flight")));
            return;
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let in_flight = self.in_flight.clone();
        let workspace = self.workspace.clone();
        tokio::spawn(async move {
            let result = match request {
                AgentRequest::Permission => Ok(client.request_permission(params).await),
                AgentRequest::Elicitation => client.elicit(params).await,
                AgentRequest::ReadTextFile => super::fs::read_text_file(&workspace, &params).await,
                AgentRequest::WriteTextFile => super::fs::write_text_file(&workspace, &params).await,
            };
            in_flight.fetch_sub(1, Ordering::Relaxed);
            let _ = writer.send(Bytes::from(acp::response_line(&id, result))).await;
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
                let line = Bytes::from(acp::request_line(id, method, &params));
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
                    let _ = w.try_send(Bytes::from(acp::notification_line(method, &params)));
                }
                let _ = queued.send(());
            }
            Cmd::Register { session_id, client } => {
                self.early.expire(Instant::now());
                let held = self.early.take(&session_id);
                if let Some(client) = client.upgrade()
                    && !held.is_empty()
                {
                    client.session_updates(&held);
                }
                self.sessions.insert(session_id, client);
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
    async fn finish(mut self, reason: &str) -> String {
        let expected = self.deadline.is_some();
        self.writer = None;
        // After the shutdown grace there is nothing more to wait for.
        let wait = if reason == GRACE_OVER { Duration::ZERO } else { EXIT_WAIT };
        let status = match tokio::time::timeout(wait, self.process.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                self.process.kill_group();
                self.process.child.wait().await.ok()
            }
        };
        // Reap wrappers' leftovers too: the group outlives its leader. Killing also unlists it.
        self.process.kill_group();
        self.process.reap_strays().await;
        self.process.stderr_drained().await;
        let exit = ExitInfo::from_status(status);
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
        for (_, client) in self.sessions.drain() {
            if let Some(client) = client.upgrade() {
                client.agent_exited(exit);
            }
        }
        message
    }
}

/// The `sessionId` of a `session/update`'s params. Agents put it first (`{"sessionId":"…"`), so it
/// is read straight from the raw text when it has no escapes; anything else is parsed. This spares
/// every update a second full JSON pass on the reader's hot path.
fn update_session_id(params: &[u8]) -> Option<std::borrow::Cow<'_, str>> {
    if let Some(rest) = params.strip_prefix(b"{\"sessionId\":\"")
        && let Some(end) = memchr::memchr(b'"', rest)
        && memchr::memchr(b'\\', &rest[..end]).is_none()
        && let Ok(id) = std::str::from_utf8(&rest[..end])
    {
        return Some(std::borrow::Cow::Borrowed(id));
    }
    let target = serde_json::from_slice::<UpdateTarget>(params).ok()?;
    Some(std::borrow::Cow::Owned(target.session_id))
}

/// A human summary of how an agent ended, with the last of its stderr.
fn exit_message(exit: &ExitInfo, tail: &str) -> String {
    let how = match (exit.code, exit.signal) {
        (Some(super::guard::EXIT_SPAWN_FAILED), _) => "the agent could not be started".to_owned(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An update of `bytes` bytes (at least 8).
    fn update(bytes: usize) -> Update {
        let raw = format!("{{\"x\":\"{}\"}}", "x".repeat(bytes.saturating_sub(8)));
        Update::from_raw(RawValue::from_string(raw).expect("json")).expect("an object")
    }

    /// Issue #16, item 8: the early buffer is bounded by bytes as well as by count.
    #[test]
    fn early_updates_are_bounded_by_bytes_and_count() {
        let now = Instant::now();
        let mut early = EarlyUpdates::default();
        let big = 1024 * 1024;
        let fits = EARLY_UPDATES_MAX_BYTES / big;
        for _ in 0..fits {
            assert!(early.push(now, "s".into(), update(big)));
        }
        assert!(!early.push(now, "s".into(), update(big)), "over the byte bound");
        assert_eq!(early.bytes, fits * big);
        assert_eq!(early.take("s").len(), fits);
        assert_eq!(early.bytes, 0, "taking releases the bytes");
        for _ in 0..EARLY_UPDATES_MAX {
            assert!(early.push(now, "t".into(), update(2)));
        }
        assert!(!early.push(now, "t".into(), update(2)), "over the count bound");
    }

    /// Issue #16, item 8: entries leave at their TTL, and the buffer says when that is, so the actor
    /// can expire them on a timer without waiting for another early update.
    #[tokio::test(start_paused = true)]
    async fn early_updates_expire_at_their_ttl() {
        let mut early = EarlyUpdates::default();
        let first = Instant::now();
        assert!(early.push(first, "a".into(), update(10)));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(early.push(Instant::now(), "b".into(), update(10)));
        assert_eq!(early.next_expiry(), Some(first + EARLY_UPDATE_TTL));
        tokio::time::sleep_until(first + EARLY_UPDATE_TTL).await;
        early.expire(Instant::now());
        assert_eq!(early.bytes, 10, "the expired update's bytes are given back");
        assert!(early.take("a").is_empty(), "expired");
        assert_eq!(early.next_expiry(), Some(first + Duration::from_secs(10) + EARLY_UPDATE_TTL));
        assert_eq!(early.take("b").len(), 1);
        assert_eq!((early.next_expiry(), early.bytes), (None, 0));
    }

    #[test]
    fn update_session_id_reads_the_prefix_and_falls_back_to_parsing() {
        let fast = br#"{"sessionId":"s-1","update":{"x":"\"sessionId\""}}"#;
        assert_eq!(update_session_id(fast).as_deref(), Some("s-1"));
        let spaced = br#"{ "update": {}, "sessionId" : "s-2" }"#;
        assert_eq!(update_session_id(spaced).as_deref(), Some("s-2"));
        let escaped = br#"{"sessionId":"s\u002d3"}"#;
        assert_eq!(update_session_id(escaped).as_deref(), Some("s-3"));
        assert_eq!(update_session_id(br#"{"update":{}}"#), None);
    }
}

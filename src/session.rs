//! One ACP session: its attached clients, its prompt FIFO and the task that runs turns one at a time,
//! and how it ends (closed by a client, agent death, daemon shutdown).
//!
//! The turn runner is the only publisher of `turn_complete` / `turn_error` and of the terminal event,
//! so every prompt gets exactly one turn event and the terminal event is always the last one.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::bus::{Bus, PromptTag};
use crate::mediator::{Mediator, ResolvedBy};
use crate::workspace::{AgentHandle, CallError, ExitInfo};

/// Clients remembered per session; past it the least recently seen is forgotten.
pub const MAX_CLIENTS_PER_SESSION: usize = 1024;
/// Tool calls remembered per session for rule matching (oldest forgotten first).
pub const MAX_TRACKED_TOOL_CALLS: usize = 256;
/// After a close or shutdown cancels a running turn, how long the agent gets to answer it.
pub const TURN_CANCEL_GRACE: Duration = Duration::from_secs(5);

type ToolCalls = (HashMap<String, Value>, VecDeque<String>);

/// How a session ended.
#[derive(Debug, Clone)]
pub enum EndReason {
    /// `DELETE /session/:id`.
    Closed { closed_by: Option<String> },
    /// The agent process exited.
    Died(ExitInfo),
    /// The daemon is shutting down.
    Shutdown,
}

impl EndReason {
    fn turn_error_code(&self) -> &'static str {
        match self {
            EndReason::Closed { .. } => "session_closed",
            EndReason::Died(_) => "agent_exited",
            EndReason::Shutdown => "daemon_draining",
        }
    }
}

/// Why a prompt did not produce an agent result.
#[derive(Debug, Clone)]
pub enum PromptError {
    Agent(String),
    Exited(String),
    Ended(&'static str),
}

/// A queued prompt.
pub struct PromptJob {
    pub prompt_id: String,
    pub originator: Option<String>,
    /// The `session/prompt` params (the request body with `sessionId` set from the route).
    pub params: Value,
    /// The blocking caller waiting for the result, if any.
    pub reply: Option<oneshot::Sender<Result<Value, PromptError>>>,
    /// Fired when a blocking caller's connection drops: the turn is cancelled.
    pub caller_gone: CancellationToken,
    /// When the prompt was accepted, for the duration metric.
    pub queued_at: std::time::Instant,
}

/// Fixed facts a session is created with.
pub struct SessionInit {
    pub id: String,
    pub workspace: PathBuf,
    pub agent: AgentHandle,
    pub bus: Arc<Bus>,
    pub mediator: Mediator,
    pub prompt_cap: usize,
    /// The agent's `session/new` result (models, modes, `_meta`), shown to clients.
    pub agent_result: Value,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Called once the session has fully ended, to drop it from the daemon's tables.
    pub on_finished: Box<dyn FnOnce(&str) + Send>,
}

pub struct Session {
    pub id: String,
    pub workspace: PathBuf,
    pub created_at: u64,
    pub agent: AgentHandle,
    pub bus: Arc<Bus>,
    pub mediator: Mediator,
    pub agent_result: Value,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Client id → last seen (ms since epoch). Await-free critical sections only.
    clients: Mutex<HashMap<String, u64>>,
    queue: mpsc::Sender<PromptJob>,
    /// Running plus queued prompts, checked against `prompt_cap` before enqueueing.
    pending_prompts: AtomicUsize,
    prompt_cap: usize,
    /// Announced tool calls by id, and their arrival order for eviction (see `track_tool_call`).
    tool_calls: Mutex<ToolCalls>,
    /// The running turn's tag, stamped on every event it causes.
    active: Mutex<Option<Arc<PromptTag>>>,
    end_reason: OnceLock<EndReason>,
    ending: CancellationToken,
    finished: CancellationToken,
}

/// Why a prompt could not be queued.
pub enum EnqueueError {
    Full { limit: usize, pending: usize },
    Ended,
}

impl Session {
    pub fn start(init: SessionInit) -> Arc<Session> {
        let (queue, rx) = mpsc::channel(init.prompt_cap.max(1));
        let session = Arc::new(Session {
            id: init.id,
            workspace: init.workspace,
            created_at: crate::now_ms(),
            agent: init.agent,
            bus: init.bus,
            mediator: init.mediator,
            agent_result: init.agent_result,
            metrics: init.metrics,
            clients: Mutex::new(HashMap::new()),
            queue,
            pending_prompts: AtomicUsize::new(0),
            prompt_cap: init.prompt_cap,
            active: Mutex::new(None),
            tool_calls: Mutex::new((HashMap::new(), VecDeque::new())),
            end_reason: OnceLock::new(),
            ending: CancellationToken::new(),
            finished: CancellationToken::new(),
        });
        tokio::spawn(run_turns(session.clone(), rx, init.on_finished));
        session
    }

    /// Registers (or refreshes) a client id; returns its last-seen time.
    pub fn touch_client(&self, client_id: &str) -> u64 {
        let now = crate::now_ms();
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if !clients.contains_key(client_id)
            && clients.len() >= MAX_CLIENTS_PER_SESSION
            && let Some(oldest) = clients.iter().min_by_key(|(_, seen)| **seen).map(|(id, _)| id.clone())
        {
            clients.remove(&oldest);
        }
        clients.insert(client_id.to_owned(), now);
        now
    }

    pub fn has_client(&self, client_id: &str) -> bool {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).contains_key(client_id)
    }

    pub fn remove_client(&self, client_id: &str) -> bool {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).remove(client_id).is_some()
    }

    pub fn client_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> =
            self.clients.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        ids.sort();
        ids
    }

    pub fn client_count(&self) -> usize {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The running turn's originator (the `designated` policy's decider).
    pub fn current_tag(&self) -> Option<Arc<PromptTag>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn has_active_prompt(&self) -> bool {
        self.current_tag().is_some()
    }

    pub fn pending_prompt_count(&self) -> usize {
        self.pending_prompts.load(Ordering::Acquire)
    }

    pub fn is_ending(&self) -> bool {
        self.ending.is_cancelled()
    }

    /// Publishes an agent `session/update` (its params are the event's data, byte for byte).
    pub fn publish_update(&self, params: &RawValue) {
        // A cheap byte test first: this runs for every streamed chunk.
        if params.get().contains("tool_call") {
            self.track_tool_call(params);
        }
        let tag = self.current_tag();
        let empty = PromptTag::default();
        self.bus.publish_raw("session_update", params.get(), tag.as_deref().unwrap_or(&empty));
    }

    /// Remembers what the agent announced about a tool call (`tool_call` replaces, `tool_call_update`
    /// merges its non-null fields), because ACP's permission request carries only a tool-call
    /// *update*: fields it omits (Claude Code omits `kind` and `locations`) keep the announced values.
    fn track_tool_call(&self, params: &RawValue) {
        let Ok(value) = serde_json::from_str::<Value>(params.get()) else { return };
        let Some(update) = value.get("update") else { return };
        let replace = match update.get("sessionUpdate").and_then(Value::as_str) {
            Some("tool_call") => true,
            Some("tool_call_update") => false,
            _ => return,
        };
        let Some(id) = update.get("toolCallId").and_then(Value::as_str) else { return };
        let mut calls = self.tool_calls.lock().unwrap_or_else(|p| p.into_inner());
        if !calls.0.contains_key(id) {
            if calls.1.len() >= MAX_TRACKED_TOOL_CALLS
                && let Some(oldest) = calls.1.pop_front()
            {
                calls.0.remove(&oldest);
            }
            calls.1.push_back(id.to_owned());
        }
        let entry = calls.0.entry(id.to_owned()).or_insert_with(|| json!({}));
        if replace {
            *entry = update.clone();
        } else {
            overlay(entry, update);
        }
    }

    /// The request's `toolCall` laid over what the agent announced for the same `toolCallId`:
    /// what permission rules match on.
    pub fn merged_tool_call(&self, tool_call: &Value) -> Value {
        let announced = tool_call
            .get("toolCallId")
            .and_then(Value::as_str)
            .and_then(|id| self.tool_calls.lock().unwrap_or_else(|p| p.into_inner()).0.get(id).cloned());
        let mut merged = announced.unwrap_or_else(|| json!({}));
        overlay(&mut merged, tool_call);
        merged
    }

    /// Publishes an event tied to the running turn, if any.
    pub fn publish(&self, kind: &str, data: &Value) {
        let tag = self.current_tag();
        let empty = PromptTag::default();
        self.bus.publish(kind, data, tag.as_deref().unwrap_or(&empty));
    }

    /// Queues a prompt, keeping running + queued within the cap.
    pub fn enqueue(&self, job: PromptJob) -> Result<(), EnqueueError> {
        if self.is_ending() {
            return Err(EnqueueError::Ended);
        }
        let reserved = self
            .pending_prompts
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.prompt_cap).then_some(n + 1));
        if let Err(pending) = reserved {
            return Err(EnqueueError::Full { limit: self.prompt_cap, pending });
        }
        match self.queue.try_send(job) {
            Ok(()) => Ok(()),
            Err(_) => {
                self.pending_prompts.fetch_sub(1, Ordering::AcqRel);
                Err(EnqueueError::Ended)
            }
        }
    }

    /// Cancels the running turn (ACP `session/cancel`) and every pending permission; the queue
    /// keeps running afterwards.
    pub async fn cancel(&self) {
        // ACP's order: `session/cancel` first, then the pending permission requests answered
        // `cancelled`. Answered the other way round, an agent (Qwen Code does) takes the cancelled
        // permission as a declined tool and carries on with the turn.
        self.agent.notify("session/cancel", json!({"sessionId": self.id})).await;
        self.mediator.cancel_all(self, ResolvedBy::Cancel);
    }

    /// Starts ending the session; the turn runner finishes the job and publishes the terminal event.
    /// The first reason wins.
    pub fn end(&self, reason: EndReason) {
        if self.end_reason.set(reason).is_err() {
            return;
        }
        // The turn runner cancels the running turn and then the pending permissions, in ACP's order.
        self.ending.cancel();
    }

    /// Waits until the terminal event is out and the session is gone from every table.
    pub async fn finished(&self) {
        self.finished.cancelled().await;
    }
}

fn set_active(session: &Session, tag: Option<Arc<PromptTag>>) {
    *session.active.lock().unwrap_or_else(|p| p.into_inner()) = tag;
}

async fn run_turns(
    session: Arc<Session>,
    mut queue: mpsc::Receiver<PromptJob>,
    on_finished: Box<dyn FnOnce(&str) + Send>,
) {
    loop {
        let job = tokio::select! {
            biased;
            _ = session.ending.cancelled() => break,
            job = queue.recv() => match job { Some(job) => job, None => break },
        };
        run_turn(&session, job).await;
    }
    // Requests raised outside any turn (or while idle) are cancelled here; from now on new ones are
    // answered `cancelled` at once.
    session.mediator.cancel_all(&session, ResolvedBy::SessionClosed);
    let reason = session.end_reason.get().cloned().unwrap_or(EndReason::Shutdown);
    queue.close();
    while let Ok(job) = queue.try_recv() {
        finish_turn(&session, job, Err(PromptError::Ended(reason.turn_error_code())));
    }
    let terminal = match &reason {
        EndReason::Closed { closed_by } => (
            "session_closed",
            json!({"sessionId": session.id, "reason": "closed_by_client", "closedBy": closed_by}),
        ),
        EndReason::Shutdown => {
            ("session_closed", json!({"sessionId": session.id, "reason": "daemon_shutdown"}))
        }
        EndReason::Died(exit) => (
            "session_died",
            json!({
                "sessionId": session.id, "reason": "agent_exited", "exitCode": exit.code,
                // `signal` per SPEC; `signalCode` is the name @qwen-code/sdk's event types use.
                "signal": exit.signal, "signalCode": exit.signal.map(signal_name),
            }),
        ),
    };
    // Out of the tables first: a client that sees the terminal event and asks again gets a 404.
    on_finished(&session.id);
    session.bus.publish_terminal(terminal.0, &terminal.1);
    session.finished.cancel();
}

async fn run_turn(session: &Arc<Session>, mut job: PromptJob) {
    if job.caller_gone.is_cancelled() {
        // The blocking caller left before the turn started: nothing to ask the agent.
        finish_turn(session, job, Ok(json!({"stopReason": "cancelled"})));
        return;
    }
    set_active(
        session,
        Some(Arc::new(PromptTag {
            prompt_id: Some(job.prompt_id.clone()),
            originator: job.originator.clone(),
        })),
    );
    let params = std::mem::take(&mut job.params);
    let call = session.agent.call("session/prompt", params, None);
    tokio::pin!(call);
    let result = tokio::select! {
        biased;
        r = &mut call => r,
        _ = job.caller_gone.cancelled() => {
            session.cancel().await;
            tokio::select! {
                biased;
                r = &mut call => r,
                _ = session.ending.cancelled() => cancel_for_ending(session, &mut call).await,
            }
        }
        _ = session.ending.cancelled() => cancel_for_ending(session, &mut call).await,
    };
    let result = result.map_err(|e| match e {
        CallError::Rpc(e) => PromptError::Agent(e.detailed_message()),
        CallError::Exited(m) | CallError::Start(m) => PromptError::Exited(m),
        other => PromptError::Agent(other.to_string()),
    });
    let result = result.and_then(|raw| {
        serde_json::from_str::<Value>(raw.get())
            .map_err(|_| PromptError::Agent("invalid prompt result".into()))
    });
    // Idle before the turn event goes out: whoever sees it (or the blocking reply) and asks for
    // the session's status must not still see `hasActivePrompt: true`.
    set_active(session, None);
    finish_turn(session, job, result);
}

/// The session is ending while a turn runs: ask the agent to stop and give it a moment to answer.
async fn cancel_for_ending<F>(
    session: &Session,
    call: &mut std::pin::Pin<&mut F>,
) -> Result<Box<RawValue>, CallError>
where
    F: std::future::Future<Output = Result<Box<RawValue>, CallError>>,
{
    if !matches!(session.end_reason.get(), Some(EndReason::Died(_))) {
        session.agent.notify("session/cancel", json!({"sessionId": session.id})).await;
    }
    session.mediator.cancel_all(session, ResolvedBy::SessionClosed);
    match tokio::time::timeout(TURN_CANCEL_GRACE, call.as_mut()).await {
        Ok(r) => r,
        Err(_) => {
            let code = session.end_reason.get().map_or("session_closed", EndReason::turn_error_code);
            Err(CallError::Exited(format!("the turn was ended ({code})")))
        }
    }
}

/// Publishes the one turn event of `job` and answers its blocking caller.
fn finish_turn(session: &Session, job: PromptJob, result: Result<Value, PromptError>) {
    let tag = PromptTag { prompt_id: Some(job.prompt_id.clone()), originator: job.originator.clone() };
    let outcome = match &result {
        Ok(value) if value.get("stopReason").and_then(Value::as_str) == Some("cancelled") => "cancelled",
        Ok(_) => "completed",
        Err(PromptError::Agent(_)) => "agent_error",
        Err(PromptError::Exited(_)) => "agent_exited",
        Err(PromptError::Ended(code)) => code,
    };
    session.metrics.prompt_finished(outcome, job.queued_at.elapsed());
    match &result {
        Ok(value) => {
            let stop = value.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn");
            session.bus.publish(
                "turn_complete",
                &json!({"sessionId": session.id, "promptId": job.prompt_id, "stopReason": stop}),
                &tag,
            );
        }
        Err(e) => {
            let (message, code) = match e {
                PromptError::Agent(m) => (m.clone(), "agent_error"),
                PromptError::Exited(m) => (m.clone(), "agent_exited"),
                PromptError::Ended(code) => (format!("the prompt did not run: {code}"), *code),
            };
            session.bus.publish(
                "turn_error",
                &json!({"sessionId": session.id, "promptId": job.prompt_id, "message": message, "code": code}),
                &tag,
            );
        }
    }
    session.pending_prompts.fetch_sub(1, Ordering::AcqRel);
    if let Some(reply) = job.reply {
        let _ = reply.send(result);
    }
}

/// `{stopReason, promptId, ...agent result fields}` for a blocking prompt's 200.
pub fn prompt_response(prompt_id: &str, result: Value) -> Value {
    let mut out = match result {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    out.entry("stopReason").or_insert_with(|| json!("end_turn"));
    out.insert("promptId".into(), json!(prompt_id));
    Value::Object(out)
}

/// `SIGKILL`-style names for `session_died.signalCode` (the SDK's field is a string).
fn signal_name(signal: i32) -> String {
    let name = match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return format!("SIG{signal}"),
    };
    name.to_owned()
}

/// Copies `from`'s non-null top-level fields onto `into` (ACP's tool-call update semantics).
fn overlay(into: &mut Value, from: &Value) {
    if let (Value::Object(into), Value::Object(from)) = (into, from) {
        for (k, v) in from {
            if !v.is_null() {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

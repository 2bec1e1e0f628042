//! One ACP session: its attached clients, its prompt FIFO and the task that runs turns one at a
//! time, its permission mediator, and how it ends (closed by a client, agent death, daemon
//! shutdown).
//!
//! The turn runner (`runner`) is the only publisher of `turn_complete` / `turn_error` and of the terminal
//! event, so every prompt gets exactly one turn event and the terminal event is always the last one.
//!
//! A session plays two roles for the floors below it: ACP's client role for its agent's actor
//! ([`acp::Client`]: updates, permission requests, the agent's exit) and the host of its permission
//! [`Mediator`] ([`Host`]). It reaches its agent only through [`acp::Agent`], so its unit tests
//! run on a fake agent and no process.

mod runner;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use memchr::memmem;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::bus::{Bus, PromptTag, SubscribeError, Subscription};
use super::error::SessionError;
use super::ids::Claim;
use super::turns::{self, Actor, RewindError, RewindOutcome, Turns};
use crate::acp::{self, CallError, method};
use crate::event::EventKind;
use crate::exec::ExitInfo;
use crate::metrics::Metrics;
use crate::notify::{EventOrigin, Notifier};
use crate::permission::{BoundMediator, Host, Mediator, ResolvedBy};
use crate::store::{SessionState, Store};
use crate::sync::lock;

/// Longest client id (`docs/protocol.md#27-client-identity`).
const MAX_CLIENT_ID_LEN: usize = 128;

/// Whether `id` is a client id the daemon accepts: `^[A-Za-z0-9._:-]{1,128}$`, whichever door it
/// came through (a header, an ACP `_meta.clientId`).
pub fn valid_client_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_CLIENT_ID_LEN
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Clients remembered per session that named themselves; past it the least recently seen of them
/// is forgotten.
const MAX_CLIENTS_PER_SESSION: usize = 1024;
/// Client ids the daemon minted for creates without one, kept apart with their own bound, so
/// anonymous traffic only ever evicts other anonymous entries, never a client that named itself.
const MAX_MINTED_CLIENTS_PER_SESSION: usize = 1024;
/// Tool calls remembered per session for rule matching (oldest forgotten first).
const MAX_TRACKED_TOOL_CALLS: usize = 256;
/// After a close or shutdown cancels a running turn, how long the agent gets to answer it.
pub(super) const TURN_CANCEL_GRACE: Duration = Duration::from_secs(5);
/// Content blocks of one prompt echoed to subscribers as `user_message_chunk` updates; the rest are
/// sent to the agent but not echoed. qwen serve's `MAX_ECHO_CONTENT_BLOCKS`.
const MAX_ECHO_BLOCKS: usize = 256;
/// `update._meta.source` of the `user_message_chunk` echo of a prompt: the daemon, not the agent,
/// wrote it (qwen serve's value, so clients of either tell them apart the same way).
const ECHO_SOURCE: &str = "bridge-echo";
/// `update._meta.source` of the `current_mode_update` the daemon publishes after `session/set_mode`.
const SET_MODE_SOURCE: &str = "bridge-set-mode";
/// `update._meta.source` of the `config_option_update` the daemon publishes after
/// `session/set_config_option`.
const SET_CONFIG_SOURCE: &str = "bridge-set-config-option";

type ToolCalls = (HashMap<String, Value>, VecDeque<String>);

/// How a client is registered on a session: what the front desk (`crate::desk`) found it to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enrol {
    /// A client that named its id and may vote.
    Voter,
    /// A paired observer: a client of the session, never one of its voters.
    Observer,
    /// An id the daemon minted for a caller that named none (it may vote; a full session forgets
    /// minted ids first).
    Minted,
}

/// How a client id came to be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The caller sent it.
    Named,
    /// The daemon minted it for a caller that sent none.
    Minted,
}

/// A session's registered clients: id → (last seen in ms, origin). Named and minted ids have a
/// bound each; a full class forgets its own least recently seen entry.
#[derive(Debug, Default)]
struct Clients {
    seen: HashMap<String, (u64, Origin)>,
    /// Registered ids that may not vote (paired observers): registered like any client, never
    /// counted among the voters.
    observers: HashSet<String>,
}

impl Clients {
    /// Registers or refreshes `id`. A minted id that comes back in a request becomes named: its
    /// client has shown it knows it, and is no longer anonymous traffic.
    fn touch(&mut self, id: &str, origin: Origin) -> u64 {
        let now = crate::clock::now_ms();
        let origin = match self.seen.get(id) {
            Some((_, Origin::Named)) => Origin::Named,
            _ => origin,
        };
        let was = self.seen.get(id).map(|(_, o)| *o);
        if was != Some(origin) {
            let cap = match origin {
                Origin::Named => MAX_CLIENTS_PER_SESSION,
                Origin::Minted => MAX_MINTED_CLIENTS_PER_SESSION,
            };
            let class = self.seen.iter().filter(|(_, (_, o))| *o == origin);
            if class.clone().count() >= cap
                && let Some(oldest) = class.min_by_key(|(_, (seen, _))| *seen).map(|(k, _)| k.clone())
            {
                self.seen.remove(&oldest);
                self.observers.remove(&oldest);
            }
        }
        self.seen.insert(id.to_owned(), (now, origin));
        now
    }
}

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
    fn cause(&self) -> EndCause {
        match self {
            EndReason::Closed { .. } => EndCause::SessionClosed,
            EndReason::Died(_) => EndCause::AgentExited,
            EndReason::Shutdown => EndCause::DaemonDraining,
        }
    }
}

/// Why a prompt never ran: the session ended first. Its code is the `turn_error.code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndCause {
    SessionClosed,
    AgentExited,
    DaemonDraining,
}

impl EndCause {
    fn code(self) -> &'static str {
        match self {
            EndCause::SessionClosed => "session_closed",
            EndCause::AgentExited => "agent_exited",
            EndCause::DaemonDraining => "daemon_draining",
        }
    }
}

/// Why a turn produced no agent result.
#[derive(Debug, Clone)]
enum TurnError {
    /// The agent answered with an error.
    Agent(String),
    /// The agent exited (or stopped reading) before it answered.
    Exited(String),
    /// The prompt never ran.
    Ended(EndCause),
}

impl TurnError {
    /// The `turn_error.code`, also the prompt metric's outcome.
    fn code(&self) -> &'static str {
        match self {
            TurnError::Agent(_) => "agent_error",
            TurnError::Exited(_) => "agent_exited",
            TurnError::Ended(cause) => cause.code(),
        }
    }
}

/// The one mapping of a failed agent call, for a turn and for every other call a session makes.
impl From<CallError> for TurnError {
    fn from(e: CallError) -> TurnError {
        match e {
            CallError::Rpc(e) => TurnError::Agent(e.detailed_message()),
            CallError::Exited(m) | CallError::Start(m) => TurnError::Exited(m),
            other => TurnError::Agent(other.to_string()),
        }
    }
}

type TurnResult = Result<Value, TurnError>;

/// A prompt as a client sent it, checked: `params` is the `session/prompt` request's params (the
/// body, with a non-empty `prompt` array); the session sets `sessionId` itself.
#[derive(Debug, Clone)]
pub struct Prompt {
    pub params: Map<String, Value>,
    /// The client id of the sender, stamped on every event the turn causes.
    pub originator: Option<String>,
}

/// An asynchronously queued prompt: its id, and the last event id before it was queued (every event
/// it causes comes after).
#[derive(Debug, Clone)]
pub struct Accepted {
    pub prompt_id: String,
    pub last_event_id: u64,
}

/// A queued prompt.
struct PromptJob {
    prompt_id: String,
    originator: Option<String>,
    /// The `session/prompt` params.
    params: Value,
    /// The blocking caller waiting for the result, if any.
    reply: Option<oneshot::Sender<TurnResult>>,
    /// Fired when a blocking caller goes away: the turn is cancelled.
    caller_gone: CancellationToken,
    /// When the prompt was accepted, for the duration metric.
    queued_at: Instant,
    /// The session's count of cancels when this prompt became its running turn, if it did on
    /// acceptance (nothing ran or waited): a cancel after its `202` is then this turn's, however
    /// late the turn runner gets to it. `None`: counted when the runner takes it.
    cancels_at_start: Option<u64>,
}

/// Fixed facts a session is created with.
pub(super) struct SessionInit {
    pub(super) id: String,
    pub(super) workspace: PathBuf,
    /// The configured agent's name (`--agent NAME=...`).
    pub(super) agent_name: String,
    pub(super) agent: Arc<dyn acp::Agent>,
    pub(super) bus: Arc<Bus>,
    pub(super) mediator: Mediator,
    pub(super) prompt_cap: usize,
    /// Deadline for the agent's answer to calls other than prompts (`session/set_model`).
    pub(super) call_timeout: Duration,
    /// The agent's `session/new` result (models, modes, `_meta`), shown to clients.
    pub(super) agent_result: Value,
    pub(super) metrics: Arc<Metrics>,
    /// The agent runs confined (`agent::sandbox`): its tool results are read for refused writes.
    pub(super) confined: bool,
    /// Where the session's end is recorded.
    pub(super) store: Arc<dyn Store>,
    pub(super) notifier: Arc<Notifier>,
    /// Called once the session has fully ended, to drop it from the daemon's tables.
    pub(super) on_finished: Box<dyn FnOnce(&str) + Send>,
    /// The session's id, held until its record is final (the terminal event and the end are
    /// handed to the store): no other session can be started under it before.
    pub(super) claim: Claim,
    /// Its change sets (and those the store kept of its earlier life, when resumed).
    pub(super) turns: Turns,
}

impl std::fmt::Debug for SessionInit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionInit").field("id", &self.id).field("workspace", &self.workspace).finish()
    }
}

pub struct Session {
    pub id: String,
    pub workspace: PathBuf,
    /// The name of the configured agent the session runs on.
    pub agent_name: String,
    pub created_at: u64,
    /// The agent's `session/new` result (models, modes, `_meta`), as it answered.
    pub agent_result: Value,
    /// The models and modes now: `agent_result`'s, with the current ids followed through model and
    /// mode switches and the agent's `current_mode_update`. Await-free critical sections only.
    state: Mutex<AgentState>,
    agent: Arc<dyn acp::Agent>,
    bus: Arc<Bus>,
    mediator: Mediator,
    metrics: Arc<Metrics>,
    /// See [`SessionInit::confined`].
    confined: bool,
    store: Arc<dyn Store>,
    /// Hands the events targets may want to the notification queues (never waits).
    notifier: Arc<Notifier>,
    call_timeout: Duration,
    /// The registered clients. Await-free critical sections only.
    clients: Mutex<Clients>,
    queue: mpsc::Sender<PromptJob>,
    /// Held while a prompt is echoed and queued, and by the turn runner while it closes the queue: so
    /// a prompt is either echoed *and* queued (and then gets its turn event), or refused unseen.
    admission: Mutex<()>,
    /// Running plus queued prompts, checked against `prompt_cap` before enqueueing.
    pending_prompts: AtomicUsize,
    /// Cancels asked so far: a turn that sees one between its start (its acceptance, when the
    /// session was idle) and its prompt reaching the agent (its start snapshot takes a moment) ends
    /// `cancelled` without asking the agent.
    cancels: AtomicU64,
    prompt_cap: usize,
    /// Announced tool calls by id, and their arrival order for eviction (see `track_tool_call`).
    tool_calls: Mutex<ToolCalls>,
    /// The running turn: its tag, stamped on every event it causes, and its prompt's words.
    active: Mutex<Option<Running>>,
    /// Each turn's change set, and the rewinds (`turns.rs`).
    turns: Turns,
    end_reason: OnceLock<EndReason>,
    ending: CancellationToken,
    finished: CancellationToken,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("workspace", &self.workspace)
            .field("ending", &self.is_ending())
            .finish_non_exhaustive()
    }
}

impl Session {
    pub(super) fn start(init: SessionInit) -> Arc<Session> {
        let (queue, rx) = mpsc::channel(init.prompt_cap.max(1));
        let state = AgentState::from_session_new(&init.agent_result);
        let session = Arc::new(Session {
            id: init.id,
            workspace: init.workspace,
            agent_name: init.agent_name,
            created_at: crate::clock::now_ms(),
            agent_result: init.agent_result,
            state: Mutex::new(state),
            agent: init.agent,
            bus: init.bus,
            mediator: init.mediator,
            metrics: init.metrics,
            confined: init.confined,
            store: init.store,
            notifier: init.notifier,
            call_timeout: init.call_timeout,
            clients: Mutex::new(Clients::default()),
            queue,
            admission: Mutex::new(()),
            pending_prompts: AtomicUsize::new(0),
            cancels: AtomicU64::new(0),
            prompt_cap: init.prompt_cap,
            active: Mutex::new(None),
            turns: init.turns,
            tool_calls: Mutex::new((HashMap::new(), VecDeque::new())),
            end_reason: OnceLock::new(),
            ending: CancellationToken::new(),
            finished: CancellationToken::new(),
        });
        tokio::spawn(runner::run_turns(session.clone(), rx, init.on_finished, init.claim));
        session
    }

    /// Registers (or refreshes) a client, as the front desk says it is; returns its last-seen time.
    /// An id registered as an observer stays one until it leaves.
    pub fn register(&self, client_id: &str, as_: Enrol) -> u64 {
        let mut clients = lock(&self.clients);
        match as_ {
            Enrol::Voter => clients.touch(client_id, Origin::Named),
            Enrol::Observer => {
                clients.observers.insert(client_id.to_owned());
                clients.touch(client_id, Origin::Named)
            }
            Enrol::Minted => clients.touch(client_id, Origin::Minted),
        }
    }

    /// `client_id` may vote no more (a revoked device): it leaves the session's clients and the
    /// voters of its pending requests.
    pub fn forget_voter(&self, client_id: &str) {
        self.remove_client(client_id);
        self.permissions().voter_gone(client_id);
    }

    pub fn has_client(&self, client_id: &str) -> bool {
        lock(&self.clients).seen.contains_key(client_id)
    }

    pub fn remove_client(&self, client_id: &str) -> bool {
        let mut clients = lock(&self.clients);
        clients.observers.remove(client_id);
        clients.seen.remove(client_id).is_some()
    }

    pub fn client_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = lock(&self.clients).seen.keys().cloned().collect();
        ids.sort();
        ids
    }

    pub fn client_count(&self) -> usize {
        lock(&self.clients).seen.len()
    }

    /// The running turn's tag (its prompt id and originator), if a turn runs.
    fn current_tag(&self) -> Option<Arc<PromptTag>> {
        lock(&self.active).as_ref().map(|r| r.tag.clone())
    }

    pub fn has_active_prompt(&self) -> bool {
        self.current_tag().is_some()
    }

    /// Whether the turn running now is prompt `prompt_id`'s.
    pub fn is_running(&self, prompt_id: &str) -> bool {
        self.current_tag().is_some_and(|t| t.prompt_id.as_deref() == Some(prompt_id))
    }

    pub fn pending_prompt_count(&self) -> usize {
        self.pending_prompts.load(Ordering::Acquire)
    }

    /// The id of the session's newest event (0 before any).
    pub fn last_event_id(&self) -> u64 {
        self.bus.last_id()
    }

    pub fn subscriber_count(&self) -> usize {
        self.bus.subscriber_count()
    }

    pub fn is_ending(&self) -> bool {
        self.ending.is_cancelled()
    }

    /// The session's permission mediator, serving this session.
    pub fn permissions(&self) -> BoundMediator<'_> {
        self.mediator.serve(self)
    }

    /// Opens an event stream; `last_event_id` is the client's `Last-Event-ID`, if any.
    pub fn subscribe(&self, last_event_id: Option<u64>) -> Result<Subscription, SessionError> {
        self.bus.subscribe(last_event_id).map_err(|e| match e {
            SubscribeError::TooMany { limit } => SessionError::SubscriberLimit { limit },
            SubscribeError::Closed => SessionError::not_found(&self.id),
        })
    }

    /// Publishes an event tied to the running turn, if any.
    pub(crate) fn publish(&self, kind: EventKind, data: &Value) {
        let tag = self.current_tag();
        let empty = PromptTag::default();
        self.bus.publish(kind, data, tag.as_deref().unwrap_or(&empty));
        if kind == EventKind::PermissionRequest {
            // A notification shows what a vote approves: the request laid over what the agent
            // announced for its tool call (an agent may put the command only in the announcement).
            let mut announced = data.clone();
            announced["toolCall"] =
                Host::announced_tool_call(self, data.get("toolCall").unwrap_or(&Value::Null));
            if tag.is_some() {
                // What the turn's approvals name: the request as the agent announced it.
                self.turns.asked(&announced);
            }
            self.notifier.offer(self.source(), kind, &announced);
        } else {
            if kind == EventKind::PermissionResolved && tag.is_some() {
                self.turns.resolved(data);
            }
            self.notifier.offer(self.source(), kind, data);
        }
    }

    /// The session's turn records (its change sets and rewinds), oldest first: those a live
    /// session keeps ([`super::turns::MAX_TURN_RECORDS`]).
    pub fn turn_records(&self) -> Vec<crate::store::TurnRecord> {
        self.turns.records()
    }

    /// Every snapshot the session's records name.
    pub fn snapshot_ids(&self) -> Vec<String> {
        self.turns.snapshot_ids()
    }

    /// Puts the files changed by the turns from `prompt_id`'s on back as they were before it
    /// (`docs/protocol.md` § 18): refused while a turn runs or is queued, and (unless `force`)
    /// when someone changed one of them since the agent did.
    pub async fn rewind(
        &self,
        prompt_id: &str,
        force: bool,
        actor: &Actor,
    ) -> Result<RewindOutcome, RewindError> {
        self.turns.rewind(self, prompt_id, force, actor).await
    }

    fn source(&self) -> EventOrigin<'_> {
        EventOrigin { session_id: &self.id, workspace: &self.workspace }
    }

    /// Publishes the agent's `session/update`s as they came (their params, each one JSON object as
    /// the agent wrote it), tied to the running turn: one bus publish for a burst (this is the
    /// agent reader's path).
    fn publish_updates<'a>(&self, params: impl Iterator<Item = &'a [u8]> + Clone) {
        // A cheap byte test first: this runs for every streamed chunk, so the searchers are built
        // once (building one was as costly as the search).
        static TOOL_CALL: LazyLock<memmem::Finder<'static>> =
            LazyLock::new(|| memmem::Finder::new("tool_call"));
        static MODE: LazyLock<memmem::Finder<'static>> =
            LazyLock::new(|| memmem::Finder::new("current_mode_update"));
        for p in params.clone() {
            if TOOL_CALL.find(p).is_some() {
                self.track_tool_call(p);
            }
            if MODE.find(p).is_some() {
                self.track_mode(p);
            }
        }
        let tag = self.current_tag();
        let empty = PromptTag::default();
        self.bus.publish_raw_many(EventKind::SessionUpdate, params, tag.as_deref().unwrap_or(&empty));
    }

    /// Remembers what the agent announced about a tool call (`tool_call` replaces, `tool_call_update`
    /// merges its non-null fields), because ACP's permission request carries only a tool-call
    /// *update*: fields it omits (Claude Code omits `kind` and `locations`) keep the announced values.
    fn track_tool_call(&self, params: &[u8]) {
        let Ok(value) = serde_json::from_slice::<Value>(params) else { return };
        let Some(update) = value.get("update") else { return };
        let replace = match update.get("sessionUpdate").and_then(Value::as_str) {
            Some("tool_call") => true,
            Some("tool_call_update") => false,
            _ => return,
        };
        let Some(id) = update.get("toolCallId").and_then(Value::as_str) else { return };
        if self.confined && !replace && refused_write(update) {
            self.metrics.sandbox_denial("agent");
        }
        let mut calls = lock(&self.tool_calls);
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

    /// Queues a prompt and returns at once (`Prefer: respond-async`).
    pub fn enqueue(&self, prompt: Prompt) -> Result<Accepted, SessionError> {
        self.enqueue_with_id(prompt, uuid::Uuid::new_v4().to_string(), CancellationToken::new())
    }

    /// [`Session::enqueue`] under a prompt id the caller minted (a UUID): the ACP door knows the id
    /// before the turn can end, so it cannot miss the turn's event. Firing `cancel` cancels the
    /// prompt: never run if it has not started (its turn ends `cancelled` at once), else its turn
    /// is cancelled like `session/cancel`'s.
    pub fn enqueue_with_id(
        &self,
        prompt: Prompt,
        prompt_id: String,
        cancel: CancellationToken,
    ) -> Result<Accepted, SessionError> {
        let last_event_id = self.bus.last_id();
        self.enqueue_job(self.job(prompt, prompt_id.clone(), None, cancel))?;
        Ok(Accepted { prompt_id, last_event_id })
    }

    /// Queues a prompt and waits for its turn: `{stopReason, promptId, ...the agent's result}`.
    /// Dropping the future (the caller went away) cancels the turn.
    pub async fn prompt(&self, prompt: Prompt) -> Result<Value, SessionError> {
        let prompt_id = uuid::Uuid::new_v4().to_string();
        let caller_gone = CancellationToken::new();
        let (reply, answer) = oneshot::channel();
        self.enqueue_job(self.job(prompt, prompt_id.clone(), Some(reply), caller_gone.clone()))?;
        let guard = caller_gone.drop_guard();
        let result = answer.await.unwrap_or(Err(TurnError::Ended(EndCause::SessionClosed)));
        guard.disarm();
        result.map(|value| prompt_response(&prompt_id, value)).map_err(|e| self.caller_error(e))
    }

    /// What a caller learns when its turn (or call) produced no result.
    fn caller_error(&self, e: TurnError) -> SessionError {
        match e {
            TurnError::Agent(m) => SessionError::Agent(m),
            TurnError::Exited(m) => SessionError::AgentExited(m),
            TurnError::Ended(EndCause::AgentExited) => SessionError::AgentExited("the agent exited".into()),
            TurnError::Ended(EndCause::DaemonDraining) => SessionError::Draining,
            TurnError::Ended(EndCause::SessionClosed) => SessionError::not_found(&self.id),
        }
    }

    fn job(
        &self,
        prompt: Prompt,
        prompt_id: String,
        reply: Option<oneshot::Sender<TurnResult>>,
        caller_gone: CancellationToken,
    ) -> PromptJob {
        let mut params = prompt.params;
        // The route's id wins over any sessionId in the body.
        params.insert("sessionId".into(), json!(self.id));
        PromptJob {
            prompt_id,
            originator: prompt.originator,
            params: Value::Object(params),
            reply,
            caller_gone,
            queued_at: Instant::now(),
            cancels_at_start: None,
        }
    }

    /// Queues a prompt, keeping running + queued within the cap, and echoes its content blocks to
    /// every subscriber before the turn runner can see it (so the echo precedes everything the turn
    /// causes, and prompts are echoed in the order they will run).
    fn enqueue_job(&self, mut job: PromptJob) -> Result<(), SessionError> {
        let _admission = lock(&self.admission);
        if self.is_ending() {
            // A session still live while the daemon drains refuses like a create does.
            return Err(match self.end_reason.get() {
                Some(EndReason::Shutdown) => SessionError::Draining,
                _ => SessionError::not_found(&self.id),
            });
        }
        let reserved = self
            .pending_prompts
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.prompt_cap).then_some(n + 1));
        let was_idle = match reserved {
            Ok(pending) => pending == 0,
            Err(pending) => return Err(SessionError::QueueFull { limit: self.prompt_cap, pending }),
        };
        if was_idle {
            job.cancels_at_start = Some(self.cancels.load(Ordering::SeqCst));
        }
        // A slot first, so nothing is echoed for a prompt that cannot be queued.
        let Ok(slot) = self.queue.try_reserve() else {
            self.pending_prompts.fetch_sub(1, Ordering::AcqRel);
            return Err(SessionError::not_found(&self.id));
        };
        self.echo(&job);
        slot.send(job);
        Ok(())
    }

    /// Publishes each content block of `job`'s prompt (the first [`MAX_ECHO_BLOCKS`]) as a
    /// `user_message_chunk` update tagged with the prompt's id and originator, the way qwen serve
    /// does, so every client sees who asked what.
    fn echo(&self, job: &PromptJob) {
        let Some(blocks) = job.params.get("prompt").and_then(Value::as_array) else { return };
        let tag = PromptTag { prompt_id: Some(job.prompt_id.clone()), originator: job.originator.clone() };
        let now = crate::clock::now_ms();
        for block in blocks.iter().filter(|b| b.is_object()).take(MAX_ECHO_BLOCKS) {
            let update = json!({
                "sessionId": self.id,
                "update": {
                    "sessionUpdate": "user_message_chunk",
                    "content": block,
                    "_meta": {"serverTimestamp": now, "source": ECHO_SOURCE},
                },
            });
            self.bus.publish(EventKind::SessionUpdate, &update, &tag);
        }
    }

    /// Cancels the running turn (ACP `session/cancel`) and every pending permission; the queue
    /// keeps running afterwards.
    pub async fn cancel(&self) {
        // ACP's order: `session/cancel` first, then the pending permission requests answered
        // `cancelled`. Answered the other way round, an agent (Qwen Code does) takes the cancelled
        // permission as a declined tool and carries on with the turn.
        self.cancels.fetch_add(1, Ordering::SeqCst);
        self.agent.notify(method::SESSION_CANCEL, json!({"sessionId": self.id})).await;
        self.permissions().cancel_all(ResolvedBy::Cancel);
    }

    /// Switches the session's model (`session/set_model`), then publishes `model_switched`.
    /// Returns the agent's result object (`{}` when it sent none).
    pub async fn set_model(&self, model: &str) -> Result<Value, SessionError> {
        let params = json!({"sessionId": self.id, "modelId": model});
        let result = self.ask_agent(method::SESSION_SET_MODEL, params).await?;
        set_current(&mut lock(&self.state).models, "currentModelId", model);
        self.publish(EventKind::ModelSwitched, &json!({"sessionId": self.id, "modelId": model}));
        Ok(result_object(&result))
    }

    /// Notes the model the agent switched a new session to before any client saw it (a create's
    /// `modelServiceId`): the session's state says it, and no `model_switched` is published
    /// (nothing was switched from, as far as any client knows).
    pub(crate) fn note_model(&self, model: &str) {
        set_current(&mut lock(&self.state).models, "currentModelId", model);
    }

    /// Switches the session's mode (`session/set_mode`) to one the agent announced, then publishes
    /// a `current_mode_update` (ACP does not ask the agent to send one for a change the client
    /// made). Returns the agent's result object (`{}` when it sent none).
    pub async fn set_mode(&self, mode: &str) -> Result<Value, SessionError> {
        let available = self.mode_ids();
        if !available.iter().any(|m| m == mode) {
            return Err(SessionError::InvalidMode { mode_id: mode.to_owned(), available });
        }
        let params = json!({"sessionId": self.id, "modeId": mode});
        let result = self.ask_agent(method::SESSION_SET_MODE, params).await?;
        set_current(&mut lock(&self.state).modes, "currentModeId", mode);
        self.publish_update(json!({
            "sessionUpdate": "current_mode_update",
            "currentModeId": mode,
            "_meta": {"source": SET_MODE_SOURCE},
        }));
        Ok(result_object(&result))
    }

    /// Sets one of the config options the agent announced (ACP `session/set_config_option`), then
    /// publishes the agent's answer as a `config_option_update`, so every client follows (ACP does
    /// not ask the agent to send one for a change a client made). Returns the agent's result
    /// object. The caller checks that the agent announced config options.
    pub async fn set_config_option(&self, config_id: &str, value: &Value) -> Result<Value, SessionError> {
        let params = json!({"sessionId": self.id, "configId": config_id, "value": value});
        let result = result_object(&self.ask_agent(method::SESSION_SET_CONFIG_OPTION, params).await?);
        if let Some(options) = result.get("configOptions") {
            self.publish_update(json!({
                "sessionUpdate": "config_option_update",
                "configOptions": options,
                "_meta": {"source": SET_CONFIG_SOURCE},
            }));
        }
        Ok(result)
    }

    /// Calls the agent's `method` within the session's call deadline; a failure is what the
    /// caller is told ([`Session::caller_error`]).
    async fn ask_agent(&self, method: &'static str, params: Value) -> Result<Box<RawValue>, SessionError> {
        let result = self.agent.call(method, params, Some(self.call_timeout)).await;
        result.map_err(|e| self.caller_error(e.into()))
    }

    /// Publishes `update` as a `session/update` of this session that the daemon made (a client's
    /// change the agent is not asked to announce).
    fn publish_update(&self, update: Value) {
        self.publish(EventKind::SessionUpdate, &json!({"sessionId": self.id, "update": update}));
    }

    /// The models the agent offers, with the current one (`null` when it reported none).
    pub fn models(&self) -> Value {
        lock(&self.state).models.clone()
    }

    /// The modes the agent offers, with the current one (`null` when it reported none).
    pub fn modes(&self) -> Value {
        lock(&self.state).modes.clone()
    }

    /// The ids of the modes the agent announced (what `set_mode` accepts).
    pub fn mode_ids(&self) -> Vec<String> {
        lock(&self.state).mode_ids()
    }

    /// Follows the agent's own mode change (`current_mode_update`), so `modes()` stays current.
    fn track_mode(&self, params: &[u8]) {
        let Ok(value) = serde_json::from_slice::<Value>(params) else { return };
        let update = &value["update"];
        if update["sessionUpdate"] != "current_mode_update" {
            return;
        }
        if let Some(mode) = update["currentModeId"].as_str() {
            let mut state = lock(&self.state);
            state.announce_mode(mode);
            set_current(&mut state.modes, "currentModeId", mode);
        }
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

/// The turn that runs now.
#[derive(Debug)]
struct Running {
    tag: Arc<PromptTag>,
    /// Its prompt's text blocks, joined by blank lines and cut to [`MAX_REVIEW_PROMPT_BYTES`]:
    /// what a reviewer is told the turn was asked.
    prompt: Arc<str>,
}

/// The bytes of a running turn's prompt a reviewer is sent at most (`docs/operations.md#reviewers`):
/// what it was asked, not every file pasted into it.
const MAX_REVIEW_PROMPT_BYTES: usize = 4096;

impl Running {
    fn of(job: &PromptJob) -> Running {
        let blocks = job.params.get("prompt").and_then(Value::as_array).into_iter().flatten();
        let texts: Vec<&str> = blocks
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        let mut prompt = texts.join("\n\n");
        if prompt.len() > MAX_REVIEW_PROMPT_BYTES {
            let mut end = MAX_REVIEW_PROMPT_BYTES;
            while !prompt.is_char_boundary(end) {
                end -= 1;
            }
            prompt.truncate(end);
        }
        Running {
            tag: Arc::new(PromptTag {
                prompt_id: Some(job.prompt_id.clone()),
                originator: job.originator.clone(),
            }),
            prompt: prompt.into(),
        }
    }
}

impl turns::Host for Session {
    fn id(&self) -> &str {
        &self.id
    }

    fn workspace(&self) -> &Path {
        &self.workspace
    }

    fn publish(&self, kind: EventKind, data: &Value, tag: &PromptTag) {
        self.bus.publish(kind, data, tag);
        self.notifier.offer(self.source(), kind, data);
    }

    fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    fn busy(&self) -> bool {
        self.has_active_prompt() || self.pending_prompt_count() > 0
    }
}

impl acp::Client for Session {
    fn session_updates(&self, params: &[acp::Update]) {
        self.publish_updates(params.iter().map(acp::Update::as_bytes));
    }

    fn request_permission(&self, params: Value) -> BoxFuture<'_, Value> {
        Box::pin(self.permissions().request(params))
    }

    fn elicit(&self, params: Value) -> BoxFuture<'_, Result<Value, acp::RpcError>> {
        Box::pin(async move {
            let refused =
                |why| acp::RpcError::new(acp::INVALID_PARAMS, format!("elicitation refused: {why}"));
            self.permissions().elicit(params).await.map_err(refused)
        })
    }

    fn elicitation_complete(&self, elicitation_id: &str) {
        self.permissions().elicitation_complete(elicitation_id);
    }

    fn agent_exited(&self, exit: ExitInfo) {
        self.end(EndReason::Died(exit));
    }
}

impl Host for Session {
    fn session_id(&self) -> &str {
        &self.id
    }

    fn publish(&self, kind: EventKind, data: &Value) {
        Session::publish(self, kind, data);
    }

    fn originator(&self) -> Option<String> {
        self.current_tag().and_then(|t| t.originator.clone())
    }

    /// The registered clients that may vote now: not the observers (a revoked device is no
    /// longer registered).
    fn voters(&self) -> Vec<String> {
        let clients = lock(&self.clients);
        let mut ids: Vec<String> =
            clients.seen.keys().filter(|id| !clients.observers.contains(*id)).cloned().collect();
        ids.sort();
        ids
    }

    fn is_voter(&self, client_id: &str) -> bool {
        let clients = lock(&self.clients);
        clients.seen.contains_key(client_id) && !clients.observers.contains(client_id)
    }

    fn review_context(&self) -> Value {
        let mut context = json!({"agent": self.agent_name, "changes": self.turns.so_far()});
        let running = lock(&self.active).as_ref().map(|r| (r.tag.prompt_id.clone(), r.prompt.clone()));
        if let Some((prompt_id, prompt)) = running {
            context["promptId"] = json!(prompt_id);
            context["prompt"] = json!(&*prompt);
        }
        context
    }

    fn turn(&self) -> Option<String> {
        self.current_tag().and_then(|t| t.prompt_id.clone())
    }

    /// The same cancel every door's cancel is (`Session::cancel`), of the turn the breaker counted
    /// only: one that ended meanwhile is not followed into the next.
    fn stop_turn(&self, prompt_id: String) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if self.is_running(&prompt_id) {
                self.cancel().await;
            }
        })
    }

    fn announced_tool_call(&self, tool_call: &Value) -> Value {
        let announced = tool_call
            .get("toolCallId")
            .and_then(Value::as_str)
            .and_then(|id| lock(&self.tool_calls).0.get(id).cloned());
        let mut merged = announced.unwrap_or_else(|| json!({}));
        overlay(&mut merged, tool_call);
        merged
    }
}

/// `{stopReason, promptId, ...agent result fields}` for a blocking prompt's answer.
fn prompt_response(prompt_id: &str, result: Value) -> Value {
    let mut out = match result {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    out.entry("stopReason").or_insert_with(|| json!("end_turn"));
    out.insert("promptId".into(), json!(prompt_id));
    Value::Object(out)
}

/// The agent's result as an object (`{}` when it sent something else, `null` included).
fn result_object(raw: &RawValue) -> Value {
    let result: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
    if result.is_object() { result } else { json!({}) }
}

/// What the agent said about its models and modes: ACP's `SessionModelState`
/// (`{currentModelId, availableModels: [{modelId, name}]}`) and `SessionModeState`
/// (`{currentModeId, availableModes: [{id, name, description?}]}`), `null` when it said nothing.
#[derive(Debug)]
struct AgentState {
    models: Value,
    modes: Value,
}

impl AgentState {
    fn from_session_new(result: &Value) -> AgentState {
        let pick = |key: &str| result.get(key).cloned().unwrap_or(Value::Null);
        AgentState { models: pick("models"), modes: pick("modes") }
    }

    /// The ids of the modes the agent announced.
    fn mode_ids(&self) -> Vec<String> {
        let modes = self.modes.get("availableModes").and_then(Value::as_array);
        modes.into_iter().flatten().filter_map(|m| m.get("id")?.as_str().map(str::to_owned)).collect()
    }

    /// A mode the agent switched to by itself is one it offers, even if `session/new` did not list it.
    fn announce_mode(&mut self, mode: &str) {
        if self.mode_ids().iter().any(|m| m == mode) {
            return;
        }
        if !self.modes.is_object() {
            self.modes = json!({"availableModes": []});
        }
        match self.modes.get_mut("availableModes").and_then(Value::as_array_mut) {
            Some(list) => list.push(json!({"id": mode, "name": mode})),
            None => self.modes["availableModes"] = json!([{"id": mode, "name": mode}]),
        }
    }
}

/// Sets `state[field] = id` when `state` is an object: an agent that reported no models (or modes)
/// has no current one to follow.
fn set_current(state: &mut Value, field: &str, id: &str) {
    if let Value::Object(map) = state {
        map.insert(field.to_owned(), json!(id));
    }
}

/// Copies `from`'s non-null top-level fields onto `into` (ACP's tool-call update semantics).
/// Whether a `tool_call_update` ends its tool call (`completed` or `failed`) with output that reads
/// like a refused write: what a confined agent's blocked write looks like from here.
fn refused_write(update: &Value) -> bool {
    let ended = matches!(update.get("status").and_then(Value::as_str), Some("completed" | "failed"));
    ended
        && ["content", "rawOutput"]
            .iter()
            .filter_map(|k| update.get(*k))
            .any(|v| crate::agent::sandbox::looks_denied(&v.to_string()))
}

fn overlay(into: &mut Value, from: &Value) {
    if let (Value::Object(into), Value::Object(from)) = (into, from) {
        for (k, v) in from {
            if !v.is_null() {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use futures_util::StreamExt;
    use serde_json::json;
    use tokio::sync::Notify;

    use super::super::ids::Claims;
    use super::*;

    /// A voter's ballot on a loopback REST request.
    fn ballot<'a>(request_id: &'a str, client: &'a str, vote: &'a Vote) -> crate::permission::Ballot<'a> {
        crate::permission::Ballot {
            request_id,
            client: Some(client),
            voter: client,
            groups: &[],
            device_name: None,
            observer: false,
            local: true,
            via: crate::permission::Via::Rest,
            vote,
            review: None,
        }
    }
    use crate::acp::Client as _;
    use crate::config::Policy;
    use crate::permission::{Effect, ForbidReason, MediatorConfig, Vote, VoteError};

    /// `params` as the agent reader hands an update over.
    fn update(params: &Value) -> acp::Update {
        acp::Update::from_raw(RawValue::from_string(params.to_string()).expect("json")).expect("an object")
    }

    /// Bounds every wait in these tests; nothing here should take more than a moment.
    const WAIT: Duration = Duration::from_secs(5);

    /// An agent with nothing behind it: calls are recorded, and each `session/prompt` waits until
    /// the test answers it (`answer_prompt`), in the order the prompts arrived.
    #[derive(Default)]
    struct FakeAgent {
        calls: Mutex<Vec<(&'static str, Value)>>,
        prompts: Mutex<VecDeque<oneshot::Sender<Result<Value, CallError>>>>,
        /// Woken on every call or notification.
        seen: Notify,
        /// While set, a `session/prompt` is held before it is queued (recorded) until the test
        /// lets it through: the moment between a turn's check for a cancel and its prompt's line.
        held_prompt: Mutex<Option<oneshot::Receiver<()>>>,
    }

    impl acp::Agent for FakeAgent {
        fn queue_call(
            &self,
            method: &'static str,
            params: Value,
            _timeout: Option<Duration>,
        ) -> BoxFuture<'_, BoxFuture<'_, Result<Box<RawValue>, CallError>>> {
            let held = if method == method::SESSION_PROMPT { lock(&self.held_prompt).take() } else { None };
            Box::pin(self.queue(held, method, params))
        }

        fn notify(&self, method: &'static str, params: Value) -> BoxFuture<'_, ()> {
            lock(&self.calls).push((method, params));
            self.seen.notify_waiters();
            Box::pin(async {})
        }
    }

    impl FakeAgent {
        /// Records a call once `held` (if any) lets it through; resolves to the wait for its answer.
        async fn queue(
            &self,
            held: Option<oneshot::Receiver<()>>,
            method: &'static str,
            params: Value,
        ) -> BoxFuture<'_, Result<Box<RawValue>, CallError>> {
            if let Some(held) = held {
                let _ = held.await;
            }
            lock(&self.calls).push((method, params));
            let answer = if method == method::SESSION_PROMPT {
                let (tx, rx) = oneshot::channel();
                lock(&self.prompts).push_back(tx);
                Some(rx)
            } else {
                None
            };
            self.seen.notify_waiters();
            Box::pin(async move {
                let value = match answer {
                    Some(rx) => rx.await.unwrap_or_else(|_| Err(CallError::Exited("gone".into())))?,
                    None => json!({}),
                };
                Ok(RawValue::from_string(value.to_string()).expect("json"))
            })
        }

        fn methods(&self) -> Vec<&'static str> {
            lock(&self.calls).iter().map(|(m, _)| *m).collect()
        }

        fn count(&self, method: &str) -> usize {
            lock(&self.calls).iter().filter(|(m, _)| *m == method).count()
        }

        /// Waits until `method` has been called `n` times.
        async fn until(&self, method: &str, n: usize) {
            let wait = async {
                loop {
                    let seen = self.seen.notified();
                    if self.count(method) >= n {
                        return;
                    }
                    seen.await;
                }
            };
            tokio::time::timeout(WAIT, wait).await.unwrap_or_else(|_| panic!("no {n}× {method}"));
        }

        /// Answers the oldest unanswered prompt.
        fn answer_prompt(&self, result: Value) {
            let reply = lock(&self.prompts).pop_front().expect("a prompt waits for its answer");
            let _ = reply.send(Ok(result));
        }
    }

    /// A session on a fake agent, what it publishes, and whether it has left the daemon's tables.
    struct Fixture {
        session: Arc<Session>,
        agent: Arc<FakeAgent>,
        events: std::pin::Pin<Box<dyn futures_util::Stream<Item = (String, Value)> + Send>>,
        finished: Arc<std::sync::atomic::AtomicBool>,
    }

    fn fixture(prompt_cap: usize, policy: Policy) -> Fixture {
        fixture_with(prompt_cap, policy, json!({}))
    }

    /// A fixture whose agent answered `session/new` with `agent_result`.
    fn fixture_with(prompt_cap: usize, policy: Policy, agent_result: Value) -> Fixture {
        fixture_turns(prompt_cap, policy, agent_result, super::super::turns::Turns::new(None, Vec::new()))
    }

    /// A fixture whose change sets are `turns`'.
    fn fixture_turns(prompt_cap: usize, policy: Policy, agent_result: Value, turns: Turns) -> Fixture {
        let agent = Arc::new(FakeAgent::default());
        let metrics = Arc::new(Metrics::default());
        let workspace = PathBuf::from("/ws");
        let cfg = MediatorConfig {
            policy,
            quorum: None,
            timeout: None,
            home: None,
            reviewers: Vec::new(),
            breaker: Default::default(),
        };
        let limits = crate::daemon::bus::Limits {
            ring_events: 1024,
            ring_bytes: 1 << 20,
            lag_limit: Some(1024),
            max_subscribers: 4,
        };
        let bus = Bus::new("s1".into(), limits, Arc::default());
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = finished.clone();
        let session = Session::start(SessionInit {
            id: "s1".into(),
            workspace: workspace.clone(),
            agent_name: "demo".into(),
            agent: agent.clone(),
            bus: bus.clone(),
            mediator: Mediator::new(cfg, workspace, metrics.clone()),
            prompt_cap,
            call_timeout: WAIT,
            agent_result,
            notifier: Arc::new(Notifier::new(Vec::new(), None, metrics.clone())),
            metrics,
            confined: true,
            store: Arc::new(crate::store::MemoryStore::default()),
            on_finished: Box::new(move |_| done.store(true, Ordering::SeqCst)),
            claim: Arc::new(Claims::default()).claim("s1").expect("a fresh id"),
            turns,
        });
        let frames = bus.subscribe(None).expect("subscribe").into_body(CancellationToken::new());
        Fixture { session, agent, events: Box::pin(parse_frames(frames)), finished }
    }

    /// `(event type, data)` per SSE frame with data, as a client would read them.
    fn parse_frames(
        body: impl futures_util::Stream<Item = Result<bytes::Bytes, std::convert::Infallible>> + Send + 'static,
    ) -> impl futures_util::Stream<Item = (String, Value)> + Send {
        body.flat_map(|chunk| {
            let text = chunk.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
            let events: Vec<(String, Value)> = text
                .split("\n\n")
                .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data: ")))
                .filter_map(|data| serde_json::from_str::<Value>(data).ok())
                .map(|env| (env["type"].as_str().unwrap_or_default().to_owned(), env["data"].clone()))
                .collect();
            futures_util::stream::iter(events)
        })
    }

    impl Fixture {
        async fn next(&mut self) -> (String, Value) {
            tokio::time::timeout(WAIT, self.events.next())
                .await
                .expect("an event in time")
                .expect("open stream")
        }

        /// Events up to the first of type `kind` (inclusive).
        async fn until(&mut self, kind: &str) -> Vec<(String, Value)> {
            let mut seen = Vec::new();
            loop {
                let event = self.next().await;
                let done = event.0 == kind;
                seen.push(event);
                if done {
                    return seen;
                }
            }
        }

        /// Alice's prompt `text`, sent by a blocking caller (the task), once the agent has a prompt.
        async fn blocking_prompt(&self, text: &str) -> tokio::task::JoinHandle<Result<Value, SessionError>> {
            let session = self.session.clone();
            let prompt = text_prompt(text);
            let caller = tokio::spawn(async move { session.prompt(prompt).await });
            self.agent.until(method::SESSION_PROMPT, 1).await;
            caller
        }

        /// Alice's prompt running, the agent asks permission with one option, `ok`: the task
        /// waiting for the answer, and the request's id as published.
        async fn ask_during_a_prompt(&mut self) -> (tokio::task::JoinHandle<Value>, String) {
            self.session.enqueue(text_prompt("ask")).expect("queued");
            self.agent.until(method::SESSION_PROMPT, 1).await;
            let session = self.session.clone();
            let asked = json!({"sessionId": "s1", "toolCall": {"toolCallId": "c1"}, "options": [{"optionId": "ok", "kind": "allow_once"}]});
            let request = tokio::spawn(async move { session.request_permission(asked).await });
            let raised = self.until("permission_request").await;
            let request_id = raised.last().expect("request").1["requestId"].as_str().expect("id").to_owned();
            (request, request_id)
        }
    }

    /// A vote that allows, once.
    fn allow() -> Vote {
        crate::permission::Pick::Decision { effect: Effect::Allow, remember: crate::permission::Remember::No }
            .into()
    }

    fn text_prompt(text: &str) -> Prompt {
        let params = json!({"prompt": [{"type": "text", "text": text}]});
        let Value::Object(params) = params else { unreachable!("an object literal") };
        Prompt { params, originator: Some("alice".into()) }
    }

    fn kinds(events: &[(String, Value)]) -> Vec<&str> {
        events.iter().map(|(kind, _)| kind.as_str()).collect()
    }

    /// A cancel that comes while the turn takes its start snapshot (here: waits for it) reaches
    /// an agent that has no prompt yet, which ignores it; the turn ends `cancelled` without ever
    /// asking the agent.
    #[tokio::test]
    async fn a_cancel_before_the_prompt_reaches_the_agent_ends_the_turn_without_asking_it() {
        let engine = crate::changes::Changes::open(None, crate::changes::LIMITS).expect("a private store");
        let turns = Turns::new(Some(Arc::new(engine)), Vec::new());
        let snapshot_taken = turns.hold();
        let mut f = fixture_turns(5, Policy::FirstResponder, json!({}), turns);
        let id = f.session.enqueue(text_prompt("one")).expect("queued").prompt_id;
        let started = async {
            while !f.session.has_active_prompt() {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(WAIT, started).await.expect("the turn starts");
        f.session.cancel().await;
        drop(snapshot_taken);
        let events = f.until("turn_complete").await;
        let (_, done) = events.last().expect("turn_complete");
        assert_eq!((&done["promptId"], &done["stopReason"]), (&json!(id), &json!("cancelled")));
        assert_eq!(f.agent.count(method::SESSION_PROMPT), 0, "{:?}", f.agent.methods());
        assert!(!f.session.has_active_prompt());
    }

    /// A prompt accepted while the session was idle is its running turn from the acceptance on: a
    /// cancel that comes before the turn runner has even taken it (a busy machine) ends it
    /// `cancelled` without asking the agent, and the prompt queued behind it runs. A cancel that
    /// came before the acceptance is not this prompt's.
    #[tokio::test]
    async fn a_cancel_before_the_runner_takes_a_prompt_accepted_on_an_idle_session_ends_it() {
        let mut f = fixture(5, Policy::FirstResponder);
        f.session.cancel().await;
        let first = f.session.enqueue(text_prompt("one")).expect("queued").prompt_id;
        let second = f.session.enqueue(text_prompt("two")).expect("queued").prompt_id;
        // No await between the acceptance and the cancel has let the runner take the prompt.
        assert!(!f.session.has_active_prompt(), "the runner has not taken the prompt yet");
        f.session.cancel().await;
        let events = f.until("turn_complete").await;
        let (_, done) = events.last().expect("turn_complete");
        assert_eq!((&done["promptId"], &done["stopReason"]), (&json!(first), &json!("cancelled")));
        // The second prompt was queued behind the first: the cancel was not its.
        f.agent.until(method::SESSION_PROMPT, 1).await;
        f.agent.answer_prompt(json!({"stopReason": "end_turn"}));
        let events = f.until("turn_complete").await;
        let (_, done) = events.last().expect("turn_complete");
        assert_eq!((&done["promptId"], &done["stopReason"]), (&json!(second), &json!("end_turn")));
        assert_eq!(
            f.agent.methods(),
            [method::SESSION_CANCEL, method::SESSION_CANCEL, method::SESSION_PROMPT],
            "only the second prompt reached the agent"
        );
    }

    /// A cancel that comes after the turn's check for one but while its prompt is being queued
    /// may reach the agent first, which ignores it: the turn asks again once the prompt is queued,
    /// so the cancel follows the prompt and the turn ends. (Seen in CI: a `stall` prompt cancelled
    /// this way ran until the test gave up, and the prompt queued behind it never ran.)
    #[tokio::test]
    async fn a_cancel_while_the_prompt_is_being_queued_is_asked_again_after_it() {
        let mut f = fixture(5, Policy::FirstResponder);
        let (release, held) = oneshot::channel();
        *lock(&f.agent.held_prompt) = Some(held);
        let id = f.session.enqueue(text_prompt("stall")).expect("queued").prompt_id;
        // The runner took the gate when it queued the prompt, past its check for a cancel.
        let holding = async {
            while lock(&f.agent.held_prompt).is_some() {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(WAIT, holding).await.expect("the prompt is held on its way to the agent");
        f.session.cancel().await;
        let _ = release.send(());
        f.agent.until(method::SESSION_CANCEL, 2).await;
        assert_eq!(
            f.agent.methods(),
            [method::SESSION_CANCEL, method::SESSION_PROMPT, method::SESSION_CANCEL],
            "the first cancel went before the prompt; the second follows it"
        );
        // The agent honours the cancel that follows its prompt.
        f.agent.answer_prompt(json!({"stopReason": "cancelled"}));
        let events = f.until("turn_complete").await;
        let (_, done) = events.last().expect("turn_complete");
        assert_eq!((&done["promptId"], &done["stopReason"]), (&json!(id), &json!("cancelled")));
    }

    #[tokio::test]
    async fn prompts_run_one_at_a_time_in_the_order_they_were_queued() {
        let mut f = fixture(5, Policy::FirstResponder);
        let ids: Vec<String> = ["one", "two", "three"]
            .iter()
            .map(|t| f.session.enqueue(text_prompt(t)).expect("queued").prompt_id)
            .collect();
        // Each prompt is echoed as it is queued, so every client sees the queue.
        for text in ["one", "two", "three"] {
            let (kind, data) = f.next().await;
            assert_eq!((kind.as_str(), &data["update"]["content"]["text"]), ("session_update", &json!(text)));
        }
        for (i, id) in ids.iter().enumerate() {
            f.agent.until(method::SESSION_PROMPT, i + 1).await;
            // Only the running turn reached the agent; the rest wait their turn.
            assert_eq!(f.agent.count(method::SESSION_PROMPT), i + 1);
            assert_eq!(f.session.pending_prompt_count(), ids.len() - i);
            assert!(f.session.has_active_prompt());
            let text = &lock(&f.agent.calls)[i].1["prompt"][0]["text"].clone();
            assert_eq!(text, ["one", "two", "three"][i]);
            f.agent.answer_prompt(json!({"stopReason": "end_turn"}));
            let (kind, data) = f.next().await;
            assert_eq!((kind.as_str(), &data["promptId"]), ("turn_complete", &json!(id)));
        }
        assert_eq!(f.session.pending_prompt_count(), 0);
        assert!(!f.session.has_active_prompt());
        let first = &lock(&f.agent.calls)[0].1;
        assert_eq!(first["sessionId"], "s1", "the session's id is set on every prompt");
    }

    #[tokio::test]
    async fn the_queue_refuses_past_its_cap_and_counts_the_running_turn() {
        let f = fixture(2, Policy::FirstResponder);
        f.session.enqueue(text_prompt("running")).expect("first");
        f.agent.until(method::SESSION_PROMPT, 1).await;
        f.session.enqueue(text_prompt("queued")).expect("second");
        let refused = f.session.enqueue(text_prompt("one too many")).expect_err("full");
        assert_eq!(refused, SessionError::QueueFull { limit: 2, pending: 2 });
    }

    #[tokio::test]
    async fn a_blocking_prompt_gets_the_agent_result_with_its_prompt_id() {
        let mut f = fixture(5, Policy::FirstResponder);
        let caller = f.blocking_prompt("hello").await;
        f.agent.answer_prompt(json!({"stopReason": "max_tokens", "_meta": {"x": 1}}));
        let answer = caller.await.expect("task").expect("answered");
        assert_eq!(answer["stopReason"], "max_tokens");
        assert_eq!(answer["_meta"], json!({"x": 1}));
        let events = f.until("turn_complete").await;
        assert_eq!(kinds(&events), ["session_update", "turn_complete"], "the echo, then the turn");
        let data = &events[1].1;
        assert_eq!(data["promptId"], answer["promptId"]);
        assert_eq!(data["stopReason"], "max_tokens");
    }

    #[tokio::test]
    async fn a_blocking_caller_that_goes_away_cancels_its_turn() {
        let mut f = fixture(5, Policy::FirstResponder);
        let caller = f.blocking_prompt("long").await;
        caller.abort();
        f.agent.until(method::SESSION_CANCEL, 1).await;
        f.agent.answer_prompt(json!({"stopReason": "cancelled"}));
        let (kind, data) = f.until("turn_complete").await.pop().expect("the turn event");
        assert_eq!((kind.as_str(), &data["stopReason"]), ("turn_complete", &json!("cancelled")));
    }

    #[tokio::test]
    async fn closing_ends_the_turn_then_fails_the_queue_and_closes_last() {
        let mut f = fixture(5, Policy::FirstResponder);
        let running = f.session.enqueue(text_prompt("running")).expect("queued");
        let waiting = f.blocking_prompt("queued").await;
        f.session.end(EndReason::Closed { closed_by: Some("bob".into()) });
        // ACP's order: the agent is told to cancel, and answers the turn.
        f.agent.until(method::SESSION_CANCEL, 1).await;
        f.agent.answer_prompt(json!({"stopReason": "cancelled"}));
        let events = f.until("session_closed").await;
        assert_eq!(
            kinds(&events),
            ["session_update", "session_update", "turn_complete", "turn_error", "session_closed"],
            "both prompts were echoed when queued"
        );
        let events = &events[2..];
        assert_eq!(events[0].1["promptId"], json!(running.prompt_id));
        assert_eq!(events[1].1["code"], "session_closed");
        assert_eq!(events[2].1, json!({"sessionId": "s1", "reason": "closed_by_client", "closedBy": "bob"}));
        assert_eq!(
            waiting.await.expect("task"),
            Err(SessionError::NotFound { session_id: "s1".into() }),
            "a queued blocking caller learns the session is gone"
        );
        tokio::time::timeout(WAIT, f.session.finished()).await.expect("finished");
        assert!(f.finished.load(Ordering::SeqCst), "out of the daemon's tables");
        assert_eq!(
            f.agent.methods(),
            [method::SESSION_PROMPT, method::SESSION_CANCEL],
            "the queued prompt never ran"
        );
        assert_eq!(f.session.enqueue(text_prompt("late")).err(), Some(SessionError::not_found("s1")));
    }

    #[tokio::test]
    async fn the_agents_death_ends_the_session_with_its_signal() {
        let mut f = fixture(5, Policy::FirstResponder);
        f.session.agent_exited(ExitInfo { code: None, signal: Some(9) });
        let events = f.until("session_died").await;
        assert_eq!(
            events.last().map(|(_, data)| data.clone()),
            Some(json!({
                "sessionId": "s1", "reason": "agent_exited", "exitCode": null, "signal": 9, "signalCode": "SIGKILL",
            }))
        );
        assert!(f.agent.methods().is_empty(), "a dead agent is not told to cancel");
    }

    #[tokio::test]
    async fn a_prompt_is_echoed_block_by_block_before_its_turn_reaches_the_agent() {
        let mut f = fixture(5, Policy::FirstResponder);
        let blocks = json!([
            {"type": "text", "text": "look at this"},
            "not a block",
            {"type": "resource_link", "uri": "file:///ws/a.txt", "name": "a.txt"},
        ]);
        let Value::Object(params) = json!({"prompt": blocks}) else { unreachable!("an object literal") };
        f.session.enqueue(Prompt { params, originator: Some("alice".into()) }).expect("queued");
        for block in [&blocks[0], &blocks[2]] {
            let (kind, data) = f.next().await;
            assert_eq!(kind, "session_update");
            assert_eq!(data["sessionId"], "s1");
            assert_eq!(data["update"]["sessionUpdate"], "user_message_chunk");
            assert_eq!(&data["update"]["content"], block, "the block as sent");
            assert_eq!(data["update"]["_meta"]["source"], ECHO_SOURCE);
        }
        f.agent.until(method::SESSION_PROMPT, 1).await;
        assert_eq!(lock(&f.agent.calls)[0].1["prompt"], blocks, "the agent gets every block, echoed or not");
    }

    #[tokio::test]
    async fn a_refused_prompt_is_not_echoed() {
        let mut f = fixture(1, Policy::FirstResponder);
        f.session.enqueue(text_prompt("running")).expect("queued");
        f.agent.until(method::SESSION_PROMPT, 1).await;
        assert!(f.session.enqueue(text_prompt("refused")).is_err(), "the queue is full");
        f.session.end(EndReason::Closed { closed_by: None });
        assert!(f.session.enqueue(text_prompt("too late")).is_err(), "the session is ending");
        f.agent.until(method::SESSION_CANCEL, 1).await;
        f.agent.answer_prompt(json!({"stopReason": "cancelled"}));
        let echoed: Vec<Value> = f
            .until("session_closed")
            .await
            .into_iter()
            .filter(|(kind, _)| kind == "session_update")
            .map(|(_, data)| data["update"]["content"]["text"].clone())
            .collect();
        assert_eq!(echoed, [json!("running")]);
    }

    #[tokio::test]
    async fn set_mode_accepts_only_announced_modes_and_follows_the_agent() {
        let agent = json!({"modes": {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "plan", "name": "Plan"}]}});
        let mut f = fixture_with(5, Policy::FirstResponder, agent);
        assert_eq!(
            f.session.set_mode("yolo").await,
            Err(SessionError::InvalidMode {
                mode_id: "yolo".into(),
                available: vec!["ask".into(), "plan".into()]
            })
        );
        assert!(f.agent.methods().is_empty(), "an unknown mode never reaches the agent");
        assert_eq!(f.session.set_mode("plan").await, Ok(json!({})));
        assert_eq!(
            lock(&f.agent.calls)[0],
            (method::SESSION_SET_MODE, json!({"sessionId": "s1", "modeId": "plan"}))
        );
        let (kind, data) = f.next().await;
        assert_eq!(kind, "session_update");
        assert_eq!(data["update"]["sessionUpdate"], "current_mode_update");
        assert_eq!(data["update"]["currentModeId"], "plan");
        assert_eq!(f.session.modes()["currentModeId"], "plan");

        // The agent switches by itself, even to a mode it did not list: relayed, and followed.
        let params = json!({"sessionId": "s1", "update": {"sessionUpdate": "current_mode_update", "currentModeId": "auto"}});
        f.session.session_updates(&[update(&params)]);
        assert_eq!(f.next().await.1, params, "relayed byte for byte");
        assert_eq!(f.session.modes()["currentModeId"], "auto");
        assert_eq!(f.session.mode_ids(), ["ask", "plan", "auto"]);
    }

    #[tokio::test]
    async fn set_model_publishes_model_switched_after_the_agent_agrees() {
        let mut f = fixture(5, Policy::FirstResponder);
        assert_eq!(f.session.set_model("fast").await, Ok(json!({})));
        assert_eq!(lock(&f.agent.calls)[0].1, json!({"sessionId": "s1", "modelId": "fast"}));
        assert_eq!(f.next().await, ("model_switched".into(), json!({"sessionId": "s1", "modelId": "fast"})));
        assert!(f.session.models().is_null(), "an agent that reported no models has no current one");
    }

    /// Claude Code asks with a bare tool-call update (`{toolCallId, title, rawInput}`); `kind` and
    /// `locations` came earlier in `session/update`. The session remembers the announcements, so a
    /// rule matches on the merge.
    #[tokio::test]
    async fn rules_match_what_the_agent_announced_before_asking() {
        let mut f = fixture(5, Policy::FirstResponder);
        let announce = |update: Value| {
            f.session.session_updates(&[self::update(&json!({"sessionId": "s1", "update": update}))]);
        };
        announce(
            json!({"sessionUpdate": "tool_call", "toolCallId": "c9", "title": "Write", "status": "pending"}),
        );
        announce(json!({
            "sessionUpdate": "tool_call_update", "toolCallId": "c9", "kind": "edit",
            "locations": [{"path": "/ws/src/a.txt"}], "title": null,
        }));
        let rule = crate::permission::parse_rule(
            &json!({"effect": "allow", "kinds": ["edit"], "paths": ["src/**"]}),
            std::path::Path::new("/ws"),
            None,
            0,
        )
        .expect("rule");
        f.session.permissions().add_rule(rule).expect("added");
        let bare = json!({
            "sessionId": "s1",
            "toolCall": {"toolCallId": "c9", "title": "Write a.txt", "rawInput": {"content": "x"}},
            "options": [{"optionId": "ok", "kind": "allow_once"}, {"optionId": "no", "kind": "reject_once"}],
        });
        let answer = tokio::time::timeout(WAIT, f.session.request_permission(bare)).await.expect("answered");
        assert_eq!(answer, json!({"outcome": {"outcome": "selected", "optionId": "ok"}}));
        let events = f.until("permission_resolved").await;
        assert_eq!(
            kinds(&events),
            [
                "session_update",
                "session_update",
                "policy_updated",
                "permission_request",
                "permission_resolved"
            ]
        );
        // The announcements were published byte for byte, and the request as the agent sent it.
        assert_eq!(
            events[3].1["toolCall"],
            json!({"toolCallId": "c9", "title": "Write a.txt", "rawInput": {"content": "x"}})
        );
    }

    #[tokio::test]
    async fn cancel_tells_the_agent_before_it_cancels_pending_permissions() {
        let mut f = fixture(5, Policy::Designated);
        f.session.register("alice", Enrol::Voter);
        f.session.register("bob", Enrol::Voter);
        let (request, request_id) = f.ask_during_a_prompt().await;
        // Designated: the running prompt's originator decides; anyone else is refused.
        let vote = allow();
        let refused = f.session.permissions().vote(&ballot(&request_id, "bob", &vote)).map(|r| r.is_none());
        assert_eq!(refused, Err(VoteError::Forbidden(ForbidReason::DesignatedMismatch)));
        f.session.cancel().await;
        assert_eq!(f.agent.methods(), [method::SESSION_PROMPT, method::SESSION_CANCEL]);
        let answer = tokio::time::timeout(WAIT, request).await.expect("answered").expect("task");
        assert_eq!(answer, json!({"outcome": {"outcome": "cancelled"}}));
        let resolved = f.until("permission_resolved").await;
        assert_eq!(resolved.last().expect("resolved").1["resolvedBy"], "cancel");
        assert!(!f.session.is_ending(), "a cancel does not end the session");
    }

    /// Issue #27, finding 3: consensus counts the identities that may vote now. An observer that
    /// opened the stream (or sent a heartbeat) is a client, not a voter; a voter that leaves (a
    /// revoked device) takes its place in the quorum and its vote with it, so the one left decides.
    #[tokio::test]
    async fn consensus_counts_only_voters_and_a_voter_that_leaves_lets_the_rest_decide() {
        let mut f = fixture(5, Policy::Consensus);
        f.session.register("alice", Enrol::Voter);
        f.session.register("dev-observer", Enrol::Observer);
        f.session.register("dev-voter", Enrol::Voter);
        assert_eq!(f.session.voters(), ["alice", "dev-voter"]);
        assert!(!f.session.is_voter("dev-observer"));
        assert!(f.session.has_client("dev-observer"), "still a client of the session");
        let (request, request_id) = f.ask_during_a_prompt().await;
        let vote = allow();
        assert_eq!(
            f.session.permissions().vote(&ballot(&request_id, "alice", &vote)).map(|r| r.is_none()),
            Ok(true)
        );
        assert!(f.session.permissions().is_pending(&request_id), "one of two voters: partial");
        f.session.forget_voter("dev-voter");
        let answer = tokio::time::timeout(WAIT, request).await.expect("answered").expect("task");
        assert_eq!(answer, json!({"outcome": {"outcome": "selected", "optionId": "ok"}}));
        assert!(!f.session.has_client("dev-voter"));
        assert_eq!(f.session.voters(), ["alice"]);
    }
}

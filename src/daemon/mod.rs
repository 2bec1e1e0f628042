//! The daemon floor: the tables (live sessions; one process per workspace and configured agent, with
//! that pair's single-scope default session, concurrent creates coalesced), limits, the drain at
//! shutdown, and a typed [`Snapshot`] of it all.
//!
//! - this file: [`Daemon`], the tables and what crosses them (create, look up, drain, snapshot).
//! - `session`: [`Session`]: one session's clients, prompt FIFO, turn runner and ending.
//! - `bus`: per-session event ids, the replay ring, and the SSE streams reading it by cursor.
//! - `shell`: running a session shell command.
//! - `error`: [`CreateError`], [`SessionError`].
//!
//! Imports `permission`, `agent`, `acp` and the leaves; never `http`. Takes typed inputs and returns
//! its own errors: it knows nothing of HTTP.

mod bus;
mod error;
mod session;
mod shell;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub use self::bus::Subscription;
use self::bus::{Bus, BusStats};
pub use self::error::{CreateError, SessionError};
pub use self::session::{Accepted, EndReason, Prompt, Session};
use self::session::{SessionInit, TURN_CANCEL_GRACE};
pub use self::shell::ShellOutcome;
use crate::acp::method;
use crate::agent::AgentHandle;
use crate::config::{AgentSpec, Config, SessionScope};
use crate::exec::ProcessGroups;
use crate::metrics::{AgentProgram, Metrics, Snapshot};
use crate::notify::Notifier;
use crate::permission::{Mediator, MediatorConfig, VoteError};
use crate::sync::lock;

/// One configured agent as `GET /agents` shows it: never its arguments or environment.
#[derive(Debug, Clone)]
pub struct AgentState {
    pub name: String,
    pub default: bool,
    pub program: AgentProgram,
    /// The workspaces where a process of it runs now, sorted.
    pub workspaces: Vec<PathBuf>,
    /// Its latest `initialize` answer, once it has been started.
    pub initialize: Option<Arc<Value>>,
}

/// Whether `program` can be run now, and if not, why (checked at each call: installing the agent
/// shows at once).
fn program_state(program: &str) -> AgentProgram {
    let program = program.to_owned();
    match crate::agent::resolve_program(&program) {
        Ok(_) => AgentProgram { program, found: true, error: None },
        Err(e) => AgentProgram { program, found: false, error: Some(e.to_string()) },
    }
}

/// How long each agent gets to exit after its stdin is closed at shutdown
/// (`docs/protocol.md#10-shutdown`).
pub const AGENT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

type CreateFuture = Shared<BoxFuture<'static, Result<Arc<Session>, CreateError>>>;

enum DefaultSlot {
    Empty,
    Creating(CreateFuture),
    Ready(Arc<Session>),
}

/// Which slot: a workspace (canonical) and a configured agent's name.
type SlotKey = (PathBuf, String);

/// One configured agent in one workspace: its process, and its single-scope default session.
struct AgentSlot {
    agent: Option<AgentHandle>,
    default: DefaultSlot,
}

impl AgentSlot {
    fn empty() -> AgentSlot {
        AgentSlot { agent: None, default: DefaultSlot::Empty }
    }
}

pub struct Daemon {
    pub config: Arc<Config>,
    /// Await-free critical sections only; no two of these tables are ever locked at the same time.
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    slots: Mutex<HashMap<SlotKey, AgentSlot>>,
    /// Each agent's latest `initialize` answer, by agent name: kept after its process stops, so
    /// `GET /agents` can say what an agent is once it has been started.
    reported: Mutex<HashMap<String, Arc<Value>>>,
    /// Sessions being created, counted against `--max-sessions` with the live ones.
    creating: AtomicUsize,
    /// Fired by the first shutdown signal: creates are refused from then on.
    pub draining: CancellationToken,
    /// Fired to end every SSE stream.
    pub streams_end: CancellationToken,
    started: Instant,
    bus_stats: Arc<BusStats>,
    pub metrics: Arc<Metrics>,
    /// Notification targets and their action links; sessions hand it their events.
    pub notifier: Arc<Notifier>,
    /// Every live process group (agents, shell commands), for the second-signal kill.
    groups: ProcessGroups,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("sessions", &lock(&self.sessions).len())
            .field("draining", &self.draining.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// What `POST /session` asks for, checked for shape by the caller (the HTTP floor); the daemon
/// checks the rest (the directory, the limits).
#[derive(Debug, Clone, Default)]
pub struct CreateRequest {
    /// An absolute directory, or `None` for the primary workspace.
    pub cwd: Option<String>,
    /// `None`: the daemon's `--session-scope`.
    pub scope: Option<SessionScope>,
    /// A model to switch the new session to (`session/set_model`); the create fails if the agent
    /// refuses it.
    pub model: Option<String>,
    /// A configured agent's name; `None` for the default agent.
    pub agent: Option<String>,
    /// The caller's client id; `None` mints one.
    pub client_id: Option<String>,
}

/// A create's answer.
#[derive(Debug)]
pub struct Created {
    pub session: Arc<Session>,
    pub attached: bool,
    pub client_id: String,
}

/// Releases a `creating` reservation on every path.
struct Reservation<'a>(&'a AtomicUsize);

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Daemon {
    pub fn new(config: Config) -> Arc<Daemon> {
        let metrics = Arc::new(Metrics::default());
        let notifier =
            Arc::new(Notifier::new(config.notify.clone(), config.public_url.clone(), metrics.clone()));
        Arc::new(Daemon {
            config: Arc::new(config),
            sessions: Mutex::new(HashMap::new()),
            slots: Mutex::new(HashMap::new()),
            reported: Mutex::new(HashMap::new()),
            creating: AtomicUsize::new(0),
            draining: CancellationToken::new(),
            streams_end: CancellationToken::new(),
            started: Instant::now(),
            bus_stats: Arc::default(),
            metrics,
            notifier,
            groups: ProcessGroups::default(),
        })
    }

    pub fn session(&self, id: &str) -> Result<Arc<Session>, SessionError> {
        lock(&self.sessions).get(id).cloned().ok_or_else(|| SessionError::not_found(id))
    }

    /// The live session that knows permission request `request_id` (pending or recently decided),
    /// for the legacy vote route that names no session.
    pub fn session_with_request(&self, request_id: &str) -> Result<Arc<Session>, VoteError> {
        self.all_sessions().into_iter().find(|s| s.permissions().knows(request_id)).ok_or(VoteError::NotFound)
    }

    pub fn is_draining(&self) -> bool {
        self.draining.is_cancelled()
    }

    pub fn all_sessions(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<Arc<Session>> = lock(&self.sessions).values().cloned().collect();
        all.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        all
    }

    /// Removes a session from the tables at once (DELETE), so it is 404 from now on.
    pub fn forget(&self, session: &Session) {
        lock(&self.sessions).remove(&session.id);
        let mut slots = lock(&self.slots);
        if let Some(slot) = slots.get_mut(&(session.workspace.clone(), session.agent_name.clone()))
            && matches!(&slot.default, DefaultSlot::Ready(s) if s.id == session.id)
        {
            slot.default = DefaultSlot::Empty;
        }
    }

    /// The canonical workspace for a create's `cwd`
    /// (`docs/protocol.md#3-routes`: `invalid_cwd`, `workspace_mismatch`).
    fn resolve_cwd(&self, cwd: Option<&str>) -> Result<PathBuf, CreateError> {
        let Some(raw) = cwd else { return Ok(self.config.primary_workspace().to_path_buf()) };
        let path = Path::new(raw);
        if !path.is_absolute() {
            return Err(CreateError::InvalidCwd);
        }
        let canonical = std::fs::canonicalize(path).map_err(|_| CreateError::InvalidCwd)?;
        if !canonical.is_dir() {
            return Err(CreateError::InvalidCwd);
        }
        if self.config.any_workspace || self.config.workspaces.contains(&canonical) {
            Ok(canonical)
        } else {
            Err(CreateError::WorkspaceMismatch { cwd: canonical, accepted: self.config.workspaces.clone() })
        }
    }

    /// `POST /session`: a new session, or (single scope) the workspace's default one.
    pub async fn create(self: &Arc<Self>, request: CreateRequest) -> Result<Created, CreateError> {
        if self.is_draining() {
            return Err(CreateError::Draining);
        }
        let cwd = self.resolve_cwd(request.cwd.as_deref())?;
        let agent = match request.agent.as_deref() {
            None => self.config.default_agent(),
            Some(name) => self.config.agent(name).ok_or_else(|| CreateError::UnknownAgent {
                name: name.to_owned(),
                known: self.config.agent_names(),
            })?,
        };
        let key: SlotKey = (cwd, agent.name.clone());
        let scope = request.scope.unwrap_or(self.config.session_scope);
        let model = request.model;
        let (session, attached) = match scope {
            SessionScope::Thread => (self.clone().new_session(key, model).await?, false),
            SessionScope::Single => self.single(key, model).await?,
        };
        let client_id = match request.client_id {
            Some(id) => {
                session.touch_client(&id);
                id
            }
            None => {
                let id = format!("client-{}", uuid::Uuid::new_v4());
                session.touch_minted_client(&id);
                id
            }
        };
        Ok(Created { session, attached, client_id })
    }

    async fn single(
        self: &Arc<Self>,
        key: SlotKey,
        model: Option<String>,
    ) -> Result<(Arc<Session>, bool), CreateError> {
        enum Step {
            Attach(Arc<Session>),
            Wait(CreateFuture),
            Create(CreateFuture),
        }
        let step = {
            let mut slots = lock(&self.slots);
            let entry = slots.entry(key.clone()).or_insert_with(AgentSlot::empty);
            match &entry.default {
                DefaultSlot::Ready(s) if !s.is_ending() => Step::Attach(s.clone()),
                DefaultSlot::Creating(f) => Step::Wait(f.clone()),
                _ => {
                    // Spawned, so the create completes (and the slot is settled) even if every
                    // caller disconnects.
                    let daemon = self.clone();
                    let task = tokio::spawn(async move {
                        let result = daemon.clone().new_session(key.clone(), model).await;
                        daemon.settle_default(&key, &result);
                        result
                    });
                    let fut: CreateFuture =
                        async move { task.await.unwrap_or(Err(CreateError::Internal)) }.boxed().shared();
                    entry.default = DefaultSlot::Creating(fut.clone());
                    Step::Create(fut)
                }
            }
        };
        match step {
            Step::Attach(s) => Ok((s, true)),
            Step::Wait(f) => f.await.map(|s| (s, true)),
            Step::Create(f) => f.await.map(|s| (s, false)),
        }
    }

    fn settle_default(&self, key: &SlotKey, result: &Result<Arc<Session>, CreateError>) {
        let mut slots = lock(&self.slots);
        if let Some(entry) = slots.get_mut(key) {
            entry.default = match result {
                Ok(s) if !s.is_ending() => DefaultSlot::Ready(s.clone()),
                _ => DefaultSlot::Empty,
            };
        }
    }

    /// The running process of `spec` in `cwd`, started if there is none.
    fn agent_for(&self, cwd: &Path, spec: &AgentSpec) -> AgentHandle {
        let mut slots = lock(&self.slots);
        let entry = slots.entry((cwd.to_path_buf(), spec.name.clone())).or_insert_with(AgentSlot::empty);
        match &entry.agent {
            Some(agent) if agent.is_alive() => agent.clone(),
            _ => {
                let agent =
                    AgentHandle::start(spec, cwd.to_path_buf(), self.groups.clone(), self.metrics.clone());
                entry.agent = Some(agent.clone());
                agent
            }
        }
    }

    /// Starts the slot's agent if needed and opens a new ACP session on it.
    async fn new_session(
        self: Arc<Self>,
        key: SlotKey,
        model: Option<String>,
    ) -> Result<Arc<Session>, CreateError> {
        let (cwd, name) = key;
        // The create named a configured agent (checked by `create`), so this finds it.
        let spec = self.config.agent(&name).ok_or(CreateError::Internal)?;
        let cap = self.config.session_cap();
        let live = lock(&self.sessions).len();
        let reserved = self.creating.fetch_add(1, Ordering::AcqRel);
        let _reservation = Reservation(&self.creating);
        if live + reserved >= cap {
            return Err(CreateError::LimitReached { limit: cap });
        }
        let agent = self.agent_for(&cwd, spec);
        let timeout = spec.initialize_timeout;
        agent.ready().await.map_err(|e| CreateError::from_call(e, method::INITIALIZE, timeout))?;
        if let Some(answer) = agent.initialized() {
            lock(&self.reported).insert(name.clone(), answer);
        }
        let params = json!({"cwd": cwd.to_string_lossy(), "mcpServers": []});
        let result = match agent.call(method::SESSION_NEW, params, Some(timeout)).await {
            Ok(raw) => raw,
            Err(e) => {
                // A failed handshake leaves no agent behind unless other sessions use it.
                agent.unregister("", true).await;
                return Err(CreateError::from_call(e, method::SESSION_NEW, timeout));
            }
        };
        let result: Value = serde_json::from_str(result.get()).unwrap_or(Value::Null);
        let Some(session_id) = result.get("sessionId").and_then(Value::as_str).map(str::to_owned) else {
            agent.unregister("", true).await;
            return Err(CreateError::AgentStartFailed("session/new returned no sessionId".into()));
        };
        let limits = bus::Limits {
            ring_events: self.config.event_ring_size,
            ring_bytes: bus::RING_MAX_BYTES,
            lag_limit: self.config.subscriber_queue,
            max_subscribers: self.config.max_subscribers,
        };
        let bus = Bus::new(session_id.clone(), limits, self.bus_stats.clone());
        let mediator = Mediator::new(
            MediatorConfig {
                policy: self.config.permission_policy,
                quorum: self.config.consensus_quorum,
                timeout: self.config.permission_timeout,
            },
            cwd.clone(),
            self.metrics.clone(),
        );
        let weak: Weak<Daemon> = Arc::downgrade(&self);
        let ended_agent = agent.clone();
        let session = Session::start(SessionInit {
            id: session_id.clone(),
            workspace: cwd.clone(),
            agent_name: name.clone(),
            agent: Arc::new(agent.clone()),
            bus,
            mediator,
            prompt_cap: self.config.prompt_cap(),
            call_timeout: timeout,
            agent_result: result,
            metrics: self.metrics.clone(),
            notifier: self.notifier.clone(),
            on_finished: Box::new(move |id: &str| {
                if let Some(daemon) = weak.upgrade() {
                    let mut sessions = lock(&daemon.sessions);
                    if sessions.get(id).is_some_and(|s| s.is_ending()) {
                        sessions.remove(id);
                    }
                }
                let id = id.to_owned();
                tokio::spawn(async move { ended_agent.unregister(&id, false).await });
            }),
        });
        let client: Arc<dyn crate::acp::Client> = session.clone();
        agent.register(session_id.clone(), Arc::downgrade(&client)).await;
        // Session ids are the agents' own, and two agents (or one agent in two workspaces) may hand
        // out the same: the second would take over the first's routes. Checked and inserted under
        // one lock, so two creates cannot both pass.
        let taken = {
            let mut sessions = lock(&self.sessions);
            let taken = sessions.contains_key(&session_id);
            if !taken {
                sessions.insert(session_id.clone(), session.clone());
            }
            taken
        };
        if taken {
            session.end(EndReason::Closed { closed_by: None });
            return Err(CreateError::AgentStartFailed(format!(
                "the agent answered session/new with the id {session_id:?}, which another live session already has"
            )));
        }
        if let Some(model) = model {
            let set = agent
                .call(
                    method::SESSION_SET_MODEL,
                    json!({"sessionId": session_id, "modelId": model}),
                    Some(timeout),
                )
                .await;
            if let Err(e) = set {
                // No silent default model: the fresh session goes away and the create fails.
                self.forget(&session);
                session.end(EndReason::Closed { closed_by: None });
                return Err(CreateError::from_call(e, method::SESSION_SET_MODEL, timeout));
            }
        }
        tracing::info!(session_id = %session_id, agent = %name, workspace = %cwd.display(), "session created");
        Ok(session)
    }

    /// The daemon's figures now: what `/health?deep=1` answers and what `/metrics` reads.
    pub fn snapshot(&self) -> Snapshot {
        let sessions = self.all_sessions();
        let running: Vec<PathBuf> = lock(&self.slots)
            .iter()
            .filter(|(_, slot)| slot.agent.as_ref().is_some_and(AgentHandle::is_alive))
            .map(|((cwd, _), _)| cwd.clone())
            .collect();
        let agents = running.len();
        let workspaces = running.iter().collect::<std::collections::HashSet<_>>().len();
        let stats = &self.bus_stats;
        let agent = program_state(&self.config.default_agent().command.program);
        Snapshot {
            active_prompts: sessions.iter().filter(|s| s.has_active_prompt()).count(),
            agent,
            agents,
            pending_permissions: sessions.iter().map(|s| s.permissions().pending_count()).sum(),
            sessions: sessions.len(),
            status: "ok",
            subscribers: stats.subscribers.load(Ordering::Relaxed),
            uptime: self.started.elapsed(),
            workspaces,
            events_published: stats.published.load(Ordering::Relaxed),
            events_delivered: stats.delivered.load(Ordering::Relaxed),
            streams_evicted: stats.evicted.load(Ordering::Relaxed),
            slow_stream_warnings: stats.warnings.load(Ordering::Relaxed),
            ring_bytes: stats.ring_bytes.load(Ordering::Relaxed),
            notifications: self.notifier.counts(),
        }
    }

    /// Every configured agent, the default first: its program, where it runs now, and its latest
    /// `initialize` answer (`GET /agents`).
    pub fn agents(&self) -> Vec<AgentState> {
        let mut running: HashMap<String, Vec<PathBuf>> = HashMap::new();
        for ((cwd, name), slot) in lock(&self.slots).iter() {
            if slot.agent.as_ref().is_some_and(AgentHandle::is_alive) {
                running.entry(name.clone()).or_default().push(cwd.clone());
            }
        }
        let reported = lock(&self.reported).clone();
        self.config
            .agents
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let mut workspaces = running.remove(&spec.name).unwrap_or_default();
                workspaces.sort();
                AgentState {
                    name: spec.name.clone(),
                    default: i == 0,
                    program: program_state(&spec.command.program),
                    workspaces,
                    initialize: reported.get(&spec.name).cloned(),
                }
            })
            .collect()
    }

    /// Runs a session shell command for `client` (the HTTP floor checked it may), bounded by
    /// `--shell-timeout-ms` and cut short by the drain.
    pub async fn run_shell(&self, session: &Session, client: &str, command: &str) -> ShellOutcome {
        let limits = shell::ShellLimits {
            guard: &self.config.default_agent().command.guard,
            timeout: self.config.shell_timeout,
            stop: &self.draining,
            groups: &self.groups,
        };
        shell::run(session, client, command, &limits).await
    }

    /// The first signal: refuse creates, end sessions (cancelling their turns and permissions), let
    /// them publish their terminal events, end the streams left, close each agent's stdin, give the
    /// agents `grace` in parallel, then kill what is left.
    pub async fn drain(&self, grace: Duration) {
        self.draining.cancel();
        let sessions = self.all_sessions();
        for session in &sessions {
            session.end(EndReason::Shutdown);
        }
        // Ending is asynchronous: each session's turn runner publishes its turn event and then
        // `session_closed`, which ends that session's streams once they have drained. Cutting the
        // streams before that would lose those events, so wait (bounded by the grace the runner
        // gives a cancelled turn) and only then end whatever is still open.
        let _ = tokio::time::timeout(
            TURN_CANCEL_GRACE,
            futures_util::future::join_all(sessions.iter().map(|s| s.finished())),
        )
        .await;
        self.streams_end.cancel();
        let agents: Vec<AgentHandle> = lock(&self.slots).values().filter_map(|e| e.agent.clone()).collect();
        futures_util::future::join_all(agents.iter().map(|a| a.shutdown(grace))).await;
    }

    /// The second signal: kill every process group the daemon started (agents, shell commands) now.
    pub fn kill_all_processes(&self) {
        self.groups.kill_all();
    }

    /// Makes the daemon a child subreaper, so a process that escapes the group of a guard the daemon
    /// killed is handed to the daemon (which kills it) instead of to init.
    pub fn adopt_orphans(&self) -> std::io::Result<()> {
        self.groups.adopt_orphans()
    }
}

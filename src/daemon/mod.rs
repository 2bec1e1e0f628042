//! The daemon floor: the tables (live sessions; one process per workspace and configured agent, with
//! that pair's single-scope default session, concurrent creates coalesced), limits, the drain at
//! shutdown, and a typed [`Snapshot`] of it all.
//!
//! - this file: [`Daemon`], the tables and what crosses them (create, look up, drain, snapshot).
//! - `recorded`: the sessions the history holds and no daemon runs here: read back, listed,
//!   deleted, resumed (a claim, then the agent's `session/load`).
//! - `session`: [`Session`]: one session's clients, prompt FIFO, turn runner and ending.
//! - `bus`: per-session event ids, the replay ring, and the SSE streams reading it by cursor.
//! - `frames`: an event's parts read back from the frames the bus writes (for the ACP door).
//! - `shell`: running a session shell command.
//! - `error`: [`CreateError`], [`SessionError`].
//!
//! Imports `permission`, `agent`, `acp` and the leaves; never `http`. Takes typed inputs and returns
//! its own errors: it knows nothing of HTTP.

mod bus;
mod error;
mod frames;
mod history;
mod ids;
mod people;
mod recorded;
mod session;
mod shell;
mod turns;

use std::collections::{HashMap, HashSet};
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
pub use self::error::{CreateError, DeleteError, ResumeError, SessionError};
pub use self::frames::{EventFrame, Marked, Piece};
pub use self::history::HistoryStream;
use self::ids::{Claim, Claims, StoreClaim};
pub use self::session::{Accepted, EndReason, Enrol, Prompt, Session, valid_client_id};
use self::session::{SessionInit, TURN_CANCEL_GRACE};
pub use self::shell::ShellOutcome;
pub use self::turns::{Actor, RewindError, RewindOutcome};
use crate::acp::method;
use crate::agent::{AgentHandle, sandbox};
use crate::changes::{Changes, LIMITS};
use crate::config::{AgentSpec, Config, SessionScope};
use crate::devices::{Device, Devices, RevokeError, StreamLimits};
use crate::exec::ExitInfo;
use crate::exec::ProcessGroups;
use crate::metrics::{AgentProgram, Metrics, Snapshot};
use crate::notify::Notifier;
use crate::permission::{Judge, Mediator, MediatorConfig, VoteError, WorkspaceRules};
use crate::review::Reviewer;
use crate::store::{
    AuditQuery, Fleet, ReadError, SessionClaim, SessionRecord, SessionState, Store, StoreStats,
};
use crate::sync::lock;

/// The snapshot engine, its store in the state directory (a private temporary one without):
/// `None`, logged, when neither can be made.
fn open_changes(state_dir: Option<&Path>) -> Option<Arc<Changes>> {
    match Changes::open(state_dir, LIMITS) {
        Ok(c) => Some(Arc::new(c)),
        Err(e) => {
            tracing::error!(error = %e, "cannot open the snapshot store: no change sets, diffs or rewinds");
            if state_dir.is_some() {
                return open_changes(None);
            }
            None
        }
    }
}

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
    /// What confines it.
    pub sandbox: sandbox::Report,
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
/// Decisions `GET /session/:id/permissions?audit=1` lists: as many as the mediator's in-memory
/// ring keeps (`permission/mediator.rs`), so both modes answer alike.
pub const SESSION_DECISIONS: usize = 512;
/// Audit pages read at most for them: the session's pending requests (64 at most) are skipped,
/// so two pages always suffice; the bound only keeps the loop finite.
const DECISION_PAGES: usize = 4;
pub const AGENT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Recorded sessions of a workspace looked through for the base of its diff (the newest first).
const WORKSPACE_BASE_SESSIONS: usize = 64;

type CreateFuture = Shared<BoxFuture<'static, Result<Arc<Session>, CreateError>>>;
type ResumeFuture = Shared<BoxFuture<'static, Result<Arc<Session>, ResumeError>>>;

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
    /// The session ids in use (live, being started, or being ended): the one authority on whether
    /// an id is free, so two sessions never share one (`ids`).
    claims: Arc<Claims>,
    slots: Mutex<HashMap<SlotKey, AgentSlot>>,
    /// The resumes under way, by session id: a second resume of one waits for the first. An entry
    /// lives as long as its resume (so they are bounded by the requests in flight).
    resuming: Mutex<HashMap<String, ResumeFuture>>,
    /// Each agent's latest `initialize` answer, by agent name: kept after its process stops, so
    /// `GET /agents` can say what an agent is once it has been started.
    reported: Mutex<HashMap<String, Arc<Value>>>,
    /// Sessions being created, counted against `--max-sessions` with the live ones.
    creating: AtomicUsize,
    /// Fired by the first shutdown signal: creates are refused from then on.
    pub draining: CancellationToken,
    /// The sessions the drain ended, so a prompt that reaches one after it left the table is still
    /// told the daemon is draining rather than that the session does not exist. Filled once, by
    /// `drain`, with at most the live sessions (bounded by `--max-sessions`).
    drained: Mutex<HashSet<String>>,
    /// Fired to end every SSE stream.
    pub streams_end: CancellationToken,
    started: Instant,
    bus_stats: Arc<BusStats>,
    pub metrics: Arc<Metrics>,
    /// Notification targets and their action links; sessions hand it their events.
    pub notifier: Arc<Notifier>,
    /// Every live process group (agents, shell commands), for the second-signal kill.
    groups: ProcessGroups,
    /// The durable state (or memory, with `--ephemeral`).
    pub store: Arc<dyn Store>,
    /// In a fleet (`--store postgres://…`): this daemon's lease, the session directory, the
    /// fleet's pairing codes and notices, kept in the same database as `store`; `None` alone.
    /// An `Arc` of its own beside the store, not reached through it, so a blocking call moves it
    /// into `spawn_blocking` as the store's reads move the store.
    pub fleet: Option<Arc<dyn Fleet>>,
    /// Paired devices and pending pairing codes (loaded from the store at boot).
    pub devices: Arc<Devices>,
    /// Each workspace's rules, shared with its sessions' mediators; created on first use, loaded
    /// from the store at boot.
    workspace_rules: Mutex<HashMap<PathBuf, Arc<WorkspaceRules>>>,
    /// Rules read from the store at boot, by workspace, not yet turned into a table entry.
    stored_rules: Mutex<HashMap<PathBuf, Vec<Value>>>,
    /// The snapshot engine (`src/changes/`): turn change sets, the workspace diff, the file
    /// routes; `None` when its store could not be opened (logged at boot).
    pub changes: Option<Arc<Changes>>,
    /// The configured reviewers, each a program kept for the daemon's life (`crate::review`);
    /// every session's mediator asks those serving its workspace.
    reviewers: Vec<Arc<Reviewer>>,
    /// Sign-in with an OpenID provider (`--oidc-issuer`), set once the listening URL is known
    /// (`people`); empty without it.
    oidc: std::sync::OnceLock<Arc<crate::oidc::Oidc>>,
}

/// Each workspace's count of this daemon's own rule changes, before a read of the store
/// ([`Daemon::workspace_rules_mark`]).
#[derive(Debug, Default)]
pub struct RulesMark(HashMap<PathBuf, u64>);

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
    /// A daemon with an in-memory store (`--ephemeral`), alone.
    pub fn new(config: Config) -> Arc<Daemon> {
        Daemon::with_store(config, Arc::new(crate::store::MemoryStore::default()), None)
    }

    /// A daemon keeping its durable state in `store`, one of `fleet` when the store is shared
    /// (`store::open` gives both). Reads the workspace rules it holds.
    pub fn with_store(config: Config, store: Arc<dyn Store>, fleet: Option<Arc<dyn Fleet>>) -> Arc<Daemon> {
        let mut stored_rules: HashMap<PathBuf, Vec<Value>> = HashMap::new();
        match store.workspace_rules() {
            Ok(rules) => {
                for r in rules {
                    stored_rules.entry(PathBuf::from(r.workspace)).or_default().push(r.rule);
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot read the stored workspace rules"),
        }
        let metrics = Arc::new(Metrics::default());
        let notifier =
            Arc::new(Notifier::new(config.notify.clone(), config.public_url.clone(), metrics.clone()));
        let stream_limits = StreamLimits::leaving_a_quarter(config.connection_cap(), config.max_subscribers);
        let devices =
            Arc::new(Devices::new(store.clone(), fleet.clone(), config.pairing_code_ttl, stream_limits));
        let changes = open_changes(config.snapshot_dir.as_deref());
        let groups = ProcessGroups::default();
        // A model reviewer is never sent a value of any agent's configured environment.
        let agent_env: Vec<(String, String)> = config.agents.iter().flat_map(|a| a.env.clone()).collect();
        let reviewers = config
            .reviewers
            .iter()
            .map(|spec| {
                Reviewer::start(spec, config.primary_workspace(), &agent_env, groups.clone(), metrics.clone())
            })
            .collect();
        Arc::new(Daemon {
            reviewers,
            changes,
            devices,
            store,
            fleet,
            workspace_rules: Mutex::new(HashMap::new()),
            stored_rules: Mutex::new(stored_rules),
            config: Arc::new(config),
            sessions: Mutex::new(HashMap::new()),
            claims: Arc::default(),
            slots: Mutex::new(HashMap::new()),
            resuming: Mutex::default(),
            reported: Mutex::new(HashMap::new()),
            creating: AtomicUsize::new(0),
            draining: CancellationToken::new(),
            drained: Mutex::default(),
            streams_end: CancellationToken::new(),
            started: Instant::now(),
            bus_stats: Arc::default(),
            metrics,
            notifier,
            groups,
            oidc: std::sync::OnceLock::new(),
        })
    }

    pub fn session(&self, id: &str) -> Result<Arc<Session>, SessionError> {
        lock(&self.sessions).get(id).cloned().ok_or_else(|| SessionError::not_found(id))
    }

    /// The live session a prompt is for. A session the drain ended leaves the table once its turn
    /// has answered (or the grace ran out); a prompt for it after that is refused as draining, like
    /// one that arrived a moment earlier, not as unknown.
    pub fn session_for_prompt(&self, id: &str) -> Result<Arc<Session>, SessionError> {
        self.session(id)
            .map_err(|e| if lock(&self.drained).contains(id) { SessionError::Draining } else { e })
    }

    /// The live session that knows permission request `request_id` (pending or recently decided),
    /// for the legacy vote route that names no session.
    pub fn session_with_request(&self, request_id: &str) -> Result<Arc<Session>, VoteError> {
        self.all_sessions().into_iter().find(|s| s.permissions().knows(request_id)).ok_or(VoteError::NotFound)
    }

    pub fn is_draining(&self) -> bool {
        self.draining.is_cancelled()
    }

    /// The workspace and agent name of the agent whose guard is process `pid` (the daemon's
    /// child); `None` for any other child (a session shell command's guard).
    pub fn agent_of_process(&self, pid: u32) -> Option<(PathBuf, String)> {
        lock(&self.slots).iter().find_map(|((cwd, name), slot)| {
            slot.agent.as_ref().filter(|a| a.pid() == Some(pid)).map(|_| (cwd.clone(), name.clone()))
        })
    }

    pub fn all_sessions(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<Arc<Session>> = lock(&self.sessions).values().cloned().collect();
        all.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        all
    }

    /// A session's turn records (change sets and rewinds), oldest first: a live session's own, else
    /// what the history kept of it.
    pub async fn turn_records(&self, id: &str) -> Result<Vec<crate::store::TurnRecord>, SessionError> {
        if let Ok(s) = self.session(id) {
            return Ok(s.turn_records());
        }
        let store = self.store.clone();
        let sid = id.to_owned();
        let found = tokio::task::spawn_blocking(move || match store.session(&sid) {
            Ok(Some(_)) => store.turns(&sid).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        })
        .await;
        match found {
            Ok(Ok(Some(records))) => Ok(records),
            Ok(Ok(None)) => Err(SessionError::not_found(id)),
            Ok(Err(e)) => Err(SessionError::Store(e.to_string())),
            Err(e) => Err(SessionError::Store(e.to_string())),
        }
    }

    /// The snapshot a plain directory's workspace diff compares with: the start of the first turn
    /// of the newest session of `workspace` that ran one (live ones first, then the history's
    /// newest [`WORKSPACE_BASE_SESSIONS`]).
    pub async fn workspace_base(&self, workspace: &Path) -> Option<String> {
        let mut live: Vec<Arc<Session>> =
            self.all_sessions().into_iter().filter(|s| s.workspace == workspace).collect();
        live.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        if let Some(before) = live.iter().find_map(|s| s.turn_records().into_iter().find_map(|r| r.before)) {
            return Some(before);
        }
        let store = self.store.clone();
        let ws = workspace.to_string_lossy().into_owned();
        tokio::task::spawn_blocking(move || {
            let sessions = store.sessions(Some(&ws)).ok()?;
            sessions
                .iter()
                .rev()
                .take(WORKSPACE_BASE_SESSIONS)
                .find_map(|s| store.turns(&s.session_id).ok()?.into_iter().find_map(|t| t.before))
        })
        .await
        .ok()
        .flatten()
    }

    /// Removes the snapshots no turn record names any more (the records follow the sessions'
    /// retention), with what they alone held. Blocking reads run off the runtime.
    pub async fn collect_snapshots(&self) {
        let Some(engine) = self.changes.clone() else { return };
        let mut keep: std::collections::HashSet<String> =
            self.all_sessions().iter().flat_map(|s| s.snapshot_ids()).collect();
        let store = self.store.clone();
        let done = tokio::task::spawn_blocking(move || {
            keep.extend(store.snapshot_refs().map_err(|e| std::io::Error::other(e.to_string()))?);
            engine.collect(keep)
        })
        .await;
        match done {
            Ok(Ok(c)) if c.manifests + c.blobs > 0 => {
                tracing::info!(
                    snapshots = c.manifests,
                    contents = c.blobs,
                    "removed snapshots no record names"
                )
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "snapshot collection failed"),
            Err(e) => tracing::warn!(error = %e, "snapshot collection failed"),
        }
    }

    /// Revokes a paired device once the store has it (`Devices::revoke`), then takes it out of
    /// every live session's clients and voters: a revoked device never counts toward a quorum,
    /// and a pending request it was holding up is decided by the votes left.
    pub async fn revoke_device(&self, id: &str) -> Result<Device, RevokeError> {
        let device = self.devices.revoke(id).await?;
        self.forget_devices(std::slice::from_ref(&device));
        Ok(device)
    }

    /// Revokes every device of the person `subject` (`Devices::revoke_person`): they are no
    /// client and no voter of any session from now on, and every stream of theirs ends.
    pub async fn revoke_person(&self, subject: &str) -> Result<Vec<Device>, RevokeError> {
        let revoked = self.devices.revoke_person(subject).await;
        // Those revoked before a refusal are gone all the same.
        let gone = match &revoked {
            Ok(gone) => gone.clone(),
            Err(_) => Vec::new(),
        };
        self.forget_devices(&gone);
        revoked
    }

    /// Takes devices no longer paired out of every live session's clients and voters: a revoked
    /// device never counts toward a quorum, and a pending request it was holding up is decided by
    /// the votes left. A person's client id stays while another device of theirs is paired.
    pub fn forget_devices(&self, gone: &[Device]) {
        for device in gone {
            let client = device.client_id();
            if device.person.is_some() && self.devices.list().iter().any(|d| d.client_id() == client) {
                continue;
            }
            for session in self.all_sessions() {
                session.forget_voter(&client);
            }
        }
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

    /// The rules of `workspace` (canonical), shared by all its sessions.
    pub fn workspace_rules(self: &Arc<Self>, workspace: &Path) -> Arc<WorkspaceRules> {
        let mut table = lock(&self.workspace_rules);
        if let Some(rules) = table.get(workspace) {
            return rules.clone();
        }
        let stored = lock(&self.stored_rules).remove(workspace).unwrap_or_default();
        let weak = Arc::downgrade(self);
        let announce: crate::permission::Announce = Box::new(move |workspace: &Path, except: &str| {
            let Some(daemon) = weak.upgrade() else { return };
            let sessions: Vec<Arc<Session>> = daemon
                .all_sessions()
                .into_iter()
                .filter(|s| s.workspace == workspace && s.id != except)
                .collect();
            // Never inline: the caller may hold a session's mediator lock, and two sessions
            // announcing to each other at once would wait on each other's.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    for s in sessions {
                        s.permissions().workspace_rules_changed();
                    }
                });
            }
        });
        let rules =
            Arc::new(WorkspaceRules::new(workspace.to_path_buf(), &stored, self.store.clone(), announce));
        table.insert(workspace.to_path_buf(), rules.clone());
        rules
    }

    /// Where each workspace's rules stand before a read of the store
    /// ([`Daemon::workspace_rules_read`]).
    pub fn workspace_rules_mark(&self) -> RulesMark {
        RulesMark(lock(&self.workspace_rules).iter().map(|(w, r)| (w.clone(), r.changes())).collect())
    }

    /// Every workspace's rules as the store holds them now (another daemon of the fleet changed
    /// some), read after `mark` was taken: each workspace in use takes its own (none when the
    /// store has none), unless this daemon changed it since the mark (then the read may predate
    /// that change, and the change's own notice brings a read after it); the others wait for
    /// their first session. Only what the store holds is kept, so whatever made the read happen
    /// leaves no entry of its own.
    pub fn workspace_rules_read(&self, stored: Vec<crate::store::StoredRule>, mark: &RulesMark) {
        let mut by_workspace: HashMap<PathBuf, Vec<Value>> = HashMap::new();
        for r in stored {
            by_workspace.entry(PathBuf::from(r.workspace)).or_default().push(r.rule);
        }
        let in_use: Vec<(PathBuf, Arc<WorkspaceRules>)> =
            lock(&self.workspace_rules).iter().map(|(w, r)| (w.clone(), r.clone())).collect();
        for (workspace, rules) in &in_use {
            let seen = mark.0.get(workspace).copied().unwrap_or(0);
            rules.replace(&by_workspace.remove(workspace).unwrap_or_default(), seen);
        }
        // A workspace that came into use since `in_use` was taken found its rules in `stored_rules`
        // (the boot's, or an earlier read's) and keeps them until the next read.
        let table = lock(&self.workspace_rules);
        by_workspace.retain(|w, _| !table.contains_key(w));
        *lock(&self.stored_rules) = by_workspace;
    }

    /// The workspace a client names in a `/workspace/:cwd/...` route: canonical, and one the
    /// daemon accepts.
    pub fn workspace(&self, cwd: &str) -> Result<PathBuf, CreateError> {
        self.resolve_cwd(Some(cwd))
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
                session.register(&id, Enrol::Voter);
                id
            }
            None => {
                let id = format!("client-{}", uuid::Uuid::new_v4());
                session.register(&id, Enrol::Minted);
                id
            }
        };
        self.registered().await;
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
        let claim = match self.claim_new_id(&session_id).await {
            Ok(claim) => claim,
            Err(why) => {
                agent.unregister("", true).await;
                tracing::warn!(agent = %name, "{why}");
                return Err(CreateError::AgentStartFailed(why));
            }
        };
        let (bus, mediator) = self.session_parts(&session_id, &cwd, &name, 0, Vec::new(), false);
        let session = self
            .start_session(&session_id, &cwd, &name, &agent, bus, mediator, result, timeout, claim)
            .await?;
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
            session.note_model(&model);
        }
        tracing::info!(session_id = %session_id, agent = %name, workspace = %cwd.display(), "session created");
        Ok(session)
    }

    /// Claims the id an agent answered `session/new` with, for a new session: a plain id
    /// (`ids::valid_session_id`), in use by no session of this daemon (live, starting or ending),
    /// and recorded by none in the history (a new session's record would replace that one's).
    /// `Err` says why not, for the client and the log.
    async fn claim_new_id(&self, session_id: &str) -> Result<Claim, String> {
        let shown = || {
            let mut id: String = session_id.chars().take(ids::MAX_SESSION_ID_LEN + 1).collect();
            if id.len() < session_id.len() {
                id.push('…');
            }
            crate::text::escape(&id).into_owned()
        };
        if !ids::valid_session_id(session_id) {
            return Err(format!(
                "the agent answered session/new with the id \"{}\", which is not a session id mediatord accepts (1 to {} of A-Z a-z 0-9 . _ : - ~ + = @)",
                shown(),
                ids::MAX_SESSION_ID_LEN
            ));
        }
        let Some(claim) = self.claims.claim(session_id) else {
            return Err(format!(
                "the agent answered session/new with the id \"{}\", which another session of this daemon has",
                shown()
            ));
        };
        match self.recorded_session(session_id).await {
            Ok(None) => Ok(claim),
            Ok(Some(_)) => Err(format!(
                "the agent answered session/new with the id \"{}\", which a recorded session has (its history is kept; resume it with POST /session/{{id}}/resume)",
                shown()
            )),
            Err(e) => Err(format!("the history could not be read to check the id of the new session: {e}")),
        }
    }

    /// Starts a session on `agent` under its claimed id and enters it in the tables.
    #[expect(clippy::too_many_arguments, reason = "the parts of one session, assembled by its two callers")]
    async fn start_session(
        self: &Arc<Self>,
        session_id: &str,
        cwd: &Path,
        name: &str,
        agent: &AgentHandle,
        bus: Arc<Bus>,
        mediator: Mediator,
        result: Value,
        timeout: Duration,
        claim: Claim,
    ) -> Result<Arc<Session>, CreateError> {
        let weak: Weak<Daemon> = Arc::downgrade(self);
        let ended_agent = agent.clone();
        // The change sets the store kept of this session's earlier life (a resumed one).
        let store = self.store.clone();
        let sid = session_id.to_owned();
        let prior = tokio::task::spawn_blocking(move || store.turns(&sid)).await.ok().and_then(Result::ok);
        let engine = self.changes.clone().filter(|_| self.config.snapshots);
        let session = Session::start(SessionInit {
            turns: turns::Turns::new(engine, prior.unwrap_or_default()),
            id: session_id.to_owned(),
            workspace: cwd.to_path_buf(),
            agent_name: name.to_owned(),
            agent: Arc::new(agent.clone()),
            bus,
            mediator,
            prompt_cap: self.config.prompt_cap(),
            call_timeout: timeout,
            agent_result: result,
            metrics: self.metrics.clone(),
            confined: self.config.agent(name).is_some_and(|a| self.sandbox_report(a).kind == "landlock"),
            store: self.store.clone(),
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
            claim,
        });
        let client: Arc<dyn crate::acp::Client> = session.clone();
        agent.register(session_id.to_owned(), Arc::downgrade(&client)).await;
        // The id is claimed: no other session is in the table under it, nor can be.
        lock(&self.sessions).insert(session_id.to_owned(), session.clone());
        Ok(session)
    }

    /// This daemon's URL in its fleet, which the ids of what lives here name (`store::homed_id`);
    /// `None` alone.
    pub fn node_url(&self) -> Option<String> {
        self.fleet.as_ref().and_then(|fleet| fleet.node_url())
    }

    /// In a fleet, waits until what this daemon handed the store (a session just started, as its
    /// own) is committed, so that the id answered is in the directory the other daemons relay by
    /// before the caller can take it to one of them. A failed commit is not the create's failure:
    /// the session runs here, and is relayed to once a later commit records it.
    async fn registered(&self) {
        if self.fleet.is_some() {
            let _ = self.store.flush().await;
        }
    }

    /// A session's bus (recording into the store, its ids continuing after `after_id`, its ring
    /// starting with `recent`) and its mediator; the session is recorded as live.
    fn session_parts(
        self: &Arc<Self>,
        session_id: &str,
        cwd: &Path,
        agent: &str,
        after_id: u64,
        recent: Vec<bytes::Bytes>,
        resumed: bool,
    ) -> (Arc<Bus>, Mediator) {
        let limits = bus::Limits {
            ring_events: self.config.event_ring_size,
            ring_bytes: bus::RING_MAX_BYTES,
            lag_limit: self.config.subscriber_queue,
            max_subscribers: self.config.max_subscribers,
        };
        let history = self.store.durable().then(|| {
            let record = SessionRecord {
                session_id: session_id.to_owned(),
                workspace: cwd.to_string_lossy().into_owned(),
                agent: agent.to_owned(),
                created_at: crate::clock::now_ms(),
                ended_at: None,
                state: SessionState::Live,
                end_reason: None,
                last_event_id: after_id,
            };
            // Queued before the bus exists, so the writer knows the session before its first event.
            self.store.session_started(&record, after_id, resumed);
            bus::History { store: self.store.clone(), session_id: Arc::from(session_id) }
        });
        let bus = Bus::with_history(
            session_id.to_owned(),
            limits,
            self.bus_stats.clone(),
            history,
            after_id,
            recent,
        );
        let mediator = Mediator::with_store(
            MediatorConfig {
                policy: self.config.permission_policy,
                quorum: self.config.consensus_quorum,
                timeout: self.config.permission_timeout,
                // Joined before any session starts (`fleet::start`), so known here in a fleet.
                home: self.node_url(),
                reviewers: self
                    .reviewers
                    .iter()
                    .filter(|r| r.serves(cwd))
                    .map(|r| r.clone() as Arc<dyn Judge>)
                    .collect(),
                breaker: self.config.review_breaker.clone(),
            },
            cwd.to_path_buf(),
            self.metrics.clone(),
            self.store.clone(),
            self.workspace_rules(cwd),
        );
        (bus, mediator)
    }

    /// The store's figures (database size, events written and dropped, gaps).
    pub fn store_stats(&self) -> StoreStats {
        self.store.stats()
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
        let store = self.store.stats();
        Snapshot {
            active_prompts: sessions.iter().filter(|s| s.has_active_prompt()).count(),
            agent,
            agents,
            pending_permissions: sessions.iter().map(|s| s.permissions().pending_count()).sum(),
            sessions: sessions.len(),
            status: if store.lost_writes() { "degraded" } else { "ok" },
            store: crate::metrics::StoreFigures {
                durable: store.durable,
                db_bytes: store.db_bytes,
                events_written: store.events_written,
                events_dropped: store.events_dropped,
                gaps: store.gaps,
                writes_dropped: store.writes_dropped,
                writes_failed: store.writes_failed,
                commits_failed: store.commits_failed,
            },
            subscribers: stats.subscribers.load(Ordering::Relaxed),
            uptime: self.started.elapsed(),
            workspaces,
            events_published: stats.published.load(Ordering::Relaxed),
            events_delivered: stats.delivered.load(Ordering::Relaxed),
            streams_evicted: stats.evicted.load(Ordering::Relaxed),
            slow_stream_warnings: stats.warnings.load(Ordering::Relaxed),
            ring_bytes: stats.ring_bytes.load(Ordering::Relaxed),
            notifications: self.notifier.counts(),
            sandbox: {
                let r = self.sandbox_report(self.config.default_agent());
                crate::metrics::SandboxFigures {
                    kind: r.kind,
                    abi: r.abi,
                    writable: r.writable,
                    net: r.net,
                    denials: self.metrics.sandbox_denials(),
                }
            },
        }
    }

    /// What confines `agent` on this kernel (`/capabilities`, `/health?deep=1`, `GET /agents`).
    pub fn sandbox_report(&self, agent: &AgentSpec) -> sandbox::Report {
        sandbox::Report::new(&agent.sandbox, sandbox::support(&agent.command.guard))
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
                    sandbox: self.sandbox_report(spec),
                }
            })
            .collect()
    }

    /// Runs a session shell command for `client` (the HTTP floor checked it may), bounded by
    /// `--shell-timeout-ms` and cut short by the drain.
    pub async fn run_shell(&self, session: &Session, client: &str, command: &str) -> ShellOutcome {
        let agent = self.config.agent(&session.agent_name).unwrap_or_else(|| self.config.default_agent());
        let limits = shell::ShellLimits {
            guard: &self.config.default_agent().command.guard,
            timeout: self.config.shell_timeout,
            stop: &self.draining,
            groups: &self.groups,
            sandbox: &agent.sandbox,
        };
        let outcome = shell::run(session, client, command, &limits).await;
        if self.sandbox_report(agent).kind == "landlock"
            && outcome.exit_code != Some(0)
            && sandbox::looks_denied(&outcome.output)
        {
            self.metrics.sandbox_denial("shell");
        }
        outcome
    }

    /// The first signal: refuse creates, end sessions (cancelling their turns and permissions), let
    /// them publish their terminal events, end the streams left, close each agent's stdin, give the
    /// agents `grace` in parallel, then kill what is left.
    pub async fn drain(&self, grace: Duration) {
        self.draining.cancel();
        let sessions = self.all_sessions();
        lock(&self.drained).extend(sessions.iter().map(|s| s.id.clone()));
        for session in &sessions {
            session.end(EndReason::Shutdown);
        }
        // Every session's runner done (its turn event and `session_closed` published), bounded by
        // the grace the runner gives a cancelled turn.
        let runners_done = || {
            tokio::time::timeout(
                TURN_CANCEL_GRACE,
                futures_util::future::join_all(sessions.iter().map(|s| s.finished())),
            )
        };
        // Ending is asynchronous: each session's turn runner publishes its turn event and then
        // `session_closed`, which ends that session's streams once they have drained. Cutting the
        // streams before that would lose those events, so wait and only then end whatever is
        // still open.
        let _ = runners_done().await;
        self.streams_end.cancel();
        let agents: Vec<AgentHandle> = lock(&self.slots).values().filter_map(|e| e.agent.clone()).collect();
        futures_util::future::join_all(agents.iter().map(|a| a.shutdown(grace))).await;
        for reviewer in &self.reviewers {
            reviewer.stop();
        }
        // A turn its agent would not end (its runner's own grace can run out just after the wait
        // above) has now ended with the agent: wait again for each runner to publish that end, so
        // the store has it before the process exits. A turn_error published after the store
        // closed was lost, and an editor behind `connect` waited for it on the next daemon
        // forever.
        let _ = runners_done().await;
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::StoredRule;

    fn stored(workspace: &str, id: &str) -> StoredRule {
        StoredRule {
            workspace: workspace.into(),
            rule: json!({"ruleId": id, "effect": "allow", "kinds": ["read"], "createdAt": 1}),
        }
    }

    /// A read of every workspace's rules keeps exactly what the store holds: a workspace in use
    /// takes its own (none when the store has none), the others wait for their first session, and
    /// one the store does not name leaves no entry (so no number of reads grows the tables).
    #[tokio::test]
    async fn a_read_of_the_rules_keeps_what_the_store_holds_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let daemon = Daemon::new(Config::for_tests(dir.path()));
        let used = daemon.workspace_rules(Path::new("/used"));
        let mark = daemon.workspace_rules_mark();
        daemon.workspace_rules_read(vec![stored("/used", "u1"), stored("/later", "l1")], &mark);
        assert_eq!(used.list().len(), 1);
        assert_eq!(lock(&daemon.stored_rules).keys().collect::<Vec<_>>(), [Path::new("/later")]);
        let mark = daemon.workspace_rules_mark();
        daemon.workspace_rules_read(Vec::new(), &mark);
        assert!(used.list().is_empty(), "removed elsewhere");
        assert!(lock(&daemon.stored_rules).is_empty());
        assert_eq!(lock(&daemon.workspace_rules).len(), 1);
        // The workspace that waited takes what the last read found when it comes into use.
        let mark = daemon.workspace_rules_mark();
        daemon.workspace_rules_read(vec![stored("/later", "l2")], &mark);
        assert_eq!(daemon.workspace_rules(Path::new("/later")).list()[0]["ruleId"], "l2");
    }
}

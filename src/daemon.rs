//! The daemon's tables: live sessions, one agent per workspace, the single-scope default session of
//! each workspace (with concurrent creates coalesced), limits, and the drain at shutdown.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::bus::{Bus, BusStats};
use crate::config::{Config, SessionScope};
use crate::error::ApiError;
use crate::mediator::{Mediator, MediatorConfig};
use crate::session::{EndReason, Session, SessionInit};
use crate::workspace::{AgentHandle, CallError, PgidRegistry};

/// How long each agent gets to exit after its stdin is closed at shutdown (SPEC §10).
pub const AGENT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

type CreateFuture = Shared<BoxFuture<'static, Result<Arc<Session>, ApiError>>>;

enum DefaultSlot {
    Empty,
    Creating(CreateFuture),
    Ready(Arc<Session>),
}

struct WorkspaceEntry {
    agent: Option<AgentHandle>,
    default: DefaultSlot,
}

pub struct Daemon {
    pub config: Arc<Config>,
    /// Await-free critical sections only.
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    workspaces: Mutex<HashMap<PathBuf, WorkspaceEntry>>,
    /// Sessions being created, counted against `--max-sessions` with the live ones.
    creating: AtomicUsize,
    /// Fired by the first shutdown signal: creates are refused from then on.
    pub draining: CancellationToken,
    /// Fired to end every SSE stream.
    pub streams_end: CancellationToken,
    pub started: Instant,
    pub bus_stats: Arc<BusStats>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Every live agent's process group, for the second-signal kill.
    pub pgids: PgidRegistry,
}

/// A create's answer.
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

fn call_error_to_api(e: CallError, during_start: bool) -> ApiError {
    match e {
        CallError::Timeout => ApiError::InitTimeout,
        CallError::Rpc(e) if !during_start => ApiError::AgentError(e.detailed_message()),
        CallError::Rpc(e) => ApiError::AgentStartFailed(e.detailed_message()),
        CallError::Start(m) | CallError::Exited(m) => ApiError::AgentStartFailed(m),
        CallError::Backlog => ApiError::AgentStartFailed("the agent is not reading its input".into()),
    }
}

impl Daemon {
    pub fn new(config: Config) -> Arc<Daemon> {
        Arc::new(Daemon {
            config: Arc::new(config),
            sessions: Mutex::new(HashMap::new()),
            workspaces: Mutex::new(HashMap::new()),
            creating: AtomicUsize::new(0),
            draining: CancellationToken::new(),
            streams_end: CancellationToken::new(),
            started: Instant::now(),
            bus_stats: Arc::default(),
            metrics: Arc::default(),
            pgids: Arc::default(),
        })
    }

    pub fn session(&self, id: &str) -> Result<Arc<Session>, ApiError> {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.get(id).cloned().ok_or_else(|| ApiError::SessionNotFound { session_id: id.to_owned() })
    }

    pub fn all_sessions(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<Arc<Session>> =
            self.sessions.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        all.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        all
    }

    /// Removes a session from the tables at once (DELETE), so it is 404 from now on.
    pub fn forget(&self, session: &Session) {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(&session.id);
        let mut workspaces = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = workspaces.get_mut(&session.workspace)
            && matches!(&entry.default, DefaultSlot::Ready(s) if s.id == session.id)
        {
            entry.default = DefaultSlot::Empty;
        }
    }

    /// The canonical workspace for a create's `cwd` (SPEC §3: `invalid_cwd`, `workspace_mismatch`).
    pub fn resolve_cwd(&self, cwd: Option<&Value>) -> Result<PathBuf, ApiError> {
        let raw = match cwd {
            None | Some(Value::Null) => return Ok(self.config.primary_workspace().to_path_buf()),
            Some(Value::String(s)) if !s.is_empty() => s,
            Some(_) => return Err(ApiError::InvalidCwd),
        };
        let path = Path::new(raw);
        if !path.is_absolute() {
            return Err(ApiError::InvalidCwd);
        }
        let canonical = std::fs::canonicalize(path).map_err(|_| ApiError::InvalidCwd)?;
        if !canonical.is_dir() {
            return Err(ApiError::InvalidCwd);
        }
        if self.config.any_workspace || self.config.workspaces.contains(&canonical) {
            Ok(canonical)
        } else {
            Err(ApiError::WorkspaceMismatch)
        }
    }

    /// `POST /session`.
    pub async fn create(
        self: &Arc<Self>,
        body: &Value,
        client_id: Option<String>,
    ) -> Result<Created, ApiError> {
        if self.draining.is_cancelled() {
            return Err(ApiError::DaemonDraining);
        }
        let cwd = self.resolve_cwd(body.get("cwd"))?;
        let scope = match body.get("sessionScope") {
            None | Some(Value::Null) => self.config.session_scope,
            Some(Value::String(s)) => SessionScope::parse(s).ok_or(ApiError::InvalidSessionScope)?,
            Some(_) => return Err(ApiError::InvalidSessionScope),
        };
        let model = match body.get("modelServiceId") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(_) => return Err(ApiError::InvalidModelId),
        };
        let client_id = client_id.unwrap_or_else(|| format!("client-{}", uuid::Uuid::new_v4()));
        let (session, attached) = match scope {
            SessionScope::Thread => (self.clone().new_session(cwd, model).await?, false),
            SessionScope::Single => self.single(cwd, model).await?,
        };
        session.touch_client(&client_id);
        Ok(Created { session, attached, client_id })
    }

    async fn single(
        self: &Arc<Self>,
        cwd: PathBuf,
        model: Option<String>,
    ) -> Result<(Arc<Session>, bool), ApiError> {
        enum Step {
            Attach(Arc<Session>),
            Wait(CreateFuture),
            Create(CreateFuture),
        }
        let step = {
            let mut workspaces = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
            let entry = workspaces
                .entry(cwd.clone())
                .or_insert(WorkspaceEntry { agent: None, default: DefaultSlot::Empty });
            match &entry.default {
                DefaultSlot::Ready(s) if !s.is_ending() => Step::Attach(s.clone()),
                DefaultSlot::Creating(f) => Step::Wait(f.clone()),
                _ => {
                    // Spawned, so the create completes (and the slot is settled) even if every
                    // caller disconnects.
                    let daemon = self.clone();
                    let task = tokio::spawn(async move {
                        let result = daemon.clone().new_session(cwd.clone(), model).await;
                        daemon.settle_default(&cwd, &result);
                        result
                    });
                    let fut: CreateFuture =
                        async move { task.await.unwrap_or(Err(ApiError::Internal)) }.boxed().shared();
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

    fn settle_default(&self, cwd: &Path, result: &Result<Arc<Session>, ApiError>) {
        let mut workspaces = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = workspaces.get_mut(cwd) {
            entry.default = match result {
                Ok(s) if !s.is_ending() => DefaultSlot::Ready(s.clone()),
                _ => DefaultSlot::Empty,
            };
        }
    }

    fn agent_for(&self, cwd: &Path) -> AgentHandle {
        let mut workspaces = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        let entry = workspaces
            .entry(cwd.to_path_buf())
            .or_insert(WorkspaceEntry { agent: None, default: DefaultSlot::Empty });
        match &entry.agent {
            Some(agent) if agent.is_alive() => agent.clone(),
            _ => {
                let agent = AgentHandle::start(
                    self.config.agent.clone(),
                    cwd.to_path_buf(),
                    self.config.initialize_timeout,
                    self.pgids.clone(),
                    self.metrics.clone(),
                );
                entry.agent = Some(agent.clone());
                agent
            }
        }
    }

    /// Starts the agent if needed and opens a new ACP session on it.
    async fn new_session(
        self: Arc<Self>,
        cwd: PathBuf,
        model: Option<String>,
    ) -> Result<Arc<Session>, ApiError> {
        let cap = self.config.session_cap();
        let live = self.sessions.lock().unwrap_or_else(|p| p.into_inner()).len();
        let reserved = self.creating.fetch_add(1, Ordering::AcqRel);
        let _reservation = Reservation(&self.creating);
        if live + reserved >= cap {
            return Err(ApiError::SessionLimitExceeded { limit: cap });
        }
        let agent = self.agent_for(&cwd);
        agent.ready().await.map_err(|e| call_error_to_api(e, true))?;
        let params = json!({"cwd": cwd.to_string_lossy(), "mcpServers": []});
        let result = match agent.call("session/new", params, Some(self.config.initialize_timeout)).await {
            Ok(raw) => raw,
            Err(e) => {
                // A failed handshake leaves no agent behind unless other sessions use it.
                agent.unregister("", true).await;
                return Err(call_error_to_api(e, true));
            }
        };
        let result: Value = serde_json::from_str(result.get()).unwrap_or(Value::Null);
        let Some(session_id) = result.get("sessionId").and_then(Value::as_str).map(str::to_owned) else {
            agent.unregister("", true).await;
            return Err(ApiError::AgentStartFailed("session/new returned no sessionId".into()));
        };
        let bus = Bus::new(
            session_id.clone(),
            self.config.event_ring_size,
            self.config.subscriber_queue,
            self.config.max_subscribers,
            self.bus_stats.clone(),
        );
        let mediator = Mediator::new(
            MediatorConfig {
                policy: self.config.permission_policy,
                quorum: self.config.consensus_quorum,
                timeout: self.config.permission_timeout,
            },
            cwd.clone(),
        );
        let weak: Weak<Daemon> = Arc::downgrade(&self);
        let ended_agent = agent.clone();
        let session = Session::start(SessionInit {
            id: session_id.clone(),
            workspace: cwd.clone(),
            agent: agent.clone(),
            bus,
            mediator,
            prompt_cap: self.config.prompt_cap(),
            agent_result: result,
            metrics: self.metrics.clone(),
            on_finished: Box::new(move |id: &str| {
                if let Some(daemon) = weak.upgrade() {
                    let mut sessions = daemon.sessions.lock().unwrap_or_else(|p| p.into_inner());
                    if sessions.get(id).is_some_and(|s| s.is_ending()) {
                        sessions.remove(id);
                    }
                }
                let id = id.to_owned();
                tokio::spawn(async move { ended_agent.unregister(&id, false).await });
            }),
        });
        agent.register(session.clone()).await;
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).insert(session_id.clone(), session.clone());
        if let Some(model) = model {
            let set = agent
                .call(
                    "session/set_model",
                    json!({"sessionId": session_id, "modelId": model}),
                    Some(self.config.initialize_timeout),
                )
                .await;
            if let Err(e) = set {
                // No silent default model: the fresh session goes away and the create fails.
                self.forget(&session);
                session.end(EndReason::Closed { closed_by: None });
                return Err(call_error_to_api(e, false));
            }
        }
        tracing::info!(session_id = %session_id, workspace = %cwd.display(), "session created");
        Ok(session)
    }

    /// `/health?deep=1` figures.
    pub fn deep_health(&self) -> Value {
        let sessions = self.all_sessions();
        let (agents, workspaces) = {
            let ws = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
            let agents = ws.values().filter(|e| e.agent.as_ref().is_some_and(AgentHandle::is_alive)).count();
            (agents, agents)
        };
        json!({
            "status": "ok",
            "sessions": sessions.len(),
            "workspaces": workspaces,
            "agents": agents,
            "pendingPermissions": sessions.iter().map(|s| s.mediator.pending_count()).sum::<usize>(),
            "activePrompts": sessions.iter().filter(|s| s.has_active_prompt()).count(),
            "subscribers": self.bus_stats.subscribers.load(Ordering::Relaxed),
            "uptimeMs": self.started.elapsed().as_millis() as u64,
        })
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
            crate::session::TURN_CANCEL_GRACE,
            futures_util::future::join_all(sessions.iter().map(|s| s.finished())),
        )
        .await;
        self.streams_end.cancel();
        let agents: Vec<AgentHandle> = {
            let ws = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
            ws.values().filter_map(|e| e.agent.clone()).collect()
        };
        futures_util::future::join_all(agents.iter().map(|a| a.shutdown(grace))).await;
    }

    /// The second signal: kill every agent group now.
    pub fn kill_all_agents(&self) {
        let pgids: Vec<i32> = self.pgids.lock().unwrap_or_else(|p| p.into_inner()).iter().copied().collect();
        for pgid in pgids {
            crate::agent_process::kill_group_id(pgid);
        }
    }
}

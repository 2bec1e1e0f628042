//! The sessions the history holds that this daemon does not run (dormant, closed, or live on
//! another node of a fleet): read back, listed, deleted, and resumed here (a claim on the record,
//! then the agent's `session/load`, the bus continuing the recorded ids).

use super::*;

impl Daemon {
    /// A session that is not live (dormant or closed), as the history knows it.
    pub async fn recorded_session(&self, id: &str) -> Result<Option<SessionRecord>, ResumeError> {
        // What this daemon handed the writer (a close a moment ago, its last events) is read back.
        let _ = self.store.flush().await;
        let store = self.store.clone();
        let id = id.to_owned();
        tokio::task::spawn_blocking(move || store.session(&id))
            .await
            .map_err(|e| ResumeError::Store(e.to_string()))?
            .map_err(|e| ResumeError::Store(e.to_string()))
    }

    /// A session's newest decided permission requests from the audit trail, oldest first, at most
    /// [`SESSION_DECISIONS`]: what `GET /session/:id/permissions?audit=1` lists, across restarts.
    /// `None` when nothing outlives the process (`--ephemeral`: the mediator's ring answers).
    pub async fn recorded_decisions(&self, id: &str) -> Result<Option<Vec<Value>>, ReadError> {
        if !self.store.durable() {
            return Ok(None);
        }
        // A decision is listed as soon as it is made, as the mediator's ring lists it: what was
        // handed to the writer before this call is committed first.
        let _ = self.store.flush().await;
        let store = self.store.clone();
        let session_id = id.to_owned();
        let read = tokio::task::spawn_blocking(move || {
            let mut query = AuditQuery {
                session_id: Some(session_id),
                limit: SESSION_DECISIONS,
                ..AuditQuery::default()
            };
            let mut decided = Vec::new();
            // Newest first; the session's pending requests (a bounded few) are skipped.
            for _ in 0..DECISION_PAGES {
                let page = store.query_audit(&query)?;
                decided.extend(page.entries.into_iter().filter(|e| e["status"] != "pending"));
                match page.next_cursor {
                    Some(cursor) if decided.len() < SESSION_DECISIONS => query.cursor = Some(cursor),
                    _ => break,
                }
            }
            decided.truncate(SESSION_DECISIONS);
            decided.reverse();
            Ok(decided)
        })
        .await;
        read.map_err(|e| ReadError(e.to_string()))?.map(Some)
    }

    /// The events of a session that is not live, replayed from the history after `last_event_id`.
    pub async fn history(&self, id: &str, last_event_id: Option<u64>) -> Result<HistoryStream, SessionError> {
        match self.recorded_session(id).await {
            Ok(Some(record)) => Ok(history::replay(self.store.clone(), record, last_event_id)),
            _ => Err(SessionError::not_found(id)),
        }
    }

    /// The sessions of `workspace` the history holds (ended ones included), oldest first.
    pub async fn recorded_sessions(&self, workspace: &Path) -> Vec<SessionRecord> {
        let _ = self.store.flush().await;
        let store = self.store.clone();
        let workspace = workspace.to_string_lossy().into_owned();
        match tokio::task::spawn_blocking(move || store.sessions(Some(&workspace))).await {
            Ok(Ok(records)) => records,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "cannot list the recorded sessions");
                Vec::new()
            }
            Err(_) => Vec::new(),
        }
    }

    /// The other daemon of the fleet whose agent holds live session `id` under a valid lease, if
    /// one does (`docs/protocol.md#173-any-daemon-answers-any-route`); always `None` alone.
    pub async fn held_elsewhere(&self, id: &str) -> Result<Option<String>, ReadError> {
        let Some(fleet) = self.fleet.clone() else { return Ok(None) };
        let id = id.to_owned();
        tokio::task::spawn_blocking(move || fleet.owner(&id)).await.map_err(|e| ReadError(e.to_string()))?
    }

    /// Deletes recorded session `id` and its history (ACP `session/delete`): the record it was,
    /// or `None` when the history holds no such session (deleting it again succeeds, as the RFD
    /// asks). A live session is refused, and so is one being resumed or ended here (its id is
    /// claimed while the deletion runs, so no resume starts an agent on a session half deleted)
    /// or held by another daemon of the fleet.
    pub async fn delete_recorded(&self, id: &str) -> Result<Option<SessionRecord>, DeleteError> {
        let live = || DeleteError::Live { session_id: id.to_owned() };
        if self.session(id).is_ok() {
            return Err(live());
        }
        let Some(_claim) = self.claims.claim(id) else { return Err(live()) };
        match self.held_elsewhere(id).await {
            Ok(Some(node_url)) => {
                return Err(DeleteError::HeldElsewhere { session_id: id.to_owned(), node_url });
            }
            Ok(None) => {}
            Err(e) => return Err(DeleteError::Read(e.to_string())),
        }
        let record = match self.recorded_session(id).await {
            Ok(Some(record)) => record,
            Ok(None) => return Ok(None),
            Err(e) => return Err(DeleteError::Read(e.to_string())),
        };
        if record.state == SessionState::Live {
            // Live in the history but not here: a daemon that stopped without saying so (its
            // lease gone); the history is not ours to drop while it may come back. Refused.
            return Err(live());
        }
        self.store.delete_session(id).await.map_err(DeleteError::Write)?;
        Ok(Some(record))
    }

    /// `POST /session/:id/resume`: brings a dormant (or closed) session back on a fresh agent with
    /// ACP `session/load`, under the same id, its event ids continuing. A live session is returned
    /// as it is (`false`). In a fleet the session is claimed in the store first, atomically
    /// (`Fleet::claim_session`): one another daemon holds is refused with that daemon's URL, and of
    /// two daemons resuming it at once only one starts an agent, since two agents on one session
    /// would each answer its prompts (a split brain).
    ///
    /// Concurrent resumes of one session on this daemon wait for the first (as single-scope
    /// creates do), which runs as a task of its own: a client that goes away never leaves a
    /// resume, or its claim, half done.
    pub async fn resume(self: &Arc<Self>, id: &str) -> Result<(Arc<Session>, bool), ResumeError> {
        if let Ok(s) = self.session(id) {
            return Ok((s, false));
        }
        if self.is_draining() {
            return Err(CreateError::Draining.into());
        }
        let (resume, first) = {
            let mut resuming = lock(&self.resuming);
            match resuming.get(id) {
                Some(resume) => (resume.clone(), false),
                None => {
                    let (daemon, sid) = (self.clone(), id.to_owned());
                    let task = tokio::spawn(async move {
                        let result = daemon.resume_here(&sid).await;
                        lock(&daemon.resuming).remove(&sid);
                        result
                    });
                    let resume: ResumeFuture =
                        async move { task.await.unwrap_or(Err(CreateError::Internal.into())) }
                            .boxed()
                            .shared();
                    resuming.insert(id.to_owned(), resume.clone());
                    (resume, true)
                }
            }
        };
        resume.await.map(|s| (s, first))
    }

    /// [`Daemon::resume`]'s work: the id claimed here, the session claimed in the store, an agent
    /// started and the session loaded on it; the store's claim released if that fails.
    async fn resume_here(self: &Arc<Self>, id: &str) -> Result<Arc<Session>, ResumeError> {
        let Some(claim) = self.claims.claim(id) else {
            // Resumed a moment ago, or its previous life is still ending.
            if let Ok(s) = self.session(id) {
                return Ok(s);
            }
            return Err(CreateError::AgentStartFailed(format!(
                "session {id} is being started or ended by another request; try again"
            ))
            .into());
        };
        let held = self.claim_recorded(id).await?;
        match self.load(id, held.record(), claim).await {
            Ok(session) => {
                let after = held.record().last_event_id;
                held.keep();
                tracing::info!(session_id = %id, agent = %session.agent_name, workspace = %session.workspace.display(), after, "session resumed");
                self.registered().await;
                Ok(session)
            }
            Err(e) => {
                held.release().await;
                Err(e)
            }
        }
    }

    /// Claims recorded session `id` in the store for this daemon (see [`Daemon::resume`]).
    async fn claim_recorded(&self, id: &str) -> Result<StoreClaim, ResumeError> {
        // What this daemon handed the writer (a close a moment ago, its last events) is read back.
        let _ = self.store.flush().await;
        let (store, fleet) = (self.store.clone(), self.fleet.clone());
        let sid = id.to_owned();
        // The guard is made where the claim is, so a claim whose caller went away meanwhile is
        // released by the guard's drop, never left behind.
        let claimed = tokio::task::spawn_blocking(move || {
            let claim = match &fleet {
                Some(fleet) => fleet.claim_session(&sid),
                // Alone, nobody races for it: the daemon's own id claim (`ids.rs`) is the whole
                // claim, and the store's record is only read.
                None => store.session(&sid).map(|found| match found {
                    Some(record) => SessionClaim::Claimed(record),
                    None => SessionClaim::Unknown,
                }),
            };
            claim.map(|claim| match claim {
                SessionClaim::Claimed(record) => Ok(StoreClaim::new(fleet.clone(), record)),
                SessionClaim::HeldBy(node_url) => {
                    Err(ResumeError::HeldElsewhere { session_id: sid, node_url })
                }
                SessionClaim::Unknown => Err(ResumeError::NotFound { session_id: sid }),
            })
        })
        .await;
        claimed
            .map_err(|e| ResumeError::Store(e.to_string()))?
            .map_err(|e| ResumeError::Store(e.to_string()))?
    }

    /// Starts an agent on claimed session `id` (recorded as `record`) and loads it.
    async fn load(
        self: &Arc<Self>,
        id: &str,
        record: &SessionRecord,
        claim: Claim,
    ) -> Result<Arc<Session>, ResumeError> {
        let cwd = self.resolve_cwd(Some(&record.workspace))?;
        let spec = self.config.agent(&record.agent).ok_or_else(|| CreateError::UnknownAgent {
            name: record.agent.clone(),
            known: self.config.agent_names(),
        })?;
        let name = spec.name.clone();
        let cap = self.config.session_cap();
        let live = lock(&self.sessions).len();
        let reserved = self.creating.fetch_add(1, Ordering::AcqRel);
        let _reservation = Reservation(&self.creating);
        if live + reserved >= cap {
            return Err(CreateError::LimitReached { limit: cap }.into());
        }
        let agent = self.agent_for(&cwd, spec);
        let timeout = spec.initialize_timeout;
        agent.ready().await.map_err(|e| CreateError::from_call(e, method::INITIALIZE, timeout))?;
        let loads = agent.initialized().is_some_and(|init| {
            init.pointer("/agentCapabilities/loadSession").and_then(Value::as_bool) == Some(true)
        });
        if !loads {
            agent.unregister("", true).await;
            return Err(ResumeError::Unsupported { agent: name });
        }
        // The agent replays the conversation while it loads; the history has it already, so what
        // it replays is dropped (a client that joins gets the recorded events, ids unchanged).
        let discard: Arc<dyn crate::acp::Client> = Arc::new(Discard);
        agent.register(id.to_owned(), Arc::downgrade(&discard)).await;
        let params = json!({"sessionId": id, "cwd": cwd.to_string_lossy(), "mcpServers": []});
        let result = match agent.call(method::SESSION_LOAD, params, Some(timeout)).await {
            Ok(raw) => serde_json::from_str::<Value>(raw.get()).unwrap_or(Value::Null),
            Err(e) => {
                agent.unregister(id, true).await;
                return Err(CreateError::from_call(e, method::SESSION_LOAD, timeout).into());
            }
        };
        let after = record.last_event_id;
        let recent = self.recent_frames(id, after).await;
        // From here on the session's own records (started now, ended when it ends) are its row's.
        let (bus, mediator) = self.session_parts(id, &cwd, &name, after, recent, true);
        let result = if result.is_object() { result } else { json!({}) };
        let session =
            self.start_session(id, &cwd, &name, &agent, bus, mediator, result, timeout, claim).await?;
        drop(discard);
        Ok(session)
    }

    /// The newest recorded frames of a session, consecutive and ending at `last_id` (at most a
    /// ring's worth), to seed a resumed session's ring.
    async fn recent_frames(&self, id: &str, last_id: u64) -> Vec<bytes::Bytes> {
        let keep = self.config.event_ring_size as u64;
        let store = self.store.clone();
        let sid = id.to_owned();
        let items = tokio::task::spawn_blocking(move || {
            store.events(&sid, last_id.saturating_sub(keep), keep as usize)
        })
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
        let mut frames = Vec::new();
        let mut expect = None;
        for item in items {
            match item {
                crate::store::StoredEvent::Frame { id, frame } if expect.is_none_or(|e| e == id) => {
                    frames.push(frame);
                    expect = Some(id + 1);
                }
                crate::store::StoredEvent::Frame { id, frame } => {
                    frames = vec![frame];
                    expect = Some(id + 1);
                }
                crate::store::StoredEvent::Gap { .. } => {
                    frames.clear();
                    expect = None;
                }
            }
        }
        if expect == Some(last_id + 1) { frames } else { Vec::new() }
    }
}

/// Stands in for a session while its agent replays it (`session/load`): updates are dropped, a
/// permission request is answered `cancelled`, and so is an elicitation.
struct Discard;

impl crate::acp::Client for Discard {
    fn session_updates(&self, _: &[crate::acp::Update]) {}

    fn request_permission(&self, _: Value) -> BoxFuture<'_, Value> {
        Box::pin(async { json!({"outcome": {"outcome": "cancelled"}}) })
    }

    fn elicit(&self, _: Value) -> BoxFuture<'_, Result<Value, crate::acp::RpcError>> {
        Box::pin(async { Ok(json!({"action": "cancel"})) })
    }

    fn elicitation_complete(&self, _: &str) {}

    fn agent_exited(&self, _: ExitInfo) {}
}

//! Each ACP method a client may call, as the typed call the REST handlers make
//! (`docs/protocol.md#16-acp`): `session/new` is `POST /session`, `session/load` attaches (and
//! resumes a dormant session like `POST /session/:id/resume`), `session/prompt` queues in the same
//! FIFO, `session/permission` and the answers to `session/request_permission` vote in the same
//! mediator. The few `_qwen/*` methods `@qwen-code/sdk`'s `acp-ws` transport sends for its core flow
//! are here too; any other method is `-32601`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Map, Value, json};

use super::connection::{Connection, Ctx, Reply, Transport};
use super::failure::Failure;
use super::lane::Lane;
use crate::acp::{PROTOCOL_VERSION, RequestId};
use crate::changes::calls::{FileCall, param_text};
use crate::clock::iso8601;
use crate::config::SessionScope;
use crate::daemon::{CreateRequest, EndReason, ResumeError, Session, SessionError};
use crate::desk::{Access, Refusal};
use crate::permission::Vote;

/// `_meta` key naming a configured agent for `session/new`.
const META_AGENT: &str = "mediatord/agent";
/// `_meta` key choosing the session scope (`single` or `thread`) for `session/new`.
const META_SCOPE: &str = "mediatord/sessionScope";
/// `_meta` key of `session/load`: replay only the events after this id (resume by cursor).
const META_AFTER: &str = "mediatord/afterEventId";
/// `_meta` key of `session/prompt`: the prompt's id, chosen by the client (a client resuming by
/// cursor knows its prompts by it).
const META_PROMPT_ID: &str = "mediatord/promptId";
/// `_meta` key of `session/new` naming a live session to attach to (`@qwen-code/sdk`'s).
const META_QWEN_SESSION: &str = "qwen-code/sessionId";
/// `_meta` key of `initialize`: also send each decided permission request as the multi-client
/// attach proposal's `permission_resolved` session update (a strict v1 client refuses a
/// `session/update` kind it does not know, so it is asked for).
const META_RESOLVED_UPDATES: &str = "mediatord/permissionResolvedUpdates";
/// The `_qwen/*` methods this daemon answers (advertised in `initialize`).
const QWEN_METHODS: [&str; 11] = [
    "_qwen/session/heartbeat",
    "_qwen/session/detach",
    "_qwen/session/context",
    "_qwen/health",
    "_qwen/file/read",
    "_qwen/file/read_bytes",
    "_qwen/file/stat",
    "_qwen/file/list",
    "_qwen/file/glob",
    "_qwen/file/write",
    "_qwen/file/edit",
];

fn meta<'a>(params: &'a Value, key: &str) -> Option<&'a Value> {
    params.get("_meta").and_then(|m| m.get(key))
}

/// A required string parameter.
fn string<'a>(params: &'a Value, key: &str) -> Result<&'a str, Failure> {
    params
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Failure::invalid_params(format!("{key} must be a non-empty string")))
}

/// What a method needs of its caller (the desk judges it, as it judges each REST route's access
/// column): reading and following sessions is anyone's; the rest changes something.
/// `session/load` of a recorded session, which brings it back, also needs [`Access::Write`].
fn access(method: &str) -> Access {
    match method {
        "initialize"
        | "authenticate"
        | "session/load"
        | "session/resume"
        | "session/list"
        | "_qwen/session/heartbeat"
        | "_qwen/session/detach"
        | "_qwen/session/context"
        | "_qwen/health"
        | "_qwen/file/read"
        | "_qwen/file/read_bytes"
        | "_qwen/file/stat"
        | "_qwen/file/list"
        | "_qwen/file/glob" => Access::Read,
        _ => Access::Write,
    }
}

impl Connection {
    /// Serves one request.
    pub(super) async fn call(
        self: &Arc<Self>,
        method: &str,
        params: &Value,
        ctx: &Ctx,
        id: &RequestId,
    ) -> Reply {
        if let (Some(header), Some(sid)) =
            (&ctx.session_header, params.get("sessionId").and_then(Value::as_str))
            && header != sid
        {
            return Reply::Now(Err(Failure::invalid_params(
                "Acp-Session-Id does not match params.sessionId",
            )));
        }
        // `initialize` itself never comes here: the connection answers it in order as it reads it.
        if !self.initialized.load(Ordering::Acquire) {
            return Reply::Now(Err(Failure::NotInitialized));
        }
        if let Err(e) = self.may(access(method)) {
            return Reply::Now(Err(e));
        }
        match method {
            "authenticate" => Reply::Now(Ok(json!({}))),
            "session/new" => match self.session_new(params).await {
                Ok((result, lane)) => Reply::Attached { result, lane },
                Err(e) => Reply::Now(Err(e)),
            },
            "session/load" => self.session_load(params, true).await,
            "session/resume" => self.session_load(params, false).await,
            "session/list" => Reply::Now(self.session_list(params).await),
            "session/prompt" => self.prompt(params, id),
            "session/cancel" | "session/set_mode" | "session/set_model" | "session/set_config_option" => {
                match self.attached(params) {
                    Ok(s) => {
                        let result = self.on_attached(method, &s, params).await;
                        after(&s, result)
                    }
                    Err(e) => Reply::Now(Err(e)),
                }
            }
            "session/close" => Reply::Now(self.close_session(params).await),
            "session/delete" => Reply::Now(self.delete_session(params).await),
            "session/permission" => Reply::Now(self.session_permission(params).await),
            "_qwen/session/heartbeat" => Reply::Now(self.heartbeat(params)),
            "_qwen/session/detach" => Reply::Now(self.leave(params)),
            "_qwen/session/context" => Reply::Now(self.context(params)),
            "_qwen/health" => Reply::Now(Ok(json!({"status": "ok"}))),
            file if file.starts_with("_qwen/file/") => Reply::Now(self.file_call(file, params).await),
            other => Reply::Now(Err(Failure::MethodNotFound(other.to_owned()))),
        }
    }

    /// `initialize`: the daemon as an ACP agent. Capabilities come from the default agent's own
    /// `initialize` answer, once it has been started (before that: ACP's baseline, text and
    /// resource links only).
    pub fn initialize(&self, params: &Value) -> Result<Value, Failure> {
        if self.initialized.swap(true, Ordering::AcqRel) {
            return Err(Failure::AlreadyInitialized);
        }
        // A client that sends no `protocolVersion` is `@qwen-code/sdk`'s daemon transport, which
        // reads sessions the way its REST twin does: every subscriber sees every prompt's echo.
        let qwen_dialect = params.get("protocolVersion").is_none();
        let flag = |key: &str| meta(params, key).and_then(Value::as_bool);
        self.set_flags(
            flag("mediatord/echoOwnPrompts").unwrap_or(qwen_dialect),
            flag("mediatord/eventIds").unwrap_or(false),
        );
        // ACP's elicitation capability: `{form: {}, url: {}}`, each mode an object when offered.
        let offers = |mode: &str| {
            params.pointer(&format!("/clientCapabilities/elicitation/{mode}")).is_some_and(Value::is_object)
        };
        self.set_elicitation(offers("form"), offers("url"));
        self.shared.resolved_updates.store(flag(META_RESOLVED_UPDATES).unwrap_or(false), Ordering::Relaxed);
        let daemon = self.daemon();
        let default = daemon.agents().into_iter().find(|a| a.default);
        let prompt_capabilities = default
            .as_ref()
            .and_then(|a| a.initialize.as_ref())
            .and_then(|i| i.pointer("/agentCapabilities/promptCapabilities").cloned())
            .unwrap_or_else(|| json!({"image": false, "audio": false, "embeddedContext": false}));
        let c = &daemon.config;
        Ok(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": prompt_capabilities,
                "mcpCapabilities": {"http": false, "sse": false},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {}},
                "_meta": {
                    "qwen": {
                        "connectionId": self.id(),
                        "workspaceCwd": c.primary_workspace().to_string_lossy(),
                        "methods": QWEN_METHODS,
                    },
                    "mediatord": {
                        "connectionId": self.id(),
                        "transport": self.transport.as_str(),
                        "agents": c.agent_names(),
                        "policy": c.permission_policy.as_str(),
                        "workspaces": c.workspaces.iter().map(|w| w.to_string_lossy()).collect::<Vec<_>>(),
                    },
                },
            },
            "agentInfo": {"name": "mediatord", "title": "mediatord", "version": env!("CARGO_PKG_VERSION")},
            "authMethods": [],
        }))
    }

    /// `session/new`: `POST /session`'s create or attach, then the session's lane from now on (a
    /// new session's from its first event, so nothing the agent said on creating it is missed).
    async fn session_new(self: &Arc<Self>, params: &Value) -> Result<(Value, Lane), Failure> {
        let client = self.client_id(meta(params, "clientId").and_then(Value::as_str))?;
        if let Some(id) = meta(params, META_QWEN_SESSION).and_then(Value::as_str) {
            let session = match self.daemon().session(id) {
                Ok(s) => s,
                Err(e) => return Err(self.not_here(id, e).await),
            };
            let lane = self.attach(&session, None)?;
            return Ok((created(&session, &client, true, lane.cursor()), lane));
        }
        let cwd = match params.get("cwd") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(_) => return Err(Failure::invalid_params("cwd must be an absolute path")),
        };
        let scope_text =
            meta(params, META_SCOPE).or_else(|| params.get("sessionScope")).and_then(Value::as_str);
        let scope = match scope_text {
            None => None,
            Some(s) => Some(SessionScope::parse(s).ok_or_else(|| {
                Failure::invalid_params("_meta[\"mediatord/sessionScope\"] must be \"single\" or \"thread\"")
            })?),
        };
        let agent = meta(params, META_AGENT)
            .or_else(|| params.get("agent"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let model =
            params.get("modelServiceId").and_then(Value::as_str).filter(|m| !m.is_empty()).map(str::to_owned);
        let request = CreateRequest { cwd, scope, model, agent, client_id: None };
        let done = self.desk().create(&self.caller(), request).await?;
        let after = if done.attached { None } else { Some(0) };
        let lane = self.attach(&done.session, after)?;
        let start = lane.cursor();
        Ok((created(&done.session, &client, done.attached, start), lane))
    }

    /// `session/load` (`replay`: the session's events so far, then the answer) and
    /// `session/resume` (no replay): attaches a live session, or first brings a dormant one back
    /// on a fresh agent (`POST /session/:id/resume`; not for an observer, which may not bring it
    /// back: `read_only_device`). `_meta["mediatord/afterEventId"]` replays only what followed
    /// that event (a client resuming by cursor).
    async fn session_load(self: &Arc<Self>, params: &Value, replay: bool) -> Reply {
        let session_id = match string(params, "sessionId") {
            Ok(id) => id.to_owned(),
            Err(e) => return Reply::Now(Err(e)),
        };
        let client = match self.client_id(meta(params, "clientId").and_then(Value::as_str)) {
            Ok(c) => c,
            Err(e) => return Reply::Now(Err(e)),
        };
        let session = match self.daemon().session(&session_id) {
            Ok(s) => s,
            Err(_) if self.may_write().is_ok() => match self.daemon().resume(&session_id).await {
                Ok((s, _)) => s,
                Err(e) => return Reply::Now(Err(e.into())),
            },
            // An observer: bringing a recorded session back is a write, refused as REST's
            // `POST /session/:id/resume` refuses it.
            Err(why) => {
                let refused = match self.recorded_here(&session_id, why).await {
                    Ok(()) => Failure::Refused(Refusal::ReadOnlyDevice),
                    Err(e) => e,
                };
                return Reply::Now(Err(refused));
            }
        };
        let after = match (replay, meta(params, META_AFTER).and_then(Value::as_u64)) {
            (_, Some(after)) => Some(after),
            (true, None) => Some(0),
            (false, None) => None,
        };
        match self.attach(&session, after) {
            // Over one WebSocket the answer follows the replay, as ACP's stdio agents send it.
            Ok(lane) if self.transport == Transport::WebSocket => {
                let gate = session.last_event_id();
                let result = Ok(state(&session, &client, lane.cursor()));
                self.deliver(lane);
                Reply::After { session_id, gate, result }
            }
            Ok(lane) => {
                let result = Ok(state(&session, &client, lane.cursor()));
                self.deliver(lane);
                Reply::Now(result)
            }
            Err(e) => Reply::Now(Err(e)),
        }
    }

    /// Whether this connection may attach session `session_id` (the check of a session stream
    /// opened before its `session/load`): a live session, or, for a connection that may write, a
    /// recorded one `session/load` would bring back. Refused as the load would be: not found, held
    /// by another daemon of the fleet, or `read_only_device` for an observer (who may read a
    /// recorded session's history but not bring it back).
    pub async fn may_attach(&self, session_id: &str) -> Result<(), Failure> {
        match self.daemon().session(session_id) {
            Ok(_) => Ok(()),
            Err(why) => {
                self.recorded_here(session_id, why).await?;
                self.may_write()
            }
        }
    }

    /// Whether session `id`, not live (`why`), is one this daemon could bring back: recorded, and
    /// held by no other daemon of the fleet. Else why not: held elsewhere, or `why`.
    async fn recorded_here(&self, id: &str, why: SessionError) -> Result<(), Failure> {
        match self.not_here(id, why).await {
            Failure::Refused(Refusal::SessionNotFound { session_id }) => {
                match self.daemon().recorded_session(id).await {
                    Ok(Some(_)) => Ok(()),
                    Ok(None) => Err(Refusal::SessionNotFound { session_id }.into()),
                    Err(e) => Err(e.into()),
                }
            }
            other => Err(other),
        }
    }

    /// `session/list`: the live sessions of a workspace (`cwd`, or every workspace), then the
    /// recorded ones that are not live, [`SESSION_LIST_PAGE`] at a time (`cursor`, `nextCursor`).
    /// A `cwd` that is none of the daemon's workspaces lists nothing (the RFD: an empty array).
    async fn session_list(&self, params: &Value) -> Result<Value, Failure> {
        let daemon = self.daemon();
        let cwd = params.get("cwd").or_else(|| params.get("workspaceCwd"));
        let workspaces = match cwd {
            None | Some(Value::Null) => daemon.config.workspaces.clone(),
            Some(Value::String(cwd)) if cwd.starts_with('/') => match daemon.workspace(cwd) {
                Ok(w) => vec![w],
                Err(_) => Vec::new(),
            },
            Some(_) => return Err(Failure::invalid_params("cwd must be an absolute path")),
        };
        let start = match params.get("cursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(
                Cursor::decode(c)
                    .ok_or_else(|| Failure::invalid_params("cursor is not one this daemon gave"))?,
            ),
            Some(_) => return Err(Failure::invalid_params("cursor must be a string")),
        };
        let mut live: Vec<Arc<Session>> =
            daemon.all_sessions().into_iter().filter(|s| workspaces.contains(&s.workspace)).collect();
        // A stable order, so that a page follows the one before it.
        live.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        let mut sessions: Vec<Value> = live.iter().map(|s| listed(s)).collect();
        for workspace in &workspaces {
            for r in daemon.recorded_sessions(workspace).await {
                if live.iter().any(|s| s.id == r.session_id) {
                    continue;
                }
                sessions.push(json!({
                    "sessionId": r.session_id,
                    "cwd": r.workspace,
                    "workspaceCwd": r.workspace,
                    "updatedAt": iso8601(r.ended_at.unwrap_or(r.created_at)),
                    "agent": r.agent,
                    "state": r.state.as_str(),
                    "_meta": {"mediatord/state": r.state.as_str(), "mediatord/lastEventId": r.last_event_id},
                }));
            }
        }
        let from = start.map_or(0, |c| c.position(&sessions));
        let page: Vec<Value> = sessions.iter().skip(from).take(SESSION_LIST_PAGE).cloned().collect();
        let mut out = json!({"sessions": page});
        let end = from + SESSION_LIST_PAGE;
        if end < sessions.len()
            && let Some(last) = sessions[end - 1]["sessionId"].as_str()
        {
            out["nextCursor"] = json!(Cursor { offset: end, after: last.to_owned() }.encode());
        }
        Ok(out)
    }

    /// `session/prompt`: queued in the session's FIFO; the lane answers at the turn's end.
    fn prompt(self: &Arc<Self>, params: &Value, id: &RequestId) -> Reply {
        let session = match self.attached(params) {
            Ok(s) => s,
            Err(e) => return Reply::Now(Err(e)),
        };
        let invalid = || Failure::Refused(Refusal::InvalidPrompt);
        let Value::Object(body) = params.clone() else { return Reply::Now(Err(invalid())) };
        if body.get("prompt").and_then(Value::as_array).is_none_or(Vec::is_empty) {
            return after(&session, Err(invalid()));
        }
        let prompt_id = match meta(params, META_PROMPT_ID) {
            None => uuid::Uuid::new_v4().to_string(),
            Some(Value::String(p))
                if valid_prompt_id(p) && self.shared.owed_prompt(&session.id, p).is_none() =>
            {
                p.clone()
            }
            Some(_) => {
                let why = "_meta[\"mediatord/promptId\"] must be 1-64 of A-Z a-z 0-9 - and not a prompt of this connection already";
                return after(&session, Err(Failure::invalid_params(why)));
            }
        };
        // Known before the turn can end, so the lane cannot miss the turn's event.
        let cancel = self.shared.await_prompt(&session.id, &prompt_id, id.clone());
        let queued = self.desk().enqueue(
            &session,
            &self.caller(),
            without_meta_client(body),
            Some((prompt_id.clone(), cancel)),
        );
        match queued {
            Ok(_) => Reply::Later,
            Err(e) => {
                self.shared.take_prompt(&session.id, &prompt_id);
                after(&session, Err(e.into()))
            }
        }
    }

    /// `_qwen/file/*`: the file routes of the primary workspace (`crate::changes::calls`, the
    /// same calls as REST's `/file`, `/stat`, …), as `@qwen-code/sdk`'s ACP transports send them:
    /// the query's fields as params, a write's or an edit's body as its params.
    async fn file_call(&self, method: &str, params: &Value) -> Result<Value, Failure> {
        let op = method.strip_prefix("_qwen/file/").unwrap_or_default();
        let mut body = params.clone();
        if let Some(fields) = body.as_object_mut() {
            fields.remove("_meta");
        }
        let call = FileCall::parse(op, |name| param_text(params, name), || body)
            .ok_or_else(|| Failure::MethodNotFound(method.to_owned()))?
            .map_err(Refusal::from)?;
        let daemon = self.daemon();
        let engine = daemon
            .changes
            .clone()
            .ok_or_else(|| Refusal::ChangesUnavailable("the snapshot store could not be opened".into()))?;
        let workspace = daemon.config.primary_workspace().to_path_buf();
        let answer = tokio::task::spawn_blocking(move || call.run(&engine.files(&workspace)))
            .await
            .map_err(|_| Refusal::Internal)?
            .map_err(Refusal::from)?;
        Ok(answer.json)
    }

    /// `session/set_config_option`, where the agent announced config options.
    /// A method on a session this connection is attached to, whose answer goes out after the
    /// events it caused ([`after`]).
    async fn on_attached(&self, method: &str, session: &Session, params: &Value) -> Result<Value, Failure> {
        match method {
            "session/cancel" => {
                session.cancel().await;
                Ok(json!({}))
            }
            "session/set_mode" => Ok(session.set_mode(string(params, "modeId")?).await?),
            "session/set_model" => Ok(session.set_model(string(params, "modelId")?).await?),
            "session/set_config_option" => self.set_config_option(session, params).await,
            other => Err(Failure::MethodNotFound(other.to_owned())),
        }
    }

    async fn set_config_option(&self, session: &Session, params: &Value) -> Result<Value, Failure> {
        if session.agent_result.get("configOptions").is_none_or(Value::is_null) {
            return Err(Failure::NoConfigOptions);
        }
        let config = string(params, "configId")?;
        let value = params.get("value").ok_or_else(|| Failure::invalid_params("value is required"))?;
        Ok(session.set_config_option(config, value).await?)
    }

    /// `session/close`: `DELETE /session/:id`, for every client of the session.
    async fn close_session(&self, params: &Value) -> Result<Value, Failure> {
        let session_id = string(params, "sessionId")?;
        let session = self.daemon().session(session_id)?;
        let client = self.client_id(None).ok();
        self.detach(session_id);
        self.daemon().forget(&session);
        session.end(EndReason::Closed { closed_by: client });
        let _ = tokio::time::timeout(CLOSE_WAIT, session.finished()).await;
        Ok(json!({}))
    }

    /// `session/delete`: a recorded session and its history, through the desk (audited). A live
    /// session is refused `session_live` (close it first): the RFD leaves it to the agent, and
    /// here other clients may be attached to it, whom a delete would cut off without the
    /// `session/close` that ends it for all of them. A session the history does not hold is
    /// deleted already (the RFD's idempotence).
    async fn delete_session(&self, params: &Value) -> Result<Value, Failure> {
        let session_id = string(params, "sessionId")?;
        self.desk().delete_session(&self.caller(), session_id).await?;
        Ok(json!({}))
    }

    /// `session/permission` (`@qwen-code/sdk`'s vote): `POST /session/:id/permission/:requestId`,
    /// through the desk (a decision remembered for the workspace is answered once its rule is on
    /// disk, as REST's is: `docs/operations.md#durability`).
    async fn session_permission(&self, params: &Value) -> Result<Value, Failure> {
        let request_id = string(params, "requestId")?;
        let vote = Vote::parse(params).ok_or_else(|| {
            Failure::invalid_params(
                "expected outcome {outcome: selected, optionId} or {outcome: cancelled}, or decision",
            )
        })?;
        self.client_id(meta(params, "clientId").and_then(Value::as_str))?;
        let session = match params.get("sessionId").and_then(Value::as_str) {
            Some(id) => match self.daemon().session(id) {
                Ok(s) => s,
                Err(e) => return Err(self.not_here(id, e).await),
            },
            None => self.daemon().session_with_request(request_id)?,
        };
        self.desk().vote(&session, &self.caller(), request_id, &vote).await?;
        Ok(json!({}))
    }

    fn heartbeat(&self, params: &Value) -> Result<Value, Failure> {
        let session = self.daemon().session(string(params, "sessionId")?)?;
        let client = self.client_id(meta(params, "clientId").and_then(Value::as_str))?;
        let seen = self.desk().join(&session, &self.caller()).unwrap_or_default();
        Ok(json!({"sessionId": session.id, "clientId": client, "lastSeenAt": seen}))
    }

    fn leave(&self, params: &Value) -> Result<Value, Failure> {
        let session_id = string(params, "sessionId")?;
        let session = self.daemon().session(session_id)?;
        if !self.detach(session_id) {
            self.desk().leave(&session, &self.caller());
        }
        Ok(json!({}))
    }

    fn context(&self, params: &Value) -> Result<Value, Failure> {
        let s = self.daemon().session(string(params, "sessionId")?)?;
        let config_options = s.agent_result.get("configOptions").cloned().unwrap_or(Value::Null);
        Ok(json!({
            "v": 1,
            "sessionId": s.id,
            "workspaceCwd": s.workspace.to_string_lossy(),
            "state": {"models": s.models(), "modes": s.modes(), "configOptions": config_options},
        }))
    }

    /// Why session `id`, not live here, cannot be used: in a fleet, the daemon holding it (whose
    /// agent alone may serve it: this door starts no second one), else `why`.
    async fn not_here(&self, id: &str, why: SessionError) -> Failure {
        match self.daemon().held_elsewhere(id).await {
            Ok(Some(node_url)) => ResumeError::HeldElsewhere { session_id: id.to_owned(), node_url }.into(),
            _ => why.into(),
        }
    }

    /// The attached session a method names (the caller's access was checked before).
    fn attached(&self, params: &Value) -> Result<Arc<Session>, Failure> {
        let session_id = string(params, "sessionId")?;
        self.attached_session(session_id).ok_or_else(|| Failure::NotAttached(session_id.to_owned()))
    }
}

/// Sessions one `session/list` answer holds at most (the RFD: "reasonable page sizes").
const SESSION_LIST_PAGE: usize = 100;

/// Where the next page of `session/list` starts: after session `after`, which ended the page
/// before at `offset`. Opaque to the client (base64url).
struct Cursor {
    offset: usize,
    after: String,
}

impl Cursor {
    fn encode(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}:{}", self.offset, self.after))
    }

    fn decode(text: &str) -> Option<Cursor> {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let (offset, after) = text.split_once(':')?;
        Some(Cursor { offset: offset.parse().ok()?, after: after.to_owned() })
    }

    /// Where the next page starts in `sessions`: just after the session that ended the page
    /// before, wherever it is now (sessions started or ended meanwhile move it); at the offset
    /// when it is gone.
    fn position(&self, sessions: &[Value]) -> usize {
        sessions
            .iter()
            .position(|s| s["sessionId"].as_str() == Some(self.after.as_str()))
            .map_or(self.offset.min(sessions.len()), |i| i + 1)
    }
}

/// How long `session/close` waits for the session's terminal event (`DELETE /session/:id`'s).
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(6);

/// An answer that follows the events published until now on `session`'s lane.
fn after(session: &Session, result: Result<Value, Failure>) -> Reply {
    Reply::After { session_id: session.id.clone(), gate: session.last_event_id(), result }
}

/// Whether a client's prompt id is one the daemon takes (it is stamped on events, unescaped).
fn valid_prompt_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The prompt's params as the agent gets them: the client's `_meta.clientId` and its prompt id are
/// the door's, not the agent's.
fn without_meta_client(mut body: Map<String, Value>) -> Map<String, Value> {
    if let Some(Value::Object(meta)) = body.get_mut("_meta") {
        meta.remove("clientId");
        meta.remove(META_PROMPT_ID);
        if meta.is_empty() {
            body.remove("_meta");
        }
    }
    body
}

/// The session's models, modes and config options, as `session/new` and `session/load` answer;
/// `start` is the event the connection's stream of it starts after.
fn state(s: &Session, client: &str, start: u64) -> Value {
    let mut out = json!({
        "_meta": {
            "mediatord": {
                "sessionId": s.id, "clientId": client, "agent": s.agent_name,
                "workspaceCwd": s.workspace.to_string_lossy(), "lastEventId": s.last_event_id(),
                "startEventId": start,
            },
        },
    });
    for (key, value) in [("models", s.models()), ("modes", s.modes())] {
        if !value.is_null() {
            out[key] = value;
        }
    }
    if let Some(options) = s.agent_result.get("configOptions").filter(|v| !v.is_null()) {
        out["configOptions"] = options.clone();
    }
    out
}

/// `session/new`'s answer: ACP's fields, and `POST /session`'s for `@qwen-code/sdk`.
fn created(s: &Session, client: &str, attached: bool, start: u64) -> Value {
    let mut out = state(s, client, start);
    out["sessionId"] = json!(s.id);
    out["workspaceCwd"] = json!(s.workspace.to_string_lossy());
    out["agent"] = json!(s.agent_name);
    out["attached"] = json!(attached);
    out["clientId"] = json!(client);
    out["createdAt"] = json!(iso8601(s.created_at));
    out["_meta"]["mediatord"]["attached"] = json!(attached);
    out
}

/// A live session in `session/list`: ACP's `SessionInfo`, with `GET /workspace/:cwd/sessions`'s
/// summary fields.
fn listed(s: &Session) -> Value {
    json!({
        "sessionId": s.id,
        "cwd": s.workspace.to_string_lossy(),
        "workspaceCwd": s.workspace.to_string_lossy(),
        "updatedAt": iso8601(s.created_at),
        "agent": s.agent_name,
        "state": "live",
        "createdAt": iso8601(s.created_at),
        "clientCount": s.client_count(),
        "hasActivePrompt": s.has_active_prompt(),
        "pendingPermissions": s.permissions().pending_count(),
        "_meta": {"mediatord/state": "live", "mediatord/lastEventId": s.last_event_id()},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompts_meta_client_id_stays_with_the_door() {
        let body = json!({"prompt": [], "_meta": {"clientId": "a", "mediatord/promptId": "p", "x": 1}});
        let Value::Object(map) = body else { unreachable!() };
        assert_eq!(Value::Object(without_meta_client(map)), json!({"prompt": [], "_meta": {"x": 1}}));
        let Value::Object(map) = json!({"prompt": [], "_meta": {"clientId": "a"}}) else { unreachable!() };
        assert_eq!(Value::Object(without_meta_client(map)), json!({"prompt": []}));
    }

    #[test]
    fn a_session_list_cursor_comes_back_as_it_went_and_finds_its_place() {
        let c = Cursor { offset: 2, after: "b".into() };
        let back = Cursor::decode(&c.encode()).expect("decodes");
        assert_eq!((back.offset, back.after.as_str()), (2, "b"));
        let list = |ids: &[&str]| ids.iter().map(|id| json!({"sessionId": id})).collect::<Vec<Value>>();
        assert_eq!(back.position(&list(&["a", "b", "c"])), 2);
        assert_eq!(back.position(&list(&["x", "a", "b", "c"])), 3, "a session started before it");
        assert_eq!(back.position(&list(&["a", "c"])), 2, "gone: the offset");
        assert_eq!(back.position(&list(&["a"])), 1, "never past the end");
        assert!(Cursor::decode("not base64!").is_none());
        assert!(Cursor::decode("eA").is_none(), "no offset");
    }

    #[test]
    fn a_client_chosen_prompt_id_is_short_and_plain() {
        assert!(valid_prompt_id("0b6c6f5e-3a52-4cfd-a0a4-7a1f0b4d2f31"));
        assert!(valid_prompt_id(&"a".repeat(64)));
        assert!(!valid_prompt_id(&"a".repeat(65)));
        assert!(!valid_prompt_id(""));
        assert!(!valid_prompt_id("has\"quote"));
        assert!(!valid_prompt_id("sp ace"));
    }
}

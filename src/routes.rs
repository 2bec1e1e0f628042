//! HTTP handlers, grouped by resource: health and capabilities, sessions, prompts, events,
//! permissions and rules. Each handler validates, then calls into the daemon's tables.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::bus::SubscribeError;
use crate::daemon::Daemon;
use crate::error::ApiError;
use crate::extract::{JsonBody, client_id};
use crate::mediator::VoteBody;
use crate::perimeter::{Peer, is_loopback_peer};
use crate::policy::Policy;
use crate::session::{EndReason, EnqueueError, PromptError, PromptJob, Session, prompt_response};

pub type AppState = Arc<Daemon>;
type ApiResult = Result<Response, ApiError>;

/// Largest `Last-Event-ID` honoured (JavaScript's safe integer range).
const MAX_EVENT_ID: u64 = (1 << 53) - 1;
/// How long `DELETE` waits for the session's terminal event before answering anyway.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(6);

#[derive(Deserialize)]
pub struct DeepQuery {
    deep: Option<String>,
    audit: Option<String>,
}

fn truthy(v: &Option<String>) -> bool {
    matches!(v.as_deref(), Some("1" | "true" | "yes"))
}

pub async fn health(State(d): State<AppState>, Query(q): Query<DeepQuery>) -> Json<Value> {
    if truthy(&q.deep) { Json(d.deep_health()) } else { Json(json!({"status": "ok"})) }
}

/// Feature tags for what works at this build, plus the conditional ones (SPEC §11).
pub fn features(d: &Daemon) -> Vec<&'static str> {
    let mut features = vec![
        "health",
        "capabilities",
        "session_create",
        "session_scope_override",
        "session_list",
        "session_status",
        "session_close",
        "session_detach",
        "session_prompt",
        "non_blocking_prompt",
        "session_cancel",
        "session_events",
        "session_set_model",
        "client_identity",
        "client_heartbeat",
        "permission_vote",
        "session_permission_vote",
        "permission_mediation",
        "permission_list",
        "permission_rules",
        "metrics",
    ];
    if d.config.session_shell_effective() {
        features.push("session_shell_command");
    }
    if d.config.require_auth {
        features.push("require_auth");
    }
    if !d.config.allow_origins.is_empty() {
        features.push("allow_origin");
    }
    features
}

pub async fn capabilities(State(d): State<AppState>) -> Json<Value> {
    let c = &d.config;
    let workspaces: Vec<Value> = c
        .workspaces
        .iter()
        .enumerate()
        .map(|(i, w)| json!({"cwd": w.to_string_lossy(), "primary": i == 0}))
        .collect();
    Json(json!({
        "v": 1,
        "protocolVersions": {"current": "v1", "supported": ["v1"]},
        "daemon": {"name": "mediatord", "version": env!("CARGO_PKG_VERSION")},
        "mode": "http-bridge",
        "features": features(&d),
        "workspaceCwd": c.primary_workspace().to_string_lossy(),
        "workspaces": workspaces,
        "transports": ["rest"],
        "policy": {
            "permission": c.permission_policy.as_str(),
            "permissionModes": Policy::ALL.map(Policy::as_str),
            "consensusQuorum": c.consensus_quorum,
            "permissionTimeoutMs": c.permission_timeout.map(|t| t.as_millis() as u64),
        },
        "limits": {
            "maxSessions": c.max_sessions,
            "maxPendingPromptsPerSession": c.max_pending_prompts,
            "maxSubscribersPerSession": c.max_subscribers,
            "eventRingSize": c.event_ring_size,
        },
        "agent": {"command": c.agent.display},
    }))
}

fn summary(s: &Session) -> Value {
    json!({
        "sessionId": s.id,
        "workspaceCwd": s.workspace.to_string_lossy(),
        "createdAt": crate::iso8601(s.created_at),
        "clientCount": s.client_count(),
        "hasActivePrompt": s.has_active_prompt(),
    })
}

pub async fn create_session(
    State(d): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let client = client_id(&headers)?;
    let created = d.create(&body, client).await?;
    let s = &created.session;
    let mut out = json!({
        "sessionId": s.id,
        "workspaceCwd": s.workspace.to_string_lossy(),
        "attached": created.attached,
        "clientId": created.client_id,
        // An ISO-8601 string: @qwen-code/sdk parses it as a date.
        "createdAt": crate::iso8601(s.created_at),
    });
    for key in ["models", "modes"] {
        if let Some(v) = s.agent_result.get(key) {
            out[key] = v.clone();
        }
    }
    Ok(Json(out).into_response())
}

pub async fn list_workspace_sessions(State(d): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    // `{*rest}` captures `<cwd>/sessions`; the cwd itself may arrive with its slashes encoded or not.
    let cwd = raw.strip_suffix("/sessions").ok_or(ApiError::RouteNotFound)?;
    let cwd = if cwd.starts_with('/') { cwd.to_owned() } else { format!("/{cwd}") };
    let path = std::path::Path::new(&cwd);
    if !path.is_absolute() || cwd.contains('\0') {
        return Err(ApiError::InvalidCwd);
    }
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let sessions: Vec<Value> =
        d.all_sessions().iter().filter(|s| s.workspace == canonical).map(|s| summary(s)).collect();
    Ok(Json(json!({"sessions": sessions})).into_response())
}

pub async fn get_session(State(d): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let s = d.session(&id)?;
    let mut out = summary(&s);
    out["pendingPermissions"] = json!(s.mediator.pending_count());
    out["subscribers"] = json!(s.bus.subscriber_count());
    out["pendingPrompts"] = json!(s.pending_prompt_count());
    Ok(Json(out).into_response())
}

/// `GET /session/:id/context`: what `@qwen-code/sdk`'s `sessionContext()` reads — the models and
/// modes the agent reported at `session/new`.
pub async fn session_context(State(d): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let s = d.session(&id)?;
    let pick = |key: &str| s.agent_result.get(key).cloned().unwrap_or(Value::Null);
    Ok(Json(json!({
        "v": 1,
        "sessionId": s.id,
        "workspaceCwd": s.workspace.to_string_lossy(),
        "state": {"models": pick("models"), "modes": pick("modes"), "configOptions": pick("configOptions")},
    }))
    .into_response())
}

pub async fn delete_session(
    State(d): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult {
    let client = client_id(&headers)?;
    let s = d.session(&id)?;
    d.forget(&s);
    s.end(EndReason::Closed { closed_by: client });
    let _ = tokio::time::timeout(CLOSE_WAIT, s.finished()).await;
    tracing::info!(session_id = %id, "session closed");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Cancels a blocking prompt's turn when its HTTP caller goes away before the answer.
struct CancelOnDrop(Option<CancellationToken>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.cancel();
        }
    }
}

pub async fn prompt(
    State(d): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let s = d.session(&id)?;
    let Value::Object(mut params) = body else { return Err(ApiError::InvalidPrompt) };
    if params.get("prompt").and_then(Value::as_array).is_none_or(|p| p.is_empty()) {
        return Err(ApiError::InvalidPrompt);
    }
    let client = client_id(&headers)?;
    if let Some(c) = &client {
        s.touch_client(c);
    }
    // The route's id wins over any sessionId in the body.
    params.insert("sessionId".into(), json!(s.id));
    let asynchronous = headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|p| p.trim().eq_ignore_ascii_case("respond-async")));
    let prompt_id = uuid::Uuid::new_v4().to_string();
    let caller_gone = CancellationToken::new();
    let (reply, answer) = oneshot::channel();
    let last_event_id = s.bus.last_id();
    let job = PromptJob {
        prompt_id: prompt_id.clone(),
        originator: client,
        params: Value::Object(params),
        reply: (!asynchronous).then_some(reply),
        caller_gone: caller_gone.clone(),
        queued_at: std::time::Instant::now(),
    };
    s.enqueue(job).map_err(|e| match e {
        EnqueueError::Full { limit, pending } => ApiError::PromptQueueFull { limit, pending },
        EnqueueError::Ended => ApiError::SessionNotFound { session_id: id.clone() },
    })?;
    if asynchronous {
        let body = json!({"promptId": prompt_id, "lastEventId": last_event_id});
        return Ok((StatusCode::ACCEPTED, Json(body)).into_response());
    }
    let mut guard = CancelOnDrop(Some(caller_gone));
    let result = answer.await.unwrap_or(Err(PromptError::Ended("session_closed")));
    guard.0 = None;
    match result {
        Ok(value) => Ok(Json(prompt_response(&prompt_id, value)).into_response()),
        Err(PromptError::Agent(m)) => Err(ApiError::AgentError(m)),
        Err(PromptError::Exited(m)) => Err(ApiError::AgentExited(m)),
        Err(PromptError::Ended("agent_exited")) => Err(ApiError::AgentExited("the agent exited".into())),
        Err(PromptError::Ended("daemon_draining")) => Err(ApiError::DaemonDraining),
        Err(PromptError::Ended(_)) => Err(ApiError::SessionNotFound { session_id: id }),
    }
}

pub async fn cancel(State(d): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let s = d.session(&id)?;
    s.cancel().await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn set_model(
    State(d): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let s = d.session(&id)?;
    let model = body
        .get("modelId")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .ok_or(ApiError::InvalidModelId)?;
    let result = s
        .agent
        .call(
            "session/set_model",
            json!({"sessionId": s.id, "modelId": model}),
            Some(d.config.initialize_timeout),
        )
        .await
        .map_err(|e| match e {
            crate::workspace::CallError::Rpc(e) => ApiError::AgentError(e.detailed_message()),
            crate::workspace::CallError::Exited(m) => ApiError::AgentExited(m),
            other => ApiError::AgentError(other.to_string()),
        })?;
    s.publish("model_switched", &json!({"sessionId": s.id, "modelId": model}));
    let result: Value = serde_json::from_str(result.get()).unwrap_or(Value::Null);
    let result = if result.is_object() { result } else { json!({}) };
    Ok(Json(result).into_response())
}

/// `Last-Event-ID`: decimal digits only, at most 2^53-1; anything else counts as absent.
fn last_event_id(headers: &HeaderMap) -> Option<u64> {
    let v = headers.get("last-event-id")?.to_str().ok()?.trim();
    if v.is_empty() || v.len() > 16 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<u64>().ok().filter(|n| *n <= MAX_EVENT_ID)
}

pub async fn events(State(d): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    let s = d.session(&id)?;
    let client = client_id(&headers)?;
    let sub = s.bus.subscribe(last_event_id(&headers)).map_err(|e| match e {
        SubscribeError::TooMany { limit } => ApiError::SubscriberLimitExceeded { limit },
        SubscribeError::Closed => ApiError::SessionNotFound { session_id: id.clone() },
    })?;
    if let Some(c) = &client {
        s.touch_client(c);
    }
    let mut response = Body::from_stream(sub.into_body(d.streams_end.clone())).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, no-transform"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// Steps 1 of SPEC §8: body shape, then client id format.
fn vote_preamble(headers: &HeaderMap, body: &Value) -> Result<(VoteBody, Option<String>), ApiError> {
    let vote = VoteBody::parse(body)?;
    let client = client_id(headers)?;
    Ok((vote, client))
}

pub async fn vote(
    State(d): State<AppState>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    headers: HeaderMap,
    Path((id, request_id)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let (vote, client) = vote_preamble(&headers, &body)?;
    let s = d.session(&id)?;
    s.mediator.vote(&s, &request_id, client.as_deref(), is_loopback_peer(Some(peer)), &vote)?;
    Ok(Json(json!({})).into_response())
}

pub async fn legacy_vote(
    State(d): State<AppState>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    headers: HeaderMap,
    Path(request_id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let (vote, client) = vote_preamble(&headers, &body)?;
    let s = d
        .all_sessions()
        .into_iter()
        .find(|s| s.mediator.knows(&request_id))
        .ok_or(ApiError::PermissionRequestNotFound)?;
    s.mediator.vote(&s, &request_id, client.as_deref(), is_loopback_peer(Some(peer)), &vote)?;
    Ok(Json(json!({})).into_response())
}

pub async fn list_permissions(
    State(d): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<DeepQuery>,
) -> ApiResult {
    let s = d.session(&id)?;
    let mut out = json!({"pending": s.mediator.list_pending()});
    if truthy(&q.audit) {
        out["audit"] = json!(s.mediator.audit());
    }
    Ok(Json(out).into_response())
}

pub async fn detach(State(d): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    let s = d.session(&id)?;
    if let Some(c) = client_id(&headers)? {
        s.remove_client(&c);
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn heartbeat(State(d): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult {
    let s = d.session(&id)?;
    let client = client_id(&headers)?.ok_or(ApiError::InvalidClientId)?;
    let seen = s.touch_client(&client);
    Ok(Json(json!({"sessionId": s.id, "clientId": client, "lastSeenAt": seen})).into_response())
}

pub async fn add_rule(
    State(d): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let s = d.session(&id)?;
    let client = client_id(&headers)?;
    let rule = crate::rules::parse_rule(&body, &s.workspace, client, crate::now_ms())
        .map_err(ApiError::InvalidRule)?;
    let wire = s.mediator.add_rule(&s, rule)?;
    Ok((StatusCode::CREATED, Json(json!({"rule": wire}))).into_response())
}

pub async fn list_rules(State(d): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let s = d.session(&id)?;
    Ok(Json(json!({"rules": s.mediator.list_rules()})).into_response())
}

pub async fn delete_rule(
    State(d): State<AppState>,
    Path((id, rule_id)): Path<(String, String)>,
) -> ApiResult {
    let s = d.session(&id)?;
    if s.mediator.remove_rule(&s, &rule_id) {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::RuleNotFound)
    }
}

/// `GET /metrics`: the Prometheus exposition.
pub async fn metrics(State(d): State<AppState>) -> Response {
    let body = d.metrics.render(&d);
    ([(header::CONTENT_TYPE, HeaderValue::from_static(crate::metrics::CONTENT_TYPE))], body).into_response()
}

/// `GET /openapi.json`: the document built from the route table.
pub async fn openapi() -> Response {
    let body = crate::openapi::document_text();
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

pub async fn not_found() -> ApiError {
    ApiError::RouteNotFound
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

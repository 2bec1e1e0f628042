//! Handlers of the `sessions` tag: create or attach, list, status, context, close, model, detach,
//! heartbeat (`docs/protocol.md#3-routes`, `docs/protocol.md#4-agents-workspaces-and-sessions`).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult, ClientIdProblem};
use super::extract::{AppState, JsonBody, PathParams, client_id};
use crate::clock::iso8601;
use crate::config::SessionScope;
use crate::daemon::{CreateRequest, EndReason, Session};
use crate::desk::{Caller, Desk, Refusal};

/// How long `DELETE` waits for the session's terminal event before answering anyway.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(6);

fn summary(s: &Session) -> Value {
    json!({
        "sessionId": s.id,
        "workspaceCwd": s.workspace.to_string_lossy(),
        "agent": s.agent_name,
        "createdAt": iso8601(s.created_at),
        "clientCount": s.client_count(),
        "hasActivePrompt": s.has_active_prompt(),
        "pendingPermissions": s.permissions().pending_count(),
    })
}

/// `{cwd?, sessionScope?, modelServiceId?, agent?}`, each checked for type; the daemon judges the
/// values. `known` lists the configured agents, for the refusal of an `agent` that is no name.
fn create_request(body: &Value, known: impl FnOnce() -> Vec<String>) -> Result<CreateRequest, ApiError> {
    let cwd = match body.get("cwd") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => return Err(ApiError::Refused(Refusal::InvalidCwd)),
    };
    let scope = match body.get("sessionScope") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            Some(SessionScope::parse(s).ok_or(ApiError::Refused(Refusal::InvalidSessionScope))?)
        }
        Some(_) => return Err(ApiError::Refused(Refusal::InvalidSessionScope)),
    };
    let model = match body.get("modelServiceId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => return Err(ApiError::Refused(Refusal::InvalidModelId)),
    };
    let agent = match body.get("agent") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(ApiError::Refused(Refusal::UnknownAgent {
                agent: other.to_string(),
                known: known(),
            }));
        }
    };
    Ok(CreateRequest { cwd, scope, model, agent, client_id: None })
}

pub(super) async fn create_session(
    State(d): State<AppState>,
    Extension(desk): Extension<std::sync::Arc<Desk>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> ApiResult {
    // Every field is optional, so anything but an object would otherwise read as `{}`.
    if !body.is_object() {
        return Err(ApiError::InvalidJson);
    }
    let caller = caller.acting_as(client_id(&headers)?);
    let created = desk.create(&caller, create_request(&body, || d.config.agent_names())?).await?;
    let s = &created.session;
    let mut out = json!({
        "sessionId": s.id,
        "workspaceCwd": s.workspace.to_string_lossy(),
        "agent": s.agent_name,
        "attached": created.attached,
        "clientId": created.client_id,
        // An ISO-8601 string: @qwen-code/sdk parses it as a date.
        "createdAt": iso8601(s.created_at),
    });
    for (key, value) in [("models", s.models()), ("modes", s.modes())] {
        if !value.is_null() {
            out[key] = value;
        }
    }
    Ok(Json(out).into_response())
}

pub(super) async fn list_workspace_sessions(
    State(d): State<AppState>,
    PathParams(raw): PathParams<String>,
    uri: axum::http::Uri,
) -> ApiResult {
    // `{*rest}` captures `<cwd>/sessions` (or `<cwd>/permission-rules`); the cwd itself may arrive
    // with its slashes encoded or not.
    let cwd = match super::history::workspace_path(&raw)? {
        super::history::WorkspacePath::Sessions(cwd) => cwd,
        super::history::WorkspacePath::Rules(cwd) => return super::history::list_workspace_rules(&d, &cwd),
        super::history::WorkspacePath::Rule(..) => return Err(ApiError::MethodNotAllowed),
    };
    let path = std::path::Path::new(&cwd);
    if !path.is_absolute() {
        return Err(ApiError::Refused(Refusal::InvalidCwd));
    }
    let ended = uri.query().is_some_and(|q| q.split('&').any(|p| p == "include=ended"));
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let live: Vec<std::sync::Arc<Session>> =
        d.all_sessions().into_iter().filter(|s| s.workspace == canonical).collect();
    let mut sessions: Vec<Value> = live
        .iter()
        .map(|s| {
            let mut v = summary(s);
            if ended {
                v["state"] = json!("live");
            }
            v
        })
        .collect();
    if ended {
        for r in d.recorded_sessions(&canonical).await {
            if live.iter().any(|s| s.id == r.session_id) {
                continue;
            }
            sessions.push(recorded(&r));
        }
    }
    Ok(Json(json!({"sessions": sessions})).into_response())
}

/// `GET /session/:id`: a live session's status; with the durable store, a dormant one (ended by a
/// shutdown, a crash, its agent's death or a lost fleet node: resumable) answers with what its
/// record says, as its permissions and its replay do. A closed session stays `404`, as in `qwen
/// serve` (`docs/protocol.md#34-get-sessionid`).
pub(super) async fn get_session(State(d): State<AppState>, PathParams(id): PathParams<String>) -> ApiResult {
    let s = match d.session(&id) {
        Ok(s) => s,
        Err(e) if d.store.durable() => {
            return match d.recorded_session(&id).await {
                Ok(Some(r)) if r.state == crate::store::SessionState::Dormant => {
                    Ok(Json(recorded(&r)).into_response())
                }
                _ => Err(e.into()),
            };
        }
        Err(e) => return Err(e.into()),
    };
    let mut out = summary(&s);
    out["state"] = json!("live");
    out["subscribers"] = json!(s.subscriber_count());
    out["pendingPrompts"] = json!(s.pending_prompt_count());
    Ok(Json(out).into_response())
}

/// A session of the history as `GET /session/:id` and the workspace list `?include=ended` show it.
fn recorded(r: &crate::store::SessionRecord) -> Value {
    json!({
        "sessionId": r.session_id,
        "workspaceCwd": r.workspace,
        "agent": r.agent,
        "createdAt": iso8601(r.created_at),
        "endedAt": r.ended_at.map(iso8601),
        "endReason": r.end_reason,
        "state": r.state.as_str(),
        "lastEventId": r.last_event_id,
    })
}

/// `GET /session/:id/context`: what `@qwen-code/sdk`'s `sessionContext()` reads — the models and
/// modes the agent reported at `session/new`, with the current ones as they are now.
pub(super) async fn session_context(
    State(d): State<AppState>,
    PathParams(id): PathParams<String>,
) -> ApiResult {
    let s = d.session(&id)?;
    let config_options = s.agent_result.get("configOptions").cloned().unwrap_or(Value::Null);
    Ok(Json(json!({
        "v": 1,
        "sessionId": s.id,
        "workspaceCwd": s.workspace.to_string_lossy(),
        "state": {"models": s.models(), "modes": s.modes(), "configOptions": config_options},
    }))
    .into_response())
}

pub(super) async fn delete_session(
    State(d): State<AppState>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
) -> ApiResult {
    let client = client_id(&headers)?;
    let s = d.session(&id)?;
    d.forget(&s);
    s.end(EndReason::Closed { closed_by: client });
    let _ = tokio::time::timeout(CLOSE_WAIT, s.finished()).await;
    tracing::info!(session_id = %id, "session closed");
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(super) async fn set_model(
    State(d): State<AppState>,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let s = d.session(&id)?;
    let model = body
        .get("modelId")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .ok_or(ApiError::Refused(Refusal::InvalidModelId))?;
    Ok(Json(s.set_model(model).await?).into_response())
}

/// `POST /session/:id/mode`: `{modeId}`, one of the modes the agent announced.
pub(super) async fn set_mode(
    State(d): State<AppState>,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let s = d.session(&id)?;
    let mode = match body.get("modeId") {
        Some(Value::String(m)) if !m.is_empty() => m.as_str(),
        other => {
            let shown = other.map_or_else(|| "(none)".to_owned(), Value::to_string);
            return Err(ApiError::Refused(Refusal::InvalidMode { mode: shown, available: s.mode_ids() }));
        }
    };
    Ok(Json(s.set_mode(mode).await?).into_response())
}

pub(super) async fn detach(
    State(d): State<AppState>,
    Extension(desk): Extension<std::sync::Arc<Desk>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
) -> ApiResult {
    let s = d.session(&id)?;
    desk.leave(&s, &caller.acting_as(client_id(&headers)?));
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(super) async fn heartbeat(
    State(d): State<AppState>,
    Extension(desk): Extension<std::sync::Arc<Desk>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
) -> ApiResult {
    let s = d.session(&id)?;
    let client = client_id(&headers)?.ok_or(ApiError::from(ClientIdProblem::Missing))?;
    let seen = desk.join(&s, &caller.acting_as(Some(client.clone()))).unwrap_or_default();
    Ok(Json(json!({"sessionId": s.id, "clientId": client, "lastSeenAt": seen})).into_response())
}

//! Handlers of the `permissions` tag: votes (on the session's route and the legacy one), the
//! pending list with its audit, and the session's rules (`docs/protocol.md#7-permission-rules`,
//! `docs/protocol.md#8-permission-mediation`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::extract::{AppState, Flags, JsonBody, PathParams, client_id};
use crate::clock::now_ms;
use crate::desk::{Caller, Desk, Refusal};
use crate::permission::{Vote, parse_rule};
use crate::present::{self, Bounds};

/// The vote a body asks for ([`Vote::parse`]), or `400 invalid_vote`.
fn parse_vote(body: &Value) -> Result<Vote, ApiError> {
    Vote::parse(body).ok_or(ApiError::Refused(Refusal::InvalidVote))
}

/// Step 1 and 2 of `docs/protocol.md#8-permission-mediation`: body shape, then client id format.
/// They come before the session is looked up, so a bad vote learns nothing about what exists.
fn vote_preamble(headers: &HeaderMap, body: &Value) -> Result<(Vote, Option<String>), ApiError> {
    let vote = parse_vote(body)?;
    let client = client_id(headers)?;
    Ok((vote, client))
}

pub(super) async fn vote(
    State(d): State<AppState>,
    Extension(desk): Extension<Arc<Desk>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    PathParams((id, request_id)): PathParams<(String, String)>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let (vote, client) = vote_preamble(&headers, &body)?;
    let s = d.session(&id)?;
    desk.vote(&s, &caller.acting_as(client), &request_id, &vote).await?;
    Ok(Json(json!({})).into_response())
}

pub(super) async fn legacy_vote(
    State(d): State<AppState>,
    Extension(desk): Extension<Arc<Desk>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    PathParams(request_id): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let (vote, client) = vote_preamble(&headers, &body)?;
    let s = d.session_with_request(&request_id)?;
    desk.vote(&s, &caller.acting_as(client), &request_id, &vote).await?;
    Ok(Json(json!({})).into_response())
}

/// `GET /session/{id}/permission/{requestId}[?all=1]`: a pending request as a person reads it
/// ([`crate::present`]): what the web app's card shows, bounded as a card unless `all`.
pub(super) async fn presented(
    State(d): State<AppState>,
    PathParams((id, request_id)): PathParams<(String, String)>,
    q: Flags,
) -> ApiResult {
    let s = d.session(&id)?;
    let request = s
        .permissions()
        .pending_request(&request_id)
        .ok_or(ApiError::Refused(Refusal::PermissionRequestNotFound))?;
    let bounds = if q.all() { Bounds::ALL } else { Bounds::CARD };
    let shown = present::request(
        request.get("toolCall").unwrap_or(&Value::Null),
        request.get("options").unwrap_or(&Value::Null),
        bounds,
    )
    .warned(&request);
    let mut body = serde_json::to_value(&shown).map_err(|e| {
        tracing::error!(error = %e, "GET /session/:id/permission/:request_id");
        ApiError::Refused(Refusal::Internal)
    })?;
    body["requestId"] = json!(request_id);
    body["sessionId"] = json!(id);
    Ok(Json(body).into_response())
}

pub(super) async fn list_permissions(
    State(d): State<AppState>,
    PathParams(id): PathParams<String>,
    q: Flags,
) -> ApiResult {
    // A session that is not live has nothing pending; with the durable store its decisions are
    // still listed (`docs/protocol.md#310-get-sessionidpermissions`).
    let live = d.session(&id);
    let pending = match &live {
        Ok(s) => json!(s.permissions().list_pending()),
        Err(e) if d.store.durable() => match d.recorded_session(&id).await {
            Ok(Some(_)) => json!([]),
            _ => return Err(e.clone().into()),
        },
        Err(e) => return Err(e.clone().into()),
    };
    let mut out = json!({"pending": pending});
    if q.audit() {
        let recorded = d.recorded_decisions(&id).await.map_err(|e| {
            tracing::error!(error = %e, "GET /session/:id/permissions?audit=1");
            ApiError::Refused(Refusal::Internal)
        })?;
        out["audit"] = match (recorded, &live) {
            (Some(decided), _) => json!(decided),
            (None, Ok(s)) => json!(s.permissions().audit()),
            (None, Err(_)) => json!([]),
        };
    }
    Ok(Json(out).into_response())
}

pub(super) async fn add_rule(
    State(d): State<AppState>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let s = d.session(&id)?;
    let client = client_id(&headers)?;
    let rule = parse_rule(&body, &s.workspace, client, now_ms())
        .map_err(|e| ApiError::Refused(Refusal::InvalidRule(e)))?;
    let wire = s.permissions().add_rule(rule)?;
    Ok((StatusCode::CREATED, Json(json!({"rule": wire}))).into_response())
}

pub(super) async fn list_rules(State(d): State<AppState>, PathParams(id): PathParams<String>) -> ApiResult {
    let s = d.session(&id)?;
    Ok(Json(json!({"rules": s.permissions().list_rules()})).into_response())
}

pub(super) async fn delete_rule(
    State(d): State<AppState>,
    PathParams((id, rule_id)): PathParams<(String, String)>,
) -> ApiResult {
    let s = d.session(&id)?;
    s.permissions().remove_rule(&rule_id)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

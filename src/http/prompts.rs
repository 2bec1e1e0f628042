//! Handlers of the `prompts` tag: queue a prompt (blocking, or `Prefer: respond-async`) and cancel
//! the running turn (`docs/protocol.md#3-routes`).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::extract::{AppState, JsonBody, PathParams, client_id};
use crate::desk::Refusal;
use crate::desk::{Caller, Desk};

/// Whether `Prefer` asks for `respond-async`.
fn respond_async(headers: &HeaderMap) -> bool {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|p| p.trim().eq_ignore_ascii_case("respond-async")))
}

pub(super) async fn prompt(
    State(d): State<AppState>,
    Extension(desk): Extension<std::sync::Arc<Desk>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let s = d.session_for_prompt(&id)?;
    let Value::Object(params) = body else { return Err(ApiError::Refused(Refusal::InvalidPrompt)) };
    if params.get("prompt").and_then(Value::as_array).is_none_or(|p| p.is_empty()) {
        return Err(ApiError::Refused(Refusal::InvalidPrompt));
    }
    let caller = caller.acting_as(client_id(&headers)?);
    if respond_async(&headers) {
        let accepted = desk.enqueue(&s, &caller, params, None)?;
        let body = json!({"promptId": accepted.prompt_id, "lastEventId": accepted.last_event_id});
        return Ok((StatusCode::ACCEPTED, Json(body)).into_response());
    }
    Ok(Json(desk.prompt(&s, &caller, params).await?).into_response())
}

pub(super) async fn cancel(State(d): State<AppState>, PathParams(id): PathParams<String>) -> ApiResult {
    let s = d.session(&id)?;
    s.cancel().await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

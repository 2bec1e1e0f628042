//! Handlers of the `prompts` tag: queue a prompt (blocking, or `Prefer: respond-async`) and cancel
//! the running turn (`docs/protocol.md#3-routes`).

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::ApiError;
use super::extract::{AppState, JsonBody, PathParams, client_id};
use crate::daemon::Prompt;

type ApiResult = Result<Response, ApiError>;

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
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let s = d.session_for_prompt(&id)?;
    let Value::Object(params) = body else { return Err(ApiError::InvalidPrompt) };
    if params.get("prompt").and_then(Value::as_array).is_none_or(|p| p.is_empty()) {
        return Err(ApiError::InvalidPrompt);
    }
    let client = client_id(&headers)?;
    if let Some(c) = &client {
        s.touch_client(c);
    }
    let prompt = Prompt { params, originator: client };
    if respond_async(&headers) {
        let accepted = s.enqueue(prompt)?;
        let body = json!({"promptId": accepted.prompt_id, "lastEventId": accepted.last_event_id});
        return Ok((StatusCode::ACCEPTED, Json(body)).into_response());
    }
    Ok(Json(s.prompt(prompt).await?).into_response())
}

pub(super) async fn cancel(State(d): State<AppState>, PathParams(id): PathParams<String>) -> ApiResult {
    let s = d.session(&id)?;
    s.cancel().await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

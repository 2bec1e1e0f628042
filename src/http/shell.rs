//! `POST /session/:id/shell` (`docs/protocol.md#9-session-shell`): the gates only. A command run by
//! the daemon itself, outside the agent's tool flow, is locked down: effective only with
//! `--enable-session-shell` AND a token, and only for a client id bound to the session. The daemon
//! floor runs what passes ([`crate::daemon::Daemon::run_shell`]). The command is never logged,
//! refused or not.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::{ApiError, ClientIdProblem};
use super::extract::{AppState, JsonBody, PathParams, client_id};
use crate::desk::Refusal;

/// Longest accepted command (`docs/protocol.md#9-session-shell`).
const MAX_COMMAND_BYTES: usize = 64 * 1024;

/// The checks run in the protocol's order: token configured, flag set, client id present and well
/// formed, session known, client bound to it, then the body.
pub(super) async fn run_shell(
    State(d): State<AppState>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    body: Result<JsonBody, ApiError>,
) -> Result<Response, ApiError> {
    if d.config.token_digest.is_none() {
        return Err(ApiError::TokenRequired);
    }
    if !d.config.enable_session_shell {
        return Err(ApiError::SessionShellDisabled);
    }
    let client = client_id(&headers)?.ok_or(ApiError::ClientIdRequired)?;
    let session = d.session(&id)?;
    if !session.has_client(&client) {
        return Err(ApiError::Refused(Refusal::InvalidClientId(ClientIdProblem::Unregistered)));
    }
    let JsonBody(body) =
        body.map_err(|e| if matches!(e, ApiError::BodyTooLarge) { e } else { ApiError::InvalidCommand })?;
    let command = match body.get("command") {
        Some(Value::String(c)) if !c.trim().is_empty() && c.len() <= MAX_COMMAND_BYTES => c.clone(),
        _ => return Err(ApiError::InvalidCommand),
    };
    let run = d.run_shell(&session, &client, &command).await;
    Ok(Json(json!({
        "shellId": run.shell_id, "exitCode": run.exit_code, "output": run.output, "aborted": run.aborted,
        "truncated": run.truncated,
    }))
    .into_response())
}

//! `POST /session/:id/shell` (SPEC §9): a command run by the daemon itself, outside the agent's
//! tool flow, so it is locked down: effective only with `--enable-session-shell` AND a token, and
//! only for a client id bound to the session. The command is never logged, refused or not.

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::extract::{JsonBody, valid_client_id};
use crate::routes::AppState;

/// Longest accepted command (SPEC §9).
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// Output kept per command (stdout and stderr interleaved); the rest is read and dropped.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// Read size when draining the command's output pipe.
const READ_CHUNK: usize = 64 * 1024;

pub async fn run_shell(
    State(d): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<JsonBody, ApiError>,
) -> Result<Response, ApiError> {
    if d.config.token_digest.is_none() {
        return Err(ApiError::TokenRequired);
    }
    if !d.config.enable_session_shell {
        return Err(ApiError::SessionShellDisabled);
    }
    let raw = headers.get("x-qwen-client-id").or_else(|| headers.get("x-client-id"));
    let client = match raw.map(|v| v.to_str()) {
        None => return Err(ApiError::ClientIdRequired),
        Some(Ok("")) => return Err(ApiError::ClientIdRequired),
        Some(Ok(c)) if valid_client_id(c) => c.to_owned(),
        Some(_) => return Err(ApiError::InvalidClientId),
    };
    let session = d.session(&id)?;
    if !session.has_client(&client) {
        return Err(ApiError::InvalidClientId);
    }
    let JsonBody(body) =
        body.map_err(|e| if matches!(e, ApiError::BodyTooLarge) { e } else { ApiError::InvalidCommand })?;
    let command = match body.get("command") {
        Some(Value::String(c)) if !c.trim().is_empty() && c.len() <= MAX_COMMAND_BYTES => c.clone(),
        _ => return Err(ApiError::InvalidCommand),
    };
    session.touch_client(&client);
    let shell_id = format!("shell-{}", uuid::Uuid::new_v4());
    session.publish(
        "user_shell_command",
        &json!({"sessionId": session.id, "shellId": shell_id, "command": command, "originatorClientId": client}),
    );
    let result = run_command(&command, &session.workspace, d.config.shell_timeout, &d).await;
    let (exit_code, output, truncated, aborted) = match result {
        Ok(r) => (r.exit_code, r.output, r.truncated, r.aborted),
        Err(e) => (None, format!("cannot run the command: {e}"), false, true),
    };
    tracing::info!(session_id = %session.id, shell_id = %shell_id, exit_code = ?exit_code, aborted, "session shell command finished");
    let result = json!({
        "sessionId": session.id, "shellId": shell_id, "exitCode": exit_code, "output": output,
        "aborted": aborted, "truncated": truncated,
    });
    session.publish("user_shell_result", &result);
    Ok(Json(json!({
        "shellId": shell_id, "exitCode": exit_code, "output": output, "aborted": aborted, "truncated": truncated,
    }))
    .into_response())
}

struct Outcome {
    exit_code: Option<i32>,
    output: String,
    truncated: bool,
    aborted: bool,
}

/// Runs `sh -c command` in its own process group; the group is killed on timeout or daemon drain.
async fn run_command(
    command: &str,
    cwd: &std::path::Path,
    timeout: Duration,
    d: &crate::daemon::Daemon,
) -> std::io::Result<Outcome> {
    let (reader, writer) = std::io::pipe()?;
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(writer.try_clone()?)
        .stderr(writer)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let pgid = child.id().map(|p| p as i32);
    if let Some(pgid) = pgid {
        d.pgids.lock().unwrap_or_else(|p| p.into_inner()).insert(pgid);
    }
    // The pipe's read end is blocking; drain it on a blocking thread until every writer is gone.
    let collector = tokio::task::spawn_blocking(move || collect_output(reader));
    let status = tokio::select! {
        status = child.wait() => Some(status?),
        _ = tokio::time::sleep(timeout) => None,
        _ = d.draining.cancelled() => None,
    };
    // Kill the whole group either way: a finished shell may have left background children that
    // hold the pipe open.
    if let Some(pgid) = pgid {
        crate::agent_process::kill_group_id(pgid);
        d.pgids.lock().unwrap_or_else(|p| p.into_inner()).remove(&pgid);
    }
    let status = match status {
        Some(s) => Some(s),
        None => {
            let _ = child.wait().await;
            None
        }
    };
    let (bytes, truncated) = collector.await.unwrap_or_default();
    Ok(Outcome {
        exit_code: status.and_then(|s| s.code()),
        output: String::from_utf8_lossy(&bytes).into_owned(),
        truncated,
        aborted: status.is_none(),
    })
}

fn collect_output(mut reader: std::io::PipeReader) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut truncated = false;
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        match reader.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_OUTPUT_BYTES - out.len();
                if n > room {
                    truncated = true;
                }
                out.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
    (out, truncated)
}

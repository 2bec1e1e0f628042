//! Running a session shell command (`docs/protocol.md#9-session-shell`), once the HTTP floor has
//! let it through its gates: the `user_shell_command` / `user_shell_result` events, and the command
//! itself, `sh -c` in the workspace, in its own process group, bounded in time and output. The
//! command is never logged.

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::session::Session;
use crate::config::SECRET_ENV;
use crate::event::EventKind;
use crate::exec::ProcessGroups;

/// Output kept per command (stdout and stderr interleaved); the rest is read and dropped.
const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// Read size when draining the command's output pipe.
const READ_CHUNK: usize = 64 * 1024;

/// What a shell command did.
#[derive(Debug, Clone)]
pub struct ShellOutcome {
    pub shell_id: String,
    /// `None` when it was killed (timeout, shutdown) or could not start.
    pub exit_code: Option<i32>,
    /// At most `MAX_OUTPUT_BYTES` (1 MiB) of stdout and stderr, interleaved, lossily UTF-8.
    pub output: String,
    pub truncated: bool,
    /// Killed (timeout, shutdown) or never started.
    pub aborted: bool,
}

/// Runs `command` for `client` on `session`, publishing the command and then its result. The group
/// is killed at `timeout` or when `stop` fires (the daemon drains).
pub(crate) async fn run(
    session: &Session,
    client: &str,
    command: &str,
    timeout: Duration,
    stop: &CancellationToken,
    groups: &ProcessGroups,
) -> ShellOutcome {
    session.touch_client(client);
    let shell_id = format!("shell-{}", uuid::Uuid::new_v4());
    session.publish(
        EventKind::UserShellCommand,
        &json!({"sessionId": session.id, "shellId": shell_id, "command": command, "originatorClientId": client}),
    );
    let (exit_code, output, truncated, aborted) =
        match run_command(command, &session.workspace, timeout, stop, groups).await {
            Ok(r) => (r.exit_code, r.output, r.truncated, r.aborted),
            Err(e) => (None, format!("cannot run the command: {e}"), false, true),
        };
    tracing::info!(session_id = %session.id, shell_id = %shell_id, exit_code = ?exit_code, aborted, "session shell command finished");
    session.publish(
        EventKind::UserShellResult,
        &json!({
            "sessionId": session.id, "shellId": shell_id, "exitCode": exit_code, "output": output,
            "aborted": aborted, "truncated": truncated,
        }),
    );
    ShellOutcome { shell_id, exit_code, output, truncated, aborted }
}

struct Finished {
    exit_code: Option<i32>,
    output: String,
    truncated: bool,
    aborted: bool,
}

/// Runs `sh -c command` in its own process group; the group is killed on timeout or when `stop`
/// fires, and in any case once the shell has exited.
async fn run_command(
    command: &str,
    cwd: &std::path::Path,
    timeout: Duration,
    stop: &CancellationToken,
    groups: &ProcessGroups,
) -> std::io::Result<Finished> {
    let (reader, writer) = std::io::pipe()?;
    let mut shell = tokio::process::Command::new("sh");
    shell
        .arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(writer.try_clone()?)
        .stderr(writer)
        .process_group(0)
        .kill_on_drop(true);
    for name in SECRET_ENV {
        shell.env_remove(name);
    }
    let mut child = shell.spawn()?;
    // The command keeps its copies of the pipe's write end: drop them, or the output never ends.
    drop(shell);
    let mut group = child.id().and_then(|pid| groups.register(pid));
    // The pipe's read end is blocking; drain it on a blocking thread until every writer is gone.
    let collector = tokio::task::spawn_blocking(move || collect_output(reader));
    let status = tokio::select! {
        status = child.wait() => Some(status?),
        _ = tokio::time::sleep(timeout) => None,
        _ = stop.cancelled() => None,
    };
    // Kill the whole group either way: a finished shell may have left background children that
    // hold the pipe open.
    if let Some(group) = &mut group {
        group.kill();
    }
    let status = match status {
        Some(s) => Some(s),
        None => {
            let _ = child.wait().await;
            None
        }
    };
    let (bytes, truncated) = collector.await.unwrap_or_default();
    Ok(Finished {
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

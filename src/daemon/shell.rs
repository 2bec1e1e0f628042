//! Running a session shell command (`docs/protocol.md#9-session-shell`), once the HTTP floor has
//! let it through its gates: the `user_shell_command` / `user_shell_result` events, and the command
//! itself, `sh -c` in the workspace behind the guard (`mediatord agent-guard`, the agents' own),
//! bounded in time and output, and confined like the session's agent (`agent::sandbox`: the
//! guard confines itself before it starts `sh`, with a private temporary directory of the
//! command's own). The command is never logged.
//!
//! The answer comes at the deadline whatever the command does: its output is read without blocking
//! under the same deadline, so a process that leaves the group (`setsid`) and keeps the pipe open
//! cannot hold the reply, nor the daemon's exit. Such a process is the guard's descendant: the guard
//! kills it when `sh` exits, and when the guard itself is killed at the deadline, the daemon (a
//! subreaper) kills it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use super::session::Session;
use crate::agent::sandbox;
use crate::config::{SECRET_ENV, SandboxSettings};
use crate::event::EventKind;
use crate::exec::ProcessGroups;

/// Output kept per command (stdout and stderr interleaved); the rest is read and dropped.
const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// Read size when draining the command's output pipe.
const READ_CHUNK: usize = 64 * 1024;
/// After the command is killed, how long what is still in the pipe is read before the reply goes
/// out anyway (the writers are dead; this only bounds the last read).
const OUTPUT_DRAIN_GRACE: Duration = Duration::from_millis(500);
/// After the group is killed, how long the guard gets to be reaped.
const KILL_WAIT: Duration = Duration::from_secs(2);

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

/// How a command is run: where the guard is, how long it may take, what stops it early.
#[derive(Debug)]
pub(crate) struct ShellLimits<'a> {
    /// The `mediatord` binary, which runs the guard.
    pub(crate) guard: &'a Path,
    pub(crate) timeout: Duration,
    /// Fired when the daemon drains.
    pub(crate) stop: &'a CancellationToken,
    pub(crate) groups: &'a ProcessGroups,
    /// The session's agent's sandbox: the shell writes where its agent may.
    pub(crate) sandbox: &'a SandboxSettings,
}

/// Runs `command` for `client` on `session`, publishing the command and then its result. The
/// command and everything it started is killed at the timeout or when the daemon drains.
pub(crate) async fn run(
    session: &Session,
    client: &str,
    command: &str,
    limits: &ShellLimits<'_>,
) -> ShellOutcome {
    session.register(client, super::session::Enrol::Voter);
    let shell_id = format!("shell-{}", uuid::Uuid::new_v4());
    session.publish(
        EventKind::UserShellCommand,
        &json!({"sessionId": session.id, "shellId": shell_id, "command": command, "originatorClientId": client}),
    );
    let (exit_code, output, truncated, aborted) = match run_command(command, &session.workspace, limits).await
    {
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

/// Runs `sh -c command` behind the guard in its own process group, reading its output under the
/// deadline; on the deadline or `stop`, kills the group and what escaped it.
async fn run_command(command: &str, cwd: &Path, limits: &ShellLimits<'_>) -> std::io::Result<Finished> {
    let (writer, mut reader) = tokio::net::unix::pipe::pipe()?;
    let writer = writer.into_blocking_fd()?;
    // Held until the command and its group are gone: its private temporary directory goes with it.
    let confined = sandbox::Prepared::new(limits.sandbox, sandbox::support(limits.guard), cwd)?;
    let mut shell = tokio::process::Command::new(limits.guard);
    shell
        .arg("agent-guard")
        .arg("--parent")
        .arg(std::process::id().to_string())
        .args(confined.guard_args())
        .arg("--")
        .arg("sh")
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
    let (mut child, mut group) = limits.groups.spawn(&mut shell)?;
    // The command keeps its copies of the pipe's write end: drop them, or the output never ends.
    drop(shell);
    let mut output = Output::default();
    let deadline = tokio::time::sleep(limits.timeout);
    tokio::pin!(deadline);
    let mut chunk = vec![0u8; READ_CHUNK];
    // Until every writer is gone (the guard exits after killing what the command left), or the
    // deadline, or the drain.
    let mut cut_short = loop {
        tokio::select! {
            biased;
            () = limits.stop.cancelled() => break true,
            () = &mut deadline => break true,
            read = reader.read(&mut chunk) => match read {
                Ok(0) | Err(_) => break false,
                Ok(n) => output.push(&chunk[..n]),
            },
        }
    };
    // The output can end before the command does (`exec >&-`): its exit is under the deadline too.
    let mut status = None;
    if !cut_short {
        tokio::select! {
            biased;
            () = limits.stop.cancelled() => cut_short = true,
            () = &mut deadline => cut_short = true,
            exited = child.wait() => status = Some(exited?),
        }
    }
    // Kill the whole group either way (after a normal exit it is already empty), reap the guard,
    // then what it could not take down with it.
    if let Some(group) = &mut group {
        group.kill();
    }
    if cut_short {
        let _ = tokio::time::timeout(KILL_WAIT, child.wait()).await;
    }
    if let Some(group) = &group {
        group.reap_strays().await;
    }
    if cut_short {
        let _ = tokio::time::timeout(OUTPUT_DRAIN_GRACE, async {
            while let Ok(n @ 1..) = reader.read(&mut chunk).await {
                output.push(&chunk[..n]);
            }
        })
        .await;
    }
    drop(confined);
    Ok(Finished {
        exit_code: status.and_then(|s| s.code()),
        output: String::from_utf8_lossy(&output.bytes).into_owned(),
        truncated: output.truncated,
        aborted: cut_short,
    })
}

/// The first `MAX_OUTPUT_BYTES` of the output, and whether more came.
#[derive(Debug, Default)]
struct Output {
    bytes: Vec<u8>,
    truncated: bool,
}

impl Output {
    fn push(&mut self, chunk: &[u8]) {
        let room = MAX_OUTPUT_BYTES - self.bytes.len();
        if chunk.len() > room {
            self.truncated = true;
        }
        self.bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
}

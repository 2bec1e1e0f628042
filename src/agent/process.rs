//! Spawning an agent: its own process group behind the guard (listed in the daemon's
//! [`ProcessGroups`]), piped stdio, stderr forwarded to the log with its tail kept for error
//! messages, and the whole group killed on drop. Confined (`super::sandbox`) unless the agent's
//! sandbox is off.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::redact::Redactor;
use super::sandbox;
use crate::config::{AgentCommand, SECRET_ENV, SandboxSettings};
use crate::exec::{ProcessGroup, ProcessGroups};
use crate::sync::lock;

/// How much of the agent's stderr is kept for error messages (the ACP rust-sdk keeps the same).
pub(crate) const STDERR_TAIL_BYTES: usize = 64 * 1024;
/// Longest stderr line forwarded to the log; longer lines are cut (the rest of the line is read
/// and dropped, never held).
const STDERR_LINE_MAX: usize = 8 * 1024;
/// How long an exit waits for the last of the agent's stderr once the agent and its group are
/// gone (the pipe then closes at once; a holder that escaped the group would keep it open).
const STDERR_DRAIN_WAIT: Duration = Duration::from_secs(2);

/// The last bytes the agent wrote to stderr.
#[derive(Debug, Clone, Default)]
pub(crate) struct StderrTail(Arc<Mutex<VecDeque<u8>>>);

impl StderrTail {
    fn push_line(&self, line: &str) {
        // Await-free and short: a std mutex is right here.
        let mut buf = lock(&self.0);
        buf.extend(line.as_bytes());
        buf.push_back(b'\n');
        let excess = buf.len().saturating_sub(STDERR_TAIL_BYTES);
        buf.drain(..excess);
    }

    /// The last few lines, for an error message (at most `max` bytes, cut at a line start).
    pub(crate) fn last_lines(&self, max: usize) -> String {
        let buf = lock(&self.0);
        let bytes: Vec<u8> = buf.iter().copied().collect();
        drop(buf);
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim_end();
        if text.len() <= max {
            return text.to_owned();
        }
        let mut start = text.len() - max;
        while !text.is_char_boundary(start) {
            start += 1;
        }
        let cut = &text[start..];
        cut.split_once('\n').map_or(cut, |(_, rest)| rest).to_owned()
    }
}

/// A running agent. Dropping it kills the agent's whole process group.
#[derive(Debug)]
pub(crate) struct AgentProcess {
    pub(crate) child: Child,
    pub(crate) pid: u32,
    /// The guard's group (the guard leads it; the agent and its children are in it).
    group: Option<ProcessGroup>,
    pub(crate) stderr_tail: StderrTail,
    /// The stderr forwarder: done once it has read the pipe to its end.
    stderr_read: tokio::task::JoinHandle<()>,
    /// The confinement's private temporary directory: dropped (removed) after `group` (killed).
    _sandbox: sandbox::Prepared,
}

/// The agent's stdio ends the daemon keeps.
#[derive(Debug)]
pub(crate) struct AgentPipes {
    pub(crate) stdin: ChildStdin,
    pub(crate) stdout: ChildStdout,
}

/// Why the agent program cannot be run, in words a newcomer can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    #[error("agent program {0:?} not found (is it installed and on PATH?)")]
    NotFound(String),
    #[error(
        "agent program {} exists but is not executable (chmod +x it, or name its interpreter, e.g. --agent 'node {}')",
        .0.display(), .0.display()
    )]
    NotExecutable(PathBuf),
    #[error("agent program {} is a directory", .0.display())]
    Directory(PathBuf),
}

/// Finds `program` the way a shell would: a path with a slash as is, else the first executable
/// file of that name on `PATH`. A file that is there but not executable is reported as such.
pub fn resolve_program(program: &str) -> Result<PathBuf, ProgramError> {
    use std::os::unix::fs::PermissionsExt;
    let check = |p: PathBuf| match p.metadata() {
        Err(_) => Err(ProgramError::NotFound(program.to_owned())),
        Ok(m) if m.is_dir() => Err(ProgramError::Directory(p)),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Err(ProgramError::NotExecutable(p)),
        Ok(_) => Ok(p),
    };
    if program.contains('/') {
        return check(PathBuf::from(program));
    }
    let mut first_problem = None;
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        match check(dir.join(program)) {
            Ok(p) => return Ok(p),
            Err(ProgramError::NotFound(_)) => {}
            Err(e) => {
                first_problem.get_or_insert(e);
            }
        }
    }
    Err(first_problem.unwrap_or_else(|| ProgramError::NotFound(program.to_owned())))
}

/// Starts `cmd` in `cwd` behind the guard, as the leader of a new process group listed in `groups`,
/// with `env` set on top of the daemon's environment, confined as `confinement` says. Its stderr
/// lines reach the log and the tail with `redactor`'s secrets replaced.
pub(crate) fn spawn(
    cmd: &AgentCommand,
    env: &[(String, String)],
    cwd: &Path,
    groups: &ProcessGroups,
    confinement: &SandboxSettings,
    redactor: Redactor,
) -> io::Result<(AgentProcess, AgentPipes)> {
    let program = resolve_program(&cmd.program).map_err(|e| io::Error::new(io::ErrorKind::NotFound, e))?;
    let confined = sandbox::Prepared::new(confinement, sandbox::support(&cmd.guard), cwd)?;
    let mut command = tokio::process::Command::new(&cmd.guard);
    command
        .arg("agent-guard")
        .arg("--parent")
        .arg(std::process::id().to_string())
        .args(confined.guard_args())
        .args(confined.is_confined().then_some("--explain-denials"))
        .arg("--")
        .arg(&program)
        .args(&cmd.args)
        .current_dir(cwd)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    for name in SECRET_ENV {
        command.env_remove(name);
    }
    // Listed as it is spawned: the guard's drop kills the group on every error path after this.
    let (mut child, group) = groups.spawn(&mut command)?;
    let pid = child.id().ok_or_else(|| io::Error::other("agent exited at once"))?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(io::Error::other("agent stdio was not piped"));
    };
    widen_pipe(&stdout);
    let tail = StderrTail::default();
    let forward_tail = tail.clone();
    let workspace = cwd.display().to_string();
    let stderr_read = tokio::spawn(async move {
        let mut reader = BufReader::new(stderr);
        let mut buf = Vec::with_capacity(256);
        loop {
            buf.clear();
            match (&mut reader).take(STDERR_LINE_MAX as u64).read_until(b'\n', &mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let cut = buf.last() != Some(&b'\n') && buf.len() == STDERR_LINE_MAX;
            if cut && skip_line(&mut reader).await.is_err() {
                break;
            }
            let line = String::from_utf8_lossy(&buf);
            let line = line.trim_end();
            let line = if cut { redactor.redact_cut(line) } else { redactor.redact(line) };
            tracing::info!(target: "mediatord::agent", pid, workspace = %workspace, "{line}");
            forward_tail.push_line(&line);
        }
    });
    Ok((
        AgentProcess { child, pid, group, stderr_tail: tail, stderr_read, _sandbox: confined },
        AgentPipes { stdin, stdout },
    ))
}

/// The capacity asked for the agent's stdout pipe, four times Linux's default of 64 KiB: a
/// streaming agent writes ahead while the reader works through what it read, so both sleep and
/// wake less often (the one-stream relay ran about a fifth faster, `docs/benchmarks.md`; 512 KiB
/// and 1 MiB did little more). The kernel charges it to the user's pipe pages
/// (`fs.pipe-user-pages-soft`, 64 MiB by default: 256 agents at this size).
pub(crate) const AGENT_STDOUT_PIPE_BYTES: usize = 256 * 1024;

/// Asks for [`AGENT_STDOUT_PIPE_BYTES`] on the agent's stdout. Only a speed-up: refused (over
/// `fs.pipe-max-size`, or the user's pipe pages spent), the pipe keeps its size and works the same.
/// Public for the benchmark's direct-stdio reader, which reads the agent through the same pipe.
pub fn widen_pipe(stdout: &ChildStdout) {
    if let Err(e) = rustix::pipe::fcntl_setpipe_size(stdout, AGENT_STDOUT_PIPE_BYTES) {
        tracing::debug!(error = %e, "the agent's stdout pipe keeps its default size");
    }
}

/// A helper program the daemon keeps beside its agents (a reviewer, `crate::review`), started as
/// an agent is: behind the guard, in a group of its own listed in the daemon's [`ProcessGroups`],
/// confined, with the daemon's secrets out of its environment. Dropping it kills its whole group.
#[derive(Debug)]
pub struct Helper {
    process: AgentProcess,
}

impl Helper {
    /// Starts `cmd` in `cwd`; its stdin and stdout are the daemon's to speak to it.
    pub fn spawn(
        cmd: &AgentCommand,
        cwd: &Path,
        groups: &ProcessGroups,
        confinement: &SandboxSettings,
    ) -> io::Result<(Helper, ChildStdin, ChildStdout)> {
        let (process, pipes) = spawn(cmd, &[], cwd, groups, confinement, Redactor::new(&[]))?;
        Ok((Helper { process }, pipes.stdin, pipes.stdout))
    }

    /// Its process id (the guard's).
    pub fn pid(&self) -> u32 {
        self.process.pid
    }

    /// The last lines it wrote to stderr, for a message about why it stopped.
    pub fn stderr_tail(&self) -> String {
        self.process.stderr_tail.last_lines(1024)
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.process.kill_group();
    }
}

/// Reads and drops the rest of a line (through its `\n`, or to the end of the stream).
async fn skip_line(reader: &mut (impl AsyncBufRead + Unpin)) -> io::Result<()> {
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(());
        }
        match memchr::memchr(b'\n', buf) {
            Some(at) => {
                reader.consume(at + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    }
}

impl AgentProcess {
    /// Waits (at most [`STDERR_DRAIN_WAIT`]) until the forwarder has read the agent's stderr to its
    /// end, so an exit's message quotes its last lines: the guard writes its hint about a refused
    /// write after the agent exits, and the reap can come before the forwarder has read it.
    pub(crate) async fn stderr_drained(&mut self) {
        let _ = tokio::time::timeout(STDERR_DRAIN_WAIT, &mut self.stderr_read).await;
    }

    /// Kills the whole group at once (only the first call does anything) and unlists it.
    pub(crate) fn kill_group(&mut self) {
        if let Some(group) = &mut self.group {
            group.kill();
        }
    }

    /// Once the guard is reaped: kills what it could not (a killed guard hands its descendants to
    /// the daemon).
    pub(crate) async fn reap_strays(&self) {
        if let Some(group) = &self.group {
            group.reap_strays().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_agents_stdout_pipe_is_widened() {
        let mut child = tokio::process::Command::new("sleep")
            .arg("30")
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("sleep starts");
        let stdout = child.stdout.take().expect("piped");
        widen_pipe(&stdout);
        assert_eq!(rustix::pipe::fcntl_getpipe_size(&stdout).ok(), Some(AGENT_STDOUT_PIPE_BYTES));
    }
}

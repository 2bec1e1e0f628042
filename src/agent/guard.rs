//! The guard process between the daemon and a command it starts (an agent, or a session shell
//! command), so nothing the command starts outlives it, or the daemon.
//!
//! `mediatord agent-guard --parent <pid> -- <argv>` runs as the leader of the command's process group
//! (the daemon made it one), makes itself a child subreaper, starts the command with inherited stdio,
//! and waits on two pidfds: the command's and the daemon's. Because it is a subreaper, whatever the
//! command starts stays its descendant even after leaving the group (`setsid`, a double fork): an
//! orphan is handed to the guard, not to init. When the command exits, the guard kills every
//! descendant left (background jobs, escapees), then exits the same way as the command (same code,
//! or the same signal), so the daemon sees the real exit status. If the daemon goes away — even by
//! SIGKILL, where no cleanup code of the daemon runs — the guard kills every descendant and the whole
//! group. Everything here is safe Rust: pidfds replace signal handlers and `pre_exec`.
//!
//! With `--confine` the guard confines itself ([`super::sandbox::confine`]) once its pidfds and
//! subreaper are set up, and before it starts the command, which inherits the domain with every
//! process it starts. Under it the guard still does its whole job: polling pidfds, `waitpid` and
//! reading `/proc` are not writes, and every process it signals (its own group, its descendants)
//! is in its domain or a nested one, which Landlock's signal scope allows.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};

use rustix::event::{PollFd, PollFlags, poll};

use super::sandbox::{self, ConfineArgs, EXIT_CONFINE_FAILED};
use crate::exec::kill_and_reap_descendants;
use rustix::process::{
    Pid, PidfdFlags, Signal, getpgrp, getpid, getppid, kill_process, kill_process_group, pidfd_open,
};

/// `mediatord agent-guard`'s arguments (hidden from `--help`: only the daemon runs it).
#[derive(Debug, clap::Args)]
pub struct GuardArgs {
    /// The daemon's pid: the guard kills the agent's process group when it is gone.
    #[arg(long)]
    pub parent: i32,
    /// Kernel confinement of the command (`agent::sandbox`).
    #[command(flatten)]
    pub sandbox: ConfineArgs,
    /// When the confined command fails, say on stderr how a refused write shows and what to do
    /// about it (for agents, whose stderr tail reaches the client; not for shell commands, whose
    /// output is the user's).
    #[arg(long)]
    pub explain_denials: bool,
    /// The agent program and its arguments.
    #[arg(last = true, required = true)]
    pub argv: Vec<String>,
}

/// Exit code when the agent program cannot be started (the shell's convention for "not found").
pub const EXIT_SPAWN_FAILED: i32 = 127;

/// Runs the guard; returns the exit code to use when the agent exited normally.
pub fn run(args: GuardArgs) -> i32 {
    let Some(parent) = Pid::from_raw(args.parent) else {
        let _ = writeln!(std::io::stderr(), "agent-guard: invalid --parent");
        return 2;
    };
    let parent_fd = match pidfd_open(parent, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(_) => return 1, // the daemon is already gone: start nothing
    };
    // The daemon could have died between fork and pidfd_open; then we were reparented.
    if getppid() != Some(parent) {
        return 1;
    }
    // Before the command starts, so not even its first fork can escape to init.
    if let Err(e) = rustix::process::set_child_subreaper(Some(getpid())) {
        let _ = writeln!(std::io::stderr(), "agent-guard: cannot become a subreaper: {e}");
    }
    let (program, rest) = match args.argv.split_first() {
        Some(split) => split,
        None => return 2,
    };
    let mut command = Command::new(program);
    command.args(rest);
    if let Err(e) = sandbox::confine(&args.sandbox, &mut command) {
        let _ =
            writeln!(std::io::stderr(), "agent-guard: cannot confine {program:?}, so it is not started: {e}");
        return EXIT_CONFINE_FAILED;
    }
    let explain = args.sandbox.confine && args.explain_denials;
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "cannot start agent {program:?}: {e}");
            return EXIT_SPAWN_FAILED;
        }
    };
    let child_pid = Pid::from_raw(child.id() as i32);
    let child_fd = match child_pid.map(|p| pidfd_open(p, PidfdFlags::empty())) {
        Some(Ok(fd)) => fd,
        _ => {
            // Without a pidfd we can still block on the child; the daemon's group kill remains.
            let status = child.wait();
            kill_and_reap_descendants();
            return exit_code(status, explain);
        }
    };
    loop {
        let mut fds = [PollFd::new(&parent_fd, PollFlags::IN), PollFd::new(&child_fd, PollFlags::IN)];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break,
        }
        if !fds[0].revents().is_empty() {
            // The daemon is gone: take every descendant and the whole group down, ourselves last.
            kill_and_reap_descendants();
            let _ = kill_process_group(getpgrp(), Signal::KILL);
            return 1;
        }
        if !fds[1].revents().is_empty() {
            break;
        }
    }
    let status = child.wait();
    // The command is gone; what it left running goes with it.
    kill_and_reap_descendants();
    exit_code(status, explain)
}

/// Appended to a confined agent's stderr when it fails, so the error a client sees says where to
/// look when the cause was a refused write.
const DENIAL_HINT: &str = "mediatord: the agent ran confined (sandbox: workspace): it may write only in its \
workspace, its sandbox.writable paths and its private TMPDIR; a write elsewhere fails with EACCES \
(\"Permission denied\"). If that is why it failed, add the path it names to the agent's \
sandbox.writable in the config file (or --sandbox-writable), or run with --sandbox off \
(docs/operations.md#the-sandbox)";

fn exit_code(status: std::io::Result<ExitStatus>, explain: bool) -> i32 {
    let Ok(status) = status else { return 1 };
    if explain && !status.success() {
        let _ = writeln!(std::io::stderr(), "{DENIAL_HINT}");
    }
    if let Some(code) = status.code() {
        return code;
    }
    if let Some(signal) = status.signal().and_then(named_signal) {
        // Re-raise so the daemon sees the agent's signal. No handlers are installed here, so the
        // default action (terminate) applies.
        let _ = kill_process(getpid(), signal);
    }
    128 + status.signal().unwrap_or(0)
}

/// rustix only builds `Signal` values safely from its named constants.
fn named_signal(raw: i32) -> Option<Signal> {
    [
        Signal::HUP,
        Signal::INT,
        Signal::QUIT,
        Signal::ILL,
        Signal::TRAP,
        Signal::ABORT,
        Signal::BUS,
        Signal::FPE,
        Signal::KILL,
        Signal::USR1,
        Signal::SEGV,
        Signal::USR2,
        Signal::PIPE,
        Signal::ALARM,
        Signal::TERM,
    ]
    .into_iter()
    .find(|s| s.as_raw() == raw)
}

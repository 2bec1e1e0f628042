//! The guard process between the daemon and an agent, so no agent outlives the daemon.
//!
//! `mediatord agent-guard --parent <pid> -- <agent argv>` runs in the agent's process group (the
//! daemon made it the group leader), starts the agent with inherited stdio, and waits on two pidfds:
//! the agent's and the daemon's. If the daemon goes away — even by SIGKILL, where no cleanup code of
//! the daemon runs — the guard kills the whole group, wrappers' grandchildren included. If the agent
//! exits, the guard exits the same way (same code, or the same signal), so the daemon sees the agent's
//! real exit status. Everything here is safe Rust: pidfds replace signal handlers and `pre_exec`.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};

use rustix::event::{PollFd, PollFlags, poll};
use rustix::process::{
    Pid, PidfdFlags, Signal, getpgrp, getpid, getppid, kill_process, kill_process_group, pidfd_open,
};

/// `mediatord agent-guard`'s arguments (hidden from `--help`: only the daemon runs it).
#[derive(Debug, clap::Args)]
pub struct GuardArgs {
    /// The daemon's pid: the guard kills the agent's process group when it is gone.
    #[arg(long)]
    pub parent: i32,
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
    let (program, rest) = match args.argv.split_first() {
        Some(split) => split,
        None => return 2,
    };
    let mut child = match Command::new(program).args(rest).spawn() {
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
            return exit_code(child.wait());
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
            // The daemon is gone: take the whole group down, ourselves included.
            let _ = kill_process_group(getpgrp(), Signal::KILL);
            return 1;
        }
        if !fds[1].revents().is_empty() {
            break;
        }
    }
    exit_code(child.wait())
}

fn exit_code(status: std::io::Result<ExitStatus>) -> i32 {
    let Ok(status) = status else { return 1 };
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

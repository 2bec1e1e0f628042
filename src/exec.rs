//! Process groups the daemon starts (each agent behind its guard, each session shell command), and
//! how a process ended.
//!
//! One owner: [`ProcessGroups`] is the daemon's list of live groups. Whoever starts a group
//! registers it and holds the [`ProcessGroup`] guard, which kills the group once and leaves the
//! list when it is dropped; the second shutdown signal kills every group still listed
//! ([`ProcessGroups::kill_all`]) without asking the owners. A leaf: it imports nothing.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rustix::process::{Pid, Signal, kill_process_group};

/// Every live process group the daemon started. Cloning shares the list.
#[derive(Debug, Clone, Default)]
pub struct ProcessGroups(Arc<Mutex<HashSet<i32>>>);

impl ProcessGroups {
    /// Lists the group led by `leader` (a child started with `process_group(0)`); the guard kills
    /// the group and unlists it when dropped. `None` for a pid that cannot be a group id.
    pub fn register(&self, leader: u32) -> Option<ProcessGroup> {
        let pgid = Pid::from_raw(i32::try_from(leader).ok()?)?;
        crate::sync::lock(&self.0).insert(pgid.as_raw_pid());
        Some(ProcessGroup { pgid: Some(pgid), groups: self.clone() })
    }

    /// The second signal: SIGKILL every listed group now (the process exits right after).
    pub fn kill_all(&self) {
        let pgids: Vec<i32> = crate::sync::lock(&self.0).iter().copied().collect();
        for pgid in pgids.into_iter().filter_map(Pid::from_raw) {
            let _ = kill_process_group(pgid, Signal::KILL);
        }
    }

    /// How many groups are listed.
    pub fn len(&self) -> usize {
        crate::sync::lock(&self.0).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A listed process group. Killed at most once: after its leader is reaped the id may be reused,
/// so the guard forgets it as it kills.
#[derive(Debug)]
pub struct ProcessGroup {
    /// `None` once killed.
    pgid: Option<Pid>,
    groups: ProcessGroups,
}

impl ProcessGroup {
    /// The group id, until the group is killed.
    pub fn id(&self) -> Option<i32> {
        self.pgid.map(Pid::as_raw_pid)
    }

    /// SIGKILLs the whole group (leader, wrappers' grandchildren, background jobs) and unlists it.
    pub fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            let _ = kill_process_group(pgid, Signal::KILL);
            crate::sync::lock(&self.groups.0).remove(&pgid.as_raw_pid());
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How a process ended: its exit code, or the signal that killed it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitInfo {
    pub fn from_status(status: Option<std::process::ExitStatus>) -> ExitInfo {
        use std::os::unix::process::ExitStatusExt;
        ExitInfo { code: status.and_then(|s| s.code()), signal: status.and_then(|s| s.signal()) }
    }

    /// The signal's `SIGKILL`-style name (`session_died.signalCode` is a string in the SDK).
    pub fn signal_name(&self) -> Option<String> {
        self.signal.map(signal_name)
    }
}

fn signal_name(signal: i32) -> String {
    let name = match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return format!("SIG{signal}"),
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::Stdio;

    use super::*;

    fn sleeper() -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("30")
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn sleep")
    }

    #[test]
    fn a_group_is_listed_until_its_guard_kills_it() {
        let groups = ProcessGroups::default();
        let mut child = sleeper();
        let mut group = groups.register(child.id()).expect("a group id");
        assert_eq!(groups.len(), 1);
        group.kill();
        assert!(groups.is_empty());
        assert_eq!(child.wait().expect("reaped").signal(), Some(9));
        assert_eq!(group.id(), None, "killed once, then forgotten");
    }

    #[test]
    fn dropping_the_guard_kills_and_unlists() {
        let groups = ProcessGroups::default();
        let mut child = sleeper();
        drop(groups.register(child.id()));
        assert!(groups.is_empty());
        assert_eq!(ExitInfo::from_status(child.wait().ok()).signal_name().as_deref(), Some("SIGKILL"));
    }

    #[test]
    fn kill_all_kills_every_listed_group() {
        let groups = ProcessGroups::default();
        let mut children = [sleeper(), sleeper()];
        let guards: Vec<_> = children.iter().map(|c| groups.register(c.id()).expect("id")).collect();
        groups.kill_all();
        assert_eq!(groups.len(), 2, "kill_all leaves the list to the owners");
        // Dropped before the children are reaped, so no group id can have been reused yet.
        drop(guards);
        assert!(groups.is_empty());
        for child in &mut children {
            assert_eq!(ExitInfo::from_status(child.wait().ok()).signal, Some(9));
        }
    }
}

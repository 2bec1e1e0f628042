//! Process groups the daemon starts (each agent's and each session shell command's, both led by
//! the guard, `mediatord agent-guard`), the processes that escape them, and how a process ended.
//!
//! One owner: [`ProcessGroups`] is the daemon's list of the groups it started. Whoever starts a
//! group does it through [`ProcessGroups::spawn`] and holds the [`ProcessGroup`] guard, which kills
//! the group once and leaves the list when it is dropped; the second shutdown signal kills every
//! group still listed ([`ProcessGroups::kill_all`]) without asking the owners.
//!
//! A process can leave its group (`setsid`, a double fork). Every guard is a child subreaper and
//! kills every descendant it has when its command ends, so escapees die with the command. When the
//! guard itself is killed, its descendants are handed to the nearest subreaper above it: the daemon,
//! once [`ProcessGroups::adopt_orphans`] has made it one, which then kills them
//! ([`ProcessGroups::sweep_strays`]): any child of the daemon that it did not start is one of them.
//!
//! A leaf: it imports only `sync`.

use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rustix::process::{Pid, Signal, WaitOptions, kill_process, kill_process_group, waitpid};

/// Every live process group the daemon started, and every child it started and has not reaped yet.
/// Cloning shares the list.
#[derive(Debug, Clone, Default)]
pub struct ProcessGroups(Arc<Groups>);

#[derive(Debug, Default)]
struct Groups {
    /// Await-free critical sections only (a spawn, set operations).
    table: Mutex<Table>,
    /// Set once the daemon is a child subreaper: only then are its unknown children its business.
    reaper: AtomicBool,
}

#[derive(Debug, Default)]
struct Table {
    /// Groups not killed yet (what the second signal kills).
    live: HashSet<i32>,
    /// Children started here whose owner has not let go of them (they may not be reaped by anyone
    /// else, or the owner would lose their exit status).
    owned: HashSet<i32>,
}

impl ProcessGroups {
    /// Spawns `command` (set up with `process_group(0)`) as the leader of a new listed group. The
    /// table is locked across the spawn, so a concurrent sweep never takes the new child for a
    /// stray.
    pub fn spawn(
        &self,
        command: &mut tokio::process::Command,
    ) -> io::Result<(tokio::process::Child, Option<ProcessGroup>)> {
        let mut table = crate::sync::lock(&self.0.table);
        let child = command.spawn()?;
        let group = child.id().and_then(|pid| self.list(&mut table, pid));
        Ok((child, group))
    }

    /// Lists the group led by `leader` (a child started with `process_group(0)`); the guard kills
    /// the group and unlists it when dropped. `None` for a pid that cannot be a group id.
    pub fn register(&self, leader: u32) -> Option<ProcessGroup> {
        let mut table = crate::sync::lock(&self.0.table);
        self.list(&mut table, leader)
    }

    fn list(&self, table: &mut Table, leader: u32) -> Option<ProcessGroup> {
        let pgid = Pid::from_raw(i32::try_from(leader).ok()?)?;
        table.live.insert(pgid.as_raw_pid());
        table.owned.insert(pgid.as_raw_pid());
        Some(ProcessGroup { pgid, killed: false, groups: self.clone() })
    }

    /// Makes this process a child subreaper: processes that escape a killed guard's group are
    /// handed to it instead of to init, and [`ProcessGroups::sweep_strays`] kills them.
    pub fn adopt_orphans(&self) -> io::Result<()> {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
        self.0.reaper.store(true, Ordering::Release);
        Ok(())
    }

    /// Kills and reaps this process's children that nobody here started: the descendants of a
    /// guard that was killed before it could kill them. Returns whether any was still running (they
    /// die asynchronously: call again to reap them). Does nothing unless [`adopt_orphans`] ran
    /// (then this process's other children, say a test harness's, are not its to kill).
    ///
    /// [`adopt_orphans`]: ProcessGroups::adopt_orphans
    pub fn sweep_strays(&self) -> bool {
        if !self.0.reaper.load(Ordering::Acquire) {
            return false;
        }
        let me = rustix::process::getpid().as_raw_pid();
        let table = crate::sync::lock(&self.0.table);
        let mut running = false;
        for pid in children_of(me).into_iter().filter(|pid| !table.owned.contains(pid)) {
            let Some(pid) = Pid::from_raw(pid) else { continue };
            // Our child, not reaped yet: its pid cannot have been reused.
            let _ = kill_process(pid, Signal::KILL);
            if !matches!(waitpid(Some(pid), WaitOptions::NOHANG), Ok(Some(_))) {
                running = true;
            }
        }
        running
    }

    /// The second signal (or a panic): SIGKILL every listed group now and, once the daemon is a
    /// subreaper, every process below it (what escaped a group is still a guard's descendant). It
    /// does not wait: the process exits right after.
    pub fn kill_all(&self) {
        let pgids: Vec<i32> = crate::sync::lock(&self.0.table).live.iter().copied().collect();
        for pgid in pgids.into_iter().filter_map(Pid::from_raw) {
            let _ = kill_process_group(pgid, Signal::KILL);
        }
        if self.0.reaper.load(Ordering::Acquire) {
            let me = rustix::process::getpid().as_raw_pid();
            // Again, for what forked while the first pass ran.
            for _ in 0..KILL_ALL_PASSES {
                for pid in descendants_of(me).into_iter().filter_map(Pid::from_raw) {
                    let _ = kill_process(pid, Signal::KILL);
                }
            }
        }
    }

    /// How many groups are listed and not killed yet.
    pub fn len(&self) -> usize {
        crate::sync::lock(&self.0.table).live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Pause between sweeps while strays die, and how many sweeps: half a second at most.
const SWEEP_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);
const MAX_SWEEPS: u32 = 50;
/// Passes over the process tree when everything is killed at once.
const KILL_ALL_PASSES: u32 = 3;

/// A listed process group. Killed at most once: after its leader is reaped the id may be reused,
/// so the guard forgets it as it kills. It stays owned until dropped (its owner reaps the leader
/// first).
#[derive(Debug)]
pub struct ProcessGroup {
    pgid: Pid,
    killed: bool,
    groups: ProcessGroups,
}

impl ProcessGroup {
    /// The group id, until the group is killed.
    pub fn id(&self) -> Option<i32> {
        (!self.killed).then(|| self.pgid.as_raw_pid())
    }

    /// Sweeps (bounded: half a second, [`ProcessGroups::sweep_strays`]) until the strays seen are
    /// dead and reaped and no process is left in this group. For an owner that has just killed the
    /// group and reaped its guard, whose orphans are now this process's children. A member the
    /// SIGKILL has not taken down yet may still be the parent of a process that left the group:
    /// that one is handed to the daemon only when the member exits, so a sweep that stopped at the
    /// first look finding no stray let the escapee outlive its command (seen on a loaded machine).
    pub async fn reap_strays(&self) {
        for _ in 0..MAX_SWEEPS {
            // The group is tested first: a member that exits between the two is swept now.
            let members = rustix::process::test_kill_process_group(self.pgid).is_ok();
            if !self.groups.sweep_strays() && !members {
                return;
            }
            tokio::time::sleep(SWEEP_PAUSE).await;
        }
    }

    /// SIGKILLs the whole group (leader, wrappers' grandchildren, background jobs) and unlists it.
    pub fn kill(&mut self) {
        if !self.killed {
            self.killed = true;
            let _ = kill_process_group(self.pgid, Signal::KILL);
            crate::sync::lock(&self.groups.0.table).live.remove(&self.pgid.as_raw_pid());
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
        crate::sync::lock(&self.groups.0.table).owned.remove(&self.pgid.as_raw_pid());
    }
}

/// Every process as (pid, parent pid), from `/proc`.
fn process_table() -> Vec<(i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid …`; the command name may itself hold `)`.
            let (_, rest) = stat.rsplit_once(')')?;
            let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect()
}

/// The children of `parent`.
pub fn children_of(parent: i32) -> Vec<i32> {
    process_table().into_iter().filter(|(_, ppid)| *ppid == parent).map(|(pid, _)| pid).collect()
}

/// Every descendant of `root` (children, their children, …).
pub fn descendants_of(root: i32) -> Vec<i32> {
    let table = process_table();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(table.iter().filter(|(_, ppid)| *ppid == parent).map(|(pid, _)| *pid));
        i += 1;
    }
    found.remove(0);
    found
}

/// For a guard, which is a child subreaper: SIGKILLs every descendant and reaps them all, until it
/// has no child left. Orphans are handed to the guard as their parents die, so when `waitpid` has
/// nothing more to wait for, no descendant is left anywhere. Blocking.
pub fn kill_and_reap_descendants() {
    let me = rustix::process::getpid().as_raw_pid();
    loop {
        for pid in descendants_of(me).into_iter().filter_map(Pid::from_raw) {
            let _ = kill_process(pid, Signal::KILL);
        }
        if !matches!(waitpid(None, WaitOptions::empty()), Ok(Some(_))) {
            return;
        }
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

    /// A member of the group still alive when the sweep starts: the sweep goes on until the member
    /// is gone (here the test kills and reaps it, as the SIGKILL and the daemon's sweep do), not
    /// only until the strays already handed over are, and ends at its next look once it is.
    #[tokio::test(start_paused = true)]
    async fn reaping_strays_waits_until_the_group_is_empty() {
        use std::future::Future;
        let groups = ProcessGroups::default();
        let mut member = sleeper();
        let group = groups.register(member.id()).expect("a group id");
        let mut sweep = std::pin::pin!(group.reap_strays());
        let first = sweep.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        assert!(first.is_pending(), "the sweep ended while the group still had a process");
        member.kill().expect("kill");
        assert_eq!(member.wait().expect("reaped").signal(), Some(9));
        // The runtime's clock is paused: it moves only by the sweep's pauses.
        let reaped = tokio::time::Instant::now();
        sweep.await;
        assert!(
            reaped.elapsed() <= SWEEP_PAUSE,
            "swept on for {:?} after the group emptied",
            reaped.elapsed()
        );
        assert!(rustix::process::test_kill_process_group(group.pgid).is_err(), "the group is empty");
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

//! Starting and stopping the two daemons and the bare synthetic agent; reading a process's RSS.
//!
//! Every daemon runs in a fresh temporary directory (workspace, HOME for qwen serve, log file) that
//! is removed when the [`Daemon`] is dropped, and in its own process group so that nothing it
//! started can outlive the benchmark.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::Res;

/// How long a daemon gets to print its listening line.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a daemon gets to exit after SIGTERM before its group is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Which daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Mediatord,
    Qwen,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mediatord => "mediatord",
            Kind::Qwen => "qwen serve",
        }
    }
}

/// Where the programs under test are.
#[derive(Debug, Clone)]
pub struct Tools {
    /// The `mediatord` binary: the daemon, and (`demo-agent`) the synthetic agent of both daemons.
    pub mediatord: PathBuf,
    /// The `qwen` CLI entry (`node_modules/.bin/qwen`), if qwen serve is to be measured.
    pub qwen: Option<PathBuf>,
    /// The JS shim qwen serve runs as its agent (`bench/qwen-shim.mjs`).
    pub shim: Option<PathBuf>,
    /// The Node.js reader on the official SDK, if that scenario is to run.
    pub sdk: Option<SdkReader>,
    /// Extra `mediatord serve` arguments (experiments, e.g. `--subscriber-queue 4096`).
    pub mediatord_args: Vec<String>,
}

/// What reads streams through the official SDK: `bench/sdk-reader.mjs` and the SDK's
/// `dist/daemon/index.js` (`@qwen-code/sdk`, as installed for the e2e suite).
#[derive(Debug, Clone)]
pub struct SdkReader {
    pub script: PathBuf,
    pub module: PathBuf,
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Res<TempDir> {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("mediatord-bench-{}-{tag}-{n}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(std::fs::canonicalize(&path)?))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running daemon.
pub struct Daemon {
    pub kind: Kind,
    child: Child,
    /// The process that owns the listening socket: the one whose RSS is reported.
    pub pid: u32,
    /// `http://127.0.0.1:<port>` (`https://` when started with `--tls-cert`).
    pub base: String,
    pub workspace: PathBuf,
    /// From spawn to the listening line on stdout.
    pub startup: Duration,
    pub dir: TempDir,
}

/// qwen serve's settings: nothing may leave the machine (no telemetry, statistics, update checks).
const QWEN_SETTINGS: &str = r#"{"general":{"enableAutoUpdate":false},"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false}}"#;

impl Daemon {
    /// Starts `kind` on an OS-assigned loopback port with limits raised so the scenarios fit
    /// (sessions, connections, subscribers); `extra` args are appended.
    pub async fn start(kind: Kind, tools: &Tools, extra: &[&str]) -> Res<Daemon> {
        let dir = TempDir::new(match kind {
            Kind::Mediatord => "mediatord",
            Kind::Qwen => "qwen",
        })?;
        let workspace = dir.0.join("workspace");
        std::fs::create_dir_all(&workspace)?;
        let log = std::fs::File::create(dir.0.join("daemon.err"))?;
        let mut cmd = match kind {
            Kind::Mediatord => {
                let mut c = Command::new(&tools.mediatord);
                c.args(["serve", "--port", "0", "--agent", "demo", "--workspace"]).arg(&workspace);
                c.args(["--max-sessions", "0", "--max-connections", "0"]);
                // A scenario may ask for more (the scale scenario's 100 000).
                if !extra.contains(&"--max-subscribers") {
                    c.args(["--max-subscribers", "2000"]);
                }
                c.args(&tools.mediatord_args);
                // The daemon's default (a durable store) in this run's own directory, unless the
                // scenario asks for `--ephemeral`: a benchmark never touches the user's state.
                let ephemeral =
                    extra.contains(&"--ephemeral") || tools.mediatord_args.iter().any(|a| a == "--ephemeral");
                if !ephemeral && !extra.contains(&"--state-dir") {
                    c.arg("--state-dir").arg(dir.0.join("state"));
                }
                let home = dir.0.join("home");
                std::fs::create_dir_all(&home)?;
                c.env("HOME", &home).env("XDG_STATE_HOME", &home);
                c.env_remove("MEDIATORD_CONFIG")
                    .env_remove("MEDIATORD_TOKEN")
                    .env_remove("QWEN_SERVER_TOKEN")
                    .env_remove("MEDIATORD_STATE_DIR");
                c
            }
            Kind::Qwen => {
                let qwen = tools.qwen.as_ref().ok_or("qwen serve was not given (--qwen)")?;
                let shim = tools.shim.as_ref().ok_or("the qwen shim was not given (--shim)")?;
                let home = dir.0.join("home");
                std::fs::create_dir_all(home.join(".qwen"))?;
                std::fs::write(home.join(".qwen/settings.json"), QWEN_SETTINGS)?;
                let mut c = Command::new(qwen);
                c.args(["serve", "--port", "0", "--no-web", "--workspace"]).arg(&workspace);
                c.args(["--max-sessions", "0", "--max-connections", "0"]);
                c.env("HOME", &home)
                    .env("QWEN_CLI_ENTRY", shim)
                    .env("MEDIATORD_BENCH_AGENT", &tools.mediatord)
                    .env("QWEN_USAGE_STATISTICS_ENABLED", "0")
                    .env_remove("QWEN_SERVER_TOKEN");
                c
            }
        };
        cmd.args(extra)
            .current_dir(&workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        let t0 = Instant::now();
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let found = tokio::time::timeout(START_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let url = rest.split_whitespace().next().unwrap_or_default().to_owned();
                    return Ok::<_, std::io::Error>(Some(url));
                }
            }
            Ok(None)
        })
        .await;
        let startup = t0.elapsed();
        let base = match found {
            Ok(Ok(Some(url))) => url,
            _ => {
                let _ = child.start_kill();
                let log = std::fs::read_to_string(dir.0.join("daemon.err")).unwrap_or_default();
                let tail: String = log.lines().rev().take(10).collect::<Vec<_>>().join(" | ");
                return Err(format!("{} printed no listening line: {tail}", kind.name()).into());
            }
        };
        if !base.starts_with("http://127.0.0.1:") && !base.starts_with("https://127.0.0.1:") {
            let _ = child.start_kill();
            return Err(format!("{} listens on {base}, not on 127.0.0.1", kind.name()).into());
        }
        // Keep draining stdout so a chatty daemon never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let spawned = child.id().ok_or("daemon exited at once")?;
        let port: u16 = base.rsplit(':').next().and_then(|p| p.parse().ok()).ok_or("bad port")?;
        let pid = listening_pid(spawned, port).unwrap_or(spawned);
        Ok(Daemon { kind, child, pid, base, workspace, startup, dir })
    }

    /// VmRSS of the daemon process only, in KiB.
    pub fn rss_kib(&self) -> Res<u64> {
        rss_kib(self.pid)
    }

    /// The daemon process's resident memory, all of it and its anonymous part.
    pub fn resident(&self) -> Res<Resident> {
        resident(self.pid)
    }

    /// SIGKILL to the daemon process alone, now: what it holds stays as it was (a heap profiler
    /// it runs under then reports every live allocation as never freed).
    pub fn kill_now(&self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }

    /// Waits for the process the benchmark started to exit by itself (a wrapper that writes its
    /// results once the daemon is gone), at most `limit`; whether it did.
    pub async fn exited(&mut self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.child.wait()).await.is_ok()
    }

    /// CPU time the daemon process has used so far, ns (all its threads, from the scheduler's
    /// accounting: finer than clock ticks).
    pub fn cpu_ns(&self) -> Res<u64> {
        cpu_ns(self.pid)
    }

    /// SIGTERM, a bounded wait, then SIGKILL for the whole group and for anything the daemon
    /// started that is still alive.
    pub async fn stop(mut self) {
        let root = self.child.id();
        let family = root.map(descendants).unwrap_or_default();
        if let Some(pid) = root.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if tokio::time::timeout(STOP_GRACE, self.child.wait()).await.is_err() {
            eprintln!(
                "bench: {} did not exit within {STOP_GRACE:?} of SIGTERM; killing it",
                self.kind.name()
            );
        }
        if let Some(pid) = root.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.wait().await;
        // Agents may run in process groups of their own: wait a moment, then kill leftovers by id.
        for _ in 0..50 {
            if family.iter().all(|&p| !alive(p)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for p in family.into_iter().filter(|&p| alive(p)) {
            eprintln!("bench: killing leftover process {p} of {}", self.kind.name());
            if let Some(pid) = rustix::process::Pid::from_raw(p as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// VmRSS of `pid` in KiB, from `/proc/<pid>/status`.
pub fn rss_kib(pid: u32) -> Res<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("no VmRSS for pid {pid}").into())
}

/// A process's resident memory, KiB: VmRSS, and RssAnon (its heap and stacks, without the pages of
/// its executable, which the first use of a code path faults in and which every copy of the
/// binary shares).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resident {
    pub rss_kib: u64,
    pub anon_kib: u64,
}

impl Resident {
    /// What `self` holds more than `before`, KiB, per one of `count`: (RSS, anonymous).
    pub fn per(self, before: Resident, count: usize) -> (f64, f64) {
        let n = count.max(1) as f64;
        (
            self.rss_kib.saturating_sub(before.rss_kib) as f64 / n,
            self.anon_kib.saturating_sub(before.anon_kib) as f64 / n,
        )
    }
}

/// `pid`'s [`Resident`], from `/proc/<pid>/status`.
pub fn resident(pid: u32) -> Res<Resident> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("no {name} for pid {pid}"))
    };
    Ok(Resident { rss_kib: field("VmRSS:")?, anon_kib: field("RssAnon:")? })
}

/// The sum over `pid`'s threads of `/proc/<pid>/task/<tid>/schedstat`'s first field (ns on CPU).
pub fn cpu_ns(pid: u32) -> Res<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Ok(text) = std::fs::read_to_string(task?.path().join("schedstat")) else { continue };
        total += text.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
    }
    Ok(total)
}

fn alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; its state letter is `Z`.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| !r.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.split_whitespace().nth(1)?.parse().ok()
}

/// `root` and every live process below it.
pub fn descendants(root: u32) -> Vec<u32> {
    let all: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|p| Some((p, parent_of(p)?)))
                .collect()
        })
        .unwrap_or_default();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(all.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// Which of `root` and its descendants holds the socket listening on loopback `port`.
fn listening_pid(root: u32, port: u16) -> Option<u32> {
    let tcp = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let want = format!("0100007F:{port:04X}");
    let inode = tcp.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&want.as_str()) && f.get(3) == Some(&"0A"))
            .then(|| f.get(9).map(|s| s.to_string()))?
    })?;
    let needle = format!("socket:[{inode}]");
    descendants(root).into_iter().find(|p| {
        std::fs::read_dir(format!("/proc/{p}/fd")).is_ok_and(|fds| {
            fds.filter_map(Result::ok)
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == needle.as_str()))
        })
    })
}

/// The first line of `program args` (a `--version` probe), bounded in time.
pub async fn version_of(program: &Path, args: &[&str], env: &[(&str, &Path)]) -> Option<String> {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stderr(Stdio::null()).kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output()).await.ok()?.ok()?;
    String::from_utf8_lossy(&out.stdout).lines().map(str::trim).find(|l| !l.is_empty()).map(str::to_owned)
}

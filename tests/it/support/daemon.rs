//! The daemon under test: the real `mediatord` binary on port 0 in a temporary workspace, its
//! stderr, its signals and exit, and the kernel's view of processes.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Sse, WAIT, chunk_text};

/// The `mediatord` binary under test.
pub(crate) fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mediatord")
}

/// An `XDG_CONFIG_HOME` for a client command under test: a directory nobody creates, so it finds
/// no login `mediatord login` saved (the user's own included: a test never reads them).
pub(crate) fn no_saved_logins() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("mediatord-test-no-logins-{}", std::process::id()))
}

/// Where a daemon under test writes its log.
#[derive(Debug, Clone, Copy)]
enum StderrTo {
    /// Collected for [`Daemon::stderr`].
    Test,
    /// A pipe whose reader is gone.
    ClosedPipe,
}

/// A daemon under test. Dropping it SIGKILLs it (its agents die with it, via the guard).
pub(crate) struct Daemon {
    child: Option<Child>,
    pub(crate) port: u16,
    pub(crate) base: String,
    pub(crate) workspace: PathBuf,
    /// The PEM of the only CA the test's clients trust, for a daemon serving https
    /// ([`Daemon::trusting`]).
    pub(crate) ca: Option<String>,
    stderr: Arc<Mutex<String>>,
    /// Disconnected once the stderr reader has read to the end (the daemon and every process that
    /// shares its stderr gone): [`Daemon::wait_exit`] waits for it, so a test reading the daemon's
    /// last lines after its exit finds them. `None` when stderr is not read.
    stderr_read: Option<std::sync::mpsc::Receiver<()>>,
    _dir: Option<tempfile::TempDir>,
    /// The store of a daemon whose test asked for none ([`OwnStore`]); after `child` (the drop
    /// kills the daemon first), so a database is dropped only once nothing writes to it.
    _own_store: Option<OwnStore>,
    /// `XDG_STATE_HOME`, `HOME` and `TMPDIR` of the daemon (unless the test set them): no daemon
    /// under test ever finds the user's real state directory, or litters the machine's `/tmp`.
    home: tempfile::TempDir,
}

/// Sets a fresh temporary `XDG_STATE_HOME` and `HOME` on `cmd`, and `TMPDIR` beneath it
/// ([`PRIVATE_TMP`]), unless `env` names them; returns the directory to keep alive.
fn private_home(cmd: &mut Command, env: &[(&str, &str)]) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("tempdir");
    let tmp = home.path().join(PRIVATE_TMP);
    std::fs::create_dir(&tmp).expect("tmp");
    for (var, value) in [("XDG_STATE_HOME", home.path()), ("HOME", home.path()), ("TMPDIR", tmp.as_path())] {
        if !env.iter().any(|(k, _)| *k == var) {
            cmd.env(var, value);
        }
    }
    home
}

/// The daemon's `TMPDIR`, beneath its private home: what it leaves there is the test's to see.
const PRIVATE_TMP: &str = "tmp";

/// The durable store of a daemon whose test asked for none (no `--state-dir`, `--store` or
/// `--ephemeral`), by this crate's [`super::BACKEND`]: the decision suites then reach a real
/// database on each backend (`tests/it/durable.rs`). `tests/it`'s daemons stay `--ephemeral`.
enum OwnStore {
    /// A fresh temporary `--state-dir` (SQLite).
    Dir(tempfile::TempDir),
    /// A fresh database of the shared throwaway cluster, dropped with the guard.
    Database(super::postgres::Throwaway),
}

impl OwnStore {
    /// `None` for the memory store (`--ephemeral`).
    fn new() -> Option<OwnStore> {
        match super::BACKEND {
            super::Backend::Memory => None,
            super::Backend::Sqlite => Some(OwnStore::Dir(tempfile::tempdir().expect("tempdir"))),
            super::Backend::Postgres => {
                Some(OwnStore::Database(super::postgres::Postgres::shared().throwaway_database()))
            }
        }
    }
}

/// `args` as this test crate runs them: unchanged against SQLite; against PostgreSQL
/// (`tests/it_postgres.rs`, [`super::POSTGRES`]) each `--state-dir DIR` becomes a `--store` URL of
/// the shared cluster's database for `DIR`, so a daemon restarted on the same directory finds the
/// same state, as it would on disk.
fn against_the_backend(args: &[&str]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if super::POSTGRES && *arg == "--state-dir" {
            let dir = it.next().expect("--state-dir DIR");
            let pg = super::postgres::Postgres::shared();
            let name = super::postgres::database_for(Path::new(dir));
            out.push("--store".to_owned());
            out.push(pg.database(&name));
            // A daemon restarted on the same directory is the same node of the fleet (as one
            // restarted with the same --node-url is): it takes back at once what it left live.
            // Nobody relays to it (it is alone), so the address only names it.
            out.push("--node-url".to_owned());
            out.push(format!("http://{name}.invalid:1"));
        } else {
            out.push((*arg).to_owned());
        }
    }
    out
}

/// Runs `mediatord serve` with `args` and returns its exit status and stderr, for boot refusals.
pub(crate) fn serve_refusal(args: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut cmd = Command::new(bin());
    cmd.arg("serve").args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    // A database password only when the test gives one.
    cmd.env_remove("PGPASSWORD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env_remove("MEDIATORD_TOKEN").env_remove("QWEN_SERVER_TOKEN").env_remove("MEDIATORD_STATE_DIR");
    let _home = private_home(&mut cmd, env);
    let mut child = cmd.spawn().expect("spawn mediatord");
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            let mut err = String::new();
            child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read stderr");
            return (status, err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("mediatord serve {args:?} did not exit (expected a boot refusal)");
        }
        std::thread::sleep(Duration::from_millis(10)); // polling a child's exit; not synchronisation with the daemon
    }
}

impl Daemon {
    /// Starts a daemon with the demo agent in a fresh temporary workspace, plus `args`.
    pub(crate) fn start(args: &[&str]) -> Daemon {
        Daemon::start_env(args, &[])
    }

    /// [`Daemon::start`] with extra environment variables.
    pub(crate) fn start_env(args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = std::fs::canonicalize(dir.path()).expect("canonical");
        let mut d = Daemon::start_with(&workspace, args, env);
        d._dir = Some(dir);
        d
    }

    /// Starts a daemon in `workspace` (added as `--workspace`), with extra env.
    pub(crate) fn start_with(workspace: &Path, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut full: Vec<&str> = vec!["--workspace", workspace.to_str().expect("utf-8 workspace")];
        if !args.contains(&"--agent") {
            full.extend(["--agent", "demo"]);
        }
        full.extend(args);
        let mut d = Daemon::start_in(workspace, &full, env);
        d.workspace = workspace.to_path_buf();
        d
    }

    /// Starts a daemon with the demo agent in a fresh temporary workspace, plus `args`, whose stderr
    /// is a pipe nobody reads: its read end is closed at once, so every log line fails with EPIPE
    /// (`… 2>&1 | head -1`, a dead log driver). [`Daemon::stderr`] stays empty.
    pub(crate) fn start_with_stderr_closed(args: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = std::fs::canonicalize(dir.path()).expect("canonical");
        let mut full: Vec<&str> =
            vec!["--workspace", workspace.to_str().expect("utf-8 workspace"), "--agent", "demo"];
        full.extend(args);
        let mut d = Daemon::spawn(&workspace, &full, &[], StderrTo::ClosedPipe);
        d._dir = Some(dir);
        d
    }

    /// Starts `mediatord serve --port 0 <args>` in the directory `cwd`, adding nothing else: for
    /// what the daemon makes of its own current directory (`workspace` is `cwd`, canonical).
    pub(crate) fn start_in(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        Daemon::spawn(cwd, args, env, StderrTo::Test)
    }

    fn spawn(cwd: &Path, args: &[&str], env: &[(&str, &str)], stderr_to: StderrTo) -> Daemon {
        let mut cmd = Command::new(bin());
        cmd.arg("serve").arg("--port").arg("0");
        let asked = args.iter().any(|a| *a == "--state-dir" || *a == "--ephemeral" || *a == "--store")
            || env.iter().any(|(k, _)| *k == "MEDIATORD_STORE");
        let own_store = if asked { None } else { OwnStore::new() };
        match &own_store {
            // A directory the daemon makes itself, with the mode it insists on.
            Some(OwnStore::Dir(dir)) => cmd.arg("--state-dir").arg(dir.path().join("state")),
            Some(OwnStore::Database(db)) => cmd.arg("--store").arg(&db.url),
            None if asked => &mut cmd,
            None => cmd.arg("--ephemeral"),
        };
        let args = against_the_backend(args);
        cmd.args(&args).current_dir(cwd).stdin(Stdio::null()).stdout(Stdio::piped());
        cmd.env_remove("MEDIATORD_TOKEN").env_remove("QWEN_SERVER_TOKEN").env_remove("MEDIATORD_STATE_DIR");
        let home = private_home(&mut cmd, env);
        cmd.env("RUST_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut stderr_read = None;
        let mut child = match stderr_to {
            StderrTo::Test => {
                let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn mediatord");
                let sink = stderr.clone();
                let pipe = child.stderr.take().expect("stderr");
                let (read_tx, read_rx) = std::sync::mpsc::channel::<()>();
                stderr_read = Some(read_rx);
                std::thread::spawn(move || {
                    let _read = read_tx;
                    for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                        let mut s = sink.lock().expect("stderr lock");
                        s.push_str(&line);
                        s.push('\n');
                    }
                });
                child
            }
            StderrTo::ClosedPipe => {
                let (reader, writer) = std::io::pipe().expect("pipe");
                let child = cmd.stderr(writer).spawn().expect("spawn mediatord");
                // The command still holds its copy of the write end; dropping it and the read end
                // leaves the daemon the only writer of a pipe without a reader.
                drop(cmd);
                drop(reader);
                child
            }
        };
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            // Keep draining so the daemon never blocks on a full stdout pipe.
            for _ in lines {}
        });
        let line = match rx.recv_timeout(WAIT) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!("daemon printed no listening line; stderr:\n{}", stderr.lock().expect("lock"));
            }
        };
        let (scheme, rest) = line
            .strip_prefix("mediatord listening on ")
            .and_then(|url| url.split_once("://"))
            .unwrap_or_else(|| panic!("unexpected startup line {line:?}"));
        let port: u16 = rest
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected startup line {line:?}"));
        Daemon {
            child: Some(child),
            port,
            base: format!("{scheme}://127.0.0.1:{port}"),
            workspace: std::fs::canonicalize(cwd).expect("canonical cwd"),
            ca: None,
            stderr,
            stderr_read,
            _dir: None,
            _own_store: own_store,
            home,
        }
    }

    /// The daemon's `TMPDIR` (unless the test set its own), canonical.
    pub(crate) fn tmp_dir(&self) -> PathBuf {
        std::fs::canonicalize(self.home.path().join(PRIVATE_TMP)).expect("the daemon's TMPDIR")
    }

    /// What is in the daemon's `TMPDIR` (unless the test set its own), by name.
    pub(crate) fn tmp_entries(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.tmp_dir())
            .expect("the daemon's TMPDIR")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// The test's clients of this daemon trust `ca_pem` (and nothing else).
    pub(crate) fn trusting(mut self, ca_pem: &str) -> Daemon {
        self.ca = Some(ca_pem.to_owned());
        self
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }

    /// Sends a signal to the daemon process.
    pub(crate) fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid() as i32).expect("pid");
        rustix::process::kill_process(pid, sig).expect("kill");
    }

    /// Waits for the daemon to exit (bounded), returning its status.
    pub(crate) fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let child = self.child.as_mut().expect("running");
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                // Its last lines may still be in the pipe; bounded, for an agent that outlived it
                // holding the same stderr (a test of that fails on its own terms).
                if let Some(read) = self.stderr_read.take() {
                    let _ = read.recv_timeout(WAIT);
                }
                return status;
            }
            if Instant::now() > deadline {
                panic!("daemon did not exit within {within:?}; stderr:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(10)); // polling a child's exit
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Whether a process exists and is not a zombie.
pub(crate) fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state is the field after the parenthesised command name.
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().chars().next());
            !matches!(state, Some(Some('Z' | 'X')))
        }
        Err(_) => false,
    }
}

/// Waits (bounded) until `pid` is gone.
pub(crate) async fn wait_gone(pid: u32) {
    let deadline = Instant::now() + WAIT;
    while alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} still alive after {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await; // polling the kernel's process table
    }
}

/// The pids of processes whose command line contains `needle` (e.g. a temp workspace path).
pub(crate) fn pids_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline"))
            && String::from_utf8_lossy(&cmd).contains(needle)
            && alive(pid)
        {
            out.push(pid);
        }
    }
    out
}

/// Asks the demo agent of `session` for its pid (the `pid` directive).
pub(crate) async fn agent_pid(d: &Daemon, session: &str) -> u32 {
    let mut sse = Sse::connect(d, session, &[]).await;
    chunk_text(&d.turn(session, &mut sse, None, "pid").await).trim().parse().expect("pid text")
}

/// Waits (bounded) until the daemon's stderr contains `needle`, returning all of it. Stderr is read
/// by a background thread, so a log line may arrive a little after the event that caused it.
pub(crate) async fn wait_stderr(d: &Daemon, needle: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let err = d.stderr();
        if err.contains(needle) {
            return err;
        }
        assert!(
            Instant::now() < deadline,
            "stderr never mentioned {needle:?} within {WAIT:?}; stderr:\n{err}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await; // polling a log pipe
    }
}

/// Waits (bounded) for a pid file that a command or the agent writes, and returns the pid.
pub(crate) async fn pid_in_file(path: &Path) -> u32 {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(pid) = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse().ok()) {
            return pid;
        }
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await; // polling a file another process writes
    }
}

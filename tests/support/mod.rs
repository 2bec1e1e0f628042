//! Shared test support: start the real `mediatord` binary on port 0, talk HTTP to it, read its
//! SSE streams frame by frame, and check on processes.
//!
//! Every wait is bounded by [`WAIT`] and fails with a message saying what it waited for; nothing
//! here sleeps in place of synchronisation.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

/// Upper bound for any single wait in a test (generous: CI machines are loaded).
pub const WAIT: Duration = Duration::from_secs(20);

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mediatord")
}

/// A daemon under test. Dropping it SIGKILLs it (its agents die with it, via the guard).
pub struct Daemon {
    child: Option<Child>,
    pub port: u16,
    pub base: String,
    pub workspace: PathBuf,
    stderr: Arc<Mutex<String>>,
    _dir: Option<tempfile::TempDir>,
}

/// Runs `mediatord serve` with `args` and returns its exit status and stderr, for boot refusals.
pub fn serve_refusal(args: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut cmd = Command::new(bin());
    cmd.arg("serve").args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env_remove("MEDIATORD_TOKEN").env_remove("QWEN_SERVER_TOKEN");
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
    pub fn start(args: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = std::fs::canonicalize(dir.path()).expect("canonical");
        let mut d = Daemon::start_with(&workspace, args, &[]);
        d._dir = Some(dir);
        d
    }

    /// Starts a daemon in `workspace` (added as `--workspace`), with extra env.
    pub fn start_with(workspace: &Path, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut cmd = Command::new(bin());
        cmd.arg("serve").arg("--port").arg("0").arg("--workspace").arg(workspace);
        if !args.contains(&"--agent") {
            cmd.arg("--agent").arg("demo");
        }
        cmd.args(args)
            .current_dir(workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.env_remove("MEDIATORD_TOKEN").env_remove("QWEN_SERVER_TOKEN");
        cmd.env("RUST_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn mediatord");
        let stderr = Arc::new(Mutex::new(String::new()));
        {
            let sink = stderr.clone();
            let pipe = child.stderr.take().expect("stderr");
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let mut s = sink.lock().expect("stderr lock");
                    s.push_str(&line);
                    s.push('\n');
                }
            });
        }
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
        let port: u16 = line
            .strip_prefix("mediatord listening on http://")
            .and_then(|rest| rest.rsplit_once(':'))
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected startup line {line:?}"));
        Daemon {
            child: Some(child),
            port,
            base: format!("http://127.0.0.1:{port}"),
            workspace: workspace.to_path_buf(),
            stderr,
            _dir: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }

    /// Sends a signal to the daemon process.
    pub fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid() as i32).expect("pid");
        rustix::process::kill_process(pid, sig).expect("kill");
    }

    /// Waits for the daemon to exit (bounded), returning its status.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let child = self.child.as_mut().expect("running");
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
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

/// An HTTP client; no proxies (tests talk to loopback only).
pub fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(60)).build().expect("client")
}

/// `POST /session` with an optional client id; returns the JSON body (asserting 200).
pub async fn create_session(d: &Daemon, client_id: Option<&str>, body: Value) -> Value {
    let mut req = http().post(d.url("/session")).json(&body);
    if let Some(c) = client_id {
        req = req.header("X-Qwen-Client-Id", c);
    }
    let res = req.send().await.expect("create");
    let status = res.status();
    let body: Value = res.json().await.expect("json");
    assert_eq!(status, 200, "create failed: {body}");
    body
}

/// A text prompt body.
pub fn text_prompt(text: &str) -> Value {
    json!({"prompt": [{"type": "text", "text": text}]})
}

/// `POST /session/:id/prompt` with `Prefer: respond-async`; returns the 202 body.
pub async fn prompt_async(d: &Daemon, session: &str, client_id: Option<&str>, text: &str) -> Value {
    let mut req = http()
        .post(d.url(&format!("/session/{session}/prompt")))
        .header("Prefer", "respond-async")
        .json(&text_prompt(text));
    if let Some(c) = client_id {
        req = req.header("X-Qwen-Client-Id", c);
    }
    let res = req.send().await.expect("prompt");
    let status = res.status();
    let body: Value = res.json().await.expect("json");
    assert_eq!(status, 202, "async prompt failed: {body}");
    body
}

/// One SSE event as a client sees it.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: Option<u64>,
    pub event: String,
    pub data: Value,
}

impl Event {
    /// The envelope's `data` field (the event payload).
    pub fn payload(&self) -> &Value {
        &self.data["data"]
    }
}

/// A live SSE stream.
pub struct Sse {
    stream: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: String,
    pub comments: Vec<String>,
    pub ended: bool,
}

impl Sse {
    /// Connects to `/session/:id/events`, asserting 200.
    pub async fn connect(d: &Daemon, session: &str, headers: &[(&str, String)]) -> Sse {
        let res = Sse::request(d, session, headers).await;
        assert_eq!(res.status(), 200, "events: {}", res.text().await.unwrap_or_default());
        Sse::from_response(res)
    }

    pub async fn request(d: &Daemon, session: &str, headers: &[(&str, String)]) -> reqwest::Response {
        let mut req = http().get(d.url(&format!("/session/{session}/events")));
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        req.send().await.expect("events request")
    }

    pub fn from_response(res: reqwest::Response) -> Sse {
        Sse { stream: Box::pin(res.bytes_stream()), buf: String::new(), comments: Vec::new(), ended: false }
    }

    /// The next event, or `None` when the stream ended. Panics after [`WAIT`].
    pub async fn next(&mut self) -> Option<Event> {
        match tokio::time::timeout(WAIT, self.next_inner()).await {
            Ok(e) => e,
            Err(_) => panic!("no SSE event within {WAIT:?}"),
        }
    }

    async fn next_inner(&mut self) -> Option<Event> {
        loop {
            if let Some(pos) = self.buf.find("\n\n") {
                let frame: String = self.buf.drain(..pos + 2).collect();
                let mut id = None;
                let mut event = String::from("message");
                let mut data = String::new();
                let mut only_comments = true;
                for line in frame.lines() {
                    if let Some(c) = line.strip_prefix(':') {
                        self.comments.push(c.trim().to_owned());
                        continue;
                    }
                    only_comments = false;
                    if let Some(v) = line.strip_prefix("id: ") {
                        id = v.parse().ok();
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if only_comments || data.is_empty() {
                    continue; // `retry:` and heartbeat frames
                }
                let data =
                    serde_json::from_str(&data).unwrap_or_else(|e| panic!("bad SSE data {data:?}: {e}"));
                return Some(Event { id, event, data });
            }
            match self.stream.next().await {
                Some(Ok(chunk)) => self.buf.push_str(&String::from_utf8_lossy(&chunk)),
                _ => {
                    self.ended = true;
                    return None;
                }
            }
        }
    }

    /// Collects events until one satisfies `done` (inclusive). Panics if the stream ends first.
    pub async fn until(&mut self, mut done: impl FnMut(&Event) -> bool) -> Vec<Event> {
        let mut seen = Vec::new();
        loop {
            let Some(e) = self.next().await else {
                panic!(
                    "stream ended before the awaited event; saw {:?}",
                    seen.iter().map(|e: &Event| &e.event).collect::<Vec<_>>()
                )
            };
            let stop = done(&e);
            seen.push(e);
            if stop {
                return seen;
            }
        }
    }

    /// Collects events until the first of type `kind` (inclusive).
    pub async fn until_type(&mut self, kind: &str) -> Vec<Event> {
        self.until(|e| e.event == kind).await
    }

    /// Reads to the end of the stream.
    pub async fn rest(&mut self) -> Vec<Event> {
        let mut all = Vec::new();
        while let Some(e) = self.next().await {
            all.push(e);
        }
        all
    }
}

/// The text of all `agent_message_chunk` updates among `events`, concatenated.
pub fn chunk_text(events: &[Event]) -> String {
    events
        .iter()
        .filter(|e| e.event == "session_update")
        .filter(|e| e.payload()["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|e| e.payload()["update"]["content"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// Whether a process exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
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
pub async fn wait_gone(pid: u32) {
    let deadline = Instant::now() + WAIT;
    while alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} still alive after {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await; // polling the kernel's process table
    }
}

/// The pids of processes whose command line contains `needle` (e.g. a temp workspace path).
pub fn pids_with(needle: &str) -> Vec<u32> {
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

/// Asks the demo agent of `session` for its pid (the `pid` directive), via a blocking prompt.
pub async fn agent_pid(d: &Daemon, session: &str) -> u32 {
    let mut sse = Sse::connect(d, session, &[]).await;
    prompt_async(d, session, None, "pid").await;
    let events = sse.until_type("turn_complete").await;
    chunk_text(&events).trim().parse().expect("pid text")
}

/// Waits (bounded) until the daemon's stderr contains `needle`, returning all of it. Stderr is read
/// by a background thread, so a log line may arrive a little after the event that caused it.
pub async fn wait_stderr(d: &Daemon, needle: &str) -> String {
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

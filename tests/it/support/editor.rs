//! An editor that launches `mediatord connect` as its ACP agent and speaks to it over stdio, one
//! JSON-RPC message per line, as Zed or a Neovim plugin does.

use std::process::Stdio;
use std::time::Instant;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::mpsc;

use super::{WAIT, bin};

/// An editor: `mediatord connect` as its agent, spoken to over its stdin and stdout.
pub(crate) struct Editor {
    child: Child,
    /// `None` once closed ([`Editor::close_input`]).
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    next_id: i64,
    /// Every message received, in order.
    pub(crate) seen: Vec<Value>,
    read: usize,
    /// What connect says on stderr, a line at a time (each also written to the test's own).
    said: mpsc::UnboundedReceiver<String>,
}

impl Editor {
    pub(crate) fn start(url: &str, args: &[&str], env: &[(&str, &str)]) -> Editor {
        let home = std::env::temp_dir();
        let mut cmd = tokio::process::Command::new(bin());
        cmd.arg("connect")
            .arg(url)
            .args(args)
            .env_remove("MEDIATORD_TOKEN")
            .env_remove("MEDIATORD_DEVICE")
            .env_remove("MEDIATORD_URL")
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", super::no_saved_logins())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn mediatord connect");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let (tx, said) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                eprintln!("{line}");
                let _ = tx.send(line);
            }
        });
        Editor { child, stdin: Some(stdin), stdout, next_id: 1, seen: Vec::new(), read: 0, said }
    }

    /// Waits (bounded) until connect says a line containing `text` on stderr.
    pub(crate) async fn until_said(&mut self, text: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.said.recv()).await {
                Ok(Some(line)) if line.contains(text) => return,
                Ok(Some(_)) => {}
                Ok(None) => panic!("connect's stderr ended before it said {text:?}"),
                Err(_) => panic!("connect did not say {text:?} within {WAIT:?}"),
            }
        }
    }

    pub(crate) async fn send(&mut self, m: &Value) {
        let mut line = m.to_string();
        line.push('\n');
        self.input().write_all(line.as_bytes()).await.expect("write to connect");
    }

    /// Writes `line` and a newline as they are, JSON or not.
    pub(crate) async fn send_line(&mut self, line: &str) {
        self.input().write_all(line.as_bytes()).await.expect("write to connect");
        self.input().write_all(b"\n").await.expect("write to connect");
    }

    fn input(&mut self) -> &mut ChildStdin {
        self.stdin.as_mut().expect("the editor's input is open")
    }

    /// Closes its input (as an editor, or a script piping one request, does when it is done
    /// sending), its output still read.
    pub(crate) fn close_input(&mut self) {
        self.stdin.take();
    }

    pub(crate) async fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        id
    }

    pub(crate) async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params).await;
        self.answer(id).await
    }

    pub(crate) async fn answer(&mut self, id: i64) -> Value {
        self.until(|m| m.get("method").is_none() && m["id"] == id).await
    }

    pub(crate) async fn next(&mut self) -> Value {
        if self.read < self.seen.len() {
            self.read += 1;
            return self.seen[self.read - 1].clone();
        }
        let line = match tokio::time::timeout(WAIT, self.stdout.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(_) => panic!("connect's output ended; seen: {:#?}", self.seen),
            Err(_) => panic!("nothing from connect within {WAIT:?}; seen: {:#?}", self.seen),
        };
        let m: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON from connect: {line:?}: {e}"));
        self.seen.push(m.clone());
        self.read = self.seen.len();
        m
    }

    pub(crate) async fn until(&mut self, mut done: impl FnMut(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < deadline, "nothing matched within {WAIT:?}; seen: {:#?}", self.seen);
            let m = self.next().await;
            if done(&m) {
                return m;
            }
        }
    }

    /// The editor's start: `initialize`, then `session/new` in `cwd`; the session id.
    pub(crate) async fn open_session(&mut self, cwd: &std::path::Path) -> String {
        let init = self.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}})).await;
        assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
        let new = self.call("session/new", json!({"cwd": cwd, "mcpServers": []})).await;
        new["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("session/new: {new}")).to_owned()
    }

    /// The text of every `agent_message_chunk` update seen.
    pub(crate) fn chunks(&self) -> Vec<String> {
        self.seen
            .iter()
            .filter(|m| {
                m["method"] == "session/update"
                    && m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
            })
            .filter_map(|m| m["params"]["update"]["content"]["text"].as_str().map(str::to_owned))
            .collect()
    }

    /// Waits (bounded) for `connect` to exit by itself, its input still open.
    pub(crate) async fn exits(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(WAIT, self.child.wait()).await.expect("connect exits in time").expect("wait")
    }

    /// Closes its input; `connect` exits, and with what status.
    pub(crate) async fn close(mut self) -> std::process::ExitStatus {
        self.stdin.take();
        tokio::time::timeout(WAIT, self.child.wait()).await.expect("connect exits in time").expect("wait")
    }
}

//! Scenario (b): the synthetic agent read directly over stdio, no daemon — the physical limit.
//!
//! The benchmark speaks ACP itself (`initialize`, `session/new`, `session/prompt`) to a fresh
//! `mediatord demo-agent` and reads the updates exactly as a daemon's agent reader would have to.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use memchr::memmem;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::Res;
use crate::procs::TempDir;
use crate::scenarios::{RelayRun, SubResult};
use crate::stats::now_us;

/// Runs `directive` (e.g. `stream 100000`) on a fresh agent and measures what arrives on stdout.
pub async fn stream(mediatord: &Path, directive: &str, expected: u64, timeout: Duration) -> Res<RelayRun> {
    let dir = TempDir::new("direct")?;
    let mut child = Command::new(mediatord)
        .arg("demo-agent")
        .current_dir(&dir.0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    // The pipe the daemon reads its agents through, so the physical limit is measured on the same.
    mediatord::agent::widen_pipe(&stdout);
    let run = async {
        let mut reader = Lines::default();
        send(&mut stdin, 1, "initialize", json!({"protocolVersion": 1, "clientCapabilities": {}})).await?;
        reader.response(&mut stdout, 1).await?;
        send(&mut stdin, 2, "session/new", json!({"cwd": dir.0, "mcpServers": []})).await?;
        let created = reader.response(&mut stdout, 2).await?;
        let session = created["result"]["sessionId"].as_str().ok_or("session/new: no sessionId")?.to_owned();
        let prompt = json!({"sessionId": session, "prompt": [{"type": "text", "text": directive}]});
        send(&mut stdin, 3, "session/prompt", prompt).await?;
        let mut sub = SubResult::default();
        reader.until_response(&mut stdout, 3, &mut sub).await?;
        sub.ended = true;
        Ok::<_, crate::Error>(sub)
    };
    let reader_cpu = crate::scenarios::own_cpu_ns()?;
    let sub = tokio::time::timeout(timeout, run).await.map_err(|_| "direct run timed out")??;
    let reader_cpu = crate::scenarios::own_cpu_ns()?.saturating_sub(reader_cpu);
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    let _ = child.start_kill();
    Ok(RelayRun::from_subscribers(vec![sub], expected).with_reader_cpu(reader_cpu))
}

async fn send(stdin: &mut tokio::process::ChildStdin, id: u64, method: &str, params: Value) -> Res<()> {
    let line = format!("{}\n", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    stdin.write_all(line.as_bytes()).await?;
    stdin.flush().await?;
    Ok(())
}

/// NDJSON reader over the agent's stdout.
struct Lines {
    buf: Vec<u8>,
    start: usize,
    stamp: memmem::Finder<'static>,
}

impl Default for Lines {
    fn default() -> Self {
        Lines { buf: Vec::with_capacity(1 << 20), start: 0, stamp: memmem::Finder::new(b"\"emittedAtUs\":") }
    }
}

impl Lines {
    async fn response(&mut self, out: &mut tokio::process::ChildStdout, id: u64) -> Res<Value> {
        let mut ignored = SubResult::default();
        self.until_response(out, id, &mut ignored).await
    }

    /// Reads until the response to `id`, counting stamped updates into `sub` on the way.
    async fn until_response(
        &mut self,
        out: &mut tokio::process::ChildStdout,
        id: u64,
        sub: &mut SubResult,
    ) -> Res<Value> {
        loop {
            while let Some(nl) = memchr::memchr(b'\n', &self.buf[self.start..]) {
                let line = &self.buf[self.start..self.start + nl];
                self.start += nl + 1;
                if let Some(at) = self.stamp.find(line) {
                    let digits = &line[at + 14..];
                    let n = digits.iter().take_while(|b| b.is_ascii_digit()).count();
                    if let Some(us) = std::str::from_utf8(&digits[..n]).ok().and_then(|s| s.parse().ok()) {
                        sub.stamped(us, sub.now);
                        continue;
                    }
                }
                if let Ok(v) = serde_json::from_slice::<Value>(line)
                    && v["id"].as_u64() == Some(id)
                    && v.get("method").is_none()
                {
                    return Ok(v);
                }
            }
            self.buf.drain(..self.start);
            self.start = 0;
            let len = self.buf.len();
            self.buf.resize(len + 256 * 1024, 0);
            let n = out.read(&mut self.buf[len..]).await?;
            self.buf.truncate(len + n);
            sub.now = now_us();
            if n == 0 {
                return Err("the agent closed its stdout".into());
            }
        }
    }
}

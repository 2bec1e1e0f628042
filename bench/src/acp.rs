//! `/acp` over a WebSocket, the same way against both daemons (mediatord's door and qwen serve's
//! own `/acp`): one JSON-RPC message per text frame, the benchmark as the ACP client.
//!
//! (i) [`relay`]: S connections attached to a fresh session (`session/resume`: no replay), one
//! prompt `stream N` submitted over REST as in (a); each connection reads `session/update`s until
//! it has all N stamped ones.
//! (j) [`permissions`]: one connection prompts `permissions K` with `session/prompt` and answers
//! each `session/request_permission` on sight; the turn ends with the prompt's answer.
//! (k) [`memory`]: RSS before and after C connections that each `initialize`d, attached to one
//! session and carried a short turn, then sit idle; one connection carried a turn and closed before
//! the first reading.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use memchr::memmem;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::Res;
use crate::api::{Api, REQUEST_TIMEOUT};
use crate::procs::Daemon;
use crate::scenarios::{PermissionRun, RelayRun, SubResult, fresh_session};
use crate::stats::{now_us, percentile};

/// Largest message read (an agent's update can be large).
const MAX_MESSAGE: usize = 64 << 20;
/// Connections opened at once while setting up a scenario.
const OPEN_BATCH: usize = 50;
/// How long memory is left to settle before a reading.
const SETTLE: Duration = Duration::from_millis(1500);
/// Updates of the turn each idle connection carries before the memory reading.
const WARM_UP: u64 = 100;

pub(crate) const STAMP: &[u8] = b"\"emittedAtUs\":";

/// One ACP connection over `ws://…/acp`.
pub struct Conn {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl Conn {
    /// Connects and `initialize`s.
    pub async fn open(base: &str) -> Res<Conn> {
        let url = format!("{}/acp", base.replacen("http://", "ws://", 1));
        let config = WebSocketConfig::default().max_message_size(Some(MAX_MESSAGE));
        let connect = tokio_tungstenite::connect_async_with_config(url, Some(config), true);
        let (ws, _) =
            tokio::time::timeout(REQUEST_TIMEOUT, connect).await.map_err(|_| "acp: connect timeout")??;
        let mut conn = Conn { ws, next_id: 1 };
        conn.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}})).await?;
        Ok(conn)
    }

    /// Closes the WebSocket as a client that is done does (a close frame; bounded).
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(REQUEST_TIMEOUT, self.ws.close(None)).await;
    }

    async fn send(&mut self, message: &Value) -> Res<()> {
        self.ws.send(Message::text(message.to_string())).await?;
        Ok(())
    }

    /// Sends a request; its id.
    pub async fn request(&mut self, method: &str, params: Value) -> Res<u64> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await?;
        Ok(id)
    }

    /// Sends a request and reads until its answer (what comes before it is dropped); its result.
    pub async fn call(&mut self, method: &str, params: Value) -> Res<Value> {
        let id = self.request(method, params).await?;
        let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
        loop {
            let text = tokio::time::timeout_at(deadline, self.text())
                .await
                .map_err(|_| format!("acp: no answer to {method}"))??
                .ok_or_else(|| format!("acp: closed before answering {method}"))?;
            let m: Value = serde_json::from_str(&text)?;
            if m.get("method").is_none() && m["id"] == id {
                if let Some(e) = m.get("error") {
                    return Err(format!("acp: {method} failed: {e}").into());
                }
                return Ok(m["result"].clone());
            }
        }
    }

    /// The next text frame; `None` once the connection is closed.
    pub async fn text(&mut self) -> Res<Option<String>> {
        Ok(self.frame().await?.map(|t| t.as_str().to_owned()))
    }

    /// The next text frame as it was received, not copied: the relay's readers take one per update,
    /// as the event stream's reader scans its chunks in place.
    async fn frame(&mut self) -> Res<Option<Utf8Bytes>> {
        while let Some(frame) = self.ws.next().await {
            match frame? {
                Message::Text(t) => return Ok(Some(t)),
                Message::Close(_) => return Ok(None),
                _ => {}
            }
        }
        Ok(None)
    }

    /// Attaches to a live session without a replay. qwen serve starts a WebSocket's stream of a
    /// session only at the next request naming it (its own SDK sends heartbeats), so a heartbeat
    /// follows; mediatord streams from `session/resume` on and answers the heartbeat too.
    pub async fn attach(&mut self, session: &str, cwd: &std::path::Path) -> Res<()> {
        self.call("session/resume", json!({"sessionId": session, "cwd": cwd, "mcpServers": []})).await?;
        self.call("_qwen/session/heartbeat", json!({"sessionId": session})).await?;
        Ok(())
    }
}

/// The emit stamp of a `session/update` frame (or of an event stream's chunk), read without a
/// JSON parser; `None` for a stamp cut at the end of `text` (a chunk's: read with the next one).
pub(crate) fn stamp(finder: &memmem::Finder<'_>, text: &[u8]) -> Option<u64> {
    let at = finder.find(text)?;
    let digits = &text[at + STAMP.len()..];
    let n = digits.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == digits.len() {
        return None;
    }
    std::str::from_utf8(&digits[..n]).ok()?.parse().ok()
}

/// `count` connections, each `initialize`d and attached to `session`.
async fn open_attached(daemon: &Daemon, session: &str, count: usize) -> Res<Vec<Conn>> {
    let mut conns = Vec::with_capacity(count);
    while conns.len() < count {
        let n = OPEN_BATCH.min(count - conns.len());
        let opened = futures_util::future::join_all((0..n).map(|_| async {
            let mut c = Conn::open(&daemon.base).await?;
            c.attach(session, &daemon.workspace).await?;
            Ok::<_, crate::Error>(c)
        }))
        .await;
        for c in opened {
            conns.push(c?);
        }
    }
    Ok(conns)
}

/// Reads `conn` until `expected` stamped updates came (or the deadline, or the close).
async fn drain(mut conn: Conn, expected: u64, deadline: Instant) -> (SubResult, Conn) {
    let finder = memmem::Finder::new(STAMP);
    let mut r = SubResult::default();
    let deadline = tokio::time::Instant::from_std(deadline);
    while r.updates < expected {
        let text = match tokio::time::timeout_at(deadline, conn.frame()).await {
            Ok(Ok(Some(t))) => t,
            _ => break,
        };
        let now = now_us();
        if text.contains("\"session/update\"")
            && let Some(emitted) = stamp(&finder, text.as_bytes())
        {
            r.stamped(emitted, now);
        }
    }
    r.ended = r.updates == expected;
    (r, conn)
}

/// (i) One prompt `stream N` relayed to `connections` ACP connections.
pub async fn relay(
    api: &Api,
    daemon: &Daemon,
    connections: usize,
    events: u64,
    timeout: Duration,
) -> Res<RelayRun> {
    let created = fresh_session(api, daemon).await?;
    let deadline = Instant::now() + timeout;
    let conns = open_attached(daemon, &created.session_id, connections).await?;
    let tasks: Vec<_> = conns.into_iter().map(|c| tokio::spawn(drain(c, events, deadline))).collect();
    let cpu = daemon.cpu_ns()?;
    api.prompt_async(&created.session_id, &format!("stream {events}"), created.client_id.as_deref()).await?;
    let mut subs = Vec::with_capacity(tasks.len());
    for t in tasks {
        subs.push(t.await?.0);
    }
    let cpu = daemon.cpu_ns()?.saturating_sub(cpu);
    Ok(RelayRun::from_subscribers(subs, events).with_cpu(cpu))
}

/// (j) K sequential permission requests over one ACP connection, each answered on sight.
pub async fn permissions(api: &Api, daemon: &Daemon, k: usize, timeout: Duration) -> Res<PermissionRun> {
    let created = fresh_session(api, daemon).await?;
    let session = created.session_id.clone();
    let mut conn = Conn::open(&daemon.base).await?;
    conn.attach(&session, &daemon.workspace).await?;
    let deadline = tokio::time::Instant::now() + timeout;
    let prompt = conn
        .request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": format!("permissions {k}")}]}),
        )
        .await?;
    let mut seen: Vec<Instant> = Vec::with_capacity(k);
    let end = loop {
        let text = match tokio::time::timeout_at(deadline, conn.text()).await {
            Ok(Ok(Some(t))) => t,
            Ok(Ok(None)) => return Err("acp permissions: closed before the turn ended".into()),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(format!("acp permissions: timed out after {} requests", seen.len()).into()),
        };
        let at = Instant::now();
        // Updates are most of the traffic: only requests and answers are parsed.
        if !text.contains("\"session/request_permission\"") && text.contains("\"method\"") {
            continue;
        }
        let m: Value = serde_json::from_str(&text)?;
        if m["method"] == "session/request_permission" {
            seen.push(at);
            let allow = m["params"]["options"]
                .as_array()
                .and_then(|o| o.iter().find(|o| o["kind"] == "allow_once"))
                .and_then(|o| o["optionId"].as_str())
                .ok_or("acp permissions: no allow_once option")?
                .to_owned();
            let answer = json!({"jsonrpc": "2.0", "id": m["id"], "result": {"outcome": {"outcome": "selected", "optionId": allow}}});
            conn.send(&answer).await?;
        } else if m.get("method").is_none() && m["id"] == prompt {
            if let Some(e) = m.get("error") {
                return Err(format!("acp permissions: the prompt failed: {e}").into());
            }
            break at;
        }
    };
    if seen.len() != k {
        return Err(format!("acp permissions: saw {} requests, wanted {k}", seen.len()).into());
    }
    let total = end.duration_since(seen[0]).as_secs_f64() * 1e3;
    let mut gaps: Vec<u64> = seen.windows(2).map(|w| w[1].duration_since(w[0]).as_nanos() as u64).collect();
    let ms = |ns: Option<u64>| ns.unwrap_or(0) as f64 / 1e6;
    Ok(PermissionRun {
        requests: k,
        per_request_ms: total / k as f64,
        interval_p50_ms: ms(percentile(&mut gaps, 50.0)),
        interval_p99_ms: ms(percentile(&mut gaps, 99.0)),
    })
}

/// (k) Daemon RSS, KiB, before and with the idle connections.
#[derive(Debug, Clone)]
pub struct MemoryRun {
    pub connections: usize,
    pub before_kib: u64,
    pub with_kib: u64,
    /// The anonymous part of the two readings (`RssAnon`: heap and stacks, no code pages).
    pub before_anon_kib: u64,
    pub with_anon_kib: u64,
    /// With more than one round: KiB per connection the last round added (RSS, anonymous).
    pub next: Option<(f64, f64)>,
    /// Connections that did not see the whole warm-up turn.
    pub incomplete: usize,
}

impl MemoryRun {
    /// KiB per idle connection.
    pub fn per_connection_kib(&self) -> f64 {
        self.with_kib.saturating_sub(self.before_kib) as f64 / self.connections.max(1) as f64
    }

    /// KiB of anonymous memory per idle connection.
    pub fn per_connection_anon_kib(&self) -> f64 {
        self.with_anon_kib.saturating_sub(self.before_anon_kib) as f64 / self.connections.max(1) as f64
    }
}

/// (k) `connections` idle ACP connections on one session; with `rounds` > 1, as many more again
/// per round, each round read (what the next connections add on a daemon that already holds some:
/// the cost of one more connection, without the first round's one-off costs). `at_idle` is called
/// after the last reading, every connection still open (`idle --kill-at-idle`).
pub async fn memory(
    api: &Api,
    daemon: &Daemon,
    connections: usize,
    rounds: usize,
    at_idle: Option<fn(&Daemon)>,
) -> Res<MemoryRun> {
    let created = fresh_session(api, daemon).await?;
    let session = created.session_id.as_str();
    let client = created.client_id.as_deref();
    crate::scenarios::warm_turn(api, session, client).await?;
    // One `/acp` connection carries a turn and closes before the first reading, as (e)'s warm-up
    // stream does for SSE: the door's code is paged in and its first allocations made, so the
    // reading divides what the connections hold, not a one-off cost, by their number.
    let (warm, failed) = carry_turn(api, session, client, open_attached(daemon, session, 1).await?).await?;
    if failed > 0 {
        return Err("acp memory: the warm-up connection did not see its whole turn".into());
    }
    for conn in warm {
        conn.close().await;
    }
    tokio::time::sleep(SETTLE).await;
    let before = daemon.resident()?;
    let mut held: Vec<Conn> = Vec::new();
    let mut readings = Vec::with_capacity(rounds);
    let mut incomplete = 0;
    for _ in 0..rounds.max(1) {
        held.extend(open_attached(daemon, session, connections).await?);
        (held, incomplete) = carry_turn(api, session, client, std::mem::take(&mut held)).await?;
        tokio::time::sleep(SETTLE).await;
        readings.push(daemon.resident()?);
    }
    if let Some(at_idle) = at_idle {
        at_idle(daemon);
    }
    drop(held);
    let with = readings[0];
    let next = readings.len().checked_sub(2).map(|i| (readings[i], readings[i + 1]));
    Ok(MemoryRun {
        connections,
        before_kib: before.rss_kib,
        with_kib: with.rss_kib,
        before_anon_kib: before.anon_kib,
        with_anon_kib: with.anon_kib,
        next: next.map(|(a, b)| b.per(a, connections)),
        incomplete,
    })
}

/// A `stream WARM_UP` turn carried by `conns`: the connections back, and how many of them did not
/// see the whole turn.
async fn carry_turn(
    api: &Api,
    session: &str,
    client: Option<&str>,
    conns: Vec<Conn>,
) -> Res<(Vec<Conn>, usize)> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let tasks: Vec<_> = conns.into_iter().map(|c| tokio::spawn(drain(c, WARM_UP, deadline))).collect();
    api.prompt_async(session, &format!("stream {WARM_UP}"), client).await?;
    let (mut conns, mut incomplete) = (Vec::with_capacity(tasks.len()), 0);
    for t in tasks {
        let (r, conn) = t.await?;
        if !r.ended {
            incomplete += 1;
        }
        conns.push(conn);
    }
    Ok((conns, incomplete))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_is_read_from_a_session_update_without_a_parser() {
        let finder = memmem::Finder::new(STAMP);
        let frame = br#"{"jsonrpc":"2.0","method":"session/update","params":{"update":{"_meta":{"emittedAtUs":1700000000000123}}}}"#;
        assert_eq!(stamp(&finder, frame), Some(1_700_000_000_000_123));
        assert_eq!(stamp(&finder, br#"{"method":"session/update","params":{}}"#), None);
    }

    #[test]
    fn a_stamp_cut_at_the_end_waits_for_the_next_chunk() {
        let finder = memmem::Finder::new(STAMP);
        assert_eq!(
            stamp(&finder, br#"data: {"_meta":{"emittedAtUs":1700000000000123}}"#),
            Some(1_700_000_000_000_123)
        );
        assert_eq!(stamp(&finder, br#"data: {"_meta":{"emittedAtUs":17000"#), None);
        assert_eq!(stamp(&finder, br#"data: {"_meta":{}}"#), None);
    }
}

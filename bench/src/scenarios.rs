//! The measurements, one function per scenario, each returning one run's figures.
//!
//! (a) [`relay`]: one prompt streams N stamped updates to S subscribers.
//! (g) [`sdk_relay`]: the same, read by Node.js through the official SDK's SSE parser.
//! (c) [`permissions`]: K sequential permission requests, each voted over REST on sight.
//! (d) [`create_attach`]: session create and attach latency.
//! (e) [`memory`]: daemon RSS idle, with 100 sessions, with 1000 subscribers.
//! (f) startup is [`crate::procs::Daemon::startup`]. (b) is in [`crate::direct`].

use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::Res;
use crate::api::{Api, Stream};
use crate::procs::Daemon;
use crate::sse::{Frame, Scanner};
use crate::stats::{now_us, percentile};

/// What one event stream (or the direct stdio reader) saw.
#[derive(Debug, Default)]
pub struct SubResult {
    /// Stamped updates received.
    pub updates: u64,
    /// Emit → receive latency of each, µs.
    pub latencies_us: Vec<u32>,
    /// Earliest emit stamp seen and latest receive time, µs since the epoch.
    pub first_emit_us: u64,
    pub last_recv_us: u64,
    pub evicted: bool,
    /// The turn's end (`turn_complete` / the prompt's response) was seen.
    pub ended: bool,
    /// Receive time of the chunk being parsed (direct reader).
    pub now: u64,
}

impl SubResult {
    pub fn stamped(&mut self, emitted_us: u64, now: u64) {
        self.updates += 1;
        self.latencies_us.push(now.saturating_sub(emitted_us).min(u64::from(u32::MAX)) as u32);
        if self.first_emit_us == 0 || emitted_us < self.first_emit_us {
            self.first_emit_us = emitted_us;
        }
        self.last_recv_us = now;
    }
}

/// One relay (or direct) run.
#[derive(Debug, Clone)]
pub struct RelayRun {
    pub subscribers: usize,
    pub expected_per_sub: u64,
    pub received: u64,
    pub evicted: usize,
    pub incomplete: usize,
    /// First emit → last receive, seconds.
    pub window_s: f64,
    /// Delivered stamped events per second, all subscribers together.
    pub delivered_per_s: f64,
    pub p50_us: u32,
    pub p99_us: u32,
    /// The daemon's CPU time over the run ÷ updates received, ns (when measured).
    pub cpu_ns_per_update: Option<f64>,
    /// The load client's (this process's) CPU time over the run ÷ updates received, ns (when
    /// measured): what reading the updates took from the two CPUs the daemon and the agent share.
    pub reader_cpu_ns_per_update: Option<f64>,
}

impl RelayRun {
    pub fn from_subscribers(subs: Vec<SubResult>, expected_per_sub: u64) -> RelayRun {
        let first = subs.iter().map(|s| s.first_emit_us).filter(|&t| t > 0).min().unwrap_or(0);
        let last = subs.iter().map(|s| s.last_recv_us).max().unwrap_or(0);
        let window_s = last.saturating_sub(first) as f64 / 1e6;
        let received: u64 = subs.iter().map(|s| s.updates).sum();
        let mut all: Vec<u32> = subs.iter().flat_map(|s| s.latencies_us.iter().copied()).collect();
        RelayRun {
            subscribers: subs.len(),
            expected_per_sub,
            received,
            evicted: subs.iter().filter(|s| s.evicted).count(),
            incomplete: subs.iter().filter(|s| !s.ended || s.updates < expected_per_sub).count(),
            window_s,
            delivered_per_s: if window_s > 0.0 { received as f64 / window_s } else { 0.0 },
            p50_us: percentile(&mut all, 50.0).unwrap_or(0),
            p99_us: percentile(&mut all, 99.0).unwrap_or(0),
            cpu_ns_per_update: None,
            reader_cpu_ns_per_update: None,
        }
    }

    /// Sets [`RelayRun::cpu_ns_per_update`] from the daemon's CPU time over the run.
    pub fn with_cpu(mut self, cpu_ns: u64) -> RelayRun {
        self.cpu_ns_per_update = self.per_update(cpu_ns);
        self
    }

    /// Sets [`RelayRun::reader_cpu_ns_per_update`] from this process's CPU time over the run.
    pub fn with_reader_cpu(mut self, cpu_ns: u64) -> RelayRun {
        self.reader_cpu_ns_per_update = self.per_update(cpu_ns);
        self
    }

    fn per_update(&self, cpu_ns: u64) -> Option<f64> {
        (self.received > 0).then(|| cpu_ns as f64 / self.received as f64)
    }
}

/// This process's CPU time so far, ns (its threads', not its children's): while a relay or direct
/// run reads, reading is all it does. The kernel's process clock counts a running thread's time up
/// to now; its `schedstat` counts only up to its last tick or switch, which a run of a few
/// milliseconds on one busy thread can miss altogether (the smoke test once read 0 ns).
pub fn own_cpu_ns() -> Res<u64> {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Ok(u64::try_from(now.tv_sec)? * 1_000_000_000 + u64::try_from(now.tv_nsec)?)
}

/// Keeps a finished stream open: says so on `read`, then waits for `release` (memory readings).
struct Hold {
    read: tokio::sync::mpsc::Sender<()>,
    release: watch::Receiver<bool>,
}

/// Reads a stream until the turn ends (or eviction, session end, `deadline`). With `hold`, keeps
/// the connection open afterwards until released.
async fn drain_turn(mut stream: Stream, deadline: Instant, hold: Option<Hold>) -> SubResult {
    let mut r = SubResult::default();
    let mut scanner = Scanner::default();
    let deadline = tokio::time::Instant::from_std(deadline);
    let mut stop = false;
    while !stop {
        let chunk = match tokio::time::timeout_at(deadline, stream.chunk()).await {
            Ok(Ok(Some(c))) => c,
            _ => break,
        };
        let now = now_us();
        scanner.feed(&chunk, |f| match f {
            Frame::Stamped { emitted_us } => r.stamped(emitted_us, now),
            Frame::Event { kind, .. } => match kind.as_str() {
                "turn_complete" | "turn_error" => {
                    r.ended = true;
                    stop = true;
                }
                "client_evicted" => {
                    r.evicted = true;
                    stop = true;
                }
                "session_closed" | "session_died" | "stream_error" => stop = true,
                _ => {}
            },
            Frame::Ignored => {}
        });
    }
    if let Some(mut hold) = hold {
        let _ = hold.read.send(()).await;
        let _ = tokio::time::timeout_at(deadline, hold.release.wait_for(|&released| released)).await;
        drop(stream);
    }
    r
}

/// Opens `count` streams on `session`, `batch` connection attempts at a time.
async fn open_streams(api: &Api, session: &str, client: Option<&str>, count: usize) -> Res<Vec<Stream>> {
    const BATCH: usize = 50;
    let mut streams = Vec::with_capacity(count);
    while streams.len() < count {
        let n = BATCH.min(count - streams.len());
        let opened = futures_util::future::join_all((0..n).map(|_| api.subscribe(session, client))).await;
        for s in opened {
            streams.push(s?);
        }
    }
    Ok(streams)
}

/// A fresh session for one run: a new session on the running agent (`thread` scope).
pub async fn fresh_session(api: &Api, daemon: &Daemon) -> Res<crate::api::Created> {
    api.create(&daemon.workspace, Some("thread")).await
}

/// (a) One prompt `stream N [rate]` relayed to `subscribers` streams.
pub async fn relay(
    api: &Api,
    daemon: &Daemon,
    subscribers: usize,
    directive: &str,
    expected: u64,
    timeout: Duration,
) -> Res<RelayRun> {
    let created = fresh_session(api, daemon).await?;
    relay_on(api, &created, Some(daemon), subscribers, directive, expected, timeout).await
}

/// [`relay`] on a session already created (on whichever daemon of a fleet): `api` may be
/// another daemon, which relays. The daemon's CPU per update is measured when `cpu_of` is given
/// (a fleet's runs leave it out: two daemons share the work).
pub async fn relay_on(
    api: &Api,
    created: &crate::api::Created,
    cpu_of: Option<&Daemon>,
    subscribers: usize,
    directive: &str,
    expected: u64,
    timeout: Duration,
) -> Res<RelayRun> {
    let client = created.client_id.as_deref();
    let deadline = Instant::now() + timeout;
    let streams = open_streams(api, &created.session_id, client, subscribers).await?;
    let tasks: Vec<_> = streams.into_iter().map(|s| tokio::spawn(drain_turn(s, deadline, None))).collect();
    let cpu = cpu_of.map(Daemon::cpu_ns).transpose()?;
    let reader_cpu = own_cpu_ns()?;
    api.prompt_async(&created.session_id, directive, client).await?;
    let mut subs = Vec::with_capacity(tasks.len());
    for t in tasks {
        subs.push(t.await?);
    }
    let run =
        RelayRun::from_subscribers(subs, expected).with_reader_cpu(own_cpu_ns()?.saturating_sub(reader_cpu));
    Ok(match (cpu_of, cpu) {
        (Some(daemon), Some(before)) => run.with_cpu(daemon.cpu_ns()?.saturating_sub(before)),
        _ => run,
    })
}

/// (g) One prompt `stream N` read by `streams` Node.js streams through the official SDK
/// (`bench/sdk-reader.mjs`: `DaemonClient.subscribeEvents`, i.e. its SSE parser).
pub async fn sdk_relay(
    api: &Api,
    daemon: &Daemon,
    sdk: &crate::procs::SdkReader,
    streams: usize,
    events: u64,
    timeout: Duration,
) -> Res<RelayRun> {
    use tokio::io::AsyncBufReadExt;
    let created = fresh_session(api, daemon).await?;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut child = tokio::process::Command::new("node")
        .arg(&sdk.script)
        .arg(&sdk.module)
        .arg(&daemon.base)
        .arg(&created.session_id)
        .arg(streams.to_string())
        .arg(timeout.as_millis().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout from the SDK reader")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut next = async || -> Res<Option<String>> {
        Ok(tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .map_err(|_| "the SDK reader timed out")??)
    };
    match next().await?.as_deref() {
        Some("ready") => {}
        other => return Err(format!("the SDK reader did not get ready: {other:?}").into()),
    }
    api.prompt_async(&created.session_id, &format!("stream {events}"), created.client_id.as_deref()).await?;
    let mut subs = Vec::with_capacity(streams);
    while let Some(line) = next().await? {
        let v: serde_json::Value = serde_json::from_str(&line)?;
        if let Some(e) = v.get("error") {
            return Err(format!("an SDK stream failed: {e}").into());
        }
        let num = |k: &str| v[k].as_u64().unwrap_or(0);
        subs.push(SubResult {
            updates: num("updates"),
            latencies_us: v["latenciesUs"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(serde_json::Value::as_u64)
                        .map(|l| l.min(u64::from(u32::MAX)) as u32)
                        .collect()
                })
                .unwrap_or_default(),
            first_emit_us: num("firstEmitUs"),
            last_recv_us: num("lastRecvUs"),
            evicted: v["evicted"].as_bool().unwrap_or(false),
            ended: v["ended"].as_bool().unwrap_or(false),
            now: 0,
        });
    }
    let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    if subs.len() != streams {
        return Err(format!("the SDK reader reported {} of {streams} streams", subs.len()).into());
    }
    Ok(RelayRun::from_subscribers(subs, events))
}

/// (c) One run of K sequential permission requests.
#[derive(Debug, Clone)]
pub struct PermissionRun {
    pub requests: usize,
    /// (turn end seen − first request seen) / K, ms.
    pub per_request_ms: f64,
    /// Between successive requests: vote, decision, agent, next request, stream.
    pub interval_p50_ms: f64,
    pub interval_p99_ms: f64,
}

pub async fn permissions(api: &Api, daemon: &Daemon, k: usize, timeout: Duration) -> Res<PermissionRun> {
    let created = fresh_session(api, daemon).await?;
    permissions_on(api, &created, k, timeout).await
}

/// [`permissions`] on a session already created: streamed and voted through `api`, which in a
/// fleet may be another daemon than the one holding the session.
pub async fn permissions_on(
    api: &Api,
    created: &crate::api::Created,
    k: usize,
    timeout: Duration,
) -> Res<PermissionRun> {
    permission_turn(api, created, k, timeout, true).await
}

/// [`permissions`] where the daemon decides each request itself (a trusted reviewer): the
/// client only reads the stream, and votes nothing.
pub async fn permissions_unvoted(
    api: &Api,
    daemon: &Daemon,
    k: usize,
    timeout: Duration,
) -> Res<PermissionRun> {
    let created = fresh_session(api, daemon).await?;
    permission_turn(api, &created, k, timeout, false).await
}

async fn permission_turn(
    api: &Api,
    created: &crate::api::Created,
    k: usize,
    timeout: Duration,
    vote: bool,
) -> Res<PermissionRun> {
    let session = created.session_id.clone();
    let client = created.client_id.as_deref();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut stream = api.subscribe(&session, client).await?;
    api.prompt_async(&session, &format!("permissions {k}"), client).await?;
    let mut scanner = Scanner::default();
    let mut seen: Vec<Instant> = Vec::with_capacity(k);
    let mut events = Vec::new();
    let end = 'read: loop {
        let chunk = match tokio::time::timeout_at(deadline, stream.chunk()).await {
            Ok(Ok(Some(c))) => c,
            Ok(Ok(None)) => return Err("permissions: the stream ended before the turn".into()),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(format!("permissions: timed out after {} requests", seen.len()).into()),
        };
        let at = Instant::now();
        scanner.feed(&chunk, |f| events.push(f));
        for f in events.drain(..) {
            let Frame::Event { kind, envelope } = f else { continue };
            match kind.as_str() {
                "permission_request" => {
                    seen.push(at);
                    if !vote {
                        continue;
                    }
                    let rid = envelope["data"]["requestId"]
                        .as_str()
                        .ok_or("permission_request without requestId")?;
                    let status = api.vote(&session, rid, "allow_once", client).await?;
                    if status != 200 {
                        return Err(format!("vote answered {status}").into());
                    }
                }
                "turn_complete" => break 'read at,
                "turn_error" => return Err(format!("permissions: turn_error {envelope}").into()),
                _ => {}
            }
        }
    };
    if seen.len() != k {
        return Err(format!("permissions: saw {} requests, wanted {k}", seen.len()).into());
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

/// (d) Create and attach latency.
#[derive(Debug, Clone)]
pub struct CreateRun {
    /// The first create on a fresh daemon (mediatord starts the agent here; qwen serve may have
    /// preheated it).
    pub first_ms: f64,
    /// A new session on the running agent (`sessionScope: "thread"`), median.
    pub create_p50_ms: f64,
    /// Attaching to the workspace's live default session, median.
    pub attach_p50_ms: f64,
}

pub async fn create_attach(api: &Api, daemon: &Daemon, n: usize) -> Res<CreateRun> {
    let t = Instant::now();
    let first = api.create(&daemon.workspace, None).await?;
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    if first.attached {
        return Err("the first create attached to an existing session".into());
    }
    let mut creates = Vec::with_capacity(n);
    let mut attaches = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let c = api.create(&daemon.workspace, Some("thread")).await?;
        creates.push(t.elapsed().as_micros() as u64);
        if c.attached {
            return Err("a thread-scope create attached".into());
        }
        let t = Instant::now();
        let a = api.create(&daemon.workspace, None).await?;
        attaches.push(t.elapsed().as_micros() as u64);
        if !a.attached || a.session_id != first.session_id {
            return Err("a second default create did not attach".into());
        }
    }
    Ok(CreateRun {
        first_ms,
        create_p50_ms: percentile(&mut creates, 50.0).unwrap_or(0) as f64 / 1e3,
        attach_p50_ms: percentile(&mut attaches, 50.0).unwrap_or(0) as f64 / 1e3,
    })
}

/// (e) Daemon RSS, KiB.
#[derive(Debug, Clone)]
pub struct MemoryRun {
    pub idle_kib: u64,
    pub sessions_kib: u64,
    pub sessions: usize,
    /// `None` when the daemon refused that many streams (`refused` says why).
    pub subscribers_kib: Option<u64>,
    /// The reading right before the streams opened, after one turn on their session read by one
    /// stream ([`warm_turn`]): what they add is counted from here.
    pub streams_base_kib: u64,
    pub streams_base_anon_kib: u64,
    /// The anonymous part of the last two readings (`RssAnon`: heap and stacks, no code pages).
    pub sessions_anon_kib: u64,
    pub subscribers_anon_kib: Option<u64>,
    pub subscribers: usize,
    pub refused: Option<String>,
    /// Streams that did not see every update of the warm-up turn.
    pub subscribers_incomplete: usize,
}

/// How long memory is left to settle before a reading.
const SETTLE: Duration = Duration::from_millis(1500);

/// Updates of the turn idle streams or connections carry before the memory reading.
pub const WARM_UP: u64 = 100;

/// One `stream WARM_UP` turn on `session`, read to its end by one stream that then closes. What a
/// session's first turn costs the daemon once (the store's pages and writer, the code it runs for
/// the first time, thread stacks) is then paid before a reading meant to count connections only.
pub async fn warm_turn(api: &Api, session: &str, client: Option<&str>) -> Res<()> {
    let stream = api.subscribe(session, client).await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let reader = tokio::spawn(drain_turn(stream, deadline, None));
    api.prompt_async(session, &format!("stream {WARM_UP}"), client).await?;
    let r = reader.await?;
    if !r.ended || r.updates != WARM_UP {
        return Err(
            format!("the warm-up turn: {} of {WARM_UP} updates, ended: {}", r.updates, r.ended).into()
        );
    }
    Ok(())
}

pub async fn memory(api: &Api, daemon: &Daemon, sessions: usize, subscribers: usize) -> Res<MemoryRun> {
    memory_via(api, std::slice::from_ref(api), daemon, sessions, subscribers, None).await
}

/// [`memory`], the streams opened through `via` in turn (HTTP/2 clients: one connection each);
/// `at_idle` is called after the last reading, every stream still open (`idle --kill-at-idle`).
pub async fn memory_via(
    api: &Api,
    via: &[Api],
    daemon: &Daemon,
    sessions: usize,
    subscribers: usize,
    at_idle: Option<fn(&Daemon)>,
) -> Res<MemoryRun> {
    tokio::time::sleep(SETTLE).await;
    let idle_kib = daemon.rss_kib()?;
    let mut ids = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        ids.push(api.create(&daemon.workspace, Some("thread")).await?);
    }
    tokio::time::sleep(SETTLE).await;
    let with_sessions = daemon.resident()?;
    let sessions_kib = with_sessions.rss_kib;
    let target = ids.first().ok_or("no session")?;
    let client = target.client_id.as_deref();
    warm_turn(api, &target.session_id, client).await?;
    tokio::time::sleep(SETTLE).await;
    let streams_base = daemon.resident()?;
    let mut opened = Vec::with_capacity(subscribers);
    let share = subscribers.div_ceil(via.len().max(1));
    let mut result = Ok(());
    for (i, through) in via.iter().enumerate() {
        let n = share.min(subscribers.saturating_sub(i * share));
        match open_streams(through, &target.session_id, client, n).await {
            Ok(s) => opened.extend(s),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    let streams = match result.map(|()| opened) {
        Ok(s) => s,
        Err(e) if crate::is_refusal(&e) => {
            return Ok(MemoryRun {
                idle_kib,
                sessions_kib,
                sessions,
                subscribers_kib: None,
                streams_base_kib: streams_base.rss_kib,
                streams_base_anon_kib: streams_base.anon_kib,
                sessions_anon_kib: with_sessions.anon_kib,
                subscribers_anon_kib: None,
                subscribers,
                refused: Some(e.to_string()),
                subscribers_incomplete: 0,
            });
        }
        Err(e) => return Err(e),
    };
    let (release, release_rx) = watch::channel(false);
    let (read_tx, mut read_rx) = tokio::sync::mpsc::channel(subscribers.max(1));
    let deadline = Instant::now() + Duration::from_secs(300);
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|s| {
            let hold = Hold { read: read_tx.clone(), release: release_rx.clone() };
            tokio::spawn(drain_turn(s, deadline, Some(hold)))
        })
        .collect();
    drop(read_tx);
    // One short turn so every stream has carried traffic (buffers in use, not just sockets).
    api.prompt_async(&target.session_id, &format!("stream {WARM_UP}"), client).await?;
    // Read RSS once every stream has seen the turn end, with all of them still open.
    let read_deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut read = 0;
    while read < subscribers {
        match tokio::time::timeout_at(read_deadline, read_rx.recv()).await {
            Ok(Some(())) => read += 1,
            _ => break,
        }
    }
    tokio::time::sleep(SETTLE).await;
    let with_streams = daemon.resident()?;
    if let Some(at_idle) = at_idle {
        at_idle(daemon);
    }
    let _ = release.send(true);
    let mut incomplete = 0;
    for t in tasks {
        match t.await {
            Ok(r) if r.ended && r.updates == WARM_UP => {}
            _ => incomplete += 1,
        }
    }
    Ok(MemoryRun {
        idle_kib,
        sessions_kib,
        sessions,
        subscribers_kib: Some(with_streams.rss_kib),
        streams_base_kib: streams_base.rss_kib,
        streams_base_anon_kib: streams_base.anon_kib,
        sessions_anon_kib: with_sessions.anon_kib,
        subscribers_anon_kib: Some(with_streams.anon_kib),
        subscribers,
        refused: None,
        subscribers_incomplete: incomplete,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(updates: u64) -> RelayRun {
        let sub = SubResult { updates, ended: true, ..SubResult::default() };
        RelayRun::from_subscribers(vec![sub], updates)
    }

    #[test]
    fn cpu_per_update_is_the_cpu_time_over_the_updates_received_and_none_without_any() {
        let run = received(4).with_cpu(1_000).with_reader_cpu(300);
        assert_eq!((run.cpu_ns_per_update, run.reader_cpu_ns_per_update), (Some(250.0), Some(75.0)));
        let run = received(1).with_cpu(7).with_reader_cpu(0);
        assert_eq!((run.cpu_ns_per_update, run.reader_cpu_ns_per_update), (Some(7.0), Some(0.0)));
        let none = received(0).with_cpu(1_000).with_reader_cpu(1_000);
        assert_eq!((none.cpu_ns_per_update, none.reader_cpu_ns_per_update), (None, None));
    }

    /// Even over a fraction of a scheduler tick, on a thread that never stops to wait.
    #[test]
    fn this_process_cpu_time_counts_a_moment_of_work() {
        let before = own_cpu_ns().expect("the process clock");
        let mut x = 0u64;
        let start = Instant::now();
        while start.elapsed() < Duration::from_micros(200) {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
        assert!(own_cpu_ns().expect("again") > before, "{x}");
    }

    #[test]
    fn this_process_cpu_time_grows_while_it_works() {
        let before = own_cpu_ns().expect("the process clock");
        let mut x = 0u64;
        let start = Instant::now();
        // Busy for a few milliseconds of CPU, bounded in time whatever the machine does.
        while start.elapsed() < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
        assert!(own_cpu_ns().expect("again") > before, "{x}");
    }
}

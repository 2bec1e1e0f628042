//! Scenario (q): many idle watchers on one daemon (issue #46). For each transport, on a fresh
//! daemon:
//!
//! 1. N event streams (or `/acp` WebSockets) opened on one session and left idle; the daemon's RSS
//!    before and after (settled): KiB per watcher.
//! 2. One update (`stream 1`) published to all of them: the time from the agent's emit stamp until
//!    the last watcher had it, and how many had it.
//! 3. While they are held: K permission round trips on another session (its own stream and votes,
//!    as scenario (c)), ms per request and the p99 between requests.
//!
//! Transports: HTTP/2 ([`H2_STREAMS_PER_CONNECTION`] streams per connection, h2c), the same over
//! TLS (the daemon serving https with a leaf of a CA made for the run, the clients trusting that
//! CA alone, h2 by ALPN), HTTP/1.1 (one connection per stream, spread over several `127.0.1.x`
//! source addresses so no one address runs out of ephemeral ports), and `/acp` over WebSocket.
//! Everything is on loopback. Opening is bounded: at most [`IN_FLIGHT`] opens at once,
//! [`OPEN_DEADLINE`] in all; every wait has a deadline.
//!
//! The file limit: the bench raises its own soft `RLIMIT_NOFILE` to the hard one before it starts
//! a daemon (which inherits it). A watcher over HTTP/1.1 or a WebSocket is a socket in the daemon
//! and one in the bench, so their N is bounded by that limit (the report says when it cut N);
//! HTTP/2 puts 125 watchers on one socket.
//!
//! `mediatord-bench scale --mediatord BIN [--runs N] [--h2-streams N] [--tls-streams N] [--h1-streams N] [--acp N]`

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use memchr::memmem;

use crate::Res;
use crate::acp::{Conn, STAMP, stamp};
use crate::api::Api;
use crate::h2::H2_STREAMS_PER_CONNECTION;
use crate::procs::{Daemon, Kind, Tools};
use crate::scenarios::{self, PermissionRun};
use crate::stats::{median, now_us};
use crate::tls::Pki;

/// The transports' names in the report.
const HTTP2: &str = "HTTP/2";
const HTTP2_TLS: &str = "HTTP/2 over TLS";
/// Opens in flight at once (connects, handshakes, subscribes).
pub const IN_FLIGHT: usize = 256;
/// How long opening all the watchers of one run may take.
pub const OPEN_DEADLINE: Duration = Duration::from_secs(600);
/// How long the one update may take to reach every watcher before the run counts who had it.
pub const FANOUT_DEADLINE: Duration = Duration::from_secs(60);
/// Source addresses the HTTP/1.1 watchers are spread over (`127.0.1.1` ..).
pub const SOURCE_ADDRESSES: u8 = 8;
/// Sockets the bench keeps for itself (its control connections, the daemon's pipes, files).
const FD_RESERVE: u64 = 512;
/// Permission round trips timed while the watchers are held.
const PERMISSIONS: usize = 50;
/// How long memory is left to settle before a reading.
const SETTLE: Duration = Duration::from_millis(1500);

/// How many watchers of each transport, and how many runs.
#[derive(Debug, Clone)]
pub struct ScalePlan {
    pub runs: usize,
    pub h2_streams: usize,
    /// HTTP/2 event streams over TLS.
    pub tls_streams: usize,
    pub h1_streams: usize,
    pub acp: usize,
}

impl Default for ScalePlan {
    fn default() -> ScalePlan {
        ScalePlan { runs: 1, h2_streams: 100_000, tls_streams: 100_000, h1_streams: 15_000, acp: 10_000 }
    }
}

/// One transport's run.
#[derive(Debug, Clone)]
pub struct ScaleRun {
    pub transport: &'static str,
    /// Watchers asked for, and opened.
    pub asked: usize,
    pub opened: usize,
    pub open_secs: f64,
    pub rss_before_kib: u64,
    pub rss_with_kib: u64,
    /// Emit stamp → the last watcher that had the update, ms; and how many had it.
    pub fanout_ms: f64,
    pub reached: usize,
    pub permissions: PermissionRun,
}

impl ScaleRun {
    pub fn kib_per_watcher(&self) -> f64 {
        self.rss_with_kib.saturating_sub(self.rss_before_kib) as f64 / self.opened.max(1) as f64
    }
}

#[derive(Debug, Clone, Default)]
pub struct ScaleReport {
    pub runs: Vec<ScaleRun>,
    /// What the file limit cut, and runs that failed, with why.
    pub notes: Vec<String>,
    pub failures: Vec<String>,
}

/// Raises this process's soft file limit to its hard one; the limit now.
fn raise_file_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

pub async fn run(tools: &Tools, plan: &ScalePlan) -> Res<ScaleReport> {
    let files = raise_file_limit();
    let mut report = ScaleReport::default();
    let fit = |asked: usize, what: &str, notes: &mut Vec<String>| {
        let most = files.saturating_sub(FD_RESERVE) as usize;
        if asked > most {
            notes.push(format!(
                "{what}: {asked} asked, {most} run: each is a socket in the daemon and one in the bench, \
                 and this machine's hard file limit is {files} (raised to it; beyond it needs \
                 CAP_SYS_RESOURCE)"
            ));
        }
        asked.min(most)
    };
    let h1 = fit(plan.h1_streams, "HTTP/1.1 event streams", &mut report.notes);
    let acp = fit(plan.acp, "/acp WebSockets", &mut report.notes);
    for run in 0..plan.runs {
        let transports =
            [(HTTP2, plan.h2_streams), (HTTP2_TLS, plan.tls_streams), ("HTTP/1.1", h1), ("/acp", acp)];
        for (transport, n) in transports {
            if n == 0 {
                continue;
            }
            eprintln!("scale: run {} of {}, {n} {transport} watchers", run + 1, plan.runs);
            match one(tools, transport, n).await {
                Ok(r) => {
                    eprintln!(
                        "scale:   {} opened in {:.1} s, {:.2} KiB each, update to all in {:.0} ms ({} reached), permission {:.2} ms",
                        r.opened,
                        r.open_secs,
                        r.kib_per_watcher(),
                        r.fanout_ms,
                        r.reached,
                        r.permissions.per_request_ms
                    );
                    report.runs.push(r);
                }
                Err(e) => report.failures.push(format!("run {} {transport}: {e}", run + 1)),
            }
        }
    }
    Ok(report)
}

/// What each watcher reports: how long after its emit stamp it had the update, µs.
type Reached = tokio::sync::mpsc::Sender<u64>;

async fn one(tools: &Tools, transport: &'static str, n: usize) -> Res<ScaleRun> {
    // Per session; the daemon's own ceiling is 100 000.
    let subscribers = n.clamp(2000, 100_000).to_string();
    let mut args = vec!["--max-subscribers".to_owned(), subscribers];
    // Over TLS: a CA made for this run, whose leaf the daemon serves and the clients alone trust.
    let pki_dir = (transport == HTTP2_TLS).then(|| crate::procs::TempDir::new("pki")).transpose()?;
    let pki = pki_dir.as_ref().map(|dir| Pki::new(&dir.0)).transpose()?;
    if let Some(pki) = &pki {
        for (flag, path) in [("--tls-cert", &pki.cert), ("--tls-key", &pki.key)] {
            args.push(flag.to_owned());
            args.push(path.display().to_string());
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start(Kind::Mediatord, tools, &args).await?;
    let api = match &pki {
        Some(pki) => Api::new_tls(&daemon.base, &pki.ca_pem, false)?,
        None => Api::new(&daemon.base)?,
    };
    let watched = scenarios::fresh_session(&api, &daemon).await?;
    tokio::time::sleep(SETTLE).await;
    let rss_before_kib = daemon.rss_kib()?;
    let (reached_tx, mut reached_rx) = tokio::sync::mpsc::channel(n.max(1));
    let opening = Instant::now();
    let open_deadline = tokio::time::Instant::now() + OPEN_DEADLINE;
    let session = watched.session_id.clone();
    let held = match transport {
        HTTP2 | HTTP2_TLS | "HTTP/1.1" => {
            let conns = n.div_ceil(H2_STREAMS_PER_CONNECTION);
            let apis: Vec<Api> = if let Some(pki) = &pki {
                (0..conns).map(|_| Api::new_tls(&daemon.base, &pki.ca_pem, true)).collect::<Res<_>>()?
            } else if transport == HTTP2 {
                (0..conns).map(|_| Api::new_h2(&daemon.base, None)).collect::<Res<_>>()?
            } else {
                (1..=SOURCE_ADDRESSES)
                    .map(|i| Api::new_from(&daemon.base, IpAddr::V4(Ipv4Addr::new(127, 0, 1, i))))
                    .collect::<Res<_>>()?
            };
            let per_api = if transport == "HTTP/1.1" { 1 } else { H2_STREAMS_PER_CONNECTION };
            open_all(n, open_deadline, |i| {
                let api = apis[(i / per_api) % apis.len()].clone();
                let (session, tx) = (session.clone(), reached_tx.clone());
                async move {
                    let stream = api.subscribe(&session, None).await?;
                    Ok(tokio::spawn(watch_sse(stream, tx)))
                }
            })
            .await?
        }
        _ => {
            let (base, workspace) = (daemon.base.clone(), daemon.workspace.clone());
            open_all(n, open_deadline, |_| {
                let (base, workspace, session) = (base.clone(), workspace.clone(), session.clone());
                let tx = reached_tx.clone();
                async move {
                    let mut conn = Conn::open(&base).await?;
                    conn.attach(&session, &workspace).await?;
                    Ok(tokio::spawn(watch_acp(conn, tx)))
                }
            })
            .await?
        }
    };
    drop(reached_tx);
    let opened = held.len();
    let open_secs = opening.elapsed().as_secs_f64();
    tokio::time::sleep(SETTLE).await;
    let rss_with_kib = daemon.rss_kib()?;

    api.prompt_async(&watched.session_id, "stream 1", watched.client_id.as_deref()).await?;
    let fanout_deadline = tokio::time::Instant::now() + FANOUT_DEADLINE;
    let (mut latest_us, mut reached) = (0u64, 0);
    while reached < opened {
        match tokio::time::timeout_at(fanout_deadline, reached_rx.recv()).await {
            Ok(Some(after_us)) => {
                latest_us = latest_us.max(after_us);
                reached += 1;
            }
            Ok(None) | Err(_) => break,
        }
    }

    let permissions = scenarios::permissions(&api, &daemon, PERMISSIONS, Duration::from_secs(120)).await;
    for task in &held {
        task.abort();
    }
    daemon.stop().await;
    Ok(ScaleRun {
        transport,
        asked: n,
        opened,
        open_secs,
        rss_before_kib,
        rss_with_kib,
        fanout_ms: latest_us as f64 / 1e3,
        reached,
        permissions: permissions?,
    })
}

/// Opens `n` watchers with `open(i)`, at most [`IN_FLIGHT`] at once, all before `deadline`.
async fn open_all<F, Fut>(
    n: usize,
    deadline: tokio::time::Instant,
    open: F,
) -> Res<Vec<tokio::task::JoinHandle<()>>>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Res<tokio::task::JoinHandle<()>>>,
{
    let mut opening = futures_util::stream::iter(0..n).map(open).buffer_unordered(IN_FLIGHT);
    let mut held = Vec::with_capacity(n);
    loop {
        match tokio::time::timeout_at(deadline, opening.next()).await {
            Ok(Some(Ok(task))) => held.push(task),
            Ok(Some(Err(e))) => {
                for task in &held {
                    task.abort();
                }
                return Err(format!("after {} opened: {e}", held.len()).into());
            }
            Ok(None) => return Ok(held),
            Err(_) => {
                for task in &held {
                    task.abort();
                }
                return Err(format!("{} of {n} opened in {} s", held.len(), OPEN_DEADLINE.as_secs()).into());
            }
        }
    }
}

/// Reads an event stream, says when the stamped update came, then keeps reading (idle) until
/// the stream ends or the task is aborted.
async fn watch_sse(mut stream: crate::api::Stream, reached: Reached) {
    let finder = memmem::Finder::new(STAMP);
    let mut carry: Vec<u8> = Vec::new();
    let mut told = false;
    while let Ok(Some(chunk)) = stream.chunk().await {
        if told {
            continue;
        }
        let now = now_us();
        carry.extend_from_slice(&chunk);
        if let Some(emitted) = stamp(&finder, &carry) {
            let _ = reached.send(now.saturating_sub(emitted)).await;
            told = true;
            carry = Vec::new();
        } else {
            // Keep what could be the start of a stamp cut by the chunk's end.
            let keep = carry.len().saturating_sub(STAMP.len() + 24);
            carry.drain(..keep);
        }
    }
}

/// [`watch_sse`] for an `/acp` connection: the stamped `session/update`.
async fn watch_acp(mut conn: Conn, reached: Reached) {
    let finder = memmem::Finder::new(STAMP);
    let mut told = false;
    while let Ok(Some(text)) = conn.text().await {
        if told || !text.contains("\"session/update\"") {
            continue;
        }
        if let Some(emitted) = stamp(&finder, text.as_bytes()) {
            let _ = reached.send(now_us().saturating_sub(emitted)).await;
            told = true;
        }
    }
}

impl ScaleReport {
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| transport | watchers (asked) | opened in (s) | KiB per watcher | RSS with them (MiB) | one update to all (ms) | reached | permission round trip (ms per request) | request→next p99 (ms) |"
        );
        let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|--:|--:|--:|");
        for r in &self.runs {
            let _ = writeln!(
                out,
                "| {} | {} ({}) | {:.1} | {:.2} | {:.0} | {:.0} | {} | {:.3} | {:.3} |",
                r.transport,
                r.opened,
                r.asked,
                r.open_secs,
                r.kib_per_watcher(),
                r.rss_with_kib as f64 / 1024.0,
                r.fanout_ms,
                r.reached,
                r.permissions.per_request_ms,
                r.permissions.interval_p99_ms
            );
        }
        for transport in [HTTP2, HTTP2_TLS, "HTTP/1.1", "/acp"] {
            let runs: Vec<&ScaleRun> = self.runs.iter().filter(|r| r.transport == transport).collect();
            if runs.len() > 1 {
                let kib: Vec<f64> = runs.iter().map(|r| r.kib_per_watcher()).collect();
                let ms: Vec<f64> = runs.iter().map(|r| r.fanout_ms).collect();
                let _ = writeln!(
                    out,
                    "\n{transport}, medians of {} runs: {:.2} KiB per watcher, one update to all in {:.0} ms",
                    runs.len(),
                    median(&kib).unwrap_or(0.0),
                    median(&ms).unwrap_or(0.0)
                );
            }
        }
        for note in &self.notes {
            let _ = writeln!(out, "\n- {note}");
        }
        for failure in &self.failures {
            let _ = writeln!(out, "\n- failed: {failure}");
        }
        out
    }
}

//! Scenario (n): HTTP/2 beside HTTP/1.1 on one mediatord, run by run interleaved (h1 then h2):
//!
//! - the relay of one `stream N` prompt to 1 and to 10 event streams (over h2 all of them are
//!   streams of one connection; over HTTP/1.1 each has its own), the 10 at the defaults (how many
//!   are evicted) and on a daemon whose ring holds the burst (the rate with nothing evicted);
//! - K permission round trips, each voted on sight (over h2 the event stream and every vote share
//!   one connection);
//! - the memory an idle event stream holds: 1000 streams on one session, on a fresh daemon per
//!   run, over HTTP/1.1 (1000 connections) and over h2 ([`H2_STREAMS_PER_CONNECTION`] streams per
//!   connection, under the daemon's limit of 128 concurrent streams).
//!
//! `mediatord-bench h2 --mediatord BIN [--runs N] [--events N] [--only relay1,relay10,whole,permissions,memory]`
//! (`--only` runs those figures alone: `relay1` under `perf`, say). h2 is spoken with prior knowledge
//! (h2c) by reqwest (hyper's HTTP/2 client); over TLS the same server code serves `h2` by ALPN.

use std::fmt::Write as _;

use crate::api::Api;
use crate::procs::{Daemon, Kind, Tools};
use crate::scenarios;
use crate::stats::median;
use crate::{Plan, Res};

/// Event streams per HTTP/2 connection in the memory run: below the daemon's concurrent-stream
/// limit (128), as a browser or a client library would stay.
pub const H2_STREAMS_PER_CONNECTION: usize = 125;

/// One figure, its HTTP/1.1 and HTTP/2 runs.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub figure: String,
    /// Whether more is better (throughput) or less (times, memory).
    pub more_is_better: bool,
    pub h1: Vec<f64>,
    pub h2: Vec<f64>,
}

#[derive(Debug, Clone, Default)]
pub struct H2Report {
    pub rows: Vec<Row>,
    pub runs: usize,
    /// Runs that did not complete, with why (reported, never hidden).
    pub failures: Vec<String>,
}

fn row(figure: String, more_is_better: bool) -> Row {
    Row { figure, more_is_better, ..Row::default() }
}

pub async fn run(tools: &Tools, plan: &Plan) -> Res<H2Report> {
    let events = plan.events;
    // (subscribers, on a daemon whose ring holds the whole burst): before #46, 10 streams at the
    // defaults fell off the ring on this machine, so their rate was read where nothing can be
    // evicted; both stay, the defaults giving the evicted count (0 since #46).
    let configs = [(1usize, false, "relay1"), (10, false, "relay10"), (10, true, "whole")];
    let mut relay: Vec<(usize, bool, [Row; 4])> = configs
        .into_iter()
        .filter(|(_, _, name)| plan.wants(name))
        .map(|(subs, whole, _)| {
            let ring = if whole { format!(", `--event-ring-size {events}`") } else { String::new() };
            let what = format!("relay `stream {events}` to {subs} stream(s){ring}");
            (
                subs,
                whole,
                [
                    row(format!("{what}, store on (updates/s delivered)"), true),
                    row(format!("{what}: p99 emit→receive (ms)"), false),
                    row(format!("{what}: the daemon's CPU per update delivered (ns)"), false),
                    row(format!("{what}: streams evicted"), false),
                ],
            )
        })
        .collect();
    let mut permissions = row(
        format!("permission round trip, {} in sequence, voted on sight (ms per request)", plan.permissions),
        false,
    );
    let mut memory = row(
        format!("memory per idle event stream, {} streams on one session (KiB)", plan.memory_subscribers),
        false,
    );
    let mut failures = Vec::new();
    let d = Daemon::start(Kind::Mediatord, tools, &[]).await?;
    let ring = events.to_string();
    let whole = Daemon::start(Kind::Mediatord, tools, &["--event-ring-size", &ring]).await?;
    let apis = [
        (Api::new(&d.base)?, Api::new_h2(&d.base, plan.h2_max_frame)?),
        (Api::new(&whole.base)?, Api::new_h2(&whole.base, plan.h2_max_frame)?),
    ];
    for run in 0..plan.runs {
        for (subs, on_whole, [throughput, p99, cpu, evicted]) in &mut relay {
            let (daemon, (h1, h2)) = if *on_whole { (&whole, &apis[1]) } else { (&d, &apis[0]) };
            for (h2_run, api) in [(false, h1), (true, h2)] {
                eprintln!("bench: h2: relay x{subs} over {} (run {})", proto(h2_run), run + 1);
                let directive = format!("stream {events}");
                match scenarios::relay(api, daemon, *subs, &directive, events, plan.run_timeout).await {
                    Ok(r) => {
                        side(evicted, h2_run).push(r.evicted as f64);
                        if r.incomplete == 0 {
                            side(throughput, h2_run).push(r.delivered_per_s);
                            side(p99, h2_run).push(f64::from(r.p99_us) / 1e3);
                            side(cpu, h2_run).extend(r.cpu_ns_per_update);
                        } else if r.incomplete > r.evicted {
                            failures.push(format!(
                                "relay x{subs} over {}: {} of {subs} stream(s) incomplete, not evicted",
                                proto(h2_run),
                                r.incomplete - r.evicted
                            ));
                        }
                    }
                    Err(e) => failures.push(format!("relay x{subs} over {}: {e}", proto(h2_run))),
                }
            }
        }
        let (h1, h2) = &apis[0];
        for (h2_run, api) in [(false, h1), (true, h2)].into_iter().filter(|_| plan.wants("permissions")) {
            eprintln!("bench: h2: permissions over {} (run {})", proto(h2_run), run + 1);
            match scenarios::permissions(api, &d, plan.permissions, plan.run_timeout).await {
                Ok(r) => side(&mut permissions, h2_run).push(r.per_request_ms),
                Err(e) => failures.push(format!("permissions over {}: {e}", proto(h2_run))),
            }
        }
    }
    whole.stop().await;
    d.stop().await;
    for run in (0..plan.runs).filter(|_| plan.wants("memory")) {
        for h2_run in [false, true] {
            eprintln!("bench: h2: idle streams over {} (run {})", proto(h2_run), run + 1);
            match idle_streams(tools, plan.memory_subscribers, h2_run).await {
                Ok(kib) => side(&mut memory, h2_run).push(kib),
                Err(e) => failures.push(format!("idle streams over {}: {e}", proto(h2_run))),
            }
        }
    }
    let mut rows = Vec::new();
    for (_, _, figures) in relay {
        // A row with no figure on either side (no run of it completed) is left out.
        rows.extend(figures.into_iter().filter(|r| !(r.h1.is_empty() && r.h2.is_empty())));
    }
    rows.extend([permissions, memory].into_iter().filter(|r| !(r.h1.is_empty() && r.h2.is_empty())));
    Ok(H2Report { rows, runs: plan.runs, failures })
}

fn proto(h2: bool) -> &'static str {
    if h2 { "HTTP/2" } else { "HTTP/1.1" }
}

fn side(row: &mut Row, h2: bool) -> &mut Vec<f64> {
    if h2 { &mut row.h2 } else { &mut row.h1 }
}

/// KiB of daemon RSS per idle event stream: `streams` streams on one session of a fresh daemon.
async fn idle_streams(tools: &Tools, streams: usize, h2: bool) -> Res<f64> {
    let d = Daemon::start(Kind::Mediatord, tools, &[]).await?;
    let result = stream_memory(&d, streams, h2, None).await.map(|(rss, _anon)| rss);
    d.stop().await;
    result
}

/// What each of `streams` idle event streams on one session of `d` adds to its memory, KiB of
/// VmRSS and of its anonymous part: over HTTP/2 ([`H2_STREAMS_PER_CONNECTION`] a connection) or
/// over HTTP/1.1 (a connection each). `at_idle` runs while they are all open.
pub(crate) async fn stream_memory(
    d: &Daemon,
    streams: usize,
    h2: bool,
    at_idle: Option<fn(&Daemon)>,
) -> Res<(f64, f64)> {
    let api = Api::new(&d.base)?;
    let via: Vec<Api> = if h2 {
        let connections = streams.div_ceil(H2_STREAMS_PER_CONNECTION);
        (0..connections).map(|_| Api::new_h2(&d.base, None)).collect::<Res<_>>()?
    } else {
        vec![api.clone()]
    };
    let m = scenarios::memory_via(&api, &via, d, 1, streams, at_idle).await?;
    if m.subscribers_incomplete > 0 {
        return Err(format!("{} of {streams} streams incomplete", m.subscribers_incomplete).into());
    }
    let with = m.subscribers_kib.ok_or_else(|| m.refused.clone().unwrap_or_default())?;
    let with_anon = m.subscribers_anon_kib.unwrap_or(m.streams_base_anon_kib);
    let n = streams.max(1) as f64;
    Ok((
        with.saturating_sub(m.streams_base_kib) as f64 / n,
        with_anon.saturating_sub(m.streams_base_anon_kib) as f64 / n,
    ))
}

impl H2Report {
    pub fn markdown(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "| figure (median of {} runs) | HTTP/1.1 | HTTP/2 (h2c) | h2 vs HTTP/1.1 |\n|---|---:|---:|---:|",
            self.runs
        );
        for r in &self.rows {
            let (a, b) = (median(&r.h1), median(&r.h2));
            let cell = |v: Option<f64>| v.map_or("—".to_owned(), fmt);
            let ratio = match (a, b) {
                (Some(a), Some(b)) if a > 0.0 && b > 0.0 => {
                    // How h2 fares: > 100% is better, whichever way the figure runs.
                    let better = if r.more_is_better { b / a } else { a / b };
                    format!("{:.0}%", better * 100.0)
                }
                _ => "—".to_owned(),
            };
            let _ = writeln!(t, "| {} | {} | {} | {ratio} |", r.figure, cell(a), cell(b));
        }
        for f in &self.failures {
            let _ = writeln!(t, "\nfailed: {f}");
        }
        t
    }
}

fn fmt(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

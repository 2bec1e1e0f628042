//! Scenario (p): the memory each idle connection holds (issue #46), every kind on a fresh daemon per
//! run:
//!
//! - `h1`: event streams over HTTP/1.1 (one connection each), 1000 on one session;
//! - `h2`: the same streams over HTTP/2 ([`crate::h2::H2_STREAMS_PER_CONNECTION`] per connection);
//! - `acp`: `/acp` WebSocket connections, each attached to one session; then as many more on the
//!   same daemon, read again: what each of those adds (`acp-next`) is the cost of one more
//!   connection without the first round's one-off costs (the allocator's arenas growing to the
//!   turn's transient buffers, the ring's and the store's growth), which 60 connections share.
//!   One `/acp` connection carries a turn and closes before the first reading (the door's code
//!   paged in once per daemon, as the warm-up stream does for SSE).
//!
//! Each stream or connection carries a 100-update turn first (so its buffers have been used, as a
//! real client's have), then sits idle; the figure is what the daemon holds more than before they
//! opened, ÷ their count: its VmRSS, and the anonymous part of it (`RssAnon`: heap and stacks,
//! without the executable's pages, which the first use of a code path faults in once per daemon).
//!
//! `--kill-at-idle` SIGKILLs the daemon after the reading, every connection still open, and waits
//! for the process the benchmark started to exit by itself: run with a heap profiler as
//! `--mediatord` (`bench/idle-heap.sh` starts the daemon under `heaptrack`), every allocation the
//! idle connections hold is then reported as never freed, with where it was made.
//!
//! `mediatord-bench idle --mediatord BIN [--runs N] [--only h1,h2,acp] [--streams N]
//! [--connections N] [--kill-at-idle 1]`

use std::fmt::Write as _;
use std::time::Duration;

use crate::api::Api;
use crate::procs::{Daemon, Kind, Tools};
use crate::stats::median;
use crate::{Res, acp};

/// How long a wrapper (a heap profiler) gets to write its results once the daemon is killed.
const WRAPPER_GRACE: Duration = Duration::from_secs(300);

/// What to measure.
#[derive(Debug, Clone)]
pub struct IdlePlan {
    pub runs: usize,
    /// Event streams on one session (`h1`, `h2`).
    pub streams: usize,
    /// `/acp` connections on one session.
    pub connections: usize,
    /// Which kinds: `h1`, `h2`, `acp`; `None` = all.
    pub only: Option<Vec<String>>,
    pub kill_at_idle: bool,
}

impl IdlePlan {
    fn wants(&self, kind: &str) -> bool {
        self.only.as_ref().is_none_or(|o| o.iter().any(|k| k == kind))
    }
}

/// One kind's runs: KiB per idle connection, VmRSS and anonymous.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub figure: String,
    pub rss: Vec<f64>,
    pub anon: Vec<f64>,
}

#[derive(Debug, Clone, Default)]
pub struct IdleReport {
    pub rows: Vec<Row>,
    pub runs: usize,
    /// Runs that did not complete, with why (reported, never hidden).
    pub failures: Vec<String>,
}

fn kill(daemon: &Daemon) {
    daemon.kill_now();
}

pub async fn run(tools: &Tools, plan: &IdlePlan) -> Res<IdleReport> {
    let kinds = [
        ("h1", format!("idle event stream over HTTP/1.1, {} on one session", plan.streams)),
        ("h2", format!("idle event stream over HTTP/2, {} on one session", plan.streams)),
        ("acp", format!("idle `/acp` WebSocket connection, {} on one session", plan.connections)),
        (
            "acp-next",
            format!("the next {} idle `/acp` connections, on a daemon that holds {0}", plan.connections),
        ),
    ];
    let mut rows: Vec<(&str, Row)> = kinds
        .into_iter()
        .filter(|(kind, _)| plan.wants(kind.trim_end_matches("-next")))
        .map(|(kind, figure)| (kind, Row { figure, ..Row::default() }))
        .collect();
    let mut failures = Vec::new();
    for run in 0..plan.runs {
        let mut next = None;
        for (kind, row) in &mut rows {
            // The acp run's second round fills the row after its own.
            let got = match *kind {
                "acp-next" => next.take().ok_or_else(|| "no second round".into()),
                _ => one(tools, plan, kind).await.map(|(first, second)| {
                    next = second;
                    first
                }),
            };
            match got {
                Ok((rss, anon)) => {
                    eprintln!(
                        "bench: idle: {kind} (run {}): {rss:.2} KiB RSS, {anon:.2} KiB anonymous each",
                        run + 1
                    );
                    row.rss.push(rss);
                    row.anon.push(anon);
                }
                Err(e) => failures.push(format!("{kind} (run {}): {e}", run + 1)),
            }
        }
    }
    Ok(IdleReport { rows: rows.into_iter().map(|(_, r)| r).collect(), runs: plan.runs, failures })
}

/// One kind on a fresh daemon: KiB per idle connection (RSS, anonymous); for `acp`, also what a
/// second round of as many connections adds each.
async fn one(tools: &Tools, plan: &IdlePlan, kind: &str) -> Res<((f64, f64), Option<(f64, f64)>)> {
    let mut d = Daemon::start(Kind::Mediatord, tools, &[]).await?;
    let at_idle = plan.kill_at_idle.then_some(kill as fn(&Daemon));
    let result = async {
        let api = Api::new(&d.base)?;
        if kind == "acp" {
            let m = acp::memory(&api, &d, plan.connections, 2, at_idle).await?;
            if m.incomplete > 0 {
                return Err(format!("{} of {} connections incomplete", m.incomplete, plan.connections).into());
            }
            return Ok(((m.per_connection_kib(), m.per_connection_anon_kib()), m.next));
        }
        Ok((crate::h2::stream_memory(&d, plan.streams, kind == "h2", at_idle).await?, None))
    }
    .await;
    if plan.kill_at_idle && !d.exited(WRAPPER_GRACE).await {
        eprintln!("bench: idle: the daemon's wrapper did not exit within {WRAPPER_GRACE:?}");
    }
    d.stop().await;
    result
}

impl IdleReport {
    pub fn markdown(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "| KiB per connection (median of {} runs; every run) | VmRSS | RssAnon |\n|---|---:|---:|",
            self.runs
        );
        for r in &self.rows {
            let cell = |v: &[f64]| {
                let all = v.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(", ");
                median(v).map_or("—".to_owned(), |m| format!("{m:.1} ({all})"))
            };
            let _ = writeln!(t, "| {} | {} | {} |", r.figure, cell(&r.rss), cell(&r.anon));
        }
        for f in &self.failures {
            let _ = writeln!(t, "\nfailed: {f}");
        }
        t
    }
}

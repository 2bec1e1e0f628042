//! (i) A fleet (issue #33): two mediatord on one PostgreSQL (`--store`, given by `bench/fleet.sh`,
//! which makes a throwaway cluster), and a third alone on SQLite (its own state directory) for
//! the store's cost. The fleet's sessions are always created on A; each scenario runs through A
//! (direct), through B (which relays every request and the event stream to A), and on the SQLite
//! daemon. Runs alternate the three, so a machine loaded by others weighs on all alike.
//!
//! The store writer's row: after each burst on A (PostgreSQL) and on the SQLite daemon, the time
//! from the prompt until the daemon's `/health?deep=1` counts every event of the burst written
//! (`store.eventsWritten`), polled every [`POLL`].

use std::time::{Duration, Instant};

use crate::Res;
use crate::api::Api;
use crate::procs::{Daemon, Kind, Tools};
use crate::scenarios::{self, PermissionRun, RelayRun};
use crate::stats::median;

/// How often the writer's progress is read while waiting for a burst to be written.
const POLL: Duration = Duration::from_millis(5);

/// The three ways a scenario runs, in the report's order.
const WAYS: [&str; 3] =
    ["A, which holds the session (PostgreSQL)", "B, which relays to A", "one daemon alone on SQLite"];

/// How long one burst took to be recorded.
#[derive(Debug, Clone)]
pub struct WriterRun {
    /// Prompt sent → the last event of the burst counted written, ms.
    pub written_ms: f64,
    /// Events recorded per second over that time.
    pub events_per_s: f64,
    /// Events the writer could not take (recorded as a gap instead).
    pub dropped: u64,
}

/// What one fleet run measured, in [`WAYS`] order (the writer: PostgreSQL, SQLite).
#[derive(Debug, Default)]
pub struct FleetReport {
    pub events: u64,
    pub permissions: [Vec<PermissionRun>; 3],
    pub relay: [Vec<RelayRun>; 3],
    pub writer: [Vec<WriterRun>; 2],
}

/// The writer's counters from `/health?deep=1`: events written, events dropped.
async fn counters(api: &Api) -> Res<(u64, u64)> {
    let health = api.deep_health().await?;
    let store = &health["store"];
    let n = |k: &str| store[k].as_u64().ok_or_else(|| format!("/health?deep=1 has no store.{k}: {health}"));
    Ok((n("eventsWritten")?, n("eventsDropped")?))
}

/// A burst of `events` to one stream on `created` through `api`; with `writer` (the daemon
/// holding the session), also how long the store took to record it.
async fn burst(
    api: &Api,
    created: &crate::api::Created,
    events: u64,
    writer: Option<&Api>,
    timeout: Duration,
) -> Res<(RelayRun, Option<WriterRun>)> {
    let before = match writer {
        Some(w) => Some(counters(w).await?),
        None => None,
    };
    let start = Instant::now();
    let directive = format!("stream {events}");
    let run = scenarios::relay_on(api, created, 1, &directive, events, timeout).await?;
    let (Some(w), Some((written0, dropped0))) = (writer, before) else { return Ok((run, None)) };
    let deadline = start + timeout;
    loop {
        let (written, dropped) = counters(w).await?;
        // Dropped events are recorded as one gap, not written: the burst is settled either way.
        if written + dropped >= written0 + dropped0 + events {
            let s = start.elapsed().as_secs_f64();
            return Ok((
                run,
                Some(WriterRun {
                    written_ms: s * 1e3,
                    events_per_s: (written - written0) as f64 / s,
                    dropped: dropped - dropped0,
                }),
            ));
        }
        if Instant::now() > deadline {
            return Err(format!("the store wrote {} of {events} events in time", written - written0).into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Starts A and B on `store` and S on SQLite, then `runs` rounds of: K permission round trips,
/// and a burst of `events` updates to one stream; each through A, through B, and on S.
pub async fn run(tools: &Tools, store: &str, runs: usize, k: usize, events: u64) -> Res<FleetReport> {
    let args = ["--store", store];
    let a = Daemon::start(Kind::Mediatord, tools, &args).await?;
    let b = Daemon::start(Kind::Mediatord, tools, &args).await?;
    let s = Daemon::start(Kind::Mediatord, tools, &[]).await?;
    let (on_a, via_b, on_s) = (Api::new(&a.base)?, Api::new(&b.base)?, Api::new(&s.base)?);
    let timeout = Duration::from_secs(120);
    let mut report = FleetReport { events, ..FleetReport::default() };
    for _ in 0..runs {
        for (i, api) in [&on_a, &via_b, &on_s].into_iter().enumerate() {
            // The session lives on A, or on S for S's own row.
            let (home, daemon) = if i == 2 { (&on_s, &s) } else { (&on_a, &a) };
            let created = scenarios::fresh_session(home, daemon).await?;
            report.permissions[i].push(scenarios::permissions_on(api, &created, k, timeout).await?);
            let created = scenarios::fresh_session(home, daemon).await?;
            // The writer is timed where no relay is involved: A for PostgreSQL, S for SQLite.
            let writer = (i != 1).then_some(home);
            let (relayed, written) = burst(api, &created, events, writer, timeout).await?;
            report.relay[i].push(relayed);
            if let Some(w) = written {
                report.writer[i / 2].push(w);
            }
        }
    }
    Ok(report)
}

impl FleetReport {
    /// The rows for `docs/benchmarks.md`: medians of the runs.
    pub fn markdown(&self) -> String {
        let med = |v: Vec<f64>| median(&v).unwrap_or(f64::NAN);
        let runs = self.relay[0].len();
        let mut out = format!(
            "Medians of {runs} runs. Permission round trip: `permissions K`, each request voted on sight.\n\n\
             | through | ms per request | request→next p50 ms | p99 ms |\n|---|--:|--:|--:|\n"
        );
        for (i, name) in WAYS.iter().enumerate() {
            let runs = &self.permissions[i];
            out.push_str(&format!(
                "| {name} | {:.3} | {:.3} | {:.3} |\n",
                med(runs.iter().map(|r| r.per_request_ms).collect()),
                med(runs.iter().map(|r| r.interval_p50_ms).collect()),
                med(runs.iter().map(|r| r.interval_p99_ms).collect()),
            ));
        }
        out.push_str(&format!(
            "\nA burst of {} updates to one stream.\n\n\
             | through | events/s to one stream | latency p50 µs | p99 µs | incomplete streams |\n|---|--:|--:|--:|--:|\n",
            self.events
        ));
        for (i, name) in WAYS.iter().enumerate() {
            let runs = &self.relay[i];
            out.push_str(&format!(
                "| {name} | {:.0} | {:.0} | {:.0} | {} |\n",
                med(runs.iter().map(|r| r.delivered_per_s).collect()),
                med(runs.iter().map(|r| f64::from(r.p50_us)).collect()),
                med(runs.iter().map(|r| f64::from(r.p99_us)).collect()),
                runs.iter().map(|r| r.incomplete).sum::<usize>(),
            ));
        }
        out.push_str(&format!(
            "\nThe store writer: the same burst of {} events, prompt → every event counted written.\n\n\
             | store | ms until written | events/s written | events dropped (gaps) |\n|---|--:|--:|--:|\n",
            self.events
        ));
        for (i, name) in ["PostgreSQL (A)", "SQLite"].iter().enumerate() {
            let runs = &self.writer[i];
            out.push_str(&format!(
                "| {name} | {:.1} | {:.0} | {} |\n",
                med(runs.iter().map(|r| r.written_ms).collect()),
                med(runs.iter().map(|r| r.events_per_s).collect()),
                runs.iter().map(|r| r.dropped).sum::<u64>(),
            ));
        }
        out
    }
}

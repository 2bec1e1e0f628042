//! mediatord-bench — the same load, side by side, against mediatord and qwen serve.
//!
//! Crate map:
//! - [`procs`]: start/stop each daemon (and its synthetic agent) in a throw-away directory; RSS.
//! - [`api`]: the REST + SSE calls both daemons share.
//! - [`sse`]: SSE framing; reads the agent's emit stamp without a JSON parser.
//! - [`direct`]: scenario (b), the agent read over stdio with no daemon (the physical limit).
//! - [`scenarios`]: scenarios (a) relay, (c) permissions, (d) create/attach, (e) memory.
//! - [`acp`]: scenarios (i) relay, (j) permissions and (k) memory over `/acp`'s WebSocket.
//! - [`report`]: medians, ratios, targets, and `docs/benchmarks.md`.
//! - [`stats`]: percentiles and the shared µs clock.
//! - [`snapshots`]: scenario (m), the snapshot engine on a 10 000-file workspace (no daemon).
//! - [`scale`]: scenario (q), many idle watchers on one daemon and one update to all of them.
//!
//! [`compare`] runs everything; [`smoke`] is the tiny run `cargo test` uses.

pub mod acp;
pub mod api;
pub mod bigdb;
pub mod direct;
pub mod fleet;
pub mod h2;
pub mod idle;
pub mod peer;
pub mod procs;
pub mod report;
pub mod review;
pub mod scale;
pub mod scenarios;
pub mod snapshots;
pub mod sse;
pub mod stats;
pub mod tls;

use std::time::Duration;

use procs::{Daemon, Kind, Tools};
use scenarios::{CreateRun, MemoryRun, PermissionRun, RelayRun};

pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Res<T> = Result<T, Error>;

/// What to run, and how much of it.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Repetitions of each scenario; the report gives the median.
    pub runs: usize,
    /// Updates per relay prompt, per daemon (qwen serve is far slower, so it may get fewer).
    pub events: u64,
    pub qwen_events: u64,
    /// Subscriber counts of the relay scenario.
    pub subscribers: Vec<usize>,
    /// Paced stream for the latency figures: count and rate per second.
    pub paced_count: u64,
    pub paced_rate: u64,
    /// Sequential permission requests per run.
    pub permissions: usize,
    /// Creates and attaches timed per run.
    pub creates: usize,
    /// Sessions and subscribers of the memory scenario.
    pub memory_sessions: usize,
    pub memory_subscribers: usize,
    /// Daemon starts timed.
    pub startups: usize,
    /// (h) The state database's size for the big-database boot, and the boots timed on it.
    pub big_db_bytes: u64,
    pub big_db_boots: usize,
    /// Bound on any single run.
    pub run_timeout: Duration,
    /// Subscriber counts of the relay rerun on a mediatord whose ring holds the whole burst
    /// (`--event-ring-size` = the burst): where no stream can be evicted.
    pub whole_ring_subscribers: Vec<usize>,
    /// The burst read through the official SDK (Node.js): streams and updates.
    pub sdk_streams: usize,
    pub sdk_events: u64,
    /// (i) Connection counts of the relay over `/acp` (each run right after the SSE relay run with
    /// as many streams, on the same daemon: interleaved).
    pub acp_connections: Vec<usize>,
    /// (k) Idle `/acp` connections of the memory reading (qwen serve takes at most 64 `/acp`
    /// connections).
    pub acp_memory_connections: usize,
    /// Run only these scenarios (`direct`, `startup`, `bigdb`, `create`, `relay`, `sdk`, `paced`,
    /// `permissions`, `memory`, `acp`); `None` = all.
    pub only: Option<Vec<String>>,
    /// `h2`: the largest DATA frame the HTTP/2 client accepts (`SETTINGS_MAX_FRAME_SIZE`); `None`
    /// is the protocol's default, 16 KiB, which browsers, curl and Node.js keep.
    pub h2_max_frame: Option<u32>,
}

impl Plan {
    /// The full comparison `bench/run.sh` runs.
    pub fn full() -> Plan {
        Plan {
            runs: 3,
            events: 100_000,
            qwen_events: 20_000,
            subscribers: vec![1, 10, 64, 100],
            paced_count: 5_000,
            paced_rate: 2_000,
            permissions: 200,
            creates: 20,
            memory_sessions: 100,
            memory_subscribers: 1000,
            startups: 10,
            big_db_bytes: 1 << 30,
            big_db_boots: 5,
            run_timeout: Duration::from_secs(300),
            whole_ring_subscribers: vec![10, 100],
            sdk_streams: 10,
            sdk_events: 5_000,
            acp_connections: vec![1, 10],
            acp_memory_connections: 60,
            only: None,
            h2_max_frame: None,
        }
    }

    /// A few hundred events, one subscriber, a couple of permissions: seconds, mediatord only.
    pub fn smoke() -> Plan {
        Plan {
            runs: 1,
            events: 300,
            qwen_events: 300,
            subscribers: vec![1],
            paced_count: 100,
            paced_rate: 1_000,
            permissions: 3,
            creates: 3,
            memory_sessions: 3,
            memory_subscribers: 3,
            startups: 2,
            big_db_bytes: 2 << 20,
            big_db_boots: 2,
            run_timeout: Duration::from_secs(30),
            whole_ring_subscribers: Vec::new(),
            sdk_streams: 2,
            sdk_events: 100,
            acp_connections: vec![1],
            acp_memory_connections: 3,
            only: None,
            h2_max_frame: None,
        }
    }

    pub fn wants(&self, scenario: &str) -> bool {
        self.only.as_ref().is_none_or(|o| o.iter().any(|s| s == scenario))
    }

    pub fn events_for(&self, kind: Kind) -> u64 {
        match kind {
            Kind::Mediatord => self.events,
            Kind::Qwen => self.qwen_events,
        }
    }
}

/// Every run of every scenario against one daemon.
#[derive(Debug, Clone)]
pub struct DaemonResults {
    pub kind: Kind,
    pub version: String,
    pub startup_ms: Vec<f64>,
    /// (h) The big database and each boot on it (mediatord only).
    pub big_db: Option<(bigdb::Filled, Vec<f64>)>,
    /// Per subscriber count, its runs.
    pub relay: Vec<(usize, Vec<RelayRun>)>,
    /// The same on a daemon whose ring holds the whole burst (mediatord only).
    pub relay_whole_ring: Vec<(usize, Vec<RelayRun>)>,
    /// The burst read by Node.js streams through the official SDK.
    pub sdk: Vec<RelayRun>,
    pub paced: Vec<RelayRun>,
    pub permissions: Vec<PermissionRun>,
    pub create: Vec<CreateRun>,
    pub memory: Vec<MemoryRun>,
    /// (i) Per connection count, the relay over `/acp`'s WebSocket.
    pub acp_relay: Vec<(usize, Vec<RelayRun>)>,
    /// (j) Permission round trips answered over `/acp`.
    pub acp_permissions: Vec<PermissionRun>,
    /// (k) Idle `/acp` connections.
    pub acp_memory: Vec<acp::MemoryRun>,
    /// Scenario runs that failed, with why (reported, never hidden).
    pub failures: Vec<String>,
    /// Scenarios the daemon declined by design (a documented cap), with its answer.
    pub refusals: Vec<String>,
}

impl DaemonResults {
    fn new(kind: Kind, version: String) -> Self {
        DaemonResults {
            kind,
            version,
            startup_ms: Vec::new(),
            big_db: None,
            relay: Vec::new(),
            relay_whole_ring: Vec::new(),
            sdk: Vec::new(),
            paced: Vec::new(),
            permissions: Vec::new(),
            create: Vec::new(),
            memory: Vec::new(),
            acp_relay: Vec::new(),
            acp_permissions: Vec::new(),
            acp_memory: Vec::new(),
            failures: Vec::new(),
            refusals: Vec::new(),
        }
    }

    /// Like [`note`], but a refusal by a documented cap (HTTP 429) is recorded as such.
    fn record<T>(&mut self, what: &str, r: Res<T>) -> Option<T> {
        match r {
            Err(e) if is_refusal(&e) => {
                eprintln!("bench: {what} refused by {}: {e}", self.kind.name());
                self.refusals.push(format!("{what}: {e}"));
                None
            }
            r => note(&mut self.failures, what, r),
        }
    }
}

/// A daemon's deliberate "no" to a scenario's size (e.g. qwen serve's 64 streams per session).
pub fn is_refusal(e: &Error) -> bool {
    e.to_string().contains("429")
}

/// The direct-stdio baseline.
#[derive(Debug, Clone, Default)]
pub struct DirectResults {
    pub blast: Vec<RelayRun>,
    pub paced: Vec<RelayRun>,
    pub failures: Vec<String>,
}

/// (h) Fills a state directory to `plan.big_db_bytes`, then times `plan.big_db_boots` boots on it,
/// each finding live sessions and pending requests to recover.
async fn big_db_boots(tools: &Tools, plan: &Plan) -> Res<(bigdb::Filled, Vec<f64>)> {
    let dir = procs::TempDir::new("bigdb")?;
    let state = dir.0.join("state");
    progress(&format!("mediatord: filling a {} MiB state database ...", plan.big_db_bytes >> 20));
    let (target, fill_state) = (plan.big_db_bytes, state.clone());
    let filled = tokio::task::spawn_blocking(move || bigdb::fill(&fill_state, target)).await??;
    progress(&format!(
        "mediatord: {} MiB, {} events, filled in {:.1} s",
        filled.db_bytes >> 20,
        filled.events,
        filled.fill_s
    ));
    let state_arg = state.to_string_lossy().into_owned();
    let mut boots = Vec::new();
    for boot in 0..plan.big_db_boots {
        let unfinished = state.clone();
        tokio::task::spawn_blocking(move || bigdb::leave_unfinished(&unfinished, boot)).await??;
        progress(&format!("mediatord: boot with the big database {}", boot + 1));
        let d = Daemon::start(Kind::Mediatord, tools, &["--state-dir", &state_arg]).await?;
        boots.push(d.startup.as_secs_f64() * 1e3);
        d.stop().await;
    }
    Ok((filled, boots))
}

fn note<T>(failures: &mut Vec<String>, what: &str, r: Res<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            eprintln!("bench: {what} failed: {e}");
            failures.push(format!("{what}: {e}"));
            None
        }
    }
}

fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

/// (b) The agent over stdio, blast and paced.
pub async fn run_direct(tools: &Tools, plan: &Plan) -> DirectResults {
    let mut out = DirectResults::default();
    if !plan.wants("direct") {
        return out;
    }
    for i in 0..plan.runs {
        progress(&format!("direct stdio, stream {} (run {})", plan.events, i + 1));
        let r = direct::stream(
            &tools.mediatord,
            &format!("stream {}", plan.events),
            plan.events,
            plan.run_timeout,
        )
        .await;
        if let Some(r) = note(&mut out.failures, "direct stream", r) {
            out.blast.push(r);
        }
        let directive = format!("stream {} {}", plan.paced_count, plan.paced_rate);
        progress(&format!("direct stdio, {directive} (run {})", i + 1));
        let r = direct::stream(&tools.mediatord, &directive, plan.paced_count, plan.run_timeout).await;
        if let Some(r) = note(&mut out.failures, "direct paced stream", r) {
            out.paced.push(r);
        }
    }
    out
}

/// Every daemon scenario against `kind`.
pub async fn run_daemon(kind: Kind, tools: &Tools, plan: &Plan, version: String) -> DaemonResults {
    let mut out = DaemonResults::new(kind, version);
    let name = kind.name();
    // (f) exec → listening line.
    for i in 0..if plan.wants("startup") { plan.startups } else { 0 } {
        progress(&format!("{name}: start-up {}", i + 1));
        if let Some(d) = note(&mut out.failures, "start-up", Daemon::start(kind, tools, &[]).await) {
            out.startup_ms.push(d.startup.as_secs_f64() * 1e3);
            d.stop().await;
        }
    }
    // (h) exec → listening line with a big database to open and recover.
    if kind == Kind::Mediatord && plan.wants("bigdb") {
        out.big_db = note(&mut out.failures, "big-database boot", big_db_boots(tools, plan).await);
    }
    // (d), (a), (g), (c) on one daemon, at its defaults (beyond the lifted caps).
    match Daemon::start(kind, tools, &[]).await {
        Err(e) => {
            progress(&format!("{name}: start failed: {e}"));
            out.failures.push(format!("start: {e}"));
        }
        Ok(d) => {
            if let Some(api) = note(&mut out.failures, "client", api::Api::new(&d.base)) {
                scenarios_on(&api, &d, tools, plan, &mut out).await;
            }
            d.stop().await;
        }
    }
    // (a) again where the ring holds the burst: no stream can fall off it.
    if kind == Kind::Mediatord && plan.wants("relay") && !plan.whole_ring_subscribers.is_empty() {
        let ring = plan.events.to_string();
        match Daemon::start(kind, tools, &["--event-ring-size", &ring]).await {
            Err(e) => out.failures.push(format!("whole-ring start: {e}")),
            Ok(d) => {
                if let Some(api) = note(&mut out.failures, "client", api::Api::new(&d.base)) {
                    for &subs in &plan.whole_ring_subscribers {
                        let mut runs = Vec::new();
                        for i in 0..plan.runs {
                            progress(&format!(
                                "{name}: relay stream {} to {subs} subscriber(s), --event-ring-size {ring} (run {})",
                                plan.events,
                                i + 1
                            ));
                            let directive = format!("stream {}", plan.events);
                            let r =
                                scenarios::relay(&api, &d, subs, &directive, plan.events, plan.run_timeout)
                                    .await;
                            if let Some(r) = note(&mut out.failures, &format!("relay x{subs}, whole ring"), r)
                            {
                                runs.push(r);
                            }
                        }
                        out.relay_whole_ring.push((subs, runs));
                    }
                }
                d.stop().await;
            }
        }
    }
    // (e) on a fresh daemon per run.
    for i in 0..if plan.wants("memory") { plan.runs } else { 0 } {
        progress(&format!("{name}: memory (run {})", i + 1));
        match Daemon::start(kind, tools, &[]).await {
            Err(e) => {
                progress(&format!("{name}: start failed: {e}"));
                out.failures.push(format!("memory start: {e}"));
            }
            Ok(d) => {
                if let Some(api) = note(&mut out.failures, "client", api::Api::new(&d.base)) {
                    let r = scenarios::memory(&api, &d, plan.memory_sessions, plan.memory_subscribers).await;
                    if let Some(r) = out.record("memory", r) {
                        out.memory.push(r);
                    }
                }
                d.stop().await;
            }
        }
    }
    // (k) on a fresh daemon per run.
    for i in 0..if plan.wants("acp") { plan.runs } else { 0 } {
        progress(&format!("{name}: {} idle /acp connections (run {})", plan.acp_memory_connections, i + 1));
        match Daemon::start(kind, tools, &[]).await {
            Err(e) => out.failures.push(format!("acp memory start: {e}")),
            Ok(d) => {
                if let Some(api) = note(&mut out.failures, "client", api::Api::new(&d.base)) {
                    let r = acp::memory(&api, &d, plan.acp_memory_connections, 1, None).await;
                    if let Some(r) = out.record("acp memory", r) {
                        out.acp_memory.push(r);
                    }
                }
                d.stop().await;
            }
        }
    }
    out
}

async fn scenarios_on(api: &api::Api, d: &Daemon, tools: &Tools, plan: &Plan, out: &mut DaemonResults) {
    let name = d.kind.name();
    if plan.wants("create") {
        progress(&format!("{name}: create/attach"));
        let r = scenarios::create_attach(api, d, plan.creates).await;
        if let Some(r) = note(&mut out.failures, "create/attach", r) {
            out.create.push(r);
        }
    }
    let events = plan.events_for(d.kind);
    // (a) and (i) interleaved: each SSE run is followed by the `/acp` run with as many readers.
    let mut counts: Vec<usize> = plan.subscribers.iter().copied().filter(|_| plan.wants("relay")).collect();
    for &c in plan.acp_connections.iter().filter(|_| plan.wants("acp")) {
        if !counts.contains(&c) {
            counts.push(c);
        }
    }
    for subs in counts {
        let sse = plan.wants("relay") && plan.subscribers.contains(&subs);
        let ws = plan.wants("acp") && plan.acp_connections.contains(&subs);
        let (mut runs, mut acp_runs) = (Vec::new(), Vec::new());
        for i in 0..plan.runs {
            if sse {
                progress(&format!("{name}: relay stream {events} to {subs} subscriber(s) (run {})", i + 1));
                let r = scenarios::relay(api, d, subs, &format!("stream {events}"), events, plan.run_timeout)
                    .await;
                if let Some(r) = out.record(&format!("relay x{subs}"), r) {
                    runs.push(r);
                }
            }
            if ws {
                progress(&format!(
                    "{name}: relay stream {events} to {subs} /acp connection(s) (run {})",
                    i + 1
                ));
                let r = acp::relay(api, d, subs, events, plan.run_timeout).await;
                if let Some(r) = out.record(&format!("acp relay x{subs}"), r) {
                    acp_runs.push(r);
                }
            }
        }
        if sse {
            out.relay.push((subs, runs));
        }
        if ws {
            out.acp_relay.push((subs, acp_runs));
        }
    }
    if let Some(sdk) = tools.sdk.as_ref().filter(|_| plan.wants("sdk")) {
        for i in 0..plan.runs {
            progress(&format!(
                "{name}: stream {} to {} Node.js SDK subscribers (run {})",
                plan.sdk_events,
                plan.sdk_streams,
                i + 1
            ));
            let r =
                scenarios::sdk_relay(api, d, sdk, plan.sdk_streams, plan.sdk_events, plan.run_timeout).await;
            if let Some(r) = out.record("sdk relay", r) {
                out.sdk.push(r);
            }
        }
    }
    for i in 0..if plan.wants("paced") { plan.runs } else { 0 } {
        let directive = format!("stream {} {}", plan.paced_count, plan.paced_rate);
        progress(&format!("{name}: {directive} to 1 subscriber (run {})", i + 1));
        let r = scenarios::relay(api, d, 1, &directive, plan.paced_count, plan.run_timeout).await;
        if let Some(r) = note(&mut out.failures, "paced relay", r) {
            out.paced.push(r);
        }
    }
    // (c) and (j) interleaved.
    for i in 0..plan.runs {
        if plan.wants("permissions") {
            progress(&format!("{name}: permissions {} (run {})", plan.permissions, i + 1));
            let r = scenarios::permissions(api, d, plan.permissions, plan.run_timeout).await;
            if let Some(r) = note(&mut out.failures, "permissions", r) {
                out.permissions.push(r);
            }
        }
        if plan.wants("acp") {
            progress(&format!("{name}: permissions {} over /acp (run {})", plan.permissions, i + 1));
            let r = acp::permissions(api, d, plan.permissions, plan.run_timeout).await;
            if let Some(r) = out.record("acp permissions", r) {
                out.acp_permissions.push(r);
            }
        }
    }
}

/// The whole comparison: direct stdio, mediatord, and qwen serve when `tools.qwen` is set.
pub async fn compare(tools: &Tools, plan: &Plan) -> report::Report {
    let mut machine = report::Machine::probe(tools).await;
    let direct = run_direct(tools, plan).await;
    let mut daemons = vec![run_daemon(Kind::Mediatord, tools, plan, machine.mediatord.clone()).await];
    if tools.qwen.is_some() {
        daemons.push(run_daemon(Kind::Qwen, tools, plan, machine.qwen.clone().unwrap_or_default()).await);
    }
    machine.finish();
    report::Report { machine, plan: plan.clone(), direct, daemons }
}

/// The tiny run `tests/bench_smoke.rs` checks: [`Plan::smoke`] against mediatord and direct stdio.
pub async fn smoke(mediatord: &std::path::Path) -> (DirectResults, DaemonResults) {
    let mediatord = std::path::absolute(mediatord).unwrap_or_else(|_| mediatord.to_path_buf());
    let tools = Tools { mediatord, qwen: None, shim: None, sdk: None, mediatord_args: Vec::new() };
    let plan = Plan::smoke();
    let direct = run_direct(&tools, &plan).await;
    let daemon = run_daemon(Kind::Mediatord, &tools, &plan, String::new()).await;
    (direct, daemon)
}

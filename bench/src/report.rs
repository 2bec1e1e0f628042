//! Turning the runs into `docs/benchmarks.md`: the machine, versions, every run's figures, the
//! medians side by side, the ratios, and each target met or missed.

use std::fmt::Write as _;

use crate::procs::{Kind, Tools};
use crate::scenarios::RelayRun;
use crate::stats::median;
use crate::{DaemonResults, DirectResults, Plan};

/// The machine and the versions under test.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
    pub rustc: String,
    pub node: String,
    pub mediatord: String,
    pub qwen: Option<String>,
    pub load_before: String,
    /// The machine's CPU time counters when the run started, and the share of its CPU time the
    /// hypervisor took for others (steal) over the run, once [`Machine::finish`] has read them again.
    pub ticks_before: Option<CpuTicks>,
    pub stolen: Option<f64>,
    pub date: String,
}

/// The first line of `/proc/stat`: all CPUs' time, in clock ticks, and the part of it that was
/// stolen (a virtual machine's CPUs running another guest while this one had work).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTicks {
    pub total: u64,
    pub steal: u64,
}

impl CpuTicks {
    pub fn now() -> Option<CpuTicks> {
        CpuTicks::parse(&read("/proc/stat"))
    }

    /// `cpu  user nice system idle iowait irq softirq steal [guest guest_nice]`: guest time is
    /// already counted in user and nice, so the total is the first eight.
    fn parse(stat: &str) -> Option<CpuTicks> {
        let fields = stat.lines().next()?.strip_prefix("cpu ")?;
        let ticks =
            fields.split_whitespace().take(8).map(str::parse).collect::<Result<Vec<u64>, _>>().ok()?;
        (ticks.len() == 8).then(|| CpuTicks { total: ticks.iter().sum(), steal: ticks[7] })
    }

    /// The percentage of the CPU time between `before` and `self` that was stolen.
    fn stolen_since(self, before: CpuTicks) -> Option<f64> {
        let total = self.total.checked_sub(before.total).filter(|t| *t > 0)?;
        let steal = self.steal.checked_sub(before.steal)?;
        Some(100.0 * steal as f64 / total as f64)
    }
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

impl Machine {
    pub async fn probe(tools: &Tools) -> Machine {
        use crate::procs::version_of;
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim()))
            .unwrap_or("unknown")
            .to_owned();
        let mem_kib: f64 = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        // The qwen version from its package.json (running `qwen --version` could reach the network).
        let qwen = tools.qwen.as_ref().map(|q| {
            std::fs::canonicalize(q)
                .ok()
                .and_then(|entry| entry.parent().map(|d| d.join("package.json")))
                .and_then(|p| std::fs::read_to_string(p).ok())
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .map(|v| {
                    format!("{} {}", v["name"].as_str().unwrap_or("?"), v["version"].as_str().unwrap_or("?"))
                })
                .unwrap_or_else(|| "unknown".into())
        });
        let date = version_of(std::path::Path::new("date"), &["-u", "+%Y-%m-%d %H:%M UTC"], &[]).await;
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            cpu_model,
            memory_gib: mem_kib / 1024.0 / 1024.0,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            rustc: version_of(std::path::Path::new("rustc"), &["--version"], &[]).await.unwrap_or_default(),
            node: version_of(std::path::Path::new("node"), &["--version"], &[]).await.unwrap_or_default(),
            mediatord: version_of(&tools.mediatord, &["--version"], &[]).await.unwrap_or_default(),
            qwen,
            load_before: read("/proc/loadavg").split_whitespace().take(3).collect::<Vec<_>>().join(" "),
            ticks_before: CpuTicks::now(),
            stolen: None,
            date: date.unwrap_or_default(),
        }
    }

    /// Reads the CPU counters again at the end of the run: how much of the time was stolen.
    pub fn finish(&mut self) {
        self.stolen =
            self.ticks_before.zip(CpuTicks::now()).and_then(|(before, after)| after.stolen_since(before));
    }
}

/// Everything one comparison measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub machine: Machine,
    pub plan: Plan,
    pub direct: DirectResults,
    pub daemons: Vec<DaemonResults>,
}

/// Median of `f` over `runs`.
fn med<T>(runs: &[T], f: impl Fn(&T) -> f64) -> Option<f64> {
    median(&runs.iter().map(f).collect::<Vec<_>>())
}

fn relay_med(runs: &[RelayRun], f: impl Fn(&RelayRun) -> f64) -> Option<f64> {
    med(runs, f)
}

/// The median of the daemon's CPU per delivered update over the runs that measured it.
fn cpu_med(runs: &[RelayRun]) -> Option<f64> {
    measured_med(runs, |r| r.cpu_ns_per_update)
}

/// The median of `f` over the runs where it was measured.
fn measured_med(runs: &[RelayRun], f: impl Fn(&RelayRun) -> Option<f64>) -> Option<f64> {
    let measured: Vec<f64> = runs.iter().filter_map(f).collect();
    median(&measured)
}

const MIB: f64 = 1024.0;

/// What changed and the figures before and after, written by hand (`bench/history.md`) and kept
/// at the end of every generated report.
const HISTORY: &str = include_str!("../history.md");

/// One line of the summary: a figure for each column, and the target it is judged by.
struct Row {
    figure: String,
    direct: Option<f64>,
    mediatord: Option<f64>,
    qwen: Option<f64>,
    /// Decimals to print.
    digits: usize,
    /// mediatord ÷ qwen serve (or qwen ÷ mediatord when lower is better), shown as `N×`.
    ratio: Option<f64>,
    target: String,
    /// `Some(true)` met, `Some(false)` missed, `None` no target.
    met: Option<bool>,
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(v) if digits == 0 => group(v.round() as i64),
        Some(v) => format!("{v:.digits$}"),
        None => "–".into(),
    }
}

/// `mediatord 2/30`: `kind`'s streams evicted over all `runs`, if it ran any.
fn counted(kind: Kind, runs: &[RelayRun]) -> Option<String> {
    if runs.is_empty() {
        return None;
    }
    let evicted: usize = runs.iter().map(|r| r.evicted).sum();
    let all: usize = runs.iter().map(|r| r.subscribers).sum();
    Some(format!("{} {evicted}/{all}", kind.name()))
}

/// `1234567` → `1 234 567`.
fn group(n: i64) -> String {
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push('\u{202f}');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

impl Report {
    fn daemon(&self, kind: Kind) -> Option<&DaemonResults> {
        self.daemons.iter().find(|d| d.kind == kind)
    }

    /// True when any run failed.
    pub fn failed(&self) -> bool {
        !self.direct.failures.is_empty() || self.daemons.iter().any(|d| !d.failures.is_empty())
    }

    fn relay_runs(&self, kind: Kind, subs: usize) -> &[RelayRun] {
        self.daemon(kind)
            .and_then(|d| d.relay.iter().find(|(s, _)| *s == subs))
            .map_or(&[], |(_, runs)| runs.as_slice())
    }

    fn acp_relay_runs(&self, kind: Kind, conns: usize) -> &[RelayRun] {
        self.daemon(kind)
            .and_then(|d| d.acp_relay.iter().find(|(s, _)| *s == conns))
            .map_or(&[], |(_, runs)| runs.as_slice())
    }

    fn rows(&self) -> Vec<Row> {
        let m = self.daemon(Kind::Mediatord);
        let q = self.daemon(Kind::Qwen);
        let higher = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        let mut rows = Vec::new();
        let direct_rate = relay_med(&self.direct.blast, |r| r.delivered_per_s);
        for &subs in &self.plan.subscribers {
            let mr = relay_med(self.relay_runs(Kind::Mediatord, subs), |r| r.delivered_per_s);
            let qr = relay_med(self.relay_runs(Kind::Qwen, subs), |r| r.delivered_per_s);
            let ratio = higher(mr, qr);
            let (target, met) = match subs {
                1 => {
                    let of_direct = higher(mr, direct_rate);
                    let pct = of_direct.map_or("–".into(), |p| format!("{:.0}%", p * 100.0));
                    (
                        format!("≥ 40× qwen; ≥ 50% of direct (is {pct})"),
                        match (ratio, of_direct) {
                            (Some(r), Some(p)) => Some(r >= 40.0 && p >= 0.50),
                            (None, Some(p)) => Some(p >= 0.50),
                            _ => None,
                        },
                    )
                }
                10 => ("≥ 10× qwen".into(), ratio.map(|r| r >= 10.0)),
                _ => (String::new(), None),
            };
            let counts = |kind| {
                let runs = self.relay_runs(kind, subs);
                counted(kind, runs)
            };
            let evicted: Vec<String> =
                [counts(Kind::Mediatord), counts(Kind::Qwen)].into_iter().flatten().collect();
            rows.push(Row {
                figure: format!(
                    "relay, {subs} subscriber{}: delivered events/s (streams evicted: {})",
                    if subs == 1 { "" } else { "s" },
                    evicted.join(", ")
                ),
                direct: (subs == 1).then_some(direct_rate).flatten(),
                mediatord: mr,
                qwen: qr,
                digits: 0,
                ratio,
                target,
                met,
            });
            if subs == 1 {
                // The steadier reading of the same runs: a rate on this shared machine moves with its
                // host and with the agent's and the reader's share of the two CPUs; the daemon's own
                // time per update much less.
                let mv = cpu_med(self.relay_runs(Kind::Mediatord, 1));
                let qv = cpu_med(self.relay_runs(Kind::Qwen, 1));
                rows.push(Row {
                    figure: "relay, 1 subscriber: the daemon's CPU per delivered update (ns)".into(),
                    direct: None,
                    mediatord: mv,
                    qwen: qv,
                    digits: 0,
                    ratio: higher(qv, mv),
                    target: String::new(),
                    met: None,
                });
                // What reading took from the same two CPUs: the direct reader's pipe against the
                // relay reader's socket, HTTP and SSE. Not the daemon's merit, so no ratio.
                let reader = |runs: &[RelayRun]| measured_med(runs, |r| r.reader_cpu_ns_per_update);
                rows.push(Row {
                    figure: "relay, 1 subscriber: the load client's CPU per delivered update (ns)".into(),
                    direct: reader(&self.direct.blast),
                    mediatord: reader(self.relay_runs(Kind::Mediatord, 1)),
                    qwen: reader(self.relay_runs(Kind::Qwen, 1)),
                    digits: 0,
                    ratio: None,
                    target: String::new(),
                    met: None,
                });
            }
        }
        for (subs, runs) in m.map_or(&[][..], |m| m.relay_whole_ring.as_slice()) {
            let evicted = counted(Kind::Mediatord, runs).unwrap_or_default();
            let none = runs.iter().all(|r| r.evicted == 0 && r.incomplete == 0);
            rows.push(Row {
                figure: format!(
                    "relay, {subs} subscribers, the ring holding the burst (`--event-ring-size {}`): delivered \
                     events/s (streams evicted: {evicted})",
                    group(self.plan.events as i64)
                ),
                direct: None,
                mediatord: relay_med(runs, |r| r.delivered_per_s),
                qwen: None,
                digits: 0,
                ratio: None,
                target: "no stream evicted or incomplete".into(),
                met: (!runs.is_empty()).then_some(none),
            });
        }
        if self.daemons.iter().any(|d| !d.sdk.is_empty()) {
            let sdk = |d: Option<&DaemonResults>| d.and_then(|d| relay_med(&d.sdk, |r| r.delivered_per_s));
            let complete = |d: Option<&DaemonResults>| {
                d.filter(|d| !d.sdk.is_empty()).map(|d| {
                    let done: usize = d.sdk.iter().map(|r| r.subscribers - r.incomplete).sum();
                    let all: usize = d.sdk.iter().map(|r| r.subscribers).sum();
                    (d.kind.name(), done, all)
                })
            };
            let shown: Vec<String> = [complete(m), complete(q)]
                .into_iter()
                .flatten()
                .map(|(name, done, all)| format!("{name} {done}/{all}"))
                .collect();
            rows.push(Row {
                figure: format!(
                    "burst of {} updates to {} Node.js streams (@qwen-code/sdk's SSE parser): delivered events/s \
                     (streams complete: {})",
                    group(self.plan.sdk_events as i64),
                    self.plan.sdk_streams,
                    shown.join(", ")
                ),
                direct: None,
                mediatord: sdk(m),
                qwen: sdk(q),
                digits: 0,
                ratio: higher(sdk(m), sdk(q)),
                target: "every stream completes".into(),
                met: complete(m).map(|(_, done, all)| done == all),
            });
        }
        for &conns in &self.plan.acp_connections {
            let mr = relay_med(self.acp_relay_runs(Kind::Mediatord, conns), |r| r.delivered_per_s);
            let qr = relay_med(self.acp_relay_runs(Kind::Qwen, conns), |r| r.delivered_per_s);
            let sse = relay_med(self.relay_runs(Kind::Mediatord, conns), |r| r.delivered_per_s);
            let ratio = higher(mr, qr);
            let of_sse = higher(mr, sse);
            let incomplete = |kind: Kind| {
                let runs = self.acp_relay_runs(kind, conns);
                (!runs.is_empty()).then(|| {
                    let bad: usize = runs.iter().map(|r| r.incomplete).sum();
                    let all: usize = runs.iter().map(|r| r.subscribers).sum();
                    format!("{} {bad}/{all}", kind.name())
                })
            };
            let shown: Vec<String> =
                [incomplete(Kind::Mediatord), incomplete(Kind::Qwen)].into_iter().flatten().collect();
            rows.push(Row {
                figure: format!(
                    "relay over `/acp` (WebSocket), {conns} connection{}: delivered events/s (connections \
                     incomplete: {})",
                    if conns == 1 { "" } else { "s" },
                    shown.join(", ")
                ),
                direct: None,
                mediatord: mr,
                qwen: qr,
                digits: 0,
                ratio,
                target: format!(
                    "≥ the SSE relay's (is {}); ≥ 10× qwen's `/acp`",
                    of_sse.map_or("–".into(), |p| format!("{:.0}%", p * 100.0))
                ),
                met: match (of_sse, ratio) {
                    (Some(p), Some(r)) => Some(p >= 1.0 && r >= 10.0),
                    (Some(p), None) => Some(p >= 1.0),
                    _ => None,
                },
            });
        }
        for &conns in &self.plan.acp_connections {
            let mv = cpu_med(self.acp_relay_runs(Kind::Mediatord, conns));
            let qv = cpu_med(self.acp_relay_runs(Kind::Qwen, conns));
            let sse = cpu_med(self.relay_runs(Kind::Mediatord, conns));
            rows.push(Row {
                figure: format!(
                    "relay over `/acp`, {conns} connection{}: the daemon's CPU per delivered update (ns)",
                    if conns == 1 { "" } else { "s" }
                ),
                direct: None,
                mediatord: mv,
                qwen: qv,
                digits: 0,
                ratio: higher(qv, mv),
                target: format!(
                    "SSE relay, {conns} stream{}: {} ns",
                    if conns == 1 { "" } else { "s" },
                    fmt(sse, 0)
                ),
                met: None,
            });
        }
        for (p, name) in [(50.0, "p50"), (99.0, "p99")] {
            let pick = |r: &RelayRun| f64::from(if p == 50.0 { r.p50_us } else { r.p99_us }) / 1e3;
            rows.push(Row {
                figure: format!("relay, 1 subscriber, full speed: emit→receive {name} (ms)"),
                direct: relay_med(&self.direct.blast, pick),
                mediatord: relay_med(self.relay_runs(Kind::Mediatord, 1), pick),
                qwen: relay_med(self.relay_runs(Kind::Qwen, 1), pick),
                digits: 2,
                ratio: None,
                target: String::new(),
                met: None,
            });
        }
        let rate = self.plan.paced_rate;
        for (p, name, limit) in [(50.0, "p50", 0.1), (99.0, "p99", 1.0)] {
            let pick = |r: &RelayRun| f64::from(if p == 50.0 { r.p50_us } else { r.p99_us }) / 1e3;
            let d = relay_med(&self.direct.paced, pick);
            let mv = m.and_then(|m| relay_med(&m.paced, pick));
            let qv = q.and_then(|q| relay_med(&q.paced, pick));
            rows.push(Row {
                figure: format!("paced {rate}/s, 1 subscriber: emit→receive {name} (ms)"),
                direct: d,
                mediatord: mv,
                qwen: qv,
                digits: 3,
                ratio: None,
                target: String::new(),
                met: None,
            });
            let added = |v: Option<f64>| Some(v? - d?);
            rows.push(Row {
                figure: format!("paced {rate}/s: added {name} latency over direct (ms)"),
                direct: None,
                mediatord: added(mv),
                qwen: added(qv),
                digits: 3,
                ratio: None,
                target: format!("≤ {limit} ms"),
                met: added(mv).map(|a| a <= limit),
            });
        }
        let perm = |d: Option<&DaemonResults>| d.and_then(|d| med(&d.permissions, |r| r.per_request_ms));
        rows.push(Row {
            figure: format!("permission round trip, {} in sequence (ms per request)", self.plan.permissions),
            direct: None,
            mediatord: perm(m),
            qwen: perm(q),
            digits: 3,
            ratio: higher(perm(q), perm(m)),
            target: "≤ 0.5 ms".into(),
            met: perm(m).map(|v| v <= 0.5),
        });
        let gap = |d: Option<&DaemonResults>, p99: bool| {
            d.and_then(|d| med(&d.permissions, |r| if p99 { r.interval_p99_ms } else { r.interval_p50_ms }))
        };
        for (p99, name) in [(false, "p50"), (true, "p99")] {
            rows.push(Row {
                figure: format!("permission: request→next request {name} (ms)"),
                direct: None,
                mediatord: gap(m, p99),
                qwen: gap(q, p99),
                digits: 3,
                ratio: higher(gap(q, p99), gap(m, p99)),
                target: String::new(),
                met: None,
            });
        }
        let acp_perm =
            |d: Option<&DaemonResults>| d.and_then(|d| med(&d.acp_permissions, |r| r.per_request_ms));
        rows.push(Row {
            figure: format!(
                "permission round trip over `/acp`, {} in sequence, each answered to `session/request_permission` (ms per request)",
                self.plan.permissions
            ),
            direct: None,
            mediatord: acp_perm(m),
            qwen: acp_perm(q),
            digits: 3,
            ratio: higher(acp_perm(q), acp_perm(m)),
            target: String::new(),
            met: None,
        });
        type Pick = fn(&crate::scenarios::CreateRun) -> f64;
        let creates: [(&str, Pick); 3] = [
            ("first create on a fresh daemon (ms)", |r| r.first_ms),
            ("create, agent running, median (ms)", |r| r.create_p50_ms),
            ("attach, median (ms)", |r| r.attach_p50_ms),
        ];
        for (name, f) in creates {
            let v = |d: Option<&DaemonResults>| d.and_then(|d| med(&d.create, f));
            rows.push(Row {
                figure: name.into(),
                direct: None,
                mediatord: v(m),
                qwen: v(q),
                digits: 2,
                ratio: higher(v(q), v(m)),
                target: String::new(),
                met: None,
            });
        }
        let mem = |d: Option<&DaemonResults>, f: fn(&crate::scenarios::MemoryRun) -> f64| {
            d.and_then(|d| med(&d.memory, f))
        };
        let idle = |d| mem(d, |r| r.idle_kib as f64 / MIB);
        let sess = |d| mem(d, |r| r.sessions_kib as f64 / MIB);
        let subs = |d| {
            mem(d, |r| {
                r.subscribers_kib.map_or(f64::NAN, |k| k.saturating_sub(r.streams_base_kib) as f64 / MIB)
            })
        };
        rows.push(Row {
            figure: "RSS idle (MiB)".into(),
            direct: None,
            mediatord: idle(m),
            qwen: idle(q),
            digits: 1,
            ratio: higher(idle(q), idle(m)),
            target: "≤ 12 MiB".into(),
            met: idle(m).map(|v| v <= 12.0),
        });
        rows.push(Row {
            figure: format!("RSS with {} sessions (MiB)", self.plan.memory_sessions),
            direct: None,
            mediatord: sess(m),
            qwen: sess(q),
            digits: 1,
            ratio: higher(sess(q), sess(m)),
            target: String::new(),
            met: None,
        });
        rows.push(Row {
            figure: format!(
                "RSS added by {} idle streams on one session (MiB)",
                self.plan.memory_subscribers
            ),
            direct: None,
            mediatord: subs(m),
            qwen: subs(q),
            digits: 1,
            ratio: higher(subs(q), subs(m)),
            // Issue #46: 4 KiB per idle stream.
            target: "≤ 4 MiB".into(),
            met: subs(m).map(|v| v <= 4.0),
        });
        let per_conn =
            |d: Option<&DaemonResults>| d.and_then(|d| med(&d.acp_memory, |r| r.per_connection_kib()));
        rows.push(Row {
            figure: format!(
                "RSS per idle `/acp` connection, {} on one session (KiB)",
                self.plan.acp_memory_connections
            ),
            direct: None,
            mediatord: per_conn(m),
            qwen: per_conn(q),
            digits: 1,
            ratio: higher(per_conn(q), per_conn(m)),
            // Issue #46.
            target: "≤ 16 KiB".into(),
            met: per_conn(m).map(|v| v <= 16.0),
        });
        let start = |d: Option<&DaemonResults>| d.and_then(|d| median(&d.startup_ms));
        rows.push(Row {
            figure: "exec → listening line (ms)".into(),
            direct: None,
            mediatord: start(m),
            qwen: start(q),
            digits: 1,
            ratio: higher(start(q), start(m)),
            target: "≤ 50 ms".into(),
            met: start(m).map(|v| v <= 50.0),
        });
        if let Some((filled, boots)) = m.and_then(|d| d.big_db.as_ref()) {
            let boot = median(boots);
            rows.push(Row {
                figure: format!(
                    "exec → listening line, {:.1} GiB state database to open and recover (ms)",
                    filled.db_bytes as f64 / (1u64 << 30) as f64
                ),
                direct: None,
                mediatord: boot,
                qwen: None,
                digits: 1,
                ratio: None,
                target: "≤ 200 ms".into(),
                met: boot.map(|v| v <= 200.0),
            });
        }
        rows
    }

    /// The summary table (medians), as markdown.
    pub fn summary_table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "| figure (median of runs) | direct stdio | mediatord | qwen serve | mediatord vs qwen | target (mediatord) | met |"
        );
        let _ = writeln!(t, "|---|--:|--:|--:|--:|---|:-:|");
        for r in self.rows() {
            let ratio = r.ratio.map_or("–".into(), |x| format!("{x:.1}×"));
            let met = match r.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "",
            };
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.figure,
                fmt(r.direct, r.digits),
                fmt(r.mediatord, r.digits),
                fmt(r.qwen, r.digits),
                ratio,
                r.target,
                met
            );
        }
        t
    }

    fn relay_detail(t: &mut String, label: &str, runs: &[RelayRun]) {
        let ns = |v: Option<f64>| v.map_or("–".into(), |ns| group(ns.round() as i64));
        for (i, r) in runs.iter().enumerate() {
            let _ = writeln!(
                t,
                "| {label} | {} | {} | {} | {}/{} | {} | {} | {:.3} | {} | {:.2} | {:.2} | {} | {} |",
                i + 1,
                r.subscribers,
                group(r.expected_per_sub as i64),
                group(r.received as i64),
                group((r.expected_per_sub * r.subscribers as u64) as i64),
                r.evicted,
                r.incomplete,
                r.window_s,
                group(r.delivered_per_s.round() as i64),
                f64::from(r.p50_us) / 1e3,
                f64::from(r.p99_us) / 1e3,
                ns(r.cpu_ns_per_update),
                ns(r.reader_cpu_ns_per_update),
            );
        }
    }

    /// The whole of `docs/benchmarks.md`.
    pub fn markdown(&self) -> String {
        let m = &self.machine;
        let p = &self.plan;
        let mut t = String::new();
        let _ = writeln!(t, "# Benchmarks: mediatord vs qwen serve\n");
        let _ = writeln!(
            t,
            "Generated by `bench/run.sh` ({}); do not edit by hand — rerun it. How the benchmark works and how \
             to run parts of it: `bench/README.md`.\n",
            m.date
        );
        let _ = writeln!(t, "## Machine and versions\n");
        let _ = writeln!(t, "| | |\n|---|---|");
        let _ = writeln!(t, "| CPU | {} × {} |", m.cpus, m.cpu_model);
        let _ = writeln!(t, "| memory | {:.1} GiB |", m.memory_gib);
        let _ = writeln!(t, "| kernel | Linux {} |", m.kernel);
        let _ = writeln!(t, "| load average at start (1/5/15 min) | {} |", m.load_before);
        let stolen = m.stolen.map_or_else(|| "not known".to_owned(), |s| format!("{s:.1}%"));
        let _ = writeln!(t, "| CPU time stolen by the hypervisor during the run (`/proc/stat`) | {stolen} |");
        let _ = writeln!(t, "| rustc | {} |", m.rustc);
        let _ = writeln!(t, "| node | {} |", m.node);
        let _ = writeln!(t, "| mediatord | {} (release build) |", m.mediatord);
        let _ = writeln!(t, "| qwen serve | {} |", m.qwen.as_deref().unwrap_or("not measured"));
        let _ = writeln!(
            t,
            "| synthetic agent | `mediatord demo-agent` for both daemons (qwen serve reaches it through \
             `bench/qwen-shim.mjs`) |\n"
        );
        let _ = writeln!(
            t,
            "**Load caveat.** {} logical CPUs are shared by the daemon, its agent and the load client, and \
             other work may have been running on the machine (see the load average above), or on the host \
             beneath it (the stolen time above). Each scenario ran {} time(s); the tables give the median \
             run. Absolute figures move with the load; the ratios between daemons measured back to back are \
             the steadier part.\n",
            m.cpus, p.runs
        );
        let _ = writeln!(t, "## Summary\n");
        t.push_str(&self.summary_table());
        let _ = writeln!(
            t,
            "\nRatios: for throughput, mediatord ÷ qwen serve; for times and memory, qwen serve ÷ mediatord \
             (so above 1× always means mediatord is better).\n"
        );
        let _ = writeln!(t, "## Reading the results\n");
        let _ = writeln!(
            t,
            "- **Direct stdio is two processes on two CPUs; the relay is three.** The agent, the daemon \
             and the load client share the same {} CPUs, and per update the daemon parses a JSON-RPC \
             line, builds an SSE frame and writes it to a socket, which costs several times what the \
             agent spends producing it. The 1-stream relay figure is therefore bounded by CPU, not by \
             waiting; the \"of direct\" percentage is reported as measured. The load client's row says \
             what reading took from those CPUs: the direct reader scans the agent's lines off a pipe, the \
             relay's reader takes HTTP chunks off a socket, frames about twice as long (the envelope), \
             and the kernel's receive path.",
            m.cpus
        );
        let _ = writeln!(
            t,
            "- **Evictions.** mediatord runs at its defaults: each session's ring keeps its last 8 000 \
             events (`--event-ring-size`) and, beyond them, what a live stream has not taken yet, up to \
             64 MiB (the ring is the only buffer; the agent's reader never waits for a stream). A burst \
             of {} updates is {}× the ring's count: a stream is evicted (`client_evicted`, resumable \
             with `Last-Event-ID`) only when what it has not taken passes 64 MiB, and the row counts \
             it. The relay is also rerun with `--event-ring-size` set to the burst. With 64 and 100 \
             streams one load client reads every stream, millions of frames per second, and it is the \
             slow reader. qwen serve queues up to 256 events per stream and refuses more than 64 \
             streams per session (a constant in its EventBus), so it has no 100- or 1000-stream figures.",
            group(p.events as i64),
            p.events / 8000
        );
        let _ = writeln!(
            t,
            "- **Latency at full speed** is mostly queueing (the agent writes far faster than any \
             reader drains); the paced rows are the latency figures the targets are judged on.\n"
        );
        let _ = writeln!(t, "## What was measured\n");
        let _ = writeln!(
            t,
            "- **(a) relay**: a fresh session, S event streams opened (`GET /session/:id/events`), then one prompt \
             `stream N` (mediatord: {} updates, qwen serve: {}) submitted with `Prefer: respond-async` \
             (202 from both). Each update is an `agent_message_chunk` whose `_meta.emittedAtUs` the agent \
             stamps as it writes the line. Delivered events/s = stamped updates received by all streams ÷ \
             (last receive − first emit). Latency = receive time of the socket read − emit stamp, over every \
             update of every stream. A stream ends at `turn_complete`.",
            group(p.events as i64),
            group(p.qwen_events as i64)
        );
        let _ = writeln!(
            t,
            "- **(b) direct stdio**: the same agent started by the benchmark itself, driven over ACP \
             (`initialize`, `session/new`, `session/prompt`), stdout read and parsed the same way; the \
             physical limit. Paced latency rows use `stream {} {}` ({} updates at {}/s).",
            p.paced_count, p.paced_rate, p.paced_count, p.paced_rate
        );
        let _ = writeln!(
            t,
            "- **(c) permissions**: prompt `permissions {}`; the client votes `allow_once` on \
             `POST /session/:id/permission/:requestId` the moment it reads each `permission_request`, over a \
             kept-alive connection. ms per request = (turn_complete seen − first request seen) ÷ K.",
            p.permissions
        );
        let _ = writeln!(
            t,
            "- **(d) create/attach**: the first `POST /session` on a fresh daemon, then {} times a new session \
             on the running agent (`sessionScope: \"thread\"`) and an attach to the default session.",
            p.creates
        );
        let _ = writeln!(
            t,
            "- **(e) memory**: VmRSS of the daemon process only (agent processes excluded), {:.1} s after start, \
             after {} sessions, and with {} streams open on one session after each has carried a 100-update \
             turn; the last row is what the streams add to a reading taken just before they opened, after \
             one turn on that session read by one stream (so the first turn's own cost, the store's pages \
             and the code it runs once, is not counted as theirs; issue #46).",
            1.5, p.memory_sessions, p.memory_subscribers
        );
        let _ = writeln!(
            t,
            "- **(f) start-up**: from spawning the daemon to reading its `listening on` line on stdout, {} starts.",
            p.startups
        );
        let _ = writeln!(
            t,
            "- **(h) boot with a big database** (mediatord): a state directory filled to {} MiB through \
             mediatord's own store (`bench/src/bigdb.rs`: 1 000-byte frames of random letters, which the \
             store cannot compress, in {} sessions, plus {} decided audit entries); before each of {} boots, \
             {} sessions left live and {} permission requests left pending, as a daemon that died leaves \
             them; timed from spawning `mediatord serve --state-dir` to its `listening on` line.",
            p.big_db_bytes >> 20,
            crate::bigdb::SESSIONS,
            crate::bigdb::AUDIT_DECIDED,
            p.big_db_boots,
            crate::bigdb::LIVE_SESSIONS,
            crate::bigdb::PENDING_REQUESTS
        );
        let _ = writeln!(
            t,
            "- **(g) SDK readers**: a fresh session, {} streams opened by `bench/sdk-reader.mjs` in Node.js \
             through the official SDK (`@qwen-code/sdk`'s `DaemonClient.subscribeEvents`: Node's fetch and \
             the SDK's own SSE parser), then one prompt `stream {}`. A stream is complete when it saw every \
             update and `turn_complete`.",
            p.sdk_streams, p.sdk_events
        );
        let _ = writeln!(
            t,
            "- **(i) relay over `/acp`**: as (a), but the readers are ACP connections over a WebSocket \
             (`initialize`, then `session/resume` of the fresh session: attached without a replay), S = {}; \
             a connection is complete when it has every stamped `session/update`. On mediatord each run \
             follows the SSE run with as many streams on the same daemon (interleaved, so both see the same \
             load); qwen serve's rows are its own `/acp`, measured in its turn. The daemon's CPU per \
             delivered update is its threads' time on a CPU (`/proc/<pid>/task/*/schedstat`) over the \
             run ÷ the updates received: steadier than the rate on a loaded machine.",
            p.acp_connections.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        );
        let _ = writeln!(
            t,
            "- **(j) permissions over `/acp`**: one ACP connection sends `session/prompt` `permissions {}` and \
             answers each `session/request_permission` with its `allow_once` option the moment it reads it; \
             ms per request = (the prompt's answer − first request seen) ÷ K. Interleaved with (c).",
            p.permissions
        );
        let _ = writeln!(
            t,
            "- **(k) idle `/acp` connections**: VmRSS of the daemon before and after {} ACP connections each \
             `initialize`d, attached to one session and carried a {}-update turn, then left idle; the row \
             is the difference ÷ {}. The session carried one turn before the first reading (read by one \
             stream), as in (e), and so did one `/acp` connection, closed before the reading: the door's \
             code paged in and its first allocations made are no connection's. A fresh daemon per run.",
            p.acp_memory_connections, 100, p.acp_memory_connections
        );
        let _ = writeln!(
            t,
            "- Both daemons run on an OS-assigned loopback port with session, connection and subscriber caps \
             lifted (mediatord: `--max-sessions 0 --max-connections 0 --max-subscribers 2000`; qwen serve: \
             `--max-sessions 0 --max-connections 0 --no-web`), everything else at defaults. The load client \
             is Rust (tokio + reqwest) on the same machine, except in (g).\n"
        );
        let _ = writeln!(t, "## Every run\n");
        let _ = writeln!(t, "### Relay and direct stdio\n");
        let _ = writeln!(
            t,
            "| source | run | streams | updates per stream | received/expected | evicted | incomplete | window s | events/s | p50 ms | p99 ms | daemon CPU ns per update | load client CPU ns per update |"
        );
        let _ = writeln!(t, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
        Self::relay_detail(&mut t, "direct stdio", &self.direct.blast);
        Self::relay_detail(&mut t, "direct stdio, paced", &self.direct.paced);
        for d in &self.daemons {
            for (subs, runs) in &d.relay {
                Self::relay_detail(&mut t, &format!("{} ×{subs}", d.kind.name()), runs);
            }
            for (subs, runs) in &d.relay_whole_ring {
                Self::relay_detail(&mut t, &format!("{} ×{subs}, whole-burst ring", d.kind.name()), runs);
            }
            for (conns, runs) in &d.acp_relay {
                Self::relay_detail(&mut t, &format!("{} ×{conns}, `/acp` WebSocket", d.kind.name()), runs);
            }
            Self::relay_detail(&mut t, &format!("{}, paced", d.kind.name()), &d.paced);
            Self::relay_detail(&mut t, &format!("{} ×{}, Node.js SDK", d.kind.name(), p.sdk_streams), &d.sdk);
        }
        let _ = writeln!(t, "\n### Permissions, create/attach, memory, start-up\n");
        let _ = writeln!(t, "| daemon | run | ms per request | request→next p50 ms | p99 ms |");
        let _ = writeln!(t, "|---|--:|--:|--:|--:|");
        for d in &self.daemons {
            for (i, r) in d.permissions.iter().enumerate() {
                let _ = writeln!(
                    t,
                    "| {} | {} | {:.3} | {:.3} | {:.3} |",
                    d.kind.name(),
                    i + 1,
                    r.per_request_ms,
                    r.interval_p50_ms,
                    r.interval_p99_ms
                );
            }
        }
        for d in &self.daemons {
            for (i, r) in d.acp_permissions.iter().enumerate() {
                let _ = writeln!(
                    t,
                    "| {} over `/acp` | {} | {:.3} | {:.3} | {:.3} |",
                    d.kind.name(),
                    i + 1,
                    r.per_request_ms,
                    r.interval_p50_ms,
                    r.interval_p99_ms
                );
            }
        }
        let _ = writeln!(t, "\n| daemon | first create ms | create p50 ms | attach p50 ms |");
        let _ = writeln!(t, "|---|--:|--:|--:|");
        for d in &self.daemons {
            for r in &d.create {
                let _ = writeln!(
                    t,
                    "| {} | {:.2} | {:.2} | {:.2} |",
                    d.kind.name(),
                    r.first_ms,
                    r.create_p50_ms,
                    r.attach_p50_ms
                );
            }
        }
        let _ = writeln!(
            t,
            "\n| daemon | run | idle MiB | {} sessions MiB | + {} streams MiB | streams incomplete |",
            p.memory_sessions, p.memory_subscribers
        );
        let _ = writeln!(t, "|---|--:|--:|--:|--:|--:|");
        for d in &self.daemons {
            for (i, r) in d.memory.iter().enumerate() {
                let _ = writeln!(
                    t,
                    "| {} | {} | {:.1} | {:.1} | {} | {} |",
                    d.kind.name(),
                    i + 1,
                    r.idle_kib as f64 / MIB,
                    r.sessions_kib as f64 / MIB,
                    r.subscribers_kib.map_or("–".into(), |k| format!("{:.1}", k as f64 / MIB)),
                    r.refused
                        .as_ref()
                        .map_or(r.subscribers_incomplete.to_string(), |_| "refused (HTTP 429)".into())
                );
            }
        }
        let _ = writeln!(
            t,
            "\n| daemon | run | `/acp` connections | before MiB | with them MiB | KiB each | incomplete |"
        );
        let _ = writeln!(t, "|---|--:|--:|--:|--:|--:|--:|");
        for d in &self.daemons {
            for (i, r) in d.acp_memory.iter().enumerate() {
                let _ = writeln!(
                    t,
                    "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {} |",
                    d.kind.name(),
                    i + 1,
                    r.connections,
                    r.before_kib as f64 / MIB,
                    r.with_kib as f64 / MIB,
                    r.per_connection_kib(),
                    r.incomplete
                );
            }
        }
        let _ = writeln!(t, "\n| daemon | exec → listening, each start (ms) |");
        let _ = writeln!(t, "|---|---|");
        for d in &self.daemons {
            let all: Vec<String> = d.startup_ms.iter().map(|v| format!("{v:.1}")).collect();
            let _ = writeln!(t, "| {} | {} |", d.kind.name(), all.join(", "));
        }
        for d in &self.daemons {
            if let Some((f, boots)) = &d.big_db {
                let all: Vec<String> = boots.iter().map(|v| format!("{v:.1}")).collect();
                let _ = writeln!(
                    t,
                    "\n| {} with a big database | size | events | filled in | exec → listening, each boot (ms) |\n|---|--:|--:|--:|---|\n| | {:.1} MiB | {} | {:.1} s | {} |",
                    d.kind.name(),
                    f.db_bytes as f64 / (1u64 << 20) as f64,
                    f.events,
                    f.fill_s,
                    all.join(", ")
                );
            }
        }
        let failures: Vec<String> = self
            .direct
            .failures
            .iter()
            .map(|f| format!("direct stdio: {f}"))
            .chain(
                self.daemons
                    .iter()
                    .flat_map(|d| d.failures.iter().map(move |f| format!("{}: {f}", d.kind.name()))),
            )
            .collect();
        let mut refusals: Vec<String> = Vec::new();
        for d in &self.daemons {
            let memory =
                d.memory.iter().filter_map(|m| m.refused.as_ref().map(|why| format!("memory: {why}")));
            for f in d.refusals.iter().cloned().chain(memory) {
                let line = format!("{}: {f}", d.kind.name());
                if !refusals.contains(&line) {
                    refusals.push(line);
                }
            }
        }
        if !refusals.is_empty() {
            let _ = writeln!(t, "\n### Refused by the daemon (a built-in cap, not a failure)\n");
            for f in refusals {
                let _ = writeln!(t, "- {f}");
            }
        }
        if !failures.is_empty() {
            let _ = writeln!(t, "\n### Failed runs\n");
            for f in failures {
                let _ = writeln!(t, "- {f}");
            }
        }
        let _ = writeln!(t, "\n{}", HISTORY.trim_end());
        t
    }
}

#[cfg(test)]
mod tests {
    use super::{CpuTicks, Machine, Report};
    use crate::scenarios::RelayRun;
    use crate::{DaemonResults, DirectResults, Plan, procs::Kind};

    #[test]
    fn cpu_ticks_are_the_first_eight_fields_of_the_cpu_line() {
        // Guest time (the last two) is counted in user and nice already.
        let stat = "cpu  100 20 30 800 10 0 5 35 7 0\ncpu0 50 10 15 400 5 0 2 18 0 0\nintr 1 2 3\n";
        assert_eq!(CpuTicks::parse(stat), Some(CpuTicks { total: 1000, steal: 35 }));
        // A kernel too old to count steal, or not Linux's /proc: not known, rather than a wrong 0.
        assert_eq!(CpuTicks::parse("cpu  100 20 30 800 10 0 5\n"), None);
        assert_eq!(CpuTicks::parse(""), None);
        assert_eq!(CpuTicks::parse("cpu0 1 2 3 4 5 6 7 8\n"), None);
        assert_eq!(CpuTicks::parse("cpu  1 2 3 4 5 6 x 8\n"), None);
    }

    #[test]
    fn the_stolen_share_is_of_the_time_between_two_readings() {
        let before = CpuTicks { total: 1000, steal: 35 };
        assert_eq!(CpuTicks { total: 1400, steal: 75 }.stolen_since(before), Some(10.0));
        assert_eq!(CpuTicks { total: 1400, steal: 35 }.stolen_since(before), Some(0.0));
        // No time passed, or counters that went back (another boot): no share.
        assert_eq!(before.stolen_since(before), None);
        assert_eq!(CpuTicks { total: 900, steal: 40 }.stolen_since(before), None);
        assert_eq!(CpuTicks { total: 1400, steal: 30 }.stolen_since(before), None);
    }

    fn machine() -> Machine {
        Machine {
            cpus: 2,
            cpu_model: String::new(),
            memory_gib: 0.0,
            kernel: String::new(),
            rustc: String::new(),
            node: String::new(),
            mediatord: String::new(),
            qwen: None,
            load_before: String::new(),
            // Counters at zero, as at boot: every tick since counts as the run's.
            ticks_before: Some(CpuTicks { total: 0, steal: 0 }),
            stolen: None,
            date: String::new(),
        }
    }

    #[test]
    fn a_run_ends_by_reading_this_machines_counters_again() {
        let mut machine = machine();
        machine.finish();
        let stolen = machine.stolen.expect("Linux's /proc/stat has the steal column");
        assert!((0.0..=100.0).contains(&stolen), "{stolen}");
    }

    fn relay(per_s: f64, cpu_ns: Option<f64>) -> RelayRun {
        relay_read(per_s, cpu_ns, None)
    }

    fn relay_read(per_s: f64, cpu_ns: Option<f64>, reader_ns: Option<f64>) -> RelayRun {
        RelayRun {
            subscribers: 1,
            expected_per_sub: 100,
            received: 100,
            evicted: 0,
            incomplete: 0,
            window_s: 100.0 / per_s,
            delivered_per_s: per_s,
            p50_us: 1,
            p99_us: 2,
            cpu_ns_per_update: cpu_ns,
            reader_cpu_ns_per_update: reader_ns,
        }
    }

    #[test]
    fn the_one_stream_relay_has_a_row_for_the_daemons_cpu_per_update_the_median_of_the_runs_measured() {
        let mut mediatord = DaemonResults::new(Kind::Mediatord, String::new());
        mediatord.relay = vec![(
            1,
            vec![
                relay(9e5, Some(1500.0)),
                relay(8e5, Some(1000.0)),
                relay(7e5, None),
                relay(6e5, Some(2000.0)),
            ],
        )];
        let mut qwen = DaemonResults::new(Kind::Qwen, String::new());
        qwen.relay = vec![(1, vec![relay(1e4, Some(30_000.0))])];
        let plan = Plan { subscribers: vec![1], ..Plan::full() };
        let report = Report {
            machine: machine(),
            plan,
            direct: DirectResults::default(),
            daemons: vec![mediatord, qwen],
        };
        let rows = report.rows();
        let at = rows
            .iter()
            .position(|r| r.figure.starts_with("relay, 1 subscriber: delivered"))
            .expect("the relay row");
        let cpu = &rows[at + 1];
        assert_eq!(cpu.figure, "relay, 1 subscriber: the daemon's CPU per delivered update (ns)");
        assert_eq!((cpu.mediatord, cpu.qwen), (Some(1500.0), Some(30_000.0)));
        assert_eq!(cpu.ratio, Some(20.0), "qwen serve ÷ mediatord: lower is better");
        assert_eq!(cpu.met, None);
    }

    #[test]
    fn the_load_clients_cpu_per_update_has_a_row_beside_the_daemons_for_direct_and_each_daemon() {
        let mut mediatord = DaemonResults::new(Kind::Mediatord, String::new());
        mediatord.relay = vec![(
            1,
            vec![
                relay_read(9e5, Some(1500.0), Some(700.0)),
                relay_read(8e5, Some(1000.0), None),
                relay_read(6e5, Some(2000.0), Some(900.0)),
                relay_read(7e5, None, Some(800.0)),
            ],
        )];
        let direct = DirectResults {
            blast: vec![
                relay_read(2e6, None, Some(150.0)),
                relay_read(2e6, None, Some(250.0)),
                relay_read(2e6, None, Some(200.0)),
            ],
            ..DirectResults::default()
        };
        let plan = Plan { subscribers: vec![1], ..Plan::full() };
        let report = Report { machine: machine(), plan, direct, daemons: vec![mediatord] };
        let rows = report.rows();
        let at = rows
            .iter()
            .position(|r| r.figure == "relay, 1 subscriber: the daemon's CPU per delivered update (ns)")
            .expect("the daemon's row");
        let reader = &rows[at + 1];
        assert_eq!(reader.figure, "relay, 1 subscriber: the load client's CPU per delivered update (ns)");
        assert_eq!((reader.direct, reader.mediatord, reader.qwen), (Some(200.0), Some(800.0), None));
        assert_eq!((reader.ratio, reader.met), (None, None), "not the daemon's merit: no ratio, no target");
        let text = report.markdown();
        let row = format!("| {} | 700 |", super::group(1500));
        assert!(text.contains(&row), "every run's two CPU figures side by side:\n{text}");
    }
}

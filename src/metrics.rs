//! Prometheus metrics (`GET /metrics`): counters and histograms incremented by their owners (the
//! session's turn runner, the mediator, the agent actor, the HTTP layer), plus the gauges of a
//! [`Snapshot`] the daemon takes at scrape time. No global state: one [`Metrics`] per daemon.
//!
//! A leaf: it imports nothing from the crate. The daemon fills a [`Snapshot`]; this file only
//! turns one into text, so metrics never reach back into the daemon's tables.

use std::time::Duration;

use serde::{Serialize, Serializer};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The exposition's content type (OpenMetrics text; Prometheus reads it natively).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(&'static str, String)>;

/// Seconds: prompts run from milliseconds (demo agent) to many minutes (a real agent's turn).
const PROMPT_BUCKETS: [f64; 12] = [0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0];
/// Seconds: a loopback webhook answers in milliseconds, a hosted one in a second or two, a
/// delivery that retried takes up to 3 × 10 s plus its backoff.
const NOTIFY_BUCKETS: [f64; 10] = [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 35.0];
/// Seconds: rules decide at once, people take seconds to minutes.
const DECISION_BUCKETS: [f64; 11] = [0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0];

/// Seconds: a reviewer program answers in milliseconds; its deadline is seconds
/// (`config::DEFAULT_REVIEW_DEADLINE_MS`).
const REVIEW_BUCKETS: [f64; 10] = [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0];

/// The reasons a reviewer fails (`mediatord_review_failures_total{reason}`).
pub const REVIEW_FAILURES: [&str; 4] = ["timeout", "crash", "garbage", "unavailable"];

type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

/// The daemon's figures at one instant: what `GET /health?deep=1` answers (the serialised fields,
/// in the order the document has always had them: alphabetical) and what the gauges and event
/// counters of `GET /metrics` read.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Sessions with a prompt running.
    pub active_prompts: usize,
    /// The configured agent program and whether it can be run.
    pub agent: AgentProgram,
    /// Running agent processes.
    pub agents: usize,
    /// Permission requests awaiting a decision, over every session.
    pub pending_permissions: usize,
    /// Live sessions.
    pub sessions: usize,
    /// `"ok"`; `"degraded"` once the store lost a write other than an event since the start (the
    /// store's `writesDropped`, `writesFailed` or `commitsFailed` is not 0).
    pub status: &'static str,
    /// The durable store's figures.
    pub store: StoreFigures,
    /// Open SSE event streams.
    pub subscribers: u64,
    #[serde(rename = "uptimeMs", serialize_with = "millis")]
    pub uptime: Duration,
    /// Workspaces with a running agent (one agent per workspace).
    pub workspaces: usize,
    /// Events published on session buses, ever.
    #[serde(skip)]
    pub events_published: u64,
    /// Events handed to SSE streams (one per stream per event), ever.
    #[serde(skip)]
    pub events_delivered: u64,
    /// SSE streams evicted for falling behind (`ring_overrun`, `lag_limit`), ever.
    #[serde(skip)]
    pub streams_evicted: u64,
    /// `slow_client_warning` frames sent, ever.
    #[serde(skip)]
    pub slow_stream_warnings: u64,
    /// Bytes held by the replay rings of every session now.
    #[serde(skip)]
    pub ring_bytes: u64,
    /// Notification deliveries (`docs/notifications.md`).
    pub notifications: NotifyCounts,
    /// What confines the default agent, and the refused writes seen.
    pub sandbox: SandboxFigures,
}

/// `/health?deep=1`'s `sandbox`: what confines the default agent (and its sessions' shell commands),
/// as `/capabilities` says it, and the refused writes the daemon saw since the start.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SandboxFigures {
    /// `landlock`, `off` or `unsupported`.
    pub kind: &'static str,
    /// The Landlock ABI in use, when the kernel has one.
    pub abi: Option<u8>,
    /// Where writes are allowed, when enforced.
    pub writable: Option<Vec<String>>,
    /// TCP connections allowed, when enforced: `"any"`, `"none"` or the ports.
    pub net: Option<serde_json::Value>,
    /// Confined tool calls and shell commands whose output read like a refused write.
    pub denials: u64,
}

/// `/health?deep=1`'s `notifications`: what the notification workers did since the start.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotifyCounts {
    /// Configured targets.
    pub targets: usize,
    /// Deliveries waiting in the targets' queues now.
    pub queued: usize,
    /// Deliveries a target accepted (2xx).
    pub sent: u64,
    /// Deliveries that failed (a 4xx, or every attempt failed).
    pub failed: u64,
    /// Deliveries dropped from a full queue.
    pub dropped: u64,
    /// Action links held now (live, used or expired).
    pub links: usize,
}

/// `/health?deep=1`'s `store`: what the durable state holds and how its writer keeps up.
#[derive(Debug, Clone, Copy, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreFigures {
    /// `false` with `--ephemeral`.
    pub durable: bool,
    /// The database on disk (main file and WAL), bytes.
    pub db_bytes: u64,
    /// Events recorded in the history since the daemon started.
    pub events_written: u64,
    /// Events the writer's queue had no room for (recorded as gaps).
    pub events_dropped: u64,
    /// Gap markers written.
    pub gaps: u64,
    /// Other writes (audit, sessions, rules, devices) the writer's queue had no room for.
    pub writes_dropped: u64,
    /// Other writes lost in a transaction that failed (the database busy past its timeout, the
    /// disk full or failing). The acknowledged ones among them were refused, not acknowledged.
    pub writes_failed: u64,
    /// Transactions that failed.
    pub commits_failed: u64,
}

/// `/health?deep=1`'s `agent`: the program `--agent` names (its arguments are left out: they may
/// carry credentials) and whether it can be run now, so a missing install shows before a create
/// fails with it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentProgram {
    pub program: String,
    /// An executable file of that name exists (on `PATH` for a bare name).
    pub found: bool,
    /// Why not, when not found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One reviewer's figures since the daemon started (`GET /reviewers`), read from the counters of
/// `/metrics` ([`Metrics::reviewer_figures`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewerFigures {
    /// Verdicts by what they said; a failure is an `escalate`.
    pub allowed: u64,
    pub denied: u64,
    pub escalated: u64,
    /// Failures by reason ([`REVIEW_FAILURES`]), each also counted in `escalated`.
    pub failures: std::collections::BTreeMap<&'static str, u64>,
    /// Allow or deny verdicts a person then decided the other way.
    pub overruled: u64,
    /// Times its program was killed for hanging and started again.
    pub restarts: u64,
    /// Verdicts and failures timed (a request decided before its reviewer answered is not).
    pub answered: u64,
    /// Their mean time, from the request sent to the verdict or failure, in milliseconds.
    pub mean_ms: Option<f64>,
}

fn millis<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

#[derive(Debug)]
pub struct Metrics {
    /// Finished prompts by `outcome` (completed, cancelled, agent_error, agent_exited, or the code
    /// of why the prompt never ran: session_closed, daemon_draining).
    prompts: Family<Labels, Counter>,
    prompt_duration: Histogram,
    /// Permission decisions by `policy` and `resolved_by`.
    decisions: Family<Labels, Counter>,
    decision_duration: Histogram,
    /// Agent process exits by `reason` (stopped, exited, signal).
    agent_exits: Family<Labels, Counter>,
    /// HTTP requests by `method`, matched `route` (never the raw path) and `status`.
    http_requests: Family<Labels, Counter>,
    /// Connections closed because their socket accepted no bytes for `--writer-idle-timeout-ms`.
    writer_timeouts: Counter,
    /// Notification deliveries by `outcome` (sent, failed).
    notifications: Family<Labels, Counter>,
    /// Notifications dropped from a full queue.
    notifications_dropped: Counter,
    /// From the event to the target's final answer.
    notification_duration: Histogram,
    /// Confined tool calls (`source="agent"`) and session shell commands (`source="shell"`) whose
    /// output read like a refused write.
    sandbox_denials: Family<Labels, Counter>,
    /// HTTP/2 connections ended on an error, by `reason` (`enhance_your_calm` for a flood of
    /// resets, `protocol_error`, `frame_size_error`, `compression_error`, …).
    http2_errors: Family<Labels, Counter>,
    /// Reviewers' verdicts by `reviewer` and `verdict` (allow, deny, escalate); a failure counts
    /// as an escalate here and in `review_failures` by its `reason`. At most
    /// `config::MAX_REVIEWERS` names: the labels stay bounded.
    reviews: Family<Labels, Counter>,
    /// Reviewers' failures by `reviewer` and `reason` (timeout, crash, garbage, unavailable).
    review_failures: Family<Labels, Counter>,
    /// From a request sent to a reviewer to its verdict (or its failure), by `reviewer`.
    review_duration: HistogramFamily,
    /// Reviewers' allow/deny verdicts a person then decided the other way, by `reviewer`
    /// (`permission::review::overrules`).
    reviews_overruled: Family<Labels, Counter>,
    /// Reviewer programs killed and started again, by `reviewer` and `reason` (`hung`: no verdict
    /// to several requests in a row).
    review_restarts: Family<Labels, Counter>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            prompts: Family::default(),
            prompt_duration: Histogram::new(PROMPT_BUCKETS),
            decisions: Family::default(),
            decision_duration: Histogram::new(DECISION_BUCKETS),
            agent_exits: Family::default(),
            http_requests: Family::default(),
            writer_timeouts: Counter::default(),
            notifications: Family::default(),
            notifications_dropped: Counter::default(),
            notification_duration: Histogram::new(NOTIFY_BUCKETS),
            sandbox_denials: Family::default(),
            http2_errors: Family::default(),
            reviews: Family::default(),
            review_failures: Family::default(),
            review_duration: Family::new_with_constructor(|| Histogram::new(REVIEW_BUCKETS)),
            reviews_overruled: Family::default(),
            review_restarts: Family::default(),
        }
    }
}

impl Metrics {
    /// A prompt's turn event went out: `outcome` as above, `took` from enqueue to the turn event.
    pub fn prompt_finished(&self, outcome: &str, took: Duration) {
        self.prompts.get_or_create(&vec![("outcome", outcome.to_owned())]).inc();
        self.prompt_duration.observe(took.as_secs_f64());
    }

    /// A permission request was decided, `took_ms` after it was issued.
    pub fn decision(&self, policy: &str, resolved_by: &str, took_ms: u64) {
        let labels = vec![("policy", policy.to_owned()), ("resolved_by", resolved_by.to_owned())];
        self.decisions.get_or_create(&labels).inc();
        self.decision_duration.observe(took_ms as f64 / 1000.0);
    }

    pub fn agent_exit(&self, reason: &'static str) {
        self.agent_exits.get_or_create(&vec![("reason", reason.to_owned())]).inc();
    }

    pub fn http_request(&self, method: &str, route: &str, status: u16) {
        let labels =
            vec![("method", method.to_owned()), ("route", route.to_owned()), ("status", status.to_string())];
        self.http_requests.get_or_create(&labels).inc();
    }

    /// A connection was closed because its socket accepted no bytes for `--writer-idle-timeout-ms`.
    pub fn writer_timeout(&self) {
        self.writer_timeouts.inc();
    }

    /// A notification delivery ended (`sent` or `failed`), `took` after its event.
    pub fn notification(&self, outcome: &'static str, took: Duration) {
        self.notifications.get_or_create(&vec![("outcome", outcome.to_owned())]).inc();
        self.notification_duration.observe(took.as_secs_f64());
    }

    /// A notification was dropped from a full queue.
    pub fn notification_dropped(&self) {
        self.notifications_dropped.inc();
    }

    /// A confined tool call or shell command (`source`: `agent`, `shell`) reported a refused write.
    /// An HTTP/2 connection ended on an error with `reason`.
    pub fn http2_error(&self, reason: &'static str) {
        self.http2_errors.get_or_create(&vec![("reason", reason.to_owned())]).inc();
    }

    pub fn sandbox_denial(&self, source: &'static str) {
        self.sandbox_denials.get_or_create(&vec![("source", source.to_owned())]).inc();
    }

    /// A reviewer's verdict (`allow`, `deny`, `escalate`), `took` after its request was sent;
    /// `failure` (`timeout`, `crash`, `garbage`, `unavailable`) when the escalate is a failure's.
    pub fn review(
        &self,
        reviewer: &str,
        verdict: &'static str,
        failure: Option<&'static str>,
        took: Duration,
    ) {
        let labels = vec![("reviewer", reviewer.to_owned()), ("verdict", verdict.to_owned())];
        self.reviews.get_or_create(&labels).inc();
        if let Some(reason) = failure {
            let labels = vec![("reviewer", reviewer.to_owned()), ("reason", reason.to_owned())];
            self.review_failures.get_or_create(&labels).inc();
        }
        self.review_duration
            .get_or_create(&vec![("reviewer", reviewer.to_owned())])
            .observe(took.as_secs_f64());
    }

    /// A person decided a request the other way from `reviewer`'s allow or deny.
    pub fn review_overruled(&self, reviewer: &str) {
        self.reviews_overruled.get_or_create(&vec![("reviewer", reviewer.to_owned())]).inc();
    }

    /// `reviewer`'s program was killed to be started again (`hung`).
    pub fn review_restart(&self, reviewer: &str, reason: &'static str) {
        let labels = vec![("reviewer", reviewer.to_owned()), ("reason", reason.to_owned())];
        self.review_restarts.get_or_create(&labels).inc();
    }

    /// `reviewer`'s figures since the daemon started, read from the counters `/metrics` shows, so
    /// the two cannot disagree (`GET /reviewers`).
    pub fn reviewer_figures(&self, reviewer: &str) -> ReviewerFigures {
        let count = |family: &Family<Labels, Counter>, key: &'static str, value: &str| {
            let labels = vec![("reviewer", reviewer.to_owned()), (key, value.to_owned())];
            family.get(&labels).map_or(0, |c| c.get())
        };
        let only = vec![("reviewer", reviewer.to_owned())];
        let latency = self.review_duration.get(&only).map_or((0, 0.0), |h| (h.count(), h.sum()));
        ReviewerFigures {
            allowed: count(&self.reviews, "verdict", "allow"),
            denied: count(&self.reviews, "verdict", "deny"),
            escalated: count(&self.reviews, "verdict", "escalate"),
            failures: REVIEW_FAILURES
                .iter()
                .map(|r| (*r, count(&self.review_failures, "reason", r)))
                .collect(),
            overruled: self.reviews_overruled.get(&only).map_or(0, |c| c.get()),
            restarts: count(&self.review_restarts, "reason", "hung"),
            answered: latency.0,
            mean_ms: if latency.0 == 0 { None } else { Some(latency.1 * 1000.0 / latency.0 as f64) },
        }
    }

    /// Refused writes seen, every source together.
    pub fn sandbox_denials(&self) -> u64 {
        ["agent", "shell"]
            .iter()
            .map(|s| self.sandbox_denials.get_or_create(&vec![("source", (*s).to_owned())]).get())
            .sum()
    }

    /// The exposition: the counters above plus the gauges and event counters of `now`.
    pub fn render(&self, now: &Snapshot) -> String {
        let mut r = Registry::with_prefix("mediatord");
        let gauge = |v: usize| -> ConstGauge<i64> { ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)) };
        r.register("sessions", "Live sessions", gauge(now.sessions));
        r.register("agents", "Running agent processes", gauge(now.agents));
        r.register(
            "subscribers",
            "Open SSE event streams",
            gauge(usize::try_from(now.subscribers).unwrap_or(usize::MAX)),
        );
        r.register(
            "pending_permissions",
            "Permission requests awaiting a decision",
            gauge(now.pending_permissions),
        );
        r.register("active_prompts", "Sessions with a prompt running", gauge(now.active_prompts));
        let counter = |v: u64| ConstCounter::new(v);
        r.register("events_published", "Events published on session buses", counter(now.events_published));
        r.register(
            "events_delivered",
            "Events handed to SSE streams (one per stream per event)",
            counter(now.events_delivered),
        );
        r.register(
            "streams_evicted",
            "SSE streams evicted for falling behind (off the replay ring, or past --subscriber-queue)",
            counter(now.streams_evicted),
        );
        r.register(
            "slow_stream_warnings",
            "slow_client_warning frames sent to SSE streams",
            counter(now.slow_stream_warnings),
        );
        r.register(
            "ring_bytes",
            "Bytes held by the replay rings of all sessions",
            gauge(usize::try_from(now.ring_bytes).unwrap_or(usize::MAX)),
        );
        r.register(
            "writer_timeouts",
            "Connections closed because their socket accepted no bytes for --writer-idle-timeout-ms",
            self.writer_timeouts.clone(),
        );
        r.register("prompts", "Finished prompts by outcome", self.prompts.clone());
        r.register(
            "prompt_duration_seconds",
            "Prompt time from enqueue to its turn event",
            self.prompt_duration.clone(),
        );
        r.register(
            "permission_decisions",
            "Permission decisions by policy and resolved_by",
            self.decisions.clone(),
        );
        r.register(
            "permission_decision_seconds",
            "Time from a permission request to its decision",
            self.decision_duration.clone(),
        );
        r.register("agent_exits", "Agent process exits by reason", self.agent_exits.clone());
        r.register(
            "http_requests",
            "HTTP requests by method, matched route and status",
            self.http_requests.clone(),
        );
        let st = &now.store;
        r.register(
            "store_db_bytes",
            "Size of the state database on disk (main file and WAL)",
            gauge(usize::try_from(st.db_bytes).unwrap_or(usize::MAX)),
        );
        r.register(
            "store_events_written",
            "Events recorded in the session history",
            counter(st.events_written),
        );
        r.register(
            "store_events_dropped",
            "Events the store's writer had no room for, recorded as history gaps",
            counter(st.events_dropped),
        );
        r.register("store_gaps", "Gap markers written to the session history", counter(st.gaps));
        r.register(
            "store_writes_dropped",
            "Audit, session and rule writes the store's writer had no room for",
            counter(st.writes_dropped),
        );
        r.register(
            "store_writes_failed",
            "Audit, session, rule and device writes lost in a failed transaction",
            counter(st.writes_failed),
        );
        r.register(
            "store_commits_failed",
            "Transactions of the store's writer that failed",
            counter(st.commits_failed),
        );
        r.register("notifications", "Notification deliveries by outcome", self.notifications.clone());
        r.register(
            "notifications_dropped",
            "Notifications dropped from a full queue (the oldest goes)",
            self.notifications_dropped.clone(),
        );
        r.register(
            "notification_duration_seconds",
            "Time from an event to its notification target's final answer",
            self.notification_duration.clone(),
        );
        r.register(
            "sandbox_denials",
            "Confined tool calls and session shell commands whose output read like a refused write (EACCES, EPERM), by source",
            self.sandbox_denials.clone(),
        );
        r.register(
            "http2_errors",
            "HTTP/2 connections ended on an error, by reason (enhance_your_calm: a flood of resets)",
            self.http2_errors.clone(),
        );
        r.register(
            "reviews",
            "Reviewers' verdicts by reviewer and verdict (allow, deny, escalate; a failure is an escalate)",
            self.reviews.clone(),
        );
        r.register(
            "review_failures",
            "Reviewers' failures by reviewer and reason (timeout, crash, garbage, unavailable): each left the request to the people",
            self.review_failures.clone(),
        );
        r.register(
            "reviews_overruled",
            "Reviewers' allow or deny verdicts a person then decided the other way, by reviewer",
            self.reviews_overruled.clone(),
        );
        r.register(
            "review_restarts",
            "Reviewer programs killed and started again, by reviewer and reason (hung: no verdict to several requests in a row)",
            self.review_restarts.clone(),
        );
        r.register(
            "review_seconds",
            "Time from a request sent to a reviewer to its verdict or failure",
            self.review_duration.clone(),
        );
        let uptime: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
        uptime.set(now.uptime.as_secs_f64());
        r.register("uptime_seconds", "Seconds since the daemon started", uptime);
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &r);
        out
    }
}

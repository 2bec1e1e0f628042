//! Prometheus metrics (`GET /metrics`): counters and histograms incremented by their owners (the
//! session's turn runner, the mediator, the agent actor, the HTTP layer), plus gauges read from the
//! daemon's tables at scrape time. No global state: one [`Metrics`] per daemon.

use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::daemon::Daemon;

/// The exposition's content type (OpenMetrics text; Prometheus reads it natively).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(&'static str, String)>;

/// Seconds: prompts run from milliseconds (demo agent) to many minutes (a real agent's turn).
const PROMPT_BUCKETS: [f64; 12] = [0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0];
/// Seconds: rules decide at once, people take seconds to minutes.
const DECISION_BUCKETS: [f64; 11] = [0.001, 0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0];

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

    /// The exposition for `daemon`: the counters above plus gauges read now.
    pub fn render(&self, daemon: &Daemon) -> String {
        let mut r = Registry::with_prefix("mediatord");
        let health = daemon.deep_health();
        let figure = |key: &str| health.get(key).and_then(serde_json::Value::as_i64).unwrap_or(0);
        let gauge = |v: i64| -> ConstGauge<i64> { ConstGauge::new(v) };
        r.register("sessions", "Live sessions", gauge(figure("sessions")));
        r.register("agents", "Running agent processes", gauge(figure("agents")));
        r.register("subscribers", "Open SSE event streams", gauge(figure("subscribers")));
        r.register(
            "pending_permissions",
            "Permission requests awaiting a decision",
            gauge(figure("pendingPermissions")),
        );
        r.register("active_prompts", "Sessions with a prompt running", gauge(figure("activePrompts")));
        let stats = &daemon.bus_stats;
        let counter = |v: u64| ConstCounter::new(v);
        r.register(
            "events_published",
            "Events published on session buses",
            counter(stats.published.load(Ordering::Relaxed)),
        );
        r.register(
            "events_delivered",
            "Event frames queued to SSE streams (one per stream per event)",
            counter(stats.delivered.load(Ordering::Relaxed)),
        );
        r.register(
            "streams_evicted",
            "SSE streams evicted for falling behind (--subscriber-queue)",
            counter(stats.evicted.load(Ordering::Relaxed)),
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
        let uptime: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
        uptime.set(daemon.started.elapsed().as_secs_f64());
        r.register("uptime_seconds", "Seconds since the daemon started", uptime);
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &r);
        out
    }
}

//! The reviewers (`docs/operations.md#reviewers`): each configured `command` reviewer is a
//! program started once behind the agent guard (so it is confined as an agent is, dies with the
//! daemon, and, as the daemon's descendant, is refused by `crate::peer` should it try to act as a
//! client), kept, and restarted with a bounded backoff when it dies. One request line in on its
//! stdin, one verdict line out on its stdout, NDJSON.
//!
//! - [`Reviewer`]: one reviewer as the mediator asks it ([`crate::permission::Judge`]): the
//!   deadline, the failure turned into an `escalate`, the metrics and the throttled log.
//! - `process`: the task that owns the program: its pipes, the requests awaiting a verdict,
//!   restarts.
//! - `wire`: the strict verdict parser.
//!
//! Above `agent` (it starts its program as an agent is started, `agent::Helper`) and `permission`
//! (it is a `Judge`); only `daemon` imports it, and hands each session's mediator the reviewers
//! of its workspace.

mod process;
mod wire;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use self::process::Ask;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{ReviewerSpec, TrustMap};
use crate::exec::ProcessGroups;
use crate::log_throttle::SharedLogThrottle;
use crate::metrics::Metrics;
use crate::permission::{Judge, Review};

/// Requests queued for a reviewer's task at most; past it a request fails at once (`timeout`: the
/// reviewer is not keeping up), as one waiting past its deadline would.
const ASK_QUEUE: usize = 64;

/// One configured reviewer, kept for the daemon's life.
#[derive(Debug)]
pub struct Reviewer {
    name: String,
    trust: TrustMap,
    deadline: Duration,
    /// `None`: the workspace it serves is every one.
    workspace: Option<std::path::PathBuf>,
    asks: mpsc::Sender<Ask>,
    metrics: Arc<Metrics>,
    /// Failures, logged once a second per reviewer (a hung reviewer fails every request).
    failed_log: SharedLogThrottle,
    stop: CancellationToken,
}

impl Reviewer {
    /// Starts `spec`'s program (in its workspace, else `default_cwd`) on a task of its own.
    pub fn start(
        spec: &ReviewerSpec,
        default_cwd: &Path,
        groups: ProcessGroups,
        metrics: Arc<Metrics>,
    ) -> Arc<Reviewer> {
        let (tx, rx) = mpsc::channel(ASK_QUEUE);
        let stop = CancellationToken::new();
        let cwd = spec.workspace.clone().unwrap_or_else(|| default_cwd.to_path_buf());
        tokio::spawn(process::run(spec.clone(), cwd, groups, rx, stop.clone(), metrics.clone()));
        Arc::new(Reviewer {
            name: spec.name.clone(),
            trust: spec.trust.clone(),
            deadline: spec.deadline,
            workspace: spec.workspace.clone(),
            asks: tx,
            metrics,
            failed_log: SharedLogThrottle::default(),
            stop,
        })
    }

    /// Whether it judges the requests of sessions in `workspace`.
    pub fn serves(&self, workspace: &Path) -> bool {
        self.workspace.as_deref().is_none_or(|w| w == workspace)
    }

    /// Stops its program (the daemon's drain): the task ends and kills the program's group.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Judge for Reviewer {
    fn name(&self) -> &str {
        &self.name
    }

    fn trust(&self) -> &TrustMap {
        &self.trust
    }

    fn judge(&self, request: Value) -> BoxFuture<'static, Review> {
        let (reply, rx) = oneshot::channel();
        let queued = self.asks.try_send(Ask { request, reply }).is_ok();
        let (name, deadline, metrics, log) =
            (self.name.clone(), self.deadline, self.metrics.clone(), self.failed_log.clone());
        let started = Instant::now();
        Box::pin(async move {
            let review = if !queued {
                Review::failed("timeout", format!("reviewer {name} has {ASK_QUEUE} requests waiting already"))
            } else {
                match tokio::time::timeout(deadline, rx).await {
                    Ok(Ok(review)) => review,
                    Ok(Err(_)) => Review::failed("crash", format!("reviewer {name} stopped")),
                    Err(_) => Review::failed(
                        "timeout",
                        format!("reviewer {name} gave no verdict within {} ms", deadline.as_millis()),
                    ),
                }
            };
            metrics.review(&name, review.verdict.as_str(), review.failure, started.elapsed());
            if let Some(failure) = review.failure {
                let who = name.clone();
                let report = move |n: u64| {
                    tracing::warn!(reviewer = %who, count = n, "{n} more reviewer failures in the last second");
                };
                if log.admit(report) {
                    tracing::warn!(reviewer = %name, failure, "{}; the request stays with the people", review.reason);
                }
            }
            review
        })
    }
}

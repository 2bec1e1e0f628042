//! The reviewers (`docs/operations.md#reviewers`): each configured `command` reviewer is a
//! program started once behind the agent guard (so it is confined as an agent is, dies with the
//! daemon, and, as the daemon's descendant, is refused by `crate::peer` should it try to act as a
//! client), kept, and restarted with a bounded backoff when it dies. One request line in on its
//! stdin, one verdict line out on its stdout, NDJSON. Each `model` reviewer is a chat endpoint
//! asked once per request, with the agents' secrets redacted.
//!
//! - [`Reviewer`]: one reviewer as the mediator asks it ([`crate::permission::Judge`]): the
//!   queue, the deadline, the failure turned into an `escalate`, the metrics and the throttled
//!   log; the same for both kinds.
//! - `process`: the task that owns a command reviewer's program: its pipes, the requests
//!   awaiting a verdict, restarts.
//! - `model`: the task that asks a model reviewer's endpoint: the prompt, the calls in flight,
//!   the answer read.
//! - `wire`: the strict verdict parser both kinds' answers go through.
//!
//! Above `agent` (it starts its program as an agent is started, `agent::Helper`) and `permission`
//! (it is a `Judge`); only `daemon` imports it, and hands each session's mediator the reviewers
//! of its workspace.

mod model;
mod process;
mod wire;

pub use self::model::DEFAULT_SYSTEM_PROMPT;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use self::process::Ask;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::agent::Redactor;
use crate::config::{ReviewerKind, ReviewerSpec, TrustMap};
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
    /// Starts `spec`'s task: a command's program (in its workspace, else `default_cwd`), or a
    /// model's caller, which keeps the values of `agent_env` (every agent's configured
    /// environment) out of what it sends.
    pub fn start(
        spec: &ReviewerSpec,
        default_cwd: &Path,
        agent_env: &[(String, String)],
        groups: ProcessGroups,
        metrics: Arc<Metrics>,
    ) -> Arc<Reviewer> {
        let (tx, rx) = mpsc::channel(ASK_QUEUE);
        let stop = CancellationToken::new();
        match &spec.kind {
            ReviewerKind::Command { command, sandbox } => {
                let cwd = spec.workspace.clone().unwrap_or_else(|| default_cwd.to_path_buf());
                let program = process::Program {
                    name: spec.name.clone(),
                    command: command.clone(),
                    sandbox: sandbox.clone(),
                    deadline: spec.deadline,
                };
                tokio::spawn(process::run(program, cwd, groups, rx, stop.clone(), metrics.clone()));
            }
            ReviewerKind::Model(model) => {
                let mut secrets = agent_env.to_vec();
                if let Some(key) = &model.key {
                    secrets.push(("key".to_owned(), key.expose().to_owned()));
                }
                let endpoint = model::Endpoint {
                    name: spec.name.clone(),
                    spec: model.clone(),
                    redactor: Redactor::new(&secrets).and_token_shapes(),
                    tls: model.base.tls.then(|| crate::outgoing::client_tls("model reviewer")).flatten(),
                };
                tokio::spawn(model::run(endpoint, rx, stop.clone()));
            }
        }
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

//! Notifications (`docs/notifications.md`): the events sessions publish, delivered to the
//! configured targets without the publisher ever waiting, with one-tap action links.
//!
//! - this file: [`Notifier`]: what sessions hand events to ([`Notifier::offer`]), one bounded queue
//!   and one worker task per target, reminders, and the figures.
//! - `links`: the action links' tokens, stored hashed, single use, shared fairly among sessions.
//! - `format`: the JSON document and the ntfy body; what a request asks, as a person reads it.
//! - `services`: each format's body; Slack, Discord and Telegram messages.
//! - `deliver`: one POST with hyper's client, signed, with retries.
//!
//! On the floor of `permission` and `agent` (below `daemon`, which hands it events): it imports only
//! leaves. The HTTP floor reads [`Notifier::links`] to serve `/act/{token}`.
//!
//! The publisher's side ([`Notifier::offer`]) only takes short, await-free locks: it runs inside
//! `Session::publish`, under the mediator's lock (lock order: mediator, session, then these).

mod deliver;
mod format;
mod links;
mod services;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use self::deliver::{Outcome, Verb};
pub use self::format::Asked;
use self::format::approves;
use self::format::{Action, Notice};
pub use self::links::{Link, LinkError, Links, well_formed};
use self::services::Posted;
use crate::config::{Escalation, NotifyTarget};
use crate::event::EventKind;
use crate::log_throttle::SharedLogThrottle;
use crate::metrics::{Metrics, NotifyCounts};
use crate::sync::lock;

/// Deliveries waiting per target; a full queue drops its oldest. A person needs a handful of
/// notifications at a time: 256 rides out a receiver that is down for a whole retry schedule
/// (about 35 s) while a busy session keeps raising requests (at most 64 pending per session).
pub const QUEUE_PER_TARGET: usize = 256;
/// Pending permission requests tracked for reminders (and to skip notifying a request decided
/// while its notification waited): 64 per session over 64 busy sessions.
const MAX_OPEN_REQUESTS: usize = 4096;
/// Reminders per request and target at most: escalation, not a stream.
const MAX_REMINDERS: u32 = 3;
/// Decisions remembered for a notification still being sent when its request was decided (its
/// service's answer, naming the message to edit, comes after): the last 1024, far more than the
/// deliveries a target has in flight (one at a time) over 16 targets.
const MAX_RECENTLY_DECIDED: usize = 1024;
/// Posted messages remembered per request, to update when it is decided: one per target and
/// notification (the first and its reminders).
const MAX_POSTED_PER_REQUEST: usize = 64;
/// Options of one request a notification lists and links at most (the mediator refuses requests
/// with more, `permission::MAX_OPTIONS_PER_REQUEST`; this keeps a notification bounded by itself).
const MAX_OPTIONS_LINKED: usize = 16;

/// One event to deliver.
#[derive(Debug)]
struct Job {
    kind: EventKind,
    session_id: String,
    workspace: String,
    data: Value,
    /// When the event was published, for the latency figure.
    at: Instant,
    reminder: u32,
    /// A permission request whose id is in `Outbox::open` (false only when that set was full):
    /// only a tracked request can be known to be decided.
    tracked: bool,
    /// For a decision (`PermissionResolved`): the message it updates, and the request's job.
    update: Option<(Posted, Arc<Job>)>,
    /// A request handed on by another target's `escalate`: not escalated again (two targets
    /// escalating to each other would ping-pong).
    escalated: bool,
}

impl Job {
    /// A job for an event a session just published: a first send, untracked, no edit.
    fn of(kind: EventKind, source: EventOrigin<'_>, data: &Value) -> Job {
        Job {
            kind,
            session_id: source.session_id.to_owned(),
            workspace: source.workspace.display().to_string(),
            data: data.clone(),
            at: Instant::now(),
            reminder: 0,
            tracked: false,
            update: None,
            escalated: false,
        }
    }

    /// The same event as a fresh job (a reminder, an escalation, an edit): first send,
    /// untracked, no edit; the callers set what differs.
    fn again(&self) -> Job {
        Job {
            kind: self.kind,
            session_id: self.session_id.clone(),
            workspace: self.workspace.clone(),
            data: self.data.clone(),
            at: Instant::now(),
            reminder: 0,
            tracked: false,
            update: None,
            escalated: false,
        }
    }
}

/// A message a target's service posted for a request: the target's index, the message, and the
/// request's job.
type Sent = (usize, Posted, Arc<Job>);

/// One target with its queue. The queue is a `VecDeque` behind a mutex (await-free critical
/// sections; the publisher only pushes) plus a `Notify` that wakes the target's one worker.
#[derive(Debug)]
struct Target {
    index: usize,
    config: NotifyTarget,
    jobs: Mutex<VecDeque<Arc<Job>>>,
    wake: Notify,
    /// Its log lines, throttled per kind (a hanging target and thousands of prompts used to make
    /// thousands of "dropped" lines a second).
    log: TargetLog,
}

impl Target {
    /// Whether it is sent events of `kind`. Files changed without approval go where permission
    /// requests go: to whoever would have been asked.
    fn wants(&self, kind: EventKind) -> bool {
        match kind {
            EventKind::UnapprovedChange => self.config.wants(EventKind::PermissionRequest),
            kind => self.config.wants(kind),
        }
    }
}

/// The kinds of log lines a target repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// Its queue was full and dropped its oldest delivery.
    Dropped,
    /// A delivery ended (sent, refused, failed).
    Delivered,
    /// A delivery was refused by the daemon itself: the target's certificate is not trusted.
    Untrusted,
}

#[derive(Debug, Default)]
struct TargetLog {
    dropped: SharedLogThrottle,
    delivered: SharedLogThrottle,
    untrusted: SharedLogThrottle,
}

impl TargetLog {
    fn throttle(&self, line: Line) -> &SharedLogThrottle {
        match line {
            Line::Dropped => &self.dropped,
            Line::Delivered => &self.delivered,
            Line::Untrusted => &self.untrusted,
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
}

/// What the publisher and the targets' workers share: the targets and their queues, the pending
/// requests and what was posted for them.
#[derive(Debug)]
struct Outbox {
    targets: Vec<Target>,
    links: Links,
    /// Pending permission requests by id.
    open: Mutex<HashSet<String>>,
    /// The messages services said they posted for pending requests (target, message, the
    /// request's job), by request id: updated with the decision, then forgotten. Only requests in
    /// `open` have entries, so it is bounded as `open` is.
    posted: Mutex<HashMap<String, Vec<Sent>>>,
    /// The decisions of tracked requests, newest last, by request id: a notification whose
    /// service answers after its request was decided is edited at once. Written under `open`'s
    /// lock, so a delivery finds its request in one or the other.
    decided: Mutex<VecDeque<(String, Arc<Job>)>>,
    /// Permission requests whose notification waits for their reviewers (the request's
    /// `reviewers`), by request id: sent with the reviewers' reasons once each has answered (a
    /// failing reviewer answers too, by its deadline), dropped when the request is decided first
    /// (a request a trusted reviewer decides bothers nobody). Bounded as `open` is.
    held: Mutex<HashMap<String, Held>>,
    /// `--public-url`, or the listening URL once bound.
    base: OnceLock<String>,
    /// The TLS client's settings, when a target is `https://` (the roots are read once, at boot).
    tls: Option<Arc<rustls::ClientConfig>>,
    counters: Counters,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
}

/// A request's notification waiting for its reviewers.
#[derive(Debug)]
struct Held {
    job: Job,
    /// The reviewers yet to answer, by name.
    waiting: Vec<String>,
}

/// The daemon's notifications. Without targets it does nothing (and spawns nothing).
#[derive(Debug)]
pub struct Notifier {
    shared: Arc<Outbox>,
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

/// Where an event comes from.
#[derive(Debug, Clone, Copy)]
pub struct EventOrigin<'a> {
    pub session_id: &'a str,
    pub workspace: &'a Path,
}

impl Notifier {
    /// The notifier for `targets`; starts one worker per target (inside a tokio runtime).
    /// `public_url` is `--public-url`.
    pub fn new(targets: Vec<NotifyTarget>, public_url: Option<String>, metrics: Arc<Metrics>) -> Notifier {
        let targets: Vec<Target> = targets
            .into_iter()
            .enumerate()
            .map(|(index, config)| Target {
                index,
                config,
                jobs: Mutex::new(VecDeque::new()),
                wake: Notify::new(),
                log: TargetLog::default(),
            })
            .collect();
        let tls = targets
            .iter()
            .any(|t| t.config.url.tls)
            .then(|| crate::outgoing::client_tls("notification"))
            .flatten();
        let shared = Arc::new(Outbox {
            targets,
            links: Links::default(),
            open: Mutex::new(HashSet::new()),
            posted: Mutex::new(HashMap::new()),
            decided: Mutex::new(VecDeque::new()),
            held: Mutex::new(HashMap::new()),
            base: OnceLock::new(),
            tls,
            counters: Counters::default(),
            metrics,
            stop: CancellationToken::new(),
        });
        if let Some(base) = public_url {
            let _ = shared.base.set(base);
        }
        if !shared.targets.is_empty() {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    for index in 0..shared.targets.len() {
                        rt.spawn(run_target(shared.clone(), index));
                    }
                }
                Err(_) => {
                    tracing::error!("notification targets configured outside a runtime; none will be sent")
                }
            }
        }
        Notifier { shared }
    }

    /// The listening URL, the base of action links unless `--public-url` set one.
    pub fn set_listening_url(&self, url: &str) {
        let _ = self.shared.base.set(url.trim_end_matches('/').to_owned());
    }

    pub fn links(&self) -> &Links {
        &self.shared.links
    }

    pub fn counts(&self) -> NotifyCounts {
        let s = &self.shared;
        NotifyCounts {
            targets: s.targets.len(),
            queued: s.targets.iter().map(|t| lock(&t.jobs).len()).sum(),
            sent: s.counters.sent.load(Ordering::Relaxed),
            failed: s.counters.failed.load(Ordering::Relaxed),
            dropped: s.counters.dropped.load(Ordering::Relaxed),
            links: s.links.len(),
        }
    }

    /// An event a session published. Never waits: at worst it takes three short locks.
    pub fn offer(&self, source: EventOrigin<'_>, kind: EventKind, data: &Value) {
        let s = &self.shared;
        if s.targets.is_empty() {
            return;
        }
        let request_id = || data.get("requestId").and_then(Value::as_str);
        match kind {
            EventKind::PermissionReviewed => {
                if let Some(id) = request_id() {
                    self.reviewed(id, data.get("review").unwrap_or(&Value::Null));
                }
                return;
            }
            EventKind::PermissionResolved => {
                if let Some(id) = request_id() {
                    // Decided before its reviewers all answered: nobody is asked.
                    lock(&s.held).remove(id);
                    let decision = Arc::new(Job::of(kind, source, data));
                    {
                        let mut open = lock(&s.open);
                        if open.remove(id) {
                            let mut decided = lock(&s.decided);
                            if decided.len() >= MAX_RECENTLY_DECIDED {
                                decided.pop_front();
                            }
                            decided.push_back((id.to_owned(), decision));
                        }
                    }
                    s.links.expire_request(id);
                    // The messages that asked now say what was decided, where the service can edit.
                    let posted = lock(&s.posted).remove(id).unwrap_or_default();
                    for (index, message, request) in posted {
                        let job =
                            Arc::new(Job { update: Some((message, request)), ..Job::of(kind, source, data) });
                        s.push(&s.targets[index], job);
                    }
                }
                return;
            }
            EventKind::PermissionRequest
            | EventKind::TurnComplete
            | EventKind::TurnError
            | EventKind::SessionDied
            | EventKind::UnapprovedChange
            | EventKind::AgentRefusedAsClient
            | EventKind::ReviewBreaker => {}
            _ => return,
        }
        if !s.targets.iter().any(|t| t.wants(kind)) {
            return;
        }
        let job = Job::of(kind, source, data);
        let reviewers: Vec<String> = match (kind, request_id()) {
            (EventKind::PermissionRequest, Some(_)) => {
                let names = data.get("reviewers").and_then(Value::as_array).into_iter().flatten();
                names.filter_map(Value::as_str).map(str::to_owned).collect()
            }
            _ => Vec::new(),
        };
        if let (false, Some(id)) = (reviewers.is_empty(), request_id()) {
            let mut held = lock(&s.held);
            if held.len() < MAX_OPEN_REQUESTS {
                held.insert(id.to_owned(), Held { job, waiting: reviewers });
                return;
            }
            // Too many waiting: this one goes now, without its reviewers' words.
        }
        self.send(job);
    }

    /// A reviewer's verdict that decided nothing: added to its request's held notification, which
    /// goes once every reviewer has answered.
    fn reviewed(&self, request_id: &str, review: &Value) {
        let s = &self.shared;
        let ready = {
            let mut held = lock(&s.held);
            let Some(h) = held.get_mut(request_id) else { return };
            let name = review.get("reviewer").and_then(Value::as_str).unwrap_or("");
            h.waiting.retain(|w| w != name);
            match h.job.data.get_mut("reviews").and_then(Value::as_array_mut) {
                Some(reviews) => reviews.push(review.clone()),
                None => h.job.data["reviews"] = Value::Array(vec![review.clone()]),
            }
            if !h.waiting.is_empty() {
                return;
            }
            held.remove(request_id)
        };
        if let Some(Held { mut job, .. }) = ready {
            // Its latency counts from here: the wait for the reviewers is the point.
            job.at = Instant::now();
            self.send(job);
        }
    }

    /// Queues `job` for the targets that want its kind; a permission request is tracked (its
    /// decision updates what was posted, reminders follow it).
    fn send(&self, mut job: Job) {
        let s = &self.shared;
        if job.kind == EventKind::PermissionRequest
            && let Some(id) = job.data.get("requestId").and_then(Value::as_str)
        {
            let mut open = lock(&s.open);
            if open.len() < MAX_OPEN_REQUESTS {
                job.tracked = open.insert(id.to_owned());
            }
        }
        let job = Arc::new(job);
        for target in s.targets.iter().filter(|t| t.wants(job.kind)) {
            s.push(target, job.clone());
        }
    }
}

impl Outbox {
    fn push(&self, target: &Target, job: Arc<Job>) {
        let dropped = {
            let mut jobs = lock(&target.jobs);
            let dropped = if jobs.len() >= QUEUE_PER_TARGET { jobs.pop_front() } else { None };
            jobs.push_back(job);
            dropped
        };
        if let Some(old) = dropped {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            self.metrics.notification_dropped();
            if log_admits(target, Line::Dropped) {
                tracing::warn!(
                    target = target.index, host = %target.config.url.authority, event = %old.kind,
                    session_id = %old.session_id, "notification queue full; dropped the oldest"
                );
            }
        }
        target.wake.notify_one();
    }

    fn is_open(&self, request_id: &str) -> bool {
        lock(&self.open).contains(request_id)
    }
}

/// Whether a `line` about `target` is logged in full now; the rest of its second is counted and
/// summed up in one line when the second is over ([`SharedLogThrottle`]).
fn log_admits(target: &Target, line: Line) -> bool {
    let (index, host) = (target.index, target.config.url.authority.clone());
    target.log.throttle(line).admit(move |n| log_held_back(index, &host, line, n))
}

/// The summary of the `line`s about target `index` a second held back.
fn log_held_back(index: usize, host: &str, line: Line, n: u64) {
    match line {
        Line::Dropped => tracing::warn!(
            target = index, %host, count = n,
            "{n} more notifications dropped in the last second (queue full; not logged one by one)"
        ),
        Line::Delivered => tracing::info!(
            target = index, %host, count = n,
            "{n} more deliveries ended in the last second (not logged one by one; see the notification metrics)"
        ),
        Line::Untrusted => tracing::warn!(
            target = index, %host, count = n,
            "{n} more notifications not sent in the last second: the target's certificate is not trusted"
        ),
    }
}

/// One target's worker: its deliveries one at a time, in order.
async fn run_target(shared: Arc<Outbox>, index: usize) {
    let target = &shared.targets[index];
    loop {
        let next = lock(&target.jobs).pop_front();
        let Some(job) = next else {
            tokio::select! {
                () = target.wake.notified() => continue,
                () = shared.stop.cancelled() => return,
            }
        };
        deliver_job(&shared, target, &job).await;
    }
}

/// The request a job sends: the method, the path on the target's server and the body.
fn request_for(target: &Target, job: &Job, notice: &Notice<'_>) -> Option<(Verb, String, String)> {
    let (format, url) = (target.config.format, &target.config.url);
    if let Some((posted, request)) = &job.update {
        let message = format::decided(&job.data, &request.data, &job.workspace);
        let (verb, path, body) = services::update(url, posted, &message)?;
        return Some((verb, path, body.to_string()));
    }
    let body = services::body(format, url, notice).to_string();
    Some((Verb::Post, services::path(format, url, job.kind == EventKind::PermissionRequest), body))
}

/// Remembers the message a service posted for a pending request, to update it once decided.
fn remember(shared: &Outbox, target: &Target, job: &Arc<Job>, request_id: &str, answer: &[u8]) {
    let Some(posted) = services::posted(target.config.format, request_id, answer) else { return };
    // Under `open`'s lock: a decision that removed the request has taken its entries already (and
    // is in `decided`: the message is edited now), and one coming after finds this one.
    let open = lock(&shared.open);
    if !open.contains(request_id) {
        let decision =
            lock(&shared.decided).iter().rev().find(|(id, _)| id == request_id).map(|(_, d)| d.clone());
        drop(open);
        if let Some(decision) = decision {
            let edit = Arc::new(Job { update: Some((posted, job.clone())), ..decision.again() });
            shared.push(target, edit);
        }
        return;
    }
    let mut all = lock(&shared.posted);
    let entries = all.entry(request_id.to_owned()).or_default();
    if entries.len() < MAX_POSTED_PER_REQUEST {
        entries.push((target.index, posted, job.clone()));
    }
}

async fn deliver_job(shared: &Arc<Outbox>, target: &Target, job: &Arc<Job>) {
    let request_id = job.data.get("requestId").and_then(Value::as_str).unwrap_or_default().to_owned();
    let is_request = job.kind == EventKind::PermissionRequest;
    if is_request && job.tracked && !shared.is_open(&request_id) {
        // Decided (by a vote, a rule, the timeout) while this waited: nothing left to ask.
        return;
    }
    let actions = if is_request { mint_actions(shared, target, job) } else { Vec::new() };
    let delivery_id = uuid::Uuid::new_v4().to_string();
    let session_url =
        shared.base.get().map(|base| format!("{base}/#/s/{}", crate::text::url_segment(&job.session_id)));
    let notice = Notice {
        kind: job.kind,
        session_id: &job.session_id,
        workspace: &job.workspace,
        data: &job.data,
        delivery_id: &delivery_id,
        sent_at: crate::clock::now_ms(),
        reminder: job.reminder,
        actions: &actions,
        client_id: target.config.client_id.as_deref(),
        session_url: session_url.as_deref(),
    };
    let Some((verb, path, body)) = request_for(target, job, &notice) else { return };
    let outcome = deliver::deliver(
        shared.tls.as_ref(),
        &target.config,
        verb,
        &path,
        job.kind.as_str(),
        &delivery_id,
        body,
    )
    .await;
    let took = job.at.elapsed();
    let (host, event) = (&target.config.url.authority, job.kind);
    let line = if matches!(outcome, Outcome::Untrusted { .. }) { Line::Untrusted } else { Line::Delivered };
    let log = log_admits(target, line);
    if is_request
        && job.tracked
        && let Outcome::Sent { answer, .. } = &outcome
    {
        remember(shared, target, job, &request_id, answer);
    }
    let (counter, label) = match outcome {
        Outcome::Sent { .. } => (&shared.counters.sent, "sent"),
        Outcome::Refused { .. } | Outcome::Failed { .. } => (&shared.counters.failed, "failed"),
        Outcome::Untrusted { .. } => (&shared.counters.failed, "untrusted"),
    };
    counter.fetch_add(1, Ordering::Relaxed);
    shared.metrics.notification(label, took);
    if log {
        match outcome {
            Outcome::Sent { status, attempts, .. } => {
                tracing::info!(target = target.index, %host, %event, delivery_id, status, attempts, "notification sent");
            }
            Outcome::Refused { status } => {
                tracing::warn!(target = target.index, %host, %event, delivery_id, status, "notification refused by its target; not retried");
            }
            Outcome::Failed { reason, attempts } => {
                tracing::warn!(target = target.index, %host, %event, delivery_id, attempts, reason, "notification failed");
            }
            Outcome::Untrusted { reason } => {
                tracing::warn!(target = target.index, %host, %event, delivery_id, "notification not sent: {reason}");
            }
        }
    }
    if is_request
        && job.tracked
        && job.reminder < MAX_REMINDERS
        && let Some(after) = target.config.remind_after
    {
        tokio::spawn(remind(shared.clone(), target.index, job.clone(), request_id.clone(), after));
    }
    if is_request
        && job.tracked
        && job.reminder == 0
        && !job.escalated
        && let Some(escalation) = target.config.escalate
    {
        tokio::spawn(escalate(shared.clone(), escalation, job.clone(), request_id));
    }
}

/// After `escalation.after`, hands the request to the escalation's target if it is still pending:
/// there it is a first notification, with its own links and reminders.
async fn escalate(shared: Arc<Outbox>, escalation: Escalation, job: Arc<Job>, request_id: String) {
    tokio::select! {
        () = tokio::time::sleep(escalation.after) => {}
        () = shared.stop.cancelled() => return,
    }
    let Some(to) = shared.targets.get(escalation.to) else { return };
    if !shared.is_open(&request_id) {
        return;
    }
    let handed = Arc::new(Job { tracked: true, escalated: true, ..job.again() });
    shared.push(to, handed);
}

/// After `after`, queues the request again for the same target if it is still pending.
async fn remind(shared: Arc<Outbox>, index: usize, job: Arc<Job>, request_id: String, after: Duration) {
    tokio::select! {
        () = tokio::time::sleep(after) => {}
        () = shared.stop.cancelled() => return,
    }
    if !shared.is_open(&request_id) {
        return;
    }
    let again =
        Arc::new(Job { reminder: job.reminder + 1, tracked: true, escalated: job.escalated, ..job.again() });
    shared.push(&shared.targets[index], again);
}

/// One link per offered option (at most [`MAX_OPTIONS_LINKED`]), voting as the target's
/// `clientId`. An approving option of a request its notification cannot show whole gets a link
/// that decides only from its page ([`Link::needs_review`]).
fn mint_actions(shared: &Outbox, target: &Target, job: &Job) -> Vec<Action> {
    let base = shared.base.get().map_or("", String::as_str);
    let whole = format::summary(job.data.get("toolCall").unwrap_or(&Value::Null)).whole;
    let request_id = job.data.get("requestId").and_then(Value::as_str).unwrap_or_default();
    let options = job.data.get("options").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    options
        .iter()
        .take(MAX_OPTIONS_LINKED)
        .filter_map(|o| {
            let option_id = o.get("optionId").and_then(Value::as_str)?.to_owned();
            let name = format::option_name(o.get("name").and_then(Value::as_str).unwrap_or(&option_id));
            let kind = o.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
            let needs_review = !whole && approves(&kind);
            let url = shared
                .links
                .mint(Link {
                    session_id: job.session_id.clone(),
                    request_id: request_id.to_owned(),
                    option_id: option_id.clone(),
                    option_name: name.clone(),
                    client_id: target.config.client_id.clone(),
                    needs_review,
                })
                .map(|token| format!("{base}/act/{token}"));
            Some(Action { option_id, name, kind, url, needs_review })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::NotifyFormat;

    fn target(events: Vec<EventKind>) -> NotifyTarget {
        crate::config::NotifyTarget {
            url: crate::config::parse_target_url("http://127.0.0.1:9/").expect("url"),
            events,
            format: NotifyFormat::Json,
            secret: None,
            client_id: None,
            headers: Vec::new(),
            remind_after: None,
            escalate: None,
        }
    }

    #[test]
    fn a_full_queue_drops_its_oldest_and_says_so() {
        // Outside a runtime no worker starts, so the queue only fills.
        let metrics = Arc::new(Metrics::default());
        let n = Notifier::new(vec![target(vec![EventKind::TurnComplete])], None, metrics.clone());
        let source = EventOrigin { session_id: "s", workspace: Path::new("/w") };
        for i in 0..=QUEUE_PER_TARGET {
            n.offer(source, EventKind::TurnComplete, &json!({"promptId": i}));
        }
        let counts = n.counts();
        assert_eq!((counts.queued, counts.dropped), (QUEUE_PER_TARGET, 1));
        let oldest = lock(&n.shared.targets[0].jobs).front().map(|j| j.data["promptId"].clone());
        assert_eq!(oldest, Some(json!(1)), "the oldest went, the newest stayed");
        let text = metrics.render(&crate::metrics::Snapshot::default());
        assert!(text.contains("mediatord_notifications_dropped_total 1"), "{text}");
    }

    fn job(tool_call: Value, options: usize) -> Job {
        let kinds = ["allow_once", "reject_once", "allow_always", "reject_always"];
        let options: Vec<Value> = (0..options)
            .map(|i| json!({"optionId": format!("o{i}"), "name": format!("Option\u{202e}{i}"), "kind": kinds[i % 4]}))
            .collect();
        Job {
            kind: EventKind::PermissionRequest,
            session_id: "s".into(),
            workspace: "/w".into(),
            data: json!({"requestId": "r1", "toolCall": tool_call, "options": options}),
            at: Instant::now(),
            reminder: 0,
            tracked: true,
            update: None,
            escalated: false,
        }
    }

    /// Issue #27, findings 4 and 9: a request shown whole gets one-tap links; one whose summary
    /// was cut gets approving links that need their page; at most 16 options are linked; option
    /// names are revealed.
    #[test]
    fn links_are_minted_per_option_and_need_review_when_the_request_was_cut() {
        let n = Notifier::new(
            vec![target(vec![EventKind::PermissionRequest])],
            Some("http://d".into()),
            Arc::default(),
        );
        let (shared, t) = (&n.shared, &n.shared.targets[0]);
        let short = json!({"kind": "execute", "title": "Run", "rawInput": {"command": "ls"}});
        let actions = mint_actions(shared, t, &job(short, 4));
        assert_eq!(actions.iter().map(|a| a.needs_review).collect::<Vec<_>>(), [false; 4]);
        assert_eq!(actions[1].name, "Option\\u{202e}1");
        assert!(actions.iter().all(|a| a.url.as_deref().is_some_and(|u| u.starts_with("http://d/act/"))));
        let token = actions[0].url.as_deref().and_then(|u| u.rsplit('/').next()).expect("token");
        assert_eq!(n.links().get(token).map(|l| (l.option_id, l.needs_review)), Ok(("o0".into(), false)));

        let long = json!({"kind": "execute", "title": "Run", "rawInput": {"command": "x".repeat(400)}});
        let actions = mint_actions(shared, t, &job(long, 40));
        assert_eq!(actions.len(), MAX_OPTIONS_LINKED);
        let review: Vec<bool> = actions.iter().take(4).map(|a| a.needs_review).collect();
        assert_eq!(review, [true, false, true, false], "approving kinds need review, rejecting ones not");
        let token = actions[0].url.as_deref().and_then(|u| u.rsplit('/').next()).expect("token");
        assert_eq!(n.links().get(token).map(|l| l.needs_review), Ok(true));
        assert_eq!(n.links().len(), 4 + MAX_OPTIONS_LINKED);
    }

    /// Issue #42: files changed that no approved request named are told to whoever is asked for
    /// permissions, and only to them.
    #[test]
    fn an_unapproved_change_goes_to_the_targets_that_want_permission_requests() {
        let n = Notifier::new(
            vec![target(vec![EventKind::TurnComplete]), target(vec![EventKind::PermissionRequest])],
            None,
            Arc::default(),
        );
        let source = EventOrigin { session_id: "s", workspace: Path::new("/w") };
        n.offer(source, EventKind::UnapprovedChange, &json!({"paths": ["a.txt"], "count": 1}));
        let queued = |i: usize| lock(&n.shared.targets[i].jobs).iter().map(|j| j.kind).collect::<Vec<_>>();
        assert_eq!((queued(0), queued(1)), (vec![], vec![EventKind::UnapprovedChange]));
    }

    /// A request its reviewers judge is told once they all answered, with their words; one
    /// decided first (a trusted reviewer's allow, a person) is told to nobody.
    #[test]
    fn a_reviewed_request_waits_for_its_reviewers_and_one_decided_first_is_not_sent() {
        let n = Notifier::new(vec![target(vec![EventKind::PermissionRequest])], None, Arc::default());
        let source = EventOrigin { session_id: "s", workspace: Path::new("/w") };
        let request = |id: &str| json!({"requestId": id, "options": [], "reviewers": ["guard", "model"]});
        let review = |id: &str, name: &str| json!({"requestId": id, "review": {"reviewer": name, "verdict": "escalate", "reason": format!("{name} is unsure")}});
        let queued = || lock(&n.shared.targets[0].jobs).iter().map(|j| j.data.clone()).collect::<Vec<_>>();

        n.offer(source, EventKind::PermissionRequest, &request("r1"));
        n.offer(source, EventKind::PermissionReviewed, &review("r1", "guard"));
        n.offer(source, EventKind::PermissionReviewed, &review("r9", "model"));
        assert_eq!(queued(), Vec::<Value>::new(), "one reviewer still out");
        assert!(!n.shared.is_open("r1"));
        n.offer(source, EventKind::PermissionReviewed, &review("r1", "model"));
        let sent = queued();
        assert_eq!(sent.len(), 1);
        let reasons: Vec<&Value> =
            sent[0]["reviews"].as_array().expect("reviews").iter().map(|r| &r["reason"]).collect();
        assert_eq!(reasons, [&json!("guard is unsure"), &json!("model is unsure")]);
        assert!(n.shared.is_open("r1"), "tracked once sent: its decision updates it");

        // Each reviewer answers for itself: two of three answered is not all.
        let three = json!({"requestId": "r3", "options": [], "reviewers": ["guard", "model", "third"]});
        n.offer(source, EventKind::PermissionRequest, &three);
        n.offer(source, EventKind::PermissionReviewed, &review("r3", "guard"));
        n.offer(source, EventKind::PermissionReviewed, &review("r3", "model"));
        assert_eq!(queued().len(), 1, "one of three reviewers still out");
        n.offer(source, EventKind::PermissionReviewed, &review("r3", "third"));
        assert_eq!(queued().len(), 2);

        n.offer(source, EventKind::PermissionRequest, &request("r2"));
        n.offer(source, EventKind::PermissionReviewed, &review("r2", "guard"));
        n.offer(source, EventKind::PermissionResolved, &json!({"requestId": "r2", "resolvedBy": "vote"}));
        n.offer(source, EventKind::PermissionReviewed, &review("r2", "model"));
        assert_eq!(queued().len(), 2, "decided before its reviewers all answered: nobody is asked");
        assert!(lock(&n.shared.held).is_empty());
    }

    /// The requests held for their reviewers, and those tracked for their decision, are bounded:
    /// past [`MAX_OPEN_REQUESTS`] a request goes at once (without its reviewers' words), untracked.
    #[test]
    fn held_and_tracked_requests_are_bounded() {
        let n = Notifier::new(vec![target(vec![EventKind::PermissionRequest])], None, Arc::default());
        let source = EventOrigin { session_id: "s", workspace: Path::new("/w") };
        for i in 0..MAX_OPEN_REQUESTS {
            n.offer(
                source,
                EventKind::PermissionRequest,
                &json!({"requestId": format!("h{i}"), "reviewers": ["g"]}),
            );
        }
        assert_eq!((lock(&n.shared.held).len(), n.counts().queued), (MAX_OPEN_REQUESTS, 0));
        n.offer(source, EventKind::PermissionRequest, &json!({"requestId": "past", "reviewers": ["g"]}));
        assert_eq!((lock(&n.shared.held).len(), n.counts().queued), (MAX_OPEN_REQUESTS, 1));
        assert!(n.shared.is_open("past"));

        for i in 1..MAX_OPEN_REQUESTS {
            n.offer(source, EventKind::PermissionRequest, &json!({"requestId": format!("o{i}")}));
        }
        assert!(n.shared.is_open(&format!("o{}", MAX_OPEN_REQUESTS - 1)), "the last that fits is tracked");
        n.offer(source, EventKind::PermissionRequest, &json!({"requestId": "untracked"}));
        assert!(!n.shared.is_open("untracked"), "past the bound: sent, not tracked");
    }

    #[test]
    fn only_wanted_events_are_queued_and_a_decision_expires_its_links() {
        let n = Notifier::new(vec![target(vec![EventKind::PermissionRequest])], None, Arc::default());
        let source = EventOrigin { session_id: "s", workspace: Path::new("/w") };
        n.offer(source, EventKind::SessionUpdate, &json!({}));
        n.offer(source, EventKind::TurnComplete, &json!({}));
        assert_eq!(n.counts().queued, 0);
        n.offer(source, EventKind::PermissionRequest, &json!({"requestId": "r1", "options": []}));
        assert_eq!(n.counts().queued, 1);
        assert!(n.shared.is_open("r1"));
        let link = Link {
            session_id: "s".into(),
            request_id: "r1".into(),
            option_id: "o".into(),
            option_name: "O".into(),
            client_id: None,
            needs_review: false,
        };
        let token = n.links().mint(link).expect("token");
        n.offer(source, EventKind::PermissionResolved, &json!({"requestId": "r1"}));
        assert!(!n.shared.is_open("r1"));
        assert_eq!(n.links().get(&token), Err(LinkError::Expired));
    }
}

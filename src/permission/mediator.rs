//! Permission mediation for one session (`docs/protocol.md#7-permission-rules`,
//! `docs/protocol.md#8-permission-mediation`): the pending requests, the resolved record and audit
//! rings, the session's rules, and the vote path in the order the protocol fixes.
//!
//! The decision itself is [`super::policy::decide`]; matching is [`super::rules::find_match`]. This
//! file is the bookkeeping around them. It knows the session it serves only as a [`Host`] (publish,
//! voters, originator, announced tool calls), so it is tested with a fake host and no process.
//!
//! All state sits behind one `std::sync::Mutex` whose critical sections never await; events are
//! published while it is held so that, for each request, `permission_request` always precedes its
//! `permission_resolved` on the stream (lock order: mediator, then the host's locks; the host
//! never calls back).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::guard::{Breaker, Trip, overrules};
use super::policy::{
    CANCEL_OPTION_ID, Cast, Caster, Choice, Decision, ForbidReason, Issued, Required, decide, standing,
};
use super::question::{ACCEPT_OPTION_ID, Answers, Form, Malformed, Question};
use super::review::{Judge, Judges, Review, Verdict};
use super::rules::{self, CompiledRule, Effect, RequestFacts, RuleError};
use super::vote::{Ballot, Pick, Remember, ResolvedBy, Reviewed, Via, Vote, VoteError};
use super::workspace::{Remembered, WorkspaceRules};
use crate::clock::now_ms;
use crate::config::{BreakerSettings, Policy};
use crate::event::EventKind;
use crate::log_throttle::SharedLogThrottle;
use crate::metrics::Metrics;
use crate::store::{AuditOutcome, AuditRecord, MemoryStore, Store, outcome_of};

/// Pending requests per session; more are answered `cancelled` at once
/// (`docs/protocol.md#8-permission-mediation`).
const MAX_PENDING_PER_SESSION: usize = 64;
/// Options one request may offer; a request with more is answered `cancelled` at once and
/// published nowhere. ACP has four option kinds and agents offer two to four; every option is a
/// button on every client and a link per notification target, so 5000 of them made a 793 KB
/// notification and 5000 links.
const MAX_OPTIONS_PER_REQUEST: usize = 16;
/// Decided requests remembered to answer late votes `permission_already_resolved`.
const RESOLVED_RING: usize = 512;
/// Decisions kept for `GET .../permissions?audit=1`.
const AUDIT_RING: usize = 512;
/// Ballots kept per request in its audit entry.
const MAX_BALLOTS_PER_REQUEST: usize = 64;
/// Voters remembered per request for the refusal events (`permission_already_resolved`,
/// `permission_forbidden`), each published at most once per (request, voter): the same bound as the
/// ballots. Past it, refusals publish nothing, so repeated refused votes cannot flush the replay
/// ring; each still gets its status code.
const MAX_NOTICED_PER_REQUEST: usize = 64;

/// What the mediator needs from the session it serves. Implemented by the daemon's session; the
/// unit tests below use a fake.
pub trait Host: Send + Sync {
    /// The session's id, stamped on every event and audit entry.
    fn session_id(&self) -> &str;
    /// Publishes an event on the session's stream (tagged with the running turn, if any).
    fn publish(&self, kind: EventKind, data: &Value);
    /// The client id of the prompt now running: who decides under `designated`.
    fn originator(&self) -> Option<String>;
    /// The session's registered client ids, sorted: the voters under `consensus`.
    fn voters(&self) -> Vec<String>;
    /// Whether `client_id` is registered on the session.
    fn is_voter(&self, client_id: &str) -> bool;
    /// The request's `toolCall` laid over what the agent announced earlier for the same
    /// `toolCallId`: what rules match on.
    fn announced_tool_call(&self, tool_call: &Value) -> Value;
    /// What a reviewer is told of the session beside the request (`agent`, the running turn's
    /// `promptId`): an object whose members are added to the review request.
    fn review_context(&self) -> Value {
        json!({})
    }
    /// The prompt id of the turn running now, if any: what the reviewers' breaker counts within.
    fn turn(&self) -> Option<String> {
        None
    }
    /// Stops turn `prompt_id` if it is still the one running, as a client's cancel does (the
    /// reviewers' breaker tripped).
    fn stop_turn(&self, prompt_id: String) -> BoxFuture<'_, ()> {
        let _ = prompt_id;
        Box::pin(async {})
    }
}

/// A session's permission settings; each request captures them as it is issued ([`Issued`]).
#[derive(Debug, Clone)]
pub struct MediatorConfig {
    pub policy: Policy,
    pub quorum: Option<usize>,
    pub timeout: Option<Duration>,
    /// In a fleet, this daemon's node URL, which each request's id names (`store::homed_id`).
    pub home: Option<String>,
    /// The reviewers asked about each request (not a question: that is for a person).
    pub reviewers: Judges,
    /// When their denials stop the session's turn.
    pub breaker: BreakerSettings,
}

/// Who has already been the subject of a refusal event for one request: a client id, or `None`
/// for the voters without one (they count as one voter). At most [`MAX_NOTICED_PER_REQUEST`].
#[derive(Default)]
struct Noticed(Vec<Option<String>>);

impl Noticed {
    /// Whether `client` is new here (and room remains); remembers it.
    fn first_time(&mut self, client: Option<&str>) -> bool {
        if self.0.len() >= MAX_NOTICED_PER_REQUEST || self.0.iter().any(|c| c.as_deref() == client) {
            return false;
        }
        self.0.push(client.map(str::to_owned));
        true
    }
}

struct Pending {
    issued: Issued,
    /// The `permission_request` event data, listed by `GET .../permissions`.
    data: Value,
    options: Vec<Value>,
    facts: RequestFacts,
    /// The ballots that count so far: by client id under `consensus`; under a `require` rule, the
    /// approvals by voter ([`Ballot::voter`]).
    votes: BTreeMap<String, Choice>,
    ballots: Vec<Value>,
    /// Voters already told about by a `permission_forbidden`.
    forbidden: Noticed,
    issued_at: u64,
    /// What the agent asks a person, when the request is a question: no rule answers it, no
    /// decision on it is remembered, and the vote that decides it carries its answers.
    question: Option<Question>,
    reply: oneshot::Sender<Decided>,
}

/// How a request was decided, as its raiser is told.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub choice: Choice,
    /// A question's answers, checked and converted to the fields' types (the deciding vote's), when
    /// it was accepted with them.
    pub answers: Option<Answers>,
}

impl Decided {
    fn cancelled() -> Decided {
        Decided { choice: Choice::Cancel, answers: None }
    }
}

struct Resolved {
    outcome: Value,
    option_id: String,
    /// Voters already told about by a `permission_already_resolved`.
    late: Noticed,
    /// A URL elicitation's id as the agent chose it: its `elicitation/complete` after the decision
    /// is still announced.
    elicitation: Option<String>,
}

#[derive(Default)]
struct State {
    pending: HashMap<String, Pending>,
    /// Issue order of pending requests, for listing.
    order: Vec<String>,
    /// Decided requests by id, and their decision order for eviction (oldest first).
    resolved: HashMap<String, Resolved>,
    resolved_order: VecDeque<String>,
    audit: VecDeque<Value>,
    rules: Vec<CompiledRule>,
    /// The reviewers' denials in the turn running now.
    breaker: Breaker,
    /// Set once the session has ended (close, agent death, shutdown): a request the agent sends
    /// after that is answered `cancelled` at once, since nobody is left to vote on it and nothing
    /// would ever cancel it again.
    closed: bool,
}

/// One session's permission bookkeeping. Its methods live on [`BoundMediator`], the mediator bound
/// to the host it serves ([`Mediator::serve`]).
pub struct Mediator {
    cfg: MediatorConfig,
    workspace: PathBuf,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
    /// Where every request and its outcome is recorded (the audit trail).
    store: Arc<dyn Store>,
    /// The workspace's rules, matched after the session's own.
    workspace_rules: Arc<WorkspaceRules>,
    /// Warnings about requests answered `cancelled` at once (the reserved option id, too many
    /// options, too many pending): an agent raising them in a loop costs a line a second.
    refused_log: SharedLogThrottle,
}

impl std::fmt::Debug for Mediator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mediator").field("cfg", &self.cfg).field("workspace", &self.workspace).finish()
    }
}

/// The ACP answer for a choice.
fn outcome_json(choice: &Choice) -> Value {
    match choice {
        Choice::Option(id) => json!({"outcome": "selected", "optionId": id}),
        Choice::Cancel => json!({"outcome": "cancelled"}),
    }
}

impl Mediator {
    /// A mediator with no store behind it (an in-memory audit) and no workspace rules.
    pub fn new(cfg: MediatorConfig, workspace: PathBuf, metrics: Arc<Metrics>) -> Mediator {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let rules = WorkspaceRules::new(workspace.clone(), &[], store.clone(), Box::new(|_, _| {}));
        Mediator::with_store(cfg, workspace, metrics, store, Arc::new(rules))
    }

    /// A mediator recording its audit in `store` and matching `workspace_rules` after the
    /// session's own.
    pub fn with_store(
        cfg: MediatorConfig,
        workspace: PathBuf,
        metrics: Arc<Metrics>,
        store: Arc<dyn Store>,
        workspace_rules: Arc<WorkspaceRules>,
    ) -> Mediator {
        Mediator {
            cfg,
            workspace,
            metrics,
            state: Mutex::new(State::default()),
            store,
            workspace_rules,
            refused_log: SharedLogThrottle::default(),
        }
    }

    /// The mediator at work for `host`, the session it belongs to.
    pub fn serve<'a>(&'a self, host: &'a dyn Host) -> BoundMediator<'a> {
        BoundMediator { mediator: self, host }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }
}

/// A [`Mediator`] bound to its [`Host`]: every operation on a session's permissions.
#[derive(Clone, Copy)]
pub struct BoundMediator<'a> {
    mediator: &'a Mediator,
    host: &'a dyn Host,
}

impl std::fmt::Debug for BoundMediator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundMediator").field("session_id", &self.host.session_id()).finish()
    }
}

impl<'a> BoundMediator<'a> {
    /// Serves the agent's `session/request_permission`; returns its `result` (`{outcome}`, and
    /// for Qwen Code's `ask_user_question` the person's `answers` when they submitted them).
    pub async fn request(self, params: Value) -> Value {
        let options: Vec<Value> =
            params.get("options").and_then(Value::as_array).cloned().unwrap_or_default();
        let tool_call = params.get("toolCall").cloned().unwrap_or_else(|| json!({}));
        let question = match Question::from_qwen(&tool_call) {
            None => None,
            Some(Ok(q)) => Some(q),
            Some(Err(why)) => {
                self.log_refused(&format!("the agent's question is malformed ({why})"));
                return json!({"outcome": outcome_json(&Choice::Cancel)});
            }
        };
        let decided = self.raise(tool_call, options, question.clone()).await;
        let mut result = json!({"outcome": outcome_json(&decided.choice)});
        if let (Some(q), Some(answers)) = (&question, &decided.answers) {
            result["answers"] = q.for_agent(answers);
        }
        result
    }

    /// Serves the agent's `elicitation/create` (`docs/protocol.md#19-questions`): a pending request
    /// like a permission's, decided by the same votes, answered `{action: accept, content}`,
    /// `{action: decline}` or `{action: cancel}` (a timeout, the turn cancelled, the session's
    /// end). A question it cannot ask (a schema of objects, 10 000 fields, a `javascript:` URL)
    /// is refused, and pending nowhere.
    pub async fn elicit(self, params: Value) -> Result<Value, Malformed> {
        let question = Question::from_elicitation(&params).inspect_err(|why| {
            self.log_refusal(&format!("the agent's elicitation is refused ({why}); answering an error"))
        })?;
        let tool_call = question.tool_call(params.get("toolCallId").and_then(Value::as_str));
        let options = question.elicitation_options();
        let decided = self.raise(tool_call, options, Some(question.clone())).await;
        Ok(match decided.choice {
            Choice::Option(id) if id == ACCEPT_OPTION_ID => match (question.form, decided.answers) {
                (Form::Url, _) => json!({"action": "accept"}),
                (_, answers) => {
                    json!({"action": "accept", "content": answers.map(Value::Object).unwrap_or_else(|| json!({}))})
                }
            },
            Choice::Option(_) => json!({"action": "decline"}),
            Choice::Cancel => json!({"action": "cancel"}),
        })
    }

    /// Raises a request (a permission, or a question) and waits for its decision. A request that
    /// cannot be raised (the reserved option id, too many options, too many pending, the session
    /// over) is cancelled at once.
    async fn raise(self, tool_call: Value, options: Vec<Value>, question: Option<Question>) -> Decided {
        let (m, host) = (self.mediator, self.host);
        if options.iter().any(|o| o.get("optionId").and_then(Value::as_str) == Some(CANCEL_OPTION_ID)) {
            self.log_refused("the agent offered the reserved option id __cancelled__");
            return Decided::cancelled();
        }
        if options.len() > MAX_OPTIONS_PER_REQUEST {
            self.log_refused(&format!(
                "the agent offered {} options, more than {MAX_OPTIONS_PER_REQUEST}",
                options.len()
            ));
            return Decided::cancelled();
        }
        // The deadline is fixed before the record exists, so nothing can see an unarmed request.
        let deadline = m.cfg.timeout.map(|t| tokio::time::Instant::now() + t);
        let issued_at = now_ms();
        let expires_at = m.cfg.timeout.map(|t| issued_at + t.as_millis() as u64);
        let mut issued = Issued {
            policy: m.cfg.policy,
            originator: host.originator(),
            voters_at_issue: if m.cfg.policy == Policy::Consensus { host.voters() } else { Vec::new() },
            quorum: m.cfg.quorum,
            question: question.is_some(),
            required: None,
        };
        let request_id = crate::store::homed_id(m.cfg.home.as_deref());
        let announced = host.announced_tool_call(&tool_call);
        let facts = RequestFacts::from_tool_call(&announced);
        let kind = facts.kind.clone();
        let outside = rules::outside_workspace(&facts, &m.workspace);
        let mut data = json!({
            "requestId": request_id,
            "sessionId": host.session_id(),
            "toolCall": tool_call,
            "options": options,
            "policy": m.cfg.policy.as_str(),
        });
        if let Some(at) = expires_at {
            data["expiresAt"] = json!(at);
        }
        if !outside.is_empty() {
            data["outsideWorkspace"] = json!(outside);
        }
        if let Some(q) = &question {
            data["question"] = q.wire();
        }
        let is_question = question.is_some();
        // Who will judge it beside the people: a client may say so, and a notification waits for
        // their verdicts (a request a trusted reviewer decides bothers nobody).
        if !is_question && !m.cfg.reviewers.is_empty() {
            data["reviewers"] = m.cfg.reviewers.iter().map(|r| json!(r.name())).collect();
        }
        let (reply, mut rx) = oneshot::channel();
        {
            let mut st = m.lock();
            if st.closed {
                drop(st);
                tracing::debug!(session_id = %host.session_id(), "permission request after the session ended; answering cancelled");
                return Decided::cancelled();
            }
            if st.pending.len() >= MAX_PENDING_PER_SESSION {
                drop(st);
                self.log_refused("too many pending permission requests");
                return Decided::cancelled();
            }
            // The rules answer before anyone sees the request; one that asks for people says so
            // on the request itself.
            let workspace_rules = m.workspace_rules.snapshot();
            let answer =
                rule_answer(&st.rules, &workspace_rules, is_question, &facts, &options, &m.workspace);
            if let Some(RuleAnswer::Required(required)) = &answer {
                data["required"] =
                    json!({"ruleId": required.rule_id, "quorum": required.quorum, "approvals": 0});
                if let Some(group) = &required.group {
                    data["required"]["group"] = json!(group);
                }
                issued.required = Some(required.clone());
            }
            host.publish(EventKind::PermissionRequest, &data);
            let pending = Pending {
                issued,
                data,
                options,
                facts,
                votes: BTreeMap::new(),
                ballots: Vec::new(),
                forbidden: Noticed::default(),
                issued_at,
                question,
                reply,
            };
            if let Some(RuleAnswer::Decided(choice, resolution)) = answer {
                self.finish(&mut st, &request_id, pending, &choice, resolution);
                return Decided { choice, answers: None };
            }
            m.store.audit(self.audit_record(&request_id, &pending, None));
            st.order.push(request_id.clone());
            st.pending.insert(request_id.clone(), pending);
        }
        let decided = async {
            match deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, &mut rx).await {
                    Ok(answer) => answer.unwrap_or_else(|_| Decided::cancelled()),
                    Err(_) => {
                        self.resolve(&request_id, Choice::Cancel, ResolvedBy::Timeout);
                        (&mut rx).await.unwrap_or_else(|_| Decided::cancelled())
                    }
                },
                None => (&mut rx).await.unwrap_or_else(|_| Decided::cancelled()),
            }
        };
        // The reviewers judge beside the people, within this future: each review is cast as it
        // comes, and those still out when the request is decided are dropped with it (a late
        // verdict has nothing left to change). A question is for a person alone.
        let reviewers = &m.cfg.reviewers;
        if is_question || reviewers.is_empty() {
            return decided.await;
        }
        let asked = self.review_request(&request_id, &announced, kind.as_deref());
        let mut reviews: futures_util::stream::FuturesUnordered<_> = reviewers
            .iter()
            .map(|judge| {
                let review = judge.judge(asked.clone());
                async move { (judge, review.await) }
            })
            .collect();
        tokio::pin!(decided);
        loop {
            tokio::select! {
                biased;
                answer = &mut decided => return answer,
                Some((judge, review)) = futures_util::StreamExt::next(&mut reviews), if !reviews.is_empty() => {
                    if let Some(turn) = self.cast_review(&request_id, kind.as_deref(), judge.as_ref(), &review) {
                        host.stop_turn(turn).await;
                    }
                }
            }
        }
    }

    /// What a reviewer is sent about a pending request (`docs/operations.md#reviewers`).
    fn review_request(self, request_id: &str, tool_call: &Value, kind: Option<&str>) -> Value {
        let (m, host) = (self.mediator, self.host);
        let options = m.lock().pending.get(request_id).map(|p| p.options.clone()).unwrap_or_default();
        let mut asked = json!({
            "id": request_id,
            "sessionId": host.session_id(),
            "workspace": m.workspace.to_string_lossy(),
            "toolCallId": tool_call.get("toolCallId"),
            "kind": kind,
            "title": tool_call.get("title"),
            "rawInput": tool_call.get("rawInput"),
            "locations": tool_call.get("locations"),
            "options": options,
        });
        if let (Value::Object(asked), Value::Object(context)) = (&mut asked, host.review_context()) {
            asked.extend(context);
        }
        asked
    }

    /// Casts a reviewer's review as its ballot, on the one vote path. A verdict on a request
    /// decided meanwhile changes nothing; one picking what the request does not offer is shown as
    /// the failure it is, never counted. Returns the turn to stop when a deny tripped the
    /// session's breaker.
    fn cast_review(
        self,
        request_id: &str,
        kind: Option<&str>,
        judge: &dyn Judge,
        review: &Review,
    ) -> Option<String> {
        let client = format!("reviewer:{}", judge.name());
        let pick = |review: &Review| match (&review.option_id, review.verdict) {
            // An escalate picks nothing: it is cast as the cancel escape, which the policy never
            // lets a reviewer take (`policy::decide`), so it only informs.
            (_, Verdict::Escalate) => Pick::Outcome { choice: Choice::Cancel, remember: Remember::No },
            (Some(id), _) => Pick::Outcome { choice: Choice::Option(id.clone()), remember: Remember::No },
            (None, Verdict::Allow) => Pick::Decision { effect: Effect::Allow, remember: Remember::No },
            (None, Verdict::Deny) => Pick::Decision { effect: Effect::Deny, remember: Remember::No },
        };
        let cast = |review: &Review| {
            let vote = Vote::from(pick(review));
            let reviewed = Reviewed { name: judge.name(), review, trust: judge.trust() };
            self.vote(&Ballot {
                request_id,
                client: Some(&client),
                voter: &client,
                groups: &[],
                device_name: None,
                observer: false,
                local: false,
                via: Via::Reviewer,
                vote: &vote,
                review: Some(reviewed),
            })
        };
        match cast(review) {
            Ok(_) if review.verdict == Verdict::Deny => {
                self.deny_counted(request_id, kind, judge.name(), review)
            }
            Err(VoteError::InvalidOption { option_id, .. }) => {
                let failed =
                    Review::failed("garbage", format!("picked option {option_id:?}, which is not offered"));
                let _ = cast(&failed);
                None
            }
            _ => None,
        }
    }

    /// A reviewer's deny counted by the session's breaker ([`Breaker::denied`]); when it trips,
    /// `review_breaker` tells every client (and, through the session, the notification targets and
    /// the history), and the turn to stop is returned.
    fn deny_counted(
        self,
        request_id: &str,
        kind: Option<&str>,
        reviewer: &str,
        review: &Review,
    ) -> Option<String> {
        let (m, host) = (self.mediator, self.host);
        let turn = host.turn()?;
        let mut st = m.lock();
        let trip = st.breaker.denied(&m.cfg.breaker, &turn, request_id, kind)?;
        let count = match &trip {
            Trip::Denials(n) => *n,
            Trip::Critical(_) => 1,
        };
        tracing::warn!(session_id = %host.session_id(), reviewer, reason = trip.reason(), count, "the reviewers' breaker tripped; the turn is stopped");
        host.publish(
            EventKind::ReviewBreaker,
            &json!({
                "sessionId": host.session_id(), "promptId": turn, "requestId": request_id,
                "reviewer": reviewer, "reason": trip.reason(), "count": count, "kind": kind,
                "review": review.reason,
            }),
        );
        Some(turn)
    }

    /// The agent's `elicitation/complete`: the URL elicitation `elicitation_id` names is done.
    /// Still pending, it is decided (accepted: what it asked for happened, `resolvedBy:
    /// completed`); pending or recently decided, `elicitation_complete` tells every client, by
    /// its request id. Returns whether this session knows the elicitation.
    pub fn elicitation_complete(self, elicitation_id: &str) -> bool {
        let host = self.host;
        let mut st = self.mediator.lock();
        let is_it = |q: &Option<Question>| {
            q.as_ref()
                .is_some_and(|q| q.form == Form::Url && q.elicitation_id.as_deref() == Some(elicitation_id))
        };
        let pending =
            st.order.iter().find(|id| st.pending.get(*id).is_some_and(|p| is_it(&p.question))).cloned();
        let request_id = match pending {
            Some(id) => {
                if let Some(p) = take_pending(&mut st, &id) {
                    let choice = Choice::Option(ACCEPT_OPTION_ID.to_owned());
                    self.finish(&mut st, &id, p, &choice, Resolution::without_vote(ResolvedBy::Completed));
                }
                id
            }
            None => {
                let decided = st.resolved_order.iter().rev().find(|id| {
                    st.resolved.get(*id).is_some_and(|r| r.elicitation.as_deref() == Some(elicitation_id))
                });
                match decided {
                    Some(id) => id.clone(),
                    None => return false,
                }
            }
        };
        host.publish(
            EventKind::ElicitationComplete,
            &json!({"requestId": request_id, "sessionId": host.session_id()}),
        );
        true
    }

    /// Logs why a request is answered `cancelled` at once: the first in each second, then a count.
    fn log_refused(self, why: &str) {
        self.log_refusal(&format!("{why}; answering cancelled"));
    }

    /// Logs why the agent's request is refused at once: the first in each second, then a count
    /// (an agent raising them in a loop costs a line a second).
    fn log_refusal(self, line: &str) {
        let session_id = self.host.session_id().to_owned();
        let report = move |n: u64| {
            tracing::warn!(session_id = %session_id, count = n, "{n} more requests of the agent refused at once in the last second");
        };
        if self.mediator.refused_log.admit(report) {
            tracing::warn!(session_id = %self.host.session_id(), "{line}");
        }
    }

    /// Resolves one pending request if it still is; returns whether it was.
    fn resolve(self, request_id: &str, choice: Choice, by: ResolvedBy) -> bool {
        let mut st = self.mediator.lock();
        let Some(pending) = take_pending(&mut st, request_id) else { return false };
        let resolution = Resolution::without_vote(by);
        self.finish(&mut st, request_id, pending, &choice, resolution);
        true
    }

    /// Cancels every pending request (session cancel, close, agent death, shutdown).
    /// `SessionClosed` means the session is over: later requests are cancelled on arrival.
    pub fn cancel_all(self, by: ResolvedBy) {
        let mut st = self.mediator.lock();
        st.closed |= by == ResolvedBy::SessionClosed;
        let ids = std::mem::take(&mut st.order);
        for id in ids {
            if let Some(pending) = st.pending.remove(&id) {
                let resolution = Resolution::without_vote(by);
                self.finish(&mut st, &id, pending, &Choice::Cancel, resolution);
            }
        }
    }

    /// Whether this session knows the request (pending or recently resolved).
    pub fn knows(self, request_id: &str) -> bool {
        let st = self.mediator.lock();
        st.pending.contains_key(request_id) || st.resolved.contains_key(request_id)
    }

    pub fn pending_count(self) -> usize {
        self.mediator.lock().pending.len()
    }

    /// The `permission_request` data of each pending request, in issue order.
    pub fn list_pending(self) -> Vec<Value> {
        let st = self.mediator.lock();
        st.order.iter().filter_map(|id| st.pending.get(id)).map(|p| p.data.clone()).collect()
    }

    pub fn audit(self) -> Vec<Value> {
        self.mediator.lock().audit.iter().cloned().collect()
    }

    /// The question a pending request asks, if it is one (the ACP door asks it as
    /// `elicitation/create` of a client that takes that).
    pub fn question(self, request_id: &str) -> Option<Question> {
        self.mediator.lock().pending.get(request_id).and_then(|p| p.question.clone())
    }

    /// Whether `request_id` awaits a decision.
    pub fn is_pending(self, request_id: &str) -> bool {
        self.mediator.lock().pending.contains_key(request_id)
    }

    /// Whether `request_id` awaits a decision that an approval of `client_id` (a person in
    /// `groups`, from a loopback peer or not) would count towards, under the policy or rule it was
    /// issued with (`policy::may_decide`).
    pub fn may_vote(
        self,
        request_id: &str,
        client_id: Option<&str>,
        groups: &[String],
        loopback_peer: bool,
    ) -> bool {
        let st = self.mediator.lock();
        st.pending
            .get(request_id)
            .is_some_and(|p| super::policy::may_decide(&p.issued, client_id, groups, loopback_peer))
    }

    /// The `permission_request` data of a pending request, its `toolCall` laid over what the agent
    /// announced for it ([`Host::announced_tool_call`]): everything a vote on it approves.
    pub fn pending_request(self, request_id: &str) -> Option<Value> {
        let mut data = self.mediator.lock().pending.get(request_id).map(|p| p.data.clone())?;
        let merged = self.host.announced_tool_call(data.get("toolCall").unwrap_or(&Value::Null));
        data["toolCall"] = merged;
        Some(data)
    }

    /// A ballot, checked in `docs/protocol.md#8-permission-mediation`'s order from step 3 on (the
    /// door did steps 1 and 2: the body's shape, then the client id's format). An observer's is
    /// refused whatever it says. When it decided and asked to remember the decision for the
    /// workspace, the rule on its way to the disk is returned: it applies once written, and the
    /// voter's answer waits for it (`docs/operations.md#durability`).
    pub fn vote(self, ballot: &Ballot<'_>) -> Result<Option<Remembered>, VoteError> {
        let &Ballot {
            request_id,
            client: client_id,
            voter,
            groups,
            device_name,
            observer,
            local: loopback_peer,
            via,
            vote,
            review,
        } = ballot;
        let host = self.host;
        let mut st = self.mediator.lock();
        let Some(pending) = st.pending.get_mut(request_id) else {
            return match st.resolved.get_mut(request_id) {
                // A reviewer's verdict after the decision changes nothing, and tells nobody.
                Some(r) if review.is_some() => {
                    Err(VoteError::AlreadyResolved { resolved_option_id: r.option_id.clone() })
                }
                Some(r) => {
                    if r.late.first_time(client_id) {
                        let mut data = json!({"requestId": request_id, "sessionId": host.session_id(), "outcome": r.outcome});
                        if let Some(c) = client_id {
                            data["clientId"] = json!(c);
                        }
                        host.publish(EventKind::PermissionAlreadyResolved, &data);
                    }
                    Err(VoteError::AlreadyResolved { resolved_option_id: r.option_id.clone() })
                }
                None => Err(VoteError::NotFound),
            };
        };
        if observer {
            return Err(VoteError::ReadOnly);
        }
        // A reviewer is no client of the session: it is configured, not registered.
        if review.is_none()
            && let Some(c) = client_id
            && !host.is_voter(c)
        {
            return Err(VoteError::UnknownClient);
        }
        let invalid_option = |option_id: &str| VoteError::InvalidOption {
            request_id: request_id.to_owned(),
            option_id: option_id.to_owned(),
        };
        let (choice, remember) = match &vote.pick {
            Pick::Outcome { choice: Choice::Cancel, .. } => (Choice::Cancel, Remember::No),
            Pick::Outcome { choice: Choice::Option(id), remember } => {
                if id == CANCEL_OPTION_ID || !offered(&pending.options, id) {
                    return Err(invalid_option(id));
                }
                (Choice::Option(id.clone()), *remember)
            }
            Pick::Decision { effect, remember } => match rules::pick_shorthand(&pending.options, *effect) {
                Some(id) => (Choice::Option(id), *remember),
                None => {
                    return Err(invalid_option(if *effect == Effect::Allow {
                        "allow_once"
                    } else {
                        "reject_once"
                    }));
                }
            },
        };
        let caster = match review {
            None => Caster::Person,
            Some(r) => Caster::Reviewer { decides: r.trust.decides(pending.facts.kind.as_deref()) },
        };
        let approves = allows(&pending.options, &choice);
        let ballot = Cast { caster, client_id, voter, groups, approves, loopback_peer, choice: &choice };
        let decision = decide(&pending.issued, &pending.votes, &ballot);
        // A question accepted carries its answers, checked before the ballot counts: refused, the
        // question stays pending as it was. A decline or a cancel carries none.
        let answers = match (&pending.question, &choice, &decision) {
            (_, _, Decision::Forbidden(_)) => None,
            (Some(q), Choice::Option(id), _)
                if Question::accepts(rules::option_kind(&pending.options, id).unwrap_or("")) =>
            {
                Some(q.check(vote.answers.as_ref()).map_err(VoteError::InvalidAnswer)?)
            }
            _ => None,
        };
        let counted = !matches!(decision, Decision::Forbidden(_) | Decision::Informed);
        if pending.ballots.len() < MAX_BALLOTS_PER_REQUEST {
            let mut ballot = json!({
                "clientId": client_id,
                "optionId": choice.option_id(),
                "at": now_ms(),
                "loopback": loopback_peer,
                "counted": counted,
                "via": via.as_str(),
            });
            if let Some(name) = device_name {
                ballot["deviceName"] = json!(name);
            }
            if let Some(r) = review {
                ballot["verdict"] = json!(r.review.verdict.as_str());
                ballot["reason"] = json!(r.review.reason);
            }
            pending.ballots.push(ballot);
        }
        // A review is shown on the request (the pending list, every card, the audit) whether it
        // decided or not; one per reviewer and request, so bounded by `config::MAX_REVIEWERS`.
        if let Some(r) = review {
            let entry = r.review.wire(r.name, counted, now_ms());
            match pending.data.get_mut("reviews").and_then(Value::as_array_mut) {
                Some(reviews) => reviews.push(entry.clone()),
                None => pending.data["reviews"] = json!([entry.clone()]),
            }
            if !counted {
                host.publish(
                    EventKind::PermissionReviewed,
                    &json!({"requestId": request_id, "sessionId": host.session_id(), "review": entry}),
                );
            }
        }
        match decision {
            Decision::Decided(choice) => {
                let Some(pending) = take_pending(&mut st, request_id) else { return Ok(None) };
                let voter = client_id.map(str::to_owned);
                let resolution = Resolution {
                    by: ResolvedBy::Vote,
                    voter,
                    voter_device_name: device_name.map(str::to_owned),
                    rule_id: None,
                    // A decision on a question is never remembered.
                    remember: if pending.question.is_some() { Remember::No } else { remember },
                    via: Some(via),
                    answers,
                };
                Ok(self.finish(&mut st, request_id, pending, &choice, resolution))
            }
            Decision::Partial { votes_received, votes_needed, quorum, tallies } => {
                let mut data = json!({
                    "requestId": request_id, "sessionId": host.session_id(), "votesReceived": votes_received,
                    "votesNeeded": votes_needed, "quorum": quorum, "optionTallies": tallies,
                });
                if let Some(key) = pending.ballot_key(client_id, voter) {
                    pending.votes.insert(key.to_owned(), choice);
                }
                if let Some(required) = &pending.issued.required {
                    data["ruleId"] = json!(required.rule_id);
                    if let Some(group) = &required.group {
                        data["group"] = json!(group);
                    }
                    pending.count_approvals();
                }
                host.publish(EventKind::PermissionPartialVote, &data);
                Ok(None)
            }
            Decision::Informed => Ok(None),
            Decision::Forbidden(reason) => {
                if pending.forbidden.first_time(client_id) {
                    let mut data = json!({"requestId": request_id, "sessionId": host.session_id(), "reason": reason.as_str(), "via": via.as_str()});
                    if let Some(c) = client_id {
                        data["clientId"] = json!(c);
                    }
                    if let (ForbidReason::GroupRequired, Some(Required { rule_id, group: Some(group), .. })) =
                        (reason, &pending.issued.required)
                    {
                        data["ruleId"] = json!(rule_id);
                        data["group"] = json!(group);
                    }
                    host.publish(EventKind::PermissionForbidden, &data);
                }
                // A rule's group is refused naming the rule and the group, so the voter knows
                // whom to ask.
                Err(match (reason, &pending.issued.required) {
                    (ForbidReason::GroupRequired, Some(Required { rule_id, group: Some(group), .. })) => {
                        VoteError::GroupRequired { rule_id: rule_id.clone(), group: group.clone() }
                    }
                    _ => VoteError::Forbidden(reason),
                })
            }
        }
    }

    /// `client_id` withdraws its ballot on pending request `request_id` (an ACP client whose
    /// `session/request_permission` was cancelled on its side): its earlier vote, if any, no
    /// longer counts, and the request stays pending for the others. The withdrawal is kept among
    /// the request's ballots (`withdrawn: true`) for the audit. Whether the request is pending.
    /// A withdrawal decides nothing: a vote fewer never completes a quorum.
    pub fn withdraw_ballot(self, request_id: &str, client_id: &str, voter: &str, via: Via) -> bool {
        let mut st = self.mediator.lock();
        let Some(pending) = st.pending.get_mut(request_id) else { return false };
        let had =
            pending.ballot_key(Some(client_id), voter).is_some_and(|key| pending.votes.remove(key).is_some());
        if had && pending.issued.required.is_some() {
            pending.count_approvals();
        }
        if pending.ballots.len() < MAX_BALLOTS_PER_REQUEST {
            pending.ballots.push(json!({
                "clientId": client_id,
                "withdrawn": true,
                "hadVoted": had,
                "at": now_ms(),
                "counted": false,
                "via": via.as_str(),
            }));
        }
        true
    }

    /// `client_id` may vote no more (a revoked device): it leaves the voters of every pending
    /// consensus request, its earlier vote with it, and a request whose remaining votes now reach
    /// the smaller quorum is decided by them.
    pub fn voter_gone(self, client_id: &str) {
        let mut st = self.mediator.lock();
        for id in st.order.clone() {
            let Some(pending) = st.pending.get_mut(&id) else { continue };
            // A revoked device's approval of a `require` rule's request goes with it (its id is its
            // voter); the quorum stays.
            if pending.issued.required.is_some() {
                if pending.votes.remove(client_id).is_some() {
                    pending.count_approvals();
                }
                continue;
            }
            let voters = &mut pending.issued.voters_at_issue;
            if pending.issued.policy != Policy::Consensus || !voters.iter().any(|v| v == client_id) {
                continue;
            }
            voters.retain(|v| v != client_id);
            pending.votes.remove(client_id);
            let Some(choice) = standing(&pending.issued, &pending.votes) else { continue };
            if let Some(pending) = take_pending(&mut st, &id) {
                self.finish(&mut st, &id, pending, &choice, Resolution::without_vote(ResolvedBy::Vote));
            }
        }
    }

    /// Adds a rule, publishes `policy_updated`, and resolves pending requests it now matches.
    /// Returns the rule's wire object.
    pub fn add_rule(self, rule: CompiledRule) -> Result<Value, RuleError> {
        let mut st = self.mediator.lock();
        if st.rules.len() >= rules::MAX_RULES_PER_SESSION {
            return Err(RuleError::Invalid(format!(
                "at most {} rules per session",
                rules::MAX_RULES_PER_SESSION
            )));
        }
        let wire = serde_json::to_value(&rule.rule).unwrap_or(Value::Null);
        st.rules.push(rule);
        self.publish_rules(&st);
        self.apply_rules_to_pending(&mut st);
        Ok(wire)
    }

    pub fn remove_rule(self, rule_id: &str) -> Result<(), RuleError> {
        let mut st = self.mediator.lock();
        let before = st.rules.len();
        st.rules.retain(|r| r.rule.rule_id != rule_id);
        if st.rules.len() == before {
            return Err(RuleError::NotFound);
        }
        self.publish_rules(&st);
        Ok(())
    }

    pub fn list_rules(self) -> Vec<Value> {
        self.mediator.lock().rules.iter().filter_map(|r| serde_json::to_value(&r.rule).ok()).collect()
    }

    /// The workspace's rules changed: announce them (`policy_updated`) and resolve the pending
    /// requests they now match.
    pub fn workspace_rules_changed(self) {
        let mut st = self.mediator.lock();
        if st.closed {
            return;
        }
        self.publish_rules(&st);
        self.apply_rules_to_pending(&mut st);
    }

    fn publish_rules(self, st: &State) {
        let rules: Vec<Value> = st.rules.iter().filter_map(|r| serde_json::to_value(&r.rule).ok()).collect();
        self.host.publish(
            EventKind::PolicyUpdated,
            &json!({
                "sessionId": self.host.session_id(), "rules": rules,
                "workspaceRules": self.mediator.workspace_rules.list(),
            }),
        );
    }

    fn apply_rules_to_pending(self, st: &mut State) {
        let workspace: &Path = &self.mediator.workspace;
        let workspace_rules = self.mediator.workspace_rules.snapshot();
        let ids = st.order.clone();
        for id in ids {
            let Some(pending) = st.pending.get(&id) else { continue };
            let Some(RuleAnswer::Decided(choice, resolution)) = rule_answer(
                &st.rules,
                &workspace_rules,
                pending.question.is_some(),
                &pending.facts,
                &pending.options,
                workspace,
            ) else {
                continue;
            };
            if let Some(pending) = take_pending(st, &id) {
                self.finish(st, &id, pending, &choice, resolution);
            }
        }
    }

    /// Answers the agent, records the decision, publishes `permission_resolved`, and remembers it as
    /// a rule when asked (or when the option's kind is `*_always`). A rule remembered for the
    /// workspace applies once it is on disk: what it becomes is returned.
    fn finish(
        self,
        st: &mut State,
        request_id: &str,
        mut pending: Pending,
        choice: &Choice,
        resolution: Resolution,
    ) -> Option<Remembered> {
        let (host, workspace) = (self.host, &self.mediator.workspace);
        let resolved_at = now_ms();
        self.mark_overruled(&mut pending, choice, &resolution);
        let record = self.audit_record(request_id, &pending, Some((choice, &resolution, resolved_at)));
        let scope = pending.remembers(choice, &resolution);
        let _ = pending.reply.send(Decided { choice: choice.clone(), answers: resolution.answers.clone() });
        let outcome = outcome_json(choice);
        if st.resolved_order.len() >= RESOLVED_RING
            && let Some(oldest) = st.resolved_order.pop_front()
        {
            st.resolved.remove(&oldest);
        }
        st.resolved_order.push_back(request_id.to_owned());
        st.resolved.insert(
            request_id.to_owned(),
            Resolved {
                outcome: outcome.clone(),
                option_id: choice.option_id().to_owned(),
                late: Noticed::default(),
                elicitation: pending.question.as_ref().and_then(|q| q.elicitation_id.clone()),
            },
        );
        let mut data = json!({
            "requestId": request_id, "sessionId": host.session_id(), "outcome": outcome,
            "resolvedBy": resolution.by.as_str(),
        });
        if let Some(v) = &resolution.voter {
            data["voterClientId"] = json!(v);
        }
        // Who decided, by name, where a name is known (a person's, a paired device's): what the
        // cards and the notifications' "Decided" line show rather than an id.
        if let Some(name) = &resolution.voter_device_name {
            data["voterDeviceName"] = json!(name);
        }
        if let Some(r) = &resolution.rule_id {
            data["ruleId"] = json!(r);
        }
        if let Some(via) = resolution.via {
            data["via"] = json!(via.as_str());
        }
        if let (Some(q), Some(answers)) = (&pending.question, &resolution.answers) {
            data["answers"] = q.redacted(answers);
        }
        if let Some(reviews) = pending.data.get("reviews") {
            data["reviews"] = reviews.clone();
        }
        host.publish(EventKind::PermissionResolved, &data);
        self.mediator.metrics.decision(
            pending.issued.policy.as_str(),
            resolution.by.as_str(),
            resolved_at.saturating_sub(pending.issued_at),
        );
        if st.audit.len() >= AUDIT_RING {
            st.audit.pop_front();
        }
        st.audit.push_back(record.entry.clone());
        self.mediator.store.audit(record);
        // Remember the decision as the narrowest rule when asked, or when the option says "always"
        // (for the session: an agent's "always" never reaches the workspace on its own).
        if let Choice::Option(id) = choice {
            let kind = rules::option_kind(&pending.options, id).unwrap_or("");
            if scope != Remember::No {
                let effect = if kind.starts_with("allow") { Effect::Allow } else { Effect::Deny };
                let rule = rules::remembered_rule(
                    &pending.facts,
                    effect,
                    workspace,
                    resolution.voter.clone(),
                    now_ms(),
                );
                match (rule, scope) {
                    // Announced to every live session of the workspace, this one included, once
                    // on disk: each then publishes `policy_updated` and re-checks its pending
                    // requests.
                    (Some(rule), Remember::Workspace) => {
                        return Some(self.mediator.workspace_rules.remember(rule));
                    }
                    (Some(rule), _) if st.rules.len() < rules::MAX_RULES_PER_SESSION => {
                        st.rules.push(rule);
                        self.publish_rules(st);
                        // A remembered rule is an added rule: it also answers identical requests
                        // already pending (an agent may ask for parallel tool calls at once). No
                        // recursion: those are resolved by rule, which never remembers.
                        self.apply_rules_to_pending(st);
                    }
                    _ => {}
                }
            }
        }
        None
    }
}

impl BoundMediator<'_> {
    /// When a person decides a request (a vote not a reviewer's), each reviewer whose allow or deny
    /// they decided the other way ([`overrules`]) is counted and its review marked `overruled`
    /// (shown on `permission_resolved` and in the audit). A rule, a timeout or a cancel is no
    /// person's decision, and a reviewer's deciding ballot overrules no other reviewer.
    fn mark_overruled(self, pending: &mut Pending, choice: &Choice, resolution: &Resolution) {
        if resolution.by != ResolvedBy::Vote || resolution.via == Some(Via::Reviewer) {
            return;
        }
        let allowed = allows(&pending.options, choice);
        let Some(reviews) = pending.data.get_mut("reviews").and_then(Value::as_array_mut) else { return };
        for review in reviews {
            let verdict = review.get("verdict").and_then(Value::as_str).and_then(Verdict::parse);
            if verdict.is_some_and(|v| overrules(v, allowed)) {
                review["overruled"] = json!(true);
                if let Some(name) = review.get("reviewer").and_then(Value::as_str) {
                    self.mediator.metrics.review_overruled(name);
                }
            }
        }
    }

    /// The audit trail's record of a request: pending (`resolved` is `None`) or decided
    /// (`docs/protocol.md#14-durable-state`).
    fn audit_record(
        self,
        request_id: &str,
        pending: &Pending,
        resolved: Option<(&Choice, &Resolution, u64)>,
    ) -> AuditRecord {
        let m = self.mediator;
        let tool_call = &pending.data["toolCall"];
        let options: Vec<Value> = pending
            .options
            .iter()
            .map(|o| json!({"optionId": o.get("optionId"), "kind": o.get("kind"), "name": o.get("name")}))
            .collect();
        let outcome = resolved
            .map(|(choice, r, _)| outcome_of(r.by.as_str(), matches!(choice, Choice::Option(_))))
            .unwrap_or(AuditOutcome::Pending);
        let workspace = m.workspace.to_string_lossy().into_owned();
        let mut entry = json!({
            "requestId": request_id,
            "sessionId": self.host.session_id(),
            "workspace": workspace,
            "toolCall": {
                "toolCallId": tool_call.get("toolCallId"),
                "title": tool_call.get("title"),
                "kind": pending.facts.kind,
                "paths": pending.facts.paths,
                "command": pending.facts.command,
            },
            "options": options,
            "policy": pending.issued.policy.as_str(),
            "originatorClientId": pending.issued.originator,
            "votersAtIssue": pending.issued.voters_at_issue,
            "issuedAt": pending.issued_at,
            "status": outcome.as_str(),
            "resolvedAt": resolved.map(|(_, _, at)| at),
            "latencyMs": resolved.map(|(_, _, at)| at.saturating_sub(pending.issued_at)),
            "outcome": resolved.map(|(choice, _, _)| outcome_json(choice)),
            "resolvedBy": resolved.map(|(_, r, _)| r.by.as_str()),
            "voterClientId": resolved.and_then(|(_, r, _)| r.voter.clone()),
            "voterDeviceName": resolved.and_then(|(_, r, _)| r.voter_device_name.clone()),
            "ruleId": resolved.and_then(|(_, r, _)| r.rule_id.clone()),
            "via": resolved.and_then(|(_, r, _)| r.via.map(Via::as_str)),
            "remembered": resolved.and_then(|(choice, r, _)| pending.remembers(choice, r).as_str()),
            "ballots": pending.ballots,
        });
        if let Some(outside) = pending.data.get("outsideWorkspace") {
            entry["outsideWorkspace"] = outside.clone();
        }
        if let Some(required) = pending.data.get("required") {
            entry["required"] = required.clone();
        }
        if let Some(reviews) = pending.data.get("reviews") {
            entry["reviews"] = reviews.clone();
        }
        // A question's entry says what was asked and, once answered, the answers (a secret's
        // redacted: the audit is exported and shown).
        if let (Some(q), Value::Object(e)) = (&pending.question, &mut entry) {
            e.insert("question".into(), q.audited());
            if let Some(answers) = resolved.and_then(|(_, r, _)| r.answers.as_ref()) {
                e.insert("answers".into(), q.redacted(answers));
            }
        }
        AuditRecord {
            request_id: request_id.to_owned(),
            session_id: self.host.session_id().to_owned(),
            workspace,
            requested_at: pending.issued_at,
            outcome: Some(outcome).filter(|o| *o != AuditOutcome::Pending),
            entry,
        }
    }
}

impl Pending {
    /// The key its counted ballots are kept under ([`Pending::votes`]): the voter under a `require`
    /// rule, else the client id (a voter without one is not kept).
    fn ballot_key<'a>(&self, client_id: Option<&'a str>, voter: &'a str) -> Option<&'a str> {
        if self.issued.required.is_some() { Some(voter) } else { client_id }
    }

    /// A `require` rule's approvals so far, on the request as the pending list shows it ("1 of 2
    /// approvals" for a page opened later).
    fn count_approvals(&mut self) {
        self.data["required"]["approvals"] = json!(self.votes.len());
    }

    /// Where its decision is remembered as a rule ([`remembered_scope`]); a question's never is,
    /// nor one a `require` rule left to people (an "always" there would make a rule nobody asked for).
    fn remembers(&self, choice: &Choice, resolution: &Resolution) -> Remember {
        if self.question.is_some() || self.issued.required.is_some() {
            return Remember::No;
        }
        remembered_scope(&self.options, choice, resolution)
    }
}

/// Where a decision is remembered as a rule: where the deciding vote asked, or for the session
/// when it chose an `*_always` option; never for a decision no vote made.
fn remembered_scope(options: &[Value], choice: &Choice, resolution: &Resolution) -> Remember {
    let Choice::Option(id) = choice else { return Remember::No };
    // A reviewer's decision is its own each time: it never becomes a rule people did not make.
    if resolution.by != ResolvedBy::Vote || resolution.via == Some(Via::Reviewer) {
        return Remember::No;
    }
    let always = matches!(rules::option_kind(options, id), Some("allow_always" | "reject_always"));
    match resolution.remember {
        Remember::No if always => Remember::Session,
        scope => scope,
    }
}

/// Whether `choice` is one of the offered options of an `allow_*` kind (a cancel allows nothing).
fn allows(options: &[Value], choice: &Choice) -> bool {
    match choice {
        Choice::Option(id) => rules::option_kind(options, id).is_some_and(|k| k.starts_with("allow")),
        Choice::Cancel => false,
    }
}

fn offered(options: &[Value], id: &str) -> bool {
    options.iter().any(|o| o.get("optionId").and_then(Value::as_str) == Some(id))
}

/// The choice a matching rule makes, or `None` when the rule does not apply (allow with nothing
/// to allow with).
fn rule_choice(effect: Effect, options: &[Value]) -> Option<Choice> {
    match (effect, rules::pick_option(options, effect)) {
        (_, Some(id)) => Some(Choice::Option(id)),
        (Effect::Deny, None) => Some(Choice::Cancel),
        (Effect::Allow | Effect::Require, None) => None,
    }
}

/// What the rules say about a request.
enum RuleAnswer {
    /// An allow or a deny decided it: the choice and the resolution to record.
    Decided(Choice, Resolution),
    /// A `require` rule leaves it to its quorum of distinct voters (of its group, if it names one).
    Required(Required),
}

/// What the rules say about a request (the session's first, then the workspace's; a deny in either
/// beats a require, which beats an allow), or `None` when no rule answers it. No rule answers a
/// question: it is for a person.
fn rule_answer(
    session_rules: &[CompiledRule],
    workspace_rules: &[CompiledRule],
    question: bool,
    facts: &RequestFacts,
    options: &[Value],
    workspace: &Path,
) -> Option<RuleAnswer> {
    if question {
        return None;
    }
    let rule = &rules::find_match_in(session_rules, workspace_rules, facts, workspace)?.rule;
    if rule.effect == Effect::Require {
        // Compiled rules have one (`rules::compile`); a missing one would ask for one approval.
        let quorum = rule.quorum.and_then(|q| usize::try_from(q).ok()).unwrap_or(1);
        let (rule_id, group) = (rule.rule_id.clone(), rule.group.clone());
        return Some(RuleAnswer::Required(Required { rule_id, quorum, group }));
    }
    let choice = rule_choice(rule.effect, options)?;
    let resolution =
        Resolution { rule_id: Some(rule.rule_id.clone()), ..Resolution::without_vote(ResolvedBy::Rule) };
    Some(RuleAnswer::Decided(choice, resolution))
}

fn take_pending(st: &mut State, request_id: &str) -> Option<Pending> {
    let pending = st.pending.remove(request_id)?;
    st.order.retain(|id| id != request_id);
    Some(pending)
}

struct Resolution {
    by: ResolvedBy,
    voter: Option<String>,
    /// The deciding voter's device name, when a paired device decided.
    voter_device_name: Option<String>,
    rule_id: Option<String>,
    remember: Remember,
    /// How the deciding vote arrived; `None` when no vote decided.
    via: Option<Via>,
    /// A question's answers, checked, when the deciding vote accepted it with them.
    answers: Option<Answers>,
}

impl Resolution {
    /// A resolution no vote made (a rule, a timeout, a cancel, the session's end).
    fn without_vote(by: ResolvedBy) -> Resolution {
        Resolution {
            by,
            voter: None,
            voter_device_name: None,
            rule_id: None,
            remember: Remember::No,
            via: None,
            answers: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::TrustMap;
    use crate::permission::policy::ForbidReason;
    use crate::permission::question::AnswerError;
    use crate::sync::lock;

    /// The audit's `remembered`: where the deciding vote asked, for the session when it chose an
    /// `*_always` option, and never for a decision no vote made.
    #[test]
    fn a_decision_is_remembered_where_the_vote_asked_or_for_the_session_when_always() {
        let options = [
            json!({"optionId": "a1", "kind": "allow_once"}),
            json!({"optionId": "aa", "kind": "allow_always"}),
            json!({"optionId": "ra", "kind": "reject_always"}),
        ];
        let by = |by, remember| Resolution { remember, ..Resolution::without_vote(by) };
        let pick = |id: &str| Choice::Option(id.to_owned());
        let cases = [
            (pick("a1"), by(ResolvedBy::Vote, Remember::No), Remember::No),
            (pick("a1"), by(ResolvedBy::Vote, Remember::Session), Remember::Session),
            (pick("a1"), by(ResolvedBy::Vote, Remember::Workspace), Remember::Workspace),
            (pick("aa"), by(ResolvedBy::Vote, Remember::No), Remember::Session),
            (pick("ra"), by(ResolvedBy::Vote, Remember::No), Remember::Session),
            (pick("aa"), by(ResolvedBy::Vote, Remember::Workspace), Remember::Workspace),
            (pick("gone"), by(ResolvedBy::Vote, Remember::No), Remember::No),
            (pick("aa"), by(ResolvedBy::Rule, Remember::No), Remember::No),
            (pick("a1"), by(ResolvedBy::Rule, Remember::Session), Remember::No),
            (Choice::Cancel, by(ResolvedBy::Vote, Remember::Session), Remember::No),
        ];
        for (choice, resolution, scope) in cases {
            assert_eq!(
                remembered_scope(&options, &choice, &resolution),
                scope,
                "{choice:?} {:?} {:?}",
                resolution.by,
                resolution.remember
            );
        }
        assert_eq!(
            [Remember::No, Remember::Session, Remember::Workspace].map(Remember::as_str),
            [None, Some("session"), Some("workspace")]
        );
    }

    const WS: &str = "/ws";

    /// A session as the mediator sees it, with nothing behind it: events are recorded, voters and
    /// the originator are set by the test, announced tool calls are a table.
    #[derive(Default)]
    struct FakeHost {
        events: Mutex<Vec<(EventKind, Value)>>,
        voters: Mutex<Vec<String>>,
        originator: Mutex<Option<String>>,
        announced: Mutex<HashMap<String, Value>>,
        /// The running turn's prompt id, as the test sets it.
        turn: Mutex<Option<String>>,
        /// The turns the mediator stopped.
        stopped: Mutex<Vec<String>>,
    }

    impl Host for FakeHost {
        fn session_id(&self) -> &str {
            "s1"
        }
        fn publish(&self, kind: EventKind, data: &Value) {
            lock(&self.events).push((kind, data.clone()));
        }
        fn originator(&self) -> Option<String> {
            lock(&self.originator).clone()
        }
        fn voters(&self) -> Vec<String> {
            let mut voters = lock(&self.voters).clone();
            voters.sort();
            voters
        }
        fn is_voter(&self, client_id: &str) -> bool {
            lock(&self.voters).iter().any(|v| v == client_id)
        }
        fn announced_tool_call(&self, tool_call: &Value) -> Value {
            let id = tool_call.get("toolCallId").and_then(Value::as_str).unwrap_or_default();
            let mut merged = lock(&self.announced).get(id).cloned().unwrap_or_else(|| json!({}));
            if let (Some(merged), Some(call)) = (merged.as_object_mut(), tool_call.as_object()) {
                merged.extend(call.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())));
            }
            merged
        }
        fn turn(&self) -> Option<String> {
            lock(&self.turn).clone()
        }
        fn stop_turn(&self, prompt_id: String) -> BoxFuture<'_, ()> {
            lock(&self.stopped).push(prompt_id);
            Box::pin(async {})
        }
    }

    impl FakeHost {
        fn kinds(&self) -> Vec<EventKind> {
            kinds_of(&lock(&self.events))
        }
        fn last(&self, kind: EventKind) -> Value {
            let events = lock(&self.events);
            let found = events.iter().rev().find(|(k, _)| *k == kind).map(|(_, data)| data.clone());
            found.unwrap_or_else(|| panic!("no {kind} among {:?}", kinds_of(&events)))
        }
    }

    fn kinds_of(events: &[(EventKind, Value)]) -> Vec<EventKind> {
        events.iter().map(|(kind, _)| *kind).collect()
    }

    /// A mediator, its fake host and the metrics it counts into.
    struct Fixture {
        mediator: Arc<Mediator>,
        host: Arc<FakeHost>,
        metrics: Arc<Metrics>,
    }

    fn fixture(policy: Policy, timeout: Option<Duration>) -> Fixture {
        let cfg = MediatorConfig {
            policy,
            quorum: None,
            timeout,
            home: None,
            reviewers: Vec::new(),
            breaker: BreakerSettings::default(),
        };
        fixture_of(cfg)
    }

    fn fixture_of(cfg: MediatorConfig) -> Fixture {
        let metrics = Arc::new(Metrics::default());
        let mediator = Arc::new(Mediator::new(cfg, PathBuf::from(WS), metrics.clone()));
        Fixture { mediator, host: Arc::default(), metrics }
    }

    impl Fixture {
        fn permissions(&self) -> BoundMediator<'_> {
            self.mediator.serve(&*self.host)
        }

        /// Raises a request as the agent would, in its own task.
        fn raise(&self, params: Value) -> tokio::task::JoinHandle<Value> {
            let (mediator, host) = (self.mediator.clone(), self.host.clone());
            tokio::spawn(async move { mediator.serve(&*host).request(params).await })
        }

        /// Raises a request as the agent would, in its own task, once it is the one pending: the
        /// task and the request's id.
        async fn raised(&self, params: Value) -> (tokio::task::JoinHandle<Value>, String) {
            let task = self.raise(params);
            self.until_pending(1).await;
            (task, self.pending_ids().remove(0))
        }

        /// Raises an elicitation as the agent would, in its own task.
        fn elicit(&self, params: Value) -> tokio::task::JoinHandle<Result<Value, Malformed>> {
            let (mediator, host) = (self.mediator.clone(), self.host.clone());
            tokio::spawn(async move { mediator.serve(&*host).elicit(params).await })
        }

        /// Lets spawned requests run (current-thread runtime) until `n` are pending.
        async fn until_pending(&self, n: usize) {
            for _ in 0..10_000 {
                if self.permissions().pending_count() == n {
                    return;
                }
                tokio::task::yield_now().await;
            }
            panic!("{} pending, expected {n}", self.permissions().pending_count());
        }

        /// Waits until `n` reviews were shown without deciding (`permission_reviewed`).
        async fn until_reviews(&self, n: usize) {
            for _ in 0..10_000 {
                if self.host.kinds().iter().filter(|k| **k == EventKind::PermissionReviewed).count() == n {
                    return;
                }
                tokio::task::yield_now().await;
            }
            panic!("not {n} reviews: {:?}", self.host.kinds());
        }

        fn pending_ids(&self) -> Vec<String> {
            let pending = self.permissions().list_pending();
            pending.iter().filter_map(|p| p["requestId"].as_str().map(str::to_owned)).collect()
        }

        fn add_voters(&self, voters: &[&str]) {
            lock(&self.host.voters).extend(voters.iter().map(|v| v.to_string()));
        }
    }

    fn options(kinds: &[&str]) -> Vec<Value> {
        kinds.iter().map(|k| json!({"optionId": format!("opt-{k}"), "name": k, "kind": k})).collect()
    }

    fn params(path: &str, kinds: &[&str]) -> Value {
        json!({
            "sessionId": "s1",
            "toolCall": {"toolCallId": "c1", "title": "Write", "kind": "edit", "locations": [{"path": path}]},
            "options": options(kinds),
        })
    }

    /// A reviewer's ballot on `id`, as `cast_review` casts it.
    fn reviewed<'a>(id: &'a str, vote: &'a Vote, review: &'a Review, trust: &'a TrustMap) -> Ballot<'a> {
        Ballot {
            client: Some("reviewer:guard"),
            voter: "reviewer:guard",
            via: Via::Reviewer,
            review: Some(Reviewed { name: "guard", review, trust }),
            ..ballot(id, None, false, vote)
        }
    }

    fn review(verdict: Verdict, reason: &str) -> Review {
        Review { verdict, reason: reason.to_owned(), option_id: None, failure: None }
    }

    /// An untrusted reviewer's allow is shown on the pending request and decides nothing; a
    /// person then decides; a reviewer's verdict after that is refused and tells nobody.
    #[tokio::test]
    async fn a_reviewer_informs_where_untrusted_and_is_too_late_once_a_person_decided() {
        let f = fixture(Policy::FirstResponder, None);
        lock(&f.host.voters).push("alice".into());
        let (task, id) = f.raised(params("/ws/a", &["allow_once", "allow_always", "reject_once"])).await;
        let allow = Vote::from(Pick::Decision { effect: Effect::Allow, remember: Remember::No });
        let only_reads = TrustMap::parse("read:decide", "t").expect("trust");
        let said = review(Verdict::Allow, "looks fine");
        assert_eq!(f.permissions().vote(&reviewed(&id, &allow, &said, &only_reads)).map(|_| ()), Ok(()));
        assert!(f.permissions().is_pending(&id), "an untrusted allow decides nothing");
        let listed = &f.permissions().list_pending()[0]["reviews"][0];
        assert_eq!(
            (&listed["verdict"], &listed["reason"], &listed["decides"]),
            (&json!("allow"), &json!("looks fine"), &json!(false))
        );
        assert_eq!(f.host.last(EventKind::PermissionReviewed)["review"]["clientId"], "reviewer:guard");

        let reject = Vote::from(Pick::Decision { effect: Effect::Deny, remember: Remember::No });
        f.permissions().vote(&ballot(&id, Some("alice"), true, &reject)).expect("alice decides");
        assert_eq!(task.await.expect("join")["outcome"]["optionId"], "opt-reject_once");
        let events = f.host.kinds().len();
        let edits = TrustMap::parse("edit:decide", "t").expect("trust");
        let late = f.permissions().vote(&reviewed(&id, &allow, &said, &edits));
        assert!(matches!(late, Err(VoteError::AlreadyResolved { .. })), "{late:?}");
        assert_eq!(f.host.kinds().len(), events, "a late verdict publishes nothing");
        assert_eq!(f.permissions().audit()[0]["voterClientId"], "alice");
    }

    /// A person who decides against an informing reviewer's allow overrules it: the review says so
    /// on `permission_resolved` and in the audit, and the reviewer's count rises. A deny they
    /// agree with, and an escalate (which took no side), are overruled by nothing.
    #[tokio::test]
    async fn a_person_deciding_against_an_allow_overrules_it_but_never_an_escalate() {
        let f = fixture(Policy::FirstResponder, None);
        lock(&f.host.voters).push("alice".into());
        let only_reads = TrustMap::parse("read:decide", "t").expect("trust");
        let reject = Vote::from(Pick::Decision { effect: Effect::Deny, remember: Remember::No });
        let mut overruled = Vec::new();
        for verdict in [Verdict::Allow, Verdict::Escalate, Verdict::Deny] {
            let (task, id) = f.raised(params("/ws/a", &["allow_once", "reject_once"])).await;
            let said = review(verdict, "said");
            let pick = match verdict {
                Verdict::Allow => Pick::Decision { effect: Effect::Allow, remember: Remember::No },
                Verdict::Deny => Pick::Decision { effect: Effect::Deny, remember: Remember::No },
                Verdict::Escalate => Pick::Outcome { choice: Choice::Cancel, remember: Remember::No },
            };
            let cast = Vote::from(pick);
            assert_eq!(f.permissions().vote(&reviewed(&id, &cast, &said, &only_reads)).map(|_| ()), Ok(()));
            f.permissions().vote(&ballot(&id, Some("alice"), true, &reject)).expect("alice decides");
            task.await.expect("join");
            let resolved = f.host.last(EventKind::PermissionResolved);
            assert_eq!(resolved["reviews"], f.permissions().audit().last().expect("entry")["reviews"]);
            overruled.push(resolved["reviews"][0].get("overruled").cloned());
        }
        assert_eq!(overruled, [Some(json!(true)), None, None]);
        assert_eq!(f.metrics.reviewer_figures("guard").overruled, 1);
        assert!(
            f.metrics
                .render(&Default::default())
                .contains(r#"mediatord_reviews_overruled_total{reviewer="guard"} 1"#)
        );
    }

    /// A trusted reviewer's deciding allow does not overrule another reviewer's informing deny:
    /// reviewers never overrule each other, only a person does.
    #[tokio::test]
    async fn a_reviewers_deciding_ballot_overrules_no_other_reviewer() {
        let f = fixture(Policy::FirstResponder, None);
        lock(&f.host.voters).push("alice".into());
        let (task, id) = f.raised(params("/ws/a", &["allow_once", "reject_once"])).await;
        let deny = Vote::from(Pick::Decision { effect: Effect::Deny, remember: Remember::No });
        let only_reads = TrustMap::parse("read:decide", "t").expect("trust");
        let said = review(Verdict::Deny, "no");
        f.permissions().vote(&reviewed(&id, &deny, &said, &only_reads)).expect("guard informs");
        let allow = Vote::from(Pick::Decision { effect: Effect::Allow, remember: Remember::No });
        let edits = TrustMap::parse("edit:decide", "t").expect("trust");
        let allowed = review(Verdict::Allow, "fine");
        let lint = Ballot {
            client: Some("reviewer:lint"),
            voter: "reviewer:lint",
            review: Some(Reviewed { name: "lint", review: &allowed, trust: &edits }),
            ..reviewed(&id, &allow, &allowed, &edits)
        };
        f.permissions().vote(&lint).expect("lint decides");
        assert_eq!(task.await.expect("join")["outcome"]["optionId"], "opt-allow_once");
        let reviews = &f.permissions().audit()[0]["reviews"];
        assert_eq!((&reviews[0]["reviewer"], &reviews[1]["decides"]), (&json!("guard"), &json!(true)));
        assert_eq!(reviews[0].get("overruled"), None, "{reviews}");
        assert_eq!(f.metrics.reviewer_figures("guard").overruled, 0);
    }

    /// A reviewer that answers every request at once with its one verdict.
    #[derive(Debug)]
    struct Says(Verdict, TrustMap);

    impl Judge for Says {
        fn name(&self) -> &str {
            "guard"
        }
        fn trust(&self) -> &TrustMap {
            &self.1
        }
        fn judge(&self, _: Value) -> BoxFuture<'static, Review> {
            let said = review(self.0, "not this");
            Box::pin(async move { said })
        }
    }

    /// The second request a reviewer denies in a turn trips the breaker (`denials: 2`): one
    /// `review_breaker`, the turn stopped; the next turn counts from zero. A request of a
    /// critical kind trips it alone; an allow never does.
    #[tokio::test]
    async fn the_second_denial_of_a_turn_stops_it_and_the_next_turn_counts_from_zero() {
        let breakers =
            |f: &Fixture| f.host.kinds().iter().filter(|k| **k == EventKind::ReviewBreaker).count();
        let with = |verdict, critical: &[&str]| MediatorConfig {
            reviewers: vec![Arc::new(Says(verdict, TrustMap::default())) as Arc<dyn Judge>],
            breaker: BreakerSettings {
                denials: 2,
                critical: critical.iter().map(|k| (*k).to_owned()).collect(),
            },
            policy: Policy::FirstResponder,
            quorum: None,
            timeout: None,
            home: None,
        };
        let f = fixture_of(with(Verdict::Deny, &["delete"]));
        *lock(&f.host.turn) = Some("p1".into());
        let _first = f.raised(params("/ws/a", &["allow_once", "reject_once"])).await;
        f.until_reviews(1).await;
        assert_eq!((breakers(&f), lock(&f.host.stopped).len()), (0, 0), "one denial is not enough");
        let _second = f.raise(params("/ws/b", &["allow_once", "reject_once"]));
        f.until_reviews(2).await;
        let tripped = f.host.last(EventKind::ReviewBreaker);
        assert_eq!(
            (
                &tripped["promptId"],
                &tripped["reviewer"],
                &tripped["reason"],
                &tripped["count"],
                &tripped["review"]
            ),
            (&json!("p1"), &json!("guard"), &json!("denials"), &json!(2), &json!("not this"))
        );
        assert_eq!(*lock(&f.host.stopped), ["p1"]);

        *lock(&f.host.turn) = Some("p2".into());
        let _third = f.raise(params("/ws/c", &["allow_once", "reject_once"]));
        f.until_reviews(3).await;
        assert_eq!(breakers(&f), 1, "the next turn starts from zero");
        let mut delete = params("/ws/d", &["allow_once", "reject_once"]);
        delete["toolCall"]["kind"] = json!("delete");
        let _fourth = f.raise(delete);
        f.until_reviews(4).await;
        assert_eq!(breakers(&f), 2);
        let critical = f.host.last(EventKind::ReviewBreaker);
        assert_eq!((&critical["reason"], &critical["kind"]), (&json!("critical"), &json!("delete")));
        assert_eq!(*lock(&f.host.stopped), ["p1", "p2"]);

        let f = fixture_of(with(Verdict::Allow, &["edit"]));
        *lock(&f.host.turn) = Some("p1".into());
        for path in ["/ws/a", "/ws/b", "/ws/c"] {
            let _allowed = f.raise(params(path, &["allow_once", "reject_once"]));
        }
        f.until_reviews(3).await;
        assert_eq!((breakers(&f), lock(&f.host.stopped).len()), (0, 0), "an allow trips nothing");
    }

    /// A trusted reviewer's pick of an `*_always` option decides once: it never becomes a rule.
    #[tokio::test]
    async fn a_trusted_reviewer_decides_but_is_never_remembered() {
        let f = fixture(Policy::Designated, None);
        *lock(&f.host.originator) = Some("alice".into());
        let (task, id) = f.raised(params("/ws/a", &["allow_once", "allow_always", "reject_once"])).await;
        let always = Vote::from(Pick::Outcome {
            choice: Choice::Option("opt-allow_always".into()),
            remember: Remember::No,
        });
        let said = Review { option_id: Some("opt-allow_always".into()), ..review(Verdict::Allow, "safe") };
        let edits = TrustMap::parse("edit:decide", "t").expect("trust");
        assert_eq!(f.permissions().vote(&reviewed(&id, &always, &said, &edits)).map(|_| ()), Ok(()));
        assert_eq!(task.await.expect("join")["outcome"]["optionId"], "opt-allow_always");
        let entry = &f.permissions().audit()[0];
        assert_eq!((&entry["voterClientId"], &entry["via"]), (&json!("reviewer:guard"), &json!("reviewer")));
        assert_eq!(entry["remembered"], Value::Null);
        assert!(f.permissions().list_rules().is_empty(), "no session rule from a reviewer");
    }

    fn rule(body: Value) -> CompiledRule {
        rules::parse_rule(&body, std::path::Path::new(WS), None, 0).expect("valid rule")
    }

    /// A ballot of these tests: over REST, from no device, not an observer's (a test that needs
    /// another door or a device's name says so with `..ballot(...)`).
    fn ballot<'a>(id: &'a str, client: Option<&'a str>, local: bool, vote: &'a Vote) -> Ballot<'a> {
        Ballot {
            request_id: id,
            client,
            voter: client.unwrap_or("operator"),
            groups: &[],
            device_name: None,
            observer: false,
            local,
            via: Via::Rest,
            vote,
            review: None,
        }
    }

    /// The ballots these tests cast, as (request, client, loopback, vote): each one [`Ballot`] to
    /// the mediator's one vote.
    trait Casting {
        fn cast(self, id: &str, client: Option<&str>, local: bool, vote: &Vote) -> Result<(), VoteError>;
    }

    impl Casting for BoundMediator<'_> {
        fn cast(self, id: &str, client: Option<&str>, local: bool, vote: &Vote) -> Result<(), VoteError> {
            self.vote(&ballot(id, client, local, vote)).map(drop)
        }
    }

    fn vote(option: &str, remember: bool) -> Vote {
        let remember = if remember { Remember::Session } else { Remember::No };
        Pick::Outcome { choice: Choice::Option(option.into()), remember }.into()
    }

    async fn answer(task: tokio::task::JoinHandle<Value>) -> Value {
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("answered").expect("task")
    }

    /// `may_vote` is whether a ballot would count under the policy the request was raised with
    /// (who the ACP door asks): pending requests only.
    #[tokio::test]
    async fn may_vote_follows_the_policy_of_a_pending_request() {
        let f = fixture(Policy::Designated, None);
        f.add_voters(&["alice", "bob"]);
        *lock(&f.host.originator) = Some("alice".into());
        let (task, id) = f.raised(params("/ws/a.txt", &["allow_once", "reject_once"])).await;
        let p = f.permissions();
        assert!(p.may_vote(&id, Some("alice"), &[], false), "the originator decides");
        assert!(!p.may_vote(&id, Some("bob"), &[], true), "nobody else, wherever they are");
        assert!(!p.may_vote(&id, None, &[], true));
        assert!(!p.may_vote("no-such-request", Some("alice"), &[], false), "only a pending request");
        p.cast(&id, Some("alice"), false, &vote("opt-allow_once", false)).expect("decides");
        answer(task).await;
        assert!(!f.permissions().may_vote(&id, Some("alice"), &[], false), "decided: nothing to vote on");
    }

    /// Claude Code asks with a bare tool-call update (`{toolCallId, title, rawInput}`); `kind` and
    /// `locations` came earlier in `session/update`. Rules must match on what the host merged.
    #[tokio::test]
    async fn rules_match_what_the_agent_announced_before_asking() {
        let f = fixture(Policy::FirstResponder, None);
        lock(&f.host.announced).insert(
            "c9".into(),
            json!({"toolCallId": "c9", "title": "Write", "kind": "edit", "locations": [{"path": "/ws/src/a.txt"}]}),
        );
        f.permissions()
            .add_rule(rule(json!({"effect": "allow", "kinds": ["edit"], "paths": ["src/**"]})))
            .expect("rule");
        let bare = json!({
            "sessionId": "s1",
            "toolCall": {"toolCallId": "c9", "title": "Write a.txt", "rawInput": {"content": "x"}},
            "options": options(&["allow_once", "reject_once"]),
        });
        assert_eq!(answer(f.raise(bare)).await["outcome"]["optionId"], "opt-allow_once");
        // An id the agent never announced has no kind or path: the rule does not apply.
        let unknown = json!({
            "sessionId": "s1",
            "toolCall": {"toolCallId": "c10", "title": "Write b.txt"},
            "options": options(&["allow_once", "reject_once"]),
        });
        let pending = f.raise(unknown);
        f.until_pending(1).await;
        f.permissions().cancel_all(ResolvedBy::Cancel);
        assert_eq!(answer(pending).await["outcome"]["outcome"], "cancelled");
    }

    #[test]
    fn rule_choice_maps_effects_to_offered_kinds() {
        let table: [(Effect, &[&str], Option<Choice>); 6] = [
            (
                Effect::Allow,
                &["allow_once", "allow_always", "reject_once"],
                Some(Choice::Option("opt-allow_once".into())),
            ),
            (
                Effect::Allow,
                &["allow_always", "reject_once"],
                Some(Choice::Option("opt-allow_always".into())),
            ),
            (Effect::Allow, &["reject_once", "reject_always"], None),
            (
                Effect::Deny,
                &["allow_once", "reject_always"],
                Some(Choice::Option("opt-reject_always".into())),
            ),
            (Effect::Deny, &["allow_once", "allow_always"], Some(Choice::Cancel)),
            (Effect::Deny, &[], Some(Choice::Cancel)),
        ];
        for (effect, kinds, expected) in table {
            assert_eq!(rule_choice(effect, &options(kinds)), expected, "{effect:?} {kinds:?}");
        }
    }

    #[tokio::test]
    async fn allow_rule_without_an_allow_option_leaves_the_request_to_the_vote() {
        let f = fixture(Policy::FirstResponder, None);
        f.permissions().add_rule(rule(json!({"effect": "allow", "kinds": ["edit"]}))).expect("added");
        let (task, id) = f.raised(params("/ws/a", &["reject_once", "reject_always"])).await;
        f.permissions().cast(&id, None, true, &vote("opt-reject_once", false)).expect("vote");
        assert_eq!(
            answer(task).await,
            json!({"outcome": {"outcome": "selected", "optionId": "opt-reject_once"}})
        );
        assert_eq!(f.permissions().audit()[0]["resolvedBy"], "vote");
    }

    /// A `require` rule (`quorum: 2`) under `designated`, where the originator alone would decide:
    /// the request says so, the first approval leaves it pending ("1 of 2"), the same voter again
    /// (another client id of the operator's token) does not count twice, an allow rule added
    /// meanwhile does not wave it through, a second voter decides, nothing is remembered, and the
    /// audit has both ballots and the rule.
    #[tokio::test]
    async fn a_require_rule_waits_for_its_quorum_of_distinct_voters() {
        let f = fixture(Policy::Designated, None);
        f.add_voters(&["alice", "bob", "dev-1"]);
        let required = f
            .permissions()
            .add_rule(rule(json!({"effect": "require", "quorum": 2, "kinds": ["edit"]})))
            .expect("added");
        let (task, id) = f.raised(params("/ws/a", &["allow_once", "allow_always", "reject_once"])).await;
        let request = f.host.last(EventKind::PermissionRequest);
        assert_eq!(request["required"], json!({"ruleId": required["ruleId"], "quorum": 2, "approvals": 0}));
        let always = vote("opt-allow_always", false);
        let operator = |client| Ballot { voter: "operator", ..ballot(&id, Some(client), true, &always) };
        f.permissions().vote(&operator("alice")).expect("alice");
        assert_eq!(f.host.last(EventKind::PermissionPartialVote)["votesReceived"], 1);
        f.permissions().vote(&operator("bob")).expect("the operator's token again, as bob");
        let partial = f.host.last(EventKind::PermissionPartialVote);
        assert_eq!((partial["votesReceived"].clone(), partial["quorum"].clone()), (json!(1), json!(2)));
        assert_eq!(partial["ruleId"], required["ruleId"]);
        assert_eq!(f.permissions().list_pending()[0]["required"]["approvals"], 1);
        f.permissions().add_rule(rule(json!({"effect": "allow", "kinds": ["edit"]}))).expect("an allow rule");
        assert_eq!(
            f.pending_ids(),
            vec![id.clone()],
            "an allow rule does not answer what a require rule holds"
        );
        f.permissions()
            .vote(&Ballot { device_name: Some("Ada's phone"), ..ballot(&id, Some("dev-1"), false, &always) })
            .expect("a device, remote, not the originator");
        assert_eq!(
            answer(task).await,
            json!({"outcome": {"outcome": "selected", "optionId": "opt-allow_always"}})
        );
        let entry = f.permissions().audit().remove(0);
        assert_eq!(entry["remembered"], Value::Null, "an approval under a require rule is never remembered");
        assert_eq!(entry["required"]["ruleId"], required["ruleId"]);
        let voters: Vec<&str> = entry["ballots"]
            .as_array()
            .expect("ballots")
            .iter()
            .filter_map(|b| b["clientId"].as_str())
            .collect();
        assert_eq!(voters, ["alice", "bob", "dev-1"]);
        assert_eq!(f.permissions().list_rules().len(), 2, "no rule remembered");
    }

    /// A `require` rule naming a group (`quorum` left to its default, one): the request says
    /// which; the approval of a person of other groups, of a device without a person and of the
    /// operator's token is each refused naming the rule and the group, counts nothing and leaves
    /// it pending; a member's approval decides, and the audit names the group and the member. On
    /// a second request a non-member's rejection decides.
    #[tokio::test]
    async fn a_require_rule_with_a_group_counts_only_its_members_approvals() {
        let f = fixture(Policy::FirstResponder, None);
        f.add_voters(&["person:ada", "person:grace", "dev-1"]);
        let required = f
            .permissions()
            .add_rule(rule(json!({"effect": "require", "group": "admins", "kinds": ["edit"]})))
            .expect("added");
        let rule_id = required["ruleId"].as_str().expect("ruleId").to_owned();
        assert_eq!((required["group"].clone(), required["quorum"].clone()), (json!("admins"), json!(1)));
        let (task, id) = f.raised(params("/ws/a", &["allow_once", "reject_once"])).await;
        let request = f.host.last(EventKind::PermissionRequest);
        assert_eq!(
            request["required"],
            json!({"ruleId": rule_id, "quorum": 1, "approvals": 0, "group": "admins"})
        );
        let allow = vote("opt-allow_once", false);
        let (staff, admins) = (["staff".to_owned(), "admins-2".to_owned()], ["admins".to_owned()]);
        let refusal = VoteError::GroupRequired { rule_id: rule_id.clone(), group: "admins".into() };
        for (who, groups) in [(Some("person:ada"), &staff[..]), (Some("dev-1"), &[]), (None, &[])] {
            let refused = f.permissions().vote(&Ballot { groups, ..ballot(&id, who, true, &allow) });
            assert_eq!(refused.map(|r| r.is_none()), Err(refusal.clone()), "{who:?}");
            let forbidden = f.host.last(EventKind::PermissionForbidden);
            assert_eq!(
                (&forbidden["reason"], &forbidden["ruleId"], &forbidden["group"]),
                (&json!("group_required"), &json!(rule_id), &json!("admins")),
                "{forbidden}"
            );
        }
        assert_eq!(f.pending_ids(), vec![id.clone()], "a non-member's approval counts nothing");
        assert_eq!(f.permissions().list_pending()[0]["required"]["approvals"], 0);
        assert!(!f.permissions().may_vote(&id, Some("person:ada"), &staff, false), "ada is not asked");
        assert!(f.permissions().may_vote(&id, Some("person:grace"), &admins, false));
        let grace = Ballot { groups: &admins, ..ballot(&id, Some("person:grace"), false, &allow) };
        f.permissions().vote(&grace).expect("a member decides");
        assert_eq!(
            answer(task).await,
            json!({"outcome": {"outcome": "selected", "optionId": "opt-allow_once"}})
        );
        let entry = f.permissions().audit().remove(0);
        assert_eq!(entry["required"]["group"], "admins");
        assert_eq!(entry["voterClientId"], "person:grace");
        let counted: Vec<bool> =
            entry["ballots"].as_array().expect("ballots").iter().map(|b| b["counted"] == true).collect();
        assert_eq!(counted, [false, false, false, true]);

        let (task, id) = f.raised(params("/ws/b", &["allow_once", "reject_once"])).await;
        let reject = vote("opt-reject_once", false);
        f.permissions()
            .vote(&Ballot { groups: &staff, ..ballot(&id, Some("person:ada"), false, &reject) })
            .expect("a rejection");
        assert_eq!(
            answer(task).await,
            json!({"outcome": {"outcome": "selected", "optionId": "opt-reject_once"}})
        );
    }

    /// A group's rule with a quorum of two: the first member's approval is a partial vote naming
    /// the rule and the group, so every door can say whose approval is still needed.
    #[tokio::test]
    async fn a_partial_vote_under_a_groups_rule_names_the_group() {
        let f = fixture(Policy::FirstResponder, None);
        f.add_voters(&["person:grace", "person:alan"]);
        let required = f
            .permissions()
            .add_rule(rule(json!({"effect": "require", "group": "admins", "quorum": 2, "kinds": ["edit"]})))
            .expect("added");
        let (_task, id) = f.raised(params("/ws/a", &["allow_once", "reject_once"])).await;
        let admins = ["admins".to_owned()];
        let allow = vote("opt-allow_once", false);
        let grace = Ballot { groups: &admins, ..ballot(&id, Some("person:grace"), false, &allow) };
        assert_eq!(f.permissions().vote(&grace).map(|r| r.is_none()), Ok(true), "pending still");
        let partial = f.host.last(EventKind::PermissionPartialVote);
        assert_eq!(
            (&partial["votesReceived"], &partial["ruleId"], &partial["group"]),
            (&json!(1), &required["ruleId"], &json!("admins")),
            "{partial}"
        );
    }

    /// Under a require rule one rejection decides, and a revoked device's approval goes with it.
    #[tokio::test]
    async fn under_a_require_rule_one_rejection_decides_and_a_gone_voters_approval_is_withdrawn() {
        let f = fixture(Policy::FirstResponder, None);
        f.add_voters(&["dev-1", "dev-2", "dev-3"]);
        f.permissions()
            .add_rule(rule(json!({"effect": "require", "quorum": 2, "kinds": ["edit"]})))
            .expect("added");
        let (task, id) = f.raised(params("/ws/a", &["allow_once", "reject_once"])).await;
        f.permissions().cast(&id, Some("dev-1"), true, &vote("opt-allow_once", false)).expect("dev-1");
        f.permissions().voter_gone("dev-1");
        assert_eq!(f.permissions().list_pending()[0]["required"]["approvals"], 0);
        f.permissions().cast(&id, Some("dev-2"), true, &vote("opt-allow_once", false)).expect("dev-2");
        assert_eq!(f.pending_ids(), vec![id.clone()], "dev-1's approval left with it: one of two");
        f.permissions().cast(&id, Some("dev-3"), true, &vote("opt-reject_once", false)).expect("dev-3");
        assert_eq!(
            answer(task).await,
            json!({"outcome": {"outcome": "selected", "optionId": "opt-reject_once"}})
        );
    }

    #[tokio::test]
    async fn deny_rule_without_a_reject_option_cancels() {
        let f = fixture(Policy::FirstResponder, None);
        let added =
            f.permissions().add_rule(rule(json!({"effect": "deny", "kinds": ["edit"]}))).expect("added");
        let task = f.raise(params("/ws/a", &["allow_once", "allow_always"]));
        assert_eq!(answer(task).await, json!({"outcome": {"outcome": "cancelled"}}));
        let audit = f.permissions().audit();
        assert_eq!(
            (audit[0]["resolvedBy"].clone(), audit[0]["ruleId"].clone()),
            (json!("rule"), added["ruleId"].clone())
        );
    }

    #[tokio::test]
    async fn requests_beyond_the_pending_cap_are_cancelled_at_once() {
        let f = fixture(Policy::FirstResponder, None);
        let held: Vec<_> =
            (0..MAX_PENDING_PER_SESSION).map(|_| f.raise(params("/ws/a", &["allow_once"]))).collect();
        f.until_pending(MAX_PENDING_PER_SESSION).await;
        let extra = f.raise(params("/ws/a", &["allow_once"]));
        assert_eq!(answer(extra).await, json!({"outcome": {"outcome": "cancelled"}}));
        assert_eq!(f.permissions().pending_count(), MAX_PENDING_PER_SESSION);
        f.permissions().cancel_all(ResolvedBy::Cancel);
        for task in held {
            assert_eq!(answer(task).await, json!({"outcome": {"outcome": "cancelled"}}));
        }
    }

    /// Issue #27, finding 9: 16 options are a request; 17 are answered `cancelled` at once and
    /// published nowhere (5000 made 5000 buttons on every client and a link per target each).
    #[tokio::test]
    async fn a_request_with_more_than_16_options_is_cancelled_unpublished() {
        let f = fixture(Policy::FirstResponder, None);
        let many: Vec<String> = (0..=MAX_OPTIONS_PER_REQUEST).map(|i| format!("k{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let refused = f.raise(params("/ws/a", &many));
        assert_eq!(answer(refused).await, json!({"outcome": {"outcome": "cancelled"}}));
        assert_eq!((f.host.kinds(), f.permissions().pending_count()), (vec![], 0));
        let _held = f.raise(params("/ws/a", &many[..MAX_OPTIONS_PER_REQUEST]));
        f.until_pending(1).await;
        let published = f.host.last(EventKind::PermissionRequest);
        assert_eq!(published["options"].as_array().map(Vec::len), Some(MAX_OPTIONS_PER_REQUEST));
        f.permissions().cancel_all(ResolvedBy::Cancel);
    }

    /// What a link's page shows is the pending request with its tool call laid over what the agent
    /// announced (the command may be there only); a decided request has none.
    #[tokio::test]
    async fn a_pending_request_is_read_with_its_announced_tool_call() {
        let f = fixture(Policy::FirstResponder, None);
        lock(&f.host.announced)
            .insert("c1".into(), json!({"rawInput": {"command": "make all"}, "title": "Old"}));
        let (task, id) = f.raised(params("/ws/a", &["allow_once"])).await;
        let data = f.permissions().pending_request(&id).expect("pending");
        assert_eq!(data["requestId"], id.as_str());
        assert_eq!(data["toolCall"]["rawInput"]["command"], "make all", "{data}");
        assert_eq!(data["toolCall"]["title"], "Write", "the request's own fields win");
        assert_eq!(f.permissions().pending_request("nope"), None);
        f.permissions().cast(&id, None, true, &vote("opt-allow_once", false)).expect("vote");
        answer(task).await;
        assert_eq!(f.permissions().pending_request(&id), None, "decided");
    }

    #[tokio::test]
    async fn a_request_after_the_session_ended_is_cancelled_at_once() {
        let f = fixture(Policy::FirstResponder, None);
        let before = f.raise(params("/ws/a", &["allow_once"]));
        f.until_pending(1).await;
        f.permissions().cancel_all(ResolvedBy::SessionClosed);
        assert_eq!(answer(before).await, json!({"outcome": {"outcome": "cancelled"}}));
        let after = f.raise(params("/ws/a", &["allow_once"]));
        assert_eq!(answer(after).await, json!({"outcome": {"outcome": "cancelled"}}));
        assert_eq!(f.permissions().pending_count(), 0);
    }

    #[tokio::test]
    async fn a_session_cancel_does_not_refuse_later_requests() {
        let f = fixture(Policy::FirstResponder, None);
        f.permissions().cancel_all(ResolvedBy::Cancel);
        let _later = f.raise(params("/ws/a", &["allow_once"]));
        f.until_pending(1).await;
    }

    #[tokio::test]
    async fn a_remembered_decision_answers_identical_pending_requests() {
        let f = fixture(Policy::FirstResponder, None);
        let kinds = ["allow_once", "allow_always", "reject_once"];
        let first = f.raise(params("/ws/a", &kinds));
        let twin = f.raise(params("/ws/a", &kinds));
        let other = f.raise(params("/ws/b", &kinds));
        f.until_pending(3).await;
        let first_id = f.pending_ids().into_iter().next().expect("first");
        f.permissions().cast(&first_id, None, true, &vote("opt-allow_always", false)).expect("vote");
        let rules = f.permissions().list_rules();
        assert_eq!(rules.len(), 1, "allow_always is remembered: {rules:?}");
        let allowed = json!({"outcome": {"outcome": "selected", "optionId": "opt-allow_once"}});
        let (a, b) = (answer(first).await, answer(twin).await);
        // Which of the two twins was voted on depends on task order; one got the vote, one the rule.
        let always = json!({"outcome": {"outcome": "selected", "optionId": "opt-allow_always"}});
        assert!([(&a, &b), (&b, &a)].contains(&(&always, &allowed)), "{a} / {b}");
        assert_eq!(f.permissions().pending_count(), 1, "the other path still waits");
        let audit = f.permissions().audit();
        assert_eq!(audit[1]["resolvedBy"], "rule");
        assert_eq!(audit[1]["ruleId"], rules[0]["ruleId"]);
        f.permissions().cancel_all(ResolvedBy::Cancel);
        assert_eq!(answer(other).await, json!({"outcome": {"outcome": "cancelled"}}));
    }

    /// The store's audit knows a waiting request as pending and a decided one by its outcome (what
    /// `GET /audit?outcome=` filters on, and what marks requests abandoned after a crash).
    #[tokio::test]
    async fn the_store_records_a_request_as_pending_then_by_its_outcome() {
        use crate::store::{AuditOutcome, AuditQuery};
        let f = fixture(Policy::FirstResponder, None);
        let count = |outcome| {
            let q = AuditQuery { outcome: Some(outcome), limit: 10, ..AuditQuery::default() };
            f.mediator.store.query_audit(&q).expect("query").entries.len()
        };
        let task = f.raise(params("/ws/a", &["allow_once", "reject_once"]));
        f.until_pending(1).await;
        assert_eq!((count(AuditOutcome::Pending), count(AuditOutcome::Selected)), (1, 0));
        let id = f.pending_ids().into_iter().next().expect("pending");
        f.permissions().cast(&id, None, true, &vote("opt-allow_once", false)).expect("vote");
        answer(task).await;
        assert_eq!((count(AuditOutcome::Pending), count(AuditOutcome::Selected)), (0, 1));
    }

    /// `"remember": "workspace"` makes the remembered rule a workspace rule, not the session's,
    /// once it is on disk; announced (the daemon announces to every session of the workspace, this
    /// fixture's announcement does nothing, so the test tells the session), it answers the
    /// identical request already waiting.
    #[tokio::test]
    async fn a_decision_remembered_for_the_workspace_becomes_a_workspace_rule() {
        let f = fixture(Policy::FirstResponder, None);
        let kinds = ["allow_once", "allow_always", "reject_once"];
        let (first, twin) = (f.raise(params("/ws/a", &kinds)), f.raise(params("/ws/a", &kinds)));
        f.until_pending(2).await;
        let id = f.pending_ids().into_iter().next().expect("first");
        let remembered: Vote = Pick::Outcome {
            choice: Choice::Option("opt-allow_always".into()),
            remember: Remember::Workspace,
        }
        .into();
        let written = f
            .permissions()
            .vote(&ballot(&id, None, true, &remembered))
            .expect("vote")
            .expect("a rule on its way to the disk");
        written.outcome().await.expect("on disk");
        assert_eq!(f.permissions().list_rules(), Vec::<Value>::new(), "not a session rule");
        f.permissions().workspace_rules_changed();
        let workspace = f.mediator.workspace_rules.list();
        assert_eq!(workspace.len(), 1, "{workspace:?}");
        assert_eq!(f.host.last(EventKind::PolicyUpdated)["workspaceRules"], json!(workspace));
        let (a, b) = (answer(first).await, answer(twin).await);
        let outcomes = [&a["outcome"]["optionId"], &b["outcome"]["optionId"]];
        assert!(
            outcomes.contains(&&json!("opt-allow_always")) && outcomes.contains(&&json!("opt-allow_once")),
            "{a} / {b}"
        );
    }

    /// A workspace rule added while a request waits (from another session, or the HTTP route):
    /// the session announces the new rules and the rule answers the request.
    #[tokio::test]
    async fn a_workspace_rule_added_later_is_announced_and_answers_a_waiting_request() {
        let f = fixture(Policy::FirstResponder, None);
        let task = f.raise(params("/ws/src/a.txt", &["allow_once", "reject_once"]));
        f.until_pending(1).await;
        let added = f
            .mediator
            .workspace_rules
            .add(rule(json!({"effect": "allow", "kinds": ["edit"], "paths": ["src/**"]})), "s2")
            .await
            .expect("rule");
        assert_eq!(f.permissions().pending_count(), 1, "nothing happens until the session is told");
        f.permissions().workspace_rules_changed();
        assert_eq!(answer(task).await["outcome"]["optionId"], "opt-allow_once");
        let announced = f.host.last(EventKind::PolicyUpdated);
        assert_eq!(announced["workspaceRules"], json!([added.clone()]));
        assert_eq!(announced["rules"], json!([]), "the session's own rules are unchanged");
        let audit = f.permissions().audit();
        assert_eq!((&audit[0]["resolvedBy"], &audit[0]["ruleId"]), (&json!("rule"), &added["ruleId"]));
        // A closed session is not told any more.
        f.permissions().cancel_all(ResolvedBy::SessionClosed);
        let before = f.host.kinds().len();
        f.permissions().workspace_rules_changed();
        assert_eq!(f.host.kinds().len(), before);
    }

    /// Issue #16, item 6: refusal events go out at most once per (request, voter), however often
    /// the voter repeats itself, and stop for good past `MAX_NOTICED_PER_REQUEST` voters; every
    /// refused vote still gets its error.
    #[tokio::test]
    async fn refusal_events_are_published_once_per_request_and_voter() {
        let f = fixture(Policy::Designated, None);
        f.add_voters(&["alice", "bob"]);
        *lock(&f.host.originator) = Some("alice".into());
        let (task, id) = f.raised(params("/ws/a", &["allow_once", "reject_once"])).await;
        let allow = vote("opt-allow_once", false);
        for _ in 0..5 {
            let refused = f.permissions().cast(&id, Some("bob"), false, &allow);
            assert_eq!(refused, Err(VoteError::Forbidden(ForbidReason::DesignatedMismatch)));
            let anonymous = f.permissions().cast(&id, None, false, &allow);
            assert_eq!(anonymous, Err(VoteError::Forbidden(ForbidReason::DesignatedMismatch)));
        }
        f.permissions().cast(&id, Some("alice"), false, &allow).expect("the originator decides");
        answer(task).await;
        for _ in 0..5 {
            for voter in [Some("alice"), Some("bob"), None] {
                let late = f.permissions().cast(&id, voter, false, &allow);
                assert!(matches!(late, Err(VoteError::AlreadyResolved { .. })), "{late:?}");
            }
        }
        let count = |kind| f.host.kinds().into_iter().filter(|k| *k == kind).count();
        assert_eq!(count(EventKind::PermissionForbidden), 2, "bob once, the anonymous voter once");
        assert_eq!(count(EventKind::PermissionAlreadyResolved), 3, "alice, bob, the anonymous voter");
        // Past the bound, a new voter's refusal publishes nothing.
        let many: Vec<String> = (0..MAX_NOTICED_PER_REQUEST).map(|i| format!("voter-{i}")).collect();
        for voter in &many {
            let _ = f.permissions().cast(&id, Some(voter), false, &allow);
        }
        assert_eq!(count(EventKind::PermissionAlreadyResolved), MAX_NOTICED_PER_REQUEST);
    }

    #[tokio::test]
    async fn a_request_is_published_before_its_resolution_and_a_late_vote_learns_the_outcome() {
        let f = fixture(Policy::FirstResponder, None);
        f.add_voters(&["alice", "bob"]);
        let (task, id) = f.raised(params("/ws/a", &["allow_once", "reject_once"])).await;
        f.permissions().cast(&id, Some("alice"), false, &vote("opt-allow_once", false)).expect("vote");
        assert_eq!(answer(task).await["outcome"]["optionId"], "opt-allow_once");
        let late = f.permissions().cast(&id, Some("bob"), false, &vote("opt-reject_once", false));
        assert_eq!(late, Err(VoteError::AlreadyResolved { resolved_option_id: "opt-allow_once".into() }));
        assert_eq!(
            f.host.kinds(),
            [
                EventKind::PermissionRequest,
                EventKind::PermissionResolved,
                EventKind::PermissionAlreadyResolved
            ]
        );
        let resolved = f.host.last(EventKind::PermissionResolved);
        assert_eq!(
            (resolved["voterClientId"].clone(), resolved["resolvedBy"].clone()),
            (json!("alice"), json!("vote"))
        );
        assert_eq!(f.host.last(EventKind::PermissionAlreadyResolved)["clientId"], "bob");
        let text = f.metrics.render(&crate::metrics::Snapshot::default());
        assert!(
            text.contains(
                r#"mediatord_permission_decisions_total{policy="first-responder",resolved_by="vote"} 1"#
            ),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_request_is_cancelled_when_its_time_is_up() {
        let timeout = Duration::from_secs(300);
        let f = fixture(Policy::FirstResponder, Some(timeout));
        let before = now_ms();
        let task = f.raise(params("/ws/a", &["allow_once"]));
        f.until_pending(1).await;
        let after = now_ms();
        // Wall-clock ms (the paused clock is tokio's): issued between `before` and `after`.
        let expires = f.permissions().list_pending()[0]["expiresAt"].as_u64().expect("expiresAt");
        assert!((before + 300_000..=after + 300_000).contains(&expires), "{before}..{after}: {expires}");
        // The paused clock jumps to the next timer (the request's deadline) once every task idles.
        let answered = tokio::time::timeout(timeout * 2, task).await.expect("answered").expect("task");
        assert_eq!(answered, json!({"outcome": {"outcome": "cancelled"}}));
        let resolved = f.host.last(EventKind::PermissionResolved);
        assert_eq!(resolved["resolvedBy"], "timeout");
        assert_eq!(f.permissions().pending_count(), 0);
    }

    #[tokio::test]
    async fn consensus_counts_only_the_voters_registered_when_the_request_was_raised() {
        let f = fixture(Policy::Consensus, None);
        f.add_voters(&["alice", "bob", "carol"]);
        let task = f.raise(params("/ws/a", &["allow_once", "reject_once"]));
        f.until_pending(1).await;
        f.add_voters(&["dave"]);
        let id = f.pending_ids().remove(0);
        let choice = vote("opt-allow_once", false);
        assert_eq!(
            f.permissions().cast(&id, Some("dave"), true, &choice),
            Err(VoteError::Forbidden(ForbidReason::DesignatedMismatch))
        );
        assert_eq!(f.host.last(EventKind::PermissionForbidden)["clientId"], "dave");
        f.permissions().cast(&id, Some("alice"), false, &choice).expect("partial");
        assert_eq!(f.host.last(EventKind::PermissionPartialVote)["votesNeeded"], 2);
        f.permissions().cast(&id, Some("carol"), false, &choice).expect("decides");
        assert_eq!(answer(task).await["outcome"]["optionId"], "opt-allow_once");
        let audit = f.permissions().audit();
        assert_eq!(audit[0]["votersAtIssue"], json!(["alice", "bob", "carol"]));
        let ballots = audit[0]["ballots"].as_array().expect("ballots");
        let said: Vec<_> = ballots
            .iter()
            .map(|b| (b["clientId"].clone(), b["loopback"].clone(), b["counted"].clone()))
            .collect();
        assert_eq!(
            said,
            [
                (json!("dave"), json!(true), json!(false)),
                (json!("alice"), json!(false), json!(true)),
                (json!("carol"), json!(false), json!(true))
            ]
        );
        assert!(
            ballots
                .iter()
                .all(|b| b["optionId"] == "opt-allow_once" && b["at"].as_u64().is_some_and(|t| t > 0))
        );
    }

    /// A withdrawn ballot no longer counts towards the quorum and is kept, marked, for the audit;
    /// withdrawals are ballots too, bounded like them; an unknown request has nothing to withdraw.
    #[tokio::test]
    async fn a_withdrawn_ballot_stops_counting_and_is_audited() {
        let f = fixture(Policy::Consensus, None);
        f.add_voters(&["alice", "bob", "carol"]);
        let (task, id) = f.raised(params("/ws/a", &["allow_once", "reject_once"])).await;
        let choice = vote("opt-allow_once", false);
        f.permissions().cast(&id, Some("alice"), false, &choice).expect("partial");
        assert!(f.permissions().withdraw_ballot(&id, "alice", "alice", Via::Acp), "pending: withdrawn");
        assert!(!f.permissions().withdraw_ballot("no-such-request", "alice", "alice", Via::Acp));
        f.permissions().cast(&id, Some("carol"), false, &choice).expect("partial again");
        assert_eq!(f.host.last(EventKind::PermissionPartialVote)["votesReceived"], 1, "alice's vote is gone");
        for _ in 0..MAX_BALLOTS_PER_REQUEST {
            assert!(f.permissions().withdraw_ballot(&id, "bob", "bob", Via::Acp));
        }
        f.permissions().cast(&id, Some("bob"), false, &choice).expect("decides");
        assert_eq!(answer(task).await["outcome"]["optionId"], "opt-allow_once");
        let ballots = f.permissions().audit()[0]["ballots"].as_array().cloned().expect("ballots");
        assert_eq!(ballots.len(), MAX_BALLOTS_PER_REQUEST, "bounded");
        let said = |b: &Value| {
            (b["clientId"].clone(), b["withdrawn"].clone(), b["hadVoted"].clone(), b["counted"].clone())
        };
        assert_eq!(said(&ballots[1]), (json!("alice"), json!(true), json!(true), json!(false)));
        assert_eq!(ballots[1]["via"], "acp");
        assert_eq!(said(&ballots[3]), (json!("bob"), json!(true), json!(false), json!(false)));
    }

    /// What a log line shows of a mediator: its settings and workspace, and the session it serves.
    #[test]
    fn debug_output_names_the_settings_and_the_session() {
        let f = fixture(Policy::Consensus, Some(Duration::from_secs(5)));
        let mediator = format!("{:?}", f.mediator);
        assert!(
            mediator.starts_with("Mediator") && mediator.contains("Consensus") && mediator.contains(WS),
            "{mediator}"
        );
        assert_eq!(format!("{:?}", f.permissions()), r#"BoundMediator { session_id: "s1" }"#);
    }

    /// A paired device's vote carries its name into the ballot and, when it decides, the entry;
    /// a vote by anyone else carries none.
    #[tokio::test]
    async fn a_devices_vote_is_audited_with_its_name() {
        let f = fixture(Policy::Consensus, None);
        f.add_voters(&["dev-1", "bob"]);
        let (task, id) = f.raised(params("/ws/a", &["allow_once"])).await;
        let allow = vote("opt-allow_once", false);
        f.permissions().cast(&id, Some("bob"), true, &allow).expect("bob");
        f.permissions()
            .vote(&Ballot { device_name: Some("Ada's phone"), ..ballot(&id, Some("dev-1"), true, &allow) })
            .expect("dev");
        answer(task).await;
        let entry = f.permissions().audit().remove(0);
        assert_eq!(entry["ballots"][0].get("deviceName"), None, "bob is no device");
        assert_eq!(entry["ballots"][1]["deviceName"], "Ada's phone");
        assert_eq!(
            (entry["voterClientId"].clone(), entry["voterDeviceName"].clone()),
            (json!("dev-1"), json!("Ada's phone"))
        );
    }

    /// A vote says how it arrived (`via`) on its ballot and on `permission_resolved`; a request is
    /// pending until decided.
    #[tokio::test]
    async fn a_vote_by_link_says_so_and_ends_the_pending_request() {
        let f = fixture(Policy::FirstResponder, None);
        let (task, id) = f.raised(params("/ws/a", &["allow_once"])).await;
        assert!(f.permissions().is_pending(&id) && !f.permissions().is_pending("nope"));
        let link = vote("opt-allow_once", false);
        f.permissions().vote(&Ballot { via: Via::Link, ..ballot(&id, None, true, &link) }).expect("vote");
        answer(task).await;
        assert!(!f.permissions().is_pending(&id), "decided");
        assert_eq!(f.host.last(EventKind::PermissionResolved)["via"], "link");
        assert_eq!(f.permissions().audit()[0]["ballots"][0]["via"], "link");
        assert_eq!(Via::Rest.as_str(), "rest");
    }

    #[tokio::test]
    async fn an_untimed_request_has_no_expiry() {
        let f = fixture(Policy::FirstResponder, None);
        let _task = f.raise(params("/ws/a", &["allow_once"]));
        f.until_pending(1).await;
        assert_eq!(f.permissions().list_pending()[0].get("expiresAt"), None);
    }

    /// Late votes are answered from the last `RESOLVED_RING` decisions, and the audit keeps the last
    /// `AUDIT_RING`: one decision more and the oldest is forgotten by both, the next still known.
    #[tokio::test]
    async fn the_resolved_record_and_the_audit_keep_the_last_512_decisions() {
        assert_eq!(RESOLVED_RING, AUDIT_RING, "one loop below fills both");
        let f = fixture(Policy::FirstResponder, None);
        let mut decided = Vec::new();
        while decided.len() <= RESOLVED_RING {
            let batch = (RESOLVED_RING + 1 - decided.len()).min(MAX_PENDING_PER_SESSION);
            let tasks: Vec<_> = (0..batch).map(|_| f.raise(params("/ws/a", &["allow_once"]))).collect();
            f.until_pending(batch).await;
            decided.extend(f.pending_ids());
            f.permissions().cancel_all(ResolvedBy::Cancel);
            for task in tasks {
                answer(task).await;
            }
        }
        let late = vote("opt-allow_once", false);
        let (oldest, kept, newest) = (&decided[0], &decided[1], &decided[RESOLVED_RING]);
        assert_eq!(f.permissions().cast(oldest, None, true, &late), Err(VoteError::NotFound));
        assert!(!f.permissions().knows(oldest));
        for id in [kept, newest] {
            assert!(f.permissions().knows(id));
            assert_eq!(
                f.permissions().cast(id, None, true, &late),
                Err(VoteError::AlreadyResolved { resolved_option_id: CANCEL_OPTION_ID.into() })
            );
        }
        let audit = f.permissions().audit();
        assert_eq!(audit.len(), AUDIT_RING);
        assert_eq!(audit[0]["requestId"], kept.as_str());
        assert_eq!(audit[AUDIT_RING - 1]["requestId"], newest.as_str());
    }

    /// An audit entry keeps the first `MAX_BALLOTS_PER_REQUEST` ballots: the deciding one, arriving
    /// after as many refused ones, is not among them.
    #[tokio::test]
    async fn an_audit_entry_keeps_the_first_64_ballots() {
        let f = fixture(Policy::Designated, None);
        let refused: Vec<String> = (0..MAX_BALLOTS_PER_REQUEST).map(|i| format!("voter-{i}")).collect();
        f.add_voters(&refused.iter().map(String::as_str).collect::<Vec<_>>());
        f.add_voters(&["alice"]);
        *lock(&f.host.originator) = Some("alice".into());
        let (task, id) = f.raised(params("/ws/a", &["allow_once"])).await;
        let allow = vote("opt-allow_once", false);
        for voter in &refused {
            let refusal = f.permissions().cast(&id, Some(voter), false, &allow);
            assert_eq!(refusal, Err(VoteError::Forbidden(ForbidReason::DesignatedMismatch)));
        }
        f.permissions().cast(&id, Some("alice"), false, &allow).expect("the originator decides");
        assert_eq!(answer(task).await["outcome"]["optionId"], "opt-allow_once");
        let ballots = f.permissions().audit()[0]["ballots"].as_array().cloned().expect("ballots");
        let voters: Vec<&str> = ballots.iter().filter_map(|b| b["clientId"].as_str()).collect();
        assert_eq!(voters, refused.iter().map(String::as_str).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn removing_a_rule_keeps_the_others_and_an_unknown_id_is_not_found() {
        let f = fixture(Policy::FirstResponder, None);
        let first =
            f.permissions().add_rule(rule(json!({"effect": "allow", "kinds": ["read"]}))).expect("first");
        let second =
            f.permissions().add_rule(rule(json!({"effect": "deny", "kinds": ["edit"]}))).expect("second");
        let id = |r: &Value| r["ruleId"].as_str().map(str::to_owned).expect("ruleId");
        f.permissions().remove_rule(&id(&first)).expect("removed");
        assert_eq!(f.permissions().list_rules(), std::slice::from_ref(&second));
        assert_eq!(f.host.last(EventKind::PolicyUpdated)["rules"], json!([second]));
        let published = f.host.kinds().len();
        assert_eq!(f.permissions().remove_rule(&id(&first)), Err(RuleError::NotFound));
        assert_eq!(f.host.kinds().len(), published, "a refused removal publishes nothing");
        assert_eq!(f.permissions().list_rules().len(), 1);
    }

    #[tokio::test]
    async fn the_rule_cap_refuses_the_next_rule_and_a_remembered_decision_adds_none() {
        let f = fixture(Policy::FirstResponder, None);
        for i in 0..rules::MAX_RULES_PER_SESSION {
            let added =
                f.permissions().add_rule(rule(json!({"effect": "allow", "commands": [format!("cmd-{i}")]})));
            assert!(added.is_ok(), "rule {i}: {added:?}");
        }
        let over = f.permissions().add_rule(rule(json!({"effect": "deny", "kinds": ["edit"]})));
        assert_eq!(over, Err(RuleError::Invalid("at most 256 rules per session".into())));
        let (task, id) = f.raised(params("/ws/a", &["allow_once", "allow_always"])).await;
        f.permissions().cast(&id, None, true, &vote("opt-allow_always", false)).expect("vote");
        assert_eq!(answer(task).await["outcome"]["optionId"], "opt-allow_always");
        assert_eq!(f.permissions().list_rules().len(), rules::MAX_RULES_PER_SESSION);
    }

    #[tokio::test]
    async fn the_decision_shorthand_picks_the_once_option_of_its_kind_or_names_the_missing_one() {
        let f = fixture(Policy::FirstResponder, None);
        let (_task, id) = f.raised(params("/ws/a", &["allow_always", "reject_always"])).await;
        for (effect, looked_for) in [(Effect::Allow, "allow_once"), (Effect::Deny, "reject_once")] {
            assert_eq!(
                f.permissions().cast(
                    &id,
                    None,
                    true,
                    &Pick::Decision { effect, remember: Remember::No }.into()
                ),
                Err(VoteError::InvalidOption { request_id: id.clone(), option_id: looked_for.into() })
            );
        }
        f.permissions().cancel_all(ResolvedBy::Cancel);

        let (task, id) = f.raised(params("/ws/a", &["allow_once", "reject_once"])).await;
        f.permissions()
            .cast(
                &id,
                None,
                true,
                &Pick::Decision { effect: Effect::Deny, remember: Remember::Session }.into(),
            )
            .expect("vote");
        assert_eq!(answer(task).await["outcome"]["optionId"], "opt-reject_once");
        let rules = f.permissions().list_rules();
        assert_eq!(
            (rules.len(), rules[0]["effect"].clone()),
            (1, json!("deny")),
            "-session remembers: {rules:?}"
        );
    }

    #[tokio::test]
    async fn a_vote_is_checked_for_the_request_then_the_client_then_the_option() {
        let f = fixture(Policy::FirstResponder, None);
        f.add_voters(&["alice"]);
        let choice = vote("opt-allow_once", false);
        assert_eq!(f.permissions().cast("nope", Some("stranger"), true, &choice), Err(VoteError::NotFound));
        let (_task, id) = f.raised(params("/ws/a", &["allow_once"])).await;
        let bad = vote("opt-reject_once", false);
        assert_eq!(f.permissions().cast(&id, Some("stranger"), true, &bad), Err(VoteError::UnknownClient));
        assert_eq!(
            f.permissions().cast(&id, Some("alice"), true, &bad),
            Err(VoteError::InvalidOption { request_id: id.clone(), option_id: "opt-reject_once".into() })
        );
        let cancel_id = vote(CANCEL_OPTION_ID, false);
        assert!(matches!(
            f.permissions().cast(&id, Some("alice"), true, &cancel_id),
            Err(VoteError::InvalidOption { .. })
        ));
        assert_eq!(f.permissions().pending_count(), 1, "refused votes leave the request pending");
    }

    /// Qwen Code's `ask_user_question`, as it sends it (`toolCall._meta`).
    fn qwen_question() -> Value {
        json!({
            "sessionId": "s1",
            "toolCall": {
                "toolCallId": "q1", "title": "Ask user 1 question", "kind": "think", "status": "pending",
                "_meta": {"toolName": "ask_user_question", "qwenInteractionKind": "user_question",
                    "qwenQuestions": [{"question": "Which library?", "header": "Library", "multiSelect": false,
                        "options": [{"label": "chrono", "description": "old"}, {"label": "jiff", "description": "new"}]}]},
            },
            "options": [
                {"optionId": "proceed_once", "name": "Submit", "kind": "allow_once"},
                {"optionId": "cancel", "name": "Cancel", "kind": "reject_once"},
            ],
        })
    }

    fn form_elicitation() -> Value {
        json!({
            "sessionId": "s1", "mode": "form", "message": "Deploy where?",
            "requestedSchema": {"type": "object", "required": ["region", "replicas"], "properties": {
                "region": {"type": "string", "enum": ["eu", "us"]},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 9},
                "token": {"type": "string", "title": "API token"},
            }},
        })
    }

    fn url_elicitation(id: &str) -> Value {
        json!({"sessionId": "s1", "mode": "url", "elicitationId": id, "url": "https://login.example/x", "message": "Sign in"})
    }

    fn submit(answers: Value) -> Vote {
        Vote {
            pick: Pick::Outcome { choice: Choice::Option("proceed_once".into()), remember: Remember::No },
            answers: answers.as_object().cloned(),
        }
    }

    fn accept(answers: Value) -> Vote {
        Vote {
            pick: Pick::Decision { effect: Effect::Allow, remember: Remember::No },
            answers: answers.as_object().cloned(),
        }
    }

    /// Issue #43: a qwen question is a pending request like any other; the vote that submits it
    /// carries the answers to the agent (as qwen reads them), to `permission_resolved` and to the
    /// audit, which names who answered.
    #[tokio::test]
    async fn a_qwen_question_is_answered_by_one_vote_carrying_its_answers() {
        let f = fixture(Policy::FirstResponder, None);
        f.add_voters(&["alice"]);
        let task = f.raise(qwen_question());
        f.until_pending(1).await;
        let asked = f.host.last(EventKind::PermissionRequest);
        assert_eq!(asked["question"]["form"], "user_question");
        assert_eq!(asked["question"]["fields"][0]["key"], "0");
        assert_eq!(
            asked["toolCall"]["_meta"]["qwenInteractionKind"], "user_question",
            "qwen's own form, untouched"
        );
        let id = f.pending_ids().remove(0);
        f.permissions()
            .vote(&Ballot {
                device_name: Some("Ada's phone"),
                ..ballot(&id, Some("alice"), false, &submit(json!({"0": "jiff"})))
            })
            .expect("answered");
        assert_eq!(
            answer(task).await,
            json!({"outcome": {"outcome": "selected", "optionId": "proceed_once"}, "answers": {"0": "jiff"}})
        );
        let resolved = f.host.last(EventKind::PermissionResolved);
        assert_eq!(
            (resolved["answers"].clone(), resolved["voterClientId"].clone()),
            (json!({"0": "jiff"}), json!("alice"))
        );
        let entry = f.permissions().audit().remove(0);
        assert_eq!(entry["answers"], json!({"0": "jiff"}));
        assert_eq!(entry["question"]["fields"][0]["title"], "Library");
        assert_eq!(
            (entry["voterDeviceName"].clone(), entry["remembered"].clone()),
            (json!("Ada's phone"), Value::Null)
        );
        let late = f.permissions().cast(&id, Some("alice"), false, &submit(json!({"0": "chrono"})));
        assert_eq!(late, Err(VoteError::AlreadyResolved { resolved_option_id: "proceed_once".into() }));
    }

    /// The ACP door asks a pending question as `elicitation/create`: the mediator hands it the
    /// question a request asks, and nothing for a plain request or one no longer pending.
    #[tokio::test]
    async fn a_pending_request_hands_out_its_question_and_a_plain_one_none() {
        let f = fixture(Policy::FirstResponder, None);
        let _asked = f.raise(qwen_question());
        f.until_pending(1).await;
        let _plain = f.raise(params("/ws/a", &["allow_once"]));
        f.until_pending(2).await;
        let ids = f.pending_ids();
        let question = f.permissions().question(&ids[0]).map(|q| q.wire()["fields"][0]["title"].clone());
        assert_eq!(question, Some(json!("Library")));
        assert!(f.permissions().question(&ids[1]).is_none(), "a plain request asks nothing");
        assert!(f.permissions().question("no-such-request").is_none());
    }

    /// A ballot the policy does not count is refused as such, before its answers are read: a
    /// client that may not answer is told so, not that its answers are wrong.
    #[tokio::test]
    async fn a_forbidden_answer_is_refused_for_who_sent_it_not_for_what_it_says() {
        let f = fixture(Policy::Designated, None);
        f.add_voters(&["alice", "bob"]);
        *lock(&f.host.originator) = Some("alice".into());
        let (_task, id) = f.raised(qwen_question()).await;
        let refused = f.permissions().cast(&id, Some("bob"), false, &submit(json!({})));
        assert_eq!(refused, Err(VoteError::Forbidden(ForbidReason::DesignatedMismatch)));
        let wrong = f.permissions().cast(&id, Some("alice"), false, &submit(json!({})));
        assert!(matches!(wrong, Err(VoteError::InvalidAnswer(_))), "{wrong:?}");
    }

    /// A request naming a path outside the workspace says which, for every client to show; one
    /// inside says nothing of it.
    #[tokio::test]
    async fn a_request_outside_the_workspace_names_its_paths() {
        let f = fixture(Policy::FirstResponder, None);
        let _inside = f.raise(params("/ws/a", &["allow_once"]));
        f.until_pending(1).await;
        let _outside = f.raise(params("/ws/../etc/passwd", &["allow_once"]));
        f.until_pending(2).await;
        let pending = f.permissions().list_pending();
        assert_eq!(pending[0].get("outsideWorkspace"), None);
        assert_eq!(pending[1]["outsideWorkspace"], json!(["/etc/passwd"]));
    }

    /// Issue #43: answers the question does not take are refused naming the field, and the question
    /// stays pending as it was (nothing published); declining needs no answers.
    #[tokio::test]
    async fn a_wrong_answer_is_refused_and_the_question_stays_pending() {
        let f = fixture(Policy::FirstResponder, None);
        let (task, id) = f.raised(qwen_question()).await;
        let published = f.host.kinds().len();
        let missing = f.permissions().cast(&id, None, false, &submit(json!({})));
        assert_eq!(
            missing,
            Err(VoteError::InvalidAnswer(AnswerError {
                field: "0".into(),
                reason: "an answer is required".into()
            }))
        );
        let unknown = f.permissions().cast(&id, None, false, &submit(json!({"0": "jiff", "9": "x"})));
        assert!(matches!(unknown, Err(VoteError::InvalidAnswer(e)) if e.field == "9"));
        assert!(f.permissions().is_pending(&id));
        assert_eq!(f.host.kinds().len(), published, "a refused answer publishes nothing");
        assert!(f.permissions().audit().is_empty());
        let decline = Vote {
            pick: Pick::Outcome { choice: Choice::Option("cancel".into()), remember: Remember::No },
            answers: None,
        };
        f.permissions().cast(&id, None, false, &decline).expect("declined");
        assert_eq!(answer(task).await, json!({"outcome": {"outcome": "selected", "optionId": "cancel"}}));
        assert_eq!(f.host.last(EventKind::PermissionResolved).get("answers"), None);
    }

    /// Issue #43: no rule answers a question, and no decision on one is remembered, even when the
    /// vote asks or the option says "always".
    #[tokio::test]
    async fn questions_never_fall_under_rules_nor_are_remembered() {
        let f = fixture(Policy::FirstResponder, None);
        f.permissions()
            .add_rule(rule(json!({"effect": "allow", "kinds": ["think", "other"]})))
            .expect("allow");
        f.permissions()
            .add_rule(rule(json!({"effect": "allow", "tools": ["ask_user_question"]})))
            .expect("tool");
        let mut always = qwen_question();
        always["options"] = json!([{"optionId": "yes", "name": "Always", "kind": "allow_always"}]);
        let task = f.raise(always);
        f.until_pending(1).await;
        let elicited = f.elicit(form_elicitation());
        f.until_pending(2).await;
        let ids = f.pending_ids();
        let remember = Vote {
            pick: Pick::Outcome { choice: Choice::Option("yes".into()), remember: Remember::Workspace },
            answers: json!({"0": "jiff"}).as_object().cloned(),
        };
        let cast = f.permissions().vote(&ballot(&ids[0], None, true, &remember));
        assert!(matches!(cast, Ok(None)), "no rule on its way to the disk");
        assert_eq!(answer(task).await["answers"], json!({"0": "jiff"}));
        assert_eq!(f.permissions().list_rules().len(), 2, "nothing remembered");
        assert_eq!(f.permissions().audit()[0]["remembered"], Value::Null);
        f.permissions()
            .cast(&ids[1], None, true, &accept(json!({"region": "eu", "replicas": "2"})))
            .expect("accept");
        let answered =
            tokio::time::timeout(Duration::from_secs(5), elicited).await.expect("in time").expect("task");
        assert_eq!(answered, Ok(json!({"action": "accept", "content": {"region": "eu", "replicas": 2}})));
        assert_eq!(f.permissions().pending_count(), 0);
    }

    /// Issue #43: a question added while a rule would match stays pending when rules change.
    #[tokio::test]
    async fn a_rule_added_later_leaves_a_pending_question_alone() {
        let f = fixture(Policy::FirstResponder, None);
        let _task = f.raise(qwen_question());
        f.until_pending(1).await;
        f.permissions().add_rule(rule(json!({"effect": "deny", "kinds": ["think"]}))).expect("rule");
        f.permissions().workspace_rules_changed();
        assert_eq!(f.permissions().pending_count(), 1);
    }

    /// Issue #43 (`docs/protocol.md#19-questions`): under consensus the first complete answer of a
    /// voter counted at issue decides; a client registered later may not answer.
    #[tokio::test]
    async fn under_consensus_the_first_answer_of_a_voter_at_issue_decides() {
        let f = fixture(Policy::Consensus, None);
        f.add_voters(&["alice", "bob", "carol"]);
        let task = f.raise(qwen_question());
        f.until_pending(1).await;
        f.add_voters(&["dave"]);
        let id = f.pending_ids().remove(0);
        let refused = f.permissions().cast(&id, Some("dave"), true, &submit(json!({"0": "jiff"})));
        assert_eq!(refused, Err(VoteError::Forbidden(ForbidReason::DesignatedMismatch)));
        let wrong = f.permissions().cast(&id, Some("bob"), true, &submit(json!({})));
        assert!(matches!(wrong, Err(VoteError::InvalidAnswer(_))), "an incomplete answer does not count");
        f.permissions().cast(&id, Some("bob"), true, &submit(json!({"0": "chrono"}))).expect("decides alone");
        assert_eq!(answer(task).await["answers"], json!({"0": "chrono"}));
        assert!(!f.host.kinds().contains(&EventKind::PermissionPartialVote));
        let ballots = f.permissions().audit()[0]["ballots"].clone();
        assert_eq!(ballots.as_array().map(Vec::len), Some(2), "dave's refused ballot and bob's: {ballots}");
    }

    /// Issue #43: an elicitation is answered accept (typed content), decline, or cancel (the turn
    /// cancelled, the session's end, a timeout); secrets are redacted in the event and the audit.
    #[tokio::test(start_paused = true)]
    async fn an_elicitation_ends_accepted_declined_or_cancelled() {
        let f = fixture(Policy::FirstResponder, Some(Duration::from_secs(60)));
        let accepted = f.elicit(form_elicitation());
        f.until_pending(1).await;
        let asked = f.host.last(EventKind::PermissionRequest);
        assert_eq!(asked["options"][0]["optionId"], ACCEPT_OPTION_ID);
        assert_eq!(asked["toolCall"]["_meta"]["qwenQuestions"].as_array().map(Vec::len), Some(3));
        let id = f.pending_ids().remove(0);
        let given = json!({"region": "us", "replicas": "3", "token": "sk-123"});
        f.permissions().cast(&id, Some("a"), true, &accept(given)).expect_err("a is no voter");
        f.permissions()
            .cast(&id, None, true, &accept(json!({"region": "us", "replicas": "3", "token": "sk-123"})))
            .expect("accepted");
        assert_eq!(
            accepted.await.expect("task"),
            Ok(json!({"action": "accept", "content": {"region": "us", "replicas": 3, "token": "sk-123"}}))
        );
        let resolved = f.host.last(EventKind::PermissionResolved);
        assert_eq!(resolved["answers"]["token"], crate::permission::question::REDACTED);
        let entry = f.permissions().audit().remove(0);
        assert_eq!(entry["answers"], json!({"region": "us", "replicas": 3, "token": "[redacted]"}));
        assert!(!entry.to_string().contains("sk-123"), "{entry}");

        let declined = f.elicit(form_elicitation());
        f.until_pending(1).await;
        let id = f.pending_ids().remove(0);
        f.permissions()
            .cast(&id, None, true, &Pick::Decision { effect: Effect::Deny, remember: Remember::No }.into())
            .expect("declined");
        assert_eq!(declined.await.expect("task"), Ok(json!({"action": "decline"})));

        let cancelled = f.elicit(form_elicitation());
        f.until_pending(1).await;
        f.permissions().cancel_all(ResolvedBy::Cancel);
        assert_eq!(cancelled.await.expect("task"), Ok(json!({"action": "cancel"})));

        let timed_out = f.elicit(url_elicitation("e9"));
        f.until_pending(1).await;
        assert_eq!(timed_out.await.expect("task"), Ok(json!({"action": "cancel"})));
        assert_eq!(f.host.last(EventKind::PermissionResolved)["resolvedBy"], "timeout");

        f.permissions().cancel_all(ResolvedBy::SessionClosed);
        assert_eq!(
            f.elicit(form_elicitation()).await.expect("task"),
            Ok(json!({"action": "cancel"})),
            "after the end"
        );
        assert_eq!(f.permissions().audit().last().expect("entry")["resolvedBy"], "timeout");
    }

    /// Issue #43: an elicitation the mediator cannot ask is refused and pending nowhere; a
    /// malformed qwen question is answered cancelled.
    #[tokio::test]
    async fn a_question_that_cannot_be_asked_is_refused_and_pending_nowhere() {
        let f = fixture(Policy::FirstResponder, None);
        let nested = json!({"sessionId": "s1", "mode": "form", "message": "m",
            "requestedSchema": {"type": "object", "properties": {"x": {"type": "object"}}}});
        let refused = f.elicit(nested).await.expect("task").expect_err("refused");
        assert!(refused.0.contains("is not a primitive"), "{refused}");
        let mut bad_url = url_elicitation("e1");
        bad_url["url"] = json!("javascript:alert(1)");
        assert!(f.elicit(bad_url).await.expect("task").is_err());
        let mut malformed = qwen_question();
        malformed["toolCall"]["_meta"]["qwenQuestions"] = json!([{"question": {"nested": true}}]);
        assert_eq!(answer(f.raise(malformed)).await, json!({"outcome": {"outcome": "cancelled"}}));
        assert_eq!(
            (f.permissions().pending_count(), f.host.kinds().len()),
            (0, 0),
            "nothing asked, nothing published"
        );
    }

    /// Issue #43: the agent's `elicitation/complete` decides its pending URL elicitation
    /// (`resolvedBy: completed`) and is announced; after a decision it is only announced; an id
    /// this session never saw is not.
    #[tokio::test]
    async fn elicitation_complete_ends_a_pending_url_question_and_is_announced() {
        let f = fixture(Policy::FirstResponder, None);
        let pending = f.elicit(url_elicitation("agent-1"));
        f.until_pending(1).await;
        let id = f.pending_ids().remove(0);
        assert!(f.permissions().elicitation_complete("agent-1"));
        assert_eq!(pending.await.expect("task"), Ok(json!({"action": "accept"})));
        let resolved = f.host.last(EventKind::PermissionResolved);
        assert_eq!(
            (resolved["resolvedBy"].clone(), resolved["requestId"].clone()),
            (json!("completed"), json!(id))
        );
        assert_eq!(f.host.last(EventKind::ElicitationComplete), json!({"requestId": id, "sessionId": "s1"}));

        let voted = f.elicit(url_elicitation("agent-2"));
        f.until_pending(1).await;
        let second = f.pending_ids().remove(0);
        f.permissions().cast(&second, None, true, &accept(json!({}))).expect("opened");
        assert_eq!(voted.await.expect("task"), Ok(json!({"action": "accept"})));
        let before = f.host.kinds().len();
        assert!(f.permissions().elicitation_complete("agent-2"), "decided, still known");
        assert_eq!(f.host.kinds().len(), before + 1, "announced only");
        assert_eq!(f.host.last(EventKind::ElicitationComplete)["requestId"], json!(second));
        assert!(!f.permissions().elicitation_complete("never-asked"));
        assert_eq!(f.host.kinds().len(), before + 1);
        // A form is never completed by the agent.
        let _form = f.elicit(form_elicitation());
        f.until_pending(1).await;
        assert!(!f.permissions().elicitation_complete(""));
        assert_eq!(f.permissions().pending_count(), 1);
        // A URL question pending: a completion naming another elicitation leaves it be.
        let _third = f.elicit(url_elicitation("agent-3"));
        f.until_pending(2).await;
        assert!(!f.permissions().elicitation_complete("never-asked"));
        assert_eq!(f.permissions().pending_count(), 2);
    }

    #[test]
    fn a_vote_carries_a_questions_answers_and_an_acp_elicitation_answer_is_a_vote() {
        let v =
            Vote::parse(&json!({"outcome": {"outcome": "selected", "optionId": "a"}, "answers": {"0": "x"}}))
                .expect("a vote");
        assert_eq!(v.answers, json!({"0": "x"}).as_object().cloned());
        assert_eq!(
            Vote::parse(&json!({"decision": "allow", "answers": ["x"]})),
            None,
            "answers are an object"
        );
        assert_eq!(
            Vote::parse(&json!({"decision": "allow", "answers": null})).map(|v| v.answers),
            Some(None)
        );
        let allow = Pick::Decision { effect: Effect::Allow, remember: Remember::No };
        let table = [
            (
                json!({"action": "accept", "content": {"a": 1}}),
                Some(Vote { pick: allow.clone(), answers: json!({"a": 1}).as_object().cloned() }),
            ),
            (json!({"action": "accept"}), Some(Vote { pick: allow, answers: None })),
            (
                json!({"action": "decline"}),
                Some(Pick::Decision { effect: Effect::Deny, remember: Remember::No }.into()),
            ),
            (
                json!({"action": "cancel"}),
                Some(Pick::Outcome { choice: Choice::Cancel, remember: Remember::No }.into()),
            ),
            (json!({"action": "accept", "content": "x"}), None),
            (json!({"action": "maybe"}), None),
            (json!({}), None),
        ];
        for (result, expected) in table {
            assert_eq!(Vote::from_elicitation(&result), expected, "{result}");
        }
    }
}

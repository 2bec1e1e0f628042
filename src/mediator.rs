//! Permission mediation for one session (SPEC §7, §8): the pending requests, the resolved record and
//! audit rings, the session's rules, and the vote path in the order SPEC §8 fixes.
//!
//! The decision itself is [`crate::policy::decide`]; matching is [`crate::rules::find_match`]. This
//! file is the bookkeeping around them. All state sits behind one `std::sync::Mutex` whose critical
//! sections never await; events are published while it is held so that, for each request,
//! `permission_request` always precedes its `permission_resolved` on the stream (lock order:
//! mediator, then bus; the bus never calls back).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::policy::{Ballot, CANCEL_OPTION_ID, Choice, Decision, Issued, Policy, decide};
use crate::rules::{self, CompiledRule, Effect, RequestFacts};
use crate::session::Session;

/// Pending requests per session; more are answered `cancelled` at once (SPEC §8).
pub const MAX_PENDING_PER_SESSION: usize = 64;
/// Decided requests remembered to answer late votes `permission_already_resolved`.
pub const RESOLVED_RING: usize = 512;
/// Decisions kept for `GET .../permissions?audit=1`.
pub const AUDIT_RING: usize = 512;
/// Ballots kept per request in its audit entry.
const MAX_BALLOTS_PER_REQUEST: usize = 64;

/// What ended a request (the `resolvedBy` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolvedBy {
    Vote,
    Timeout,
    Cancel,
    SessionClosed,
    Rule,
}

impl ResolvedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            ResolvedBy::Vote => "vote",
            ResolvedBy::Timeout => "timeout",
            ResolvedBy::Cancel => "cancel",
            ResolvedBy::SessionClosed => "session_closed",
            ResolvedBy::Rule => "rule",
        }
    }
}

/// Settings captured per request.
#[derive(Debug, Clone)]
pub struct MediatorConfig {
    pub policy: Policy,
    pub quorum: Option<usize>,
    pub timeout: Option<Duration>,
}

struct Pending {
    issued: Issued,
    /// The `permission_request` event data, listed by `GET .../permissions`.
    data: Value,
    options: Vec<Value>,
    facts: RequestFacts,
    votes: BTreeMap<String, Choice>,
    ballots: Vec<Value>,
    issued_at: u64,
    reply: oneshot::Sender<Choice>,
}

struct Resolved {
    request_id: String,
    outcome: Value,
    option_id: String,
}

#[derive(Default)]
struct State {
    pending: HashMap<String, Pending>,
    /// Issue order of pending requests, for listing.
    order: Vec<String>,
    resolved: VecDeque<Resolved>,
    audit: VecDeque<Value>,
    rules: Vec<CompiledRule>,
    /// Set once the session has ended (close, agent death, shutdown): a request the agent sends
    /// after that is answered `cancelled` at once, since nobody is left to vote on it and nothing
    /// would ever cancel it again.
    closed: bool,
}

pub struct Mediator {
    cfg: MediatorConfig,
    workspace: PathBuf,
    state: Mutex<State>,
}

/// A parsed vote body.
#[derive(Debug, Clone)]
pub enum VoteBody {
    Outcome { choice: Choice, remember: bool },
    Decision { effect: Effect, remember: bool },
}

impl VoteBody {
    /// `{outcome:{outcome:"selected",optionId}}`, `{outcome:{outcome:"cancelled"}}` or
    /// `{decision: allow|deny|allow-session|deny-session}`, each optionally with `remember:"session"`.
    pub fn parse(body: &Value) -> Result<VoteBody, ApiError> {
        let invalid = || ApiError::InvalidVote;
        let remember = body.get("remember").and_then(Value::as_str) == Some("session");
        if let Some(decision) = body.get("decision") {
            let (effect, session) = match decision.as_str().ok_or_else(invalid)? {
                "allow" => (Effect::Allow, false),
                "deny" => (Effect::Deny, false),
                "allow-session" => (Effect::Allow, true),
                "deny-session" => (Effect::Deny, true),
                _ => return Err(invalid()),
            };
            return Ok(VoteBody::Decision { effect, remember: remember || session });
        }
        let outcome = body.get("outcome").ok_or_else(invalid)?;
        match outcome.get("outcome").and_then(Value::as_str) {
            Some("selected") => {
                let id = outcome
                    .get("optionId")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .ok_or_else(invalid)?;
                Ok(VoteBody::Outcome { choice: Choice::Option(id.to_owned()), remember })
            }
            Some("cancelled") => Ok(VoteBody::Outcome { choice: Choice::Cancel, remember: false }),
            _ => Err(invalid()),
        }
    }
}

/// The ACP answer for a choice.
pub fn outcome_json(choice: &Choice) -> Value {
    match choice {
        Choice::Option(id) => json!({"outcome": "selected", "optionId": id}),
        Choice::Cancel => json!({"outcome": "cancelled"}),
    }
}

impl Mediator {
    pub fn new(cfg: MediatorConfig, workspace: PathBuf) -> Mediator {
        Mediator { cfg, workspace, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serves the agent's `session/request_permission`; returns its `result` (`{outcome}`).
    pub async fn request(&self, session: &Session, params: Value) -> Value {
        let options: Vec<Value> =
            params.get("options").and_then(Value::as_array).cloned().unwrap_or_default();
        let tool_call = params.get("toolCall").cloned().unwrap_or_else(|| json!({}));
        let cancelled = || json!({"outcome": outcome_json(&Choice::Cancel)});
        if options.iter().any(|o| o.get("optionId").and_then(Value::as_str) == Some(CANCEL_OPTION_ID)) {
            tracing::error!(session_id = %session.id, "the agent offered the reserved option id __cancelled__; answering cancelled");
            return cancelled();
        }
        // The deadline is fixed before the record exists, so nothing can see an unarmed request.
        let deadline = self.cfg.timeout.map(|t| tokio::time::Instant::now() + t);
        let issued_at = crate::now_ms();
        let expires_at = self.cfg.timeout.map(|t| issued_at + t.as_millis() as u64);
        let issued = Issued {
            policy: self.cfg.policy,
            originator: session.current_tag().and_then(|t| t.originator.clone()),
            voters_at_issue: if self.cfg.policy == Policy::Consensus {
                session.client_ids()
            } else {
                Vec::new()
            },
            quorum: self.cfg.quorum,
        };
        let request_id = uuid::Uuid::new_v4().to_string();
        let facts = RequestFacts::from_tool_call(&session.merged_tool_call(&tool_call));
        let mut data = json!({
            "requestId": request_id,
            "sessionId": session.id,
            "toolCall": tool_call,
            "options": options,
            "policy": self.cfg.policy.as_str(),
        });
        if let Some(at) = expires_at {
            data["expiresAt"] = json!(at);
        }
        let (reply, mut rx) = oneshot::channel();
        {
            let mut st = self.lock();
            if st.closed {
                drop(st);
                tracing::debug!(session_id = %session.id, "permission request after the session ended; answering cancelled");
                return cancelled();
            }
            if st.pending.len() >= MAX_PENDING_PER_SESSION {
                drop(st);
                tracing::warn!(session_id = %session.id, "too many pending permission requests; answering cancelled");
                return cancelled();
            }
            session.publish("permission_request", &data);
            let pending = Pending {
                issued,
                data,
                options,
                facts,
                votes: BTreeMap::new(),
                ballots: Vec::new(),
                issued_at,
                reply,
            };
            let by_rule = rules::find_match(&st.rules, &pending.facts, &self.workspace).and_then(|rule| {
                rule_choice(rule.rule.effect, &pending.options)
                    .map(|choice| (choice, rule.rule.rule_id.clone()))
            });
            if let Some((choice, rule_id)) = by_rule {
                let resolution =
                    Resolution { by: ResolvedBy::Rule, voter: None, rule_id: Some(rule_id), remember: false };
                finish(&mut st, session, &self.workspace, &request_id, pending, &choice, resolution);
                return json!({"outcome": outcome_json(&choice)});
            }
            st.order.push(request_id.clone());
            st.pending.insert(request_id.clone(), pending);
        }
        let choice = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, &mut rx).await {
                Ok(answer) => answer.unwrap_or(Choice::Cancel),
                Err(_) => {
                    self.resolve(session, &request_id, Choice::Cancel, ResolvedBy::Timeout);
                    rx.await.unwrap_or(Choice::Cancel)
                }
            },
            None => rx.await.unwrap_or(Choice::Cancel),
        };
        json!({"outcome": outcome_json(&choice)})
    }

    /// Resolves one pending request if it still is; returns whether it was.
    fn resolve(&self, session: &Session, request_id: &str, choice: Choice, by: ResolvedBy) -> bool {
        let mut st = self.lock();
        let Some(pending) = take_pending(&mut st, request_id) else { return false };
        let resolution = Resolution { by, voter: None, rule_id: None, remember: false };
        finish(&mut st, session, &self.workspace, request_id, pending, &choice, resolution);
        true
    }

    /// Cancels every pending request (session cancel, close, agent death, shutdown).
    /// `SessionClosed` means the session is over: later requests are cancelled on arrival.
    pub fn cancel_all(&self, session: &Session, by: ResolvedBy) {
        let mut st = self.lock();
        st.closed |= by == ResolvedBy::SessionClosed;
        let ids = std::mem::take(&mut st.order);
        for id in ids {
            if let Some(pending) = st.pending.remove(&id) {
                let resolution = Resolution { by, voter: None, rule_id: None, remember: false };
                finish(&mut st, session, &self.workspace, &id, pending, &Choice::Cancel, resolution);
            }
        }
    }

    /// Whether this session knows the request (pending or recently resolved).
    pub fn knows(&self, request_id: &str) -> bool {
        let st = self.lock();
        st.pending.contains_key(request_id) || st.resolved.iter().any(|r| r.request_id == request_id)
    }

    pub fn pending_count(&self) -> usize {
        self.lock().pending.len()
    }

    /// The `permission_request` data of each pending request, in issue order.
    pub fn list_pending(&self) -> Vec<Value> {
        let st = self.lock();
        st.order.iter().filter_map(|id| st.pending.get(id)).map(|p| p.data.clone()).collect()
    }

    pub fn audit(&self) -> Vec<Value> {
        self.lock().audit.iter().cloned().collect()
    }

    /// A client's vote, checked in SPEC §8's order from step 3 on (the route did steps 1 and 2).
    pub fn vote(
        &self,
        session: &Session,
        request_id: &str,
        client_id: Option<&str>,
        loopback_peer: bool,
        body: &VoteBody,
    ) -> Result<(), ApiError> {
        let mut st = self.lock();
        let Some(pending) = st.pending.get_mut(request_id) else {
            let resolved = st.resolved.iter().find(|r| r.request_id == request_id);
            return match resolved {
                Some(r) => {
                    let mut data =
                        json!({"requestId": request_id, "sessionId": session.id, "outcome": r.outcome});
                    if let Some(c) = client_id {
                        data["clientId"] = json!(c);
                    }
                    session.publish("permission_already_resolved", &data);
                    Err(ApiError::PermissionAlreadyResolved { resolved_option_id: r.option_id.clone() })
                }
                None => Err(ApiError::PermissionRequestNotFound),
            };
        };
        if let Some(c) = client_id
            && !session.has_client(c)
        {
            return Err(ApiError::InvalidClientId);
        }
        let invalid_option = |option_id: &str| ApiError::InvalidOptionId {
            request_id: request_id.to_owned(),
            option_id: option_id.to_owned(),
        };
        let (choice, remember) = match body {
            VoteBody::Outcome { choice: Choice::Cancel, .. } => (Choice::Cancel, false),
            VoteBody::Outcome { choice: Choice::Option(id), remember } => {
                if id == CANCEL_OPTION_ID || !offered(&pending.options, id) {
                    return Err(invalid_option(id));
                }
                (Choice::Option(id.clone()), *remember)
            }
            VoteBody::Decision { effect, remember } => match rules::pick_shorthand(&pending.options, *effect)
            {
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
        let ballot = Ballot { client_id, loopback_peer, choice: &choice };
        let decision = decide(&pending.issued, &pending.votes, &ballot);
        if pending.ballots.len() < MAX_BALLOTS_PER_REQUEST {
            pending.ballots.push(json!({
                "clientId": client_id,
                "optionId": choice.option_id(),
                "at": crate::now_ms(),
                "loopback": loopback_peer,
                "counted": !matches!(decision, Decision::Forbidden(_)),
            }));
        }
        match decision {
            Decision::Decided(choice) => {
                let Some(pending) = take_pending(&mut st, request_id) else { return Ok(()) };
                let voter = client_id.map(str::to_owned);
                let resolution = Resolution { by: ResolvedBy::Vote, voter, rule_id: None, remember };
                finish(&mut st, session, &self.workspace, request_id, pending, &choice, resolution);
                Ok(())
            }
            Decision::Partial { votes_received, votes_needed, quorum, tallies } => {
                if let Some(voter) = client_id {
                    pending.votes.insert(voter.to_owned(), choice);
                }
                session.publish(
                    "permission_partial_vote",
                    &json!({
                        "requestId": request_id, "sessionId": session.id, "votesReceived": votes_received,
                        "votesNeeded": votes_needed, "quorum": quorum, "optionTallies": tallies,
                    }),
                );
                Ok(())
            }
            Decision::Forbidden(reason) => {
                let mut data =
                    json!({"requestId": request_id, "sessionId": session.id, "reason": reason.as_str()});
                if let Some(c) = client_id {
                    data["clientId"] = json!(c);
                }
                session.publish("permission_forbidden", &data);
                Err(ApiError::PermissionForbidden { reason: reason.as_str() })
            }
        }
    }

    /// Adds a rule, publishes `policy_updated`, and resolves pending requests it now matches.
    pub fn add_rule(&self, session: &Session, rule: CompiledRule) -> Result<Value, ApiError> {
        let mut st = self.lock();
        if st.rules.len() >= rules::MAX_RULES_PER_SESSION {
            return Err(ApiError::InvalidRule(format!(
                "at most {} rules per session",
                rules::MAX_RULES_PER_SESSION
            )));
        }
        let wire = serde_json::to_value(&rule.rule).unwrap_or(Value::Null);
        st.rules.push(rule);
        publish_rules(&st, session);
        apply_rules_to_pending(&mut st, session, &self.workspace);
        Ok(wire)
    }

    pub fn remove_rule(&self, session: &Session, rule_id: &str) -> bool {
        let mut st = self.lock();
        let before = st.rules.len();
        st.rules.retain(|r| r.rule.rule_id != rule_id);
        let removed = st.rules.len() < before;
        if removed {
            publish_rules(&st, session);
        }
        removed
    }

    pub fn list_rules(&self) -> Vec<Value> {
        self.lock().rules.iter().filter_map(|r| serde_json::to_value(&r.rule).ok()).collect()
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
        (Effect::Allow, None) => None,
    }
}

fn take_pending(st: &mut State, request_id: &str) -> Option<Pending> {
    let pending = st.pending.remove(request_id)?;
    st.order.retain(|id| id != request_id);
    Some(pending)
}

fn publish_rules(st: &State, session: &Session) {
    let rules: Vec<Value> = st.rules.iter().filter_map(|r| serde_json::to_value(&r.rule).ok()).collect();
    session.publish("policy_updated", &json!({"sessionId": session.id, "rules": rules}));
}

fn apply_rules_to_pending(st: &mut State, session: &Session, workspace: &std::path::Path) {
    let ids = st.order.clone();
    for id in ids {
        let Some(pending) = st.pending.get(&id) else { continue };
        let Some(rule) = rules::find_match(&st.rules, &pending.facts, workspace) else { continue };
        let Some(choice) = rule_choice(rule.rule.effect, &pending.options) else { continue };
        let rule_id = rule.rule.rule_id.clone();
        if let Some(pending) = take_pending(st, &id) {
            let resolution =
                Resolution { by: ResolvedBy::Rule, voter: None, rule_id: Some(rule_id), remember: false };
            finish(st, session, workspace, &id, pending, &choice, resolution);
        }
    }
}

struct Resolution {
    by: ResolvedBy,
    voter: Option<String>,
    rule_id: Option<String>,
    remember: bool,
}

/// Answers the agent, records the decision, publishes `permission_resolved`, and remembers it as a
/// rule when asked (or when the option's kind is `*_always`).
fn finish(
    st: &mut State,
    session: &Session,
    workspace: &std::path::Path,
    request_id: &str,
    pending: Pending,
    choice: &Choice,
    resolution: Resolution,
) {
    let _ = pending.reply.send(choice.clone());
    let outcome = outcome_json(choice);
    let resolved_at = crate::now_ms();
    if st.resolved.len() >= RESOLVED_RING {
        st.resolved.pop_front();
    }
    st.resolved.push_back(Resolved {
        request_id: request_id.to_owned(),
        outcome: outcome.clone(),
        option_id: choice.option_id().to_owned(),
    });
    let mut data = json!({
        "requestId": request_id, "sessionId": session.id, "outcome": outcome,
        "resolvedBy": resolution.by.as_str(),
    });
    if let Some(v) = &resolution.voter {
        data["voterClientId"] = json!(v);
    }
    if let Some(r) = &resolution.rule_id {
        data["ruleId"] = json!(r);
    }
    session.publish("permission_resolved", &data);
    session.metrics.decision(
        pending.issued.policy.as_str(),
        resolution.by.as_str(),
        resolved_at.saturating_sub(pending.issued_at),
    );
    if st.audit.len() >= AUDIT_RING {
        st.audit.pop_front();
    }
    st.audit.push_back(json!({
        "requestId": request_id,
        "toolCall": {
            "toolCallId": pending.data["toolCall"].get("toolCallId"),
            "title": pending.data["toolCall"].get("title"),
            "kind": pending.data["toolCall"].get("kind"),
        },
        "policy": pending.issued.policy.as_str(),
        "originatorClientId": pending.issued.originator,
        "votersAtIssue": pending.issued.voters_at_issue,
        "issuedAt": pending.issued_at,
        "resolvedAt": resolved_at,
        "outcome": outcome,
        "resolvedBy": resolution.by.as_str(),
        "voterClientId": resolution.voter,
        "ruleId": resolution.rule_id,
        "ballots": pending.ballots,
    }));
    // Remember the decision as the narrowest rule when asked, or when the option says "always".
    if let Choice::Option(id) = choice {
        let kind = rules::option_kind(&pending.options, id).unwrap_or("");
        let always = matches!(kind, "allow_always" | "reject_always");
        if (resolution.remember || always) && resolution.by == ResolvedBy::Vote {
            let effect = if kind.starts_with("allow") { Effect::Allow } else { Effect::Deny };
            if let Some(rule) = rules::remembered_rule(
                &pending.facts,
                effect,
                workspace,
                resolution.voter.clone(),
                crate::now_ms(),
            ) && st.rules.len() < rules::MAX_RULES_PER_SESSION
            {
                st.rules.push(rule);
                publish_rules(st, session);
                // A remembered rule is an added rule: it also answers identical requests already
                // pending (an agent may ask for parallel tool calls at once). No recursion: those
                // are resolved by rule, which never remembers.
                apply_rules_to_pending(st, session, workspace);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::bus::Bus;
    use crate::session::SessionInit;
    use crate::workspace::AgentHandle;

    const WS: &str = "/ws";

    /// A session whose agent cannot start: these tests call the mediator the way the agent's
    /// `session/request_permission` handler does, and never prompt.
    fn session(policy: Policy) -> Arc<Session> {
        let workspace = PathBuf::from(WS);
        let missing = crate::config::agent_command("/nonexistent/mediatord-test-agent").expect("command");
        let agent = AgentHandle::start(
            missing,
            workspace.clone(),
            Duration::from_secs(1),
            Arc::default(),
            Arc::default(),
        );
        let cfg = MediatorConfig { policy, quorum: None, timeout: None };
        Session::start(SessionInit {
            id: "s1".into(),
            workspace: workspace.clone(),
            agent,
            bus: Bus::new("s1".into(), 1024, 1024, 4, Arc::default()),
            mediator: Mediator::new(cfg, workspace),
            prompt_cap: 1,
            agent_result: json!({}),
            metrics: Arc::default(),
            on_finished: Box::new(|_| {}),
        })
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

    /// Raises a request as the agent would, in its own task.
    fn raise(s: &Arc<Session>, params: Value) -> tokio::task::JoinHandle<Value> {
        let s = s.clone();
        tokio::spawn(async move { s.mediator.request(&s, params).await })
    }

    /// Lets spawned requests run (current-thread runtime) until `n` are pending.
    async fn until_pending(s: &Session, n: usize) {
        for _ in 0..10_000 {
            if s.mediator.pending_count() == n {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("{} pending, expected {n}", s.mediator.pending_count());
    }

    fn pending_ids(s: &Session) -> Vec<String> {
        s.mediator.list_pending().iter().filter_map(|p| p["requestId"].as_str().map(str::to_owned)).collect()
    }

    fn rule(body: Value) -> CompiledRule {
        rules::parse_rule(&body, std::path::Path::new(WS), None, 0).expect("valid rule")
    }

    fn vote(option: &str, remember: bool) -> VoteBody {
        VoteBody::Outcome { choice: Choice::Option(option.into()), remember }
    }

    async fn answer(task: tokio::task::JoinHandle<Value>) -> Value {
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("answered").expect("task")
    }

    /// Claude Code asks with a bare tool-call update (`{toolCallId, title, rawInput}`); `kind` and
    /// `locations` came earlier in `session/update`. Rules must match on the merge.
    #[tokio::test]
    async fn rules_match_what_the_agent_announced_before_asking() {
        let s = session(Policy::FirstResponder);
        let announce = |update: Value| {
            let params = json!({"sessionId": "s1", "update": update}).to_string();
            let raw = serde_json::value::RawValue::from_string(params).expect("raw");
            s.publish_update(&raw);
        };
        announce(
            json!({"sessionUpdate": "tool_call", "toolCallId": "c9", "title": "Write", "status": "pending"}),
        );
        announce(json!({
            "sessionUpdate": "tool_call_update", "toolCallId": "c9", "kind": "edit",
            "locations": [{"path": "/ws/src/a.txt"}], "title": null,
        }));
        s.mediator
            .add_rule(&s, rule(json!({"effect": "allow", "kinds": ["edit"], "paths": ["src/**"]})))
            .expect("rule");
        let bare = json!({
            "sessionId": "s1",
            "toolCall": {"toolCallId": "c9", "title": "Write a.txt", "rawInput": {"content": "x"}},
            "options": options(&["allow_once", "reject_once"]),
        });
        assert_eq!(answer(raise(&s, bare)).await["outcome"]["optionId"], "opt-allow_once");
        // An id the agent never announced has no kind or path: the rule does not apply.
        let unknown = json!({
            "sessionId": "s1",
            "toolCall": {"toolCallId": "c10", "title": "Write b.txt"},
            "options": options(&["allow_once", "reject_once"]),
        });
        let pending = raise(&s, unknown);
        until_pending(&s, 1).await;
        s.mediator.cancel_all(&s, ResolvedBy::Cancel);
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
        let s = session(Policy::FirstResponder);
        s.mediator.add_rule(&s, rule(json!({"effect": "allow", "kinds": ["edit"]}))).expect("added");
        let task = raise(&s, params("/ws/a", &["reject_once", "reject_always"]));
        until_pending(&s, 1).await;
        let id = pending_ids(&s).remove(0);
        s.mediator.vote(&s, &id, None, true, &vote("opt-reject_once", false)).expect("vote");
        assert_eq!(
            answer(task).await,
            json!({"outcome": {"outcome": "selected", "optionId": "opt-reject_once"}})
        );
        assert_eq!(s.mediator.audit()[0]["resolvedBy"], "vote");
    }

    #[tokio::test]
    async fn deny_rule_without_a_reject_option_cancels() {
        let s = session(Policy::FirstResponder);
        let added =
            s.mediator.add_rule(&s, rule(json!({"effect": "deny", "kinds": ["edit"]}))).expect("added");
        let task = raise(&s, params("/ws/a", &["allow_once", "allow_always"]));
        assert_eq!(answer(task).await, json!({"outcome": {"outcome": "cancelled"}}));
        let audit = s.mediator.audit();
        assert_eq!(
            (audit[0]["resolvedBy"].clone(), audit[0]["ruleId"].clone()),
            (json!("rule"), added["ruleId"].clone())
        );
    }

    #[tokio::test]
    async fn requests_beyond_the_pending_cap_are_cancelled_at_once() {
        let s = session(Policy::FirstResponder);
        let held: Vec<_> =
            (0..MAX_PENDING_PER_SESSION).map(|_| raise(&s, params("/ws/a", &["allow_once"]))).collect();
        until_pending(&s, MAX_PENDING_PER_SESSION).await;
        let extra = raise(&s, params("/ws/a", &["allow_once"]));
        assert_eq!(answer(extra).await, json!({"outcome": {"outcome": "cancelled"}}));
        assert_eq!(s.mediator.pending_count(), MAX_PENDING_PER_SESSION);
        s.mediator.cancel_all(&s, ResolvedBy::Cancel);
        for task in held {
            assert_eq!(answer(task).await, json!({"outcome": {"outcome": "cancelled"}}));
        }
    }

    #[tokio::test]
    async fn a_request_after_the_session_ended_is_cancelled_at_once() {
        let s = session(Policy::FirstResponder);
        let before = raise(&s, params("/ws/a", &["allow_once"]));
        until_pending(&s, 1).await;
        s.mediator.cancel_all(&s, ResolvedBy::SessionClosed);
        assert_eq!(answer(before).await, json!({"outcome": {"outcome": "cancelled"}}));
        let after = raise(&s, params("/ws/a", &["allow_once"]));
        assert_eq!(answer(after).await, json!({"outcome": {"outcome": "cancelled"}}));
        assert_eq!(s.mediator.pending_count(), 0);
    }

    #[tokio::test]
    async fn a_session_cancel_does_not_refuse_later_requests() {
        let s = session(Policy::FirstResponder);
        s.mediator.cancel_all(&s, ResolvedBy::Cancel);
        let _later = raise(&s, params("/ws/a", &["allow_once"]));
        until_pending(&s, 1).await;
    }

    #[tokio::test]
    async fn a_remembered_decision_answers_identical_pending_requests() {
        let s = session(Policy::FirstResponder);
        let kinds = ["allow_once", "allow_always", "reject_once"];
        let first = raise(&s, params("/ws/a", &kinds));
        let twin = raise(&s, params("/ws/a", &kinds));
        let other = raise(&s, params("/ws/b", &kinds));
        until_pending(&s, 3).await;
        let first_id = pending_ids(&s).into_iter().next().expect("first");
        s.mediator.vote(&s, &first_id, None, true, &vote("opt-allow_always", false)).expect("vote");
        let rules = s.mediator.list_rules();
        assert_eq!(rules.len(), 1, "allow_always is remembered: {rules:?}");
        let allowed = json!({"outcome": {"outcome": "selected", "optionId": "opt-allow_once"}});
        let (a, b) = (answer(first).await, answer(twin).await);
        // Which of the two twins was voted on depends on task order; one got the vote, one the rule.
        let always = json!({"outcome": {"outcome": "selected", "optionId": "opt-allow_always"}});
        assert!([(&a, &b), (&b, &a)].contains(&(&always, &allowed)), "{a} / {b}");
        assert_eq!(s.mediator.pending_count(), 1, "the other path still waits");
        let audit = s.mediator.audit();
        assert_eq!(audit[1]["resolvedBy"], "rule");
        assert_eq!(audit[1]["ruleId"], rules[0]["ruleId"]);
        s.mediator.cancel_all(&s, ResolvedBy::Cancel);
        assert_eq!(answer(other).await, json!({"outcome": {"outcome": "cancelled"}}));
    }
}

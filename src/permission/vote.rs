//! What a client casts on a request, and how a request ended: a [`Vote`] parsed from a body or an
//! elicitation result, the [`Ballot`] the front desk casts it in, the [`Remember`] scope it asks
//! for, and the [`VoteError`] that refuses it. Plain data: the [`super::Mediator`] counts them.

use serde_json::Value;

use super::policy::{Choice, ForbidReason};
use super::question::{AnswerError, Answers};
use super::review::Review;
use super::rules::Effect;
use crate::config::TrustMap;

/// What ended a request (the `resolvedBy` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolvedBy {
    Vote,
    Timeout,
    Cancel,
    SessionClosed,
    Rule,
    /// The agent said a URL elicitation is complete (`elicitation/complete`) before anyone
    /// answered it.
    Completed,
}

impl ResolvedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            ResolvedBy::Vote => "vote",
            ResolvedBy::Timeout => "timeout",
            ResolvedBy::Cancel => "cancel",
            ResolvedBy::SessionClosed => "session_closed",
            ResolvedBy::Rule => "rule",
            ResolvedBy::Completed => "completed",
        }
    }
}

/// How a vote arrived: the `via` of its ballot, of `permission_resolved` and of the audit entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The vote routes of the HTTP API.
    Rest,
    /// A notification's action link (`POST /act/{token}`), cast as the target's `clientId`.
    Link,
    /// An ACP client on `/acp`: its answer to `session/request_permission`, or `session/permission`.
    Acp,
    /// A configured reviewer's verdict (`crate::review`), cast as `reviewer:<name>`.
    Reviewer,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Rest => "rest",
            Via::Link => "link",
            Via::Acp => "acp",
            Via::Reviewer => "reviewer",
        }
    }
}

/// Whether (and where) a deciding vote is remembered as a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Remember {
    /// Not remembered (unless the chosen option is of an `*_always` kind: then for the session).
    #[default]
    No,
    /// `"remember":"session"`: a rule of this session.
    Session,
    /// `"remember":"workspace"`: a rule of the workspace, for every session of it, persisted.
    Workspace,
}

impl Remember {
    /// As the audit entry's `remembered` names it; `None` for a decision not remembered.
    pub fn as_str(self) -> Option<&'static str> {
        match self {
            Remember::No => None,
            Remember::Session => Some("session"),
            Remember::Workspace => Some("workspace"),
        }
    }

    /// The wider of two scopes.
    pub fn max_scope(self, other: Remember) -> Remember {
        match (self, other) {
            (Remember::Workspace, _) | (_, Remember::Workspace) => Remember::Workspace,
            (Remember::Session, _) | (_, Remember::Session) => Remember::Session,
            _ => Remember::No,
        }
    }
}

/// What a vote picks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// `{outcome:{outcome:"selected",optionId}}` or `{outcome:{outcome:"cancelled"}}`.
    Outcome { choice: Choice, remember: Remember },
    /// The `{decision: allow|deny|allow-session|deny-session|allow-workspace|deny-workspace}`
    /// shorthand.
    Decision { effect: Effect, remember: Remember },
}

/// A client's vote, as parsed from its body: what it picks, and a question's answers
/// (`docs/protocol.md#19-questions`).
#[derive(Debug, Clone, PartialEq)]
pub struct Vote {
    pub pick: Pick,
    /// The answers to a question, by field key, as sent (checked against the question when the
    /// vote counts). `None` for a permission's vote, or a question declined.
    pub answers: Option<Answers>,
}

impl From<Pick> for Vote {
    fn from(pick: Pick) -> Vote {
        Vote { pick, answers: None }
    }
}

impl Vote {
    /// The vote a body (REST) or an ACP answer asks for: `{outcome:{outcome:"selected",optionId}}`,
    /// `{outcome:{outcome:"cancelled"}}` or `{decision: allow|deny|allow-session|deny-session|
    /// allow-workspace|deny-workspace}`, each optionally with `remember:"session"` or
    /// `remember:"workspace"` (the wider scope wins), and a question's `answers` (an object).
    /// `None` for anything else.
    pub fn parse(body: &Value) -> Option<Vote> {
        let answers = match body.get("answers") {
            None | Some(Value::Null) => None,
            Some(Value::Object(a)) => Some(a.clone()),
            Some(_) => return None,
        };
        let remember = match body.get("remember").and_then(Value::as_str) {
            Some("session") => Remember::Session,
            Some("workspace") => Remember::Workspace,
            _ => Remember::No,
        };
        let pick = if let Some(decision) = body.get("decision") {
            let (effect, scope) = match decision.as_str()? {
                "allow" => (Effect::Allow, Remember::No),
                "deny" => (Effect::Deny, Remember::No),
                "allow-session" => (Effect::Allow, Remember::Session),
                "deny-session" => (Effect::Deny, Remember::Session),
                "allow-workspace" => (Effect::Allow, Remember::Workspace),
                "deny-workspace" => (Effect::Deny, Remember::Workspace),
                _ => return None,
            };
            Pick::Decision { effect, remember: scope.max_scope(remember) }
        } else {
            let outcome = body.get("outcome")?;
            match outcome.get("outcome").and_then(Value::as_str) {
                Some("selected") => {
                    let id = outcome.get("optionId").and_then(Value::as_str).filter(|s| !s.is_empty())?;
                    Pick::Outcome { choice: Choice::Option(id.to_owned()), remember }
                }
                Some("cancelled") => Pick::Outcome { choice: Choice::Cancel, remember: Remember::No },
                _ => return None,
            }
        };
        Some(Vote { pick, answers })
    }

    /// The vote an ACP client's answer to `elicitation/create` casts: `accept` (with its
    /// `content`) picks the question's accepting option, `decline` its declining one, `cancel`
    /// cancels (the cancel escape, as an ACP client's `cancelled` outcome does). `None` for
    /// anything else.
    pub fn from_elicitation(result: &Value) -> Option<Vote> {
        let (pick, answers) = match result.get("action").and_then(Value::as_str)? {
            "accept" => {
                let content = match result.get("content") {
                    None | Some(Value::Null) => None,
                    Some(Value::Object(c)) => Some(c.clone()),
                    Some(_) => return None,
                };
                (Pick::Decision { effect: Effect::Allow, remember: Remember::No }, content)
            }
            "decline" => (Pick::Decision { effect: Effect::Deny, remember: Remember::No }, None),
            "cancel" => (Pick::Outcome { choice: Choice::Cancel, remember: Remember::No }, None),
            _ => return None,
        };
        Some(Vote { pick, answers })
    }
}

/// Why a vote was refused, in the order the checks run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VoteError {
    #[error("permission request not found")]
    NotFound,
    #[error("permission request already resolved")]
    AlreadyResolved { resolved_option_id: String },
    #[error("the client id is not registered on this session")]
    UnknownClient,
    #[error("option not offered for this permission request")]
    InvalidOption { request_id: String, option_id: String },
    #[error("this client may not decide this permission request")]
    Forbidden(ForbidReason),
    /// An approval under a `require` rule naming `group`, from someone not in it: it counts
    /// nothing, and the request stays pending.
    #[error("rule {rule_id} needs approval from a member of the group {group}")]
    GroupRequired { rule_id: String, group: String },
    /// An observer's ballot: it may read, never decide.
    #[error("an observer may not vote")]
    ReadOnly,
    /// A question's answers the question does not take (the field is named); it stays pending.
    #[error("{0}")]
    InvalidAnswer(AnswerError),
}

/// One ballot, as the front desk casts it: on which request, by whom, from where, through which
/// door, and what it says.
#[derive(Debug, Clone, Copy)]
pub struct Ballot<'a> {
    pub request_id: &'a str,
    /// The client id it is cast as (`None`: a voter without one, counted as one voter).
    pub client: Option<&'a str>,
    /// Who casts it, as a `require` rule's quorum counts voters (the desk's `Caller::voter`: a
    /// device, a link's target, or the operator's token as one voter).
    pub voter: &'a str,
    /// The groups of the person casting it (the desk's `Caller::groups`): a `require` rule naming
    /// a group counts only its members' approvals. Empty for anyone but a signed-in person.
    pub groups: &'a [String],
    /// A paired device's name, for the ballot and the audit.
    pub device_name: Option<&'a str>,
    /// Cast by an observer: refused ([`VoteError::ReadOnly`]).
    pub observer: bool,
    /// The caller is on this host's loopback (`local-only`).
    pub local: bool,
    pub via: Via,
    pub vote: &'a Vote,
    /// A reviewer's ballot (then `client` is `reviewer:<name>` and `via` is [`Via::Reviewer`]);
    /// `None`: a client's.
    pub review: Option<Reviewed<'a>>,
}

/// What a reviewer's ballot carries beside its vote.
#[derive(Debug, Clone, Copy)]
pub struct Reviewed<'a> {
    pub name: &'a str,
    pub review: &'a Review,
    /// The tool kinds its allow/deny decides (judged against the request's kind by the mediator).
    pub trust: &'a TrustMap,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn vote_bodies_parse_into_typed_votes() {
        let selected = |id: &str, remember| Pick::Outcome { choice: Choice::Option(id.into()), remember };
        let decided = |effect, remember| Pick::Decision { effect, remember };
        let table = [
            (json!({"outcome": {"outcome": "selected", "optionId": "a"}}), Some(selected("a", Remember::No))),
            (
                json!({"outcome": {"outcome": "selected", "optionId": "a"}, "remember": "session"}),
                Some(selected("a", Remember::Session)),
            ),
            (
                json!({"outcome": {"outcome": "cancelled"}, "remember": "session"}),
                Some(Pick::Outcome { choice: Choice::Cancel, remember: Remember::No }),
            ),
            (json!({"decision": "allow"}), Some(decided(Effect::Allow, Remember::No))),
            (json!({"decision": "deny-session"}), Some(decided(Effect::Deny, Remember::Session))),
            (
                json!({"decision": "deny", "remember": "session"}),
                Some(decided(Effect::Deny, Remember::Session)),
            ),
            (
                json!({"decision": "allow-workspace", "remember": "session"}),
                Some(decided(Effect::Allow, Remember::Workspace)),
            ),
            (
                json!({"outcome": {"outcome": "selected", "optionId": "a"}, "remember": "workspace"}),
                Some(selected("a", Remember::Workspace)),
            ),
            (
                json!({"outcome": {"outcome": "selected", "optionId": "a"}, "remember": "forever"}),
                Some(selected("a", Remember::No)),
            ),
            (json!({"decision": "allow-session"}), Some(decided(Effect::Allow, Remember::Session))),
            (json!({"decision": "deny-workspace"}), Some(decided(Effect::Deny, Remember::Workspace))),
            (
                json!({"decision": "deny", "remember": "workspace"}),
                Some(decided(Effect::Deny, Remember::Workspace)),
            ),
            (json!({}), None),
            (json!({"outcome": {"outcome": "selected", "optionId": ""}}), None),
            (json!({"outcome": {"outcome": "maybe"}}), None),
            (json!({"decision": true}), None),
            (json!({"decision": "perhaps"}), None),
            (json!([]), None),
        ];
        for (body, expected) in table {
            assert_eq!(Vote::parse(&body).map(|v| v.pick), expected, "{body}");
            assert_eq!(Vote::parse(&body).and_then(|v| v.answers), None, "{body}");
        }
    }
}

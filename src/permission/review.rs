//! A reviewer as the mediator sees it (`docs/operations.md#reviewers`): something that, given a
//! pending request, answers a [`Review`] — never an error: a reviewer that fails (late, dead,
//! garbled) answers `escalate` with the failure named, and the request stays with the people. The
//! program behind it lives in `crate::review`; the mediator casts each review as a ballot of
//! `reviewer:<name>` on its one vote path ([`super::BoundMediator::vote`]).

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::config::TrustMap;

/// What a reviewer says of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny,
    /// For the people (also what every failure becomes).
    Escalate,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
            Verdict::Escalate => "escalate",
        }
    }

    /// The verdict [`Verdict::as_str`] wrote.
    pub fn parse(word: &str) -> Option<Verdict> {
        [Verdict::Allow, Verdict::Deny, Verdict::Escalate].into_iter().find(|v| v.as_str() == word)
    }
}

/// A reviewer's answer on one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    pub verdict: Verdict,
    /// Why, in the reviewer's words (or the failure's), shown on the request and in the audit.
    pub reason: String,
    /// The option the reviewer picks, when it names one; else allow/deny pick as the
    /// `{decision}` shorthand does.
    pub option_id: Option<String>,
    /// Set when the review is a failure's (`timeout`, `crash`, `garbage`): an escalate that no
    /// reviewer said.
    pub failure: Option<&'static str>,
}

impl Review {
    /// The escalate a failure becomes.
    pub fn failed(failure: &'static str, reason: impl Into<String>) -> Review {
        Review { verdict: Verdict::Escalate, reason: reason.into(), option_id: None, failure: Some(failure) }
    }

    /// As the request's `reviews` entries and the `permission_reviewed` event show it.
    pub fn wire(&self, reviewer: &str, decides: bool, at: u64) -> Value {
        let mut v = json!({
            "reviewer": reviewer,
            "clientId": format!("reviewer:{reviewer}"),
            "verdict": self.verdict.as_str(),
            "reason": self.reason,
            "decides": decides,
            "at": at,
        });
        if let Some(id) = &self.option_id {
            v["optionId"] = json!(id);
        }
        if let Some(f) = self.failure {
            v["failure"] = json!(f);
        }
        v
    }
}

/// A configured reviewer the mediator asks about each request of its session.
pub trait Judge: Send + Sync + std::fmt::Debug {
    /// Its name; its ballots are cast as `reviewer:<name>`.
    fn name(&self) -> &str;
    /// The tool kinds its allow/deny decides in this session's workspace.
    fn trust(&self) -> &TrustMap;
    /// Its review of `request` (what is sent: `docs/operations.md#reviewers`). Dropped unfinished
    /// when the request is decided first: the answer, if any, is then thrown away.
    fn judge(&self, request: Value) -> BoxFuture<'static, Review>;
}

/// The reviewers of one session.
pub type Judges = Vec<Arc<dyn Judge>>;

//! The permission floor: who answers the agent's `session/request_permission`
//! (`docs/protocol.md#7-permission-rules`, `docs/protocol.md#8-permission-mediation`).
//!
//! - `mediator`: [`Mediator`], one per session: pending requests, votes, the audit, the session's
//!   rules; it reaches its session only through the [`Host`] trait.
//! - [`vote`]: what a client casts ([`Vote`], [`Ballot`]) and why a vote is refused.
//! - [`policy`]: the four policies as one pure decision function, tested as a table.
//! - [`rules`]: rule validation and matching, pure.
//! - `workspace`: [`WorkspaceRules`], a workspace's rules, shared by its sessions and persisted.
//! - [`review`]: a reviewer as the mediator sees it ([`Judge`]: a request in, a [`Review`] out),
//!   its verdicts cast as ballots of `reviewer:<name>`.
//! - [`question`]: what an agent asks a person beside a permission (qwen's `ask_user_question`,
//!   ACP's `elicitation/create`): parsed within bounds, answers checked and converted, pure.
//!
//! Imports `store` and the leaves only; never `agent`, `daemon` or `http`.

mod guard;
mod mediator;
pub mod policy;
pub mod question;
pub mod review;
pub mod rules;
pub mod vote;
mod workspace;

pub use mediator::{BoundMediator, Decided, Host, Mediator, MediatorConfig};
pub use policy::{Choice, ForbidReason};
pub use question::{AnswerError, Answers, Malformed, Question};
pub use review::{Judge, Judges, Review, Verdict};
pub use rules::{Effect, RuleError, parse_rule};
pub use vote::{Ballot, Pick, Remember, ResolvedBy, Reviewed, Via, Vote, VoteError};
pub use workspace::{Announce, Remembered, WorkspaceRules};

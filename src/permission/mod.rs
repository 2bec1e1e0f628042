//! The permission floor: who answers the agent's `session/request_permission`
//! (`docs/protocol.md#7-permission-rules`, `docs/protocol.md#8-permission-mediation`).
//!
//! - `mediator`: [`Mediator`], one per session: pending requests, votes, the audit, the session's
//!   rules; it reaches its session only through the [`Host`] trait.
//! - [`policy`]: the four policies as one pure decision function, tested as a table.
//! - [`rules`]: rule validation and matching, pure.
//!
//! Imports the leaves only; never `agent`, `daemon` or `http`.

mod mediator;
pub mod policy;
pub mod rules;

pub use mediator::{
    AUDIT_RING, Host, MAX_PENDING_PER_SESSION, Mediator, MediatorConfig, Permissions, RESOLVED_RING,
    ResolvedBy, RuleError, Vote, VoteError, outcome_json,
};
pub use policy::{CANCEL_OPTION_ID, Choice, ForbidReason};
pub use rules::{Effect, parse_rule};

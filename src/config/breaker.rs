//! The reviewers' circuit breaker (`docs/operations.md#reviewers`): `--review-breaker-denials N`
//! and `--review-critical KIND,…` (the config file's `serve.reviewBreakerDenials` and
//! `serve.reviewCritical`). Daemon-wide, not per reviewer: the breaker guards a session's turn,
//! and a turn two reviewers refuse is refused as much as one one reviewer refuses twice; one
//! number to reason about, whatever the reviewers.

use super::file::{FileSettings, suggest};
use super::reviewers::TOOL_KINDS;
use super::{ConfigError, ServeArgs, refuse};

/// Requests reviewers deny within one turn before the turn is stopped: an agent refused three
/// times in a turn is trying something its reviewers will not have, and a person should look
/// before it tries a fourth way.
pub const DEFAULT_BREAKER_DENIALS: u32 = 3;

/// The largest `--review-breaker-denials`: a breaker that lets an agent be refused more than this
/// in one turn guards nothing, and the mediator remembers each denied request of the turn (once,
/// however many reviewers deny it) up to this many.
pub const MAX_BREAKER_DENIALS: u32 = 64;

/// When a session's running turn is stopped for its reviewers' denials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Denied requests in one turn that stop it; 0: never for a count.
    pub denials: u32,
    /// Tool kinds one denial of which stops the turn.
    pub critical: Vec<String>,
}

impl Default for BreakerSettings {
    fn default() -> BreakerSettings {
        BreakerSettings { denials: DEFAULT_BREAKER_DENIALS, critical: Vec::new() }
    }
}

/// The flags', else the file's, else the defaults; a kind that is not ACP's is refused.
pub(super) fn breaker(args: &ServeArgs, file: &FileSettings) -> Result<BreakerSettings, ConfigError> {
    let denials = match args.review_breaker_denials.or(file.number("reviewBreakerDenials")?) {
        None => DEFAULT_BREAKER_DENIALS,
        Some(n) if n <= u64::from(MAX_BREAKER_DENIALS) => n as u32,
        Some(n) => {
            return refuse(format!(
                "--review-breaker-denials is {n}; at most {MAX_BREAKER_DENIALS} (0 turns the count off)"
            ));
        }
    };
    let raw = if args.review_critical.is_empty() {
        file.strings("reviewCritical")?
    } else {
        args.review_critical.clone()
    };
    let mut critical: Vec<String> = Vec::new();
    for kind in raw.iter().flat_map(|r| r.split(',')).map(str::trim).filter(|k| !k.is_empty()) {
        if !TOOL_KINDS.contains(&kind) {
            let hint = suggest(kind, TOOL_KINDS).map_or_else(
                || format!("the tool kinds are {}", TOOL_KINDS.join(", ")),
                |k| format!("did you mean {k}?"),
            );
            return refuse(format!("--review-critical: unknown tool kind {kind:?}; {hint}"));
        }
        if !critical.iter().any(|k| k == kind) {
            critical.push(kind.to_owned());
        }
    }
    Ok(BreakerSettings { denials, critical })
}

//! The reviewers' guard rails (`docs/operations.md#reviewers`), as pure functions the mediator
//! applies where reviewers' ballots are cast and requests decided: when a person overrules a
//! reviewer, and when reviewers' denials trip a session's circuit breaker.

use super::review::Verdict;
use crate::config::BreakerSettings;

/// Whether a person's decision (`allowed`: they chose an option of an `allow` kind; a reject or a
/// cancel is not) goes against a reviewer's `verdict`. An `escalate` took no side (and every
/// failure is one), so no decision overrules it: the reviewer asked the people, and they answered.
pub(super) fn overrules(verdict: Verdict, allowed: bool) -> bool {
    match verdict {
        Verdict::Allow => !allowed,
        Verdict::Deny => allowed,
        Verdict::Escalate => false,
    }
}

/// Why a breaker tripped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Trip {
    /// This many requests of the turn were denied (`--review-breaker-denials`).
    Denials(u32),
    /// A request of this tool kind was denied (`--review-critical`).
    Critical(String),
}

impl Trip {
    /// `review_breaker`'s `reason`.
    pub(super) fn reason(&self) -> &'static str {
        match self {
            Trip::Denials(_) => "denials",
            Trip::Critical(_) => "critical",
        }
    }
}

/// One session's breaker: the requests reviewers denied in the turn running now. Only the turn
/// now running counts, so the next turn starts from zero; it trips once per turn.
#[derive(Debug, Default)]
pub(super) struct Breaker {
    turn: Option<String>,
    /// The turn's denied requests, each once however many reviewers deny it; at most
    /// `settings.denials` (itself at most `config::MAX_BREAKER_DENIALS`), as it trips there.
    denied: Vec<String>,
    tripped: bool,
}

impl Breaker {
    /// A reviewer denied `request_id`, of tool kind `kind`, in turn `turn`: whether that trips
    /// the breaker.
    pub(super) fn denied(
        &mut self,
        settings: &BreakerSettings,
        turn: &str,
        request_id: &str,
        kind: Option<&str>,
    ) -> Option<Trip> {
        if self.turn.as_deref() != Some(turn) {
            *self = Breaker { turn: Some(turn.to_owned()), ..Breaker::default() };
        }
        if self.tripped {
            return None;
        }
        if let Some(kind) = kind.filter(|k| settings.critical.iter().any(|c| c == k)) {
            self.tripped = true;
            return Some(Trip::Critical(kind.to_owned()));
        }
        if settings.denials == 0 || self.denied.iter().any(|id| id == request_id) {
            return None;
        }
        self.denied.push(request_id.to_owned());
        let count = self.denied.len() as u32;
        self.tripped = count >= settings.denials;
        self.tripped.then_some(Trip::Denials(count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(denials: u32, critical: &[&str]) -> BreakerSettings {
        BreakerSettings { denials, critical: critical.iter().map(|k| (*k).to_owned()).collect() }
    }

    /// Each denial of the table (turn, request, kind) in order, and what it tripped.
    fn run(settings: &BreakerSettings, denials: &[(&str, &str, Option<&str>)]) -> Vec<Option<Trip>> {
        let mut breaker = Breaker::default();
        denials.iter().map(|(turn, id, kind)| breaker.denied(settings, turn, id, *kind)).collect()
    }

    #[test]
    fn the_nth_denied_request_of_a_turn_trips_once_and_the_next_turn_starts_from_zero() {
        let edit = Some("edit");
        let got = run(
            &settings(3, &[]),
            &[
                ("t1", "a", edit),
                ("t1", "a", edit), // a second reviewer denying the same request: still one
                ("t1", "b", edit),
                ("t1", "c", edit),
                ("t1", "d", edit), // tripped already this turn
                ("t2", "e", edit),
                ("t2", "f", edit),
                ("t2", "g", None),
            ],
        );
        let d3 = Some(Trip::Denials(3));
        assert_eq!(got, [None, None, None, d3.clone(), None, None, None, d3]);
    }

    #[test]
    fn one_denial_of_a_critical_kind_trips_and_a_count_of_zero_never_does() {
        let critical = settings(0, &["delete", "execute"]);
        let got = run(
            &critical,
            &[("t1", "a", Some("edit")), ("t1", "b", Some("execute")), ("t1", "c", Some("delete"))],
        );
        assert_eq!(got, [None, Some(Trip::Critical("execute".into())), None]);
        let off = settings(0, &[]);
        let many: Vec<(&str, &str, Option<&str>)> =
            ["a", "b", "c", "d"].map(|id| ("t", id, Some("delete"))).to_vec();
        assert_eq!(run(&off, &many), [None, None, None, None]);
        assert_eq!(run(&settings(1, &[]), &[("t", "a", None)]), [Some(Trip::Denials(1))]);
        assert_eq!((Trip::Denials(1).reason(), Trip::Critical("x".into()).reason()), ("denials", "critical"));
    }

    #[test]
    fn a_person_overrules_an_allow_or_a_deny_decided_the_other_way_never_an_escalate() {
        let table = [
            (Verdict::Allow, true, false),
            (Verdict::Allow, false, true),
            (Verdict::Deny, true, true),
            (Verdict::Deny, false, false),
            (Verdict::Escalate, true, false),
            (Verdict::Escalate, false, false),
        ];
        for (verdict, allowed, overruled) in table {
            assert_eq!(overrules(verdict, allowed), overruled, "{verdict:?} then allowed={allowed}");
        }
    }

    #[test]
    fn a_verdict_reads_back_as_written() {
        for v in [Verdict::Allow, Verdict::Deny, Verdict::Escalate] {
            assert_eq!(Verdict::parse(v.as_str()), Some(v));
        }
        assert_eq!(Verdict::parse("Allow"), None);
    }
}

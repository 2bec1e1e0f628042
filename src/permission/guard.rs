//! The reviewers' guard rails (`docs/operations.md#reviewers`), as pure functions the mediator
//! applies where reviewers' ballots are cast and requests decided: when a person overrules a
//! reviewer.

use super::review::Verdict;

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

#[cfg(test)]
mod tests {
    use super::*;

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

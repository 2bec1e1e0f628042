//! Permission policies as one pure decision function
//! (`docs/protocol.md#8-permission-mediation`), tested as a table.
//!
//! The mediator owns the bookkeeping (pending requests, ballots, timeouts); this file only answers
//! "given what was captured when the request was issued, the ballots so far, and this new ballot,
//! what happens?". Nothing here reads a clock, a lock or the network.

use std::collections::BTreeMap;

use crate::config::Policy;

/// The reserved option id that stands for "cancel this request" (the cancel escape of
/// `docs/protocol.md#8-permission-mediation`).
pub const CANCEL_OPTION_ID: &str = "__cancelled__";

/// What a ballot asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    Option(String),
    Cancel,
}

impl Choice {
    pub fn option_id(&self) -> &str {
        match self {
            Choice::Option(id) => id,
            Choice::Cancel => CANCEL_OPTION_ID,
        }
    }
}

/// What was captured when the request was issued; later configuration changes do not touch it.
#[derive(Debug, Clone)]
pub struct Issued {
    pub policy: Policy,
    /// The client id of the prompt that was running when the agent asked.
    pub originator: Option<String>,
    /// Consensus only: the session's registered client ids at issue time.
    pub voters_at_issue: Vec<String>,
    /// `--consensus-quorum`, if set.
    pub quorum: Option<usize>,
    /// The request is a question (`docs/protocol.md#19-questions`): it has one answer, not a
    /// tally, so under `consensus` the first ballot of an eligible voter decides it.
    pub question: bool,
    /// A `require` rule matched (`docs/protocol.md#7-permission-rules`): its quorum of distinct
    /// voters (of its group, if it names one) must approve, whatever the policy; one rejection
    /// decides.
    pub required: Option<Required>,
}

/// What a matching `require` rule asks for, captured when the request was issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Required {
    pub rule_id: String,
    /// How many distinct voters must approve.
    pub quorum: usize,
    /// Only approvals of people in this group count (their provider's `groups` claim lists it);
    /// `None`: anyone's.
    pub group: Option<String>,
}

impl Required {
    /// Whether an approval of a voter in `groups` counts towards the quorum. A rejection needs no
    /// membership: anyone may stop what a rule holds for people.
    pub fn admits(&self, groups: &[String]) -> bool {
        self.group.as_ref().is_none_or(|group| groups.contains(group))
    }
}

impl Issued {
    /// `floor(M/2)+1` of the voters at issue, or the configured quorum.
    pub fn quorum(&self) -> usize {
        self.quorum.unwrap_or(self.voters_at_issue.len() / 2 + 1)
    }
}

/// Who casts a ballot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caster {
    /// A client of the session: a person, or their program.
    Person,
    /// A configured reviewer (`reviewer:<name>`); `decides` when the workspace trusts it with the
    /// request's tool kind.
    Reviewer { decides: bool },
}

/// One vote as it arrived.
#[derive(Debug, Clone)]
pub struct Cast<'a> {
    pub caster: Caster,
    pub client_id: Option<&'a str>,
    /// The identity a `require` rule's quorum counts once (the desk's `Caller::voter`).
    pub voter: &'a str,
    /// The groups of the person casting it (the desk's `Caller::groups`), which a `require` rule
    /// naming a group asks its approvals to be among; empty for any other voter.
    pub groups: &'a [String],
    /// The choice is an option of an `allow_*` kind.
    pub approves: bool,
    /// From the socket's peer address only, never from forwarding headers.
    pub loopback_peer: bool,
    pub choice: &'a Choice,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForbidReason {
    DesignatedMismatch,
    RemoteNotAllowed,
    /// An approval under a `require` rule naming a group, from someone not in it.
    GroupRequired,
}

impl ForbidReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ForbidReason::DesignatedMismatch => "designated_mismatch",
            ForbidReason::RemoteNotAllowed => "remote_not_allowed",
            ForbidReason::GroupRequired => "group_required",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The request is decided; answer the agent with this.
    Decided(Choice),
    /// Consensus: the ballot counts (and replaces the voter's earlier one) but no quorum yet.
    Partial { votes_received: usize, votes_needed: usize, quorum: usize, tallies: BTreeMap<String, usize> },
    /// This voter may not decide this request.
    Forbidden(ForbidReason),
    /// A reviewer not trusted with the request's tool kind: its verdict is shown beside the
    /// request, and people decide.
    Informed,
}

/// Decides what a ballot does. `prior` maps consensus voters (a `require` rule's: its approving
/// voters) to their earlier choices.
pub fn decide(issued: &Issued, prior: &BTreeMap<String, Choice>, ballot: &Cast<'_>) -> Decision {
    // A reviewer is no voter of the policy: the workspace's trust in it for a tool kind is a
    // standing delegation, as a rule is, and decides under every policy; without it the verdict
    // only informs (the cancel escape included: a reviewer never cancels for the people). What a
    // rule reserves for people it only informs.
    if let Caster::Reviewer { decides } = ballot.caster {
        return if decides && issued.required.is_none() && *ballot.choice != Choice::Cancel {
            Decision::Decided(ballot.choice.clone())
        } else {
            Decision::Informed
        };
    }
    // The cancel escape works under every policy, from any voter.
    if *ballot.choice == Choice::Cancel {
        return Decision::Decided(Choice::Cancel);
    }
    // A `require` rule: any voter may stop it; it goes ahead once `quorum` distinct voters (of its
    // group, if it names one) approved (the same voter twice, through any door or client id,
    // counts once). An approval from outside the group is refused rather than ignored, so its
    // voter learns why nothing happened.
    if let Some(required) = &issued.required {
        if !ballot.approves {
            return Decision::Decided(ballot.choice.clone());
        }
        if !required.admits(ballot.groups) {
            return Decision::Forbidden(ForbidReason::GroupRequired);
        }
        let quorum = required.quorum;
        let (received, tallies) = tally(prior, ballot.voter, ballot.choice);
        if received >= quorum {
            return Decision::Decided(ballot.choice.clone());
        }
        return Decision::Partial { votes_received: received, votes_needed: quorum, quorum, tallies };
    }
    match issued.policy {
        Policy::FirstResponder => Decision::Decided(ballot.choice.clone()),
        Policy::Designated => match (&issued.originator, ballot.client_id) {
            (None, _) => Decision::Decided(ballot.choice.clone()),
            (Some(o), Some(c)) if o == c => Decision::Decided(ballot.choice.clone()),
            _ => Decision::Forbidden(ForbidReason::DesignatedMismatch),
        },
        Policy::LocalOnly if ballot.loopback_peer => Decision::Decided(ballot.choice.clone()),
        Policy::LocalOnly => Decision::Forbidden(ForbidReason::RemoteNotAllowed),
        Policy::Consensus => {
            let Some(voter) = ballot.client_id.filter(|c| issued.voters_at_issue.iter().any(|v| v == c))
            else {
                return Decision::Forbidden(ForbidReason::DesignatedMismatch);
            };
            // A question's answers cannot be tallied: the first complete answer of a voter counted
            // at issue wins (`docs/protocol.md#19-questions`).
            if issued.question {
                return Decision::Decided(ballot.choice.clone());
            }
            let quorum = issued.quorum();
            let (received, tallies) = tally(prior, voter, ballot.choice);
            if tallies.get(ballot.choice.option_id()).is_some_and(|&n| n >= quorum) {
                return Decision::Decided(ballot.choice.clone());
            }
            Decision::Partial { votes_received: received, votes_needed: quorum, quorum, tallies }
        }
    }
}

/// The ballots that count once `voter` casts `choice` (its earlier one replaced), and how many chose
/// each option.
fn tally(prior: &BTreeMap<String, Choice>, voter: &str, choice: &Choice) -> (usize, BTreeMap<String, usize>) {
    let mut tallies: BTreeMap<String, usize> = BTreeMap::new();
    let mut received = 0;
    for (_, earlier) in prior.iter().filter(|(who, _)| who.as_str() != voter) {
        *tallies.entry(earlier.option_id().to_owned()).or_default() += 1;
        received += 1;
    }
    *tallies.entry(choice.option_id().to_owned()).or_default() += 1;
    (received + 1, tallies)
}

/// Whether an approving ballot of `client_id` (of a person in `groups`, from a loopback peer or
/// not) would count on a request issued as `issued`: what [`decide`] would not refuse as
/// [`Decision::Forbidden`]. The ACP door asks it before it sends a client
/// `session/request_permission`, so a client is asked only what it may answer. (The cancel
/// escape, and a rejection under a `require` rule, are open to everyone and are not what this
/// answers.)
pub fn may_decide(issued: &Issued, client_id: Option<&str>, groups: &[String], loopback_peer: bool) -> bool {
    if let Some(required) = &issued.required {
        return required.admits(groups);
    }
    match issued.policy {
        Policy::FirstResponder => true,
        Policy::Designated => match (&issued.originator, client_id) {
            (None, _) => true,
            (Some(o), Some(c)) => o == c,
            (Some(_), None) => false,
        },
        Policy::LocalOnly => loopback_peer,
        Policy::Consensus => client_id.is_some_and(|c| issued.voters_at_issue.iter().any(|v| v == c)),
    }
}

/// Consensus: the choice the votes cast so far carry on their own, if one reaches the quorum. What
/// decides a request when its voters shrink (a voter that may vote no more leaves, its vote with
/// it) rather than when a ballot arrives.
pub fn standing(issued: &Issued, votes: &BTreeMap<String, Choice>) -> Option<Choice> {
    // A rule's quorum is fixed: a voter who leaves takes their approval, never lowers the bar.
    if issued.policy != Policy::Consensus || issued.required.is_some() {
        return None;
    }
    let mut tallies: BTreeMap<&str, (usize, &Choice)> = BTreeMap::new();
    for choice in votes.values() {
        tallies.entry(choice.option_id()).or_insert((0, choice)).0 += 1;
    }
    let quorum = issued.quorum();
    tallies.into_values().find(|(n, _)| *n >= quorum).map(|(_, choice)| choice.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standing_votes_decide_once_they_reach_the_quorum_of_the_voters_left() {
        let allow = Choice::Option("allow_once".into());
        let deny = Choice::Option("reject_once".into());
        let votes = |cast: &[(&str, &Choice)]| -> BTreeMap<String, Choice> {
            cast.iter().map(|(v, c)| ((*v).to_owned(), (*c).clone())).collect()
        };
        // Two voters: a quorum of two; alice's vote alone stands once bob has left.
        let two = issued(Policy::Consensus, None, &["alice", "bob"], None);
        assert_eq!(standing(&two, &votes(&[("alice", &allow)])), None);
        let one = issued(Policy::Consensus, None, &["alice"], None);
        assert_eq!(standing(&one, &votes(&[("alice", &allow)])), Some(allow.clone()));
        assert_eq!(standing(&one, &votes(&[])), None);
        // Three left of five: a quorum of two.
        let three = issued(Policy::Consensus, None, &["a", "b", "c"], None);
        assert_eq!(standing(&three, &votes(&[("a", &allow), ("b", &deny)])), None);
        assert_eq!(
            standing(&three, &votes(&[("a", &deny), ("b", &allow), ("c", &deny)])),
            Some(deny.clone())
        );
        // A configured quorum stays what it was.
        let fixed = issued(Policy::Consensus, None, &["alice"], Some(2));
        assert_eq!(standing(&fixed, &votes(&[("alice", &allow)])), None);
        // Only consensus counts votes.
        let first = issued(Policy::FirstResponder, None, &["alice"], None);
        assert_eq!(standing(&first, &votes(&[("alice", &allow)])), None);
    }

    fn issued(policy: Policy, originator: Option<&str>, voters: &[&str], quorum: Option<usize>) -> Issued {
        Issued {
            policy,
            originator: originator.map(str::to_owned),
            voters_at_issue: voters.iter().map(|v| v.to_string()).collect(),
            quorum,
            question: false,
            required: None,
        }
    }

    /// The same, for a question.
    fn asked(policy: Policy, originator: Option<&str>, voters: &[&str]) -> Issued {
        Issued { question: true, ..issued(policy, originator, voters, None) }
    }

    /// A `require` rule's demand: `quorum` approvals, of `group`'s members if it names one.
    fn rule(quorum: usize, group: Option<&str>) -> Required {
        Required { rule_id: "rule-1".into(), quorum, group: group.map(str::to_owned) }
    }

    fn opt(id: &str) -> Choice {
        Choice::Option(id.to_owned())
    }

    fn prior(votes: &[(&str, &str)]) -> BTreeMap<String, Choice> {
        votes.iter().map(|(w, o)| (w.to_string(), opt(o))).collect()
    }

    use Decision::{Decided, Forbidden, Partial};
    use ForbidReason::{DesignatedMismatch, RemoteNotAllowed};
    use Policy::{Consensus, Designated, FirstResponder, LocalOnly};

    /// The wire names of `permission_forbidden.reason` and the 403's `reason` (docs/protocol.md § 8).
    #[test]
    fn forbid_reasons_have_their_wire_names() {
        assert_eq!(DesignatedMismatch.as_str(), "designated_mismatch");
        assert_eq!(RemoteNotAllowed.as_str(), "remote_not_allowed");
        assert_eq!(ForbidReason::GroupRequired.as_str(), "group_required");
    }

    /// Every row of the policy table in `docs/protocol.md#8-permission-mediation`, plus the cancel escape, as (issued, prior, ballot, expected).
    #[test]
    fn decision_table() {
        let allow = opt("allow");
        let deny = opt("deny");
        let cancel = Choice::Cancel;
        #[allow(clippy::type_complexity)]
        let rows: Vec<(
            &str,
            Issued,
            BTreeMap<String, Choice>,
            Option<&str>,
            bool,
            &Choice,
            Decision,
        )> = vec![
            (
                "first-responder: any vote decides",
                issued(FirstResponder, Some("a"), &[], None),
                prior(&[]),
                Some("z"),
                false,
                &allow,
                Decided(allow.clone()),
            ),
            (
                "first-responder: anonymous vote decides",
                issued(FirstResponder, None, &[], None),
                prior(&[]),
                None,
                false,
                &deny,
                Decided(deny.clone()),
            ),
            (
                "designated: originator decides",
                issued(Designated, Some("a"), &[], None),
                prior(&[]),
                Some("a"),
                false,
                &allow,
                Decided(allow.clone()),
            ),
            (
                "designated: another client is refused",
                issued(Designated, Some("a"), &[], None),
                prior(&[]),
                Some("b"),
                true,
                &allow,
                Forbidden(DesignatedMismatch),
            ),
            (
                "designated: anonymous is refused",
                issued(Designated, Some("a"), &[], None),
                prior(&[]),
                None,
                true,
                &allow,
                Forbidden(DesignatedMismatch),
            ),
            (
                "designated: no originator behaves as first-responder",
                issued(Designated, None, &[], None),
                prior(&[]),
                Some("b"),
                false,
                &allow,
                Decided(allow.clone()),
            ),
            (
                "local-only: loopback peer decides",
                issued(LocalOnly, None, &[], None),
                prior(&[]),
                None,
                true,
                &allow,
                Decided(allow.clone()),
            ),
            (
                "local-only: remote peer refused even with the originator's id",
                issued(LocalOnly, Some("a"), &[], None),
                prior(&[]),
                Some("a"),
                false,
                &allow,
                Forbidden(RemoteNotAllowed),
            ),
            (
                "consensus: 1 of 1 decides",
                issued(Policy::Consensus, None, &["a"], None),
                prior(&[]),
                Some("a"),
                false,
                &allow,
                Decided(allow.clone()),
            ),
            (
                "consensus: first of 3 is partial",
                issued(Policy::Consensus, None, &["a", "b", "c"], None),
                prior(&[]),
                Some("a"),
                false,
                &allow,
                Partial {
                    votes_received: 1,
                    votes_needed: 2,
                    quorum: 2,
                    tallies: [("allow".to_owned(), 1)].into(),
                },
            ),
            (
                "consensus: second matching of 3 decides",
                issued(Policy::Consensus, None, &["a", "b", "c"], None),
                prior(&[("a", "allow")]),
                Some("b"),
                false,
                &allow,
                Decided(allow.clone()),
            ),
            (
                "consensus: split 2 of 3 stays partial",
                issued(Policy::Consensus, None, &["a", "b", "c"], None),
                prior(&[("a", "allow")]),
                Some("b"),
                false,
                &deny,
                Partial {
                    votes_received: 2,
                    votes_needed: 2,
                    quorum: 2,
                    tallies: [("allow".to_owned(), 1), ("deny".to_owned(), 1)].into(),
                },
            ),
            (
                "consensus: M=2 split waits (quorum 2)",
                issued(Policy::Consensus, None, &["a", "b"], None),
                prior(&[("a", "deny")]),
                Some("b"),
                false,
                &allow,
                Partial {
                    votes_received: 2,
                    votes_needed: 2,
                    quorum: 2,
                    tallies: [("allow".to_owned(), 1), ("deny".to_owned(), 1)].into(),
                },
            ),
            (
                "consensus: a re-vote replaces the earlier one",
                issued(Policy::Consensus, None, &["a", "b", "c"], None),
                prior(&[("a", "deny")]),
                Some("a"),
                false,
                &allow,
                Partial {
                    votes_received: 1,
                    votes_needed: 2,
                    quorum: 2,
                    tallies: [("allow".to_owned(), 1)].into(),
                },
            ),
            (
                "consensus: configured quorum 1 decides at once",
                issued(Policy::Consensus, None, &["a", "b", "c"], Some(1)),
                prior(&[]),
                Some("c"),
                false,
                &deny,
                Decided(deny.clone()),
            ),
            (
                "consensus: configured quorum 3 of 3 waits for all",
                issued(Policy::Consensus, None, &["a", "b", "c"], Some(3)),
                prior(&[("a", "allow")]),
                Some("b"),
                false,
                &allow,
                Partial {
                    votes_received: 2,
                    votes_needed: 3,
                    quorum: 3,
                    tallies: [("allow".to_owned(), 2)].into(),
                },
            ),
            (
                "consensus: late joiner refused",
                issued(Policy::Consensus, None, &["a", "b"], None),
                prior(&[]),
                Some("late"),
                true,
                &allow,
                Forbidden(DesignatedMismatch),
            ),
            (
                "consensus: anonymous refused",
                issued(Policy::Consensus, None, &["a", "b"], None),
                prior(&[]),
                None,
                true,
                &allow,
                Forbidden(DesignatedMismatch),
            ),
            (
                "cancel escape: first-responder",
                issued(FirstResponder, None, &[], None),
                prior(&[]),
                None,
                false,
                &cancel,
                Decided(Choice::Cancel),
            ),
            (
                "cancel escape: designated non-originator",
                issued(Designated, Some("a"), &[], None),
                prior(&[]),
                Some("b"),
                false,
                &cancel,
                Decided(Choice::Cancel),
            ),
            (
                "cancel escape: consensus outsider",
                issued(Policy::Consensus, None, &["a", "b"], None),
                prior(&[("a", "allow")]),
                Some("x"),
                false,
                &cancel,
                Decided(Choice::Cancel),
            ),
            (
                "cancel escape: local-only remote peer",
                issued(LocalOnly, None, &[], None),
                prior(&[]),
                None,
                false,
                &cancel,
                Decided(Choice::Cancel),
            ),
            (
                "question, consensus: the first answer of a voter at issue decides",
                asked(Consensus, None, &["a", "b", "c"]),
                prior(&[]),
                Some("b"),
                false,
                &allow,
                Decided(allow.clone()),
            ),
            (
                "question, consensus: so does a decline",
                asked(Consensus, None, &["a", "b", "c"]),
                prior(&[]),
                Some("c"),
                false,
                &deny,
                Decided(deny.clone()),
            ),
            (
                "question, consensus: not a voter at issue",
                asked(Consensus, None, &["a", "b"]),
                prior(&[]),
                Some("z"),
                true,
                &allow,
                Forbidden(DesignatedMismatch),
            ),
            (
                "question, designated: only the originator",
                asked(Designated, Some("a"), &[]),
                prior(&[]),
                Some("b"),
                true,
                &allow,
                Forbidden(DesignatedMismatch),
            ),
            (
                "question, local-only: a remote peer may not answer",
                asked(LocalOnly, None, &[]),
                prior(&[]),
                Some("a"),
                false,
                &allow,
                Forbidden(RemoteNotAllowed),
            ),
            (
                "question, first-responder: anyone",
                asked(FirstResponder, None, &[]),
                prior(&[]),
                None,
                false,
                &allow,
                Decided(allow.clone()),
            ),
        ];
        for (name, issued, prior, client, loopback, choice, expected) in rows {
            let ballot = Cast {
                caster: Caster::Person,
                client_id: client,
                voter: client.unwrap_or("operator"),
                groups: &[],
                approves: true,
                loopback_peer: loopback,
                choice,
            };
            assert_eq!(decide(&issued, &prior, &ballot), expected, "{name}");
        }
    }

    /// A reviewer decides under every policy where it is trusted, and only informs elsewhere;
    /// it never takes the cancel escape, which is the people's.
    #[test]
    fn a_reviewer_decides_only_where_trusted_under_every_policy() {
        let allow = opt("allow");
        let policies = [Policy::FirstResponder, Policy::Designated, Policy::LocalOnly, Policy::Consensus];
        for policy in policies {
            let issued = issued(policy, Some("alice"), &["alice", "bob"], None);
            let cast = |decides, choice| Cast {
                caster: Caster::Reviewer { decides },
                client_id: Some("reviewer:guard"),
                voter: "reviewer:guard",
                groups: &[],
                approves: true,
                loopback_peer: false,
                choice,
            };
            let none = BTreeMap::new();
            assert_eq!(
                decide(&issued, &none, &cast(true, &allow)),
                Decision::Decided(allow.clone()),
                "{policy:?}"
            );
            assert_eq!(decide(&issued, &none, &cast(false, &allow)), Decision::Informed, "{policy:?}");
            assert_eq!(
                decide(&issued, &none, &cast(true, &Choice::Cancel)),
                Decision::Informed,
                "{policy:?}"
            );
        }
    }

    #[test]
    fn default_quorum_is_a_strict_majority() {
        for (m, q) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3)] {
            let voters: Vec<String> = (0..m).map(|i| i.to_string()).collect();
            let issued = Issued {
                policy: Consensus,
                originator: None,
                voters_at_issue: voters,
                quorum: None,
                question: false,
                required: None,
            };
            assert_eq!(issued.quorum(), q, "M={m}");
        }
    }

    /// A `require` rule's quorum, under every policy: distinct voters' approvals count, the same
    /// voter's twice once; one rejection decides; a reviewer only informs; the cancel escape holds;
    /// a voter leaving never lowers the bar.
    #[test]
    fn a_require_rule_needs_its_quorum_of_distinct_voters_whatever_the_policy() {
        let (allow, always, deny) = (opt("allow"), opt("allow-always"), opt("deny"));
        let policies = [Policy::FirstResponder, Policy::Designated, Policy::LocalOnly, Policy::Consensus];
        let person = |voter, approves, choice| Cast {
            caster: Caster::Person,
            client_id: Some(voter),
            voter,
            groups: &[],
            approves,
            loopback_peer: false,
            choice,
        };
        for policy in policies {
            // Designated to someone else, remote voters, a consensus that named nobody: the rule's
            // quorum replaces the policy, so none of it forbids.
            let issued = Issued { required: Some(rule(2, None)), ..issued(policy, Some("zed"), &[], None) };
            assert!(may_decide(&issued, Some("ada"), &[], false), "{policy:?}");
            let first = decide(&issued, &prior(&[]), &person("ada", true, &allow));
            assert_eq!(
                first,
                Decision::Partial {
                    votes_received: 1,
                    votes_needed: 2,
                    quorum: 2,
                    tallies: BTreeMap::from([("allow".to_owned(), 1)])
                },
                "{policy:?}"
            );
            // The same voter again (another option, another door): still one approval.
            let again = decide(&issued, &prior(&[("ada", "allow")]), &person("ada", true, &always));
            assert!(matches!(again, Decision::Partial { votes_received: 1, .. }), "{policy:?}: {again:?}");
            // A second voter decides with their own choice, whichever allow it is.
            assert_eq!(
                decide(&issued, &prior(&[("ada", "allow")]), &person("grace", true, &always)),
                Decision::Decided(always.clone()),
                "{policy:?}"
            );
            // One rejection stops it, approvals or not.
            assert_eq!(
                decide(&issued, &prior(&[("ada", "allow")]), &person("grace", false, &deny)),
                Decision::Decided(deny.clone()),
                "{policy:?}"
            );
            assert_eq!(
                decide(&issued, &prior(&[]), &person("ada", true, &Choice::Cancel)),
                Decision::Decided(Choice::Cancel),
                "{policy:?}"
            );
            let reviewer =
                Cast { caster: Caster::Reviewer { decides: true }, ..person("reviewer:guard", true, &allow) };
            assert_eq!(decide(&issued, &prior(&[]), &reviewer), Decision::Informed, "{policy:?}");
            assert_eq!(standing(&issued, &prior(&[("ada", "allow")])), None, "{policy:?}");
        }
        // A quorum of one: the first approval decides.
        let one = Issued {
            required: Some(rule(1, None)),
            ..issued(Policy::Consensus, None, &["a", "b", "c"], None)
        };
        assert_eq!(decide(&one, &prior(&[]), &person("ada", true, &allow)), Decision::Decided(allow.clone()));
    }

    /// A `require` rule naming a group, under every policy: a member's approval counts (a person
    /// in several groups too), a non-member's is refused and counts nothing, anyone's rejection or
    /// cancel decides, a reviewer only informs; `may_decide` asks members only.
    #[test]
    fn a_require_rule_with_a_group_counts_only_its_members_approvals() {
        let (allow, deny) = (opt("allow"), opt("deny"));
        let admins = ["staff".to_owned(), "admins".to_owned()];
        let staff = ["staff".to_owned(), "admins-2".to_owned()];
        let cast = |voter, groups, approves, choice| Cast {
            caster: Caster::Person,
            client_id: Some(voter),
            voter,
            groups,
            approves,
            loopback_peer: false,
            choice,
        };
        let policies = [Policy::FirstResponder, Policy::Designated, Policy::LocalOnly, Policy::Consensus];
        for policy in policies {
            let two = Issued { required: Some(rule(2, Some("admins"))), ..issued(policy, None, &[], None) };
            let one = Issued { required: Some(rule(1, Some("admins"))), ..two.clone() };
            assert_eq!(
                decide(&one, &prior(&[]), &cast("grace", &admins, true, &allow)),
                Decided(allow.clone()),
                "{policy:?}: a member decides a quorum of one"
            );
            assert_eq!(
                decide(&two, &prior(&[]), &cast("grace", &admins, true, &allow)),
                Partial {
                    votes_received: 1,
                    votes_needed: 2,
                    quorum: 2,
                    tallies: [("allow".to_owned(), 1)].into()
                },
                "{policy:?}: a member's approval counts"
            );
            for groups in [&staff[..], &[]] {
                assert_eq!(
                    decide(&one, &prior(&[]), &cast("ada", groups, true, &allow)),
                    Forbidden(ForbidReason::GroupRequired),
                    "{policy:?}: {groups:?} is not a member"
                );
                assert!(!may_decide(&one, Some("ada"), groups, true), "{policy:?}: {groups:?}");
                assert_eq!(
                    decide(&one, &prior(&[]), &cast("ada", groups, false, &deny)),
                    Decided(deny.clone()),
                    "{policy:?}: a non-member's rejection stops it"
                );
                assert_eq!(
                    decide(&one, &prior(&[]), &cast("ada", groups, false, &Choice::Cancel)),
                    Decided(Choice::Cancel),
                    "{policy:?}: so does their cancel"
                );
            }
            assert!(may_decide(&one, Some("grace"), &admins, false), "{policy:?}");
            let reviewer = Cast {
                caster: Caster::Reviewer { decides: true },
                ..cast("reviewer:guard", &admins, true, &allow)
            };
            assert_eq!(decide(&one, &prior(&[]), &reviewer), Decision::Informed, "{policy:?}");
        }
    }

    /// `may_decide` says yes exactly where `decide` does not forbid, under every policy.
    #[test]
    fn may_decide_agrees_with_decide() {
        let policies = [Policy::FirstResponder, Policy::Designated, Policy::LocalOnly, Policy::Consensus];
        let voters = [None, Some("a"), Some("b"), Some("z")];
        let requires = [None, Some(rule(2, None)), Some(rule(1, Some("admins")))];
        let admins = ["admins".to_owned()];
        for policy in policies {
            for (originator, question) in [None, Some("a")].into_iter().flat_map(|o| [(o, false), (o, true)])
            {
                for required in requires.clone() {
                    let issued =
                        Issued { question, required, ..issued(policy, originator, &["a", "b"], None) };
                    for (voter, groups) in voters.into_iter().flat_map(|v| [(v, &[][..]), (v, &admins[..])]) {
                        for loopback in [false, true] {
                            let choice = opt("allow");
                            let ballot = Cast {
                                caster: Caster::Person,
                                client_id: voter,
                                voter: voter.unwrap_or("operator"),
                                groups,
                                approves: true,
                                loopback_peer: loopback,
                                choice: &choice,
                            };
                            let allowed =
                                !matches!(decide(&issued, &BTreeMap::new(), &ballot), Decision::Forbidden(_));
                            assert_eq!(
                                may_decide(&issued, voter, groups, loopback),
                                allowed,
                                "{policy:?} originator {originator:?} voter {voter:?} {groups:?} loopback {loopback} question {question} {:?}",
                                issued.required
                            );
                        }
                    }
                }
            }
        }
    }
}

//! The store's decisions, pure: where a session's history has a gap, what a paging cursor says,
//! what retention removes, which audit entries a query selects, what of a database URL a message
//! may show. Both stores and the writer use them; their tests are tables, and `cargo mutants -f
//! src/store/decide.rs` checks they bite.

use std::collections::HashMap;
use std::sync::Arc;

/// `GET /audit`'s filters and page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditQuery {
    pub workspace: Option<String>,
    pub session_id: Option<String>,
    /// Requested at or after (ms).
    pub since: Option<u64>,
    /// Requested before (ms).
    pub until: Option<u64>,
    pub outcome: Option<AuditOutcome>,
    /// Continue after this position (the previous page's `nextCursor`).
    pub cursor: Option<Cursor>,
    pub limit: usize,
}

/// How a permission request ended, as the audit filters on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditOutcome {
    /// Still waiting (only while the daemon that raised it runs).
    Pending,
    /// An offered option was chosen (by a vote or a rule).
    Selected,
    /// Cancelled (a vote, a cancel, a close, the shutdown).
    Cancelled,
    /// Nobody answered within `--permission-timeout-ms`.
    TimedOut,
    /// The daemon stopped or died while it was pending: found so at the next start.
    Abandoned,
    /// Not a request of the agent's: a process the daemon started tried to act as its client,
    /// and was refused (`crate::desk`).
    Refused,
    /// Not a permission request: files a turn changed that no approved request named
    /// (`docs/protocol.md` § 18).
    Unapproved,
    /// Not a permission request: a client rewound a session's files (`docs/protocol.md` § 18).
    Rewound,
    /// Not a request of the agent's either: a client deleted a recorded session and its history
    /// (ACP `session/delete`, `crate::desk`).
    Deleted,
}

impl AuditOutcome {
    pub const ALL: [AuditOutcome; 9] = [
        AuditOutcome::Pending,
        AuditOutcome::Selected,
        AuditOutcome::Cancelled,
        AuditOutcome::TimedOut,
        AuditOutcome::Abandoned,
        AuditOutcome::Unapproved,
        AuditOutcome::Rewound,
        AuditOutcome::Refused,
        AuditOutcome::Deleted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AuditOutcome::Pending => "pending",
            AuditOutcome::Selected => "selected",
            AuditOutcome::Cancelled => "cancelled",
            AuditOutcome::TimedOut => "timed_out",
            AuditOutcome::Abandoned => "abandoned",
            AuditOutcome::Unapproved => "unapproved",
            AuditOutcome::Rewound => "rewound",
            AuditOutcome::Refused => "refused",
            AuditOutcome::Deleted => "deleted",
        }
    }

    pub fn parse(s: &str) -> Option<AuditOutcome> {
        AuditOutcome::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// A position in the audit, newest first: the next page holds entries strictly older than it.
/// On the wire it is opaque text (`c` + hex); clients pass back what they were given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor(pub u64);

impl Cursor {
    pub fn encode(self) -> String {
        format!("c{:x}", self.0)
    }

    /// `None` for anything [`Cursor::encode`] did not produce: positions are SQLite row ids, at
    /// most `i64::MAX` (a larger one would wrap negative where it is bound).
    pub fn decode(s: &str) -> Option<Cursor> {
        let hex = s.strip_prefix('c')?;
        if hex.is_empty()
            || hex.len() > 16
            || !hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            return None;
        }
        u64::from_str_radix(hex, 16).ok().filter(|n| i64::try_from(*n).is_ok()).map(Cursor)
    }
}

/// The latest time an audit query may name, in ms since the Unix epoch: JavaScript's largest safe
/// integer (as for event ids), the year 287396; a larger one would wrap negative in SQLite's
/// signed integers and select everything (issue #27, finding 14).
pub const MAX_TIME_MS: u64 = (1 << 53) - 1;

/// `ms` as SQLite binds it, never wrapped: past `i64::MAX` it stays `i64::MAX`.
pub(super) fn sql_int(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// Finds gaps in each session's recorded ids: the writer sees every event it was handed, in id
/// order per session (they are handed over under the bus's lock); an id that does not follow the
/// last one means the events between were dropped.
#[derive(Debug, Default)]
pub(super) struct GapTracker {
    last: HashMap<Arc<str>, u64>,
}

/// What [`GapTracker::observe`] makes of a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Burst {
    /// Its first `skip` events are duplicates, not recorded.
    pub(super) skip: usize,
    /// The ids missed before the first event recorded.
    pub(super) gap: Option<(u64, u64)>,
}

impl GapTracker {
    /// A session starts recording after `after_id`.
    pub(super) fn start(&mut self, session_id: Arc<str>, after_id: u64) {
        self.last.insert(session_id, after_id);
    }

    /// Events `first_id..first_id + count` of `session_id` arrive, a burst (consecutive: handed
    /// over under the bus's lock): how many of its first are at or below the last id recorded
    /// (duplicates, never re-recorded; they can only be a prefix), and the ids missed before the
    /// rest, if any. One lookup per burst rather than two per event (issue #46).
    pub(super) fn observe(&mut self, session_id: &Arc<str>, first_id: u64, count: usize) -> Burst {
        let last = self.last.get(&**session_id).copied();
        let seen = last.map_or(0, |last| last.saturating_add(1).saturating_sub(first_id));
        let skip = usize::try_from(seen).map_or(count, |seen| seen.min(count));
        if skip == count {
            return Burst { skip, gap: None };
        }
        // Skipped duplicates mean the burst started at or below `last`: no gap then.
        let gap = last.filter(|&last| first_id > last + 1).map(|last| (last + 1, first_id - 1));
        let newest = first_id + (count as u64 - 1);
        match self.last.get_mut(&**session_id) {
            Some(last) => *last = newest,
            None => {
                self.last.insert(session_id.clone(), newest);
            }
        }
        Burst { skip, gap }
    }

    /// The session ended with `last_id` as its last event: the trailing ids never received, if any.
    pub(super) fn end(&mut self, session_id: &str, last_id: u64) -> Option<(u64, u64)> {
        let last = self.last.remove(session_id)?;
        (last_id > last).then(|| (last + 1, last_id))
    }

    /// What the tracker knows of `session_id` now, to [`restore`](GapTracker::restore) when the
    /// transaction about to record its events fails.
    pub(super) fn mark(&self, session_id: &str) -> Option<u64> {
        self.last.get(session_id).copied()
    }

    /// Puts back what [`mark`](GapTracker::mark) saw: the events observed since were not recorded,
    /// so the next one recorded (or the session's end) finds them missing, as a gap.
    pub(super) fn restore(&mut self, session_id: Arc<str>, mark: Option<u64>) {
        match mark {
            Some(last) => self.last.insert(session_id, last),
            None => self.last.remove(&session_id),
        };
    }
}

/// The smallest event id a session keeps when its newest is `last_id` and `keep` are kept:
/// everything below goes. `keep = 0` keeps nothing.
pub(super) fn events_cutoff(last_id: u64, keep: u64) -> u64 {
    (last_id + 1).saturating_sub(keep)
}

/// The moment (ms) before which ended sessions and audit entries are removed, `days` days before
/// `now_ms`. `days = 0` means no age limit: nothing is old enough.
pub(super) fn age_cutoff(now_ms: u64, days: u64) -> Option<u64> {
    (days > 0).then(|| now_ms.saturating_sub(days.saturating_mul(24 * 60 * 60 * 1000)))
}

/// Whether an audit entry at position `seq`, with these facts, is on the page `query` asks for.
pub(super) fn audit_selects(
    query: &AuditQuery,
    seq: u64,
    workspace: &str,
    session_id: &str,
    requested_at: u64,
    outcome: Option<AuditOutcome>,
) -> bool {
    query.cursor.is_none_or(|c| seq < c.0)
        && query.workspace.as_deref().is_none_or(|w| w == workspace)
        && query.session_id.as_deref().is_none_or(|s| s == session_id)
        && query.since.is_none_or(|t| requested_at >= t)
        && query.until.is_none_or(|t| requested_at < t)
        && query.outcome.is_none_or(|o| outcome.unwrap_or(AuditOutcome::Pending) == o)
}

/// The outcome a resolved request is filed under: a timeout is `timed_out` whatever the agent was
/// answered; otherwise the choice decides.
pub fn outcome_of(resolved_by: &str, selected: bool) -> AuditOutcome {
    match (resolved_by, selected) {
        ("timeout", _) => AuditOutcome::TimedOut,
        (_, true) => AuditOutcome::Selected,
        (_, false) => AuditOutcome::Cancelled,
    }
}

/// Who keeps a recorded session when daemon `me` claims it to start an agent on it
/// (`Fleet::claim_session`, under the row's lock): another daemon, when the session is live there
/// under a lease that still holds; else nobody, and `me` may take it. A session `me` itself is
/// recorded as holding live is one its earlier life left (the daemon's own table, checked first,
/// does not have it), and one whose holder's lease ran out is no daemon's: one agent per session,
/// in the whole fleet.
pub(super) fn kept_by<'a>(
    live: bool,
    owner: Option<&'a str>,
    owner_alive: bool,
    me: &str,
) -> Option<&'a str> {
    owner.filter(|o| live && owner_alive && *o != me)
}

/// The URL without its password, for messages: the password of the userinfo goes, and so do the
/// query's parameters (`?password=…` is libpq's too).
pub(super) fn shown(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, _)) => (base, "?…"),
        None => (url, ""),
    };
    match (base.find("://"), base.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &base[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}@{}{query}", &base[..scheme + 3], &base[at + 1..])
        }
        _ if base.contains("://") => format!("{base}{query}"),
        // `key=value` form: it may hold a password anywhere.
        _ => "(a connection string)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arc(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn a_session_is_kept_only_by_another_live_daemon_whose_lease_holds() {
        type Case<'a> = (bool, Option<&'a str>, bool, Option<&'a str>);
        let cases: [Case<'_>; 8] = [
            (true, Some("http://a"), true, Some("http://a")),
            // Its holder's lease ran out: nobody's.
            (true, Some("http://a"), false, None),
            // Not live (dormant, closed): nobody's, whoever held it last.
            (false, Some("http://a"), true, None),
            (false, Some("http://a"), false, None),
            // Recorded as this daemon's own: what its earlier life left.
            (true, Some("http://me"), true, None),
            // Never owned (a store of one daemon, or written before the fleet).
            (true, None, true, None),
            (false, None, false, None),
            (true, Some("http://b"), true, Some("http://b")),
        ];
        for (live, owner, alive, want) in cases {
            assert_eq!(kept_by(live, owner, alive, "http://me"), want, "{live} {owner:?} {alive}");
        }
    }

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        for n in [0, 1, 15, 16, 255, i64::MAX as u64] {
            assert_eq!(Cursor::decode(&Cursor(n).encode()), Some(Cursor(n)), "{n}");
        }
        assert_eq!(Cursor(255).encode(), "cff");
        // Only what `encode` writes: no leading zeros beyond 16 digits, no upper case.
        for bad in [
            "",
            "c",
            "ff",
            "cG",
            "cFF",
            "c-1",
            "c 1",
            "c11111111111111111",
            "c00000000000000001",
            "d1",
            "c1 ",
        ] {
            assert_eq!(Cursor::decode(bad), None, "{bad:?}");
        }
        assert_eq!(Cursor::decode("cffffffffffffffff"), None, "past the largest row id");
    }

    #[test]
    fn gaps_are_the_ids_between_two_recorded_ones() {
        let mut t = GapTracker::default();
        let s = arc("s");
        let burst = |skip, gap| Burst { skip, gap };
        t.start(s.clone(), 0);
        assert_eq!(t.observe(&s, 1, 2), burst(0, None));
        assert_eq!(t.observe(&s, 5, 2), burst(0, Some((3, 4))));
        assert_eq!(t.observe(&s, 8, 1), burst(0, Some((7, 7))));
        // Duplicates or older ids are not a gap and do not move the mark back.
        assert_eq!(t.observe(&s, 3, 6), burst(6, None));
        assert_eq!(t.observe(&s, 8, 1), burst(1, None));
        assert_eq!(t.mark("s"), Some(8));
        // A burst that starts among them records from the first new id, with no gap.
        assert_eq!(t.observe(&s, 7, 4), burst(2, None));
        assert_eq!(t.mark("s"), Some(10));
        // Nothing changes with an empty burst.
        assert_eq!(t.observe(&s, 20, 0), burst(0, None));
        assert_eq!(t.end("s", 12), Some((11, 12)));
        assert_eq!(t.end("s", 12), None, "ended once");
    }

    #[test]
    fn a_resumed_session_continues_after_its_last_id() {
        let mut t = GapTracker::default();
        let s = arc("s");
        t.start(s.clone(), 40);
        assert_eq!(t.observe(&s, 41, 1), Burst { skip: 0, gap: None });
        assert_eq!(t.end("s", 41), None);
        t.start(s.clone(), 41);
        assert_eq!(t.observe(&s, 43, 3), Burst { skip: 0, gap: Some((42, 42)) });
        assert_eq!(t.mark("other"), None);
    }

    #[test]
    fn events_of_a_failed_transaction_become_a_gap_once_restored() {
        let mut t = GapTracker::default();
        let s = arc("s");
        t.start(s.clone(), 0);
        assert_eq!(t.observe(&s, 1, 1).gap, None);
        let before = t.mark("s");
        assert_eq!(before, Some(1));
        // Ids 2 and 3 go into a transaction that fails.
        assert_eq!(t.observe(&s, 2, 2).gap, None);
        t.restore(s.clone(), before);
        assert_eq!(t.observe(&s, 4, 1), Burst { skip: 0, gap: Some((2, 3)) });
        // A session the failed transaction started is forgotten again.
        let n = arc("n");
        let unseen = t.mark("n");
        assert_eq!(unseen, None);
        t.start(n.clone(), 7);
        t.restore(n.clone(), unseen);
        assert_eq!(t.mark("n"), None);
        assert_eq!(t.end("n", 9), None);
    }

    #[test]
    fn cursors_and_times_never_wrap_negative() {
        assert_eq!(Cursor::decode("c7fffffffffffffff"), Some(Cursor(i64::MAX as u64)));
        assert_eq!(Cursor::decode("c8000000000000000"), None);
        assert_eq!(Cursor::decode("cffffffffffffffff"), None);
        assert_eq!(sql_int(5), 5);
        assert_eq!(sql_int(i64::MAX as u64), i64::MAX);
        assert_eq!(sql_int(i64::MAX as u64 + 1), i64::MAX);
        assert_eq!(sql_int(u64::MAX), i64::MAX);
    }

    #[test]
    fn a_session_never_started_begins_at_its_first_id() {
        let mut t = GapTracker::default();
        let s = arc("s");
        assert_eq!(t.observe(&s, 7, 1), Burst { skip: 0, gap: None });
        assert_eq!(t.mark("s"), Some(7));
        assert_eq!(t.observe(&s, 9, 1), Burst { skip: 0, gap: Some((8, 8)) });
        assert_eq!(t.end("s", 9), None);
        assert_eq!(t.end("unknown", 3), None);
    }

    #[test]
    fn retention_keeps_the_newest_events() {
        assert_eq!(events_cutoff(100, 10), 91);
        assert_eq!(events_cutoff(100, 100), 1);
        assert_eq!(events_cutoff(100, 1000), 0);
        assert_eq!(events_cutoff(5, 0), 6);
        assert_eq!(events_cutoff(0, 3), 0);
    }

    #[test]
    fn age_cutoff_is_days_before_now_and_zero_days_is_none() {
        let day = 24 * 60 * 60 * 1000;
        assert_eq!(age_cutoff(10 * day, 3), Some(7 * day));
        assert_eq!(age_cutoff(10 * day, 10), Some(0));
        assert_eq!(age_cutoff(day, 30), Some(0));
        assert_eq!(age_cutoff(10 * day, 0), None);
        assert_eq!(age_cutoff(10 * day, u64::MAX), Some(0));
    }

    #[test]
    fn audit_filters_select_by_every_field() {
        let q = |f: &dyn Fn(&mut AuditQuery)| {
            let mut q = AuditQuery { limit: 10, ..AuditQuery::default() };
            f(&mut q);
            q
        };
        let sel = AuditOutcome::Selected;
        let all = q(&|_| {});
        assert!(audit_selects(&all, 5, "/w", "s", 100, Some(sel)));
        let cursor = q(&|q| q.cursor = Some(Cursor(5)));
        assert!(!audit_selects(&cursor, 5, "/w", "s", 100, Some(sel)));
        assert!(audit_selects(&cursor, 4, "/w", "s", 100, Some(sel)));
        let ws = q(&|q| q.workspace = Some("/w".into()));
        assert!(audit_selects(&ws, 1, "/w", "s", 100, None));
        assert!(!audit_selects(&ws, 1, "/x", "s", 100, None));
        let sid = q(&|q| q.session_id = Some("s".into()));
        assert!(audit_selects(&sid, 1, "/w", "s", 100, None));
        assert!(!audit_selects(&sid, 1, "/w", "t", 100, None));
        let since = q(&|q| q.since = Some(100));
        assert!(audit_selects(&since, 1, "/w", "s", 100, None));
        assert!(!audit_selects(&since, 1, "/w", "s", 99, None));
        let until = q(&|q| q.until = Some(100));
        assert!(audit_selects(&until, 1, "/w", "s", 99, None));
        assert!(!audit_selects(&until, 1, "/w", "s", 100, None));
        let pending = q(&|q| q.outcome = Some(AuditOutcome::Pending));
        assert!(audit_selects(&pending, 1, "/w", "s", 1, None));
        assert!(!audit_selects(&pending, 1, "/w", "s", 1, Some(sel)));
        let abandoned = q(&|q| q.outcome = Some(AuditOutcome::Abandoned));
        assert!(audit_selects(&abandoned, 1, "/w", "s", 1, Some(AuditOutcome::Abandoned)));
        assert!(!audit_selects(&abandoned, 1, "/w", "s", 1, Some(sel)));
    }

    #[test]
    fn outcomes_parse_and_file_by_how_they_ended() {
        for o in AuditOutcome::ALL {
            assert_eq!(AuditOutcome::parse(o.as_str()), Some(o));
        }
        assert_eq!(AuditOutcome::parse("nope"), None);
        assert_eq!(outcome_of("timeout", false), AuditOutcome::TimedOut);
        assert_eq!(outcome_of("timeout", true), AuditOutcome::TimedOut);
        assert_eq!(outcome_of("vote", true), AuditOutcome::Selected);
        assert_eq!(outcome_of("rule", false), AuditOutcome::Cancelled);
        assert_eq!(outcome_of("cancel", false), AuditOutcome::Cancelled);
    }

    #[test]
    fn a_url_is_shown_without_its_password() {
        assert_eq!(shown("postgres://me:s3cret@db:5432/m"), "postgres://me@db:5432/m");
        assert_eq!(shown("postgres://db/m"), "postgres://db/m");
        assert_eq!(shown("host=/run/postgresql password=x"), "(a connection string)");
        assert_eq!(shown("postgres://me@db/m?password=s3cret&sslmode=disable"), "postgres://me@db/m?…");
        assert_eq!(shown("postgres://db/m?user=me&password=s3cret"), "postgres://db/m?…");
        assert_eq!(shown("postgres://me:p@ss@db/m"), "postgres://me@db/m", "an @ in the password");
    }
}

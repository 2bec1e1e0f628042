//! Action links: one 256-bit token per (delivery, option), kept only as its SHA-256, single use,
//! expired once its request is decided.
//!
//! The table is shared by every session, so what one request mints never pushes out another's
//! links while it holds its own share: a request keeps at most [`MAX_LINKS_PER_REQUEST`] (its
//! oldest go first), and a full table forgets the oldest link of the session holding the most, so
//! a session only ever loses links to one that holds no more than it does.
//!
//! The table lives in memory only: a pending permission request does not survive a restart (the
//! agent that asked is gone with the daemon), so neither does a link to decide it. A token is
//! looked up by its hash: what a probe's timing could reveal is where the hash of *its own* guess
//! falls in the map, never anything about a real token.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::sync::lock;
use crate::throttle::{Budget, Failures};

/// Links kept at most (a forgotten token answers like an unknown one). 4096 = 64 pending requests
/// (a session's cap) × 4 options × 16 targets, for a busy session.
pub(super) const MAX_LINKS: usize = 4096;
/// Links one request keeps at most; past it its own oldest are forgotten. 256 = 16 options (the
/// mediator's cap per request) × 16 targets: one full round of deliveries, so a reminder round
/// replaces the oldest round's links instead of adding to them.
pub(super) const MAX_LINKS_PER_REQUEST: usize = 256;
/// A token's length in hex characters (32 random bytes).
pub(super) const TOKEN_HEX_LEN: usize = 64;
/// Unknown tokens one client may present per window before `/act/` answers it 429: a real user
/// mistypes a link a few times, a scanner thousands; the token space (2^256) makes guessing
/// hopeless anyway, this keeps a scanner from costing CPU and log lines. A live token is never
/// refused by it (`crate::throttle`).
const MAX_UNKNOWN_PER_WINDOW: u32 = 20;
/// Unknown tokens all clients together may present per window: what spreading guesses over
/// addresses can buy at most.
const MAX_UNKNOWN_ALL_PER_WINDOW: u32 = 200;
const UNKNOWN_WINDOW: Duration = Duration::from_secs(60);
const UNKNOWN_BUDGET: Budget =
    Budget::new(MAX_UNKNOWN_PER_WINDOW, MAX_UNKNOWN_ALL_PER_WINDOW, UNKNOWN_WINDOW);

/// What a link decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub session_id: String,
    pub request_id: String,
    pub option_id: String,
    /// The option's label, for the confirmation page.
    pub option_name: String,
    /// Who the vote is cast as (the target's `clientId`).
    pub client_id: Option<String>,
    /// Its notification could not show the whole request and the option approves it: a `POST`
    /// decides only from the link's page, which shows it all (`docs/notifications.md`).
    pub needs_review: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Live,
    /// A vote through it is being cast (or was).
    Used,
    /// Its request was decided.
    Expired,
}

/// Why a token does not lead to a live link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkError {
    /// Never minted (or forgotten): the same answer as any unknown URL.
    Unknown,
    /// Used, or its request is decided.
    Expired,
}

#[derive(Default)]
struct Table {
    links: HashMap<[u8; 32], (Link, State)>,
    /// Every kept link, oldest first.
    order: VecDeque<[u8; 32]>,
    /// Links kept per session and per request (entries leave at zero).
    per_session: HashMap<String, usize>,
    per_request: HashMap<String, usize>,
}

impl Table {
    /// The link to forget before one more of `link`'s is kept, if one must go.
    fn victim(&self, link: &Link) -> Option<usize> {
        let held = |map: &HashMap<String, usize>, key: &str| map.get(key).copied().unwrap_or(0);
        let oldest = |keep: &dyn Fn(&Link) -> bool| {
            self.order.iter().position(|h| self.links.get(h).is_some_and(|(l, _)| keep(l)))
        };
        if held(&self.per_request, &link.request_id) >= MAX_LINKS_PER_REQUEST {
            return oldest(&|l| l.request_id == link.request_id);
        }
        if self.links.len() < MAX_LINKS {
            return None;
        }
        // The session holding the most; the minting one when it ties, so it never takes a link
        // from a session that holds no more than it does.
        let session = self
            .per_session
            .iter()
            .max_by_key(|(s, n)| (**n, **s == link.session_id))
            .map_or(link.session_id.as_str(), |(s, _)| s.as_str());
        oldest(&|l| l.session_id == session)
    }

    fn forget(&mut self, at: usize) {
        let Some(hash) = self.order.remove(at) else { return };
        if let Some((link, _)) = self.links.remove(&hash) {
            for (map, key) in
                [(&mut self.per_session, &link.session_id), (&mut self.per_request, &link.request_id)]
            {
                if let Some(n) = map.get_mut(key.as_str()) {
                    *n -= 1;
                    if *n == 0 {
                        map.remove(key.as_str());
                    }
                }
            }
        }
    }

    fn keep(&mut self, hash: [u8; 32], link: Link) {
        *self.per_session.entry(link.session_id.clone()).or_default() += 1;
        *self.per_request.entry(link.request_id.clone()).or_default() += 1;
        self.order.push_back(hash);
        self.links.insert(hash, (link, State::Live));
    }
}

/// The link table. Await-free critical sections only.
#[derive(Default)]
pub struct Links {
    table: Mutex<Table>,
    /// Unknown tokens presented, per client and in all.
    unknown: Mutex<Unknown>,
}

struct Unknown(Failures);

impl Default for Unknown {
    fn default() -> Unknown {
        Unknown(Failures::new(UNKNOWN_BUDGET))
    }
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links").field("links", &lock(&self.table).links.len()).finish()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// 32 bytes from the OS as 64 lowercase hex characters; `None` if the OS has no randomness to give
/// (then no link is minted: a predictable token would be worse than none).
fn fresh_token() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Links {
    /// Mints a token for `link`; only its hash is kept. To make room it forgets a link of the same
    /// request, or of the session holding the most (see the module's doc).
    pub fn mint(&self, link: Link) -> Option<String> {
        let token = fresh_token()?;
        let hash = digest(&token);
        let mut t = lock(&self.table);
        if let Some(at) = t.victim(&link) {
            t.forget(at);
        }
        t.keep(hash, link);
        Some(token)
    }

    /// The live link `token` leads to.
    pub fn get(&self, token: &str) -> Result<Link, LinkError> {
        let t = lock(&self.table);
        match t.links.get(&digest(token)) {
            None => Err(LinkError::Unknown),
            Some((link, State::Live)) => Ok(link.clone()),
            Some(_) => Err(LinkError::Expired),
        }
    }

    /// Takes the live link `token` leads to for a vote: nobody else can use it meanwhile.
    pub fn claim(&self, token: &str) -> Result<Link, LinkError> {
        let mut t = lock(&self.table);
        match t.links.get_mut(&digest(token)) {
            None => Err(LinkError::Unknown),
            Some((link, state @ State::Live)) => {
                *state = State::Used;
                Ok(link.clone())
            }
            Some(_) => Err(LinkError::Expired),
        }
    }

    /// Gives a claimed link back: its vote was refused (the request stays pending).
    pub fn release(&self, token: &str) {
        if let Some((_, state @ State::Used)) = lock(&self.table).links.get_mut(&digest(token)) {
            *state = State::Live;
        }
    }

    /// Expires `token`'s link (its request turned out to be decided).
    pub fn expire(&self, token: &str) {
        if let Some((_, state)) = lock(&self.table).links.get_mut(&digest(token)) {
            *state = State::Expired;
        }
    }

    /// Expires every link of a decided request.
    pub fn expire_request(&self, request_id: &str) {
        let mut t = lock(&self.table);
        for (link, state) in t.links.values_mut() {
            if link.request_id == request_id {
                *state = State::Expired;
            }
        }
    }

    /// Links kept now (live, used or expired).
    pub fn len(&self) -> usize {
        lock(&self.table).links.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts an unknown token from `peer`; whether it is still within its client's and
    /// everyone's allowance.
    pub fn unknown_attempt(&self, peer: IpAddr, now: Instant) -> bool {
        lock(&self.unknown).0.failed(peer, now)
    }

    /// Whether an unknown token from `peer` would be refused now: its client's or everyone's
    /// allowance is spent. Asked only once a token turned out unknown: a live one is always
    /// served, so no client locks another out (behind a proxy, every client is the proxy).
    pub fn is_throttled(&self, peer: IpAddr, now: Instant) -> bool {
        lock(&self.unknown).0.throttled(peer, now)
    }
}

/// Whether `token` has a token's shape (so anything else is an unknown route, not a lookup).
pub fn well_formed(token: &str) -> bool {
    token.len() == TOKEN_HEX_LEN && token.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(request: &str, option: &str) -> Link {
        link_in("s", request, option)
    }

    fn link_in(session: &str, request: &str, option: &str) -> Link {
        Link {
            session_id: session.into(),
            request_id: request.into(),
            option_id: option.into(),
            option_name: option.into(),
            client_id: None,
            needs_review: false,
        }
    }

    fn held(links: &Links, session: &str) -> usize {
        let t = lock(&links.table);
        let counted = t.per_session.get(session).copied().unwrap_or(0);
        assert_eq!(counted, t.links.values().filter(|(l, _)| l.session_id == session).count());
        counted
    }

    #[test]
    fn tokens_are_256_bit_hex_stored_only_hashed_and_single_use() {
        let links = Links::default();
        let a = links.mint(link("r1", "allow")).expect("token");
        let b = links.mint(link("r1", "reject")).expect("token");
        assert!(well_formed(&a) && well_formed(&b) && a != b);
        {
            let t = lock(&links.table);
            assert!(t.links.keys().all(|k| *k == digest(&a) || *k == digest(&b)));
        }
        assert_eq!(links.get(&a).map(|l| l.option_id), Ok("allow".into()));
        assert_eq!(links.claim(&a).map(|l| l.option_id), Ok("allow".into()));
        assert_eq!(links.claim(&a), Err(LinkError::Expired), "single use");
        links.release(&a);
        assert!(links.claim(&a).is_ok(), "a refused vote gives the link back");
        links.expire_request("r1");
        assert_eq!(links.get(&b), Err(LinkError::Expired));
        assert_eq!(links.get(&"0".repeat(64)), Err(LinkError::Unknown));
        assert!(!well_formed("ABC") && !well_formed(&"g".repeat(64)));
    }

    #[test]
    fn a_full_table_forgets_the_oldest_link_of_the_session_holding_the_most() {
        let links = Links::default();
        let mut first_of_each = Vec::new();
        for i in 0..MAX_LINKS {
            let token = links.mint(link_in("s", &format!("r{i}"), "o")).expect("token");
            if i == 0 {
                first_of_each.push(token);
            }
        }
        assert_eq!(links.len(), MAX_LINKS);
        let second = links.mint(link_in("s", "r-next", "o")).expect("token");
        assert_eq!(links.len(), MAX_LINKS, "full: one went");
        assert_eq!(links.get(&first_of_each[0]), Err(LinkError::Unknown), "its own oldest");
        // Another session's links push out those of the session holding the most, oldest first.
        let t = links.mint(link_in("t", "q", "o")).expect("token");
        assert_eq!((held(&links, "s"), held(&links, "t")), (MAX_LINKS - 1, 1));
        assert!(links.get(&second).is_ok() && links.get(&t).is_ok());
    }

    /// Issue #27, finding 9: one request's 5000 options minted 5000 links and pushed every other
    /// session's live links out of the one table. A request keeps at most its share, and a session
    /// never loses links to one that holds more.
    #[test]
    fn one_request_cannot_push_out_another_sessions_links() {
        let links = Links::default();
        let other: Vec<String> =
            (0..4).map(|i| links.mint(link_in("other", "r1", &format!("o{i}"))).expect("token")).collect();
        let flood: Vec<String> = (0..5000)
            .map(|i| links.mint(link_in("flood", "big", &format!("o{i}"))).expect("token"))
            .collect();
        assert_eq!(held(&links, "flood"), MAX_LINKS_PER_REQUEST, "one request keeps its share");
        assert_eq!(lock(&links.table).per_request.get("big"), Some(&MAX_LINKS_PER_REQUEST));
        for token in &other {
            assert!(links.get(token).is_ok(), "the other session's links are live");
        }
        assert!(links.get(&flood[4999]).is_ok() && links.get(&flood[5000 - MAX_LINKS_PER_REQUEST]).is_ok());
        assert_eq!(
            links.get(&flood[4999 - MAX_LINKS_PER_REQUEST]),
            Err(LinkError::Unknown),
            "its own oldest went"
        );

        // Many requests of one session fill the table: still only that session's links go.
        for r in 0..2 * MAX_LINKS / MAX_LINKS_PER_REQUEST {
            for i in 0..MAX_LINKS_PER_REQUEST {
                links.mint(link_in("flood", &format!("f{r}"), &format!("o{i}")));
            }
        }
        assert_eq!(links.len(), MAX_LINKS);
        assert_eq!(held(&links, "other"), 4);
        for token in &other {
            assert!(links.get(token).is_ok(), "still live");
        }
        // A tie goes against the minting session.
        let even = Links::default();
        let a = even.mint(link_in("a", "ra", "o")).expect("token");
        for i in 0..MAX_LINKS - 2 {
            even.mint(link_in(if i % 2 == 0 { "b" } else { "c" }, &format!("r{i}"), "o"));
        }
        even.mint(link_in("a", "ra2", "o"));
        assert_eq!(even.len(), MAX_LINKS);
        let (b, c) = (held(&even, "b"), held(&even, "c"));
        even.mint(link_in("b", "rb", "o"));
        assert_eq!(
            (held(&even, "a"), held(&even, "b"), held(&even, "c")),
            (2, b, c),
            "b holds the most (tied with c, and b mints)"
        );
        assert!(even.get(&a).is_ok());
        let t = lock(&even.table);
        assert!(
            t.per_request.values().all(|n| *n > 0) && t.per_session.values().all(|n| *n > 0),
            "no empty counts kept"
        );
    }

    #[test]
    fn a_link_can_be_expired_alone_and_the_table_says_when_it_is_empty() {
        let links = Links::default();
        assert!(links.is_empty());
        let (a, b) = (links.mint(link("r", "a")).expect("token"), links.mint(link("r", "b")).expect("token"));
        assert!(!links.is_empty());
        links.expire(&a);
        assert_eq!(
            (links.get(&a), links.get(&b).map(|l| l.option_id)),
            (Err(LinkError::Expired), Ok("b".into()))
        );
        links.expire(&"0".repeat(64));
        assert_eq!(links.len(), 2, "an unknown token expires nothing");
    }

    #[test]
    fn its_debug_shows_a_count_and_no_token() {
        let links = Links::default();
        let token = links.mint(link("r", "o")).expect("token");
        let shown = format!("{links:?}");
        assert_eq!(shown, "Links { links: 1 }");
        assert!(!shown.contains(&token));
    }

    #[test]
    fn unknown_tokens_are_limited_per_peer_and_window() {
        let links = Links::default();
        let (peer, other) = ("10.0.0.1".parse().expect("ip"), "10.0.0.2".parse().expect("ip"));
        let t0 = Instant::now();
        for _ in 0..MAX_UNKNOWN_PER_WINDOW {
            assert!(links.unknown_attempt(peer, t0));
        }
        assert!(links.is_throttled(peer, t0));
        assert!(!links.unknown_attempt(peer, t0));
        assert!(!links.is_throttled(other, t0), "per peer");
        assert!(!links.is_throttled(peer, t0 + UNKNOWN_WINDOW), "per window");
        assert!(links.unknown_attempt(peer, t0 + UNKNOWN_WINDOW));
    }
}

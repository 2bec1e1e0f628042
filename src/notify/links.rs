//! Action links: one 256-bit token per (delivery, option), kept only as its SHA-256, single use,
//! expired once its request is decided.
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

/// Links kept at most; the oldest is forgotten first (its token then answers like an unknown one).
/// 4096 = 64 pending requests (a session's cap) × 4 options × 16 targets, for a busy session.
pub(super) const MAX_LINKS: usize = 4096;
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
/// Clients tracked for that limit at once.
const MAX_TRACKED_PEERS: usize = 1024;
const UNKNOWN_BUDGET: Budget = Budget {
    per_client: MAX_UNKNOWN_PER_WINDOW,
    global: MAX_UNKNOWN_ALL_PER_WINDOW,
    window: UNKNOWN_WINDOW,
    max_clients: MAX_TRACKED_PEERS,
};

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
    /// What the agent wants, one line, for the confirmation page.
    pub summary: String,
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
    order: VecDeque<[u8; 32]>,
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
    /// Mints a token for `link`; only its hash is kept.
    pub fn mint(&self, link: Link) -> Option<String> {
        let token = fresh_token()?;
        let hash = digest(&token);
        let mut t = lock(&self.table);
        if t.order.len() >= MAX_LINKS
            && let Some(oldest) = t.order.pop_front()
        {
            t.links.remove(&oldest);
        }
        t.order.push_back(hash);
        t.links.insert(hash, (link, State::Live));
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
        Link {
            session_id: "s".into(),
            request_id: request.into(),
            option_id: option.into(),
            option_name: option.into(),
            client_id: None,
            summary: String::new(),
        }
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
    fn the_table_forgets_its_oldest_link_past_its_bound() {
        let links = Links::default();
        let first = links.mint(link("r", "o")).expect("token");
        for _ in 0..MAX_LINKS {
            links.mint(link("r", "o"));
        }
        assert_eq!(links.len(), MAX_LINKS);
        assert_eq!(links.get(&first), Err(LinkError::Unknown));
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

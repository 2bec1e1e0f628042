//! One-time pairing codes and the per-peer limit on exchanging them. Pure bookkeeping over an
//! explicit `now`, so expiry and the limit are unit-tested without a clock.
//!
//! Codes stay in memory, never in the store: one lives `--pairing-code-ttl-ms` (120 s), a
//! restart that forgets it costs one more `mediatord pair`, and the disk then never holds a
//! credential that is still usable — not even hashed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::role::Role;

/// Codes waiting to be exchanged at once: pairing is a person at a terminal, a handful at most;
/// past this, issuing is refused until some are used or expire.
pub(super) const MAX_PENDING_CODES: usize = 32;
/// Failed exchanges a peer may make per [`FAILURE_WINDOW`]. A code has 128 random bits, so the
/// limit is not what protects it; it keeps a scanner from spending the daemon's time, and a
/// person who mistypes twice is never in its way. The same figure as GitHub's device flow
/// tolerates before `slow_down`.
pub(super) const MAX_FAILURES_PER_WINDOW: u32 = 10;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Peers whose failures are counted at once; past it an unknown peer is refused (as throttled)
/// until the window frees slots, so the table stays bounded under a flood of addresses.
const MAX_TRACKED_PEERS: usize = 1024;
/// Random bytes in a code: 128 bits.
pub(super) const CODE_BYTES: usize = 16;

/// What an exchange may fail with. A wrong, a used and an expired code are one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeError {
    /// Wrong, used or expired: indistinguishable on purpose.
    Invalid,
    /// This peer failed too often lately.
    Throttled,
}

/// A code's promise: who the device will be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Grant {
    pub(super) name: Option<String>,
    pub(super) role: Role,
}

#[derive(Debug)]
struct Pending {
    grant: Grant,
    expires: Instant,
}

#[derive(Debug, Default)]
pub(super) struct Codes {
    /// By SHA-256 of the code: the table never holds a usable code.
    pending: HashMap<[u8; 32], Pending>,
    /// Per peer: (window start, failures in it).
    failures: HashMap<IpAddr, (Instant, u32)>,
}

pub(super) fn digest(code: &str) -> [u8; 32] {
    Sha256::digest(code.as_bytes()).into()
}

impl Codes {
    /// Keeps `code` (by its digest) until `now + ttl`; `false` when [`MAX_PENDING_CODES`] are live.
    pub(super) fn issue(&mut self, code: &str, grant: Grant, now: Instant, ttl: Duration) -> bool {
        self.pending.retain(|_, p| p.expires > now);
        if self.pending.len() >= MAX_PENDING_CODES {
            return false;
        }
        self.pending.insert(digest(code), Pending { grant, expires: now + ttl });
        true
    }

    /// Takes `code` (single use) for `peer`. A throttled peer is refused before the code is looked
    /// at, so even the right code waits for the window.
    pub(super) fn take(&mut self, code: &str, peer: IpAddr, now: Instant) -> Result<Grant, CodeError> {
        if self.throttled(peer, now) {
            return Err(CodeError::Throttled);
        }
        match self.pending.remove(&digest(code)) {
            Some(p) if p.expires > now => Ok(p.grant),
            _ => Err(if self.failed(peer, now) { CodeError::Invalid } else { CodeError::Throttled }),
        }
    }

    fn throttled(&self, peer: IpAddr, now: Instant) -> bool {
        self.failures.get(&peer).is_some_and(|(since, n)| {
            now.duration_since(*since) < FAILURE_WINDOW && *n >= MAX_FAILURES_PER_WINDOW
        })
    }

    /// Counts a failure; `false` when the peer is now over its limit (or cannot be tracked).
    fn failed(&mut self, peer: IpAddr, now: Instant) -> bool {
        if self.failures.len() >= MAX_TRACKED_PEERS && !self.failures.contains_key(&peer) {
            self.failures.retain(|_, (since, _)| now.duration_since(*since) < FAILURE_WINDOW);
            if self.failures.len() >= MAX_TRACKED_PEERS {
                return false;
            }
        }
        let entry = self.failures.entry(peer).or_insert((now, 0));
        if now.duration_since(entry.0) >= FAILURE_WINDOW {
            *entry = (now, 0);
        }
        entry.1 += 1;
        entry.1 <= MAX_FAILURES_PER_WINDOW
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(120);

    fn grant() -> Grant {
        Grant { name: Some("phone".into()), role: Role::Voter }
    }

    fn peer(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    #[test]
    fn a_code_is_kept_only_as_its_digest_and_works_once() {
        let now = Instant::now();
        let mut codes = Codes::default();
        assert!(codes.issue("c0de", grant(), now, TTL));
        assert!(codes.pending.keys().all(|k| *k == digest("c0de")));
        assert_eq!(codes.take("c0de", peer(1), now), Ok(grant()));
        assert_eq!(codes.take("c0de", peer(1), now), Err(CodeError::Invalid), "single use");
    }

    #[test]
    fn an_expired_code_is_the_same_answer_as_a_wrong_one() {
        let now = Instant::now();
        let mut codes = Codes::default();
        codes.issue("late", grant(), now, TTL);
        assert_eq!(codes.take("late", peer(1), now + TTL), Err(CodeError::Invalid));
        assert_eq!(codes.take("never", peer(1), now), Err(CodeError::Invalid));
        codes.issue("edge", grant(), now, TTL);
        assert!(codes.take("edge", peer(1), now + TTL - Duration::from_millis(1)).is_ok());
    }

    #[test]
    fn a_peer_is_throttled_after_its_failures_and_only_until_the_window_passes() {
        let now = Instant::now();
        let mut codes = Codes::default();
        codes.issue("good", grant(), now, TTL * 10);
        for i in 0..MAX_FAILURES_PER_WINDOW {
            assert_eq!(codes.take("bad", peer(1), now), Err(CodeError::Invalid), "failure {i}");
        }
        assert_eq!(codes.take("bad", peer(1), now), Err(CodeError::Throttled));
        // Even the right code waits: the throttle is checked first, and the code stays usable.
        assert_eq!(codes.take("good", peer(1), now), Err(CodeError::Throttled));
        assert!(codes.take("bad", peer(2), now).is_err_and(|e| e == CodeError::Invalid), "per peer");
        let later = now + FAILURE_WINDOW;
        assert_eq!(codes.take("good", peer(1), later), Ok(grant()));
    }

    #[test]
    fn pending_codes_are_bounded_and_expired_ones_free_their_slots() {
        let now = Instant::now();
        let mut codes = Codes::default();
        for i in 0..MAX_PENDING_CODES {
            assert!(codes.issue(&format!("c{i}"), grant(), now, TTL));
        }
        assert!(!codes.issue("one-more", grant(), now, TTL));
        assert!(codes.issue("one-more", grant(), now + TTL, TTL));
        assert_eq!(codes.pending.len(), 1);
    }
}

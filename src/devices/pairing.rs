//! One-time pairing codes and the limits on wrong ones (`crate::throttle`: per client and in all).
//! Pure bookkeeping over an explicit `now`, so expiry and the limits are unit-tested without a
//! clock.
//!
//! A daemon alone keeps its codes in memory, never in the store: one lives
//! `--pairing-code-ttl-ms` (120 s), a restart that forgets it costs one more `mediatord pair`,
//! and the disk then never holds a credential that is still usable — not even hashed. In a fleet
//! the issuer also keeps the code's digest and grant in the store until it expires
//! (`Fleet::put_pairing_code`), where another daemon given the code reads it (a digest of 128
//! random bits cannot be turned back into the code), and a code is claimed in the store when it
//! is used, so it works once on any of them (`Fleet::claim_pairing_code`). A daemon learns of a
//! code only from that row, never from a notice (which any database role may send).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::person::SignIn;
use super::role::Role;
use crate::throttle::{Budget, Failures};

/// Codes waiting to be exchanged at once: pairing is a person at a terminal, a handful at most;
/// past this, issuing is refused until some are used or expire.
pub(super) const MAX_PENDING_CODES: usize = 32;
/// Wrong codes one client may present per [`FAILURE_WINDOW`]. A code has 128 random bits, so the
/// limit is not what protects it; it keeps a scanner from spending the daemon's time, and a
/// person who mistypes twice is never in its way. The same figure as GitHub's device flow
/// tolerates before `slow_down`.
pub(super) const MAX_FAILURES_PER_WINDOW: u32 = 10;
/// Wrong codes all clients together may present per window: what spreading guesses over many
/// addresses can buy at most (a right code is never refused by it).
pub(super) const MAX_FAILURES_ALL_PER_WINDOW: u32 = 100;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
const BUDGET: Budget = Budget::new(MAX_FAILURES_PER_WINDOW, MAX_FAILURES_ALL_PER_WINDOW, FAILURE_WINDOW);
/// Random bytes in a code: 128 bits.
pub(super) const CODE_BYTES: usize = 16;

/// What an exchange may fail with. A wrong, a used and an expired code are one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeError {
    /// Wrong, used or expired: indistinguishable on purpose.
    Invalid,
    /// Wrong, from a client (or from everyone together) that failed too often lately.
    Throttled,
}

/// A code's promise: who the device will be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Grant {
    pub(super) name: Option<String>,
    pub(super) role: Role,
    /// A sign-in's code (`crate::oidc`): the device is this person's, until its sign-in ends.
    pub(super) sign_in: Option<SignIn>,
}

/// A code taken for an exchange, until the device it pays for is on disk (or is given back).
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) grant: Grant,
    pub(super) digest: [u8; 32],
    expires: Instant,
}

#[derive(Debug)]
pub(super) struct Codes {
    /// By SHA-256 of the code: the table never holds a usable code.
    pending: HashMap<[u8; 32], Pending>,
    failures: Failures,
}

impl Default for Codes {
    fn default() -> Codes {
        Codes { pending: HashMap::new(), failures: Failures::new(BUDGET) }
    }
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
        let digest = digest(code);
        self.pending.insert(digest, Pending { grant, digest, expires: now + ttl });
        true
    }

    /// Keeps a code another daemon of the fleet issued, by the digest the store keeps it by;
    /// `false` when [`MAX_PENDING_CODES`] are live here.
    pub(super) fn learn(&mut self, digest: [u8; 32], grant: Grant, now: Instant, expires: Instant) -> bool {
        self.pending.retain(|_, p| p.expires > now);
        if self.pending.len() >= MAX_PENDING_CODES {
            return false;
        }
        self.pending.insert(digest, Pending { grant, digest, expires });
        true
    }

    /// Whether `code` is waiting here (unexpired), without taking it or counting anything.
    pub(super) fn knows(&self, code: &str, now: Instant) -> bool {
        self.pending.get(&digest(code)).is_some_and(|p| p.expires > now)
    }

    /// Whether a wrong code from `peer` now would be refused (its budget, or everyone's, spent).
    pub(super) fn throttled(&self, peer: IpAddr, now: Instant) -> bool {
        self.failures.throttled(peer, now)
    }

    /// Drops a code (the store would not keep it for the fleet).
    pub(super) fn forget(&mut self, digest: &[u8; 32]) {
        self.pending.remove(digest);
    }

    /// Takes `code` (single use) for `peer`. The right code is always taken: a wrong one from
    /// another client (or a flood of them) never locks a code's holder out. Only a wrong code is
    /// counted, and refused as throttled once its client's or everyone's budget is spent.
    pub(super) fn take(&mut self, code: &str, peer: IpAddr, now: Instant) -> Result<Pending, CodeError> {
        match self.pending.remove(&digest(code)) {
            Some(p) if p.expires > now => Ok(p),
            _ if self.failures.throttled(peer, now) => Err(CodeError::Throttled),
            _ => Err(if self.failures.failed(peer, now) { CodeError::Invalid } else { CodeError::Throttled }),
        }
    }

    /// Puts a taken code back, unused: what it was to pay for did not happen (no room, or the
    /// disk refused the device). It keeps its expiry.
    pub(super) fn give_back(&mut self, taken: Pending) {
        self.pending.insert(taken.digest, taken);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(120);

    fn grant() -> Grant {
        Grant { name: Some("phone".into()), role: Role::Voter, sign_in: None }
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
        assert_eq!(codes.take("c0de", peer(1), now).map(|p| p.grant), Ok(grant()));
        assert_eq!(codes.take("c0de", peer(1), now).err(), Some(CodeError::Invalid), "single use");
    }

    #[test]
    fn an_expired_code_is_the_same_answer_as_a_wrong_one() {
        let now = Instant::now();
        let mut codes = Codes::default();
        codes.issue("late", grant(), now, TTL);
        assert_eq!(codes.take("late", peer(1), now + TTL).err(), Some(CodeError::Invalid));
        assert_eq!(codes.take("never", peer(1), now).err(), Some(CodeError::Invalid));
        codes.issue("edge", grant(), now, TTL);
        assert!(codes.take("edge", peer(1), now + TTL - Duration::from_millis(1)).is_ok());
    }

    #[test]
    fn a_code_given_back_works_again_until_its_own_expiry() {
        let now = Instant::now();
        let mut codes = Codes::default();
        codes.issue("c0de", grant(), now, TTL);
        let taken = codes.take("c0de", peer(1), now).expect("taken");
        assert_eq!(codes.take("c0de", peer(1), now).err(), Some(CodeError::Invalid), "taken meanwhile");
        codes.give_back(taken);
        let again = codes.take("c0de", peer(2), now + TTL - Duration::from_millis(1)).expect("given back");
        codes.give_back(again);
        assert_eq!(codes.take("c0de", peer(2), now + TTL).err(), Some(CodeError::Invalid), "expired");
    }

    #[test]
    fn a_peer_is_throttled_after_its_failures_and_only_until_the_window_passes() {
        let now = Instant::now();
        let mut codes = Codes::default();
        codes.issue("good", grant(), now, TTL * 10);
        for i in 0..MAX_FAILURES_PER_WINDOW {
            assert_eq!(codes.take("bad", peer(1), now).err(), Some(CodeError::Invalid), "failure {i}");
        }
        assert_eq!(codes.take("bad", peer(1), now).err(), Some(CodeError::Throttled));
        assert_eq!(codes.take("bad", peer(2), now).err(), Some(CodeError::Invalid), "per peer");
        let later = now + FAILURE_WINDOW;
        assert_eq!(codes.take("bad", peer(1), later).err(), Some(CodeError::Invalid), "a new window");
        // The right code is taken whoever failed before, even from the throttled address (behind
        // a proxy, everyone's).
        assert_eq!(codes.take("good", peer(1), now).map(|p| p.grant), Ok(grant()));
    }

    #[test]
    fn a_throttled_clients_further_guesses_do_not_spend_everyones_budget() {
        let now = Instant::now();
        let mut codes = Codes::default();
        for _ in 0..MAX_FAILURES_PER_WINDOW {
            assert_eq!(codes.take("bad", peer(1), now).err(), Some(CodeError::Invalid));
        }
        for _ in 0..MAX_FAILURES_ALL_PER_WINDOW {
            assert_eq!(codes.take("bad", peer(1), now).err(), Some(CodeError::Throttled));
        }
        assert_eq!(
            codes.take("bad", peer(2), now).err(),
            Some(CodeError::Invalid),
            "others keep their answer"
        );
    }

    #[test]
    fn wrong_codes_spread_over_addresses_spend_the_global_budget_and_the_right_code_still_works() {
        let now = Instant::now();
        let mut codes = Codes::default();
        codes.issue("good", grant(), now, TTL);
        let mut refused = 0;
        for i in 0..MAX_FAILURES_ALL_PER_WINDOW + 20 {
            let addr = IpAddr::from([10, 1, (i / 256) as u8, (i % 256) as u8]);
            if codes.take("bad", addr, now).err() == Some(CodeError::Throttled) {
                refused += 1;
            }
        }
        assert_eq!(refused, 20, "past the global budget every wrong code is throttled");
        assert_eq!(codes.take("good", peer(9), now).map(|p| p.grant), Ok(grant()));
    }

    #[test]
    fn a_code_learnt_from_the_fleet_works_until_its_expiry_and_not_once_forgotten() {
        let now = Instant::now();
        let mut codes = Codes::default();
        assert!(codes.learn(digest("far"), grant(), now, now + TTL));
        assert!(codes.take("far", peer(1), now + TTL).is_err(), "expired");
        assert!(codes.learn(digest("far"), grant(), now, now + TTL));
        assert!(codes.knows("far", now) && !codes.knows("far", now + TTL) && !codes.knows("near", now));
        assert_eq!(codes.take("far", peer(1), now).map(|p| p.grant), Ok(grant()));
        assert!(codes.learn(digest("used"), grant(), now, now + TTL));
        codes.forget(&digest("used"));
        assert_eq!(codes.take("used", peer(1), now).err(), Some(CodeError::Invalid));
        for i in 0..MAX_PENDING_CODES {
            assert!(codes.learn(digest(&format!("c{i}")), grant(), now, now + TTL));
        }
        assert!(!codes.learn(digest("one-more"), grant(), now, now + TTL), "bounded like issued ones");
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

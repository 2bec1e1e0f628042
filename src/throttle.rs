//! Budgets for wrong guesses at a one-time secret (a pairing code, an action link's token): per
//! client and for everyone together, over a sliding-free fixed window.
//!
//! What a throttle may refuse is only the *next wrong guess*: callers look the secret up first, and
//! a right one is always served, so no client can lock another out by failing on purpose (behind a
//! reverse proxy every client has the proxy's address). The secrets are long enough (128 and 256
//! random bits) that guessing is hopeless anyway; the budgets keep a scanner from spending the
//! daemon's time and log lines.
//!
//! A client is its address, with the parts an attacker can change for free folded together: all of
//! 127.0.0.0/8 is one client (so rotating loopback addresses gains nothing), an IPv4-mapped IPv6
//! address is its IPv4 one, and an IPv6 address is its /64 (one host's whole allocation). The
//! global budget bounds what spreading over more addresses than that can buy.
//!
//! A leaf: pure bookkeeping over an explicit `now`, unit-tested without a clock.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

/// The budgets of one kind of secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Wrong guesses one client may make per window.
    pub per_client: u32,
    /// Wrong guesses everyone together may make per window.
    pub global: u32,
    pub window: Duration,
    /// Clients tracked at once; past it, a client not yet tracked is refused (as over its budget)
    /// until the window frees slots, so the table stays bounded under a flood of addresses.
    pub max_clients: usize,
}

/// Clients a throttle tracks at once, whatever its secret: the bound on its table's memory, not a
/// property of the secret (a pairing code's throttle and an action link's share it).
pub const MAX_TRACKED_CLIENTS: usize = 1024;

impl Budget {
    /// `per_client` and `global` wrong guesses per `window`, over at most [`MAX_TRACKED_CLIENTS`]
    /// clients.
    pub const fn new(per_client: u32, global: u32, window: Duration) -> Budget {
        Budget { per_client, global, window, max_clients: MAX_TRACKED_CLIENTS }
    }
}

/// Wrong guesses counted per client and in all.
#[derive(Debug)]
pub struct Failures {
    budget: Budget,
    /// Per client: (window start, failures in it).
    clients: HashMap<IpAddr, (Instant, u32)>,
    /// Everyone: (window start, failures in it).
    all: Option<(Instant, u32)>,
}

/// What a client is, for counting: see the module's doc.
pub fn client_key(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(v4) if v4.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => client_key(IpAddr::V4(v4)),
            None if v6.is_loopback() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Whether `(since, n)` is a window still open at `now` with `n >= limit` in it.
fn over(entry: Option<&(Instant, u32)>, limit: u32, window: Duration, now: Instant) -> bool {
    entry.is_some_and(|(since, n)| now.duration_since(*since) < window && *n >= limit)
}

/// Counts one more in `entry`'s window (a new one when it has passed); whether it stays within
/// `limit`.
fn count(entry: &mut (Instant, u32), limit: u32, window: Duration, now: Instant) -> bool {
    if now.duration_since(entry.0) >= window {
        *entry = (now, 0);
    }
    entry.1 = entry.1.saturating_add(1);
    entry.1 <= limit
}

impl Failures {
    pub fn new(budget: Budget) -> Failures {
        Failures { budget, clients: HashMap::new(), all: None }
    }

    /// Whether a wrong guess from `client` now would be refused: its own budget, or everyone's, is
    /// spent for this window.
    pub fn throttled(&self, client: IpAddr, now: Instant) -> bool {
        let b = &self.budget;
        over(self.all.as_ref(), b.global, b.window, now)
            || over(self.clients.get(&client_key(client)), b.per_client, b.window, now)
    }

    /// Counts a wrong guess from `client`; `false` when it went over a budget (or the client cannot
    /// be tracked): the answer is then the throttle's, not "wrong".
    pub fn failed(&mut self, client: IpAddr, now: Instant) -> bool {
        let b = self.budget;
        let all = self.all.get_or_insert((now, 0));
        let within_all = count(all, b.global, b.window, now);
        let key = client_key(client);
        if self.clients.len() >= b.max_clients && !self.clients.contains_key(&key) {
            self.clients.retain(|_, (since, _)| now.duration_since(*since) < b.window);
            if self.clients.len() >= b.max_clients {
                return false;
            }
        }
        let entry = self.clients.entry(key).or_insert((now, 0));
        count(entry, b.per_client, b.window, now) && within_all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(60);
    const BUDGET: Budget = Budget { per_client: 3, global: 7, window: WINDOW, max_clients: 4 };

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn a_client_is_throttled_after_its_budget_and_only_for_its_window() {
        let now = Instant::now();
        let mut f = Failures::new(BUDGET);
        let c = v4(10, 0, 0, 1);
        for i in 0..3 {
            assert!(!f.throttled(c, now), "guess {i}");
            assert!(f.failed(c, now), "guess {i} is within the budget");
        }
        assert!(f.throttled(c, now));
        assert!(!f.failed(c, now), "the fourth is over");
        assert!(!f.throttled(v4(10, 0, 0, 2), now), "another client is not");
        let later = now + WINDOW;
        assert!(f.throttled(c, later - Duration::from_millis(1)));
        assert!(!f.throttled(c, later));
        assert!(f.failed(c, later), "a new window");
    }

    #[test]
    fn spreading_over_addresses_is_bounded_by_the_global_budget() {
        let now = Instant::now();
        let mut f = Failures::new(Budget { max_clients: 100, ..BUDGET });
        let within: Vec<bool> = (1..=8).map(|i| f.failed(v4(10, 0, 1, i), now)).collect();
        assert_eq!(within, [true, true, true, true, true, true, true, false]);
        assert!(f.throttled(v4(10, 9, 9, 9), now), "everyone waits once the global budget is spent");
        assert!(!f.throttled(v4(10, 9, 9, 9), now + WINDOW));
    }

    #[test]
    fn loopback_addresses_ipv4_mapped_and_one_ipv6_64_are_one_client() {
        assert_eq!(client_key(v4(127, 3, 2, 1)), v4(127, 0, 0, 1));
        assert_eq!(client_key(IpAddr::V6(Ipv6Addr::LOCALHOST)), IpAddr::V6(Ipv6Addr::LOCALHOST));
        let mapped: IpAddr = "::ffff:127.9.9.9".parse().expect("ip");
        assert_eq!(client_key(mapped), v4(127, 0, 0, 1));
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().expect("ip");
        assert_eq!(client_key(mapped), v4(10, 1, 2, 3));
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().expect("ip");
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().expect("ip");
        let other: IpAddr = "2001:db8:1:3::1".parse().expect("ip");
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(other));
        assert_eq!(client_key(v4(192, 168, 1, 7)), v4(192, 168, 1, 7));
        let now = Instant::now();
        let mut f = Failures::new(BUDGET);
        for last in 1..=3 {
            f.failed(v4(127, 0, 0, last), now);
        }
        assert!(f.throttled(v4(127, 200, 0, 1), now), "rotating over 127/8 is one client");
    }

    #[test]
    fn the_tracked_clients_are_bounded_and_expired_ones_free_their_slots() {
        let now = Instant::now();
        let mut f = Failures::new(Budget { global: 100, ..BUDGET });
        for i in 1..=4 {
            assert!(f.failed(v4(10, 0, 0, i), now));
        }
        assert!(!f.failed(v4(10, 0, 0, 5), now), "a fifth client cannot be tracked");
        assert!(f.failed(v4(10, 0, 0, 1), now), "a tracked one still can");
        assert!(f.failed(v4(10, 0, 0, 5), now + WINDOW), "once the window passed, slots are free");
        assert_eq!(f.clients.len(), 1);
    }
}

//! Sign-in from a terminal (`mediatord login`) by the device authorization grant (RFC 8628): the
//! daemon asks the provider for a user code, the person confirms it in any browser, and the daemon
//! polls the provider's token endpoint until it answers. The terminal never talks to the provider
//! and never holds a provider's token: it holds a handle to its login here, and gets, once, the
//! one-time code that pays for a device of the person's, exactly as the web app's callback does.
//!
//! Each login is a handle (256 random bits, kept only as its SHA-256, given back once the outcome
//! is read) and one polling task that ends when the provider answers or the code expires; both are
//! bounded ([`MAX_PENDING_LOGINS`], [`super::SIGN_IN_WINDOW`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::watch;
// tokio's clock: what the waits run on (and what a test pauses).
use tokio::time::Instant;

use super::admit::Verified;
use super::error::SignInError;
use crate::sync::lock;

/// Terminal sign-ins waiting for their person at once: a person at a terminal, a handful at a
/// time. Past it the oldest is dropped (its terminal is told to start again), so a flood costs
/// bounded memory and at most this many polling tasks.
pub const MAX_PENDING_LOGINS: usize = 32;
/// Of those, one client's at most (a client as `throttle::client_key` folds addresses: all of
/// loopback is one, an IPv6 address is its /64). Past it that client's own oldest goes, so one
/// address beginning sign-ins in a loop drops only its own, never a person's waiting elsewhere.
/// (Behind a reverse proxy every terminal is the proxy's address: eight at once through it.)
pub const MAX_PENDING_LOGINS_PER_CLIENT: usize = 8;
/// Random bytes in a login's handle: 256 bits.
pub(super) const HANDLE_BYTES: usize = 32;
/// How long one `POST /auth/device/token` waits for the outcome before it answers "pending": under
/// any proxy's idle timeout, long enough that a terminal asks a few times a minute.
pub const LONG_POLL: Duration = Duration::from_secs(20);

/// Where a terminal's login is.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The person has not confirmed the code yet.
    Pending,
    /// The provider answered: the person (every check passed), or why not.
    Done(Result<Verified, SignInError>),
}

/// What a terminal is told when its login begins.
#[derive(Debug, Clone)]
pub struct DeviceBegun {
    /// The terminal's handle on its login (256 random bits in hex): a secret, shown to nobody.
    pub handle: String,
    /// What the person types at `verification_uri`.
    pub user_code: String,
    pub verification_uri: String,
    /// The same page with the code filled in, if the provider offers it.
    pub verification_uri_complete: Option<String>,
    /// Seconds until the code expires.
    pub expires_in: u64,
}

/// One login waiting for its outcome.
struct Login {
    outcome: watch::Receiver<Outcome>,
    /// Who began it ([`crate::throttle::client_key`] of its address).
    client: IpAddr,
    began: Instant,
    /// When its code expires (the provider's `expires_in`, at most the sign-in window).
    ends: Instant,
}

/// The logins begun and not yet read, by the SHA-256 of their handle.
#[derive(Default)]
pub(super) struct Logins {
    table: Mutex<HashMap<[u8; 32], Login>>,
}

fn digest(handle: &str) -> [u8; 32] {
    Sha256::digest(handle.as_bytes()).into()
}

impl Logins {
    /// Keeps a new login under `handle`, begun from `peer`, for `lasts`. When that client has
    /// [`MAX_PENDING_LOGINS_PER_CLIENT`] waiting, its oldest goes; else when [`MAX_PENDING_LOGINS`]
    /// are waiting, the oldest of all goes (its polling task sees nobody is left to tell and stops).
    pub(super) fn insert(
        &self,
        handle: &str,
        outcome: watch::Receiver<Outcome>,
        lasts: Duration,
        peer: IpAddr,
    ) {
        let now = Instant::now();
        let ends = now + lasts;
        let client = crate::throttle::client_key(peer);
        let mut table = lock(&self.table);
        table.retain(|_, l| l.ends > now);
        let theirs = table.values().filter(|l| l.client == client).count();
        let oldest = |table: &HashMap<[u8; 32], Login>, of: Option<IpAddr>| {
            table
                .iter()
                .filter(|(_, l)| of.is_none_or(|c| l.client == c))
                .min_by_key(|(_, l)| l.began)
                .map(|(k, _)| *k)
        };
        let dropped = if theirs >= MAX_PENDING_LOGINS_PER_CLIENT {
            oldest(&table, Some(client))
        } else if table.len() >= MAX_PENDING_LOGINS {
            oldest(&table, None)
        } else {
            None
        };
        if let Some(key) = dropped {
            table.remove(&key);
        }
        table.insert(digest(handle), Login { outcome, client, began: now, ends });
    }

    /// The outcome of the login `handle`, waiting up to `wait` for one; `None` when there is no
    /// such login (never begun, expired, dropped, or its outcome already read: an outcome is
    /// given once). A finished login is forgotten as it is read.
    pub(super) async fn outcome(&self, handle: &str, wait: Duration) -> Option<Outcome> {
        let key = digest(handle);
        let (mut rx, ends) = {
            let table = lock(&self.table);
            let login = table.get(&key)?;
            (login.outcome.clone(), login.ends)
        };
        let left = ends.saturating_duration_since(Instant::now());
        let waited =
            tokio::time::timeout(wait.min(left), rx.wait_for(|o| matches!(o, Outcome::Done(_)))).await;
        let done = match waited {
            Ok(Ok(done)) => done.clone(),
            // The polling task is gone without an answer (the daemon is stopping).
            Ok(Err(_)) => Outcome::Done(Err(SignInError::ProviderUnavailable)),
            Err(_) if left <= wait => Outcome::Done(Err(SignInError::Expired)),
            Err(_) => return Some(Outcome::Pending),
        };
        // Given once: whoever removes it answers it; a second reader at the same moment finds none.
        lock(&self.table).remove(&key).map(|_| done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PersonRole;
    use crate::devices::Person;

    const ADA: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));

    fn ada() -> Verified {
        Verified { person: Person::new("ada".into(), Some("Ada"), None, vec![]), role: PersonRole::Voter }
    }

    #[tokio::test(start_paused = true)]
    async fn an_outcome_is_given_once_to_the_handle_and_pending_until_then() {
        let logins = Logins::default();
        let (tx, rx) = watch::channel(Outcome::Pending);
        logins.insert("h1", rx, Duration::from_secs(300), ADA);
        assert!(logins.outcome("h2", LONG_POLL).await.is_none(), "another handle");
        assert!(matches!(logins.outcome("h1", LONG_POLL).await, Some(Outcome::Pending)));
        tx.send_replace(Outcome::Done(Ok(ada())));
        match logins.outcome("h1", LONG_POLL).await {
            Some(Outcome::Done(Ok(v))) => assert_eq!(v.person.subject, "ada"),
            other => panic!("{other:?}"),
        }
        assert!(logins.outcome("h1", LONG_POLL).await.is_none(), "given once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_at_the_answer_or_at_the_codes_end() {
        let logins = Logins::default();
        let (tx, rx) = watch::channel(Outcome::Pending);
        logins.insert("h", rx, Duration::from_secs(300), ADA);
        let answer = async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            tx.send_replace(Outcome::Done(Err(SignInError::NotAllowed)));
        };
        let started = Instant::now();
        let (got, ()) = tokio::join!(logins.outcome("h", LONG_POLL), answer);
        assert!(matches!(got, Some(Outcome::Done(Err(SignInError::NotAllowed)))));
        assert_eq!(started.elapsed(), Duration::from_secs(3), "answered as soon as it is known");

        let (_tx, rx) = watch::channel(Outcome::Pending);
        logins.insert("short", rx, Duration::from_secs(5), ADA);
        let got = logins.outcome("short", LONG_POLL).await;
        assert!(matches!(got, Some(Outcome::Done(Err(SignInError::Expired)))), "{got:?}");
        assert!(logins.outcome("short", LONG_POLL).await.is_none());

        let (tx, rx) = watch::channel(Outcome::Pending);
        logins.insert("gone", rx, Duration::from_secs(300), ADA);
        drop(tx);
        let got = logins.outcome("gone", LONG_POLL).await;
        assert!(matches!(got, Some(Outcome::Done(Err(SignInError::ProviderUnavailable)))), "{got:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_bound_the_oldest_login_goes() {
        let logins = Logins::default();
        let mut senders = Vec::new();
        for i in 0..=MAX_PENDING_LOGINS {
            let (tx, rx) = watch::channel(Outcome::Pending);
            senders.push(tx);
            // Each from an address of its own: the bound of all, not of one client.
            let peer = IpAddr::from([10, 0, (i / 256) as u8, (i % 256) as u8]);
            logins.insert(&format!("h{i}"), rx, Duration::from_secs(300), peer);
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert_eq!(lock(&logins.table).len(), MAX_PENDING_LOGINS);
        assert!(logins.outcome("h0", Duration::ZERO).await.is_none(), "the oldest went");
        assert!(matches!(logins.outcome("h1", Duration::ZERO).await, Some(Outcome::Pending)));
        assert!(
            senders[0].is_closed(),
            "its polling task sees nobody waits for it (the receiver is dropped)"
        );

        // One whose code ends now is gone at the next insert (nothing waits for it any more).
        let (_tx, rx) = watch::channel(Outcome::Pending);
        logins.insert("now", rx, Duration::ZERO, ADA);
        let (_tx2, rx) = watch::channel(Outcome::Pending);
        logins.insert("next", rx, Duration::from_secs(300), ADA);
        assert!(logins.outcome("now", Duration::ZERO).await.is_none(), "ended: dropped");
    }

    /// One client beginning sign-ins in a loop drops only its own oldest: Ada's, begun from
    /// elsewhere, still waits; every loopback address is that one client.
    #[tokio::test(start_paused = true)]
    async fn a_client_beginning_sign_ins_in_a_loop_drops_only_its_own() {
        let logins = Logins::default();
        let (_ada_tx, rx) = watch::channel(Outcome::Pending);
        logins.insert("ada", rx, Duration::from_secs(300), ADA);
        tokio::time::advance(Duration::from_millis(1)).await;
        let mut senders = Vec::new();
        for i in 0..MAX_PENDING_LOGINS * 2 {
            let (tx, rx) = watch::channel(Outcome::Pending);
            senders.push(tx);
            let peer = IpAddr::from([127, 0, 0, (i % 200) as u8 + 1]);
            logins.insert(&format!("flood{i}"), rx, Duration::from_secs(300), peer);
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert_eq!(lock(&logins.table).len(), 1 + MAX_PENDING_LOGINS_PER_CLIENT);
        assert!(matches!(logins.outcome("ada", Duration::ZERO).await, Some(Outcome::Pending)), "Ada waits");
        let last = MAX_PENDING_LOGINS * 2 - 1;
        assert!(matches!(
            logins.outcome(&format!("flood{last}"), Duration::ZERO).await,
            Some(Outcome::Pending)
        ));
        let first_kept = MAX_PENDING_LOGINS * 2 - MAX_PENDING_LOGINS_PER_CLIENT;
        assert!(logins.outcome(&format!("flood{}", first_kept - 1), Duration::ZERO).await.is_none());
        assert!(matches!(
            logins.outcome(&format!("flood{first_kept}"), Duration::ZERO).await,
            Some(Outcome::Pending)
        ));
    }
}

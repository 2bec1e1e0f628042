//! Session ids: which an agent may hand out, and which are taken.
//!
//! The ids are the agents' own (`session/new` answers them), and they end up in URLs, the log, the
//! store and every client: an id is accepted only in a plain shape ([`valid_session_id`]), and one
//! id names one session. Two agents (or one agent in two workspaces) may answer the same id, and a
//! hostile one may answer the id of a session another agent recorded: the id is *claimed* before
//! anything is written under it, and stays claimed until its session's record is final, so no
//! create, resume or late write of one session can land on another's live table entry or history.
//!
//! In a fleet a recorded session is also claimed in the store before an agent is resumed on it
//! ([`StoreClaim`], `Fleet::claim_session`): the directory's row, taken atomically, so of two
//! daemons resuming one session at once exactly one starts an agent (no split brain).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use crate::store::{Fleet, SessionRecord};
use crate::sync::lock;

/// Longest session id accepted from an agent. Agents answer UUIDs (36 bytes); 256 leaves room for
/// any prefix scheme while keeping ids short in URLs and log lines.
pub(crate) const MAX_SESSION_ID_LEN: usize = 256;

/// Whether an agent's session id is one the daemon accepts: 1 to [`MAX_SESSION_ID_LEN`] bytes of
/// `A-Z a-z 0-9 . _ : - ~ + = @` (a UUID, a ULID, a prefixed or base64url id; never a control
/// character, a space, a slash or anything a URL, a log line or a terminal would read otherwise).
pub(crate) fn valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_SESSION_ID_LEN
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:-~+=@".contains(&b))
}

/// The ids in use: a live session's, or one being started or ended. Await-free critical sections
/// only.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    ids: Mutex<HashSet<String>>,
}

/// An id held for one session; dropping it frees the id.
#[derive(Debug)]
pub(crate) struct Claim {
    claims: Arc<Claims>,
    id: String,
}

impl Claims {
    /// Claims `id`; `None` if it is in use.
    pub(crate) fn claim(self: &Arc<Self>, id: &str) -> Option<Claim> {
        lock(&self.ids).insert(id.to_owned()).then(|| Claim { claims: self.clone(), id: id.to_owned() })
    }

    #[cfg(test)]
    fn held(&self, id: &str) -> bool {
        lock(&self.ids).contains(id)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        lock(&self.claims.ids).remove(&self.id);
    }
}

/// A recorded session this daemon claimed in the store to resume it (`Fleet::claim_session`): the
/// directory says this daemon holds it. Kept once the session is started (its own records take
/// over from there); released when the start fails, so the session is recorded as it was and
/// another daemon may take it: awaited by [`StoreClaim::release`], or in the background when the
/// claim is dropped half way (the request that made it was cancelled).
#[derive(Debug)]
pub(crate) struct StoreClaim {
    /// The fleet the claim was made in; `None` alone, where the daemon's own id claim ([`Claim`])
    /// is the whole claim and there is nothing in the store to give back.
    fleet: Option<Arc<dyn Fleet>>,
    /// The record as it was before the claim.
    previous: SessionRecord,
    /// Whether it is still to be kept or released (false once either happened).
    armed: bool,
}

impl StoreClaim {
    pub(crate) fn new(fleet: Option<Arc<dyn Fleet>>, previous: SessionRecord) -> StoreClaim {
        StoreClaim { fleet, previous, armed: true }
    }

    /// The session as recorded before the claim.
    pub(crate) fn record(&self) -> &SessionRecord {
        &self.previous
    }

    /// The session started: the claim stays.
    pub(crate) fn keep(mut self) {
        self.armed = false;
    }

    /// The start failed: the session goes back to how it was recorded, before the caller hears
    /// of the failure (so a retry on another daemon finds it free).
    pub(crate) async fn release(mut self) {
        self.armed = false;
        if let Some(fleet) = self.fleet.clone() {
            let previous = self.previous.clone();
            let _ = tokio::task::spawn_blocking(move || put_back(fleet.as_ref(), &previous)).await;
        }
    }
}

fn put_back(fleet: &dyn Fleet, previous: &SessionRecord) {
    if let Err(e) = fleet.release_session(previous) {
        tracing::warn!(
            session_id = %previous.session_id,
            error = %e,
            "cannot release a session whose resume failed: the directory shows it held here until this daemon restarts"
        );
    }
}

impl Drop for StoreClaim {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Some(fleet) = self.fleet.clone() else { return };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let previous = self.previous.clone();
            rt.spawn_blocking(move || put_back(fleet.as_ref(), &previous));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_agents_are_plain_and_bounded() {
        for ok in ["demo-6f1c2d3e-0000-4000-8000-000000000000", "a", "sess_01J:x.y~z+w=@q", &"a".repeat(256)]
        {
            assert!(valid_session_id(ok), "{ok}");
        }
        for bad in
            ["", "a b", "a\nb", "a\u{1b}[2J", "a/b", "a%2F", "a?b", "a#b", "é", "\u{202e}x", &"a".repeat(257)]
        {
            assert!(!valid_session_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn an_id_is_claimed_once_until_its_claim_is_dropped() {
        let claims = Arc::new(Claims::default());
        let first = claims.claim("s").expect("free");
        assert!(claims.claim("s").is_none(), "taken");
        let other = claims.claim("t").expect("another id is free");
        drop(first);
        assert!(!claims.held("s") && claims.held("t"));
        assert!(claims.claim("s").is_some(), "free again");
        drop(other);
        assert!(!claims.held("t"));
    }
}

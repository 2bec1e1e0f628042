//! The [`Fleet`] trait and the records that cross it: what several daemons sharing one store
//! (`docs/operations.md#a-fleet`) keep there besides the state every store keeps.
//!
//! A capability only a shared store has, so it is a trait of its own rather than defaults on
//! [`Store`](super::Store) that a store of one daemon would carry empty: PostgreSQL implements it
//! (`postgres/`), SQLite and the memory store do not, and [`open`](super::open) hands it out
//! beside the store only for PostgreSQL. A daemon alone holds none, and every question "is this a
//! fleet?" is whether it holds one.

use super::api::{Ack, ReadError, SessionRecord, WriteError};

/// Between an id's own part and the daemon it names as its home ([`homed_id`]).
const HOME_MARK: char = '.';

/// A fresh id for something that lives on one daemon of a fleet: an ACP Streamable HTTP
/// connection, a pending permission request. In a fleet it names that daemon (its node URL,
/// base64url, after a `.`), so any daemon of the fleet can pass a request naming the id there
/// ([`home_of`]) without asking the database; alone it is a plain UUID.
pub fn homed_id(node_url: Option<&str>) -> String {
    use base64::Engine;
    let id = uuid::Uuid::new_v4().to_string();
    match node_url {
        Some(url) => {
            format!("{id}{HOME_MARK}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url))
        }
        None => id,
    }
}

/// The daemon an id names as its home ([`homed_id`]; `docs/protocol.md#173-any-daemon-answers-any-route`),
/// if it names one. Only a claim: the relay passes a request there only when the fleet lists that
/// daemon as a live one ([`Fleet::live_node`]).
pub fn home_of(id: &str) -> Option<String> {
    use base64::Engine;
    let (_, home) = id.split_once(HOME_MARK)?;
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(home).ok()?;
    String::from_utf8(url).ok().filter(|url| !url.is_empty())
}

/// A pairing code another daemon sharing the store claimed first: it is used.
pub const CODE_ALREADY_CLAIMED: &str = "the pairing code was used already";

impl WriteError {
    /// Whether the write was a pairing code's claim that lost to another daemon's.
    pub fn is_claimed_already(&self) -> bool {
        self.0 == CODE_ALREADY_CLAIMED
    }
}

/// What the daemons sharing a store tell each other (`docs/operations.md#a-fleet`): that something
/// changed, never what ([`Fleet::take_notices`]).
///
/// A notice is a hint to read the database again, and grants nothing by itself: PostgreSQL lets
/// any role that may connect to the database `NOTIFY` on any channel (and `LISTEN` to it), so a
/// notice is believed no further than "something may have changed". What takes effect is what the
/// read finds, which only a role with the tables' privileges could have written. A forged notice
/// costs one read; it carries no data to trust, and a listener learns nothing from one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// A device was paired or revoked somewhere: read the devices again.
    Devices,
    /// A workspace's rules changed somewhere: read the rules again.
    Rules,
    /// Notices may have been missed (the listening connection was lost, or its queue was full):
    /// read everything the notices stand for again.
    Resync,
}

/// A pairing code issued by a daemon of the fleet, as the store keeps it until it is used or
/// expires ([`Fleet::pairing_code`]); by its SHA-256, never the code itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCode {
    /// The name the device will have, if the issuer gave one.
    pub name: Option<String>,
    /// `voter` or `observer`.
    pub role: String,
    /// How long it still works, on the database's clock (milliseconds).
    pub expires_in_ms: u64,
}

/// What [`Fleet::claim_session`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionClaim {
    /// The session is this daemon's now, recorded live as its own: an agent may be started on it.
    /// The record is as it was before the claim (what the agent loads, and what
    /// [`Fleet::release_session`] puts back when the start fails).
    Claimed(SessionRecord),
    /// Another daemon of the fleet holds it live, under a lease that still holds, at this URL.
    HeldBy(String),
    /// The history has no such session.
    Unknown,
}

/// What a daemon of a fleet keeps in the store it shares with the others: its lease, the session
/// directory (who holds which live session), the fleet's secret, pairing codes any daemon can
/// exchange, and the notices. Reads and claims block and belong off the async runtime, as the
/// [`Store`](super::Store)'s reads do; the acknowledged writes go through the same writer.
pub trait Fleet: Send + Sync + std::fmt::Debug {
    /// This daemon joins the fleet as `node_url` (how the others reach it): its lease starts, the
    /// sessions it owns are recorded as its, and what an earlier run at the same URL left live is
    /// marked dormant. Before any session starts. Blocking.
    fn join(&self, node_url: &str, lease_ms: u64) -> Result<(), ReadError>;
    /// Renews this daemon's lease for `lease_ms`, and marks the live sessions of daemons whose
    /// lease ran out dormant (`node_lost`), their pending requests abandoned. Returns those
    /// sessions' ids. Blocking.
    fn renew_lease(&self, lease_ms: u64) -> Result<Vec<String>, ReadError>;
    /// The URL of the other daemon holding live session `session_id` under a valid lease, if one
    /// does. Blocking.
    fn owner(&self, session_id: &str) -> Result<Option<String>, ReadError>;
    /// Claims recorded session `session_id` for this daemon before an agent is started on it
    /// (`POST /session/{id}/resume`, ACP `session/load`): atomically, so of two daemons resuming it
    /// at once exactly one gets [`SessionClaim::Claimed`] and the other the winner's URL.
    /// Blocking.
    fn claim_session(&self, session_id: &str) -> Result<SessionClaim, ReadError>;
    /// Undoes a claim whose agent never started: the session is recorded as it was (`previous`,
    /// what [`SessionClaim::Claimed`] returned), so another daemon may take it. Only while this
    /// daemon still holds it. Blocking.
    fn release_session(&self, previous: &SessionRecord) -> Result<(), ReadError>;
    /// This daemon's URL in the fleet, once it joined ([`Fleet::join`]).
    fn node_url(&self) -> Option<String>;
    /// Whether `node_url` is another daemon of the fleet whose lease holds (a Streamable HTTP
    /// `/acp` connection's home, which its requests are relayed to). Blocking.
    fn live_node(&self, node_url: &str) -> Result<bool, ReadError>;
    /// The secret the daemons sharing the store prove themselves to each other with (relayed
    /// requests).
    fn fleet_secret(&self) -> [u8; 32];
    /// Keeps a pairing code this daemon issued, by its SHA-256, for `ttl_ms` on the database's
    /// clock, so any daemon of the fleet can exchange it (acknowledged: the code is shown only once
    /// every daemon can read it).
    fn put_pairing_code(&self, digest: &[u8; 32], name: Option<&str>, role: &str, ttl_ms: u64) -> Ack;
    /// A pairing code another daemon of the fleet issued, unexpired and unused, by its SHA-256.
    /// Blocking.
    fn pairing_code(&self, digest: &[u8; 32]) -> Result<Option<StoredCode>, ReadError>;
    /// Claims a pairing code for good before its device is written (acknowledged): `Err` with
    /// [`CODE_ALREADY_CLAIMED`] when another daemon claimed it first. The code is then gone from
    /// what [`Fleet::pairing_code`] finds.
    fn claim_pairing_code(&self, digest: &[u8; 32]) -> Ack;
    /// The fleet's notices, in commit order, this daemon's own among them (taken once: `None`
    /// after): each is followed by a read, so a change committed while an earlier read was under
    /// way is read again after it.
    fn take_notices(&self) -> Option<tokio::sync::mpsc::Receiver<Notice>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A claim that lost to another daemon's is told from any other failed write: the first
    /// makes the code invalid, the second gives the code back (`devices::Devices::pair`).
    #[test]
    fn a_claim_lost_to_another_daemon_is_told_from_a_failed_write() {
        assert!(WriteError(CODE_ALREADY_CLAIMED.to_owned()).is_claimed_already());
        assert!(!WriteError("the database is gone".to_owned()).is_claimed_already());
    }

    #[test]
    fn an_id_names_its_home_in_a_fleet_and_nothing_alone() {
        let homed = homed_id(Some("http://10.0.0.7:7776"));
        assert_eq!(home_of(&homed).as_deref(), Some("http://10.0.0.7:7776"));
        assert_ne!(homed_id(Some("http://a:1")), homed_id(Some("http://a:1")), "each id is fresh");
        let alone = homed_id(None);
        assert!(uuid::Uuid::parse_str(&alone).is_ok(), "{alone}");
        assert_eq!(home_of(&alone), None);
        for odd in ["", ".", "x.!!", "x.//8"] {
            assert_eq!(home_of(odd), None, "{odd:?}");
        }
    }
}

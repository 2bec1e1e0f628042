//! The front desk: the one floor between the doors and the daemon. A door (REST and its SSE
//! streams, `/acp` over WebSocket and Streamable HTTP, a notification's action link, a request
//! another daemon of the fleet relayed) turns its wire into one [`Caller`] — who, which role,
//! which device, local or not, through which door — and calls one operation here. What every door
//! must do the same way is done here, once:
//!
//! - **who may be served at all**: a connection from a process the daemon started (an agent, or
//!   anything it ran) never is, whatever it presents ([`Desk::admit`], `crate::peer`); the attempt
//!   is audited and announced on the agent's sessions;
//! - **what a caller may do**: the route table's access column and every ACP method's needs
//!   ([`Caller::may`]); a device acts only as its own client id ([`Caller::may_claim`]);
//! - **registration with the caller's role**: an observer is a client, never a voter
//!   ([`Desk::join`]);
//! - **a device's bounds** on every stream and connection it holds ([`Desk::subscribe`],
//!   [`Desk::open_connection`]);
//! - **the vote**: one ballot to the mediator's one `vote`, and the wait for a remembered rule to
//!   be on disk before the vote is acknowledged ([`Desk::vote`]).
//!
//! Failures are one type, [`Refusal`], with a [`Kind`] each door renders its own way (an HTTP
//! status, a JSON-RPC code).
//!
//! - `caller`: [`Caller`], [`Who`], [`Role`], [`Access`].
//! - `refusal`: [`Refusal`], [`Kind`], and every domain error mapped once.
//!
//! Imports `daemon`, `permission`, `devices`, `store` and the leaves; knows no wire.

mod caller;
mod refusal;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub use self::caller::{Access, Caller, Role, Who};
pub(crate) use self::refusal::refused_from;
pub use self::refusal::{ClientIdProblem, Kind, Refusal};
use crate::daemon::{
    Accepted, Actor, CreateRequest, Created, Daemon, Enrol, Prompt, RewindOutcome, Session, Subscription,
};
use crate::devices::StreamPermit;
use crate::event::EventKind;
use crate::peer::Origin;
use crate::permission::{Ballot, RuleError, Vote};
use crate::store::{AuditOutcome, AuditRecord};
use crate::sync::lock;

/// Refused attempts of one process of the daemon's recorded (audited and announced) in each
/// [`ESCAPE_WINDOW`]; past it they are only counted, so an agent retrying in a loop cannot flood
/// the audit or anyone's phone. The first few say everything a person needs.
pub const ESCAPES_RECORDED_PER_WINDOW: u32 = 5;
pub const ESCAPE_WINDOW: Duration = Duration::from_secs(60);
/// Processes whose attempts are tracked at once; the oldest window is dropped past it.
const MAX_ESCAPE_SOURCES: usize = 256;

/// How a device's reading of a session is counted among its bounds (`devices::StreamLimits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seat {
    /// A stream of its own (an SSE stream: a connection that reads one session).
    Stream,
    /// A session read over a connection already counted (an ACP connection attaching it).
    OverConnection,
    /// Already counted (an ACP connection attaching a session it had attached).
    Kept,
}

/// An open subscription, with its place among its caller's bounds.
#[derive(Debug)]
pub struct Watch {
    pub subscription: Subscription,
    pub place: Place,
}

/// A device's place among its bounds, held while its stream or connection is open; the
/// operator's is empty (not counted, never revoked).
#[derive(Debug, Default)]
pub struct Place {
    pub permit: Option<StreamPermit>,
    /// Fires when the device is revoked: its stream or connection ends then.
    pub revoked: Option<CancellationToken>,
}

/// The front desk. One per daemon, shared by every door.
pub struct Desk {
    daemon: Arc<Daemon>,
    /// The attempts of the daemon's processes that tried to act as a client. Await-free critical
    /// sections only.
    escapes: Mutex<Escapes>,
}

/// Per process of the daemon's that tried to act as a client: when its window began, and its
/// attempts in it; at most [`MAX_ESCAPE_SOURCES`] processes.
#[derive(Debug, Default)]
struct Escapes(HashMap<u32, (Instant, u32)>);

impl Escapes {
    /// Counts an attempt of process `child` at `now`: its rank in its window (1 for the first).
    /// A new process past the bound takes the place of the one whose window began first.
    fn count(&mut self, child: u32, now: Instant) -> u32 {
        if !self.0.contains_key(&child) && self.0.len() >= MAX_ESCAPE_SOURCES {
            let oldest = self.0.iter().min_by_key(|(_, (at, _))| *at).map(|(pid, _)| *pid);
            if let Some(pid) = oldest {
                self.0.remove(&pid);
            }
        }
        let window = self.0.entry(child).or_insert((now, 0));
        if now.duration_since(window.0) >= ESCAPE_WINDOW {
            *window = (now, 0);
        }
        window.1 += 1;
        window.1
    }
}

impl std::fmt::Debug for Desk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desk").finish_non_exhaustive()
    }
}

impl Desk {
    pub fn new(daemon: Arc<Daemon>) -> Arc<Desk> {
        Arc::new(Desk { daemon, escapes: Mutex::new(Escapes::default()) })
    }

    pub fn daemon(&self) -> &Arc<Daemon> {
        &self.daemon
    }

    /// Whether a connection whose peer is `origin` may be served at all. A process of the
    /// daemon's (`Origin::Daemons`) is refused, its attempt (`attempt`: what it asked, e.g.
    /// `POST /session/{id}/permission/{request_id}`) audited and announced on its agent's sessions;
    /// a loopback peer gone before it could be told apart is refused quietly.
    pub fn admit(&self, origin: Origin, attempt: &str) -> Result<(), Refusal> {
        match origin {
            Origin::Remote | Origin::Local => Ok(()),
            Origin::Gone => Err(Refusal::AgentNotAClient),
            Origin::Daemons { child } => {
                self.escaped(child, attempt);
                Err(Refusal::AgentNotAClient)
            }
        }
    }

    /// Records an attempt of process `child` (the daemon's child it descends from): the first
    /// [`ESCAPES_RECORDED_PER_WINDOW`] of each window in the audit and on its agent's sessions
    /// (which notify the targets that want permission requests); every one in the log's count.
    fn escaped(&self, child: u32, attempt: &str) {
        let nth = lock(&self.escapes).count(child, Instant::now());
        let agent = self.daemon.agent_of_process(child);
        let (workspace, name) = match &agent {
            Some((workspace, name)) => (workspace.to_string_lossy().into_owned(), Some(name.as_str())),
            None => (String::new(), None),
        };
        tracing::warn!(
            agent = name.unwrap_or("(a command the daemon ran)"),
            workspace = %workspace,
            attempt = nth,
            "a process the daemon started tried to act as its client: refused"
        );
        if nth > ESCAPES_RECORDED_PER_WINDOW {
            return;
        }
        let sessions: Vec<Arc<Session>> = match &agent {
            Some((workspace, name)) => self
                .daemon
                .all_sessions()
                .into_iter()
                .filter(|s| &s.workspace == workspace && &s.agent_name == name)
                .collect(),
            None => Vec::new(),
        };
        let at = crate::clock::now_ms();
        let request_id = format!("refused-{}", uuid::Uuid::new_v4());
        let session_id = sessions.first().map(|s| s.id.clone()).unwrap_or_default();
        let title = "The agent tried to act as a client of the daemon (refused)";
        let entry = json!({
            "requestId": request_id,
            "sessionId": session_id,
            "workspace": workspace,
            "agent": name,
            "toolCall": {"title": title, "kind": "client", "command": attempt},
            "options": [],
            "issuedAt": at,
            "resolvedAt": at,
            "status": AuditOutcome::Refused.as_str(),
            "resolvedBy": "daemon",
            "attempt": attempt,
        });
        self.daemon.store.audit(AuditRecord {
            request_id: request_id.clone(),
            session_id: session_id.clone(),
            workspace: workspace.clone(),
            requested_at: at,
            outcome: Some(AuditOutcome::Refused),
            entry,
        });
        for session in sessions {
            session.publish(
                EventKind::AgentRefusedAsClient,
                &json!({"sessionId": session.id, "requestId": request_id, "agent": name, "attempt": attempt, "title": title}),
            );
        }
    }

    /// Whether `caller` may do what `access` asks: the one judgement of the route table's access
    /// column and of each ACP method's needs.
    pub fn check(&self, caller: &Caller, access: Access) -> Result<(), Refusal> {
        caller.may(access)
    }

    /// Registers `caller` on `session` with its role (an observer is never a voter); its last-seen
    /// time, or `None` for a caller with no client id yet.
    pub fn join(&self, session: &Session, caller: &Caller) -> Option<u64> {
        let client = caller.client.as_deref()?;
        let enrol = match (caller.role(), caller.minted) {
            (Role::Observer, _) => Enrol::Observer,
            (_, true) => Enrol::Minted,
            (_, false) => Enrol::Voter,
        };
        Some(session.register(client, enrol))
    }

    /// `caller` leaves `session`.
    pub fn leave(&self, session: &Session, caller: &Caller) -> bool {
        caller.client.as_deref().is_some_and(|c| session.remove_client(c))
    }

    /// Opens `caller`'s subscription to `session` after event `after` (`None`: from now on),
    /// within its device's bounds (`seat`), registering it with its role.
    pub fn subscribe(
        &self,
        session: &Session,
        caller: &Caller,
        after: Option<u64>,
        seat: Seat,
    ) -> Result<Watch, Refusal> {
        let permit = match (caller.device(), seat) {
            (Some(device), Seat::Stream) => Some(self.daemon.devices.open_stream(device, &session.id)?),
            (Some(device), Seat::OverConnection) => {
                Some(self.daemon.devices.attach_session(&device.id, &session.id)?)
            }
            (_, Seat::Kept) | (None, _) => None,
        };
        let subscription = session.subscribe(after)?;
        self.join(session, caller);
        Ok(Watch { subscription, place: Place { permit, revoked: caller.device().map(|d| d.revoked()) } })
    }

    /// A place for one more stream of `caller`'s own on session `session_id` (a stream replaying a
    /// recorded session holds one as a live one does); the operator's are not counted.
    pub fn stream_place(&self, caller: &Caller, session_id: &str) -> Result<Place, Refusal> {
        match caller.device() {
            Some(device) => Ok(Place {
                permit: Some(self.daemon.devices.open_stream(device, session_id)?),
                revoked: Some(device.revoked()),
            }),
            None => Ok(Place::default()),
        }
    }

    /// A subscription already counted, read again from after event `after` (a client reconnecting
    /// to the stream it had).
    pub fn resubscribe(&self, session: &Session, after: u64) -> Result<Subscription, Refusal> {
        Ok(session.subscribe(Some(after))?)
    }

    /// A place for one more ACP connection of `caller`: a device's counts among its bounds (the
    /// last quarter of the connections kept for the operator, as for event streams) and ends when
    /// it is revoked; the operator's is not counted.
    pub fn open_connection(&self, caller: &Caller) -> Result<Place, Refusal> {
        match caller.device() {
            Some(device) => Ok(Place {
                permit: Some(self.daemon.devices.open_connection(device)?),
                revoked: Some(device.revoked()),
            }),
            None => Ok(Place::default()),
        }
    }

    /// Creates a session, or attaches to the workspace's default one, as `caller`.
    pub async fn create(&self, caller: &Caller, mut request: CreateRequest) -> Result<Created, Refusal> {
        request.client_id = caller.client.clone();
        Ok(self.daemon.create(request).await?)
    }

    /// Deletes recorded session `session_id` and its history as `caller` (ACP `session/delete`):
    /// refused while it is live, held elsewhere in a fleet, or when the store does not take it;
    /// a session the history does not hold is deleted already (`Ok`). A deletion is audited
    /// (`status: "deleted"`, who, through which door), since the history it removes is not
    /// otherwise recoverable.
    pub async fn delete_session(&self, caller: &Caller, session_id: &str) -> Result<(), Refusal> {
        let Some(record) = self.daemon.delete_recorded(session_id).await? else { return Ok(()) };
        let at = crate::clock::now_ms();
        let request_id = format!("deleted-{}", uuid::Uuid::new_v4());
        let entry = json!({
            "requestId": request_id,
            "sessionId": record.session_id,
            "workspace": record.workspace,
            "agent": record.agent,
            "toolCall": {"title": "Session deleted with its history", "kind": "delete"},
            "options": [],
            "issuedAt": at,
            "resolvedAt": at,
            "status": AuditOutcome::Deleted.as_str(),
            "resolvedBy": "client",
            "voterClientId": caller.client,
            "voterDeviceName": caller.shown_name(),
            "via": caller.via.as_str(),
            "sessionState": record.state.as_str(),
            "lastEventId": record.last_event_id,
        });
        self.daemon.store.audit(AuditRecord {
            request_id,
            session_id: record.session_id.clone(),
            workspace: record.workspace.clone(),
            requested_at: at,
            outcome: Some(AuditOutcome::Deleted),
            entry,
        });
        tracing::info!(session_id = %record.session_id, via = caller.via.as_str(), "recorded session deleted");
        Ok(())
    }

    /// Queues `caller`'s prompt (under `prompt_id` when the door chose it, cancelled when its
    /// token fires: ACP's `$/cancel_request`).
    pub fn enqueue(
        &self,
        session: &Session,
        caller: &Caller,
        params: serde_json::Map<String, Value>,
        prompt_id: Option<(String, CancellationToken)>,
    ) -> Result<Accepted, Refusal> {
        self.join(session, caller);
        let prompt = Prompt { params, originator: caller.client.clone() };
        Ok(match prompt_id {
            Some((id, cancel)) => session.enqueue_with_id(prompt, id, cancel)?,
            None => session.enqueue(prompt)?,
        })
    }

    /// Queues `caller`'s prompt and waits for its turn's answer.
    pub async fn prompt(
        &self,
        session: &Session,
        caller: &Caller,
        params: serde_json::Map<String, Value>,
    ) -> Result<Value, Refusal> {
        self.join(session, caller);
        Ok(session.prompt(Prompt { params, originator: caller.client.clone() }).await?)
    }

    /// `caller`'s vote on `request_id`. Answered once it counts: when it decided and asked to
    /// remember the decision for the workspace, once the rule is on disk; when the store refuses
    /// the rule, `store_unavailable` says the decision stands but is not remembered
    /// (`docs/operations.md#durability`).
    pub async fn vote(
        &self,
        session: &Session,
        caller: &Caller,
        request_id: &str,
        vote: &Vote,
    ) -> Result<(), Refusal> {
        if caller.joins_to_vote() {
            self.join(session, caller);
        }
        let voter = caller.voter();
        let ballot = Ballot {
            request_id,
            client: caller.client.as_deref(),
            voter: &voter,
            groups: caller.groups(),
            device_name: caller.shown_name(),
            observer: !caller.may_vote(),
            local: caller.local,
            via: caller.via,
            vote,
            review: None,
        };
        let Some(remembered) = session.permissions().vote(&ballot)? else { return Ok(()) };
        match remembered.outcome().await {
            Ok(()) => Ok(()),
            Err(RuleError::Store(e)) => Err(Refusal::store_unavailable(
                "The decision was applied, but remembering it for the workspace failed",
                &e,
            )),
            // The workspace's rules are full: the decision stands unremembered, as a session's
            // does at its cap.
            Err(other) => {
                tracing::warn!(error = %other, "a decision remembered for the workspace added no rule");
                Ok(())
            }
        }
    }

    /// Puts `session`'s files back as they were before turn `prompt_id`, as `caller` (the audit
    /// names who): an observer may not (`read_only_device`), whichever door it came through.
    pub async fn rewind(
        &self,
        session: &Session,
        caller: &Caller,
        prompt_id: &str,
        force: bool,
    ) -> Result<RewindOutcome, Refusal> {
        caller.may(Access::Write)?;
        let actor =
            Actor { client_id: caller.client.clone(), device_name: caller.shown_name().map(str::to_owned) };
        Ok(session.rewind(prompt_id, force, &actor).await?)
    }

    /// `caller` withdraws its ballot on `request_id` (it cancelled the question on its side): its
    /// earlier vote no longer counts, and the request stays pending for everyone else.
    pub fn withdraw_ballot(&self, session: &Session, caller: &Caller, request_id: &str) -> bool {
        caller.client.as_deref().is_some_and(|c| {
            session.permissions().withdraw_ballot(request_id, c, &caller.voter(), caller.via)
        })
    }

    /// Whether `caller` is one to ask about pending request `request_id` of `session` (its ballot
    /// would count under the request's policy): never an observer, nor a caller with no client id.
    pub fn may_decide(&self, session: &Session, caller: &Caller, request_id: &str) -> bool {
        caller.may_vote()
            && caller.client.is_some()
            && session.permissions().may_vote(
                request_id,
                caller.client.as_deref(),
                caller.groups(),
                caller.local,
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_ranked_in_their_processs_window_and_a_new_window_starts_over() {
        let mut escapes = Escapes::default();
        let t0 = Instant::now();
        let ranks: Vec<u32> = (0..7).map(|_| escapes.count(41, t0)).collect();
        assert_eq!(ranks, [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(escapes.count(42, t0), 1, "another process has its own window");
        let almost = t0 + ESCAPE_WINDOW - Duration::from_millis(1);
        assert_eq!(escapes.count(41, almost), 8, "still the same window");
        assert_eq!(escapes.count(41, t0 + ESCAPE_WINDOW), 1, "a window's end starts a new one");
        assert_eq!(escapes.count(41, t0 + ESCAPE_WINDOW), 2);
    }

    #[test]
    fn past_the_bound_a_new_process_takes_the_place_of_the_oldest_window() {
        let mut escapes = Escapes::default();
        let t0 = Instant::now();
        let at = |i: u32| t0 + Duration::from_millis(u64::from(i));
        let sources = u32::try_from(MAX_ESCAPE_SOURCES).expect("small");
        for pid in 0..sources {
            assert_eq!(escapes.count(pid, at(pid)), 1);
        }
        // A process already tracked is counted, nothing dropped.
        assert_eq!(escapes.count(5, at(sources)), 2);
        assert_eq!(escapes.0.len(), MAX_ESCAPE_SOURCES);
        // A new one drops process 0, whose window began first.
        assert_eq!(escapes.count(sources, at(sources)), 1);
        assert_eq!(escapes.0.len(), MAX_ESCAPE_SOURCES);
        assert!(!escapes.0.contains_key(&0) && escapes.0.contains_key(&1));
        assert_eq!(escapes.count(1, at(sources)), 2, "process 1 kept its count");
    }
}

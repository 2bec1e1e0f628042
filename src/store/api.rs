//! The [`Store`] trait and the records that cross it.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::oneshot;

use super::decide::{AuditOutcome, AuditQuery, Cursor};

/// A session's state in the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Running in this daemon now.
    Live,
    /// Ended without a client closing it (shutdown, crash, agent death): it can be resumed.
    Dormant,
    /// Closed by a client.
    Closed,
}

impl SessionState {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Live => "live",
            SessionState::Dormant => "dormant",
            SessionState::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> Option<SessionState> {
        [SessionState::Live, SessionState::Dormant, SessionState::Closed]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

/// A session as the history knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    pub session_id: String,
    /// The canonical workspace.
    pub workspace: String,
    /// The configured agent's name.
    pub agent: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    pub ended_at: Option<u64>,
    pub state: SessionState,
    /// Why it ended (`closed_by_client`, `daemon_shutdown`, `agent_exited`, `daemon_stopped`).
    pub end_reason: Option<String>,
    /// The id of the last event recorded (0 before any).
    pub last_event_id: u64,
}

/// One recorded item of a session's history, in id order.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredEvent {
    /// An event, as the exact SSE frame that was streamed.
    Frame { id: u64, frame: Bytes },
    /// Events `from..=to` were streamed but not recorded (the writer could not keep up).
    Gap { from: u64, to: u64 },
}

impl StoredEvent {
    /// The last id this item covers.
    pub fn last_id(&self) -> u64 {
        match self {
            StoredEvent::Frame { id, .. } => *id,
            StoredEvent::Gap { to, .. } => *to,
        }
    }
}

/// One permission request in the audit trail. `entry` is the whole wire object
/// (`docs/protocol.md#14-durable-state`); the other fields are what queries filter on.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub request_id: String,
    pub session_id: String,
    pub workspace: String,
    pub requested_at: u64,
    /// `None` while pending.
    pub outcome: Option<AuditOutcome>,
    pub entry: Value,
}

/// A turn's change set, or a rewind, as a session's history keeps it (`docs/protocol.md` §
/// changes): `entry` is its wire object; `before` and `after` the snapshots it names, which the
/// snapshot store keeps while a record names them.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRecord {
    pub session_id: String,
    pub workspace: String,
    /// Its place among the session's records (1, 2, …): a record with the same one replaces it.
    pub seq: u64,
    /// Milliseconds since the Unix epoch.
    pub at: u64,
    pub before: Option<String>,
    pub after: Option<String>,
    pub entry: Value,
}

/// A page of the audit, newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditPage {
    pub entries: Vec<Value>,
    /// Present when older entries remain.
    pub next_cursor: Option<Cursor>,
}

impl AuditPage {
    /// The page a database's rows make, `(seq, entry)` newest first, read with a limit of one
    /// more than `limit`: that extra row only says that older entries remain, after the last kept.
    /// An entry that is not JSON reads as `null` rather than hide the rest of the page.
    pub(super) fn from_rows<E>(
        rows: impl IntoIterator<Item = Result<(i64, String), E>>,
        limit: usize,
    ) -> Result<AuditPage, E> {
        let mut page = AuditPage::default();
        let mut last = None;
        for row in rows {
            let (seq, entry) = row?;
            if page.entries.len() == limit {
                page.next_cursor = last.map(|s: i64| Cursor(s as u64));
                break;
            }
            page.entries.push(serde_json::from_str(&entry).unwrap_or(Value::Null));
            last = Some(seq);
        }
        Ok(page)
    }
}

/// A workspace rule as stored: its workspace and its wire object.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRule {
    pub workspace: String,
    pub rule: Value,
}

/// A paired device as stored (`docs/operations.md#devices`): never its secret, only the secret's
/// SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDevice {
    pub device_id: String,
    pub name: String,
    /// `voter` or `observer`.
    pub role: String,
    pub secret_hash: [u8; 32],
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    pub last_seen_at: Option<u64>,
    /// A person's device: the person as JSON (`devices::Person`).
    pub person: Option<String>,
    /// A sign-in's end unless renewed (milliseconds since the Unix epoch).
    pub expires_at: Option<u64>,
}

/// The store's figures, for `/health?deep=1` and `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Whether anything survives a restart.
    pub durable: bool,
    /// The database's size on disk (main file + WAL), bytes.
    pub db_bytes: u64,
    /// Events recorded, ever (this process).
    pub events_written: u64,
    /// Events the writer could not take (its queue was full): recorded as gaps.
    pub events_dropped: u64,
    /// Gap markers written.
    pub gaps: u64,
    /// Transactions committed by the writer.
    pub commits: u64,
    /// Writes other than events that could not be queued (the writer was stuck).
    pub writes_dropped: u64,
    /// Writes other than events that were queued but lost: the transaction holding them failed
    /// (the database busy past its timeout, the disk full or failing). Their events are counted
    /// in `events_dropped` and recorded as gaps.
    pub writes_failed: u64,
    /// Transactions that failed (each lost every write it held).
    pub commits_failed: u64,
}

impl StoreStats {
    /// Whether a write other than an event was lost since the start: dropped at the queue, or in a
    /// failed transaction. `/health?deep=1` then says `degraded`.
    pub fn lost_writes(&self) -> bool {
        self.writes_dropped > 0 || self.writes_failed > 0 || self.commits_failed > 0
    }
}

/// Why a write the caller waits on ([`Ack`]) is not on disk. Nothing of it was applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the state database did not take the write: {0}")]
pub struct WriteError(pub String);

/// A write the caller waits on before it acknowledges anything (`docs/operations.md#durability`):
/// resolves once the transaction holding it is committed, or with the reason it is not (then none
/// of it is on disk, and the caller must not apply it either).
#[derive(Debug)]
#[must_use = "an acknowledged write is applied and answered only once its Ack resolves Ok"]
pub struct Ack(AckState);

#[derive(Debug)]
enum AckState {
    Waiting(oneshot::Receiver<Result<(), WriteError>>),
    Done(Option<Result<(), WriteError>>),
}

/// The writer's end of an [`Ack`].
pub(super) type Acker = oneshot::Sender<Result<(), WriteError>>;

impl Ack {
    /// An ack and the end the writer answers it through.
    pub(super) fn pair() -> (Acker, Ack) {
        let (tx, rx) = oneshot::channel();
        (tx, Ack(AckState::Waiting(rx)))
    }

    /// An ack already answered (a store with no disk, or a write refused before it was queued).
    pub fn ready(result: Result<(), WriteError>) -> Ack {
        Ack(AckState::Done(Some(result)))
    }

    /// Waits for the answer on a thread that may block (never on the async runtime).
    pub fn wait_blocking(self) -> Result<(), WriteError> {
        match self.0 {
            AckState::Waiting(rx) => rx
                .blocking_recv()
                .unwrap_or_else(|_| Err(WriteError("the store's writer has stopped".into()))),
            AckState::Done(result) => {
                result.unwrap_or_else(|| Err(WriteError("this write was already answered".into())))
            }
        }
    }
}

impl Future for Ack {
    type Output = Result<(), WriteError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            AckState::Waiting(rx) => Pin::new(rx).poll(cx).map(|answer| {
                // The writer dropped it unanswered: it stopped (the store is being dropped).
                answer.unwrap_or_else(|_| Err(WriteError("the store's writer has stopped".into())))
            }),
            AckState::Done(result) => Poll::Ready(
                result.take().unwrap_or_else(|| Err(WriteError("this write was already answered".into()))),
            ),
        }
    }
}

/// Why a read failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the state database could not be read: {0}")]
pub struct ReadError(pub String);

/// What the daemon and the mediator keep and read. Writes never block (they are queued for the
/// writer, in order); reads block and belong off the async runtime.
///
/// Two kinds of writes (`docs/operations.md#durability`): the security decisions a caller
/// acknowledges (a device paired or revoked, a workspace rule added or deleted) return an [`Ack`],
/// and the caller applies them in memory and answers only once it resolves `Ok`; the records
/// written behind (events, sessions, the audit, last-seen times) return nothing, and a loss is
/// counted ([`StoreStats`]) and recorded (gaps) instead.
///
/// What only a store several daemons share keeps (leases, the session directory, notices) is not
/// here but in [`Fleet`](super::Fleet), which a store of one daemon does not implement.
pub trait Store: Writes + Send + Sync + std::fmt::Debug {
    /// Whether anything survives a restart (`false` for `--ephemeral`).
    fn durable(&self) -> bool;

    // Reads: blocking.
    fn query_audit(&self, query: &AuditQuery) -> Result<AuditPage, ReadError>;
    fn workspace_rules(&self) -> Result<Vec<StoredRule>, ReadError>;
    /// The devices paired and not revoked, oldest first.
    fn devices(&self) -> Result<Vec<StoredDevice>, ReadError>;
    fn sessions(&self, workspace: Option<&str>) -> Result<Vec<SessionRecord>, ReadError>;
    fn session(&self, session_id: &str) -> Result<Option<SessionRecord>, ReadError>;
    /// Up to `limit` recorded items of a session after id `after`, in order.
    fn events(&self, session_id: &str, after: u64, limit: usize) -> Result<Vec<StoredEvent>, ReadError>;
    /// The first id a session's history still holds (after retention), if any.
    fn first_event_id(&self, session_id: &str) -> Result<Option<u64>, ReadError>;
    /// A session's turn records ([`Writes::record_turn`]), in order.
    fn turns(&self, session_id: &str) -> Result<Vec<TurnRecord>, ReadError>;
    /// Every snapshot id a kept turn record names (what the snapshot store must keep).
    fn snapshot_refs(&self) -> Result<Vec<String>, ReadError>;
    fn stats(&self) -> StoreStats;
}

/// The half of [`Store`] that only queues (and `close`, which ends the queue): every durable store
/// has the same one (`writer.rs`); the in-memory store keeps what it can of it itself.
pub trait Writes {
    /// A session starts (or is resumed): its events from `after_id + 1` on will be appended.
    /// `resumed = false` forgets any history a previous session of the same id left.
    fn session_started(&self, session: &SessionRecord, after_id: u64, resumed: bool);
    /// A burst of consecutive events, ids `first_id..`, each as its complete SSE frame (the bus's
    /// bytes, shared, not copied). Never blocks: when the writer's queue has no room for the
    /// burst it is dropped and the history records a gap.
    fn append_events(&self, session_id: &Arc<str>, first_id: u64, frames: Vec<Bytes>);
    /// A session ended; `last_id` is the id of its last event (a trailing gap is recorded when the
    /// writer did not get them all).
    fn session_ended(&self, session_id: &str, state: SessionState, reason: &str, last_id: u64, at: u64);

    /// A permission request was raised (pending) or resolved: the record replaces any earlier one
    /// with the same request id.
    fn audit(&self, record: AuditRecord);

    /// A turn's change set, or a rewind, is recorded (behind, like the audit). Nothing is kept by
    /// a store that keeps no sessions (`--ephemeral`): a live session holds its own.
    fn record_turn(&self, record: TurnRecord);

    /// A workspace rule is added (acknowledged: apply it once the [`Ack`] resolves `Ok`).
    fn put_workspace_rule(&self, workspace: &str, rule_id: &str, rule: &Value) -> Ack;
    /// A workspace rule is deleted (acknowledged).
    fn delete_workspace_rule(&self, workspace: &str, rule_id: &str) -> Ack;

    /// A recorded session (not live) and its events are deleted, gaps included (acknowledged).
    /// Its audit entries stay: they record decisions, not the conversation.
    fn delete_session(&self, session_id: &str) -> Ack;

    /// A device is paired (acknowledged).
    fn put_device(&self, device: &StoredDevice) -> Ack;
    /// A device was last seen at `at` (written now and then, not per request; behind).
    fn device_seen(&self, device_id: &str, at: u64);
    /// A device is revoked: its row is kept, marked, and never loaded again (acknowledged).
    fn revoke_device(&self, device_id: &str, at: u64) -> Ack;

    /// Resolves once every write handed over before it is committed (`Err` when the transaction
    /// holding the flush failed).
    fn flush(&self) -> Ack;
    /// The daemon stops: commits what is queued, leaves the files whole and ends the writer
    /// (SQLite: the WAL checkpointed into `state.db` and truncated, so that file alone has every
    /// commit, `docs/operations.md#backups`). Later writes are lost. Blocking.
    fn close(&self) -> Result<(), WriteError> {
        self.flush().wait_blocking()
    }
}

/// Where and how long the state is kept, from the command line. Its `Debug` shows `url`
/// without its password.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// `None`: `--ephemeral`.
    pub state_dir: Option<PathBuf>,
    /// `--history-events`: events kept per session (the newest).
    pub events_per_session: u64,
    /// `--history-days`: ended sessions, their events and audit entries older than this go.
    pub max_age_days: u64,
    /// `--store postgres://…`: the state in PostgreSQL, shared by a fleet (`state_dir` unused).
    pub url: Option<String>,
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("state_dir", &self.state_dir)
            .field("events_per_session", &self.events_per_session)
            .field("max_age_days", &self.max_age_days)
            .field("url", &self.url.as_deref().map(super::decide::shown))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::StoreStats;

    /// `/health?deep=1` says `degraded` after any lost write of any of the three kinds, and only then
    /// (events dropped are gaps in a history, reported apart).
    #[test]
    fn any_lost_write_and_only_a_lost_write_degrades_the_store() {
        let quiet = StoreStats {
            events_dropped: 5,
            gaps: 1,
            commits: 9,
            events_written: 40,
            ..StoreStats::default()
        };
        assert!(!quiet.lost_writes());
        for lost in [
            StoreStats { writes_dropped: 1, ..quiet },
            StoreStats { writes_failed: 1, ..quiet },
            StoreStats { commits_failed: 1, ..quiet },
            StoreStats { writes_dropped: 2, writes_failed: 3, commits_failed: 1, ..quiet },
        ] {
            assert!(lost.lost_writes(), "{lost:?}");
        }
    }
}

//! The durable state (`docs/protocol.md#14-durable-state`): the permission audit trail, workspace
//! rules, and every session with its recorded events, behind one narrow interface, [`Store`].
//!
//! - `api`: [`Store`] and the records that cross it.
//! - `fleet`: [`Fleet`], what only a store several daemons share keeps (leases, the session
//!   directory, pairing codes any of them can exchange, notices), and its records; implemented by
//!   [`PgStore`] alone.
//! - `writer`: the one writer both databases use (a thread, group commit, runs of events, gap
//!   marking) over a `Dialect` each provides, and the write half of [`Store`] ([`Writes`]).
//! - `sqlite`: [`SqliteStore`], the default: one SQLite database in `--state-dir`, the writer's
//!   SQLite dialect, one read connection; the only file that knows `rusqlite`.
//! - `postgres`: [`PgStore`], `--store postgres://…`: the writer's PostgreSQL dialect, shared by
//!   a fleet of daemons, and the one [`Fleet`] (the session directory, leases, notices; the
//!   writer's dialect in `postgres/write.rs`); the only module that knows `tokio_postgres`.
//! - `migrations`: the schema, one `.sql` file per version and database, the same numbering.
//! - `queue`: the writer's queue: the writes, their bounds and counters, what a failed
//!   transaction answers and counts.
//! - `memory`: [`MemoryStore`], for `--ephemeral`: no history, a bounded in-memory audit.
//! - `dir`: where the state lives, and the permission checks that refuse a boot.
//! - `chunk`: how a run of consecutive events is kept as one row (encoding, splitting, trimming).
//! - `decide`: the store's pure decisions (gaps, paging cursors, retention cut-offs, audit
//!   filters), unit-tested and mutation-tested on their own.
//!
//! A floor below `permission` and `daemon`, beside `acp`: it imports the leaves only, and names
//! events by their already-built SSE frames (the bus's bytes), never by the bus.
//!
//! The relay never waits for the disk: [`Writes::append_events`] and every other write is a
//! non-blocking hand-off to the writer; reads ([`Store::query_audit`], [`Store::events`], ...)
//! block and are called off the async runtime (`spawn_blocking`). A new kind of record is a
//! migration in each database, an op in `queue.rs`, a statement in each dialect and its reads.

mod api;
mod chunk;
mod decide;
mod dir;
mod fleet;
mod memory;
mod migrations;
mod postgres;
mod queue;
mod sqlite;
mod writer;

use std::sync::Arc;

pub use self::api::{
    Ack, AuditPage, AuditRecord, ReadError, SessionRecord, SessionState, Store, StoreConfig, StoreStats,
    StoredDevice, StoredEvent, StoredRule, TurnRecord, WriteError, Writes,
};
pub use self::decide::{AuditOutcome, AuditQuery, Cursor, MAX_TIME_MS, outcome_of};
pub use self::dir::StateDirError;
pub use self::fleet::{CODE_ALREADY_CLAIMED, Fleet, Notice, SessionClaim, StoredCode, home_of, homed_id};
pub use self::memory::MemoryStore;
pub use self::postgres::{PG_SCHEMA_VERSION, PgStore};
pub use self::sqlite::{
    OpenError, ReadOnly, SCHEMA_VERSION, SqliteStore, backup, db_path, open_read_only, open_read_only_file,
};

/// What [`open`] opened: the store, and its fleet half when the store is one several daemons share.
#[derive(Debug, Clone)]
pub struct Opened {
    pub store: Arc<dyn Store>,
    /// `Some` for PostgreSQL only (the same [`PgStore`] as `store`): a store of one daemon has no
    /// fleet, rather than a fleet that answers nothing.
    pub fleet: Option<Arc<dyn Fleet>>,
}

/// Opens the store `config` asks for: PostgreSQL for `--store postgres://…` (a store and a
/// [`Fleet`]), [`MemoryStore`] for `--ephemeral`, else the state directory's database (created if
/// missing, migrated, checked).
pub fn open(config: &StoreConfig) -> Result<Opened, OpenError> {
    if let Some(url) = &config.url {
        let pg = Arc::new(PgStore::open(url, config)?);
        return Ok(Opened { store: pg.clone(), fleet: Some(pg) });
    }
    let store: Arc<dyn Store> = match &config.state_dir {
        None => Arc::new(MemoryStore::default()),
        Some(dir) => Arc::new(SqliteStore::open(dir, config)?),
    };
    Ok(Opened { store, fleet: None })
}

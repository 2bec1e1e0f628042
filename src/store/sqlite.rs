//! [`SqliteStore`]: the state in one SQLite database (`state.db` in the state directory), the only
//! file that knows `rusqlite`.
//!
//! - **One writer** (`writer.rs`, shared with PostgreSQL): a dedicated thread owns the write
//!   connection and commits what is queued as one transaction (group commit: a burst of ten
//!   thousand events costs one commit, not ten thousand). Events past the queue's bounds become
//!   gaps, not back-pressure; a failed transaction (the database busy past [`BUSY_TIMEOUT`], the
//!   disk full or failing) answers the writes a caller waits on with its error and counts the
//!   rest (`queue.rs`). This file is that writer's SQLite dialect: the statements, retention, and
//!   the checkpoint at the stop.
//! - **Reads** use their own read-only connection (WAL lets it read while the writer writes),
//!   called from `spawn_blocking`.
//! - **Durability.** WAL with `synchronous=NORMAL`: a committed transaction survives the process
//!   being killed (it is in the WAL, in the OS's cache); an OS crash or power loss may lose the
//!   last commits, never corrupt the database. The promise of `docs/protocol.md#14-durable-state`
//!   (at most the last second before a `kill -9` is missing) rests on the writer committing at
//!   least every `COMMIT_INTERVAL` (`queue.rs`).

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use serde_json::Value;

use super::api::{
    AuditPage, AuditRecord, ReadError, SessionRecord, SessionState, Store, StoreConfig, StoreStats,
    StoredDevice, StoredEvent, StoredRule, TurnRecord,
};
use super::chunk::{self, RunBuilder};
use super::decide::{self, AuditOutcome, AuditQuery};
use super::dir::{self, StateDirError};
use super::migrations;
use super::writer::{Dialect, Ended, Inline, NewCode, Statements, Writing, Written};
use crate::sync::lock;

/// The schema this build writes. A database whose migrations table says more was written by a
/// newer mediatord, and this one refuses to boot on it rather than misread it.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;
/// The database file inside the state directory.
const DB_FILE: &str = "state.db";
/// How long a statement waits for another process's lock on the database before its transaction
/// fails: long enough for a backup or an `sqlite3` shell's short write, short enough that a caller
/// waiting on an [`Ack`] hears of a stuck database within seconds.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// The page size of a new database (one made before keeps its own: SQLite changes a database's
/// page size only by rebuilding the file). SQLite writes the WAL and checkpoints a page at a time,
/// each with a frame header, a checksum, a page-cache look-up and a `pwrite`; at its default of
/// 4 KiB, one compressed run of events (`chunk::RUN_MAX_BYTES` of frames, packed to a few KiB)
/// took a leaf and its overflow pages, and the writer's thread spent about half as much again of
/// CPU per recorded event as at 32 KiB (`docs/benchmarks.md`, issue #46).
const PAGE_BYTES: u32 = 32 * 1024;
/// The WAL's size after which a commit checkpoints it into the database: SQLite's default (1000
/// pages) at 4 KiB pages, kept in bytes whatever the database's page size.
const CHECKPOINT_BYTES: u32 = 4000 * 1024;
/// Rows deleted per retention statement, so one pass never holds the write lock for long.
const RETENTION_CHUNK: usize = 10_000;

/// The migrations, in order (`migrations/`).
const MIGRATIONS: &[&str] = migrations::SQLITE;

/// Why the store cannot be opened: the boot is refused (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Dir(#[from] StateDirError),
    #[error(
        "the state database {path} has schema version {found}, newer than this mediatord supports \
         ({supported}): it was written by a newer mediatord. Run that version, or move the \
         database away to start afresh"
    )]
    TooNew { path: PathBuf, found: u32, supported: u32 },
    #[error("cannot open the state database {path}: {reason}")]
    Sqlite { path: PathBuf, reason: String },
    #[error(
        "{path} is not a mediatord state database: {why} (give a state directory, its state.db, or a \
         copy `mediatord backup` wrote)"
    )]
    NotADatabase { path: PathBuf, why: &'static str },
    #[error("cannot use the state database {url}: {reason}")]
    Postgres { url: String, reason: String },
}

pub struct SqliteStore {
    path: PathBuf,
    /// The queue (never blocks; bounded by its counters) and the writer thread behind it.
    writing: Writing,
    /// The read connection. Await-free critical sections only (callers are blocking threads).
    read: Mutex<Connection>,
    /// The state directory's lock (`dir::lock`), held while the store lives.
    _lock: std::fs::File,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.path).finish_non_exhaustive()
    }
}

fn sqlite_error(path: &Path) -> impl Fn(rusqlite::Error) -> OpenError + '_ {
    move |e| OpenError::Sqlite { path: path.to_path_buf(), reason: e.to_string() }
}

fn read_error(e: rusqlite::Error) -> ReadError {
    ReadError(e.to_string())
}

/// The database file of a state directory.
pub fn db_path(state_dir: &Path) -> PathBuf {
    state_dir.join(DB_FILE)
}

/// Applies the migrations the database lacks; refuses a database from a newer schema.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), OpenError> {
    let err = sqlite_error(path);
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations(version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
    )
    .map_err(&err)?;
    let found: u32 = conn
        .query_row("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", [], |r| r.get(0))
        .map_err(&err)?;
    if found > SCHEMA_VERSION {
        return Err(OpenError::TooNew { path: path.to_path_buf(), found, supported: SCHEMA_VERSION });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let tx = conn.transaction().map_err(&err)?;
        tx.execute_batch(sql).map_err(&err)?;
        tx.execute(
            "INSERT INTO schema_migrations(version, applied_at) VALUES (?1, ?2)",
            params![i as u32 + 1, crate::clock::now_ms() as i64],
        )
        .map_err(&err)?;
        tx.commit().map_err(&err)?;
    }
    Ok(())
}

/// What a previous daemon left unfinished: live sessions become dormant, pending requests are
/// marked abandoned (`docs/protocol.md#14-durable-state`).
fn recover(conn: &mut Connection, now: u64) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    tx.execute(
        "UPDATE sessions SET state = 'dormant', end_reason = 'daemon_stopped', ended_at = ?1 WHERE state = 'live'",
        [now as i64],
    )?;
    let pending: Vec<(i64, String)> = {
        let mut stmt = tx.prepare("SELECT seq, entry FROM audit WHERE outcome = 'pending'")?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?
    };
    for (seq, entry) in pending {
        let mut entry: Value = serde_json::from_str(&entry).unwrap_or_else(|_| serde_json::json!({}));
        if let Some(obj) = entry.as_object_mut() {
            obj.insert("status".into(), AuditOutcome::Abandoned.as_str().into());
            obj.insert("resolvedBy".into(), "abandoned".into());
            obj.insert("abandonedAt".into(), now.into());
        }
        tx.execute(
            "UPDATE audit SET outcome = 'abandoned', entry = ?2 WHERE seq = ?1",
            params![seq, entry.to_string()],
        )?;
    }
    tx.commit()
}

/// The writer's connection to the database at `path`, set up as the writer needs it.
fn open_writer(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Before WAL: only a database without pages yet takes a page size (and in WAL mode not even
    // that); an existing one ignores it.
    conn.pragma_update(None, "page_size", PAGE_BYTES)?;
    // WAL: readers never block the writer; NORMAL: see the file's doc for what it costs.
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let page: u32 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    conn.pragma_update(None, "wal_autocheckpoint", CHECKPOINT_BYTES / page.max(512))?;
    Ok(conn)
}

impl SqliteStore {
    /// Opens (creating, migrating, recovering) the database of `state_dir`, and starts its writer.
    pub fn open(state_dir: &Path, config: &StoreConfig) -> Result<SqliteStore, OpenError> {
        dir::prepare(state_dir)?;
        let lock = dir::lock(state_dir)?;
        let path = db_path(state_dir);
        let err = sqlite_error(&path);
        // Created 0600 before SQLite sees it (SQLite gives its -wal and -shm files the same mode).
        // Only when missing: closing a descriptor of a database this process has open in SQLite
        // would drop SQLite's POSIX locks on it.
        if !path.exists() {
            std::fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| OpenError::Sqlite { path: path.clone(), reason: e.to_string() })?;
        }
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
        let mut conn = open_writer(&path).map_err(&err)?;
        migrate(&mut conn, &path)?;
        recover(&mut conn, crate::clock::now_ms()).map_err(&err)?;
        // What creating, migrating and recovering touched stays in that connection's page cache:
        // for a new database every page of it (26 of 32 KiB, about 850 KiB of heap), kept for
        // the daemon's life. The writer goes on with a connection of its own, opened after that
        // memory is freed, so the connections and the daemon allocate into it instead of beside it.
        // Closing the last connection checkpoints the WAL; one that fails leaves it to the writer.
        if let Err((_, e)) = conn.close() {
            tracing::warn!(path = %path.display(), error = %e, "closing the database after opening it failed");
        }
        let conn = open_writer(&path).map_err(&err)?;
        let read = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(&err)?;
        read.busy_timeout(BUSY_TIMEOUT).map_err(&err)?;
        let dialect =
            Sqlite { conn, events_per_session: config.events_per_session, max_age_days: config.max_age_days };
        let writing = Writing::start(dialect)
            .map_err(|e| OpenError::Sqlite { path: path.clone(), reason: e.to_string() })?;
        Ok(SqliteStore { path: path.clone(), writing, read: Mutex::new(read), _lock: lock })
    }

    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T, ReadError> {
        f(&lock(&self.read)).map_err(read_error)
    }
}

impl Written for SqliteStore {
    fn writing(&self) -> &Writing {
        &self.writing
    }
}

impl Store for SqliteStore {
    fn durable(&self) -> bool {
        true
    }

    fn query_audit(&self, q: &AuditQuery) -> Result<AuditPage, ReadError> {
        self.read(|c| query_audit_on(c, q))
    }

    fn workspace_rules(&self) -> Result<Vec<StoredRule>, ReadError> {
        self.read(|c| {
            let mut stmt =
                c.prepare_cached("SELECT workspace, rule FROM workspace_rules ORDER BY created_at, rowid")?;
            let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
            let mut out = Vec::new();
            for row in rows {
                let (workspace, rule) = row?;
                if let Ok(rule) = serde_json::from_str(&rule) {
                    out.push(StoredRule { workspace, rule });
                }
            }
            Ok(out)
        })
    }

    fn devices(&self) -> Result<Vec<StoredDevice>, ReadError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT device_id, name, role, secret_hash, created_at, last_seen_at, person, expires_at
                 FROM devices WHERE revoked_at IS NULL ORDER BY created_at, device_id",
            )?;
            let rows = stmt.query_map([], |r| {
                let hash: Vec<u8> = r.get(3)?;
                Ok((
                    StoredDevice {
                        device_id: r.get(0)?,
                        name: r.get(1)?,
                        role: r.get(2)?,
                        secret_hash: [0; 32],
                        created_at: r.get::<_, i64>(4)? as u64,
                        last_seen_at: r.get::<_, Option<i64>>(5)?.map(|v| v as u64),
                        person: r.get(6)?,
                        expires_at: r.get::<_, Option<i64>>(7)?.map(|v| v as u64),
                    },
                    hash,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (mut device, hash) = row?;
                // A hash of another length cannot match any secret: such a row is skipped.
                if let Ok(hash) = <[u8; 32]>::try_from(hash.as_slice()) {
                    device.secret_hash = hash;
                    out.push(device);
                }
            }
            Ok(out)
        })
    }

    fn sessions(&self, workspace: Option<&str>) -> Result<Vec<SessionRecord>, ReadError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT session_id, workspace, agent, created_at, ended_at, state, end_reason, last_event_id
                 FROM sessions WHERE (?1 IS NULL OR workspace = ?1) ORDER BY created_at, session_id",
            )?;
            let rows = stmt.query_map(params![workspace], session_row)?;
            rows.collect()
        })
    }

    fn session(&self, session_id: &str) -> Result<Option<SessionRecord>, ReadError> {
        self.read(|c| session_on(c, session_id))
    }

    fn events(&self, session_id: &str, after: u64, limit: usize) -> Result<Vec<StoredEvent>, ReadError> {
        self.read(|c| events_on(c, session_id, after, limit))
    }

    fn first_event_id(&self, session_id: &str) -> Result<Option<u64>, ReadError> {
        self.read(|c| {
            c.prepare_cached("SELECT first_id FROM events WHERE session_id = ?1 ORDER BY last_id LIMIT 1")?
                .query_row([session_id], |r| r.get::<_, i64>(0))
                .optional()
                .map(|v| v.map(|v| v as u64))
        })
    }

    fn turns(&self, session_id: &str) -> Result<Vec<TurnRecord>, ReadError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT session_id, workspace, seq, recorded_at, before_id, after_id, entry FROM turns
                 WHERE session_id = ?1 ORDER BY seq",
            )?;
            let rows = stmt.query_map([session_id], |r| {
                Ok(TurnRecord {
                    session_id: r.get(0)?,
                    workspace: r.get(1)?,
                    seq: r.get::<_, i64>(2)? as u64,
                    at: r.get::<_, i64>(3)? as u64,
                    before: r.get(4)?,
                    after: r.get(5)?,
                    entry: serde_json::from_str(&r.get::<_, String>(6)?).unwrap_or(Value::Null),
                })
            })?;
            rows.collect()
        })
    }

    fn snapshot_refs(&self) -> Result<Vec<String>, ReadError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT before_id FROM turns WHERE before_id IS NOT NULL
                 UNION SELECT after_id FROM turns WHERE after_id IS NOT NULL",
            )?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect()
        })
    }

    fn stats(&self) -> StoreStats {
        let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        self.writing.queue.stats(size(&self.path) + size(Path::new(&wal)))
    }
}

fn session_on(c: &Connection, session_id: &str) -> rusqlite::Result<Option<SessionRecord>> {
    c.prepare_cached(
        "SELECT session_id, workspace, agent, created_at, ended_at, state, end_reason, last_event_id
         FROM sessions WHERE session_id = ?1",
    )?
    .query_row([session_id], session_row)
    .optional()
}

/// Up to `limit` recorded items of a session after id `after`, in order (`Store::events`).
fn events_on(
    c: &Connection,
    session_id: &str,
    after: u64,
    limit: usize,
) -> rusqlite::Result<Vec<StoredEvent>> {
    // Runs are disjoint, so ordering by last_id orders them by id; each yields one item
    // at least, so `limit` rows are enough.
    let mut stmt = c.prepare_cached(
        "SELECT first_id, last_id, frames, sizes, codec FROM events
         WHERE session_id = ?1 AND last_id > ?2 ORDER BY last_id LIMIT ?3",
    )?;
    let mut rows = stmt.query(params![session_id, after as i64, limit as i64])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()?
        && out.len() < limit
    {
        let first = r.get::<_, i64>(0)? as u64;
        let last = r.get::<_, i64>(1)? as u64;
        let Some(frames) = r.get::<_, Option<Vec<u8>>>(2)? else {
            out.push(StoredEvent::Gap { from: first.max(after + 1), to: last });
            continue;
        };
        let sizes = r.get_ref(3)?.as_blob_or_null()?;
        let count = (last + 1).saturating_sub(first);
        let decoded = chunk::decode(r.get(4)?, frames)
            .and_then(|f| chunk::split(f.len(), sizes, count).map(|ranges| (f, ranges)));
        let Some((frames, ranges)) = decoded else {
            // A damaged row (the disk, or a hand edit): its events cannot be read, so the
            // replay says so with a gap, as for events never recorded, and goes on.
            tracing::warn!(session_id, first, last, "a damaged run of recorded events: replayed as a gap");
            out.push(StoredEvent::Gap { from: first.max(after + 1), to: last });
            continue;
        };
        let frames = Bytes::from(frames);
        for (id, range) in (first..).zip(ranges) {
            if id > after && out.len() < limit {
                out.push(StoredEvent::Frame { id, frame: frames.slice(range) });
            }
        }
    }
    Ok(out)
}

fn session_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRecord> {
    let state: String = r.get(5)?;
    Ok(SessionRecord {
        session_id: r.get(0)?,
        workspace: r.get(1)?,
        agent: r.get(2)?,
        created_at: r.get::<_, i64>(3)? as u64,
        ended_at: r.get::<_, Option<i64>>(4)?.map(|v| v as u64),
        state: SessionState::parse(&state).unwrap_or(SessionState::Dormant),
        end_reason: r.get(6)?,
        last_event_id: r.get::<_, i64>(7)? as u64,
    })
}

/// SQLite's side of the writer (`writer.rs`): the write connection, and retention's settings.
struct Sqlite {
    conn: Connection,
    events_per_session: u64,
    max_age_days: u64,
}

impl Dialect for Sqlite {
    type Error = rusqlite::Error;
    type Conn<'a> = &'a mut Connection;
    type Tx<'c> = rusqlite::Transaction<'c>;
    type Driver = Inline;

    fn driver(&self) -> Inline {
        Inline
    }

    async fn connect(&mut self) -> rusqlite::Result<&mut Connection> {
        Ok(&mut self.conn)
    }

    async fn begin<'c>(conn: &'c mut Self::Conn<'_>) -> rusqlite::Result<rusqlite::Transaction<'c>> {
        // Immediate: the write lock is taken first.
        conn.transaction_with_behavior(TransactionBehavior::Immediate)
    }

    fn maintain(&mut self) {
        if let Err(e) = self.retain() {
            tracing::warn!(error = %e, "retention on the state database failed");
        }
    }

    /// Folds the WAL into the database file and empties it, so that a stopped daemon leaves one
    /// whole file: a copy of `state.db` alone then has every commit (a WAL left beside it held
    /// most of them). Waits for a reader still in a transaction up to [`BUSY_TIMEOUT`].
    fn stopped(&mut self) -> Result<(), String> {
        let busy: i64 = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .map_err(|e| e.to_string())?;
        if busy != 0 {
            return Err("a reader kept the WAL busy: it was not checkpointed".into());
        }
        Ok(())
    }
}

impl Statements for rusqlite::Transaction<'_> {
    type Error = rusqlite::Error;

    async fn forget_history(&self, session_id: &str) -> rusqlite::Result<()> {
        self.execute("DELETE FROM events WHERE session_id = ?1", [session_id])?;
        self.execute("DELETE FROM turns WHERE session_id = ?1", [session_id]).map(drop)
    }

    async fn session_started(
        &self,
        record: &SessionRecord,
        after_id: u64,
        resumed: bool,
    ) -> rusqlite::Result<()> {
        self.execute(
            "INSERT INTO sessions(session_id, workspace, agent, created_at, ended_at, state, end_reason, last_event_id)
             VALUES (?1, ?2, ?3, ?4, NULL, 'live', NULL, ?5)
             ON CONFLICT(session_id) DO UPDATE SET workspace = excluded.workspace, agent = excluded.agent,
               created_at = CASE WHEN ?6 THEN sessions.created_at ELSE excluded.created_at END,
               ended_at = NULL, state = 'live', end_reason = NULL, last_event_id = excluded.last_event_id",
            params![
                record.session_id, record.workspace, record.agent, record.created_at as i64,
                after_id as i64, resumed
            ],
        )
        .map(drop)
    }

    async fn session_ended(&self, e: &Ended<'_>) -> rusqlite::Result<()> {
        self.execute(
            "UPDATE sessions SET state = ?2, end_reason = ?3, ended_at = ?4,
               last_event_id = MAX(last_event_id, ?5) WHERE session_id = ?1",
            params![e.session_id, e.state.as_str(), e.reason, e.at as i64, e.last_id as i64],
        )
        .map(drop)
    }

    async fn audit(&self, r: &AuditRecord) -> rusqlite::Result<()> {
        self.prepare_cached(
            "INSERT INTO audit(request_id, session_id, workspace, requested_at, outcome, entry)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT(request_id) DO UPDATE SET outcome = excluded.outcome, entry = excluded.entry",
        )?
        .execute(params![
            r.request_id,
            r.session_id,
            r.workspace,
            r.requested_at as i64,
            r.outcome.unwrap_or(AuditOutcome::Pending).as_str(),
            r.entry.to_string(),
        ])
        .map(drop)
    }

    async fn turn(&self, t: &TurnRecord) -> rusqlite::Result<()> {
        self.prepare_cached(
            "INSERT OR REPLACE INTO turns(session_id, seq, workspace, recorded_at, before_id, after_id, entry)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            t.session_id,
            t.seq as i64,
            t.workspace,
            t.at as i64,
            t.before,
            t.after,
            t.entry.to_string(),
        ])
        .map(drop)
    }

    async fn put_rule(&self, workspace: &str, rule_id: &str, rule: &str, at: u64) -> rusqlite::Result<()> {
        self.execute(
            "INSERT OR REPLACE INTO workspace_rules(workspace, rule_id, created_at, rule) VALUES (?1, ?2, ?3, ?4)",
            params![workspace, rule_id, at as i64, rule],
        )
        .map(drop)
    }

    async fn delete_rule(&self, workspace: &str, rule_id: &str) -> rusqlite::Result<()> {
        self.execute(
            "DELETE FROM workspace_rules WHERE workspace = ?1 AND rule_id = ?2",
            params![workspace, rule_id],
        )
        .map(drop)
    }

    async fn delete_session(&self, session_id: &str) -> rusqlite::Result<()> {
        self.execute("DELETE FROM events WHERE session_id = ?1", [session_id])?;
        self.execute("DELETE FROM sessions WHERE session_id = ?1", [session_id]).map(drop)
    }

    async fn put_device(&self, d: &StoredDevice) -> rusqlite::Result<()> {
        self.execute(
            "INSERT OR REPLACE INTO devices(device_id, name, role, secret_hash, created_at, last_seen_at,
               person, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                d.device_id,
                d.name,
                d.role,
                &d.secret_hash[..],
                d.created_at as i64,
                d.last_seen_at.map(|v| v as i64),
                d.person,
                d.expires_at.map(|v| v as i64)
            ],
        )
        .map(drop)
    }

    async fn device_seen(&self, device_id: &str, at: u64) -> rusqlite::Result<()> {
        self.execute(
            "UPDATE devices SET last_seen_at = MAX(COALESCE(last_seen_at, 0), ?2) WHERE device_id = ?1",
            params![device_id, at as i64],
        )
        .map(drop)
    }

    async fn revoke_device(&self, device_id: &str, at: u64) -> rusqlite::Result<()> {
        self.execute(
            "UPDATE devices SET revoked_at = ?2 WHERE device_id = ?1 AND revoked_at IS NULL",
            params![device_id, at as i64],
        )
        .map(drop)
    }

    // One daemon alone on its database: no other can claim a code first, nor needs telling.
    async fn claim_code(&self, _: &[u8; 32]) -> rusqlite::Result<bool> {
        Ok(true)
    }

    async fn put_code(&self, _: &NewCode<'_>) -> rusqlite::Result<()> {
        Ok(())
    }

    async fn insert_gap(&self, session_id: &str, from: u64, to: u64) -> rusqlite::Result<()> {
        insert_gap(self, session_id, from, to)
    }

    async fn insert_run(&self, session_id: &str, run: &RunBuilder) -> rusqlite::Result<()> {
        insert_frames(self, session_id, run.first, run.last, &run.frames, run.sizes())
    }

    async fn set_last_event_id(&self, session_id: &str, id: u64) -> rusqlite::Result<()> {
        self.prepare_cached(
            "UPDATE sessions SET last_event_id = MAX(last_event_id, ?2) WHERE session_id = ?1",
        )?
        .execute(params![session_id, id as i64])
        .map(drop)
    }

    async fn commit(self) -> rusqlite::Result<()> {
        rusqlite::Transaction::commit(self)
    }
}

impl Sqlite {
    /// Retention: the newest `--history-events` events per session; ended sessions, their events and
    /// decided audit entries younger than `--history-days`.
    fn retain(&mut self) -> rusqlite::Result<()> {
        let sessions: Vec<(String, u64)> = {
            let mut stmt = self.conn.prepare("SELECT session_id, last_event_id FROM sessions")?;
            stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?.collect::<Result<_, _>>()?
        };
        for (session_id, last) in sessions {
            let cutoff = decide::events_cutoff(last, self.events_per_session);
            if cutoff > 0 {
                let tx = self.conn.transaction()?;
                tx.execute(
                    "DELETE FROM events WHERE session_id = ?1 AND last_id < ?2",
                    params![session_id, cutoff as i64],
                )?;
                trim_run(&tx, &session_id, cutoff)?;
                tx.commit()?;
            }
        }
        if let Some(before) = decide::age_cutoff(crate::clock::now_ms(), self.max_age_days) {
            let old: Vec<String> = {
                let mut stmt = self.conn.prepare(
                    "SELECT session_id FROM sessions WHERE ended_at IS NOT NULL AND ended_at < ?1 AND state != 'live' LIMIT ?2",
                )?;
                stmt.query_map(params![before as i64, RETENTION_CHUNK as i64], |r| r.get(0))?
                    .collect::<Result<_, _>>()?
            };
            for session_id in old {
                let tx = self.conn.transaction()?;
                tx.execute("DELETE FROM events WHERE session_id = ?1", [&session_id])?;
                tx.execute("DELETE FROM turns WHERE session_id = ?1", [&session_id])?;
                tx.execute("DELETE FROM sessions WHERE session_id = ?1", [&session_id])?;
                tx.commit()?;
            }
            self.conn.execute(
                "DELETE FROM audit WHERE requested_at < ?1 AND outcome != 'pending'",
                [before as i64],
            )?;
        }
        Ok(())
    }
}

/// Cuts the run (or gap) that straddles `cutoff` so that the session keeps no event below it.
fn trim_run(tx: &rusqlite::Transaction<'_>, session_id: &str, cutoff: u64) -> rusqlite::Result<()> {
    let row = tx
        .query_row(
            "SELECT rowid, first_id, last_id, frames, sizes, codec FROM events
             WHERE session_id = ?1 AND last_id >= ?2 ORDER BY last_id LIMIT 1",
            params![session_id, cutoff as i64],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)? as u64,
                    r.get::<_, i64>(2)? as u64,
                    r.get::<_, Option<Vec<u8>>>(3)?,
                    r.get::<_, Option<Vec<u8>>>(4)?,
                    r.get::<_, i64>(5)?,
                ))
            },
        )
        .optional()?;
    let Some((rowid, first, last, frames, sizes, codec)) = row else { return Ok(()) };
    if first >= cutoff {
        return Ok(());
    }
    match frames {
        None => {
            tx.execute("UPDATE events SET first_id = ?2 WHERE rowid = ?1", params![rowid, cutoff as i64])?;
        }
        Some(frames) => {
            // `first < cutoff <= last` here, so `trim_front` has something to cut: `None` from it
            // means a damaged row.
            let trimmed = chunk::decode(codec, frames).and_then(|frames| {
                chunk::trim_front(first, last, frames.len(), sizes.as_deref(), cutoff)
                    .map(|(sizes, start)| (frames, sizes, start))
            });
            tx.execute("DELETE FROM events WHERE rowid = ?1", [rowid])?;
            match trimmed {
                Some((frames, sizes, start)) => {
                    insert_frames(tx, session_id, cutoff, last, &frames[start..], sizes.as_deref())?;
                }
                None => {
                    // Unreadable anyway: what retention keeps of it is a gap, so one damaged row
                    // never stops retention (nor the replay, which reads it as a gap too).
                    tracing::warn!(
                        session_id,
                        first,
                        last,
                        "a damaged run of recorded events: kept as a gap"
                    );
                    insert_gap(tx, session_id, cutoff, last)?;
                }
            }
        }
    }
    Ok(())
}

/// Records that events `from..=to` were streamed but not recorded: a row with no frames.
fn insert_gap(tx: &rusqlite::Transaction<'_>, session_id: &str, from: u64, to: u64) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO events(session_id, first_id, last_id, frames, sizes) VALUES (?1, ?2, ?3, NULL, NULL)",
    )?
    .execute(params![session_id, from as i64, to as i64])?;
    Ok(())
}

fn insert_frames(
    tx: &rusqlite::Transaction<'_>,
    session_id: &str,
    first: u64,
    last: u64,
    frames: &[u8],
    sizes: Option<&[u8]>,
) -> rusqlite::Result<()> {
    let (codec, blob) = chunk::encode(frames);
    tx.prepare_cached(
        "INSERT OR REPLACE INTO events(session_id, first_id, last_id, frames, sizes, codec)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![session_id, first as i64, last as i64, blob, sizes, codec as i64])?;
    Ok(())
}

/// How many times a backup's copy is tried again while the daemon's writer holds a lock SQLite
/// will not read past (a checkpoint's moment), and how long it waits between tries: 50 × 100 ms,
/// the writer's [`BUSY_TIMEOUT`].
const BACKUP_TRIES: u32 = 50;
const BACKUP_RETRY: Duration = Duration::from_millis(100);

/// `mediatord backup`: copies a state directory's database into a new file `dest` with SQLite's
/// online backup API, whether a daemon is running on it or not (`docs/operations.md#backups`).
/// Returns the copy's size in bytes.
///
/// Safe beside a running daemon: the copy is one read transaction of its own (every page in one
/// step, so a commit cannot make it start over and it is one consistent snapshot, WAL included);
/// a reader takes no write lock and the state directory's `flock` only keeps a second daemon out.
/// `dest` is written whole or not at all: into a temporary file beside it, checked, synced, then
/// linked to its name, which must not exist yet.
pub fn backup(state_dir: &Path, dest: &Path) -> Result<u64, OpenError> {
    dir::check(state_dir)?;
    let path = db_path(state_dir);
    let failed = |reason: String| OpenError::Sqlite { path: dest.to_path_buf(), reason };
    if dest.exists() {
        return Err(failed("it exists already: name a new file".into()));
    }
    let source =
        Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(sqlite_error(&path))?;
    source.busy_timeout(BUSY_TIMEOUT).map_err(sqlite_error(&path))?;
    let mut partial = dest.as_os_str().to_owned();
    partial.push(format!(".partial-{}", std::process::id()));
    let partial = PathBuf::from(partial);
    std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&partial)
        .map_err(|e| failed(e.to_string()))?;
    let copied = copy_database(&source, &partial);
    let linked = copied.and_then(|()| {
        std::fs::File::open(&partial).and_then(|f| f.sync_all()).map_err(|e| e.to_string())?;
        // A link, not a rename: it fails when `dest` appeared meanwhile instead of replacing it.
        std::fs::hard_link(&partial, dest).map_err(|e| e.to_string())
    });
    let _ = std::fs::remove_file(&partial);
    linked.map_err(failed)?;
    if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        let _ = std::fs::File::open(parent).and_then(|d| d.sync_all());
    }
    std::fs::metadata(dest).map(|m| m.len()).map_err(|e| failed(e.to_string()))
}

/// Copies `source` into the empty database file `to`, as a rollback-journal database (one file,
/// no WAL beside it), and checks the copy.
fn copy_database(source: &Connection, to: &Path) -> Result<(), String> {
    let mut copy = Connection::open(to).map_err(|e| e.to_string())?;
    {
        let backup = rusqlite::backup::Backup::new(source, &mut copy).map_err(|e| e.to_string())?;
        let mut tries = 0;
        loop {
            match backup.step(-1).map_err(|e| e.to_string())? {
                rusqlite::backup::StepResult::Done => break,
                _ if tries >= BACKUP_TRIES => return Err("the database stayed locked: try again".into()),
                _ => {
                    tries += 1;
                    std::thread::sleep(BACKUP_RETRY);
                }
            }
        }
    }
    copy.pragma_update(None, "journal_mode", "DELETE").map_err(|e| e.to_string())?;
    let check: String = copy.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(|e| e.to_string())?;
    if check != "ok" {
        return Err(format!("the copy failed its check: {check}"));
    }
    Ok(())
}

/// Opens a state directory's database read-only, for `mediatord audit` (while a daemon runs, or
/// not). Checks the directory like a boot does.
pub fn open_read_only(state_dir: &Path) -> Result<ReadOnly, OpenError> {
    dir::check(state_dir)?;
    open_read_only_file(&db_path(state_dir))
}

/// The first 16 bytes of every SQLite database file (the file format's header string).
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// Opens the state database file `path` read-only: a state directory's `state.db`, or a copy
/// `mediatord backup` wrote (one file, no WAL beside it). A file that is not an SQLite database,
/// or one without mediatord's tables, is refused as [`OpenError::NotADatabase`], saying which.
pub fn open_read_only_file(path: &Path) -> Result<ReadOnly, OpenError> {
    let not_ours = |why| OpenError::NotADatabase { path: path.to_path_buf(), why };
    let mut header = [0u8; 16];
    match std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut header)) {
        Ok(()) if &header == SQLITE_HEADER => {}
        Ok(()) => return Err(not_ours("it is not an SQLite database")),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(not_ours("it is not an SQLite database (too short)"));
        }
        Err(e) => return Err(OpenError::Sqlite { path: path.to_path_buf(), reason: e.to_string() }),
    }
    let err = sqlite_error(path);
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(&err)?;
    let ours: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations')",
            [],
            |r| r.get(0),
        )
        .map_err(&err)?;
    if !ours {
        return Err(not_ours("an SQLite database without mediatord's tables"));
    }
    let found: u32 = conn
        .query_row("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", [], |r| r.get(0))
        .map_err(&err)?;
    if found > SCHEMA_VERSION {
        return Err(OpenError::TooNew { path: path.to_path_buf(), found, supported: SCHEMA_VERSION });
    }
    Ok(ReadOnly { conn })
}

/// A read-only view of a state database.
#[derive(Debug)]
pub struct ReadOnly {
    conn: Connection,
}

impl ReadOnly {
    pub fn query_audit(&self, q: &AuditQuery) -> Result<AuditPage, ReadError> {
        query_audit_on(&self.conn, q).map_err(read_error)
    }

    /// A session's record, for `mediatord transcript`.
    pub fn session(&self, session_id: &str) -> Result<Option<SessionRecord>, ReadError> {
        session_on(&self.conn, session_id).map_err(read_error)
    }

    /// Up to `limit` recorded items of a session after id `after`, in order (as `Store::events`).
    pub fn events(&self, session_id: &str, after: u64, limit: usize) -> Result<Vec<StoredEvent>, ReadError> {
        events_on(&self.conn, session_id, after, limit).map_err(read_error)
    }

    /// Every device paired here, revoked ones too, oldest first: `(device id, name, person as
    /// JSON)`, for `mediatord transcript` to name whoever prompted (a device acts as its id, a
    /// person's as theirs), not only those who decided something.
    pub fn device_names(&self) -> Result<Vec<(String, String, Option<String>)>, ReadError> {
        let mut stmt = self
            .conn
            .prepare("SELECT device_id, name, person FROM devices ORDER BY created_at, device_id")
            .map_err(read_error)?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).map_err(read_error)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(read_error)
    }
}

fn query_audit_on(c: &Connection, q: &AuditQuery) -> rusqlite::Result<AuditPage> {
    let limit = q.limit.max(1);
    let mut stmt = c.prepare_cached(
        "SELECT seq, entry FROM audit
         WHERE (?1 IS NULL OR seq < ?1) AND (?2 IS NULL OR workspace = ?2)
           AND (?3 IS NULL OR session_id = ?3) AND (?4 IS NULL OR requested_at >= ?4)
           AND (?5 IS NULL OR requested_at < ?5) AND (?6 IS NULL OR outcome = ?6)
         ORDER BY seq DESC LIMIT ?7",
    )?;
    let rows = stmt.query_map(
        params![
            q.cursor.map(|c| decide::sql_int(c.0)),
            q.workspace,
            q.session_id,
            q.since.map(decide::sql_int),
            q.until.map(decide::sql_int),
            q.outcome.map(AuditOutcome::as_str),
            (limit + 1) as i64,
        ],
        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
    )?;
    AuditPage::from_rows(rows, limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    use crate::store::api::Writes;
    use crate::store::queue::QUEUE_CONTROL_RESERVE;

    fn config(dir: &Path) -> StoreConfig {
        StoreConfig {
            state_dir: Some(dir.to_path_buf()),
            events_per_session: 1000,
            max_age_days: 30,
            url: None,
        }
    }

    fn record(id: &str) -> SessionRecord {
        SessionRecord {
            session_id: id.into(),
            workspace: "/ws".into(),
            agent: "demo".into(),
            created_at: 1,
            ended_at: None,
            state: SessionState::Live,
            end_reason: None,
            last_event_id: 0,
        }
    }

    /// Times in these tests are recent: retention (30 days here) removes anything older.
    fn now() -> u64 {
        crate::clock::now_ms()
    }

    fn audit(request_id: &str, at: u64, outcome: Option<AuditOutcome>) -> AuditRecord {
        AuditRecord {
            request_id: request_id.into(),
            session_id: "s".into(),
            workspace: "/ws".into(),
            requested_at: at,
            outcome,
            entry: serde_json::json!({"requestId": request_id}),
        }
    }

    /// Polls the writer thread (its background pass, or its queue) until `done`, within `bound`.
    async fn until(what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + bound;
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(10)).await; // polling another thread
        }
    }

    async fn flushed(store: &SqliteStore) {
        tokio::time::timeout(Duration::from_secs(10), store.flush())
            .await
            .expect("in time")
            .expect("flushed");
    }

    #[tokio::test]
    async fn skipped_ids_are_recorded_as_gaps_and_a_short_end_as_a_trailing_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(&dir.path().join("state"), &config(dir.path())).expect("open");
        store.session_started(&record("s"), 0, false);
        let sid: Arc<str> = Arc::from("s");
        for id in [1, 2, 5] {
            store.append_events(&sid, id, vec![Bytes::from(format!("frame {id}"))]);
        }
        let ended = now();
        store.session_ended("s", SessionState::Dormant, "daemon_shutdown", 7, ended);
        flushed(&store).await;
        let events = store.events("s", 0, 100).expect("read");
        let frame = |id: u64| StoredEvent::Frame { id, frame: Bytes::from(format!("frame {id}")) };
        assert_eq!(
            events,
            [
                frame(1),
                frame(2),
                StoredEvent::Gap { from: 3, to: 4 },
                frame(5),
                StoredEvent::Gap { from: 6, to: 7 }
            ]
        );
        assert_eq!(store.events("s", 4, 100).expect("read")[0], frame(5));
        assert_eq!(store.stats().gaps, 2);
        let s = store.session("s").expect("read").expect("recorded");
        assert_eq!((s.state, s.last_event_id, s.ended_at), (SessionState::Dormant, 7, Some(ended)));
    }

    fn turn(session: &str, seq: u64, before: &str, after: &str) -> TurnRecord {
        TurnRecord {
            session_id: session.into(),
            workspace: "/ws".into(),
            seq,
            at: now(),
            before: Some(before.into()),
            after: Some(after.into()),
            entry: serde_json::json!({"turnIndex": seq, "after": after}),
        }
    }

    #[tokio::test]
    async fn turn_records_are_kept_in_order_replaced_by_seq_and_gone_with_a_fresh_session() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let store = SqliteStore::open(&state, &config(dir.path())).expect("open");
        store.session_started(&record("s"), 0, false);
        store.record_turn(turn("s", 2, "b", "c"));
        store.record_turn(turn("s", 1, "a", "b"));
        store.record_turn(turn("t", 1, "x", "y"));
        store.record_turn(turn("s", 2, "b", "d"));
        flushed(&store).await;
        let turns = store.turns("s").expect("read");
        let shown: Vec<(u64, Option<&str>)> = turns.iter().map(|t| (t.seq, t.after.as_deref())).collect();
        assert_eq!(shown, [(1, Some("b")), (2, Some("d"))]);
        assert_eq!(turns[1].entry["after"], "d");
        let mut refs = store.snapshot_refs().expect("refs");
        refs.sort();
        assert_eq!(refs, ["a", "b", "d", "x", "y"]);
        drop(store);
        let reopened = SqliteStore::open(&state, &config(dir.path())).expect("reopen");
        assert_eq!(reopened.turns("s").expect("read").len(), 2, "kept across a restart");
        reopened.session_started(&record("s"), 0, false);
        flushed(&reopened).await;
        assert!(reopened.turns("s").expect("read").is_empty(), "a fresh session forgets them");
        assert_eq!(reopened.turns("t").expect("read").len(), 1);
    }

    /// Version 5 is the fleet's pairing codes (on main first); the turn records came after it as 6:
    /// a database a daemon left at 5 keeps its codes and gains the turns.
    /// A state directory whose database an earlier version left at schema `version`: its first
    /// migrations applied and recorded, nothing after.
    fn at_version(state: &Path, version: usize) -> Connection {
        dir::prepare(state).expect("state dir");
        let conn = Connection::open(db_path(state)).expect("create");
        conn.execute_batch(
            "CREATE TABLE schema_migrations(version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);",
        )
        .expect("migrations table");
        for (i, sql) in MIGRATIONS[..version].iter().enumerate() {
            conn.execute_batch(sql).expect("an earlier version");
            conn.execute("INSERT INTO schema_migrations VALUES (?1, 0)", [i as i64 + 1]).expect("version");
        }
        conn
    }

    #[tokio::test]
    async fn a_version_5_database_with_pairing_codes_migrates_to_the_turn_records() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        {
            let conn = at_version(&state, 5);
            conn.execute(
                "INSERT INTO pairing_codes(digest, name, role, expires_at) VALUES (x'01', 'phone', 'voter', 1)",
                [],
            )
            .expect("a waiting code");
        }
        let store = SqliteStore::open(&state, &config(dir.path())).expect("open and migrate");
        let read = |sql: &str| lock(&store.read).query_row(sql, [], |r| r.get::<_, i64>(0)).expect("read");
        assert_eq!(read("SELECT MAX(version) FROM schema_migrations"), i64::from(SCHEMA_VERSION));
        assert_eq!(SCHEMA_VERSION, 7);
        assert_eq!(read("SELECT COUNT(*) FROM pairing_codes"), 1, "the code is kept");
        store.session_started(&record("s"), 0, false);
        store.record_turn(turn("s", 1, "a", "b"));
        flushed(&store).await;
        assert_eq!(store.turns("s").expect("read").len(), 1);
    }

    /// Issue #48: a device paired before people existed keeps working after version 7: no person,
    /// no end.
    #[tokio::test]
    async fn a_version_6_database_keeps_its_devices_as_nobodys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        {
            let conn = at_version(&state, 6);
            conn.execute(
                "INSERT INTO devices(device_id, name, role, secret_hash, created_at) VALUES ('dev-1', 'phone', 'voter', zeroblob(32), 1)",
                [],
            )
            .expect("a paired device");
        }
        let store = SqliteStore::open(&state, &config(dir.path())).expect("open and migrate");
        let devices = store.devices().expect("read");
        assert_eq!(devices.len(), 1);
        assert_eq!((devices[0].person.as_deref(), devices[0].expires_at), (None, None), "nobody's, no end");
    }

    #[tokio::test]
    async fn a_version_1_database_migrates_and_replays_the_same_events() {
        // Written by version 1's schema and rows; opening applies every later migration.
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        {
            // A database as version 1 left it: its schema, a row per event, a gap marker.
            let conn = at_version(&state, 1);
            conn.execute(
                "INSERT INTO sessions(session_id, workspace, agent, created_at, ended_at, state, end_reason, last_event_id)
                 VALUES ('s', '/ws', 'demo', 1, ?1, 'dormant', 'daemon_shutdown', 6)",
                [now() as i64],
            )
            .expect("session");
            for id in [1i64, 2, 5, 6] {
                conn.execute(
                    "INSERT INTO events(session_id, id, frame) VALUES ('s', ?1, ?2)",
                    params![id, format!("frame {id}").into_bytes()],
                )
                .expect("event");
            }
            conn.execute("INSERT INTO events(session_id, id, frame, gap_to) VALUES ('s', 3, NULL, 4)", [])
                .expect("gap");
        }
        let store = SqliteStore::open(&state, &config(dir.path())).expect("open and migrate");
        let frame = |id: u64| StoredEvent::Frame { id, frame: Bytes::from(format!("frame {id}")) };
        let replayed = store.events("s", 0, 100).expect("read");
        assert_eq!(replayed, [frame(1), frame(2), StoredEvent::Gap { from: 3, to: 4 }, frame(5), frame(6)]);
        assert_eq!(store.events("s", 3, 100).expect("read")[0], StoredEvent::Gap { from: 4, to: 4 });
        assert_eq!(store.first_event_id("s").expect("read"), Some(1));
        let version: u32 = lock(&store.read)
            .query_row("SELECT MAX(version) FROM schema_migrations", [], |r| r.get(0))
            .expect("version");
        assert_eq!(version, SCHEMA_VERSION);
        // The migrated session goes on recording after its last id.
        store.session_started(&record("s"), 6, true);
        store.append_events(&Arc::from("s"), 7, vec![Bytes::from("frame 7"), Bytes::from("frame 8")]);
        flushed(&store).await;
        assert_eq!(store.events("s", 5, 100).expect("read"), [frame(6), frame(7), frame(8)]);
    }

    #[tokio::test]
    async fn a_burst_is_one_run_and_replays_from_inside_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(&dir.path().join("state"), &config(dir.path())).expect("open");
        store.session_started(&record("s"), 0, false);
        let sid: Arc<str> = Arc::from("s");
        store.append_events(&sid, 1, (1..=3).map(|i| Bytes::from(format!("frame {i}"))).collect());
        store.append_events(&sid, 4, vec![Bytes::from("frame 4")]);
        flushed(&store).await;
        let rows: i64 =
            lock(&store.read).query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0)).expect("count");
        assert_eq!(rows, 1, "four consecutive events in one transaction are one row");
        let frame = |id: u64| StoredEvent::Frame { id, frame: Bytes::from(format!("frame {id}")) };
        assert_eq!(store.events("s", 1, 2).expect("read"), [frame(2), frame(3)]);
        assert_eq!(store.events("s", 3, 100).expect("read"), [frame(4)]);
        assert_eq!(store.events("s", 4, 100).expect("read"), []);
    }

    /// Records 16 MiB of frames that do not compress (so they are written as they are), one MiB
    /// per commit, and checks the WAL's size on disk after it: about 4 MiB, where it was
    /// checkpointed, not the 16 recorded. Each 64 KiB frame fills a run of its own, compressed
    /// alone, so one block of noise serves for all of them.
    async fn assert_wal_checkpointed_near_4_mib(store: &SqliteStore, state: &Path) {
        store.session_started(&record("s"), 0, false);
        let sid: Arc<str> = Arc::from("s");
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let noise: Bytes = (0..65_536)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect::<Vec<u8>>()
            .into();
        for mib in 0..16u64 {
            store.append_events(&sid, 1 + mib * 16, vec![noise.clone(); 16]);
            flushed(store).await;
        }
        let wal = std::fs::metadata(state.join("state.db-wal")).expect("a WAL").len();
        assert!(
            (4000 * 1024..7 * 1024 * 1024).contains(&wal),
            "the WAL grows to about 4 MiB, not 16: {wal} bytes"
        );
    }

    fn page_size(store: &SqliteStore) -> u32 {
        lock(&store.read).query_row("PRAGMA page_size", [], |r| r.get(0)).expect("page size")
    }

    /// A new database takes large pages, and its WAL is checkpointed into it after about 4 MiB,
    /// as at SQLite's defaults: it does not grow with what is recorded.
    #[tokio::test]
    async fn a_new_database_has_32_kib_pages_and_a_wal_checkpointed_every_4_mib() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let store = SqliteStore::open(&state, &config(dir.path())).expect("open");
        assert_eq!(page_size(&store), 32 * 1024);
        assert_wal_checkpointed_near_4_mib(&store, &state).await;
        assert_eq!(store.events("s", 255, 256).expect("read").len(), 1, "the last frame is there");
    }

    /// A database made with SQLite's default pages (by an earlier version) keeps them, and its WAL
    /// is checkpointed after the same 4 MiB (1000 of its pages, SQLite's default).
    #[tokio::test]
    async fn an_existing_database_keeps_its_page_size_and_the_same_checkpoint_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        drop(at_version(&state, MIGRATIONS.len()));
        let store = SqliteStore::open(&state, &config(dir.path())).expect("open");
        assert_eq!(page_size(&store), 4096);
        assert_wal_checkpointed_near_4_mib(&store, &state).await;
    }

    /// A state directory (0700) beside `dir`'s holding `db` alone as its `state.db`, read-only.
    fn alone(dir: &Path, name: &str, db: &Path) -> ReadOnly {
        let copy = dir.join(name);
        std::fs::create_dir(&copy).expect("mkdir");
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::fs::copy(db, copy.join(DB_FILE)).expect("copy");
        open_read_only(&copy).expect("open the copy")
    }

    fn audit_ids(db: &ReadOnly) -> Vec<String> {
        let page = db.query_audit(&AuditQuery { limit: 100, ..AuditQuery::default() }).expect("read");
        page.entries.iter().map(|e| e["requestId"].as_str().unwrap_or_default().to_owned()).collect()
    }

    #[test]
    fn close_checkpoints_the_wal_so_the_database_file_alone_has_every_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let store = SqliteStore::open(&state, &config(dir.path())).expect("open");
        let t0 = now();
        for i in 0..20 {
            store.audit(audit(&format!("r{i:02}"), t0 + i, Some(AuditOutcome::Selected)));
        }
        // The store's own reader has the WAL open, as in a daemon that served a read: closing the
        // writer's connection alone (not the last) then leaves the WAL as it is.
        store.flush().wait_blocking().expect("committed");
        let read = store.query_audit(&AuditQuery { limit: 100, ..AuditQuery::default() }).expect("read");
        assert_eq!(read.entries.len(), 20);
        assert_eq!(store.close(), Ok(()));
        let wal = std::fs::metadata(state.join("state.db-wal")).map_or(0, |m| m.len());
        assert_eq!(wal, 0, "the WAL is folded into state.db and truncated");
        let ids = audit_ids(&alone(dir.path(), "copy", &db_path(&state)));
        assert_eq!(ids, (0..20).rev().map(|i| format!("r{i:02}")).collect::<Vec<_>>());
        assert!(store.close().is_err(), "a second close says it was closed");
        store.audit(audit("late", t0, None));
        drop(store);
    }

    #[test]
    fn backup_copies_every_commit_beside_a_running_store_and_never_over_a_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let store = SqliteStore::open(&state, &config(dir.path())).expect("open");
        let t0 = now();
        for i in 0..5 {
            store.audit(audit(&format!("b{i}"), t0 + i, Some(AuditOutcome::Selected)));
        }
        store.flush().wait_blocking().expect("committed");
        assert!(
            std::fs::metadata(state.join("state.db-wal")).expect("a WAL").len() > 0,
            "commits are in the WAL"
        );
        let dest = dir.path().join("backup.db");
        let bytes = backup(&state, &dest).expect("backup");
        assert_eq!(bytes, std::fs::metadata(&dest).expect("the copy").len());
        assert_eq!(std::fs::metadata(&dest).expect("the copy").permissions().mode() & 0o777, 0o600);
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["backup.db", "state"], "one file: no WAL, no partial copy beside it");
        assert_eq!(audit_ids(&alone(dir.path(), "restored", &dest)), ["b4", "b3", "b2", "b1", "b0"]);

        let before = std::fs::read(&dest).expect("read");
        let again = backup(&state, &dest).expect_err("the file exists");
        assert!(again.to_string().contains("exists already"), "{again}");
        assert_eq!(std::fs::read(&dest).expect("read"), before);
        // The store goes on writing and reading.
        store.audit(audit("after", t0 + 9, None));
        store.flush().wait_blocking().expect("committed");
        assert_eq!(
            store.query_audit(&AuditQuery { limit: 1, ..AuditQuery::default() }).expect("read").entries[0]["requestId"],
            "after"
        );
    }

    #[tokio::test]
    async fn the_audit_pages_newest_first_and_pending_requests_are_abandoned_on_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let store = SqliteStore::open(&state, &config(dir.path())).expect("open");
        let t0 = now();
        for (i, id) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            store.audit(audit(id, t0 + i as u64 * 10, Some(AuditOutcome::Selected)));
        }
        store.audit(audit("p", t0 + 60, None));
        // A record replaces the earlier one with its id and keeps its place.
        store.audit(audit("b", t0 + 10, Some(AuditOutcome::Cancelled)));
        flushed(&store).await;
        let ids = |page: &AuditPage| -> Vec<String> {
            page.entries.iter().map(|e| e["requestId"].as_str().unwrap_or_default().to_owned()).collect()
        };
        let q = AuditQuery { limit: 2, ..AuditQuery::default() };
        let first = store.query_audit(&q).expect("page");
        assert_eq!(ids(&first), ["p", "e"]);
        let second = store.query_audit(&AuditQuery { cursor: first.next_cursor, ..q.clone() }).expect("page");
        assert_eq!(ids(&second), ["d", "c"]);
        let third = store.query_audit(&AuditQuery { cursor: second.next_cursor, ..q.clone() }).expect("page");
        assert_eq!(ids(&third), ["b", "a"]);
        assert_eq!(third.next_cursor, None);
        let cancelled =
            AuditQuery { outcome: Some(AuditOutcome::Cancelled), limit: 10, ..AuditQuery::default() };
        assert_eq!(ids(&store.query_audit(&cancelled).expect("page")), ["b"]);
        let window =
            AuditQuery { since: Some(t0 + 10), until: Some(t0 + 30), limit: 10, ..AuditQuery::default() };
        assert_eq!(ids(&store.query_audit(&window).expect("page")), ["c", "b"]);
        drop(store);

        let store = SqliteStore::open(&state, &config(dir.path())).expect("reopen");
        let abandoned =
            AuditQuery { outcome: Some(AuditOutcome::Abandoned), limit: 10, ..AuditQuery::default() };
        let page = store.query_audit(&abandoned).expect("page");
        assert_eq!(ids(&page), ["p"]);
        assert_eq!(page.entries[0]["status"], "abandoned");
        let pending = AuditQuery { outcome: Some(AuditOutcome::Pending), limit: 10, ..AuditQuery::default() };
        assert!(store.query_audit(&pending).expect("page").entries.is_empty());
    }

    #[tokio::test]
    async fn devices_are_kept_with_their_secret_hash_and_a_revoked_one_is_not_loaded_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let store = SqliteStore::open(&state, &config(dir.path())).expect("open");
        let device = |id: &str, hash: u8| StoredDevice {
            device_id: id.into(),
            name: format!("{id}'s name"),
            role: "voter".into(),
            secret_hash: [hash; 32],
            created_at: 10,
            last_seen_at: Some(10),
            person: None,
            expires_at: None,
        };
        let (a, b) = (store.put_device(&device("dev-a", 1)), store.put_device(&device("dev-b", 2)));
        store.device_seen("dev-a", 99);
        store.device_seen("dev-a", 50);
        let revoked = store.revoke_device("dev-b", 100);
        flushed(&store).await;
        for ack in [a, b, revoked] {
            assert_eq!(ack.await, Ok(()));
        }
        drop(store);
        let store = SqliteStore::open(&state, &config(dir.path())).expect("reopen");
        let a = StoredDevice { last_seen_at: Some(99), ..device("dev-a", 1) };
        assert_eq!(store.devices().expect("read"), [a], "last seen only moves forward; dev-b is revoked");
    }

    #[tokio::test]
    async fn retention_trims_each_session_to_its_newest_events() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let cfg = StoreConfig { events_per_session: 3, ..config(dir.path()) };
        let store = SqliteStore::open(&state, &cfg).expect("open");
        store.session_started(&record("s"), 0, false);
        let sid: Arc<str> = Arc::from("s");
        for id in 1..=8 {
            store.append_events(&sid, id, vec![Bytes::from_static(b"f")]);
        }
        store.session_ended("s", SessionState::Closed, "closed_by_client", 8, now());
        flushed(&store).await;
        drop(store);
        // Retention runs first thing in the next writer's life.
        let store = SqliteStore::open(&state, &cfg).expect("reopen");
        until("retention never ran", Duration::from_secs(10), || {
            store.first_event_id("s").expect("read") == Some(6)
        })
        .await;
        let kept: Vec<u64> =
            store.events("s", 0, 100).expect("read").iter().map(StoredEvent::last_id).collect();
        assert_eq!(kept, [6, 7, 8]);
    }

    /// Writes other than events are bounded too: with the writer stuck behind another process's
    /// lock, the ones past [`QUEUE_CONTROL_RESERVE`] are dropped and counted, nothing waits, and
    /// the writer takes the rest once the lock is gone.
    #[tokio::test]
    async fn writes_past_the_control_bound_are_dropped_and_counted_while_the_writer_is_stuck() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let store = SqliteStore::open(&state, &config(dir.path())).expect("open");
        flushed(&store).await;
        // Another process holds the write lock: the writer blocks on its first write (for the
        // busy timeout), having taken at most one op off the channel.
        let other = Connection::open(db_path(&state)).expect("open");
        other.execute_batch("BEGIN EXCLUSIVE").expect("lock");
        let sent = QUEUE_CONTROL_RESERVE + 900;
        for i in 0..sent {
            store.audit(audit(&format!("r{i}"), now(), None));
        }
        let dropped = store.stats().writes_dropped as usize;
        let bound = sent - QUEUE_CONTROL_RESERVE;
        assert!((bound - 1..=bound).contains(&dropped), "{dropped} dropped of {sent}");
        other.execute_batch("ROLLBACK").expect("unlock");
        until("the writer never drained its queue", Duration::from_secs(30), || {
            store.writing.queue.counters.queued_control.load(Ordering::Relaxed) == 0
        })
        .await;
        flushed(&store).await;
    }

    /// Issue #27, finding 1: a transaction that fails (here another process holds the write lock
    /// past [`BUSY_TIMEOUT`]) is not acknowledged: every write a caller waits on hears the error,
    /// the others are counted, and its events come back as a gap once the writer can write again.
    #[tokio::test]
    async fn a_failed_transaction_refuses_its_acks_counts_its_writes_and_leaves_a_gap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let store = SqliteStore::open(&state, &config(dir.path())).expect("open");
        store.session_started(&record("s"), 0, false);
        let sid: Arc<str> = Arc::from("s");
        store.append_events(&sid, 1, vec![Bytes::from("frame 1"), Bytes::from("frame 2")]);
        flushed(&store).await;
        let other = Connection::open(db_path(&state)).expect("open");
        other.execute_batch("BEGIN EXCLUSIVE").expect("lock");
        store.append_events(&sid, 3, vec![Bytes::from("frame 3"), Bytes::from("frame 4")]);
        store.audit(audit("lost", now(), None));
        let device = StoredDevice {
            device_id: "dev-a".into(),
            name: "a".into(),
            role: "voter".into(),
            secret_hash: [1; 32],
            created_at: 1,
            last_seen_at: None,
            person: None,
            expires_at: None,
        };
        let paired = store.put_device(&device);
        let flush = store.flush();
        let refused = tokio::time::timeout(Duration::from_secs(30), paired).await.expect("answered in time");
        assert!(refused.as_ref().is_err_and(|e| e.0.contains("locked")), "{refused:?}");
        assert!(tokio::time::timeout(Duration::from_secs(30), flush).await.expect("in time").is_err());
        let stats = store.stats();
        assert!(stats.commits_failed >= 1, "{stats:?}");
        assert_eq!((stats.writes_failed, stats.events_dropped), (2, 2), "the audit record and the device");
        assert!(stats.lost_writes());
        other.execute_batch("ROLLBACK").expect("unlock");
        store.append_events(&sid, 5, vec![Bytes::from("frame 5")]);
        store.session_ended("s", SessionState::Closed, "closed_by_client", 5, now());
        flushed(&store).await;
        let frame = |id: u64| StoredEvent::Frame { id, frame: Bytes::from(format!("frame {id}")) };
        assert_eq!(
            store.events("s", 0, 100).expect("read"),
            [frame(1), frame(2), StoredEvent::Gap { from: 3, to: 4 }, frame(5)]
        );
        assert_eq!(store.devices().expect("read"), [], "the refused device is not on disk");
        assert_eq!(
            store.query_audit(&AuditQuery { limit: 10, ..AuditQuery::default() }).expect("read").entries,
            Vec::<Value>::new()
        );
        assert_eq!(store.put_device(&device).await, Ok(()), "and the next write goes through");
    }

    #[tokio::test]
    async fn a_damaged_run_replays_as_a_gap_and_does_not_stop_retention() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let cfg = StoreConfig { events_per_session: 4, ..config(dir.path()) };
        let store = SqliteStore::open(&state, &cfg).expect("open");
        store.session_started(&record("s"), 0, false);
        let sid: Arc<str> = Arc::from("s");
        store.append_events(&sid, 1, (1..=3).map(|i| Bytes::from(format!("frame {i}"))).collect());
        flushed(&store).await;
        store.append_events(&sid, 4, (4..=6).map(|i| Bytes::from(format!("frame {i}"))).collect());
        store.session_ended("s", SessionState::Closed, "closed_by_client", 6, now());
        flushed(&store).await;
        // The disk damages the first run: an LZ4 blob that does not decode.
        Connection::open(db_path(&state))
            .expect("open")
            .execute("UPDATE events SET frames = x'ff00ff', codec = 1 WHERE first_id = 1", [])
            .expect("damage");
        let frame = |id: u64| StoredEvent::Frame { id, frame: Bytes::from(format!("frame {id}")) };
        let tail = [frame(4), frame(5), frame(6)];
        let replayed = store.events("s", 0, 100).expect("read");
        assert_eq!(replayed[0], StoredEvent::Gap { from: 1, to: 3 });
        assert_eq!(replayed[1..], tail);
        assert_eq!(store.events("s", 1, 100).expect("read")[0], StoredEvent::Gap { from: 2, to: 3 });
        drop(store);
        // Retention (first thing in the next writer's life) keeps the newest 4 ids, 3..=6: the
        // damaged run's part of them stays a gap.
        let store = SqliteStore::open(&state, &cfg).expect("reopen");
        until("retention never got past the damaged run", Duration::from_secs(10), || {
            store.first_event_id("s").expect("read") == Some(3)
        })
        .await;
        let replayed = store.events("s", 0, 100).expect("read");
        assert_eq!(replayed[0], StoredEvent::Gap { from: 3, to: 3 });
        assert_eq!(replayed[1..], tail);
    }

    #[tokio::test]
    async fn sessions_and_decisions_older_than_the_age_limit_are_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let store = SqliteStore::open(&state, &config(dir.path())).expect("open");
        for (id, ended) in [("old", 1), ("new", now())] {
            store.session_started(&record(id), 0, false);
            store.append_events(&Arc::from(id), 1, vec![Bytes::from_static(b"f")]);
            store.session_ended(id, SessionState::Closed, "closed_by_client", 1, ended);
        }
        store.audit(audit("ancient", 1, Some(AuditOutcome::Selected)));
        store.audit(audit("recent", now(), Some(AuditOutcome::Selected)));
        flushed(&store).await;
        drop(store);
        let store = SqliteStore::open(&state, &config(dir.path())).expect("reopen");
        let audit_ids = || -> Vec<String> {
            let all = store.query_audit(&AuditQuery { limit: 10, ..AuditQuery::default() }).expect("page");
            all.entries.iter().filter_map(|e| e["requestId"].as_str().map(str::to_owned)).collect()
        };
        // Retention removes the old sessions and then, in its own statement, the old decisions: wait
        // for the pass's end, not its first half.
        until("retention never ran", Duration::from_secs(10), || {
            store.session("old").expect("read").is_none() && audit_ids().len() == 1
        })
        .await;
        assert_eq!(store.first_event_id("old").expect("read"), None);
        assert!(store.session("new").expect("read").is_some());
        assert_eq!(audit_ids(), ["recent"]);
    }
}

//! [`PgStore`]: the state in PostgreSQL (`--store postgres://…`), shared by every daemon of a
//! fleet (`docs/operations.md#a-fleet`); the only file that knows `tokio_postgres` and
//! `deadpool_postgres`.
//!
//! - **The same writer as SQLite's** (`writer.rs`): the same queue, bounds, gap marking and group
//!   commit; this file is its PostgreSQL dialect (a pooled connection per batch, each batch
//!   driven on the store's runtime within [`DB_TIMEOUT`]). An acknowledged write ([`Ack`]) is
//!   answered once its transaction commits, or with the error (the database down, restarting,
//!   unreachable): then nothing of it is on disk and the caller neither applies nor acknowledges it.
//! - **Its own runtime.** The driver runs on a small tokio runtime the store owns (one worker), so
//!   the store is opened before the daemon's runtime and blocking reads can wait on it from any
//!   thread (they are called from `spawn_blocking`, and once at boot).
//! - **Notices.** Decisions that take effect everywhere (a device paired or revoked, a workspace
//!   rule added or removed) are followed by a `pg_notify` inside the transaction that writes them,
//!   so a daemon hears of one exactly when it is committed. A notice says only which tables to
//!   read again ([`Notice`]: any role that may connect can send one, so it grants nothing); what
//!   takes effect is what the read finds. One connection per daemon `LISTEN`s, reconnecting after
//!   a loss and then asking for a full re-read ([`Notice::Resync`]).
//! - **Pairing codes.** A code issued on one daemon is kept in `pairing_codes` (by its SHA-256,
//!   until it expires on the database's clock) before it is shown, and another daemon that does
//!   not know a code it is given looks it up there; using it deletes the row and claims it in
//!   `pairing_claims` in one transaction, so it works once in the whole fleet.
//! - **The directory.** `nodes` holds each daemon's URL and lease, `sessions.owner` who holds a
//!   live session. Leases are compared on the database's clock, so the daemons' clocks need not
//!   agree.

use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use serde_json::Value;
use tokio_postgres::{AsyncMessage, NoTls};

use super::api::{
    Ack, AuditPage, ReadError, SessionRecord, SessionState, Store, StoreConfig, StoreStats, StoredDevice,
    StoredEvent, StoredRule, TurnRecord,
};
use super::chunk;
use super::decide::{self, AuditOutcome, AuditQuery, shown};
use super::fleet::{Fleet, Notice, SessionClaim, StoredCode};
use super::migrations;
use super::queue::Op;
use super::sqlite::OpenError;
use super::writer::{Writing, Written};
use crate::sync::lock;

mod base;
mod write;

use self::base::{ADVISORY_LOCK, CHANNEL, DB_TIMEOUT, NOW_MS, decode_notice, pg_error};
use self::write::Postgres;

/// The schema this build writes; the same numbers mean the same tables as SQLite's
/// (`sqlite.rs`), written in PostgreSQL's types.
pub const PG_SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// The migrations, in order (`migrations/`).
const MIGRATIONS: &[&str] = migrations::POSTGRES;

/// The session setting that keeps the server's NOTICEs off every connection of the store.
const QUIET: &str = "-c client_min_messages=warning";
/// Notices queued for the daemon at most; past this they are dropped and a [`Notice::Resync`]
/// follows (a re-read of everything they stand for), so nothing is missed, only coalesced.
const NOTICE_QUEUE: usize = 1024;
/// Connections in the pool: the writer's, the lease's, and reads (each from a blocking thread).
const POOL_SIZE: usize = 8;
/// How long the listener waits before connecting again after losing its connection.
const LISTEN_RETRY: Duration = Duration::from_secs(1);

pub struct PgStore {
    /// The queue (never blocks; bounded by its counters) and the writer thread behind it.
    writing: Writing,
    /// The driver's runtime (the writer, the reads, the listener run on it).
    rt: Arc<tokio::runtime::Runtime>,
    pool: Pool,
    /// This daemon's URL in the fleet, once it joined ([`Fleet::join`]).
    node: Arc<OnceLock<String>>,
    secret: [u8; 32],
    notices: Mutex<Option<tokio::sync::mpsc::Receiver<Notice>>>,
    /// The database's size, read by each retention pass (once a minute, and after boot).
    db_bytes: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("node", &self.node.get()).finish_non_exhaustive()
    }
}

/// Why the first connection failed, in the server's words where it gave some, and what to check:
/// where the password comes from (`PGPASSWORD`, or the URL), the URL's user or database.
fn connect_reason(e: &deadpool_postgres::PoolError) -> String {
    use tokio_postgres::error::SqlState;
    let text = pg_error(e);
    let db = match e {
        deadpool_postgres::PoolError::Backend(pg) => pg.as_db_error(),
        _ => None,
    };
    let url = "postgres://USER:PASSWORD@HOST:PORT/DATABASE";
    let hint = match db.map(|d| d.code()) {
        Some(c) if *c == SqlState::INVALID_PASSWORD => format!(
            "the password is PGPASSWORD's in the daemon's environment, or the URL's ({url}): check it is the URL's USER's"
        ),
        Some(c) if *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            format!(
                "check the URL's USER ({url}), and that the server's pg_hba.conf lets it in from this host"
            )
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => {
            format!("create the database (createdb -O USER DATABASE), or name another in the URL ({url})")
        }
        _ if text.contains("password missing") => {
            return format!(
                "the server asks for a password and none was given: set PGPASSWORD in the daemon's environment (or put it in the URL: {url}) [{text}]"
            );
        }
        _ => return text,
    };
    // The server's own words (`FATAL: …`), then what to check.
    let said = db.map_or(text, |d| format!("the server said {}: {}", d.severity(), d.message()));
    format!("{said}; {hint}")
}

fn open_error(url_shown: &str) -> impl Fn(String) -> OpenError + '_ {
    move |reason| OpenError::Postgres { url: url_shown.to_owned(), reason }
}

impl PgStore {
    /// Connects to `url`, migrates the schema (one daemon at a time), reads or creates the fleet's
    /// secret, and starts the writer and the listener.
    pub fn open(url: &str, config: &StoreConfig) -> Result<PgStore, OpenError> {
        let shown = shown(url);
        let err = open_error(&shown);
        let mut pg_config = tokio_postgres::Config::from_str(url).map_err(|e| err(pg_error(e)))?;
        // libpq's variable, so the password stays out of the URL (and the process list).
        if pg_config.get_password().is_none()
            && let Ok(password) = std::env::var("PGPASSWORD")
        {
            pg_config.password(password);
        }
        // The server's NOTICEs (`relation … already exists, skipping` at every boot but the
        // first) are not the daemon's news: the driver would log each at INFO. Warnings still come.
        let options = match pg_config.get_options() {
            Some(given) => format!("{given} {QUIET}"),
            None => QUIET.to_owned(),
        };
        pg_config.options(&options);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("store-pg")
            .enable_all()
            .build()
            .map_err(|e| err(e.to_string()))?;
        let manager = Manager::from_config(
            pg_config.clone(),
            NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(DB_TIMEOUT))
            .create_timeout(Some(DB_TIMEOUT))
            .recycle_timeout(Some(DB_TIMEOUT))
            .build()
            .map_err(|e| err(pg_error(e)))?;
        let secret = rt.block_on(prepare(&pool)).map_err(&err)?;
        let (notice_tx, notice_rx) = tokio::sync::mpsc::channel(NOTICE_QUEUE);
        let node: Arc<OnceLock<String>> = Arc::default();
        // Listening before the daemon serves anything: a notice sent once it answered (a pairing
        // code issued on another daemon a moment after this one started) is heard.
        let (listening_tx, listening) = std::sync::mpsc::sync_channel(1);
        rt.spawn(listen(pg_config, notice_tx, listening_tx));
        if listening.recv_timeout(DB_TIMEOUT).is_err() {
            tracing::warn!("not listening for the fleet's notices yet: they are read again once it is");
        }
        let rt = Arc::new(rt);
        let db_bytes: Arc<std::sync::atomic::AtomicU64> = Arc::default();
        let dialect = Postgres {
            rt: rt.clone(),
            pool: pool.clone(),
            node: node.clone(),
            events_per_session: config.events_per_session,
            max_age_days: config.max_age_days,
            db_bytes: db_bytes.clone(),
        };
        let writing = Writing::start(dialect).map_err(|e| err(e.to_string()))?;
        Ok(PgStore { writing, rt, pool, node, secret, notices: Mutex::new(Some(notice_rx)), db_bytes })
    }

    /// Runs `f` on the driver's runtime with a pooled connection and waits for it, at most
    /// [`DB_TIMEOUT`]. From any thread (a blocking one, or once at boot): it waits on a plain
    /// channel, never on the runtime it is called from.
    fn read<T, F, Fut>(&self, f: F) -> Result<T, ReadError>
    where
        T: Send + 'static,
        F: FnOnce(deadpool_postgres::Object) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, tokio_postgres::Error>> + Send,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let pool = self.pool.clone();
        self.rt.spawn(async move {
            let work = async {
                let client = pool.get().await.map_err(pg_error)?;
                f(client).await.map_err(pg_error)
            };
            let answer = match tokio::time::timeout(DB_TIMEOUT, work).await {
                Ok(answer) => answer,
                Err(_) => Err("the database did not answer in time".to_owned()),
            };
            let _ = tx.send(answer);
        });
        rx.recv().map_err(|_| ReadError("the store's runtime has stopped".into()))?.map_err(ReadError)
    }
}

impl Written for PgStore {
    fn writing(&self) -> &Writing {
        &self.writing
    }
}

/// Migrations (under the fleet's advisory lock, so two daemons starting at once do not both
/// apply one), and the fleet's secret (created by the first daemon).
async fn prepare(pool: &Pool) -> Result<[u8; 32], String> {
    let mut client = pool.get().await.map_err(|e| connect_reason(&e))?;
    client.execute("SELECT pg_advisory_lock($1)", &[&ADVISORY_LOCK]).await.map_err(pg_error)?;
    let migrated = migrate(&mut client).await;
    let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&ADVISORY_LOCK]).await;
    migrated?;
    let mut fresh = [0u8; 32];
    getrandom::fill(&mut fresh).map_err(|e| e.to_string())?;
    client
        .execute(
            "INSERT INTO fleet_secret(id, secret) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
            &[&&fresh[..]],
        )
        .await
        .map_err(pg_error)?;
    let row =
        client.query_one("SELECT secret FROM fleet_secret WHERE id = 1", &[]).await.map_err(pg_error)?;
    let secret: Vec<u8> = row.get(0);
    <[u8; 32]>::try_from(secret.as_slice())
        .map_err(|_| "the fleet's secret in the database is damaged".into())
}

async fn migrate(client: &mut deadpool_postgres::Object) -> Result<(), String> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations(version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)",
        )
        .await
        .map_err(pg_error)?;
    let row = client
        .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", &[])
        .await
        .map_err(pg_error)?;
    let found = row.get::<_, i32>(0) as u32;
    if found > PG_SCHEMA_VERSION {
        return Err(format!(
            "schema version {found}, newer than this mediatord supports ({PG_SCHEMA_VERSION}): it was written by a \
             newer mediatord. Run that version"
        ));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let tx = client.transaction().await.map_err(pg_error)?;
        tx.batch_execute(sql).await.map_err(pg_error)?;
        tx.execute(
            "INSERT INTO schema_migrations(version, applied_at) VALUES ($1, $2)",
            &[&(i as i32 + 1), &(crate::clock::now_ms() as i64)],
        )
        .await
        .map_err(pg_error)?;
        tx.commit().await.map_err(pg_error)?;
    }
    Ok(())
}

/// Hands `notice` to the daemon; when its queue is full, remembers to ask for a re-read.
fn deliver(tx: &tokio::sync::mpsc::Sender<Notice>, missed: &mut bool, notice: Notice) {
    if *missed && tx.try_send(Notice::Resync).is_ok() {
        *missed = false;
    }
    if tx.try_send(notice).is_err() {
        *missed = true;
    }
}

/// The listening connection: `LISTEN`s on [`CHANNEL`] and hands every notice to `tx` (this
/// daemon's own too: each is a read after a commit, which a read of another notice racing that
/// commit may have missed); after a lost connection, connects again every [`LISTEN_RETRY`] and
/// then asks for a re-read (what was said meanwhile is lost to it). Ends when the daemon's end is
/// dropped.
async fn listen(
    config: tokio_postgres::Config,
    tx: tokio::sync::mpsc::Sender<Notice>,
    listening: std::sync::mpsc::SyncSender<()>,
) {
    use futures_util::StreamExt;
    let mut missed = false;
    let mut first = true;
    while !tx.is_closed() {
        let connected = tokio::time::timeout(DB_TIMEOUT, config.connect(NoTls)).await;
        let Ok(Ok((client, mut connection))) = connected else {
            tokio::time::sleep(LISTEN_RETRY).await;
            continue;
        };
        // The connection's own task reads it: each notice is decoded and handed over as it
        // arrives (never queued here), and the task ends when the connection is lost.
        let to_daemon = tx.clone();
        let mut reader = tokio::spawn(async move {
            let mut missed = false;
            let mut stream = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = stream.next().await {
                let AsyncMessage::Notification(n) = message else { continue };
                let Some(notice) = decode_notice(n.payload()) else { continue };
                deliver(&to_daemon, &mut missed, notice);
                if to_daemon.is_closed() {
                    break;
                }
            }
        });
        if client.batch_execute(&format!("LISTEN {CHANNEL}")).await.is_ok() {
            // The first time, `open` may have stopped waiting for it: then whatever was announced
            // before is read again, as after a reconnection.
            if !first || listening.try_send(()).is_err() {
                deliver(&tx, &mut missed, Notice::Resync);
            }
            first = false;
            let _ = (&mut reader).await;
        }
        reader.abort();
        drop(client);
        tokio::time::sleep(LISTEN_RETRY).await;
    }
}

impl Store for PgStore {
    fn durable(&self) -> bool {
        true
    }

    fn query_audit(&self, q: &AuditQuery) -> Result<AuditPage, ReadError> {
        let q = q.clone();
        self.read(move |c| async move {
            let limit = q.limit.max(1);
            let rows = c
                .query(
                    "SELECT seq, entry FROM audit
                     WHERE ($1::BIGINT IS NULL OR seq < $1) AND ($2::TEXT IS NULL OR workspace = $2)
                       AND ($3::TEXT IS NULL OR session_id = $3) AND ($4::BIGINT IS NULL OR requested_at >= $4)
                       AND ($5::BIGINT IS NULL OR requested_at < $5) AND ($6::TEXT IS NULL OR outcome = $6)
                     ORDER BY seq DESC LIMIT $7",
                    &[
                        &q.cursor.map(|c| decide::sql_int(c.0)),
                        &q.workspace,
                        &q.session_id,
                        &q.since.map(decide::sql_int),
                        &q.until.map(decide::sql_int),
                        &q.outcome.map(AuditOutcome::as_str),
                        &((limit + 1) as i64),
                    ],
                )
                .await?;
            AuditPage::from_rows(rows.iter().map(|row| Ok((row.get(0), row.get(1)))), limit)
        })
    }

    fn workspace_rules(&self) -> Result<Vec<StoredRule>, ReadError> {
        self.read(|c| async move {
            let rows =
                c.query("SELECT workspace, rule FROM workspace_rules ORDER BY created_at, seq", &[]).await?;
            Ok(rows
                .into_iter()
                .filter_map(|r| {
                    let rule = serde_json::from_str(r.get::<_, &str>(1)).ok()?;
                    Some(StoredRule { workspace: r.get(0), rule })
                })
                .collect())
        })
    }

    fn devices(&self) -> Result<Vec<StoredDevice>, ReadError> {
        self.read(|c| async move {
            let rows = c
                .query(
                    "SELECT device_id, name, role, secret_hash, created_at, last_seen_at, person, expires_at
                     FROM devices WHERE revoked_at IS NULL ORDER BY created_at, device_id",
                    &[],
                )
                .await?;
            Ok(rows
                .into_iter()
                .filter_map(|r| {
                    // A hash of another length cannot match any secret: such a row is skipped.
                    let secret_hash = <[u8; 32]>::try_from(r.get::<_, &[u8]>(3)).ok()?;
                    Some(StoredDevice {
                        device_id: r.get(0),
                        name: r.get(1),
                        role: r.get(2),
                        secret_hash,
                        created_at: r.get::<_, i64>(4) as u64,
                        last_seen_at: r.get::<_, Option<i64>>(5).map(|v| v as u64),
                        person: r.get(6),
                        expires_at: r.get::<_, Option<i64>>(7).map(|v| v as u64),
                    })
                })
                .collect())
        })
    }

    fn sessions(&self, workspace: Option<&str>) -> Result<Vec<SessionRecord>, ReadError> {
        let workspace = workspace.map(str::to_owned);
        self.read(move |c| async move {
            let rows = c
                .query(
                    "SELECT session_id, workspace, agent, created_at, ended_at, state, end_reason, last_event_id
                     FROM sessions WHERE ($1::TEXT IS NULL OR workspace = $1) ORDER BY created_at, session_id",
                    &[&workspace],
                )
                .await?;
            Ok(rows.iter().map(session_row).collect())
        })
    }

    fn session(&self, session_id: &str) -> Result<Option<SessionRecord>, ReadError> {
        let id = session_id.to_owned();
        self.read(move |c| async move {
            let row = c
                .query_opt(
                    "SELECT session_id, workspace, agent, created_at, ended_at, state, end_reason, last_event_id
                     FROM sessions WHERE session_id = $1",
                    &[&id],
                )
                .await?;
            Ok(row.as_ref().map(session_row))
        })
    }

    fn events(&self, session_id: &str, after: u64, limit: usize) -> Result<Vec<StoredEvent>, ReadError> {
        let id = session_id.to_owned();
        self.read(move |c| async move {
            let rows = c
                .query(
                    "SELECT first_id, last_id, frames, sizes, codec FROM events
                     WHERE session_id = $1 AND last_id > $2 ORDER BY last_id LIMIT $3",
                    &[&id, &(after as i64), &(limit as i64)],
                )
                .await?;
            let mut out = Vec::new();
            for r in rows {
                if out.len() >= limit {
                    break;
                }
                let first = r.get::<_, i64>(0) as u64;
                let last = r.get::<_, i64>(1) as u64;
                let Some(frames) = r.get::<_, Option<Vec<u8>>>(2) else {
                    out.push(StoredEvent::Gap { from: first.max(after + 1), to: last });
                    continue;
                };
                let sizes: Option<&[u8]> = r.get(3);
                let count = (last + 1).saturating_sub(first);
                let decoded = chunk::decode(i64::from(r.get::<_, i16>(4)), frames)
                    .and_then(|f| chunk::split(f.len(), sizes, count).map(|ranges| (f, ranges)));
                let Some((frames, ranges)) = decoded else {
                    tracing::warn!(session_id = %id, first, last, "a damaged run of recorded events: replayed as a gap");
                    out.push(StoredEvent::Gap { from: first.max(after + 1), to: last });
                    continue;
                };
                let frames = Bytes::from(frames);
                for (event_id, range) in (first..).zip(ranges) {
                    if event_id > after && out.len() < limit {
                        out.push(StoredEvent::Frame { id: event_id, frame: frames.slice(range) });
                    }
                }
            }
            Ok(out)
        })
    }

    fn first_event_id(&self, session_id: &str) -> Result<Option<u64>, ReadError> {
        let id = session_id.to_owned();
        self.read(move |c| async move {
            let row = c
                .query_opt(
                    "SELECT first_id FROM events WHERE session_id = $1 ORDER BY last_id LIMIT 1",
                    &[&id],
                )
                .await?;
            Ok(row.map(|r| r.get::<_, i64>(0) as u64))
        })
    }

    fn turns(&self, session_id: &str) -> Result<Vec<TurnRecord>, ReadError> {
        let id = session_id.to_owned();
        self.read(move |c| async move {
            let rows = c
                .query(
                    "SELECT session_id, workspace, seq, recorded_at, before_id, after_id, entry FROM turns
                     WHERE session_id = $1 ORDER BY seq",
                    &[&id],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| TurnRecord {
                    session_id: r.get(0),
                    workspace: r.get(1),
                    seq: r.get::<_, i64>(2) as u64,
                    at: r.get::<_, i64>(3) as u64,
                    before: r.get(4),
                    after: r.get(5),
                    entry: serde_json::from_str(r.get::<_, &str>(6)).unwrap_or(Value::Null),
                })
                .collect())
        })
    }

    fn snapshot_refs(&self) -> Result<Vec<String>, ReadError> {
        self.read(move |c| async move {
            let rows = c
                .query(
                    "SELECT before_id FROM turns WHERE before_id IS NOT NULL
                     UNION SELECT after_id FROM turns WHERE after_id IS NOT NULL",
                    &[],
                )
                .await?;
            Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
        })
    }

    fn stats(&self) -> StoreStats {
        self.writing.queue.stats(self.db_bytes.load(Ordering::Relaxed))
    }
}

/// The fleet's half of the store: what only PostgreSQL, shared by several daemons, keeps.
impl Fleet for PgStore {
    fn join(&self, node_url: &str, lease_ms: u64) -> Result<(), ReadError> {
        let url = node_url.to_owned();
        let _ = self.node.set(url.clone());
        self.read(move |mut c| async move {
            let tx = c.transaction().await?;
            let sql = format!(
                "INSERT INTO nodes(node_url, lease_until, started_at) VALUES ($1, {NOW_MS} + $2, {NOW_MS})
                 ON CONFLICT (node_url) DO UPDATE SET lease_until = excluded.lease_until, started_at = excluded.started_at"
            );
            tx.execute(&sql, &[&url, &(lease_ms as i64)]).await?;
            // What an earlier run at this URL left live ended with it.
            let left = tx
                .query(
                    "UPDATE sessions SET state = 'dormant', end_reason = 'daemon_stopped', ended_at = $2
                     WHERE state = 'live' AND owner = $1 RETURNING session_id",
                    &[&url, &(crate::clock::now_ms() as i64)],
                )
                .await?;
            let ids: Vec<String> = left.iter().map(|r| r.get(0)).collect();
            abandon_pending(&tx, &ids).await?;
            tx.commit().await
        })
    }

    fn renew_lease(&self, lease_ms: u64) -> Result<Vec<String>, ReadError> {
        let Some(url) = self.node.get().cloned() else { return Ok(Vec::new()) };
        self.read(move |mut c| async move {
            let tx = c.transaction().await?;
            tx.execute(
                &format!("UPDATE nodes SET lease_until = {NOW_MS} + $2 WHERE node_url = $1"),
                &[&url, &(lease_ms as i64)],
            )
            .await?;
            let lost = tx
                .query(
                    &format!(
                        "UPDATE sessions s SET state = 'dormant', end_reason = 'node_lost', ended_at = $1
                         WHERE s.state = 'live' AND s.owner IS NOT NULL AND NOT EXISTS (
                           SELECT 1 FROM nodes n WHERE n.node_url = s.owner AND n.lease_until >= {NOW_MS})
                         RETURNING s.session_id"
                    ),
                    &[&(crate::clock::now_ms() as i64)],
                )
                .await?;
            let ids: Vec<String> = lost.iter().map(|r| r.get(0)).collect();
            abandon_pending(&tx, &ids).await?;
            tx.commit().await?;
            Ok(ids)
        })
    }

    fn owner(&self, session_id: &str) -> Result<Option<String>, ReadError> {
        let Some(me) = self.node.get().cloned() else { return Ok(None) };
        let id = session_id.to_owned();
        self.read(move |c| async move {
            let row = c
                .query_opt(
                    &format!(
                        "SELECT s.owner FROM sessions s JOIN nodes n ON n.node_url = s.owner
                         WHERE s.session_id = $1 AND s.state = 'live' AND s.owner <> $2
                           AND n.lease_until >= {NOW_MS}"
                    ),
                    &[&id, &me],
                )
                .await?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn claim_session(&self, session_id: &str) -> Result<SessionClaim, ReadError> {
        let Some(me) = self.node.get().cloned() else {
            return Err(ReadError("this daemon has not joined the fleet yet".into()));
        };
        let id = session_id.to_owned();
        self.read(move |mut c| async move {
            let tx = c.transaction().await?;
            // The row's lock: a second claim waits here for the first to commit, then reads
            // what it wrote (READ COMMITTED returns the newest version of a locked row).
            let Some(row) = tx
                .query_opt(
                    "SELECT session_id, workspace, agent, created_at, ended_at, state, end_reason, last_event_id, owner
                     FROM sessions WHERE session_id = $1 FOR UPDATE",
                    &[&id],
                )
                .await?
            else {
                return Ok(SessionClaim::Unknown);
            };
            let record = session_row(&row);
            let owner: Option<String> = row.get(8);
            // A statement of its own, so its snapshot is taken after the lock: a lease renewed
            // while this claim waited counts.
            let owner_alive = match owner.as_deref() {
                Some(o) => {
                    tx.query_one(
                        &format!("SELECT EXISTS(SELECT 1 FROM nodes WHERE node_url = $1 AND lease_until >= {NOW_MS})"),
                        &[&o],
                    )
                    .await?
                    .get::<_, bool>(0)
                }
                None => false,
            };
            let live = record.state == SessionState::Live;
            if let Some(holder) = decide::kept_by(live, owner.as_deref(), owner_alive, &me) {
                return Ok(SessionClaim::HeldBy(holder.to_owned()));
            }
            tx.execute(
                "UPDATE sessions SET state = 'live', owner = $2, ended_at = NULL, end_reason = NULL
                 WHERE session_id = $1",
                &[&id, &me],
            )
            .await?;
            tx.commit().await?;
            Ok(SessionClaim::Claimed(record))
        })
    }

    fn release_session(&self, previous: &SessionRecord) -> Result<(), ReadError> {
        let Some(me) = self.node.get().cloned() else { return Ok(()) };
        let previous = previous.clone();
        self.read(move |c| async move {
            c.execute(
                "UPDATE sessions SET state = $3, end_reason = $4, ended_at = $5, owner = NULL
                 WHERE session_id = $1 AND owner = $2 AND state = 'live'",
                &[
                    &previous.session_id,
                    &me,
                    &previous.state.as_str(),
                    &previous.end_reason,
                    &previous.ended_at.map(|v| v as i64),
                ],
            )
            .await?;
            Ok(())
        })
    }

    fn node_url(&self) -> Option<String> {
        self.node.get().cloned()
    }

    fn live_node(&self, node_url: &str) -> Result<bool, ReadError> {
        let Some(me) = self.node.get().cloned() else { return Ok(false) };
        let url = node_url.to_owned();
        self.read(move |c| async move {
            let row = c
                .query_one(
                    &format!(
                        "SELECT EXISTS(SELECT 1 FROM nodes WHERE node_url = $1 AND node_url <> $2
                           AND lease_until >= {NOW_MS})"
                    ),
                    &[&url, &me],
                )
                .await?;
            Ok(row.get(0))
        })
    }

    fn fleet_secret(&self) -> [u8; 32] {
        self.secret
    }

    fn put_pairing_code(&self, digest: &[u8; 32], name: Option<&str>, role: &str, ttl_ms: u64) -> Ack {
        let (digest, name, role) = (*digest, name.map(str::to_owned), role.to_owned());
        self.writing.queue.send_acked(|ack| Op::PutCode { digest, name, role, ttl_ms, ack })
    }

    fn pairing_code(&self, digest: &[u8; 32]) -> Result<Option<StoredCode>, ReadError> {
        let digest = *digest;
        self.read(move |c| async move {
            let row = c
                .query_opt(
                    &format!(
                        "SELECT name, role, expires_at - {NOW_MS} FROM pairing_codes
                         WHERE digest = $1 AND expires_at > {NOW_MS}"
                    ),
                    &[&&digest[..]],
                )
                .await?;
            Ok(row.map(|r| StoredCode {
                name: r.get(0),
                role: r.get(1),
                expires_in_ms: r.get::<_, i64>(2).max(0) as u64,
            }))
        })
    }

    fn claim_pairing_code(&self, digest: &[u8; 32]) -> Ack {
        let digest = *digest;
        self.writing.queue.send_acked(|ack| Op::ClaimCode { digest, ack })
    }

    fn take_notices(&self) -> Option<tokio::sync::mpsc::Receiver<Notice>> {
        lock(&self.notices).take()
    }
}

/// Marks the pending requests of `sessions` abandoned, as SQLite's recovery does at boot.
async fn abandon_pending(
    tx: &deadpool_postgres::Transaction<'_>,
    sessions: &[String],
) -> Result<(), tokio_postgres::Error> {
    if sessions.is_empty() {
        return Ok(());
    }
    let now = crate::clock::now_ms() as i64;
    tx.execute(
        "UPDATE audit SET outcome = 'abandoned', entry = (entry::jsonb || jsonb_build_object(
            'status', 'abandoned', 'resolvedBy', 'abandoned', 'abandonedAt', $2::BIGINT))::text
         WHERE outcome = 'pending' AND session_id = ANY($1)",
        &[&sessions, &now],
    )
    .await?;
    Ok(())
}

fn session_row(r: &tokio_postgres::Row) -> SessionRecord {
    let state: &str = r.get(5);
    SessionRecord {
        session_id: r.get(0),
        workspace: r.get(1),
        agent: r.get(2),
        created_at: r.get::<_, i64>(3) as u64,
        ended_at: r.get::<_, Option<i64>>(4).map(|v| v as u64),
        state: SessionState::parse(state).unwrap_or(SessionState::Dormant),
        end_reason: r.get(6),
        last_event_id: r.get::<_, i64>(7) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::base::encode_notice;
    use super::*;

    /// A notice is its kind and nothing else; anything else on the channel (another program's, the
    /// shapes earlier versions sent with a pairing code's grant in them) is ignored.
    #[test]
    fn a_notice_is_its_kind_alone_and_anything_else_is_ignored() {
        for n in [Notice::Devices, Notice::Rules, Notice::Resync] {
            assert_eq!(decode_notice(encode_notice(n)), Some(n));
        }
        assert_eq!(
            [Notice::Devices, Notice::Rules, Notice::Resync].map(encode_notice),
            ["devices", "rules", "resync"]
        );
        for foreign in [
            "",
            "hello",
            "{}",
            "Devices",
            "devices ",
            r#"{"k":"devices"}"#,
            r#"{"from":"x","n":{"k":"devices"}}"#,
            r#"{"from":"x","n":{"k":"code","digest":"00","role":"voter","expiresAt":1}}"#,
            r#"{"from":"x","n":{"k":"used","digest":"00"}}"#,
        ] {
            assert_eq!(decode_notice(foreign), None, "{foreign}");
        }
    }

    /// The daemon's queue of notices full: the notice that did not fit is dropped, remembered, and
    /// the next one that fits comes after a [`Notice::Resync`] (a re-read of everything notices
    /// stand for); with nothing missed, a notice comes alone.
    #[test]
    fn a_notice_the_full_queue_dropped_is_made_up_for_by_a_resync_before_the_next() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let mut missed = false;
        let rules = || Notice::Rules;
        deliver(&tx, &mut missed, Notice::Devices);
        deliver(&tx, &mut missed, rules());
        assert!(!missed);
        deliver(&tx, &mut missed, Notice::Resync);
        assert!(missed, "dropped, and remembered");
        assert_eq!((rx.try_recv(), rx.try_recv()), (Ok(Notice::Devices), Ok(rules())));
        assert!(rx.try_recv().is_err(), "the dropped notice is not queued");

        deliver(&tx, &mut missed, Notice::Devices);
        assert!(!missed);
        assert_eq!((rx.try_recv(), rx.try_recv()), (Ok(Notice::Resync), Ok(Notice::Devices)));
        deliver(&tx, &mut missed, rules());
        assert_eq!(rx.try_recv(), Ok(rules()), "one resync only");
        assert!(rx.try_recv().is_err());
    }
}

//! The PostgreSQL dialect of the store's one writer (`store/writer.rs`): a pooled connection per
//! batch, driven on the store's runtime within [`DB_TIMEOUT`]; each statement's SQL, with the
//! fleet's notices sent inside the transaction that commits what they announce; and retention, by
//! one daemon of the fleet at a time.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use deadpool_postgres::Pool;

use super::base::{ADVISORY_LOCK, CHANNEL, DB_TIMEOUT, NOW_MS, encode_notice, pg_error};
use crate::store::api::{AuditRecord, SessionRecord, StoredDevice, TurnRecord};
use crate::store::chunk::{self, RunBuilder};
use crate::store::decide::{self, AuditOutcome};
use crate::store::fleet::Notice;
use crate::store::writer::{Dialect, Drive, Ended, MAINTENANCE_INTERVAL, NewCode, Statements};

/// PostgreSQL's side of the writer (`writer.rs`): a pooled connection per batch, driven on the
/// driver's runtime within [`DB_TIMEOUT`]; retention on the runtime too.
pub(super) struct Postgres {
    pub(super) rt: Arc<tokio::runtime::Runtime>,
    pub(super) pool: Pool,
    pub(super) node: Arc<OnceLock<String>>,
    pub(super) events_per_session: u64,
    pub(super) max_age_days: u64,
    /// The database's size, as the last retention pass read it.
    pub(super) db_bytes: Arc<std::sync::atomic::AtomicU64>,
}

/// A failed statement or connection, with every cause it wraps ([`pg_error`]).
pub(super) struct PgFailure(String);

impl std::fmt::Display for PgFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<tokio_postgres::Error> for PgFailure {
    fn from(e: tokio_postgres::Error) -> PgFailure {
        PgFailure(pg_error(e))
    }
}

impl From<deadpool_postgres::PoolError> for PgFailure {
    fn from(e: deadpool_postgres::PoolError) -> PgFailure {
        PgFailure(pg_error(e))
    }
}

/// Drives a batch on the driver's runtime, at most [`DB_TIMEOUT`].
pub(super) struct OnRuntime(Arc<tokio::runtime::Runtime>);

impl Drive for OnRuntime {
    fn drive<F: Future>(&self, work: F) -> Option<F::Output> {
        self.0.block_on(async { tokio::time::timeout(DB_TIMEOUT, work).await.ok() })
    }
}

/// A pooled connection to write on, and the daemon it writes for (a live session's owner).
pub(super) struct PgConn {
    client: deadpool_postgres::Object,
    owner: Option<String>,
}

pub(super) struct PgTx<'c> {
    tx: deadpool_postgres::Transaction<'c>,
    owner: Option<&'c str>,
}

impl Dialect for Postgres {
    type Error = PgFailure;
    type Conn<'a> = PgConn;
    type Tx<'c> = PgTx<'c>;
    type Driver = OnRuntime;

    fn driver(&self) -> OnRuntime {
        OnRuntime(self.rt.clone())
    }

    async fn connect(&mut self) -> Result<PgConn, PgFailure> {
        Ok(PgConn { client: self.pool.get().await?, owner: self.node.get().cloned() })
    }

    async fn begin<'c>(conn: &'c mut Self::Conn<'_>) -> Result<PgTx<'c>, PgFailure> {
        let PgConn { client, owner } = conn;
        Ok(PgTx { tx: client.transaction().await?, owner: owner.as_deref() })
    }

    fn maintain(&mut self) {
        let (pool, keep, days) = (self.pool.clone(), self.events_per_session, self.max_age_days);
        let done = self.rt.block_on(async {
            tokio::time::timeout(MAINTENANCE_INTERVAL, maintain(&pool, keep, days)).await
        });
        match done {
            Ok(Ok(size)) => self.db_bytes.store(size, Ordering::Relaxed),
            Ok(Err(e)) => tracing::warn!(error = %e, "retention on the state database failed"),
            Err(_) => tracing::warn!("retention on the state database took longer than its interval"),
        }
    }

    fn stopped(&mut self) -> Result<(), String> {
        Ok(())
    }
}

impl PgTx<'_> {
    async fn run(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<(), PgFailure> {
        self.tx.execute(sql, params).await?;
        Ok(())
    }

    /// Sends `notice` to every daemon listening, this one too, when the transaction commits.
    async fn notify(&self, notice: Notice) -> Result<(), PgFailure> {
        self.run("SELECT pg_notify($1, $2)", &[&CHANNEL, &encode_notice(notice)]).await
    }
}

impl Statements for PgTx<'_> {
    type Error = PgFailure;

    async fn forget_history(&self, session_id: &str) -> Result<(), PgFailure> {
        self.run("DELETE FROM events WHERE session_id = $1", &[&session_id]).await?;
        self.run("DELETE FROM turns WHERE session_id = $1", &[&session_id]).await
    }

    async fn session_started(
        &self,
        record: &SessionRecord,
        after_id: u64,
        resumed: bool,
    ) -> Result<(), PgFailure> {
        self.run(
            "INSERT INTO sessions(session_id, workspace, agent, created_at, ended_at, state, end_reason, last_event_id, owner)
             VALUES ($1, $2, $3, $4, NULL, 'live', NULL, $5, $7)
             ON CONFLICT(session_id) DO UPDATE SET workspace = excluded.workspace, agent = excluded.agent,
               created_at = CASE WHEN $6 THEN sessions.created_at ELSE excluded.created_at END,
               ended_at = NULL, state = 'live', end_reason = NULL,
               last_event_id = excluded.last_event_id, owner = excluded.owner",
            &[
                &record.session_id,
                &record.workspace,
                &record.agent,
                &(record.created_at as i64),
                &(after_id as i64),
                &resumed,
                &self.owner,
            ],
        )
        .await
    }

    async fn session_ended(&self, e: &Ended<'_>) -> Result<(), PgFailure> {
        self.run(
            "UPDATE sessions SET state = $2, end_reason = $3, ended_at = $4,
               last_event_id = GREATEST(last_event_id, $5) WHERE session_id = $1",
            &[&e.session_id, &e.state.as_str(), &e.reason, &(e.at as i64), &(e.last_id as i64)],
        )
        .await
    }

    async fn audit(&self, r: &AuditRecord) -> Result<(), PgFailure> {
        self.run(
            "INSERT INTO audit(request_id, session_id, workspace, requested_at, outcome, entry)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT(request_id) DO UPDATE SET outcome = excluded.outcome, entry = excluded.entry",
            &[
                &r.request_id,
                &r.session_id,
                &r.workspace,
                &(r.requested_at as i64),
                &r.outcome.unwrap_or(AuditOutcome::Pending).as_str(),
                &r.entry.to_string(),
            ],
        )
        .await
    }

    async fn turn(&self, t: &TurnRecord) -> Result<(), PgFailure> {
        self.run(
            "INSERT INTO turns(session_id, seq, workspace, recorded_at, before_id, after_id, entry)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT(session_id, seq) DO UPDATE SET workspace = excluded.workspace,
               recorded_at = excluded.recorded_at, before_id = excluded.before_id,
               after_id = excluded.after_id, entry = excluded.entry",
            &[
                &t.session_id,
                &(t.seq as i64),
                &t.workspace,
                &(t.at as i64),
                &t.before,
                &t.after,
                &t.entry.to_string(),
            ],
        )
        .await
    }

    async fn put_rule(&self, workspace: &str, rule_id: &str, rule: &str, at: u64) -> Result<(), PgFailure> {
        self.run(
            "INSERT INTO workspace_rules(workspace, rule_id, created_at, rule) VALUES ($1, $2, $3, $4)
             ON CONFLICT (workspace, rule_id) DO UPDATE SET created_at = excluded.created_at, rule = excluded.rule",
            &[&workspace, &rule_id, &(at as i64), &rule],
        )
        .await?;
        self.notify(Notice::Rules).await
    }

    async fn delete_rule(&self, workspace: &str, rule_id: &str) -> Result<(), PgFailure> {
        self.run(
            "DELETE FROM workspace_rules WHERE workspace = $1 AND rule_id = $2",
            &[&workspace, &rule_id],
        )
        .await?;
        self.notify(Notice::Rules).await
    }

    async fn delete_session(&self, session_id: &str) -> Result<(), PgFailure> {
        self.run("DELETE FROM events WHERE session_id = $1", &[&session_id]).await?;
        self.run("DELETE FROM sessions WHERE session_id = $1", &[&session_id]).await
    }

    async fn put_device(&self, d: &StoredDevice) -> Result<(), PgFailure> {
        self.run(
            "INSERT INTO devices(device_id, name, role, secret_hash, created_at, last_seen_at, person, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (device_id) DO UPDATE SET name = excluded.name, role = excluded.role,
               secret_hash = excluded.secret_hash, created_at = excluded.created_at,
               last_seen_at = excluded.last_seen_at, person = excluded.person,
               expires_at = excluded.expires_at",
            &[
                &d.device_id,
                &d.name,
                &d.role,
                &&d.secret_hash[..],
                &(d.created_at as i64),
                &d.last_seen_at.map(|v| v as i64),
                &d.person,
                &d.expires_at.map(|v| v as i64),
            ],
        )
        .await?;
        self.notify(Notice::Devices).await
    }

    async fn device_seen(&self, device_id: &str, at: u64) -> Result<(), PgFailure> {
        self.run(
            "UPDATE devices SET last_seen_at = GREATEST(COALESCE(last_seen_at, 0), $2) WHERE device_id = $1",
            &[&device_id, &(at as i64)],
        )
        .await
    }

    async fn revoke_device(&self, device_id: &str, at: u64) -> Result<(), PgFailure> {
        self.run(
            "UPDATE devices SET revoked_at = $2 WHERE device_id = $1 AND revoked_at IS NULL",
            &[&device_id, &(at as i64)],
        )
        .await?;
        self.notify(Notice::Devices).await
    }

    async fn claim_code(&self, digest: &[u8; 32]) -> Result<bool, PgFailure> {
        let claimed = self
            .tx
            .execute(
                "INSERT INTO pairing_claims(digest, claimed_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&&digest[..], &(crate::clock::now_ms() as i64)],
            )
            .await?;
        if claimed == 1 {
            self.run("DELETE FROM pairing_codes WHERE digest = $1", &[&&digest[..]]).await?;
        }
        Ok(claimed == 1)
    }

    async fn put_code(&self, c: &NewCode<'_>) -> Result<(), PgFailure> {
        self.run(
            &format!(
                "INSERT INTO pairing_codes(digest, name, role, expires_at)
                 VALUES ($1, $2, $3, {NOW_MS} + $4)"
            ),
            &[&&c.digest[..], &c.name, &c.role, &(c.ttl_ms as i64)],
        )
        .await
    }

    async fn insert_gap(&self, session_id: &str, from: u64, to: u64) -> Result<(), PgFailure> {
        self.run(
            "INSERT INTO events(session_id, first_id, last_id, frames, sizes) VALUES ($1, $2, $3, NULL, NULL)
             ON CONFLICT (session_id, last_id) DO UPDATE SET first_id = excluded.first_id, frames = NULL, sizes = NULL",
            &[&session_id, &(from as i64), &(to as i64)],
        )
        .await
    }

    async fn insert_run(&self, session_id: &str, run: &RunBuilder) -> Result<(), PgFailure> {
        let (codec, blob) = chunk::encode(&run.frames);
        self.run(
            "INSERT INTO events(session_id, first_id, last_id, frames, sizes, codec) VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (session_id, last_id) DO UPDATE SET first_id = excluded.first_id, frames = excluded.frames,
               sizes = excluded.sizes, codec = excluded.codec",
            &[&session_id, &(run.first as i64), &(run.last as i64), &blob, &run.sizes(), &(codec as i16)],
        )
        .await
    }

    async fn set_last_event_id(&self, session_id: &str, id: u64) -> Result<(), PgFailure> {
        self.run(
            "UPDATE sessions SET last_event_id = GREATEST(last_event_id, $2) WHERE session_id = $1",
            &[&session_id, &(id as i64)],
        )
        .await
    }

    async fn commit(self) -> Result<(), PgFailure> {
        Ok(self.tx.commit().await?)
    }
}

/// Cuts the run (or gap) that straddles `cutoff` so that the session keeps no event below it, as
/// SQLite's retention does (`sqlite.rs`: `trim_run`).
async fn trim_run(
    client: &deadpool_postgres::Object,
    session_id: &str,
    cutoff: u64,
) -> Result<(), tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT first_id, last_id, frames, sizes, codec FROM events
             WHERE session_id = $1 AND last_id >= $2 ORDER BY last_id LIMIT 1",
            &[&session_id, &(cutoff as i64)],
        )
        .await?;
    let Some(row) = row else { return Ok(()) };
    let (first, last) = (row.get::<_, i64>(0) as u64, row.get::<_, i64>(1) as u64);
    if first >= cutoff {
        return Ok(());
    }
    let Some(frames) = row.get::<_, Option<Vec<u8>>>(2) else {
        client
            .execute(
                "UPDATE events SET first_id = $3 WHERE session_id = $1 AND last_id = $2",
                &[&session_id, &(last as i64), &(cutoff as i64)],
            )
            .await?;
        return Ok(());
    };
    let sizes: Option<Vec<u8>> = row.get(3);
    let trimmed = chunk::decode(i64::from(row.get::<_, i16>(4)), frames).and_then(|frames| {
        chunk::trim_front(first, last, frames.len(), sizes.as_deref(), cutoff)
            .map(|(sizes, start)| (frames, sizes, start))
    });
    match trimmed {
        Some((frames, sizes, start)) => {
            let (codec, blob) = chunk::encode(&frames[start..]);
            client
                .execute(
                    "UPDATE events SET first_id = $3, frames = $4, sizes = $5, codec = $6
                     WHERE session_id = $1 AND last_id = $2",
                    &[&session_id, &(last as i64), &(cutoff as i64), &blob, &sizes, &(codec as i16)],
                )
                .await?;
        }
        None => {
            tracing::warn!(session_id, first, last, "a damaged run of recorded events: kept as a gap");
            client
                .execute(
                    "UPDATE events SET first_id = $3, frames = NULL, sizes = NULL, codec = 0
                     WHERE session_id = $1 AND last_id = $2",
                    &[&session_id, &(last as i64), &(cutoff as i64)],
                )
                .await?;
        }
    }
    Ok(())
}

/// A session `--history-days` ages out (`$1`: the cutoff): ended before it, and not live again.
const AGED_OUT: &str = "ended_at IS NOT NULL AND ended_at < $1 AND state <> 'live'";

/// Retention, by one daemon of the fleet at a time (the advisory lock; the others skip the pass):
/// each session's newest `--history-events`, then what `--history-days` ages out. Returns the
/// database's size.
async fn maintain(pool: &Pool, keep: u64, days: u64) -> Result<u64, String> {
    let client = pool.get().await.map_err(pg_error)?;
    let locked: bool = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&(ADVISORY_LOCK + 1)])
        .await
        .map_err(pg_error)?
        .get(0);
    let size = client
        .query_one("SELECT pg_database_size(current_database())", &[])
        .await
        .map_err(pg_error)?
        .get::<_, i64>(0) as u64;
    if !locked {
        return Ok(size);
    }
    let work = async {
        let sessions = client.query("SELECT session_id, last_event_id FROM sessions", &[]).await?;
        for row in sessions {
            let (id, last): (String, i64) = (row.get(0), row.get(1));
            let cutoff = decide::events_cutoff(last as u64, keep);
            if cutoff > 0 {
                client
                    .execute(
                        "DELETE FROM events WHERE session_id = $1 AND last_id < $2",
                        &[&id, &(cutoff as i64)],
                    )
                    .await?;
                trim_run(&client, &id, cutoff).await?;
            }
        }
        if let Some(before) = decide::age_cutoff(crate::clock::now_ms(), days) {
            let before = before as i64;
            // A session's events and turns first, then the session: one predicate for the three.
            for table in ["events", "turns"] {
                let sql = format!(
                    "DELETE FROM {table} WHERE session_id IN (SELECT session_id FROM sessions WHERE {AGED_OUT})"
                );
                client.execute(&sql, &[&before]).await?;
            }
            client.execute(&format!("DELETE FROM sessions WHERE {AGED_OUT}"), &[&before]).await?;
            client
                .execute("DELETE FROM audit WHERE requested_at < $1 AND outcome <> 'pending'", &[&before])
                .await?;
        }
        client.execute(&format!("DELETE FROM pairing_codes WHERE expires_at <= {NOW_MS}"), &[]).await?;
        Ok::<(), tokio_postgres::Error>(())
    }
    .await;
    let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&(ADVISORY_LOCK + 1)]).await;
    work.map_err(pg_error).map(|()| size)
}

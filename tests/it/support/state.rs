//! The state a daemon keeps, reached as another program would (for the store's own suites): the
//! store of a state directory opened through its interface ([`open_store`]), and another
//! connection's lock on the tables the daemon's writes need ([`StateLock`]).

use std::path::Path;
use std::sync::Arc;

use mediatord::store::{Store, StoreConfig};

use super::{POSTGRES, postgres};

/// The store a daemon on `state` would open, on this crate's backend: the directory's SQLite
/// database, or in a run against PostgreSQL the cluster's database that stands for it. Opened
/// through the same `store::open` the daemon calls; its writer and reads block, so it belongs to
/// a plain `#[test]`, off any async runtime.
pub(crate) fn open_store(state: &Path) -> Arc<dyn Store> {
    let url = POSTGRES.then(|| postgres::Postgres::shared().database(&postgres::database_for(state)));
    let config = StoreConfig {
        state_dir: Some(state.to_path_buf()),
        events_per_session: 100_000,
        max_age_days: 0,
        url,
    };
    mediatord::store::open(&config).expect("open the store").store
}

/// Another process holding the lock the daemon's writes to `state` need, until released: a backup
/// or an `sqlite3` shell's `BEGIN EXCLUSIVE` on the state directory's database (every write
/// waits, reads go on); on PostgreSQL, another session's transaction holding `EXCLUSIVE` on
/// `tables` (their writes wait, reads go on) in the database `state` stands for.
#[derive(Debug)]
pub(crate) enum StateLock {
    Sqlite(rusqlite::Connection),
    Postgres(tokio_postgres::Client),
}

impl StateLock {
    /// Takes the lock; `tables` (PostgreSQL only) is a comma-separated list.
    pub(crate) async fn take(state: &Path, tables: &str) -> StateLock {
        if !POSTGRES {
            let other = rusqlite::Connection::open(state.join("state.db")).expect("open the database");
            other.execute_batch("BEGIN EXCLUSIVE").expect("lock");
            return StateLock::Sqlite(other);
        }
        let url = postgres::Postgres::shared().database(&postgres::database_for(state));
        let (client, connection) =
            tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect");
        tokio::spawn(connection);
        client.batch_execute(&format!("BEGIN; LOCK TABLE {tables} IN EXCLUSIVE MODE")).await.expect("lock");
        StateLock::Postgres(client)
    }

    pub(crate) async fn release(self) {
        match self {
            StateLock::Sqlite(other) => other.execute_batch("ROLLBACK").expect("unlock"),
            StateLock::Postgres(other) => other.batch_execute("ROLLBACK").await.expect("unlock"),
        }
    }
}

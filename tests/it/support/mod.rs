//! Test support, one API for every black-box test: start the real `mediatord` binary on port 0
//! ([`Daemon`]), talk to it through the typed client ([`Reply`] and the common steps on
//! [`Daemon`]), read its SSE streams ([`Sse`]), and check on processes.
//!
//! Every wait is bounded by [`WAIT`] and fails with a message saying what it waited for; nothing
//! here sleeps in place of synchronisation.

mod acp;
mod ca;
mod client;
mod daemon;
mod editor;
pub(crate) mod fake_oidc;
pub(crate) mod h2raw;
mod home;
pub(crate) mod netns;
pub(crate) mod oidc;
pub(crate) mod postgres;
mod proxy;
pub(crate) mod quickstart;
mod raw;
mod receiver;
pub(crate) mod scrape;
mod sse;
mod state;
mod tmux;

use std::time::Duration;

pub(crate) use acp::*;
pub(crate) use ca::*;
pub(crate) use client::*;
pub(crate) use daemon::*;
pub(crate) use editor::*;
pub(crate) use home::*;
pub(crate) use proxy::*;
pub(crate) use raw::*;
pub(crate) use receiver::*;
pub(crate) use sse::*;
pub(crate) use state::*;
pub(crate) use tmux::*;

/// Where a daemon under test keeps its state when the test asks for nothing (no `--state-dir`,
/// `--store` or `--ephemeral`): the crate's name says which crate this support is compiled into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    /// `tests/it`: `--ephemeral`, the memory store (nothing durable unless the test asks).
    Memory,
    /// `tests/it_sqlite.rs`: a fresh temporary `--state-dir` of its own, SQLite.
    Sqlite,
    /// `tests/it_postgres.rs`: a fresh database of the shared throwaway cluster; and every
    /// `--state-dir DIR` a test names becomes that cluster's database for `DIR`.
    Postgres,
}

/// The backend of this test crate.
pub(crate) const BACKEND: Backend = {
    let name = env!("CARGO_CRATE_NAME");
    if same(name, "it_postgres") {
        Backend::Postgres
    } else if same(name, "it_sqlite") {
        Backend::Sqlite
    } else {
        Backend::Memory
    }
};

/// Whether this test crate runs its suites against PostgreSQL (`tests/it_postgres.rs`).
pub(crate) const POSTGRES: bool = matches!(BACKEND, Backend::Postgres);

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// A `command` reviewer (`docs/operations.md#reviewers`) the test writes: a Python program in a
/// directory of its own, kept while this lives.
pub(crate) struct ReviewerScript {
    pub(crate) _dir: tempfile::TempDir,
    /// The program's file.
    pub(crate) path: std::path::PathBuf,
    /// `--reviewer`'s value running it as reviewer `name` with its arguments.
    pub(crate) spec: String,
}

/// Writes `program` as reviewer `name`'s, run as `python3 PROGRAM args`.
pub(crate) fn reviewer_script(name: &str, program: &str, args: &str) -> ReviewerScript {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("reviewer.py");
    std::fs::write(&path, program).expect("write the reviewer");
    let spec = format!("{name}=command:python3 {} {args}", path.display());
    ReviewerScript { _dir: dir, path, spec: spec.trim_end().to_owned() }
}

/// Upper bound for any single wait in a test. Generous: only a failing test ever waits this long,
/// and 20 s was once too short for 96 MiB of agent output on a two-core machine at load 30.
pub(crate) const WAIT: Duration = Duration::from_secs(45);

/// Runs `sql` (statements both SQLite and PostgreSQL take) on the database of the state
/// directory `state`, as another program would while no daemon runs on it: its `state.db`, or
/// in a run against PostgreSQL the cluster's database that stands for it.
pub(crate) fn state_sql(state: &std::path::Path, sql: &str) {
    if POSTGRES {
        let pg = postgres::Postgres::shared();
        pg.sql(&postgres::database_for(state), sql);
    } else {
        let db = rusqlite::Connection::open(state.join("state.db")).expect("open state.db");
        db.execute_batch(sql).expect("run the SQL");
    }
}

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
pub(crate) mod postgres;
mod proxy;
pub(crate) mod quickstart;
mod raw;
mod receiver;
pub(crate) mod scrape;
mod sse;
mod tmux;

use std::time::Duration;

pub(crate) use acp::*;
pub(crate) use ca::*;
pub(crate) use client::*;
pub(crate) use daemon::*;
pub(crate) use editor::*;
pub(crate) use proxy::*;
pub(crate) use raw::*;
pub(crate) use receiver::*;
pub(crate) use sse::*;
pub(crate) use tmux::*;

/// Whether this test crate runs the store's suites against PostgreSQL: `tests/it_postgres.rs`
/// does (the crate's name says which crate this support is compiled into).
pub(crate) const POSTGRES: bool = same(env!("CARGO_CRATE_NAME"), "it_postgres");

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

/// Upper bound for any single wait in a test. Generous: only a failing test ever waits this long,
/// and 20 s was once too short for 96 MiB of agent output on a two-core machine at load 30.
pub(crate) const WAIT: Duration = Duration::from_secs(45);

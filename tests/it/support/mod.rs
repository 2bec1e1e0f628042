//! Test support, one API for every black-box test: start the real `mediatord` binary on port 0
//! ([`Daemon`]), talk to it through the typed client ([`Reply`] and the common steps on
//! [`Daemon`]), read its SSE streams ([`Sse`]), and check on processes.
//!
//! Every wait is bounded by [`WAIT`] and fails with a message saying what it waited for; nothing
//! here sleeps in place of synchronisation.

mod ca;
mod client;
mod daemon;
pub(crate) mod quickstart;
mod raw;
mod receiver;
pub(crate) mod scrape;
mod sse;

use std::time::Duration;

pub(crate) use ca::*;
pub(crate) use client::*;
pub(crate) use daemon::*;
pub(crate) use raw::*;
pub(crate) use receiver::*;
pub(crate) use sse::*;

/// Upper bound for any single wait in a test. Generous: only a failing test ever waits this long,
/// and 20 s was once too short for 96 MiB of agent output on a two-core machine at load 30.
pub(crate) const WAIT: Duration = Duration::from_secs(45);

//! The black-box suites of `tests/it` run again against PostgreSQL (`docs/operations.md#a-fleet`):
//! the same test files, compiled into this crate, whose name sets `support::BACKEND`, so
//! `support::Daemon` gives each daemon whose test asks for no store a fresh database of a
//! throwaway cluster (`support::postgres`, dropped with the daemon), and turns each
//! `--state-dir DIR` into a `--store` URL of that cluster's database for `DIR` (a daemon
//! restarted on the same directory finds its state again).
//!
//! - **The decision suites** (`tests/it/durable.rs`): the same list `tests/it_sqlite.rs` runs on
//!   SQLite.
//! - **The store's own suites**, whose every daemon names a `--state-dir`: `store.rs` (what
//!   survives a restart, and the store's interface driven as the daemon drives it) and
//!   `durability.rs` (a decision the database cannot take is refused and changes nothing). On
//!   SQLite `tests/it` already runs them as they are.
//!
//! What stays out: what only SQLite has (`state_dir.rs`: the directory's modes and lock, its
//! file, a newer schema; `terminal.rs` and `discovery.rs`: `mediatord audit`, `devices` and
//! `pair` reading the state directory's file and `daemon.json`); the fleet itself
//! (`fleet.rs`, in `tests/it`, already on PostgreSQL); and suites no store takes part in: the
//! perimeter and the connection layer (`perimeter.rs`, `connections.rs`: refused before any
//! state is read), the agent's process and confinement (`agent_output.rs`, `sandbox.rs`), the
//! packaging, the docs, the web app's assets and the command line (`architecture.rs`,
//! `openapi.rs`, `release.rs`, `quickstart.rs`, `service.rs`, `newcomer.rs`, `web.rs`, `tls.rs`,
//! `bench_smoke.rs`).

// The support module serves every suite of `tests/it`; this crate includes only some of them.
#![allow(dead_code, unused_imports)]

#[path = "it/support/mod.rs"]
mod support;

#[path = "it/durability.rs"]
mod durability;
#[path = "it/durable.rs"]
mod durable;
#[path = "it/store.rs"]
mod store;

//! The store's black-box suites of `tests/it` run a second time, against PostgreSQL
//! (`docs/operations.md#a-fleet`): the same test files, compiled into this crate, whose name
//! sets `support::POSTGRES`, so `support::Daemon` turns each `--state-dir DIR` into a `--store` URL of a
//! throwaway cluster's database for `DIR` (`support::postgres`). `cargo test --workspace` runs
//! both crates; what only SQLite has (the state directory's modes and lock, its file, the
//! `mediatord audit` reader, a database locked by another process) stays in `tests/it` alone.

// The support module serves every suite of `tests/it`; this crate includes only some of them.
#![allow(dead_code, unused_imports)]

#[path = "it/support/mod.rs"]
mod support;

#[path = "it/connect.rs"]
mod connect;
#[path = "it/devices.rs"]
mod devices;
#[path = "it/store.rs"]
mod store;

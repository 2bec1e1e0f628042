//! The decision suites of `tests/it` (`tests/it/durable.rs`) run again on SQLite: `tests/it`
//! runs them on the memory store (`--ephemeral`, unless a test names a `--state-dir`); here, by
//! this crate's name (`support::BACKEND`), each daemon whose test asks for no store gets a
//! temporary `--state-dir` of its own. `tests/it_postgres.rs` runs the same list on PostgreSQL.

// The support module serves every suite of `tests/it`; this crate includes only some of them.
#![allow(dead_code, unused_imports)]

#[path = "it/support/mod.rs"]
mod support;

#[path = "it/durable.rs"]
mod durable;

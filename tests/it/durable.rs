//! The decision suites of `tests/it` that run again on a durable store, one list for both
//! backends: `tests/it_sqlite.rs` and `tests/it_postgres.rs` include this file, and there
//! `support::Daemon` gives each daemon whose test asks for no store a fresh one of its own (a
//! temporary `--state-dir`, or a fresh database of the throwaway PostgreSQL) instead of the
//! memory store `tests/it` runs them on. Not a module of `tests/it` itself.
//!
//! Each suite here decides something the store keeps or serves back: votes and their audit,
//! rules, sessions and their history, devices, pairing, replay. Which suites stay out, and why,
//! is said in `tests/it_postgres.rs`.

#[path = "acp.rs"]
mod acp;
#[path = "acp_http.rs"]
mod acp_http;
#[path = "agents.rs"]
mod agents;
#[path = "attach.rs"]
mod attach;
#[path = "changes.rs"]
mod changes;
#[path = "connect.rs"]
mod connect;
#[path = "devices.rs"]
mod devices;
#[path = "echo.rs"]
mod echo;
#[path = "events.rs"]
mod events;
#[path = "fanout.rs"]
mod fanout;
#[path = "lifecycle.rs"]
mod lifecycle;
#[path = "metrics.rs"]
mod metrics;
#[path = "model_reviewers.rs"]
mod model_reviewers;
#[path = "modes.rs"]
mod modes;
#[path = "notify.rs"]
mod notify;
#[path = "permissions.rs"]
mod permissions;
#[path = "reviewers.rs"]
mod reviewers;
#[path = "rules.rs"]
mod rules;
#[path = "sessions.rs"]
mod sessions;
#[path = "shell.rs"]
mod shell;

//! The clients of a running daemon, which the binary's commands and the terminal client share:
//! the HTTP API's client ([`api`]: JSON requests and a session's event stream), `mediatord
//! connect` ([`connect`]: an editor's stdio relayed to the daemon's `/acp` WebSocket), a login
//! saved ([`saved`]) and where a browser brings a terminal's sign-in back ([`loopback`]). Beside
//! the house, like `tui`: they speak the daemon's wire as any client does, and the daemon never
//! imports them (`tests/it/architecture.rs`).

pub mod api;
pub mod connect;
pub mod loopback;
pub mod saved;

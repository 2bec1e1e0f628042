//! The terminal client, a client of the HTTP API like any other (issue #31): `mediatord attach`
//! follows a session full-screen — its transcript replayed then live, permission cards answered
//! with single keys, prompts typed — and `mediatord watch` / `approve` do the same for scripts.
//! It joins the same session, bus and mediator as the web app, a phone or an editor, under the
//! session's policy; it holds no state of the daemon's, only what its screen needs.
//!
//! - `connect.rs`: credentials, client id, who the daemon says we are; the event stream followed
//!   across dropped connections.
//! - `model.rs`: the session built from its events (the twin of `web/state.js`).
//! - `app.rs`: keys in, actions out: the two modes, the card in front, the overlays.
//! - `view.rs`: drawing it all (`markdown.rs` for the agent's Markdown, `theme.rs` for colour or
//!   `NO_COLOR`, `shown.rs` the one way others' text becomes spans); the card renders
//!   [`crate::present`].
//! - `picker.rs`: the session list when no session is named.
//! - `terminal.rs`: raw mode and the alternate screen, given back on every way out.
//! - `run.rs`: `attach`'s loop; `watch.rs`: `watch` and `approve`.

mod app;
mod connect;
mod diff;
mod markdown;
mod model;
mod picker;
mod run;
mod shown;
mod terminal;
mod theme;
mod view;
mod watch;

pub use self::connect::{Login, default_client_id};
pub use self::diff::diff;
pub use self::run::{AttachOptions, attach};
pub use self::view::keys_text;
pub use self::watch::{approve, watch};

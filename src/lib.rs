//! mediatord — one ACP coding agent behind an HTTP + SSE API that many clients share.
//!
//! # Floors
//!
//! The crate is a house with floors; a module imports only from floors below its own (and, inside
//! a floor's folder, from sibling files, without cycles). Start at [`server::run`] for the
//! daemon's life.
//!
//! ```text
//! cli/ ──► server ─► http ─► door ─► desk ─► daemon ─► permission ─┬─► store
//!                              └──────────────┘                ├─► devices ────┘
//!                                                              ├─► agent ────────► acp
//!                                                              ├─► notify
//!                                                              └─► changes
//! leaves, usable from any floor: clock  sync  path  confine  peer  environ  event  exec  metrics
//!                                config  throttle  text  log_throttle  present  tls  discovery
//!                                audit  transcript  scratch  bounds
//! beside the house (imported by cli/ only): demo_agent ─► acp   service   tui ─► client
//! ```
//!
//! - Nothing imports [`http`] but [`server`]; only [`http`] knows axum and tower-http, and hyper
//!   beside it only the clients ([`client`], the notifications' `notify::deliver`).
//! - [`permission`] and [`agent`] share a floor and never import each other: the session (in
//!   [`daemon`]) joins them, through the traits in [`acp`] and [`permission::Host`].
//! - Leaves import nothing from the crate but other leaves.
//!
//! `tests/it/architecture.rs` reads `src/` and fails on any import that breaks these rules.
//!
//! # Crate map
//!
//! - [`server`]: bind, the startup line, signals and the drain.
//! - [`http`]: the perimeter, the route table, handlers by resource, OpenAPI, HTTP errors; `/acp`'s
//!   transports.
//! - [`door`]: the ACP door: the daemon as the ACP agent to the editors and SDKs on `/acp`, on the
//!   same sessions, bus and mediator as REST.
//! - [`desk`]: the front desk every door calls: who may be served at all (never a process the
//!   daemon started), what a caller may do, registration with its role, a device's bounds, the
//!   vote; one error type every door renders.
//! - [`daemon`]: the tables (sessions, one agent per workspace, limits, drain); sessions with
//!   their prompt FIFO and turn runner; the event bus; the session shell.
//! - [`permission`]: who answers the agent's permission requests: the mediator, the four
//!   policies as one pure function, the rules.
//! - [`agent`]: the agent process behind its guard, and the actor owning its stdio.
//! - [`review`]: the reviewers: programs kept beside the agents, or model endpoints, that judge
//!   each permission request, their verdicts cast as the mediator's ballots of `reviewer:<name>`.
//! - [`changes`]: what sessions changed: workspace snapshots (a stat cache like git's index, a
//!   store under the state directory), change sets, line diffs, the workspace diff against git's
//!   `HEAD`, qwen serve's file routes, rewinds, and which changes an approved request named.
//! - [`fleet`]: several daemons sharing one PostgreSQL: this daemon's lease, and what the others
//!   announce applied here (the relay to the daemon holding a session is in [`http`]).
//! - [`store`]: the durable state (audit trail, workspace rules, session history) behind the
//!   [`store::Store`] trait: SQLite or PostgreSQL with one writer thread, or memory for
//!   `--ephemeral`; what only a fleet keeps (leases, the session directory, shared pairing codes,
//!   notices) behind [`store::Fleet`], which PostgreSQL alone implements.
//! - [`devices`]: paired devices: one-time pairing codes, per-device credentials (stored
//!   hashed), roles, revocation.
//! - [`notify`]: notification targets: bounded queues, signed deliveries, one-tap action links.
//! - [`acp`]: JSON-RPC frames, ACP method names and error codes, the two role traits.
//! - [`clock`]: wall-clock milliseconds and ISO-8601 text.
//! - [`discovery`]: the daemon's `daemon.json` in its state directory, and the one lookup the
//!   command line uses to find the local daemon.
//! - [`tls`]: the listener's certificate (loaded, checked, reloaded on SIGHUP) and the trust of the
//!   outgoing client.
//! - [`outgoing`]: the daemon's one outgoing HTTP client (notifications, model reviewers).
//! - [`log_throttle`]: log lines that may repeat at any rate, logged once a second with a count.
//! - [`sync`]: the one way a `std::sync::Mutex` is locked, and a bounded queue built on it.
//! - [`throttle`]: budgets for wrong guesses at one-time secrets, per client and in all.
//! - [`text`]: text someone else chose, shown safely: escaped for terminals and logs, revealed
//!   (blank runs and invisible characters made visible) for a person who decides on it.
//! - [`present`]: what a permission request holds, in the order a reviewer reads it, bounded:
//!   the one presentation of a request every door renders.
//! - [`audit`]: how an audit entry reads: the decision in words, who and how, one identity shown
//!   one way, the CSV export's row, `--since` as a person types it.
//! - [`transcript`]: a recorded session as Markdown or JSON, for `mediatord transcript`.
//! - [`path`]: lexical path folding shared by rules and the `fs/*` confinement.
//! - [`confine`]: paths resolved beneath a workspace's descriptor, never from `/`: reads, writes,
//!   removals and listings for the agent's `fs/*`, the file routes, snapshots and rewinds.
//! - [`peer`]: who is at the other end of an accepted connection: another host, this host, or a
//!   process the daemon started.
//! - [`environ`]: the daemon's secrets erased from its own initial environment once read.
//! - [`event`]: the names of the stream's events.
//! - [`exec`]: the daemon's process groups, and how a process ended.
//! - [`bounds`]: the bounds the daemon's clients keep alike (the terminal client here, the web
//!   app through the `limits.js` build.rs writes from it).
//! - [`scratch`]: the daemon's directory in `TMPDIR` (agents' private temporary directories), removed
//!   when it goes, or by the next daemon when it was killed.
//! - [`metrics`]: Prometheus counters, and the typed [`metrics::Snapshot`] of the daemon.
//! - [`config`]: command line, environment and `--config` file → validated [`config::Config`].
//! - [`demo_agent`]: the built-in ACP agent behind `mediatord demo-agent` / `--agent demo`.
//! - [`tui`]: the terminal client: `mediatord attach` (full screen), `watch` and `approve`, a
//!   client of the HTTP API through [`client`] (imported by the binary only).
//! - [`client`]: the clients of a running daemon the binary and [`tui`] share: the HTTP API's
//!   (`client::api`) and `mediatord connect`'s (`client::connect`).
//! - [`service`]: `mediatord service install --user`: the systemd user unit the package ships,
//!   written for a binary installed anywhere.

pub mod acp;
pub mod agent;
pub mod audit;
pub mod bounds;
pub mod changes;
pub mod client;
pub mod clock;
pub mod config;
pub mod confine;
pub mod daemon;
pub mod demo_agent;
pub mod desk;
pub mod devices;
pub mod discovery;
pub mod door;
pub mod environ;
pub mod event;
pub mod exec;
pub mod fleet;
pub mod http;
pub mod log_throttle;
pub mod metrics;
pub mod notify;
pub mod oidc;
pub mod outgoing;
pub mod path;
pub mod peer;
pub mod permission;
pub mod present;
pub mod review;
pub mod scratch;
pub mod server;
pub mod service;
pub mod store;
pub mod sync;
pub mod text;
pub mod throttle;
pub mod tls;
pub mod transcript;
pub mod tui;

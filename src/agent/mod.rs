//! The agent floor: one ACP agent process per workspace, and the one task that owns it.
//!
//! - `handle`: [`AgentHandle`], the cloneable way in (every method is a message to the actor);
//!   it plays ACP's agent role ([`crate::acp::Agent`]) for the sessions.
//! - `actor`: the task owning the agent's stdout reader, pending calls, session table and
//!   early-update buffer; it calls each session through [`crate::acp::Client`], held weakly.
//! - `codec`: the reader's line splitter and the stdin writer task.
//! - `process`: spawning behind the guard in its own process group; the stderr tail; a
//!   [`Helper`] (a reviewer) started the same way.
//! - `redact`: the agent's configured secrets kept out of its diagnostics (stderr, error answers).
//! - [`guard`]: the `agent-guard` program that kills the group if the daemon dies.
//! - [`sandbox`]: kernel confinement (Landlock) the guard applies to itself before it starts the
//!   agent or a shell command; the private temporary directory; what is enforced, for reports.
//! - `fs`: the agent's `fs/*` requests, confined to the workspace.
//!
//! Imports `acp` and the leaves only; never `permission`, `daemon` or `http`.

mod actor;
mod codec;
mod fs;
pub mod guard;
mod handle;
mod process;
mod redact;
pub mod sandbox;

pub use handle::AgentHandle;
pub use process::{Helper, ProgramError, resolve_program, widen_pipe};
pub(crate) use redact::Redactor;

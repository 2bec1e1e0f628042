//! What the daemon's operations fail with, in its own words. The HTTP floor maps each enum to a
//! status and a wire `code` once (`http/error.rs`); nothing here knows about HTTP.

use std::path::PathBuf;
use std::time::Duration;

use crate::acp::CallError;

/// Why `POST /session` created (or attached to) nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreateError {
    #[error("the daemon is shutting down")]
    Draining,
    #[error("cwd must be an absolute path to an existing directory")]
    InvalidCwd,
    /// `cwd` (resolved) is none of `accepted`, the `--workspace` directories.
    #[error("cwd {} is not one of the daemon's workspaces", .cwd.display())]
    WorkspaceMismatch { cwd: PathBuf, accepted: Vec<PathBuf> },
    /// `name` is none of the configured agents, `known` (the default first).
    #[error("unknown agent {name:?}")]
    UnknownAgent { name: String, known: Vec<String> },
    #[error("session limit reached ({limit})")]
    LimitReached { limit: usize },
    /// The agent did not answer `method` within `timeout` (`--initialize-timeout-ms`).
    #[error("the agent did not answer {method} within {} ms", .timeout.as_millis())]
    InitTimeout { method: &'static str, timeout: Duration },
    /// The agent could not be started, or failed its handshake; the agent's own words.
    #[error("the agent could not be started: {0}")]
    AgentStartFailed(String),
    /// The agent refused a request of the create (the requested model); the agent's own words.
    #[error("{0}")]
    AgentError(String),
    /// The create's own task failed (a bug); nothing more is said.
    #[error("internal error")]
    Internal,
}

impl CreateError {
    /// A failed agent call `method` of the create, bounded by `timeout`. Before the session exists
    /// (`initialize`, `session/new`), any agent error means the agent could not start a session at
    /// all; after it (`session/set_model`), it is the agent refusing the request.
    pub(crate) fn from_call(e: CallError, method: &'static str, timeout: Duration) -> CreateError {
        let during_start = method != crate::acp::method::SESSION_SET_MODEL;
        match e {
            CallError::Timeout => CreateError::InitTimeout { method, timeout },
            CallError::Rpc(e) if !during_start => CreateError::AgentError(e.detailed_message()),
            CallError::Rpc(e) => CreateError::AgentStartFailed(e.detailed_message()),
            CallError::Start(m) | CallError::Exited(m) => CreateError::AgentStartFailed(m),
            CallError::Backlog => CreateError::AgentStartFailed(CallError::Backlog.to_string()),
        }
    }
}

/// Why an operation on a live (or once live) session failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The id names no live session (never did, or it has ended).
    #[error("session {session_id} not found")]
    NotFound { session_id: String },
    #[error("{pending} prompts are queued or running (limit {limit})")]
    QueueFull { limit: usize, pending: usize },
    #[error("{limit} event streams are open")]
    SubscriberLimit { limit: usize },
    /// The agent answered with an error; the agent's own words.
    #[error("{0}")]
    Agent(String),
    /// The agent exited (or stopped reading) before it answered.
    #[error("{0}")]
    AgentExited(String),
    /// The daemon is shutting down: the prompt never ran.
    #[error("the daemon is shutting down")]
    Draining,
    /// `mode_id` is none of the modes the agent announced, `available`.
    #[error("unknown mode {mode_id:?}")]
    InvalidMode { mode_id: String, available: Vec<String> },
    /// The history could not be read.
    #[error("the history could not be read: {0}")]
    Store(String),
}

impl SessionError {
    pub(crate) fn not_found(session_id: &str) -> SessionError {
        SessionError::NotFound { session_id: session_id.to_owned() }
    }
}

/// Why `POST /session/:id/resume` brought nothing back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// Neither live nor in the history.
    #[error("session {session_id} not found")]
    NotFound { session_id: String },
    /// The session's agent does not advertise `loadSession`.
    #[error("the agent {agent:?} cannot load a session (it does not advertise loadSession)")]
    Unsupported { agent: String },
    /// Starting the agent or loading the session failed as a create would.
    #[error(transparent)]
    Create(#[from] CreateError),
    /// Another daemon of the fleet holds it live, at `node_url`: this one starts no agent on it.
    #[error("session {session_id} is held by the daemon at {node_url}")]
    HeldElsewhere { session_id: String, node_url: String },
    /// The history could not be read.
    #[error("{0}")]
    Store(String),
}

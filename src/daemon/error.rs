//! What the daemon's operations fail with, in its own words. The HTTP floor maps each enum to a
//! status and a wire `code` once (`http/error.rs`); nothing here knows about HTTP.

use crate::acp::CallError;

/// Why `POST /session` created (or attached to) nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreateError {
    #[error("the daemon is shutting down")]
    Draining,
    #[error("cwd must be an absolute path to an existing directory")]
    InvalidCwd,
    #[error("cwd is not one of the daemon's workspaces")]
    WorkspaceMismatch,
    #[error("session limit reached ({limit})")]
    LimitReached { limit: usize },
    #[error("the agent did not finish starting in time")]
    InitTimeout,
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
    /// A failed agent call during the create. Before the session exists (`during_start`), any
    /// agent error means the agent could not start a session at all.
    pub(crate) fn from_call(e: CallError, during_start: bool) -> CreateError {
        match e {
            CallError::Timeout => CreateError::InitTimeout,
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
}

impl SessionError {
    pub(crate) fn not_found(session_id: &str) -> SessionError {
        SessionError::NotFound { session_id: session_id.to_owned() }
    }
}

//! What an ACP request fails with, in the daemon's words, and how it becomes a JSON-RPC error
//! ([`Render`], supplied by the HTTP floor, which maps the domain errors once).

use crate::acp::RpcError;
use crate::daemon::{CreateError, ResumeError, SessionError};
use crate::permission::VoteError;

/// Why a request failed, in the daemon's words; the HTTP floor renders it ([`Render`]) with the
/// same status and `code` its REST twin would get.
#[derive(Debug, Clone)]
pub enum Failure {
    Create(CreateError),
    Session(SessionError),
    Vote(VoteError),
    Resume(ResumeError),
    /// The params are not what the method takes; the text says what.
    InvalidParams(String),
    MethodNotFound(String),
    /// A session method before `initialize`.
    NotInitialized,
    AlreadyInitialized,
    /// An observer device asked to change something.
    ReadOnly,
    /// A session method on a session this connection has not attached (`session/new` or
    /// `session/load` first).
    NotAttached(String),
    TooManySessions,
    TooManyCalls,
    /// `_meta.clientId` differs from the client id the connection acts as.
    ClientIdMismatch(String),
    /// Too many ACP connections are open.
    TooManyConnections,
    /// The agent announced no config options (`session/set_config_option`).
    NoConfigOptions,
    /// `session/prompt`'s `prompt` is not a non-empty array of content blocks.
    InvalidPrompt,
    /// A device's connection would pass one of its stream bounds.
    StreamLimit(crate::devices::StreamLimit),
    /// A vote decided, but the workspace rule it asked for is not on disk.
    NotRemembered(crate::store::WriteError),
}

/// Renders a [`Failure`] as a JSON-RPC error object: set by the HTTP floor, which maps domain
/// errors once (`http/error.rs`), so `/acp` and REST give the same `code` for the same failure.
pub type Render = fn(&Failure) -> RpcError;

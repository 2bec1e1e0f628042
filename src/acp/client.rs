//! The two ACP roles as traits, so that the floors that play them need not know each other.
//!
//! A session calls its agent through [`Agent`] (implemented by the agent floor's handle, or by a
//! fake in the session's unit tests). The agent's actor calls each session through [`Client`]
//! (implemented by the daemon's session) and holds it weakly, so a session and the actor that
//! feeds it never keep each other alive. The agent's `fs/*` requests are not part of [`Client`]:
//! the agent floor serves them itself, confined to the workspace.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;
use serde_json::value::RawValue;

use super::jsonrpc::{RpcError, Update};
use crate::exec::ExitInfo;

/// Why a call to the agent failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("the agent did not answer in time")]
    Timeout,
    #[error("{0}")]
    Exited(String),
    #[error("{}", .0.message)]
    Rpc(RpcError),
    #[error("the agent is not reading its input")]
    Backlog,
    #[error("{0}")]
    Start(String),
}

/// ACP's agent role: what a session asks of the agent it runs on.
pub trait Agent: Send + Sync {
    /// Calls `method` and waits for the answer; `timeout` bounds the wait (a prompt passes `None`:
    /// a turn may take as long as the agent needs).
    fn call(
        &self,
        method: &'static str,
        params: Value,
        timeout: Option<Duration>,
    ) -> BoxFuture<'_, Result<Box<RawValue>, CallError>> {
        Box::pin(async move { self.queue_call(method, params, timeout).await.await })
    }

    /// [`Agent::call`] in two steps: resolves once the call's line is queued for the agent, so
    /// anything sent to the agent afterwards follows it, to the wait for its answer. A turn needs
    /// the step between: a `session/cancel` queued before its prompt is one the agent ignores.
    fn queue_call(
        &self,
        method: &'static str,
        params: Value,
        timeout: Option<Duration>,
    ) -> BoxFuture<'_, BoxFuture<'_, Result<Box<RawValue>, CallError>>>;

    /// Sends a notification. Resolves once its line is queued for the agent, so anything written
    /// to the agent afterwards (e.g. permission answers after `session/cancel`) follows it.
    fn notify(&self, method: &'static str, params: Value) -> BoxFuture<'_, ()>;
}

/// ACP's client role: what the agent asks of one of its sessions.
pub trait Client: Send + Sync {
    /// `session/update` notifications the agent wrote back to back, in order: a burst read in one
    /// go (or the updates held for a session until it registered), handed over in one call so the
    /// session publishes it at once. Each is its params exactly as the agent wrote them, one JSON
    /// object, a slice of the agent reader's buffer. Called on the agent reader's path: it must not
    /// wait.
    fn session_updates(&self, params: &[Update]);

    /// A `session/request_permission` request; resolves to the `result` to answer the agent with.
    /// May take minutes (a vote): the actor runs it in its own task.
    fn request_permission(&self, params: Value) -> BoxFuture<'_, Value>;

    /// An `elicitation/create` request of this session's; resolves to the `result` (`{action,
    /// content?}`), or the error a question that cannot be asked is refused with. May take minutes,
    /// like a permission.
    fn elicit(&self, params: Value) -> BoxFuture<'_, Result<Value, RpcError>>;

    /// The agent's `elicitation/complete` (it names no session: each of the agent's sessions is
    /// told, and the one that asked acts). Called on the agent reader's path: it must not wait.
    fn elicitation_complete(&self, elicitation_id: &str);

    /// The agent process is gone (`exit` says how); nothing more will come from it.
    fn agent_exited(&self, exit: ExitInfo);
}

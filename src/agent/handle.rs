//! [`AgentHandle`]: how the rest of the daemon reaches one workspace's agent. Every method is a
//! message to the actor ([`super::actor`]), which owns the agent's stdio and pending calls.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use super::actor::{Actor, Cmd};
use crate::acp::{self, CallError, method};
use crate::config::AgentSpec;
use crate::exec::ProcessGroups;
use crate::metrics::Metrics;

/// Commands queued to one actor.
const COMMAND_QUEUE: usize = 1024;

/// `None` while `initialize` is in flight, then its outcome: the agent's answer, or why there is none.
type Ready = Option<Result<Arc<Value>, CallError>>;
/// How long a call that found the agent gone waits for the actor to say how it ended (the actor
/// reaps the agent first: at most its exit wait, then a kill).
const EXIT_REPORT_WAIT: Duration = Duration::from_secs(10);
/// What a call says when the actor ended without saying how the agent did.
const EXITED: &str = "the agent has exited";

/// A cloneable handle to one agent process: one configured agent in one workspace.
#[derive(Debug, Clone)]
pub struct AgentHandle {
    tx: mpsc::Sender<Cmd>,
    ready: watch::Receiver<Ready>,
    /// How the agent ended (its exit and the last of its stderr), once it has: what a call that
    /// found it gone answers, however early it died.
    exited: watch::Receiver<Option<String>>,
    pub workspace: std::path::PathBuf,
    /// The agent's guard process (the daemon's child the agent runs under), once spawned: what
    /// the front desk names when one of its processes tries to act as a client.
    pid: Arc<std::sync::OnceLock<u32>>,
}

impl AgentHandle {
    /// Starts the actor, which spawns the agent `spec` describes (its group listed in `groups`) and
    /// sends `initialize`, offering the client capabilities `spec` allows.
    pub fn start(
        spec: &AgentSpec,
        workspace: std::path::PathBuf,
        groups: ProcessGroups,
        metrics: Arc<Metrics>,
    ) -> AgentHandle {
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let (ready_tx, ready) = watch::channel(None);
        let (exited_tx, exited) = watch::channel(None);
        let handle = AgentHandle { tx, ready, exited, workspace: workspace.clone(), pid: Arc::default() };
        let init = handle.clone();
        let spec = spec.clone();
        tokio::spawn(async move {
            let name = spec.name.clone();
            let actor = match Actor::spawn(&spec, workspace.clone(), &groups, metrics.clone()) {
                Ok(actor) => actor,
                Err(e) => {
                    metrics.agent_exit("start_failed");
                    tracing::warn!(agent = %name, workspace = %workspace.display(), error = %e, "agent failed to start");
                    // Close the command channel first, so the handle reads as dead before anyone
                    // hears of the failure.
                    drop(rx);
                    let _ = exited_tx.send(Some(e.to_string()));
                    let _ = ready_tx.send(Some(Err(CallError::Start(e.to_string()))));
                    return;
                }
            };
            tracing::info!(agent = %name, workspace = %workspace.display(), pid = actor.pid(), "agent started");
            let _ = init.pid.set(actor.pid());
            tokio::spawn(async move {
                let params = json!({
                    "protocolVersion": acp::PROTOCOL_VERSION,
                    "clientCapabilities": {
                        "fs": {"readTextFile": spec.fs.read_text_file, "writeTextFile": spec.fs.write_text_file},
                        "terminal": false,
                        // An agent may only use the modes its client advertised: the daemon puts
                        // both before a person (`docs/protocol.md#19-questions`).
                        "elicitation": {"form": {}, "url": {}},
                    },
                    "clientInfo": {"name": "mediatord", "version": env!("CARGO_PKG_VERSION")},
                });
                let result = init.call(method::INITIALIZE, params, Some(spec.initialize_timeout)).await;
                // An answer that is not JSON cannot come through the reader; `Null` is only defence.
                let result =
                    result.map(|raw| Arc::new(serde_json::from_str(raw.get()).unwrap_or(Value::Null)));
                if let Err(e) = &result {
                    tracing::warn!(agent = %name, workspace = %init.workspace.display(), error = %e, "agent initialize failed");
                    init.shutdown(Duration::ZERO).await;
                }
                let _ = ready_tx.send(Some(result));
            });
            actor.run(rx, exited_tx).await;
        });
        handle
    }

    /// Waits until `initialize` succeeded or failed.
    pub async fn ready(&self) -> Result<(), CallError> {
        let mut ready = self.ready.clone();
        match ready.wait_for(Option::is_some).await {
            Ok(state) => {
                state.clone().map_or(Err(CallError::Exited("agent exited".into())), |r| r.map(|_| ()))
            }
            Err(_) => Err(CallError::Exited("agent exited during start-up".into())),
        }
    }

    /// The agent's answer to `initialize`, once it gave one.
    pub fn initialized(&self) -> Option<Arc<Value>> {
        match &*self.ready.borrow() {
            Some(Ok(answer)) => Some(answer.clone()),
            _ => None,
        }
    }

    /// The pid of the agent's guard (the daemon's child it runs under), once it is spawned.
    pub fn pid(&self) -> Option<u32> {
        self.pid.get().copied()
    }

    /// Whether the actor still runs.
    pub fn is_alive(&self) -> bool {
        !self.tx.is_closed()
    }

    /// Calls `method` on the agent; `timeout` bounds the wait (prompts pass `None`).
    pub async fn call(
        &self,
        method: &'static str,
        params: Value,
        timeout: Option<Duration>,
    ) -> Result<Box<RawValue>, CallError> {
        self.queue_call(method, params, timeout).await.await
    }

    /// Queues a call of `method` for the agent (the actor writes its commands' lines in the order
    /// they were queued); resolves, once it is, to the wait for the answer.
    pub async fn queue_call(
        &self,
        method: &'static str,
        params: Value,
        timeout: Option<Duration>,
    ) -> BoxFuture<'_, Result<Box<RawValue>, CallError>> {
        let (reply, rx) = oneshot::channel();
        let queued = self.tx.send(Cmd::Call { method, params, reply }).await.is_ok();
        Box::pin(async move {
            if !queued {
                return Err(self.how_it_ended().await);
            }
            let answer = match timeout {
                Some(t) => tokio::time::timeout(t, rx).await.map_err(|_| CallError::Timeout)?,
                None => rx.await,
            };
            match answer {
                Ok(answer) => answer,
                // The actor ended with the call still queued: the agent died before reading it.
                Err(_) => Err(self.how_it_ended().await),
            }
        })
    }

    /// Why a call found the agent gone: how it ended, as the actor reports it once it has reaped
    /// it (an agent that dies at once may do so before the first call is even queued).
    async fn how_it_ended(&self) -> CallError {
        let mut exited = self.exited.clone();
        let said = tokio::time::timeout(EXIT_REPORT_WAIT, exited.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|said| said.ok().and_then(|m| m.clone()));
        CallError::Exited(said.unwrap_or_else(|| EXITED.to_owned()))
    }

    /// Sends a notification; returns once its line is queued for the agent's stdin, so anything
    /// written to the agent afterwards (e.g. permission answers after `session/cancel`) follows it.
    pub async fn notify(&self, method: &'static str, params: Value) {
        let (queued, done) = oneshot::channel();
        if self.tx.send(Cmd::Notify { method, params, queued }).await.is_ok() {
            let _ = done.await;
        }
    }

    /// Routes the agent's messages about `session_id` to `client`, held weakly: the actor never
    /// keeps a session alive. Updates that arrived before this are handed over first.
    pub async fn register(&self, session_id: String, client: Weak<dyn acp::Client>) {
        let _ = self.tx.send(Cmd::Register { session_id, client }).await;
    }

    /// Forgets a session; with `stop_if_idle` the agent is stopped when no session is left.
    pub async fn unregister(&self, session_id: &str, stop_if_idle: bool) {
        let _ = self.tx.send(Cmd::Unregister { session_id: session_id.to_owned(), stop_if_idle }).await;
    }

    /// Closes the agent's stdin, gives it `grace` to exit, then kills its group. Returns when gone.
    pub async fn shutdown(&self, grace: Duration) {
        let _ = self.tx.send(Cmd::Shutdown { grace }).await;
        self.tx.closed().await;
    }
}

impl acp::Agent for AgentHandle {
    fn queue_call(
        &self,
        method: &'static str,
        params: Value,
        timeout: Option<Duration>,
    ) -> BoxFuture<'_, BoxFuture<'_, Result<Box<RawValue>, CallError>>> {
        Box::pin(AgentHandle::queue_call(self, method, params, timeout))
    }

    fn notify(&self, method: &'static str, params: Value) -> BoxFuture<'_, ()> {
        Box::pin(AgentHandle::notify(self, method, params))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handle whose actor is played by the test: its command queue and its report of the exit.
    fn handle() -> (AgentHandle, mpsc::Receiver<Cmd>, watch::Sender<Option<String>>) {
        let (tx, commands) = mpsc::channel(1);
        let (_, ready) = watch::channel(None);
        let (exited_tx, exited) = watch::channel(None);
        let handle = AgentHandle { tx, ready, exited, workspace: "/w".into(), pid: Arc::default() };
        (handle, commands, exited_tx)
    }

    fn exited(e: CallError) -> String {
        match e {
            CallError::Exited(m) => m,
            other => panic!("expected Exited, got {other:?}"),
        }
    }

    /// An agent that dies at once can be gone before `initialize` is even queued; the call still
    /// says how it ended (its exit code and stderr), not only that it did.
    #[tokio::test]
    async fn a_call_that_finds_the_agent_gone_says_how_it_ended() {
        let (h, commands, report) = handle();
        drop(commands);
        report.send_replace(Some("the agent exited with code 3: bad key".into()));
        let e = h.call(method::INITIALIZE, json!({}), Some(Duration::from_secs(1))).await.expect_err("gone");
        assert_eq!(exited(e), "the agent exited with code 3: bad key");
    }

    #[tokio::test]
    async fn a_call_queued_when_the_agent_died_says_how_it_ended() {
        let (h, mut commands, report) = handle();
        let call = tokio::spawn(async move { h.call(method::INITIALIZE, json!({}), None).await });
        // The actor's end: the call was queued and never read; the report comes before the drop.
        let queued = commands.recv().await.expect("the call is queued");
        report.send_replace(Some("the agent exited with code 3: bad key".into()));
        drop((queued, commands));
        let e = call.await.expect("the call's task").expect_err("gone");
        assert_eq!(exited(e), "the agent exited with code 3: bad key");
    }

    /// `queue_call` resolves once the call is in the actor's queue (before any answer), and the
    /// wait it resolves to gets the actor's answer.
    #[tokio::test]
    async fn a_queued_call_is_in_the_actors_queue_and_then_gets_its_answer() {
        let (h, mut commands, _report) = handle();
        let answer = h.queue_call(method::SESSION_PROMPT, json!({"n": 1}), None).await;
        let Ok(Cmd::Call { method, params, reply }) = commands.try_recv() else {
            panic!("the call is queued once queue_call resolves")
        };
        assert_eq!((method, params), (method::SESSION_PROMPT, json!({"n": 1})));
        let _ = reply.send(Ok(RawValue::from_string(r#"{"stopReason":"end_turn"}"#.into()).expect("json")));
        assert_eq!(answer.await.expect("answered").get(), r#"{"stopReason":"end_turn"}"#);
    }

    #[tokio::test]
    async fn an_actor_gone_without_a_report_is_said_to_have_exited() {
        let (h, commands, report) = handle();
        drop((commands, report));
        let e = h.call(method::INITIALIZE, json!({}), None).await.expect_err("gone");
        assert_eq!(exited(e), EXITED);
    }
}

//! The ACP door (`docs/protocol.md#16-acp`): the daemon as the ACP agent to editors and SDKs that
//! connect to `/acp`, multiplexed onto the real agents through the same daemon core the REST
//! routes use: a client's `session/new` is the create of `POST /session`, its `session/prompt` the
//! same prompt FIFO, its answer to `session/request_permission` a vote in the same mediator.
//! The door adds no second session, bus or vote: what it keeps is what a connection needs (who it
//! is, which sessions it attached, which JSON-RPC ids it owes or is owed).
//!
//! - this file: [`Door`], the open connections and their bound.
//! - `connection`: [`Connection`]: one ACP client: what comes in, where answers go.
//! - `shared`: what a connection and its lanes share: [`Caller`], who it is; the ids in flight.
//! - `failure`: [`Failure`], what a request fails with, and [`Render`].
//! - `methods`: each ACP method as the typed call the REST handlers make.
//! - `lane`: [`Lane`]: one attached session's events as ACP messages.
//! - `wire`: the JSON-RPC text the door writes.
//!
//! Imports `daemon`, `permission`, `acp` and the leaves; knows nothing of HTTP. The transports
//! (WebSocket, Streamable HTTP) are `http/acp.rs`: they move text between a socket or requests and
//! a [`Connection`].

mod connection;
mod failure;
mod lane;
mod methods;
mod shared;
pub mod wire;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use self::connection::{
    Connection, Ctx, MAX_CALLS_IN_FLIGHT, MAX_MESSAGE_BYTES, MAX_SESSIONS_PER_CONNECTION, NoStream,
    SessionStream, Transport, home_of,
};
pub use self::failure::{Failure, Render};
pub use self::lane::{Lane, Out};
pub use self::shared::{Caller, Owner};
use crate::daemon::Daemon;
use crate::sync::lock;

/// ACP connections open at once, over both transports. Past it `initialize` (or the WebSocket
/// upgrade) is refused: each holds little, but a connection costs a bus cursor per attached
/// session, and Streamable HTTP connections outlive their TCP connections.
pub const MAX_CONNECTIONS: usize = 1024;
/// A Streamable HTTP connection with no stream open and no request for this long is forgotten
/// (its client went away without `DELETE /acp`). WebSocket connections end with their socket.
pub const HTTP_IDLE: Duration = Duration::from_secs(300);
/// How often idle Streamable HTTP connections are looked for (a fifth of [`HTTP_IDLE`]: one is
/// forgotten at most a fifth late).
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// The open ACP connections.
pub struct Door {
    daemon: Arc<Daemon>,
    render: Render,
    /// Whether the task that forgets idle Streamable HTTP connections runs.
    sweeping: std::sync::atomic::AtomicBool,
    /// Every open connection by id: Streamable HTTP requests find theirs here; WebSocket ones are
    /// listed for the bound. Await-free critical sections only.
    open: Mutex<HashMap<String, Arc<Connection>>>,
}

impl std::fmt::Debug for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Door").field("connections", &lock(&self.open).len()).finish()
    }
}

impl Door {
    pub fn new(daemon: Arc<Daemon>, render: Render) -> Arc<Door> {
        Arc::new(Door { daemon, render, sweeping: Default::default(), open: Mutex::new(HashMap::new()) })
    }

    pub fn daemon(&self) -> &Arc<Daemon> {
        &self.daemon
    }

    /// Opens a connection for `caller`, or refuses when [`MAX_CONNECTIONS`] are open (idle
    /// Streamable HTTP connections are forgotten first).
    pub fn open(
        self: &Arc<Self>,
        caller: Caller,
        transport: Transport,
        loopback: bool,
    ) -> Result<Arc<Connection>, Failure> {
        if self.count() >= MAX_CONNECTIONS {
            self.sweep();
        }
        let mut open = lock(&self.open);
        if open.len() >= MAX_CONNECTIONS {
            return Err(Failure::TooManyConnections);
        }
        let door = Arc::downgrade(self);
        let forget = Box::new(move |id: &str| {
            if let Some(door) = door.upgrade() {
                door.forget(id);
            }
        });
        let conn = Connection::new(self.daemon.clone(), self.render, forget, caller, transport, loopback);
        if transport == Transport::Http && !self.sweeping.swap(true, std::sync::atomic::Ordering::AcqRel) {
            let door = Arc::downgrade(self);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(SWEEP_EVERY);
                loop {
                    tick.tick().await;
                    match door.upgrade() {
                        Some(door) => door.sweep(),
                        None => return,
                    }
                }
            });
        }
        open.insert(conn.id().to_owned(), conn.clone());
        tracing::debug!(connection = %conn.id(), transport = transport.as_str(), open = open.len(), "ACP connection opened");
        Ok(conn)
    }

    /// The open connection `id`, if `owner` opened it (anyone else is told it does not exist).
    pub fn find(&self, id: &str, owner: &Owner) -> Option<Arc<Connection>> {
        let conn = lock(&self.open).get(id).cloned()?;
        (conn.owner() == owner && !conn.is_closed()).then_some(conn)
    }

    /// Connections open now.
    pub fn count(&self) -> usize {
        lock(&self.open).len()
    }

    /// Forgets a connection that has closed.
    fn forget(&self, id: &str) {
        lock(&self.open).remove(id);
    }

    /// Forgets the Streamable HTTP connections idle for [`HTTP_IDLE`] (closing them).
    pub fn sweep(&self) {
        let now = Instant::now();
        let idle: Vec<Arc<Connection>> =
            lock(&self.open).values().filter(|c| c.idle_since(now, HTTP_IDLE)).cloned().collect();
        for c in idle {
            c.close();
        }
    }
}

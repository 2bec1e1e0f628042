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
//! - `failure`: [`Failure`], what a request fails with, rendered as a JSON-RPC error.
//! - `methods`: each ACP method as the typed call the REST handlers make.
//! - `lane`: [`Lane`]: one attached session's events as ACP messages.
//! - `wire`: the JSON-RPC text the door writes.
//!
//! Who a connection is, what it may do, its registration, its subscriptions, its device's bounds
//! and its votes go through the front desk (`crate::desk`), as every door's do.
//!
//! Imports `desk`, `daemon`, `permission`, `acp` and the leaves; knows nothing of HTTP. The transports
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
    Connection, Ctx, MAX_CALLS_IN_FLIGHT, MAX_MESSAGE_BYTES, MAX_SESSIONS_PER_CONNECTION, Messages, NoStream,
    SessionStream, Transport,
};
pub use self::failure::Failure;
pub use self::lane::{Lane, Out};
pub use self::shared::Owner;
use crate::daemon::Daemon;
use crate::desk::{Caller, Desk};
use crate::sync::lock;

/// ACP connections open at once, over both transports, at least: past the bound `initialize` (or
/// the WebSocket upgrade) is refused. Each holds little, but a connection costs a bus cursor per
/// attached session, and Streamable HTTP connections outlive their TCP connections, so the daemon's
/// TCP connection cap alone does not bound them. A daemon allowed more TCP connections
/// (`--max-connections`, `0` for its hard cap) allows as many ACP connections ([`Door::limits`]):
/// ten thousand watchers' WebSockets are ten thousand connections.
pub const MAX_CONNECTIONS: usize = 1024;
/// The share of the ACP connections paired devices may hold together: three quarters, the last
/// quarter kept for the operator (as `devices::StreamLimits` keeps one of the event streams), so
/// no device, nor all of them, can take the connections the operator needs to revoke them.
const fn device_share(all: usize) -> usize {
    all - all / 4
}
/// [`device_share`] of [`MAX_CONNECTIONS`].
pub const MAX_DEVICE_CONNECTIONS: usize = device_share(MAX_CONNECTIONS);
/// A Streamable HTTP connection with no stream open and no request for this long is forgotten
/// (its client went away without `DELETE /acp`). WebSocket connections end with their socket.
pub const HTTP_IDLE: Duration = Duration::from_secs(300);
/// How often idle Streamable HTTP connections are looked for (a fifth of [`HTTP_IDLE`]: one is
/// forgotten at most a fifth late).
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// The open ACP connections.
pub struct Door {
    desk: Arc<Desk>,
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
    pub fn new(desk: Arc<Desk>) -> Arc<Door> {
        Arc::new(Door { desk, sweeping: Default::default(), open: Mutex::new(HashMap::new()) })
    }

    pub fn daemon(&self) -> &Arc<Daemon> {
        self.desk.daemon()
    }

    /// How many ACP connections may be open at once, and how many of them paired devices' (the
    /// daemon's TCP connection cap, at least [`MAX_CONNECTIONS`]).
    pub fn limits(&self) -> (usize, usize) {
        let all = self.daemon().config.connection_cap().max(MAX_CONNECTIONS);
        (all, device_share(all))
    }

    /// Opens a connection for `caller`, or refuses: past a device's bounds (the desk's
    /// `open_connection`), past the devices' share of [`Door::limits`] for a device, or when all
    /// of them are open (idle Streamable HTTP connections are forgotten first). A device's
    /// connection closes the moment the device is revoked.
    pub fn open(self: &Arc<Self>, caller: Caller, transport: Transport) -> Result<Arc<Connection>, Failure> {
        let place = self.desk.open_connection(&caller)?;
        let device = caller.device().is_some();
        let (all, devices) = self.limits();
        let limit = if device { devices } else { all };
        if self.count_for(device) >= limit {
            self.sweep();
        }
        let mut open = lock(&self.open);
        if held(&open, device) >= limit || open.len() >= all {
            return Err(Failure::TooManyConnections(all));
        }
        let door = Arc::downgrade(self);
        let forget = Box::new(move |id: &str| {
            if let Some(door) = door.upgrade() {
                door.forget(id);
            }
        });
        let conn = Connection::new(self.desk.clone(), forget, caller, transport, place);
        if let Some(revoked) = conn.revoked() {
            let (conn, closed) = (Arc::downgrade(&conn), conn.closed());
            tokio::spawn(async move {
                tokio::select! {
                    () = revoked.cancelled() => {
                        if let Some(conn) = conn.upgrade() {
                            conn.close();
                        }
                    }
                    () = closed.cancelled() => {}
                }
            });
        }
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

    /// Closes every connection `owner` opened (a device just revoked: each also closes on the
    /// revocation by itself, this makes it so before the revocation is answered).
    pub fn close_owned_by(&self, owner: &Owner) {
        let owned: Vec<Arc<Connection>> =
            lock(&self.open).values().filter(|c| c.owner() == owner).cloned().collect();
        for c in owned {
            c.close();
        }
    }

    /// Connections open now.
    pub fn count(&self) -> usize {
        lock(&self.open).len()
    }

    /// Connections open now of devices (`devices`) or of anyone.
    fn count_for(&self, devices: bool) -> usize {
        held(&lock(&self.open), devices)
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

/// The connections in `open` of devices (`devices`), or all of them.
fn held(open: &HashMap<String, Arc<Connection>>, devices: bool) -> usize {
    if devices { open.values().filter(|c| *c.owner() != Owner::Operator).count() } else { open.len() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_may_hold_three_quarters_of_the_connections() {
        assert_eq!(MAX_DEVICE_CONNECTIONS, 768);
        assert_eq!(device_share(crate::config::HARD_MAX_CONNECTIONS), 196_608);
        assert_eq!(device_share(1100), 825);
        assert_eq!(device_share(3), 3, "a quarter of 3 rounds down to none");
    }
}

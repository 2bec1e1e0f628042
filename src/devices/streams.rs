//! How many event streams paired devices may hold open. An event stream holds a connection for as
//! long as it is open, and connections are capped (`--max-connections`): without these bounds one
//! device, even an observer, could take every connection and every stream of a session, and the
//! operator could no longer reach the daemon to revoke it. So a device gets a few streams per
//! session and a few more in all, and all devices together get three quarters of the connections
//! and of each session's streams; the last quarter is the operator's.
//!
//! The operator's streams are not counted here: the operator is who the reserve is for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::sync::lock;

/// Streams one device may hold open on one session: a browser tab and a second one (or a phone
/// and the notification it opened).
pub const MAX_STREAMS_PER_DEVICE_AND_SESSION: usize = 2;
/// Streams one device may hold open over all sessions: a web app following several sessions.
pub const MAX_STREAMS_PER_DEVICE: usize = 8;

/// The bounds for all devices together, from the daemon's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Streams all devices together may hold open.
    pub all_devices: usize,
    /// Streams all devices together may hold open on one session.
    pub per_session: usize,
}

impl StreamLimits {
    /// Three quarters of the connections and of a session's streams (`--max-connections`,
    /// `--max-subscribers`): the last quarter is kept for the operator. (With fewer than four, a
    /// quarter rounds to none.)
    pub fn leaving_a_quarter(max_connections: usize, max_subscribers: usize) -> StreamLimits {
        StreamLimits {
            all_devices: max_connections - max_connections / 4,
            per_session: max_subscribers - max_subscribers / 4,
        }
    }
}

/// Which bound a stream would pass: its code's `scope` and the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StreamLimit {
    #[error("this device has {0} event streams open on this session already")]
    DeviceOnSession(usize),
    #[error("this device has {0} event streams open already")]
    Device(usize),
    #[error("paired devices hold {0} event streams on this session already")]
    DevicesOnSession(usize),
    #[error("paired devices hold {0} event streams already")]
    Devices(usize),
}

impl StreamLimit {
    /// The bound that was reached.
    pub fn limit(self) -> usize {
        match self {
            StreamLimit::DeviceOnSession(n)
            | StreamLimit::Device(n)
            | StreamLimit::DevicesOnSession(n)
            | StreamLimit::Devices(n) => n,
        }
    }

    /// Whose bound it is, as the error body says it.
    pub fn scope(self) -> &'static str {
        match self {
            StreamLimit::DeviceOnSession(_) => "device_session",
            StreamLimit::Device(_) => "device",
            StreamLimit::DevicesOnSession(_) => "devices_session",
            StreamLimit::Devices(_) => "devices",
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    all: usize,
    per_device: HashMap<Arc<str>, usize>,
    per_session: HashMap<Arc<str>, usize>,
    per_device_and_session: HashMap<(Arc<str>, Arc<str>), usize>,
}

/// The devices' open streams, counted.
#[derive(Debug)]
pub(super) struct Streams {
    limits: StreamLimits,
    /// Await-free critical sections only: a lookup and an increment, or a decrement.
    counts: Arc<Mutex<Counts>>,
}

/// One open stream of a device; dropping it (the stream ended) frees its place.
#[derive(Debug)]
pub struct StreamPermit {
    counts: Arc<Mutex<Counts>>,
    device: Arc<str>,
    /// It holds a connection: counted in the device's and all devices' totals.
    connection: bool,
    /// It reads this session's events: counted in the session's and the device's on it.
    session: Option<Arc<str>>,
}

/// Decrements `map[key]`, removing it at zero so the maps hold only open streams.
fn release<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut c = lock(&self.counts);
        if self.connection {
            c.all -= 1;
            release(&mut c.per_device, &self.device);
        }
        if let Some(session) = &self.session {
            release(&mut c.per_session, session);
            let pair = (self.device.clone(), session.clone());
            release(&mut c.per_device_and_session, &pair);
        }
    }
}

impl Streams {
    pub(super) fn new(limits: StreamLimits) -> Streams {
        Streams { limits, counts: Arc::default() }
    }

    /// A place for one more stream of `device` on `session` (an SSE stream: a connection that
    /// reads a session), or the first bound it would pass.
    pub(super) fn open(&self, device: &Arc<str>, session: &str) -> Result<StreamPermit, StreamLimit> {
        self.hold(device, true, Some(session))
    }

    /// A connection of `device` that reads no session by itself (an ACP WebSocket, a Streamable
    /// HTTP connection's own stream): counted in the device's and all devices' totals.
    pub(super) fn open_connection(&self, device: &Arc<str>) -> Result<StreamPermit, StreamLimit> {
        self.hold(device, true, None)
    }

    /// A session read over a connection already counted (a session an ACP WebSocket attached):
    /// counted in the session's bounds only.
    pub(super) fn attach(&self, device: &Arc<str>, session: &str) -> Result<StreamPermit, StreamLimit> {
        self.hold(device, false, Some(session))
    }

    fn hold(
        &self,
        device: &Arc<str>,
        connection: bool,
        session: Option<&str>,
    ) -> Result<StreamPermit, StreamLimit> {
        let session: Option<Arc<str>> = session.map(Arc::from);
        let pair = session.as_ref().map(|s| (device.clone(), s.clone()));
        let mut c = lock(&self.counts);
        let of = |n: Option<&usize>| n.copied().unwrap_or(0);
        if let Some(pair) = &pair
            && of(c.per_device_and_session.get(pair)) >= MAX_STREAMS_PER_DEVICE_AND_SESSION
        {
            return Err(StreamLimit::DeviceOnSession(MAX_STREAMS_PER_DEVICE_AND_SESSION));
        }
        if connection && of(c.per_device.get(device)) >= MAX_STREAMS_PER_DEVICE {
            return Err(StreamLimit::Device(MAX_STREAMS_PER_DEVICE));
        }
        if let Some(session) = &session
            && of(c.per_session.get(session)) >= self.limits.per_session
        {
            return Err(StreamLimit::DevicesOnSession(self.limits.per_session));
        }
        if connection && c.all >= self.limits.all_devices {
            return Err(StreamLimit::Devices(self.limits.all_devices));
        }
        if connection {
            c.all += 1;
            *c.per_device.entry(device.clone()).or_default() += 1;
        }
        if let (Some(session), Some(pair)) = (&session, pair) {
            *c.per_session.entry(session.clone()).or_default() += 1;
            *c.per_device_and_session.entry(pair).or_default() += 1;
        }
        drop(c);
        Ok(StreamPermit { counts: self.counts.clone(), device: device.clone(), connection, session })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    /// Every permit is gone: no count is left, not even a zero entry in the maps.
    fn assert_nothing_counted(streams: &Streams) {
        let c = lock(&streams.counts);
        assert_eq!(
            (c.all, c.per_device.len(), c.per_session.len(), c.per_device_and_session.len()),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn a_quarter_of_connections_and_streams_is_left_to_the_operator() {
        assert_eq!(
            StreamLimits::leaving_a_quarter(256, 64),
            StreamLimits { all_devices: 192, per_session: 48 }
        );
        assert_eq!(StreamLimits::leaving_a_quarter(3, 1), StreamLimits { all_devices: 3, per_session: 1 });
    }

    #[test]
    fn each_bound_refuses_the_stream_past_it_and_a_closed_stream_frees_its_place() {
        let streams = Streams::new(StreamLimits { all_devices: 12, per_session: 5 });
        let (a, b) = (id("dev-a"), id("dev-b"));
        let held: Vec<StreamPermit> =
            (0..2).map(|_| streams.open(&a, "s1").expect("within the device's per-session bound")).collect();
        assert_eq!(streams.open(&a, "s1").err(), Some(StreamLimit::DeviceOnSession(2)));
        let mut more: Vec<StreamPermit> =
            ["s2", "s2", "s3", "s3", "s4", "s4"].iter().map(|s| streams.open(&a, s).expect("open")).collect();
        assert_eq!(streams.open(&a, "s5").err(), Some(StreamLimit::Device(MAX_STREAMS_PER_DEVICE)));
        // Other devices fill session s1 up to the devices' share of it...
        more.extend((0..2).map(|_| streams.open(&b, "s1").expect("b")));
        more.push(streams.open(&id("dev-c"), "s1").expect("c"));
        assert_eq!(streams.open(&id("dev-d"), "s1").err(), Some(StreamLimit::DevicesOnSession(5)));
        // ...and all sessions up to the devices' share of the connections.
        more.push(streams.open(&id("dev-c"), "s9").expect("c"));
        assert_eq!(streams.open(&id("dev-d"), "s9").err(), Some(StreamLimit::Devices(12)));
        drop(held);
        assert!(streams.open(&a, "s1").is_ok(), "two places freed");
        drop(more);
        assert_nothing_counted(&streams);
    }

    #[test]
    fn a_connection_counts_in_the_totals_and_a_session_attached_over_it_in_the_sessions_bounds() {
        let streams = Streams::new(StreamLimits { all_devices: 9, per_session: 3 });
        let a = id("dev-a");
        let sockets: Vec<StreamPermit> =
            (0..MAX_STREAMS_PER_DEVICE).map(|_| streams.open_connection(&a).expect("a socket")).collect();
        assert_eq!(streams.open_connection(&a).err(), Some(StreamLimit::Device(MAX_STREAMS_PER_DEVICE)));
        assert_eq!(streams.open(&a, "s1").err(), Some(StreamLimit::Device(MAX_STREAMS_PER_DEVICE)));
        // Sessions attached over those sockets hold no connection of their own...
        let attached: Vec<StreamPermit> =
            (0..2).map(|_| streams.attach(&a, "s1").expect("attached over a socket")).collect();
        assert_eq!(streams.attach(&a, "s1").err(), Some(StreamLimit::DeviceOnSession(2)));
        // ...but take the session's places: one is left for devices on s1.
        let b = id("dev-b");
        let other = streams.open(&b, "s1").expect("the last device place on s1");
        assert_eq!(streams.attach(&id("dev-c"), "s1").err(), Some(StreamLimit::DevicesOnSession(3)));
        assert_eq!(streams.open_connection(&id("dev-c")).err(), Some(StreamLimit::Devices(9)));
        {
            let c = lock(&streams.counts);
            assert_eq!(
                (c.all, c.per_device.get("dev-a").copied(), c.per_session.get("s1").copied()),
                (9, Some(8), Some(3))
            );
        }
        drop((sockets, attached, other));
        assert_nothing_counted(&streams);
    }

    #[test]
    fn limits_say_their_scope_and_bound() {
        let all = [
            (StreamLimit::DeviceOnSession(2), "device_session"),
            (StreamLimit::Device(8), "device"),
            (StreamLimit::DevicesOnSession(5), "devices_session"),
            (StreamLimit::Devices(12), "devices"),
        ];
        for (limit, scope) in all {
            assert_eq!(limit.scope(), scope);
        }
        assert_eq!(all.map(|(l, _)| l.limit()), [2, 8, 5, 12]);
    }
}

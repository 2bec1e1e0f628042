//! The per-session event bus: ids, the replay ring, and fan-out to SSE streams
//! (`docs/protocol.md#5-event-stream`).
//!
//! Invariant: under one lock an event gets its id, enters the ring and is offered to every
//! subscriber queue; a subscriber snapshots the ring and registers under that same lock. So replay
//! and live join with no gap and no duplicate.
//!
//! Each event is serialised once into a complete SSE frame (`Bytes`), shared by the ring and every
//! stream. Offering uses `try_send`: a full queue evicts that stream instead of slowing the
//! publisher, so the agent reader never waits on a slow client.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::event::EventKind;
use crate::sync::lock;

/// Bytes kept in one session's ring, whatever `--event-ring-size` says: the count bound alone would
/// let a few huge agent updates pin gigabytes.
const RING_MAX_BYTES: usize = 64 * 1024 * 1024;
/// Silence after which a stream gets a `: heartbeat` comment.
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(15);
/// Frames a stream writer takes from its queue per write, so bursts leave in few large writes.
const WRITE_BATCH: usize = 128;

/// Ties an event to the prompt that caused it.
#[derive(Debug, Clone, Default)]
pub(crate) struct PromptTag {
    pub(crate) prompt_id: Option<String>,
    pub(crate) originator: Option<String>,
}

struct Entry {
    id: u64,
    frame: Bytes,
}

struct Subscriber {
    key: u64,
    tx: mpsc::Sender<Bytes>,
    /// Set to the last id the stream was given when it is evicted.
    evicted: Arc<AtomicU64>,
}

struct Inner {
    next_id: u64,
    ring: VecDeque<Entry>,
    ring_bytes: usize,
    subscribers: Vec<Subscriber>,
    next_key: u64,
    /// After a terminal event nothing more is published and nobody new subscribes.
    closed: bool,
    /// The current turn's envelope fields, escaped once.
    tag_json: TagJson,
}

/// Why a subscription was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SubscribeError {
    TooMany { limit: usize },
    Closed,
}

/// Counters shared by every bus of the daemon, for `/health?deep=1` and metrics.
#[derive(Debug, Default)]
pub(crate) struct BusStats {
    pub(crate) published: AtomicU64,
    pub(crate) evicted: AtomicU64,
    pub(crate) subscribers: AtomicU64,
    /// Frames queued to streams (one per stream per event).
    pub(crate) delivered: AtomicU64,
}

pub(crate) struct Bus {
    session_id: String,
    /// Everything a publish or a subscribe touches; held only for bounded, await-free work.
    inner: Mutex<Inner>,
    ring_cap: usize,
    queue_cap: usize,
    max_subscribers: usize,
    stats: Arc<BusStats>,
}

const NOT_EVICTED: u64 = u64::MAX;

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bus")
            .field("session_id", &self.session_id)
            .field("ring_cap", &self.ring_cap)
            .field("queue_cap", &self.queue_cap)
            .field("max_subscribers", &self.max_subscribers)
            .finish_non_exhaustive()
    }
}

impl Bus {
    pub(crate) fn new(
        session_id: String,
        ring_cap: usize,
        queue_cap: usize,
        max_subscribers: usize,
        stats: Arc<BusStats>,
    ) -> Arc<Bus> {
        Arc::new(Bus {
            session_id,
            inner: Mutex::new(Inner {
                next_id: 1,
                ring: VecDeque::with_capacity(ring_cap.min(1024)),
                ring_bytes: 0,
                subscribers: Vec::new(),
                next_key: 0,
                closed: false,
                tag_json: TagJson::default(),
            }),
            ring_cap,
            queue_cap,
            max_subscribers,
            stats,
        })
    }

    /// Publishes an event whose `data` is serialised here.
    pub(crate) fn publish(&self, kind: EventKind, data: &impl Serialize, tag: &PromptTag) -> Option<u64> {
        let data = serde_json::to_string(data).ok()?;
        self.publish_raw(kind, &data, tag)
    }

    /// Publishes an event whose `data` is already one line of JSON.
    pub(crate) fn publish_raw(&self, kind: EventKind, data: &str, tag: &PromptTag) -> Option<u64> {
        self.push(kind, data, tag, false)
    }

    /// Publishes a terminal event (`session_closed`, `session_died`), then ends every stream.
    pub(crate) fn publish_terminal(&self, kind: EventKind, data: &impl Serialize) -> Option<u64> {
        let data = serde_json::to_string(data).ok()?;
        self.push(kind, &data, &PromptTag::default(), true)
    }

    fn push(&self, kind: EventKind, data: &str, tag: &PromptTag, terminal: bool) -> Option<u64> {
        let kind = kind.as_str();
        // An SSE parser treats a bare CR as a line break; JSON only allows it as whitespace
        // between tokens, so replacing it with a space keeps the JSON equal and the frame whole.
        let cleaned;
        let data = if data.contains('\r') {
            cleaned = data.replace('\r', " ");
            cleaned.as_str()
        } else {
            data
        };
        // Never hold this lock across an await; everything below is bounded, synchronous work.
        let mut inner = lock(&self.inner);
        if inner.closed {
            return None;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let tag_json = inner.tag_json.get(tag);
        // Sized for the whole frame (ids, kind twice, `_meta` tail) so it is built without a
        // reallocation, and written in place: this runs once per agent update.
        let mut frame = BytesMut::with_capacity(data.len() + tag_json.len() + kind.len() * 2 + 192);
        let _ = write!(
            frame,
            "id: {id}\nevent: {kind}\ndata: {{\"id\":{id},\"v\":1,\"type\":\"{kind}\",\"data\":"
        );
        frame.extend_from_slice(data.as_bytes());
        frame.extend_from_slice(tag_json.as_bytes());
        let _ = write!(frame, ",\"_meta\":{{\"serverTimestamp\":{}}}}}\n\n", crate::clock::now_ms());
        let frame = frame.freeze();

        inner.ring_bytes += frame.len();
        inner.ring.push_back(Entry { id, frame: frame.clone() });
        while inner.ring.len() > self.ring_cap || (inner.ring_bytes > RING_MAX_BYTES && inner.ring.len() > 1)
        {
            if let Some(old) = inner.ring.pop_front() {
                inner.ring_bytes -= old.frame.len();
            }
        }

        let stats = &self.stats;
        let mut delivered = 0;
        inner.subscribers.retain(|sub| match sub.tx.try_send(frame.clone()) {
            Ok(()) => {
                delivered += 1;
                true
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                sub.evicted.store(id - 1, Ordering::Release);
                stats.evicted.fetch_add(1, Ordering::Relaxed);
                stats.subscribers.fetch_sub(1, Ordering::Relaxed);
                tracing::info!(session_id = %self.session_id, dropped_after = id - 1, "evicting a slow event stream");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                stats.subscribers.fetch_sub(1, Ordering::Relaxed);
                false
            }
        });
        stats.published.fetch_add(1, Ordering::Relaxed);
        if delivered > 0 {
            stats.delivered.fetch_add(delivered, Ordering::Relaxed);
        }
        if terminal {
            inner.closed = true;
            let n = inner.subscribers.len() as u64;
            stats.subscribers.fetch_sub(n, Ordering::Relaxed);
            // Dropping the senders ends each stream once it has drained what it was given.
            inner.subscribers.clear();
        }
        Some(id)
    }

    /// Ends every stream without an event (the tests' way to end a stream).
    #[cfg(test)]
    fn close(&self) {
        let mut inner = lock(&self.inner);
        inner.closed = true;
        let n = inner.subscribers.len() as u64;
        self.stats.subscribers.fetch_sub(n, Ordering::Relaxed);
        inner.subscribers.clear();
    }

    /// The id the last published event got (0 before any).
    pub(crate) fn last_id(&self) -> u64 {
        lock(&self.inner).next_id - 1
    }

    pub(crate) fn subscriber_count(&self) -> usize {
        lock(&self.inner).subscribers.len()
    }

    /// Registers a stream. `last_event_id` = the client's `Last-Event-ID`, if any.
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        last_event_id: Option<u64>,
    ) -> Result<Subscription, SubscribeError> {
        let (tx, rx) = mpsc::channel(self.queue_cap);
        let evicted = Arc::new(AtomicU64::new(NOT_EVICTED));
        let mut inner = lock(&self.inner);
        if inner.closed {
            return Err(SubscribeError::Closed);
        }
        if inner.subscribers.len() >= self.max_subscribers {
            return Err(SubscribeError::TooMany { limit: self.max_subscribers });
        }
        let mut replay = Vec::new();
        if let Some(after) = last_event_id {
            let earliest = inner.ring.front().map(|e| e.id);
            if let Some(earliest) = earliest.filter(|&e| e > after.saturating_add(1)) {
                replay.push(idless_frame(
                    EventKind::StateResyncRequired,
                    &json!({"reason": "ring_evicted", "lastDeliveredId": after, "earliestAvailableId": earliest}),
                ));
            }
            let start = inner.ring.partition_point(|e| e.id <= after);
            let mut count = 0u64;
            let mut last = None;
            for entry in inner.ring.range(start..) {
                replay.push(entry.frame.clone());
                count += 1;
                last = Some(entry.id);
            }
            replay.push(idless_frame(
                EventKind::ReplayComplete,
                &json!({"replayedCount": count, "lastReplayedEventId": last}),
            ));
        }
        let key = inner.next_key;
        inner.next_key += 1;
        inner.subscribers.push(Subscriber { key, tx, evicted: evicted.clone() });
        self.stats.subscribers.fetch_add(1, Ordering::Relaxed);
        drop(inner);
        Ok(Subscription { replay, rx, evicted, bus: Arc::downgrade(self), key })
    }

    fn unsubscribe(&self, key: u64) {
        let mut inner = lock(&self.inner);
        let before = inner.subscribers.len();
        inner.subscribers.retain(|s| s.key != key);
        if inner.subscribers.len() < before {
            self.stats.subscribers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// `,"promptId":..,"originatorClientId":..` of the envelope, kept for the last tag seen: a turn
/// publishes thousands of events under one tag, and escaping its ids once is enough.
#[derive(Default)]
struct TagJson {
    tag: PromptTag,
    json: String,
}

impl TagJson {
    fn get(&mut self, tag: &PromptTag) -> &str {
        if self.tag.prompt_id != tag.prompt_id || self.tag.originator != tag.originator {
            let mut json = String::with_capacity(128);
            if let Some(p) = &tag.prompt_id {
                json.push_str(",\"promptId\":");
                json.push_str(&json_string(p));
            }
            if let Some(o) = &tag.originator {
                json.push_str(",\"originatorClientId\":");
                json.push_str(&json_string(o));
            }
            *self = TagJson { tag: tag.clone(), json };
        }
        &self.json
    }
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// An id-less frame (`client_evicted`, `state_resync_required`, `replay_complete`, `stream_error`).
fn idless_frame(kind: EventKind, data: &serde_json::Value) -> Bytes {
    let kind = kind.as_str();
    let body = json!({"v": 1, "type": kind, "data": data});
    Bytes::from(format!("event: {kind}\ndata: {body}\n\n"))
}

/// A registered stream: what to replay first, then the live queue.
#[derive(Debug)]
pub struct Subscription {
    replay: Vec<Bytes>,
    rx: mpsc::Receiver<Bytes>,
    evicted: Arc<AtomicU64>,
    bus: Weak<Bus>,
    key: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(bus) = self.bus.upgrade() {
            bus.unsubscribe(self.key);
        }
    }
}

impl Subscription {
    /// The SSE body: `retry`, replay, then live frames with heartbeats, ending on eviction (after a
    /// `client_evicted` frame), on a terminal event, or when `shutdown` fires.
    pub fn into_body(
        self,
        shutdown: CancellationToken,
    ) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
        let mut first = BytesMut::from(&b"retry: 3000\n\n"[..]);
        for frame in &self.replay {
            first.extend_from_slice(frame);
        }
        let state =
            StreamState { sub: self, first: Some(first.freeze()), done: false, shutdown, batch: Vec::new() };
        futures_util::stream::unfold(state, |mut st| async move {
            if let Some(first) = st.first.take() {
                return Some((Ok(first), st));
            }
            if st.done {
                return None;
            }
            let received = tokio::select! {
                biased;
                _ = st.shutdown.cancelled() => {
                    // Hand over what is already queued (at most the queue's bound) before ending:
                    // the drain publishes each session's terminal event just before it ends the
                    // streams, and a client must not lose it.
                    st.done = true;
                    while let Ok(frame) = st.sub.rx.try_recv() {
                        st.batch.push(frame);
                    }
                    if st.batch.is_empty() {
                        return None;
                    }
                    let mut out = BytesMut::with_capacity(st.batch.iter().map(Bytes::len).sum());
                    for frame in st.batch.drain(..) {
                        out.extend_from_slice(&frame);
                    }
                    return Some((Ok(out.freeze()), st));
                }
                r = tokio::time::timeout(HEARTBEAT_INTERVAL, st.sub.rx.recv_many(&mut st.batch, WRITE_BATCH)) => r,
            };
            match received {
                Err(_) => Some((Ok(Bytes::from_static(b": heartbeat\n\n")), st)),
                Ok(0) => {
                    st.done = true;
                    let after = st.sub.evicted.load(Ordering::Acquire);
                    if after == NOT_EVICTED {
                        return None;
                    }
                    let frame = idless_frame(
                        EventKind::ClientEvicted,
                        &json!({"reason": "queue_overflow", "droppedAfter": after}),
                    );
                    Some((Ok(frame), st))
                }
                Ok(1) => {
                    let frame = st.batch.pop().unwrap_or_default();
                    Some((Ok(frame), st))
                }
                Ok(_) => {
                    let total = st.batch.iter().map(Bytes::len).sum();
                    let mut out = BytesMut::with_capacity(total);
                    for frame in st.batch.drain(..) {
                        out.extend_from_slice(&frame);
                    }
                    Some((Ok(out.freeze()), st))
                }
            }
        })
    }
}

#[derive(Debug)]
struct StreamState {
    sub: Subscription,
    first: Option<Bytes>,
    done: bool,
    shutdown: CancellationToken,
    batch: Vec<Bytes>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use EventKind::{SessionClosed, SessionUpdate, TurnComplete};
    use futures_util::StreamExt;

    fn bus(ring: usize, queue: usize, max: usize) -> Arc<Bus> {
        Bus::new("s1".into(), ring, queue, max, Arc::default())
    }

    fn ids(text: &str) -> Vec<u64> {
        text.lines().filter_map(|l| l.strip_prefix("id: ")).filter_map(|n| n.parse().ok()).collect()
    }

    async fn collect(sub: Subscription) -> String {
        let token = CancellationToken::new();
        let body = sub.into_body(token.clone());
        futures_util::pin_mut!(body);
        let mut out = String::new();
        while let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_millis(50), body.next()).await {
            out.push_str(&String::from_utf8_lossy(&chunk));
        }
        out
    }

    #[tokio::test]
    async fn envelope_has_id_type_data_and_tag() {
        let b = bus(10, 10, 10);
        let sub = b.subscribe(None).expect("subscribe");
        let tag = PromptTag { prompt_id: Some("p1".into()), originator: Some("c1".into()) };
        b.publish(TurnComplete, &json!({"stopReason": "end_turn"}), &tag);
        b.close();
        let text = collect(sub).await;
        let data = text.lines().find_map(|l| l.strip_prefix("data: ")).expect("data line");
        let v: serde_json::Value = serde_json::from_str(data).expect("json");
        assert_eq!(v["id"], 1);
        assert_eq!(v["v"], 1);
        assert_eq!(v["type"], "turn_complete");
        assert_eq!(v["data"]["stopReason"], "end_turn");
        assert_eq!(v["promptId"], "p1");
        assert_eq!(v["originatorClientId"], "c1");
        assert!(v["_meta"]["serverTimestamp"].as_u64().is_some());
        assert!(text.starts_with("retry: 3000\n\n"));
        assert!(text.contains("id: 1\nevent: turn_complete\n"));
    }

    #[tokio::test]
    async fn resume_replays_after_the_given_id_without_gap_or_duplicate() {
        let b = bus(100, 100, 10);
        for i in 0..5 {
            b.publish(SessionUpdate, &json!({"i": i}), &PromptTag::default());
        }
        let sub = b.subscribe(Some(2)).expect("subscribe");
        b.publish(SessionUpdate, &json!({"i": 5}), &PromptTag::default());
        b.close();
        let text = collect(sub).await;
        assert_eq!(ids(&text), vec![3, 4, 5, 6]);
        assert!(text.contains("\"replayedCount\":3"));
        assert!(!text.contains("state_resync_required"));
    }

    #[tokio::test]
    async fn no_header_means_live_only() {
        let b = bus(100, 100, 10);
        b.publish(SessionUpdate, &json!({}), &PromptTag::default());
        let sub = b.subscribe(None).expect("subscribe");
        b.publish(TurnComplete, &json!({}), &PromptTag::default());
        b.close();
        let text = collect(sub).await;
        assert_eq!(ids(&text), vec![2]);
        assert!(!text.contains("replay_complete"));
    }

    #[tokio::test]
    async fn evicted_ring_asks_for_resync_first() {
        let b = bus(3, 100, 10);
        for _ in 0..10 {
            b.publish(SessionUpdate, &json!({}), &PromptTag::default());
        }
        let text = collect(b.subscribe(Some(2)).expect("subscribe")).await;
        let resync = text.find("state_resync_required").expect("resync frame");
        let first_replayed = text.find("id: 8").expect("replayed 8");
        assert!(resync < first_replayed);
        assert!(text.contains("\"earliestAvailableId\":8"));
        assert!(text.contains("\"lastDeliveredId\":2"));
        assert_eq!(ids(&text), vec![8, 9, 10]);
    }

    #[tokio::test]
    async fn a_full_queue_evicts_only_that_stream() {
        let stats = Arc::new(BusStats::default());
        let b = Bus::new("s1".into(), 100, 2, 10, stats.clone());
        let slow = b.subscribe(None).expect("slow");
        let fast = b.subscribe(None).expect("fast");
        let fast_body = collect_live(fast, 5);
        let publisher = async {
            for i in 0..5 {
                b.publish(SessionUpdate, &json!({"i": i}), &PromptTag::default());
                tokio::task::yield_now().await;
            }
        };
        let (fast_text, ()) = tokio::join!(fast_body, publisher);
        assert_eq!(ids(&fast_text), vec![1, 2, 3, 4, 5]);
        let slow_text = collect(slow).await;
        assert_eq!(ids(&slow_text), vec![1, 2]);
        assert!(slow_text.contains("client_evicted"));
        assert!(slow_text.contains("\"droppedAfter\":2"));
        assert_eq!(stats.evicted.load(Ordering::Relaxed), 1);
        assert_eq!(stats.published.load(Ordering::Relaxed), 5);
    }

    async fn collect_live(sub: Subscription, want: usize) -> String {
        let body = sub.into_body(CancellationToken::new());
        futures_util::pin_mut!(body);
        let mut out = String::new();
        while ids(&out).len() < want {
            match body.next().await {
                Some(Ok(chunk)) => out.push_str(&String::from_utf8_lossy(&chunk)),
                _ => break,
            }
        }
        out
    }

    #[tokio::test]
    async fn subscriber_cap_is_enforced_and_freed_on_drop() {
        let b = bus(10, 10, 1);
        let first = b.subscribe(None).expect("first");
        assert_eq!(b.subscribe(None).err(), Some(SubscribeError::TooMany { limit: 1 }));
        drop(first);
        assert!(b.subscribe(None).is_ok());
    }

    #[tokio::test]
    async fn terminal_event_ends_streams_and_refuses_new_ones() {
        let b = bus(10, 10, 10);
        let sub = b.subscribe(None).expect("subscribe");
        b.publish_terminal(SessionClosed, &json!({"sessionId": "s1"}));
        assert!(b.publish(SessionUpdate, &json!({}), &PromptTag::default()).is_none());
        let text = collect(sub).await;
        assert!(text.contains("event: session_closed"));
        assert_eq!(b.subscribe(None).err(), Some(SubscribeError::Closed));
    }

    #[tokio::test(start_paused = true)]
    async fn silence_brings_a_heartbeat_comment() {
        let b = bus(10, 10, 10);
        let body = b.subscribe(None).expect("subscribe").into_body(CancellationToken::new());
        futures_util::pin_mut!(body);
        let first = body.next().await.and_then(Result::ok).expect("retry frame");
        assert_eq!(&first[..], b"retry: 3000\n\n");
        let start = tokio::time::Instant::now();
        let beat = body.next().await.and_then(Result::ok).expect("heartbeat");
        assert_eq!(&beat[..], b": heartbeat\n\n");
        assert_eq!(start.elapsed(), HEARTBEAT_INTERVAL);
    }

    #[tokio::test]
    async fn shutdown_ends_the_stream() {
        let b = bus(10, 10, 10);
        let token = CancellationToken::new();
        let body = b.subscribe(None).expect("subscribe").into_body(token.clone());
        futures_util::pin_mut!(body);
        assert!(body.next().await.is_some());
        token.cancel();
        assert!(body.next().await.is_none());
    }

    #[tokio::test]
    async fn shutdown_still_hands_over_what_was_queued() {
        let b = bus(10, 10, 10);
        let token = CancellationToken::new();
        let body = b.subscribe(None).expect("subscribe").into_body(token.clone());
        futures_util::pin_mut!(body);
        assert!(body.next().await.is_some()); // `retry`
        b.publish(TurnComplete, &json!({}), &PromptTag::default());
        b.publish_terminal(SessionClosed, &json!({"sessionId": "s1"}));
        token.cancel();
        let rest = body.next().await.and_then(Result::ok).expect("the queued frames");
        assert_eq!(ids(&String::from_utf8_lossy(&rest)), vec![1, 2]);
        assert!(body.next().await.is_none());
    }

    #[test]
    fn carriage_returns_cannot_split_a_frame() {
        let b = bus(10, 10, 10);
        b.publish_raw(SessionUpdate, "{\"a\":\r1}", &PromptTag::default());
        let inner = b.inner.lock().expect("lock");
        let frame = &inner.ring[0].frame;
        assert!(!frame.contains(&b'\r'));
    }
}

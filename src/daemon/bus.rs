//! The per-session event bus: ids, the replay ring, and the streams that read it
//! (`docs/protocol.md#5-event-stream`).
//!
//! The ring is the only buffer. Each event is serialised once into a complete SSE frame (`Bytes`)
//! and kept in the session's ring; a stream is a cursor into that ring (the id of the last event it
//! was given), not a queue. Invariant: under one lock an event gets its id, enters the ring, and
//! the streams waiting for it are woken (one [`Notify`]: the publisher never visits streams one by
//! one and never waits for any). A subscriber's cursor is set under that same lock, so a replay (a
//! cursor starting at `Last-Event-ID`) and the live events after it join with no gap and no
//! duplicate.
//!
//! A woken stream takes everything from its cursor to the head in one batch of at most
//! [`BATCH_BYTES`], and takes the next batch only once its connection has written the last one, so
//! a burst leaves in few large writes and a stream never runs ahead of its socket. A burst's
//! frames lie end to end in shared blocks, so a batch within one block is a slice of it, uncopied
//! ([`batch_extent`]). What a stream holds is its cursor, a waker and that one batch: memory for
//! streams is the ring plus a small constant per stream, whatever the streams' speed or their
//! replays.
//!
//! A stream that re-frames events (an ACP connection's lane) takes marked batches
//! ([`Subscription::into_marked`]): the same bytes, with each frame's end, id and [`Shape`] (where
//! its parts lie, noted as the frame was written), so no event is read back out of its bytes once
//! per connection.
//!
//! The ring keeps the newest `--event-ring-size` events (what a `Last-Event-ID` replay may start
//! from), and beyond them whatever a live stream has not taken yet: a stream that is behind, however
//! far in events, holds the events it still needs, up to the ring's byte cap ([`RING_MAX_BYTES`]).
//! The ring knows its slowest stream without visiting any (its streams' cursors, counted in an
//! ordered map under the lock, moved once per batch, not per event), so it drops an old event as
//! soon as every stream has taken it, and gives back the room a lagging stream made it grow to once
//! that stream has caught up or gone.
//!
//! A stream falls behind only when the byte cap drops events it still needs (`ring_overrun`) or its
//! live lag passes `--subscriber-queue` if one is set (`lag_limit`); it then gets a terminal
//! `client_evicted` and ends.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::task::AtomicWaker;
use futures_util::{Stream, StreamExt};
use serde::Serialize;
use serde_json::json;
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::frames::{Mark, Marked, Shape};
use crate::event::EventKind;
use crate::store::Store;
use crate::sync::lock;

/// Bytes kept in one session's ring, whatever `--event-ring-size` says and however far its streams
/// lag: the count bound alone would let a few huge agent updates pin gigabytes, and a stream that is
/// behind holds events only up to this. It is the budget a stream's lag is measured against when no
/// `--subscriber-queue` is set: at ~350 bytes an update, about 190 000 updates, twice the largest
/// burst the benchmark sends.
pub(crate) const RING_MAX_BYTES: usize = 64 * 1024 * 1024;
/// Silence after which a stream gets a `: heartbeat` comment.
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(15);
/// Most bytes of frames in one batch, one write (a single larger frame goes out alone).
/// 64 KiB is the largest segment loopback TCP sends at once and the size of one read of the
/// agent's pipe, so a burst the reader published from one read leaves in about one write.
const BATCH_BYTES: usize = 64 * 1024;
/// Most bytes of one block the frames of a burst are written into (a larger frame gets a block of
/// its own). A block is freed once every frame in it is, so beyond the bytes of its frames (what
/// [`RING_MAX_BYTES`] counts) a ring holds at most one block's worth of frames it already dropped.
const FRAME_BLOCK: usize = 64 * 1024;
/// Bytes of frames in one block from which a stream's batch ends at that block's end and goes out
/// uncopied, rather than copied together with the next block's frames (see [`batch_extent`]). A
/// 16 KiB copy costs about what one more write does; below it, fewer writes are worth the copy.
const UNCOPIED_MIN: usize = 16 * 1024;
/// The first frame of every stream: the browser's reconnection delay.
pub(super) const RETRY: &[u8] = b"retry: 3000\n\n";
const HEARTBEAT: &[u8] = b": heartbeat\n\n";

/// Ties an event to the prompt that caused it.
#[derive(Debug, Clone, Default)]
pub(crate) struct PromptTag {
    pub(crate) prompt_id: Option<String>,
    pub(crate) originator: Option<String>,
}

/// What a bus may hold, from the command line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// `--event-ring-size`: events kept for replay (and more while a stream still needs them).
    pub(crate) ring_events: usize,
    /// [`RING_MAX_BYTES`] (smaller in unit tests, so they can reach it).
    pub(crate) ring_bytes: usize,
    /// `--subscriber-queue`: live events a stream may lag behind the newest before it is evicted;
    /// `None`: as far as the ring's bytes hold.
    pub(crate) lag_limit: Option<usize>,
    /// `--max-subscribers`.
    pub(crate) max_subscribers: usize,
}

struct Inner {
    /// The id the next event gets; ids start at 1.
    next_id: u64,
    /// The newest events, oldest first. Their ids are consecutive and the last is `next_id - 1`.
    /// At least the newest `ring_events` (fewer under the byte cap), and every event after the
    /// slowest live cursor.
    ring: VecDeque<Stored>,
    ring_bytes: usize,
    /// The live streams' cursors, each with how many streams are there: the first is the slowest.
    /// Moved once per batch a stream takes; a cursor the byte cap has dropped events after is
    /// forgotten at once (that stream is evicted when it next looks), so it holds nothing.
    cursors: BTreeMap<u64, u32>,
    /// After a terminal event nothing more is published and nobody new subscribes.
    closed: bool,
    /// The current turn's envelope fields, escaped once.
    tag_json: TagJson,
}

/// An event in the ring: its frame, and where its parts lie in it (`None` for a frame the ring
/// started with, read back from the history: a marked stream reads those from their bytes).
///
/// The frame is `block[start..end]`: the block its burst was written into (see [`FRAME_BLOCK`]),
/// shared by the burst's frames, which lie in it end to end in id order. Keeping the block, not
/// only the frame, lets a stream hand several of them to its connection as one slice of it,
/// uncopied ([`Subscription::take`]). A frame read back from the history is a block of its own.
#[derive(Debug)]
struct Stored {
    block: Bytes,
    start: usize,
    end: usize,
    shape: Option<Shape>,
}

impl Stored {
    fn alone(frame: Bytes, shape: Option<Shape>) -> Stored {
        Stored { start: 0, end: frame.len(), block: frame, shape }
    }

    fn len(&self) -> usize {
        self.end - self.start
    }

    fn bytes(&self) -> &[u8] {
        &self.block[self.start..self.end]
    }

    /// Whether `next` is the frame written right after this one, in the same block.
    fn followed_by(&self, next: &Stored) -> bool {
        self.block.as_ptr() == next.block.as_ptr()
            && self.block.len() == next.block.len()
            && self.end == next.start
    }
}

impl Inner {
    fn head(&self) -> u64 {
        self.next_id - 1
    }

    /// The id of the oldest event in the ring (`head + 1` when it is empty).
    fn front(&self) -> u64 {
        self.next_id - self.ring.len() as u64
    }

    /// The oldest id a `Last-Event-ID` replay starts from: among the newest `ring_events`, what the
    /// ring advertises, even while it holds older events for a stream that lags (those are that
    /// stream's, and a reconnecting client must not be able to pin them).
    fn replay_front(&self, ring_events: usize) -> u64 {
        self.front().max(self.next_id.saturating_sub(ring_events as u64))
    }

    /// The first id some live stream has not taken (`next_id` when none lags).
    fn needed_from(&self) -> u64 {
        self.cursors.first_key_value().map_or(self.next_id, |(cursor, _)| cursor + 1)
    }

    /// Drops the oldest event; returns its bytes.
    fn pop_front(&mut self) -> usize {
        let bytes = self.ring.pop_front().map_or(0, |old| old.len());
        self.ring_bytes -= bytes;
        bytes
    }

    /// Drops the events beyond the newest `ring_events` that every live stream has taken; returns
    /// their bytes.
    fn trim_taken(&mut self, ring_events: usize) -> usize {
        let needed = self.needed_from();
        let mut dropped = 0;
        while self.ring.len() > ring_events && self.front() < needed {
            dropped += self.pop_front();
        }
        dropped
    }

    /// Forgets the cursors the ring no longer reaches (the byte cap dropped events after them):
    /// those streams are evicted when they next look, and meanwhile hold nothing back.
    fn forget_overrun(&mut self) {
        let front = self.front();
        while let Some(slowest) = self.cursors.first_entry()
            && *slowest.key() + 1 < front
        {
            slowest.remove();
        }
    }

    fn add_cursor(&mut self, cursor: u64) {
        *self.cursors.entry(cursor).or_insert(0) += 1;
    }

    /// Takes one stream off `cursor` (nothing if the byte cap already forgot it).
    fn remove_cursor(&mut self, cursor: u64) {
        if let std::collections::btree_map::Entry::Occupied(mut at) = self.cursors.entry(cursor) {
            if *at.get() > 1 {
                *at.get_mut() -= 1;
            } else {
                at.remove();
            }
        }
    }

    /// Gives back the room a lagging stream made the ring grow to, once the ring is back to its
    /// count and its slowest stream is within half of it. The hysteresis: the ring grows again only
    /// when a stream lags past the whole count, so a stream hovering at the edge costs no copying
    /// back and forth. With no stream behind, the ring's capacity is what a ring of `ring_events`
    /// grows to anyway (under twice its count), so an idle session holds no more than before.
    fn settle(&mut self, ring_events: usize) {
        if self.ring.capacity() >= ring_events.saturating_mul(2)
            && self.ring.len() <= ring_events
            && self.next_id - self.needed_from() <= (ring_events / 2) as u64
        {
            self.ring.shrink_to(ring_events);
        }
    }
}

/// What one publish has done so far, while its frames enter the ring.
struct Burst {
    count: u64,
    /// Bytes of the frames that entered the ring, and of those it dropped.
    added: usize,
    dropped: usize,
    /// The first id some live stream has not taken.
    needed: u64,
    /// The frames for the history, when the bus has one.
    recorded: Vec<Bytes>,
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
    /// Events handed to streams (one per stream per event).
    pub(crate) delivered: AtomicU64,
    /// `slow_client_warning` frames sent.
    pub(crate) warnings: AtomicU64,
    /// Bytes held by every ring together.
    pub(crate) ring_bytes: AtomicU64,
}

pub(crate) struct Bus {
    session_id: String,
    /// Everything a publish or a subscribe touches; held only for bounded, await-free work.
    inner: Mutex<Inner>,
    /// Woken on every publish; streams with nothing left to send wait on it.
    published: Arc<Notify>,
    /// Open streams (counted here, not under `inner`: a stream's drop needs no lock).
    subscribers: AtomicUsize,
    limits: Limits,
    stats: Arc<BusStats>,
    /// Where each event's frame is handed for the session's history (`None` when nothing is
    /// recorded): one non-blocking hand-off per publish (a burst: refcounts, no copies), under
    /// the lock, so the history gets the ids in order.
    history: Option<History>,
}

/// The store a bus records into, and the session id it records under.
pub(crate) struct History {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) session_id: Arc<str>,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bus")
            .field("session_id", &self.session_id)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let held = lock(&self.inner).ring_bytes as u64;
        self.stats.ring_bytes.fetch_sub(held, Ordering::Relaxed);
    }
}

impl Bus {
    #[cfg(test)]
    pub(crate) fn new(session_id: String, limits: Limits, stats: Arc<BusStats>) -> Arc<Bus> {
        Bus::with_history(session_id, limits, stats, None, 0, Vec::new())
    }

    /// A bus whose events are recorded in `history`, whose first event gets id `after_id + 1`, and
    /// whose ring starts with `recent` (the consecutive frames ending at `after_id`, oldest first:
    /// a resumed session's newest recorded events, so a client's `Last-Event-ID` still replays).
    pub(crate) fn with_history(
        session_id: String,
        limits: Limits,
        stats: Arc<BusStats>,
        history: Option<History>,
        after_id: u64,
        recent: Vec<Bytes>,
    ) -> Arc<Bus> {
        // The newest of `recent` that fit the ring's bounds; its ids stay consecutive up to `after_id`.
        // Grown by doubling from here, a ring of `ring_events` stays under twice its count (see
        // `Inner::settle`).
        let mut ring = VecDeque::with_capacity(limits.ring_events.min(1024));
        let mut ring_bytes = 0;
        for frame in recent.into_iter().rev() {
            if ring.len() >= limits.ring_events.min(after_id as usize)
                || ring_bytes + frame.len() > limits.ring_bytes
            {
                break;
            }
            ring_bytes += frame.len();
            // Read back from the history: a marked stream reads these few from their bytes.
            ring.push_front(Stored::alone(frame, None));
        }
        stats.ring_bytes.fetch_add(ring_bytes as u64, Ordering::Relaxed);
        Arc::new(Bus {
            session_id,
            inner: Mutex::new(Inner {
                next_id: after_id + 1,
                ring,
                ring_bytes,
                cursors: BTreeMap::new(),
                closed: false,
                tag_json: TagJson::default(),
            }),
            published: Arc::new(Notify::new()),
            subscribers: AtomicUsize::new(0),
            limits,
            stats,
            history,
        })
    }

    /// Publishes an event whose `data` is serialised here.
    pub(crate) fn publish(&self, kind: EventKind, data: &impl Serialize, tag: &PromptTag) -> Option<u64> {
        let data = serde_json::to_string(data).ok()?;
        self.publish_raw(kind, &data, tag)
    }

    /// Publishes an event whose `data` is already one line of JSON.
    pub(crate) fn publish_raw(&self, kind: EventKind, data: &str, tag: &PromptTag) -> Option<u64> {
        self.push(kind, [data], tag, false)
    }

    /// Publishes events of one kind, each `data` already one line of JSON, in order: a burst of
    /// agent updates. One lock and one wake-up for all of them, so the streams find the burst whole.
    /// Returns the last id.
    pub(crate) fn publish_raw_many(
        &self,
        kind: EventKind,
        data: impl IntoIterator<Item: AsRef<[u8]>, IntoIter: Clone>,
        tag: &PromptTag,
    ) -> Option<u64> {
        self.push(kind, data, tag, false)
    }

    /// Publishes a terminal event (`session_closed`, `session_died`); every stream ends once it has
    /// delivered it.
    pub(crate) fn publish_terminal(&self, kind: EventKind, data: &impl Serialize) -> Option<u64> {
        let data = serde_json::to_string(data).ok()?;
        self.push(kind, [data.as_str()], &PromptTag::default(), true)
    }

    fn push(
        &self,
        kind: EventKind,
        events: impl IntoIterator<Item: AsRef<[u8]>, IntoIter: Clone>,
        tag: &PromptTag,
        terminal: bool,
    ) -> Option<u64> {
        // One timestamp for a burst (the time the daemon published it), formatted once.
        let mut tail = BytesMut::with_capacity(48);
        tail.extend_from_slice(b",\"_meta\":{\"serverTimestamp\":");
        push_u64(&mut tail, crate::clock::now_ms());
        tail.extend_from_slice(b"}}\n\n");
        // Never hold this lock across an await; everything below is bounded, synchronous work.
        let mut inner = lock(&self.inner);
        if inner.closed {
            return None;
        }
        let inner = &mut *inner;
        // Out of `inner` for the burst (an empty one costs nothing to leave behind), so the ring's
        // methods below can borrow all of `inner`.
        let mut tags = std::mem::take(&mut inner.tag_json);
        let tag_json = tags.get(tag);
        let first_id = inner.next_id;
        let events = events.into_iter();
        let mut burst = Burst {
            count: 0,
            added: 0,
            dropped: 0,
            // No cursor moves while the lock is held: the slowest is looked up once per burst.
            needed: inner.needed_from(),
            recorded: Vec::with_capacity(if self.history.is_some() { events.size_hint().0 } else { 0 }),
        };
        // The burst's frames are written into shared blocks (see `FRAME_BLOCK`), sized from what
        // is left of the burst so a lone event takes no more than its own frame. A block enters
        // the ring once it is written: its frames are slices of it.
        let mut left: usize =
            events.clone().map(|data| frame_room(data.as_ref(), kind, tag_json, &tail)).sum();
        let mut block = BytesMut::new();
        // The frames written into `block` that have not entered the ring: where each lies, and
        // its shape. At most a block's worth (`FRAME_BLOCK` over the smallest frame).
        let mut written: Vec<(usize, usize, Option<Shape>)> = Vec::new();
        for data in events {
            let data = data.as_ref();
            let room = frame_room(data, kind, tag_json, &tail);
            if let Some(size) = new_block(block.capacity() - block.len(), room, left) {
                let full = std::mem::replace(&mut block, BytesMut::with_capacity(size));
                self.enter(inner, full.freeze(), &mut written, &mut burst);
            }
            left = left.saturating_sub(room);
            let id = inner.next_id + written.len() as u64;
            let (start, shape) = frame_into(&mut block, id, kind, data, tag_json, &tail);
            written.push((start, block.len(), shape));
        }
        self.enter(inner, block.freeze(), &mut written, &mut burst);
        let Burst { count, added, dropped, recorded, .. } = burst;
        inner.settle(self.limits.ring_events);
        inner.tag_json = tags;
        if count == 0 {
            return None;
        }
        if let Some(h) = &self.history {
            // Still under the lock, so the history gets each session's bursts in id order.
            h.store.append_events(&h.session_id, first_id, recorded);
        }
        if terminal {
            inner.closed = true;
        }
        let stats = &self.stats;
        stats.published.fetch_add(count, Ordering::Relaxed);
        if added != dropped {
            stats.ring_bytes.fetch_add(added as u64, Ordering::Relaxed);
            stats.ring_bytes.fetch_sub(dropped as u64, Ordering::Relaxed);
        }
        // Still under the lock: a stream that read the ring before this push has its wake-up
        // registered (see `EventStream::poll_next`), one that reads after sees the events.
        self.published.notify_waiters();
        Some(inner.next_id - 1)
    }

    /// Puts the frames just written into `block` into the ring, in id order, dropping what the
    /// ring's bounds say must go as each enters.
    fn enter(
        &self,
        inner: &mut Inner,
        block: Bytes,
        written: &mut Vec<(usize, usize, Option<Shape>)>,
        burst: &mut Burst,
    ) {
        let ring_events = self.limits.ring_events;
        for (start, end, shape) in written.drain(..) {
            if self.history.is_some() {
                burst.recorded.push(block.slice(start..end));
            }
            inner.next_id += 1;
            burst.count += 1;
            burst.added += end - start;
            inner.ring_bytes += end - start;
            inner.ring.push_back(Stored { block: block.clone(), start, end, shape });
            // Beyond the replay count, an event goes once every live stream has taken it: a stream
            // that keeps pace, however far behind the burst it reads, loses nothing.
            while inner.ring.len() > ring_events && inner.front() < burst.needed {
                burst.dropped += inner.pop_front();
            }
            // Past the byte cap the oldest go even if a stream still needs them (that stream is
            // evicted, `ring_overrun`); the newest event always stays, however large. Then the
            // events only an overrun stream held go too.
            if inner.ring_bytes > self.limits.ring_bytes && inner.ring.len() > 1 {
                while inner.ring_bytes > self.limits.ring_bytes && inner.ring.len() > 1 {
                    burst.dropped += inner.pop_front();
                }
                inner.forget_overrun();
                burst.needed = inner.needed_from();
                burst.dropped += inner.trim_taken(ring_events);
            }
        }
    }

    /// Moves a stream's cursor from `from` to `to` (`None`: the stream is gone), then drops what
    /// no stream needs any more beyond the replay count and gives back the room it took. Only the
    /// slowest stream's move frees anything; the others cost a map update per batch.
    fn release(&self, inner: &mut Inner, from: u64, to: Option<u64>) {
        inner.remove_cursor(from);
        if let Some(to) = to {
            inner.add_cursor(to);
        }
        let ring_events = self.limits.ring_events;
        if inner.ring.len() > ring_events || inner.ring.capacity() >= ring_events.saturating_mul(2) {
            let dropped = inner.trim_taken(ring_events);
            inner.settle(ring_events);
            self.stats.ring_bytes.fetch_sub(dropped as u64, Ordering::Relaxed);
        }
    }

    /// How many live events a stream may lag before it is evicted: `--subscriber-queue` if set,
    /// and never more than the ring's byte cap holds at its events' current mean size (a stream
    /// lagging further is overrun). What `slow_client_warning`'s `limit` says.
    fn lag_room(&self, inner: &Inner) -> u64 {
        let held = inner.ring.len() as u64;
        let by_bytes = match inner.ring_bytes as u64 {
            0 => u64::MAX,
            bytes => (self.limits.ring_bytes as u64).saturating_mul(held) / bytes,
        };
        self.limits.lag_limit.map_or(by_bytes, |limit| by_bytes.min(limit as u64))
    }

    /// Ends every stream once it has delivered what the ring holds (the tests' way to end them).
    #[cfg(test)]
    fn close(&self) {
        lock(&self.inner).closed = true;
        self.published.notify_waiters();
    }

    /// The id the last published event got (0 before any).
    pub(crate) fn last_id(&self) -> u64 {
        lock(&self.inner).head()
    }

    pub(crate) fn subscriber_count(&self) -> usize {
        self.subscribers.load(Ordering::Relaxed)
    }

    /// Registers a stream. `last_event_id` = the client's `Last-Event-ID`, if any: the stream then
    /// starts with every event after it among the newest `--event-ring-size` the ring still holds.
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        last_event_id: Option<u64>,
    ) -> Result<Subscription, SubscribeError> {
        let mut inner = lock(&self.inner);
        if inner.closed {
            return Err(SubscribeError::Closed);
        }
        // Increments happen only under `inner`, so two subscribers cannot both take the last slot.
        if self.subscribers.load(Ordering::Relaxed) >= self.limits.max_subscribers {
            return Err(SubscribeError::TooMany { limit: self.limits.max_subscribers });
        }
        self.subscribers.fetch_add(1, Ordering::Relaxed);
        self.stats.subscribers.fetch_add(1, Ordering::Relaxed);
        let head = inner.head();
        let front = inner.replay_front(self.limits.ring_events);
        let (cursor, resync) = match last_event_id {
            None => (head, None),
            // A resume point beyond the newest event replays nothing and misses nothing.
            Some(after) if after.min(head) + 1 < front => (front - 1, Some(after)),
            Some(after) => (after.min(head), None),
        };
        // Set under the lock that publishes: the replay and the live events join with no gap.
        inner.add_cursor(cursor);
        drop(inner);
        let mut preamble = BytesMut::from(RETRY);
        if let Some(after) = resync {
            preamble.extend_from_slice(&idless_frame(
                EventKind::StateResyncRequired,
                &json!({"reason": "ring_evicted", "lastDeliveredId": after, "earliestAvailableId": front}),
            ));
        }
        let replay = last_event_id.map(|_| Replay { until: head, count: head - cursor });
        Ok(Subscription {
            bus: self.clone(),
            cursor,
            tracked: true,
            preamble: Some(preamble.freeze()),
            replay,
            warning: LagWarning::default(),
            marked: false,
        })
    }
}

/// `,"promptId":..,"originatorClientId":..` of the envelope, kept for the last tag seen: a turn
/// publishes thousands of events under one tag, and escaping its ids once is enough.
#[derive(Default)]
pub(super) struct TagJson {
    tag: PromptTag,
    json: Tag,
}

/// A tag's JSON, and where its two strings lie in it (`(0, 0)`: absent).
#[derive(Default)]
pub(super) struct Tag {
    json: String,
    prompt: (u32, u32),
    originator: (u32, u32),
}

impl TagJson {
    pub(super) fn get(&mut self, tag: &PromptTag) -> &Tag {
        if self.tag.prompt_id != tag.prompt_id || self.tag.originator != tag.originator {
            let mut json = String::with_capacity(128);
            let mut string = |key: &str, value: &Option<String>| {
                let Some(value) = value else { return (0, 0) };
                json.push_str(key);
                let start = json.len();
                json.push_str(&json_string(value));
                (start as u32, json.len() as u32)
            };
            let prompt = string(",\"promptId\":", &tag.prompt_id);
            let originator = string(",\"originatorClientId\":", &tag.originator);
            *self = TagJson { tag: tag.clone(), json: Tag { json, prompt, originator } };
        }
        &self.json
    }
}

/// [`frame_into`] a block of its own.
#[cfg(test)]
pub(super) fn frame(id: u64, event: EventKind, data: &str, tag: &Tag, tail: &[u8]) -> (Bytes, Option<Shape>) {
    let mut block = BytesMut::with_capacity(frame_room(data.as_bytes(), event, tag, tail));
    let (_, shape) = frame_into(&mut block, id, event, data.as_bytes(), tag, tail);
    (block.freeze(), shape)
}

/// The size of the block to write the next frame into, which needs `room`, when the current block
/// has only `spare` (`None`: it fits there). `left` is the room of the burst's frames not yet
/// written, this one included: a block holds up to [`FRAME_BLOCK`] of them, never more than they
/// need, and a frame larger than that alone.
fn new_block(spare: usize, room: usize, left: usize) -> Option<usize> {
    (spare < room).then(|| room.max(left.min(FRAME_BLOCK)))
}

/// The bytes an event's frame takes at most: its data, tag and tail, the kind twice, and the rest
/// of the frame with both ids at their widest (89 bytes).
fn frame_room(data: &[u8], event: EventKind, tag: &Tag, tail: &[u8]) -> usize {
    data.len() + tag.json.len() + event.as_str().len() * 2 + tail.len() + 96
}

/// One event's SSE frame: `id`, `event`, and the envelope on one `data:` line, ending with `tail`
/// (`_meta` and the blank line), and where its parts lie in it. Written by hand (no `format!`):
/// this runs once per agent update, and the formatting machinery was a tenth of the daemon's time
/// in `perf`.
///
/// Appended to the block `f` (after the burst's frames before it); returns where it starts there.
/// The frames of a burst share their blocks' allocations (`Bus::push` sizes them with
/// [`new_block`], so a frame finds its room there; a block without it would grow), a reference
/// count each, instead of an allocation per frame and another for the reference count the store's
/// copy adds.
pub(super) fn frame_into(
    f: &mut BytesMut,
    id: u64,
    event: EventKind,
    data: &[u8],
    tag: &Tag,
    tail: &[u8],
) -> (usize, Option<Shape>) {
    let kind = event.as_str();
    let tag_json = &tag.json;
    let base = f.len();
    f.extend_from_slice(b"id: ");
    push_u64(f, id);
    f.extend_from_slice(b"\nevent: ");
    f.extend_from_slice(kind.as_bytes());
    f.extend_from_slice(b"\ndata: {\"id\":");
    push_u64(f, id);
    f.extend_from_slice(b",\"v\":1,\"type\":\"");
    f.extend_from_slice(kind.as_bytes());
    f.extend_from_slice(b"\",\"data\":");
    // An SSE parser treats a bare CR as a line break; JSON only allows it as whitespace between
    // tokens, so replacing it with a space keeps the JSON equal and the frame whole.
    let at_data = f.len();
    f.extend_from_slice(data);
    if memchr::memchr(b'\r', data).is_some() {
        f[at_data..].iter_mut().filter(|b| **b == b'\r').for_each(|b| *b = b' ');
    }
    // Offsets below are the frame's own.
    let (start, end) = (at_data - base, f.len() - base);
    f.extend_from_slice(tag_json.as_bytes());
    f.extend_from_slice(tail);
    // A frame past 4 GiB (never: an agent's line is bounded far below) has no shape and is read
    // back from its bytes.
    let at = |n: usize| u32::try_from(n).ok();
    let within = |(from, to): (u32, u32)| -> Option<(u32, u32)> {
        if (from, to) == (0, 0) {
            Some((0, 0))
        } else {
            Some((at(end + from as usize)?, at(end + to as usize)?))
        }
    };
    let shape = (|| {
        Some(Shape {
            kind,
            data: (at(start)?, at(end)?),
            prompt: within(tag.prompt)?,
            originator: within(tag.originator)?,
        })
    })();
    (base, shape)
}

/// How many of the frames a stream has not taken (`available`, oldest first) its next batch holds,
/// and, when they lie end to end in one block, that batch as one slice of it (`None`: the batch is
/// copied). A batch holds at most [`BATCH_BYTES`] unless its first frame alone is larger. It ends
/// where its first frame's block does when that part is at least [`UNCOPIED_MIN`]: one write of
/// it uncopied rather than a copy that reaches into the next block.
fn batch_extent<'a>(mut available: impl Iterator<Item = &'a Stored>) -> (usize, Option<Bytes>) {
    let Some(first) = available.next() else { return (0, None) };
    let (mut count, mut bytes) = (1usize, first.len());
    // The frames from the first that follow each other in its block: how many, their bytes, and
    // the last of them.
    let (mut joined, mut joined_bytes, mut last) = (1usize, first.len(), first);
    for stored in available {
        if bytes + stored.len() > BATCH_BYTES {
            break;
        }
        if joined == count && last.followed_by(stored) {
            joined += 1;
            joined_bytes += stored.len();
            last = stored;
        }
        count += 1;
        bytes += stored.len();
    }
    if joined == count || joined_bytes >= UNCOPIED_MIN {
        return (joined, Some(first.block.slice(first.start..last.end)));
    }
    (count, None)
}

/// `n` in decimal.
fn push_u64(out: &mut BytesMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// An id-less frame (`client_evicted`, `slow_client_warning`, `state_resync_required`,
/// `replay_complete`).
pub(super) fn idless_frame(kind: EventKind, data: &serde_json::Value) -> Bytes {
    let kind = kind.as_str();
    let body = json!({"v": 1, "type": kind, "data": data});
    Bytes::from(format!("event: {kind}\ndata: {body}\n\n"))
}

/// Why a stream was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Eviction {
    /// The ring's byte cap dropped events the stream still needed.
    RingOverrun,
    /// Its live lag passed `--subscriber-queue`; what it missed is still in the ring.
    LagLimit,
}

impl Eviction {
    fn as_str(self) -> &'static str {
        match self {
            Eviction::RingOverrun => "ring_overrun",
            Eviction::LagLimit => "lag_limit",
        }
    }
}

/// `slow_client_warning`'s hysteresis, qwen serve's: warn once when the lag reaches 75% of what the
/// stream may lag, and again only after it has been back down to 37.5% or less.
#[derive(Debug, Default)]
struct LagWarning {
    /// Warned, and the lag has not come back down since.
    warned: bool,
}

impl LagWarning {
    /// Whether a stream `lag` events behind, of `limit`, is to be warned now.
    fn check(&mut self, lag: u64, limit: u64) -> bool {
        if self.warned {
            if lag.saturating_mul(8) <= limit.saturating_mul(3) {
                self.warned = false;
            }
            false
        } else if lag > 0 && lag.saturating_mul(4) >= limit.saturating_mul(3) {
            self.warned = true;
            true
        } else {
            false
        }
    }
}

/// A replay in progress: it ends, with `replay_complete`, when the cursor reaches `until`.
#[derive(Debug, Clone, Copy)]
struct Replay {
    until: u64,
    count: u64,
}

/// What a stream takes from the ring in one go.
#[derive(Debug)]
enum Take {
    /// Frames to write (marked if the stream is).
    Batch(Marked),
    /// Nothing new.
    Idle,
    /// The stream is over, after this last frame (an eviction) if any.
    End(Option<Bytes>),
}

/// A registered stream: its cursor into the session's ring. Becomes the SSE body with
/// [`Subscription::into_body`].
#[derive(Debug)]
pub struct Subscription {
    bus: Arc<Bus>,
    /// The id of the last event this stream was given.
    cursor: u64,
    /// Its cursor is among the ring's (`Inner::cursors`): until the stream ends or is dropped.
    tracked: bool,
    /// `retry:`, then `state_resync_required` when the resume point has left the ring.
    preamble: Option<Bytes>,
    replay: Option<Replay>,
    warning: LagWarning,
    /// Its batches carry their frames' [`Mark`]s ([`Subscription::into_marked`]).
    marked: bool,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.untrack();
        self.bus.subscribers.fetch_sub(1, Ordering::Relaxed);
        self.bus.stats.subscribers.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Subscription {
    /// The id of the last event this stream was given (where a new subscription starts: the
    /// newest event, or the resume point).
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// Takes the stream's cursor off the ring's, so the ring holds nothing more for it.
    fn untrack(&mut self) {
        if self.tracked {
            let bus = &*self.bus;
            let mut inner = lock(&bus.inner);
            bus.release(&mut inner, self.cursor, None);
            self.tracked = false;
        }
    }

    /// The frames after the cursor, up to the head (and no further than `stop_at`), at most
    /// [`BATCH_BYTES`] of them unless the first alone is larger; or why the stream ends.
    fn take(&mut self, stop_at: Option<u64>) -> Take {
        let bus = &*self.bus;
        let mut inner = lock(&bus.inner);
        let head = inner.head();
        let front = inner.front();
        // Live lag: events published since the replay point (or since the stream opened) that
        // this stream has not been given. A replay does not count against the lag limit.
        let live_lag = head - self.cursor.max(self.replay.map_or(0, |r| r.until));
        let eviction = if self.cursor < head && self.cursor + 1 < front {
            Some(Eviction::RingOverrun)
        } else if bus.limits.lag_limit.is_some_and(|limit| live_lag > limit as u64) {
            Some(Eviction::LagLimit)
        } else {
            None
        };
        if let Some(reason) = eviction {
            // Where a resume would start: what `subscribe` replays from.
            let resume_from = inner.replay_front(bus.limits.ring_events);
            bus.release(&mut inner, self.cursor, None);
            self.tracked = false;
            drop(inner);
            return Take::End(Some(self.evict(reason, head, resume_from)));
        }
        let limit = bus.lag_room(&inner);
        let warning = self.warning.check(live_lag, limit).then(|| {
            bus.stats.warnings.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(session_id = %bus.session_id, lag = live_lag, limit, "slow event stream");
            idless_frame(
                EventKind::SlowClientWarning,
                &json!({
                    "lag": live_lag, "limit": limit, "lastEventId": head,
                    // The names qwen serve and @qwen-code/sdk's event types use.
                    "queueSize": live_lag, "maxQueued": limit,
                }),
            )
        });

        let mut upto = head;
        if let Some(r) = self.replay {
            upto = upto.min(r.until);
        }
        if let Some(stop) = stop_at {
            upto = upto.min(stop);
        }
        let start = (self.cursor + 1 - front) as usize;
        let available = upto.saturating_sub(self.cursor) as usize;
        let (count, whole) = batch_extent(inner.ring.range(start..start + available));
        let replay_done = self.replay.filter(|r| self.cursor + count as u64 == r.until);
        if count == 0 && warning.is_none() && replay_done.is_none() {
            let over = (inner.closed && self.cursor >= head) || stop_at.is_some_and(|s| self.cursor >= s);
            if over {
                bus.release(&mut inner, self.cursor, None);
                self.tracked = false;
                return Take::End(None);
            }
            return Take::Idle;
        }
        // A marked stream's batch notes where each frame ends and, for the ring's, its id and shape.
        let first = self.cursor + 1;
        let mut marks = Vec::with_capacity(if self.marked { count + 2 } else { 0 });
        let mut mark = |end: usize, event: Option<(u64, Shape)>| {
            if self.marked {
                marks.push(Mark { end, event });
            }
        };
        let batch = if let Some(whole) = whole.filter(|_| warning.is_none() && replay_done.is_none()) {
            // Frames that lie end to end in one block go out as that slice of it, uncopied.
            let from = inner.ring[start].start;
            for (id, stored) in (first..).zip(inner.ring.range(start..start + count)) {
                mark(stored.end - from, stored.shape.map(|s| (id, s)));
            }
            whole
        } else {
            let complete = replay_done.map(|r| {
                idless_frame(
                    EventKind::ReplayComplete,
                    &json!({"replayedCount": r.count, "lastReplayedEventId": (r.count > 0).then_some(r.until)}),
                )
            });
            let bytes: usize = inner.ring.range(start..start + count).map(Stored::len).sum();
            let extra = warning.as_ref().map_or(0, Bytes::len) + complete.as_ref().map_or(0, Bytes::len);
            let mut out = BytesMut::with_capacity(bytes + extra);
            if let Some(w) = &warning {
                out.extend_from_slice(w);
                mark(out.len(), None);
            }
            for (id, stored) in (first..).zip(inner.ring.range(start..start + count)) {
                out.extend_from_slice(stored.bytes());
                mark(out.len(), stored.shape.map(|s| (id, s)));
            }
            if let Some(c) = &complete {
                out.extend_from_slice(c);
                mark(out.len(), None);
            }
            out.freeze()
        };
        if count > 0 {
            // The cursor moves under the lock, so the ring's view of the slowest stream is exact.
            let taken = self.cursor + count as u64;
            bus.release(&mut inner, self.cursor, Some(taken));
        }
        drop(inner);
        self.cursor += count as u64;
        if replay_done.is_some() {
            self.replay = None;
        }
        // A batch only shrinks the lag, so this can only re-arm the warning: a stream that caught
        // up is warned again at its next crossing.
        self.warning.check(head - self.cursor.max(self.replay.map_or(0, |r| r.until)), limit);
        if count > 0 {
            bus.stats.delivered.fetch_add(count as u64, Ordering::Relaxed);
        }
        Take::Batch(Marked { bytes: batch, marks })
    }

    /// The `client_evicted` frame that ends this stream, counted and logged; `front` is where a
    /// resume with `Last-Event-ID` would start.
    fn evict(&self, reason: Eviction, head: u64, front: u64) -> Bytes {
        let bus = &self.bus;
        bus.stats.evicted.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            session_id = %bus.session_id, reason = reason.as_str(), last_delivered = self.cursor,
            lag = head - self.cursor, "evicting a slow event stream"
        );
        idless_frame(
            EventKind::ClientEvicted,
            &json!({"reason": reason.as_str(), "lastDeliveredId": self.cursor, "earliestAvailableId": front}),
        )
    }

    /// The SSE body: `retry` (and `state_resync_required`), the replay and `replay_complete`, then
    /// live frames with heartbeats. It ends after the session's terminal event, after a
    /// `client_evicted` frame, or once `shutdown` fires and it has delivered what the ring held
    /// at that moment.
    pub fn into_body(
        self,
        shutdown: CancellationToken,
    ) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
        self.into_stream(shutdown).map(|batch| Ok(batch.bytes))
    }

    /// [`Subscription::into_body`] for a stream that re-frames the events (the ACP door): each
    /// batch comes with where its frames end and, for the ring's events, their parts, so the
    /// events are not read back out of the bytes once per connection.
    pub fn into_marked(mut self, shutdown: CancellationToken) -> impl Stream<Item = Marked> + Send {
        self.marked = true;
        self.into_stream(shutdown)
    }

    fn into_stream(self, shutdown: CancellationToken) -> EventStream {
        let published = self.bus.published.clone().notified_owned();
        EventStream {
            sub: self,
            shutdown: Box::pin(shutdown.clone().cancelled_owned()),
            shutdown_token: shutdown,
            stop_at: None,
            published: Box::pin(published),
            armed: true,
            heartbeat: Box::pin(tokio::time::sleep(HEARTBEAT_INTERVAL)),
            last_write: Instant::now(),
            flight: Arc::new(Flight::default()),
            done: false,
        }
    }
}

/// Whether the connection still holds the last batch a stream handed it, and who to wake when it
/// lets go.
#[derive(Debug, Default)]
struct Flight {
    busy: AtomicBool,
    waker: AtomicWaker,
}

/// A batch as handed to the connection: when the connection drops it (written, or the connection
/// closed) the stream may take the next one.
struct InFlight {
    batch: Bytes,
    flight: Arc<Flight>,
}

impl AsRef<[u8]> for InFlight {
    fn as_ref(&self) -> &[u8] {
        &self.batch
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.flight.busy.store(false, Ordering::Release);
        self.flight.waker.wake();
    }
}

struct EventStream {
    sub: Subscription,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    shutdown_token: CancellationToken,
    /// Once shutdown has fired: the head at that moment, the last id this stream delivers.
    stop_at: Option<u64>,
    /// A wake-up for the next publish, created before each look at the ring so none is missed.
    published: Pin<Box<OwnedNotified>>,
    /// `published` was created after the last look at the ring and has not fired.
    armed: bool,
    heartbeat: Pin<Box<Sleep>>,
    last_write: Instant,
    flight: Arc<Flight>,
    done: bool,
}

impl EventStream {
    fn hand(&mut self, batch: Marked) -> Poll<Option<Marked>> {
        self.last_write = Instant::now();
        self.flight.busy.store(true, Ordering::Release);
        let Marked { bytes, marks } = batch;
        let bytes = Bytes::from_owner(InFlight { batch: bytes, flight: self.flight.clone() });
        Poll::Ready(Some(Marked { bytes, marks }))
    }

    /// Stream-local frames (`retry`, a heartbeat, an eviction): marked as a whole, read back.
    fn notice(&self, bytes: Bytes) -> Marked {
        let marks = if self.sub.marked { vec![Mark { end: bytes.len(), event: None }] } else { Vec::new() };
        Marked { bytes, marks }
    }

    /// Whether the connection still writes the last batch (registering to hear when it is done).
    fn writing(&self, cx: &Context<'_>) -> bool {
        if !self.flight.busy.load(Ordering::Acquire) {
            return false;
        }
        self.flight.waker.register(cx.waker());
        self.flight.busy.load(Ordering::Acquire)
    }

    /// Whether a heartbeat is due; otherwise arms the timer for when it will be. The timer is
    /// moved only here, when the stream goes idle, not on every write.
    fn heartbeat_due(&mut self, cx: &mut Context<'_>) -> bool {
        let due = self.last_write + HEARTBEAT_INTERVAL;
        if self.heartbeat.deadline() != due {
            self.heartbeat.as_mut().reset(due);
        }
        self.heartbeat.as_mut().poll(cx).is_ready()
    }
}

impl Stream for EventStream {
    type Item = Marked;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(preamble) = this.sub.preamble.take() {
            let preamble = this.notice(preamble);
            return this.hand(preamble);
        }
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if this.writing(cx) {
                // Woken when the connection lets go of the batch; the heartbeat timer is not
                // needed while bytes are on their way.
                return Poll::Pending;
            }
            if this.stop_at.is_none() && this.shutdown_token.is_cancelled() {
                this.stop_at = Some(this.sub.bus.last_id());
            }
            if !this.armed {
                this.published.set(this.sub.bus.published.clone().notified_owned());
                this.armed = true;
            }
            match this.sub.take(this.stop_at) {
                Take::Batch(batch) => return this.hand(batch),
                Take::End(last) => {
                    this.done = true;
                    if let Some(frame) = last {
                        let frame = this.notice(frame);
                        return this.hand(frame);
                    }
                    return Poll::Ready(None);
                }
                Take::Idle => {}
            }
            if this.published.as_mut().poll(cx).is_ready() {
                this.armed = false;
                continue;
            }
            if this.stop_at.is_none() && this.shutdown.as_mut().poll(cx).is_ready() {
                continue;
            }
            if this.heartbeat_due(cx) {
                let beat = this.notice(Bytes::from_static(HEARTBEAT));
                return this.hand(beat);
            }
            return Poll::Pending;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EventKind::{SessionClosed, SessionUpdate, TurnComplete};
    use futures_util::StreamExt;

    /// Bound on every wait in these tests: a hang fails instead of hanging. Most tests run on
    /// tokio's paused clock, which jumps to the next timer whenever every task is waiting, so a
    /// stream that never gets its event fails at once (after a few virtual heartbeats) rather
    /// than after a minute of real time; that keeps mutation runs, where many mutants lose an
    /// event, fast. Longer than a heartbeat.
    const WAIT: Duration = Duration::from_secs(60);

    fn limits(ring: usize, lag: usize, max: usize) -> Limits {
        Limits { ring_events: ring, ring_bytes: RING_MAX_BYTES, lag_limit: Some(lag), max_subscribers: max }
    }

    fn bus(ring: usize, max: usize) -> Arc<Bus> {
        Bus::new("s1".into(), limits(ring, ring, max), Arc::default())
    }

    fn publish(b: &Bus, n: usize) {
        for i in 0..n {
            b.publish(SessionUpdate, &json!({"i": i}), &PromptTag::default());
        }
    }

    fn ids(text: &str) -> Vec<u64> {
        text.lines().filter_map(|l| l.strip_prefix("id: ")).filter_map(|n| n.parse().ok()).collect()
    }

    type Body = Pin<Box<dyn Stream<Item = Result<Bytes, Infallible>> + Send>>;

    fn body(sub: Subscription) -> Body {
        Box::pin(sub.into_body(CancellationToken::new()))
    }

    /// A stream of the bus from its start, past its first chunk, which is the reconnect delay.
    async fn subscribed(b: &Arc<Bus>) -> Body {
        subscribed_until(b, CancellationToken::new()).await
    }

    /// [`subscribed`], with the stream ending when `shutdown` is cancelled.
    async fn subscribed_until(b: &Arc<Bus>, shutdown: CancellationToken) -> Body {
        let mut stream: Body = Box::pin(b.subscribe(None).expect("subscribe").into_body(shutdown));
        assert_eq!(chunk(&mut stream).await.as_deref(), Some("retry: 3000\n\n"));
        stream
    }

    /// The next chunk of a body (`None` at its end), bounded by [`WAIT`].
    async fn chunk(body: &mut Body) -> Option<String> {
        let next = tokio::time::timeout(WAIT, body.next()).await.expect("a chunk or the end in time");
        next.map(|c| String::from_utf8_lossy(&c.expect("infallible")).into_owned())
    }

    /// Everything up to the end of the body, bounded by [`WAIT`] as a whole (heartbeats would
    /// otherwise keep a body that never ends busy forever).
    async fn rest(body: &mut Body) -> String {
        let read = async {
            let mut out = String::new();
            while let Some(c) = chunk(body).await {
                out.push_str(&c);
            }
            out
        };
        tokio::time::timeout(WAIT, read).await.expect("the end of the body in time")
    }

    /// The whole stream of a closed bus.
    async fn collect(sub: Subscription) -> String {
        rest(&mut body(sub)).await
    }

    /// The `data` of every id-less frame of `kind`.
    fn idless(text: &str, kind: &str) -> Vec<serde_json::Value> {
        let marker = format!("event: {kind}\ndata: ");
        text.split("\n\n")
            .filter_map(|f| f.strip_prefix(&marker))
            .map(|d| serde_json::from_str::<serde_json::Value>(d).expect("json")["data"].clone())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn envelope_has_id_type_data_and_tag() {
        let b = bus(10, 10);
        let sub = b.subscribe(None).expect("subscribe");
        let tag = PromptTag { prompt_id: Some("p1".into()), originator: Some("c1".into()) };
        let before = crate::clock::now_ms();
        b.publish(TurnComplete, &json!({"stopReason": "end_turn"}), &tag);
        let after = crate::clock::now_ms();
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
        let stamp = v["_meta"]["serverTimestamp"].as_u64().expect("serverTimestamp");
        assert!((before..=after).contains(&stamp), "published between {before} and {after}: {stamp}");
        assert!(text.starts_with("retry: 3000\n\n"));
        assert!(text.contains("id: 1\nevent: turn_complete\n"));
    }

    /// The tag is escaped once per change, and each event carries the tag it was published with.
    #[tokio::test(start_paused = true)]
    async fn events_are_credited_to_the_prompt_whose_tag_they_were_published_with() {
        let b = bus(100, 10);
        let sub = b.subscribe(None).expect("subscribe");
        let p1 = PromptTag { prompt_id: Some("p1".into()), originator: Some("a\"lice".into()) };
        let p2 = PromptTag { prompt_id: Some("p2".into()), originator: None };
        // The same prompt id from another originator is another tag too.
        let p1_bob = PromptTag { prompt_id: Some("p1".into()), originator: Some("bob".into()) };
        for tag in [&p1, &p1, &PromptTag::default(), &p2, &p1, &p1_bob] {
            b.publish(SessionUpdate, &json!({}), tag);
        }
        b.close();
        let text = collect(sub).await;
        let envelopes: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).expect("json"))
            .collect();
        let tags: Vec<(Option<&str>, Option<&str>)> =
            envelopes.iter().map(|e| (e["promptId"].as_str(), e["originatorClientId"].as_str())).collect();
        assert_eq!(
            tags,
            [
                (Some("p1"), Some("a\"lice")),
                (Some("p1"), Some("a\"lice")),
                (None, None),
                (Some("p2"), None),
                (Some("p1"), Some("a\"lice")),
                (Some("p1"), Some("bob")),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn resume_replays_after_the_given_id_without_gap_or_duplicate() {
        let b = bus(100, 10);
        publish(&b, 5);
        let sub = b.subscribe(Some(2)).expect("subscribe");
        publish(&b, 1);
        b.close();
        let text = collect(sub).await;
        assert_eq!(ids(&text), vec![3, 4, 5, 6]);
        assert_eq!(idless(&text, "replay_complete"), [json!({"replayedCount": 3, "lastReplayedEventId": 5})]);
        let complete = text.find("replay_complete").expect("replay_complete");
        assert!(text.find("id: 5\n").expect("5") < complete && complete < text.find("id: 6\n").expect("6"));
        assert!(!text.contains("state_resync_required"));
    }

    /// `state_resync_required` exactly when an event after the resume point has left the ring.
    #[tokio::test(start_paused = true)]
    async fn resync_is_asked_only_when_something_is_missing() {
        let b = bus(3, 10);
        publish(&b, 10); // the ring holds 8, 9, 10
        for (after, missing) in [(0, true), (6, true), (7, false), (9, false), (10, false), (99, false)] {
            let mut stream = body(b.subscribe(Some(after)).expect("subscribe"));
            let first = chunk(&mut stream).await.expect("preamble");
            let resync = idless(&first, "state_resync_required");
            if missing {
                assert_eq!(
                    resync,
                    [json!({"reason": "ring_evicted", "lastDeliveredId": after, "earliestAvailableId": 8})],
                    "after {after}"
                );
            } else {
                assert!(resync.is_empty(), "after {after}: {first}");
            }
            let replay = chunk(&mut stream).await.expect("replay");
            let expected: Vec<u64> = (after.clamp(7, 10) + 1..=10).collect();
            assert_eq!(ids(&replay), expected, "after {after}");
            assert_eq!(idless(&replay, "replay_complete").len(), 1, "after {after}");
        }
        let first = chunk(&mut body(b.subscribe(Some(10)).expect("subscribe"))).await.expect("preamble");
        assert_eq!(first, "retry: 3000\n\n");
    }

    #[tokio::test(start_paused = true)]
    async fn no_header_means_live_only() {
        let b = bus(100, 10);
        publish(&b, 1);
        let sub = b.subscribe(None).expect("subscribe");
        b.publish(TurnComplete, &json!({}), &PromptTag::default());
        b.close();
        let text = collect(sub).await;
        assert_eq!(ids(&text), vec![2]);
        assert!(!text.contains("replay_complete"));
    }

    /// Everything from the cursor to the head leaves in one batch, up to [`BATCH_BYTES`].
    #[tokio::test(start_paused = true)]
    async fn a_batch_takes_everything_to_the_head_up_to_the_byte_bound() {
        let b = bus(10_000, 10);
        let mut stream = subscribed(&b).await;
        publish(&b, 5);
        assert_eq!(ids(&chunk(&mut stream).await.expect("batch")), [1, 2, 3, 4, 5]);

        // 1 KiB payloads: a burst of 200 leaves in batches of at most BATCH_BYTES.
        let big = "x".repeat(1024);
        for _ in 0..200 {
            b.publish(SessionUpdate, &json!({"t": big}), &PromptTag::default());
        }
        b.close();
        let mut seen = Vec::new();
        let mut sizes = Vec::new();
        while let Some(batch) = chunk(&mut stream).await {
            seen.extend(ids(&batch));
            sizes.push(batch.len());
        }
        assert_eq!(seen, (6..=205).collect::<Vec<_>>());
        // The documented 64 KiB (docs/architecture.md, the data path), written out rather than
        // read from the constant, so a changed bound fails here.
        let documented = 65_536;
        let (last, full) = sizes.split_last().expect("batches");
        assert!(*last <= documented);
        for size in full {
            // Full: one more ~1.1 KiB frame would not have fitted.
            assert!((documented - 1200..=documented).contains(size), "{sizes:?}");
        }
    }

    /// The batch bound is inclusive: frames that add up to exactly 64 KiB leave together.
    #[tokio::test(start_paused = true)]
    async fn frames_filling_a_batch_exactly_leave_together() {
        let b = bus(10_000, 10);
        let mut stream = subscribed(&b).await;
        // Ids 1..=9 out of the way, so every frame below has a two-digit id and the same envelope.
        publish(&b, 9);
        assert_eq!(ids(&chunk(&mut stream).await.expect("1..=9")), (1..=9).collect::<Vec<_>>());
        let last_len = |b: &Bus| lock(&b.inner).ring.back().map(|s| s.len()).expect("a frame");
        let padded =
            |b: &Bus, n: usize| b.publish(SessionUpdate, &json!({"t": "x".repeat(n)}), &PromptTag::default());
        padded(&b, 0);
        let envelope = last_len(&b);
        let documented = 65_536;
        let mut total = envelope;
        while total + 2 * (envelope + 1000) <= documented {
            padded(&b, 1000);
            total += envelope + 1000;
        }
        padded(&b, documented - total - envelope);
        assert_eq!(total + last_len(&b), documented);
        let last_id = lock(&b.inner).head();
        assert!(last_id < 100, "two-digit ids only: {last_id}");
        let batch = chunk(&mut stream).await.expect("the batch");
        assert_eq!(ids(&batch), (10..=last_id).collect::<Vec<_>>());
        assert_eq!(batch.len(), documented);
    }

    /// A frame larger than a batch goes out alone, as the ring's own bytes.
    #[tokio::test(start_paused = true)]
    async fn a_frame_larger_than_a_batch_goes_out_alone() {
        let b = bus(100, 10);
        let mut stream = body(b.subscribe(None).expect("subscribe"));
        chunk(&mut stream).await.expect("retry");
        let huge = "y".repeat(BATCH_BYTES * 2);
        b.publish(SessionUpdate, &json!({"t": huge}), &PromptTag::default());
        publish(&b, 3);
        assert_eq!(ids(&chunk(&mut stream).await.expect("huge")), [1]);
        assert_eq!(ids(&chunk(&mut stream).await.expect("rest")), [2, 3, 4]);
    }

    /// While the connection holds the last batch, the stream takes nothing more: it never runs
    /// ahead of its socket, and it resumes when the batch is let go.
    #[tokio::test(start_paused = true)]
    async fn a_stream_takes_its_next_batch_only_once_the_last_is_written() {
        let b = bus(100, 10);
        let mut stream = body(b.subscribe(None).expect("subscribe"));
        let retry = tokio::time::timeout(WAIT, stream.next()).await.expect("retry").expect("some");
        publish(&b, 2);
        let held = futures_util::poll!(stream.next());
        assert!(held.is_pending(), "the retry frame is still being written");
        drop(retry);
        let next = tokio::time::timeout(WAIT, stream.next()).await.expect("woken").expect("some");
        assert_eq!(ids(&String::from_utf8_lossy(&next.expect("ok"))), [1, 2]);
    }

    /// Limits with no `--subscriber-queue` (the daemon's default): a ring of `ring` events and
    /// `bytes` bytes.
    fn unlimited(ring: usize, bytes: usize) -> Limits {
        Limits { ring_events: ring, ring_bytes: bytes, lag_limit: None, max_subscribers: 10 }
    }

    /// The size of an event `publish` writes with a two-digit id (ids 10 to 99 all frame alike).
    fn two_digit_frame() -> usize {
        let probe =
            Bus::with_history("s1".into(), unlimited(10, RING_MAX_BYTES), Arc::default(), None, 9, vec![]);
        publish(&probe, 1);
        lock(&probe.inner).ring_bytes
    }

    /// Issue #46: a stream that keeps reading, however many events behind the ring's count it falls
    /// between its batches, is never evicted while the ring's bytes hold what it has not taken:
    /// the ring holds those events for it, then goes back to its count.
    #[tokio::test(start_paused = true)]
    async fn a_stream_further_behind_than_the_ring_count_loses_nothing_within_the_byte_cap() {
        let stats = Arc::new(BusStats::default());
        let b = Bus::new("s1".into(), unlimited(5, RING_MAX_BYTES), stats.clone());
        let mut slow = subscribed(&b).await;
        let mut fast = subscribed(&b).await;
        let mut got = Vec::new();
        for round in 1..=10u64 {
            publish(&b, 4);
            assert_eq!(
                ids(&chunk(&mut fast).await.expect("batch")),
                (round * 4 - 3..=round * 4).collect::<Vec<_>>()
            );
            if round % 3 == 0 {
                // 12 events behind, more than twice the ring's count: it takes them all at once.
                let batch = chunk(&mut slow).await.expect("batch");
                assert!(idless(&batch, "slow_client_warning").is_empty(), "far from the byte cap: {batch}");
                got.extend(ids(&batch));
                assert_eq!(lock(&b.inner).ring.len(), 5, "taken by every stream: back to the count");
            } else {
                let lag = round * 4 - got.len() as u64;
                let held = lag.max(5).min(round * 4);
                assert_eq!(lock(&b.inner).ring.len() as u64, held, "held for the slow stream");
            }
        }
        b.close();
        let text = rest(&mut slow).await;
        got.extend(ids(&text));
        assert_eq!(got, (1..=40).collect::<Vec<_>>(), "every event, in order");
        assert!(idless(&text, "client_evicted").is_empty(), "{text}");
        assert_eq!(stats.evicted.load(Ordering::Relaxed), 0);
    }

    /// A stream that stops reading holds the ring only up to its byte cap: past it the stream is
    /// overrun (`client_evicted`, `ring_overrun`, told where a resume starts), the ring goes back to
    /// its count at once (before the stalled stream even looks), and the others go on.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_stream_past_the_byte_cap_is_evicted_and_the_others_continue() {
        let stats = Arc::new(BusStats::default());
        let b = Bus::new("s1".into(), unlimited(5, 20 * two_digit_frame()), stats.clone());
        let mut stalled = subscribed(&b).await;
        let mut fast = subscribed(&b).await;
        publish(&b, 2);
        assert_eq!(ids(&chunk(&mut stalled).await.expect("1, 2")), [1, 2]);
        assert_eq!(ids(&chunk(&mut fast).await.expect("1, 2")), [1, 2]);
        for _ in 0..10 {
            publish(&b, 4);
            chunk(&mut fast).await.expect("the fast stream keeps up");
        }
        {
            let inner = lock(&b.inner);
            assert_eq!((inner.ring.len(), inner.front()), (5, 38), "only the overrun stream held more");
            assert_eq!(inner.cursors.len(), 1, "the overrun stream's cursor is forgotten");
            assert_eq!(stats.ring_bytes.load(Ordering::Relaxed), inner.ring_bytes as u64);
        }
        let text = rest(&mut stalled).await;
        assert_eq!(
            idless(&text, "client_evicted"),
            [json!({"reason": "ring_overrun", "lastDeliveredId": 2, "earliestAvailableId": 38})]
        );
        assert!(ids(&text).is_empty());
        assert_eq!(stats.evicted.load(Ordering::Relaxed), 1);
        publish(&b, 1);
        assert_eq!(ids(&chunk(&mut fast).await.expect("43")), [43]);
        let resumed = b.subscribe(Some(2)).expect("resume");
        b.close();
        let fast_rest = rest(&mut fast).await;
        assert!(!fast_rest.contains("client_evicted"), "{fast_rest}");
        // Resuming where it stopped asks for a resync, then replays what the ring has.
        let resumed = collect(resumed).await;
        assert_eq!(
            idless(&resumed, "state_resync_required"),
            [json!({"reason": "ring_evicted", "lastDeliveredId": 2, "earliestAvailableId": 39})]
        );
        assert_eq!(ids(&resumed), [39, 40, 41, 42, 43]);
    }

    /// The room a lagging stream made the ring grow to is given back once it has caught up, and
    /// once it is gone: an idle session holds what a ring of its count holds.
    #[tokio::test(start_paused = true)]
    async fn the_ring_shrinks_back_once_the_slow_stream_catches_up_or_goes() {
        let stats = Arc::new(BusStats::default());
        let b = Bus::new("s1".into(), unlimited(100, RING_MAX_BYTES), stats.clone());
        let held = |b: &Bus| {
            let inner = lock(&b.inner);
            assert_eq!(stats.ring_bytes.load(Ordering::Relaxed), inner.ring_bytes as u64);
            (inner.ring.len(), inner.ring.capacity())
        };
        publish(&b, 150);
        assert_eq!(held(&b), (100, 100), "no stream: the count, in the room a ring of 100 takes");

        let mut slow = subscribed(&b).await;
        publish(&b, 1000);
        let (len, grown) = held(&b);
        assert_eq!(len, 1000, "held for the slow stream");
        assert!(grown >= 1000);
        let mut taken = 0;
        while taken < 1000 {
            taken += ids(&chunk(&mut slow).await.expect("a batch")).len();
        }
        assert_eq!(held(&b), (100, 100), "caught up: the count again, and its room");

        publish(&b, 1000);
        assert_eq!(held(&b).0, 1000);
        drop(slow);
        assert_eq!(held(&b), (100, 100), "gone: the count again, and its room");
    }

    /// A `Last-Event-ID` replay starts within the newest `--event-ring-size` events, even while the
    /// ring holds older ones for a stream that lags: those are that stream's, and a point before
    /// the count still gets `state_resync_required`.
    #[tokio::test(start_paused = true)]
    async fn a_replay_starts_within_the_ring_count_while_a_lagging_stream_holds_more() {
        let b = Bus::new("s1".into(), unlimited(5, RING_MAX_BYTES), Arc::default());
        let _stalled = b.subscribe(None).expect("stalled");
        publish(&b, 20);
        assert_eq!(lock(&b.inner).front(), 1, "held for the stalled stream");
        for (after, resync) in [(3, true), (14, true), (15, false), (19, false)] {
            let mut stream = body(b.subscribe(Some(after)).expect("subscribe"));
            let first = chunk(&mut stream).await.expect("preamble");
            let asked = idless(&first, "state_resync_required");
            if resync {
                assert_eq!(
                    asked,
                    [json!({"reason": "ring_evicted", "lastDeliveredId": after, "earliestAvailableId": 16})]
                );
            } else {
                assert!(asked.is_empty(), "after {after}: {first}");
            }
            let replay = chunk(&mut stream).await.expect("replay");
            assert_eq!(ids(&replay), (after.max(15) + 1..=20).collect::<Vec<_>>(), "after {after}");
        }
    }

    /// With no `--subscriber-queue`, a stream may lag as far as the ring's bytes hold at its
    /// events' mean size, and `slow_client_warning` says so.
    #[tokio::test(start_paused = true)]
    async fn without_a_lag_limit_the_warning_counts_what_the_byte_cap_holds() {
        let frame = two_digit_frame();
        let b = Bus::with_history("s1".into(), unlimited(2, 8 * frame), Arc::default(), None, 9, vec![]);
        let mut stream = subscribed(&b).await;
        publish(&b, 6); // ids 10..=15: 6 of the 8 the cap holds
        let batch = chunk(&mut stream).await.expect("batch");
        assert_eq!(
            idless(&batch, "slow_client_warning"),
            [json!({"lag": 6, "limit": 8, "lastEventId": 15, "queueSize": 6, "maxQueued": 8})]
        );
        assert_eq!(ids(&batch), (10..=15).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_past_the_lag_limit_is_evicted_and_resumes_without_loss() {
        let b = Bus::new("s1".into(), limits(100, 4, 10), Arc::default());
        let mut slow = body(b.subscribe(None).expect("slow"));
        chunk(&mut slow).await.expect("retry");
        publish(&b, 5);
        let text = rest(&mut slow).await;
        assert_eq!(
            idless(&text, "client_evicted"),
            [json!({"reason": "lag_limit", "lastDeliveredId": 0, "earliestAvailableId": 1})]
        );
        let resumed = collect_after_close(&b, 0).await;
        assert!(!resumed.contains("state_resync_required"));
        assert_eq!(ids(&resumed), [1, 2, 3, 4, 5], "a replay does not count against the lag limit");
    }

    /// Recorded frames with ids `from..=to`, as the history hands them to a resumed session.
    fn recorded(from: u64, to: u64) -> Vec<Bytes> {
        (from..=to).map(|i| Bytes::from(format!("id: {i}\nevent: session_update\ndata: {{}}\n\n"))).collect()
    }

    /// A resumed session's bus: ids continue after the last recorded one, and its ring starts with
    /// the newest recorded frames that fit both of its bounds (count and bytes), so a client's
    /// `Last-Event-ID` inside them replays without a resync and one before them gets one.
    #[tokio::test(start_paused = true)]
    async fn a_bus_with_history_continues_the_ids_and_seeds_its_ring_with_the_newest_frames() {
        let frame = recorded(1, 1)[0].len();
        let seeded = |ring: usize, bytes: usize, after: u64, recent: Vec<Bytes>| {
            let stats = Arc::new(BusStats::default());
            let limits =
                Limits { ring_events: ring, ring_bytes: bytes, lag_limit: None, max_subscribers: 10 };
            let b = Bus::with_history("s1".into(), limits, stats.clone(), None, after, recent);
            (b, stats)
        };

        // The count bound: a ring of 3 keeps 3, 4 and 5 of five recorded frames.
        let (b, stats) = seeded(3, RING_MAX_BYTES, 5, recorded(1, 5));
        assert_eq!(stats.ring_bytes.load(Ordering::Relaxed), 3 * frame as u64);
        let sub = b.subscribe(Some(3)).expect("subscribe");
        b.publish(SessionUpdate, &json!({}), &PromptTag::default());
        b.close();
        let text = collect(sub).await;
        assert!(!text.contains("state_resync_required"), "{text}");
        assert_eq!(ids(&text), [4, 5, 6], "the replay, then the first new event after the recorded ones");
        let (b, _) = seeded(3, RING_MAX_BYTES, 5, recorded(1, 5));
        let text = collect_after_close(&b, 1).await;
        assert!(text.contains("state_resync_required"), "id 2 left with the ring's bound: {text}");
        assert_eq!(ids(&text), [3, 4, 5]);

        // The byte bound, inclusive: exactly two frames' bytes hold exactly two frames.
        let (b, stats) = seeded(10, 2 * frame, 5, recorded(1, 5));
        assert_eq!(stats.ring_bytes.load(Ordering::Relaxed), 2 * frame as u64);
        assert_eq!(ids(&collect_after_close(&b, 0).await), [4, 5]);

        // Defensive: never more frames than ids recorded, even when handed more.
        let (b, stats) = seeded(10, RING_MAX_BYTES, 2, recorded(1, 5));
        assert_eq!(stats.ring_bytes.load(Ordering::Relaxed), 2 * frame as u64);
        assert_eq!(ids(&collect_after_close(&b, 0).await), [4, 5]);
    }

    async fn collect_after_close(b: &Arc<Bus>, after: u64) -> String {
        let sub = b.subscribe(Some(after)).expect("subscribe");
        b.close();
        collect(sub).await
    }

    #[test]
    fn the_warning_fires_at_75_percent_and_rearms_at_37_5_percent() {
        let mut w = LagWarning::default();
        let steps: Vec<(u64, bool)> = [0, 50, 74, 75, 99, 75, 40, 38, 75, 37, 74, 75, 80, 0, 100]
            .into_iter()
            .map(|lag| (lag, w.check(lag, 100)))
            .collect();
        let fired: Vec<u64> = steps.iter().filter(|(_, warn)| *warn).map(|(lag, _)| *lag).collect();
        assert_eq!(fired, [75, 75, 100], "{steps:?}");
        // Small limits round the same way.
        let mut w = LagWarning::default();
        assert!(!w.check(2, 4));
        assert!(w.check(3, 4));
        assert!(!w.check(2, 4));
        assert!(!w.check(1, 4), "1 is 25%: re-armed, not warned");
        assert!(w.check(3, 4));
        assert!(!LagWarning::default().check(0, 0), "no lag, no warning");
    }

    /// A marked stream's batches are the SSE stream's bytes, and its marks read the same events as
    /// reading the bytes back would: through a resume past the ring (`state_resync_required` in
    /// the preamble), its replay and `replay_complete`, a lag warning, tags that need escapes, a
    /// single frame sent uncopied, and the eviction that ends it.
    #[tokio::test(start_paused = true)]
    async fn a_marked_streams_marks_read_what_its_bytes_say() {
        use super::super::frames::{EventFrame, Piece, split};
        let b = Bus::new("s1".into(), limits(6, 4, 10), Arc::default());
        let tagged = PromptTag { prompt_id: Some("p\"1".into()), originator: Some("c\\".into()) };
        b.publish(SessionUpdate, &json!({"t": "a\n\nb", "promptId": "x"}), &tagged);
        publish(&b, 7);
        let sub = b.subscribe(Some(0)).expect("subscribe");
        let mut stream = Box::pin(sub.into_marked(CancellationToken::new()));
        let mut next =
            async || tokio::time::timeout(WAIT, stream.next()).await.expect("a batch or the end in time");
        let mut read = Vec::new();
        let mut check = |batch: &Marked| {
            assert_eq!(
                batch.marks.last().map(|m| m.end),
                Some(batch.bytes.len()),
                "the marks cover the batch"
            );
            let by_marks: Vec<Piece<'_>> = batch.pieces().collect();
            let by_bytes: Vec<Piece<'_>> = split(&batch.bytes).map(EventFrame::read).collect();
            assert_eq!(by_marks, by_bytes);
            read.extend(by_marks.iter().filter_map(|p| match p {
                Piece::Event(e) => Some((e.id, e.kind.to_owned())),
                _ => None,
            }));
        };
        for _ in 0..2 {
            check(&next().await.expect("the preamble, then the replay"));
        }
        b.publish(TurnComplete, &json!({"stopReason": "end_turn"}), &tagged);
        check(&next().await.expect("one frame alone"));
        publish(&b, 3); // a lag of 3 of 4: warned
        check(&next().await.expect("a warned batch"));
        publish(&b, 5); // past the lag limit: evicted
        check(&next().await.expect("the eviction"));
        assert!(next().await.is_none(), "an evicted stream ends");
        let kinds: Vec<&str> = read.iter().map(|(_, k)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "state_resync_required",
                "session_update",
                "session_update",
                "session_update",
                "session_update",
                "session_update",
                "session_update",
                "replay_complete",
                "turn_complete",
                "slow_client_warning",
                "session_update",
                "session_update",
                "session_update",
                "client_evicted",
            ]
        );
        let ids: Vec<u64> = read.iter().filter_map(|(id, _)| *id).collect();
        assert_eq!(ids, [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    }

    /// The ids of a marked batch's events, once its marks are shown to read what its bytes say.
    fn marked_ids(batch: &Marked) -> Vec<u64> {
        use super::super::frames::{EventFrame, Piece, split};
        let by_marks: Vec<Piece<'_>> = batch.pieces().collect();
        let by_bytes: Vec<Piece<'_>> = split(&batch.bytes).map(EventFrame::read).collect();
        assert_eq!(by_marks, by_bytes);
        by_marks
            .iter()
            .filter_map(|p| match p {
                Piece::Event(e) => e.id,
                _ => None,
            })
            .collect()
    }

    /// `n` updates of about 500 bytes each.
    fn padded_updates(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{{\"n\":{i},\"t\":\"{}\"}}", "x".repeat(500))).collect()
    }

    /// A burst published in one call is one block: a stream that takes it whole gets that slice of
    /// the ring's block (the same memory, not a copy), and a marked stream's marks still read
    /// what its bytes say.
    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_out_as_one_slice_of_its_block_with_its_marks() {
        let b = bus(100, 10);
        let mut stream =
            Box::pin(b.subscribe(None).expect("subscribe").into_marked(CancellationToken::new()));
        let mut next =
            async || tokio::time::timeout(WAIT, stream.next()).await.expect("in time").expect("a batch");
        assert_eq!(&next().await.bytes[..], RETRY);
        let tagged = PromptTag { prompt_id: Some("p1".into()), originator: Some("c1".into()) };
        let updates: Vec<String> = (0..40).map(|i| format!("{{\"n\":{i}}}")).collect();
        b.publish_raw_many(SessionUpdate, &updates, &tagged);
        let batch = next().await;
        let ring_first = lock(&b.inner).ring[0].bytes().as_ptr();
        assert_eq!(batch.bytes.as_ptr(), ring_first, "the ring's own bytes");
        assert_eq!(marked_ids(&batch), (1..=40).collect::<Vec<_>>());
    }

    /// A replay that starts inside a block goes out as slices from there: the marks of a batch
    /// that does not start at its block's beginning still read what its bytes say.
    #[tokio::test(start_paused = true)]
    async fn a_replay_from_inside_a_block_is_marked_as_its_bytes_say() {
        let b = bus(10_000, 10);
        b.publish_raw_many(SessionUpdate, padded_updates(400), &PromptTag::default());
        let inside = {
            let inner = lock(&b.inner);
            assert!(inner.ring[10].start > 0, "id 11 lies inside its block");
            inner.ring[10].bytes().as_ptr()
        };
        let mut stream =
            Box::pin(b.subscribe(Some(10)).expect("subscribe").into_marked(CancellationToken::new()));
        let mut ids = Vec::new();
        let mut sliced_from_inside = false;
        while ids.last() != Some(&400) {
            let batch = tokio::time::timeout(WAIT, stream.next()).await.expect("in time").expect("a batch");
            sliced_from_inside |= batch.bytes.as_ptr() == inside;
            ids.extend(marked_ids(&batch));
        }
        assert!(sliced_from_inside, "the first batch is a slice starting at id 11");
        assert_eq!(ids, (11..=400).collect::<Vec<_>>());
    }

    /// A burst larger than a block is written into several, each at most the documented 64 KiB
    /// unless one frame alone is larger, its frames end to end in id order.
    #[tokio::test(start_paused = true)]
    async fn a_burst_is_written_into_blocks_of_at_most_64_kib() {
        let documented = 65_536;
        let b = bus(10_000, 10);
        let _sub = b.subscribe(None).expect("subscribe");
        b.publish_raw_many(SessionUpdate, padded_updates(400), &PromptTag::default());
        let huge = vec![format!("{{\"t\":\"{}\"}}", "y".repeat(documented))];
        b.publish_raw_many(SessionUpdate, &huge, &PromptTag::default());
        let inner = lock(&b.inner);
        let mut blocks = 0;
        for (i, stored) in inner.ring.iter().enumerate() {
            let next = inner.ring.get(i + 1);
            if next.is_none_or(|n| !stored.followed_by(n)) {
                blocks += 1;
                assert!(stored.end <= documented || stored.start == 0, "block of {} bytes", stored.end);
            }
        }
        assert_eq!(inner.ring.len(), 401);
        assert!(blocks >= 4, "400 frames of about 600 bytes fill at least 4 blocks: {blocks}");
        let last = inner.ring.back().expect("the huge frame");
        assert!(last.start == 0 && last.len() > documented, "a larger frame alone in its block");
    }

    /// The frames `sizes` end to end in one block each, in order.
    fn blocks(sizes: &[&[usize]]) -> Vec<Stored> {
        let mut out = Vec::new();
        for frames in sizes {
            let block = Bytes::from(vec![b'x'; frames.iter().sum::<usize>()]);
            let mut at = 0;
            for len in *frames {
                out.push(Stored { block: block.clone(), start: at, end: at + len, shape: None });
                at += len;
            }
        }
        out
    }

    /// How many frames the batch holds, and whether it is a slice of the ring's memory (where it
    /// starts, checked against the first frame's).
    fn extent(ring: &[Stored]) -> (usize, bool) {
        let (count, whole) = batch_extent(ring.iter());
        if let Some(whole) = &whole {
            assert_eq!(whole.as_ptr(), ring[0].bytes().as_ptr());
            assert_eq!(whole.len(), ring[..count].iter().map(Stored::len).sum::<usize>());
        }
        (count, whole.is_some())
    }

    #[test]
    fn a_batch_is_a_slice_of_one_block_or_a_copy_of_several() {
        // The documented bounds (docs/architecture.md, the data path), written out rather than
        // read from the constants, so a changed bound fails here.
        let (batch, uncopied) = (65_536, 16_384);
        assert_eq!(extent(&[]), (0, false));
        assert_eq!(extent(&blocks(&[&[100]])), (1, true), "one frame: its own bytes");
        assert_eq!(extent(&blocks(&[&[100, 200, 300]])), (3, true), "one block: a slice");
        // Another block's frames join a copy when the first block's part is small...
        assert_eq!(extent(&blocks(&[&[100, 200], &[300]])), (3, false));
        assert_eq!(extent(&blocks(&[&[uncopied - 1], &[300]])), (2, false));
        assert_eq!(extent(&blocks(&[&[100], &[uncopied]])), (2, false), "only the first block counts");
        // ...and the batch ends at that block from the documented 16 KiB.
        assert_eq!(extent(&blocks(&[&[uncopied - 100, 100], &[300]])), (2, true));
        assert_eq!(extent(&blocks(&[&[uncopied], &[300], &[400]])), (1, true));
        // At most 64 KiB, whether sliced or copied; a larger first frame alone.
        assert_eq!(extent(&blocks(&[&[batch / 2, batch / 2, 1]])), (2, true));
        assert_eq!(extent(&blocks(&[&[batch / 2, batch / 2 + 1]])), (1, true));
        assert_eq!(extent(&blocks(&[&[100; 10], &[batch - 1000, 1]])), (11, false));
        assert_eq!(extent(&blocks(&[&[batch * 2, 1]])), (1, true));
        assert_eq!(extent(&blocks(&[&[batch * 2], &[1]])), (1, true));
        // Frames of one block that do not follow each other (or blocks of the same size) are not
        // one slice.
        let block = Bytes::from(vec![b'x'; 300]);
        let gap = [
            Stored { block: block.clone(), start: 0, end: 100, shape: None },
            Stored { block: block.clone(), start: 200, end: 300, shape: None },
        ];
        assert_eq!(extent(&gap), (2, false));
        let same_size = blocks(&[&[100], &[100]]);
        assert_eq!(extent(&same_size), (2, false));
        let shorter = [
            Stored { block: block.clone(), start: 0, end: 100, shape: None },
            Stored { block: block.slice(..200), start: 100, end: 200, shape: None },
        ];
        assert_eq!(extent(&shorter), (2, false), "the same start, another block");
        // A frame of another block in between ends the slice: the batch never skips it.
        let big = Bytes::from(vec![b'x'; uncopied + 100]);
        let between = [
            Stored { block: big.clone(), start: 0, end: uncopied, shape: None },
            Stored { block: block.clone(), start: 0, end: 100, shape: None },
            Stored { block: big.clone(), start: uncopied, end: uncopied + 100, shape: None },
        ];
        assert_eq!(extent(&between), (1, true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lagging_stream_is_warned_once_per_crossing() {
        let stats = Arc::new(BusStats::default());
        let b = Bus::new("s1".into(), limits(100, 8, 10), stats.clone());
        let mut stream = body(b.subscribe(None).expect("subscribe"));
        chunk(&mut stream).await.expect("retry");
        publish(&b, 6); // lag 6 of 8: warned, then caught up
        let first = chunk(&mut stream).await.expect("batch");
        assert_eq!(
            idless(&first, "slow_client_warning"),
            [json!({"lag": 6, "limit": 8, "lastEventId": 6, "queueSize": 6, "maxQueued": 8})]
        );
        assert!(first.starts_with("event: slow_client_warning"), "the warning precedes the batch");
        assert_eq!(ids(&first), [1, 2, 3, 4, 5, 6]);
        publish(&b, 7); // re-armed when it caught up: warned again
        let second = chunk(&mut stream).await.expect("batch");
        assert_eq!(idless(&second, "slow_client_warning").len(), 1);
        publish(&b, 5); // 5 of 8 is below 75%: no warning
        let third = chunk(&mut stream).await.expect("batch");
        assert!(idless(&third, "slow_client_warning").is_empty());
        assert_eq!(stats.warnings.load(Ordering::Relaxed), 2);

        // Frames of 40 KiB leave one per batch: the lag stays above 37.5% for several batches,
        // and the stream is warned once, on the way up.
        let big = "b".repeat(40 * 1024);
        for _ in 0..7 {
            b.publish(SessionUpdate, &json!({"t": big}), &PromptTag::default());
        }
        b.close();
        let mut batches = Vec::new();
        while let Some(batch) = chunk(&mut stream).await {
            batches.push(batch);
        }
        let warned: Vec<usize> =
            (0..batches.len()).filter(|&i| !idless(&batches[i], "slow_client_warning").is_empty()).collect();
        assert_eq!(warned, [0], "{} batches", batches.len());
        assert_eq!(batches.iter().map(|b| ids(b).len()).sum::<usize>(), 7);
        assert!(batches.len() >= 7, "one big frame per batch");
        assert_eq!(stats.warnings.load(Ordering::Relaxed), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_replay_is_not_warned_about() {
        let b = Bus::new("s1".into(), limits(100, 8, 10), Arc::default());
        publish(&b, 50);
        let text = collect_after_close(&b, 0).await;
        assert_eq!(ids(&text).len(), 50);
        assert!(!text.contains("slow_client_warning"));
    }

    /// The byte cap trims the ring below its count, and a stream may then lag only as far as the
    /// ring reaches.
    #[tokio::test(start_paused = true)]
    async fn the_byte_cap_trims_the_ring_and_sets_how_far_a_stream_may_lag() {
        let stats = Arc::new(BusStats::default());
        let cap = 4096;
        let b = Bus::new(
            "s1".into(),
            Limits { ring_events: 1000, ring_bytes: cap, lag_limit: None, max_subscribers: 10 },
            stats.clone(),
        );
        let mut stream = body(b.subscribe(None).expect("subscribe"));
        chunk(&mut stream).await.expect("retry");
        let kib = "z".repeat(1000);
        for _ in 0..10 {
            b.publish(SessionUpdate, &json!({"t": kib}), &PromptTag::default());
        }
        {
            let inner = lock(&b.inner);
            assert!(inner.ring_bytes <= cap, "{} bytes held", inner.ring_bytes);
            assert_eq!(inner.ring.len(), 3, "three ~1.1 KiB frames fit in 4 KiB");
            assert_eq!(b.lag_room(&inner), 3, "a stream may lag as far as the ring holds");
            assert_eq!(inner.front(), 8);
            assert_eq!(stats.ring_bytes.load(Ordering::Relaxed), inner.ring_bytes as u64);
        }
        let text = rest(&mut stream).await;
        assert_eq!(idless(&text, "client_evicted")[0]["reason"], "ring_overrun");

        // One frame above the cap still stays: the newest event is always kept.
        let huge = "h".repeat(cap * 2);
        b.publish(SessionUpdate, &json!({"t": huge}), &PromptTag::default());
        assert_eq!(lock(&b.inner).ring.len(), 1);
        drop(stream);
        drop(b);
        assert_eq!(stats.ring_bytes.load(Ordering::Relaxed), 0, "a dropped bus releases its bytes");
    }

    /// The daemon's byte cap is the documented 64 MiB (docs/operations.md): frames just under it
    /// in total all stay; one more and the oldest goes.
    #[tokio::test(start_paused = true)]
    async fn the_default_byte_cap_holds_64_mib() {
        let b = Bus::new("s1".into(), limits(1000, 1000, 10), Arc::default());
        let payload = "m".repeat((1 << 20) - 1024); // a frame is ~900 bytes under 1 MiB
        for _ in 0..64 {
            b.publish(SessionUpdate, &json!({"t": payload}), &PromptTag::default());
        }
        let held = |b: &Bus| {
            let inner = lock(&b.inner);
            (inner.ring.len(), inner.front())
        };
        assert_eq!(held(&b), (64, 1));
        b.publish(SessionUpdate, &json!({"t": payload}), &PromptTag::default());
        assert_eq!(held(&b), (64, 2));
    }

    /// Both bounds are inclusive: a ring exactly at its byte cap keeps every frame, and a stream
    /// exactly at the lag limit is not evicted.
    #[tokio::test(start_paused = true)]
    async fn a_ring_at_its_byte_cap_and_a_stream_at_the_lag_limit_are_left_alone() {
        let probe = bus(10, 10);
        publish(&probe, 1);
        let frame = lock(&probe.inner).ring_bytes; // ids 1 to 9 frame to the same size
        let b = Bus::new(
            "s1".into(),
            Limits { ring_events: 100, ring_bytes: 3 * frame, lag_limit: Some(3), max_subscribers: 10 },
            Arc::default(),
        );
        let mut stream = subscribed(&b).await;
        publish(&b, 3);
        let held = {
            let inner = lock(&b.inner);
            (inner.ring.len(), inner.ring_bytes)
        };
        assert_eq!(held, (3, 3 * frame));
        b.close();
        let text = rest(&mut stream).await;
        assert_eq!(ids(&text), [1, 2, 3]);
        assert!(idless(&text, "client_evicted").is_empty(), "{text}");
    }

    /// Trimming by count keeps the byte tally right: it is what the byte cap and the gauge read.
    #[test]
    fn trimming_by_count_keeps_the_byte_tally() {
        let stats = Arc::new(BusStats::default());
        let b = Bus::new("s1".into(), limits(2, 2, 10), stats.clone());
        publish(&b, 5);
        let inner = lock(&b.inner);
        let held: usize = inner.ring.iter().map(|s| s.len()).sum();
        assert_eq!((inner.ring.len(), inner.ring_bytes), (2, held));
        assert_eq!(stats.ring_bytes.load(Ordering::Relaxed), held as u64);
    }

    /// What a log line shows of a bus: its session and limits.
    #[test]
    fn debug_output_names_the_session_and_the_limits() {
        let text = format!("{:?}", bus(10, 3));
        assert!(text.starts_with(r#"Bus { session_id: "s1", limits: Limits { ring_events: 10"#), "{text}");
        assert!(text.contains("max_subscribers: 3"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn subscriber_cap_is_enforced_and_freed_on_drop() {
        let b = bus(10, 1);
        let first = b.subscribe(None).expect("first");
        assert_eq!(b.subscribe(None).err(), Some(SubscribeError::TooMany { limit: 1 }));
        drop(first);
        assert!(b.subscribe(None).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn gauges_count_streams_events_and_deliveries() {
        let stats = Arc::new(BusStats::default());
        let b = Bus::new("s1".into(), limits(100, 100, 10), stats.clone());
        let mut one = body(b.subscribe(None).expect("one"));
        let mut two = body(b.subscribe(None).expect("two"));
        assert_eq!(stats.subscribers.load(Ordering::Relaxed), 2);
        assert_eq!(b.subscriber_count(), 2);
        publish(&b, 3);
        b.close();
        let (a, c) = (rest(&mut one).await, rest(&mut two).await);
        drop((one, two));
        assert_eq!((ids(&a).len(), ids(&c).len()), (3, 3));
        assert_eq!(stats.published.load(Ordering::Relaxed), 3);
        assert_eq!(stats.delivered.load(Ordering::Relaxed), 6);
        assert_eq!(stats.subscribers.load(Ordering::Relaxed), 0, "ended streams are gone");
        assert_eq!(b.subscriber_count(), 0);
        assert_eq!(stats.evicted.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn close_ends_streams_after_what_the_ring_holds_and_refuses_new_ones() {
        let b = bus(10, 10);
        let mut stream = body(b.subscribe(None).expect("subscribe"));
        chunk(&mut stream).await.expect("retry");
        let waiting = tokio::spawn(async move { rest(&mut stream).await });
        publish(&b, 2);
        b.close();
        let text = tokio::time::timeout(WAIT, waiting).await.expect("ended").expect("task");
        assert_eq!(ids(&text), [1, 2]);
        assert_eq!(b.subscribe(None).err(), Some(SubscribeError::Closed));
        assert!(b.publish(SessionUpdate, &json!({}), &PromptTag::default()).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn terminal_event_ends_streams_and_refuses_new_ones() {
        let b = bus(10, 10);
        let sub = b.subscribe(None).expect("subscribe");
        b.publish_terminal(SessionClosed, &json!({"sessionId": "s1"}));
        assert!(b.publish(SessionUpdate, &json!({}), &PromptTag::default()).is_none());
        let text = collect(sub).await;
        assert!(text.ends_with("\n\n") && text.contains("event: session_closed"));
        assert_eq!(b.subscribe(None).err(), Some(SubscribeError::Closed));
    }

    /// A stream waiting for the next event is woken by it, whichever task publishes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_stream_is_woken_by_every_publish() {
        let b = bus(10_000, 10);
        let mut stream = body(b.subscribe(None).expect("subscribe"));
        chunk(&mut stream).await.expect("retry");
        let publisher = {
            let b = b.clone();
            tokio::spawn(async move {
                for i in 0..2000 {
                    b.publish(SessionUpdate, &json!({"i": i}), &PromptTag::default());
                    if i % 7 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                b.close();
            })
        };
        let text = rest(&mut stream).await;
        assert_eq!(ids(&text), (1..=2000).collect::<Vec<_>>());
        publisher.await.expect("publisher");
    }

    #[tokio::test(start_paused = true)]
    async fn silence_brings_a_heartbeat_comment() {
        let b = bus(10, 10);
        let mut stream = subscribed(&b).await;
        let start = Instant::now();
        assert_eq!(chunk(&mut stream).await.as_deref(), Some(": heartbeat\n\n"));
        assert_eq!(start.elapsed(), HEARTBEAT_INTERVAL);
        // An event resets the silence.
        tokio::time::advance(Duration::from_secs(10)).await;
        publish(&b, 1);
        assert_eq!(ids(&chunk(&mut stream).await.expect("event")), [1]);
        let after_event = Instant::now();
        assert_eq!(chunk(&mut stream).await.as_deref(), Some(": heartbeat\n\n"));
        assert_eq!(after_event.elapsed(), HEARTBEAT_INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_stream() {
        let b = bus(10, 10);
        let token = CancellationToken::new();
        let mut stream = subscribed_until(&b, token.clone()).await;
        token.cancel();
        assert_eq!(chunk(&mut stream).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_still_hands_over_what_was_published() {
        let b = bus(10, 10);
        let token = CancellationToken::new();
        let mut stream = subscribed_until(&b, token.clone()).await;
        b.publish(TurnComplete, &json!({}), &PromptTag::default());
        b.publish_terminal(SessionClosed, &json!({"sessionId": "s1"}));
        token.cancel();
        let text = rest(&mut stream).await;
        assert_eq!(ids(&text), vec![1, 2]);
    }

    /// A stream stops at the head shutdown found, even while events keep coming.
    #[tokio::test(start_paused = true)]
    async fn shutdown_does_not_wait_for_later_events() {
        let b = bus(100, 10);
        let token = CancellationToken::new();
        let mut stream = subscribed_until(&b, token.clone()).await;
        publish(&b, 3);
        token.cancel();
        let first = chunk(&mut stream).await.expect("what was there");
        publish(&b, 3);
        assert_eq!(ids(&first), [1, 2, 3]);
        assert_eq!(chunk(&mut stream).await, None);
    }

    #[test]
    fn frames_are_written_by_hand_as_format_would() {
        for id in [0, 1, 9, 10, 4567, u64::MAX] {
            let tail = b",\"_meta\":{\"serverTimestamp\":1795379959849}}\n\n";
            let tag = PromptTag { prompt_id: Some("p".into()), originator: None };
            let (got, _) = frame(id, TurnComplete, "{\"a\":1}", TagJson::default().get(&tag), tail);
            let want = format!(
                "id: {id}\nevent: turn_complete\ndata: {{\"id\":{id},\"v\":1,\"type\":\"turn_complete\",\"data\":{{\"a\":1}},\"promptId\":\"p\",\"_meta\":{{\"serverTimestamp\":1795379959849}}}}\n\n"
            );
            assert_eq!(String::from_utf8_lossy(&got), want);
        }
    }

    #[test]
    fn decimals_match_display() {
        for n in [0, 7, 10, 99, 100, 1_795_379_959_849, u64::MAX] {
            let mut out = BytesMut::new();
            push_u64(&mut out, n);
            assert_eq!(&out[..], n.to_string().as_bytes());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_published_in_order_under_consecutive_ids() {
        let stats = Arc::new(BusStats::default());
        let b = Bus::new("s1".into(), limits(3, 3, 10), stats.clone());
        assert_eq!(
            b.publish_raw_many(SessionUpdate, ["{\"n\":1}", "{\"n\":2}"], &PromptTag::default()),
            Some(2)
        );
        assert_eq!(b.publish_raw_many(SessionUpdate, [""; 0], &PromptTag::default()), None);
        assert_eq!(b.publish_raw_many(SessionUpdate, ["{}", "{}", "{}"], &PromptTag::default()), Some(5));
        assert_eq!(stats.published.load(Ordering::Relaxed), 5);
        assert_eq!(lock(&b.inner).front(), 3, "the ring's bound holds within a burst");
        let text = collect_after_close(&b, 0).await;
        assert_eq!(idless(&text, "state_resync_required")[0]["earliestAvailableId"], 3);
        assert_eq!(ids(&text), [3, 4, 5]);
    }

    /// A burst larger than a block, with a frame larger than a block amid it, reads back event for
    /// event: each frame is whole and its own, whichever block it was written into.
    #[tokio::test(start_paused = true)]
    async fn a_burst_over_several_blocks_reads_back_event_for_event() {
        let b = bus(1000, 10);
        let sent: Vec<String> = (0..600)
            .map(|i| match i {
                300 => format!("{{\"big\":\"{}\"}}", "x".repeat(FRAME_BLOCK + 10)),
                _ => format!("{{\"i\":{i},\"pad\":\"{}\"}}", "y".repeat(i % 300)),
            })
            .collect();
        assert_eq!(
            b.publish_raw_many(SessionUpdate, sent.iter().map(String::as_str), &PromptTag::default()),
            Some(600)
        );
        let text = collect_after_close(&b, 0).await;
        assert_eq!(ids(&text), (1..=600).collect::<Vec<u64>>());
        let got: Vec<serde_json::Value> = text
            .split("\n\n")
            .filter_map(|f| f.split_once("\nevent: session_update\ndata: "))
            .map(|(_, d)| serde_json::from_str::<serde_json::Value>(d).expect("json")["data"].clone())
            .collect();
        assert_eq!(got.len(), 600);
        for (data, want) in got.iter().zip(&sent) {
            assert_eq!(data, &serde_json::from_str::<serde_json::Value>(want).expect("json"));
        }
    }

    /// A block sized by `frame_room` holds the frame without growing, and wastes little: the
    /// digits an id has fewer than the widest, and a few bytes.
    #[test]
    fn a_frame_fits_its_room() {
        let tail = b",\"_meta\":{\"serverTimestamp\":1795379959849}}\n\n";
        let tags = [
            PromptTag::default(),
            PromptTag { prompt_id: Some("p-1".into()), originator: Some("phone".into()) },
        ];
        for tag in &tags {
            let mut tags = TagJson::default();
            let tag = tags.get(tag);
            for (id, kind, data) in [
                (1, SessionUpdate, "{}"),
                (u64::MAX, SessionUpdate, "{\"update\":\"x\"}"),
                (u64::MAX, TurnComplete, "{\"stopReason\":\"end_turn\"}"),
            ] {
                let room = frame_room(data.as_bytes(), kind, tag, tail);
                let (frame, _) = frame(id, kind, data, tag, tail);
                assert!(frame.len() <= room, "{} bytes in a room of {room}", frame.len());
                // 96 less the frame's 49 fixed bytes and its id, twice.
                let slack = 96 - 49 - 2 * id.to_string().len();
                assert_eq!(room - frame.len(), slack, "{}", String::from_utf8_lossy(&frame));
            }
        }
    }

    #[test]
    fn a_block_holds_what_is_left_of_the_burst_up_to_its_bound() {
        // The frame fits what the block has left: no new block.
        assert_eq!(new_block(300, 300, 10_000), None);
        // A lone event, or the burst's last: a block of its own size.
        assert_eq!(new_block(0, 300, 300), Some(300));
        assert_eq!(new_block(299, 300, 300), Some(300));
        // A burst: what is left of it, up to the bound.
        assert_eq!(new_block(0, 300, 5_000), Some(5_000));
        assert_eq!(new_block(0, 300, 10 * FRAME_BLOCK), Some(FRAME_BLOCK));
        // A frame larger than the bound: a block of its own size.
        assert_eq!(new_block(0, FRAME_BLOCK + 1, 10 * FRAME_BLOCK), Some(FRAME_BLOCK + 1));
    }

    #[test]
    fn carriage_returns_cannot_split_a_frame() {
        let b = bus(10, 10);
        b.publish_raw(SessionUpdate, "{\"a\":\r1}", &PromptTag::default());
        let inner = b.inner.lock().expect("lock");
        assert!(!inner.ring[0].bytes().contains(&b'\r'));
    }
}

/// The frames the bus writes, read back (`frames.rs`): what was published comes back whole, by the
/// reader and by the frame's shape alike. Here, not in `frames.rs`, so the reader stays below the
/// bus (the bus hands out shapes; the reader knows nothing of the writer).
#[cfg(test)]
mod read_back {
    use super::super::frames::{EventFrame, Piece, split};
    use super::*;
    use serde_json::json;

    /// A frame as the bus writes it, with a tag; and the shape the bus notes beside it reads the
    /// same parts as the reader finds in its bytes (every frame of these tests).
    fn written(
        id: u64,
        kind: EventKind,
        data: &str,
        prompt: Option<&str>,
        originator: Option<&str>,
    ) -> Bytes {
        let tag =
            PromptTag { prompt_id: prompt.map(str::to_owned), originator: originator.map(str::to_owned) };
        let tail = b",\"_meta\":{\"serverTimestamp\":1700000000000}}\n\n";
        let (frame, shape) = frame(id, kind, data, TagJson::default().get(&tag), tail);
        let shape = shape.expect("a frame under 4 GiB has a shape");
        assert_eq!(shape.read(&frame, id), EventFrame::read(&frame), "{data} {prompt:?} {originator:?}");
        frame
    }

    fn event(frame: &[u8]) -> EventFrame<'_> {
        match EventFrame::read(frame) {
            Piece::Event(e) => e,
            other => panic!("not an event: {other:?}"),
        }
    }

    #[test]
    fn an_id_frame_gives_back_what_was_published() {
        let data = r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk"}}"#;
        let f = written(42, EventKind::SessionUpdate, data, Some("p-1"), Some("alice"));
        let e = event(&f);
        assert_eq!(e.id, Some(42));
        assert_eq!(e.kind, "session_update");
        assert_eq!(std::str::from_utf8(e.data).ok(), Some(data));
        assert_eq!(e.prompt_id_text(), Some("p-1"));
        assert!(e.is_from("alice") && !e.is_from("alic") && !e.is_from("\"alice\""));
        let untagged = written(7, EventKind::TurnComplete, "{}", None, None);
        let e = event(&untagged);
        assert_eq!(
            (e.id, e.kind, e.data, e.prompt_id, e.originator),
            (Some(7), "turn_complete", &b"{}"[..], None, None)
        );
        let prompt_only = written(8, EventKind::TurnComplete, "{}", Some("p"), None);
        assert_eq!(
            (event(&prompt_only).prompt_id, event(&prompt_only).originator),
            (Some(&b"\"p\""[..]), None)
        );
        assert!(!event(&prompt_only).is_from("p"), "no originator, from nobody");
    }

    /// Data that carries the envelope's own keys as structure, or as text, is not mistaken for
    /// the tag, with or without a tag after it.
    #[test]
    fn data_that_looks_like_the_envelope_stays_data() {
        let tricky = [
            r#"{"a":1,"originatorClientId":"x"}"#,
            r#"{"a":1,"promptId":"p","originatorClientId":"x"}"#,
            r#"{"t":"\",\"originatorClientId\":\"x\""}"#,
            r#"{"m":",\"_meta\":{\"serverTimestamp\":1}}"}"#,
            r#"{"_meta":{"serverTimestamp":5}}"#,
            r#""a string, \"promptId\":\"q\"""#,
            r#"[1,"x"]"#,
        ];
        for data in tricky {
            for (prompt, originator) in
                [(None, None), (Some("p"), None), (None, Some("o")), (Some("p"), Some("o"))]
            {
                let f = written(3, EventKind::SessionUpdate, data, prompt, originator);
                let e = event(&f);
                assert_eq!(std::str::from_utf8(e.data).ok(), Some(data), "{data} {prompt:?} {originator:?}");
                assert_eq!(e.prompt_id_text(), prompt, "{data}");
                let quoted = originator.map(|o| serde_json::to_string(o).expect("json"));
                assert_eq!(e.originator, quoted.as_deref().map(str::as_bytes), "{data}");
            }
        }
    }

    /// Tags whose text needs escapes (quotes, backslashes at the end) are read whole.
    #[test]
    fn escaped_tags_are_read_whole() {
        for (prompt, originator) in [("a\"b", "c\\"), ("\\", "\"\\\""), ("", "x")] {
            for data in [r#"{"a":"\\"}"#, r#""s\"""#, "{}"] {
                let f = written(9, EventKind::SessionUpdate, data, Some(prompt), Some(originator));
                let e = event(&f);
                assert_eq!(std::str::from_utf8(e.data).ok(), Some(data), "{prompt:?} {originator:?} {data}");
                let quoted = |t: &str| serde_json::to_string(t).expect("json");
                assert_eq!(
                    (e.prompt_id.map(<[u8]>::to_vec), e.originator.map(<[u8]>::to_vec)),
                    (Some(quoted(prompt).into_bytes()), Some(quoted(originator).into_bytes()))
                );
            }
        }
    }

    #[test]
    fn idless_frames_and_keepalives() {
        let f = idless_frame(EventKind::ReplayComplete, &json!({"replayedCount": 2}));
        let e = event(&f);
        assert_eq!((e.id, e.kind, e.data), (None, "replay_complete", &br#"{"replayedCount":2}"#[..]));
        assert_eq!(EventFrame::read(b": heartbeat\n\n"), Piece::Keepalive);
        assert_eq!(EventFrame::read(RETRY), Piece::Keepalive);
        assert_eq!(EventFrame::read(b"id: x\nevent: a\ndata: {}\n\n"), Piece::Unknown);
        assert_eq!(EventFrame::read(b"garbage"), Piece::Unknown);
        // A frame whose head does not repeat its own id and type is not the bus's.
        let mismatched = b"id: 1\nevent: a\ndata: {\"id\":2,\"v\":1,\"type\":\"a\",\"data\":{},\"_meta\":{\"serverTimestamp\":1}}\n\n";
        assert_eq!(EventFrame::read(mismatched), Piece::Unknown);
    }

    #[test]
    fn a_batch_splits_into_its_frames() {
        let a = written(1, EventKind::SessionUpdate, "{}", None, None);
        let b = written(
            2,
            EventKind::TurnComplete,
            r#"{"x":"a\n\nb"}"#.replace("\n", "\\n").as_str(),
            None,
            None,
        );
        let batch = [&a[..], b": heartbeat\n\n", &b[..]].concat();
        let frames: Vec<&[u8]> = split(&batch).collect();
        assert_eq!(frames, vec![&a[..], b": heartbeat\n\n", &b[..]]);
        assert_eq!(split(b"").count(), 0);
    }
}

//! The writer's queue, shared by the stores with a writer of their own ([`super::SqliteStore`],
//! [`super::PgStore`]): the writes ([`Op`]), the bounds checked before each send, the counters, and
//! what a failed transaction leaves to answer and count ([`Taken`], [`unwritten`], [`finish`]).
//! The backends differ only in how they write a batch.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use bytes::Bytes;

use super::api::{
    Ack, Acker, AuditRecord, SessionRecord, SessionState, StoreStats, StoredDevice, TurnRecord, WriteError,
};
use super::decide::GapTracker;

/// Events queued for the writer at most: 64 Ki events is several seconds of the fastest stream the
/// benchmark drives (about 30 k events/s) — a disk stall shorter than that loses nothing.
pub(super) const QUEUE_EVENTS: usize = 65_536;
/// Bytes of event frames queued at most (the same bound as one session's replay ring).
pub(super) const QUEUE_BYTES: usize = 64 * 1024 * 1024;
/// Writes other than events queued at most (audit, sessions, rules, flushes): those arrive at the
/// pace of people and agents' tool calls, far below this.
pub(super) const QUEUE_CONTROL_RESERVE: usize = 4096;
/// A transaction holds at most this many writes...
pub(super) const BATCH_MAX_OPS: usize = 16_384;
/// ...or this many frame bytes...
pub(super) const BATCH_MAX_BYTES: usize = 16 * 1024 * 1024;
/// ...or stays open at most this long, so the newest committed event is never older than this
/// plus one commit while the disk keeps up (the kill -9 promise allows one second).
pub(super) const COMMIT_INTERVAL: Duration = Duration::from_millis(100);
/// How long the writer lets events (and audit records) gather before it starts a transaction for
/// them: a commit per 10 ms rather than per burst of a few events, for at most 10 ms more between
/// an event and its commit (the promise allows a second).
pub(super) const LINGER: Duration = Duration::from_millis(10);
/// A write for the writer thread.
pub(super) enum Op {
    /// A burst of consecutive events, `first_id` on.
    Events {
        session_id: Arc<str>,
        first_id: u64,
        frames: Vec<Bytes>,
    },
    SessionStarted {
        record: SessionRecord,
        after_id: u64,
        resumed: bool,
    },
    SessionEnded {
        session_id: String,
        state: SessionState,
        reason: String,
        last_id: u64,
        at: u64,
    },
    Audit(AuditRecord),
    Turn(TurnRecord),
    PutRule {
        workspace: String,
        rule_id: String,
        rule: String,
        at: u64,
        ack: Acker,
    },
    DeleteRule {
        workspace: String,
        rule_id: String,
        ack: Acker,
    },
    /// A recorded session and its events are deleted (`Store::delete_session`).
    DeleteSession {
        session_id: String,
        ack: Acker,
    },
    PutDevice(StoredDevice, Acker),
    DeviceSeen {
        device_id: String,
        at: u64,
    },
    RevokeDevice {
        device_id: String,
        at: u64,
        ack: Acker,
    },
    Flush(Acker),
    /// A pairing code is claimed for good (`Fleet::claim_pairing_code`): answered `Err` when a
    /// daemon sharing the store claimed it first. Only a shared store is sent one.
    ClaimCode {
        digest: [u8; 32],
        ack: Acker,
    },
    /// A pairing code is kept for the fleet (`Fleet::put_pairing_code`). Only a shared store is
    /// sent one.
    PutCode {
        digest: [u8; 32],
        name: Option<String>,
        role: String,
        ttl_ms: u64,
        ack: Acker,
    },
    /// The store is dropped: commit what is queued, close the connection, end the thread.
    Stop,
}

impl Op {
    /// The write is not taken (the queue is full, the writer gone): the caller waiting on it hears
    /// why.
    pub(super) fn refuse(self, why: &str) {
        match self {
            Op::PutRule { ack, .. }
            | Op::DeleteRule { ack, .. }
            | Op::DeleteSession { ack, .. }
            | Op::PutDevice(_, ack)
            | Op::RevokeDevice { ack, .. }
            | Op::ClaimCode { ack, .. }
            | Op::PutCode { ack, .. }
            | Op::Flush(ack) => {
                let _ = ack.send(Err(WriteError(why.to_owned())));
            }
            _ => {}
        }
    }
}

/// What the publishers and the writer share: the queue's event budget and the counters.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) queued_events: AtomicUsize,
    pub(super) queued_bytes: AtomicUsize,
    /// Writes other than events in the channel (bounded by [`QUEUE_CONTROL_RESERVE`]).
    pub(super) queued_control: AtomicUsize,
    pub(super) events_written: AtomicU64,
    pub(super) events_dropped: AtomicU64,
    pub(super) gaps: AtomicU64,
    pub(super) commits: AtomicU64,
    pub(super) writes_dropped: AtomicU64,
    pub(super) writes_failed: AtomicU64,
    pub(super) commits_failed: AtomicU64,
}

/// The publishers' end of the writer's channel. Never blocks; bounded by the counters in
/// [`Counters`], checked before each send.
#[derive(Debug)]
pub(super) struct Queue {
    pub(super) tx: Sender<Op>,
    pub(super) counters: Arc<Counters>,
}

impl Queue {
    /// Queues a write other than an event; counted when [`QUEUE_CONTROL_RESERVE`] of them wait
    /// already (the writer is stuck), and its [`Ack`], if any, answered with the reason.
    pub(super) fn send(&self, op: Op) {
        let control = &self.counters.queued_control;
        let (what, op) = if control.fetch_add(1, Ordering::Relaxed) >= QUEUE_CONTROL_RESERVE {
            ("the store's queue is full", op)
        } else {
            match self.tx.send(op) {
                Ok(()) => return,
                Err(std::sync::mpsc::SendError(op)) => ("the store's writer has stopped", op),
            }
        };
        control.fetch_sub(1, Ordering::Relaxed);
        self.counters.writes_dropped.fetch_add(1, Ordering::Relaxed);
        tracing::error!("{what}: a write to the state database was dropped");
        op.refuse(what);
    }

    /// Queues a write the caller waits on.
    pub(super) fn send_acked(&self, op: impl FnOnce(Acker) -> Op) -> Ack {
        let (acker, ack) = Ack::pair();
        self.send(op(acker));
        ack
    }

    /// A burst of events; dropped and counted (the writer then records a gap) when the queue has
    /// no room for it.
    pub(super) fn append_events(&self, session_id: &Arc<str>, first_id: u64, frames: Vec<Bytes>) {
        let counters = &*self.counters;
        let (count, len) = (frames.len(), frames.iter().map(Bytes::len).sum::<usize>());
        let events = counters.queued_events.fetch_add(count, Ordering::Relaxed);
        let bytes = counters.queued_bytes.fetch_add(len, Ordering::Relaxed);
        let op = Op::Events { session_id: session_id.clone(), first_id, frames };
        if events + count > QUEUE_EVENTS || bytes + len > QUEUE_BYTES || self.tx.send(op).is_err() {
            counters.queued_events.fetch_sub(count, Ordering::Relaxed);
            counters.queued_bytes.fetch_sub(len, Ordering::Relaxed);
            counters.events_dropped.fetch_add(count as u64, Ordering::Relaxed);
        }
    }

    /// The figures, with the backend's size on disk.
    pub(super) fn stats(&self, db_bytes: u64) -> StoreStats {
        let s = &*self.counters;
        StoreStats {
            durable: true,
            db_bytes,
            events_written: s.events_written.load(Ordering::Relaxed),
            events_dropped: s.events_dropped.load(Ordering::Relaxed),
            gaps: s.gaps.load(Ordering::Relaxed),
            commits: s.commits.load(Ordering::Relaxed),
            writes_dropped: s.writes_dropped.load(Ordering::Relaxed),
            writes_failed: s.writes_failed.load(Ordering::Relaxed),
            commits_failed: s.commits_failed.load(Ordering::Relaxed),
        }
    }
}

/// What one transaction took off the queue: the [`Ack`]s to answer when it ends, and what it
/// held, to count and to put back as a gap if it fails.
#[derive(Default)]
pub(super) struct Taken {
    pub(super) acks: Vec<Acker>,
    /// Writes other than events (flushes are not writes).
    pub(super) control: u64,
    pub(super) events: u64,
    /// What the gap tracker knew of each session before this transaction recorded its events, in
    /// the order taken (restored in reverse).
    pub(super) marks: Vec<(Arc<str>, Option<u64>)>,
    /// The store was dropped: this is the last transaction.
    pub(super) stop: bool,
}

/// An op taken off the queue and never written (its transaction failed): counted, its ack
/// kept for the answer.
pub(super) fn unwritten(counters: &Counters, op: Op, taken: &mut Taken) {
    match op {
        Op::Events { frames, .. } => {
            let len: usize = frames.iter().map(Bytes::len).sum();
            counters.queued_events.fetch_sub(frames.len(), Ordering::Relaxed);
            counters.queued_bytes.fetch_sub(len, Ordering::Relaxed);
            // The gap tracker never saw them: the next event recorded finds them missing.
            taken.events += frames.len() as u64;
        }
        Op::Stop => taken.stop = true,
        op => {
            counters.queued_control.fetch_sub(1, Ordering::Relaxed);
            match op {
                Op::PutRule { ack, .. }
                | Op::DeleteRule { ack, .. }
                | Op::DeleteSession { ack, .. }
                | Op::PutDevice(_, ack)
                | Op::RevokeDevice { ack, .. }
                | Op::ClaimCode { ack, .. }
                | Op::PutCode { ack, .. } => {
                    taken.control += 1;
                    taken.acks.push(ack);
                }
                Op::Flush(ack) => taken.acks.push(ack),
                _ => taken.control += 1,
            }
        }
    }
}

/// A transaction ended with `written` (the events it recorded, or its error): every [`Ack`] it
/// took is answered (`Ok` once committed, the error when it failed); a failure is counted, and
/// the sessions it recorded events of go back to where they were in `gaps`, so the next event
/// recorded (or their end) writes the lost ids as a gap. Returns whether the store was dropped.
pub(super) fn finish<E: std::fmt::Display>(
    counters: &Counters,
    gaps: &mut GapTracker,
    mut taken: Taken,
    written: Result<u64, E>,
) -> bool {
    let answer = match written {
        Ok(written) => {
            counters.commits.fetch_add(1, Ordering::Relaxed);
            counters.events_written.fetch_add(written, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => {
            for (session_id, mark) in taken.marks.drain(..).rev() {
                gaps.restore(session_id, mark);
            }
            counters.commits_failed.fetch_add(1, Ordering::Relaxed);
            counters.writes_failed.fetch_add(taken.control, Ordering::Relaxed);
            counters.events_dropped.fetch_add(taken.events, Ordering::Relaxed);
            tracing::error!(
                error = %e, writes = taken.control, events = taken.events,
                "a transaction on the state database failed: its writes are lost (counted in writesFailed), \
                 and the requests waiting on them were refused"
            );
            Err(WriteError(e.to_string()))
        }
    };
    for ack in taken.acks {
        let _ = ack.send(answer.clone());
    }
    taken.stop
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::api::Ack;

    /// A write the queue does not take is answered with why, whichever kind of acknowledged write
    /// it is; an unacknowledged one (an event, an audit record) has nobody to tell.
    #[test]
    fn a_refused_write_tells_its_waiter_why() {
        let acked: [fn(Acker) -> Op; 7] = [
            |ack| Op::PutRule { workspace: "/w".into(), rule_id: "r".into(), rule: "{}".into(), at: 1, ack },
            |ack| Op::DeleteRule { workspace: "/w".into(), rule_id: "r".into(), ack },
            |ack| Op::DeleteSession { session_id: "s".into(), ack },
            |ack| Op::RevokeDevice { device_id: "dev-1".into(), at: 1, ack },
            |ack| Op::ClaimCode { digest: [0; 32], ack },
            |ack| Op::PutCode { digest: [0; 32], name: None, role: "voter".into(), ttl_ms: 1, ack },
            Op::Flush,
        ];
        for make in acked {
            let (acker, ack) = Ack::pair();
            make(acker).refuse("the queue is full");
            assert_eq!(ack.wait_blocking(), Err(WriteError("the queue is full".into())));
        }
        Op::Stop.refuse("nobody waits");
    }

    #[test]
    fn an_ack_answers_what_the_writer_said_or_that_it_stopped() {
        let (acker, ack) = Ack::pair();
        let _ = acker.send(Ok(()));
        assert_eq!(ack.wait_blocking(), Ok(()));
        let (acker, ack) = Ack::pair();
        let _ = acker.send(Err(WriteError("disk full".into())));
        assert_eq!(ack.wait_blocking(), Err(WriteError("disk full".into())));
        let (acker, ack) = Ack::pair();
        drop(acker);
        assert_eq!(ack.wait_blocking(), Err(WriteError("the store's writer has stopped".into())));
        assert_eq!(
            Ack::ready(Err(WriteError("no disk".into()))).wait_blocking(),
            Err(WriteError("no disk".into()))
        );
    }

    fn queue() -> (Queue, std::sync::mpsc::Receiver<Op>) {
        let (tx, rx) = std::sync::mpsc::channel();
        (Queue { tx, counters: Arc::default() }, rx)
    }

    fn frames(sizes: &[usize]) -> Vec<Bytes> {
        sizes.iter().map(|n| Bytes::from(vec![b'x'; *n])).collect()
    }

    /// A burst that fits to the last event and the last byte is queued; one more event or one
    /// more byte is dropped whole and counted, and takes nothing from the budget. The bounds are
    /// the documented ones (docs/protocol.md's bounds table: 65 536 events, 64 MiB).
    #[test]
    fn a_burst_is_queued_up_to_exactly_the_event_and_byte_bounds() {
        let sid: Arc<str> = Arc::from("s");
        let (q, rx) = queue();
        q.counters.queued_events.store(65_536 - 2, Ordering::Relaxed);
        q.append_events(&sid, 1, frames(&[1, 1]));
        assert_eq!(
            (q.counters.queued_events.load(Ordering::Relaxed), q.stats(0).events_dropped),
            (65_536, 0)
        );
        q.append_events(&sid, 3, frames(&[1]));
        assert_eq!(
            (q.counters.queued_events.load(Ordering::Relaxed), q.stats(0).events_dropped),
            (65_536, 1)
        );
        assert_eq!(rx.try_iter().count(), 1, "only the burst that fit was sent");

        let (q, rx) = queue();
        q.counters.queued_bytes.store(64 * 1024 * 1024 - 10, Ordering::Relaxed);
        q.append_events(&sid, 1, frames(&[4, 6]));
        assert_eq!(
            (q.counters.queued_bytes.load(Ordering::Relaxed), q.stats(0).events_dropped),
            (64 * 1024 * 1024, 0)
        );
        q.append_events(&sid, 3, frames(&[1]));
        assert_eq!(
            (q.counters.queued_bytes.load(Ordering::Relaxed), q.stats(0).events_dropped),
            (64 * 1024 * 1024, 1)
        );
        assert_eq!(q.counters.queued_events.load(Ordering::Relaxed), 2);
        assert_eq!(rx.try_iter().count(), 1);

        let (q, rx) = queue();
        drop(rx);
        q.append_events(&sid, 1, frames(&[3, 3]));
        assert_eq!(
            (
                q.counters.queued_events.load(Ordering::Relaxed),
                q.counters.queued_bytes.load(Ordering::Relaxed)
            ),
            (0, 0),
            "a burst the stopped writer cannot take gives its budget back"
        );
        assert_eq!(q.stats(0).events_dropped, 2);
    }
}

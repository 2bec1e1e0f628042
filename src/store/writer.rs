//! The one writer of both databases ([`super::SqliteStore`], [`super::PgStore`]): a thread that
//! takes the queue ([`super::queue`]) in batches and commits each as one transaction, the runs of
//! events it builds on the way, the gap marking, and the half of [`Store`] that only queues
//! ([`Writes`]). What differs between the databases is a [`Dialect`]: how a connection is had and
//! a transaction begun, the SQL of each statement ([`Statements`]), retention, and what is done
//! when the writer stops. The writer never names a database.
//!
//! The statements are `async` because PostgreSQL's driver is; SQLite's are plain calls that are
//! always ready, driven by [`Inline`]. One batch is one future, driven to its end by the
//! dialect's [`Drive`] (PostgreSQL's: on its runtime, within a deadline).
//!
//! [`Store`]: super::Store

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;

use super::api::{
    Ack, Acker, AuditRecord, SessionRecord, SessionState, StoredDevice, TurnRecord, WriteError, Writes,
};
use super::chunk::RunBuilder;
use super::decide::{Burst, GapTracker};
use super::fleet::CODE_ALREADY_CLAIMED;
use super::queue::{
    BATCH_MAX_BYTES, BATCH_MAX_OPS, COMMIT_INTERVAL, Counters, LINGER, Op, Queue, Taken, finish, unwritten,
};
use crate::sync::lock;

/// What a database brings to the writer.
pub(super) trait Dialect {
    type Error: std::fmt::Display;
    /// A connection to write on: the writer's own (SQLite) or one lent by the pool (PostgreSQL).
    type Conn<'a>
    where
        Self: 'a;
    /// One transaction on a connection.
    type Tx<'c>: Statements<Error = Self::Error>;
    /// Runs a batch's future to its end.
    type Driver: Drive;

    fn driver(&self) -> Self::Driver;
    async fn connect(&mut self) -> Result<Self::Conn<'_>, Self::Error>;
    /// Begins a transaction. SQLite's takes the write lock at once, so a database another
    /// process holds fails here, before anything but the batch's first write is taken off the queue.
    async fn begin<'c>(conn: &'c mut Self::Conn<'_>) -> Result<Self::Tx<'c>, Self::Error>;
    /// Retention (`--history-events`, `--history-days`): once just after boot, then every
    /// minute. Logs its own failures: the writer goes on either way.
    fn maintain(&mut self);
    /// The queue is closed and everything in it committed: `Err` says what was left undone.
    fn stopped(&mut self) -> Result<(), String>;
}

/// Drives one batch's future.
pub(super) trait Drive {
    /// `None` when the database did not finish within the dialect's deadline.
    fn drive<F: Future>(&self, work: F) -> Option<F::Output>;
}

/// The SQL of each write, in one transaction.
pub(super) trait Statements {
    type Error;
    /// A session started afresh (not resumed) forgets the events and turns recorded under its id.
    async fn forget_history(&self, session_id: &str) -> Result<(), Self::Error>;
    async fn session_started(
        &self,
        record: &SessionRecord,
        after_id: u64,
        resumed: bool,
    ) -> Result<(), Self::Error>;
    async fn session_ended(&self, ended: &Ended<'_>) -> Result<(), Self::Error>;
    async fn audit(&self, record: &AuditRecord) -> Result<(), Self::Error>;
    async fn turn(&self, turn: &TurnRecord) -> Result<(), Self::Error>;
    async fn put_rule(&self, workspace: &str, rule_id: &str, rule: &str, at: u64) -> Result<(), Self::Error>;
    async fn delete_rule(&self, workspace: &str, rule_id: &str) -> Result<(), Self::Error>;
    /// A recorded session and its events.
    async fn delete_session(&self, session_id: &str) -> Result<(), Self::Error>;
    async fn put_device(&self, device: &StoredDevice) -> Result<(), Self::Error>;
    async fn device_seen(&self, device_id: &str, at: u64) -> Result<(), Self::Error>;
    async fn revoke_device(&self, device_id: &str, at: u64) -> Result<(), Self::Error>;
    /// Claims a pairing code for good: `false` when a daemon sharing the store claimed it first.
    async fn claim_code(&self, digest: &[u8; 32]) -> Result<bool, Self::Error>;
    async fn put_code(&self, code: &NewCode<'_>) -> Result<(), Self::Error>;
    /// Events `from..=to` were streamed but not recorded: a row with no frames.
    async fn insert_gap(&self, session_id: &str, from: u64, to: u64) -> Result<(), Self::Error>;
    async fn insert_run(&self, session_id: &str, run: &RunBuilder) -> Result<(), Self::Error>;
    async fn set_last_event_id(&self, session_id: &str, id: u64) -> Result<(), Self::Error>;
    async fn commit(self) -> Result<(), Self::Error>;
}

/// A session's end, as [`Op::SessionEnded`] carries it.
pub(super) struct Ended<'a> {
    pub(super) session_id: &'a str,
    pub(super) state: SessionState,
    pub(super) reason: &'a str,
    pub(super) last_id: u64,
    pub(super) at: u64,
}

/// A pairing code kept for the fleet, as [`Op::PutCode`] carries it.
pub(super) struct NewCode<'a> {
    pub(super) digest: &'a [u8; 32],
    pub(super) name: Option<&'a str>,
    pub(super) role: &'a str,
    pub(super) ttl_ms: u64,
}

/// Drives a future whose every step is ready at once (SQLite's statements are plain calls).
pub(super) struct Inline;

impl Drive for Inline {
    fn drive<F: Future>(&self, work: F) -> Option<F::Output> {
        let mut work = pin!(work);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            match work.as_mut().poll(&mut cx) {
                Poll::Ready(out) => return Some(out),
                // Never taken with SQLite's statements; were one ever to wait, it is polled again
                // rather than lost.
                Poll::Pending => std::thread::yield_now(),
            }
        }
    }
}

/// The writer thread: owns the dialect's write side.
pub(super) struct Writer<D> {
    db: D,
    rx: Receiver<Op>,
    counters: Arc<Counters>,
    gaps: GapTracker,
}

/// The store's end of its writer: the queue, and the thread, joined when the store closes or is
/// dropped so that its connection is closed when the store is gone.
#[derive(Debug)]
pub(super) struct Writing {
    pub(super) queue: Queue,
    thread: Mutex<Option<JoinHandle<Result<(), String>>>>,
}

/// How often retention runs (and once just after boot); a pass may take at most this long.
pub(super) const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(60);

impl Writing {
    /// Starts `db`'s writer thread.
    pub(super) fn start<D: Dialect + Send + 'static>(db: D) -> std::io::Result<Writing> {
        let (tx, rx) = std::sync::mpsc::channel();
        let counters = Arc::new(Counters::default());
        let writer = Writer { db, rx, counters: counters.clone(), gaps: GapTracker::default() };
        let thread = std::thread::Builder::new().name("store-writer".into()).spawn(move || writer.run())?;
        Ok(Writing { queue: Queue { tx, counters }, thread: Mutex::new(Some(thread)) })
    }

    /// Commits what is queued, stops the writer and waits for it: `Err` says what it left undone.
    pub(super) fn close(&self) -> Result<(), WriteError> {
        let Some(thread) = lock(&self.thread).take() else {
            return Err(WriteError("the store was closed already".into()));
        };
        if self.queue.tx.send(Op::Stop).is_err() {
            return Err(WriteError("the store's writer has stopped".into()));
        }
        match thread.join() {
            Ok(result) => result.map_err(WriteError),
            Err(_) => Err(WriteError("the store's writer panicked".into())),
        }
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        // A blocking send: the writer drains the queue first, so this waits at most for it.
        if self.queue.tx.send(Op::Stop).is_ok()
            && let Some(thread) = lock(&self.thread).take()
        {
            let _ = thread.join();
        }
    }
}

/// A store whose writes go through a [`Writer`]: its [`Writes`] are this file's.
pub(super) trait Written {
    fn writing(&self) -> &Writing;
}

impl<T: Written> Writes for T {
    fn session_started(&self, session: &SessionRecord, after_id: u64, resumed: bool) {
        self.writing().queue.send(Op::SessionStarted { record: session.clone(), after_id, resumed });
    }

    fn append_events(&self, session_id: &Arc<str>, first_id: u64, frames: Vec<Bytes>) {
        self.writing().queue.append_events(session_id, first_id, frames);
    }

    fn session_ended(&self, session_id: &str, state: SessionState, reason: &str, last_id: u64, at: u64) {
        self.writing().queue.send(Op::SessionEnded {
            session_id: session_id.to_owned(),
            state,
            reason: reason.to_owned(),
            last_id,
            at,
        });
    }

    fn audit(&self, record: AuditRecord) {
        self.writing().queue.send(Op::Audit(record));
    }

    fn record_turn(&self, record: TurnRecord) {
        self.writing().queue.send(Op::Turn(record));
    }

    fn put_workspace_rule(&self, workspace: &str, rule_id: &str, rule: &Value) -> Ack {
        self.writing().queue.send_acked(|ack| Op::PutRule {
            workspace: workspace.to_owned(),
            rule_id: rule_id.to_owned(),
            rule: rule.to_string(),
            at: crate::clock::now_ms(),
            ack,
        })
    }

    fn delete_workspace_rule(&self, workspace: &str, rule_id: &str) -> Ack {
        self.writing().queue.send_acked(|ack| Op::DeleteRule {
            workspace: workspace.to_owned(),
            rule_id: rule_id.to_owned(),
            ack,
        })
    }

    fn delete_session(&self, session_id: &str) -> Ack {
        self.writing().queue.send_acked(|ack| Op::DeleteSession { session_id: session_id.to_owned(), ack })
    }

    fn put_device(&self, device: &StoredDevice) -> Ack {
        self.writing().queue.send_acked(|ack| Op::PutDevice(device.clone(), ack))
    }

    fn device_seen(&self, device_id: &str, at: u64) {
        self.writing().queue.send(Op::DeviceSeen { device_id: device_id.to_owned(), at });
    }

    fn revoke_device(&self, device_id: &str, at: u64) -> Ack {
        self.writing().queue.send_acked(|ack| Op::RevokeDevice { device_id: device_id.to_owned(), at, ack })
    }

    fn flush(&self) -> Ack {
        self.writing().queue.send_acked(Op::Flush)
    }

    fn close(&self) -> Result<(), WriteError> {
        self.writing().close()
    }
}

impl<D: Dialect> Writer<D> {
    /// Writes until the store stops, then lets the dialect finish (SQLite checkpoints).
    fn run(mut self) -> Result<(), String> {
        // Retention's first pass runs once the daemon is up, not in the way of its boot.
        let mut next_maintenance = Instant::now();
        loop {
            let wait = next_maintenance.saturating_duration_since(Instant::now());
            let first = match self.rx.recv_timeout(wait) {
                Ok(op) => Some(op),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return self.db.stopped(),
            };
            if let Some(first) = first
                && !self.batch(first)
            {
                return self.db.stopped();
            }
            if Instant::now() >= next_maintenance {
                self.db.maintain();
                next_maintenance = Instant::now() + MAINTENANCE_INTERVAL;
            }
        }
    }

    /// One transaction: `first` and whatever else is queued, within the batch bounds; then every
    /// [`Ack`] it took is answered: `Ok` once committed, the error when it failed (and then what it
    /// held is counted as lost, its events as a gap). `false` once the store has been dropped.
    fn batch(&mut self, first: Op) -> bool {
        if matches!(first, Op::Events { .. } | Op::Audit(_)) {
            // Events arrive in bursts, audit records in pairs (raised, decided): a moment's wait
            // lets the next ones join this transaction, so a steady stream costs a commit per
            // LINGER, not per burst (the publishers never wait: they only queue). Rules, devices
            // and flushes, which a caller waits on, go at once.
            std::thread::sleep(LINGER);
        }
        let mut taken = Taken::default();
        let mut lost_claims = Vec::new();
        let driver = self.db.driver();
        let written = match driver.drive(self.write(first, &mut taken, &mut lost_claims)) {
            Some(written) => written.map_err(|e| e.to_string()),
            None => Err("the database did not commit in time".to_owned()),
        };
        if written.is_err() {
            // Nothing of it committed, so no claim is known lost: they hear the error too.
            taken.acks.append(&mut lost_claims);
            // What was queued meanwhile fails with it rather than wait out the lock's timeout
            // once each: a revocation queued behind a hundred audit records hears at once.
            for _ in 0..BATCH_MAX_OPS {
                let Ok(op) = self.rx.try_recv() else { break };
                unwritten(&self.counters, op, &mut taken);
            }
        } else {
            // Claims another daemon won: answered apart, the rest of the transaction committed.
            for ack in lost_claims {
                let _ = ack.send(Err(WriteError(CODE_ALREADY_CLAIMED.into())));
            }
        }
        // Nothing of a failed transaction is on disk: `finish` answers, counts, and puts the
        // gap tracker back.
        !finish(&self.counters, &mut self.gaps, taken, written)
    }

    /// Writes `first` and what follows it in the queue in one transaction and commits it; returns
    /// the events recorded. What it took off the queue is in `taken` whether it succeeds or not
    /// (`first` too when no transaction could be begun); the claims it lost, in `lost_claims`.
    async fn write(
        &mut self,
        first: Op,
        taken: &mut Taken,
        lost_claims: &mut Vec<Acker>,
    ) -> Result<u64, D::Error> {
        let Writer { db, rx, counters, gaps } = self;
        let mut conn = match db.connect().await {
            Ok(conn) => conn,
            Err(e) => {
                unwritten(counters, first, taken);
                return Err(e);
            }
        };
        let tx = match D::begin(&mut conn).await {
            Ok(tx) => tx,
            Err(e) => {
                unwritten(counters, first, taken);
                return Err(e);
            }
        };
        let started = Instant::now();
        // The run being built per session this transaction; written when it is full, when the
        // session's ids skip or it ends, and at the commit.
        let mut runs: Vec<(Arc<str>, RunBuilder)> = Vec::new();
        let (mut ops, mut bytes, mut written) = (0usize, 0usize, 0u64);
        let mut next = Some(first);
        while let Some(op) = next.take() {
            ops += 1;
            if !matches!(op, Op::Events { .. } | Op::Stop) {
                // Sent through `send`, which counted it (`Stop` comes from the drop, uncounted).
                counters.queued_control.fetch_sub(1, Ordering::Relaxed);
                if !matches!(op, Op::Flush(_)) {
                    taken.control += 1;
                }
            }
            match op {
                Op::Events { session_id, first_id, frames } => {
                    let len: usize = frames.iter().map(Bytes::len).sum();
                    counters.queued_events.fetch_sub(frames.len(), Ordering::Relaxed);
                    counters.queued_bytes.fetch_sub(len, Ordering::Relaxed);
                    taken.events += frames.len() as u64;
                    taken.marks.push((session_id.clone(), gaps.mark(&session_id)));
                    bytes += len;
                    ops += frames.len().saturating_sub(1);
                    let mut slot = runs.iter().position(|(s, _)| *s == session_id);
                    let Burst { skip, mut gap } = gaps.observe(&session_id, first_id, frames.len());
                    if let Some((from, to)) = gap {
                        tx.insert_gap(&session_id, from, to).await?;
                        counters.gaps.fetch_add(1, Ordering::Relaxed);
                    }
                    for (id, frame) in (first_id..).zip(&frames).skip(skip) {
                        // Only the first event recorded follows the gap; the rest follow it.
                        match slot.map(|i| &mut runs[i].1) {
                            Some(run) if gap.is_none() && run.takes(id) => run.push(id, frame),
                            Some(run) => {
                                tx.insert_run(&session_id, run).await?;
                                run.restart(id, frame);
                            }
                            None => {
                                runs.push((session_id.clone(), RunBuilder::new(id, frame)));
                                slot = Some(runs.len() - 1);
                            }
                        }
                        gap = None;
                        written += 1;
                    }
                }
                Op::SessionStarted { record, after_id, resumed } => {
                    if !resumed {
                        tx.forget_history(&record.session_id).await?;
                        runs.retain(|(s, _)| **s != *record.session_id);
                    }
                    tx.session_started(&record, after_id, resumed).await?;
                    let session_id: Arc<str> = Arc::from(record.session_id.as_str());
                    taken.marks.push((session_id.clone(), gaps.mark(&session_id)));
                    gaps.start(session_id, after_id);
                }
                Op::SessionEnded { session_id, state, reason, last_id, at } => {
                    if let Some(i) = runs.iter().position(|(s, _)| **s == *session_id) {
                        let (sid, run) = runs.swap_remove(i);
                        tx.insert_run(&sid, &run).await?;
                        tx.set_last_event_id(&sid, run.last).await?;
                    }
                    taken.marks.push((Arc::from(session_id.as_str()), gaps.mark(&session_id)));
                    if let Some((from, to)) = gaps.end(&session_id, last_id) {
                        tx.insert_gap(&session_id, from, to).await?;
                        counters.gaps.fetch_add(1, Ordering::Relaxed);
                    }
                    let ended = Ended { session_id: &session_id, state, reason: &reason, last_id, at };
                    tx.session_ended(&ended).await?;
                }
                Op::Audit(record) => tx.audit(&record).await?,
                Op::Turn(turn) => tx.turn(&turn).await?,
                Op::PutRule { workspace, rule_id, rule, at, ack } => {
                    taken.acks.push(ack);
                    tx.put_rule(&workspace, &rule_id, &rule, at).await?;
                }
                Op::DeleteRule { workspace, rule_id, ack } => {
                    taken.acks.push(ack);
                    tx.delete_rule(&workspace, &rule_id).await?;
                }
                Op::DeleteSession { session_id, ack } => {
                    taken.acks.push(ack);
                    runs.retain(|(s, _)| **s != *session_id);
                    tx.delete_session(&session_id).await?;
                }
                Op::PutDevice(device, ack) => {
                    taken.acks.push(ack);
                    tx.put_device(&device).await?;
                }
                Op::DeviceSeen { device_id, at } => tx.device_seen(&device_id, at).await?,
                Op::RevokeDevice { device_id, at, ack } => {
                    taken.acks.push(ack);
                    tx.revoke_device(&device_id, at).await?;
                }
                Op::ClaimCode { digest, ack } => {
                    if tx.claim_code(&digest).await? {
                        taken.acks.push(ack);
                    } else {
                        lost_claims.push(ack);
                    }
                }
                Op::PutCode { digest, name, role, ttl_ms, ack } => {
                    taken.acks.push(ack);
                    let code = NewCode { digest: &digest, name: name.as_deref(), role: &role, ttl_ms };
                    tx.put_code(&code).await?;
                }
                Op::Flush(ack) => taken.acks.push(ack),
                Op::Stop => taken.stop = true,
            }
            if !taken.stop
                && ops < BATCH_MAX_OPS
                && bytes < BATCH_MAX_BYTES
                && started.elapsed() < COMMIT_INTERVAL
            {
                next = rx.try_recv().ok();
            }
        }
        for (session_id, run) in &runs {
            tx.insert_run(session_id, run).await?;
            tx.set_last_event_id(session_id, run.last).await?;
        }
        tx.commit().await?;
        Ok(written)
    }
}

//! One accepted connection, served by hyper's HTTP/1.1 or HTTP/2 server (`docs/protocol.md#213-http2`:
//! HTTP/2 by ALPN over TLS, by its preface on plain http) with the deadlines and bounds axum's own
//! `serve` has no knob for (`docs/protocol.md#210-connection-deadlines`):
//!
//! - the **read deadline** ([`ConnIo`]): a new connection must deliver its first request head
//!   within `--header-timeout-ms`; each later head within that long of its first byte; a keep-alive
//!   connection with no request in progress is closed after `--idle-timeout-ms`. No deadline applies
//!   while a request is in progress (a blocking prompt, an event stream): its body has its own.
//! - the **body deadline and budget** ([`RequestBody`]): a request body must arrive within
//!   `--body-timeout-ms` of its head, and the bytes of all bodies being received count against one
//!   global budget ([`MAX_BODY_BYTES_IN_FLIGHT`]).
//! - **JSON for hyper's own answers**: hyper answers a request it cannot parse (a bad request line
//!   or header, a head over [`MAX_HEAD_BYTES`]) by itself, with an empty body; [`ConnIo`] puts the
//!   daemon's `{error, code}` answer in its place.
//! - **Lingering close**: a request answered before its body was read (`413 body_too_large`, a
//!   401 at the perimeter) closes the connection; closing a socket with unread bytes makes the
//!   kernel reset it, and a client that sends its whole body before reading (Python's
//!   `http.client` and `requests`) then gets a broken pipe instead of the answer. So, as nginx's
//!   lingering close does, the daemon shuts its side for writing after the answer and reads and
//!   discards what the client still sends, at most [`LINGER_MAX_BYTES`] for at most
//!   [`LINGER_TIME`], before it closes.
//!
//! - **HTTP/2**: each stream is a request, tracked as one (the read deadline applies when none is
//!   open); each holds a place of `--max-connections` beside its connection's (an event stream
//!   holds one whichever HTTP carries it); the protocol's own bounds (concurrent streams, header
//!   list, pending resets, flow-control windows, send buffers) are named below. What an HTTP/1.1
//!   close does (a refusal, an unread body) a stream reset does, hyper's own; a connection that
//!   ends on a protocol error is counted by its reason (`mediatord_http2_errors_total`).
//!
//! The connection's requests are tracked by [`Phase`], shared by the IO (which enforces the read
//! deadline) and the service (which sees each request start and its response end).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

use super::coalesce::Coalesce;
use super::error::ApiError;
use super::perimeter::Peer;
use crate::config::Config;
use crate::sync::lock;

/// Largest request head (request line and headers) hyper buffers; a larger one is answered
/// `431 headers_too_large`. Node's own limit is 16 KiB; 64 KiB leaves room for long cookies and
/// tokens and keeps `--max-connections` heads under 16 MiB.
pub(super) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Request body bytes being received, all connections together: six full-size (10 MiB) bodies. A
/// body that would go over it is answered `503 body_budget_exceeded`, so slow bodies cannot pin
/// memory without bound (50 connections × 10 MiB used to pin 500 MB).
pub(super) const MAX_BODY_BYTES_IN_FLIGHT: usize = 64 * 1024 * 1024;

/// Bytes a lingering close reads and discards at most: a body several times the 10 MiB cap (a
/// client's oversized upload is usually just over it), read into a small buffer, never kept.
pub(super) const LINGER_MAX_BYTES: usize = 64 * 1024 * 1024;
/// How long a lingering close waits for the client's bytes at most (nginx's `lingering_time`
/// is 30 s; a client that sends 64 MiB in 10 s on loopback or a LAN has long finished).
pub(super) const LINGER_TIME: Duration = Duration::from_secs(10);
/// The buffer a lingering close reads into.
const LINGER_BUFFER: usize = 16 * 1024;

/// What a client speaking HTTP/2 with prior knowledge opens with (RFC 9113 §3.4).
pub(super) const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Streams one HTTP/2 connection may have open at once (browsers open up to 100; Chromium's own
/// server default is 100, nginx's 128): a page following a dozen sessions fits, and a client
/// that opens more is refused per stream (`REFUSED_STREAM`), never queued.
pub(super) const H2_MAX_CONCURRENT_STREAMS: u32 = 128;
/// Streams a client may reset before the daemon has even started serving them, at once: past it the
/// connection is closed `ENHANCE_YOUR_CALM` (the rapid-reset attack, CVE-2023-44487). hyper's
/// default.
pub(super) const H2_MAX_PENDING_RESETS: usize = 20;
/// Streams the daemon may reset for a client's protocol errors before it closes the connection
/// (malformed frames repeated to keep it busy). hyper's default.
pub(super) const H2_MAX_LOCAL_RESETS: usize = 1024;
/// Flow-control windows the daemon gives a client for request bodies: per stream and per
/// connection. What a client can send unread is at most the connection's window.
pub(super) const H2_STREAM_WINDOW: u32 = 256 * 1024;
pub(super) const H2_CONNECTION_WINDOW: u32 = 1024 * 1024;
/// Bytes buffered for one stream whose client does not open its window (an event stream nobody
/// reads): past it the stream's writer waits, the bus's lag limit then ends it, and the
/// connection's other streams go on.
pub(super) const H2_SEND_BUFFER: usize = 64 * 1024;
/// An HTTP/2 connection that has sent nothing for this long (or for `--writer-idle-timeout-ms`,
/// if shorter) is pinged; unanswered for `--writer-idle-timeout-ms`, it is closed and counted as
/// a write timeout. This is HTTP/2's write deadline: a client that stops reading never answers,
/// and flow control keeps the daemon's bytes from ever reaching its socket to time out there.
pub(super) const H2_PING_INTERVAL: Duration = Duration::from_secs(30);

/// The HTTP/2 streams of one connection, each with when its answer began to wait for the client to
/// take it (`0`: not waiting). HTTP/1.1's write deadline is the socket's; over HTTP/2 a stream
/// whose client never opens its window holds its answer without a byte reaching the socket, so
/// the connection checks its streams instead: one waiting for `--writer-idle-timeout-ms` closes
/// it, as a socket that takes no bytes closes an HTTP/1.1 connection.
#[derive(Debug)]
struct Stalls {
    /// The connection's clock: a stream's mark is milliseconds since this, plus one.
    epoch: std::time::Instant,
    /// Await-free critical sections only: a push when a stream starts, a scan on the check.
    streams: Mutex<Vec<std::sync::Weak<std::sync::atomic::AtomicU64>>>,
}

impl Stalls {
    fn new() -> Stalls {
        Stalls { epoch: std::time::Instant::now(), streams: Mutex::new(Vec::new()) }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// A new stream's mark, waiting from now: its answer's first frame is due.
    fn stream(&self) -> Arc<std::sync::atomic::AtomicU64> {
        let mark = Arc::new(std::sync::atomic::AtomicU64::new(self.now()));
        lock(&self.streams).push(Arc::downgrade(&mark));
        mark
    }

    /// Whether a stream has waited longer than `limit`; forgets the streams that ended.
    fn stalled(&self, limit: Duration) -> bool {
        let now = self.now();
        let limit = limit.as_millis() as u64;
        let mut streams = lock(&self.streams);
        streams.retain(|w| w.strong_count() > 0);
        streams.iter().filter_map(std::sync::Weak::upgrade).any(|mark| {
            let since = mark.load(std::sync::atomic::Ordering::Relaxed);
            since != 0 && now.saturating_sub(since) > limit
        })
    }
}

/// Which HTTP a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protocol {
    Http1,
    Http2,
}

/// Reads a plain connection's first bytes, until they are HTTP/2's preface or something else (at
/// most the preface's length), to tell HTTP/2 with prior knowledge from HTTP/1.1; returns which,
/// and the bytes read, to be read again. `None` when the client closed, failed or sent nothing
/// within `deadline`.
pub(super) async fn sniff<I: AsyncRead + Unpin>(
    io: &mut I,
    deadline: Duration,
) -> Option<(Protocol, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let read = async {
        let mut got = Vec::with_capacity(H2_PREFACE.len());
        let mut buf = [0u8; 24];
        loop {
            let want = H2_PREFACE.len() - got.len();
            let n = io.read(&mut buf[..want]).await.ok()?;
            if n == 0 {
                return None;
            }
            got.extend_from_slice(&buf[..n]);
            if !H2_PREFACE.starts_with(&got) {
                return Some((Protocol::Http1, got));
            }
            if got.len() == H2_PREFACE.len() {
                return Some((Protocol::Http2, got));
            }
        }
    };
    tokio::time::timeout(deadline, read).await.ok().flatten()
}

/// A connection whose first bytes were read already ([`sniff`]): they are read again first.
#[derive(Debug)]
pub(super) struct Sniffed<I> {
    first: Vec<u8>,
    taken: usize,
    inner: I,
}

impl<I> Sniffed<I> {
    pub(super) fn new(first: Vec<u8>, inner: I) -> Sniffed<I> {
        Sniffed { first, taken: 0, inner }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Sniffed<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.taken < this.first.len() {
            let rest = &this.first[this.taken..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.taken += n;
            if this.taken == this.first.len() {
                this.first = Vec::new();
                this.taken = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Sniffed<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The connection deadlines and the body budget, shared by every connection.
#[derive(Debug, Clone)]
pub(super) struct Limits {
    pub(super) header_timeout: Duration,
    idle_timeout: Duration,
    body_timeout: Duration,
    /// `--writer-idle-timeout-ms`: over HTTP/2, how long a ping may go unanswered.
    write_idle: Duration,
    body_budget: Arc<Semaphore>,
    /// `--max-connections`' places (the listener's): an HTTP/2 stream holds one while it is open.
    connections: Option<Arc<Semaphore>>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Limits {
    pub(super) fn new(config: &Config) -> Limits {
        Limits {
            header_timeout: config.header_timeout,
            idle_timeout: config.idle_timeout,
            body_timeout: config.body_timeout,
            write_idle: config.writer_idle_timeout,
            body_budget: Arc::new(Semaphore::new(MAX_BODY_BYTES_IN_FLIGHT)),
            connections: None,
            metrics: None,
        }
    }

    /// The listener's connection places, which HTTP/2 streams hold too, and where protocol errors
    /// are counted.
    pub(super) fn with_connections(
        mut self,
        places: Arc<Semaphore>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Limits {
        self.connections = Some(places);
        self.metrics = Some(metrics);
        self
    }
}

/// The future serving `io`, speaking `protocol`, until it closes, or until `stop` fires and its
/// requests in progress are done.
///
/// It is on the heap, one per protocol, and holds what its protocol needs only: the connection's
/// task keeps a pointer to it for the connection's life (an idle event stream's whole life), not
/// room for the larger of the two protocols and the arguments they were built from (issue #46).
pub(super) fn serve<I>(
    io: I,
    protocol: Protocol,
    peer: Peer,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
) -> Pin<Box<dyn Future<Output = ()> + Send>>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let phase = Arc::new(Phase::new(limits.header_timeout, limits.idle_timeout));
    let io = ConnIo::new(io, phase.clone(), protocol);
    let service = ConnService {
        router: TowerToHyperService::new(router),
        peer,
        phase: phase.clone(),
        limits: limits.clone(),
        protocol,
        stalls: (protocol == Protocol::Http2).then(|| Arc::new(Stalls::new())),
    };
    match protocol {
        Protocol::Http2 => {
            Box::pin(
                async move { serve_http2(TokioIo::new(Coalesce::new(io)), service, &limits, stop).await },
            )
        }
        Protocol::Http1 => Box::pin(serve_http1(io, phase, service, stop)),
    }
}

/// Serves an HTTP/1.1 connection: keep-alive, upgrades, and the lingering close after an answer
/// given before its request's body was read. The connection is built before the future, which so
/// holds it and not also the parts it was built from.
fn serve_http1<I>(
    io: ConnIo<I>,
    phase: Arc<Phase>,
    service: ConnService,
    stop: CancellationToken,
) -> impl Future<Output = ()> + Send
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .keep_alive(true)
        .max_header_size(MAX_HEAD_BYTES)
        // Also bounds what hyper buffers while a head is incomplete (and body reads).
        .max_buf_size(MAX_HEAD_BYTES)
        // The read deadline is `ConnIo`'s; hyper's own would need a timer and cannot tell a
        // connection that idles from one that trickles its head.
        .header_read_timeout(None);
    // Upgrades: `/acp`'s WebSocket takes the socket over once its 101 is written. Hyper shuts an
    // unupgraded connection's write side after its last answer (the lingering close's first step).
    let mut conn = builder.serve_connection(TokioIo::new(io), service).with_upgrades();
    async move {
        let done = tokio::select! {
            done = &mut conn => done,
            () = stop.cancelled() => {
                Pin::new(&mut conn).graceful_shutdown();
                (&mut conn).await
            }
        };
        let Some(parts) = conn.into_parts() else {
            return; // upgraded: the socket is the WebSocket's now
        };
        let lingers = done.is_ok() && phase.unread_body.load(std::sync::atomic::Ordering::Acquire);
        // The close on the heap: the connection's future holds no room for it all along.
        Box::pin(close_http1(parts.io.into_inner(), lingers, stop)).await;
    }
}

/// An HTTP/1.1 connection's close: the lingering close when an answer went out before its
/// request's body was read (`lingers`), then the write side shut.
async fn close_http1<I>(mut io: ConnIo<I>, lingers: bool, stop: CancellationToken)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if lingers && !stop.is_cancelled() {
        tokio::select! {
            () = linger(&mut io.inner) => {}
            () = stop.cancelled() => {}
        }
    }
    let _ = tokio::io::AsyncWriteExt::shutdown(&mut io).await;
}

/// Serves an HTTP/2 connection under its bounds ([`H2_MAX_CONCURRENT_STREAMS`] and the rest); a
/// protocol error it ends on is counted by its reason. Its DATA frames reach the socket gathered
/// ([`Coalesce`]).
async fn serve_http2<I>(
    io: TokioIo<Coalesce<ConnIo<I>>>,
    service: ConnService,
    limits: &Limits,
    stop: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
        .max_header_list_size(MAX_HEAD_BYTES as u32)
        .max_pending_accept_reset_streams(H2_MAX_PENDING_RESETS)
        .max_local_error_reset_streams(H2_MAX_LOCAL_RESETS)
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW)
        .max_send_buf_size(H2_SEND_BUFFER)
        .keep_alive_interval(H2_PING_INTERVAL.min(limits.write_idle))
        .keep_alive_timeout(limits.write_idle);
    let service_peer = service.peer.addr;
    let stalls = service.stalls.clone();
    let mut conn = builder.serve_connection(io, service);
    let mut check = tokio::time::interval(limits.write_idle / 4);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let done = loop {
        tokio::select! {
            done = &mut conn => break done,
            () = stop.cancelled() => {
                Pin::new(&mut conn).graceful_shutdown();
                break (&mut conn).await;
            }
            _ = check.tick() => {
                if stalls.as_ref().is_some_and(|s| s.stalled(limits.write_idle)) {
                    tracing::info!(peer = %service_peer, "closing an HTTP/2 connection with a stream whose client took nothing for --writer-idle-timeout-ms");
                    if let Some(metrics) = &limits.metrics {
                        metrics.writer_timeout();
                    }
                    return;
                }
            }
        }
    };
    if let Err(e) = done
        && let Some(metrics) = &limits.metrics
    {
        if is_ping_timeout(&e) {
            tracing::info!(peer = %service_peer, "closing an HTTP/2 connection whose client answers no ping (it stopped reading)");
            metrics.writer_timeout();
        } else {
            let reason = h2_reason(&e);
            tracing::debug!(error = %e, reason, "an HTTP/2 connection ended on an error");
            metrics.http2_error(reason);
        }
    }
}

/// Whether an HTTP/2 connection ended because a ping went unanswered (hyper's keep-alive timeout,
/// known only by its text).
fn is_ping_timeout(e: &hyper::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = source {
        if err.to_string() == "keep-alive timed out" {
            return true;
        }
        source = err.source();
    }
    false
}

/// The HTTP/2 error code a connection ended with, as the metric's label (`other` for an error
/// that is not HTTP/2's: the socket, a timeout).
fn h2_reason(e: &hyper::Error) -> &'static str {
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        if let Some(h2) = err.downcast_ref::<h2::Error>() {
            return match h2.reason() {
                Some(h2::Reason::ENHANCE_YOUR_CALM) => "enhance_your_calm",
                Some(h2::Reason::PROTOCOL_ERROR) => "protocol_error",
                Some(h2::Reason::FRAME_SIZE_ERROR) => "frame_size_error",
                Some(h2::Reason::COMPRESSION_ERROR) => "compression_error",
                Some(h2::Reason::FLOW_CONTROL_ERROR) => "flow_control_error",
                Some(_) => "other_reason",
                None => "io",
            };
        }
        source = err.source();
    }
    "other"
}

/// Nginx's lingering close: the answer is written and the write side shut (by hyper: the client
/// reads the answer and the end of it); read and discard what the client still sends, until it
/// closes or the bounds are reached, so closing does not reset the connection under the answer.
pub(super) async fn linger<I: AsyncRead + Unpin>(io: &mut I) {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; LINGER_BUFFER];
    let mut drained = 0usize;
    let _ = tokio::time::timeout(LINGER_TIME, async {
        while drained < LINGER_MAX_BYTES {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => drained += n,
            }
        }
    })
    .await;
}

/// What a connection is doing, as far as its read deadline is concerned.
#[derive(Debug)]
struct Phase {
    header_timeout: Duration,
    idle_timeout: Duration,
    /// A request body was dropped before its end: the client may still be sending it, and the
    /// connection's close lingers ([`linger`]).
    unread_body: std::sync::atomic::AtomicBool,
    /// Await-free critical sections only, all on the connection's own task.
    state: Mutex<PhaseState>,
}

#[derive(Debug)]
struct PhaseState {
    /// Requests whose head was parsed and whose response has not ended.
    in_flight: usize,
    /// When the connection last had no request in progress: accepted, or its last response ended.
    idle_since: Instant,
    /// Whether a request was ever served (a new connection gets the head deadline, not the idle
    /// one, for its first request).
    served: bool,
    /// When the first byte of the next head arrived, if it has.
    head_started: Option<Instant>,
    /// A read left waiting without a deadline while a request was in progress: woken when the
    /// request ends, so the read comes back and arms the deadline that then applies.
    read_waker: Option<Waker>,
    /// The connection was upgraded (a WebSocket): no HTTP request will follow, so no head or idle
    /// deadline applies and nothing written is one of hyper's answers. The WebSocket keeps its
    /// own liveness; the write deadline of `listener.rs` still applies.
    upgraded: bool,
}

/// Which deadline a read is under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    /// For a request head (or the first one of a new connection): a 408 is due when it passes.
    Head,
    /// For anything at all on an idle keep-alive connection: closed quietly when it passes.
    Idle,
}

impl Phase {
    fn new(header_timeout: Duration, idle_timeout: Duration) -> Phase {
        let state = PhaseState {
            in_flight: 0,
            idle_since: Instant::now(),
            served: false,
            head_started: None,
            read_waker: None,
            upgraded: false,
        };
        Phase { header_timeout, idle_timeout, unread_body: Default::default(), state: Mutex::new(state) }
    }

    /// The deadline of a read now, if one applies; without one, `waker` is woken when one may.
    fn read_deadline(&self, waker: &Waker) -> Option<(Instant, Waiting)> {
        let mut st = lock(&self.state);
        if st.upgraded {
            return None;
        }
        if st.in_flight > 0 {
            st.read_waker = Some(waker.clone());
            return None;
        }
        Some(match st.head_started {
            Some(started) => (started + self.header_timeout, Waiting::Head),
            None if st.served => (st.idle_since + self.idle_timeout, Waiting::Idle),
            None => (st.idle_since + self.header_timeout, Waiting::Head),
        })
    }

    /// Whether a request is in progress (or the connection was upgraded).
    fn busy(&self) -> bool {
        let st = lock(&self.state);
        st.in_flight > 0 || st.upgraded
    }

    /// The connection switched protocols (a `101` went out).
    fn upgraded(&self) {
        lock(&self.state).upgraded = true;
    }

    /// Bytes arrived: with no request in progress, they start the next head.
    fn bytes_arrived(&self) {
        let mut st = lock(&self.state);
        if st.in_flight == 0 && st.head_started.is_none() {
            st.head_started = Some(Instant::now());
        }
    }

    fn request_started(&self) {
        let mut st = lock(&self.state);
        st.in_flight += 1;
        st.served = true;
        st.head_started = None;
    }

    fn request_ended(&self) {
        let waker = {
            let mut st = lock(&self.state);
            st.in_flight = st.in_flight.saturating_sub(1);
            if st.in_flight > 0 {
                return;
            }
            st.idle_since = Instant::now();
            st.read_waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// Marks a request in progress from its head until its response ends (or is dropped unfinished).
#[derive(Debug)]
struct InFlight(Arc<Phase>);

impl InFlight {
    fn start(phase: Arc<Phase>) -> InFlight {
        phase.request_started();
        InFlight(phase)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// The socket as hyper sees it: reads under [`Phase`]'s deadline, and hyper's empty automatic
/// error answers replaced by JSON ones.
#[derive(Debug)]
struct ConnIo<I> {
    inner: I,
    phase: Arc<Phase>,
    /// Armed at the current read deadline while a read waits under one; none while a request is
    /// in progress (an event stream's whole life holds no timer; issue #46).
    timer: Option<Pin<Box<Sleep>>>,
    /// Our answer in place of hyper's, and how much of it is written.
    replacement: Option<(Vec<u8>, usize)>,
    /// No write is waiting on the socket (every write hyper started was flushed): only then may a
    /// 408 be written without landing in the middle of another answer.
    flushed: bool,
    /// HTTP/1.1: hyper's own answers are replaced and a late head is answered `408`. Over HTTP/2
    /// neither exists (hyper answers with frames; a late connection is closed quietly).
    http1: bool,
}

impl<I> ConnIo<I> {
    fn new(inner: I, phase: Arc<Phase>, protocol: Protocol) -> ConnIo<I> {
        ConnIo {
            inner,
            phase,
            timer: None,
            replacement: None,
            flushed: true,
            http1: protocol == Protocol::Http1,
        }
    }
}

impl<I: AsyncWrite + Unpin> ConnIo<I> {
    /// Best effort, without waiting: a 408 for a head that did not arrive in time.
    fn answer_timeout(&mut self, cx: &mut Context<'_>) {
        if self.flushed && self.http1 {
            let answer = ApiError::HeaderTimeout.raw_response();
            let _ = Pin::new(&mut self.inner).poll_write(cx, &answer);
        }
    }

    /// Writes what is left of the replacement answer.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.replacement {
            if *written == bytes.len() {
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncRead for ConnIo<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.phase.bytes_arrived();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let Some((deadline, waiting)) = this.phase.read_deadline(cx.waker()) else {
                    this.timer = None;
                    return Poll::Pending;
                };
                let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if timer.deadline() != deadline {
                    timer.as_mut().reset(deadline);
                }
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                if waiting == Waiting::Head {
                    this.answer_timeout(cx);
                }
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "connection read deadline passed")))
            }
        }
    }
}

/// Where in `buf` hyper's automatic answer to an unparsable request starts, and the error to answer
/// instead. hyper writes a head into its head buffer, which is the first slice of a vectored write
/// (body chunks come after it), and it can follow the unflushed end of the previous answer there.
/// Nothing else matches: the daemon's own bodies (JSON, SSE frames, OpenMetrics text) never contain
/// a raw CR LF, so a status line can only start a head, and every error of its own has a JSON body.
fn find_hyper_error_answer(buf: &[u8]) -> Option<(usize, ApiError)> {
    memchr::memmem::find_iter(buf, b"HTTP/1.1 4").find_map(|at| Some((at, hyper_error_answer(&buf[at..])?)))
}

/// hyper's automatic answer to a request it could not parse: a 4xx head with `content-length: 0`
/// and no `content-type` (every answer of the daemon's own has a JSON body). Returns the error to
/// answer instead.
fn hyper_error_answer(buf: &[u8]) -> Option<ApiError> {
    let error = match buf.get(..12)? {
        b"HTTP/1.1 400" => ApiError::BadRequest,
        b"HTTP/1.1 431" => ApiError::HeadersTooLarge,
        b"HTTP/1.1 414" => ApiError::UriTooLong,
        _ => return None,
    };
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let empty = head.contains("\r\ncontent-length: 0");
    (empty && !head.contains("\r\ncontent-type:")).then_some(error)
}

impl<I: AsyncWrite + Unpin> AsyncWrite for ConnIo<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.replacement.is_some() {
            // hyper writes nothing after its automatic answer; swallow it all.
            ready!(this.poll_replacement(cx))?;
            return Poll::Ready(Ok(buf.len()));
        }
        // hyper answers by itself only between requests, so the scan is skipped while one is in
        // progress (an event stream, a long answer: the hot path), and always over HTTP/2.
        let mut buf = buf;
        if this.http1 && !this.phase.busy() {
            match find_hyper_error_answer(buf) {
                Some((0, error)) => {
                    this.replacement = Some((error.raw_response(), 0));
                    ready!(this.poll_replacement(cx))?;
                    return Poll::Ready(Ok(buf.len()));
                }
                // The end of the previous answer first; the next write starts at hyper's.
                Some((at, _)) => buf = &buf[..at],
                None => {}
            }
        }
        this.flushed = false;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    /// Vectored writes pass straight through while a request is in progress (the event streams'
    /// hot path); between requests, the head buffer (the first slice) goes through `poll_write`'s
    /// check.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &**b);
        if self.replacement.is_some()
            || (self.http1 && !self.phase.busy() && find_hyper_error_answer(first).is_some())
        {
            return self.poll_write(cx, first);
        }
        let this = &mut *self;
        this.flushed = false;
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_replacement(cx))?;
        ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        this.flushed = true;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// The per-connection service: the router, with the socket peer attached to every request, its
/// body under the deadline and budget, and its response tracked until it ends.
#[derive(Debug, Clone)]
struct ConnService {
    router: TowerToHyperService<Router>,
    peer: Peer,
    phase: Arc<Phase>,
    limits: Limits,
    protocol: Protocol,
    /// HTTP/2: the streams whose answers may wait on the client's window.
    stalls: Option<Arc<Stalls>>,
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::start(self.phase.clone());
        let limits = &self.limits;
        // An HTTP/2 stream holds a place of `--max-connections` as an HTTP/1.1 connection does: an
        // event stream costs one whichever HTTP carries it.
        let place = match (self.protocol, &limits.connections) {
            (Protocol::Http2, Some(places)) => match places.clone().try_acquire_owned() {
                Ok(place) => Some(place),
                Err(_) => {
                    let refused = axum::response::IntoResponse::into_response(ApiError::ConnectionLimit);
                    return Box::pin(async move {
                        Ok(refused.map(|inner| TrackedBody {
                            inner,
                            _in_flight: in_flight,
                            _place: None,
                            waiting: None,
                        }))
                    });
                }
            },
            _ => None,
        };
        let mut req = req.map(|body| {
            Body::new(RequestBody {
                inner: body,
                deadline: Instant::now() + limits.body_timeout,
                timer: None,
                budget: limits.body_budget.clone(),
                held: None,
                ended: false,
                phase: self.phase.clone(),
            })
        });
        req.extensions_mut().insert(ConnectInfo(self.peer));
        let response = hyper::service::Service::call(&self.router, req);
        let phase = self.phase.clone();
        let stalls = self.stalls.clone();
        Box::pin(async move {
            let response = response.await?;
            if response.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS {
                phase.upgraded();
            }
            let waiting = stalls.map(|s| {
                let mark = s.stream();
                (s, mark)
            });
            Ok(response.map(|inner| TrackedBody { inner, _in_flight: in_flight, _place: place, waiting }))
        })
    }
}

/// A response body that keeps its request marked in progress until it ends or is dropped (and,
/// over HTTP/2, its place of `--max-connections`).
#[derive(Debug)]
struct TrackedBody {
    inner: Body,
    _in_flight: InFlight,
    _place: Option<OwnedSemaphorePermit>,
    /// HTTP/2: when the answer began to wait for the client to take it ([`Stalls`]).
    waiting: Option<(Arc<Stalls>, Arc<std::sync::atomic::AtomicU64>)>,
}

impl hyper::body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    /// Over HTTP/2, hyper asks for the next frame only once the client has taken the last: a
    /// frame handed out marks the stream waiting until hyper asks again.
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        use std::sync::atomic::Ordering;
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Some((stalls, mark)) = &self.waiting {
            let since = match &polled {
                Poll::Ready(Some(Ok(frame))) if frame.is_data() => stalls.now(),
                _ => 0,
            };
            mark.store(since, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Why a request body stopped short; `extract` turns it into the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum BodyError {
    #[error("the request body did not arrive in time")]
    Timeout,
    #[error("too many request body bytes are being received at once")]
    Budget,
}

/// A request body as the handlers read it: it must end by its deadline, and its bytes hold permits
/// of the global budget until it is dropped.
#[derive(Debug)]
struct RequestBody {
    inner: Incoming,
    deadline: Instant,
    /// Armed on the first wait only: most bodies arrive with their head.
    timer: Option<Pin<Box<Sleep>>>,
    budget: Arc<Semaphore>,
    held: Option<OwnedSemaphorePermit>,
    /// Read to its end.
    ended: bool,
    /// Told when the body is dropped unread.
    phase: Arc<Phase>,
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        if !self.ended && !hyper::body::Body::is_end_stream(&self.inner) {
            self.phase.unread_body.store(true, std::sync::atomic::Ordering::Release);
        }
    }
}

impl RequestBody {
    fn reserve(&mut self, bytes: usize) -> Result<(), BodyError> {
        let n = u32::try_from(bytes).map_err(|_| BodyError::Budget)?;
        let permit = self.budget.clone().try_acquire_many_owned(n).map_err(|_| BodyError::Budget)?;
        match &mut self.held {
            Some(held) => held.merge(permit),
            None => self.held = Some(permit),
        }
        Ok(())
    }
}

impl hyper::body::Body for RequestBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Err(e) = this.reserve(data.len())
                {
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(e)))),
            Poll::Ready(None) => {
                this.ended = true;
                Poll::Ready(None)
            }
            Poll::Pending => {
                let deadline = this.deadline;
                let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyError::Timeout)))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyper_error_answers_are_recognised_and_the_daemons_are_not() {
        let date = "date: Mon, 23 Nov 2026 22:05:53 GMT\r\n";
        let hyper_431 = format!(
            "HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n{date}\r\n"
        );
        assert!(matches!(hyper_error_answer(hyper_431.as_bytes()), Some(ApiError::HeadersTooLarge)));
        let after_another = format!("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{{}}{hyper_431}");
        let at = after_another.find("HTTP/1.1 431").expect("the 431");
        assert!(
            matches!(find_hyper_error_answer(after_another.as_bytes()), Some((n, ApiError::HeadersTooLarge)) if n == at)
        );
        let hyper_400 = format!("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n{date}\r\n");
        assert!(matches!(hyper_error_answer(hyper_400.as_bytes()), Some(ApiError::BadRequest)));
        let ours =
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 58\r\n\r\n{}";
        assert!(hyper_error_answer(ours.as_bytes()).is_none());
        let ok = "HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n";
        assert!(hyper_error_answer(ok.as_bytes()).is_none());
        assert!(hyper_error_answer(b"HTTP/1.1 400").is_none(), "an incomplete head is left alone");
    }
}

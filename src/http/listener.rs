//! The listener the HTTP floor serves on: `--max-connections` enforced at accept, where a refused
//! connection gets a fixed 503 before any request is read. (`conn` attaches the socket peer to every
//! request: the `local-only` policy and the open `/health` read it.)
//!
//! The write side of every connection has a deadline ([`WriteDeadline`],
//! `--writer-idle-timeout-ms`): a socket that accepts no bytes for that long while the daemon has
//! bytes for it is closed, so a peer that stopped reading cannot hold a connection, its stream or
//! its memory.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

use crate::metrics::Metrics;

/// Written to a connection refused at accept because `--max-connections` are open.
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 5\r\nconnection: close\r\ncontent-length: 72\r\n\r\n{\"error\":\"Too many open connections\",\"code\":\"connection_limit_exceeded\"}";
/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// A TCP listener that holds one permit per open connection.
#[derive(Debug)]
pub(super) struct LimitedListener {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    /// `--writer-idle-timeout-ms` and where a timeout is counted; `None` = no write deadline.
    write_idle: Option<(Duration, Arc<Metrics>)>,
}

impl LimitedListener {
    pub(super) fn new(inner: TcpListener, max: usize) -> LimitedListener {
        LimitedListener { inner, permits: Arc::new(Semaphore::new(max)), write_idle: None }
    }

    /// The places of `--max-connections`: each connection holds one, and each HTTP/2 stream one
    /// more (`super::conn`).
    pub(super) fn places(&self) -> Arc<Semaphore> {
        self.permits.clone()
    }

    /// Closes connections whose socket accepts no bytes for `idle` while there are bytes to write.
    pub(super) fn with_write_idle_timeout(
        mut self,
        idle: Duration,
        metrics: Arc<Metrics>,
    ) -> LimitedListener {
        self.write_idle = Some((idle, metrics));
        self
    }
}

/// A connection and its permit; the permit returns when the connection closes.
#[derive(Debug)]
pub(super) struct LimitedStream {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
    write: Option<WriteDeadline>,
}

impl axum::serve::Listener for LimitedListener {
    type Io = LimitedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = match self.inner.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                    continue;
                }
            };
            match self.permits.clone().try_acquire_owned() {
                Ok(permit) => {
                    let _ = stream.set_nodelay(true);
                    let write = self.write_idle.as_ref().map(|(idle, metrics)| WriteDeadline {
                        idle: *idle,
                        timer: None,
                        peer: addr,
                        metrics: metrics.clone(),
                    });
                    return (LimitedStream { stream, _permit: permit, write }, addr);
                }
                Err(_) => {
                    // Best effort and non-blocking: a slow peer must not stall the accept loop.
                    let _ = stream.try_write(TOO_MANY_CONNECTIONS);
                    tracing::warn!(peer = %addr, "connection refused: --max-connections reached");
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

impl LimitedStream {
    /// The daemon's end of the connection.
    pub(super) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// The next bytes without taking them (the TLS listener reads a connection's first byte
    /// before it chooses between a handshake and a plain-http refusal).
    pub(super) async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.peek(buf).await
    }
}

impl AsyncRead for LimitedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

// ---------------------------------------------------------------------------------------------
// The write side: every write goes through the connection's `WriteDeadline`.

/// `--writer-idle-timeout-ms` for one connection. Hyper stops polling a response body while the
/// socket's buffer is full, so a deadline kept by the body (an SSE stream) would never run: it
/// lives here, where bytes meet the socket. A write that finds the socket full arms the timer and
/// polls it in the same call, so its expiry wakes the connection and the next write fails with
/// `TimedOut`; hyper then drops the connection, and with it the response body. Any progress
/// disarms it.
#[derive(Debug)]
struct WriteDeadline {
    idle: Duration,
    /// Armed while the socket takes nothing.
    timer: Option<Pin<Box<Sleep>>>,
    peer: SocketAddr,
    metrics: Arc<Metrics>,
}

impl WriteDeadline {
    fn watch(&mut self, cx: &mut Context<'_>, written: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match written {
            Poll::Pending => {
                let idle = self.idle;
                let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.timer = None;
                self.metrics.writer_timeout();
                tracing::info!(
                    peer = %self.peer, idle_ms = idle.as_millis() as u64,
                    "closing a connection whose socket accepted no bytes (--writer-idle-timeout-ms)"
                );
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the peer accepted no bytes")))
            }
            Poll::Ready(Ok(n)) if n > 0 => {
                self.timer = None;
                Poll::Ready(Ok(n))
            }
            ready @ Poll::Ready(_) => ready,
        }
    }
}

impl AsyncWrite for LimitedStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let written = Pin::new(&mut this.stream).poll_write(cx, buf);
        match &mut this.write {
            Some(deadline) => deadline.watch(cx, written),
            None => written,
        }
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let written = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        match &mut this.write {
            Some(deadline) => deadline.watch(cx, written),
            None => written,
        }
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
    // TCP's flush and shutdown never wait for the peer: nothing to watch.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

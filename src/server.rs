//! The listener and the daemon's life: bind, the startup line, `--max-connections` enforced at
//! accept, signals (first drains, second kills every agent group and exits 1).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Config;
use crate::daemon::{AGENT_SHUTDOWN_GRACE, Daemon};
use crate::perimeter::Peer;

/// Written to a connection refused at accept because `--max-connections` are open.
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 5\r\nconnection: close\r\ncontent-length: 72\r\n\r\n{\"error\":\"Too many open connections\",\"code\":\"connection_limit_exceeded\"}";
/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);
/// After the agents are gone, how long open HTTP exchanges get to finish before the process exits.
const HTTP_DRAIN_GRACE: Duration = Duration::from_secs(2);

/// A TCP listener that holds one permit per open connection.
pub struct LimitedListener {
    inner: TcpListener,
    permits: Arc<Semaphore>,
}

impl LimitedListener {
    pub fn new(inner: TcpListener, max: usize) -> LimitedListener {
        LimitedListener { inner, permits: Arc::new(Semaphore::new(max)) }
    }
}

/// A connection and its permit; the permit returns when the connection closes.
pub struct LimitedStream {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, LimitedListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, LimitedListener>) -> Self {
        Peer(*stream.remote_addr())
    }
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
                    return (LimitedStream { stream, _permit: permit }, addr);
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

impl AsyncRead for LimitedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for LimitedStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Binds, prints the startup line, serves until the first signal's drain completes. Returns the
/// process exit code.
pub async fn run(config: Config) -> io::Result<i32> {
    let host = config.hostname.trim_start_matches('[').trim_end_matches(']').to_owned();
    let listener = TcpListener::bind((host.as_str(), config.port)).await.map_err(|e| {
        io::Error::new(e.kind(), format!("cannot listen on {}:{}: {e}", config.hostname, config.port))
    })?;
    let local = listener.local_addr()?;
    if config.agent.display != "demo"
        && crate::agent_process::resolve_program(&config.agent.program).is_none()
    {
        tracing::warn!(
            agent = %config.agent.program,
            "agent program not found; session creates will fail until it is installed (try --agent demo for the built-in demo agent)"
        );
    }
    // Before the startup line: a script may signal as soon as it reads it, and a signal arriving
    // before the handlers exist would kill the daemon outright instead of draining it.
    let signals = Signals::install()?;
    let max_connections = config.connection_cap();
    let daemon = Daemon::new(config);
    let app = crate::app(daemon.clone(), local.port());
    let shown = if local.is_ipv6() { format!("[{}]", local.ip()) } else { local.ip().to_string() };
    // The one line on stdout, for scripts (`--port 0`).
    println!("mediatord listening on http://{shown}:{}", local.port());
    // Only the program: an agent's arguments may carry credentials, and logs travel further.
    tracing::info!(address = %local, agent = %daemon.config.agent.program, "mediatord started");

    let drained = tokio_util::sync::CancellationToken::new();
    tokio::spawn(watch_signals(signals, daemon.clone(), drained.clone()));
    let server = axum::serve(
        LimitedListener::new(listener, max_connections),
        app.into_make_service_with_connect_info::<Peer>(),
    )
    .with_graceful_shutdown(drained.clone().cancelled_owned());
    let server = tokio::spawn(async move { server.await });
    drained.cancelled().await;
    // Streams and turns have ended; give in-flight HTTP exchanges a moment, then leave regardless.
    let _ = tokio::time::timeout(HTTP_DRAIN_GRACE, server).await;
    tracing::info!("mediatord stopped");
    Ok(0)
}

/// SIGTERM and SIGINT, either of which drains (the first) or kills (the second).
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Registers the handlers; from here on these signals no longer terminate the process.
    fn install() -> io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals { term: signal(SignalKind::terminate())?, int: signal(SignalKind::interrupt())? })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {},
            _ = self.int.recv() => {},
        }
    }
}

async fn watch_signals(
    mut signals: Signals,
    daemon: Arc<Daemon>,
    drained: tokio_util::sync::CancellationToken,
) {
    signals.recv().await;
    tracing::info!("shutting down: draining sessions and agents (a second signal kills them now)");
    let drain = {
        let daemon = daemon.clone();
        let drained = drained.clone();
        tokio::spawn(async move {
            daemon.drain(AGENT_SHUTDOWN_GRACE).await;
            drained.cancel();
        })
    };
    tokio::select! {
        _ = signals.recv() => {},
        _ = drain => return,
    }
    tracing::warn!("second signal: killing every agent now");
    daemon.kill_all_agents();
    std::process::exit(1);
}

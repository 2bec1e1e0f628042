//! The daemon's life: bind, the startup line, serving ([`crate::http::serve`]), signals (the first
//! drains, the second kills every process group the daemon started and exits 1).
//!
//! The top floor: it wires `config`, `daemon` and `http` together and knows no HTTP library itself.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::daemon::{AGENT_SHUTDOWN_GRACE, Daemon};

/// After the agents are gone, how long open HTTP exchanges get to finish before the process exits.
const HTTP_DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Binds, prints the startup line, serves until the first signal's drain completes. Returns the
/// process exit code.
pub async fn run(config: Config) -> io::Result<i32> {
    let host = config.hostname.trim_start_matches('[').trim_end_matches(']').to_owned();
    let listener = TcpListener::bind((host.as_str(), config.port)).await.map_err(|e| {
        let hint = if e.kind() == io::ErrorKind::AddrInUse {
            " (another mediatord or another server is using it: choose another port with --port, or --port 0 for any free one)"
        } else {
            ""
        };
        io::Error::new(e.kind(), format!("cannot listen on {}:{}: {e}{hint}", config.hostname, config.port))
    })?;
    let local = listener.local_addr()?;
    for agent in config.agents.iter().filter(|a| a.command.display != "demo") {
        if let Err(e) = crate::agent::resolve_program(&agent.command.program) {
            tracing::warn!(
                agent = %agent.name,
                "{e}; session creates will fail until it is fixed (--agent demo runs the built-in demo agent)"
            );
        }
    }
    // Before the startup line: a script may signal as soon as it reads it, and a signal arriving
    // before the handlers exist would kill the daemon outright instead of draining it.
    let signals = Signals::install()?;
    let max_connections = config.connection_cap();
    let daemon = Daemon::new(config);
    let shown = if local.is_ipv6() { format!("[{}]", local.ip()) } else { local.ip().to_string() };
    // The one line on stdout, for scripts (`--port 0`).
    println!("mediatord listening on http://{shown}:{}", local.port());
    // Only the program: an agent's arguments may carry credentials, and logs travel further.
    let programs: Vec<String> =
        daemon.config.agents.iter().map(|a| format!("{}={}", a.name, a.command.program)).collect();
    tracing::info!(address = %local, agents = %programs.join(" "), "mediatord started");

    let drained = tokio_util::sync::CancellationToken::new();
    tokio::spawn(watch_signals(signals, daemon.clone(), drained.clone()));
    let server = tokio::spawn(crate::http::serve(
        listener,
        max_connections,
        daemon,
        drained.clone().cancelled_owned(),
    ));
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
    daemon.kill_all_processes();
    // Nothing is left to unwind for: every agent and shell command is gone, and the drain that was
    // in progress would only wait on them.
    #[expect(clippy::exit, reason = "the second signal ends the daemon at once, with status 1")]
    std::process::exit(1);
}

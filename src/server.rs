//! The daemon's life: bind, the startup line, serving ([`crate::http::serve`]), signals (the first
//! drains, the second kills every process group the daemon started and exits 1), and what a panic
//! does (the same, with status 101).
//!
//! The top floor: it wires `config`, `daemon`, `fleet` and `http` together and knows no HTTP library itself.

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::daemon::{AGENT_SHUTDOWN_GRACE, Daemon};
use crate::discovery::Advert;
use crate::store::Opened;
use crate::tls::{Reloaded, ServerCert};

/// After the agents are gone, how long open HTTP exchanges get to finish before the process exits.
const HTTP_DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How long the exit waits for the store's last commit and checkpoint.
const STORE_FLUSH_GRACE: Duration = Duration::from_secs(5);
/// Exit status after a panic: Rust's own for a panicking program (`docs/protocol.md#15-exit-status`).
const PANIC_EXIT_STATUS: i32 = 101;

/// Binds, prints the startup line, serves (https with `tls`, loaded and checked by the caller
/// before the boot) on the store `store::open` gave (with its fleet, when shared) until the first
/// signal's drain completes. Returns the process exit code.
pub async fn run(config: Config, opened: Opened, tls: Option<Arc<ServerCert>>) -> io::Result<i32> {
    let Opened { store, fleet } = opened;
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
    // Before the first agent starts: what daemons of this user killed outright left in the
    // temporary directory (their agents' private directories, and what those wrote there).
    let swept = crate::scratch::sweep(&std::env::temp_dir());
    if swept > 0 {
        tracing::info!(
            swept,
            "removed the scratch directories of mediatord daemons that died without cleaning up"
        );
    }
    let shown = if local.is_ipv6() { format!("[{}]", local.ip()) } else { local.ip().to_string() };
    let advert = config.state_dir.clone().map(|dir| {
        let fingerprint = tls.as_ref().map(|c| c.fingerprint());
        (dir, Advert::new(tls.is_some(), &shown, local.port(), fingerprint))
    });
    // On the LAN (`--mdns`): published before the startup line, like the state dir's advert, and
    // withdrawn (goodbye packets) when `announcer` drops at the end of this function.
    let announcer = if config.mdns {
        let record = crate::discovery::mdns::Record {
            port: local.port(),
            https: tls.is_some(),
            fingerprint: tls.as_ref().map(|c| c.fingerprint()),
        };
        let announcer =
            crate::discovery::mdns::Announcer::start(local.ip(), record).map_err(io::Error::other)?;
        Some(Arc::new(announcer))
    } else {
        None
    };
    let server_tls = match &tls {
        Some(cert) => {
            reload_on_sighup(cert.clone(), advert.clone(), announcer.as_ref().map(Arc::downgrade))?;
            Some(cert.server_config().map_err(io::Error::other)?)
        }
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    // Agents run as the daemon's user: without this, anything an agent runs could read the token
    // from /proc/<daemon>/environ or attach to the daemon with ptrace. Children become dumpable
    // again when they exec, so this is the daemon's alone.
    if let Err(e) = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable) {
        tracing::warn!(error = %e, "cannot mark the daemon non-dumpable; same-user processes may read its memory");
    }
    let max_connections = config.connection_cap();
    let daemon = Daemon::with_store(config, store.clone(), fleet);
    exit_on_panic(daemon.clone());
    if let Err(e) = daemon.adopt_orphans() {
        tracing::warn!(error = %e, "cannot become a subreaper; a process escaping a killed command's group is left to init");
    }
    #[cfg(debug_assertions)]
    panic_on_sigusr2()?;
    // A fleet (`--store postgres://…`): joined before the first request, so the sessions this
    // daemon starts are in the directory as its own.
    let node_url =
        daemon.config.node_url.clone().unwrap_or_else(|| format!("{scheme}://{shown}:{}", local.port()));
    crate::fleet::start(daemon.clone(), node_url, daemon.config.node_lease)
        .await
        .map_err(|e| io::Error::other(format!("cannot join the fleet: {e}")))?;
    daemon.notifier.set_listening_url(&format!("{scheme}://{shown}:{}", local.port()));
    // The provider sends browsers back to where people reach the daemon.
    let reached =
        daemon.config.public_url.clone().unwrap_or_else(|| format!("{scheme}://{shown}:{}", local.port()));
    daemon.start_people(&reached).map_err(|e| io::Error::other(format!("--oidc-issuer: {e}")))?;
    if !daemon.config.notify.is_empty() && daemon.config.public_url.is_none() && local.ip().is_unspecified() {
        tracing::warn!(
            "notification links point at {scheme}://{shown}:{}, which no device can reach: set --public-url",
            local.port()
        );
    }
    // Where `mediatord pair` and `devices` find this daemon (`discovery::locate`), written before
    // the startup line so a script that read the line finds it; removed when `_published` drops
    // at the end of this function.
    let _published = advert.as_ref().and_then(|(dir, advert)| match advert.publish(dir) {
        Ok(published) => Some(published),
        Err(e) => {
            tracing::warn!(error = %e, "cannot write {}: mediatord pair and devices will need --url", crate::discovery::FILE);
            None
        }
    });
    // The one line on stdout, for scripts (`--port 0`). A closed stdout loses it rather than
    // failing the daemon (`println!` would panic).
    let mut stdout = io::stdout().lock();
    let _ = writeln!(stdout, "mediatord listening on {scheme}://{shown}:{}", local.port())
        .and_then(|()| stdout.flush());
    drop(stdout);
    // Only the program: an agent's arguments may carry credentials, and logs travel further.
    let programs: Vec<String> =
        daemon.config.agents.iter().map(|a| format!("{}={}", a.name, a.command.program)).collect();
    // Where the state is and where notifications go, so a newcomer reading the log knows what to
    // back up and whom the daemon will call; a target shows its scheme and authority only (its
    // path may be a secret topic, its user-info a password: `TargetUrl`'s `Debug`).
    let state = match (&daemon.config.state_dir, &daemon.config.store) {
        (Some(dir), _) => dir.display().to_string(),
        (None, Some(_)) => "PostgreSQL (--store)".to_owned(),
        (None, None) => "none (--ephemeral: nothing is kept)".to_owned(),
    };
    let targets: Vec<String> =
        daemon.config.notify.iter().map(|t| format!("{}+{:?}", t.format.name(), t.url)).collect();
    let targets = if targets.is_empty() { "none".to_owned() } else { targets.join(" ") };
    match &tls {
        Some(cert) => tracing::info!(
            address = %local, agents = %programs.join(" "), state = %state, notify = %targets,
            fingerprint = %cert.fingerprint(), "mediatord started (https)"
        ),
        None => tracing::info!(
            address = %local, agents = %programs.join(" "), state = %state, notify = %targets,
            "mediatord started"
        ),
    }

    let drained = tokio_util::sync::CancellationToken::new();
    let killed = Arc::new(AtomicBool::new(false));
    tokio::spawn(watch_signals(signals, daemon.clone(), drained.clone(), killed.clone()));
    let server = tokio::spawn(crate::http::serve(
        listener,
        max_connections,
        daemon,
        server_tls,
        drained.clone().cancelled_owned(),
    ));
    drained.cancelled().await;
    // Streams and turns have ended; give in-flight HTTP exchanges a moment, then leave regardless.
    let _ = tokio::time::timeout(HTTP_DRAIN_GRACE, server).await;
    // Everything the sessions recorded while ending (their terminal events, `dormant`) is on disk
    // before the process exits, and the database is one whole file (the WAL checkpointed).
    let closing = tokio::task::spawn_blocking(move || store.close());
    match tokio::time::timeout(STORE_FLUSH_GRACE, closing).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "the state database was not closed cleanly"),
        Ok(Err(_)) | Err(_) => tracing::warn!("the state database did not close in time"),
    }
    drop(announcer);
    // The agents are gone: what their private temporary directories still hold goes too (no drop
    // reaches them once the runtime is abandoned).
    crate::scratch::remove();
    tracing::info!("mediatord stopped");
    // A second signal that came while the drain was finishing wins: its kill is under way, and
    // the signal watcher exits with status 1 once it is done.
    if killed.load(Ordering::Acquire) {
        std::future::pending::<()>().await;
    }
    Ok(0)
}

/// SIGHUP reads the certificate pair again: new handshakes get the new one, open connections keep
/// theirs; a pair that fails its checks is logged and the one in use stays.
fn reload_on_sighup(
    cert: Arc<ServerCert>,
    advert: Option<(PathBuf, Advert)>,
    announcer: Option<std::sync::Weak<crate::discovery::mdns::Announcer>>,
) -> io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            // Reading two small files: short enough for the runtime, but off it all the same.
            let cert = cert.clone();
            match tokio::task::spawn_blocking(move || cert.reload()).await {
                Ok(Ok(Reloaded::Changed { fingerprint })) => {
                    if let Some((dir, advert)) = &advert {
                        let renewed = Advert { fingerprint: Some(fingerprint.clone()), ..advert.clone() };
                        if let Err(e) = renewed.write(dir) {
                            tracing::warn!(error = %e, "cannot rewrite {}", crate::discovery::FILE);
                        }
                    }
                    if let Some(announcer) = announcer.as_ref().and_then(std::sync::Weak::upgrade)
                        && let Err(e) = announcer.renew(&fingerprint)
                    {
                        tracing::warn!("SIGHUP: {e}; the LAN still hears the previous fingerprint");
                    }
                    tracing::info!(%fingerprint, "SIGHUP: reloaded the TLS certificate; new connections use it")
                }
                Ok(Ok(Reloaded::Unchanged)) => {
                    tracing::info!("SIGHUP: the TLS certificate files are unchanged")
                }
                Ok(Err(e)) => tracing::warn!("SIGHUP: {e}; still serving the previous certificate"),
                Err(e) => tracing::warn!(error = %e, "SIGHUP: the certificate reload did not finish"),
            }
        }
    });
    Ok(())
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

/// The first signal starts the drain; the second, whenever it comes until the process exits (even
/// after the drain, while HTTP exchanges finish), kills every process group, removes the scratch
/// directory and exits 1.
async fn watch_signals(
    mut signals: Signals,
    daemon: Arc<Daemon>,
    drained: tokio_util::sync::CancellationToken,
    killed: Arc<AtomicBool>,
) {
    signals.recv().await;
    tracing::info!("shutting down: draining sessions and agents (a second signal kills them now)");
    {
        let daemon = daemon.clone();
        tokio::spawn(async move {
            daemon.drain(AGENT_SHUTDOWN_GRACE).await;
            drained.cancel();
        });
    }
    signals.recv().await;
    killed.store(true, Ordering::Release);
    tracing::warn!("second signal: killing every agent now");
    daemon.kill_all_processes();
    crate::scratch::remove();
    // Nothing is left to unwind for: every agent and shell command is gone, and the drain that was
    // in progress would only wait on them.
    #[expect(clippy::exit, reason = "the second signal ends the daemon at once, with status 1")]
    std::process::exit(1);
}

/// Test builds only: SIGUSR2 panics a task, so the tests can watch [`exit_on_panic`] at work
/// through the real binary. Release builds do not have it.
#[cfg(debug_assertions)]
fn panic_on_sigusr2() -> io::Result<()> {
    let mut usr2 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2())?;
    tokio::spawn(async move {
        usr2.recv().await;
        panic!("SIGUSR2: the debug build's test panic");
    });
    Ok(())
}

/// A panic is a bug, and the task it ends may own state nobody else can recover (an agent's stdio,
/// a session's turn runner, the signal watcher): rather than stay half alive, the daemon logs it,
/// kills every process group it started, removes the scratch directory and exits 101. A service
/// manager restarts it.
fn exit_on_panic(daemon: Arc<Daemon>) {
    std::panic::set_hook(Box::new(move |info| {
        tracing::error!(panic = %info, "a task panicked: killing every agent and shell command and exiting");
        daemon.kill_all_processes();
        crate::scratch::remove_now();
        #[expect(clippy::exit, reason = "a panic ends the daemon at once (see above)")]
        std::process::exit(PANIC_EXIT_STATUS);
    }));
}

//! `mediatord serve`: the daemon. What refuses the boot (a bad flag, an agent that cannot be
//! confined, a state directory or certificate that cannot be used) is said before it listens.

use std::process::ExitCode;

use mediatord::agent::sandbox;
use mediatord::config::{Config, ServeArgs};

use super::log::init_logging;
use super::say;

/// `mediatord serve`: the daemon's exit status (2 for what refuses the boot).
pub(super) fn run(args: &ServeArgs) -> ExitCode {
    let config = match Config::from_args(args) {
        Ok(config) => config,
        Err(e) => {
            say(&e.to_string());
            return ExitCode::from(2);
        }
    };
    init_logging(config.log_format, "info");
    // The token, the store's URL and the model reviewers' keys are in the configuration now:
    // erased from the process's initial environment before any thread or agent exists.
    if let Err(e) = mediatord::environ::erase_secrets(&config.secret_env_read()) {
        tracing::warn!(error = %e, "could not erase the secrets from the daemon's initial environment");
    }
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    // Before the listener: an agent that must run confined on a kernel that cannot confine
    // it refuses the boot like a bad flag does.
    let support = sandbox::support(&config.default_agent().command.guard);
    match sandbox::boot_check(&config.agents, support) {
        Ok(warnings) => warnings.iter().for_each(|w| tracing::warn!("{w}")),
        Err(e) => {
            say(&format!("mediatord: {e}"));
            return ExitCode::from(2);
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            say(&format!("mediatord: cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let store_config = mediatord::store::StoreConfig {
        state_dir: config.state_dir.clone(),
        events_per_session: config.history_events,
        max_age_days: config.history_days,
        url: config.store.as_ref().map(|url| url.expose().to_owned()),
    };
    // Before the runtime's first task: a state directory or database the daemon must not
    // use refuses the boot like a bad flag does.
    let opened = match mediatord::store::open(&store_config) {
        Ok(opened) => opened,
        Err(e) => {
            say(&format!("mediatord: {e}"));
            return ExitCode::from(2);
        }
    };
    // A certificate pair that cannot serve refuses the boot like a bad flag does.
    let tls = match config.tls.as_ref().map(mediatord::tls::ServerCert::load).transpose() {
        Ok(tls) => tls,
        Err(e) => {
            say(&format!("mediatord: {e}"));
            return ExitCode::from(2);
        }
    };
    let outcome = runtime.block_on(mediatord::server::run(config, opened, tls));
    // Whatever is still running is abandoned, not waited for: a blocking thread stuck on a
    // pipe or a hung file system must not hold the exit (nor make a second signal useless).
    runtime.shutdown_background();
    match outcome {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            say(&format!("mediatord: {e}"));
            ExitCode::FAILURE
        }
    }
}

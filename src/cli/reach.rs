//! How the client commands reach the running daemon (`--url`, its state directory, the LAN, the
//! default address) and as whom (the operator's token, a paired device's credential), and how one
//! call or one of the terminal client's commands runs and reports.

use std::io::{self, Write};
use std::process::ExitCode;

use mediatord::text;

use super::say;

/// How `pair` and `devices` reach the running daemon. Global, so they may also follow a
/// subcommand's own subcommand (`mediatord devices revoke ID --url …`).
#[derive(Debug, clap::Args)]
pub(super) struct DaemonArgs {
    /// The daemon's listening address [default: the one the running daemon wrote to its state
    /// directory, else a daemon found on the LAN over mDNS, else http://127.0.0.1:7776]
    #[arg(long, global = true, env = "MEDIATORD_URL", hide_env_values = true, value_name = "URL")]
    url: Option<String>,
    /// Do not look for a daemon on the LAN (mDNS) when none on this machine wrote its state
    /// directory
    #[arg(long, global = true, env = "MEDIATORD_NO_MDNS", hide_env_values = true, value_parser = clap::builder::BoolishValueParser::new())]
    no_mdns: bool,
    /// The state directory of the daemon to find, as `serve --state-dir` [default:
    /// $XDG_STATE_HOME/mediatord, else ~/.local/state/mediatord]
    #[arg(long, global = true, env = "MEDIATORD_STATE_DIR", hide_env_values = true, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
    /// The daemon's operator token. Prefer the environment: a flag shows in the process list
    #[arg(long, global = true, env = "MEDIATORD_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    token: Option<String>,
}

/// How `attach`, `watch` and `approve` reach the daemon, and as whom.
#[derive(Debug, clap::Args)]
pub(super) struct ClientArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
    /// A paired device's credential (`mediatord pair`); wins over the token. Prefer the
    /// environment or --device-file: a flag shows in the process list
    #[arg(long, env = "MEDIATORD_DEVICE", hide_env_values = true, value_name = "CREDENTIAL")]
    device: Option<String>,
    /// A file holding a paired device's credential
    #[arg(long, env = "MEDIATORD_DEVICE_FILE", hide_env_values = true, value_name = "PATH")]
    device_file: Option<std::path::PathBuf>,
    /// The client id the operator's token prompts and votes as [default: tui:$USER]; a device is
    /// its device id
    #[arg(long, env = "MEDIATORD_CLIENT_ID", hide_env_values = true, value_name = "ID")]
    client_id: Option<String>,
}

/// Where the running daemon is: `--url`, else what it wrote to its state directory, else a daemon
/// on the LAN, else the default address (`mediatord::discovery::locate`). A daemon found on the
/// LAN is named on stderr before anything is sent to it: any machine there can answer.
pub(super) fn locate(command: &str, args: &DaemonArgs) -> mediatord::discovery::Located {
    let located =
        mediatord::discovery::locate(args.url.as_deref(), state_dir(args).as_deref(), !args.no_mdns);
    if let Some(why) = &located.ignored {
        say(&format!("mediatord {command}: {why}"));
    }
    if let Some(line) = located.announcement("--url") {
        say(&format!("mediatord {command}: {line}"));
    }
    located
}

/// The state directory `pair` and `devices` look in for the running daemon's address.
fn state_dir(args: &DaemonArgs) -> Option<std::path::PathBuf> {
    args.state_dir.clone().or_else(mediatord::config::env_state_dir)
}

/// How the address a command could not reach was chosen, and how to choose another; nothing
/// when it was given (`--url`).
fn how_found(args: &DaemonArgs, source: &mediatord::discovery::Source) -> Option<String> {
    use mediatord::discovery::Source;
    Some(match source {
        Source::Explicit => return None,
        Source::StateDir => "the address is the one the daemon wrote to its state directory; it may have stopped without removing it".to_owned(),
        Source::Lan(_) => "the address is the one a daemon on the LAN advertised over mDNS; it may have stopped: give the daemon you mean its --url".to_owned(),
        Source::Default => {
            let dir = state_dir(args).map_or_else(|| "(none: no HOME)".to_owned(), |d| d.display().to_string());
            format!(
                "no running daemon wrote its address to the state directory {dir} and none answered on the LAN, so the default address was tried: give a daemon started elsewhere its --url, or its --state-dir"
            )
        }
    })
}

/// The login `attach`, `watch`, `diff` and `approve` use (which daemon, with which credential, as
/// which client id): the URL resolved once, the device's credential read from its file when given,
/// the operator's client id defaulted from $USER.
pub(super) fn login(command: &str, args: &ClientArgs) -> Result<mediatord::tui::Login, ExitCode> {
    let device = match (&args.device, &args.device_file) {
        (Some(d), _) => Some(d.clone()),
        (None, Some(path)) => match std::fs::read_to_string(path) {
            Ok(text) => Some(text.trim().to_owned()),
            Err(e) => {
                say(&format!("mediatord {command}: cannot read {}: {e}", path.display()));
                return Err(ExitCode::from(2));
            }
        },
        (None, None) => None,
    };
    let user = std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).ok();
    let daemon = locate(command, &args.daemon);
    let device = device.filter(|d| !d.is_empty());
    let token = args.daemon.token.clone().filter(|t| !t.trim().is_empty());
    let device = match (device, &token) {
        (None, None) => saved_login(command, &daemon.url),
        (device, _) => device,
    };
    Ok(mediatord::tui::Login {
        url: daemon.url,
        fingerprint: daemon.fingerprint,
        token,
        device,
        client_id: Some(
            args.client_id.clone().unwrap_or_else(|| mediatord::tui::default_client_id(user.as_deref())),
        ),
    })
}

/// The credential `mediatord login` saved for the daemon at `url`, when a command is given no
/// other (`--device`, `--device-file`, the token win over it). A file that cannot be trusted is
/// said and not used.
pub(super) fn saved_login(command: &str, url: &str) -> Option<String> {
    match mediatord::client::saved::credential_for(url) {
        Ok(saved) => saved,
        Err(e) => {
            say(&format!("mediatord {command}: {}", text::escape(&e)));
            None
        }
    }
}

/// Runs one of the terminal client's commands on a small runtime of its own.
pub(super) fn client_command(
    command: &str,
    run: impl std::future::Future<Output = Result<Option<String>, String>>,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            say(&format!("mediatord {command}: cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(run);
    runtime.shutdown_background();
    match outcome {
        Ok(Some(line)) => {
            let _ = writeln!(io::stdout(), "{line}");
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => {
            say(&format!("mediatord {command}: {}", text::escape(&e)));
            ExitCode::FAILURE
        }
    }
}

/// One call to the running daemon for `pair` and `devices`: the answer of a 2xx, or exit 1 with
/// the daemon's error (or why it could not be reached) on stderr.
pub(super) fn daemon_call(
    command: &str,
    args: &DaemonArgs,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<serde_json::Value, ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| {
        say(&format!("mediatord {command}: cannot start the async runtime: {e}"));
        ExitCode::FAILURE
    })?;
    let daemon = locate(command, args);
    let token = match args.token.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        Some(given) => Some(given.to_owned()),
        None => saved_login(command, &daemon.url),
    };
    let url = daemon.url.clone();
    let target = mediatord::client::api::Endpoint::new(&url, token.as_deref(), None)
        .map(|t| t.pinned(daemon.fingerprint.clone()))
        .map_err(|e| {
            say(&format!("mediatord {command}: {}", text::escape(&e)));
            ExitCode::from(2)
        })?;
    match runtime.block_on(target.call(method, path, body.as_ref())) {
        Ok((status, answer)) if (200..300).contains(&status) => Ok(answer),
        Ok((401, _)) => {
            say(&format!(
                "mediatord {command}: the daemon at {url} refused the credential (set MEDIATORD_TOKEN to its operator token, or sign in again: mediatord login)",
            ));
            Err(ExitCode::FAILURE)
        }
        Ok((status, answer)) => {
            let why = text::escape(answer["error"].as_str().unwrap_or("no explanation")).into_owned();
            say(&format!("mediatord {command}: the daemon answered {status}: {why}"));
            Err(ExitCode::FAILURE)
        }
        Err(e) => {
            let why = mediatord::client::api::unanswered(&e);
            // How the address was found matters only when nothing answered there.
            let found = match e {
                mediatord::client::api::NoAnswer::Unreachable(_) => how_found(args, &daemon.source),
                mediatord::client::api::NoAnswer::Untrusted(_) => None,
            }
            .map_or_else(String::new, |f| format!(" ({f})"));
            say(&format!("mediatord {command}: {}{}", text::escape(&why), text::escape(&found)));
            Err(ExitCode::FAILURE)
        }
    }
}

/// A field of a daemon's JSON answer (or of an audit entry) for a terminal: its text escaped
/// ([`text::escape`]), `-` when it is absent or no string.
pub(super) fn cell(value: &serde_json::Value) -> String {
    value.as_str().map_or_else(|| "-".to_owned(), |s| text::escape(s).into_owned())
}

//! The `mediatord` binary: parse the command line, set up logging, hand over to the library.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use mediatord::agent::guard::{self, GuardArgs};
use mediatord::agent::sandbox;
use mediatord::audit;
use mediatord::config::{Config, LogFormat, SERVE_HELP, ServeArgs};
use mediatord::demo_agent::{self, DIRECTIVES_HELP, DemoArgs};
use mediatord::service::{ServiceAction, ServiceArgs};
use mediatord::text;

const ABOUT: &str = "Share one ACP coding agent among many HTTP + SSE clients";

#[derive(Debug, Parser)]
#[command(
    name = "mediatord",
    version,
    about = ABOUT,
    long_about = "mediatord spawns an Agent Client Protocol agent (qwen --acp, claude-code-acp, \
gemini --acp, ...) per workspace and puts it behind an HTTP + Server-Sent-Events API: \
clients create or attach to sessions, send prompts, stream every agent update with replay on \
reconnect, and vote on the agent's tool-permission requests under a configurable policy."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon.
    #[command(after_help = SERVE_HELP)]
    Serve(Box<ServeArgs>),
    /// Print the permission audit trail, newest first, from the state database (read-only; works
    /// while the daemon runs, or not).
    Audit(AuditArgs),
    /// Copy the state database into a new file with SQLite's online backup: safe while the daemon
    /// runs (one consistent snapshot), or not. Restore: stop the daemon, put the copy in place of
    /// `state.db` (docs/operations.md#backups).
    Backup(BackupArgs),
    /// Print a recorded session's transcript as Markdown (who asked what, what the agent answered
    /// and did, what was decided) or as JSON, from the state database (read-only).
    Transcript(TranscriptArgs),
    /// Pair a phone or a browser: ask the running daemon for a one-time code, and print its URL
    /// and the same URL as a QR code to scan.
    Pair(PairArgs),
    /// List the paired devices, or revoke one (`mediatord devices revoke ID`).
    Devices(DevicesArgs),
    /// Be an editor's ACP agent on stdio and join a running daemon's shared session over its
    /// `/acp` WebSocket, reconnecting and resuming without losing an update (docs/clients.md).
    Connect(mediatord::http::connect::ConnectArgs),
    /// Follow a session full-screen in this terminal: its transcript replayed then live, its
    /// permission requests answered with single keys, prompts typed. Without a session, pick one.
    #[command(after_help = attach_help())]
    Attach(AttachArgs),
    /// Print a session's events as lines (replayed from the start, then live, until it ends).
    #[command(after_help = WATCH_HELP)]
    Watch(WatchArgs),
    /// Print a turn's diff (a session's last turn that changed a file, or `--turn N`), or without a
    /// session the workspace's diff, as a unified diff (coloured on a terminal).
    Diff(DiffArgs),
    /// Answer a session's pending permission request (the oldest, unless one is named).
    #[command(after_help = APPROVE_HELP)]
    Approve(ApproveArgs),
    /// Run the built-in demo ACP agent on stdin/stdout (what `--agent demo` starts).
    #[command(after_help = DIRECTIVES_HELP)]
    DemoAgent(DemoArgs),
    /// Run as a systemd service: `mediatord service install --user` writes the user unit.
    Service(ServiceArgs),
    /// Print a shell completion script to stdout (see docs/operations.md for where it goes).
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print a man page (roff) to stdout: mediatord(1), or a subcommand's, e.g. `mediatord man serve`.
    Man {
        /// The subcommand whose page to print (its options in full).
        #[arg(value_name = "SUBCOMMAND")]
        subcommand: Option<String>,
    },
    /// Internal: runs an agent command so that it dies with the daemon (see `agent::guard`).
    #[command(hide = true)]
    AgentGuard(GuardArgs),
    /// Internal: confines itself as a guard would and prints what the kernel enforces (see
    /// `agent::sandbox`); the daemon runs it once at boot.
    #[command(hide = true)]
    SandboxProbe,
}

/// How `pair` and `devices` reach the running daemon. Global, so they may also follow a
/// subcommand's own subcommand (`mediatord devices revoke ID --url …`).
#[derive(Debug, clap::Args)]
struct DaemonArgs {
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
struct ClientArgs {
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

#[derive(Debug, clap::Args)]
struct AttachArgs {
    /// The session to follow [default: pick from a list, or --workspace/--agent's shared session]
    session: Option<String>,
    /// Create or join the shared session of this agent (a name from `GET /agents`)
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// Create or join the shared session of this workspace
    #[arg(long, value_name = "DIR")]
    workspace: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Args)]
struct WatchArgs {
    /// The session
    session: String,
    /// Print each event's JSON envelope, one per line
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Args)]
struct DiffArgs {
    /// The session [default: the workspace's diff against git's HEAD, or its first snapshot]
    session: Option<String>,
    /// The turn (its `turnIndex`) [default: the last that changed a file]
    #[arg(long, value_name = "N", requires = "session")]
    turn: Option<u64>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Args)]
struct ApproveArgs {
    /// The session
    session: String,
    /// The request [default: the oldest pending one]
    request: Option<String>,
    /// The option: a kind (allow_once, allow_always, reject_once, reject_always) or an option id
    /// [default with --answer: allow_once, the question's Submit]
    #[arg(long, value_name = "OPTION", required_unless_present = "answer")]
    option: Option<String>,
    /// An answer to the agent's question: the question's key (or its number, from 0) and the
    /// answer; given again with the same key, several choices
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_answer)]
    answer: Vec<(String, String)>,
    #[command(flatten)]
    client: ClientArgs,
}

/// One `--answer KEY=VALUE`.
fn parse_answer(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err("expected KEY=VALUE (the question's key or number, then the answer)".to_owned()),
    }
}

/// How `attach` is used, for its --help (its keys follow, from the client's own `?` table).
const ATTACH_USE: &str = "\
Examples:
  mediatord attach                          pick a session (live or past) of the local daemon
  mediatord attach demo-7f3c2a1e-...        follow this session
  mediatord attach --workspace ~/src/app    create or join that workspace's shared session
  ssh -L 7776:127.0.0.1:7776 host           then `mediatord attach` here follows the daemon there

The operator token comes from MEDIATORD_TOKEN (you vote and prompt as --client-id); a paired
device's credential from MEDIATORD_DEVICE or --device-file (an observer device sees the cards
without their keys). Quitting leaves the session running.";

/// `attach --help`'s closing text: its use, then the keys the client's `?` shows.
fn attach_help() -> String {
    format!("{ATTACH_USE}\n\nKeys (? shows them in the client):\n{}", mediatord::tui::keys_text())
}

/// How `watch` is used, for its --help.
const WATCH_HELP: &str = "\
Each line is `<event id> <type> <what it says>`, escaped (a control character or bidi override
arrives as \\u{...}); --json prints each event's envelope as the daemon sent it, one per line.
A dropped connection is resumed with no gap and no repeat. Exit status: 0 when the session ends
(or was already history), 1 when the daemon cannot be reached or refuses.

Examples:
  mediatord watch demo-7f3c2a1e-...
  mediatord watch demo-7f3c2a1e-... --json | jq -c 'select(.type == \"permission_request\")'";

/// How `approve` is used, for its --help.
const APPROVE_HELP: &str = "\
OPTION is an option id the request offers, or a kind: the first option of that kind is chosen.
A question the agent asks is answered with --answer KEY=VALUE, once per question (the daemon
converts each answer to the question's type, and names the question it refuses an answer to).
It prints what it decided. Exit status: 0 when the vote was taken, 1 when no request is pending,
the request offers no such option, or the daemon refuses (an observer device may not vote, an
answer of the wrong type).

Examples:
  mediatord approve demo-7f3c2a1e-... --option allow_once
  mediatord approve demo-7f3c2a1e-... 4b2e9c0a-... --option reject_once
  mediatord approve demo-7f3c2a1e-... --answer name=api --answer replicas=3
  mediatord approve demo-7f3c2a1e-... --answer 0=jiff --answer 1=serde --answer 1=tz";

/// Where the running daemon is: `--url`, else what it wrote to its state directory, else a daemon
/// on the LAN, else the default address (`mediatord::discovery::locate`). A daemon found on the
/// LAN is named on stderr before anything is sent to it: any machine there can answer.
fn locate(command: &str, args: &DaemonArgs) -> mediatord::discovery::Located {
    let located =
        mediatord::discovery::locate(args.url.as_deref(), state_dir(args).as_deref(), !args.no_mdns);
    if let Some(why) = &located.ignored {
        say(&format!("mediatord {command}: {why}"));
    }
    if let mediatord::discovery::Source::Lan(name) = &located.source {
        say(&format!(
            "mediatord {command}: found {} on the LAN (mDNS) at {}{}; --url names another",
            text::escape(name),
            text::escape(&located.url),
            located
                .fingerprint
                .as_ref()
                .map_or(String::new(), |fp| format!(", certificate {}", text::escape(fp)))
        ));
    }
    located
}

/// The state directory `pair` and `devices` look in for the running daemon's address.
fn state_dir(args: &DaemonArgs) -> Option<std::path::PathBuf> {
    let env = |k: &str| std::env::var(k).ok();
    args.state_dir.clone().or_else(|| {
        mediatord::config::default_state_dir(env("XDG_STATE_HOME").as_deref(), env("HOME").as_deref())
    })
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

/// The connection `attach`, `watch` and `approve` use: the URL resolved once, the device's
/// credential read from its file when given, the operator's client id defaulted from $USER.
fn connection(command: &str, args: &ClientArgs) -> Result<mediatord::tui::Connection, ExitCode> {
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
    Ok(mediatord::tui::Connection {
        url: daemon.url,
        fingerprint: daemon.fingerprint,
        token: args.daemon.token.clone(),
        device: device.filter(|d| !d.is_empty()),
        client_id: Some(
            args.client_id.clone().unwrap_or_else(|| mediatord::tui::default_client_id(user.as_deref())),
        ),
    })
}

/// Runs one of the terminal client's commands on a small runtime of its own.
fn client_command(
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

#[derive(Debug, clap::Args)]
struct PairArgs {
    /// The device's name, as lists and the audit show it [default: what the device calls itself]
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// voter (prompts, votes, rules) or observer (reads and subscribes only)
    #[arg(long, value_name = "ROLE", default_value = "voter", value_parser = ["voter", "observer"])]
    role: String,
    #[command(flatten)]
    daemon: DaemonArgs,
}

#[derive(Debug, clap::Args)]
struct DevicesArgs {
    #[command(subcommand)]
    action: Option<DevicesAction>,
    #[command(flatten)]
    daemon: DaemonArgs,
}

#[derive(Debug, Subcommand)]
enum DevicesAction {
    /// The paired devices (the default)
    List,
    /// Revoke a device: its next request is refused and its event streams end
    Revoke {
        /// The device id (`dev-…`, from `mediatord devices`)
        id: String,
    },
}

/// One call to the running daemon for `pair` and `devices`: the answer of a 2xx, or exit 1 with
/// the daemon's error (or why it could not be reached) on stderr.
fn daemon_call(
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
    let token = args.token.as_deref().map(str::trim).filter(|t| !t.is_empty());
    let daemon = locate(command, args);
    let url = daemon.url.clone();
    let target = mediatord::http::client::Target::new(&url, token, None)
        .map(|t| t.pinned(daemon.fingerprint.clone()))
        .map_err(|e| {
            say(&format!("mediatord {command}: {}", text::escape(&e)));
            ExitCode::from(2)
        })?;
    match runtime.block_on(target.call(method, path, body.as_ref())) {
        Ok((status, answer)) if (200..300).contains(&status) => Ok(answer),
        Ok((401, _)) => {
            say(&format!(
                "mediatord {command}: the daemon at {url} refused the token (set MEDIATORD_TOKEN to its operator token)",
            ));
            Err(ExitCode::FAILURE)
        }
        Ok((status, answer)) => {
            let why = text::escape(answer["error"].as_str().unwrap_or("no explanation")).into_owned();
            say(&format!("mediatord {command}: the daemon answered {status}: {why}"));
            Err(ExitCode::FAILURE)
        }
        Err(e) => {
            let why = mediatord::http::client::unanswered(&e);
            // How the address was found matters only when nothing answered there.
            let found = match e {
                mediatord::http::client::NoAnswer::Unreachable(_) => how_found(args, &daemon.source),
                mediatord::http::client::NoAnswer::Untrusted(_) => None,
            }
            .map_or_else(String::new, |f| format!(" ({f})"));
            say(&format!("mediatord {command}: {}{}", text::escape(&why), text::escape(&found)));
            Err(ExitCode::FAILURE)
        }
    }
}

/// A field of a daemon's JSON answer (or of an audit entry) for a terminal: its text escaped
/// ([`text::escape`]), `-` when it is absent or no string.
fn cell(value: &serde_json::Value) -> String {
    value.as_str().map_or_else(|| "-".to_owned(), |s| text::escape(s).into_owned())
}

/// `mediatord pair`: the URL and its QR code on stdout.
fn pair(args: &PairArgs) -> ExitCode {
    let body = serde_json::json!({"name": args.name, "role": args.role});
    let answer = match daemon_call("pair", &args.daemon, "POST", "/devices/pairing", Some(body)) {
        Ok(answer) => answer,
        Err(code) => return code,
    };
    let Some(url) = answer["url"].as_str() else {
        say("mediatord pair: the daemon's answer has no url");
        return ExitCode::FAILURE;
    };
    let Some(qr) = mediatord::devices::qr::terminal(url) else {
        say("mediatord pair: the URL is too long for a QR code");
        return ExitCode::FAILURE;
    };
    let seconds =
        answer["expiresAt"].as_u64().map_or(0, |at| at.saturating_sub(mediatord::clock::now_ms()) / 1000);
    let mut out = io::stdout().lock();
    let _ = writeln!(
        out,
        "Scan this with the device's camera, or open the URL on it. It works once, for {seconds} s, as a {}:\n",
        text::escape(answer["role"].as_str().unwrap_or("voter"))
    );
    let _ = write!(out, "{qr}");
    let _ = writeln!(out, "\n\n{}", text::escape(url));
    ExitCode::SUCCESS
}

/// `mediatord devices [list|revoke ID]`.
fn devices(args: &DevicesArgs) -> ExitCode {
    match &args.action {
        Some(DevicesAction::Revoke { id }) => {
            let path = format!("/devices/{}", id.bytes().map(|b| format!("%{b:02X}")).collect::<String>());
            match daemon_call("devices", &args.daemon, "DELETE", &path, None) {
                Ok(_) => {
                    let _ = writeln!(io::stdout(), "revoked {}", text::escape(id));
                    ExitCode::SUCCESS
                }
                Err(code) => code,
            }
        }
        None | Some(DevicesAction::List) => {
            let answer = match daemon_call("devices", &args.daemon, "GET", "/devices", None) {
                Ok(answer) => answer,
                Err(code) => return code,
            };
            let mut out = io::stdout().lock();
            let _ = writeln!(out, "{:<20}  {:<8}  {:<24}  {:<24}  NAME", "ID", "ROLE", "PAIRED", "LAST SEEN");
            for d in answer["devices"].as_array().into_iter().flatten() {
                let at = |v: &serde_json::Value| {
                    v.as_u64().map_or_else(|| "-".to_owned(), mediatord::clock::iso8601)
                };
                let _ = writeln!(
                    out,
                    "{:<20}  {:<8}  {:<24}  {:<24}  {}",
                    cell(&d["deviceId"]),
                    cell(&d["role"]),
                    at(&d["createdAt"]),
                    at(&d["lastSeenAt"]),
                    cell(&d["name"]),
                );
            }
            ExitCode::SUCCESS
        }
    }
}

/// `mediatord audit`'s flags: the filters of `GET /audit`.
#[derive(Debug, clap::Args)]
struct AuditArgs {
    /// The daemon's state directory [default: $XDG_STATE_HOME/mediatord, else ~/.local/state/mediatord]
    #[arg(long, env = "MEDIATORD_STATE_DIR", hide_env_values = true, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
    /// A state database file to read instead of a state directory's: a copy `mediatord backup`
    /// wrote, or a `state.db` (a file given as --state-dir is read the same way)
    #[arg(long, value_name = "FILE", conflicts_with = "state_dir")]
    state_db: Option<std::path::PathBuf>,
    /// Print the entries as JSON lines (one object per entry) instead of a table
    #[arg(long)]
    json: bool,
    /// Only this workspace
    #[arg(long, value_name = "DIR")]
    workspace: Option<String>,
    /// Only this session
    #[arg(long, value_name = "ID")]
    session_id: Option<String>,
    /// Only this outcome: pending, selected, cancelled, timed_out, abandoned
    #[arg(long, value_name = "OUTCOME")]
    outcome: Option<String>,
    /// Requested at or after: an age (30m, 1h, 2d, 1w), a UTC date or time (2026-11-22,
    /// 2026-11-22T20:39), or ms since the Unix epoch
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// Requested before: a UTC date or time, an age, or ms since the Unix epoch
    #[arg(long, value_name = "WHEN")]
    until: Option<String>,
    /// Show each device's id beside its name
    #[arg(long)]
    ids: bool,
    /// Entries to print [default: 50]
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Continue after this cursor (printed after the last entry of a page)
    #[arg(long, value_name = "CURSOR")]
    cursor: Option<String>,
}

/// `mediatord backup`'s arguments.
#[derive(Debug, clap::Args)]
struct BackupArgs {
    /// The new file to write (refused when it exists)
    #[arg(value_name = "DEST")]
    dest: std::path::PathBuf,
    /// The daemon's state directory [default: $XDG_STATE_HOME/mediatord, else ~/.local/state/mediatord]
    #[arg(long, env = "MEDIATORD_STATE_DIR", hide_env_values = true, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
}

/// The state database a reading command (`audit`, `transcript`) opens, read-only: `--state-db
/// FILE`; else `--state-dir` (its `state.db`, or, when it names a file, that file: a backup given
/// where the directory was expected); else the default state directory's. On failure it has said
/// why on stderr, as `command`'s, and the exit status is 2.
fn read_database(
    dir: Option<&std::path::Path>,
    file: Option<&std::path::Path>,
    command: &str,
) -> Result<mediatord::store::ReadOnly, ExitCode> {
    let fail = |e: String| {
        say(&format!("mediatord {command}: {}", text::escape(&e)));
        ExitCode::from(2)
    };
    let file = file.or(dir.filter(|d| d.is_file()));
    let opened = match file {
        Some(file) => mediatord::store::open_read_only_file(file),
        None => {
            let dir = state_dir_of(dir, command).ok_or(ExitCode::from(2))?;
            if !mediatord::store::db_path(&dir).exists() {
                return Err(fail(format!(
                    "no state database in {} (has the daemon run with this --state-dir? A backup file: --state-db FILE)",
                    dir.display()
                )));
            }
            mediatord::store::open_read_only(&dir)
        }
    };
    opened.map_err(|e| fail(e.to_string()))
}

/// The state directory a command reads: `--state-dir`, else the default; `None` (said on stderr,
/// as `command`'s) when there is neither.
fn state_dir_of(arg: Option<&std::path::Path>, command: &str) -> Option<std::path::PathBuf> {
    let env = |k: &str| std::env::var(k).ok();
    let dir = arg.map(std::path::Path::to_path_buf).or_else(|| {
        mediatord::config::default_state_dir(env("XDG_STATE_HOME").as_deref(), env("HOME").as_deref())
    });
    if dir.is_none() {
        say(&format!(
            "mediatord {command}: no state directory: pass --state-dir, or set XDG_STATE_HOME or HOME"
        ));
    }
    dir
}

/// `mediatord backup`: 0, or 2 when there is nothing to copy or the copy cannot be written.
fn backup(args: &BackupArgs) -> ExitCode {
    let Some(dir) = state_dir_of(args.state_dir.as_deref(), "backup") else {
        return ExitCode::from(2);
    };
    if !mediatord::store::db_path(&dir).exists() {
        say(&format!("mediatord backup: no state database in {} (pass --state-dir)", dir.display()));
        return ExitCode::from(2);
    }
    match mediatord::store::backup(&dir, &args.dest) {
        Ok(bytes) => {
            let _ =
                writeln!(io::stdout(), "mediatord backup: {bytes} bytes written to {}", args.dest.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            say(&format!("mediatord backup: {}", text::escape(&e.to_string())));
            ExitCode::from(2)
        }
    }
}

/// `mediatord transcript`'s arguments.
#[derive(Debug, clap::Args)]
struct TranscriptArgs {
    /// The session's id
    #[arg(value_name = "SESSION")]
    session: String,
    /// `md` (Markdown) or `json` (`{session, events}`)
    #[arg(long, value_name = "FORMAT", default_value = "md", value_parser = ["md", "json"])]
    format: String,
    /// The daemon's state directory [default: $XDG_STATE_HOME/mediatord, else ~/.local/state/mediatord]
    #[arg(long, env = "MEDIATORD_STATE_DIR", hide_env_values = true, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
    /// A state database file to read instead of a state directory's: a copy `mediatord backup`
    /// wrote, or a `state.db` (a file given as --state-dir is read the same way)
    #[arg(long, value_name = "FILE", conflicts_with = "state_dir")]
    state_db: Option<std::path::PathBuf>,
}

/// Recorded items read per query while a transcript is gathered.
const TRANSCRIPT_PAGE: usize = 1000;

/// `mediatord transcript`: 0, or 2 for a session the history does not have or a database it cannot
/// read.
fn transcript(args: &TranscriptArgs) -> ExitCode {
    use mediatord::store::{AuditQuery, StoredEvent};
    let db = match read_database(args.state_dir.as_deref(), args.state_db.as_deref(), "transcript") {
        Ok(db) => db,
        Err(code) => return code,
    };
    let fail = |e: String| {
        say(&format!("mediatord transcript: {}", text::escape(&e)));
        ExitCode::from(2)
    };
    let record = match db.session(&args.session) {
        Ok(Some(record)) => record,
        Ok(None) => return fail(format!("no session {:?} in the history", args.session)),
        Err(e) => return fail(e.to_string()),
    };
    // The history is bounded by retention (`--history-events` per session), so is this.
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let page = match db.events(&args.session, after, TRANSCRIPT_PAGE) {
            Ok(page) => page,
            Err(e) => return fail(e.to_string()),
        };
        let Some(last) = page.last() else { break };
        after = last.last_id();
        for item in page {
            match item {
                StoredEvent::Frame { frame, .. } => events.extend(mediatord::transcript::envelope(&frame)),
                StoredEvent::Gap { from, to } => events.push(serde_json::json!({
                    "type": "history_gap", "data": {"sessionId": args.session, "fromId": from, "toId": to},
                })),
            }
        }
    }
    let head = mediatord::transcript::Head {
        session_id: record.session_id.clone(),
        workspace: record.workspace.clone(),
        agent: record.agent.clone(),
        created_at: mediatord::clock::iso8601(record.created_at),
        ended_at: record.ended_at.map(mediatord::clock::iso8601),
        state: record.state.as_str().to_owned(),
        end_reason: record.end_reason.clone(),
    };
    let mut out = io::stdout().lock();
    let written = if args.format == "json" {
        let doc = mediatord::transcript::json(&head, events);
        writeln!(out, "{}", text::escape_json(&doc.to_string()))
    } else {
        let query =
            AuditQuery { session_id: Some(args.session.clone()), limit: 10_000, ..AuditQuery::default() };
        let names = db
            .query_audit(&query)
            .map(|page| {
                page.entries
                    .iter()
                    .filter_map(|e| {
                        Some((
                            e["voterClientId"].as_str()?.to_owned(),
                            e["voterDeviceName"].as_str()?.to_owned(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        write!(out, "{}", mediatord::transcript::markdown(&head, &events, &names))
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

/// `mediatord audit`: 0, or 2 for bad arguments or a state directory it cannot read.
fn audit(args: &AuditArgs) -> ExitCode {
    use mediatord::store::{AuditOutcome, AuditQuery, Cursor};
    let outcome = match args.outcome.as_deref().map(|o| (o, AuditOutcome::parse(o))) {
        None => None,
        Some((_, Some(o))) => Some(o),
        Some((o, None)) => {
            say(&format!(
                "mediatord audit: unknown --outcome {o:?} (pending, selected, cancelled, timed_out, abandoned)"
            ));
            return ExitCode::from(2);
        }
    };
    let cursor = match args.cursor.as_deref().map(|c| (c, Cursor::decode(c))) {
        None => None,
        Some((_, Some(c))) => Some(c),
        Some((c, None)) => {
            say(&format!("mediatord audit: {c:?} is not a cursor mediatord printed"));
            return ExitCode::from(2);
        }
    };
    let now = mediatord::clock::now_ms();
    let mut window = [None, None];
    for (slot, (flag, given)) in window.iter_mut().zip([("--since", &args.since), ("--until", &args.until)]) {
        match given.as_deref().map(|g| mediatord::audit::parse_since(g, now)) {
            None => {}
            Some(Ok(at)) => *slot = Some(at),
            Some(Err(e)) => {
                say(&format!("mediatord audit: {flag}: {}", text::escape(&e)));
                return ExitCode::from(2);
            }
        }
    }
    let [since, until] = window;
    let query = AuditQuery {
        workspace: args
            .workspace
            .clone()
            .map(|w| std::fs::canonicalize(&w).map_or(w, |c| c.to_string_lossy().into_owned())),
        session_id: args.session_id.clone(),
        since,
        until,
        outcome,
        cursor,
        limit: args.limit.unwrap_or(50).clamp(1, 10_000),
    };
    let db = match read_database(args.state_dir.as_deref(), args.state_db.as_deref(), "audit") {
        Ok(db) => db,
        Err(code) => return code,
    };
    let page = match db.query_audit(&query) {
        Ok(page) => page,
        Err(e) => {
            say(&format!("mediatord audit: {}", text::escape(&e.to_string())));
            return ExitCode::from(2);
        }
    };
    let mut out = io::stdout().lock();
    if args.json {
        for entry in &page.entries {
            // serde_json leaves C1 controls and bidi characters raw; the line stays the same JSON.
            let _ = writeln!(out, "{}", text::escape_json(&entry.to_string()));
        }
    } else {
        let _ = write!(out, "{}", audit::table(&page.entries, args.ids));
    }
    if let Some(next) = page.next_cursor {
        let _ = writeln!(io::stderr(), "more: mediatord audit --cursor {}", next.encode());
    }
    ExitCode::SUCCESS
}

/// Where log lines go: stderr, where a failed write is dropped, never reported. A log line is
/// worth less than the task that writes it: when the reader of stderr is gone (`2>&1 | head`, a
/// dead log driver) every write fails with EPIPE, and tracing-subscriber would report that with
/// `eprintln!`, which panics on the same broken pipe inside whatever task was logging.
///
/// `json`: the line is a JSON object (`--log-format json`), written as a whole per event; the
/// characters serde leaves raw that a terminal would act on (C1 controls, bidi overrides) are
/// written as `\uXXXX` ([`text::escape_json`]). Text lines are escaped field by field instead
/// ([`escaped_fields`]).
#[derive(Debug, Clone, Copy)]
struct LossyStderr {
    json: bool,
}

impl Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let line = if self.json { std::str::from_utf8(buf).ok().map(text::escape_json) } else { None };
        let _ = match &line {
            Some(line) => io::stderr().write_all(line.as_bytes()),
            None => io::stderr().write_all(buf),
        };
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// One line on stderr outside the log (boot refusals, fatal errors); a broken stderr loses it.
fn say(line: &str) {
    let _ = writeln!(io::stderr(), "{line}");
}

/// How a text log line writes its fields (the message too): each value as tracing-subscriber
/// would, then escaped ([`text::escape`]), so a session id, an agent's stderr line or a device name
/// can neither forge a line nor drive the terminal that shows the log.
fn escaped_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> {
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let shown = format!("{value:?}");
        match field.name() {
            "message" => write!(w, "{}", text::escape(&shown)),
            // What a library logging through `log` adds (its target, module, and the source file
            // on the machine that built it): the line's target says the first already.
            name if name.starts_with("log.") => Ok(()),
            // Each field after its own space, so one left out leaves none.
            name => write!(w, " {name}={}", text::escape(&shown)),
        }
    })
}

fn init_logging(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let ansi = io::IsTerminal::is_terminal(&io::stderr());
    let json = format == LogFormat::Json;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(move || LossyStderr { json })
        .log_internal_errors(false)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.fmt_fields(escaped_fields()).init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// The command line as users see it. clap_complete offers hidden subcommands too, and clap cannot
/// remove one, so completions are generated from a copy without the internal `agent-guard`.
fn visible_cli() -> clap::Command {
    let full = Cli::command();
    let visible: Vec<clap::Command> = full.get_subcommands().filter(|c| !c.is_hide_set()).cloned().collect();
    clap::Command::new("mediatord").version(env!("CARGO_PKG_VERSION")).about(ABOUT).subcommands(visible)
}

/// Writes the man page of `mediatord` or of one of its (visible) subcommands to stdout.
fn man_page(subcommand: Option<&str>) -> ExitCode {
    let mut cli = Cli::command();
    // Building names each subcommand `mediatord-<name>`, the title of its page.
    cli.build();
    let page = match subcommand {
        None => cli,
        Some(name) => match cli.get_subcommands().find(|c| c.get_name() == name && !c.is_hide_set()) {
            Some(sub) => sub.clone(),
            None => {
                let names: Vec<&str> =
                    cli.get_subcommands().filter(|c| !c.is_hide_set()).map(|c| c.get_name()).collect();
                eprintln!("mediatord man: no subcommand {name:?} (expected one of: {})", names.join(", "));
                return ExitCode::from(2);
            }
        },
    };
    // The footer names the program and its version on every page; clap_mangen would take the
    // subcommand's own name and version (`serve ` on mediatord-serve(1): no version of its own).
    let source = format!("mediatord {}", env!("CARGO_PKG_VERSION"));
    match clap_mangen::Man::new(page).source(source).render(&mut std::io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mediatord man: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            let config = match Config::from_args(&args) {
                Ok(config) => config,
                Err(e) => {
                    say(&e.to_string());
                    return ExitCode::from(2);
                }
            };
            init_logging(config.log_format, "info");
            // The token and the store's URL are in the configuration now: erased from the
            // process's initial environment before any thread or agent exists.
            if let Err(e) = mediatord::environ::erase_secrets() {
                tracing::warn!(error = %e, "could not erase the token from the daemon's initial environment");
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
            let store = match mediatord::store::open(&store_config) {
                Ok(store) => store,
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
            let outcome = runtime.block_on(mediatord::server::run(config, store, tls));
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
        Command::DemoAgent(args) => {
            init_logging(LogFormat::Text, "warn");
            let env = |k: &str| std::env::var(k).ok();
            let opts = demo_agent::DemoOptions {
                ignore_sigterm: args.ignore_sigterm,
                linger_after_eof: args.linger,
                no_load_session: args.no_load_session,
                // Beside the daemon's own state (same user, same XDG rules).
                transcripts: mediatord::config::default_state_dir(
                    env("XDG_STATE_HOME").as_deref(),
                    env("HOME").as_deref(),
                )
                .map(|d| d.join("demo-agent")),
            };
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    say(&format!("demo-agent: cannot start the async runtime: {e}"));
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(demo_agent::run(opts)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    say(&format!("demo-agent: {e}"));
                    ExitCode::FAILURE
                }
            }
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut visible_cli(), "mediatord", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man { subcommand } => man_page(subcommand.as_deref()),
        Command::Audit(args) => audit(&args),
        Command::Backup(args) => backup(&args),
        Command::Transcript(args) => transcript(&args),
        Command::Pair(args) => pair(&args),
        Command::Devices(args) => devices(&args),
        Command::Connect(args) => mediatord::http::connect::main(args),
        Command::Attach(args) => {
            let conn = match connection("attach", &args.client) {
                Ok(conn) => conn,
                Err(code) => return code,
            };
            let opts = mediatord::tui::AttachOptions {
                session: args.session,
                agent: args.agent,
                workspace: args.workspace,
                no_color: std::env::var("NO_COLOR").ok(),
            };
            client_command("attach", async { mediatord::tui::attach(conn, opts).await.map(|()| None) })
        }
        Command::Watch(args) => {
            let conn = match connection("watch", &args.client) {
                Ok(conn) => conn,
                Err(code) => return code,
            };
            client_command("watch", async {
                mediatord::tui::watch(conn, args.session, args.json).await.map(|()| None)
            })
        }
        Command::Diff(args) => {
            let conn = match connection("diff", &args.client) {
                Ok(conn) => conn,
                Err(code) => return code,
            };
            let colour = io::IsTerminal::is_terminal(&io::stdout()) && std::env::var_os("NO_COLOR").is_none();
            client_command("diff", async {
                mediatord::tui::diff(conn, args.session, args.turn, colour).await.map(Some)
            })
        }
        Command::Approve(args) => {
            let conn = match connection("approve", &args.client) {
                Ok(conn) => conn,
                Err(code) => return code,
            };
            client_command("approve", async {
                let option = args.option.unwrap_or_else(|| "allow_once".to_owned());
                mediatord::tui::approve(conn, args.session, args.request, option, args.answer).await.map(Some)
            })
        }
        Command::Service(ServiceArgs { action: ServiceAction::Install(args) }) => {
            match mediatord::service::install_user_here(&args) {
                Ok(report) => {
                    let _ = write!(io::stdout(), "{report}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    say(&format!("mediatord service: {e}"));
                    ExitCode::from(e.exit_code())
                }
            }
        }
        Command::AgentGuard(args) => ExitCode::from(guard::run(args).clamp(0, 255) as u8),
        Command::SandboxProbe => ExitCode::from(sandbox::probe_main().clamp(0, 255) as u8),
    }
}

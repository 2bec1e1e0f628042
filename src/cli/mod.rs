//! The `mediatord` binary's commands: one file per subcommand (its arguments and what it runs),
//! dispatched from here. Above every floor of the library, which it reaches through `mediatord::`
//! only (`tests/it/architecture.rs`); nothing in the library reaches back.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mediatord::agent::guard::{self, GuardArgs};
use mediatord::agent::sandbox;
use mediatord::config::{SERVE_HELP, ServeArgs};
use mediatord::demo_agent::{DIRECTIVES_HELP, DemoArgs};
use mediatord::service::{ServiceAction, ServiceArgs};

mod approve;
mod attach;
mod audit;
mod backup;
mod database;
mod demo_agent;
mod devices;
mod diff;
mod log;
mod login;
mod man;
mod pair;
mod reach;
mod review_log;
mod serve;
mod transcript;
mod watch;

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
    Audit(audit::AuditArgs),
    /// Print what each reviewer decided about the permission requests and why, newest first, from
    /// the audit trail (read-only; works while the daemon runs, or not).
    #[command(after_help = review_log::HELP)]
    ReviewLog(review_log::ReviewLogArgs),
    /// Copy the state database into a new file with SQLite's online backup: safe while the daemon
    /// runs (one consistent snapshot), or not. Restore: stop the daemon, put the copy in place of
    /// `state.db` (docs/operations.md#backups).
    Backup(backup::BackupArgs),
    /// Print a recorded session's transcript as Markdown (who asked what, what the agent answered
    /// and did, what was decided) or as JSON, from the state database (read-only).
    Transcript(transcript::TranscriptArgs),
    /// Pair a phone or a browser: ask the running daemon for a one-time code, and print its URL
    /// and the same URL as a QR code to scan.
    Pair(pair::PairArgs),
    /// Sign this terminal in as yourself with the daemon's sign-in provider: a code to confirm in
    /// any browser, then the other commands act as you.
    #[command(after_help = login::LOGIN_HELP)]
    Login(login::LoginArgs),
    /// End the sign-in `mediatord login` saved for this daemon, there and here.
    Logout(login::LogoutArgs),
    /// List the paired devices, or revoke one (`mediatord devices revoke ID`).
    Devices(devices::DevicesArgs),
    /// Be an editor's ACP agent on stdio and join a running daemon's shared session over its
    /// `/acp` WebSocket, reconnecting and resuming without losing an update (docs/clients.md).
    Connect(mediatord::client::connect::ConnectArgs),
    /// Follow a session full-screen in this terminal: its transcript replayed then live, its
    /// permission requests answered with single keys, prompts typed. Without a session, pick one.
    #[command(after_help = attach::help())]
    Attach(attach::AttachArgs),
    /// Print a session's events as lines (replayed from the start, then live, until it ends).
    #[command(after_help = watch::HELP)]
    Watch(watch::WatchArgs),
    /// Print a turn's diff (a session's last turn that changed a file, or `--turn N`), or without a
    /// session the workspace's diff, as a unified diff (coloured on a terminal).
    Diff(diff::DiffArgs),
    /// Answer a session's pending permission request (the oldest, unless one is named).
    #[command(after_help = approve::HELP)]
    Approve(approve::ApproveArgs),
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

/// Parses the command line and runs the command; its exit status.
pub(crate) fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve(args) => serve::run(&args),
        Command::DemoAgent(args) => demo_agent::run(&args),
        Command::Completions { shell } => man::completions(shell),
        Command::Man { subcommand } => man::man_page(subcommand.as_deref()),
        Command::Audit(args) => audit::run(&args),
        Command::ReviewLog(args) => review_log::run(&args),
        Command::Backup(args) => backup::run(&args),
        Command::Transcript(args) => transcript::run(&args),
        Command::Pair(args) => pair::run(&args),
        Command::Devices(args) => devices::run(&args),
        Command::Login(args) => login::run(&args),
        Command::Logout(args) => login::logout(&args),
        Command::Connect(args) => mediatord::client::connect::main(args),
        Command::Attach(args) => attach::run(args),
        Command::Watch(args) => watch::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Approve(args) => approve::run(args),
        Command::Service(ServiceArgs { action: ServiceAction::Install(args) }) => install_service(&args),
        Command::AgentGuard(args) => ExitCode::from(guard::run(args).clamp(0, 255) as u8),
        Command::SandboxProbe => ExitCode::from(sandbox::probe_main().clamp(0, 255) as u8),
    }
}

/// One line on stderr outside the log (boot refusals, fatal errors); a broken stderr loses it.
fn say(line: &str) {
    let _ = writeln!(io::stderr(), "{line}");
}

/// `mediatord service install --user`: what it wrote, or why not with the service's exit status.
fn install_service(args: &mediatord::service::InstallArgs) -> ExitCode {
    match mediatord::service::install_user_here(args) {
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

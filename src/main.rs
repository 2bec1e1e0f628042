//! The `mediatord` binary: parse the command line, set up logging, hand over to the library.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use mediatord::agent::guard::{self, GuardArgs};
use mediatord::config::{Config, LogFormat, SERVE_HELP, ServeArgs};
use mediatord::demo_agent::{self, DIRECTIVES_HELP, DemoArgs};

const ABOUT: &str = "Share one ACP coding agent among many HTTP + SSE clients";

#[derive(Debug, Parser)]
#[command(
    name = "mediatord",
    version,
    about = ABOUT,
    long_about = "mediatord spawns an Agent Client Protocol agent (qwen --acp, claude-code-acp, \
gemini --experimental-acp, ...) per workspace and puts it behind an HTTP + Server-Sent-Events API: \
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
    /// Run the built-in demo ACP agent on stdin/stdout (what `--agent demo` starts).
    #[command(after_help = DIRECTIVES_HELP)]
    DemoAgent(DemoArgs),
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
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
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
    match clap_mangen::Man::new(page).render(&mut std::io::stdout()) {
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
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            init_logging(config.log_format);
            for warning in &config.warnings {
                tracing::warn!("{warning}");
            }
            let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("mediatord: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(mediatord::server::run(config)) {
                Ok(code) => ExitCode::from(code as u8),
                Err(e) => {
                    eprintln!("mediatord: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::DemoAgent(args) => {
            let filter = tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .init();
            let opts = demo_agent::DemoOptions {
                ignore_sigterm: args.ignore_sigterm,
                linger_after_eof: args.linger,
            };
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("demo-agent: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(demo_agent::run(opts)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("demo-agent: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut visible_cli(), "mediatord", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man { subcommand } => man_page(subcommand.as_deref()),
        Command::AgentGuard(args) => ExitCode::from(guard::run(args).clamp(0, 255) as u8),
    }
}

//! The `mediatord` binary: parse the command line, set up logging, hand over to the library.

use std::process::ExitCode;

use clap::Parser;
use mediatord::config::{Cli, Command, Config, LogFormat};

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
            let opts = mediatord::demo_agent::DemoOptions {
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
            match runtime.block_on(mediatord::demo_agent::run(opts)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("demo-agent: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::AgentGuard(args) => ExitCode::from(mediatord::agent_guard::run(args).clamp(0, 255) as u8),
    }
}

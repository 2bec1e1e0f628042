//! `mediatord demo-agent`: the built-in demo ACP agent on stdio (what `--agent demo` starts).

use std::process::ExitCode;

use mediatord::config::LogFormat;
use mediatord::demo_agent::{self, DemoArgs};

use super::log::init_logging;
use super::say;

/// `mediatord demo-agent`: runs until its stdin ends.
pub(super) fn run(args: &DemoArgs) -> ExitCode {
    init_logging(LogFormat::Text, "warn");
    let opts = demo_agent::DemoOptions {
        ignore_sigterm: args.ignore_sigterm,
        linger_after_eof: args.linger,
        no_load_session: args.no_load_session,
        // Beside the daemon's own state (same user, same XDG rules).
        transcripts: mediatord::config::env_state_dir().map(|d| d.join("demo-agent")),
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

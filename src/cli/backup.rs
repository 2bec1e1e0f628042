//! `mediatord backup`: a consistent copy of the state database, safe while the daemon runs.

use std::io::{self, Write};
use std::process::ExitCode;

use mediatord::text;

use super::database::state_dir_of;
use super::say;

/// `mediatord backup`'s arguments.
#[derive(Debug, clap::Args)]
pub(super) struct BackupArgs {
    /// The new file to write (refused when it exists)
    #[arg(value_name = "DEST")]
    dest: std::path::PathBuf,
    /// The daemon's state directory [default: $XDG_STATE_HOME/mediatord, else ~/.local/state/mediatord]
    #[arg(long, env = "MEDIATORD_STATE_DIR", hide_env_values = true, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
}

/// `mediatord backup`: 0, or 2 when there is nothing to copy or the copy cannot be written.
pub(super) fn run(args: &BackupArgs) -> ExitCode {
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

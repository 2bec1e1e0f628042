//! The `mediatord` binary: its commands are in `cli/`, one file each.

use std::process::ExitCode;

mod cli;

fn main() -> ExitCode {
    cli::main()
}

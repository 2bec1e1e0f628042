//! `mediatord diff`: a turn's or the workspace's diff, unified.

use std::io;
use std::process::ExitCode;

use super::reach::{ClientArgs, client_command, login};

#[derive(Debug, clap::Args)]
pub(super) struct DiffArgs {
    /// The session [default: the workspace's diff against git's HEAD, or its first snapshot]
    session: Option<String>,
    /// The turn (its `turnIndex`) [default: the last that changed a file]
    #[arg(long, value_name = "N", requires = "session")]
    turn: Option<u64>,
    #[command(flatten)]
    client: ClientArgs,
}

/// `mediatord diff`: the diff on stdout, coloured only on a terminal that has not asked for `NO_COLOR`.
pub(super) fn run(args: DiffArgs) -> ExitCode {
    let conn = match login("diff", &args.client) {
        Ok(conn) => conn,
        Err(code) => return code,
    };
    let colour = io::IsTerminal::is_terminal(&io::stdout()) && std::env::var_os("NO_COLOR").is_none();
    client_command("diff", async {
        mediatord::tui::diff(conn, args.session, args.turn, colour).await.map(Some)
    })
}

//! `mediatord attach`: follow a session full-screen in this terminal (the client is `tui`).

use std::process::ExitCode;

use super::reach::{ClientArgs, client_command, login};

#[derive(Debug, clap::Args)]
pub(super) struct AttachArgs {
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
pub(super) fn help() -> String {
    format!("{ATTACH_USE}\n\nKeys (? shows them in the client):\n{}", mediatord::tui::keys_text())
}

/// `mediatord attach`: the full-screen client until the person quits (the session keeps running).
pub(super) fn run(args: AttachArgs) -> ExitCode {
    let conn = match login("attach", &args.client) {
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

//! `mediatord watch`: a session's events as lines, replayed then live.

use std::process::ExitCode;

use super::reach::{ClientArgs, client_command, login};

#[derive(Debug, clap::Args)]
pub(super) struct WatchArgs {
    /// The session
    session: String,
    /// Print each event's JSON envelope, one per line
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    client: ClientArgs,
}

/// How `watch` is used, for its --help.
pub(super) const HELP: &str = "\
Each line is `<event id> <type> <what it says>`, escaped (a control character or bidi override
arrives as \\u{...}); --json prints each event's envelope as the daemon sent it, one per line.
A dropped connection is resumed with no gap and no repeat. Exit status: 0 when the session ends
(or was already history), 1 when the daemon cannot be reached or refuses.

Examples:
  mediatord watch demo-7f3c2a1e-...
  mediatord watch demo-7f3c2a1e-... --json | jq -c 'select(.type == \"permission_request\")'";

/// `mediatord watch`: 0 when the session ends, 1 when the daemon cannot be reached or refuses.
pub(super) fn run(args: WatchArgs) -> ExitCode {
    let conn = match login("watch", &args.client) {
        Ok(conn) => conn,
        Err(code) => return code,
    };
    client_command("watch", async {
        mediatord::tui::watch(conn, args.session, args.json).await.map(|()| None)
    })
}

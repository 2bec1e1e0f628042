//! `mediatord approve`: answer a session's pending permission request or question.

use std::process::ExitCode;

use super::reach::{ClientArgs, client_command, login};

#[derive(Debug, clap::Args)]
pub(super) struct ApproveArgs {
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

/// How `approve` is used, for its --help.
pub(super) const HELP: &str = "\
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

/// `mediatord approve`: what was decided on stdout; the option defaults to allow_once (a question's Submit).
pub(super) fn run(args: ApproveArgs) -> ExitCode {
    let conn = match login("approve", &args.client) {
        Ok(conn) => conn,
        Err(code) => return code,
    };
    client_command("approve", async {
        let option = args.option.unwrap_or_else(|| "allow_once".to_owned());
        mediatord::tui::approve(conn, args.session, args.request, option, args.answer).await.map(Some)
    })
}

//! `mediatord pair`: a one-time pairing code from the running daemon, as a URL and a QR code.

use std::io::{self, Write};
use std::process::ExitCode;

use mediatord::text;

use super::reach::{DaemonArgs, daemon_call};
use super::say;

#[derive(Debug, clap::Args)]
pub(super) struct PairArgs {
    /// The device's name, as lists and the audit show it [default: what the device calls itself]
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// voter (prompts, votes, rules) or observer (reads and subscribes only) [default: voter with
    /// the operator's token; signed in (mediatord login), a device of yours with your role]
    #[arg(long, value_name = "ROLE", value_parser = ["voter", "observer"])]
    role: Option<String>,
    #[command(flatten)]
    daemon: DaemonArgs,
}

/// `mediatord pair`: the URL and its QR code on stdout.
pub(super) fn run(args: &PairArgs) -> ExitCode {
    let body = serde_json::json!({"name": args.name, "role": args.role});
    let answer = match daemon_call("pair", &args.daemon, "POST", "/devices/pairing", Some(body)) {
        Ok(answer) => answer,
        Err(code) => return code,
    };
    let Some(url) = answer["url"].as_str() else {
        say("mediatord pair: the daemon's answer has no url");
        return ExitCode::FAILURE;
    };
    let Some(qr) = mediatord::devices::qr::terminal(url) else {
        say("mediatord pair: the URL is too long for a QR code");
        return ExitCode::FAILURE;
    };
    let seconds =
        answer["expiresAt"].as_u64().map_or(0, |at| at.saturating_sub(mediatord::clock::now_ms()) / 1000);
    let mut out = io::stdout().lock();
    let _ = writeln!(
        out,
        "Scan this with the device's camera, or open the URL on it. It works once, for {seconds} s, as a {}:\n",
        text::escape(answer["role"].as_str().unwrap_or("voter"))
    );
    let _ = write!(out, "{qr}");
    let _ = writeln!(out, "\n\n{}", text::escape(url));
    ExitCode::SUCCESS
}

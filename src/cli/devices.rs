//! `mediatord devices`: list the paired devices, or revoke one.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Subcommand;
use mediatord::text;

use super::reach::{DaemonArgs, cell, daemon_call};

#[derive(Debug, clap::Args)]
pub(super) struct DevicesArgs {
    #[command(subcommand)]
    action: Option<DevicesAction>,
    #[command(flatten)]
    daemon: DaemonArgs,
}

#[derive(Debug, Subcommand)]
pub(super) enum DevicesAction {
    /// The paired devices (the default)
    List,
    /// Revoke a device: its next request is refused and its event streams end
    Revoke {
        /// The device id (`dev-…`, from `mediatord devices`)
        id: String,
    },
}

/// `mediatord devices [list|revoke ID]`.
pub(super) fn run(args: &DevicesArgs) -> ExitCode {
    match &args.action {
        Some(DevicesAction::Revoke { id }) => {
            let path = format!("/devices/{}", id.bytes().map(|b| format!("%{b:02X}")).collect::<String>());
            match daemon_call("devices", &args.daemon, "DELETE", &path, None) {
                Ok(_) => {
                    let _ = writeln!(io::stdout(), "revoked {}", text::escape(id));
                    ExitCode::SUCCESS
                }
                Err(code) => code,
            }
        }
        None | Some(DevicesAction::List) => {
            let answer = match daemon_call("devices", &args.daemon, "GET", "/devices", None) {
                Ok(answer) => answer,
                Err(code) => return code,
            };
            let mut out = io::stdout().lock();
            let _ = writeln!(out, "{:<20}  {:<8}  {:<24}  {:<24}  NAME", "ID", "ROLE", "PAIRED", "LAST SEEN");
            for d in answer["devices"].as_array().into_iter().flatten() {
                let at = |v: &serde_json::Value| {
                    v.as_u64().map_or_else(|| "-".to_owned(), mediatord::clock::iso8601)
                };
                let _ = writeln!(
                    out,
                    "{:<20}  {:<8}  {:<24}  {:<24}  {}",
                    cell(&d["deviceId"]),
                    cell(&d["role"]),
                    at(&d["createdAt"]),
                    at(&d["lastSeenAt"]),
                    cell(&d["name"]),
                );
            }
            ExitCode::SUCCESS
        }
    }
}

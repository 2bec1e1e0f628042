//! `mediatord transcript`: a recorded session as Markdown or JSON, from the state database.

use std::io::{self, Write};
use std::process::ExitCode;

use mediatord::text;

use super::database::read_database;
use super::say;

/// `mediatord transcript`'s arguments.
#[derive(Debug, clap::Args)]
pub(super) struct TranscriptArgs {
    /// The session's id
    #[arg(value_name = "SESSION")]
    session: String,
    /// `md` (Markdown) or `json` (`{session, events}`)
    #[arg(long, value_name = "FORMAT", default_value = "md", value_parser = ["md", "json"])]
    format: String,
    /// The daemon's state directory [default: $XDG_STATE_HOME/mediatord, else ~/.local/state/mediatord]
    #[arg(long, env = "MEDIATORD_STATE_DIR", hide_env_values = true, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
    /// A state database file to read instead of a state directory's: a copy `mediatord backup`
    /// wrote, or a `state.db` (a file given as --state-dir is read the same way)
    #[arg(long, value_name = "FILE", conflicts_with = "state_dir")]
    state_db: Option<std::path::PathBuf>,
}

/// Recorded items read per query while a transcript is gathered.
const TRANSCRIPT_PAGE: usize = 1000;

/// `mediatord transcript`: 0, or 2 for a session the history does not have or a database it cannot
/// read.
pub(super) fn run(args: &TranscriptArgs) -> ExitCode {
    use mediatord::store::{AuditQuery, StoredEvent};
    let db = match read_database(args.state_dir.as_deref(), args.state_db.as_deref(), "transcript") {
        Ok(db) => db,
        Err(code) => return code,
    };
    let fail = |e: String| {
        say(&format!("mediatord transcript: {}", text::escape(&e)));
        ExitCode::from(2)
    };
    let record = match db.session(&args.session) {
        Ok(Some(record)) => record,
        Ok(None) => return fail(format!("no session {:?} in the history", args.session)),
        Err(e) => return fail(e.to_string()),
    };
    // The history is bounded by retention (`--history-events` per session), so is this.
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let page = match db.events(&args.session, after, TRANSCRIPT_PAGE) {
            Ok(page) => page,
            Err(e) => return fail(e.to_string()),
        };
        let Some(last) = page.last() else { break };
        after = last.last_id();
        for item in page {
            match item {
                StoredEvent::Frame { frame, .. } => events.extend(mediatord::transcript::envelope(&frame)),
                StoredEvent::Gap { from, to } => events.push(serde_json::json!({
                    "type": "history_gap", "data": {"sessionId": args.session, "fromId": from, "toId": to},
                })),
            }
        }
    }
    let head = mediatord::transcript::Head {
        session_id: record.session_id.clone(),
        workspace: record.workspace.clone(),
        agent: record.agent.clone(),
        created_at: mediatord::clock::iso8601(record.created_at),
        ended_at: record.ended_at.map(mediatord::clock::iso8601),
        state: record.state.as_str().to_owned(),
        end_reason: record.end_reason.clone(),
    };
    let mut out = io::stdout().lock();
    let written = if args.format == "json" {
        let doc = mediatord::transcript::json(&head, events);
        writeln!(out, "{}", text::escape_json(&doc.to_string()))
    } else {
        let query =
            AuditQuery { session_id: Some(args.session.clone()), limit: 10_000, ..AuditQuery::default() };
        // Every device's name (a person's: the person's, under the client id they act as), then
        // the names the audit recorded at each decision, which win.
        let mut names: std::collections::HashMap<String, String> = db
            .device_names()
            .unwrap_or_default()
            .into_iter()
            .map(|(id, name, person)| {
                match person.and_then(|p| serde_json::from_str::<mediatord::devices::Person>(&p).ok()) {
                    Some(person) => (person.client_id().to_string(), person.name),
                    None => (id, name),
                }
            })
            .collect();
        names.extend(
            db.query_audit(&query)
                .map(|page| {
                    page.entries
                        .iter()
                        .filter_map(|e| {
                            Some((
                                e["voterClientId"].as_str()?.to_owned(),
                                e["voterDeviceName"].as_str()?.to_owned(),
                            ))
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        );
        write!(out, "{}", mediatord::transcript::markdown(&head, &events, &names))
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

//! `mediatord audit`: the permission audit trail from the state database, read-only.

use std::io::{self, Write};
use std::process::ExitCode;

use mediatord::{audit, text};

use super::database::read_database;
use super::say;

/// `mediatord audit`'s flags: the filters of `GET /audit`.
#[derive(Debug, clap::Args)]
pub(super) struct AuditArgs {
    /// The daemon's state directory [default: $XDG_STATE_HOME/mediatord, else ~/.local/state/mediatord]
    #[arg(long, env = "MEDIATORD_STATE_DIR", hide_env_values = true, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
    /// A state database file to read instead of a state directory's: a copy `mediatord backup`
    /// wrote, or a `state.db` (a file given as --state-dir is read the same way)
    #[arg(long, value_name = "FILE", conflicts_with = "state_dir")]
    state_db: Option<std::path::PathBuf>,
    /// Print the entries as JSON lines (one object per entry) instead of a table
    #[arg(long)]
    json: bool,
    /// Only this workspace
    #[arg(long, value_name = "DIR")]
    workspace: Option<String>,
    /// Only this session
    #[arg(long, value_name = "ID")]
    session_id: Option<String>,
    /// Only this outcome: pending, selected, cancelled, timed_out, abandoned
    #[arg(long, value_name = "OUTCOME")]
    outcome: Option<String>,
    /// Requested at or after: an age (30m, 1h, 2d, 1w), a UTC date or time (2026-11-22,
    /// 2026-11-22T20:39), or ms since the Unix epoch
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// Requested before: a UTC date or time, an age, or ms since the Unix epoch
    #[arg(long, value_name = "WHEN")]
    until: Option<String>,
    /// Show each device's id beside its name
    #[arg(long)]
    ids: bool,
    /// Entries to print [default: 50]
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Continue after this cursor (printed after the last entry of a page)
    #[arg(long, value_name = "CURSOR")]
    cursor: Option<String>,
}

/// `mediatord audit`: 0, or 2 for bad arguments or a state directory it cannot read.
pub(super) fn run(args: &AuditArgs) -> ExitCode {
    use mediatord::store::{AuditOutcome, AuditQuery, Cursor};
    let outcome = match args.outcome.as_deref().map(|o| (o, AuditOutcome::parse(o))) {
        None => None,
        Some((_, Some(o))) => Some(o),
        Some((o, None)) => {
            say(&format!(
                "mediatord audit: unknown --outcome {o:?} (pending, selected, cancelled, timed_out, abandoned)"
            ));
            return ExitCode::from(2);
        }
    };
    let cursor = match args.cursor.as_deref().map(|c| (c, Cursor::decode(c))) {
        None => None,
        Some((_, Some(c))) => Some(c),
        Some((c, None)) => {
            say(&format!("mediatord audit: {c:?} is not a cursor mediatord printed"));
            return ExitCode::from(2);
        }
    };
    let now = mediatord::clock::now_ms();
    let mut window = [None, None];
    for (slot, (flag, given)) in window.iter_mut().zip([("--since", &args.since), ("--until", &args.until)]) {
        match given.as_deref().map(|g| mediatord::audit::parse_since(g, now)) {
            None => {}
            Some(Ok(at)) => *slot = Some(at),
            Some(Err(e)) => {
                say(&format!("mediatord audit: {flag}: {}", text::escape(&e)));
                return ExitCode::from(2);
            }
        }
    }
    let [since, until] = window;
    let query = AuditQuery {
        workspace: args
            .workspace
            .clone()
            .map(|w| std::fs::canonicalize(&w).map_or(w, |c| c.to_string_lossy().into_owned())),
        session_id: args.session_id.clone(),
        since,
        until,
        outcome,
        cursor,
        limit: args.limit.unwrap_or(50).clamp(1, 10_000),
    };
    let db = match read_database(args.state_dir.as_deref(), args.state_db.as_deref(), "audit") {
        Ok(db) => db,
        Err(code) => return code,
    };
    let page = match db.query_audit(&query) {
        Ok(page) => page,
        Err(e) => {
            say(&format!("mediatord audit: {}", text::escape(&e.to_string())));
            return ExitCode::from(2);
        }
    };
    let mut out = io::stdout().lock();
    if args.json {
        for entry in &page.entries {
            // serde_json leaves C1 controls and bidi characters raw; the line stays the same JSON.
            let _ = writeln!(out, "{}", text::escape_json(&entry.to_string()));
        }
    } else {
        let _ = write!(out, "{}", audit::table(&page.entries, args.ids));
    }
    if let Some(next) = page.next_cursor {
        let _ = writeln!(io::stderr(), "more: mediatord audit --cursor {}", next.encode());
    }
    ExitCode::SUCCESS
}

//! `mediatord audit`: the permission audit trail from the state database, read-only; and the
//! filters it shares with `mediatord review-log`.

use std::io::{self, Write};
use std::process::ExitCode;

use mediatord::store::{AuditQuery, ReadOnly};
use mediatord::{audit, text};

use super::database::read_database;
use super::say;

/// Where the trail is read and which of its entries: the flags `mediatord audit` and `mediatord
/// review-log` share (the filters of `GET /audit`).
#[derive(Debug, clap::Args)]
pub(super) struct Trail {
    /// The daemon's state directory [default: $XDG_STATE_HOME/mediatord, else ~/.local/state/mediatord]
    #[arg(long, env = "MEDIATORD_STATE_DIR", hide_env_values = true, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
    /// A state database file to read instead of a state directory's: a copy `mediatord backup`
    /// wrote, or a `state.db` (a file given as --state-dir is read the same way)
    #[arg(long, value_name = "FILE", conflicts_with = "state_dir")]
    state_db: Option<std::path::PathBuf>,
    /// Only this workspace
    #[arg(long, value_name = "DIR")]
    workspace: Option<String>,
    /// Only this session
    #[arg(long, value_name = "ID")]
    session_id: Option<String>,
    /// Only requests that ended so: pending, selected, cancelled, timed_out, abandoned
    #[arg(long, value_name = "OUTCOME")]
    outcome: Option<String>,
    /// Requested at or after: an age (30m, 1h, 2d, 1w), a UTC date or time (2026-11-22,
    /// 2026-11-22T20:39), or ms since the Unix epoch
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// Requested before: a UTC date or time, an age, or ms since the Unix epoch
    #[arg(long, value_name = "WHEN")]
    until: Option<String>,
    /// Continue after this cursor (printed after the last row of a page)
    #[arg(long, value_name = "CURSOR")]
    cursor: Option<String>,
}

impl Trail {
    /// The query these flags ask for, `limit` entries a page; on a bad flag it has said why on
    /// stderr, as `command`'s, and the exit status is 2.
    pub(super) fn query(&self, command: &str, limit: usize) -> Result<AuditQuery, ExitCode> {
        use mediatord::store::{AuditOutcome, Cursor};
        let refuse = |why: String| {
            say(&format!("mediatord {command}: {why}"));
            ExitCode::from(2)
        };
        let outcome = match self.outcome.as_deref().map(|o| (o, AuditOutcome::parse(o))) {
            None => None,
            Some((_, Some(o))) => Some(o),
            Some((o, None)) => {
                return Err(refuse(format!(
                    "unknown --outcome {:?} (pending, selected, cancelled, timed_out, abandoned)",
                    text::escape(o)
                )));
            }
        };
        let cursor = match self.cursor.as_deref().map(|c| (c, Cursor::decode(c))) {
            None => None,
            Some((_, Some(c))) => Some(c),
            Some((c, None)) => {
                return Err(refuse(format!("{:?} is not a cursor mediatord printed", text::escape(c))));
            }
        };
        let now = mediatord::clock::now_ms();
        let mut window = [None, None];
        for (slot, (flag, given)) in
            window.iter_mut().zip([("--since", &self.since), ("--until", &self.until)])
        {
            match given.as_deref().map(|g| audit::parse_since(g, now)) {
                None => {}
                Some(Ok(at)) => *slot = Some(at),
                Some(Err(e)) => return Err(refuse(format!("{flag}: {}", text::escape(&e)))),
            }
        }
        let [since, until] = window;
        Ok(AuditQuery {
            workspace: self
                .workspace
                .clone()
                .map(|w| std::fs::canonicalize(&w).map_or(w, |c| c.to_string_lossy().into_owned())),
            session_id: self.session_id.clone(),
            since,
            until,
            outcome,
            cursor,
            limit: limit.clamp(1, MAX_PAGE),
        })
    }

    /// The state database these flags name, read-only (as [`read_database`]).
    pub(super) fn database(&self, command: &str) -> Result<ReadOnly, ExitCode> {
        read_database(self.state_dir.as_deref(), self.state_db.as_deref(), command)
    }
}

/// The most entries one page of the trail holds (`--limit`'s ceiling).
pub(super) const MAX_PAGE: usize = 10_000;

/// `mediatord audit`'s flags.
#[derive(Debug, clap::Args)]
pub(super) struct AuditArgs {
    #[command(flatten)]
    trail: Trail,
    /// Print the entries as JSON lines (one object per entry) instead of a table
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print the entries as CSV (the columns of `GET /audit?format=csv`) instead of a table
    #[arg(long)]
    csv: bool,
    /// Show each device's id beside its name
    #[arg(long)]
    ids: bool,
    /// Entries to print [default: 50]
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
}

/// `mediatord audit`: 0, or 2 for bad arguments or a state directory it cannot read.
pub(super) fn run(args: &AuditArgs) -> ExitCode {
    let query = match args.trail.query("audit", args.limit.unwrap_or(50)) {
        Ok(query) => query,
        Err(code) => return code,
    };
    let db = match args.trail.database("audit") {
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
    } else if args.csv {
        let _ = write!(out, "{}", audit::CSV_HEADER);
        for entry in &page.entries {
            let _ = write!(out, "{}", audit::csv_line(entry));
        }
    } else {
        let _ = write!(out, "{}", audit::table(&page.entries, args.ids));
    }
    if let Some(next) = page.next_cursor {
        let _ = writeln!(io::stderr(), "more: mediatord audit --cursor {}", next.encode());
    }
    ExitCode::SUCCESS
}

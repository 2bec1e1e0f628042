//! `mediatord review-log`: what each reviewer decided and why, read from the audit trail
//! (`docs/operations.md#reviewers`), read-only: one row per review, filtered by reviewer, verdict
//! and effect besides the trail's own filters.

use std::io::{self, Write};
use std::process::ExitCode;

use mediatord::audit::{self, REVIEW_EFFECTS, ReviewFilter};
use mediatord::text;
use serde_json::Value;

use super::audit::{MAX_PAGE, Trail};
use super::say;

/// The most audit entries one run reads looking for reviews: a trail of requests no reviewer saw
/// is not read to its end in one go; the run stops there and prints where to go on.
const MAX_SCANNED: usize = 100_000;

/// `mediatord review-log --help`'s closing text.
pub(super) const HELP: &str = "\
One row per review, newest first: when the reviewer answered, its verdict, what that did to the
request (decided, informed, overruled, failed), how the request ended and by whom, what was asked,
and the reviewer's reason. When more remain, stderr says the --cursor to go on with.

Examples:
  mediatord review-log --since 1d
  mediatord review-log --reviewer guard --effect overruled
  mediatord review-log --verdict deny --json
  mediatord review-log --since 2026-11-01 --csv > reviews.csv";

/// `mediatord review-log`'s flags.
#[derive(Debug, clap::Args)]
pub(super) struct ReviewLogArgs {
    /// Only this reviewer's reviews (its NAME in --reviewer NAME=…)
    #[arg(long, value_name = "NAME")]
    reviewer: Option<String>,
    /// Only this verdict: allow, deny, escalate (a failure is an escalate)
    #[arg(long, value_name = "VERDICT")]
    verdict: Option<String>,
    /// Only reviews that did this: decided (the reviewer's ballot decided), informed (shown; the
    /// people decided), overruled (a person decided against its allow or deny), failed (no verdict:
    /// timeout, crash, garbage, unavailable)
    #[arg(long, value_name = "EFFECT")]
    effect: Option<String>,
    #[command(flatten)]
    trail: Trail,
    /// Print the reviews as JSON lines (each review with the request it was of) instead of a table
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print the reviews as CSV instead of a table
    #[arg(long)]
    csv: bool,
    /// Reviews to print (a request's reviews stay together, so a page may hold a few more)
    /// [default: 50]
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
}

/// `mediatord review-log`: 0, or 2 for bad arguments or a state directory it cannot read.
pub(super) fn run(args: &ReviewLogArgs) -> ExitCode {
    let refuse = |why: String| {
        say(&format!("mediatord review-log: {why}"));
        ExitCode::from(2)
    };
    for (flag, given, known) in [
        ("--verdict", &args.verdict, &["allow", "deny", "escalate"][..]),
        ("--effect", &args.effect, &REVIEW_EFFECTS[..]),
    ] {
        if let Some(word) = given.as_deref().filter(|w| !known.contains(w)) {
            return refuse(format!("unknown {flag} {:?} ({})", text::escape(word), known.join(", ")));
        }
    }
    let filter = ReviewFilter {
        reviewer: args.reviewer.clone(),
        verdict: args.verdict.clone(),
        effect: args.effect.clone(),
    };
    let wanted = args.limit.unwrap_or(50).clamp(1, MAX_PAGE);
    let mut query = match args.trail.query("review-log", wanted) {
        Ok(query) => query,
        Err(code) => return code,
    };
    let db = match args.trail.database("review-log") {
        Ok(db) => db,
        Err(code) => return code,
    };
    // Pages of at most as many entries as reviews are still wanted (an entry holds at least one
    // kept review or none), so the run stops at a page's end, where a cursor can point.
    let mut kept: Vec<Value> = Vec::new();
    let (mut found, mut scanned) = (0usize, 0usize);
    let next = loop {
        query.limit = (wanted - found).clamp(1, MAX_PAGE);
        let page = match db.query_audit(&query) {
            Ok(page) => page,
            Err(e) => return refuse(text::escape(&e.to_string()).into_owned()),
        };
        scanned += page.entries.len();
        for entry in page.entries {
            let reviews = filter.reviews(&entry).count();
            if reviews > 0 {
                found += reviews;
                kept.push(entry);
            }
        }
        match page.next_cursor {
            Some(next) if found >= wanted || scanned >= MAX_SCANNED => break Some(next),
            Some(next) => query.cursor = Some(next),
            None => break None,
        }
    };
    let rows: Vec<(&Value, &Value)> =
        kept.iter().flat_map(|entry| filter.reviews(entry).map(move |review| (entry, review))).collect();
    let mut out = io::stdout().lock();
    if args.json {
        for (entry, review) in &rows {
            // As `mediatord audit --json`: C1 controls and bidi characters escaped, the same JSON.
            let _ = writeln!(out, "{}", text::escape_json(&audit::review_json(entry, review).to_string()));
        }
    } else if args.csv {
        let _ = write!(out, "{}", audit::REVIEW_CSV_HEADER);
        for (entry, review) in &rows {
            let _ = write!(out, "{}", audit::review_csv_line(entry, review));
        }
    } else {
        let _ = write!(out, "{}", audit::review_table(&rows));
    }
    if let Some(next) = next {
        let read = if found < wanted { format!("read {scanned} audit entries; ") } else { String::new() };
        let _ = writeln!(
            io::stderr(),
            "{read}more: mediatord review-log --cursor {} (with the same filters)",
            next.encode()
        );
    }
    ExitCode::SUCCESS
}

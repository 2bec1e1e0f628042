//! What every part of the PostgreSQL store shares: the deadlines, the fleet's lock number, the
//! database's clock, the notice channel and its codec, and how a driver's error is put in words.

use std::time::Duration;

use crate::store::fleet::Notice;

/// The channel every notice is sent on.
pub(super) const CHANNEL: &str = "mediatord";
/// How long a read, a connection, or a transaction may take before it fails: long enough for a
/// busy database, short enough that a caller waiting on an `Ack` hears of a dead one in seconds
/// (SQLite's `BUSY_TIMEOUT` is the same figure).
pub(super) const DB_TIMEOUT: Duration = Duration::from_secs(5);
/// A lock number of the fleet's own: migrations and retention run on one daemon at a time.
pub(super) const ADVISORY_LOCK: i64 = 0x6d65_6469_6174;
/// The database's clock, in milliseconds since the Unix epoch (leases are compared on it).
pub(super) const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// An error of the driver or the pool, with every cause it wraps: `db error` alone hides the
/// server's reason, which is its cause (`FATAL: password authentication failed for user …`), as
/// `invalid configuration` hides `password missing`. The driver's text carries no password: the
/// URL is parsed into a config once and never printed.
pub(super) fn pg_error(e: impl std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    // The server's DETAIL and HINT lines, on the one line of a boot refusal or a log.
    text.replace('\n', "; ")
}

/// A notice as sent on [`CHANNEL`]: its kind alone. Nothing else is sent, since anything a
/// notice carried could be forged by any role that may connect, and read by any that listens.
pub(super) fn encode_notice(notice: Notice) -> &'static str {
    match notice {
        Notice::Devices => "devices",
        Notice::Rules => "rules",
        Notice::Resync => "resync",
    }
}

/// A notice from [`CHANNEL`]; `None` for anything else (ignored: a payload another program sent
/// could only ever make the daemon read the database again).
pub(super) fn decode_notice(payload: &str) -> Option<Notice> {
    match payload {
        "devices" => Some(Notice::Devices),
        "rules" => Some(Notice::Rules),
        "resync" => Some(Notice::Resync),
        _ => None,
    }
}

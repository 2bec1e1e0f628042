//! Wall-clock time as the wire shows it: milliseconds since the UNIX epoch, and ISO-8601 text.
//!
//! A leaf: it imports nothing from the crate. Durations and deadlines use tokio's clock instead
//! (`tokio::time`), so tests can pause it; these figures are only ever shown, never waited on.

/// Milliseconds since the UNIX epoch (event timestamps, `createdAt`, `lastSeenAt`).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `ms` since the UNIX epoch as an ISO-8601 UTC timestamp with milliseconds, e.g.
/// `2026-11-22T20:39:19.849Z` (civil-from-days, after Howard Hinnant's algorithm).
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso8601_formats_utc_with_milliseconds() {
        assert_eq!(super::iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::iso8601(951_782_400_001), "2000-02-29T00:00:00.001Z");
        assert_eq!(super::iso8601(1_795_379_959_849), "2026-11-22T20:39:19.849Z");
    }
}

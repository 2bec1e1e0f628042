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

/// The zone times are said in to a person on this machine: the system's (`TZ`, else
/// `/etc/localtime`), read once; UTC when neither names one. (The daemon runs where its person
/// works, most often; the terminal client runs where its person is.)
pub fn zone() -> &'static jiff::tz::TimeZone {
    static ZONE: std::sync::OnceLock<jiff::tz::TimeZone> = std::sync::OnceLock::new();
    ZONE.get_or_init(jiff::tz::TimeZone::system)
}

/// When `at_ms` was, seen from `now_ms`, as a person says it, in `tz`: `just now`, `5 min ago`,
/// `today at 14:02`, `yesterday at 22:46`, `on Nov 28 at 22:46`, `on Nov 28 2025 at 22:46`.
pub fn ago_in(at_ms: u64, now_ms: u64, tz: &jiff::tz::TimeZone) -> String {
    let minutes = now_ms.saturating_sub(at_ms) / 60_000;
    if minutes == 0 {
        return "just now".to_owned();
    }
    if minutes < 60 {
        return format!("{minutes} min ago");
    }
    let local = |ms: u64| {
        i64::try_from(ms)
            .ok()
            .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
            .map(|t| t.to_zoned_datetime(tz.clone()))
    };
    let (Some(at), Some(now)) = (local(at_ms), local(now_ms)) else { return iso8601(at_ms) };
    let time = at.strftime("%H:%M");
    let (day, today) = (at.date(), now.date());
    if day == today {
        format!("today at {time}")
    } else if today.yesterday().ok() == Some(day) {
        format!("yesterday at {time}")
    } else if day.year() == today.year() {
        format!("on {} at {time}", at.strftime("%b %-d"))
    } else {
        format!("on {} at {time}", at.strftime("%b %-d %Y"))
    }
}

/// A UTC date or time as a person types it — `2026-11-22`, `2026-11-22T20:39`,
/// `2026-11-22T20:39:19` or `2026-11-22 20:39:19`, an optional trailing `Z` — as milliseconds since
/// the UNIX epoch (days-from-civil, the inverse of [`iso8601`]). `None` for anything else, or a
/// date out of range (month 13, day 32, a year before 1970 or after 9999).
pub fn parse_utc(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z').unwrap_or(text);
    let (date, time) = match text.split_once(['T', ' ']) {
        Some((d, t)) => (d, Some(t)),
        None => (text, None),
    };
    let number = |s: &str, len: usize| {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse::<i64>().ok()).flatten()
    };
    let mut parts = date.split('-');
    let (year, month, day) =
        (number(parts.next()?, 4)?, number(parts.next()?, 2)?, number(parts.next()?, 2)?);
    if parts.next().is_some() || !(1970..=9999).contains(&year) || !(1..=12).contains(&month) {
        return None;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=days_in_month).contains(&day) {
        return None;
    }
    let seconds = match time {
        None => 0,
        Some(t) => {
            let mut parts = t.split(':');
            let (h, m) = (number(parts.next()?, 2)?, number(parts.next()?, 2)?);
            let s = parts.next().map_or(Some(0), |s| number(s, 2))?;
            if parts.next().is_some() || h > 23 || m > 59 || s > 59 {
                return None;
            }
            h * 3600 + m * 60 + s
        }
    };
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from((days * 86_400 + seconds) * 1000).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_and_times_parse_to_the_milliseconds_iso8601_prints() {
        for ms in [0, 951_782_400_000, 1_795_379_959_000, 1_795_305_600_000, 253_402_300_799_000] {
            let printed = super::iso8601(ms);
            assert_eq!(super::parse_utc(&printed[..19]), Some(ms), "{printed}");
            assert_eq!(super::parse_utc(&format!("{}Z", &printed[..19])), Some(ms), "{printed}");
        }
        assert_eq!(super::parse_utc("2026-11-22"), Some(1_795_305_600_000));
        assert_eq!(super::parse_utc("2026-11-22 20:39"), Some(1_795_379_940_000));
        assert_eq!(super::parse_utc("2000-02-29"), Some(951_782_400_000));
        for bad in [
            "",
            "2026",
            "2026-11",
            "2026-13-01",
            "2026-00-01",
            "2026-11-31",
            "2026-02-29",
            "1900-02-29",
            "1969-12-31",
            "2026-1-22",
            "2026-11-22T24:00",
            "2026-11-22T20:60",
            "2026-11-22T20:39:60",
            "2026-11-22T20",
            "2026-11-22T20:39:19:00",
            "2026-11-22-01",
            "+026-11-22",
            "2026-11-22x",
        ] {
            assert_eq!(super::parse_utc(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_past_time_is_said_as_a_person_would() {
        let utc = jiff::tz::TimeZone::UTC;
        let now = super::parse_utc("2026-11-28T22:46:34").expect("now");
        let at = |text: &str| super::parse_utc(text).expect("at");
        let ago = |text: &str| super::ago_in(at(text), now, &utc);
        assert_eq!(ago("2026-11-28T22:46:00"), "just now");
        assert_eq!(super::ago_in(now + 5_000, now, &utc), "just now", "a clock a little ahead");
        assert_eq!(ago("2026-11-28T22:45:34"), "1 min ago");
        assert_eq!(ago("2026-11-28T21:47:00"), "59 min ago");
        assert_eq!(ago("2026-11-28T21:46:34"), "today at 21:46");
        assert_eq!(ago("2026-11-28T00:00:00"), "today at 00:00");
        assert_eq!(ago("2026-11-27T23:59:00"), "yesterday at 23:59");
        assert_eq!(ago("2026-11-26T08:05:00"), "on Nov 26 at 08:05");
        assert_eq!(ago("2026-01-01T00:00:00"), "on Jan 1 at 00:00");
        assert_eq!(ago("2025-11-28T22:46:00"), "on Nov 28 2025 at 22:46");
        // In another zone, the day is that zone's: now is 01:46 on the 29th in UTC+3, so 21:30
        // UTC (00:30 there) was today, and 20:00 UTC (23:00 there on the 28th) yesterday.
        let east = jiff::tz::TimeZone::fixed(jiff::tz::offset(3));
        assert_eq!(super::ago_in(at("2026-11-28T21:30:00"), now, &east), "today at 00:30");
        assert_eq!(super::ago_in(at("2026-11-28T20:00:00"), now, &east), "yesterday at 23:00");
    }

    #[test]
    fn iso8601_formats_utc_with_milliseconds() {
        assert_eq!(super::iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::iso8601(951_782_400_001), "2000-02-29T00:00:00.001Z");
        assert_eq!(super::iso8601(1_795_379_959_849), "2026-11-22T20:39:19.849Z");
    }
}

//! The daemon's secrets in its own environment (`MEDIATORD_TOKEN`, `QWEN_SERVER_TOKEN`,
//! `MEDIATORD_STORE`, `MEDIATORD_OIDC_CLIENT_SECRET`), erased once read: the process's initial environment stays readable in
//! `/proc/<pid>/environ` for as long as it runs (by root, whatever it does), and unsetting a
//! variable only drops it from the C library's list, not from that memory. So each secret's
//! `NAME=value` is overwritten in place, through `/proc/self/mem`, before the daemon starts any
//! thread or process; the daemon keeps only the token's digest (`config::TokenDigest`) and the
//! store's URL inside its configuration, and never passes either to an agent (`agent::process`).
//!
//! A leaf: it imports nothing from the crate.

use std::io::{Seek, SeekFrom, Write};

/// The variables erased: the operator token (and its qwen-compatible fallback) and the store's
/// URL, which may hold a database password. `PGPASSWORD` is the PostgreSQL driver's own, read
/// again whenever the store reconnects: it stays, and is kept from agents like the others.
pub const ERASED: &[&str] =
    &["MEDIATORD_TOKEN", "QWEN_SERVER_TOKEN", "MEDIATORD_STORE", "MEDIATORD_OIDC_CLIENT_SECRET"];

/// Overwrites every `NAME=value` of [`ERASED`] and of `also` (secrets the configuration read from
/// the environment: a model reviewer's `keyEnv`) in this process's initial environment with zero
/// bytes; how many it erased. A zeroed entry is an empty string the C library's and Rust's readers
/// skip, so no process the daemon starts inherits it. Call it before any other thread exists
/// (nothing may read the environment while it changes).
pub fn erase_secrets(also: &[&str]) -> std::io::Result<usize> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let (start, end) = env_bounds(&stat)
        .ok_or_else(|| std::io::Error::other("/proc/self/stat has no environment bounds"))?;
    let environ = std::fs::read("/proc/self/environ")?;
    if environ.len() as u64 > end.saturating_sub(start) {
        return Err(std::io::Error::other("/proc/self/environ is larger than its bounds"));
    }
    let secrets = secrets_in(&environ, also);
    let mut mem = std::fs::OpenOptions::new().write(true).open("/proc/self/mem")?;
    for &(at, len) in &secrets {
        mem.seek(SeekFrom::Start(start + at as u64))?;
        mem.write_all(&vec![0u8; len])?;
    }
    Ok(secrets.len())
}

/// Where the initial environment lies (`env_start`, `env_end`) in a `/proc/<pid>/stat` line. The
/// fields after the command name (in parentheses, which may hold anything) start at the third:
/// `env_start`, the 50th, is the 47th from zero there.
fn env_bounds(stat: &str) -> Option<(u64, u64)> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace().skip(47);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// The `NAME=value` entries of [`ERASED`] and of `also` in an environment block (`NAME=value`
/// entries ended by NUL bytes): each one's offset and length.
fn secrets_in(environ: &[u8], also: &[&str]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for entry in environ.split(|b| *b == 0) {
        let secret = ERASED.iter().chain(also).any(|name| {
            entry.len() > name.len() && entry.starts_with(name.as_bytes()) && entry[name.len()] == b'='
        });
        if secret {
            out.push((at, entry.len()));
        }
        at += entry.len() + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secrets_are_found_where_they_are_and_nothing_else() {
        let block = b"HOME=/h\0MEDIATORD_TOKEN=t0k\0MEDIATORD_TOKENX=no\0MEDIATORD_STORE=postgres://u:p@h/d\0XMEDIATORD_TOKEN=no\0QWEN_SERVER_TOKEN=\0QWEN_SERVER_TOKEN=q\0";
        assert_eq!(secrets_in(block, &[]), vec![(8, 19), (48, 34), (103, 18), (122, 19)]);
        let at = |(offset, len): (usize, usize)| {
            String::from_utf8_lossy(&block[offset..offset + len]).into_owned()
        };
        let found: Vec<String> = secrets_in(block, &[]).into_iter().map(at).collect();
        assert_eq!(
            found,
            [
                "MEDIATORD_TOKEN=t0k",
                "MEDIATORD_STORE=postgres://u:p@h/d",
                "QWEN_SERVER_TOKEN=",
                "QWEN_SERVER_TOKEN=q"
            ]
        );
        assert_eq!(secrets_in(b"", &[]), Vec::<(usize, usize)>::new());
        // A model reviewer's keyEnv is erased with them, by its whole name only.
        let block = b"HOME=/h\0REVIEW_KEY=k1\0REVIEW_KEYS=no\0MEDIATORD_TOKEN=t\0";
        let found: Vec<&[u8]> =
            secrets_in(block, &["REVIEW_KEY"]).into_iter().map(|(at, len)| &block[at..at + len]).collect();
        assert_eq!(found, [&b"REVIEW_KEY=k1"[..], &b"MEDIATORD_TOKEN=t"[..]]);
    }

    #[test]
    fn the_environments_bounds_are_read_past_any_command_name() {
        let fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        let stat = format!("1234 (a) b ) c) {}", fields.join(" "));
        assert_eq!(env_bounds(&stat), Some((50, 51)));
        assert_eq!(env_bounds("1234 (short) 3 4"), None);
        assert_eq!(env_bounds("no parenthesis"), None);
        let own = std::fs::read_to_string("/proc/self/stat").expect("stat");
        let (start, end) = env_bounds(&own).expect("bounds");
        assert!(start < end, "{start}..{end}");
    }
}

//! The daemon's secrets in its own environment (`MEDIATORD_TOKEN`, `QWEN_SERVER_TOKEN`,
//! `MEDIATORD_STORE`), erased once read: the process's initial environment stays readable in
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
pub const ERASED: &[&str] = &["MEDIATORD_TOKEN", "QWEN_SERVER_TOKEN", "MEDIATORD_STORE"];

/// Overwrites every `NAME=value` of [`ERASED`] in this process's initial environment with zero
/// bytes; how many it erased. Call it before any other thread exists (nothing may read the
/// environment while it changes).
pub fn erase_secrets() -> std::io::Result<usize> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command name (in parentheses, which may hold anything): the third field
    // is the first here, so env_start (the 50th) is the 47th from zero.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_ascii_whitespace().collect()).unwrap_or_default();
    let number = |i: usize| -> std::io::Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| std::io::Error::other("/proc/self/stat has no environment bounds"))
    };
    let (start, end) = (number(47)?, number(48)?);
    let environ = std::fs::read("/proc/self/environ")?;
    if environ.len() as u64 > end.saturating_sub(start) {
        return Err(std::io::Error::other("/proc/self/environ is larger than its bounds"));
    }
    let mut mem = std::fs::OpenOptions::new().write(true).open("/proc/self/mem")?;
    let mut erased = 0;
    let mut at = 0usize;
    for entry in environ.split(|b| *b == 0) {
        let secret = ERASED.iter().any(|name| {
            entry.len() > name.len() && entry.starts_with(name.as_bytes()) && entry[name.len()] == b'='
        });
        if secret {
            mem.seek(SeekFrom::Start(start + at as u64))?;
            mem.write_all(&vec![0u8; entry.len()])?;
            erased += 1;
        }
        at += entry.len() + 1;
    }
    Ok(erased)
}

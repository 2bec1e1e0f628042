//! Scenario (m): the snapshot engine (`mediatord::changes`) on a workspace of `files` files and
//! `bytes` bytes in all (10 000 files, 200 MiB by default), in a throw-away directory:
//!
//! - the first snapshot of it (every file read, hashed, compressed and kept: a cold store);
//! - an unchanged snapshot (the stat cache: nothing read), repeated;
//! - a snapshot after `changed` files were rewritten (10 by default), repeated on other files;
//! - the first snapshot after a restart (the stat cache read back from disk).
//!
//! `mediatord-bench snapshots [--files N] [--bytes N] [--changed N] [--runs N]`. Times are wall
//! clock on this machine, with whatever else runs on it; the medians are the figures.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mediatord::changes::{Changes, LIMITS};

use crate::{Error, Res};

/// How long after the last write before the unchanged snapshots are timed: the engine does not
/// trust what was modified within its racy margin of the walk that recorded it.
const SETTLE: Duration = Duration::from_millis(1_200);

/// The figures, in milliseconds.
#[derive(Debug, Clone, Default)]
pub struct SnapshotReport {
    pub files: usize,
    pub bytes: u64,
    pub changed: usize,
    pub first_ms: f64,
    pub unchanged_ms: Vec<f64>,
    pub changed_ms: Vec<f64>,
    pub after_restart_ms: f64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A file's content: varied text (it compresses like source code does, not like zeros).
fn content(i: usize, len: usize) -> Vec<u8> {
    let line =
        format!("fn item_{i}(x: u64) -> u64 {{ x.wrapping_mul({}) ^ 0x{:x} }}\n", i * 7 + 3, i * 2654435761);
    line.as_bytes().iter().copied().cycle().take(len).collect()
}

fn fill(ws: &Path, files: usize, bytes: u64) -> Res<()> {
    let per_file = (bytes / files.max(1) as u64) as usize;
    for i in 0..files {
        // 100 files per folder, folders two levels deep, like a source tree.
        let dir = ws.join(format!("d{:02}/s{:02}", i / 1000, (i / 100) % 10));
        fs::create_dir_all(&dir)?;
        fs::write(dir.join(format!("f{i:05}.rs")), content(i, per_file))?;
    }
    Ok(())
}

fn path_of(ws: &Path, i: usize) -> PathBuf {
    ws.join(format!("d{:02}/s{:02}/f{i:05}.rs", i / 1000, (i / 100) % 10))
}

pub fn run(files: usize, bytes: u64, changed: usize, runs: usize) -> Res<SnapshotReport> {
    let root = std::env::temp_dir().join(format!("mediatord-bench-snapshots-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    let (ws, state) = (root.join("ws"), root.join("state"));
    fs::create_dir_all(&ws)?;
    let result = (|| -> Res<SnapshotReport> {
        fill(&ws, files, bytes)?;
        let ws = fs::canonicalize(&ws)?;
        let mut report = SnapshotReport { files, bytes, changed, ..SnapshotReport::default() };
        let changes = Changes::open(Some(&state), LIMITS)?;
        let t = Instant::now();
        let first = changes.snapshot(&ws)?;
        report.first_ms = ms(t.elapsed());
        if first.stats.files != files {
            return Err(Error::from(format!("the snapshot holds {} files, not {files}", first.stats.files)));
        }
        std::thread::sleep(SETTLE);
        changes.snapshot(&ws)?; // reads again what was too recent to trust at the first one
        for _ in 0..runs.max(1) * 10 {
            let t = Instant::now();
            let s = changes.snapshot(&ws)?;
            report.unchanged_ms.push(ms(t.elapsed()));
            if s.stats.hashed != 0 {
                return Err(Error::from(format!("an unchanged snapshot read {} files", s.stats.hashed)));
            }
        }
        for round in 0..runs.max(1) * 5 {
            for k in 0..changed {
                let i = (round * changed + k) * 97 % files;
                fs::write(path_of(&ws, i), content(i + round + 1, (bytes / files as u64) as usize))?;
            }
            let t = Instant::now();
            let s = changes.snapshot(&ws)?;
            report.changed_ms.push(ms(t.elapsed()));
            if s.stats.hashed < changed {
                return Err(Error::from(format!("{} files changed, {} read", changed, s.stats.hashed)));
            }
            std::thread::sleep(SETTLE);
            changes.snapshot(&ws)?;
        }
        drop(changes);
        let reopened = Changes::open(Some(&state), LIMITS)?;
        let t = Instant::now();
        reopened.snapshot(&ws)?;
        report.after_restart_ms = ms(t.elapsed());
        Ok(report)
    })();
    let _ = fs::remove_dir_all(&root);
    result
}

/// The `p`th percentile of `values` (nearest rank); 0 for none.
fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied().unwrap_or(0.0)
}

impl SnapshotReport {
    pub fn markdown(&self) -> String {
        let med = |v: &[f64]| percentile(v, 50.0);
        let p90 = |v: &[f64]| percentile(v, 90.0);
        let mib = self.bytes as f64 / (1024.0 * 1024.0);
        format!(
            "| snapshot of {files} files / {mib:.0} MiB | median (ms) | p90 (ms) | runs | target |\n\
             |---|--:|--:|--:|---|\n\
             | first snapshot (cold store: every file read, hashed, kept) | {first:.1} | – | 1 | |\n\
             | unchanged (stat cache only) | {u50:.2} | {u90:.2} | {un} | ≤ 20 ms |\n\
             | {changed} files changed | {c50:.2} | {c90:.2} | {cn} | ≤ 50 ms |\n\
             | first after a restart (stat cache from disk) | {restart:.2} | – | 1 | |\n",
            files = self.files,
            first = self.first_ms,
            u50 = med(&self.unchanged_ms),
            u90 = p90(&self.unchanged_ms),
            un = self.unchanged_ms.len(),
            changed = self.changed,
            c50 = med(&self.changed_ms),
            c90 = p90(&self.changed_ms),
            cn = self.changed_ms.len(),
            restart = self.after_restart_ms,
        )
    }
}

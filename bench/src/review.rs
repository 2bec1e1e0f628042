//! Scenario (o): the permission round trip with a reviewer (`docs/operations.md#reviewers`) beside
//! none, each on a daemon of its own, run by run interleaved:
//!
//! - none: K requests in sequence, each voted on sight (the `permissions` figure);
//! - a `command` reviewer that allows everything, not trusted with the kind (it informs): the
//!   vote decides, while the daemon writes each request to the reviewer and reads its verdict;
//! - the same reviewer trusted with the kind (`other`, the demo's `permissions K`): it decides
//!   each request alone; nobody votes.
//!
//! `mediatord-bench review --mediatord BIN [--runs N]`. The reviewer is a Python script (python3),
//! started once by the daemon, answering each request line with `allow`.

use std::fmt::Write as _;

use crate::api::Api;
use crate::procs::{Daemon, Kind, Tools};
use crate::scenarios::{self, PermissionRun};
use crate::stats::median;
use crate::{Plan, Res};

/// The reviewer: one verdict line per request line.
const ALLOW_ALL: &str = "import json, sys\nfor line in sys.stdin:\n    \
                         print(json.dumps({\"id\": json.loads(line)[\"id\"], \"verdict\": \"allow\", \
                         \"reason\": \"bench\"}), flush=True)\n";

/// One configuration's runs.
#[derive(Debug, Clone, Default)]
pub struct Config {
    pub name: &'static str,
    pub runs: Vec<PermissionRun>,
}

#[derive(Debug, Clone, Default)]
pub struct ReviewReport {
    pub requests: usize,
    pub configs: Vec<Config>,
    pub failures: Vec<String>,
}

pub async fn run(tools: &Tools, plan: &Plan) -> Res<ReviewReport> {
    let dir = tempfile_dir()?;
    let script = dir.join("allow.py");
    std::fs::write(&script, ALLOW_ALL)?;
    let reviewer = format!("allow=command:python3 {}", script.display());
    let none = Daemon::start(Kind::Mediatord, tools, &[]).await?;
    let informs = Daemon::start(Kind::Mediatord, tools, &["--reviewer", &reviewer]).await?;
    let decides = Daemon::start(
        Kind::Mediatord,
        tools,
        &["--reviewer", &reviewer, "--reviewer-trust", "allow=other:decide"],
    )
    .await?;
    let daemons =
        [("none", &none, true), ("reviewer informs", &informs, true), ("reviewer decides", &decides, false)];
    let mut configs: Vec<Config> =
        daemons.iter().map(|(name, _, _)| Config { name, runs: Vec::new() }).collect();
    let mut failures = Vec::new();
    for run in 0..plan.runs {
        for ((name, d, vote), config) in daemons.iter().zip(&mut configs) {
            eprintln!("bench: review: {name} (run {})", run + 1);
            let api = Api::new(&d.base)?;
            let k = plan.permissions;
            let result = if *vote {
                scenarios::permissions(&api, d, k, plan.run_timeout).await
            } else {
                scenarios::permissions_unvoted(&api, d, k, plan.run_timeout).await
            };
            match result {
                Ok(r) => config.runs.push(r),
                Err(e) => failures.push(format!("{name}: {e}")),
            }
        }
    }
    for d in [none, informs, decides] {
        d.stop().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ReviewReport { requests: plan.permissions, configs, failures })
}

/// A directory of this run's own for the reviewer script.
fn tempfile_dir() -> Res<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("mediatord-bench-review-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

impl ReviewReport {
    /// The table of docs/benchmarks.md's reviewer section: medians of the runs, and what each
    /// configuration adds to the round trip without a reviewer.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "Permission round trip, {} requests in sequence, medians of {} runs (ms)\n\n\
             | configuration | per request | interval p50 | interval p99 | p50 added to none |\n|---|---|---|---|---|\n",
            self.requests,
            self.configs.first().map_or(0, |c| c.runs.len()),
        );
        let p50 = |c: &Config| median(&c.runs.iter().map(|r| r.interval_p50_ms).collect::<Vec<_>>());
        let base = self.configs.first().and_then(p50);
        for c in &self.configs {
            let per = median(&c.runs.iter().map(|r| r.per_request_ms).collect::<Vec<_>>());
            let p99 = median(&c.runs.iter().map(|r| r.interval_p99_ms).collect::<Vec<_>>());
            let fmt = |v: Option<f64>| v.map_or("—".to_owned(), |v| format!("{v:.3}"));
            let added = match (p50(c), base) {
                (Some(a), Some(b)) => format!("{:+.3}", a - b),
                _ => "—".to_owned(),
            };
            let _ = writeln!(out, "| {} | {} | {} | {} | {added} |", c.name, fmt(per), fmt(p50(c)), fmt(p99));
        }
        for f in &self.failures {
            let _ = writeln!(out, "\nfailed: {f}");
        }
        out
    }
}

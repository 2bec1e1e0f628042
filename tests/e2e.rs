//! The real-world end-to-end suite (tests/e2e): three independently written real ACP agents — Qwen
//! Code (`qwen --acp`), Claude Code (`claude-code-acp`) and Gemini CLI (`gemini --acp`), all offline on
//! the project's fake model server (`fake-model/`, started here in-process on loopback), one at a time
//! and then all three behind one daemon — and the official `@qwen-code/sdk` DaemonClient, driven
//! against this build of mediatord. Then, on the SDKs `run.sh` installed, `/acp` over Streamable
//! HTTP through a fleet: two daemons on a throwaway PostgreSQL (`tests/it/support/postgres.rs`),
//! the official ACP SDK's client talking to one about the other's session (`fleet-acp.mjs`).
//!
//! Needs Node.js 20+ and npm, and the npm registry the first time: `tests/e2e/run.sh` installs the
//! pinned npm packages itself and fails loudly — never skips — when they cannot be had. A failure's
//! first line says what was missing.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mediatord_fake_model::FakeModel;

/// The throwaway PostgreSQL of `tests/it` (its helpers are shared, not copied), for the fleet
/// scenario below.
#[path = "it/support/postgres.rs"]
#[allow(dead_code)]
mod postgres;

/// Bounded waits of the shared PostgreSQL helper.
const WAIT: Duration = Duration::from_secs(45);

/// Journal lines of the fake model shown when the suite fails.
const JOURNAL_TAIL: usize = 60;

#[test]
fn real_agents_and_official_sdk_client_end_to_end() {
    let fake = FakeModel::start().expect("start the fake model server on 127.0.0.1");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/run.sh");
    let output = match Command::new("bash")
        .arg(script)
        .env("E2E_DAEMON", env!("CARGO_BIN_EXE_mediatord"))
        .env("E2E_FAKE_MODEL_URL", fake.url())
        .output()
    {
        Ok(output) => output,
        Err(e) => panic!("the e2e suite needs bash to run tests/e2e/run.sh: {e}"),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary: Vec<&str> = stdout.lines().filter(|l| l.starts_with("# ")).collect();
    eprintln!("{}", summary.join("\n"));
    if output.status.success() && stdout.contains("# fail 0") {
        // `run.sh` installed the pinned SDK: the fleet's scenario runs on it.
        acp_sdk_over_streamable_http_through_a_fleet();
        return;
    }
    // The first line of the failure says why: run.sh's own `e2e: ERROR:` line (a missing tool, an
    // unreachable registry), else the phases that failed.
    let reason =
        stderr.lines().find_map(|l| l.strip_prefix("e2e: ERROR: ")).map(str::to_owned).unwrap_or_else(|| {
            let failed: Vec<&str> = stderr.lines().filter(|l| l.contains(" FAIL")).map(str::trim).collect();
            if failed.is_empty() {
                format!("end-to-end run ended ({}) without a passing node --test summary", output.status)
            } else {
                format!("end-to-end tests failed ({}): {}", output.status, failed.join("; "))
            }
        });
    let journal = fake.journal();
    let journal = &journal[journal.len().saturating_sub(JOURNAL_TAIL)..];
    panic!(
        "{reason}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}\n--- fake model journal (last {}) ---\n{}",
        journal.len(),
        journal.join("\n")
    );
}

/// A fleet daemon under test, killed on drop (its agents die with it, through their guard).
struct FleetDaemon {
    child: Child,
    base: String,
    _home: tempfile::TempDir,
}

impl FleetDaemon {
    /// `mediatord serve` on port 0, in `workspace`, on the store `url`, with the demo agent and a
    /// private `HOME`.
    fn start(workspace: &Path, url: &str) -> FleetDaemon {
        let home = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_mediatord"))
            .args(["serve", "--port", "0", "--agent", "demo", "--node-lease-ms", "1000", "--store", url])
            .arg("--workspace")
            .arg(workspace)
            .current_dir(workspace)
            .env("HOME", home.path())
            .env("XDG_STATE_HOME", home.path())
            .env_remove("MEDIATORD_TOKEN")
            .env_remove("MEDIATORD_STATE_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mediatord");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("the startup line");
        let base = line
            .trim()
            .strip_prefix("mediatord listening on ")
            .unwrap_or_else(|| panic!("unexpected startup line {line:?}"))
            .replace("0.0.0.0", "127.0.0.1");
        FleetDaemon { child, base, _home: home }
    }
}

impl Drop for FleetDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tests/e2e/fleet-acp.mjs`: the official ACP SDK's Streamable HTTP client, talking only to
/// daemon B about a session daemon A holds (two daemons on one throwaway PostgreSQL).
fn acp_sdk_over_streamable_http_through_a_fleet() {
    let pg = postgres::Postgres::start();
    let url = pg.database("fleet_acp");
    let dir = tempfile::tempdir().expect("tempdir");
    let workspace = std::fs::canonicalize(dir.path()).expect("canonical");
    let a = FleetDaemon::start(&workspace, &url);
    let b = FleetDaemon::start(&workspace, &url);
    let here = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e");
    let output = Command::new("node")
        .args(["--test", "fleet-acp.mjs"])
        .current_dir(here)
        .env("E2E_FLEET_A", &a.base)
        .env("E2E_FLEET_B", &b.base)
        .env("E2E_FLEET_WORKSPACE", &workspace)
        .output()
        .expect("the fleet scenario needs node (run.sh checked it is there)");
    assert!(
        output.status.success(),
        "the ACP SDK through a fleet failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

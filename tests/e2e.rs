//! The real-world end-to-end suite (tests/e2e): three independently written real ACP agents — Qwen
//! Code (`qwen --acp`), Claude Code (`claude-code-acp`) and Gemini CLI (`gemini --acp`), all offline on
//! the project's fake model server (`fake-model/`, started here in-process on loopback), one at a time
//! and then all three behind one daemon — and the official `@qwen-code/sdk` DaemonClient, driven
//! against this build of mediatord.
//!
//! Needs Node.js 20+ and npm, and the npm registry the first time: `tests/e2e/run.sh` installs the
//! pinned npm packages itself and fails loudly — never skips — when they cannot be had. A failure's
//! first line says what was missing.

use std::process::Command;

use mediatord_fake_model::FakeModel;

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

//! The real-world end-to-end suite (tests/e2e): two independently written real ACP agents — Qwen
//! Code (`qwen --acp`) and Claude Code (`claude-code-acp`), both offline on
//! ../shared/tools/fake_llm.py — and the official `@qwen-code/sdk` DaemonClient, driven against this
//! build of mediatord. `tests/e2e/run.sh` installs the pinned npm packages itself and fails loudly —
//! never skips — when they cannot be had.

use std::process::Command;

#[test]
fn real_agents_and_official_sdk_client_end_to_end() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/run.sh");
    let output = Command::new("bash")
        .arg(script)
        .env("E2E_DAEMON", env!("CARGO_BIN_EXE_mediatord"))
        .output()
        .expect("run tests/e2e/run.sh (needs bash, node, npm, python3)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary: Vec<&str> = stdout.lines().filter(|l| l.starts_with("# ")).collect();
    eprintln!("{}", summary.join("\n"));
    assert!(
        output.status.success(),
        "end-to-end suite failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        output.status
    );
    assert!(stdout.contains("# fail 0"), "no passing summary from node --test:\n{stdout}");
}

//! A bounded schemathesis run (PyPI, pinned) against the real binary, driven by docs/openapi.json:
//! no 5xx other than the documented agent errors, no crash, no hang.
//!
//! Allowed 5xx (tests/fuzz/mediatord_hooks.py): 502 `agent_error`/`agent_start_failed`, 503
//! `agent_exited`/`daemon_draining`/`session_limit_exceeded`/`prompt_queue_full`/
//! `body_budget_exceeded`, 504 `init_timeout`. The venv is made once under `target/` (a stamp file names the version): needs
//! `python3` with its `venv` module, and PyPI the first time. When either is missing the test fails
//! loudly, and the first line of the failure says which.

// The shared support of `tests/it`; this crate uses a few of its helpers, hence the allow.
#[path = "it/support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

const SCHEMATHESIS: &str = "4.32.5";
/// Test cases per operation and phase.
const MAX_EXAMPLES: &str = "10";
/// Per request.
const REQUEST_TIMEOUT_SECS: &str = "10";
/// The whole run; past it the run counts as a hang.
const WALL_CLOCK: Duration = Duration::from_secs(180);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `target/fuzz-venv` with the pinned schemathesis, installed on first use.
fn schemathesis() -> PathBuf {
    let venv = root().join("target").join("fuzz-venv");
    let st = venv.join("bin").join("st");
    let stamp = venv.join(format!(".schemathesis-{SCHEMATHESIS}"));
    if stamp.exists() && st.exists() {
        return st;
    }
    // `missing` is the failure's first line: what the machine lacks when this step fails.
    let run = |cmd: &mut Command, missing: &str| {
        let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{missing}\n({e})"));
        assert!(
            out.status.success(),
            "{missing}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "the fuzz test needs python3 with its venv module (Debian: python3-venv); `python3 -m venv` failed",
    );
    run(
        Command::new(venv.join("bin").join("pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &format!("schemathesis=={SCHEMATHESIS}"),
        ]),
        &format!(
            "the fuzz test needs PyPI: `pip install schemathesis=={SCHEMATHESIS}` failed (is PyPI reachable?)"
        ),
    );
    std::fs::write(&stamp, "").expect("stamp");
    st
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(80)..].join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_no_server_error_crash_or_hang() {
    let st = schemathesis();
    let d = Daemon::start(&[]);
    let out_dir = tempfile::tempdir().expect("tempdir");
    let log = out_dir.path().join("schemathesis.log");
    let mut child = Command::new(&st)
        .arg("run")
        .arg(root().join("docs").join("openapi.json"))
        .args(["--url", &d.base])
        .args(["--checks", "no_undocumented_server_error"])
        .args(["--max-examples", MAX_EXAMPLES])
        .args(["--request-timeout", REQUEST_TIMEOUT_SECS])
        .args(["--seed", "1", "--generation-database", "none", "--workers", "1", "--no-color"])
        .env("PYTHONPATH", root().join("tests").join("fuzz"))
        .env("SCHEMATHESIS_HOOKS", "mediatord_hooks")
        .env("NO_PROXY", "127.0.0.1")
        .current_dir(out_dir.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn schemathesis");
    let deadline = Instant::now() + WALL_CLOCK;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("schemathesis ran past {WALL_CLOCK:?} (a hang?):\n{}", tail(&log));
        }
        tokio::time::sleep(Duration::from_millis(100)).await; // polling a child's exit
    };
    assert!(status.success(), "schemathesis found failures:\n{}\ndaemon stderr:\n{}", tail(&log), d.stderr());
    // No crash: the daemon still answers.
    assert!(alive(d.pid()), "the daemon died during the run:\n{}", d.stderr());
    let res = http().get(d.url("/health")).send().await.expect("health after the run");
    assert_eq!(res.status(), 200);
}

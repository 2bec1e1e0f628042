//! The real-world end-to-end suite (tests/e2e): three independently written real ACP agents — Qwen
//! Code (`qwen --acp`), Claude Code (`claude-code-acp`) and Gemini CLI (`gemini --acp`), all offline on
//! the project's fake model server (`fake-model/`, started here in-process on loopback), one at a time
//! and then all three behind one daemon — and the official `@qwen-code/sdk` DaemonClient, driven
//! against this build of mediatord. Then, on the SDKs `run.sh` installed, `/acp` over Streamable
//! HTTP through a fleet: two daemons on a throwaway PostgreSQL (`tests/it/support/postgres.rs`),
//! the official ACP SDK's client talking to one about the other's session (`fleet-acp.mjs`); and
//! docs/clients.md's `/acp` WebSocket snippet, run as written on plain `node`.
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
        // `run.sh` installed the pinned SDKs: the fleet's scenario and the documented snippet run on them.
        acp_sdk_over_streamable_http_through_a_fleet();
        the_acp_websocket_snippet_of_clients_md_runs_as_written_on_plain_node();
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

/// A daemon under test, killed on drop (its agents die with it, through their guard).
struct Served {
    child: Child,
    base: String,
    _home: tempfile::TempDir,
}

impl Served {
    /// A fleet daemon: [`Served::start`] on the store `url`.
    fn fleet(workspace: &Path, url: &str) -> Served {
        Served::start(workspace, &["--node-lease-ms", "1000", "--store", url])
    }

    /// `mediatord serve` on port 0, in `workspace`, with the demo agent, `args` and a private `HOME`.
    fn start(workspace: &Path, args: &[&str]) -> Served {
        let home = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_mediatord"))
            .args(["serve", "--port", "0", "--agent", "demo"])
            .args(args)
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
        Served { child, base, _home: home }
    }
}

impl Drop for Served {
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
    let a = Served::fleet(&workspace, &url);
    let b = Served::fleet(&workspace, &url);
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

/// Issue #44: the `/acp` WebSocket snippet of docs/clients.md failed on Node 20 (no global
/// WebSocket) and would send no token on Node 22 (Node's own WebSocket takes no headers). Run as
/// written — the daemon's address, the workspace and `TOKEN` put in, nothing else — by plain
/// `node` (without `--experimental-websocket`) against a daemon that requires the token: the
/// prompt's turn ends, and the daemon saw the token.
fn the_acp_websocket_snippet_of_clients_md_runs_as_written_on_plain_node() {
    const TOKEN: &str = "snippet-token";
    let doc = include_str!("../docs/clients.md");
    let marker = "<!-- recipe: acp-ws.mjs";
    let after = &doc[doc.find(marker).expect("the snippet's marker in docs/clients.md")..];
    let body = &after[after.find("```js\n").expect("its fence") + "```js\n".len()..];
    let snippet = &body[..body.find("\n```").expect("its closing fence")];
    assert!(snippet.contains("ws://127.0.0.1:7776/acp") && snippet.contains("'/srv/project'"), "{snippet}");

    let dir = tempfile::tempdir().expect("tempdir");
    let workspace = std::fs::canonicalize(dir.path()).expect("canonical");
    let daemon = Served::start(&workspace, &["--token", TOKEN]);
    let ws = daemon.base.replacen("http://", "ws://", 1);
    let script = snippet
        .replace("ws://127.0.0.1:7776", &ws)
        .replace("'/srv/project'", &format!("{:?}", workspace.to_str().expect("utf-8")));
    // Beside tests/e2e/node_modules, where `node` resolves the packages run.sh installed.
    let here = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e");
    let file =
        tempfile::Builder::new().prefix(".snippet-").suffix(".mjs").tempfile_in(here).expect("temp file");
    std::fs::write(file.path(), script).expect("write the snippet");
    let run = |token: &str| {
        Command::new("node")
            .arg(file.path())
            .current_dir(here)
            .env("TOKEN", token)
            .env_remove("NODE_OPTIONS")
            .output()
            .expect("node (run.sh checked it is there)")
    };
    let output = run(TOKEN);
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the snippet failed on {}:\n{stdout}\n{stderr}", node_version());
    assert_eq!(stdout.lines().last(), Some("end_turn"), "{stdout}\n{stderr}");
    assert!(stdout.contains("agent_message_chunk"), "the session's updates were printed: {stdout}");
    // The token is what let it in: another one is refused.
    let refused = run("not-the-token");
    assert!(!refused.status.success(), "{}", String::from_utf8_lossy(&refused.stdout));
}

/// `node --version`, for a failure's message.
fn node_version() -> String {
    Command::new("node")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|e| format!("node (no version: {e})"))
}

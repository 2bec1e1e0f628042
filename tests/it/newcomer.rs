//! The first ten minutes (`docs/protocol.md#1-command-line`): relative paths, the messages a
//! newcomer meets when something is set up wrong (each naming the option that fixes it), the deep
//! health check of the agent program, `serve --help`, shell completions and man pages.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::*;

/// A fresh directory, canonical (what the daemon reports), kept alive by the returned guard.
fn dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = std::fs::canonicalize(dir.path()).expect("canonical");
    (dir, path)
}

/// Writes an executable `agent.sh` into `dir` that runs the demo agent, and returns its path.
fn demo_agent_script(dir: &Path) -> PathBuf {
    let path = dir.join("agent.sh");
    std::fs::write(&path, format!("#!/bin/sh\nexec '{}' demo-agent \"$@\"\n", bin()))
        .expect("write agent.sh");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// The text of an error body.
fn error_text(body: &Value) -> &str {
    body["error"].as_str().unwrap_or_else(|| panic!("no error text in {body}"))
}

/// `mediatord <args>` run to completion: exit code, stdout, stderr.
fn run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(bin());
    cmd.args(args).stdin(Stdio::null()).env("XDG_CONFIG_HOME", no_saved_logins());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run mediatord");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// ---------------------------------------------------------------------------------------------
// Relative paths

#[tokio::test]
async fn workspace_dot_is_the_current_directory() {
    let (_guard, cwd) = dir();
    let d = Daemon::start_in(&cwd, &["--agent", "demo", "--workspace", "."], &[]);
    let caps = d.get("/capabilities").await.ok();
    assert_eq!(caps["workspaceCwd"], cwd.to_string_lossy().as_ref());
    let created = d.create(Some("alice"), json!({})).await;
    assert_eq!(created["workspaceCwd"], cwd.to_string_lossy().as_ref());
}

#[tokio::test]
async fn a_relative_agent_path_is_taken_from_the_current_directory() {
    // The agent runs in its workspace: `./agent.sh` must still mean the one beside the daemon.
    let (_g1, cwd) = dir();
    let (_g2, workspace) = dir();
    let script = demo_agent_script(&cwd);
    let ws = workspace.to_str().expect("utf-8");
    let d = Daemon::start_in(&cwd, &["--agent", "./agent.sh", "--workspace", ws], &[]);
    let created = d.create(Some("alice"), json!({})).await;
    assert_eq!(created["workspaceCwd"], ws);
    let health = d.get("/health?deep=1").await.ok();
    assert_eq!(health["agent"], json!({"program": script.to_string_lossy(), "found": true}));
}

#[tokio::test]
async fn relative_paths_in_the_config_file_are_taken_from_its_directory() {
    let (_g1, config_dir) = dir();
    let (_g2, cwd) = dir();
    std::fs::create_dir(config_dir.join("ws")).expect("mkdir ws");
    let script = demo_agent_script(&config_dir);
    let config = config_dir.join("mediatord.json");
    std::fs::write(&config, json!({"serve": {"workspace": "ws", "agent": "./agent.sh"}}).to_string())
        .expect("write config");
    let d = Daemon::start_in(&cwd, &["--config", config.to_str().expect("utf-8")], &[]);
    let workspace = config_dir.join("ws");
    assert_eq!(d.get("/capabilities").await.ok()["workspaceCwd"], workspace.to_string_lossy().as_ref());
    let created = d.create(Some("alice"), json!({})).await;
    assert_eq!(created["workspaceCwd"], workspace.to_string_lossy().as_ref());
    assert_eq!(d.get("/health?deep=1").await.ok()["agent"]["program"], script.to_string_lossy().as_ref());
}

// ---------------------------------------------------------------------------------------------
// Messages that name the fix

#[tokio::test]
async fn workspace_mismatch_names_the_accepted_workspaces_and_the_flags() {
    let d = Daemon::start(&[]);
    let (_guard, other) = dir();
    let r = d.post("/session", None, json!({"cwd": other.to_string_lossy()})).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.body["code"], "workspace_mismatch");
    assert_eq!(
        error_text(&r.body),
        format!(
            "cwd {o} is not one of the daemon's workspaces ({w}): start mediatord with --workspace {o} to serve it \
             too, or with --any-workspace to accept any directory",
            o = other.display(),
            w = d.workspace.display()
        )
    );
}

#[tokio::test]
async fn origin_denied_names_the_flag_that_lets_the_origin_in() {
    let d = Daemon::start(&[]);
    let r = send(http().get(d.url("/health")).header("Origin", "http://localhost:3000")).await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(
        r.body,
        json!({
            "error": "Request denied by CORS policy: origin http://localhost:3000 is not allowed; start mediatord \
                      with --allow-origin http://localhost:3000 to let its pages in",
            "code": "origin_denied"
        })
    );
    // A malformed origin is not repeated back, only the flag is named.
    let r = send(http().get(d.url("/health")).header("Origin", "http://a b/<script>")).await;
    assert_eq!(r.status, 403);
    let text = error_text(&r.body);
    assert!(text.contains("--allow-origin") && !text.contains("script"), "{text}");
}

#[tokio::test]
async fn a_non_executable_agent_is_reported_at_boot_by_health_and_by_the_create() {
    let (_guard, cwd) = dir();
    let script = cwd.join("agent.sh");
    std::fs::write(&script, "#!/bin/sh\n").expect("write");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let program = script.to_str().expect("utf-8");
    let d = Daemon::start(&["--agent", &format!("{program} --acp")]);
    let said = format!("agent program {program} exists but is not executable");

    let stderr = wait_stderr(&d, &said).await;
    let warning = stderr.lines().find(|l| l.contains(&said)).expect("warning line");
    assert!(warning.contains("WARN") && warning.contains("chmod +x"), "{warning}");

    let health = d.get("/health?deep=1").await.ok();
    assert_eq!(health["agent"]["program"], program);
    assert_eq!(health["agent"]["found"], false);
    assert!(error_text(&health["agent"]).contains(&said), "{health}");

    let r = d.post("/session", None, json!({})).await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(r.body["code"], "agent_start_failed");
    assert!(error_text(&r.body).contains(&said), "{}", r.text);
}

#[tokio::test]
async fn health_deep_says_whether_the_agent_program_is_found() {
    let d = Daemon::start(&[]);
    let health = d.get("/health?deep=1").await.ok();
    assert_eq!(health["agent"], json!({"program": bin(), "found": true}), "the demo agent is this binary");

    let d = Daemon::start(&["--agent", "no-such-agent-xyz --acp"]);
    let health = d.get("/health?deep=1").await.ok();
    assert_eq!(
        health["agent"],
        json!({
            "program": "no-such-agent-xyz",
            "found": false,
            "error": "agent program \"no-such-agent-xyz\" not found (is it installed and on PATH?)"
        }),
        "only the program is shown, never its arguments"
    );
    assert_eq!(d.get("/health").await.ok(), json!({"status": "ok"}), "the plain health check is unchanged");
}

#[tokio::test]
async fn an_agent_that_never_answers_initialize_may_not_speak_acp() {
    // `sleep` reads nothing and writes nothing: like an interactive CLI started without `--acp`.
    let d = Daemon::start(&["--agent", "sleep 60", "--initialize-timeout-ms", "300"]);
    let r = d.post("/session", None, json!({})).await;
    assert_eq!(r.status, 504, "{}", r.text);
    assert_eq!(r.body["code"], "init_timeout");
    assert_eq!(
        error_text(&r.body),
        "The agent did not answer initialize within 300 ms: is it an ACP agent started in ACP mode (e.g. \
         `qwen --acp`, not `qwen`)? If it is only slow to start, raise --initialize-timeout-ms (or the \
         agent's initializeTimeoutMs)"
    );
}

#[tokio::test]
async fn a_port_in_use_suggests_another_port() {
    let d = Daemon::start(&[]);
    let port = d.port.to_string();
    let (status, stderr) = serve_refusal(&["--agent", "demo", "--port", &port], &[]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    let line = stderr.lines().find(|l| l.contains("cannot listen")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains(&format!("127.0.0.1:{port}")), "{line}");
    assert!(line.contains("choose another port with --port, or --port 0 for any free one"), "{line}");
}

// ---------------------------------------------------------------------------------------------
// Help, completions, man pages

#[test]
fn serve_help_names_env_vars_without_values_and_points_at_the_protocol() {
    let env = [("MEDIATORD_PORT", "9999"), ("MEDIATORD_TOKEN", "sekrit-token"), ("MEDIATORD_HOSTNAME", "")];
    let (code, help, _) = run(&["serve", "--help"], &env);
    assert_eq!(code, Some(0));
    // Wrapping depends on the terminal's width: compare with whitespace folded.
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for var in
        ["MEDIATORD_HOSTNAME", "MEDIATORD_PORT", "MEDIATORD_TOKEN", "MEDIATORD_AGENT", "MEDIATORD_CONFIG"]
    {
        assert!(help.contains(&format!("[env: {var}]")), "{var} in {help}");
    }
    assert!(!help.contains("=]") && !help.contains("9999") && !help.contains("sekrit"), "{help}");
    assert!(help.contains("GET /openapi.json") && help.contains("docs/protocol.md"), "{help}");
}

#[test]
fn completions_are_generated_for_every_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, script, stderr) = run(&["completions", shell], &[]);
        assert_eq!(code, Some(0), "{shell}: {stderr}");
        // Without the dashes: fish writes `-l workspace`.
        for word in ["serve", "workspace", "allow-origin", "initialize-timeout-ms", "demo-agent"] {
            assert!(script.contains(word), "{shell} completions should offer {word}");
        }
        assert!(!script.contains("agent-guard"), "{shell} completions offer the internal agent-guard");
    }
    let (code, _, stderr) = run(&["completions", "tcsh"], &[]);
    assert_eq!(code, Some(2), "{stderr}");
}

#[test]
fn man_pages_are_generated_from_the_command_line() {
    let (code, page, stderr) = run(&["man"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(page.contains(".TH mediatord 1"), "{page}");
    assert!(page.contains("mediatord\\-serve(1)"), "the main page lists serve: {page}");

    let (code, page, stderr) = run(&["man", "serve"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(page.contains(".TH mediatord\\-serve 1") || page.contains(".TH mediatord-serve 1"), "{page}");
    for word in ["\\-\\-workspace", "\\-\\-initialize\\-timeout\\-ms", "MEDIATORD_TOKEN", "GET /openapi.json"]
    {
        assert!(page.contains(word), "serve's page should mention {word}");
    }

    let (code, page, stderr) = run(&["man", "agent-guard"], &[]);
    assert_eq!(code, Some(2), "no page for the internal subcommand: {page}");
    assert!(stderr.contains("serve"), "{stderr}");
}

/// Issue #44: every subcommand's page said "serve " (its own name, and no version) in its footer,
/// where mediatord(1) says "mediatord 0.1.0". Every page the main page names says the program and
/// its version, as packaging/deb/build.sh installs them.
#[test]
fn every_man_page_names_mediatord_and_its_version_in_its_footer() {
    let (_, main, _) = run(&["man"], &[]);
    let footer = format!("\"mediatord {}\"", env!("CARGO_PKG_VERSION"));
    let th = |page: &str| page.lines().find(|l| l.starts_with(".TH ")).map(str::to_owned);
    assert!(th(&main).is_some_and(|l| l.contains(&footer)), "{:?}", th(&main));
    // The names the main page lists, as build.sh finds them: `mediatord\-<name>(1)`, one a line.
    let subcommands: Vec<String> = main
        .lines()
        .filter_map(|l| {
            l.replace('\\', "").strip_prefix("mediatord-")?.strip_suffix("(1)").map(str::to_owned)
        })
        .collect();
    assert!(subcommands.len() >= 10 && subcommands.contains(&"serve".to_owned()), "{subcommands:?}");
    for sub in &subcommands {
        let (code, page, stderr) = run(&["man", sub], &[]);
        assert_eq!(code, Some(0), "{sub}: {stderr}");
        let line = th(&page);
        assert!(line.as_deref().is_some_and(|l| l.contains(&footer)), "{sub}: {line:?}");
    }
}

#[tokio::test]
async fn the_example_config_file_boots_the_daemon() {
    // docs/examples/mediatord.json as shipped; only its example workspace and its agent are
    // overridden (flags win): /srv/project does not exist here, and Qwen Code may not be installed.
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/examples/mediatord.json");
    let settings: Value =
        serde_json::from_str(&std::fs::read_to_string(example).expect("read the example")).expect("JSON");
    let (_guard, workspace) = dir();
    let ws = workspace.to_str().expect("utf-8");
    let d = Daemon::start_in(&workspace, &["--config", example, "--workspace", ws, "--agent", "demo"], &[]);
    let caps = d.get("/capabilities").await.ok();
    assert_eq!(caps["workspaceCwd"], ws);
    assert_eq!(caps["limits"]["maxSessions"], settings["serve"]["maxSessions"]);
    assert_eq!(caps["policy"]["permission"], settings["serve"]["permissionPolicy"]);
    d.create(Some("alice"), json!({})).await;
}

/// Issue #29: the help named `gemini --experimental-acp`, a flag Gemini CLI has deprecated for
/// `--acp` (its own `--help`: "deprecated, use --acp instead").
#[test]
fn the_help_names_the_current_gemini_flag() {
    let (code, help, _) = run(&["--help"], &[]);
    assert_eq!(code, Some(0));
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(help.contains("gemini --acp"), "{help}");
    assert!(!help.contains("experimental-acp"), "{help}");
}

/// Issue #29: the startup log named neither the state directory nor the notification targets. It
/// names both, each target as its format, scheme and authority only: a topic in the path is a
/// password, and so is a query's token (user-info is refused at boot).
#[tokio::test]
async fn the_startup_log_names_the_state_directory_and_the_notification_targets_without_secrets() {
    let (_guard, root) = dir();
    let state = root.join("state");
    let state_dir = state.to_str().expect("utf-8");
    let d = Daemon::start(&[
        "--state-dir",
        state_dir,
        "--notify",
        "https://ntfy.example.net/secret-topic/x?auth=tok3n",
        "--notify",
        "http://127.0.0.1:9/hook",
    ]);
    let log = wait_stderr(&d, "mediatord started").await;
    let line = log.lines().find(|l| l.contains("mediatord started")).expect("the startup line");
    assert!(line.contains(&format!("state={state_dir}")), "{line}");
    assert!(line.contains("notify=json+https://ntfy.example.net:443/… json+http://127.0.0.1:9/…"), "{line}");
    for secret in ["secret-topic", "tok3n", "hook"] {
        assert!(!log.contains(secret), "{secret} in {log}");
    }
    let e = Daemon::start(&["--ephemeral"]);
    let log = wait_stderr(&e, "mediatord started").await;
    assert!(log.contains("state=none (--ephemeral: nothing is kept) notify=none"), "{log}");
}

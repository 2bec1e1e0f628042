//! The sandbox (`docs/operations.md#the-sandbox`): the kernel (Landlock) keeps the agent, what it
//! starts, and the session shell inside the workspace, whether or not they ask. The demo agent's
//! `put` writes a file itself and `run` runs `sh -c` itself as a tool call: no ACP, no permission.
//!
//! These tests need a kernel with Landlock (Linux 5.13+, `landlock` in the LSM list): without one,
//! each fails with a first line saying so, never skips.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::*;

/// What `mediatord sandbox-probe` reports here; panics (the test's first line) when the kernel
/// cannot confine.
fn landlock_abi() -> u64 {
    let out = std::process::Command::new(bin()).arg("sandbox-probe").output().expect("run sandbox-probe");
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    match line.strip_prefix("landlock ").and_then(|abi| abi.parse().ok()) {
        Some(abi) => abi,
        None => panic!(
            "the sandbox tests need a kernel with Landlock (Linux 5.13 or later, with landlock in the lsm= boot list); `mediatord sandbox-probe` said: {line:?}"
        ),
    }
}

/// A directory outside the daemon's workspace, with a file `target` holding `original`.
struct Outside {
    dir: tempfile::TempDir,
}

impl Outside {
    fn new() -> Outside {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("target"), "original").expect("write target");
        Outside { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).expect("canonical").join(name)
    }

    fn target(&self) -> String {
        std::fs::read_to_string(self.path("target")).expect("read target")
    }
}

/// A session on `d` and its event stream.
async fn session(d: &Daemon) -> (String, Sse) {
    let sid = d.join("alice").await;
    let sse = Sse::connect(d, &sid, &[]).await;
    (sid, sse)
}

/// Sends `text` and returns what the agent answered.
async fn say(d: &Daemon, sid: &str, sse: &mut Sse, text: &str) -> String {
    chunk_text(&d.turn(sid, sse, Some("alice"), text).await)
}

/// A daemon whose agents come from the config file `file`, written at `path`, in a fresh
/// workspace (kept alive by the returned directory).
fn with_config(path: &Path, file: &Value) -> (tempfile::TempDir, Daemon) {
    std::fs::write(path, file.to_string()).expect("config");
    let ws = tempfile::tempdir().expect("tempdir");
    let canonical = std::fs::canonicalize(ws.path()).expect("canonical");
    let d = Daemon::start_in(&canonical, &["--workspace", p(&canonical), "--config", p(path)], &[]);
    (ws, d)
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

#[tokio::test]
async fn the_agent_writes_inside_its_workspace_and_reads_outside() {
    landlock_abi();
    let outside = Outside::new();
    let d = Daemon::start(&[]);
    let (sid, mut sse) = session(&d).await;
    assert_eq!(say(&d, &sid, &mut sse, "put inside.txt hello").await, "put inside.txt: ok");
    assert_eq!(std::fs::read_to_string(d.workspace.join("inside.txt")).expect("written"), "hello");
    let read = say(&d, &sid, &mut sse, &format!("run cat {}", p(&outside.path("target")))).await;
    assert_eq!(read, "exit 0\noriginal");
    let nested =
        say(&d, &sid, &mut sse, "run mkdir -p a/b && echo deep > a/b/c && mv a/b/c a/moved && cat a/moved")
            .await;
    assert_eq!(nested, "exit 0\ndeep\n", "creating, renaming across directories inside the workspace");
    let tmp = say(&d, &sid, &mut sse, "run echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"").await;
    assert_eq!(tmp, "exit 0\nt\n", "the private TMPDIR is writable");
}

#[tokio::test]
async fn the_kernel_refuses_every_way_out_of_the_workspace() {
    landlock_abi();
    let outside = Outside::new();
    let d = Daemon::start(&[]);
    std::os::unix::fs::symlink(outside.path("target"), d.workspace.join("planted")).expect("symlink");
    let (sid, mut sse) = session(&d).await;
    let escape = outside.path("escape");
    let cases = [
        // The agent process itself.
        (format!("put {} x", p(&escape)), "Permission denied (os error 13)"),
        // `..` out of the workspace.
        (
            format!("put ../{}/escape x", outside.dir.path().file_name().expect("name").to_string_lossy()),
            "Permission denied (os error 13)",
        ),
        // A symlink planted in the workspace, pointing out.
        ("put planted hijacked".to_owned(), "Permission denied (os error 13)"),
        // A child process: its descendants inherit the domain.
        (format!("run echo x > {}", p(&escape)), "Permission denied"),
        (format!("run sh -c 'sh -c \"touch {}\"'", p(&escape)), "Permission denied"),
        ("run echo x >> planted".to_owned(), "Permission denied"),
        // Truncating, renaming out, renaming in.
        (format!("run truncate -s 0 {}", p(&outside.path("target"))), "Permission denied"),
        (format!("run echo mine > mine.txt && mv mine.txt {}", p(&escape)), "Permission denied"),
        (format!("run mv {} stolen", p(&outside.path("target"))), "Permission denied"),
        // A hard link to an outside file, made from inside: it would gain the workspace's rights.
        (format!("run ln {} hardlink", p(&outside.path("target"))), "Invalid cross-device link"),
    ];
    for (prompt, refusal) in cases {
        let answer = say(&d, &sid, &mut sse, &prompt).await;
        assert!(answer.contains(refusal), "{prompt:?} answered {answer:?}, expected {refusal:?}");
        assert!(!answer.starts_with("exit 0"), "{prompt:?} succeeded: {answer:?}");
    }
    assert!(!escape.exists(), "nothing was written outside");
    assert_eq!(outside.target(), "original", "the file outside is untouched");
    assert!(!d.workspace.join("hardlink").exists() && !d.workspace.join("stolen").exists());
    assert!(d.workspace.join("mine.txt").exists(), "the rename out failed, so the file stayed");
}

/// The limit Landlock cannot lift (it checks paths, not inodes): a hard link to an outside file
/// that already sits in the workspace before the agent starts is the workspace's to write. The
/// daemon cannot tell it apart; docs/operations.md says so. If this ever fails, the kernel got
/// stricter and the docs should say that instead.
#[tokio::test]
async fn a_hard_link_made_before_the_agent_started_is_written_through() {
    landlock_abi();
    let outside = Outside::new();
    let d = Daemon::start(&[]);
    std::fs::hard_link(outside.path("target"), d.workspace.join("prelinked")).expect("hard link");
    let (sid, mut sse) = session(&d).await;
    assert_eq!(say(&d, &sid, &mut sse, "put prelinked changed").await, "put prelinked: ok");
    assert_eq!(outside.target(), "changed");
}

#[tokio::test]
async fn with_the_sandbox_off_the_same_writes_go_through() {
    let outside = Outside::new();
    let d = Daemon::start(&["--sandbox", "off"]);
    let (sid, mut sse) = session(&d).await;
    let escape = outside.path("escape");
    assert_eq!(
        say(&d, &sid, &mut sse, &format!("put {} x", p(&escape))).await,
        format!("put {}: ok", p(&escape))
    );
    let ran =
        say(&d, &sid, &mut sse, &format!("run echo y > {} && echo z >> planted", p(&outside.path("child"))))
            .await;
    assert_eq!(ran, "exit 0\n");
    assert_eq!(std::fs::read_to_string(outside.path("child")).expect("written"), "y\n");
    let caps = d.get("/capabilities").await.ok();
    assert_eq!(caps["sandbox"], json!({"kind": "off", "abi": landlock_abi(), "writable": null, "net": null}));
}

#[tokio::test]
async fn capabilities_health_and_agents_say_what_is_enforced() {
    let abi = landlock_abi();
    let d = Daemon::start(&["--sandbox-writable", "extra"]);
    let caps = d.get("/capabilities").await.ok();
    let sandbox = &caps["sandbox"];
    assert_eq!(sandbox["kind"], "landlock");
    assert_eq!(sandbox["abi"], abi);
    assert_eq!(sandbox["net"], "any");
    let writable: Vec<&str> = sandbox["writable"]
        .as_array()
        .expect("writable")
        .iter()
        .map(|w| w.as_str().expect("a path"))
        .collect();
    assert_eq!(writable[..2], ["<workspace>", "<private tmp>"]);
    assert!(writable.contains(&"/dev/null"), "{writable:?}");
    // The demo agent's transcripts (beside the daemon's state), then the flag's path from the cwd.
    assert!(writable[writable.len() - 2].ends_with("/mediatord/demo-agent"), "{writable:?}");
    assert_eq!(writable[writable.len() - 1], p(&d.workspace.join("extra")));
    let health = d.get("/health?deep=1").await.ok();
    let mut expected = sandbox.clone();
    expected["denials"] = json!(0);
    assert_eq!(health["sandbox"], expected);
    let agents = d.get("/agents").await.ok();
    assert_eq!(&agents["agents"][0]["sandbox"], sandbox);
}

#[tokio::test]
async fn the_session_shell_is_confined_like_its_agent_and_refusals_are_counted() {
    landlock_abi();
    const TOKEN: &str = "sandbox-shell-token";
    let outside = Outside::new();
    let d = Daemon::start(&["--token", TOKEN, "--enable-session-shell"]);
    let auth = format!("Bearer {TOKEN}");
    let created = send(as_client(
        http().post(d.url("/session")).header("Authorization", &auth).json(&json!({})),
        Some("alice"),
    ))
    .await
    .ok();
    let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
    let shell = |command: String| {
        let req = http()
            .post(d.url(&format!("/session/{sid}/shell")))
            .header("Authorization", &auth)
            .json(&json!({"command": command}));
        async move { send(as_client(req, Some("alice"))).await.ok() }
    };
    let inside = shell("touch inside && echo made".to_owned()).await;
    assert_eq!((inside["exitCode"].as_i64(), inside["output"].as_str()), (Some(0), Some("made\n")));
    assert!(d.workspace.join("inside").exists());
    let refused = shell(format!("touch {}", p(&outside.path("shell-escape")))).await;
    assert_eq!(refused["exitCode"], 1, "{refused}");
    let output = refused["output"].as_str().expect("output");
    assert!(output.contains("Permission denied"), "{output}");
    assert!(!outside.path("shell-escape").exists());

    let health = send(http().get(d.url("/health?deep=1")).header("Authorization", &auth)).await.ok();
    assert_eq!(health["sandbox"]["denials"], 1, "the refused touch is counted");
    let metrics = send(http().get(d.url("/metrics")).header("Authorization", &auth)).await.text;
    assert!(metrics.contains("mediatord_sandbox_denials_total{source=\"shell\"} 1"), "{metrics}");
}

#[tokio::test]
async fn a_refused_tool_call_is_counted_once() {
    landlock_abi();
    let outside = Outside::new();
    let d = Daemon::start(&[]);
    let (sid, mut sse) = session(&d).await;
    let events = d.turn(&sid, &mut sse, Some("alice"), &format!("run touch {}", p(&outside.path("x")))).await;
    let failed = events
        .iter()
        .filter(|e| e.payload()["update"]["sessionUpdate"] == "tool_call_update")
        .map(|e| e.payload()["update"]["status"].clone())
        .collect::<Vec<Value>>();
    assert_eq!(failed, [json!("failed")], "the agent's tool error reaches the transcript");
    say(&d, &sid, &mut sse, "run touch fine").await;
    let health = d.get("/health?deep=1").await.ok();
    assert_eq!(health["sandbox"]["denials"], 1, "one refusal; the tool call that worked is not counted");
    let metrics = d.get("/metrics").await.text;
    assert!(metrics.contains("mediatord_sandbox_denials_total{source=\"agent\"} 1"), "{metrics}");
}

#[tokio::test]
async fn an_agent_that_fails_confined_says_why_and_what_to_do() {
    landlock_abi();
    let outside = Outside::new();
    let state = outside.path("agent-state");
    // An "agent" that writes its own state outside the workspace before it speaks ACP, and dies
    // when it cannot: what a real agent does when its state directory is not writable.
    let agent = format!(
        "sh -c 'mkdir -p {0} && echo run > {0}/lock || exit 1; exec {1} demo-agent'",
        p(&state),
        bin()
    );
    let d = Daemon::start(&["--agent", &agent]);
    let reply = d.post("/session", Some("alice"), json!({})).await;
    assert_eq!(
        (reply.status, reply.body["code"].as_str()),
        (502, Some("agent_start_failed")),
        "{}",
        reply.text
    );
    let message = reply.body["error"].as_str().expect("a message").to_owned();
    assert!(message.contains("Permission denied"), "the agent's own error: {message}");
    assert!(message.contains("sandbox.writable"), "what to do about it: {message}");
    assert!(!state.exists());

    // Given the path, the same agent runs.
    let config = outside.path("mediatord.json");
    // Ending in `/`: created as a directory when the agent starts.
    let file = json!({"agents": {"stateful": {"command": agent, "sandbox": {"writable": [format!("{}/", p(&state))]}}}});
    let (_ws, d) = with_config(&config, &file);
    let (sid, mut sse) = session(&d).await;
    assert_eq!(say(&d, &sid, &mut sse, "pid").await.parse::<u32>().map(|_| ()), Ok(()));
    assert_eq!(std::fs::read_to_string(state.join("lock")).expect("its state"), "run\n");
}

#[tokio::test]
async fn net_rules_let_the_agent_connect_only_to_its_ports() {
    let abi = landlock_abi();
    assert!(abi >= 4, "TCP rules need Landlock ABI 4; this kernel has {abi}");
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = |l: &std::net::TcpListener| l.local_addr().expect("addr").port();
    let outside = Outside::new();
    let config = outside.path("mediatord.json");
    let file = json!({"agents": {"demo": {"command": "demo", "sandbox": {"net": [port(&allowed)]}}}});
    let (_ws, d) = with_config(&config, &file);
    let (sid, mut sse) = session(&d).await;
    let connect = |port: u16| {
        format!(
            "run python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 5); print('connected')\""
        )
    };
    assert_eq!(say(&d, &sid, &mut sse, &connect(port(&allowed))).await, "exit 0\nconnected\n");
    let refused = say(&d, &sid, &mut sse, &connect(port(&other))).await;
    assert!(refused.contains("PermissionError") && !refused.contains("connected"), "{refused}");
    let caps = d.get("/capabilities").await.ok();
    assert_eq!(caps["sandbox"]["net"], json!([port(&allowed)]));
}

//! `POST /session/:id/shell` (`docs/protocol.md#9-session-shell`): refusals in order, a run, a
//! timeout that takes the whole process group down, the output cap, events, and commands never
//! logged.

use serde_json::{Value, json};

use crate::support::*;

const TOKEN: &str = "shell-test-token";

fn auth() -> String {
    format!("Bearer {TOKEN}")
}

/// `POST /session/:id/shell` with the token; every answer, refusals included, is JSON.
async fn shell(d: &Daemon, sid: &str, client: Option<&str>, body: Value) -> (u16, Value) {
    let req =
        http().post(d.url(&format!("/session/{sid}/shell"))).header("Authorization", auth()).json(&body);
    let reply = send(as_client(req, client)).await;
    assert!(!reply.body.is_null(), "a JSON body: {:?}", reply.text);
    reply.pair()
}

/// Joins the workspace's session as `client`, with the token.
async fn session_with_token(d: &Daemon, client: &str) -> String {
    let req = http().post(d.url("/session")).header("Authorization", auth()).json(&json!({}));
    let created = send(as_client(req, Some(client))).await.ok();
    created["sessionId"].as_str().expect("sessionId").to_owned()
}

#[tokio::test]
async fn tokenless_daemon_with_the_flag_answers_token_required() {
    let d = Daemon::start(&["--enable-session-shell"]);
    let sid = d.join("alice").await;
    let res = http()
        .post(d.url(&format!("/session/{sid}/shell")))
        .header("X-Qwen-Client-Id", "alice")
        .json(&json!({"command": "echo hi"}))
        .send()
        .await
        .expect("shell");
    assert_eq!(res.status(), 401);
    let body: Value = res.json().await.expect("json");
    assert_eq!(body["code"], "token_required");
    let caps: Value =
        http().get(d.url("/capabilities")).send().await.expect("caps").json().await.expect("json");
    assert!(!caps["features"].as_array().expect("features").contains(&json!("session_shell_command")));
}

#[tokio::test]
async fn token_without_the_flag_answers_disabled() {
    let d = Daemon::start(&["--token", TOKEN]);
    let sid = session_with_token(&d, "alice").await;
    let (status, body) = shell(&d, &sid, Some("alice"), json!({"command": "echo hi"})).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("session_shell_disabled")));
}

#[tokio::test]
async fn refusals_come_in_spec_order() {
    let d = Daemon::start(&["--token", TOKEN, "--enable-session-shell", "--session-scope", "thread"]);
    let mine = session_with_token(&d, "alice").await;
    let other = session_with_token(&d, "bob").await;
    // No client id at all, even with a bad body: the client id is checked first.
    let (status, body) = shell(&d, &mine, None, json!({"nope": 1})).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("client_id_required")));
    // Malformed client id.
    let (status, body) = shell(&d, &mine, Some("bad id!"), json!({"command": "echo"})).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_client_id")));
    // A client bound to another session.
    let (status, body) = shell(&d, &other, Some("alice"), json!({"command": "echo"})).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_client_id")));
    // Unknown session.
    let (status, body) = shell(&d, "no-such-session", Some("alice"), json!({"command": "echo"})).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("session_not_found")));
    // Bad bodies.
    for bad in [
        json!({}),
        json!({"command": ""}),
        json!({"command": 7}),
        json!({"command": "x".repeat(64 * 1024 + 1)}),
    ] {
        let (status, body) = shell(&d, &mine, Some("alice"), bad).await;
        assert_eq!((status, body["code"].as_str()), (400, Some("invalid_command")));
    }
}

#[tokio::test]
async fn a_command_runs_in_the_workspace_and_both_subscribers_see_it() {
    let d = Daemon::start(&["--token", TOKEN, "--enable-session-shell"]);
    let sid = session_with_token(&d, "alice").await;
    let headers = [("Authorization", auth())];
    let mut first = Sse::connect(&d, &sid, &headers).await;
    let mut second = Sse::connect(&d, &sid, &headers).await;
    let (status, body) =
        shell(&d, &sid, Some("alice"), json!({"command": "pwd; echo out; echo err >&2; exit 3"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["exitCode"], 3);
    assert_eq!(body["aborted"], false);
    let output = body["output"].as_str().expect("output");
    assert!(output.contains(&d.workspace.to_string_lossy().to_string()), "{output}");
    assert!(output.contains("out\n") && output.contains("err\n"), "{output}");
    for sse in [&mut first, &mut second] {
        let events = sse.until_type("user_shell_result").await;
        let command = events.iter().find(|e| e.event == "user_shell_command").expect("command event");
        assert_eq!(command.payload()["originatorClientId"], "alice");
        assert_eq!(command.payload()["shellId"], body["shellId"]);
        let result = events.last().expect("result").payload();
        assert_eq!(result["exitCode"], 3);
        assert_eq!(result["shellId"], body["shellId"]);
    }
    let caps: Value = http()
        .get(d.url("/capabilities"))
        .header("Authorization", auth())
        .send()
        .await
        .expect("caps")
        .json()
        .await
        .expect("json");
    assert!(caps["features"].as_array().expect("features").contains(&json!("session_shell_command")));
}

#[tokio::test]
async fn a_timed_out_command_is_aborted_with_its_children_gone() {
    let d = Daemon::start(&["--token", TOKEN, "--enable-session-shell", "--shell-timeout-ms", "1500"]);
    let sid = session_with_token(&d, "alice").await;
    let pidfile = d.workspace.join("child.pid");
    let command = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
    let (status, body) = shell(&d, &sid, Some("alice"), json!({"command": command})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["aborted"], true);
    assert_eq!(body["exitCode"], Value::Null);
    let child: u32 = std::fs::read_to_string(&pidfile).expect("pid file").trim().parse().expect("pid");
    wait_gone(child).await;
}

#[tokio::test]
async fn output_is_cut_at_one_mebibyte() {
    let d = Daemon::start(&["--token", TOKEN, "--enable-session-shell"]);
    let sid = session_with_token(&d, "alice").await;
    let (status, body) =
        shell(&d, &sid, Some("alice"), json!({"command": "head -c 3000000 /dev/zero | tr '\\0' a"})).await;
    assert_eq!(status, 200);
    assert_eq!(body["output"].as_str().expect("output").len(), 1024 * 1024);
    assert_eq!(body["truncated"], true);
    assert_eq!(body["exitCode"], 0);
}

#[tokio::test]
async fn commands_are_never_logged() {
    let d = Daemon::start(&["--token", TOKEN, "--enable-session-shell"]);
    let sid = session_with_token(&d, "alice").await;
    let secret = "echo refused-marker-7f3a";
    let (status, _) = shell(&d, &sid, Some("intruder"), json!({"command": secret})).await;
    assert_eq!(status, 400);
    let (status, _) = shell(&d, &sid, None, json!({"command": secret})).await;
    assert_eq!(status, 403);
    let ran = "echo accepted-marker-9c1d";
    let (status, _) = shell(&d, &sid, Some("alice"), json!({"command": ran})).await;
    assert_eq!(status, 200);
    // The accepted run's completion is logged; by then any log line about the refusals is out too.
    let logs = wait_stderr(&d, "session shell command finished").await;
    assert!(!logs.contains("refused-marker-7f3a"), "a refused command reached the log:\n{logs}");
    assert!(!logs.contains("accepted-marker-9c1d"), "a command reached the log:\n{logs}");
    assert!(!logs.contains(TOKEN), "the token reached the log");
}

/// The pids whose parent is `pid` (from /proc/<pid>/stat, field 4).
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else { continue };
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if parent.and_then(|p| p.parse::<u32>().ok()) == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// Issue #16, finding a: the daemon's secrets (`MEDIATORD_TOKEN`, `QWEN_SERVER_TOKEN`) are not in
/// the environment of a session shell command, of the agent's guard, or of the agent, so nothing
/// the agent may run can read the token and vote on its own permission requests.
#[tokio::test]
async fn the_token_is_in_no_environment_the_daemon_starts() {
    let fallback = "qwen-fallback-token-2c7d";
    let d = Daemon::start_env(
        &["--enable-session-shell"],
        &[("MEDIATORD_TOKEN", TOKEN), ("QWEN_SERVER_TOKEN", fallback)],
    );
    let sid = session_with_token(&d, "alice").await;
    let (status, body) = shell(&d, &sid, Some("alice"), json!({"command": "env"})).await;
    assert_eq!(status, 200, "{body}");
    let output = body["output"].as_str().expect("output");
    assert!(output.contains("PATH="), "the command sees the rest of the environment: {output}");
    for secret in [TOKEN, fallback, "MEDIATORD_TOKEN", "QWEN_SERVER_TOKEN"] {
        assert!(!output.contains(secret), "{secret} reached the shell command: {output}");
    }
    let guards = children_of(d.pid());
    assert_eq!(guards.len(), 1, "one agent guard under the daemon");
    let agents = children_of(guards[0]);
    assert_eq!(agents.len(), 1, "one agent under its guard");
    for pid in [guards[0], agents[0]] {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
        let environ = String::from_utf8_lossy(&environ);
        assert!(environ.contains("PATH="), "pid {pid} has an environment");
        for secret in [TOKEN, fallback, "MEDIATORD_TOKEN", "QWEN_SERVER_TOKEN"] {
            assert!(!environ.contains(secret), "{secret} reached pid {pid}'s environment");
        }
    }
}

/// Issue #16, item 5: a command that leaves its process group (`setsid`) and holds the output pipe
/// still gets its answer at `--shell-timeout-ms` (not when it chooses to end), and is killed.
#[tokio::test]
async fn a_command_that_leaves_its_group_is_answered_at_the_timeout_and_killed() {
    let d = Daemon::start(&["--token", TOKEN, "--enable-session-shell", "--shell-timeout-ms", "1500"]);
    let sid = session_with_token(&d, "alice").await;
    let pidfile = d.workspace.join("escaped.pid");
    let command = format!("setsid sh -c 'echo $$ > {}; exec sleep 300'", pidfile.display());
    let (status, body) = shell(&d, &sid, Some("alice"), json!({"command": command})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["aborted"].clone(), body["exitCode"].clone()), (json!(true), Value::Null), "{body}");
    wait_gone(pid_in_file(&pidfile).await).await;
}

/// Issue #16, item 5: a background job that left the group does not outlive a command that ended
/// normally, and does not hold its answer.
#[tokio::test]
async fn a_background_job_that_left_the_group_dies_with_its_command() {
    let d = Daemon::start(&["--token", TOKEN, "--enable-session-shell"]);
    let sid = session_with_token(&d, "alice").await;
    let pidfile = d.workspace.join("background.pid");
    // The command waits until the job has written its pid, so the job is surely running at its end.
    let command = format!(
        "(setsid sh -c 'echo $$ > {0}; exec sleep 300' &); while [ ! -s {0} ]; do sleep 0.05; done; echo done",
        pidfile.display()
    );
    let (status, body) = shell(&d, &sid, Some("alice"), json!({"command": command})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["exitCode"].clone(), body["aborted"].clone()), (json!(0), json!(false)), "{body}");
    assert_eq!(body["output"], "done\n");
    wait_gone(pid_in_file(&pidfile).await).await;
}

/// Issue #16, item 5: a running command that escaped its group neither blocks the drain nor the
/// exit: the first SIGTERM still exits 0 within the drain's deadline, and the process is gone.
#[tokio::test]
async fn sigterm_exits_within_the_drain_deadline_despite_an_escaped_command() {
    let mut d = Daemon::start(&["--token", TOKEN, "--enable-session-shell"]);
    let sid = session_with_token(&d, "alice").await;
    let pidfile = d.workspace.join("escaped.pid");
    let command = format!("setsid sh -c 'echo $$ > {}; exec sleep 300'", pidfile.display());
    let request = http()
        .post(d.url(&format!("/session/{sid}/shell")))
        .header("Authorization", auth())
        .header("X-Qwen-Client-Id", "alice")
        .json(&json!({"command": command}));
    let running = tokio::spawn(async move { send(request).await });
    let escaped = pid_in_file(&pidfile).await;
    d.signal(rustix::process::Signal::TERM);
    // The drain's own bound: sessions 5 s, agents 10 s, HTTP 2 s; with room for a loaded machine.
    let status = d.wait_exit(std::time::Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "stderr:\n{}", d.stderr());
    wait_gone(escaped).await;
    // The request was answered (the command cut short by the drain) or cut with the connection.
    if let Ok(reply) = running.await {
        assert_eq!(reply.body["aborted"], true, "{}", reply.text);
    }
}

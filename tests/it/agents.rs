//! Several named agents behind one daemon (`docs/protocol.md#4-agents-workspaces-and-sessions`),
//! through the real binary: sessions on each, one process per (workspace, agent), `single` scope per
//! agent, unknown names refused, `GET /agents`, per-agent environment, initialize timeout and client
//! capabilities, and the death of one agent leaving the other serving.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Value, json};

use crate::support::*;

/// A value only the agent's environment holds: it must never appear in an answer of the daemon.
const SECRET: &str = "s3cret-agent-credential";

/// `POST /session` for `agent` as `client`, any extra body fields; the 200's body.
async fn create_on(d: &Daemon, client: &str, agent: &str, extra: Value) -> Value {
    let mut body = json!({"agent": agent});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    d.create(Some(client), body).await
}

fn sid(created: &Value) -> String {
    created["sessionId"].as_str().expect("sessionId").to_owned()
}

/// Runs `text` as one turn of `sid` and returns the agent's reply text.
async fn reply(d: &Daemon, sid: &str, text: &str) -> String {
    let mut sse = Sse::connect(d, sid, &[]).await;
    chunk_text(&d.turn(sid, &mut sse, None, text).await)
}

/// A daemon whose agents come from a config file's `agents` map, `agents` (JSON text, so the order
/// written is kept: the first is the default), in a fresh workspace. No `--agent` flag: flags would
/// replace the file's agents.
fn with_agents_file(agents: &str) -> (Daemon, tempfile::TempDir) {
    with_agents_file_and(agents, &[])
}

/// [`with_agents_file`] with `extra` flags; `{dir}` in them stands for the temporary directory.
fn with_agents_file_and(agents: &str, extra: &[&str]) -> (Daemon, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let workspace: PathBuf = std::fs::canonicalize(dir.path()).expect("canonical");
    let config = workspace.join("mediatord.json");
    std::fs::write(&config, format!(r#"{{"agents": {agents}}}"#)).expect("write the config file");
    let root = workspace.to_str().expect("utf-8");
    let extra: Vec<String> = extra.iter().map(|a| a.replace("{dir}", root)).collect();
    let mut args = vec!["--workspace", root, "--config", config.to_str().expect("utf-8")];
    args.extend(extra.iter().map(String::as_str));
    (Daemon::start_in(&workspace, &args, &[]), dir)
}

/// `GET /agents`, as a map from name to entry; also checks the order (the default first).
async fn agents(d: &Daemon, order: &[&str]) -> serde_json::Map<String, Value> {
    let listed = d.get("/agents").await.ok();
    let list = listed["agents"].as_array().expect("agents").clone();
    let names: Vec<&str> = list.iter().filter_map(|a| a["name"].as_str()).collect();
    assert_eq!(names, order, "GET /agents lists every configured agent in order: {listed}");
    list.into_iter().map(|a| (a["name"].as_str().expect("name").to_owned(), a)).collect()
}

/// Polls `GET /agents` (bounded) until `agent`'s `running` is `running`.
async fn until_running(d: &Daemon, agent: &str, running: bool) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let listed = d.get("/agents").await.ok();
        let entry = listed["agents"].as_array().and_then(|l| l.iter().find(|a| a["name"] == agent)).cloned();
        if let Some(entry) = entry.filter(|e| e["running"] == running) {
            return entry;
        }
        assert!(Instant::now() < deadline, "agent {agent} never became running={running}: {listed}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await; // polling a listing
    }
}

#[tokio::test]
async fn sessions_on_two_named_agents_run_in_separate_processes() {
    let d = Daemon::start(&["--agent", "a=demo", "--agent", "b=demo"]);
    let a = create_on(&d, "alice", "a", json!({})).await;
    let b = create_on(&d, "alice", "b", json!({})).await;
    assert_eq!((a["agent"].as_str(), b["agent"].as_str()), (Some("a"), Some("b")));
    assert_eq!(a["attached"], false);
    assert_eq!(b["attached"], false, "another agent's single-scope session is not the same session");
    assert_ne!(sid(&a), sid(&b));

    let (pa, pb) = (agent_pid(&d, &sid(&a)).await, agent_pid(&d, &sid(&b)).await);
    assert_ne!(pa, pb, "one process per (workspace, agent)");
    assert!(alive(pa) && alive(pb));

    // Each session's status and the workspace's list name the agent.
    assert_eq!(d.get(&format!("/session/{}", sid(&b))).await.ok()["agent"], "b");
    let ws = d.workspace.to_str().expect("utf-8").replace('/', "%2F");
    let listed = d.get(&format!("/workspace/{ws}/sessions")).await.ok();
    let mut pairs: Vec<(String, String)> = listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| {
            (s["sessionId"].as_str().unwrap_or("").to_owned(), s["agent"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    pairs.sort_by(|x, y| x.1.cmp(&y.1));
    assert_eq!(pairs, [(sid(&a), "a".to_owned()), (sid(&b), "b".to_owned())]);

    // A create naming no agent goes to the default (the first): it attaches to a's session.
    let default = d.create(Some("bob"), json!({})).await;
    assert_eq!(
        (sid(&default), default["agent"].as_str(), &default["attached"]),
        (sid(&a), Some("a"), &json!(true))
    );
}

#[tokio::test]
async fn single_scope_shares_one_session_per_workspace_and_agent() {
    let d = Daemon::start(&["--agent", "a=demo", "--agent", "b=demo"]);
    let a1 = create_on(&d, "alice", "a", json!({})).await;
    let a2 = create_on(&d, "bob", "a", json!({})).await;
    assert_eq!((sid(&a2), &a2["attached"]), (sid(&a1), &json!(true)));
    let b1 = create_on(&d, "carol", "b", json!({})).await;
    let b2 = create_on(&d, "dave", "b", json!({})).await;
    assert_eq!((sid(&b2), &b2["attached"]), (sid(&b1), &json!(true)));
    assert_ne!(sid(&a1), sid(&b1));
    // A thread on a is a new session on a's process.
    let thread = create_on(&d, "erin", "a", json!({"sessionScope": "thread"})).await;
    assert_ne!(sid(&thread), sid(&a1));
    assert_eq!(agent_pid(&d, &sid(&thread)).await, agent_pid(&d, &sid(&a1)).await);

    // Closing b's shared session leaves a's; the next create on b makes a new one.
    assert_eq!(d.delete(&format!("/session/{}", sid(&b1))).await.status, 204);
    assert_eq!(create_on(&d, "alice", "a", json!({})).await["attached"], true);
    let b3 = create_on(&d, "carol", "b", json!({})).await;
    assert_eq!(b3["attached"], false);
    assert_ne!(sid(&b3), sid(&b1));
}

#[tokio::test]
async fn an_unknown_agent_is_refused_naming_the_configured_ones() {
    let d = Daemon::start(&["--agent", "a=demo", "--agent", "b=demo"]);
    let (status, body) = d.post("/session", Some("alice"), json!({"agent": "c"})).await.pair();
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "unknown_agent");
    assert_eq!(body["agents"], json!(["a", "b"]));
    let error = body["error"].as_str().expect("error");
    assert!(
        error.contains("\"c\"") && error.contains("a, b") && error.contains("--agent NAME=COMMAND"),
        "{error}"
    );

    let (status, body) = d.post("/session", Some("alice"), json!({"agent": 7})).await.pair();
    assert_eq!((status, &body["code"], &body["agents"]), (400, &json!("unknown_agent"), &json!(["a", "b"])));
    // Nothing was started for the refused creates.
    let listed = agents(&d, &["a", "b"]).await;
    assert!(listed.values().all(|a| a["running"] == false), "{listed:?}");
}

#[tokio::test]
async fn get_agents_shows_program_workspaces_and_initialize_but_never_arguments_or_environment() {
    // Written in this order, which is not the alphabetical one: the writer is the default. Its
    // command line has an argument (`--linger`, harmless here) that must not be shown.
    let (d, _dir) = with_agents_file(&format!(
        r#"{{"writer": {{"command": "{} demo-agent --linger", "env": {{"DEMO_ROLE": "writer", "DEMO_TOKEN": "{SECRET}"}}}},
            "reviewer": {{"command": "demo", "env": {{"DEMO_ROLE": "reviewer"}}}}}}"#,
        bin()
    ));
    let before = agents(&d, &["writer", "reviewer"]).await;
    for entry in before.values() {
        assert_eq!(entry["running"], false);
        assert_eq!(entry["workspaces"], json!([]));
        assert_eq!(entry["initialize"], Value::Null, "not started yet: {entry}");
        assert_eq!(entry["found"], true);
        assert_eq!(entry["program"], bin(), "the demo agent is this binary");
    }
    assert_eq!((&before["writer"]["default"], &before["reviewer"]["default"]), (&json!(true), &json!(false)));

    let writer = sid(&create_on(&d, "alice", "writer", json!({})).await);
    let listed = agents(&d, &["writer", "reviewer"]).await;
    let entry = &listed["writer"];
    assert_eq!(entry["running"], true);
    assert_eq!(entry["workspaces"], json!([d.workspace.to_str().expect("utf-8")]));
    let init = &entry["initialize"];
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentInfo"]["name"], "mediatord-demo-agent");
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(init["agentCapabilities"]["promptCapabilities"]["image"], false);
    assert_eq!(init["authMethods"], json!([]));
    assert!(init.get("_meta").is_none(), "only the documented fields: {init}");
    assert_eq!(
        (&listed["reviewer"]["running"], &listed["reviewer"]["initialize"]),
        (&json!(false), &Value::Null)
    );

    // Each agent got its own environment on top of the daemon's.
    let reviewer = sid(&create_on(&d, "alice", "reviewer", json!({})).await);
    assert_eq!(reply(&d, &writer, "env DEMO_ROLE").await, "writer");
    assert_eq!(reply(&d, &reviewer, "env DEMO_ROLE").await, "reviewer");
    assert_eq!(reply(&d, &reviewer, "env DEMO_TOKEN").await, "DEMO_TOKEN is not set");
    assert_eq!(reply(&d, &writer, "env DEMO_TOKEN").await, SECRET, "the agent itself has it");

    // The daemon never shows it anywhere a client looks, nor the agent's arguments in `GET /agents`.
    for path in ["/agents", "/capabilities", "/health?deep=1", &format!("/session/{writer}")] {
        let text = d.get(path).await.text;
        assert!(
            !text.contains(SECRET) && !text.contains("DEMO_TOKEN"),
            "{path} shows the environment: {text}"
        );
    }
    let text = d.get("/agents").await.text;
    assert!(!text.contains("--linger"), "GET /agents shows the arguments: {text}");
    assert!(!d.stderr().contains(SECRET), "the log shows the environment");

    let caps = d.get("/capabilities").await.ok();
    assert!(caps["features"].as_array().expect("features").contains(&json!("agents")));
    assert_eq!(caps["agents"], json!(["writer", "reviewer"]));
    assert_eq!(caps["agent"]["name"], "writer");
}

#[tokio::test]
async fn the_death_of_one_agent_leaves_the_other_serving() {
    let d = Daemon::start(&["--agent", "a=demo", "--agent", "b=demo"]);
    let a = sid(&create_on(&d, "alice", "a", json!({})).await);
    let b = sid(&create_on(&d, "alice", "b", json!({})).await);
    let (pa, pb) = (agent_pid(&d, &a).await, agent_pid(&d, &b).await);
    let mut sse_a = Sse::connect(&d, &a, &[]).await;
    let mut sse_b = Sse::connect(&d, &b, &[]).await;

    d.prompt_async(&a, Some("alice"), "crash").await;
    let died = sse_a.until_type("session_died").await;
    assert_eq!(died.last().expect("session_died").payload()["sessionId"], a.as_str());
    wait_gone(pa).await;
    until_running(&d, "a", false).await;

    // b's process and session are untouched and keep serving.
    assert!(alive(pb));
    let turn = d.turn(&b, &mut sse_b, Some("alice"), "still here").await;
    assert_eq!(chunk_text(&turn), "still here");
    assert!(!turn.iter().any(|e| e.event == "session_died"));
    assert_eq!(agent_pid(&d, &b).await, pb);
    assert_eq!(
        until_running(&d, "b", true).await["workspaces"],
        json!([d.workspace.to_str().expect("utf-8")])
    );

    // The next create on a starts a fresh process of a.
    let again = sid(&create_on(&d, "alice", "a", json!({})).await);
    assert_ne!(again, a);
    let fresh = agent_pid(&d, &again).await;
    assert!(fresh != pa && fresh != pb);
}

#[tokio::test]
async fn each_agent_has_its_own_initialize_timeout() {
    // `sleep` never answers `initialize`: its create fails after its own short deadline, while the
    // demo agent beside it keeps the daemon-wide one.
    let (d, _dir) =
        with_agents_file(r#"{"quick": "demo", "mute": {"command": "sleep 30", "initializeTimeoutMs": 300}}"#);
    let started = Instant::now();
    let (status, body) = d.post("/session", Some("alice"), json!({"agent": "mute"})).await.pair();
    assert_eq!((status, &body["code"]), (504, &json!("init_timeout")), "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("initialize within 300 ms")), "{body}");
    assert!(started.elapsed() < WAIT, "the agent's own deadline, not the default 10 s, bounded it");
    assert_eq!(create_on(&d, "alice", "quick", json!({})).await["agent"], "quick");
}

#[tokio::test]
async fn an_agent_offered_no_read_text_file_gets_no_file_reads() {
    let (d, _dir) = with_agents_file(
        r#"{"reader": "demo",
            "writer-only": {"command": "demo", "clientCapabilities": {"fs": {"readTextFile": false}}}}"#,
    );
    std::fs::write(d.workspace.join("notes.txt"), "the notes").expect("write");
    let reader = sid(&create_on(&d, "alice", "reader", json!({})).await);
    let writer = sid(&create_on(&d, "alice", "writer-only", json!({})).await);
    assert_eq!(reply(&d, &reader, "read notes.txt").await, "the notes");
    let refused = reply(&d, &writer, "read notes.txt").await;
    assert_eq!(refused, "read failed: Method not found: fs/read_text_file", "not offered, not served");
    // Writes are still offered to it, and served.
    assert_eq!(reply(&d, &writer, "fswrite out.txt written").await, "wrote out.txt");
    assert_eq!(std::fs::read_to_string(d.workspace.join("out.txt")).expect("read"), "written");
}

/// The config file's agent programs with a slash are taken from the file's directory, like its
/// workspaces.
#[tokio::test]
async fn a_relative_agent_program_in_the_agents_map_is_taken_from_the_config_files_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    std::fs::create_dir_all(root.join("etc/bin")).expect("mkdir");
    std::os::unix::fs::symlink(bin(), root.join("etc/bin/agent")).expect("symlink");
    let config = root.join("etc/mediatord.json");
    let agents = json!({"local": {"command": "./bin/agent demo-agent"}});
    std::fs::write(&config, json!({"agents": agents}).to_string()).expect("write");
    let ws = root.to_str().expect("utf-8");
    let d = Daemon::start_in(
        Path::new("/"),
        &["--workspace", ws, "--config", config.to_str().expect("utf-8")],
        &[],
    );
    let listed = agents_of(&d).await;
    assert_eq!(listed[0]["program"], root.join("etc/bin/agent").to_str().expect("utf-8"));
    let s = sid(&create_on(&d, "alice", "local", json!({})).await);
    assert_eq!(reply(&d, &s, "hello").await, "hello");
}

async fn agents_of(d: &Daemon) -> Vec<Value> {
    d.get("/agents").await.ok()["agents"].as_array().expect("agents").clone()
}

/// Session ids are the agents' own: a second agent handing out an id a live session already has is
/// refused, and the first session keeps its routes.
#[tokio::test]
async fn a_session_id_another_agent_already_gave_out_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("fixed-id-agent.sh");
    // Answers `initialize` and `session/new` (always with the session id "fixed"), nothing else.
    std::fs::write(
        &script,
        r#"#!/bin/sh
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case $line in
    *'"method":"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":1}}\n' "$id" ;;
    *'"method":"session/new"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"sessionId":"fixed"}}\n' "$id" ;;
  esac
done
"#,
    )
    .expect("write the agent");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let program = script.to_str().expect("utf-8");
    let d = Daemon::start(&["--agent", &format!("a={program}"), "--agent", &format!("b={program}")]);
    let a = create_on(&d, "alice", "a", json!({})).await;
    assert_eq!((sid(&a).as_str(), a["agent"].as_str()), ("fixed", Some("a")));
    let (status, body) = d.post("/session", Some("alice"), json!({"agent": "b"})).await.pair();
    assert_eq!((status, &body["code"]), (502, &json!("agent_start_failed")), "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("\"fixed\"")), "{body}");
    assert_eq!(d.get("/session/fixed").await.ok()["agent"], "a", "the first session keeps its id");
}

/// Issue #27, finding 8: an agent chooses its session ids, and one with control characters used to
/// be taken as it was (a newline in it forged a log line, an escape sequence drove the terminal
/// showing the log). It is refused with a reason that shows it escaped, and nothing is started.
#[tokio::test]
async fn a_session_id_with_control_characters_is_refused_with_a_clear_error() {
    let forged = "x\n2026-01-01T00:00:00.000000Z  INFO mediatord: forged\u{1b}[2J";
    let agents = json!({"evil": {"command": "demo", "env": {"DEMO_SESSION_ID": forged}}});
    let (d, _dir) = with_agents_file(&agents.to_string());
    let (status, body) = d.post("/session", Some("alice"), json!({})).await.pair();
    assert_eq!((status, body["code"].as_str()), (502, Some("agent_start_failed")), "{body}");
    let error = body["error"].as_str().expect("error");
    assert!(
        error.contains(r#"the id "x\n2026-01-01T00:00:00.000000Z  INFO mediatord: forged\u{1b}[2J""#)
            && error.contains("not a session id mediatord accepts"),
        "{error}"
    );
    assert_eq!(d.get("/health?deep=1").await.ok()["sessions"], 0, "no session was entered");
    let log = wait_stderr(&d, "not a session id mediatord accepts").await;
    assert!(!log.lines().any(|l| l.starts_with("2026-01-01T00:00:00")), "a forged line:\n{log}");
    assert!(!log.contains('\u{1b}'), "{log}");
}

/// Issue #27, finding 8: a second agent answering `session/new` with the id of a session the
/// history records used to replace that session's record and history. The create is refused, and
/// the recorded session replays as it was; a live id stays refused too.
#[tokio::test]
async fn a_second_agent_answering_a_recorded_sessions_id_is_refused_and_the_history_stays() {
    let agents = json!({
        "a": {"command": "demo", "env": {"DEMO_SESSION_ID": "fixed-1"}},
        "b": {"command": "demo", "env": {"DEMO_SESSION_ID": "fixed-1"}},
    });
    let (d, _dir) = with_agents_file_and(&agents.to_string(), &["--state-dir", "{dir}/state"]);
    let first = sid(&create_on(&d, "alice", "a", json!({})).await);
    assert_eq!(first, "fixed-1");
    assert_eq!(reply(&d, &first, "remember this").await, "remember this");

    // Live: another agent's session under the same id is refused.
    let (status, body) = d.post("/session", Some("bob"), json!({"agent": "b"})).await.pair();
    assert_eq!((status, body["code"].as_str()), (502, Some("agent_start_failed")), "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains(r#"the id "fixed-1""#)), "{body}");

    // Closed, it is recorded: still refused, by either agent, and its history is untouched.
    assert_eq!(d.delete(&format!("/session/{first}")).await.status, 204);
    let before = Sse::connect(&d, &first, &last_event_id(0)).await.rest().await;
    assert!(chunk_text(&before).contains("remember this"), "the history: {before:?}");
    for agent in ["b", "a"] {
        let (status, body) = d.post("/session", Some("bob"), json!({"agent": agent})).await.pair();
        assert_eq!((status, body["code"].as_str()), (502, Some("agent_start_failed")), "{agent}: {body}");
        assert!(body["error"].as_str().is_some_and(|e| e.contains("which a recorded session has")), "{body}");
    }
    let after = Sse::connect(&d, &first, &last_event_id(0)).await.rest().await;
    assert_eq!(ids(&after), ids(&before), "the recorded history is the same");
    assert_eq!(chunk_text(&after), chunk_text(&before));
    let cwd = d.workspace.to_str().expect("utf-8").replace('/', "%2F");
    let listed = d.get(&format!("/workspace/{cwd}/sessions?include=ended")).await.ok();
    let records: Vec<&Value> = listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter(|s| s["sessionId"] == "fixed-1")
        .collect();
    assert_eq!(records.len(), 1, "{listed}");
    assert_eq!(records[0]["agent"], "a", "the record is still agent a's: {listed}");
}

/// Issue #27, finding 10: a value of the agent's configured `env` (an API key) that the agent
/// writes to stderr or puts in an error answer used to reach the HTTP answer, the `turn_error`
/// event every observer reads, the notification and the log. It is redacted on every one of them.
#[tokio::test]
async fn an_agents_configured_secret_never_leaves_through_its_stderr_or_its_errors() {
    const KEY: &str = "sk-test-7f3c9e1b2d4a6f80";
    let mut hook = Receiver::start(&[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let workspace: PathBuf = std::fs::canonicalize(dir.path()).expect("canonical");
    let config = workspace.join("mediatord.json");
    let file = json!({
        "agents": {
            "leaky": {"command": "demo", "env": {"DEMO_KEY": KEY}},
            // Dies at once, its key on stderr: the create's answer quotes that stderr.
            "early": {"command": "sh -c 'echo \"bad key $DEMO_KEY\" >&2; exit 3'", "env": {"DEMO_KEY": KEY}},
        },
        "serve": {"notify": [{"url": hook.url("/"), "events": ["turn_error"]}]},
    });
    std::fs::write(&config, file.to_string()).expect("write the config file");
    let root = workspace.to_str().expect("utf-8");
    let d = Daemon::start_in(
        &workspace,
        &["--workspace", root, "--config", config.to_str().expect("utf-8")],
        &[],
    );

    let (status, body) = d.post("/session", Some("alice"), json!({"agent": "early"})).await.pair();
    assert_eq!((status, body["code"].as_str()), (502, Some("agent_start_failed")), "{body}");
    let error = body["error"].as_str().expect("error");
    assert!(error.contains("bad key [redacted]") && !error.contains(KEY), "{error}");

    let sid = sid(&create_on(&d, "alice", "leaky", json!({})).await);
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    // The agent's error answer holds the key in its message and its data.
    let failed = d.prompt(&sid, Some("alice"), "leak DEMO_KEY").await;
    assert_eq!((failed.status, failed.body["code"].as_str()), (502, Some("agent_error")), "{}", failed.text);
    assert!(!failed.text.contains(KEY), "{}", failed.text);
    assert!(
        failed.text.contains("failed with DEMO_KEY=[redacted]: the value was [redacted]"),
        "{}",
        failed.text
    );
    let turn_error = find(&sse.until_type("turn_error").await, "turn_error").clone();
    assert_eq!(turn_error["message"], "failed with DEMO_KEY=[redacted]: the value was [redacted]");
    // The agent dies; what it wrote to stderr (the key, by `leak`) is quoted in the answer.
    let crashed = d.prompt(&sid, Some("alice"), "crash").await;
    assert_eq!(crashed.body["code"].as_str(), Some("agent_exited"), "{}", crashed.text);
    assert!(!crashed.text.contains(KEY) && crashed.text.contains("DEMO_KEY=[redacted]"), "{}", crashed.text);
    let events = sse.rest().await;
    let died = events
        .iter()
        .filter(|e| e.event == "turn_error")
        .map(|e| e.payload().to_string())
        .collect::<Vec<_>>();
    assert!(died.iter().all(|t| !t.contains(KEY)) && !died.is_empty(), "{died:?}");

    for _ in 0..2 {
        let delivered = hook.next().await;
        let raw = String::from_utf8_lossy(&delivered.raw).into_owned();
        assert_eq!(delivered.body["event"], "turn_error");
        assert!(!raw.contains(KEY) && raw.contains("[redacted]"), "{raw}");
    }
    let log = wait_stderr(&d, "DEMO_KEY=[redacted]").await;
    assert!(!log.contains(KEY), "the log holds the key:\n{log}");
    assert!(log.contains("bad key [redacted]"), "{log}");
}

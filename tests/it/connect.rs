//! `mediatord connect` (`docs/clients.md`): an editor's stdio agent that joins a daemon's shared
//! session over `/acp`, and keeps it through a dropped connection and a restarted daemon: every
//! update once, in order, or an error the editor can act on.

use std::time::Instant;

use serde_json::{Value, json};

use crate::support::*;

/// Waits (bounded) until `sid` runs a turn, as `GET /session/:id` says.
async fn running(d: &Daemon, sid: &str) {
    let deadline = Instant::now() + WAIT;
    while d.get(&format!("/session/{sid}")).await.ok()["hasActivePrompt"] != true {
        assert!(Instant::now() < deadline, "the turn never started");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await; // polling a status route
    }
}

fn prompt(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

fn tokens(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("tok{i} ")).collect()
}

#[tokio::test]
async fn an_editor_on_stdio_joins_the_session_answers_its_permission_request_and_the_file_is_written() {
    let d = Daemon::start(&[]);
    let mut editor = Editor::start(&d.base, &["--client-id", "zed"], &[]);
    let sid = editor.open_session(&d.workspace).await;
    let turn = editor.request("session/prompt", prompt(&sid, "write from-editor.txt hello editor")).await;
    let ask = editor.until(|m| is_request(m, "session/request_permission")).await;
    assert_eq!(ask["id"], "c-1", "the relay numbers the daemon's requests itself");
    editor.send(&json!({"jsonrpc": "2.0", "id": "c-1", "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})).await;
    let answer = editor.answer(turn).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(
        std::fs::read_to_string(d.workspace.join("from-editor.txt")).expect("written"),
        "hello editor"
    );
    // The editor sees ACP and nothing else: no daemon events, no envelopes, no echo of its prompt.
    for m in &editor.seen {
        let method = m["method"].as_str().unwrap_or_default();
        assert!(!method.starts_with("_qwen/") && !method.starts_with("_mediatord/"), "{m}");
        assert_ne!(m["params"]["update"]["_meta"]["source"], "bridge-echo", "{m}");
        assert_ne!(m["method"], "$/cancel_request", "an answered request is not withdrawn: {m}");
    }
    // Its vote is the editor's client id's, over ACP.
    let audit = d.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    assert_eq!(
        (audit["audit"][0]["voterClientId"].clone(), audit["audit"][0]["via"].clone()),
        (json!("zed"), json!("acp"))
    );
    assert!(editor.close().await.success());
}

#[tokio::test]
async fn a_dropped_connection_mid_turn_loses_and_repeats_nothing() {
    let proxy = Proxy::start(None).await;
    let d = Daemon::start(&["--public-url", &proxy.url()]);
    proxy.point_at(Some(d.port));
    let mut editor = Editor::start(&proxy.url(), &["--client-id", "zed"], &[]);
    let sid = editor.open_session(&d.workspace).await;
    // 60 updates at 40 a second; the connection drops after the tenth.
    let turn = editor.request("session/prompt", prompt(&sid, "stream 60 40")).await;
    editor.until(|m| m["params"]["update"]["content"]["text"] == "tok9 ").await;
    proxy.cut();
    let answer = editor.answer(turn).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(editor.chunks(), tokens(60), "every update once, in order");
    // A permission request pending across a drop is the same request to the editor, and its
    // answer after the reconnect decides it.
    let turn = editor.request("session/prompt", prompt(&sid, "write across.txt still here")).await;
    let ask = editor.until(|m| is_request(m, "session/request_permission")).await;
    proxy.cut();
    editor.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})).await;
    let answer = editor.answer(turn).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(std::fs::read_to_string(d.workspace.join("across.txt")).expect("written"), "still here");
    let asks = editor.seen.iter().filter(|m| is_request(m, "session/request_permission")).count();
    assert_eq!(asks, 1, "asked once, whatever the daemon asked again after the reconnect");
    assert!(editor.close().await.success());
}

#[tokio::test]
async fn a_restarted_daemon_resumes_the_session_and_the_turn_it_cut_short_is_an_error() {
    let home = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(home.path()).expect("canonical");
    let (workspace, state, xdg) = (root.join("ws"), root.join("state"), root.join("xdg"));
    std::fs::create_dir(&workspace).expect("workspace");
    // The editor reaches the daemons through a proxy (one address across the restart); they take
    // its address as theirs (`--public-url`), so the Host check lets it in.
    let proxy = Proxy::start(None).await;
    let public = proxy.url();
    let start = || {
        let env = [("XDG_STATE_HOME", xdg.to_str().expect("utf-8")), ("HOME", xdg.to_str().expect("utf-8"))];
        let args = ["--state-dir", state.to_str().expect("utf-8"), "--public-url", &public];
        Daemon::start_with(&workspace, &args, &env)
    };
    let mut first = start();
    proxy.point_at(Some(first.port));
    let mut editor = Editor::start(&proxy.url(), &["--client-id", "zed"], &[]);
    let sid = editor.open_session(&workspace).await;
    let done = editor.call("session/prompt", prompt(&sid, "stream 5")).await;
    assert_eq!(done["result"]["stopReason"], "end_turn");
    // A turn that outlives the daemon: the drain ends it (turn_error daemon_draining).
    let held = editor.request("session/prompt", prompt(&sid, "hold 60000")).await;
    running(&first, &sid).await;
    proxy.point_at(None);
    first.signal(rustix::process::Signal::TERM);
    assert!(first.wait_exit(WAIT).success());
    drop(first);
    let second = start();
    proxy.point_at(Some(second.port));
    // The drain ended the held turn (its agent ignores cancels) before the daemon stopped: the
    // editor's prompt is answered with that error.
    let cut_short = editor.answer(held).await;
    assert_eq!(cut_short["error"]["data"]["code"], "agent_exited", "{cut_short}");
    assert!(
        cut_short["error"]["message"].as_str().is_some_and(|m| m.contains("daemon_draining")),
        "{cut_short}"
    );
    // Connect reaches the new daemon by itself and resumes the session there (a prompt sent before
    // that would be answered `prompt_not_received`: the old daemon was gone).
    let deadline = Instant::now() + WAIT;
    while second.get(&format!("/session/{sid}")).await.status != 200 {
        assert!(Instant::now() < deadline, "connect never resumed the session on the new daemon");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await; // polling a status route
    }
    // The session lives on, resumed on the new daemon, on the editor's same session id.
    let again = editor.call("session/prompt", prompt(&sid, "stream 3")).await;
    assert_eq!(again["result"]["stopReason"], "end_turn", "{again}");
    let mut expected = tokens(5);
    expected.extend(tokens(3));
    assert_eq!(editor.chunks(), expected, "every update once, in order, across the restart");
    assert!(editor.close().await.success());
}

#[tokio::test]
async fn a_session_the_daemon_no_longer_has_ends_connect_with_an_error_the_editor_sees() {
    let proxy = Proxy::start(None).await;
    let d = Daemon::start(&["--public-url", &proxy.url()]);
    proxy.point_at(Some(d.port));
    let mut editor = Editor::start(&proxy.url(), &["--client-id", "zed"], &[]);
    let sid = editor.open_session(&d.workspace).await;
    assert_eq!(d.delete(&format!("/session/{sid}")).await.status, 204);
    let pending = editor.request("session/prompt", prompt(&sid, "hello")).await;
    let refused = editor.answer(pending).await;
    assert_eq!(refused["error"]["data"]["code"], "session_not_attached", "{refused}");
    // The daemon is reached again after a drop, but the session cannot be resumed (closed: on
    // any store, a closed session is never resumed): connect says so on stderr and exits 1, so
    // the editor sees its agent end.
    proxy.cut();
    assert_eq!(editor.exits().await.code(), Some(1));
}

/// An editor's garbage, a line over the size bound, a stray answer and an unknown method each get
/// a JSON-RPC error (or are dropped) and the relay serves on: it is not mistaken for the editor
/// closing its side.
#[tokio::test]
async fn an_editors_bad_input_gets_json_rpc_errors_and_the_relay_serves_on() {
    let d = Daemon::start(&[]);
    let mut editor = Editor::start(&d.base, &[], &[]);
    editor.send_line("{this is not json").await;
    let parse = editor.next().await;
    assert_eq!(
        (parse["id"].clone(), parse["error"]["code"].clone()),
        (Value::Null, json!(-32700)),
        "{parse}"
    );
    editor.send_line(&"x".repeat(11 << 20)).await;
    let oversized = editor.next().await;
    assert_eq!(
        (oversized["id"].clone(), oversized["error"]["code"].clone()),
        (Value::Null, json!(-32600)),
        "{oversized}"
    );
    editor.send(&json!({"jsonrpc": "2.0", "id": "c-99", "result": {}})).await;
    let sid = editor.open_session(&d.workspace).await;
    let unknown = editor.call("no/such/method", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    let answer = editor.call("session/prompt", prompt(&sid, "hello")).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(editor.close().await.success());
}

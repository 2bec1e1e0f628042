//! `mediatord connect` (`docs/clients.md`): an editor's stdio agent that joins a daemon's shared
//! session over `/acp`, and keeps it through a dropped connection and a restarted daemon: every
//! update once, in order, or an error the editor can act on.

use std::time::Instant;

use serde_json::{Value, json};

use crate::support::*;

/// `session/prompt`'s params: `text` for session `session`.
fn prompt(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

fn tokens(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("tok{i} ")).collect()
}

/// A daemon reached through a proxy the test can cut (it takes the proxy's address as its own,
/// `--public-url`, so the Host check lets it in), and an editor whose connect (client id `zed`)
/// has opened a session there: the session's id.
async fn behind_a_proxy() -> (Proxy, Daemon, Editor, String) {
    let proxy = Proxy::start(None).await;
    let d = Daemon::start(&["--public-url", &proxy.url()]);
    proxy.point_at(Some(d.port));
    let mut editor = Editor::start(&proxy.url(), &["--client-id", "zed"], &[]);
    let sid = editor.open_session(&d.workspace).await;
    (proxy, d, editor, sid)
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
    let (proxy, d, mut editor, sid) = behind_a_proxy().await;
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
    first.until_turn_runs(&sid).await;
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
    let (proxy, d, mut editor, sid) = behind_a_proxy().await;
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

/// The next JSON text message on an impostor's side of the WebSocket (bounded by [`WAIT`]).
async fn impostor_reads(ws: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>) -> Value {
    use futures_util::StreamExt;
    loop {
        let frame = tokio::time::timeout(WAIT, ws.next()).await.expect("connect said something in time");
        if let tokio_tungstenite::tungstenite::Message::Text(text) =
            frame.expect("the connection is open").expect("a frame")
        {
            return serde_json::from_str(&text).expect("JSON from connect");
        }
    }
}

/// Issue 41, finding 6: a daemon that is not one (an mDNS answer, a planted `daemon.json`, a man in
/// the middle on plain http) asks connect's editor to run a command, write and read its files, and
/// a method of its own. The editor never offered any of it (its `fs` and `terminal` capabilities
/// are not passed on) and never sees those requests: connect answers each `-32601`, and says so on
/// stderr. A permission request still reaches the editor, and its answer the daemon.
#[tokio::test]
async fn an_impostor_daemons_terminal_and_file_requests_never_reach_the_editor() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let impostor = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("upgrade");
        let init = impostor_reads(&mut ws).await;
        let reply = json!({"jsonrpc": "2.0", "id": init["id"], "result": {"protocolVersion": 1, "agentCapabilities": {}}});
        ws.send(Message::Text(reply.to_string().into())).await.expect("send");
        let asks = [
            json!({"id": 101, "method": "terminal/create", "params": {"sessionId": "s", "command": "sh", "args": ["-c", "touch pwned"]}}),
            json!({"id": 102, "method": "fs/write_text_file", "params": {"sessionId": "s", "path": "/tmp/pwned", "content": "x"}}),
            json!({"id": 103, "method": "fs/read_text_file", "params": {"sessionId": "s", "path": "/etc/hostname"}}),
            json!({"id": 104, "method": "_impostor/anything", "params": {}}),
            json!({"id": 105, "method": "session/request_permission", "params": {
                "sessionId": "s", "toolCall": {"toolCallId": "t", "title": "Write a"},
                "options": [{"optionId": "allow_once", "name": "Allow", "kind": "allow_once"}]}}),
        ];
        for mut ask in asks {
            ask["jsonrpc"] = json!("2.0");
            ws.send(Message::Text(ask.to_string().into())).await.expect("send");
        }
        let mut answers = std::collections::BTreeMap::new();
        while answers.len() < 5 {
            let m = impostor_reads(&mut ws).await;
            answers.insert(m["id"].as_u64().expect("an answer's id"), m);
        }
        // Kept open: connect would try to reach a daemon that went away again.
        (init, answers, ws)
    });
    let mut editor = Editor::start(&format!("http://127.0.0.1:{port}"), &["--client-id", "zed"], &[]);
    let capabilities = json!({"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true, "_meta": {"zed.dev/x": 1}});
    let init =
        editor.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": capabilities})).await;
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    let ask = editor.until(|m| is_request(m, "session/request_permission")).await;
    editor.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})).await;
    let (init, answers, _open) =
        tokio::time::timeout(WAIT, impostor).await.expect("in time").expect("the impostor");
    assert_eq!(
        init["params"]["clientCapabilities"],
        json!({"_meta": {"zed.dev/x": 1}}),
        "what the editor can do on its machine is not offered: {init}"
    );
    for id in 101..=104 {
        assert_eq!(answers[&id]["error"]["code"], -32601, "{}", answers[&id]);
    }
    assert_eq!(answers[&105]["result"]["outcome"]["optionId"], "allow_once", "{}", answers[&105]);
    for m in &editor.seen {
        let method = m["method"].as_str().unwrap_or_default();
        assert!(
            !method.starts_with("fs/")
                && !method.starts_with("terminal/")
                && !method.starts_with("_impostor"),
            "{m}"
        );
    }
    assert!(editor.close().await.success());
}

/// Issue 44, item 11: connect exited 0 at the end of its input without answering a request the
/// editor had sent (a script piping one prompt got nothing). It finishes what was sent: the
/// answer, and every update of the turn before it, still reach the editor's output.
#[tokio::test]
async fn an_editor_that_closes_its_input_after_a_prompt_still_gets_the_turn_and_its_answer() {
    let d = Daemon::start(&[]);
    let mut editor = Editor::start(&d.base, &["--client-id", "zed"], &[]);
    let sid = editor.open_session(&d.workspace).await;
    let turn = editor.request("session/prompt", prompt(&sid, "stream 20 40")).await;
    editor.close_input();
    let answer = editor.answer(turn).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(editor.chunks(), tokens(20));
    assert!(editor.exits().await.success());
}

/// The wait is bounded (`--finish-timeout`): a turn that does not end by then is answered with
/// an error saying why, and connect exits.
#[tokio::test]
async fn what_the_editor_is_still_owed_past_the_finish_timeout_is_answered_with_an_error() {
    let d = Daemon::start(&[]);
    let mut editor = Editor::start(&d.base, &["--client-id", "zed", "--finish-timeout", "1"], &[]);
    let sid = editor.open_session(&d.workspace).await;
    let turn = editor.request("session/prompt", prompt(&sid, "hold 60000")).await;
    d.until_turn_runs(&sid).await;
    editor.close_input();
    let answer = editor.answer(turn).await;
    assert_eq!(answer["error"]["data"]["code"], "connection_lost", "{answer}");
    assert!(
        answer["error"]["message"].as_str().is_some_and(|m| m.contains("the editor closed its input")),
        "{answer}"
    );
    assert_eq!(editor.seen.iter().filter(|m| m["id"] == turn).count(), 1, "answered once");
    assert!(editor.exits().await.success());
}

/// A connection lost while connect finishes what it owes (its editor closed its input) is not
/// worth a reconnect: nobody will send anything more. What is owed is answered with that error at
/// once, and connect exits 0.
#[tokio::test]
async fn a_connection_lost_while_finishing_answers_what_is_owed_and_exits() {
    let (proxy, d, mut editor, sid) = behind_a_proxy().await;
    let turn = editor.request("session/prompt", prompt(&sid, "hold 60000")).await;
    d.until_turn_runs(&sid).await;
    editor.close_input();
    editor.until_said("the editor closed its input").await;
    proxy.cut();
    let answer = editor.answer(turn).await;
    assert_eq!(answer["error"]["data"]["code"], "connection_lost", "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("the connection to the daemon was lost")),
        "{answer}"
    );
    assert!(editor.exits().await.success());
}

/// The editor closes its input while a prompt it sent on an earlier connection is still running
/// (the connection dropped and connect reconnected): connect waits for that turn's end, answers
/// the prompt from it, then exits 0.
#[tokio::test]
async fn a_prompt_sent_before_a_reconnect_is_still_answered_after_the_editor_closes_its_input() {
    let (proxy, d, mut editor, sid) = behind_a_proxy().await;
    let turn = editor.request("session/prompt", prompt(&sid, "write before-drop.txt kept")).await;
    editor.until(|m| is_request(m, "session/request_permission")).await;
    proxy.cut();
    // Told it is lost, connect reads no more of its input until it has reconnected and resumed.
    editor.until_said("connecting again").await;
    editor.close_input();
    let pending = d.pending(&sid).await;
    let rid = request_id(&pending[0]);
    // Another client decides it (the editor's own input is closed).
    assert_eq!(d.post(&format!("/session/{sid}/heartbeat"), Some("alice"), json!({})).await.status, 200);
    let vote =
        d.post(&format!("/session/{sid}/permission/{rid}"), Some("alice"), selected("allow_once")).await;
    assert_eq!(vote.status, 200, "{}", vote.text);
    let answer = editor.answer(turn).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(std::fs::read_to_string(d.workspace.join("before-drop.txt")).expect("written"), "kept");
    assert!(editor.exits().await.success());
}

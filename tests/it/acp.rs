//! `/acp` over WebSocket (`docs/protocol.md#16-acp`): the daemon as an ACP agent on the same
//! sessions, bus and mediator as REST, and what it does with input no client should send.

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

use crate::support::*;

/// A `session/new` in the daemon's workspace; the session id.
async fn new_session(ws: &mut AcpWs, d: &Daemon) -> String {
    let created = ws.call("session/new", json!({"cwd": d.workspace, "mcpServers": []})).await;
    created["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("session/new: {created}")).to_owned()
}

fn prompt(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

#[tokio::test]
async fn an_acp_client_prompts_answers_the_permission_request_and_the_file_is_written() {
    let d = Daemon::start(&[]);
    let (mut ws, init) = AcpWs::ready(&d, &[]).await;
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(init["agentInfo"]["name"], "mediatord");
    assert_eq!(init["agentCapabilities"]["_meta"]["mediatord"]["connectionId"], ws.connection_id.as_str());
    let sid = new_session(&mut ws, &d).await;
    let turn = ws.request("session/prompt", prompt(&sid, "write notes.txt hello over acp")).await;
    let ask = ws.until(|m| is_request(m, "session/request_permission")).await;
    assert_eq!(ask["params"]["sessionId"], sid.as_str());
    assert_eq!(ask["params"]["toolCall"]["title"], "Write notes.txt");
    let options: Vec<&str> = ask["params"]["options"]
        .as_array()
        .expect("options")
        .iter()
        .filter_map(|o| o["optionId"].as_str())
        .collect();
    assert_eq!(options, ["allow_once", "allow_always", "reject_once"]);
    ws.reply(&ask["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
    let answer = ws.answer(turn).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(std::fs::read_to_string(d.workspace.join("notes.txt")).expect("written"), "hello over acp");
    // The turn's updates came before its answer, as from an agent over stdio.
    let at = ws.seen.iter().position(|m| m["id"] == turn && m.get("result").is_some()).expect("answer");
    let tool_updates = ws.seen[..at]
        .iter()
        .filter(|m| m["method"] == "session/update")
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "tool_call_update")
        .count();
    assert!(tool_updates >= 1, "the tool call's completion came before the answer: {:#?}", ws.seen);
    // The vote is in the audit, cast over ACP by this connection's client id.
    let audit = d.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    assert_eq!(audit["audit"][0]["resolvedBy"], "vote");
    assert_eq!(audit["audit"][0]["via"], "acp");
}

#[tokio::test]
async fn a_rest_stream_and_an_acp_connection_see_the_same_updates_in_the_same_order() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let sid = new_session(&mut ws, &d).await;
    let mut sse = Sse::connect(&d, &sid, &last_event_id(0)).await;
    // A prompt from REST: the ACP client sees its echo and the agent's reply.
    d.prompt_async(&sid, Some("rest-client"), "stream 50").await;
    let rest: Vec<Value> = sse
        .until_type("turn_complete")
        .await
        .iter()
        .filter(|e| e.event == "session_update")
        .map(|e| e.payload()["update"].clone())
        .collect();
    ws.until(|m| is_event(m, "turn_complete")).await;
    assert_eq!(ws.updates(), rest);
    assert_eq!(rest.len(), 51, "the echo and 50 chunks");
    assert_eq!(rest[0]["sessionUpdate"], "user_message_chunk");
}

#[tokio::test]
async fn a_request_decided_over_rest_is_withdrawn_from_the_acp_client() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let sid = new_session(&mut ws, &d).await;
    let turn = ws.request("session/prompt", prompt(&sid, "write late.txt from rest")).await;
    let ask = ws.until(|m| is_request(m, "session/request_permission")).await;
    let rid = ask["params"]["_meta"]["mediatord/requestId"].as_str().expect("request id").to_owned();
    d.create(Some("rest-voter"), json!({})).await;
    assert_eq!(d.vote(&sid, &rid, Some("rest-voter"), selected("allow_once")).await.status, 200);
    let resolved = ws.until(|m| is_event(m, "permission_resolved")).await;
    assert_eq!(resolved["params"]["data"]["voterClientId"], "rest-voter");
    let withdrawn = ws.next().await.expect("the withdrawal");
    assert_eq!(
        withdrawn,
        json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": ask["id"]}})
    );
    assert_eq!(ws.answer(turn).await["result"]["stopReason"], "end_turn");
    // A late answer to the withdrawn request changes nothing, and the connection still serves.
    ws.reply(&ask["id"], json!({"outcome": {"outcome": "cancelled"}})).await;
    let listed = ws.call("session/list", json!({})).await;
    assert_eq!(listed["result"]["sessions"][0]["sessionId"], sid.as_str());
    let audit = d.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    assert_eq!(audit["audit"].as_array().map(Vec::len), Some(1));
    assert_eq!(audit["audit"][0]["outcome"]["optionId"], "allow_once");
}

#[tokio::test]
async fn garbage_unknown_methods_and_stray_answers_get_json_rpc_errors_and_the_connection_serves_on() {
    let d = Daemon::start(&[]);
    let mut ws = AcpWs::open(&d, &[]).await;
    let before = ws.call("session/list", json!({})).await;
    assert_eq!(before["error"]["data"]["code"], "not_initialized", "{before}");
    ws.call("initialize", json!({"protocolVersion": 1})).await;
    let again = ws.call("initialize", json!({"protocolVersion": 1})).await;
    assert_eq!(again["error"]["data"]["code"], "already_initialized");
    ws.send_text("{this is not json").await;
    let parse = ws.next().await.expect("an answer");
    assert_eq!((parse["id"].clone(), parse["error"]["code"].clone()), (Value::Null, json!(-32700)));
    ws.send_text("[1,2,3]").await;
    assert_eq!(ws.next().await.expect("an answer")["error"]["code"], -32600);
    ws.send_text(r#"{"jsonrpc":"2.0","foo":1}"#).await;
    assert_eq!(ws.next().await.expect("an answer")["error"]["code"], -32600);
    for method in ["no/such/method", "_qwen/workspace/memory", "_mediatord/nope"] {
        let unknown = ws.call(method, json!({})).await;
        assert_eq!(unknown["error"]["code"], -32601, "{method}: {unknown}");
        assert_eq!(unknown["error"]["message"], format!("Method not found: {method}"));
    }
    // Answers to requests the daemon never sent are dropped, not answered.
    ws.send(&json!({"jsonrpc": "2.0", "id": "perm-999", "result": {"outcome": {"outcome": "cancelled"}}}))
        .await;
    ws.send(&json!({"jsonrpc": "2.0", "id": 77, "error": {"code": 1, "message": "x"}})).await;
    let prompt_elsewhere = ws.call("session/prompt", prompt("no-such", "hi")).await;
    assert_eq!(prompt_elsewhere["error"]["data"]["code"], "session_not_attached", "{prompt_elsewhere}");
    let sid = new_session(&mut ws, &d).await;
    let empty = ws.call("session/prompt", json!({"sessionId": sid, "prompt": []})).await;
    assert_eq!(empty["error"]["data"]["code"], "invalid_prompt");
    assert_eq!(ws.call("session/prompt", prompt(&sid, "hello")).await["result"]["stopReason"], "end_turn");
}

#[tokio::test]
async fn a_message_over_the_size_bound_closes_the_socket_with_1009() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"session/list","params":{{"x":"{}"}}}}"#,
        "a".repeat(11 << 20)
    );
    ws.send_text_refused(huge).await;
    // The daemon stops reading at the frame's header and closes with 1009; the client, still
    // writing the rest, may see that close frame or only the reset that follows it.
    let ended = ws.end().await;
    assert!(
        matches!(&ended, Ended::Closed(1009, reason) if reason == "a message is larger than 10 MiB")
            || ended == Ended::Dropped,
        "{ended:?}"
    );
    // The daemon serves on.
    assert_eq!(d.get("/health").await.status, 200);
}

/// The daemon writes its text frames itself, a batch in one write, and the WebSocket library its
/// pongs: pings sent while a burst is written are each answered with their payload, between whole
/// frames, and every message of the burst arrives whole and in order.
#[tokio::test]
async fn pings_during_a_burst_are_answered_between_whole_frames_and_nothing_is_torn() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let sid = new_session(&mut ws, &d).await;
    // Fewer than the ring holds: a slow reader is never evicted.
    d.prompt_async(&sid, Some("rest"), "stream 5000").await;
    let pings: Vec<Vec<u8>> = (0..50u8).map(|i| vec![b'p', i]).collect();
    for ping in &pings {
        ws.ping(ping).await;
        ws.next().await.expect("a message of the burst");
    }
    ws.until(|m| is_event(m, "turn_complete")).await;
    // Answered after every ping was read, so after every pong was written.
    assert_eq!(ws.call("session/list", json!({})).await["result"]["sessions"][0]["sessionId"], sid.as_str());
    assert_eq!(ws.pongs, pings);
    let texts: Vec<String> = ws.updates()[1..].iter().map(|u| u["content"]["text"].to_string()).collect();
    let expected: Vec<String> = (0..5000).map(|i| format!("\"tok{i} \"")).collect();
    assert_eq!(texts, expected);
}

/// A message in fragments (a text frame, then continuations) is one message.
#[tokio::test]
async fn a_fragmented_message_is_read_as_one() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let text = r#"{"jsonrpc":"2.0","id":"frag","method":"session/list","params":{}}"#.as_bytes();
    let (a, rest) = text.split_at(10);
    let (b, c) = rest.split_at(20);
    ws.send_frame(Frame::message(a.to_vec(), OpCode::Data(Data::Text), false)).await;
    ws.send_frame(Frame::message(b.to_vec(), OpCode::Data(Data::Continue), false)).await;
    ws.send_frame(Frame::message(c.to_vec(), OpCode::Data(Data::Continue), true)).await;
    let answer = ws.until(|m| m["id"] == "frag").await;
    assert_eq!(answer["result"], json!({"sessions": []}), "{answer}");
}

/// A client's frame must be masked (RFC 6455 §5.1): an unmasked one closes the socket with 4002.
#[tokio::test]
async fn an_unmasked_frame_from_the_client_closes_with_4002() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let text = br#"{"jsonrpc":"2.0","id":77,"method":"session/list"}"#;
    let mut frame = vec![0x81, u8::try_from(text.len()).expect("short")];
    frame.extend_from_slice(text);
    ws.send_raw(&frame).await;
    assert_eq!(ws.end().await, Ended::Closed(4002, "not a WebSocket frame the daemon reads".into()));
    assert!(ws.seen.iter().all(|m| m["id"] != 77), "the unmasked request was not served: {:#?}", ws.seen);
}

/// A text frame must be UTF-8: one that is not closes the socket with 4002, unanswered.
#[tokio::test]
async fn a_text_frame_that_is_not_utf8_closes_with_4002() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    ws.send_frame(Frame::message(b"{\"x\":\"\xff\xfe\"}".to_vec(), OpCode::Data(Data::Text), true)).await;
    assert_eq!(ws.end().await, Ended::Closed(4002, "not a WebSocket frame the daemon reads".into()));
}

/// The close handshake (RFC 6455 §5.5.1): a client's close is answered with a close of the same
/// code, and the connection ends.
#[tokio::test]
async fn a_close_from_the_client_is_answered_with_a_close_and_the_connection_ends() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let id = ws.connection_id.clone();
    ws.close(1000, "bye").await;
    let ended = ws.end().await;
    assert!(matches!(ended, Ended::Closed(1000, _)), "{ended:?}");
    // The connection is gone: its id no longer names one.
    let stream = send(
        http().get(d.url("/acp")).header("accept", "text/event-stream").header("acp-connection-id", &id),
    )
    .await;
    assert_eq!(stream.status, 404);
}

const TOKEN: &str = "acp-operator-secret";

#[tokio::test]
async fn the_upgrade_is_behind_the_perimeter_and_a_browser_may_offer_its_token_as_a_subprotocol() {
    use base64::Engine;
    let d = Daemon::start(&["--token", TOKEN]);
    let refused = AcpWs::try_open(&d, &[]).await.err().expect("no token: refused");
    assert!(refused.starts_with("401 "), "{refused}");
    let wrong = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("not-it");
    let refused =
        AcpWs::try_open(&d, &[("Sec-WebSocket-Protocol", &format!("acp, qwen-bearer.{wrong}"))]).await;
    assert!(refused.err().is_some_and(|e| e.starts_with("401 ")));
    let foreign = AcpWs::try_open(
        &d,
        &[("Authorization", &format!("Bearer {TOKEN}")), ("Origin", "http://evil.example")],
    )
    .await;
    assert!(foreign.err().is_some_and(|e| e.starts_with("403 ") && e.contains("origin_denied")));
    let (mut ws, _) = AcpWs::ready(&d, &[("Authorization", &format!("Bearer {TOKEN}"))]).await;
    assert_eq!(ws.protocol, None);
    assert_eq!(ws.call("session/list", json!({})).await["result"]["sessions"], json!([]));
    // The browser's way: the token as `qwen-bearer.<base64url>` beside a subprotocol the daemon
    // echoes; the one carrying the token is never echoed.
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(TOKEN);
    let offered = format!("acp, qwen-bearer.{encoded}");
    let mut browser = AcpWs::open(&d, &[("Sec-WebSocket-Protocol", &offered)]).await;
    assert_eq!(browser.protocol.as_deref(), Some("acp"));
    let init = browser.call("initialize", json!({"protocolVersion": 1})).await;
    assert_eq!(init["result"]["protocolVersion"], 1);
}

#[tokio::test]
async fn an_observer_device_watches_over_acp_but_is_never_asked_and_cannot_prompt_or_vote() {
    let d = Daemon::start(&["--token", TOKEN]);
    let (device_id, credential) = d.pair_device(Some(TOKEN), "wall screen", "observer").await;
    let op = [("Authorization", format!("Bearer {TOKEN}"))];
    let created = send(
        http().post(d.url("/session")).bearer_auth(TOKEN).header("X-Qwen-Client-Id", "op").json(&json!({})),
    )
    .await
    .ok();
    let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
    let bearer = format!("Bearer {credential}");
    let (mut watcher, _) = AcpWs::ready(&d, &[("Authorization", &bearer)]).await;
    let loaded =
        watcher.call("session/load", json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []})).await;
    assert_eq!(loaded["result"]["_meta"]["mediatord"]["clientId"], device_id.as_str(), "{loaded}");
    let new = watcher.call("session/new", json!({"cwd": d.workspace, "mcpServers": []})).await;
    assert_eq!(
        (new["error"]["code"].clone(), new["error"]["data"]["code"].clone()),
        (json!(-32003), json!("read_only_device"))
    );
    let prompt_refused = watcher.call("session/prompt", prompt(&sid, "hello")).await;
    assert_eq!(prompt_refused["error"]["data"]["code"], "read_only_device");
    // A request raised by the operator's prompt reaches the observer as an event, not as a request.
    let mut sse = Sse::connect(&d, &sid, &op).await;
    let raised = send(
        http()
            .post(d.url(&format!("/session/{sid}/prompt")))
            .bearer_auth(TOKEN)
            .header("X-Qwen-Client-Id", "op")
            .header("Prefer", "respond-async")
            .json(&text_prompt("write seen.txt x")),
    )
    .await;
    assert_eq!(raised.status, 202);
    let request = sse.until_type("permission_request").await.last().expect("request").payload().clone();
    let event = watcher.until(|m| is_event(m, "permission_request")).await;
    assert_eq!(event["params"]["data"]["requestId"], request["requestId"]);
    let vote = watcher.call("session/permission", json!({"sessionId": sid, "requestId": request["requestId"], "outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
    assert_eq!(vote["error"]["data"]["code"], "read_only_device");
    let voted = send(
        http()
            .post(d.url(&format!("/session/{sid}/permission/{}", request_id(&request))))
            .bearer_auth(TOKEN)
            .header("X-Qwen-Client-Id", "op")
            .json(&selected("reject_once")),
    )
    .await;
    assert_eq!(voted.status, 200);
    watcher.until(|m| is_event(m, "turn_complete")).await;
    assert!(!watcher.seen.iter().any(|m| is_request(m, "session/request_permission")), "{:#?}", watcher.seen);
}

#[tokio::test]
async fn a_paired_browser_offers_its_device_credential_as_a_subprotocol_and_no_cookie_is_one() {
    use base64::Engine;
    let d = Daemon::start(&["--token", TOKEN]);
    let (device_id, credential) = d.pair_device(Some(TOKEN), "phone", "voter").await;
    let cookie = format!("mediatord_device={credential}");
    let own = format!("http://127.0.0.1:{}", d.port);
    let by_cookie = AcpWs::try_open(&d, &[("Cookie", &cookie), ("Origin", &own)]).await;
    assert!(by_cookie.err().is_some_and(|e| e.starts_with("401 ")), "a cookie is no credential");
    let offered =
        format!("acp, qwen-bearer.{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&credential));
    let foreign =
        AcpWs::try_open(&d, &[("Sec-WebSocket-Protocol", &offered), ("Origin", "http://evil.example")]).await;
    assert!(foreign.err().is_some_and(|e| e.starts_with("403 ") && e.contains("origin_denied")));
    let mut ws = AcpWs::open(&d, &[("Sec-WebSocket-Protocol", &offered), ("Origin", &own)]).await;
    assert_eq!(ws.protocol.as_deref(), Some("acp"));
    ws.call("initialize", json!({"protocolVersion": 1})).await;
    let created = ws.call("session/new", json!({"cwd": d.workspace, "mcpServers": []})).await;
    assert_eq!(created["result"]["_meta"]["mediatord"]["clientId"], device_id.as_str(), "{created}");
}

#[tokio::test]
async fn under_consensus_two_acp_clients_must_agree_and_each_answer_is_a_ballot() {
    let d = Daemon::start(&["--permission-policy", "consensus"]);
    let (mut a, _) = AcpWs::ready(&d, &[("X-Qwen-Client-Id", "ada")]).await;
    let (mut b, _) = AcpWs::ready(&d, &[("X-Qwen-Client-Id", "bob")]).await;
    let sid = new_session(&mut a, &d).await;
    let joined =
        b.call("session/load", json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []})).await;
    assert_eq!(joined["result"]["_meta"]["mediatord"]["clientId"], "bob");
    let turn = a.request("session/prompt", prompt(&sid, "write agreed.txt both")).await;
    let ask_a = a.until(|m| is_request(m, "session/request_permission")).await;
    let ask_b = b.until(|m| is_request(m, "session/request_permission")).await;
    assert_eq!(
        ask_a["params"]["_meta"]["mediatord/requestId"],
        ask_b["params"]["_meta"]["mediatord/requestId"]
    );
    assert_eq!(ask_a["params"]["_meta"]["mediatord/policy"], "consensus");
    let allow = json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});
    a.reply(&ask_a["id"], allow.clone()).await;
    let partial = b.until(|m| is_event(m, "permission_partial_vote")).await;
    assert_eq!(
        (partial["params"]["data"]["votesReceived"].clone(), partial["params"]["data"]["quorum"].clone()),
        (json!(1), json!(2))
    );
    assert!(!d.workspace.join("agreed.txt").exists(), "one ballot of two decides nothing");
    b.reply(&ask_b["id"], allow).await;
    assert_eq!(a.answer(turn).await["result"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(d.workspace.join("agreed.txt")).expect("written"), "both");
    let audit = d.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    let ballots: Vec<&str> = audit["audit"][0]["ballots"]
        .as_array()
        .expect("ballots")
        .iter()
        .filter_map(|b| b["clientId"].as_str())
        .collect();
    assert_eq!(ballots, ["ada", "bob"]);
    // Each answered its own request: nothing was withdrawn from either.
    b.until(|m| is_event(m, "turn_complete")).await;
    for ws in [&a, &b] {
        assert!(!ws.seen.iter().any(|m| m["method"] == "$/cancel_request"), "{:#?}", ws.seen);
    }
}

/// The body of an `initialize` over Streamable HTTP (`POST /acp`).
fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
}

/// `count` Streamable HTTP `initialize`s, 16 at a time: each its own ACP connection or a refusal.
async fn initializes(d: &Daemon, count: usize) -> Vec<Reply> {
    let client = http();
    futures_util::stream::iter(0..count)
        .map(|_| send(client.post(d.url("/acp")).json(&initialize())))
        .buffer_unordered(16)
        .collect::<Vec<Reply>>()
        .await
}

/// A daemon allowed more TCP connections than the ACP door's 1024 allows as many ACP connections
/// (ten thousand watchers' WebSockets), and still refuses the one past them.
#[tokio::test]
async fn the_acp_connections_follow_a_larger_connection_cap() {
    let d = Daemon::start(&["--max-connections", "1100"]);
    let answers = initializes(&d, 1101).await;
    let opened = answers.iter().filter(|r| r.status == 200).count();
    let refused: Vec<&Reply> = answers.iter().filter(|r| r.status == 503).collect();
    assert_eq!((opened, refused.len()), (1100, 1));
    assert_eq!(refused[0].body["code"], "acp_connection_limit", "{}", refused[0].text);
}

#[tokio::test]
async fn ten_thousand_initializes_get_a_connection_or_a_503_and_memory_stays_bounded() {
    let d = Daemon::start(&[]);
    let before = d.memory_kib("VmRSS");
    let answers = initializes(&d, 10_000).await;
    let opened: Vec<&Reply> = answers.iter().filter(|r| r.status == 200).collect();
    let refused =
        answers.iter().filter(|r| r.status == 503 && r.body["code"] == "acp_connection_limit").count();
    assert_eq!((opened.len(), refused), (1024, 10_000 - 1024));
    assert_eq!(opened[0].body["result"]["protocolVersion"], 1);
    let grown = d.memory_kib("VmRSS").saturating_sub(before);
    assert!(grown < 48 * 1024, "1024 idle ACP connections cost {grown} KiB");
    // Ending one makes room for one more.
    let client = http();
    let id = opened[0].header("acp-connection-id").expect("Acp-Connection-Id").to_owned();
    let ended = send(client.delete(d.url("/acp")).header("Acp-Connection-Id", &id)).await;
    assert_eq!(ended.status, 202);
    assert_eq!(send(client.post(d.url("/acp")).json(&initialize())).await.status, 200);
    assert_eq!(send(client.post(d.url("/acp")).json(&initialize())).await.status, 503);
}

#[tokio::test]
async fn a_websocket_client_that_never_reads_is_closed_and_the_session_goes_on() {
    let d = Daemon::start(&["--writer-idle-timeout-ms", "300"]);
    let (mut ws, _) = AcpWs::ready_small_buffer(&d).await;
    let sid = new_session(&mut ws, &d).await;
    // From here on the client reads nothing; the agent streams far more than the socket holds.
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    d.prompt_async(&sid, Some("rest"), "stream 20000").await;
    let turn = sse.until_type("turn_complete").await;
    assert_eq!(turn.iter().filter(|e| e.event == "session_update").count(), 20_001);
    wait_stderr(&d, "closing a connection whose socket accepted no bytes").await;
    assert_eq!(d.prompt(&sid, Some("rest"), "hello").await.status, 200);
}

#[tokio::test]
async fn the_daemons_drain_closes_websockets_with_1001_after_the_terminal_event() {
    let mut d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let sid = new_session(&mut ws, &d).await;
    d.signal(rustix::process::Signal::TERM);
    let closed = ws.until(|m| is_event(m, "session_closed")).await;
    assert_eq!(closed["params"]["data"], json!({"sessionId": sid, "reason": "daemon_shutdown"}));
    assert_eq!(ws.end().await, Ended::Closed(1001, "the daemon is shutting down".into()));
    assert!(d.wait_exit(WAIT).success());
}

#[tokio::test]
async fn revoking_a_device_closes_its_websocket_at_once() {
    let d = Daemon::start(&["--token", TOKEN]);
    let (device_id, credential) = d.pair_device(Some(TOKEN), "laptop", "voter").await;
    let (mut ws, _) = AcpWs::ready(&d, &[("Authorization", &format!("Bearer {credential}"))]).await;
    assert_eq!(ws.call("session/list", json!({})).await["result"]["sessions"], json!([]));
    let revoked = send(http().delete(d.url(&format!("/devices/{device_id}"))).bearer_auth(TOKEN)).await;
    assert_eq!(revoked.status, 204);
    assert_eq!(ws.end().await, Ended::Closed(1008, "this device was revoked".into()));
    let again = AcpWs::try_open(&d, &[("Authorization", &format!("Bearer {credential}"))]).await;
    assert!(again.err().is_some_and(|e| e.starts_with("401 ")));
}

/// A device's `/acp` connections hold places of its stream bounds (`docs/protocol.md#154`) as its
/// SSE streams do, and so do the sessions it attaches over them: one device cannot take the
/// connections, or a session's readers, that the operator keeps for itself.
#[tokio::test]
async fn a_devices_acp_connections_and_the_sessions_they_attach_are_within_its_stream_bounds() {
    let d = Daemon::start(&["--token", TOKEN]);
    let (_, credential) = d.pair_device(Some(TOKEN), "laptop", "voter").await;
    let bearer = format!("Bearer {credential}");
    let created = send(
        http().post(d.url("/session")).bearer_auth(TOKEN).header("X-Qwen-Client-Id", "op").json(&json!({})),
    )
    .await
    .ok();
    let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
    let load = json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []});
    let mut sockets = Vec::new();
    for _ in 0..8 {
        sockets.push(AcpWs::ready(&d, &[("Authorization", &bearer)]).await.0);
    }
    let ninth = AcpWs::try_open(&d, &[("Authorization", &bearer)]).await.err().expect("the ninth refused");
    assert!(ninth.starts_with("429 ") && ninth.contains(r#""scope":"device""#), "{ninth}");
    let sse = send(http().get(d.url(&format!("/session/{sid}/events"))).bearer_auth(&credential)).await;
    assert_eq!((sse.status, sse.body["scope"].clone()), (429, json!("device")));
    // Two of them attach the session; a third would be the device's third reader of it.
    for ws in &mut sockets[..2] {
        assert!(ws.call("session/load", load.clone()).await["result"].is_object());
    }
    let third = sockets[2].call("session/load", load.clone()).await;
    assert_eq!(
        (
            third["error"]["code"].clone(),
            third["error"]["data"]["code"].clone(),
            third["error"]["data"]["scope"].clone()
        ),
        (json!(-32005), json!("stream_limit_exceeded"), json!("device_session")),
        "{third}"
    );
    // Detaching frees the session's place.
    sockets[0].call("_qwen/session/detach", json!({"sessionId": sid})).await;
    assert!(sockets[2].call("session/load", load).await["result"].is_object());
    // The operator is not counted: it connects and follows the session.
    let (mut operator, _) = AcpWs::ready(&d, &[("Authorization", &format!("Bearer {TOKEN}"))]).await;
    let watched =
        operator.call("session/load", json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []})).await;
    assert!(watched["result"].is_object(), "{watched}");
}

/// `/acp` is behind the perimeter every route is behind: a foreign `Host` or `Origin` is refused
/// before anything else, every credential failure is the one identical `401` (over `POST`, `GET`,
/// `DELETE` and the WebSocket upgrade, a token offered as a subprotocol included), and a message
/// over the body cap is `413` before it is read.
#[tokio::test]
async fn the_perimeter_answers_acp_as_it_answers_every_route() {
    use base64::Engine;
    let d = Daemon::start(&["--token", TOKEN]);
    let bearer = format!("Bearer {TOKEN}");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}});
    let host = format!("evil.example:{}", d.port);
    let post = || http().post(d.url("/acp")).bearer_auth(TOKEN);
    let foreign_host = send(post().header("Host", &host).json(&init)).await;
    assert_eq!((foreign_host.status, foreign_host.body["code"].clone()), (403, json!("host_not_allowed")));
    let ws_host = AcpWs::try_open(&d, &[("Authorization", &bearer), ("Host", &host)]).await;
    assert!(ws_host.err().is_some_and(|e| e.starts_with("403 ") && e.contains("host_not_allowed")));
    let foreign_origin = send(post().header("Origin", "http://evil.example").json(&init)).await;
    assert_eq!((foreign_origin.status, foreign_origin.body["code"].clone()), (403, json!("origin_denied")));

    let unauthorized = r#"401 {"error":"Unauthorized"}"#;
    let mut refusals = Vec::new();
    for auth in [None, Some("Bearer wrong"), Some("Basic d3Jvbmc=")] {
        for req in [
            http().post(d.url("/acp")).json(&init),
            http().get(d.url("/acp")).header("Accept", "text/event-stream"),
            http().delete(d.url("/acp")).header("Acp-Connection-Id", "x"),
        ] {
            let req = match auth {
                Some(a) => req.header("Authorization", a),
                None => req,
            };
            let res = send(req).await;
            let challenge = res.header("www-authenticate").map(str::to_owned);
            refusals.push((format!("{} {}", res.status, res.text), challenge));
        }
    }
    assert!(
        refusals.iter().all(|r| *r == (unauthorized.to_owned(), Some("Bearer".to_owned()))),
        "{refusals:#?}"
    );
    let wrong = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("wrong");
    for headers in [
        vec![],
        vec![("Authorization", "Bearer wrong".to_owned())],
        vec![("Sec-WebSocket-Protocol", format!("acp, qwen-bearer.{wrong}"))],
        vec![("Sec-WebSocket-Protocol", "acp, qwen-bearer.!!not-base64".to_owned())],
    ] {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let refused = AcpWs::try_open(&d, &headers).await.err().expect("refused");
        assert_eq!(refused, unauthorized, "{headers:?}");
    }

    let oversized = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"x":"{}"}}}}"#,
        "a".repeat(11 << 20)
    );
    let big = send(post().header("Content-Type", "application/json").body(oversized)).await;
    assert_eq!((big.status, big.body["code"].clone()), (413, json!("body_too_large")));
    assert_eq!(send(post().json(&init)).await.status, 200, "the daemon serves on");
}

/// Under `local-only`, a connection from a loopback peer is asked, and its answer decides (the
/// peer address is the socket's, as for a REST vote).
#[tokio::test]
async fn under_local_only_a_loopback_connection_is_asked_and_decides() {
    let d = Daemon::start(&["--permission-policy", "local-only"]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let sid = new_session(&mut ws, &d).await;
    let turn = ws.request("session/prompt", prompt(&sid, "write local.txt near")).await;
    let ask = ws.until(|m| is_request(m, "session/request_permission")).await;
    assert_eq!(ask["params"]["_meta"]["mediatord/policy"], "local-only", "{ask}");
    ws.reply(&ask["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
    assert_eq!(ws.answer(turn).await["result"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(d.workspace.join("local.txt")).expect("written"), "near");
}

/// The user messages of `ws`'s updates so far: the echoes of prompts, their texts.
fn echoes(ws: &AcpWs) -> Vec<String> {
    ws.updates()
        .iter()
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// A plain client is not sent back the echo of its own prompt (it knows what it sent, as over
/// stdio), but is sent everyone else's; a client that asks at `initialize` gets its own too.
#[tokio::test]
async fn an_acp_client_is_sent_the_echo_of_its_own_prompt_only_when_it_asked_for_it() {
    let d = Daemon::start(&[]);
    let (mut plain, _) = AcpWs::ready(&d, &[("X-Qwen-Client-Id", "plain")]).await;
    let mut echoing = AcpWs::open(&d, &[("X-Qwen-Client-Id", "echoing")]).await;
    let init = json!({"protocolVersion": 1, "_meta": {"mediatord/echoOwnPrompts": true}});
    assert_eq!(echoing.call("initialize", init).await["result"]["protocolVersion"], 1);
    let sid = new_session(&mut plain, &d).await;
    echoing.call("session/resume", json!({"sessionId": sid, "cwd": d.workspace})).await;
    assert_eq!(
        plain.call("session/prompt", prompt(&sid, "from plain")).await["result"]["stopReason"],
        "end_turn"
    );
    echoing.until(|m| is_event(m, "turn_complete")).await;
    assert_eq!(
        echoing.call("session/prompt", prompt(&sid, "from echoing")).await["result"]["stopReason"],
        "end_turn"
    );
    plain.until(|m| is_event(m, "turn_complete")).await;
    assert_eq!(echoes(&plain), ["from echoing"]);
    assert_eq!(echoes(&echoing), ["from plain", "from echoing"]);
}

/// `session/cancel` sent as ACP sends it, a notification, cancels the turn: the agent is told,
/// the request it was waiting on is resolved `cancel`, and the prompt is answered `cancelled`.
#[tokio::test]
async fn a_session_cancel_notification_cancels_the_turn_and_its_pending_request() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let sid = new_session(&mut ws, &d).await;
    let turn = ws.request("session/prompt", prompt(&sid, "write never.txt no")).await;
    ws.until(|m| is_request(m, "session/request_permission")).await;
    ws.send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})).await;
    let resolved = ws.until(|m| is_event(m, "permission_resolved")).await;
    assert_eq!(resolved["params"]["data"]["resolvedBy"], "cancel", "{resolved}");
    // The turn's end and the request's resolution race (the agent is told first, as ACP orders
    // it): the answer may have come before the resolution.
    let answered = |m: &Value| m.get("method").is_none() && m["id"] == turn;
    let answer = match ws.seen.iter().find(|m| answered(m)).cloned() {
        Some(answer) => answer,
        None => ws.answer(turn).await,
    };
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    assert!(!d.workspace.join("never.txt").exists());
}

/// A client that joins a session without its history (`session/resume`) while a request is
/// pending is asked about it at once: it may be the one who decides.
#[tokio::test]
async fn a_client_joining_a_session_is_asked_about_the_request_already_pending() {
    let d = Daemon::start(&[]);
    let sid = d.join("rest").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let raised = d.raise(&sid, &mut sse, Some("rest"), "write joined.txt late").await;
    let (mut ws, _) = AcpWs::ready(&d, &[("X-Qwen-Client-Id", "late")]).await;
    let resumed = ws.call("session/resume", json!({"sessionId": sid, "cwd": d.workspace})).await;
    assert_eq!(resumed["result"]["_meta"]["mediatord"]["clientId"], "late", "{resumed}");
    // With no replay the stream starts at the newest event.
    let start = &resumed["result"]["_meta"]["mediatord"]["startEventId"];
    assert!(start.as_u64().is_some_and(|s| s >= 2), "{resumed}");
    assert_eq!(*start, resumed["result"]["_meta"]["mediatord"]["lastEventId"]);
    // Asked before the answer, which follows what the lane had to say when it opened.
    let ask = ws.seen.iter().find(|m| is_request(m, "session/request_permission")).cloned();
    let ask = ask.expect("asked on joining");
    assert_eq!(ask["params"]["_meta"]["mediatord/requestId"], raised["requestId"]);
    ws.reply(&ask["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
    sse.until_type("turn_complete").await;
    assert_eq!(std::fs::read_to_string(d.workspace.join("joined.txt")).expect("written"), "late");
}

/// Leaving a session (`_qwen/session/detach`) with a prompt of this connection still running
/// answers that prompt at once: its session is gone for this client.
#[tokio::test]
async fn detaching_answers_the_prompt_still_running_with_session_not_found() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let sid = new_session(&mut ws, &d).await;
    let turn = ws.request("session/prompt", prompt(&sid, "write left.txt behind")).await;
    ws.until(|m| is_request(m, "session/request_permission")).await;
    let detach = ws.request("_qwen/session/detach", json!({"sessionId": sid})).await;
    let cut = ws.answer(turn).await;
    assert_eq!(
        (cut["error"]["code"].clone(), cut["error"]["data"]["code"].clone()),
        (json!(-32002), json!("session_not_found")),
        "{cut}"
    );
    assert_eq!(ws.answer(detach).await["result"], json!({}));
    let again = ws.call("session/prompt", prompt(&sid, "hello")).await;
    assert_eq!(again["error"]["data"]["code"], "session_not_attached");
}

/// `_qwen/session/detach` from a connection that never attached the session takes its client id
/// off the session (a client registered over REST leaves through its ACP twin).
#[tokio::test]
async fn detaching_a_session_never_attached_here_takes_the_client_off_it() {
    let d = Daemon::start(&[]);
    let sid = d.join("twin").await;
    let (mut ws, _) = AcpWs::ready(&d, &[("X-Qwen-Client-Id", "twin")]).await;
    let clients = |listed: &Value| listed["result"]["sessions"][0]["clientCount"].clone();
    assert_eq!(clients(&ws.call("session/list", json!({})).await), 1);
    assert_eq!(ws.call("_qwen/session/detach", json!({"sessionId": sid})).await["result"], json!({}));
    assert_eq!(clients(&ws.call("session/list", json!({})).await), 0);
}

/// Waits on `sse` for the echo of prompt `text`: it is published when the prompt is queued.
async fn queued_echo(sse: &mut Sse, text: &str) {
    sse.until(|e| e.event == "session_update" && e.payload()["update"]["content"]["text"] == text).await;
}

/// A prompt whose turn the agent's exit cut short is answered with the REST twin's error.
#[tokio::test]
async fn a_prompt_cut_short_by_the_agents_exit_is_answered_agent_exited() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let sid = new_session(&mut ws, &d).await;
    let cut = ws.call("session/prompt", prompt(&sid, "crash 3")).await;
    assert_eq!(
        (cut["error"]["code"].clone(), cut["error"]["data"]["code"].clone()),
        (json!(-32005), json!("agent_exited")),
        "{cut}"
    );
}

/// `session/close` ends the session for everyone: a prompt another connection had queued is
/// answered `session_not_found`, and that connection sees the session closed.
#[tokio::test]
async fn closing_a_session_ends_it_for_every_client_and_answers_their_queued_prompts() {
    let d = Daemon::start(&[]);
    let (mut a, _) = AcpWs::ready(&d, &[("X-Qwen-Client-Id", "ada")]).await;
    let (mut b, _) = AcpWs::ready(&d, &[("X-Qwen-Client-Id", "bob")]).await;
    let sid = new_session(&mut a, &d).await;
    b.call("session/resume", json!({"sessionId": sid, "cwd": d.workspace})).await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    a.request("session/prompt", prompt(&sid, "write held.txt up")).await;
    a.until(|m| is_request(m, "session/request_permission")).await;
    let queued = a.request("session/prompt", prompt(&sid, "never runs")).await;
    queued_echo(&mut sse, "never runs").await;
    assert_eq!(b.call("session/close", json!({"sessionId": sid})).await["result"], json!({}));
    let cut = a.answer(queued).await;
    assert_eq!(cut["error"]["data"]["code"], "session_not_found", "{cut}");
    let closed = a.until(|m| is_event(m, "session_closed")).await;
    assert_eq!(
        (closed["params"]["data"]["reason"].clone(), closed["params"]["data"]["closedBy"].clone()),
        (json!("closed_by_client"), json!("bob")),
        "{closed}"
    );
    assert_eq!(d.get(&format!("/session/{sid}")).await.status, 404);
}

/// A prompt queued when the daemon begins to drain never runs and is answered `daemon_draining`.
#[tokio::test]
async fn a_prompt_queued_when_the_daemon_drains_is_answered_daemon_draining() {
    let mut d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let sid = new_session(&mut ws, &d).await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    ws.request("session/prompt", prompt(&sid, "write held.txt up")).await;
    ws.until(|m| is_request(m, "session/request_permission")).await;
    let queued = ws.request("session/prompt", prompt(&sid, "never runs")).await;
    queued_echo(&mut sse, "never runs").await;
    d.signal(rustix::process::Signal::TERM);
    let cut = ws.answer(queued).await;
    assert_eq!(
        (cut["error"]["code"].clone(), cut["error"]["data"]["code"].clone()),
        (json!(-32005), json!("daemon_draining")),
        "{cut}"
    );
    assert!(d.wait_exit(WAIT).success());
}

/// Over one WebSocket `session/load`'s answer follows the history it replays, as an agent over
/// stdio sends it, and carries the session's models and modes.
#[tokio::test]
async fn session_load_answers_after_its_replay_with_the_sessions_models_and_modes() {
    let d = Daemon::start(&[]);
    let sid = d.join("rest").await;
    assert_eq!(d.prompt(&sid, Some("rest"), "stream 5").await.status, 200);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let load =
        ws.request("session/load", json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []})).await;
    let loaded = ws.answer(load).await;
    assert_eq!(ws.updates().len(), 6, "the echo and five chunks, before the answer: {:#?}", ws.seen);
    assert_eq!(loaded["result"]["modes"]["currentModeId"], "default", "{loaded}");
    assert_eq!(loaded["result"]["models"]["currentModelId"], "demo-fast");
    assert_eq!(loaded["result"]["_meta"]["mediatord"]["startEventId"], 0);
    let last = loaded["result"]["_meta"]["mediatord"]["lastEventId"].as_u64().expect("lastEventId");
    assert!(last >= 7, "the replay's events were published: {loaded}");
}

/// `session/list` lists a live session once, with its summary.
#[tokio::test]
async fn session_list_lists_a_live_session_once() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let sid = new_session(&mut ws, &d).await;
    let listed = ws.call("session/list", json!({"cwd": d.workspace})).await;
    let sessions = listed["result"]["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 1, "{listed}");
    assert_eq!(
        (sessions[0]["sessionId"].clone(), sessions[0]["state"].clone(), sessions[0]["clientCount"].clone()),
        (json!(sid), json!("live"), json!(1))
    );
}

/// `session/new`'s parameters are checked: an empty `cwd` is refused as a parameter, not taken as
/// a path; an empty `modelServiceId` is none, and a model the agent refuses fails the create (no
/// silent default model).
#[tokio::test]
async fn session_new_refuses_an_empty_cwd_and_a_model_the_agent_refuses() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let empty = ws.call("session/new", json!({"cwd": ""})).await;
    assert_eq!(
        (empty["error"]["code"].clone(), empty["error"]["data"]["code"].clone()),
        (json!(-32602), json!("invalid_parameter")),
        "{empty}"
    );
    let unknown =
        ws.call("session/new", json!({"cwd": d.workspace, "modelServiceId": "no-such-model"})).await;
    assert_eq!(unknown["error"]["data"]["code"], "agent_error", "{unknown}");
    let none = ws.call("session/new", json!({"cwd": d.workspace, "modelServiceId": ""})).await;
    assert_eq!(none["result"]["models"]["currentModelId"], "demo-fast", "{none}");
    // A new session (a thread: the workspace's default one exists) is on the model it asked for.
    let smart = ws
        .call(
            "session/new",
            json!({"cwd": d.workspace, "modelServiceId": "demo-smart", "sessionScope": "thread"}),
        )
        .await;
    assert_eq!(smart["result"]["models"]["currentModelId"], "demo-smart", "{smart}");
}

/// A prompt id the client chooses is a plain, short one not already in flight on the connection.
#[tokio::test]
async fn a_client_chosen_prompt_id_is_refused_when_malformed_or_in_flight() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let sid = new_session(&mut ws, &d).await;
    let with_id = |text: &str, id: &str| json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}], "_meta": {"mediatord/promptId": id}});
    let bad = ws.call("session/prompt", with_id("hello", "not plain")).await;
    assert_eq!(bad["error"]["data"]["code"], "invalid_parameter", "{bad}");
    let first = ws.request("session/prompt", with_id("write id.txt x", "p-1")).await;
    ws.until(|m| is_request(m, "session/request_permission")).await;
    let twice = ws.call("session/prompt", with_id("hello", "p-1")).await;
    assert_eq!(twice["error"]["data"]["code"], "invalid_parameter", "{twice}");
    ws.send(&json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})).await;
    let answer = ws.answer(first).await;
    assert_eq!(answer["result"]["promptId"], "p-1", "{answer}");
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
    u64::try_from(since.as_millis()).expect("ms fit u64")
}

/// `@qwen-code/sdk`'s session methods: the heartbeat says who and when, the context is the
/// session's state, and a config option the agent never announced is refused.
#[tokio::test]
async fn the_qwen_session_methods_answer_with_the_sessions_state() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[("X-Qwen-Client-Id", "qwen")]).await;
    let sid = new_session(&mut ws, &d).await;
    let before = now_ms();
    let beat = ws.call("_qwen/session/heartbeat", json!({"sessionId": sid})).await;
    assert_eq!(
        (beat["result"]["sessionId"].clone(), beat["result"]["clientId"].clone()),
        (json!(sid), json!("qwen"))
    );
    let seen = beat["result"]["lastSeenAt"].as_u64().expect("lastSeenAt, in ms since the epoch");
    assert!((before..=now_ms()).contains(&seen), "{beat}");
    let context = ws.call("_qwen/session/context", json!({"sessionId": sid})).await;
    assert_eq!(
        (context["result"]["v"].clone(), context["result"]["sessionId"].clone()),
        (json!(1), json!(sid)),
        "{context}"
    );
    assert_eq!(context["result"]["state"]["modes"]["currentModeId"], "default");
    assert_eq!(context["result"]["state"]["models"]["currentModelId"], "demo-fast");
    let option =
        ws.call("session/set_config_option", json!({"sessionId": sid, "configId": "x", "value": "y"})).await;
    assert_eq!(option["error"]["data"]["code"], "config_options_unsupported", "{option}");
}

/// Issue #42: `_qwen/file/*` (what `@qwen-code/sdk`'s ACP transports send for the file routes)
/// answer as REST does, in the same shapes, with the same bounds and errors (`httpStatus` beside);
/// an observer device may read and may not write.
#[tokio::test]
async fn the_file_calls_answer_over_acp_as_rest_does() {
    let d = Daemon::start(&["--token", TOKEN]);
    std::fs::write(d.workspace.join("a.txt"), "one\ntwo\n").expect("fixture");
    let auth = format!("Bearer {TOKEN}");
    let (mut ws, init) = AcpWs::ready(&d, &[("Authorization", &auth), ("X-Qwen-Client-Id", "files")]).await;
    let advertised = init["agentCapabilities"]["_meta"].to_string();
    assert!(advertised.contains("_qwen/file/write"), "{init}");
    let read = ws.call("_qwen/file/read", json!({"path": "a.txt", "line": 2, "limit": 1})).await;
    let rest = send(
        http()
            .get(d.url("/file?path=a.txt&line=2&limit=1"))
            .bearer_auth(TOKEN)
            .header("X-Qwen-Client-Id", "files"),
    )
    .await
    .ok();
    assert_eq!(read["result"], rest, "the same answer as GET /file: {read}");
    assert_eq!(read["result"]["content"], "two\n");
    let hash = read["result"]["hash"].as_str().expect("hash").to_owned();
    let stat = ws.call("_qwen/file/stat", json!({"path": "a.txt"})).await;
    assert_eq!(stat["result"]["sizeBytes"], 8, "{stat}");
    let listed = ws.call("_qwen/file/list", json!({"path": "."})).await;
    assert!(listed["result"].to_string().contains("a.txt"), "{listed}");
    let globbed = ws.call("_qwen/file/glob", json!({"pattern": "*.txt"})).await;
    assert!(globbed["result"].to_string().contains("a.txt"), "{globbed}");
    let bytes = ws.call("_qwen/file/read_bytes", json!({"path": "a.txt", "offset": 4, "maxBytes": 3})).await;
    assert!(bytes["result"].is_object(), "{bytes}");

    let edited = ws
        .call(
            "_qwen/file/edit",
            json!({"path": "a.txt", "oldText": "two", "newText": "deux", "expectedHash": hash}),
        )
        .await;
    assert!(edited["result"].is_object(), "{edited}");
    assert_eq!(std::fs::read_to_string(d.workspace.join("a.txt")).expect("read"), "one\ndeux\n");
    let stale = ws
        .call(
            "_qwen/file/write",
            json!({"path": "a.txt", "content": "x", "mode": "replace", "expectedHash": hash, "_meta": {"clientId": "files"}}),
        )
        .await;
    assert_eq!(
        (stale["error"]["data"]["httpStatus"].clone(), stale["error"]["data"]["errorKind"].clone()),
        (json!(409), json!("hash_mismatch")),
        "a stale hash: {stale}"
    );
    let outside = ws.call("_qwen/file/read", json!({"path": "../x"})).await;
    assert_eq!(outside["error"]["data"]["httpStatus"], 400, "{outside}");
    let bounded = ws.call("_qwen/file/read", json!({"path": "a.txt", "maxBytes": 0})).await;
    assert!(bounded["error"]["message"].as_str().is_some_and(|m| m.contains("maxBytes")), "{bounded}");
    let created =
        ws.call("_qwen/file/write", json!({"path": "b.txt", "content": "new", "mode": "create"})).await;
    assert!(created["result"].is_object(), "{created}");
    assert_eq!(std::fs::read_to_string(d.workspace.join("b.txt")).expect("read"), "new");

    let (_, credential) = d.pair_device(Some(TOKEN), "wall screen", "observer").await;
    let device = format!("Bearer {credential}");
    let (mut observer, _) = AcpWs::ready(&d, &[("Authorization", &device)]).await;
    let seen = observer.call("_qwen/file/read", json!({"path": "b.txt"})).await;
    assert_eq!(seen["result"]["content"], "new", "{seen}");
    let refused =
        observer.call("_qwen/file/write", json!({"path": "c.txt", "content": "x", "mode": "create"})).await;
    assert_eq!(refused["error"]["data"]["code"], "read_only_device", "{refused}");
    assert!(!d.workspace.join("c.txt").exists());
}

/// `session/permission` (`@qwen-code/sdk`'s vote) decides as a REST vote does, and a device's
/// vote is audited with its name.
#[tokio::test]
async fn a_devices_session_permission_vote_decides_and_is_audited_with_its_name() {
    let d = Daemon::start(&["--token", TOKEN]);
    let (_, credential) = d.pair_device(Some(TOKEN), "laptop", "voter").await;
    let (mut ws, _) = AcpWs::ready(&d, &[("Authorization", &format!("Bearer {credential}"))]).await;
    let sid = new_session(&mut ws, &d).await;
    let turn = ws.request("session/prompt", prompt(&sid, "write voted.txt yes")).await;
    let ask = ws.until(|m| is_request(m, "session/request_permission")).await;
    let rid = ask["params"]["_meta"]["mediatord/requestId"].clone();
    let vote = json!({"sessionId": sid, "requestId": rid, "outcome": {"outcome": "selected", "optionId": "allow_once"}});
    assert_eq!(ws.call("session/permission", vote).await["result"], json!({}));
    assert_eq!(ws.answer(turn).await["result"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(d.workspace.join("voted.txt")).expect("written"), "yes");
    let audit =
        send(http().get(d.url(&format!("/session/{sid}/permissions?audit=1"))).bearer_auth(TOKEN)).await.ok();
    assert_eq!(
        (audit["audit"][0]["via"].clone(), audit["audit"][0]["voterDeviceName"].clone()),
        (json!("acp"), json!("laptop")),
        "{audit}"
    );
}

/// `session/list`'s sessions as (id, state) pairs, in the order listed.
fn listed_states(listed: &Value) -> Vec<(Value, Value)> {
    listed["result"]["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| (s["sessionId"].clone(), s["state"].clone()))
        .collect()
}

/// A recorded session is listed once, as `dormant`; an observer device may not bring it back
/// (`read_only_device`, as REST's `POST /session/{id}/resume` answers it), a client that may
/// write may.
#[tokio::test]
async fn a_dormant_session_is_listed_once_and_loaded_back_only_by_a_client_that_may_write() {
    let home = crate::support::Home::new();
    let first = home.start(&["--token", TOKEN]);
    let (_, watcher) = first.pair_device(Some(TOKEN), "wall screen", "observer").await;
    let op = format!("Bearer {TOKEN}");
    let (mut ws, _) = AcpWs::ready(&first, &[("Authorization", &op)]).await;
    let sid = new_session(&mut ws, &first).await;
    let listed = ws.call("session/list", json!({})).await;
    assert_eq!(listed_states(&listed), [(json!(sid), json!("live"))], "{listed}");
    // A turn, so the agent has a transcript to load the session from.
    assert_eq!(ws.call("session/prompt", prompt(&sid, "hello")).await["result"]["stopReason"], "end_turn");
    drop(ws);
    crate::support::stop(first);

    let second = home.start(&["--token", TOKEN]);
    let (mut observer, _) = AcpWs::ready(&second, &[("Authorization", &format!("Bearer {watcher}"))]).await;
    let listed = observer.call("session/list", json!({})).await;
    assert_eq!(listed_states(&listed), [(json!(sid), json!("dormant"))], "{listed}");
    let load = json!({"sessionId": sid, "cwd": second.workspace, "mcpServers": []});
    let refused = observer.call("session/load", load.clone()).await;
    assert_eq!(
        (refused["error"]["code"].clone(), refused["error"]["data"]["code"].clone()),
        (json!(-32003), json!("read_only_device")),
        "{refused}"
    );
    let rest = send(http().post(second.url(&format!("/session/{sid}/resume"))).bearer_auth(&watcher)).await;
    assert_eq!((rest.status, rest.body["code"].clone()), (403, json!("read_only_device")), "{}", rest.text);
    let status = |d: &Daemon| send(http().get(d.url(&format!("/session/{sid}"))).bearer_auth(TOKEN));
    let still = status(&second).await;
    assert_eq!(
        (still.status, still.body["state"].as_str()),
        (200, Some("dormant")),
        "an observer started no agent"
    );
    let unknown =
        observer.call("session/load", json!({"sessionId": "no-such-session", "cwd": second.workspace})).await;
    assert_eq!(unknown["error"]["data"]["code"], "session_not_found", "{unknown}");
    let (mut writer, _) = AcpWs::ready(&second, &[("Authorization", &op)]).await;
    let loaded = writer.call("session/load", load).await;
    assert_eq!(loaded["result"]["_meta"]["mediatord"]["sessionId"], sid.as_str(), "{loaded}");
    let live = status(&second).await;
    assert_eq!((live.status, live.body["state"].as_str()), (200, Some("live")));
}

/// A WebSocket client whose session stream falls `--subscriber-queue` events behind is evicted:
/// it is told (`client_evicted`), then the socket closes with 4001 so it reconnects and resumes.
#[tokio::test]
async fn a_websocket_client_left_behind_is_told_it_was_evicted_and_closed_with_4001() {
    let d = Daemon::start(&["--subscriber-queue", "64"]);
    let (mut ws, _) = AcpWs::ready_small_buffer(&d).await;
    let sid = new_session(&mut ws, &d).await;
    // From here on the client reads nothing until the turn is over (a blocking prompt's answer).
    assert_eq!(d.prompt(&sid, Some("rest"), "stream 20000").await.status, 200);
    // Bounded as a whole: a socket left open sends pings, which `end` reads past.
    let ended = tokio::time::timeout(WAIT, ws.end()).await.expect("the socket closes");
    assert_eq!(ended, Ended::Closed(4001, "client_evicted: reconnect and session/load to resume".into()));
    let evicted = ws.seen.iter().filter(|m| is_event(m, "client_evicted")).count();
    assert_eq!(evicted, 1, "told once, before the close");
}

/// `session/delete` (the ACP RFD): a live session is refused `session_live` (close it first); a
/// closed one goes with its history (out of `session/list`, `GET /session/{id}` 404, `session/load`
/// not found), the deletion audited with who and through which door; deleting it again succeeds.
#[tokio::test]
async fn session_delete_refuses_a_live_session_and_deletes_a_closed_one_with_its_history_audited() {
    let home = crate::support::Home::new();
    let d = home.start(&[]);
    let (mut ws, init) = AcpWs::ready(&d, &[("X-Qwen-Client-Id", "ada")]).await;
    let path = format!("/workspace/{}/sessions?include=ended", home.cwd().replace('/', "%2F"));
    let ended = async |d: &Daemon| d.get(&path).await.ok()["sessions"].as_array().map_or(0, Vec::len);
    assert_eq!(init["agentCapabilities"]["sessionCapabilities"]["delete"], json!({}), "{init}");
    let sid = new_session(&mut ws, &d).await;
    assert_eq!(ws.call("session/prompt", prompt(&sid, "hello")).await["result"]["stopReason"], "end_turn");
    let refused = ws.call("session/delete", json!({"sessionId": sid})).await;
    assert_eq!(
        (refused["error"]["code"].clone(), refused["error"]["data"]["code"].clone()),
        (json!(-32004), json!("session_live")),
        "{refused}"
    );
    assert_eq!(d.get(&format!("/session/{sid}")).await.status, 200, "a refused delete leaves it live");
    assert_eq!(ws.call("session/close", json!({"sessionId": sid})).await["result"], json!({}));
    let listed = ws.call("session/list", json!({})).await;
    assert_eq!(listed_states(&listed), [(json!(sid), json!("closed"))], "{listed}");
    assert_eq!(ended(&d).await, 1, "the history holds it");

    assert_eq!(ws.call("session/delete", json!({"sessionId": sid})).await["result"], json!({}));
    let listed = ws.call("session/list", json!({})).await;
    assert_eq!(listed_states(&listed), [], "{listed}");
    assert_eq!(ended(&d).await, 0, "nor does the history");
    let load = ws.call("session/load", json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []})).await;
    assert_eq!(load["error"]["data"]["code"], "session_not_found", "{load}");
    let again = ws.call("session/delete", json!({"sessionId": sid})).await;
    assert_eq!(again["result"], json!({}), "deleting it again succeeds: {again}");
    let audit = d.get("/audit?outcome=deleted").await.ok();
    let entries = audit["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 1, "one deletion, one entry: {audit}");
    assert_eq!(
        (entries[0]["sessionId"].clone(), entries[0]["voterClientId"].clone(), entries[0]["via"].clone()),
        (json!(sid), json!("ada"), json!("acp"))
    );
    let missing = ws.call("session/delete", json!({})).await;
    assert_eq!(missing["error"]["data"]["code"], "invalid_parameter", "{missing}");
}

/// `$/cancel_request` (the request cancellation RFD) of a prompt: one still queued is answered
/// `-32800 request_cancelled` at once and never runs; the one whose turn is running has its turn
/// cancelled and is answered `stopReason: "cancelled"`, its pending permission request withdrawn.
/// Each is answered once; a cancel of an id already answered changes nothing.
#[tokio::test]
async fn cancel_request_answers_a_queued_prompt_cancelled_and_cancels_a_running_turn() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let sid = new_session(&mut ws, &d).await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let running = ws.request("session/prompt", prompt(&sid, "write held.txt up")).await;
    let ask = ws.until(|m| is_request(m, "session/request_permission")).await;
    let queued = ws.request("session/prompt", prompt(&sid, "write never.txt run")).await;
    queued_echo(&mut sse, "write never.txt run").await;
    ws.send(&json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": queued}})).await;
    let cut = ws.answer(queued).await;
    assert_eq!(
        (cut["error"]["code"].clone(), cut["error"]["data"]["code"].clone()),
        (json!(-32800), json!("request_cancelled")),
        "{cut}"
    );
    assert!(ws.seen.iter().all(|m| m["id"] != running), "the running turn goes on: {:#?}", ws.seen);
    ws.send(&json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": running}})).await;
    let withdrawn = ws.until(|m| m["method"] == "$/cancel_request").await;
    assert_eq!(withdrawn["params"]["requestId"], ask["id"]);
    let stopped = ws.answer(running).await;
    assert_eq!(stopped["result"]["stopReason"], "cancelled", "{stopped}");
    // The queued prompt never ran, and neither prompt was answered twice.
    let after = ws.call("session/list", json!({})).await;
    assert_eq!(after["result"]["sessions"][0]["hasActivePrompt"], false, "{after}");
    assert!(!d.workspace.join("held.txt").exists() && !d.workspace.join("never.txt").exists());
    for id in [running, queued] {
        assert_eq!(ws.seen.iter().filter(|m| m["id"] == id).count(), 1, "{id}: {:#?}", ws.seen);
    }
    ws.send(&json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": running}})).await;
    assert_eq!(ws.call("session/list", json!({})).await["result"]["sessions"][0]["sessionId"], sid.as_str());
}

/// A `session/request_permission` the client cancels on its side — answered `-32800` (the SDK's
/// answer once it aborts the question) or with the `cancelled` outcome — withdraws that client's
/// ballot, not the request: another client still decides it, and the audit keeps the withdrawal.
#[tokio::test]
async fn a_permission_request_cancelled_by_one_client_withdraws_its_ballot_not_the_request() {
    let d = Daemon::start(&[]);
    let (mut a, _) = AcpWs::ready(&d, &[("X-Qwen-Client-Id", "ada")]).await;
    let (mut b, _) = AcpWs::ready(&d, &[("X-Qwen-Client-Id", "bob")]).await;
    let sid = new_session(&mut a, &d).await;
    b.call("session/resume", json!({"sessionId": sid, "cwd": d.workspace})).await;
    let turn = a.request("session/prompt", prompt(&sid, "write kept.txt still")).await;
    let ask_a = a.until(|m| is_request(m, "session/request_permission")).await;
    let ask_b = b.until(|m| is_request(m, "session/request_permission")).await;
    a.send(&json!({"jsonrpc": "2.0", "id": ask_a["id"], "error": {"code": -32800, "message": "Request cancelled"}}))
        .await;
    let rid = ask_a["params"]["_meta"]["mediatord/requestId"].as_str().expect("request id").to_owned();
    // Still pending: the next call is served after the withdrawal was handled (one socket, in order).
    a.call("session/list", json!({})).await;
    let pending = d.get(&format!("/session/{sid}/permissions")).await.ok();
    assert_eq!(pending["pending"][0]["requestId"], rid.as_str(), "{pending}");
    b.reply(&ask_b["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
    assert_eq!(a.answer(turn).await["result"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(d.workspace.join("kept.txt")).expect("written"), "still");
    let audit = d.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    let ballots = &audit["audit"][0]["ballots"];
    assert_eq!(
        (ballots[0]["clientId"].clone(), ballots[0]["withdrawn"].clone(), ballots[0]["counted"].clone()),
        (json!("ada"), json!(true), json!(false)),
        "{audit}"
    );
    assert_eq!(audit["audit"][0]["voterClientId"], "bob");

    // The `cancelled` outcome is the same withdrawal.
    let turn = a.request("session/prompt", prompt(&sid, "write again.txt too")).await;
    let ask_a = a.until(|m| is_request(m, "session/request_permission")).await;
    let ask_b = b.until(|m| is_request(m, "session/request_permission")).await;
    a.reply(&ask_a["id"], json!({"outcome": {"outcome": "cancelled"}})).await;
    a.call("session/list", json!({})).await;
    b.reply(&ask_b["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
    assert_eq!(a.answer(turn).await["result"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(d.workspace.join("again.txt")).expect("written"), "too");

    // Any other error is an abstention, not a withdrawal: the audit has bob's ballot alone.
    let turn = a.request("session/prompt", prompt(&sid, "write third.txt abstained")).await;
    let ask_a = a.until(|m| is_request(m, "session/request_permission")).await;
    let ask_b = b.until(|m| is_request(m, "session/request_permission")).await;
    a.send(
        &json!({"jsonrpc": "2.0", "id": ask_a["id"], "error": {"code": -32603, "message": "Internal error"}}),
    )
    .await;
    a.call("session/list", json!({})).await;
    b.reply(&ask_b["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
    assert_eq!(a.answer(turn).await["result"]["stopReason"], "end_turn");
    let rid = ask_a["params"]["_meta"]["mediatord/requestId"].clone();
    let audit = d.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    let entry =
        audit["audit"].as_array().and_then(|a| a.iter().find(|e| e["requestId"] == rid)).expect("audited");
    let voters: Vec<&Value> =
        entry["ballots"].as_array().expect("ballots").iter().map(|b| &b["clientId"]).collect();
    assert_eq!(voters, [&json!("bob")], "{entry}");
}

/// What the daemon asks an ACP client carries ACP v2's `title`, `description` and `subject`
/// (derived from the agent's v1 tool call); a client that asked at `initialize` also gets the
/// decision as the multi-client attach proposal's `permission_resolved` session update, beside the
/// `_qwen/notify` every connection gets.
#[tokio::test]
async fn a_permission_request_carries_v2_fields_and_its_decision_comes_as_a_permission_resolved_update() {
    let d = Daemon::start(&[]);
    let mut ws = AcpWs::open(&d, &[("X-Qwen-Client-Id", "ada")]).await;
    let meta = json!({"mediatord/permissionResolvedUpdates": true});
    ws.call("initialize", json!({"protocolVersion": 1, "_meta": meta})).await;
    let sid = new_session(&mut ws, &d).await;
    let turn = ws.request("session/prompt", prompt(&sid, "write v2.txt fields")).await;
    let ask = ws.until(|m| is_request(m, "session/request_permission")).await;
    let params = &ask["params"];
    assert_eq!(params["title"], "Write v2.txt", "{ask}");
    assert_eq!(params["title"], params["toolCall"]["title"], "the v1 field stays");
    assert_eq!(
        params["subject"],
        json!({"type": "tool_call", "toolCall": {"toolCallId": params["toolCall"]["toolCallId"]}}),
        "{ask}"
    );
    ws.reply(&ask["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
    let update = ws
        .until(|m| {
            m["method"] == "session/update" && m["params"]["update"]["sessionUpdate"] == "permission_resolved"
        })
        .await;
    let rid = &params["_meta"]["mediatord/requestId"];
    assert_eq!(
        update["params"],
        json!({"sessionId": sid, "update": {
            "sessionUpdate": "permission_resolved", "requestId": rid,
            "outcome": {"outcome": "selected", "optionId": "allow_once"},
            "resolvedBy": "vote", "resolvedByClientId": "ada",
        }})
    );
    assert_eq!(ws.answer(turn).await["result"]["stopReason"], "end_turn");
}

/// `session/list` filters by `cwd`: a directory that is none of the daemon's workspaces lists
/// nothing (the RFD's empty array), a relative one is `invalid_parameter`, and so is a cursor
/// the daemon never gave; one page holds every session here, so no `nextCursor`.
#[tokio::test]
async fn session_list_filters_by_cwd_and_refuses_a_cursor_it_never_gave() {
    let d = Daemon::start(&[]);
    let (mut ws, _) = AcpWs::ready(&d, &[]).await;
    let sid = new_session(&mut ws, &d).await;
    let mine = ws.call("session/list", json!({"cwd": d.workspace})).await;
    assert_eq!(listed_states(&mine), [(json!(sid), json!("live"))], "{mine}");
    assert!(mine["result"].get("nextCursor").is_none(), "{mine}");
    let other = ws.call("session/list", json!({"cwd": "/"})).await;
    assert_eq!(other["result"]["sessions"], json!([]), "{other}");
    let relative = ws.call("session/list", json!({"cwd": "ws"})).await;
    assert_eq!(relative["error"]["data"]["code"], "invalid_parameter", "{relative}");
    let forged = ws.call("session/list", json!({"cursor": "bm90IGEgY3Vyc29y!"})).await;
    assert_eq!(forged["error"]["data"]["code"], "invalid_parameter", "{forged}");
}

/// A client may send `initialize` and the requests that need it at once, without waiting for its
/// answer (`mediatord connect` does, reloading its sessions after a reconnect): each is answered
/// as if sent after it, on every one of many fresh connections.
#[tokio::test]
async fn a_request_sent_right_behind_initialize_finds_the_connection_initialized() {
    let d = Daemon::start(&[]);
    for _ in 0..PIPELINED_CONNECTIONS {
        let mut ws = AcpWs::open(&d, &[]).await;
        let init = ws.request("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}})).await;
        let list = ws.request("session/list", json!({})).await;
        assert!(ws.answer(init).await["result"].is_object());
        let listed = ws.answer(list).await;
        assert!(listed["result"]["sessions"].is_array(), "{listed}");
    }
}

/// How many connections [`a_request_sent_right_behind_initialize_finds_the_connection_initialized`]
/// tries: the old order was lost only when the second request's task happened to run first.
const PIPELINED_CONNECTIONS: usize = 200;

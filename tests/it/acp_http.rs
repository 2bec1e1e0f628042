//! `/acp` over Streamable HTTP (`docs/protocol.md#161-transports`): `initialize` opens a
//! connection, messages go up as `POST`s answered `202`, answers and events come down the
//! connection's and the sessions' SSE streams, `Last-Event-ID` resumes a session's stream, and
//! `DELETE` ends it all.

use serde_json::{Value, json};

use crate::support::*;

/// A Streamable HTTP connection, as a client drives it.
pub(crate) struct HttpAcp<'a> {
    d: &'a Daemon,
    pub(crate) id: String,
    next: i64,
    bearer: Option<String>,
}

impl<'a> HttpAcp<'a> {
    pub(crate) async fn open(d: &'a Daemon, bearer: Option<&str>) -> (HttpAcp<'a>, Value) {
        let mut req = http().post(d.url("/acp")).json(&json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1},
        }));
        if let Some(b) = bearer {
            req = req.bearer_auth(b);
        }
        let reply = send(req).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let id = reply.header("acp-connection-id").expect("Acp-Connection-Id").to_owned();
        assert_eq!(
            reply.body["result"]["agentCapabilities"]["_meta"]["mediatord"]["connectionId"],
            id.as_str()
        );
        (HttpAcp { d, id, next: 1, bearer: bearer.map(str::to_owned) }, reply.body["result"].clone())
    }

    pub(crate) fn req(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let req = req.header("Acp-Connection-Id", &self.id);
        match &self.bearer {
            Some(b) => req.bearer_auth(b),
            None => req,
        }
    }

    /// POSTs a message; the reply (202 for anything but a refusal).
    pub(crate) async fn post(&self, message: &Value, session: Option<&str>) -> Reply {
        let mut req = self.req(http().post(self.d.url("/acp"))).json(message);
        if let Some(s) = session {
            req = req.header("Acp-Session-Id", s);
        }
        send(req).await
    }

    /// POSTs a request (asserting 202); its id.
    pub(crate) async fn request(&mut self, method: &str, params: Value, session: Option<&str>) -> i64 {
        let id = self.next;
        self.next += 1;
        let reply = self
            .post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}), session)
            .await;
        assert_eq!(reply.status, 202, "{method}: {}", reply.text);
        id
    }

    /// `session/new` in the daemon's workspace, answered down the connection's stream
    /// `conn_stream`; the new session's id.
    pub(crate) async fn new_session(&mut self, conn_stream: &mut Sse) -> String {
        let new = self.request("session/new", json!({"cwd": self.d.workspace}), None).await;
        let (_, created) = until(conn_stream, answer_to(new)).await;
        created["result"]["sessionId"].as_str().expect("sessionId").to_owned()
    }

    /// Opens a stream: the connection's, or a session's; with extra headers.
    pub(crate) async fn stream(
        &self,
        session: Option<&str>,
        headers: &[(&str, String)],
    ) -> reqwest::Response {
        let mut req = self.req(http().get(self.d.url("/acp"))).header("Accept", "text/event-stream");
        if let Some(s) = session {
            req = req.header("Acp-Session-Id", s);
        }
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        req.send().await.expect("stream request")
    }
}

/// Reads `sse` until the JSON-RPC message matching `done`.
pub(crate) async fn until(sse: &mut Sse, mut done: impl FnMut(&Value) -> bool) -> (Vec<Event>, Value) {
    let seen = sse.until(|e| done(&e.data)).await;
    let last = seen.last().expect("a match").data.clone();
    (seen, last)
}

pub(crate) fn answer_to(id: i64) -> impl FnMut(&Value) -> bool {
    move |m| m.get("method").is_none() && m["id"] == id
}

#[tokio::test]
async fn a_streamable_http_client_prompts_answers_over_post_and_the_file_is_written() {
    let d = Daemon::start(&[]);
    let (mut acp, _) = HttpAcp::open(&d, None).await;
    let mut conn_stream = Sse::from_response(acp.stream(None, &[]).await);
    let new = acp.request("session/new", json!({"cwd": d.workspace, "mcpServers": []}), None).await;
    let (_, created) = until(&mut conn_stream, answer_to(new)).await;
    let sid = created["result"]["sessionId"].as_str().expect("sessionId").to_owned();
    let res = acp.stream(Some(&sid), &[]).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut session_stream = Sse::from_response(res);
    let prompt = json!({"sessionId": sid, "prompt": [{"type": "text", "text": "write http.txt over http"}]});
    let turn = acp.request("session/prompt", prompt, Some(&sid)).await;
    let (_, ask) = until(&mut session_stream, |m| is_request(m, "session/request_permission")).await;
    let vote = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}});
    assert_eq!(acp.post(&vote, Some(&sid)).await.status, 202);
    let (seen, answer) = until(&mut session_stream, answer_to(turn)).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(d.workspace.join("http.txt")).expect("written"), "over http");
    // Messages born of an event carry its id, in order, once per event: on its last message (the
    // answer is the last of its turn's `turn_complete`), so a client resuming after it has it all.
    let ids: Vec<u64> = seen.iter().filter_map(|e| e.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]) && !ids.is_empty(), "{ids:?}");
    let turn_complete =
        seen.iter().rev().find(|e| is_event(&e.data, "turn_complete")).expect("turn_complete");
    assert_eq!(turn_complete.id, None);
    assert_eq!(seen.last().and_then(|e| e.id), Some(ids[ids.len() - 1]));
    // DELETE ends the connection and its streams.
    let ended = send(acp.req(http().delete(d.url("/acp")))).await;
    assert_eq!(ended.status, 202);
    assert!(session_stream.rest().await.is_empty());
    let gone =
        acp.post(&json!({"jsonrpc": "2.0", "id": 9, "method": "session/list", "params": {}}), None).await;
    assert_eq!((gone.status, gone.body["code"].clone()), (404, json!("acp_connection_not_found")));
}

#[tokio::test]
async fn a_session_stream_resumes_with_last_event_id_and_a_second_stream_is_refused() {
    let d = Daemon::start(&[]);
    let (mut acp, _) = HttpAcp::open(&d, None).await;
    let mut conn_stream = Sse::from_response(acp.stream(None, &[]).await);
    let busy = acp.stream(None, &[]).await;
    assert_eq!(busy.status(), 409);
    let sid = acp.new_session(&mut conn_stream).await;
    let mut first = Sse::from_response(acp.stream(Some(&sid), &[]).await);
    assert_eq!(acp.stream(Some(&sid), &[]).await.status(), 409);
    let turn = acp
        .request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "stream 30 40"}]}),
            Some(&sid),
        )
        .await;
    let (head, _) = until(&mut first, |m| m["params"]["update"]["content"]["text"] == "tok9 ").await;
    let resume_at = head.iter().filter_map(|e| e.id).next_back().expect("an id");
    drop(first);
    // The client left mid-turn (the agent streams 40 updates a second); the stream is given back
    // once the daemon's next write finds it gone. Reopened at the last id the client handled, it
    // carries on from there: nothing lost, nothing twice, and the turn's answer at its end.
    let reopened = reopen(&acp, &sid, Some(resume_at)).await;
    let mut second = Sse::from_response(reopened);
    let (rest, answer) = until(&mut second, answer_to(turn)).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let texts: Vec<String> = head
        .iter()
        .chain(rest.iter())
        .filter_map(|e| e.data["params"]["update"]["content"]["text"].as_str().map(str::to_owned))
        .filter(|t| t.starts_with("tok"))
        .collect();
    let expected: Vec<String> = (0..30).map(|i| format!("tok{i} ")).collect();
    assert_eq!(texts, expected);
}

/// Reopens a session's stream (after event `last`, when given) once the previous one has been
/// given back (its body dropped a moment ago): `409` means it is still being handed back.
async fn reopen(acp: &HttpAcp<'_>, sid: &str, last: Option<u64>) -> reqwest::Response {
    let headers: Vec<(&str, String)> = last.map(|id| ("Last-Event-ID", id.to_string())).into_iter().collect();
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let res = acp.stream(Some(sid), &headers).await;
        if res.status() == 200 {
            return res;
        }
        assert_eq!(res.status(), 409, "{}", res.text().await.unwrap_or_default());
        assert!(std::time::Instant::now() < deadline, "the stream was never given back");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await; // polling for the hand-back
    }
}

#[tokio::test]
async fn streamable_http_refusals_are_stable_codes() {
    const TOKEN: &str = "acp-http-secret";
    let d = Daemon::start(&["--token", TOKEN]);
    let (acp, _) = HttpAcp::open(&d, Some(TOKEN)).await;
    let plain =
        send(http().post(d.url("/acp")).bearer_auth(TOKEN).header("Content-Type", "text/plain").body("{}"))
            .await;
    assert_eq!((plain.status, plain.body["code"].clone()), (415, json!("unsupported_media_type")));
    let no_conn = send(
        http()
            .post(d.url("/acp"))
            .bearer_auth(TOKEN)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "session/list"})),
    )
    .await;
    assert_eq!((no_conn.status, no_conn.body["code"].clone()), (400, json!("acp_connection_required")));
    let garbage =
        send(acp.req(http().post(d.url("/acp"))).header("Content-Type", "application/json").body("{nope"))
            .await;
    assert_eq!((garbage.status, garbage.body["code"].clone()), (400, json!("invalid_json")));
    // A batch is answered as the transport RFD says: 501, and nothing in it is served.
    let batch = acp.post(&json!([{"jsonrpc": "2.0", "id": 1, "method": "session/list"}]), None).await;
    assert_eq!(
        (batch.status, batch.body["code"].clone()),
        (501, json!("batch_not_supported")),
        "{}",
        batch.text
    );
    let not_rpc = acp.post(&json!({"jsonrpc": "2.0"}), None).await;
    assert_eq!((not_rpc.status, not_rpc.body["code"].clone()), (400, json!("invalid_jsonrpc")));
    let again =
        acp.post(&json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {}}), None).await;
    assert_eq!((again.status, again.body["code"].clone()), (400, json!("already_initialized")));
    let not_sse = send(acp.req(http().get(d.url("/acp")))).await;
    assert_eq!((not_sse.status, not_sse.body["code"].clone()), (406, json!("not_acceptable")));
    let unattached = acp.stream(Some("no-such-session"), &[]).await;
    assert_eq!(unattached.status(), 404);
    // Another credential does not find the connection (as if it did not exist).
    let (_, device) = d.pair_device(Some(TOKEN), "other", "voter").await;
    let other = send(
        http()
            .post(d.url("/acp"))
            .bearer_auth(&device)
            .header("Acp-Connection-Id", &acp.id)
            .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "session/list"})),
    )
    .await;
    assert_eq!((other.status, other.body["code"].clone()), (404, json!("acp_connection_not_found")));
    let no_token = send(
        http()
            .post(d.url("/acp"))
            .header("Acp-Connection-Id", &acp.id)
            .json(&json!({"jsonrpc": "2.0", "id": 4, "method": "session/list"})),
    )
    .await;
    assert_eq!(no_token.status, 401);
}

/// A request's `Acp-Session-Id` must name the session its params name: one that differs is
/// refused as a parameter error, one that agrees is served.
#[tokio::test]
async fn the_session_header_must_agree_with_the_params_session() {
    let d = Daemon::start(&[]);
    let (mut acp, _) = HttpAcp::open(&d, None).await;
    let mut conn_stream = Sse::from_response(acp.stream(None, &[]).await);
    let sid = acp.new_session(&mut conn_stream).await;
    let other = acp.request("_qwen/session/heartbeat", json!({"sessionId": sid}), Some("another")).await;
    let (_, refused) = until(&mut conn_stream, answer_to(other)).await;
    assert_eq!(
        (refused["error"]["code"].clone(), refused["error"]["data"]["code"].clone()),
        (json!(-32602), json!("invalid_parameter")),
        "{refused}"
    );
    let same = acp.request("_qwen/session/heartbeat", json!({"sessionId": sid}), Some(&sid)).await;
    let (_, served) = until(&mut conn_stream, answer_to(same)).await;
    assert_eq!(served["result"]["sessionId"], sid.as_str(), "{served}");
    let none = acp.request("_qwen/session/heartbeat", json!({"sessionId": sid}), None).await;
    let (_, served) = until(&mut conn_stream, answer_to(none)).await;
    assert_eq!(served["result"]["sessionId"], sid.as_str(), "{served}");
}

/// Over Streamable HTTP `session/load`'s answer comes down the connection's own stream (as every
/// answer to a request about no running turn does), and the replay down the session's.
#[tokio::test]
async fn session_load_over_http_is_answered_on_the_connection_stream_and_replays_on_the_sessions() {
    let d = Daemon::start(&[]);
    let sid = d.join("rest").await;
    assert_eq!(d.prompt(&sid, Some("rest"), "stream 3").await.status, 200);
    let (mut acp, _) = HttpAcp::open(&d, None).await;
    let mut conn_stream = Sse::from_response(acp.stream(None, &[]).await);
    let load = acp.request("session/load", json!({"sessionId": sid, "cwd": d.workspace}), None).await;
    let (_, loaded) = until(&mut conn_stream, answer_to(load)).await;
    assert_eq!(loaded["result"]["_meta"]["mediatord"]["sessionId"], sid.as_str(), "{loaded}");
    let mut session_stream = Sse::from_response(acp.stream(Some(&sid), &[]).await);
    let (replayed, _) = until(&mut session_stream, |m| is_event(m, "replay_complete")).await;
    let updates = replayed.iter().filter(|e| e.data["method"] == "session/update").count();
    assert_eq!(updates, 4, "the echo and three chunks: {replayed:#?}");
}

/// A session stream opened with `Last-Event-ID` replays from there, and a request still pending is
/// asked in the replay's order: right after the `permission_request` event that raised it, never
/// ahead of the events before it.
#[tokio::test]
async fn a_resumed_session_stream_asks_about_a_pending_request_right_after_its_replayed_event() {
    let d = Daemon::start(&[]);
    let (mut acp, _) = HttpAcp::open(&d, None).await;
    let mut conn_stream = Sse::from_response(acp.stream(None, &[]).await);
    let sid = acp.new_session(&mut conn_stream).await;
    let prompt = json!({"sessionId": sid, "prompt": [{"type": "text", "text": "write resumed.txt again"}]});
    let turn = acp.request("session/prompt", prompt, Some(&sid)).await;
    d.first_pending(&sid).await;
    let res = acp.stream(Some(&sid), &[("Last-Event-ID", "0".to_owned())]).await;
    let mut stream = Sse::from_response(res);
    let (seen, ask) = until(&mut stream, |m| is_request(m, "session/request_permission")).await;
    let raised = seen.len().checked_sub(2).map(|at| &seen[at].data);
    assert!(raised.is_some_and(|m| is_event(m, "permission_request")), "{seen:#?}");
    let vote = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}});
    assert_eq!(acp.post(&vote, Some(&sid)).await.status, 202);
    let (_, answer) = until(&mut stream, answer_to(turn)).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(d.workspace.join("resumed.txt")).expect("written"), "again");
}

/// A refused stream's status and error code (a stream that opened instead is not read: `null`).
async fn refusal(res: reqwest::Response) -> (u16, Value) {
    let status = res.status().as_u16();
    if status == 200 {
        return (status, Value::Null);
    }
    (status, res.json::<Value>().await.expect("an error body")["code"].clone())
}

#[tokio::test]
async fn a_session_stream_opened_before_session_load_waits_for_it_and_carries_the_replay() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    assert_eq!(d.prompt(&sid, Some("alice"), "hello before load").await.status, 200);
    let (mut acp, _) = HttpAcp::open(&d, None).await;
    let mut conn_stream = Sse::from_response(acp.stream(None, &[]).await);
    // The transport RFD's reconnect, as the official SDK does it: the session's stream first ...
    let res = acp.stream(Some(&sid), &[]).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut session_stream = Sse::from_response(res);
    assert_eq!(acp.stream(Some(&sid), &[]).await.status(), 409, "one stream per session, waiting or not");
    // ... then `session/load`: answered on the connection's stream, its replay on the waiting one.
    let load = json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []});
    let load = acp.request("session/load", load, Some(&sid)).await;
    let (_, answer) = until(&mut conn_stream, answer_to(load)).await;
    assert!(answer["result"].is_object(), "{answer}");
    let echo = |m: &Value| {
        m["method"] == "session/update"
            && m["params"]["update"]["sessionUpdate"] == "user_message_chunk"
            && m["params"]["update"]["content"]["text"] == "hello before load"
    };
    until(&mut session_stream, echo).await;
    until(&mut session_stream, |m| is_event(m, "turn_complete")).await;
    // Live events follow the replay on the same stream.
    assert_eq!(d.prompt(&sid, Some("alice"), "hello after load").await.status, 200);
    until(&mut session_stream, |m| m["params"]["update"]["content"]["text"] == "hello after load").await;
}

#[tokio::test]
async fn a_session_stream_before_the_attach_is_refused_for_an_unknown_session_and_ends_with_its_connection() {
    let d = Daemon::start(&[]);
    let (acp, _) = HttpAcp::open(&d, None).await;
    assert_eq!(
        refusal(acp.stream(Some("no-such-session"), &[]).await).await,
        (404, json!("session_not_found"))
    );
    let sid = d.join("alice").await;
    let res = acp.stream(Some(&sid), &[]).await;
    assert_eq!(res.status(), 200);
    let mut waiting = Sse::from_response(res);
    // The connection ends before it attached the session: the waiting stream ends with it.
    assert_eq!(send(acp.req(http().delete(d.url("/acp")))).await.status, 202);
    assert!(waiting.rest().await.is_empty());
}

#[tokio::test]
async fn an_observer_may_not_open_the_stream_of_a_recorded_session_it_could_not_load() {
    const TOKEN: &str = "acp-http-observer";
    let state = tempfile::tempdir().expect("tempdir");
    // A directory the daemon creates itself (0700): a recorded session outlives its agent there.
    let dir = state.path().join("state");
    let d = Daemon::start(&["--token", TOKEN, "--state-dir", dir.to_str().expect("utf-8")]);
    let (_, credential) = d.pair_device(Some(TOKEN), "wall screen", "observer").await;
    let create = async |body: Value| {
        let req = http().post(d.url("/session")).bearer_auth(TOKEN).header("X-Qwen-Client-Id", "op");
        send(req.json(&body)).await.ok()["sessionId"].as_str().expect("sessionId").to_owned()
    };
    let live = create(json!({})).await;
    let closed = create(json!({"sessionScope": "thread"})).await;
    assert_ne!(live, closed);
    let ended = send(http().delete(d.url(&format!("/session/{closed}"))).bearer_auth(TOKEN)).await;
    assert!(ended.status < 300, "{}", ended.text);
    let (observer, _) = HttpAcp::open(&d, Some(&credential)).await;
    // A live session it may attach: its stream waits for the attach.
    assert_eq!(observer.stream(Some(&live), &[]).await.status(), 200);
    // A recorded one `session/load` would have to bring back, which an observer may not do.
    assert_eq!(refusal(observer.stream(Some(&closed), &[]).await).await, (403, json!("read_only_device")));
    // The operator's connection may: that stream waits.
    let (operator, _) = HttpAcp::open(&d, Some(TOKEN)).await;
    assert_eq!(operator.stream(Some(&closed), &[]).await.status(), 200);
}

#[tokio::test]
async fn a_waiting_session_stream_its_client_left_frees_its_place() {
    let d = Daemon::start(&[]);
    let (acp, _) = HttpAcp::open(&d, None).await;
    let sid = d.join("alice").await;
    let first = acp.stream(Some(&sid), &[]).await;
    assert_eq!(first.status(), 200);
    drop(first);
    // Its place is freed once the daemon finds the client gone: until then the session is busy.
    let reopened = reopen(&acp, &sid, None).await;
    let mut waiting = Sse::from_response(reopened);
    let load = json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []});
    let mut acp = acp;
    acp.request("session/load", load, Some(&sid)).await;
    until(&mut waiting, |m| is_event(m, "replay_complete")).await;
}

#[tokio::test]
async fn waiting_session_streams_count_toward_a_connections_sessions() {
    let d = Daemon::start(&["--max-sessions", "80"]);
    let (mut acp, _) = HttpAcp::open(&d, None).await;
    let mut conn_stream = Sse::from_response(acp.stream(None, &[]).await);
    // One session attached, the rest of the bound waiting: 64 in all.
    acp.new_session(&mut conn_stream).await;
    let mut open = Vec::new();
    for _ in 1..64 {
        let sid = d.create(Some("alice"), json!({"sessionScope": "thread"})).await["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_owned();
        let res = acp.stream(Some(&sid), &[]).await;
        assert_eq!(res.status(), 200);
        open.push(res);
    }
    let one_more = d.create(Some("alice"), json!({"sessionScope": "thread"})).await["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned();
    assert_eq!(refusal(acp.stream(Some(&one_more), &[]).await).await, (429, json!("too_many_sessions")));
}

#[tokio::test]
async fn last_event_id_on_a_stream_opened_before_session_load_starts_the_replay_there() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    assert_eq!(d.prompt(&sid, Some("alice"), "hello before load").await.status, 200);
    let (mut acp, _) = HttpAcp::open(&d, None).await;
    let res = acp.stream(Some(&sid), &[("Last-Event-ID", "2".to_owned())]).await;
    assert_eq!(res.status(), 200);
    let mut waiting = Sse::from_response(res);
    let load = json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []});
    acp.request("session/load", load, Some(&sid)).await;
    let (replayed, _) = until(&mut waiting, |m| is_event(m, "turn_complete")).await;
    let ids: Vec<u64> = replayed.iter().filter_map(|e| e.id).collect();
    assert_eq!(ids.first(), Some(&3), "the replay starts after the Last-Event-ID: {ids:?}");
}

#[tokio::test]
async fn a_session_loaded_again_on_its_connection_streams_on_a_reopened_stream() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let (mut acp, _) = HttpAcp::open(&d, None).await;
    let mut conn_stream = Sse::from_response(acp.stream(None, &[]).await);
    let load = json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []});
    let first = acp.request("session/load", load.clone(), Some(&sid)).await;
    until(&mut conn_stream, answer_to(first)).await;
    let mut stream = Sse::from_response(acp.stream(Some(&sid), &[]).await);
    until(&mut stream, |m| is_event(m, "replay_complete")).await;
    // Loaded again: the old stream ends, and a new one carries the session.
    let again = acp.request("session/load", load, Some(&sid)).await;
    until(&mut conn_stream, answer_to(again)).await;
    stream.rest().await;
    let res = reopen(&acp, &sid, None).await;
    let mut reopened = Sse::from_response(res);
    assert_eq!(d.prompt(&sid, Some("alice"), "hello again").await.status, 200);
    until(&mut reopened, |m| m["params"]["update"]["content"]["text"] == "hello again").await;
}

/// `Acp-Protocol-Version` (the transport RFD's phase 4): `initialize`'s answer says the version
/// negotiated; a later request naming that version is served, and one naming another (or no
/// number) is `400 unsupported_protocol_version` with the versions the daemon speaks, on every
/// method of `/acp`, before anything is done.
#[tokio::test]
async fn a_wrong_acp_protocol_version_is_refused_and_the_negotiated_one_served() {
    let d = Daemon::start(&[]);
    let init = send(http().post(d.url("/acp")).json(&json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1},
    })))
    .await;
    assert_eq!(init.header("acp-protocol-version"), Some("1"), "{}", init.text);
    let (acp, _) = HttpAcp::open(&d, None).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}});
    let post = |version: &str| {
        send(acp.req(http().post(d.url("/acp"))).header("Acp-Protocol-Version", version).json(&list))
    };
    assert_eq!(post("1").await.status, 202);
    for wrong in ["2", "0", "v1", "1.0"] {
        let refused = post(wrong).await;
        assert_eq!(
            (refused.status, refused.body["code"].clone(), refused.body["supported"].clone()),
            (400, json!("unsupported_protocol_version"), json!([1])),
            "{wrong}: {}",
            refused.text
        );
    }
    let stream = send(
        acp.req(http().get(d.url("/acp")))
            .header("Accept", "text/event-stream")
            .header("Acp-Protocol-Version", "2"),
    )
    .await;
    assert_eq!((stream.status, stream.body["code"].clone()), (400, json!("unsupported_protocol_version")));
    let delete = send(acp.req(http().delete(d.url("/acp"))).header("Acp-Protocol-Version", "9")).await;
    assert_eq!(delete.status, 400, "the connection is not ended by a refused request");
    let delete = send(acp.req(http().delete(d.url("/acp"))).header("Acp-Protocol-Version", "1")).await;
    assert_eq!(delete.status, 202);
}

//! The front desk (issue #41): who is served at all, who counts as a voter, and a device's bounds
//! are decided once, below every door, so the same caller gets the same answer through REST,
//! `/acp` over WebSocket and over Streamable HTTP, and an agent through none of them.

use serde_json::{Value, json};

use crate::acp_http::{HttpAcp, answer_to, until};
use crate::support::*;

const TOKEN: &str = "front-desk-operator";

fn op(req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    req.bearer_auth(TOKEN)
}

/// Creates a session as the operator's client `client`; its id.
async fn session_as(d: &Daemon, client: &str) -> String {
    let created =
        send(op(http().post(d.url("/session"))).header("X-Qwen-Client-Id", client).json(&json!({})));
    created.await.ok()["sessionId"].as_str().expect("sessionId").to_owned()
}

/// Queues `text` as the operator's client `client` (`Prefer: respond-async`).
async fn prompt_as(d: &Daemon, sid: &str, client: &str, text: &str) {
    let prompt = op(http().post(d.url(&format!("/session/{sid}/prompt"))))
        .header("X-Qwen-Client-Id", client)
        .header("Prefer", "respond-async")
        .json(&text_prompt(text));
    let reply = send(prompt).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
}

/// Queues `text` and waits on `sse` for the permission request it raises; its payload.
async fn raise_as(d: &Daemon, sid: &str, sse: &mut Sse, client: &str, text: &str) -> Value {
    prompt_as(d, sid, client, text).await;
    sse.until_type("permission_request").await.last().expect("request").payload().clone()
}

/// A door an observer device can follow a session through.
#[derive(Debug, Clone, Copy)]
enum Door {
    Rest,
    AcpWebSocket,
    AcpHttp,
}

/// The observer `credential` (device `device_id`) registers on `sid` through `door` only: it opens
/// the session's stream (REST) or loads it (`/acp`), and sends a heartbeat. The connection it
/// keeps, to be dropped at the test's end.
async fn observe_through(
    d: &Daemon,
    door: Door,
    sid: &str,
    device_id: &str,
    credential: &str,
) -> Box<dyn std::any::Any> {
    let bearer = format!("Bearer {credential}");
    let load = json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []});
    match door {
        Door::Rest => {
            let sse = Sse::connect(d, sid, &[("Authorization", bearer.clone())]).await;
            let heartbeat = http().post(d.url(&format!("/session/{sid}/heartbeat"))).bearer_auth(credential);
            assert_eq!(send(heartbeat).await.status, 200);
            Box::new(sse)
        }
        Door::AcpWebSocket => {
            let (mut ws, _) = AcpWs::ready(d, &[("Authorization", &bearer)]).await;
            let loaded = ws.call("session/load", load).await;
            assert_eq!(loaded["result"]["_meta"]["mediatord"]["clientId"], device_id, "{loaded}");
            let beat = ws.call("_qwen/session/heartbeat", json!({"sessionId": sid})).await;
            assert_eq!(beat["result"]["clientId"], device_id, "{beat}");
            Box::new(ws)
        }
        Door::AcpHttp => {
            let (mut acp, _) = HttpAcp::open(d, Some(credential)).await;
            let mut conn_stream = Sse::from_response(acp.stream(None, &[]).await);
            let id = acp.request("session/load", load, None).await;
            let (_, loaded) = until(&mut conn_stream, answer_to(id)).await;
            assert!(loaded.get("result").is_some(), "{loaded}");
            let id = acp.request("_qwen/session/heartbeat", json!({"sessionId": sid}), None).await;
            let (_, beat) = until(&mut conn_stream, answer_to(id)).await;
            assert_eq!(beat["result"]["clientId"], device_id, "{beat}");
            Box::new((acp.id.clone(), conn_stream))
        }
    }
}

/// Issue #41, finding 3: round three's finding came back through the new door (`session/load` and
/// `_qwen/session/heartbeat` registered an observer without its role). The same observer device
/// follows a session through each door in turn (REST, `/acp` over WebSocket, `/acp` over
/// Streamable HTTP), and `consensus` counts alice alone on each: her vote decides.
#[tokio::test]
async fn an_observer_is_never_a_consensus_voter_through_rest_acp_websocket_or_acp_http() {
    // A session of its own per door: each registration is its door's alone.
    let d =
        Daemon::start(&["--token", TOKEN, "--permission-policy", "consensus", "--session-scope", "thread"]);
    let (device_id, observer) = d.pair_device(Some(TOKEN), "wall screen", "observer").await;
    for door in [Door::Rest, Door::AcpWebSocket, Door::AcpHttp] {
        let sid = session_as(&d, "alice").await;
        let _following = observe_through(&d, door, &sid, &device_id, &observer).await;
        let mut sse = Sse::connect(&d, &sid, &[("Authorization", format!("Bearer {TOKEN}"))]).await;
        let rid = request_id(&raise_as(&d, &sid, &mut sse, "alice", "write consensus.txt yes").await);
        let vote = op(http().post(d.url(&format!("/session/{sid}/permission/{rid}"))))
            .header("X-Qwen-Client-Id", "alice")
            .json(&selected("allow_once"));
        assert_eq!(send(vote).await.status, 200, "{door:?}");
        let events =
            sse.until(|e| e.event == "permission_resolved" || e.event == "permission_partial_vote").await;
        let last = events.last().expect("an event");
        assert_eq!(
            last.event, "permission_resolved",
            "{door:?}: alice's vote alone decides: {:?}",
            last.data
        );
        let audit = send(op(http().get(d.url(&format!("/session/{sid}/permissions?audit=1"))))).await.ok();
        assert_eq!(audit["audit"][0]["votersAtIssue"], json!(["alice"]), "{door:?}");
    }
}

/// `POST /acp` `initialize` as `bearer`: the status and, when refused, the code and its scope.
async fn initialize(d: &Daemon, bearer: &str) -> (u16, Value, Value) {
    let req = http().post(d.url("/acp")).bearer_auth(bearer).json(&json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1},
    }));
    let reply = send(req).await;
    (reply.status, reply.body["code"].clone(), reply.body["scope"].clone())
}

/// Issue #41, finding 4: one observer device took all 1024 `/acp` slots with Streamable HTTP
/// `initialize`s, and revoking it freed nothing. Its ACP connections now count among its bounds,
/// as its event streams do (the last quarter kept for the operator), and revoking it closes them
/// at once and frees their places for the other devices.
#[tokio::test]
async fn one_device_cannot_take_the_acp_connections_and_revoking_it_closes_and_frees_them() {
    // 12 connections: devices together hold at most 9 places (three quarters), one device 8.
    let d = Daemon::start(&["--token", TOKEN, "--max-connections", "12"]);
    let (spammer_id, spammer) = d.pair_device(Some(TOKEN), "spammer", "observer").await;
    let (_, phone) = d.pair_device(Some(TOKEN), "phone", "voter").await;
    let (mut ws, _) = AcpWs::ready(&d, &[("Authorization", &format!("Bearer {spammer}"))]).await;
    let mut answers = Vec::new();
    for _ in 0..20 {
        answers.push(initialize(&d, &spammer).await);
    }
    let opened = answers.iter().filter(|(status, ..)| *status == 200).count();
    assert_eq!(opened, 7, "with its WebSocket, eight places: {answers:?}");
    for (status, code, scope) in answers.iter().filter(|(status, ..)| *status != 200) {
        assert_eq!(
            (*status, code.as_str(), scope.as_str()),
            (429, Some("stream_limit_exceeded"), Some("device"))
        );
    }
    // The other device takes the ninth place; past it, the operator's quarter is the devices' limit.
    assert_eq!(initialize(&d, &phone).await.0, 200);
    let full = initialize(&d, &phone).await;
    assert_eq!(
        (full.0, full.1.as_str(), full.2.as_str()),
        (429, Some("stream_limit_exceeded"), Some("devices"))
    );
    // The operator still gets in.
    assert_eq!(initialize(&d, TOKEN).await.0, 200);
    // Revoked: its WebSocket closes at once, saying why, and its places are free again.
    assert_eq!(send(op(http().delete(d.url(&format!("/devices/{spammer_id}"))))).await.status, 204);
    assert_eq!(ws.end().await, Ended::Closed(1008, "this device was revoked".into()));
    let freed = initialize(&d, &phone).await;
    assert_eq!(freed.0, 200, "the revoked device's places are free: {freed:?}");
    assert_eq!(initialize(&d, &spammer).await.0, 401);
}

/// The devices' share is not the only bound on a device: once the operator's connections fill the
/// door, a device holding none is refused too, with the door's own code (`503
/// acp_connection_limit`), and gets in again once one of them ends.
#[tokio::test]
async fn a_device_is_refused_once_the_operators_connections_fill_the_door() {
    use futures_util::StreamExt;
    let d = Daemon::start(&["--token", TOKEN]);
    let (_, phone) = d.pair_device(Some(TOKEN), "phone", "voter").await;
    let client = http();
    let operator: Vec<Reply> = futures_util::stream::iter(0..1024)
        .map(|_| {
            send(op(client.post(d.url("/acp"))).json(&json!({
                "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1},
            })))
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(operator.iter().all(|r| r.status == 200), "the operator opens the door's 1024");
    let refused = initialize(&d, &phone).await;
    assert_eq!((refused.0, refused.1.as_str()), (503, Some("acp_connection_limit")), "{refused:?}");
    let id = operator[0].header("acp-connection-id").expect("Acp-Connection-Id").to_owned();
    let ended = send(op(client.delete(d.url("/acp"))).header("Acp-Connection-Id", &id)).await;
    assert_eq!(ended.status, 202);
    assert_eq!(initialize(&d, &phone).await.0, 200);
}

/// A home directory holding what the user service's env file holds (`~/.config/mediatord/env`,
/// as the docs recommend it): the operator token, where an agent running as the same user can
/// read it.
fn home_with_token_file(token: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("home");
    let dir = home.path().join(".config/mediatord");
    std::fs::create_dir_all(&dir).expect("config dir");
    std::fs::write(dir.join("env"), format!("MEDIATORD_TOKEN={token}\n")).expect("env file");
    home
}

/// What the demo agent's `run <command>` printed (its chunk text: `exit N` then the output), and
/// the events of its turn.
async fn agent_runs(d: &Daemon, sid: &str, sse: &mut Sse, command: &str) -> (String, Vec<Event>) {
    prompt_as(d, sid, "alice", &format!("run {command}")).await;
    let turn = sse.until_type("turn_complete").await;
    (chunk_text(&turn), turn)
}

/// A `curl` the agent runs against the daemon at `port`: its body then ` HTTP<status>`.
fn curl(port: u16, method: &str, path: &str, bearer: Option<&str>, body: Option<&str>) -> String {
    let mut c = format!("curl -sS -X {method} -w ' HTTP%{{http_code}}' http://127.0.0.1:{port}{path}");
    if let Some(b) = bearer {
        c.push_str(&format!(" -H \"Authorization: Bearer {b}\""));
    }
    if let Some(b) = body {
        c.push_str(&format!(" -H 'Content-Type: application/json' --data '{b}'"));
    }
    c
}

/// Issue #41, finding 2: a confined agent read the operator token from the user service's env
/// file and acted through the daemon's API: created sessions elsewhere, paired itself a device,
/// voted on its own requests. The daemon now serves no process it started, whatever it presents:
/// the real demo agent, confined (the default `--sandbox workspace`), tries the token from the
/// file, `/acp`, and a vote on its own pending request (over another session of the same agent):
/// each is refused `403 agent_not_a_client`, audited and notified. A person's `curl` as the same
/// user on the same machine still works, and decides the request.
#[tokio::test]
async fn a_confined_agent_is_refused_with_the_token_file_over_acp_and_on_its_own_request() {
    let home = home_with_token_file(TOKEN);
    let mut hook = Receiver::start(&[]).await;
    let config = tempfile::tempdir().expect("config");
    let file = config.path().join("mediatord.json");
    std::fs::write(&file, json!({"serve": {"notify": [{"url": hook.url("/hook")}]}}).to_string())
        .expect("config");
    let workspace = tempfile::tempdir().expect("workspace");
    let args = ["--token", TOKEN, "--session-scope", "thread", "--config", file.to_str().expect("utf-8")];
    let d = Daemon::start_with(workspace.path(), &args, &[("HOME", home.path().to_str().expect("utf-8"))]);
    let (asked, escaper) = (session_as(&d, "alice").await, session_as(&d, "alice").await);
    let auth = [("Authorization", format!("Bearer {TOKEN}"))];
    let mut asked_sse = Sse::connect(&d, &asked, &auth).await;
    let request = raise_as(&d, &asked, &mut asked_sse, "alice", "write own.txt approved-by-itself").await;
    let rid = request_id(&request);
    assert_eq!(hook.next().await.header("x-mediatord-event"), "permission_request");

    let mut sse = Sse::connect(&d, &escaper, &auth).await;
    let token = "$(sed -n s/^MEDIATORD_TOKEN=//p \"$HOME/.config/mediatord/env\")";
    let vote = r#"{"outcome":{"outcome":"selected","optionId":"allow_once"}}"#;
    let attempts = [
        ("GET", "/session".to_owned() + "/" + &asked, None),
        ("POST", "/session".to_owned(), Some("{}")),
        ("POST", format!("/session/{asked}/permission/{rid}"), Some(vote)),
        ("POST", "/devices/pairing".to_owned(), Some("{}")),
        ("POST", "/acp".to_owned(), Some(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#)),
    ];
    let mut announced = Vec::new();
    for (method, path, body) in &attempts {
        let command = curl(d.port, method, path, Some(token), *body);
        let (said, turn) = agent_runs(&d, &escaper, &mut sse, &command).await;
        assert!(
            said.contains(r#""code":"agent_not_a_client""#) && said.ends_with(" HTTP403"),
            "{method} {path}: {said}"
        );
        announced.extend(turn.into_iter().filter(|e| e.event == "agent_refused_as_client"));
    }
    // Its own request is still pending: nothing it did decided it.
    let pending = send(op(http().get(d.url(&format!("/session/{asked}/permissions"))))).await.ok();
    assert_eq!(pending["pending"][0]["requestId"], rid.as_str());
    // Each attempt is in the audit, with what it asked, and announced on the agent's sessions.
    let audit = send(op(http().get(d.url("/audit?outcome=refused")))).await.ok();
    let attempted: Vec<&str> =
        audit["entries"].as_array().expect("entries").iter().filter_map(|e| e["attempt"].as_str()).collect();
    assert!(attempted.contains(&"POST /session/{id}/permission/{request_id}"), "{audit}");
    assert!(attempted.contains(&"POST /acp"), "{audit}");
    assert_eq!(announced.len(), attempts.len(), "each attempt announced on the agent's sessions");
    assert_eq!(announced[2].payload()["attempt"], "POST /session/{id}/permission/{request_id}");
    let notified = hook.next().await;
    assert_eq!(notified.header("x-mediatord-event"), "agent_refused_as_client", "{:?}", notified.body);
    // A person, as the same user on the same machine, decides it.
    let human = op(http().post(d.url(&format!("/session/{asked}/permission/{rid}"))))
        .header("X-Qwen-Client-Id", "alice")
        .json(&selected("allow_once"));
    assert_eq!(send(human).await.status, 200);
    asked_sse.until_type("turn_complete").await;
    assert_eq!(std::fs::read_to_string(d.workspace.join("own.txt")).expect("written"), "approved-by-itself");
}

/// Issue #41, finding 2: on a daemon without a token (the loopback default) the agent needed
/// nothing at all. It is refused there too, on the routes open to any loopback client; each
/// attempt is announced on its agent's sessions, not on another workspace's.
#[tokio::test]
async fn a_confined_agent_is_refused_by_a_tokenless_daemon_on_every_route() {
    let d = Daemon::start(&["--session-scope", "thread", "--any-workspace"]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let elsewhere = tempfile::tempdir().expect("another workspace");
    let cwd = elsewhere.path().canonicalize().expect("canonical");
    let created = d.create(Some("alice"), json!({"cwd": cwd.to_string_lossy()})).await;
    let other = created["sessionId"].as_str().expect("sessionId").to_owned();
    let mut other_sse = Sse::connect(&d, &other, &[]).await;
    let mut announced = 0;
    for (method, path, body) in [
        ("GET", "/health", None),
        ("GET", "/capabilities", None),
        ("POST", "/session", Some("{}")),
        ("POST", "/acp", Some(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#)),
    ] {
        let turn = d
            .turn(&sid, &mut sse, Some("alice"), &format!("run {}", curl(d.port, method, path, None, body)))
            .await;
        announced += turn.iter().filter(|e| e.event == "agent_refused_as_client").count();
        let said = chunk_text(&turn);
        assert!(
            said.contains(r#""code":"agent_not_a_client""#) && said.ends_with(" HTTP403"),
            "{method} {path}: {said}"
        );
    }
    assert_eq!(announced, 4, "each attempt announced on its agent's session");
    // The other workspace's agent (the same agent, by name) heard of none of it: its own next
    // turn ends after every announcement was published.
    let theirs = d.turn(&other, &mut other_sse, Some("alice"), "hello").await;
    let heard: Vec<&str> = theirs.iter().map(|e| e.event.as_str()).collect();
    assert!(!heard.contains(&"agent_refused_as_client"), "{heard:?}");
    // The test itself, a process of this host the daemon did not start, is served.
    assert_eq!(send(http().get(d.url("/health"))).await.status, 200);
}

/// Issue #41, finding 2: as root, an agent read the token from `/proc/<daemon>/environ`. The daemon
/// erases it from its initial environment once read (and still takes it).
#[tokio::test]
async fn the_token_is_erased_from_the_daemons_initial_environment() {
    let token = "erased-from-environ-7f3a";
    let workspace = tempfile::tempdir().expect("workspace");
    let d = Daemon::start_with(workspace.path(), &[], &[("MEDIATORD_TOKEN", token)]);
    assert_eq!(send(http().get(d.url("/capabilities")).bearer_auth(token)).await.status, 200);
    assert_eq!(send(http().get(d.url("/capabilities"))).await.status, 401, "the token is still required");
    let environ = std::fs::read(format!("/proc/{}/environ", d.pid())).expect("environ");
    let text = String::from_utf8_lossy(&environ);
    assert!(!text.contains(token), "the token is in the daemon's initial environment");
    assert!(!text.contains("MEDIATORD_TOKEN="), "{text}");
    assert!(text.contains("HOME="), "the rest stays: {text}");
}

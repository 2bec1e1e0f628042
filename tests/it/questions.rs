//! The agent's questions (`docs/protocol.md#19-questions`, issue #43), black-box over REST and SSE:
//! Qwen Code's `ask_user_question` and ACP's `elicitation/create` (form and URL), raised by the demo
//! agent (`ask`, `elicit`, `elicit-url`, `elicit-raw`), shown as `permission_request`s with their
//! `question`, answered by votes carrying `answers`, and every way they end.
//!
//! The demo agent replies with what it got: `answers: {...}` (qwen), `action: accept content:
//! {...}`, `action: decline` (elicitation), so each test reads the agent's side in its reply.

use serde_json::{Value, json};

use crate::support::*;

/// A vote accepting a question (its `allow_once` option, by the shorthand) with `answers`.
fn accept(answers: Value) -> Value {
    json!({"decision": "allow", "answers": answers})
}

/// Raises `directive`'s question on a fresh session of `d` as alice: (session, stream, request).
async fn asked(d: &Daemon, directive: &str) -> (String, Sse, Value) {
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(d, &sid, &[]).await;
    let request = d.raise(&sid, &mut sse, Some("alice"), directive).await;
    (sid, sse, request)
}

/// Issue #43: the daemon offers elicitation (form and URL) at `initialize` (an agent may use only
/// the modes its client advertised: the demo agent checks), and Qwen Code's question reaches a
/// REST client as qwen serve shows it, with the daemon's `question` beside it; the answers the
/// vote carries reach the agent under its own keys, as strings.
#[tokio::test]
async fn a_qwen_question_is_answered_over_rest_and_the_agent_reads_the_answers() {
    let d = Daemon::start(&[]);
    let (sid, mut sse, request) = asked(&d, "ask").await;
    let meta = &request["toolCall"]["_meta"];
    assert_eq!(meta["qwenInteractionKind"], "user_question");
    assert_eq!(meta["qwenQuestions"][0]["header"], "Library");
    let question = &request["question"];
    assert_eq!(question["form"], "user_question");
    let keys: Vec<&str> =
        question["fields"].as_array().expect("fields").iter().filter_map(|f| f["key"].as_str()).collect();
    assert_eq!(keys, ["0", "1"]);
    assert_eq!(question["fields"][1]["multiple"], true);
    let listed = d.pending(&sid).await;
    assert_eq!(listed[0]["question"], *question, "the listing shows the question too");
    let rid = request_id(&request);
    let vote = json!({
        "outcome": {"outcome": "selected", "optionId": "proceed_once"},
        "answers": {"0": "jiff", "1": "serde, tz"},
    });
    assert_eq!(d.vote(&sid, &rid, Some("alice"), vote).await.pair(), (200, json!({})));
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["answers"], json!({"0": "jiff", "1": ["serde", "tz"]}));
    assert_eq!(resolved["voterClientId"], "alice");
    assert!(
        chunk_text(&events).contains(r#"answers: {"0":"jiff","1":"serde, tz"}"#),
        "{}",
        chunk_text(&events)
    );
}

/// Issue #43: a form elicitation's fields reach a qwen client as `qwenQuestions` (keyed by the
/// property); string answers are converted to the schema's types (`"3"` → 3, `"true"` → true, a
/// choice's title → its value); the secret field's answer is redacted in the event and the audit
/// and is never logged, and the audit names who answered.
#[tokio::test]
async fn a_form_elicitation_answered_over_rest_reaches_the_agent_typed() {
    let d = Daemon::start_env(&[], &[("RUST_LOG", "debug")]);
    let (sid, mut sse, request) = asked(&d, "elicit").await;
    assert_eq!(request["question"]["form"], "form");
    assert_eq!(request["toolCall"]["title"], "Where should this deploy?");
    let questions = request["toolCall"]["_meta"]["qwenQuestions"].as_array().expect("as qwen's");
    let keys: Vec<&str> = questions.iter().filter_map(|q| q["answerKey"].as_str()).collect();
    assert_eq!(keys, ["agree", "name", "region", "replicas", "token"]);
    let ids: Vec<&str> = request["options"]
        .as_array()
        .expect("options")
        .iter()
        .filter_map(|o| o["optionId"].as_str())
        .collect();
    assert_eq!(ids, ["accept", "decline"]);
    let token = request["question"]["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .find(|f| f["key"] == "token")
        .cloned();
    assert_eq!(token.expect("token")["sensitive"], true);
    let rid = request_id(&request);
    let answers =
        json!({"name": "api", "replicas": "3", "region": "Europe", "agree": "true", "token": "sk-secret-42"});
    assert_eq!(d.vote(&sid, &rid, Some("alice"), accept(answers)).await.pair(), (200, json!({})));
    let events = sse.until_type("turn_complete").await;
    assert!(
        chunk_text(&events).contains(
            r#"action: accept content: {"agree":true,"name":"api","region":"eu","replicas":3,"token":"sk-secret-42"}"#
        ),
        "{}",
        chunk_text(&events)
    );
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["answers"]["token"], "[redacted]");
    assert_eq!(resolved["answers"]["replicas"], 3);
    let audit = d.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    let entry = &audit["audit"][0];
    assert_eq!(
        entry["answers"],
        json!({"agree": true, "name": "api", "region": "eu", "replicas": 3, "token": "[redacted]"})
    );
    assert_eq!((entry["voterClientId"].clone(), entry["via"].clone()), (json!("alice"), json!("rest")));
    assert_eq!(entry["question"]["form"], "form");
    let global = d.get("/audit").await.ok();
    assert!(!global.to_string().contains("sk-secret-42"), "{global}");
    assert!(!d.stderr().contains("sk-secret-42"), "the answer of a secret is never logged");
}

/// Issue #43, bad input from a client: an answer of the wrong type, a missing one, an oversized
/// one and a 10 MiB one, an observer's, and an answer to a question already decided are refused
/// with clear errors, the question still pending until it is answered well.
#[tokio::test]
async fn bad_answers_are_refused_and_the_question_stays_pending() {
    let d = Daemon::start(&[]);
    let (sid, mut sse, request) = asked(&d, "elicit").await;
    let rid = request_id(&request);
    let wrong = d.vote(&sid, &rid, Some("alice"), accept(json!({"name": "api", "replicas": "many"}))).await;
    let (status, body) = wrong.pair();
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        (body["code"].clone(), body["field"].clone(), body["reason"].clone()),
        (json!("invalid_answer"), json!("replicas"), json!("expected an integer"))
    );
    let (status, body) = d.vote(&sid, &rid, Some("alice"), accept(json!({"replicas": 2}))).await.pair();
    assert_eq!(
        (status, body["field"].clone(), body["reason"].clone()),
        (400, json!("name"), json!("an answer is required"))
    );
    let big = "x".repeat(1024 * 1024);
    let (status, body) =
        d.vote(&sid, &rid, Some("alice"), accept(json!({"name": big, "replicas": 2}))).await.pair();
    assert_eq!((status, body["reason"].clone()), (400, json!("longer than 16384 bytes")));
    let huge = "x".repeat(10 * 1024 * 1024);
    let (status, body) =
        d.vote(&sid, &rid, Some("alice"), accept(json!({"name": huge, "replicas": 2}))).await.pair();
    assert_eq!((status, body["code"].clone()), (413, json!("body_too_large")), "the body bound first");
    let (status, body) =
        d.vote(&sid, &rid, Some("alice"), json!({"decision": "allow", "answers": ["x"]})).await.pair();
    assert_eq!((status, body["code"].clone()), (400, json!("invalid_vote")));
    let (_, observer) = d.pair_device(None, "wall", "observer").await;
    let watched = d.client().post(d.url(&format!("/session/{sid}/permission/{rid}"))).bearer_auth(&observer);
    let (status, body) = send(watched.json(&accept(json!({"name": "x", "replicas": 1})))).await.pair();
    assert_eq!((status, body["code"].clone()), (403, json!("read_only_device")));
    assert_eq!(d.pending(&sid).await.len(), 1, "every refusal leaves it pending");

    let fine = accept(json!({"name": "api", "replicas": 2}));
    assert_eq!(d.vote(&sid, &rid, Some("alice"), fine.clone()).await.pair().0, 200);
    let events = sse.until_type("turn_complete").await;
    assert!(
        chunk_text(&events).contains(r#"content: {"name":"api","replicas":2}"#),
        "{}",
        chunk_text(&events)
    );
    let (status, body) = d.vote(&sid, &rid, Some("alice"), fine).await.pair();
    assert_eq!((status, body["code"].clone()), (404, json!("permission_already_resolved")));
}

/// Issue #43, bad input from the agent: a form of nested objects, one of 10 000 fields, and a
/// `javascript:` URL are refused with an error the agent reads; nothing is pending, nothing shown.
#[tokio::test]
async fn a_question_the_daemon_cannot_ask_is_refused_to_the_agent() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let fields: serde_json::Map<String, Value> =
        (0..10_000).map(|i| (format!("f{i}"), json!({"type": "string"}))).collect();
    let cases = [
        (
            json!({"mode": "form", "message": "m", "requestedSchema": {"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}}),
            "elicitation refused: field \"a\": type \"object\" is not a primitive",
        ),
        (
            json!({"mode": "form", "message": "m", "requestedSchema": {"type": "object", "properties": fields}}),
            "elicitation refused: the form has 10000 fields, more than 32",
        ),
        (
            json!({"mode": "url", "message": "m", "elicitationId": "e", "url": "javascript:alert(document.cookie)"}),
            "elicitation refused: url must be http or https, not javascript:",
        ),
        (
            json!({"sessionId": "nobody", "mode": "form", "message": "m", "requestedSchema": {"type": "object", "properties": {}}}),
            "unknown sessionId: an elicitation must name a session of this agent",
        ),
    ];
    for (params, said) in cases {
        let events = d.turn(&sid, &mut sse, Some("alice"), &format!("elicit-raw {params}")).await;
        assert!(chunk_text(&events).contains(said), "{}", chunk_text(&events));
        assert!(events.iter().all(|e| e.event != "permission_request"), "nothing asked");
    }
    assert!(d.pending(&sid).await.is_empty());
}

/// Issue #43: a URL elicitation shows the URL and its host; accepted, the agent gets `accept`
/// (and says it is complete: `elicitation_complete`); completed by the agent before anyone
/// answered, it ends `resolvedBy: completed` everywhere.
#[tokio::test]
async fn a_url_elicitation_is_accepted_or_completed_by_the_agent() {
    let d = Daemon::start(&[]);
    let (sid, mut sse, request) = asked(&d, "elicit-url https://login.example/auth?state=1").await;
    assert_eq!(
        (request["question"]["url"].clone(), request["question"]["host"].clone()),
        (json!("https://login.example/auth?state=1"), json!("login.example"))
    );
    assert_eq!(request["options"][0]["name"], "Open the link");
    let rid = request_id(&request);
    assert_eq!(d.vote(&sid, &rid, Some("alice"), json!({"decision": "allow"})).await.pair().0, 200);
    let events = sse.until_type("turn_complete").await;
    assert!(chunk_text(&events).contains("action: accept"), "{}", chunk_text(&events));
    // The agent says it is complete once accepted, before its reply: announced, by the request id.
    assert_eq!(find(&events, "elicitation_complete")["requestId"], rid.as_str());

    let request = d.raise(&sid, &mut sse, Some("alice"), "elicit-url https://login.example/x 300").await;
    let rid = request_id(&request);
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(
        (resolved["requestId"].clone(), resolved["resolvedBy"].clone()),
        (json!(rid), json!("completed"))
    );
    assert_eq!(find(&events, "elicitation_complete")["requestId"], rid.as_str());
    assert!(chunk_text(&events).contains("action: accept"), "{}", chunk_text(&events));
    let (status, body) = d.vote(&sid, &rid, Some("alice"), json!({"decision": "deny"})).await.pair();
    assert_eq!((status, body["code"].clone()), (404, json!("permission_already_resolved")));
}

/// Issue #43: a question ends cleanly everywhere when the turn is cancelled (the agent hears
/// `session/cancel`, then its question is cancelled), when it times out (the agent gets
/// `cancel`), and when the agent dies; the audit says how each ended.
#[tokio::test]
async fn a_question_ends_by_cancel_timeout_or_the_agents_death() {
    let d = Daemon::start(&["--permission-timeout-ms", "1500", "--session-scope", "thread"]);
    let (sid, mut sse, request) = asked(&d, "elicit").await;
    let cancelled = request_id(&request);
    let (status, _) = send(http().post(d.url(&format!("/session/{sid}/cancel")))).await.pair();
    assert_eq!(status, 204);
    let (mut turn_over, mut resolved) = (false, false);
    let events = sse
        .until(|e| {
            turn_over |= e.event == "turn_complete";
            resolved |= e.event == "permission_resolved";
            turn_over && resolved
        })
        .await;
    assert_eq!(find(&events, "permission_resolved")["resolvedBy"], "cancel");
    assert_eq!(find(&events, "turn_complete")["stopReason"], "cancelled");

    let request = d.raise(&sid, &mut sse, Some("alice"), "elicit").await;
    let timed_out = request_id(&request);
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(
        (resolved["requestId"].clone(), resolved["resolvedBy"].clone()),
        (json!(timed_out), json!("timeout"))
    );
    assert!(chunk_text(&events).contains("action: cancel"), "the agent got cancel: {}", chunk_text(&events));

    let request = d.raise(&sid, &mut sse, Some("alice"), "ask").await;
    let orphaned = request_id(&request);
    let other = d.join("bob").await;
    d.prompt_async(&other, Some("bob"), "crash").await;
    let events = sse.rest().await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(
        (resolved["requestId"].clone(), resolved["resolvedBy"].clone()),
        (json!(orphaned), json!("session_closed"))
    );
    assert_eq!(events.last().expect("terminal").event, "session_died");

    // The session is gone: the daemon's audit still has it (newest first).
    let audit = d.get(&format!("/audit?sessionId={sid}")).await.ok();
    let ended: Vec<(Value, Value)> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .rev()
        .map(|e| (e["requestId"].clone(), e["resolvedBy"].clone()))
        .collect();
    assert_eq!(
        ended,
        [
            (json!(cancelled), json!("cancel")),
            (json!(timed_out), json!("timeout")),
            (json!(orphaned), json!("session_closed")),
        ]
    );
}

/// Issue #43 (`docs/protocol.md#19-questions`): under `consensus` a question is not tallied: the
/// first complete answer of a client registered when it was asked decides it.
#[tokio::test]
async fn under_consensus_the_first_complete_answer_decides_a_question() {
    let d = Daemon::start(&["--permission-policy", "consensus"]);
    let sid = d.join("alice").await;
    d.join("bob").await;
    d.join("carol").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "ask").await);
    d.join("dave").await;
    let answers = json!({"outcome": {"outcome": "selected", "optionId": "proceed_once"}, "answers": {"0": "chrono", "1": "tz"}});
    let (status, body) = d.vote(&sid, &rid, Some("dave"), answers.clone()).await.pair();
    assert_eq!((status, body["reason"].clone()), (403, json!("designated_mismatch")));
    assert_eq!(d.vote(&sid, &rid, Some("bob"), answers).await.pair().0, 200);
    let events = sse.until_type("turn_complete").await;
    assert!(events.iter().all(|e| e.event != "permission_partial_vote"));
    assert_eq!(find(&events, "permission_resolved")["voterClientId"], "bob");
    assert!(chunk_text(&events).contains(r#"answers: {"0":"chrono","1":"tz"}"#), "{}", chunk_text(&events));
}

/// The text the agent said in `agent_message_chunk` updates an ACP client saw.
fn acp_said(seen: &[Value]) -> String {
    seen.iter()
        .filter(|m| m["method"] == "session/update")
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect()
}

/// An ACP connection as `client_id`, advertising `elicitation` (`{form?, url?}`) or nothing.
async fn acp_client(d: &Daemon, client_id: &str, elicitation: Option<Value>) -> AcpWs {
    let mut ws = AcpWs::open(d, &[("X-Qwen-Client-Id", client_id)]).await;
    let caps = match elicitation {
        Some(modes) => json!({"elicitation": modes}),
        None => json!({}),
    };
    let init = ws.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": caps})).await;
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    ws
}

/// Issue #43 over `/acp`: a connection that advertised elicitation is asked a form as
/// `elicitation/create` (the schema rebuilt by the daemon, the client knowing it by the daemon's
/// request id), one that did not as `session/request_permission` with qwen's questions. The
/// first's `accept` is the vote: the agent gets exactly its content, typed; the second is
/// withdrawn; the audit names the ACP client.
#[tokio::test]
async fn over_acp_a_form_is_an_elicitation_for_clients_that_take_one_and_a_qwen_question_for_the_rest() {
    let d = Daemon::start(&[]);
    let mut ada = acp_client(&d, "ada", Some(json!({"form": {}, "url": {}}))).await;
    let mut bob = acp_client(&d, "bob", None).await;
    let created = ada.call("session/new", json!({"cwd": d.workspace, "mcpServers": []})).await;
    let sid = created["result"]["sessionId"].as_str().expect("session").to_owned();
    bob.call("session/load", json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []})).await;
    let turn = ada
        .request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "elicit"}]}))
        .await;
    let asked = ada.until(|m| is_request(m, "elicitation/create")).await;
    let p = &asked["params"];
    let rid = p["_meta"]["mediatord/requestId"].as_str().expect("the daemon's request id").to_owned();
    assert_eq!((p["sessionId"].as_str(), p["mode"].as_str()), (Some(sid.as_str()), Some("form")));
    assert_eq!(p["message"], "Where should this deploy?");
    assert_eq!(p["requestedSchema"]["required"], json!(["name", "replicas"]));
    assert_eq!(
        p["requestedSchema"]["properties"]["replicas"],
        json!({"type": "integer", "title": "Replicas", "minimum": 1, "maximum": 9})
    );
    assert_eq!(
        p["requestedSchema"]["properties"]["region"]["oneOf"][0],
        json!({"const": "eu", "title": "Europe"})
    );
    let other = bob.until(|m| is_request(m, "session/request_permission")).await;
    assert_eq!(other["params"]["_meta"]["mediatord/requestId"], rid.as_str());
    let questions = other["params"]["toolCall"]["_meta"]["qwenQuestions"].as_array().expect("qwen's form");
    assert_eq!(questions.len(), 5);
    assert!(
        ada.seen.iter().all(|m| !is_request(m, "session/request_permission")),
        "asked once, as it takes it"
    );

    let content = json!({"name": "api", "replicas": 3, "region": "eu", "agree": true, "token": "sk-acp-7"});
    ada.reply(&asked["id"], json!({"action": "accept", "content": content})).await;
    let answer = ada.answer(turn).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(
        acp_said(&ada.seen).contains(
            r#"action: accept content: {"agree":true,"name":"api","region":"eu","replicas":3,"token":"sk-acp-7"}"#
        ),
        "{}",
        acp_said(&ada.seen)
    );
    let withdrawn = bob.until(|m| m["method"] == "$/cancel_request").await;
    assert_eq!(withdrawn["params"]["requestId"], other["id"]);
    let audit = d.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    let entry = &audit["audit"][0];
    assert_eq!(
        (entry["voterClientId"].clone(), entry["via"].clone(), entry["answers"]["token"].clone()),
        (json!("ada"), json!("acp"), json!("[redacted]"))
    );
}

/// Issue #43 over `/acp`: Qwen Code's question reaches an elicitation client as a form (its
/// questions as properties, keyed as the agent reads them), and the client's typed answer
/// reaches the agent as qwen's strings; one declining an elicitation declines it, and a permission
/// request is still asked of it as one; a client without the capability answers the same kind of
/// question with `{outcome, answers}`.
#[tokio::test]
async fn over_acp_a_qwen_question_is_answered_as_a_form_or_with_answers_and_an_elicitation_declined() {
    let d = Daemon::start(&[]);
    let mut ada = acp_client(&d, "ada", Some(json!({"form": {}}))).await;
    let created = ada.call("session/new", json!({"cwd": d.workspace, "mcpServers": []})).await;
    let sid = created["result"]["sessionId"].as_str().expect("session").to_owned();
    let prompt = |text: &str| json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]});
    let turn = ada.request("session/prompt", prompt("ask")).await;
    let asked = ada.until(|m| is_request(m, "elicitation/create")).await;
    let schema = &asked["params"]["requestedSchema"];
    assert_eq!(schema["properties"]["1"]["type"], "array");
    assert_eq!(schema["properties"]["0"]["oneOf"][1]["const"], "jiff");
    ada.reply(&asked["id"], json!({"action": "accept", "content": {"0": "jiff", "1": ["serde", "tz"]}}))
        .await;
    assert_eq!(ada.answer(turn).await["result"]["stopReason"], "end_turn");
    assert!(
        acp_said(&ada.seen).contains(r#"answers: {"0":"jiff","1":"serde, tz"}"#),
        "{}",
        acp_said(&ada.seen)
    );

    let turn = ada.request("session/prompt", prompt("elicit")).await;
    let asked = ada.until(|m| is_request(m, "elicitation/create")).await;
    ada.reply(&asked["id"], json!({"action": "decline"})).await;
    assert_eq!(ada.answer(turn).await["result"]["stopReason"], "end_turn");
    assert!(acp_said(&ada.seen).ends_with("action: decline"), "{}", acp_said(&ada.seen));

    // A permission request is still asked as one of a client that takes elicitations.
    let turn = ada.request("session/prompt", prompt("write plain.txt asked")).await;
    let asked = ada.until(|m| is_request(m, "session/request_permission")).await;
    ada.reply(&asked["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
    assert_eq!(ada.answer(turn).await["result"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(d.workspace.join("plain.txt")).expect("written"), "asked");

    let mut bob = acp_client(&d, "bob", None).await;
    bob.call("session/load", json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []})).await;
    let turn = bob.request("session/prompt", prompt("ask")).await;
    let asked = bob.until(|m| is_request(m, "session/request_permission")).await;
    assert_eq!(asked["params"]["toolCall"]["_meta"]["qwenInteractionKind"], "user_question");
    let vote = json!({"outcome": {"outcome": "selected", "optionId": "proceed_once"}, "answers": {"0": "chrono", "1": "tz"}});
    bob.reply(&asked["id"], vote).await;
    assert_eq!(bob.answer(turn).await["result"]["stopReason"], "end_turn");
    assert!(acp_said(&bob.seen).contains(r#"answers: {"0":"chrono","1":"tz"}"#), "{}", acp_said(&bob.seen));
}

/// Issue #43 over `/acp`: a URL elicitation reaches a client that takes URLs as one (its id the
/// daemon's request id, the agent's own never shown); a client that takes only forms gets it as a
/// permission request naming the URL and its host. Accepted, the agent's `elicitation/complete`
/// is passed on to the client under the id it was given.
#[tokio::test]
async fn over_acp_a_url_elicitation_is_asked_and_completed_under_the_daemons_id() {
    let d = Daemon::start(&[]);
    let mut ada = acp_client(&d, "ada", Some(json!({"url": {}}))).await;
    let mut bob = acp_client(&d, "bob", Some(json!({"form": {}}))).await;
    let created = ada.call("session/new", json!({"cwd": d.workspace, "mcpServers": []})).await;
    let sid = created["result"]["sessionId"].as_str().expect("session").to_owned();
    bob.call("session/load", json!({"sessionId": sid, "cwd": d.workspace, "mcpServers": []})).await;
    let text = "elicit-url https://login.example/auth?state=9";
    let turn = ada
        .request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}))
        .await;
    let asked = ada.until(|m| is_request(m, "elicitation/create")).await;
    let rid = asked["params"]["_meta"]["mediatord/requestId"].as_str().expect("request id").to_owned();
    assert_eq!(
        (
            asked["params"]["mode"].clone(),
            asked["params"]["url"].clone(),
            asked["params"]["elicitationId"].clone()
        ),
        (json!("url"), json!("https://login.example/auth?state=9"), json!(rid))
    );
    let other = bob.until(|m| is_request(m, "session/request_permission")).await;
    let shown = other["params"]["toolCall"]["content"][0]["content"]["text"].as_str().unwrap_or_default();
    assert_eq!(shown, "Open https://login.example/auth?state=9 (on login.example)");
    ada.reply(&asked["id"], json!({"action": "accept"})).await;
    let complete = ada.until(|m| m["method"] == "elicitation/complete").await;
    assert_eq!(complete["params"]["elicitationId"], rid.as_str());
    assert!(complete.get("id").is_none(), "a notification");
    assert_eq!(ada.answer(turn).await["result"]["stopReason"], "end_turn");
    assert!(acp_said(&ada.seen).contains("action: accept"), "{}", acp_said(&ada.seen));
    assert!(
        bob.seen.iter().all(|m| m["method"] != "elicitation/complete"),
        "only a client asked the URL is told it is complete"
    );
}

/// Issue #43: an editor behind `mediatord connect` that advertised elicitation is passed the
/// daemon's `elicitation/create` (connect no longer answers it `-32601`) under connect's own id,
/// and its answer reaches the agent.
#[tokio::test]
async fn an_editor_behind_connect_answers_an_elicitation() {
    let d = Daemon::start(&[]);
    let mut editor = Editor::start(&d.base, &["--client-id", "zed"], &[]);
    let caps = json!({"elicitation": {"form": {}}});
    let init = editor.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": caps})).await;
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    let new = editor.call("session/new", json!({"cwd": d.workspace, "mcpServers": []})).await;
    let sid = new["result"]["sessionId"].as_str().expect("session").to_owned();
    let turn = editor
        .request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "elicit"}]}))
        .await;
    let asked = editor.until(|m| is_request(m, "elicitation/create")).await;
    assert_eq!(asked["id"], "c-1", "connect numbers the daemon's requests itself");
    assert_eq!(asked["params"]["mode"], "form");
    let content = json!({"name": "web", "replicas": 1});
    editor
        .send(&json!({"jsonrpc": "2.0", "id": "c-1", "result": {"action": "accept", "content": content}}))
        .await;
    let answer = editor.answer(turn).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(
        editor.chunks().concat().contains(r#"action: accept content: {"name":"web","replicas":1}"#),
        "{:?}",
        editor.chunks()
    );
    let audit = d.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    assert_eq!(
        (audit["audit"][0]["voterClientId"].clone(), audit["audit"][0]["via"].clone()),
        (json!("zed"), json!("acp"))
    );
    assert!(editor.close().await.success());
}

/// Issue #43: a question pending when the daemon is killed is `abandoned` at the next start, the
/// audit still saying what was asked; one pending when the daemon stops (SIGTERM) ends
/// `session_closed` before it exits.
#[tokio::test]
async fn a_question_pending_at_a_restart_is_abandoned_or_closed_and_the_audit_says_so() {
    let home = Home::new();
    let d = home.start(&[]);
    let (_, sse, request) = asked(&d, "elicit").await;
    let rid = request_id(&request);
    let pending = || d.client().get(d.url("/audit?outcome=pending"));
    eventually(pending, |b| b["entries"][0]["requestId"] == rid.as_str()).await;
    drop(sse);
    drop(d); // SIGKILL
    let d = home.start(&[]);
    let abandoned = d.get("/audit?outcome=abandoned").await.ok();
    let e = &abandoned["entries"][0];
    assert_eq!((e["requestId"].as_str(), e["resolvedBy"].as_str()), (Some(rid.as_str()), Some("abandoned")));
    assert_eq!(e["question"]["form"], "form", "{e}");
    assert_eq!(e["question"]["message"], "Where should this deploy?");

    let (_, _sse, request) = asked(&d, "ask").await;
    let rid = request_id(&request);
    let mut d = d;
    d.signal(rustix::process::Signal::TERM);
    assert!(d.wait_exit(WAIT).success());
    let d = home.start(&[]);
    let closed = d.get("/audit").await.ok();
    let e = closed["entries"].as_array().and_then(|e| e.iter().find(|e| e["requestId"] == rid.as_str()));
    let e = e.unwrap_or_else(|| panic!("{closed}"));
    assert_eq!(e["resolvedBy"], "session_closed", "{e}");
    assert_eq!(e["question"]["form"], "user_question");
}

/// Runs `mediatord args...` (bounded); its exit code, stdout and stderr.
async fn mediatord(args: &[&str]) -> (i32, String, String) {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.args(args).env_remove("MEDIATORD_TOKEN").env_remove("MEDIATORD_DEVICE").kill_on_drop(true);
    cmd.env("XDG_CONFIG_HOME", no_saved_logins());
    let out = tokio::time::timeout(WAIT, cmd.output()).await.expect("ends in time").expect("run");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// Issue #43: `mediatord approve --answer KEY=VALUE` answers a question (Submit implied; a key
/// given again is several choices); an answer of the wrong type is refused naming the question,
/// exit 1, the question still pending; `--answer` to a permission request that asks nothing is
/// refused before any vote.
#[tokio::test]
async fn approve_answers_a_question_with_answer_flags() {
    let d = Daemon::start(&[]);
    let (sid, mut sse, request) = asked(&d, "elicit").await;
    let rid = request_id(&request);
    let approve = |extra: &[&str]| {
        let mut args = vec!["approve", sid.as_str(), "--url", d.base.as_str(), "--client-id", "script"];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let args = approve(&["--answer", "name=api", "--answer", "replicas=many"]);
    let (code, _, err) = mediatord(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert_eq!(code, 1);
    assert!(err.contains("400: Invalid answer to replicas: expected an integer"), "{err}");
    assert_eq!(d.pending(&sid).await.len(), 1, "still pending");
    let args = approve(&["--answer", "name=api", "--answer", "replicas=3", "--answer", "region=Europe"]);
    let (code, out, err) = mediatord(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("accept on other: Where should this deploy? (request {rid}, 3 answers)"));
    let events = sse.until_type("turn_complete").await;
    assert!(
        chunk_text(&events).contains(r#"content: {"name":"api","region":"eu","replicas":3}"#),
        "{}",
        chunk_text(&events)
    );

    let request = d.raise(&sid, &mut sse, Some("alice"), "ask").await;
    let args = approve(&["--answer", "0=jiff", "--answer", "1=serde", "--answer", "1=tz"]);
    let (code, _, err) = mediatord(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert_eq!(code, 0, "{err}");
    let events = sse.until_type("turn_complete").await;
    assert_eq!(find(&events, "permission_resolved")["requestId"], request["requestId"]);
    assert!(
        chunk_text(&events).contains(r#"answers: {"0":"jiff","1":"serde, tz"}"#),
        "{}",
        chunk_text(&events)
    );

    d.raise(&sid, &mut sse, Some("alice"), "write a.txt x").await;
    let args = approve(&["--answer", "0=x"]);
    let (code, _, err) = mediatord(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert_eq!(code, 1);
    assert!(err.contains("asks no question: --answer has nothing to answer"), "{err}");
    assert_eq!(d.pending(&sid).await.len(), 1, "nothing voted");
    let (code, _, err) = mediatord(&["approve", &sid, "--answer", "novalue"]).await;
    assert_eq!(code, 2, "a usage error: {err}");
    assert!(err.contains("expected KEY=VALUE"), "{err}");
}

/// Issue #43: the terminal client (`mediatord attach`, in tmux) shows a question's fields on its
/// card; `a` asks them in the input line one by one (a choice by its number, a secret typed as
/// dots), and the last Enter answers: the agent gets exactly the answers.
#[tokio::test]
async fn the_terminal_client_answers_a_question_in_its_input_line() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let t = Tmux::run(&[bin(), "attach", &sid, "--url", &d.base, "--client-id", "tui"], &[], 100, 30);
    t.until("the live session", |s| s.contains(" live ")).await;
    d.prompt_async(&sid, Some("alice"), "elicit").await;
    t.until("the question's card", |s| {
        s.contains("the agent asks") && s.contains("4. Replicas (integer)") && s.contains("[a] Submit")
    })
    .await;
    t.keys(&["a"]);
    t.until("the first field asked", |s| s.contains("Agree to the terms (boolean) ›")).await;
    for answer in ["true", "api", "1", "3"] {
        t.text(answer);
        t.keys(&["Enter"]);
    }
    t.until("the secret's field", |s| s.contains("API token ›")).await;
    t.text("sk-tmux-9");
    let screen = t.until("the secret typed as dots", |s| s.contains("API token › •••••••••")).await;
    assert!(!screen.contains("sk-tmux-9"), "{screen}");
    t.keys(&["Enter"]);
    let events = sse.until_type("turn_complete").await;
    assert!(
        chunk_text(&events).contains(
            r#"action: accept content: {"agree":true,"name":"api","region":"eu","replicas":3,"token":"sk-tmux-9"}"#
        ),
        "{}",
        chunk_text(&events)
    );
    assert_eq!(find(&events, "permission_resolved")["voterClientId"], "tui");
    t.until("the outcome on the card", |s| s.contains("decided: Submit, by you (tui)")).await;
    t.keys(&["q"]);
    t.exited().await;
}

/// Issue #43: a notification's link to a question's Submit leads to a page with the form (a
/// secret as a password box; no answer in the URL, which is the link's token only); answers of the
/// wrong type are refused on a page and the link stays usable; the right ones POSTed in the body
/// reach the agent, and the link is spent.
#[tokio::test]
async fn a_notifications_link_answers_a_question_from_its_page() {
    let mut hook = Receiver::start(&[]).await;
    let (d, _cfg) = daemon_notifying(json!([{"url": hook.url("/hook"), "clientId": "phone"}]), &[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    d.raise(&sid, &mut sse, Some("alice"), "elicit").await;
    let delivered = hook.next().await;
    let link = delivered.link("accept");
    let browser = |req: reqwest::RequestBuilder| req.header("accept", "text/html,application/xhtml+xml");
    // Declining asks nothing more: that link's page has the request and its button, no inputs.
    let decline = send(browser(http().get(delivered.link("decline")))).await;
    assert_eq!(decline.status, 200, "{}", decline.text);
    assert!(
        decline.text.contains("<form method=\"post\">") && !decline.text.contains("<input type=\"text\""),
        "{}",
        decline.text
    );
    let page = send(browser(http().get(&link))).await;
    assert_eq!(page.status, 200, "{}", page.text);
    for input in [
        r#"<input type="text" name="answer.name" autocomplete="off">"#,
        r#"<input type="text" name="answer.replicas" inputmode="numeric" autocomplete="off">"#,
        r#"<input type="radio" name="answer.region" value="eu"> Europe</label>"#,
        r#"<option value="true">Yes</option>"#,
        r#"<input type="password" name="answer.token" autocomplete="off">"#,
        r#"<form method="post">"#,
    ] {
        assert!(page.text.contains(input), "{input} in {}", page.text);
    }
    let post = |form: &'static str| {
        send(
            browser(http().post(&link))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form),
        )
    };
    let wrong = post("reviewed=1&answer.name=api&answer.replicas=many").await;
    assert_eq!(wrong.status, 400, "{}", wrong.text);
    assert!(wrong.text.contains("Invalid answer to replicas: expected an integer"), "{}", wrong.text);
    assert_eq!(d.pending(&sid).await.len(), 1, "still pending, the link still usable");
    let done = post("reviewed=1&answer.name=web+api&answer.replicas=4&answer.region=us&answer.agree=false&answer.token=sk-link").await;
    assert_eq!(done.status, 200, "{}", done.text);
    let events = sse.until_type("turn_complete").await;
    assert!(
        chunk_text(&events).contains(
            r#"action: accept content: {"agree":false,"name":"web api","region":"us","replicas":4,"token":"sk-link"}"#
        ),
        "{}",
        chunk_text(&events)
    );
    let resolved = find(&events, "permission_resolved");
    assert_eq!((resolved["voterClientId"].clone(), resolved["via"].clone()), (json!("phone"), json!("link")));
    assert_eq!(post("reviewed=1&answer.name=x&answer.replicas=1").await.status, 410, "spent");
}

//! Black-box tests of the session data path (`docs/protocol.md#3-routes`,
//! `docs/protocol.md#4-agents-workspaces-and-sessions`): create and attach, limits, cwd rules,
//! listing, prompts and their FIFO, cancel, close, models, client bookkeeping, agent death, and the
//! agent's file access through the daemon.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::*;

/// `path` percent-encoded as one URL path segment.
fn encode_segment(path: &Path) -> String {
    let mut out = String::new();
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Demo agents (not their guards) running with `workspace` as their cwd.
fn demo_agents_in(workspace: &Path) -> Vec<u32> {
    pids_with("demo-agent")
        .into_iter()
        .filter(|pid| {
            let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let second = argv.split(|b| *b == 0).nth(1).unwrap_or_default();
            second == b"demo-agent"
                && std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == workspace)
        })
        .collect()
}

/// A turn that runs until cancelled and says so at once (its first chunk is emitted immediately),
/// so a test knows the agent is inside it.
const LONG_TURN: &str = "stream 1000000 20";

fn canonical_tempdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = std::fs::canonicalize(dir.path()).expect("canonical");
    (dir, path)
}

/// `createdAt`: ISO 8601 (what `@qwen-code/sdk` reads) or epoch milliseconds.
fn is_timestamp(v: &Value) -> bool {
    v.as_u64().is_some_and(|t| t > 0) || v.as_str().is_some_and(|t| t.len() >= 20 && t.ends_with('Z'))
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.expect("clock after 1970").as_millis() as u64
}

// ---------------------------------------------------------------------------------------------
// Create, attach, scope

#[tokio::test]
async fn single_scope_second_create_attaches_to_the_same_session() {
    let d = Daemon::start(&[]);
    let first = d.create(Some("alice"), json!({})).await;
    let second = d.create(Some("bob"), json!({})).await;
    assert_eq!(first["attached"], false);
    assert_eq!(second["attached"], true);
    assert_eq!(first["sessionId"], second["sessionId"]);
    assert_eq!(second["clientId"], "bob");
    assert_eq!(second["workspaceCwd"], d.workspace.to_string_lossy().as_ref());
    let sid = first["sessionId"].as_str().expect("sessionId");
    assert_eq!(d.get(&format!("/session/{sid}")).await.body["clientCount"], 2);
}

#[tokio::test]
async fn create_without_a_client_id_mints_one() {
    let d = Daemon::start(&[]);
    let created = d.create(None, json!({})).await;
    let client = created["clientId"].as_str().expect("a minted clientId");
    assert!(!client.is_empty() && client.len() <= 128, "{client}");
    assert!(client.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b)), "{client}");
    // The minted id is a registered client of the session.
    let sid = created["sessionId"].as_str().expect("sessionId");
    let hb = d.post(&format!("/session/{sid}/heartbeat"), Some(client), json!({})).await;
    assert_eq!(hb.status, 200, "{}", hb.body);
}

#[tokio::test]
async fn thread_scope_creates_a_new_session_on_the_same_agent() {
    let d = Daemon::start(&[]);
    let default = d.join("alice").await;
    let thread = d.create(Some("alice"), json!({"sessionScope": "thread"})).await;
    let thread_id = thread["sessionId"].as_str().expect("sessionId");
    assert_eq!(thread["attached"], false);
    assert_ne!(thread_id, default);
    assert_eq!(agent_pid(&d, &default).await, agent_pid(&d, thread_id).await);
    assert_eq!(demo_agents_in(&d.workspace).len(), 1);
}

#[tokio::test]
async fn invalid_session_scope_is_rejected() {
    let d = Daemon::start(&[]);
    for scope in [json!("threads"), json!(""), json!(3)] {
        let r = d.post("/session", None, json!({"sessionScope": scope})).await;
        assert_eq!(r.status, 400, "{scope}: {}", r.body);
        assert_eq!(r.body["code"], "invalid_session_scope");
    }
}

#[tokio::test]
async fn concurrent_creates_coalesce_into_one_session_and_one_agent() {
    let d = Daemon::start(&[]);
    let creates = (0..8).map(|i| {
        let client = format!("client-{i}");
        let d = &d;
        async move { d.create(Some(&client), json!({})).await }
    });
    let results = futures_util::future::join_all(creates).await;
    let fresh = results.iter().filter(|r| r["attached"] == false).count();
    assert_eq!(fresh, 1, "exactly one caller creates: {results:?}");
    let sid = &results[0]["sessionId"];
    assert!(results.iter().all(|r| &r["sessionId"] == sid), "{results:?}");
    assert_eq!(demo_agents_in(&d.workspace).len(), 1, "one agent process for the workspace");
}

#[tokio::test]
async fn concurrent_creates_with_an_agent_that_cannot_start_all_fail_and_leave_nothing() {
    let d = Daemon::start(&["--agent", "/nonexistent/acp-agent --acp"]);
    let creates =
        (0..8).map(|i| d.post("/session", Some(["a", "b", "c", "d", "e", "f", "g", "h"][i]), json!({})));
    for r in futures_util::future::join_all(creates).await {
        assert_eq!(r.status, 502, "{}", r.body);
        assert_eq!(r.body["code"], "agent_start_failed");
        let why = r.body["error"].as_str().unwrap_or_default();
        assert!(why.contains("/nonexistent/acp-agent"), "the error says why: {why}");
    }
    let listed = d.get(&format!("/workspace/{}/sessions", encode_segment(&d.workspace))).await;
    assert_eq!(listed.body, json!({"sessions": []}));
    // Nothing is stuck half-created: the next create tries again and fails the same way.
    let again = d.post("/session", None, json!({})).await;
    assert_eq!(again.status, 502, "{}", again.body);
    assert_eq!(again.body["code"], "agent_start_failed");
}

#[tokio::test]
async fn session_cap_refuses_a_new_session_but_not_an_attach() {
    let d = Daemon::start(&["--max-sessions", "1"]);
    let first = d.create(Some("alice"), json!({})).await;
    let attach = d.create(Some("bob"), json!({})).await;
    assert_eq!(attach["attached"], true);
    assert_eq!(attach["sessionId"], first["sessionId"]);

    let r = d.post("/session", Some("carol"), json!({"sessionScope": "thread"})).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.body["code"], "session_limit_exceeded");
    assert_eq!(r.body["limit"], 1);
    assert_eq!(r.header("retry-after"), Some("5"), "Retry-After: the documented 5 s");
}

// ---------------------------------------------------------------------------------------------
// cwd rules

#[tokio::test]
async fn relative_or_missing_cwd_is_invalid_cwd() {
    let d = Daemon::start(&[]);
    let missing = d.workspace.join("no-such-dir");
    for cwd in [json!("relative/dir"), json!("."), json!(missing.to_string_lossy())] {
        let r = d.post("/session", None, json!({"cwd": cwd})).await;
        assert_eq!(r.status, 400, "{cwd}: {}", r.body);
        assert_eq!(r.body["code"], "invalid_cwd");
    }
}

#[tokio::test]
async fn a_directory_that_is_not_a_workspace_is_a_mismatch() {
    let d = Daemon::start(&[]);
    let (_dir, other) = canonical_tempdir();
    let r = d.post("/session", None, json!({"cwd": other.to_string_lossy()})).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["code"], "workspace_mismatch");
    assert!(demo_agents_in(&other).is_empty());
}

#[tokio::test]
async fn any_workspace_accepts_another_directory_with_its_own_agent() {
    let d = Daemon::start(&["--any-workspace"]);
    let (_dir, other) = canonical_tempdir();
    let primary = d.join("alice").await;
    let created = d.create(Some("alice"), json!({"cwd": other.to_string_lossy()})).await;
    assert_eq!(created["attached"], false);
    assert_eq!(created["workspaceCwd"], other.to_string_lossy().as_ref());
    let sid = created["sessionId"].as_str().expect("sessionId");
    assert_ne!(sid, primary);
    assert_ne!(agent_pid(&d, sid).await, agent_pid(&d, &primary).await);
    assert_eq!(demo_agents_in(&other).len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Listing and status

#[tokio::test]
async fn workspace_sessions_lists_the_live_session() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let r = d.get(&format!("/workspace/{}/sessions", encode_segment(&d.workspace))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sessions = r.body["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 1, "{}", r.body);
    let s = &sessions[0];
    assert_eq!(s["sessionId"], sid.as_str());
    assert_eq!(s["workspaceCwd"], d.workspace.to_string_lossy().as_ref());
    assert_eq!(s["clientCount"], 1);
    assert_eq!(s["hasActivePrompt"], false);
    assert!(is_timestamp(&s["createdAt"]), "{s}");
}

#[tokio::test]
async fn workspace_sessions_is_empty_for_an_idle_workspace() {
    let (_dir, idle) = canonical_tempdir();
    let idle_arg = idle.to_string_lossy().into_owned();
    let d = Daemon::start(&["--workspace", &idle_arg]);
    d.join("alice").await; // a session elsewhere must not show up
    let r = d.get(&format!("/workspace/{}/sessions", encode_segment(&idle))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({"sessions": []}));
}

#[tokio::test]
async fn session_status_reports_the_summary() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let r = d.get(&format!("/session/{sid}")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["sessionId"], sid.as_str());
    assert_eq!(r.body["workspaceCwd"], d.workspace.to_string_lossy().as_ref());
    assert_eq!(r.body["clientCount"], 1);
    assert_eq!(r.body["hasActivePrompt"], false);
    assert_eq!(r.body["pendingPermissions"], 0);
    assert_eq!(r.body["subscribers"], 0);
    assert!(is_timestamp(&r.body["createdAt"]), "{}", r.body);
}

#[tokio::test]
async fn unknown_session_is_404_with_its_id() {
    let d = Daemon::start(&[]);
    let r = d.get("/session/no-such-session").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["code"], "session_not_found");
    assert_eq!(r.body["sessionId"], "no-such-session");
}

// ---------------------------------------------------------------------------------------------
// Prompts

#[tokio::test]
async fn blocking_prompt_returns_end_turn_and_its_turn_complete_matches() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let r = d.prompt(&sid, Some("alice"), "hello there").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["stopReason"], "end_turn");
    let prompt_id = r.body["promptId"].as_str().expect("promptId");
    let events = sse.until_type("turn_complete").await;
    assert_eq!(chunk_text(&events), "hello there");
    let done = events.last().expect("turn_complete");
    assert_eq!(done.payload()["promptId"], prompt_id);
    assert_eq!(done.payload()["stopReason"], "end_turn");
    assert_eq!(done.payload()["sessionId"], sid.as_str());
    assert_eq!(d.get(&format!("/session/{sid}")).await.body["hasActivePrompt"], false);
}

#[tokio::test]
async fn async_prompt_is_accepted_with_its_prompt_id_and_last_event_id() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let first = d.prompt_async(&sid, Some("alice"), "one").await;
    assert_eq!(first["lastEventId"], 0);
    let events = sse.until_type("turn_complete").await;
    let last_id = events.last().and_then(|e| e.id).expect("an id");
    assert_eq!(events.last().expect("turn_complete").payload()["promptId"], first["promptId"]);

    let second = d.prompt_async(&sid, Some("alice"), "two").await;
    assert!(second["promptId"].as_str().is_some_and(|p| !p.is_empty()));
    assert_ne!(second["promptId"], first["promptId"]);
    assert_eq!(second["lastEventId"], last_id);
    let events = sse.until_type("turn_complete").await;
    assert_eq!(events.last().expect("turn_complete").payload()["promptId"], second["promptId"]);
}

#[tokio::test]
async fn queued_prompts_run_in_submission_order_without_interleaving() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let texts = ["first alpha prompt", "second beta prompt", "third gamma prompt"];
    let mut ids = Vec::new();
    for text in texts {
        ids.push(d.prompt_async(&sid, Some("alice"), text).await["promptId"].clone());
    }
    let mut turns = 0;
    let events = sse
        .until(|e| {
            turns += usize::from(e.event == "turn_complete");
            turns == 3
        })
        .await;
    // Each prompt was echoed to every subscriber as it was queued, in submission order...
    let (echoes, events): (Vec<Event>, Vec<Event>) =
        events.into_iter().partition(|e| e.payload()["update"]["sessionUpdate"] == "user_message_chunk");
    let echoed: Vec<(&Value, &Value)> =
        echoes.iter().map(|e| (&e.data["promptId"], &e.payload()["update"]["content"]["text"])).collect();
    let sent: Vec<Value> = texts.iter().map(|t| json!(t)).collect();
    assert_eq!(echoed, ids.iter().zip(&sent).collect::<Vec<_>>());
    // ...and the turns themselves never interleave: split the rest at each turn_complete.
    let mut slices: Vec<Vec<Event>> = vec![Vec::new()];
    for e in events {
        let done = e.event == "turn_complete";
        slices.last_mut().expect("a slice").push(e);
        if done {
            slices.push(Vec::new());
        }
    }
    slices.pop();
    assert_eq!(slices.len(), 3);
    for ((slice, id), text) in slices.iter().zip(&ids).zip(texts) {
        assert!(slice.iter().all(|e| &e.data["promptId"] == id), "events of another turn interleaved");
        assert_eq!(slice.last().expect("turn_complete").payload()["promptId"], *id);
        assert_eq!(chunk_text(slice), text);
    }
}

#[tokio::test]
async fn a_full_prompt_queue_is_503_with_limit_and_retry_after() {
    let d = Daemon::start(&["--max-pending-prompts", "2"]);
    let sid = d.join("alice").await;
    d.prompt_async(&sid, Some("alice"), "stall").await;
    d.prompt_async(&sid, Some("alice"), "queued").await;
    let r = d.post_async(&sid, Some("alice"), text_prompt("one too many")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.body["code"], "prompt_queue_full");
    assert_eq!(r.body["limit"], 2);
    assert_eq!(r.body["pendingCount"], 2);
    assert_eq!(r.header("retry-after"), Some("5"), "Retry-After: the documented 5 s");
}

#[tokio::test]
async fn missing_or_empty_prompt_is_invalid_prompt() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    for body in [json!({}), json!({"prompt": []}), json!({"prompt": "hello"}), json!([1])] {
        let r = d.post(&format!("/session/{sid}/prompt"), Some("alice"), body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert_eq!(r.body["code"], "invalid_prompt", "{body}");
    }
}

#[tokio::test]
async fn cancel_ends_the_running_turn_and_queued_prompts_still_run() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let running = d.prompt_async(&sid, Some("alice"), LONG_TURN).await;
    let queued = d.prompt_async(&sid, Some("alice"), "after the cancel").await;
    // The agent is inside the turn once it streams (the prompt's own echo comes before the turn
    // starts, so it is not waited for).
    sse.until(|e| {
        e.event == "session_update" && e.payload()["update"]["sessionUpdate"] == "agent_message_chunk"
    })
    .await;
    assert_eq!(d.get(&format!("/session/{sid}")).await.body["hasActivePrompt"], true);

    let r = d.post(&format!("/session/{sid}/cancel"), Some("alice"), json!({})).await;
    assert_eq!(r.status, 204);
    let events = sse.until_type("turn_complete").await;
    let done = events.last().expect("turn_complete").payload();
    assert_eq!(done["promptId"], running["promptId"]);
    assert_eq!(done["stopReason"], "cancelled");

    let events = sse.until_type("turn_complete").await;
    let done = events.last().expect("turn_complete").payload();
    assert_eq!(done["promptId"], queued["promptId"]);
    assert_eq!(done["stopReason"], "end_turn");
    assert_eq!(chunk_text(&events), "after the cancel");
}

#[tokio::test]
async fn a_blocking_caller_that_disconnects_cancels_its_turn() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let url = d.url(&format!("/session/{sid}/prompt"));
    let caller = tokio::spawn(async move { http().post(url).json(&text_prompt(LONG_TURN)).send().await });
    let first = sse.until_type("session_update").await;
    let prompt_id = first.last().expect("update").data["promptId"].clone();
    caller.abort(); // drops the request, and with it the connection
    let _ = caller.await;

    let events = sse.until_type("turn_complete").await;
    let done = events.last().expect("turn_complete").payload();
    assert_eq!(done["promptId"], prompt_id);
    assert_eq!(done["stopReason"], "cancelled");
    // The session is still usable.
    assert_eq!(d.prompt(&sid, Some("alice"), "still here").await.body["stopReason"], "end_turn");
}

// ---------------------------------------------------------------------------------------------
// Close

#[tokio::test]
async fn delete_closes_the_session_and_ends_its_stream() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let r = d.delete(&format!("/session/{sid}")).await;
    assert_eq!(r.status, 204);
    let events = sse.rest().await;
    let last = events.last().expect("a terminal event");
    assert_eq!(last.event, "session_closed");
    assert_eq!(last.payload()["sessionId"], sid.as_str());
    let r = d.get(&format!("/session/{sid}")).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["code"], "session_not_found");
}

#[tokio::test]
async fn delete_during_a_turn_ends_the_turn_before_session_closed() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let running = d.prompt_async(&sid, Some("alice"), LONG_TURN).await;
    let queued = d.prompt_async(&sid, Some("alice"), "never runs").await;
    sse.until_type("session_update").await; // the agent is inside the turn
    assert_eq!(d.delete(&format!("/session/{sid}")).await.status, 204);

    let events = sse.rest().await;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(events.last().map(|e| e.event.as_str()), Some("session_closed"), "{kinds:?}");
    for prompt in [&running, &queued] {
        let turn_events: Vec<&Event> = events
            .iter()
            .filter(|e| matches!(e.event.as_str(), "turn_complete" | "turn_error"))
            .filter(|e| e.payload()["promptId"] == prompt["promptId"])
            .collect();
        assert_eq!(turn_events.len(), 1, "exactly one turn event per prompt: {kinds:?}");
    }
}

#[tokio::test]
async fn delete_of_an_unknown_session_is_404() {
    let d = Daemon::start(&[]);
    let r = d.delete("/session/no-such-session").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["code"], "session_not_found");
}

// ---------------------------------------------------------------------------------------------
// Models

#[tokio::test]
async fn create_with_a_known_model_works() {
    let d = Daemon::start(&[]);
    let created = d.create(Some("alice"), json!({"modelServiceId": "demo-smart"})).await;
    let sid = created["sessionId"].as_str().expect("sessionId");
    // The session's state names the model it was created with, not the agent's default.
    assert_eq!(created["models"]["currentModelId"], "demo-smart", "{created}");
    let described = d.get(&format!("/session/{sid}/context")).await;
    assert_eq!(described.body["state"]["models"]["currentModelId"], "demo-smart", "{}", described.body);
    assert_eq!(d.prompt(sid, Some("alice"), "hi").await.body["stopReason"], "end_turn");
}

#[tokio::test]
async fn create_with_an_unknown_model_fails_and_leaves_no_session() {
    let d = Daemon::start(&[]);
    let r = d.post("/session", Some("alice"), json!({"modelServiceId": "no-such-model"})).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.body["code"], "agent_error");
    let listed = d.get(&format!("/workspace/{}/sessions", encode_segment(&d.workspace))).await;
    assert_eq!(listed.body, json!({"sessions": []}));
    // Nothing half-made is left to attach to.
    assert_eq!(d.create(Some("alice"), json!({})).await["attached"], false);
}

#[tokio::test]
async fn set_model_answers_and_emits_model_switched() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let r = d.post(&format!("/session/{sid}/model"), Some("alice"), json!({"modelId": "demo-smart"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({}), "the agent's own result: the demo agent answers set_model with {{}}");
    let events = sse.until_type("model_switched").await;
    let switched = events.last().expect("model_switched").payload();
    assert_eq!(switched, &json!({"sessionId": sid, "modelId": "demo-smart"}));
}

#[tokio::test]
async fn set_model_with_an_empty_id_is_invalid_model_id() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    for body in [json!({"modelId": ""}), json!({}), json!({"modelId": 7})] {
        let r = d.post(&format!("/session/{sid}/model"), Some("alice"), body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert_eq!(r.body["code"], "invalid_model_id");
    }
}

#[tokio::test]
async fn set_model_to_an_unknown_model_is_agent_error() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let r = d.post(&format!("/session/{sid}/model"), Some("alice"), json!({"modelId": "nope"})).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.body["code"], "agent_error");
    assert!(r.body["error"].as_str().is_some_and(|m| m.contains("nope")), "{}", r.body);
}

// ---------------------------------------------------------------------------------------------
// Clients

#[tokio::test]
async fn heartbeat_returns_the_client_and_its_last_seen_time() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let before = now_ms();
    let r = d.post(&format!("/session/{sid}/heartbeat"), Some("bob"), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["sessionId"], sid.as_str());
    assert_eq!(r.body["clientId"], "bob");
    assert!(r.body["lastSeenAt"].as_u64().is_some_and(|t| t >= before), "{}", r.body);
    assert_eq!(d.get(&format!("/session/{sid}")).await.body["clientCount"], 2);
}

#[tokio::test]
async fn detach_removes_the_client_and_keeps_the_session() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let r = d.post(&format!("/session/{sid}/detach"), Some("alice"), json!({})).await;
    assert_eq!(r.status, 204);
    let status = d.get(&format!("/session/{sid}")).await;
    assert_eq!(status.status, 200);
    assert_eq!(status.body["clientCount"], 0);
}

// ---------------------------------------------------------------------------------------------
// Agent death and robustness

#[tokio::test]
async fn agent_crash_ends_every_session_on_it_and_the_next_create_gets_a_fresh_agent() {
    let d = Daemon::start(&[]);
    let a = d.join("alice").await;
    let b = d.create(Some("alice"), json!({"sessionScope": "thread"})).await["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned();
    let old_pid = agent_pid(&d, &a).await;
    let mut sse_a = Sse::connect(&d, &a, &[]).await;
    let mut sse_b = Sse::connect(&d, &b, &[]).await;
    let stalled = d.prompt_async(&a, Some("alice"), "stall").await;
    let crash = d.prompt_async(&b, Some("alice"), "crash 7").await;

    for (sse, prompt) in [(&mut sse_a, &stalled), (&mut sse_b, &crash)] {
        let events = sse.rest().await;
        let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
        let died = events.last().expect("a terminal event");
        assert_eq!(died.event, "session_died", "{kinds:?}");
        assert_eq!(died.payload()["reason"], "agent_exited");
        assert_eq!(died.payload()["exitCode"], 7);
        let error = events.iter().position(|e| e.event == "turn_error").expect("turn_error before the end");
        assert_eq!(events[error].payload()["promptId"], prompt["promptId"]);
        assert_eq!(events[error].payload()["code"], "agent_exited");
        assert!(error < events.len() - 1);
    }
    for sid in [&a, &b] {
        let r = d.get(&format!("/session/{sid}")).await;
        // A durable store keeps it, dormant (resumable): its status says so (docs/protocol.md 3.4);
        // the memory store keeps nothing of it.
        match BACKEND {
            Backend::Memory => assert_eq!(r.status, 404, "{sid} is gone: {}", r.body),
            Backend::Sqlite | Backend::Postgres => assert_eq!(
                (r.status, r.body["state"].as_str(), r.body["endReason"].as_str()),
                (200, Some("dormant"), Some("agent_exited")),
                "{sid}: {}",
                r.body
            ),
        }
    }
    wait_gone(old_pid).await;

    let fresh = d.create(Some("alice"), json!({})).await;
    assert_eq!(fresh["attached"], false);
    let sid = fresh["sessionId"].as_str().expect("sessionId");
    assert_ne!(sid, a);
    assert_ne!(agent_pid(&d, sid).await, old_pid);
}

#[tokio::test]
async fn malformed_agent_lines_are_skipped_and_the_session_keeps_working() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    assert_eq!(d.prompt(&sid, Some("alice"), "malformed").await.body["stopReason"], "end_turn");
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let r = d.prompt(&sid, Some("alice"), "still echoing").await;
    assert_eq!(r.body["stopReason"], "end_turn");
    assert_eq!(chunk_text(&sse.until_type("turn_complete").await), "still echoing");
}

// ---------------------------------------------------------------------------------------------
// The agent's file access through the daemon

/// A daemon whose workspace sits inside a private directory, so `../` lands somewhere unshared.
fn daemon_in_nested_workspace() -> (Daemon, tempfile::TempDir, PathBuf) {
    let (dir, root) = canonical_tempdir();
    let workspace = root.join("ws");
    std::fs::create_dir(&workspace).expect("mkdir ws");
    (Daemon::start_with(&workspace, &[], &[]), dir, root)
}

/// Runs a directive as a blocking prompt and returns the chunk text of its turn.
async fn directive(d: &Daemon, sid: &str, text: &str) -> String {
    let mut sse = Sse::connect(d, sid, &[]).await;
    let r = d.prompt(sid, Some("alice"), text).await;
    assert_eq!(r.status, 200, "{}", r.body);
    chunk_text(&sse.until_type("turn_complete").await)
}

#[tokio::test]
async fn fs_write_outside_the_workspace_is_refused() {
    let (d, _dir, root) = daemon_in_nested_workspace();
    let sid = d.join("alice").await;
    let text = directive(&d, &sid, "fswrite ../outside.txt x").await;
    assert!(text.contains("path_outside_workspace"), "{text}");
    assert!(!root.join("outside.txt").exists(), "nothing is written outside the workspace");
}

#[tokio::test]
async fn fs_write_inside_the_workspace_writes_the_file() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let text = directive(&d, &sid, "fswrite inside.txt hello").await;
    assert_eq!(text, "wrote inside.txt");
    assert_eq!(std::fs::read_to_string(d.workspace.join("inside.txt")).expect("file"), "hello");
}

#[tokio::test]
async fn fs_write_keeps_an_existing_files_mode_and_leaves_no_temp_files() {
    use std::os::unix::fs::PermissionsExt;
    let d = Daemon::start(&[]);
    let path = d.workspace.join("tool.sh");
    std::fs::write(&path, "old").expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let sid = d.join("alice").await;
    let text = directive(&d, &sid, "fswrite tool.sh new contents").await;
    assert_eq!(text, "wrote tool.sh");
    assert_eq!(std::fs::read_to_string(&path).expect("file"), "new contents");
    let mode = std::fs::metadata(&path).expect("metadata").permissions().mode();
    assert_eq!(mode & 0o7777, 0o755);
    let names: Vec<String> = std::fs::read_dir(&d.workspace)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["tool.sh".to_owned()], "no temp files left behind");
}

#[tokio::test]
async fn fs_read_returns_the_file_content() {
    let d = Daemon::start(&[]);
    std::fs::write(d.workspace.join("inside.txt"), "the content").expect("write");
    let sid = d.join("alice").await;
    assert_eq!(directive(&d, &sid, "read inside.txt").await, "the content");
}

#[tokio::test]
async fn update_meta_and_unknown_fields_reach_the_client_untouched() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    d.prompt(&sid, Some("alice"), "echo-meta").await;
    let events = sse.until_type("turn_complete").await;
    let agent_update = |e: &&Event| e.payload()["update"]["sessionUpdate"] != "user_message_chunk";
    let update = events.iter().filter(agent_update).find(|e| e.event == "session_update").expect("an update");
    let update = update.payload();
    assert_eq!(update["sessionId"], sid.as_str());
    assert_eq!(
        update["update"],
        json!({
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "echo-meta"},
            "_meta": {"demo": {"nested": [1, 2, 3]}},
            "extraField": "kept"
        })
    );
}

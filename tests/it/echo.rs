//! Every client sees who asked what: each accepted prompt's content blocks reach every subscriber as
//! `user_message_chunk` updates tagged with the prompt and its sender (`docs/protocol.md#37-post-sessionidprompt`).

use serde_json::{Value, json};

use crate::support::*;

/// The `user_message_chunk` events among `events`.
fn echoes(events: &[Event]) -> Vec<&Event> {
    events.iter().filter(|e| e.payload()["update"]["sessionUpdate"] == "user_message_chunk").collect()
}

#[tokio::test]
async fn another_subscriber_sees_the_prompt_before_the_answer_with_who_sent_it() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    d.join("bob").await;
    let mut bob = Sse::connect(&d, &sid, &[("X-Qwen-Client-Id", "bob".into())]).await;
    let accepted = d.prompt_async(&sid, Some("alice"), "what is in this workspace?").await;
    let events = bob.until_type("turn_complete").await;

    let first = &events[0];
    assert_eq!(first.event, "session_update");
    assert_eq!(first.data["promptId"], accepted["promptId"]);
    assert_eq!(first.data["originatorClientId"], "alice");
    let update = &first.payload()["update"];
    assert_eq!(update["sessionUpdate"], "user_message_chunk");
    assert_eq!(update["content"], json!({"type": "text", "text": "what is in this workspace?"}));
    assert_eq!(update["_meta"]["source"], "bridge-echo", "marked as the daemon's, not the agent's");
    assert!(update["_meta"]["serverTimestamp"].as_u64().is_some_and(|t| t > 0));
    assert_eq!(echoes(&events).len(), 1, "one echo per block");
    assert_eq!(first.id, Some(accepted["lastEventId"].as_u64().expect("lastEventId") + 1));
    assert_eq!(chunk_text(&events), "what is in this workspace?", "then the agent's answer");
}

#[tokio::test]
async fn each_content_block_is_echoed_in_order_as_sent() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let blocks = json!([
        {"type": "text", "text": "compare these"},
        {"type": "resource_link", "uri": "file:///tmp/a.txt", "name": "a.txt", "_meta": {"kept": true}},
        {"type": "text", "text": "and answer"},
    ]);
    let reply = d.post_async(&sid, None, json!({"prompt": blocks})).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let events = sse.until_type("turn_complete").await;
    let echoed: Vec<Value> =
        echoes(&events).iter().map(|e| e.payload()["update"]["content"].clone()).collect();
    assert_eq!(Value::Array(echoed), blocks);
    assert!(
        echoes(&events).iter().all(|e| e.data.get("originatorClientId").is_none()),
        "a prompt without a client id has no originator to name"
    );
}

#[tokio::test]
async fn queued_prompts_are_visible_to_everyone_before_they_run() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    d.prompt_async(&sid, Some("alice"), "stall").await;
    let queued = d.prompt_async(&sid, Some("bob"), "after the stall").await;
    // The second prompt is echoed while the first still runs: a client can show it as queued.
    let events = sse.until(|e| e.payload()["update"]["content"]["text"] == "after the stall").await;
    assert!(events.iter().all(|e| e.event != "turn_complete"), "the first turn is still running");
    let last = events.last().expect("the echo");
    assert_eq!(last.data["promptId"], queued["promptId"]);
    assert_eq!(last.data["originatorClientId"], "bob");
    assert_eq!(d.post(&format!("/session/{sid}/cancel"), None, json!({})).await.status, 204);
    let rest = sse.until(|e| e.event == "turn_complete" && e.data["promptId"] == queued["promptId"]).await;
    assert_eq!(chunk_text(&rest), "after the stall");
}

#[tokio::test]
async fn a_prompt_refused_by_a_full_queue_is_not_echoed() {
    let d = Daemon::start(&["--max-pending-prompts", "1"]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    d.prompt_async(&sid, Some("alice"), "stall").await;
    let refused = d.post_async(&sid, Some("alice"), text_prompt("never shown")).await;
    assert_eq!(refused.status, 503);
    assert_eq!(d.post(&format!("/session/{sid}/cancel"), None, json!({})).await.status, 204);
    let events = sse.until_type("turn_complete").await;
    let texts: Vec<&Value> =
        echoes(&events).iter().map(|e| &e.payload()["update"]["content"]["text"]).collect();
    assert_eq!(texts, [&json!("stall")]);
}

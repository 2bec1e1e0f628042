//! The README's quick start, as a test: create → subscribe → prompt → vote → file written.

use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn quick_start_walkthrough_writes_the_file_after_a_vote() {
    let d = Daemon::start(&[]);
    let created = d.create(Some("alice"), json!({})).await;
    let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
    assert_eq!(created["attached"], false);
    assert_eq!(created["clientId"], "alice");
    assert_eq!(created["workspaceCwd"], d.workspace.to_string_lossy().as_ref());

    let mut sse = Sse::connect(&d, &sid, &[("X-Qwen-Client-Id", "alice".into())]).await;
    d.prompt_async(&sid, Some("alice"), "write notes.txt hello from the demo").await;
    let events = sse.until_type("permission_request").await;
    let request = events.last().expect("request").payload().clone();
    let request_id = request["requestId"].as_str().expect("requestId");
    let allow = request["options"]
        .as_array()
        .expect("options")
        .iter()
        .find(|o| o["kind"] == "allow_once")
        .expect("an allow_once option");

    let res = http()
        .post(d.url(&format!("/session/{sid}/permission/{request_id}")))
        .header("X-Qwen-Client-Id", "alice")
        .json(&json!({"outcome": {"outcome": "selected", "optionId": allow["optionId"]}}))
        .send()
        .await
        .expect("vote");
    assert_eq!(res.status(), 200);
    let rest = sse.until_type("turn_complete").await;
    let resolved = rest.iter().find(|e| e.event == "permission_resolved").expect("resolved event");
    assert_eq!(resolved.payload()["resolvedBy"], "vote");
    assert_eq!(resolved.payload()["voterClientId"], "alice");
    assert_eq!(std::fs::read_to_string(d.workspace.join("notes.txt")).expect("file"), "hello from the demo");
    let done: &Value = rest.last().expect("turn_complete").payload();
    assert_eq!(done["stopReason"], "end_turn");
}

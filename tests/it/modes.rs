//! The agent's session modes: `POST /session/:id/mode` (ACP `session/set_mode`), validated against
//! the modes the agent announced, the `current_mode_update` every client sees, and the context that
//! follows them (`docs/protocol.md#313-post-sessionidmode`).

use serde_json::json;

use crate::support::*;

fn mode_ids(context: &serde_json::Value) -> Vec<&str> {
    let modes = context["state"]["modes"]["availableModes"].as_array().expect("availableModes");
    modes.iter().map(|m| m["id"].as_str().expect("id")).collect()
}

#[tokio::test]
async fn switching_to_an_announced_mode_reaches_every_client_and_the_context() {
    let d = Daemon::start(&[]);
    let created = d.create(Some("alice"), json!({})).await;
    let sid = created["sessionId"].as_str().expect("sessionId");
    assert_eq!(created["modes"]["currentModeId"], "default");
    let mut bob = Sse::connect(&d, sid, &[("X-Qwen-Client-Id", "bob".into())]).await;

    assert_eq!(
        d.post(&format!("/session/{sid}/mode"), Some("alice"), json!({"modeId": "plan"})).await.ok(),
        json!({})
    );
    let update = bob.next().await.expect("an event");
    assert_eq!(update.event, "session_update");
    assert_eq!(update.payload()["update"]["sessionUpdate"], "current_mode_update");
    assert_eq!(update.payload()["update"]["currentModeId"], "plan");
    assert_eq!(update.payload()["update"]["_meta"]["source"], "bridge-set-mode");

    let context = d.get(&format!("/session/{sid}/context")).await.ok();
    assert_eq!(context["state"]["modes"]["currentModeId"], "plan");
    assert_eq!(mode_ids(&context), ["default", "accept-edits", "plan"]);
    // The agent really is in plan mode: it refuses to write.
    let events = d.turn(sid, &mut bob, Some("alice"), "write a.txt hi").await;
    assert_eq!(chunk_text(&events), "plan mode: not writing a.txt");
    assert!(!d.workspace.join("a.txt").exists());
    // A client attaching later learns the current mode from the create's answer too.
    assert_eq!(d.create(Some("carol"), json!({})).await["modes"]["currentModeId"], "plan");
}

#[tokio::test]
async fn a_mode_the_agent_did_not_announce_is_400_invalid_mode() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let path = format!("/session/{sid}/mode");
    for body in [json!({"modeId": "yolo"}), json!({"modeId": ""}), json!({"modeId": 3}), json!({})] {
        let (status, reply) = d.post(&path, None, body.clone()).await.pair();
        assert_eq!(status, 400, "{body}");
        assert_eq!(reply["code"], "invalid_mode", "{body}");
        assert_eq!(reply["availableModes"], json!(["default", "accept-edits", "plan"]), "{body}");
    }
    let (status, reply) = d.post("/session/nope/mode", None, json!({"modeId": "plan"})).await.pair();
    assert_eq!((status, reply["code"].as_str()), (404, Some("session_not_found")));
    let context = d.get(&format!("/session/{sid}/context")).await.ok();
    assert_eq!(context["state"]["modes"]["currentModeId"], "default", "nothing changed");
}

#[tokio::test]
async fn the_agents_own_mode_change_is_relayed_and_followed() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let events = d.turn(&sid, &mut sse, Some("alice"), "mode accept-edits").await;
    let update = events
        .iter()
        .find(|e| e.payload()["update"]["sessionUpdate"] == "current_mode_update")
        .expect("current_mode_update");
    assert_eq!(
        update.payload()["update"],
        json!({"sessionUpdate": "current_mode_update", "currentModeId": "accept-edits"})
    );
    let context = d.get(&format!("/session/{sid}/context")).await.ok();
    assert_eq!(context["state"]["modes"]["currentModeId"], "accept-edits");
    // accept-edits: the write happens without a permission request.
    let events = d.turn(&sid, &mut sse, Some("alice"), "write b.txt written").await;
    assert!(events.iter().all(|e| e.event != "permission_request"));
    assert_eq!(std::fs::read_to_string(d.workspace.join("b.txt")).expect("written"), "written");
}

#[tokio::test]
async fn a_model_switch_is_followed_by_the_context() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    d.post(&format!("/session/{sid}/model"), None, json!({"modelId": "demo-smart"})).await.ok();
    let context = d.get(&format!("/session/{sid}/context")).await.ok();
    assert_eq!(context["state"]["models"]["currentModelId"], "demo-smart");
}

//! A person is one client on every door (issue #48, "Votes by person"), black-box against the real
//! OpenID provider of `people.rs`: Ada signed in on her laptop (REST) and on her phone (`/acp`,
//! with the phone's own credential) is `person:ada` on both, so under `designated` either device
//! decides what the other asked, and Grace does not. Every door that names a client (the event
//! stream, the ACP messages, the session lists, the audit, the notifications, `mediatord
//! transcript`) names her, and none names one of her devices.

use serde_json::{Value, json};

use crate::people::{People, TOKEN, audit_entry};
use crate::support::*;

/// The name every sign-in's device gets (`http/signin.rs`): a door that shows it shows a device,
/// not its person.
const SIGN_IN_DEVICE_NAME: &str = "web sign-in";

/// A fresh device of `account`'s: its device id and its credential (`<deviceId>.<secret>`,
/// protocol 15.1).
async fn device_of(p: &People, account: &str) -> (String, String) {
    let credential = p.signed_in(account).await;
    let id = credential.split_once('.').expect("<deviceId>.<secret>").0.to_owned();
    assert!(id.starts_with("dev-"), "{id}");
    (id, credential)
}

/// What `door` showed names none of `devices` (ids) nor a sign-in's device name: it names people.
fn names_no_device(door: &str, shown: &str, devices: &[&str]) {
    for device in devices.iter().copied().chain([SIGN_IN_DEVICE_NAME]) {
        assert!(!shown.contains(device), "{door} shows the device {device:?}, not its person: {shown}");
    }
}

fn bearer(credential: &str) -> String {
    format!("Bearer {credential}")
}

/// Joins `sid` over `/acp` with `credential`'s device, without the replay; the client id the
/// daemon says the connection acts as.
async fn acp_join(p: &People, credential: &str, sid: &str) -> (AcpWs, Value) {
    let (mut ws, _) = AcpWs::ready(&p.d, &[("Authorization", &bearer(credential))]).await;
    let resumed = ws.call("session/resume", json!({"sessionId": sid, "cwd": p.d.workspace})).await;
    let client = resumed["result"]["_meta"]["mediatord"]["clientId"].clone();
    (ws, client)
}

/// A ballot as the audit shows who cast it: (client id, name, via, counted).
fn ballots(entry: &Value) -> Vec<(String, String, String, bool)> {
    let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
    entry["ballots"]
        .as_array()
        .expect("ballots")
        .iter()
        .map(|b| (s(&b["clientId"]), s(&b["deviceName"]), s(&b["via"]), b["counted"] == true))
        .collect()
}

fn ballot(client: &str, name: &str, via: &str, counted: bool) -> (String, String, String, bool) {
    (client.to_owned(), name.to_owned(), via.to_owned(), counted)
}

/// Under `designated` the originator is the person who prompted, not the device: Ada prompts on
/// her laptop over REST, Grace's vote is refused `designated_mismatch`, and Ada's phone, joined over
/// `/acp` with its own credential, is the connection asked and its answer decides. The session
/// counts Ada once though she is on it with two devices through two doors, and Grace's `/acp`
/// connection sees the request and its outcome but is never asked.
#[tokio::test]
async fn under_designated_her_phone_over_acp_decides_what_her_laptop_asked_over_rest() {
    let p = People::start(&["--permission-policy", "designated"]).await;
    let (laptop_id, laptop) = device_of(&p, "ada").await;
    let (phone_id, phone) = device_of(&p, "ada").await;
    let (_, grace) = device_of(&p, "grace").await;
    assert_ne!(laptop_id, phone_id, "two devices");
    let created = send(http().post(p.d.url("/session")).bearer_auth(&laptop).json(&json!({}))).await.ok();
    assert_eq!(created["clientId"], "person:ada", "{created}");
    let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
    let joined =
        send(http().post(p.d.url("/session")).bearer_auth(&grace).json(&json!({"sessionId": sid}))).await;
    assert_eq!(joined.status, 200, "{}", joined.text);
    let (mut on_phone, phone_client) = acp_join(&p, &phone, &sid).await;
    assert_eq!(phone_client, "person:ada", "her phone is her on /acp too");
    let (mut grace_acp, grace_client) = acp_join(&p, &grace, &sid).await;
    assert_eq!(grace_client, "person:grace");

    // Ada (laptop over REST, phone over /acp) and Grace (REST and /acp): two clients.
    let cwd = p.d.workspace.to_str().expect("utf-8");
    let listed =
        send(http().get(p.d.url(&format!("/workspace/{cwd}/sessions"))).bearer_auth(TOKEN)).await.ok();
    assert_eq!(listed["sessions"][0]["clientCount"], 2, "Ada counted once: {listed}");
    let acp_listed = on_phone.call("session/list", json!({})).await;
    assert_eq!(acp_listed["result"]["sessions"][0]["clientCount"], 2, "{acp_listed}");

    let mut sse = Sse::connect(&p.d, &sid, &[("Authorization", bearer(TOKEN))]).await;
    let queued = http()
        .post(p.d.url(&format!("/session/{sid}/prompt")))
        .bearer_auth(&laptop)
        .header("Prefer", "respond-async")
        .json(&text_prompt("write doors.txt from-her-phone"));
    assert_eq!(send(queued).await.status, 202);
    let raised = sse.until_type("permission_request").await.pop().expect("the request");
    assert_eq!(raised.data["originatorClientId"], "person:ada", "{}", raised.data);
    let rid = raised.payload()["requestId"].as_str().expect("requestId").to_owned();

    let url = p.d.url(&format!("/session/{sid}/permission/{rid}"));
    let refused = send(http().post(&url).bearer_auth(&grace).json(&selected("allow_once"))).await;
    assert_eq!(
        (refused.status, refused.body["code"].as_str(), refused.body["reason"].as_str()),
        (403, Some("permission_forbidden"), Some("designated_mismatch")),
        "{}",
        refused.text
    );
    let forbidden = sse.until_type("permission_forbidden").await.pop().expect("forbidden");
    assert_eq!(forbidden.payload()["clientId"], "person:grace", "{}", forbidden.data);
    assert!(!p.d.workspace.join("doors.txt").exists(), "Grace's vote decided nothing");

    // The phone is asked (it acts as the prompt's sender) and its answer is the decision.
    let ask = on_phone.until(|m| is_request(m, "session/request_permission")).await;
    assert_eq!(ask["params"]["_meta"]["mediatord/requestId"], rid.as_str(), "{ask}");
    assert_eq!(ask["params"]["_meta"]["mediatord/policy"], "designated");
    let announced = on_phone.seen.iter().find(|m| is_event(m, "permission_request")).cloned();
    assert_eq!(announced.expect("announced")["params"]["originatorClientId"], "person:ada");
    on_phone.reply(&ask["id"], selected("allow_once")).await;
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(
        (
            resolved["voterClientId"].as_str(),
            resolved["via"].as_str(),
            resolved["outcome"]["optionId"].as_str()
        ),
        (Some("person:ada"), Some("acp"), Some("allow_once")),
        "{resolved}"
    );
    assert_eq!(
        std::fs::read_to_string(p.d.workspace.join("doors.txt")).ok().as_deref(),
        Some("from-her-phone")
    );

    // Both /acp connections are told who decided; Grace's was never asked.
    for ws in [&mut on_phone, &mut grace_acp] {
        let told = ws.until(|m| is_event(m, "permission_resolved")).await;
        assert_eq!(told["params"]["data"]["voterClientId"], "person:ada", "{told}");
    }
    grace_acp.until(|m| is_event(m, "turn_complete")).await;
    assert!(
        !grace_acp.seen.iter().any(|m| is_request(m, "session/request_permission")),
        "only the originator is asked under designated: {:#?}",
        grace_acp.seen
    );

    let entry = audit_entry(&p.d, &rid).await;
    assert_eq!(
        (entry["originatorClientId"].as_str(), entry["voterClientId"].as_str(), entry["via"].as_str()),
        (Some("person:ada"), Some("person:ada"), Some("acp")),
        "{entry}"
    );
    assert_eq!(
        ballots(&entry),
        [
            ballot("person:grace", "Grace Hopper", "rest", false),
            ballot("person:ada", "Ada Lovelace", "acp", true)
        ]
    );

    let devices = [laptop_id.as_str(), phone_id.as_str()];
    let stream: Vec<&Value> = events.iter().map(|e| &e.data).collect();
    names_no_device("the event stream", &json!(stream).to_string(), &devices);
    names_no_device("her phone's /acp connection", &json!(on_phone.seen).to_string(), &devices);
    names_no_device("Grace's /acp connection", &json!(grace_acp.seen).to_string(), &devices);
    names_no_device("the audit", &entry.to_string(), &devices);
}

/// The other way round, and her name on every door: Ada's phone prompts over `/acp`, her laptop
/// decides over REST (Grace, again, may not). The JSON and ntfy notifications, the ntfy message
/// the decision edits, the audit (`voterDeviceName`, the ballots) and `mediatord transcript` all
/// name Ada, as "Ada Lovelace" where they show names and as `person:ada` where they show client
/// ids; none shows a device of hers.
#[tokio::test]
async fn her_phone_prompts_over_acp_her_laptop_decides_over_rest_and_every_door_names_her() {
    let mut hook = Receiver::start(&[]).await;
    let mut ntfy = Receiver::start(&[]).await;
    let state = tempfile::tempdir().expect("tempdir");
    let state_dir = state.path().join("state");
    let state_dir = state_dir.to_str().expect("utf-8");
    let (hook_url, ntfy_url) = (hook.url("/hook"), format!("ntfy+{}", ntfy.url("/ada")));
    let p = People::start(&[
        "--permission-policy",
        "designated",
        "--notify",
        &hook_url,
        "--notify",
        &ntfy_url,
        "--state-dir",
        state_dir,
    ])
    .await;
    let (laptop_id, laptop) = device_of(&p, "ada").await;
    let (phone_id, phone) = device_of(&p, "ada").await;
    let (_, grace) = device_of(&p, "grace").await;
    let devices = [laptop_id.as_str(), phone_id.as_str()];
    let created = send(http().post(p.d.url("/session")).bearer_auth(&laptop).json(&json!({}))).await.ok();
    let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
    let joined =
        send(http().post(p.d.url("/session")).bearer_auth(&grace).json(&json!({"sessionId": sid}))).await;
    assert_eq!(joined.status, 200, "{}", joined.text);
    let mut sse = Sse::connect(&p.d, &sid, &[("Authorization", bearer(TOKEN))]).await;
    let (mut on_phone, _) = acp_join(&p, &phone, &sid).await;
    let prompt =
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "write names.txt by-her-laptop"}]});
    let turn = on_phone.request("session/prompt", prompt).await;
    let raised = sse.until_type("permission_request").await.pop().expect("the request");
    assert_eq!(raised.data["originatorClientId"], "person:ada", "{}", raised.data);
    let rid = raised.payload()["requestId"].as_str().expect("requestId").to_owned();
    let ask = on_phone.until(|m| is_request(m, "session/request_permission")).await;
    assert_eq!(ask["params"]["_meta"]["mediatord/requestId"], rid.as_str());

    // The notifications of the request: who is asked to decide is no device of hers.
    let asked = hook.next().await;
    assert_eq!(
        (asked.body["event"].as_str(), asked.body["requestId"].as_str()),
        (Some("permission_request"), Some(rid.as_str()))
    );
    names_no_device("the JSON notification", &asked.body.to_string(), &devices);
    let ntfy_asked = ntfy.next().await;
    assert_eq!(ntfy_asked.body["sequence_id"], rid.as_str());
    names_no_device("the ntfy notification", &ntfy_asked.body.to_string(), &devices);

    let url = p.d.url(&format!("/session/{sid}/permission/{rid}"));
    let refused = send(http().post(&url).bearer_auth(&grace).json(&selected("allow_once"))).await;
    assert_eq!((refused.status, refused.body["reason"].as_str()), (403, Some("designated_mismatch")));
    let voted = send(http().post(&url).bearer_auth(&laptop).json(&selected("allow_once"))).await;
    assert_eq!(voted.status, 200, "her laptop decides what her phone asked: {}", voted.text);

    // The phone's question is withdrawn, its prompt answered; the file is written.
    let withdrawn = on_phone.until(|m| m["method"] == "$/cancel_request").await;
    assert_eq!(withdrawn["params"]["requestId"], ask["id"]);
    assert_eq!(on_phone.answer(turn).await["result"]["stopReason"], "end_turn");
    let told = on_phone.seen.iter().find(|m| is_event(m, "permission_resolved")).cloned();
    let told = told.expect("the phone is told");
    assert_eq!(
        (told["params"]["data"]["voterClientId"].as_str(), told["params"]["data"]["via"].as_str()),
        (Some("person:ada"), Some("rest"))
    );
    assert_eq!(
        std::fs::read_to_string(p.d.workspace.join("names.txt")).ok().as_deref(),
        Some("by-her-laptop")
    );

    // The ntfy message that asked now says who decided: the person.
    let edited = ntfy.next().await;
    assert_eq!(
        (edited.body["sequence_id"].as_str(), edited.body["title"].as_str()),
        (Some(rid.as_str()), Some("Decided"))
    );
    let message = edited.body["message"].as_str().expect("message");
    assert!(message.starts_with("Allowed once by Ada Lovelace (person:ada)\n"), "{message}");
    names_no_device("the edited ntfy notification", &edited.body.to_string(), &devices);

    let entry = audit_entry(&p.d, &rid).await;
    assert_eq!(
        (
            entry["voterClientId"].as_str(),
            entry["voterDeviceName"].as_str(),
            entry["originatorClientId"].as_str()
        ),
        (Some("person:ada"), Some("Ada Lovelace"), Some("person:ada")),
        "{entry}"
    );
    assert_eq!(
        ballots(&entry),
        [
            ballot("person:grace", "Grace Hopper", "rest", false),
            ballot("person:ada", "Ada Lovelace", "rest", true)
        ]
    );
    names_no_device("the audit", &entry.to_string(), &devices);

    // The transcript of the session, read from the state the daemon left.
    sse.until_type("turn_complete").await;
    // Grace prompts once and decides nothing: the transcript names her all the same (from her
    // sign-in's record, not from a decision of hers in the audit).
    let hers = json!({"prompt": [{"type": "text", "text": "hello from grace"}]});
    let said =
        send(http().post(p.d.url(&format!("/session/{sid}/prompt"))).bearer_auth(&grace).json(&hers)).await;
    assert_eq!(said.status, 200, "{}", said.text);
    drop((sse, on_phone));
    let People { d, .. } = p;
    stop(d);
    let out = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(bin())
            .args(["transcript", &sid, "--state-dir", state_dir])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the transcript in time")
    .expect("mediatord transcript");
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(md.contains("\n## Prompt from Ada Lovelace (person:ada)\n"), "{md}");
    assert!(md.contains("\n## Prompt from Grace Hopper (person:grace)\n"), "{md}");
    assert!(md.contains("\n> Decision: allow_once, by Ada Lovelace (person:ada)\n"), "{md}");
    names_no_device("mediatord transcript", &md, &devices);
}

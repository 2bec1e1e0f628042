//! The durable state through the real binary (`docs/protocol.md#14-durable-state`): each test runs
//! daemons on a temporary `--state-dir` (and a temporary `XDG_STATE_HOME`, where the demo agent
//! keeps its transcripts), stops or kills one, starts the next on the same directory, and looks at
//! what survived. The last part drives the store's interface itself, as the daemon does, on the
//! same backend: writes that share one transaction, and a transaction that fails.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mediatord::store::{SessionRecord, SessionState, Store, StoredDevice, StoredEvent};
use serde_json::{Value, json};

use crate::support::{
    self, Daemon, Event, Home, Sse, StateLock, WAIT, bin, ids, last_event_id, selected, stop,
};

/// Polls `GET path` (bounded) until `ok` holds for its body; returns it. For the store's writes,
/// which land a moment after the request that caused them.
pub(crate) async fn eventually(d: &Daemon, path: &str, ok: impl Fn(&Value) -> bool) -> Value {
    support::eventually(|| d.client().get(d.url(path)), ok).await
}

/// Every event of a replay, read to the stream's end.
async fn replay(d: &Daemon, sid: &str, headers: &[(&str, String)]) -> Vec<Event> {
    Sse::connect(d, sid, headers).await.rest().await
}

/// Raises a `write` permission request and decides it by `alice`'s vote; returns its request id.
pub(crate) async fn decided_request(d: &Daemon, sid: &str, sse: &mut Sse, file: &str) -> String {
    let request = d.raise(sid, sse, Some("alice"), &format!("write {file} x")).await;
    let rid = request["requestId"].as_str().expect("requestId").to_owned();
    assert_eq!(d.vote(sid, &rid, Some("alice"), selected("allow_once")).await.status, 200);
    sse.until_type("turn_complete").await;
    rid
}

#[tokio::test]
async fn the_audit_survives_a_restart_and_pages_newest_first() {
    let home = Home::new();
    let d = home.start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[("X-Qwen-Client-Id", "alice".into())]).await;
    let mut rids = Vec::new();
    for file in ["a.txt", "b.txt", "c.txt"] {
        rids.push(decided_request(&d, &sid, &mut sse, file).await);
    }
    stop(d);

    let d = home.start(&[]);
    let first = d.get("/audit?limit=2").await.ok();
    assert_eq!(first["durable"], true);
    let entries = first["entries"].as_array().expect("entries");
    let got: Vec<&str> = entries.iter().map(|e| e["requestId"].as_str().expect("id")).collect();
    assert_eq!(got, [rids[2].as_str(), rids[1].as_str()], "newest first");
    let e = &entries[0];
    assert_eq!(e["status"], "selected");
    assert_eq!(e["resolvedBy"], "vote");
    assert_eq!(e["voterClientId"], "alice");
    assert_eq!(e["outcome"], json!({"outcome": "selected", "optionId": "allow_once"}));
    assert_eq!(e["sessionId"], sid.as_str());
    assert_eq!(e["workspace"], home.cwd().as_str());
    assert_eq!(e["toolCall"]["kind"], "edit");
    assert_eq!(e["ballots"].as_array().expect("ballots").len(), 1);
    assert_eq!(e["ballots"][0]["clientId"], "alice");
    assert_eq!(e["options"].as_array().expect("options").len(), 3);
    assert!(e["latencyMs"].as_u64().is_some() && e["resolvedAt"].as_u64() >= e["issuedAt"].as_u64());
    let cursor = first["nextCursor"].as_str().expect("a second page");

    let second = d.get(&format!("/audit?limit=2&cursor={cursor}")).await.ok();
    let got: Vec<&str> = second["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["requestId"].as_str().expect("id"))
        .collect();
    assert_eq!(got, [rids[0].as_str()]);
    assert_eq!(second["nextCursor"], Value::Null);

    // Filters.
    let by_session = d.get(&format!("/audit?sessionId={sid}")).await.ok();
    assert_eq!(by_session["entries"].as_array().expect("entries").len(), 3);
    assert_eq!(d.get("/audit?sessionId=nobody").await.ok()["entries"], json!([]));
    assert_eq!(d.get("/audit?outcome=cancelled").await.ok()["entries"], json!([]));
    let since = entries[1]["issuedAt"].as_u64().expect("issuedAt");
    let recent = d.get(&format!("/audit?since={since}")).await.ok();
    assert_eq!(recent["entries"].as_array().expect("entries").len(), 2);
    let (status, body) = d.get("/audit?cursor=nonsense").await.pair();
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_parameter")));
}

#[tokio::test]
async fn a_sessions_decisions_are_listed_from_the_audit_after_a_restart_dormant_and_resumed() {
    let home = Home::new();
    let d = home.start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[("X-Qwen-Client-Id", "alice".into())]).await;
    let mut rids = Vec::new();
    for file in ["a.txt", "b.txt"] {
        rids.push(decided_request(&d, &sid, &mut sse, file).await);
    }
    let listed = |body: &Value| -> Vec<String> {
        body["audit"]
            .as_array()
            .expect("audit")
            .iter()
            .map(|e| e["requestId"].as_str().expect("id").to_owned())
            .collect()
    };
    let before = d.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    assert_eq!(listed(&before), rids, "oldest first");
    drop(sse);
    stop(d);

    // Dormant: nothing pending, the decisions still listed, as they were.
    let d = home.start(&[]);
    let dormant = d.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    assert_eq!(dormant["pending"], json!([]));
    assert_eq!(listed(&dormant), rids);
    let entry = &dormant["audit"][1];
    assert_eq!(
        (entry["status"].as_str(), entry["voterClientId"].as_str()),
        (Some("selected"), Some("alice"))
    );
    assert_eq!(entry["toolCall"]["title"], before["audit"][1]["toolCall"]["title"]);
    let (status, body) = d.get("/session/never-was/permissions?audit=1").await.pair();
    assert_eq!((status, body["code"].as_str()), (404, Some("session_not_found")));

    // Resumed on a fresh agent (a new mediator, its memory empty): the old decisions, then the new.
    let (status, resumed) = d.post(&format!("/session/{sid}/resume"), None, json!({})).await.pair();
    assert_eq!(status, 200, "{resumed}");
    let mut sse = Sse::connect(&d, &sid, &[("X-Qwen-Client-Id", "alice".into())]).await;
    rids.push(decided_request(&d, &sid, &mut sse, "c.txt").await);
    let after = d.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    assert_eq!(listed(&after), rids);
    // Without ?audit=1 the list is the pending requests only.
    assert_eq!(d.get(&format!("/session/{sid}/permissions")).await.ok(), json!({"pending": []}));
}

#[tokio::test]
async fn requests_pending_when_the_daemon_died_are_abandoned_at_the_next_start() {
    let home = Home::new();
    let d = home.start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write pending.txt x").await;
    let rid = request["requestId"].as_str().expect("requestId").to_owned();
    eventually(&d, "/audit?outcome=pending", |b| b["entries"][0]["requestId"] == rid.as_str()).await;
    drop(sse);
    drop(d); // SIGKILL

    let d = home.start(&[]);
    let abandoned = d.get("/audit?outcome=abandoned").await.ok();
    let e = &abandoned["entries"][0];
    assert_eq!(e["requestId"], rid.as_str());
    assert_eq!(e["status"], "abandoned");
    assert_eq!(e["resolvedBy"], "abandoned");
    assert_eq!(d.get("/audit?outcome=pending").await.ok()["entries"], json!([]));
    // The session it belonged to is dormant.
    let listed = d.get(&format!("{}?include=ended", home.workspace_path("sessions"))).await.ok();
    let s = &listed["sessions"][0];
    assert_eq!((s["sessionId"].as_str(), s["state"].as_str()), (Some(sid.as_str()), Some("dormant")));
    assert_eq!(s["endReason"], "daemon_stopped");
}

#[tokio::test]
async fn a_workspace_rule_is_announced_persists_and_answers_after_a_restart() {
    let home = Home::new();
    let d = home.start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rules = home.workspace_path("permission-rules");
    let (status, created) =
        d.post(&rules, Some("alice"), json!({"effect": "allow", "kinds": ["edit"]})).await.pair();
    assert_eq!(status, 201, "{created}");
    let rule_id = created["rule"]["ruleId"].as_str().expect("ruleId").to_owned();
    assert_eq!(created["rule"]["createdBy"], "alice");
    let announced = sse.until_type("policy_updated").await;
    let update = announced.last().expect("policy_updated").payload();
    assert_eq!(update["workspaceRules"][0]["ruleId"], rule_id.as_str());
    assert_eq!(update["rules"], json!([]), "the session's own rules are unchanged");
    drop(sse);
    drop(d); // SIGKILL: the 201 came after the rule was committed

    let d = home.start(&[]);
    let listed = d.get(&rules).await.ok();
    assert_eq!(listed["rules"][0]["ruleId"], rule_id.as_str());
    let sid = d.join("bob").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let events = d.turn(&sid, &mut sse, Some("bob"), "write ruled.txt by rule").await;
    let resolved = crate::support::find(&events, "permission_resolved");
    assert_eq!(resolved["resolvedBy"], "rule");
    assert_eq!(resolved["ruleId"], rule_id.as_str());
    assert_eq!(std::fs::read_to_string(home.workspace.join("ruled.txt")).expect("written"), "by rule");

    // A session's own deny still beats the workspace's allow.
    let own = json!({"effect": "deny", "kinds": ["edit"]});
    assert_eq!(d.post(&format!("/session/{sid}/permission-rules"), None, own).await.status, 201);
    let events = d.turn(&sid, &mut sse, Some("bob"), "write denied.txt no").await;
    let resolved = crate::support::find(&events, "permission_resolved");
    assert_eq!(resolved["outcome"], json!({"outcome": "selected", "optionId": "reject_once"}));

    assert_eq!(d.delete(&format!("{rules}/{rule_id}")).await.status, 204);
    assert_eq!(d.get(&rules).await.ok()["rules"], json!([]));
    assert_eq!(d.delete(&format!("{rules}/{rule_id}")).await.pair().1["code"], "rule_not_found");
}

#[tokio::test]
async fn remember_workspace_answers_the_workspaces_other_sessions() {
    let home = Home::new();
    let d = home.start(&["--session-scope", "thread"]);
    let first = d.join("alice").await;
    let second = d.join("alice").await;
    assert_ne!(first, second);
    let mut sse1 = Sse::connect(&d, &first, &[]).await;
    let mut sse2 = Sse::connect(&d, &second, &[]).await;
    let request = d.raise(&first, &mut sse1, Some("alice"), "write shared.txt one").await;
    let rid = request["requestId"].as_str().expect("requestId");
    let vote = json!({"decision": "allow-workspace"});
    assert_eq!(d.vote(&first, rid, Some("alice"), vote).await.status, 200);
    sse1.until_type("turn_complete").await;
    // The other session hears of the rule, then a matching request there is answered by it.
    let announced = sse2.until_type("policy_updated").await;
    let rule_id = announced.last().expect("event").payload()["workspaceRules"][0]["ruleId"].clone();
    assert!(rule_id.is_string(), "{rule_id}");
    let events = d.turn(&second, &mut sse2, Some("alice"), "write shared.txt one").await;
    let resolved = crate::support::find(&events, "permission_resolved");
    assert_eq!((&resolved["resolvedBy"], &resolved["ruleId"]), (&json!("rule"), &rule_id));
    let listed = d.get(&home.workspace_path("permission-rules")).await.ok();
    assert_eq!(listed["rules"][0]["ruleId"], rule_id);
}

/// Streams `n` chunks in one turn and returns every event the subscriber saw.
async fn streamed(d: &Daemon, sid: &str, n: u32) -> Vec<Event> {
    let mut sse = Sse::connect(d, sid, &[]).await;
    d.turn(sid, &mut sse, Some("alice"), &format!("stream {n}")).await
}

#[tokio::test]
async fn a_dormant_session_replays_across_a_restart_and_resumes_with_continuing_ids() {
    let home = Home::new();
    let d = home.start(&[]);
    let sid = d.join("alice").await;
    let live = streamed(&d, &sid, 20).await;
    let live_ids = ids(&live);
    let last = *live_ids.last().expect("ids");
    stop(d);

    let d = home.start(&[]);
    let listed = d.get(&format!("{}?include=ended", home.workspace_path("sessions"))).await.ok();
    let s = &listed["sessions"][0];
    assert_eq!((s["state"].as_str(), s["endReason"].as_str()), (Some("dormant"), Some("daemon_shutdown")));
    assert_eq!(d.get(&home.workspace_path("sessions")).await.ok()["sessions"], json!([]), "none live");

    // The whole history, then the part after a Last-Event-ID, byte for byte the frames streamed.
    let all = replay(&d, &sid, &[]).await;
    let replayed: Vec<&Event> = all.iter().filter(|e| e.id.is_some()).collect();
    let ids_all: Vec<u64> = replayed.iter().filter_map(|e| e.id).collect();
    assert_eq!(ids_all, (1..=last + 1).collect::<Vec<_>>(), "every event, the terminal one included");
    for (seen, again) in live.iter().zip(&replayed) {
        assert_eq!(seen.data, again.data);
    }
    assert_eq!(replayed.last().expect("events").event, "session_closed");
    let done = all.last().expect("events");
    assert_eq!(done.event, "replay_complete");
    assert_eq!(done.payload()["sessionState"], "dormant");
    let after = replay(&d, &sid, &last_event_id(10)).await;
    assert_eq!(ids(&after), (11..=last + 1).collect::<Vec<_>>());

    // Resume: the same id, the agent's session/load, ids continuing after the terminal event.
    let (status, resumed) = d.post(&format!("/session/{sid}/resume"), None, json!({})).await.pair();
    assert_eq!(status, 200, "{resumed}");
    assert_eq!((resumed["resumed"].as_bool(), resumed["lastEventId"].as_u64()), (Some(true), Some(last + 1)));
    // A client reconnecting with its Last-Event-ID still gets what it missed.
    let mut sse = Sse::connect(&d, &sid, &last_event_id(last - 1)).await;
    let caught_up = sse.until_type("replay_complete").await;
    assert_eq!(ids(&caught_up), [last, last + 1]);
    let turn = d.turn(&sid, &mut sse, Some("alice"), "hello again").await;
    assert_eq!(ids(&turn).first().copied(), Some(last + 2));
    assert_eq!(crate::support::chunk_text(&turn), "hello again");
    let again = d.post(&format!("/session/{sid}/resume"), None, json!({})).await.ok();
    assert_eq!(again["resumed"], false, "a live session is not resumed twice");
    stop(d);

    // The resumed turn is part of the history too, after the whole of what came before it.
    let d = home.start(&[]);
    let all = replay(&d, &sid, &last_event_id(last + 1)).await;
    assert_eq!(ids(&all).first().copied(), Some(last + 2));
    let whole = ids(&replay(&d, &sid, &[]).await);
    assert_eq!(whole, (1..=*whole.last().expect("ids")).collect::<Vec<_>>(), "the resume kept the history");
}

/// Issue #44: `GET /session/{id}` of a dormant session was `404` while its permissions and replay
/// answered and the workspace list showed it `dormant`. It answers with the session's record, and
/// once resumed with its live status again.
#[tokio::test]
async fn a_dormant_session_answers_get_session_with_its_state_and_end_reason() {
    let home = Home::new();
    let d = home.start(&[]);
    let sid = d.join("alice").await;
    let last = *ids(&streamed(&d, &sid, 3).await).last().expect("ids");
    let live = d.get(&format!("/session/{sid}")).await.ok();
    assert_eq!((live["state"].as_str(), live["pendingPrompts"].as_u64()), (Some("live"), Some(0)), "{live}");
    // A session a client closed is gone, as in qwen serve.
    let closed = d.create(Some("bob"), json!({"sessionScope": "thread"})).await["sessionId"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(d.delete(&format!("/session/{closed}")).await.status, 204);
    stop(d);

    let d = home.start(&[]);
    let (status, got) = d.get(&format!("/session/{sid}")).await.pair();
    assert_eq!(status, 200, "{got}");
    let listed = d.get(&format!("{}?include=ended", home.workspace_path("sessions"))).await.ok();
    let record =
        listed["sessions"].as_array().expect("sessions").iter().find(|s| s["sessionId"] == sid.as_str());
    assert_eq!(Some(&got), record, "the record, as the workspace list shows it");
    let gone = d.get(&format!("/session/{closed}")).await;
    assert_eq!((gone.status, gone.body["code"].as_str()), (404, Some("session_not_found")), "{}", gone.text);
    assert_eq!(
        (got["state"].as_str(), got["endReason"].as_str(), got["lastEventId"].as_u64()),
        (Some("dormant"), Some("daemon_shutdown"), Some(last + 1)),
        "{got}"
    );
    assert_eq!(got["workspaceCwd"], home.cwd());
    assert!(got["endedAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{got}");
    assert_eq!(d.get("/session/no-such-session").await.status, 404);

    let resumed = d.post(&format!("/session/{sid}/resume"), None, json!({})).await.ok();
    assert_eq!(resumed["resumed"], true);
    assert_eq!(d.get(&format!("/session/{sid}")).await.ok()["state"], "live");
}

/// A session's history as one recorded row standing for every event, from id 1 to its last: its
/// frames kept but unreadable (`damaged`: an unknown codec), or none (a gap marker: the writer
/// had no room for them), rewritten in the database while no daemon runs.
fn rewrite_as_one_row(home: &Home, sid: &str, damaged: bool) {
    let last_row = format!("(SELECT MAX(last_id) FROM events WHERE session_id = '{sid}')");
    let (frames, codec) = if damaged { ("frames", 9) } else { ("NULL", 0) };
    support::state_sql(
        &home.state,
        &format!(
            "UPDATE events SET first_id = 1, frames = {frames}, codec = {codec}
               WHERE session_id = '{sid}' AND last_id = {last_row};
             DELETE FROM events WHERE session_id = '{sid}' AND last_id < {last_row};"
        ),
    );
}

/// A replay from a `Last-Event-ID` inside events the history cannot give back (a run it cannot
/// read, or a gap it recorded): one `history_gap` naming only what follows the cursor, then the
/// end of the replay.
#[tokio::test]
async fn a_replay_from_inside_an_unreadable_run_or_a_gap_names_only_what_follows_the_cursor() {
    let home = Home::new();
    let d = home.start(&[]);
    let sid = d.join("alice").await;
    let last = *ids(&streamed(&d, &sid, 20).await).last().expect("ids") + 1; // and session_closed
    stop(d);
    for damaged in [true, false] {
        rewrite_as_one_row(&home, &sid, damaged);
        let d = home.start(&[]);
        let replayed = replay(&d, &sid, &last_event_id(5)).await;
        let kinds: Vec<&str> = replayed.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(kinds, ["history_gap", "replay_complete"], "damaged: {damaged}");
        let gap = replayed[0].payload();
        assert_eq!((gap["fromId"].as_u64(), gap["toId"].as_u64()), (Some(6), Some(last)), "{gap}");
        stop(d);
    }
}

#[tokio::test]
async fn resume_is_refused_for_an_agent_without_load_session() {
    let home = Home::new();
    let agent = format!("{} demo-agent --no-load-session", bin());
    let d = home.start(&["--agent", &agent]);
    let sid = d.join("alice").await;
    stop(d);
    let d = home.start(&["--agent", &agent]);
    let (status, body) = d.post(&format!("/session/{sid}/resume"), None, json!({})).await.pair();
    assert_eq!((status, body["code"].as_str()), (409, Some("resume_unsupported")), "{body}");
    let (status, body) = d.post("/session/never-was/resume", None, json!({})).await.pair();
    assert_eq!((status, body["code"].as_str()), (404, Some("session_not_found")));
}

/// The durability promise: after `kill -9` mid-stream, the history is exactly the ids 1..=K, and
/// K covers everything the subscriber had received more than a second before the kill.
#[tokio::test]
async fn after_kill_9_the_history_is_a_gap_free_prefix_missing_at_most_the_last_second() {
    let home = Home::new();
    let d = home.start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    // About 6 s of streaming at 1000 chunks/s; the kill comes in the middle.
    d.prompt_async(&sid, Some("alice"), "stream 6000 1000").await;
    let mut received: Vec<(u64, Instant)> = Vec::new();
    while received.len() < 2500 {
        let e = sse.next().await.expect("the stream runs");
        if let Some(id) = e.id {
            received.push((id, Instant::now()));
        }
    }
    let killed_at = Instant::now();
    drop(d); // SIGKILL, then reaped
    let settled: u64 = received
        .iter()
        .filter(|(_, at)| killed_at.duration_since(*at) > Duration::from_secs(1))
        .map(|(id, _)| *id)
        .max()
        .unwrap_or(0);
    assert!(settled > 0, "the stream ran for more than a second before the kill");

    let d = home.start(&[]);
    let all = replay(&d, &sid, &[]).await;
    assert!(all.iter().all(|e| e.event != "history_gap"), "the writer kept up on an idle disk");
    let got = ids(&all);
    let k = got.len() as u64;
    assert_eq!(got, (1..=k).collect::<Vec<_>>(), "a gap-free prefix");
    assert!(
        k >= settled,
        "the history ends at {k}, but {settled} had been streamed more than 1 s before the kill"
    );
    let streamed_before: Vec<u64> = received.iter().map(|(id, _)| *id).collect();
    assert!(got.iter().zip(&streamed_before).all(|(a, b)| a == b), "the same events as streamed");
    // The session never ended: its record knows its last event from the commits alone (what a
    // resume continues the ids after).
    let listed = d.get(&format!("{}?include=ended", home.workspace_path("sessions"))).await.ok();
    assert_eq!(listed["sessions"][0]["lastEventId"], k, "{listed}");
}

#[tokio::test]
async fn retention_keeps_the_newest_events_of_each_session() {
    let home = Home::new();
    let d = home.start(&["--history-events", "10"]);
    let sid = d.join("alice").await;
    let live = streamed(&d, &sid, 30).await;
    let last = *ids(&live).last().expect("ids") + 1; // and session_closed
    stop(d);

    // Retention runs in the background once the next daemon is up.
    let d = home.start(&["--history-events", "10"]);
    let deadline = Instant::now() + WAIT;
    let kept = loop {
        let all = replay(&d, &sid, &[]).await;
        let kept = ids(&all);
        if kept.len() == 10 {
            break kept;
        }
        assert!(Instant::now() < deadline, "retention never ran: {} events kept", kept.len());
        tokio::time::sleep(Duration::from_millis(50)).await; // polling a background pass
    };
    assert_eq!(kept, (last - 9..=last).collect::<Vec<_>>());
    // A client whose Last-Event-ID is older learns that the history moved on.
    let mut sse = Sse::connect(&d, &sid, &last_event_id(3)).await;
    let first = sse.next().await.expect("an event");
    assert_eq!(first.event, "state_resync_required");
    assert_eq!(first.payload()["earliestAvailableId"], last - 9);
    let health = d.get("/health?deep=1").await.ok();
    assert_eq!(health["store"]["durable"], true);
    assert!(health["store"]["dbBytes"].as_u64().expect("dbBytes") > 0);
}

/// Runs `sql` on the durable state of `home` while no daemon holds it: SQLite's `state.db`, or the
/// PostgreSQL database the suite maps the state directory to. For what the wire cannot do: age a
/// record by weeks.
fn on_the_store(home: &Home, sql: &str) {
    if support::POSTGRES {
        let pg = support::postgres::Postgres::shared();
        pg.sql(&support::postgres::database_for(&home.state), sql);
    } else {
        let db = rusqlite::Connection::open(home.state.join("state.db")).expect("state.db");
        db.execute_batch(sql).expect("sql");
    }
}

/// `--history-days` (`docs/protocol.md#14-durable-state`): a session that ended before the cutoff
/// leaves the history with its events, and decided audit entries raised before it go; a session
/// that ended within it, and its entry, stay.
#[tokio::test]
async fn history_days_ages_out_what_ended_before_the_cutoff() {
    let home = Home::new();
    let d = home.start(&[]);
    let mut raised = Vec::new();
    for file in ["old.txt", "recent.txt"] {
        // A session of its own each (`thread`: not the workspace's shared one).
        let created = d.create(Some("alice"), json!({"sessionScope": "thread"})).await;
        let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
        let mut sse = Sse::connect(&d, &sid, &[]).await;
        let rid = decided_request(&d, &sid, &mut sse, file).await;
        raised.push((sid, rid));
    }
    let [(old, old_rid), (recent, recent_rid)] = <[_; 2]>::try_from(raised).expect("two sessions");
    eventually(&d, "/audit", |b| b["entries"].as_array().is_some_and(|e| e.len() == 2)).await;
    stop(d); // both sessions end (dormant, `ended_at` now)
    // 31 days back: past `--history-days 30` for the old session and its decision only.
    let month = 31 * 86_400_000_i64;
    on_the_store(
        &home,
        &format!(
            "UPDATE sessions SET ended_at = ended_at - {month} WHERE session_id = '{old}';
             UPDATE audit SET requested_at = requested_at - {month} WHERE session_id = '{old}';"
        ),
    );

    // Retention's first pass runs once the daemon is up.
    let d = home.start(&["--history-days", "30"]);
    let listed = eventually(&d, &home.workspace_path("sessions?include=ended"), |b| {
        b["sessions"].as_array().is_some_and(|s| s.len() == 1)
    })
    .await;
    assert_eq!(listed["sessions"][0]["sessionId"], recent.as_str(), "{listed}");
    let audit = d.get("/audit").await.ok();
    let kept: Vec<&str> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["requestId"].as_str())
        .collect();
    assert_eq!(kept, [recent_rid.as_str()], "{audit}");
    assert_ne!(old_rid, recent_rid);
    // The old session's history is gone with it; the recent one still replays.
    let gone = d.get(&format!("/session/{old}/events")).await;
    assert_eq!(gone.status, 404, "{}", gone.text);
    let kept = replay(&d, &recent, &[]).await;
    assert!(kept.iter().any(|e| e.event == "permission_resolved"), "the recent history replays");
}

/// Issue #27, finding 14: a time past 2^63 wrapped negative in SQLite and selected every entry.
/// Times and cursors are checked for their range (`400 invalid_parameter`), and the store binds
/// none of them wrapped.
#[tokio::test]
async fn audit_times_and_cursors_out_of_range_are_refused_not_wrapped() {
    let home = Home::new();
    let d = home.start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    decided_request(&d, &sid, &mut sse, "ranged.txt").await;
    let all = eventually(&d, "/audit", |b| b["entries"].as_array().is_some_and(|e| !e.is_empty())).await;
    assert_eq!(all["entries"].as_array().map(Vec::len), Some(1));
    for query in [
        "since=9223372036854775808",
        "since=18446744073709551615",
        "until=9007199254740992",
        "since=10&until=9",
        "cursor=c8000000000000000",
    ] {
        let (status, body) = d.get(&format!("/audit?{query}")).await.pair();
        assert_eq!((status, body["code"].as_str()), (400, Some("invalid_parameter")), "{query}: {body}");
    }
    let latest = d.get("/audit?since=9007199254740991").await.ok();
    assert_eq!(latest["entries"], json!([]), "the latest time selects nothing");
}

// The store's interface (`mediatord::store::Store`), driven as the daemon drives it, on this
// crate's backend: what the writer makes of writes that share one transaction, and of one that
// fails. Plain tests: the store's writer and reads block, off any async runtime.

/// A session's record as the daemon starts it.
fn started(session_id: &str) -> SessionRecord {
    SessionRecord {
        session_id: session_id.into(),
        workspace: "/ws".into(),
        agent: "demo".into(),
        created_at: 1,
        ended_at: None,
        state: SessionState::Live,
        end_reason: None,
        last_event_id: 0,
    }
}

/// Event `id` of `session` as its SSE frame, `pad` bytes of data long at least.
fn frame(session: &str, id: u64, pad: usize) -> Bytes {
    Bytes::from(format!("id: {id}\nevent: agent_message_chunk\ndata: {session}-{id}-{}\n\n", "x".repeat(pad)))
}

/// Hands the store the events `ids` of `session`, in one burst, as the bus does.
fn append(store: &dyn Store, session: &str, ids: std::ops::RangeInclusive<u64>, pad: usize) {
    let frames = ids.clone().map(|id| frame(session, id, pad)).collect();
    store.append_events(&Arc::from(session), *ids.start(), frames);
}

/// What the history gives back of `session`, every item.
fn history(store: &dyn Store, session: &str) -> Vec<StoredEvent> {
    store.events(session, 0, 100_000).expect("read the history")
}

/// The history `session` should have: these frames, `pad` bytes each, and these gaps.
fn expected(session: &str, items: &[(u64, u64, bool)], pad: usize) -> Vec<StoredEvent> {
    let mut out = Vec::new();
    for &(from, to, recorded) in items {
        if recorded {
            out.extend((from..=to).map(|id| StoredEvent::Frame { id, frame: frame(session, id, pad) }));
        } else {
            out.push(StoredEvent::Gap { from, to });
        }
    }
    out
}

fn flushed(store: &dyn Store) {
    store.flush().wait_blocking().expect("flushed");
}

/// Hands the store what `hand` writes while another connection holds the lock the writer's first
/// transaction waits on (`tables` on PostgreSQL; the whole database on SQLite), then lets it go and
/// waits for all of it to be committed. Nothing the writer is handed can be committed before the
/// lock goes, so whatever `hand` writes after the first write is queued by then and taken together,
/// in one transaction (the next one, or the first when it has time left).
fn while_the_writer_waits(state: &Path, store: &dyn Store, tables: &str, hand: impl FnOnce()) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let lock = rt.block_on(StateLock::take(state, tables));
    hand();
    rt.block_on(lock.release());
    flushed(store);
}

/// Two sessions' events and lifecycles interleaved in one transaction (a session starting while
/// another's run is open, bursts of both at once, one ending while the other goes on): each
/// session's history is its own events, complete and in order, after a restart.
#[test]
fn two_sessions_whose_writes_share_a_transaction_each_replay_whole_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let store = support::open_store(&state);
    while_the_writer_waits(&state, &*store, "sessions", || {
        store.session_started(&started("a"), 0, false);
        append(&*store, "a", 1..=3, 0);
        store.session_started(&started("b"), 0, false);
        append(&*store, "b", 1..=3, 0);
        append(&*store, "a", 4..=6, 0);
        append(&*store, "b", 4..=5, 0);
        store.session_ended("b", SessionState::Closed, "closed_by_client", 5, 2);
        append(&*store, "a", 7..=9, 0);
        store.session_ended("a", SessionState::Dormant, "daemon_shutdown", 9, 3);
    });
    drop(store);

    let store = support::open_store(&state);
    assert_eq!(history(&*store, "a"), expected("a", &[(1, 9, true)], 0));
    assert_eq!(history(&*store, "b"), expected("b", &[(1, 5, true)], 0));
    let last = |id: &str| store.session(id).expect("read").expect("recorded").last_event_id;
    assert_eq!((last("a"), last("b")), (9, 5));
}

/// Within one transaction, a burst after ids the writer never got (the queue had no room for
/// them) starts a run of its own after the gap, and a burst past a run's size bound (64 KiB)
/// goes on in the next run: the history is the frames byte for byte, and the gap where it was.
#[test]
fn bursts_after_a_gap_and_past_a_runs_size_replay_byte_for_byte_with_the_gap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let store = support::open_store(&state);
    // 20 frames of about 8 KiB: 160 KiB, past the bound twice.
    let pad = 8 * 1024;
    while_the_writer_waits(&state, &*store, "sessions", || {
        store.session_started(&started("s"), 0, false);
        append(&*store, "s", 1..=3, pad);
        // 4..=6 dropped at the queue: never handed to the writer.
        append(&*store, "s", 7..=26, pad);
        store.session_ended("s", SessionState::Closed, "closed_by_client", 26, 2);
    });
    drop(store);

    let store = support::open_store(&state);
    assert_eq!(history(&*store, "s"), expected("s", &[(1, 3, true), (4, 6, false), (7, 26, true)], pad));
}

/// A transaction holding events fails (the database holds the events table's lock past the
/// writer's timeout): its events are counted dropped, exactly as many as it held, and the history
/// records them as one gap before what came after.
#[test]
fn the_events_of_a_failed_transaction_are_counted_dropped_and_recorded_as_a_gap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let store = support::open_store(&state);
    store.session_started(&started("s"), 0, false);
    flushed(&*store);
    let before = store.stats();

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let lock = rt.block_on(StateLock::take(&state, "events"));
    append(&*store, "s", 1..=5, 0);
    // Resolves once the transaction holding the events has ended, failed (this one may fail
    // with it, or come after it).
    let _ = store.flush().wait_blocking();
    let failed = store.stats();
    rt.block_on(lock.release());
    assert!(failed.commits_failed > before.commits_failed, "{failed:?}");
    assert_eq!(failed.events_dropped - before.events_dropped, 5, "{failed:?}");
    assert_eq!(failed.events_written, before.events_written, "{failed:?}");

    append(&*store, "s", 6..=8, 0);
    store.session_ended("s", SessionState::Closed, "closed_by_client", 8, 2);
    flushed(&*store);
    assert_eq!(store.stats().events_written - before.events_written, 3);
    assert_eq!(history(&*store, "s"), expected("s", &[(1, 5, false), (6, 8, true)], 0));
}

/// A device's last sighting is recorded, and only ever moves forward.
#[test]
fn a_devices_last_sighting_is_recorded_and_only_moves_forward() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let store = support::open_store(&state);
    let device = StoredDevice {
        device_id: "dev-a".into(),
        name: "phone".into(),
        role: "voter".into(),
        secret_hash: [1; 32],
        created_at: 10,
        last_seen_at: Some(10),
        person: None,
        expires_at: None,
    };
    store.put_device(&device).wait_blocking().expect("paired");
    store.device_seen("dev-a", 99);
    store.device_seen("dev-a", 50);
    flushed(&*store);
    drop(store);

    let store = support::open_store(&state);
    assert_eq!(store.devices().expect("read"), [StoredDevice { last_seen_at: Some(99), ..device }]);
}

/// Issue #48: a person's sign-in is kept with who they are and when it ends; renewing it (the same
/// row written again) moves the end, and both survive a restart.
#[test]
fn a_persons_sign_in_is_kept_with_the_person_and_its_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let store = support::open_store(&state);
    let person = r#"{"subject":"ada","name":"Ada Lovelace","groups":["admins"]}"#;
    let device = StoredDevice {
        device_id: "dev-b".into(),
        name: "web sign-in".into(),
        role: "operator".into(),
        secret_hash: [2; 32],
        created_at: 10,
        last_seen_at: Some(10),
        person: Some(person.into()),
        expires_at: Some(1_000),
    };
    store.put_device(&device).wait_blocking().expect("signed in");
    let renewed = StoredDevice { expires_at: Some(2_000), ..device.clone() };
    store.put_device(&renewed).wait_blocking().expect("renewed");
    flushed(&*store);
    drop(store);

    let store = support::open_store(&state);
    assert_eq!(store.devices().expect("read"), [renewed]);
}

/// Issue #49: `review_breaker` is recorded in the history like every event (docs/protocol.md 5.5):
/// a client replaying the session after a restart sees why its turn was stopped, where it was.
#[tokio::test]
async fn a_tripped_breaker_is_in_the_history_after_a_restart() {
    const DENY: &str = r#"
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    print(json.dumps({"id": req["id"], "verdict": "deny", "reason": "not in this repository"}), flush=True)
"#;
    let home = Home::new();
    let script = support::reviewer_script("guard", DENY, "");
    let args = [
        "--reviewer",
        &script.spec,
        "--reviewer-trust",
        "guard=other:decide",
        "--review-breaker-denials",
        "1",
    ];
    let d = home.start(&args);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let live = d.turn(&sid, &mut sse, Some("alice"), "permissions 3").await;
    let tripped = live.iter().find(|e| e.event == "review_breaker").expect("the breaker tripped").clone();
    stop(d);

    let d = home.start(&args);
    let all = replay(&d, &sid, &[]).await;
    let kinds: Vec<&str> = all
        .iter()
        .map(|e| e.event.as_str())
        .filter(|k| matches!(*k, "permission_request" | "review_breaker" | "turn_complete"))
        .collect();
    assert_eq!(kinds, ["permission_request", "review_breaker", "turn_complete"], "one denial trips it");
    let again = all.iter().find(|e| e.event == "review_breaker").expect("replayed");
    assert_eq!((again.id, &again.data), (tripped.id, &tripped.data), "the same event, where it was");
    assert_eq!(again.payload()["review"], "not in this repository");
}

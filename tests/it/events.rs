//! Black-box tests of the event stream (`docs/protocol.md#5-event-stream`): the envelope and
//! headers, identical fan-out, resuming with `Last-Event-ID`, ring eviction, and the subscriber
//! cap. Slow and stalled streams: `fanout.rs`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

// ---------------------------------------------------------------------------------------------
// Envelope and headers

#[tokio::test]
async fn every_event_carries_the_envelope() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[("X-Qwen-Client-Id", "alice".into())]).await;
    let model = http()
        .post(d.url(&format!("/session/{sid}/model")))
        .json(&json!({"modelId": "demo-smart"}))
        .send()
        .await
        .expect("model");
    assert_eq!(model.status(), 200);
    let accepted = d.prompt_async(&sid, Some("alice"), "hello envelope").await;
    let events = sse.until_type("turn_complete").await;

    assert_eq!(ids(&events), (1..=events.len() as u64).collect::<Vec<_>>(), "ids 1, 2, 3, ...");
    for e in &events {
        let env = &e.data;
        assert_eq!(env["id"], e.id.expect("an id"), "{env}");
        assert_eq!(env["v"], 1, "{env}");
        assert_eq!(env["type"], e.event.as_str(), "{env}");
        assert_eq!(env["data"]["sessionId"], sid.as_str(), "the payload names its session: {env}");
        assert!(env["_meta"]["serverTimestamp"].as_u64().is_some_and(|t| t > 0), "{env}");
    }
    let switched = &events[0];
    assert_eq!(switched.event, "model_switched");
    assert!(switched.data.get("promptId").is_none(), "not caused by a prompt: {}", switched.data);
    let caused = &events[1..];
    assert!(caused.iter().any(|e| e.event == "session_update"));
    for e in caused {
        assert_eq!(e.data["promptId"], accepted["promptId"], "{}", e.data);
        assert_eq!(e.data["originatorClientId"], "alice", "{}", e.data);
    }
}

#[tokio::test]
async fn the_stream_has_sse_headers_and_starts_with_retry() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let res = Sse::request(&d, &sid, &[]).await;
    assert_eq!(res.status(), 200);
    let header = |name: &str| res.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    assert_eq!(header("content-type").as_deref(), Some("text/event-stream"));
    assert_eq!(header("cache-control").as_deref(), Some("no-cache, no-transform"));
    assert_eq!(header("x-accel-buffering").as_deref(), Some("no"));
    let mut raw = Sse::from_response(res);
    let first = raw.until_frame_with("retry:").await;
    assert!(first.starts_with("retry: 3000\n\n"), "{first:?}");
}

#[tokio::test]
async fn events_of_an_unknown_session_are_404() {
    let d = Daemon::start(&[]);
    let res = Sse::request(&d, "no-such-session", &[]).await;
    assert_eq!(res.status(), 404);
    let body: Value = res.json().await.expect("json");
    assert_eq!(body["code"], "session_not_found");
}

// ---------------------------------------------------------------------------------------------
// Fan-out

#[tokio::test]
async fn two_subscribers_receive_identical_streams() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut one = Sse::connect(&d, &sid, &[]).await;
    let mut two = Sse::connect(&d, &sid, &[]).await;
    d.prompt_async(&sid, Some("alice"), "stream 200").await;
    let a = one.until_frame_with("event: turn_complete\n").await;
    let b = two.until_frame_with("event: turn_complete\n").await;
    assert_eq!(a.matches("event: session_update\n").count(), 201, "the prompt's echo and 200 chunks");
    assert!(a == b, "the two streams differ");
}

// ---------------------------------------------------------------------------------------------
// Resume

#[tokio::test]
async fn last_event_id_resumes_without_gap_or_duplicate() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut first = Sse::connect(&d, &sid, &[]).await;
    d.prompt(&sid, Some("alice"), "stream 20").await.ok(); // the echo, 20 chunks, turn_complete: 1..=22
    let seen = first.until(|e| e.id == Some(7)).await;
    assert_eq!(ids(&seen), (1..=7).collect::<Vec<_>>());
    drop(first);

    let mut resumed = Sse::connect(&d, &sid, &last_event_id(7)).await;
    let replay = resumed.until_type("replay_complete").await;
    let (done, replayed) = replay.split_last().expect("replay_complete");
    assert_eq!(ids(replayed), (8..=22).collect::<Vec<_>>());
    assert_eq!(replayed.len(), 15, "every replayed event has an id");
    assert_eq!(done.id, None);
    assert_eq!(done.payload(), &json!({"replayedCount": 15, "lastReplayedEventId": 22}));

    d.prompt_async(&sid, Some("alice"), "live now").await;
    let live = resumed.until_type("turn_complete").await;
    assert_eq!(ids(&live), (23..23 + live.len() as u64).collect::<Vec<_>>());
    assert_eq!(chunk_text(&live), "live now");
}

#[tokio::test]
async fn resuming_at_the_latest_id_replays_nothing() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    d.prompt(&sid, Some("alice"), "hello").await.ok(); // the echo, 3 chunks, turn_complete
    let resumed = &mut Sse::connect(&d, &sid, &last_event_id(5)).await;
    let done = resumed.next().await.expect("replay_complete");
    assert_eq!(done.event, "replay_complete");
    assert_eq!(done.payload(), &json!({"replayedCount": 0, "lastReplayedEventId": null}));
}

/// Connects with `headers`, runs a prompt, and checks the stream is live only: the first event is
/// the first one published after connecting, and nothing is replayed.
async fn assert_live_only(d: &Daemon, sid: &str, headers: &[(&str, String)]) {
    let mut sse = Sse::connect(d, sid, headers).await;
    let before = d.prompt_async(sid, Some("alice"), "after connecting").await["lastEventId"]
        .as_u64()
        .expect("lastEventId");
    let events = sse.until_type("turn_complete").await;
    assert!(
        events.iter().all(|e| e.id.is_some()),
        "{headers:?}: nothing id-less (no replay_complete, no resync): {:?}",
        events.iter().map(|e| &e.event).collect::<Vec<_>>()
    );
    assert_eq!(events[0].id, Some(before + 1), "{headers:?}: live only");
}

#[tokio::test]
async fn no_last_event_id_means_live_only() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    d.prompt(&sid, Some("alice"), "some history").await.ok();
    assert_live_only(&d, &sid, &[]).await;
}

#[tokio::test]
async fn a_malformed_last_event_id_counts_as_none() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    d.prompt(&sid, Some("alice"), "some history").await.ok();
    for bad in ["abc", "-1", "9007199254740992", "1.5", "0x10", "+3", ""] {
        assert_live_only(&d, &sid, &last_event_id(bad)).await;
    }
}

#[tokio::test]
async fn an_evicted_ring_asks_for_a_resync_then_replays_what_it_has() {
    let d = Daemon::start(&["--event-ring-size", "10"]);
    let sid = d.join("alice").await;
    d.prompt(&sid, Some("alice"), "stream 48").await.ok(); // echo + 48 chunks + turn_complete = 1..=50
    let mut sse = Sse::connect(&d, &sid, &last_event_id(1)).await;
    let events = sse.until_type("replay_complete").await;
    let resync = &events[0];
    assert_eq!(resync.event, "state_resync_required");
    assert_eq!(resync.id, None);
    assert_eq!(
        resync.payload(),
        &json!({"reason": "ring_evicted", "lastDeliveredId": 1, "earliestAvailableId": 41})
    );
    let replayed = &events[1..events.len() - 1];
    assert_eq!(ids(replayed), (41..=50).collect::<Vec<_>>());
    assert_eq!(replayed.len(), 10);
    let done = events.last().expect("replay_complete");
    assert_eq!(done.id, None);
    assert_eq!(done.payload(), &json!({"replayedCount": 10, "lastReplayedEventId": 50}));
}

// ---------------------------------------------------------------------------------------------
// The subscriber cap

#[tokio::test]
async fn the_subscriber_cap_refuses_with_429_until_a_stream_closes() {
    let d = Daemon::start(&["--max-subscribers", "2"]);
    let sid = d.join("alice").await;
    let first = Sse::connect(&d, &sid, &[]).await;
    let _second = Sse::connect(&d, &sid, &[]).await;

    let res = Sse::request(&d, &sid, &[]).await;
    assert_eq!(res.status(), 429);
    assert_eq!(res.headers()["retry-after"], "5", "Retry-After: the documented 5 s");
    let body: Value = res.json().await.expect("json");
    assert_eq!(body["code"], "subscriber_limit_exceeded");
    assert_eq!(body["limit"], 2);

    drop(first);
    // The daemon notices the closed connection on its own; poll (bounded) until a slot is free.
    let deadline = Instant::now() + WAIT;
    loop {
        let res = Sse::request(&d, &sid, &[]).await;
        if res.status() == 200 {
            break;
        }
        assert_eq!(res.status(), 429);
        assert!(Instant::now() < deadline, "the closed stream's slot was never freed");
        tokio::time::sleep(Duration::from_millis(20)).await; // polling the daemon's state
    }
}

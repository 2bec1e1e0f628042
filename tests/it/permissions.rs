//! Permission mediation (`docs/protocol.md#8-permission-mediation`), black-box: the four policies, the vote path's checks in order, the
//! legacy route, the paths that cancel pending requests, late subscribers and the audit record.
//!
//! The demo agent's `write <path> <text>` asks with options `allow_once`, `allow_always` and
//! `reject_once` (ids equal to kinds) and writes the file only when allowed; a `cancelled` answer
//! ends its turn with stopReason `cancelled`.
//!
//! Not covered: the 64-pending cap. The demo agent asks one permission at a time per turn and a
//! session runs one turn at a time, so a session never has more than one pending request here.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::*;

#[tokio::test]
async fn first_responder_race_has_one_winner_and_the_loser_learns_the_outcome() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    d.join("bob").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write race.txt x").await;
    assert_eq!(request["policy"], "first-responder");
    let rid = request_id(&request);

    let (a, b) = tokio::join!(
        d.vote(&sid, &rid, Some("alice"), selected("allow_once")),
        d.vote(&sid, &rid, Some("bob"), selected("reject_once")),
    );
    let (a, b) = (a.pair(), b.pair());
    let (winner, winning_option, loser, lost) = match (a.0, b.0) {
        (200, 404) => ("alice", "allow_once", "bob", b.1),
        (404, 200) => ("bob", "reject_once", "alice", a.1),
        other => panic!("expected exactly one 200 and one 404, got {other:?}: {} / {}", a.1, b.1),
    };
    assert_eq!(lost["code"], "permission_already_resolved", "{lost}");
    assert_eq!(lost["resolvedOptionId"], winning_option);

    let (mut resolved, mut late) = (false, false);
    let events = sse
        .until(|e| {
            resolved |= e.event == "permission_resolved";
            late |= e.event == "permission_already_resolved";
            resolved && late
        })
        .await;
    let res = find(&events, "permission_resolved");
    assert_eq!(res["requestId"], rid.as_str());
    assert_eq!(res["resolvedBy"], "vote");
    assert_eq!(res["voterClientId"], winner);
    assert_eq!(res["outcome"], json!({"outcome": "selected", "optionId": winning_option}));
    let late = find(&events, "permission_already_resolved");
    assert_eq!(late["requestId"], rid.as_str());
    assert_eq!(late["sessionId"], sid.as_str());
    assert_eq!(late["clientId"], loser);
    assert_eq!(late["outcome"], res["outcome"]);
}

#[tokio::test]
async fn designated_lets_only_the_originator_decide() {
    let d = Daemon::start(&["--permission-policy", "designated"]);
    let sid = d.join("alice").await;
    d.join("bob").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write designated.txt ok").await;
    assert_eq!(request["policy"], "designated");
    let rid = request_id(&request);

    let (status, body) = d.vote(&sid, &rid, Some("bob"), selected("allow_once")).await.pair();
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "permission_forbidden");
    assert_eq!(body["reason"], "designated_mismatch");
    let forbidden = sse.until_type("permission_forbidden").await;
    let forbidden = forbidden.last().expect("event").payload();
    assert_eq!(forbidden["requestId"], rid.as_str());
    assert_eq!(forbidden["clientId"], "bob");
    assert_eq!(forbidden["reason"], "designated_mismatch");
    let still = d.pending(&sid).await;
    assert_eq!(still.len(), 1);
    assert_eq!(still[0]["requestId"], rid.as_str());

    let (status, body) = d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.pair();
    assert_eq!((status, body), (200, json!({})));
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["voterClientId"], "alice");
    assert_eq!(resolved["resolvedBy"], "vote");
    assert_eq!(std::fs::read_to_string(d.workspace.join("designated.txt")).expect("written"), "ok");
}

/// Three registered clients (alice, bob, carol): the default quorum is 2.
async fn consensus_of_three(args: &[&str]) -> (Daemon, String, Sse, String) {
    let mut all = vec!["--permission-policy", "consensus"];
    all.extend_from_slice(args);
    let d = Daemon::start(&all);
    let sid = d.join("alice").await;
    d.join("bob").await;
    d.join("carol").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write consensus.txt agreed").await;
    assert_eq!(request["policy"], "consensus");
    let rid = request_id(&request);
    (d, sid, sse, rid)
}

#[tokio::test]
async fn consensus_first_vote_is_partial_and_the_second_matching_vote_decides() {
    let (d, sid, mut sse, rid) = consensus_of_three(&[]).await;
    let (status, body) = d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.pair();
    assert_eq!((status, body), (200, json!({})));
    let partial = sse.until_type("permission_partial_vote").await;
    let partial = partial.last().expect("event").payload();
    assert_eq!(partial["requestId"], rid.as_str());
    assert_eq!(partial["sessionId"], sid.as_str());
    assert_eq!(partial["votesReceived"], 1);
    assert_eq!(partial["votesNeeded"], 2);
    assert_eq!(partial["quorum"], 2);
    assert_eq!(partial["optionTallies"], json!({"allow_once": 1}));
    assert_eq!(d.pending(&sid).await.len(), 1, "one vote of three must not decide");

    let (status, body) = d.vote(&sid, &rid, Some("bob"), selected("allow_once")).await.pair();
    assert_eq!((status, body), (200, json!({})));
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["resolvedBy"], "vote");
    assert_eq!(resolved["voterClientId"], "bob");
    assert_eq!(resolved["outcome"], json!({"outcome": "selected", "optionId": "allow_once"}));
    assert_eq!(std::fs::read_to_string(d.workspace.join("consensus.txt")).expect("written"), "agreed");
}

#[tokio::test]
async fn consensus_refuses_a_client_that_registered_after_the_request() {
    let (d, sid, mut sse, rid) = consensus_of_three(&[]).await;
    d.join("dave").await;
    let (status, body) = d.vote(&sid, &rid, Some("dave"), selected("allow_once")).await.pair();
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "permission_forbidden");
    assert_eq!(body["reason"], "designated_mismatch");
    let forbidden = sse.until_type("permission_forbidden").await;
    assert_eq!(forbidden.last().expect("event").payload()["clientId"], "dave");
    let still = d.pending(&sid).await;
    assert_eq!(still.len(), 1);
    assert_eq!(still[0]["requestId"], rid.as_str());
}

#[tokio::test]
async fn consensus_revote_replaces_the_earlier_ballot() {
    let (d, sid, mut sse, rid) = consensus_of_three(&[]).await;
    let tallies = |events: Vec<Event>| events.last().expect("event").payload().clone();

    assert_eq!(d.vote(&sid, &rid, Some("alice"), selected("reject_once")).await.pair().0, 200);
    let p = tallies(sse.until_type("permission_partial_vote").await);
    assert_eq!(
        (p["votesReceived"].clone(), p["optionTallies"].clone()),
        (json!(1), json!({"reject_once": 1}))
    );

    assert_eq!(d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.pair().0, 200);
    let p = tallies(sse.until_type("permission_partial_vote").await);
    assert_eq!(
        (p["votesReceived"].clone(), p["optionTallies"].clone()),
        (json!(1), json!({"allow_once": 1}))
    );

    // The same client repeating its vote is still one ballot: no quorum of one voter.
    assert_eq!(d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.pair().0, 200);
    let p = tallies(sse.until_type("permission_partial_vote").await);
    assert_eq!(
        (p["votesReceived"].clone(), p["optionTallies"].clone()),
        (json!(1), json!({"allow_once": 1}))
    );
    assert_eq!(d.pending(&sid).await.len(), 1);

    // carol's reject joins nobody's (alice moved away from reject), so it cannot decide either.
    assert_eq!(d.vote(&sid, &rid, Some("carol"), selected("reject_once")).await.pair().0, 200);
    let p = tallies(sse.until_type("permission_partial_vote").await);
    assert_eq!(p["votesReceived"], 2);
    assert_eq!(p["optionTallies"], json!({"allow_once": 1, "reject_once": 1}));
    assert_eq!(d.pending(&sid).await.len(), 1);
}

#[tokio::test]
async fn consensus_split_is_cancelled_by_the_timeout() {
    let d = Daemon::start(&["--permission-policy", "consensus", "--permission-timeout-ms", "2500"]);
    let sid = d.join("alice").await;
    d.join("bob").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let before = wall_ms();
    let request = d.raise(&sid, &mut sse, Some("alice"), "write split.txt never").await;
    let after = wall_ms();
    // Issued between `before` and `after`, so it expires 2500 ms after a moment in that window.
    let expires = request["expiresAt"].as_u64().expect("a timed request says when it expires");
    assert!((before + 2500..=after + 2500).contains(&expires), "{before}..{after} + 2500: {request}");
    let rid = request_id(&request);
    assert_eq!(d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.pair().0, 200);
    assert_eq!(d.vote(&sid, &rid, Some("bob"), selected("reject_once")).await.pair().0, 200);
    let events = sse.until_type("permission_partial_vote").await;
    assert_eq!(find(&events, "permission_partial_vote")["votesNeeded"], 2);

    let events = sse.until_type("turn_complete").await;
    let partials = events.iter().filter(|e| e.event == "permission_partial_vote").count();
    assert_eq!(partials, 1, "bob's split vote is partial too");
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["requestId"], rid.as_str());
    assert_eq!(resolved["resolvedBy"], "timeout");
    assert_eq!(resolved["outcome"], json!({"outcome": "cancelled"}));
    assert_eq!(find(&events, "turn_complete")["stopReason"], "cancelled");
    assert!(!d.workspace.join("split.txt").exists(), "a cancelled write must not happen");
    assert!(d.pending(&sid).await.is_empty());
}

#[tokio::test]
async fn local_only_accepts_a_vote_from_a_loopback_peer() {
    let d = Daemon::start(&["--permission-policy", "local-only"]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write local.txt here").await;
    assert_eq!(request["policy"], "local-only");
    // Anonymous: local-only does not depend on the self-reported id.
    let (status, body) = d.vote(&sid, &request_id(&request), None, selected("allow_once")).await.pair();
    assert_eq!((status, body), (200, json!({})));
    let events = sse.until_type("turn_complete").await;
    assert_eq!(find(&events, "permission_resolved")["resolvedBy"], "vote");
    assert_eq!(std::fs::read_to_string(d.workspace.join("local.txt")).expect("written"), "here");
}

/// An in-process daemon behind [`mediatord::http::app`], reached with `oneshot` and a mocked socket peer;
/// no traffic leaves the process.
mod in_process {
    use mediatord::peer::Origin;

    use super::*;

    /// The port the Host allowlist is built for; nothing listens on it.
    pub(super) const PORT: u16 = 7776;

    pub(super) fn router(daemon: &mediatord::http::AppState, peer: &str) -> axum::Router {
        let peer: SocketAddr = peer.parse().expect("socket address");
        // A process of this host (loopback) or of another; never one the daemon started.
        let origin = if peer.ip().is_loopback() { Origin::Local } else { Origin::Remote };
        mediatord::http::app(daemon.clone(), PORT)
            .layer(MockConnectInfo(mediatord::http::Peer { addr: peer, origin }))
    }

    pub(super) fn request(
        method: &str,
        path: &str,
        client: Option<&str>,
        body: Option<Value>,
    ) -> Request<Body> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", format!("127.0.0.1:{PORT}"))
            .header("content-type", "application/json");
        if let Some(c) = client {
            req = req.header("X-Qwen-Client-Id", c);
        }
        if path.ends_with("/prompt") {
            req = req.header("Prefer", "respond-async");
        }
        let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
        req.body(body).expect("request")
    }

    pub(super) async fn exchange(app: &axum::Router, req: Request<Body>) -> (StatusCode, Value) {
        let res = app.clone().oneshot(req).await.expect("infallible");
        let status = res.status();
        let bytes = axum::body::to_bytes(res.into_body(), 1 << 20).await.expect("body");
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// Reads SSE frames from a streaming body until an event of type `kind`; returns its payload.
    pub(super) async fn until_event(body: &mut Body, buf: &mut String, kind: &str) -> Value {
        let wait = async {
            loop {
                while let Some(pos) = buf.find("\n\n") {
                    let frame: String = buf.drain(..pos + 2).collect();
                    if frame.lines().any(|l| l == format!("event: {kind}")) {
                        let data = frame.lines().find_map(|l| l.strip_prefix("data: ")).expect("data");
                        let envelope: Value = serde_json::from_str(data).expect("json");
                        return envelope["data"].clone();
                    }
                }
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            buf.push_str(&String::from_utf8_lossy(&data));
                        }
                    }
                    _ => panic!("event stream ended before {kind}"),
                }
            }
        };
        tokio::time::timeout(WAIT, wait).await.unwrap_or_else(|_| panic!("no {kind} within {WAIT:?}"))
    }
}

#[tokio::test]
async fn local_only_refuses_a_vote_from_a_remote_peer() {
    use in_process::*;
    let dir = tempfile::tempdir().expect("tempdir");
    let workspace = std::fs::canonicalize(dir.path()).expect("canonical");
    let mut config = mediatord::config::Config::for_tests(&workspace);
    // In a test, `current_exe()` is the test binary; the demo agent lives in the real one.
    let agent = &mut config.agents[0];
    agent.command = mediatord::config::agent_command(&format!("{} demo-agent", bin())).expect("agent");
    agent.command.guard = bin().into();
    config.permission_policy = mediatord::config::Policy::LocalOnly;
    let daemon = mediatord::daemon::Daemon::new(config);
    let remote = router(&daemon, "10.1.2.3:5000");
    let local = router(&daemon, "127.0.0.1:5000");

    let (status, created) =
        exchange(&remote, request("POST", "/session", Some("alice"), Some(json!({})))).await;
    assert_eq!(status, 200, "{created}");
    let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
    let events = remote.clone().oneshot(request("GET", &format!("/session/{sid}/events"), None, None));
    let events = events.await.expect("infallible");
    assert_eq!(events.status(), 200);
    let (mut stream, mut buf) = (events.into_body(), String::new());
    let prompt = json!({"prompt": [{"type": "text", "text": "write remote.txt no"}]});
    let (status, body) =
        exchange(&remote, request("POST", &format!("/session/{sid}/prompt"), Some("alice"), Some(prompt)))
            .await;
    assert_eq!(status, 202, "{body}");
    let raised = until_event(&mut stream, &mut buf, "permission_request").await;
    let rid = request_id(&raised);
    let vote_path = format!("/session/{sid}/permission/{rid}");

    // Even the originator's own id does not help a remote peer.
    let (status, body) =
        exchange(&remote, request("POST", &vote_path, Some("alice"), Some(selected("allow_once")))).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "permission_forbidden");
    assert_eq!(body["reason"], "remote_not_allowed");
    let forbidden = until_event(&mut stream, &mut buf, "permission_forbidden").await;
    assert_eq!(forbidden["reason"], "remote_not_allowed");
    let (_, listed) =
        exchange(&remote, request("GET", &format!("/session/{sid}/permissions"), None, None)).await;
    assert_eq!(listed["pending"][0]["requestId"], rid.as_str());

    let (status, body) =
        exchange(&local, request("POST", &vote_path, Some("alice"), Some(selected("allow_once")))).await;
    assert_eq!((status, body), (StatusCode::OK, json!({})));
    let resolved = until_event(&mut stream, &mut buf, "permission_resolved").await;
    assert_eq!(resolved["voterClientId"], "alice");
    let done = until_event(&mut stream, &mut buf, "turn_complete").await;
    assert_eq!(done["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(workspace.join("remote.txt")).expect("written"), "no");
    drop(stream);
    daemon.drain(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn cancel_vote_works_under_every_policy_from_any_voter() {
    // (policy, the voter that could not otherwise decide)
    let cases: [(&str, Option<&str>); 4] = [
        ("first-responder", None),
        ("designated", Some("bob")),
        ("consensus", Some("late")),
        ("local-only", None),
    ];
    for (policy, voter) in cases {
        let d = Daemon::start(&["--permission-policy", policy]);
        let sid = d.join("alice").await;
        d.join("bob").await;
        let mut sse = Sse::connect(&d, &sid, &[]).await;
        let request = d.raise(&sid, &mut sse, Some("alice"), "write cancelled.txt no").await;
        let rid = request_id(&request);
        if policy == "consensus" {
            d.join("late").await; // registered, but not among the voters at issue
            let (status, body) = d.vote(&sid, &rid, voter, selected("allow_once")).await.pair();
            assert_eq!((status, body["reason"].clone()), (403, json!("designated_mismatch")), "{policy}");
        }
        if policy == "designated" {
            let (status, _) = d.vote(&sid, &rid, voter, selected("allow_once")).await.pair();
            assert_eq!(status, 403, "{policy}");
        }
        let (status, body) = d.vote(&sid, &rid, voter, cancel_vote()).await.pair();
        assert_eq!((status, body), (200, json!({})), "{policy}");
        let events = sse.until_type("turn_complete").await;
        let resolved = find(&events, "permission_resolved");
        assert_eq!(resolved["outcome"], json!({"outcome": "cancelled"}), "{policy}");
        assert_eq!(resolved["resolvedBy"], "vote", "{policy}");
        assert_eq!(find(&events, "turn_complete")["stopReason"], "cancelled", "{policy}");
        assert!(!d.workspace.join("cancelled.txt").exists(), "{policy}");
    }
}

#[tokio::test]
async fn wire_vote_naming_the_reserved_cancel_id_is_an_invalid_option() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "write r.txt x").await);
    let (status, body) = d.vote(&sid, &rid, Some("alice"), selected("__cancelled__")).await.pair();
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "invalid_option_id");
    assert_eq!(body["optionId"], "__cancelled__");
    assert_eq!(d.pending(&sid).await.len(), 1, "the request stays pending");
}

#[tokio::test]
async fn vote_for_an_option_not_offered_is_refused_and_the_request_stays_pending() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "write r.txt x").await);
    let (status, body) = d.vote(&sid, &rid, Some("alice"), selected("reject_always")).await.pair();
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "invalid_option_id");
    assert_eq!(body["requestId"], rid.as_str());
    assert_eq!(body["optionId"], "reject_always");
    let still = d.pending(&sid).await;
    assert_eq!(still.len(), 1);
    assert_eq!(still[0]["requestId"], rid.as_str());
    // And it can still be decided.
    assert_eq!(d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.pair().0, 200);
}

#[tokio::test]
async fn malformed_vote_bodies_are_invalid_vote() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "write r.txt x").await);
    let bodies = [
        json!({}),
        json!({"outcome": "selected"}),
        json!({"outcome": {"outcome": "selected"}}),
        json!({"outcome": {"outcome": "selected", "optionId": ""}}),
        json!({"outcome": {"outcome": "selected", "optionId": 3}}),
        json!({"outcome": {"outcome": "maybe"}}),
        json!({"decision": "sometimes"}),
        json!({"decision": true}),
        json!([]),
    ];
    for body in bodies {
        let (status, answer) = d.vote(&sid, &rid, Some("alice"), body.clone()).await.pair();
        assert_eq!((status, answer["code"].clone()), (400, json!("invalid_vote")), "{body}: {answer}");
    }
    // The body is checked first: a bad body with a bad client id on an unknown session is still
    // `invalid_vote`.
    let (status, answer) = d.vote("no-such-session", "nope", Some("bad id!"), json!({})).await.pair();
    assert_eq!((status, answer["code"].clone()), (400, json!("invalid_vote")), "{answer}");
    assert_eq!(d.pending(&sid).await.len(), 1);
}

#[tokio::test]
async fn malformed_client_id_is_refused_before_the_session_is_looked_up() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "write r.txt x").await);
    for (session, request) in [(sid.as_str(), rid.as_str()), ("no-such-session", "nope")] {
        let (status, body) = d.vote(session, request, Some("bad id!"), selected("allow_once")).await.pair();
        assert_eq!((status, body["code"].clone()), (400, json!("invalid_client_id")), "{body}");
    }
    assert_eq!(d.pending(&sid).await.len(), 1);
}

#[tokio::test]
async fn vote_on_an_unknown_session_is_session_not_found() {
    let d = Daemon::start(&[]);
    let (status, body) =
        d.vote("no-such-session", "nope", Some("alice"), selected("allow_once")).await.pair();
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], "session_not_found");
    assert_eq!(body["sessionId"], "no-such-session");
    let (status, body) = send(http().get(d.url("/session/no-such-session/permissions"))).await.pair();
    assert_eq!((status, body["code"].clone()), (404, json!("session_not_found")));
}

#[tokio::test]
async fn unknown_request_is_not_found_whatever_the_client_id() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "write r.txt x").await);
    let unknown = "00000000-0000-4000-8000-000000000000";
    for client in [Some("alice"), Some("fabricated-client"), None] {
        let (status, body) = d.vote(&sid, unknown, client, selected("allow_once")).await.pair();
        assert_eq!(
            (status, body["code"].clone()),
            (404, json!("permission_request_not_found")),
            "{client:?}"
        );
        let (status, body) = d.legacy_vote(unknown, client, selected("allow_once")).await.pair();
        assert_eq!(
            (status, body["code"].clone()),
            (404, json!("permission_request_not_found")),
            "{client:?}"
        );
    }
    // A real request id under another live session is unknown there too.
    let other = d.create(Some("alice"), json!({"sessionScope": "thread"})).await;
    let other = other["sessionId"].as_str().expect("sessionId");
    let (status, body) = d.vote(other, &rid, Some("fabricated-client"), selected("allow_once")).await.pair();
    assert_eq!((status, body["code"].clone()), (404, json!("permission_request_not_found")), "{body}");
    assert_eq!(d.pending(&sid).await.len(), 1);
}

#[tokio::test]
async fn unregistered_client_on_a_pending_request_is_invalid_client_id() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "write r.txt x").await);
    let (status, body) = d.vote(&sid, &rid, Some("stranger"), selected("allow_once")).await.pair();
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "invalid_client_id");
    assert_eq!(d.pending(&sid).await.len(), 1);
    // Once it is registered (here by subscribing), the same vote decides.
    let _stranger = Sse::connect(&d, &sid, &[("X-Qwen-Client-Id", "stranger".into())]).await;
    let (status, body) = d.vote(&sid, &rid, Some("stranger"), selected("allow_once")).await.pair();
    assert_eq!((status, body), (200, json!({})));
}

/// With several sessions, each legacy vote lands in the session that holds its request.
#[tokio::test]
async fn legacy_route_finds_the_request_among_several_sessions() {
    let d = Daemon::start(&["--session-scope", "thread"]);
    let (first, second) = (d.join("alice").await, d.join("bob").await);
    assert_ne!(first, second, "thread scope: two sessions");
    let mut sse1 = Sse::connect(&d, &first, &[]).await;
    let mut sse2 = Sse::connect(&d, &second, &[]).await;
    let r1 = request_id(&d.raise(&first, &mut sse1, Some("alice"), "write one.txt 1").await);
    let r2 = request_id(&d.raise(&second, &mut sse2, Some("bob"), "write two.txt 2").await);
    for (rid, client) in [(&r2, "bob"), (&r1, "alice")] {
        assert_eq!(d.legacy_vote(rid, Some(client), selected("allow_once")).await.pair(), (200, json!({})));
    }
    for (sse, rid, file, text) in [(&mut sse1, &r1, "one.txt", "1"), (&mut sse2, &r2, "two.txt", "2")] {
        let events = sse.until_type("turn_complete").await;
        assert_eq!(find(&events, "permission_resolved")["requestId"], rid.as_str());
        assert_eq!(std::fs::read_to_string(d.workspace.join(file)).expect("written"), text);
    }
}

#[tokio::test]
async fn legacy_route_finds_the_session_from_the_request_id() {
    let d = Daemon::start(&["--permission-policy", "designated"]);
    let sid = d.join("alice").await;
    d.join("bob").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "write legacy.txt old").await);

    let (status, body) = d.legacy_vote(&rid, Some("bob"), selected("allow_once")).await.pair();
    assert_eq!((status, body["reason"].clone()), (403, json!("designated_mismatch")), "{body}");
    let (status, body) = d.legacy_vote(&rid, Some("stranger"), selected("allow_once")).await.pair();
    assert_eq!((status, body["code"].clone()), (400, json!("invalid_client_id")), "{body}");
    let (status, body) = d.legacy_vote(&rid, Some("alice"), selected("not-offered")).await.pair();
    assert_eq!((status, body["code"].clone()), (400, json!("invalid_option_id")), "{body}");
    let (status, body) = d.legacy_vote(&rid, Some("alice"), json!({"outcome": 1})).await.pair();
    assert_eq!((status, body["code"].clone()), (400, json!("invalid_vote")), "{body}");

    let (status, body) = d.legacy_vote(&rid, Some("alice"), selected("allow_once")).await.pair();
    assert_eq!((status, body), (200, json!({})));
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["voterClientId"], "alice");
    assert_eq!(resolved["resolvedBy"], "vote");
    assert_eq!(std::fs::read_to_string(d.workspace.join("legacy.txt")).expect("written"), "old");

    let (status, body) = d.legacy_vote(&rid, Some("bob"), selected("reject_once")).await.pair();
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], "permission_already_resolved");
    assert_eq!(body["resolvedOptionId"], "allow_once");
}

#[tokio::test]
async fn session_cancel_releases_a_waiting_agent() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "write c.txt x").await);
    let (status, _) = send(http().post(d.url(&format!("/session/{sid}/cancel")))).await.pair();
    assert_eq!(status, 204);
    // `session/cancel` goes to the agent before the request is answered (ACP's order), so the
    // agent may end its turn before `permission_resolved` is out: read until both are.
    let (mut turn_over, mut resolved) = (false, false);
    let events = sse
        .until(|e| {
            turn_over |= e.event == "turn_complete";
            resolved |= e.event == "permission_resolved";
            turn_over && resolved
        })
        .await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["requestId"], rid.as_str());
    assert_eq!(resolved["resolvedBy"], "cancel");
    assert_eq!(resolved["outcome"], json!({"outcome": "cancelled"}));
    assert_eq!(find(&events, "turn_complete")["stopReason"], "cancelled");
    assert!(d.pending(&sid).await.is_empty());
    assert!(!d.workspace.join("c.txt").exists());
}

#[tokio::test]
async fn session_delete_releases_a_waiting_agent() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "write c.txt x").await);
    let (status, _) = send(http().delete(d.url(&format!("/session/{sid}")))).await.pair();
    assert_eq!(status, 204);
    let events = sse.rest().await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["requestId"], rid.as_str());
    assert_eq!(resolved["resolvedBy"], "session_closed");
    assert_eq!(resolved["outcome"], json!({"outcome": "cancelled"}));
    assert_eq!(events.last().expect("terminal").event, "session_closed");
    assert!(!d.workspace.join("c.txt").exists());
}

#[tokio::test]
async fn agent_crash_releases_pending_requests_and_the_session_dies() {
    let d = Daemon::start(&["--session-scope", "thread"]);
    let sid = d.join("alice").await;
    let other = d.join("bob").await;
    assert_ne!(sid, other, "thread scope: two sessions on one agent");
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "permissions 2").await);
    // The agent is shared: crashing it from the other session kills the one waiting here.
    d.prompt_async(&other, Some("bob"), "crash").await;
    let events = sse.rest().await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["requestId"], rid.as_str());
    assert_eq!(resolved["outcome"], json!({"outcome": "cancelled"}));
    assert_eq!(resolved["resolvedBy"], "session_closed");
    assert_eq!(find(&events, "turn_error")["code"], "agent_exited");
    let died = events.last().expect("terminal");
    assert_eq!(died.event, "session_died");
    assert_eq!(died.payload()["reason"], "agent_exited");
}

#[tokio::test]
async fn shutdown_releases_pending_requests_before_the_stream_ends() {
    let mut d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "write s.txt x").await);
    d.signal(rustix::process::Signal::TERM);
    let events = sse.rest().await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["requestId"], rid.as_str());
    assert_eq!(resolved["resolvedBy"], "session_closed");
    assert_eq!(resolved["outcome"], json!({"outcome": "cancelled"}));
    assert!(d.wait_exit(WAIT).success());
    assert!(!d.workspace.join("s.txt").exists());
}

#[tokio::test]
async fn request_raised_with_nobody_listening_reaches_a_later_subscriber() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    d.prompt_async(&sid, Some("alice"), "write late.txt seen").await;
    // Nobody is subscribed; the listing is the only way to learn the request exists.
    let listed = d.first_pending(&sid).await;
    assert_eq!(listed["sessionId"], sid.as_str());
    assert_eq!(listed["policy"], "first-responder");
    assert_eq!(listed["toolCall"]["kind"], "edit");
    let ids: Vec<&str> = listed["options"]
        .as_array()
        .expect("options")
        .iter()
        .filter_map(|o| o["optionId"].as_str())
        .collect();
    assert_eq!(ids, ["allow_once", "allow_always", "reject_once"]);

    let mut replay = Sse::connect(&d, &sid, &[("Last-Event-ID", "0".into())]).await;
    let events = replay.until_type("replay_complete").await;
    let replayed = find(&events, "permission_request");
    assert_eq!(replayed, &listed, "the replayed event and the listing agree");
    let rid = request_id(&listed);
    assert_eq!(d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.pair().0, 200);
    let events = replay.until_type("turn_complete").await;
    assert_eq!(find(&events, "permission_resolved")["requestId"], rid.as_str());
    assert_eq!(std::fs::read_to_string(d.workspace.join("late.txt")).expect("written"), "seen");
}

#[tokio::test]
async fn audit_records_every_decision() {
    let d = Daemon::start(&["--permission-policy", "designated"]);
    let sid = d.join("alice").await;
    d.join("bob").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let first = request_id(&d.raise(&sid, &mut sse, Some("alice"), "permissions 2").await);
    assert_eq!(d.vote(&sid, &first, Some("bob"), selected("allow_once")).await.pair().0, 403);
    assert_eq!(d.vote(&sid, &first, Some("alice"), selected("allow_once")).await.pair().0, 200);
    let events = sse.until_type("permission_request").await;
    let second = request_id(find(&events, "permission_request"));
    assert_eq!(d.vote(&sid, &second, Some("bob"), cancel_vote()).await.pair().0, 200);
    let events = sse.until_type("turn_complete").await;
    assert!(chunk_text(&events).contains("outcomes: allow_once,cancelled"), "{}", chunk_text(&events));

    let listed = d.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    assert_eq!(listed["pending"], json!([]));
    let audit = listed["audit"].as_array().expect("audit");
    assert_eq!(audit.len(), 2, "{audit:?}");
    let a = &audit[0];
    assert_eq!(a["requestId"], first.as_str());
    assert_eq!(a["policy"], "designated");
    assert_eq!(a["outcome"], json!({"outcome": "selected", "optionId": "allow_once"}));
    assert_eq!(a["resolvedBy"], "vote");
    assert_eq!(a["voterClientId"], "alice");
    assert_eq!(a["originatorClientId"], "alice");
    let ballots = a["ballots"].as_array().expect("ballots");
    assert_eq!(ballots.len(), 2);
    assert_eq!((ballots[0]["clientId"].clone(), ballots[0]["counted"].clone()), (json!("bob"), json!(false)));
    assert_eq!(
        (ballots[1]["clientId"].clone(), ballots[1]["counted"].clone()),
        (json!("alice"), json!(true))
    );
    assert_eq!(ballots[1]["optionId"], "allow_once");
    let b = &audit[1];
    assert_eq!(b["requestId"], second.as_str());
    assert_eq!(b["outcome"], json!({"outcome": "cancelled"}));
    assert_eq!(b["voterClientId"], "bob");
    assert_eq!(b["resolvedBy"], "vote");
    // Without `audit=1` the listing has no audit.
    assert!(d.get(&format!("/session/{sid}/permissions")).await.ok().get("audit").is_none());
}

/// Issue #16, item 6: late votes on a decided request are each answered 404, but publish
/// `permission_already_resolved` at most once per (request, client): repeating them cannot flush
/// the replay ring.
#[tokio::test]
async fn late_votes_publish_already_resolved_once_per_client() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    d.join("bob").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "write late.txt x").await);
    assert_eq!(d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.pair().0, 200);
    sse.until_type("turn_complete").await;
    for _ in 0..10 {
        for voter in [Some("alice"), Some("bob"), None] {
            let (status, body) = d.vote(&sid, &rid, voter, selected("allow_once")).await.pair();
            assert_eq!((status, body["code"].as_str()), (404, Some("permission_already_resolved")));
            let (status, body) = d.legacy_vote(&rid, voter, selected("allow_once")).await.pair();
            assert_eq!((status, body["code"].as_str()), (404, Some("permission_already_resolved")));
        }
    }
    // A rule change is published after every vote above: the stream up to it holds all they caused.
    let rule = json!({"effect": "deny", "kinds": ["delete"]});
    assert_eq!(d.post(&format!("/session/{sid}/permission-rules"), None, rule).await.status, 201);
    let events = sse.until_type("policy_updated").await;
    let late: Vec<Value> = events
        .iter()
        .filter(|e| e.event == "permission_already_resolved")
        .map(|e| e.payload()["clientId"].clone())
        .collect();
    assert_eq!(late, [json!("alice"), json!("bob"), Value::Null], "one event per client");
}

/// Issue #16, item 7: a flood of creates without a client id (each minted an id) does not evict a
/// client that named itself, so its vote still counts; a vote from an id the session never saw is
/// told it is not registered, not that it is malformed.
#[tokio::test]
async fn anonymous_attaches_do_not_evict_named_clients() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    // More anonymous attaches than the table holds (1024).
    for _ in 0..40 {
        let batch = (0..32).map(|_| d.post("/session", None, json!({})));
        for reply in futures_util::future::join_all(batch).await {
            assert_eq!(reply.status, 200, "{}", reply.text);
        }
    }
    let rid = request_id(&d.raise(&sid, &mut sse, Some("alice"), "write named.txt x").await);
    let (status, body) = d.vote(&sid, &rid, Some("mallory"), selected("allow_once")).await.pair();
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_client_id")), "{body}");
    let message = body["error"].as_str().expect("message");
    assert!(message.contains("not registered"), "{message}");
    let (status, body) = d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.pair();
    assert_eq!(status, 200, "alice was evicted: {body}");
}

/// Wall-clock milliseconds since the epoch: the clock of the wire's timestamps.
fn wall_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.expect("clock after 1970").as_millis() as u64
}

/// Issue #44: the demo agent's `write` showed "new file" over a file that exists (the README's
/// picture shows a diff). It reads the file first: the card shows the old text going and the new
/// one coming, and a file that is not there is still a new file.
#[tokio::test]
async fn a_write_over_an_existing_file_is_presented_as_a_diff_of_its_old_text() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    std::fs::write(d.workspace.join("notes.txt"), "Hello from the demo\nkept\n").expect("write notes.txt");
    let request =
        d.raise(&sid, &mut sse, Some("alice"), "write notes.txt Hello from the terminal\nkept\n").await;
    let path = d.workspace.join("notes.txt").display().to_string();
    assert_eq!(request["toolCall"]["content"][0]["oldText"], "Hello from the demo\nkept\n");
    let card = d.get(&format!("/session/{sid}/permission/{}", request_id(&request))).await.ok();
    let diff = card["sections"]
        .as_array()
        .expect("sections")
        .iter()
        .find(|s| s["heading"] == format!("diff {path}"))
        .unwrap_or_else(|| panic!("a diff, not a new file: {card}"));
    let lines: Vec<&str> =
        diff["lines"].as_array().expect("lines").iter().map(|l| l["text"].as_str().expect("text")).collect();
    assert_eq!(lines, ["@@ -1,2 +1,2 @@", "-Hello from the demo", "+Hello from the terminal", " kept"]);
    d.vote(&sid, &request_id(&request), Some("alice"), selected("reject_once")).await.ok();
    sse.until_type("turn_complete").await;
    let fresh = d.raise(&sid, &mut sse, Some("alice"), "write fresh.txt new").await;
    assert_eq!(fresh["toolCall"]["content"][0]["oldText"], Value::Null, "no file: a new file's change");
}

/// Issue #29: a write's text was never on the card, only its path. The daemon presents a pending
/// request as every door shows it (`src/present.rs`): the file text as a diff (the demo agent sends
/// it as real agents do), bounded as a card with what was left out counted, all of it with
/// `?all=1`, and what each option does in words; a decided request is no longer presented.
#[tokio::test]
async fn a_pending_request_is_presented_with_the_text_it_would_write() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let text: String = (0..50).map(|i| format!("line {i}  \n")).collect();
    let request = d.raise(&sid, &mut sse, Some("alice"), &format!("write notes/long.txt {text}")).await;
    let rid = request_id(&request);

    let card = d.get(&format!("/session/{sid}/permission/{rid}")).await.ok();
    let path = d.workspace.join("notes/long.txt").display().to_string();
    let headings: Vec<&str> = card["sections"]
        .as_array()
        .expect("sections")
        .iter()
        .map(|s| s["heading"].as_str().expect("heading"))
        .collect();
    assert_eq!(headings, ["locations", &format!("new file {path}"), "rawInput"]);
    assert_eq!((card["kind"].as_str(), card["title"].as_str()), (Some("edit"), Some("Write notes/long.txt")));
    let diff = &card["sections"][1];
    assert_eq!(diff["lines"][0], json!({"tone": "hunk", "text": "@@ -0,0 +1,50 @@", "cutChars": 0}));
    // Trailing blanks are visible: a whitespace-only change cannot hide.
    assert_eq!(
        diff["lines"][1],
        json!({"tone": "added", "text": "+line 0⟪2 trailing blanks⟫", "cutChars": 0})
    );
    assert_eq!(diff["lines"].as_array().map(Vec::len), Some(40));
    assert_eq!((diff["omittedLines"].as_u64(), card["whole"].as_bool()), (Some(11), Some(false)));
    let meanings: Vec<(&str, &str)> = card["options"]
        .as_array()
        .expect("options")
        .iter()
        .map(|o| (o["optionId"].as_str().expect("id"), o["meaning"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(meanings[0], ("allow_once", "Allows this call only."));
    assert!(
        meanings[1].1.starts_with("Allows this call and tells the agent to allow such calls"),
        "{meanings:?}"
    );

    let all = d.get(&format!("/session/{sid}/permission/{rid}?all=1")).await.ok();
    assert_eq!(all["sections"][1]["lines"].as_array().map(Vec::len), Some(51));
    assert_eq!((all["sections"][1]["omittedLines"].as_u64(), all["whole"].as_bool()), (Some(0), Some(true)));
    assert_eq!(all["sections"][1]["lines"][50]["text"], "+line 49⟪2 trailing blanks⟫");

    assert_eq!(d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.status, 200);
    sse.until_type("turn_complete").await;
    assert_eq!(
        std::fs::read_to_string(d.workspace.join("notes/long.txt")).expect("written, its folder made"),
        text
    );
    let gone = d.get(&format!("/session/{sid}/permission/{rid}")).await;
    assert_eq!((gone.status, gone.body["code"].as_str()), (404, Some("permission_request_not_found")));
}

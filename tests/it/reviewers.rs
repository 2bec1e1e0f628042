//! Reviewers (`docs/operations.md#reviewers`), black-box: a `command` reviewer (a Python script the
//! test writes) behind the demo agent, whose `write <path> <text>` asks with tool kind `edit` and
//! options `allow_once`, `allow_always`, `reject_once`, and writes the file only when allowed.
//!
//! What a user sees: a trusted verdict decides alone (the file is written, the audit names the
//! reviewer and its reason); an untrusted one, an `escalate` and every failure (a hang past the
//! deadline, a crash, garbage) leave the request pending for the people, its reviews shown on the
//! listing and on `permission_reviewed`, the failure counted in `/metrics`; a person decides it;
//! a verdict after a person decided changes nothing.

use std::time::Instant;

use serde_json::{Value, json};

use crate::support::*;

/// The reviewer: reads one request line at a time and answers by its first argument. `late`
/// answers its first request (allow) only once the file named by its second argument exists,
/// and escalates every later one at once.
const REVIEWER: &str = r#"
import json, os, sys, time
mode = sys.argv[1]
first = True
for line in sys.stdin:
    req = json.loads(line)
    rid = req["id"]
    if mode == "hang":
        continue
    if mode == "hangfirst":
        # The first program hangs; once restarted (the marker exists), it allows.
        if not os.path.exists(sys.argv[2]):
            continue
        print(json.dumps({"id": rid, "verdict": "allow", "reason": "awake again"}), flush=True)
        continue
    if mode == "crash":
        sys.exit(3)
    if mode == "garbage":
        print("this is not a verdict", flush=True)
        continue
    if mode == "late" and first:
        first = False
        while not os.path.exists(sys.argv[2]):
            time.sleep(0.01)  # the reviewer's own wait for the test's signal, not the test's
        print(json.dumps({"id": rid, "verdict": "allow", "reason": "late allow"}), flush=True)
        continue
    if mode == "late":
        print(json.dumps({"id": rid, "verdict": "escalate", "reason": "second request"}), flush=True)
        continue
    seen = {"kind": req.get("kind"), "agent": req.get("agent"), "title": req.get("title")}
    reasons = {"allow": "a write inside the workspace", "deny": "writes are refused here",
               "escalate": "unsure: ask a person"}
    print(json.dumps({"id": rid, "verdict": mode, "reason": reasons[mode] + " " + json.dumps(seen)}), flush=True)
"#;

/// A daemon whose reviewer `guard` runs the reviewer script in `mode` (`extra` more arguments),
/// plus `args`; a session of alice's on it, and her event stream.
struct Reviewed {
    /// The script, kept while the daemon runs.
    _script: ReviewerScript,
    d: Daemon,
    sid: String,
    sse: Sse,
}

async fn reviewed(mode: &str, extra: &str, args: &[&str]) -> Reviewed {
    let script = reviewer_script("guard", REVIEWER, &format!("{mode} {extra}"));
    let mut all = vec!["--reviewer", script.spec.as_str()];
    all.extend_from_slice(args);
    let d = Daemon::start(&all);
    let sid = d.join("alice").await;
    let sse = Sse::connect(&d, &sid, &[]).await;
    Reviewed { _script: script, d, sid, sse }
}

#[tokio::test]
async fn a_trusted_reviewer_allows_alone_and_the_audit_says_who_and_why() {
    let Reviewed { _script, d, sid, mut sse } =
        reviewed("allow", "", &["--reviewer-trust", "guard=edit:decide"]).await;
    let events = d.turn(&sid, &mut sse, Some("alice"), "write reviewed.txt ok").await;

    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["voterClientId"], "reviewer:guard", "{resolved}");
    assert_eq!(resolved["via"], "reviewer");
    assert_eq!(resolved["outcome"], json!({"outcome": "selected", "optionId": "allow_once"}));
    assert_eq!(resolved["reviews"][0]["verdict"], "allow");
    assert_eq!(std::fs::read_to_string(d.workspace.join("reviewed.txt")).expect("written"), "ok");
    // What the reviewer was sent: the kind, the agent, the title (its reason echoes them).
    let reason = resolved["reviews"][0]["reason"].as_str().expect("reason");
    assert!(reason.contains(r#""kind": "edit""#) && reason.contains(r#""agent": "demo""#), "{reason}");
    assert!(reason.contains("Write reviewed.txt"), "{reason}");

    let entry = &d.audit(&sid).await[0];
    assert_eq!(entry["resolvedBy"], "vote");
    assert_eq!(entry["voterClientId"], "reviewer:guard");
    assert_eq!(entry["via"], "reviewer");
    assert_eq!(entry["remembered"], Value::Null, "a reviewer's decision is never a rule");
    assert_eq!(entry["reviews"][0]["decides"], true);
    assert!(entry["reviews"][0]["reason"].as_str().expect("reason").starts_with("a write inside"));
    let scrape = d.scrape().await;
    assert_eq!(scrape.get("mediatord_reviews_total", &[("reviewer", "guard"), ("verdict", "allow")]), 1.0);
}

/// The demo agent's `look` asks to read (kind `read`): a reviewer trusted with reads answers it
/// alone: the turn goes on without a person.
#[tokio::test]
async fn a_read_is_allowed_by_a_reviewer_trusted_with_reads_alone() {
    let Reviewed { _script, d, sid, mut sse } =
        reviewed("allow", "", &["--reviewer-trust", "guard=read:decide"]).await;
    let events = d.turn(&sid, &mut sse, Some("alice"), "look notes.txt").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(
        (&resolved["voterClientId"], &resolved["via"]),
        (&json!("reviewer:guard"), &json!("reviewer"))
    );
    assert_eq!(resolved["reviews"][0]["decides"], true);
    assert!(events.iter().any(|e| e.payload().to_string().contains("looked at notes.txt")));
}

#[tokio::test]
async fn an_untrusted_allow_only_informs_and_a_person_decides() {
    // Trusted with reads only: the write's allow is shown, not counted.
    let Reviewed { _script, d, sid, mut sse } =
        reviewed("allow", "", &["--reviewer-trust", "guard=read:decide"]).await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write informed.txt ok").await;
    let rid = request_id(&request);
    let reviewed = sse.until_type("permission_reviewed").await;
    let reviewed = reviewed.last().expect("reviewed").payload().clone();
    assert_eq!(reviewed["requestId"], rid.as_str());
    assert_eq!(reviewed["review"]["verdict"], "allow");
    assert_eq!(reviewed["review"]["decides"], false);
    let pending = d.pending(&sid).await;
    assert_eq!(pending.len(), 1, "still the people's: {pending:?}");
    assert_eq!(pending[0]["reviews"][0]["clientId"], "reviewer:guard");
    assert!(!d.workspace.join("informed.txt").exists());

    let (status, body) = d.vote(&sid, &rid, Some("alice"), selected("reject_once")).await.pair();
    assert_eq!((status, body), (200, json!({})));
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["voterClientId"], "alice");
    assert!(!d.workspace.join("informed.txt").exists(), "the person's reject stands");
    // The person decided against the reviewer's allow: it was overruled, on the record and in
    // the figures, which `/reviewers` reads from the same counters as `/metrics`.
    assert_eq!(resolved["reviews"][0]["overruled"], true, "{resolved}");
    assert_eq!(d.audit(&sid).await[0]["reviews"][0]["overruled"], true);
    let figures = d.get("/reviewers").await.ok();
    assert_eq!(
        figures,
        json!({"reviewers": [{
            "name": "guard", "workspace": null, "decides": ["read"], "allowed": 1, "denied": 0,
            "escalated": 0, "failures": {"timeout": 0, "crash": 0, "garbage": 0, "unavailable": 0}, "overruled": 1, "restarts": 0,
            "answered": 1, "meanMs": figures["reviewers"][0]["meanMs"],
        }]})
    );
    assert!(figures["reviewers"][0]["meanMs"].as_f64().is_some_and(|ms| ms > 0.0), "{figures}");
    let scrape = d.scrape().await;
    assert_eq!(scrape.get("mediatord_reviews_overruled_total", &[("reviewer", "guard")]), 1.0);
}

#[tokio::test]
async fn an_escalate_stays_pending_with_its_reason_until_a_person_allows() {
    let Reviewed { _script, d, sid, mut sse } =
        reviewed("escalate", "", &["--reviewer-trust", "guard=edit:decide"]).await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write escalated.txt ok").await;
    let rid = request_id(&request);
    let reviewed = sse.until_type("permission_reviewed").await;
    let review = reviewed.last().expect("reviewed").payload()["review"].clone();
    assert_eq!(review["verdict"], "escalate");
    assert!(review["reason"].as_str().expect("reason").starts_with("unsure: ask a person"), "{review}");
    let pending = d.pending(&sid).await;
    assert_eq!(pending[0]["reviews"][0]["verdict"], "escalate");

    let (status, body) = d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.pair();
    assert_eq!((status, body), (200, json!({})));
    sse.until_type("turn_complete").await;
    assert_eq!(std::fs::read_to_string(d.workspace.join("escalated.txt")).expect("written"), "ok");
    let entry = &d.audit(&sid).await[0];
    assert_eq!(entry["voterClientId"], "alice");
    assert_eq!(entry["reviews"][0]["verdict"], "escalate");
    let scrape = d.scrape().await;
    assert_eq!(scrape.get("mediatord_reviews_total", &[("reviewer", "guard"), ("verdict", "escalate")]), 1.0);
    // An escalate took no side: the person who decided it overruled nothing.
    assert_eq!(entry["reviews"][0].get("overruled"), None, "{entry}");
    let figures = &d.get("/reviewers").await.ok()["reviewers"][0];
    assert_eq!((&figures["escalated"], &figures["overruled"]), (&json!(1), &json!(0)), "{figures}");
}

#[tokio::test]
async fn a_trusted_deny_is_the_decision_with_its_reason_in_the_audit() {
    let Reviewed { _script, d, sid, mut sse } =
        reviewed("deny", "", &["--reviewer-trust", "guard=edit:decide"]).await;
    let events = d.turn(&sid, &mut sse, Some("alice"), "write denied.txt no").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["outcome"], json!({"outcome": "selected", "optionId": "reject_once"}));
    assert!(!d.workspace.join("denied.txt").exists());
    let entry = &d.audit(&sid).await[0];
    assert_eq!(entry["voterClientId"], "reviewer:guard");
    assert_eq!(entry["outcome"]["optionId"], "reject_once", "{entry}");
    assert_eq!(entry["reviews"][0]["verdict"], "deny");
    assert!(entry["reviews"][0]["reason"].as_str().expect("reason").starts_with("writes are refused here"));
    let ballot = &entry["ballots"][0];
    assert_eq!(
        (&ballot["clientId"], &ballot["verdict"], &ballot["counted"]),
        (&json!("reviewer:guard"), &json!("deny"), &json!(true))
    );
}

/// A failing reviewer (`mode`) leaves a trusted kind to the people: the request stays pending with
/// the failure shown, a person decides it, and `/metrics` counts the failure by `reason`.
/// `deadline_ms`: short for the hang, long for the others, whose failure is seen when it happens.
async fn a_failure_leaves_the_request_to_the_people(mode: &str, reason: &str, deadline_ms: &str) {
    let Reviewed { _script, d, sid, mut sse } =
        reviewed(mode, "", &["--reviewer-trust", "guard=edit:decide", "--review-deadline-ms", deadline_ms])
            .await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write failed.txt ok").await;
    let rid = request_id(&request);
    let reviewed = sse.until_type("permission_reviewed").await;
    let review = reviewed.last().expect("reviewed").payload()["review"].clone();
    assert_eq!((&review["verdict"], &review["failure"]), (&json!("escalate"), &json!(reason)), "{review}");
    assert_eq!(review["decides"], false);
    let pending = d.pending(&sid).await;
    assert_eq!(pending.len(), 1, "nothing decided by the failure");
    assert_eq!(pending[0]["reviews"][0]["failure"], reason);
    let scrape = d.scrape().await;
    assert_eq!(
        scrape.get("mediatord_review_failures_total", &[("reviewer", "guard"), ("reason", reason)]),
        1.0
    );
    assert_eq!(scrape.get("mediatord_reviews_total", &[("reviewer", "guard"), ("verdict", "escalate")]), 1.0);

    let (status, body) = d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.pair();
    assert_eq!((status, body), (200, json!({})));
    sse.until_type("turn_complete").await;
    assert_eq!(d.audit(&sid).await[0]["voterClientId"], "alice");
    assert!(d.workspace.join("failed.txt").exists());
}

#[tokio::test]
async fn a_reviewer_that_hangs_past_its_deadline_leaves_the_request_to_the_people() {
    a_failure_leaves_the_request_to_the_people("hang", "timeout", "300").await;
}

#[tokio::test]
async fn a_reviewer_that_crashes_leaves_the_request_to_the_people() {
    a_failure_leaves_the_request_to_the_people("crash", "crash", "30000").await;
}

#[tokio::test]
async fn a_reviewer_that_answers_garbage_leaves_the_request_to_the_people() {
    a_failure_leaves_the_request_to_the_people("garbage", "garbage", "30000").await;
}

#[tokio::test]
async fn a_verdict_after_a_person_decided_changes_nothing() {
    let signal = tempfile::tempdir().expect("tempdir");
    let go = signal.path().join("go");
    let Reviewed { _script, d, sid, mut sse } =
        reviewed("late", go.to_str().expect("utf-8"), &["--reviewer-trust", "guard=edit:decide"]).await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write late.txt no").await;
    let rid = request_id(&request);
    let (status, body) = d.vote(&sid, &rid, Some("alice"), selected("reject_once")).await.pair();
    assert_eq!((status, body), (200, json!({})));
    let first = sse.until_type("turn_complete").await;

    // The reviewer now allows the decided request; its next answer (to a second request) comes
    // after that line on its stdout, so once it is seen, the late allow has been read.
    std::fs::write(&go, "").expect("signal the reviewer");
    let second = d.raise(&sid, &mut sse, Some("alice"), "write second.txt x").await;
    let between = sse.until_type("permission_reviewed").await;
    assert_eq!(between.last().expect("reviewed").payload()["requestId"], second["requestId"]);
    let all: Vec<&Event> = first.iter().chain(between.iter()).collect();
    let about_first: Vec<&str> =
        all.iter().filter(|e| e.payload()["requestId"] == rid.as_str()).map(|e| e.event.as_str()).collect();
    assert_eq!(about_first, ["permission_resolved"], "nothing after the decision");
    assert!(!d.workspace.join("late.txt").exists(), "the person's reject stands");
    let entry = d.audit(&sid).await.into_iter().find(|e| e["requestId"] == rid.as_str()).expect("audited");
    assert_eq!(
        (&entry["voterClientId"], &entry["outcome"]["optionId"]),
        (&json!("alice"), &json!("reject_once"))
    );
    assert_eq!(entry.get("reviews"), None, "the late verdict is not on the record");
}

/// A reviewer never outlives its daemon, even one killed with SIGKILL (no daemon code runs): the
/// guard it runs behind kills it.
#[tokio::test]
async fn a_reviewer_dies_with_its_daemon_even_on_sigkill() {
    let Reviewed { _script, mut d, sid, mut sse } =
        reviewed("allow", "", &["--reviewer-trust", "guard=edit:decide"]).await;
    // Answered by the reviewer alone: its program runs.
    d.turn(&sid, &mut sse, Some("alice"), "write alive.txt ok").await;
    assert!(d.workspace.join("alive.txt").exists());
    let pids = pids_with(_script.path.to_str().expect("utf-8"));
    assert!(pids.len() >= 2, "the guard and the program: {pids:?}");
    d.signal(rustix::process::Signal::KILL);
    d.wait_exit(std::time::Duration::from_secs(10));
    for pid in pids {
        wait_gone(pid).await;
    }
}

/// What a reviewer is told beyond the request (`docs/operations.md#reviewers`): the running turn's
/// prompt, and what the session's ended turns changed, newest first. The reviewer says what it was
/// told in its reason (it runs confined: it writes nowhere the test could read).
#[tokio::test]
async fn a_reviewer_is_told_the_turns_prompt_and_what_the_session_changed_so_far() {
    const ECHOING: &str = r#"
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    told = json.dumps({"prompt": req.get("prompt"), "changes": req.get("changes")})
    print(json.dumps({"id": req["id"], "verdict": "allow", "reason": told}), flush=True)
"#;
    let script = reviewer_script("guard", ECHOING, "");
    let d = Daemon::start(&["--reviewer", &script.spec, "--reviewer-trust", "guard=edit:decide"]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let mut told = Vec::new();
    for prompt in ["write first.txt one", "write second.txt two"] {
        let events = d.turn(&sid, &mut sse, Some("alice"), prompt).await;
        let reason = find(&events, "permission_resolved")["reviews"][0]["reason"].clone();
        told.push(
            serde_json::from_str::<Value>(reason.as_str().expect("a reason")).expect("what it was told"),
        );
    }
    assert_eq!(told[0]["prompt"], "write first.txt one");
    assert_eq!(told[0]["changes"], json!({"turns": 0, "files": [], "more": false, "approvedThisTurn": []}));
    assert_eq!(told[1]["prompt"], "write second.txt two");
    assert_eq!(
        told[1]["changes"],
        json!({"turns": 1, "more": false, "approvedThisTurn": [],
               "files": [{"path": "first.txt", "status": "added", "turnIndex": 0}]})
    );
}

/// The breaker: the demo agent's `permissions 5` asks five times in a row (tool kind `other`); a
/// reviewer trusted with `other` denies each. The third denial of the turn trips the breaker
/// (`--review-breaker-denials 3`): `review_breaker` is published, the turn is cancelled as a
/// client's cancel does (no fourth request, the turn ends `cancelled`), and the notification
/// target that hears permission requests hears it. The next turn starts from zero.
#[tokio::test]
async fn the_third_denial_in_a_turn_stops_it_and_notifies_and_the_next_turn_starts_from_zero() {
    let mut hook = Receiver::start(&[]).await;
    let url = hook.url("/hook");
    let Reviewed { _script, d, sid, mut sse } = reviewed(
        "deny",
        "",
        &["--reviewer-trust", "guard=other:decide", "--review-breaker-denials", "3", "--notify", &url],
    )
    .await;
    let events = d.turn(&sid, &mut sse, Some("alice"), "permissions 5").await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e.event.as_str())
        .filter(|k| matches!(*k, "permission_request" | "review_breaker" | "turn_complete"))
        .collect();
    assert_eq!(
        kinds,
        ["permission_request", "permission_request", "permission_request", "review_breaker", "turn_complete"]
    );
    let tripped = find(&events, "review_breaker");
    let third = events.iter().filter(|e| e.event == "permission_request").nth(2).expect("third");
    assert_eq!(
        (&tripped["reviewer"], &tripped["reason"], &tripped["count"], &tripped["requestId"]),
        (&json!("guard"), &json!("denials"), &json!(3), &third.payload()["requestId"])
    );
    assert!(tripped["review"].as_str().expect("review").starts_with("writes are refused here"), "{tripped}");
    assert_eq!(find(&events, "turn_complete")["stopReason"], "cancelled");
    let mut notified = Vec::new();
    while !notified.contains(&"review_breaker".to_owned()) {
        assert!(notified.len() < 8, "no review_breaker notification among {notified:?}");
        let got = hook.next().await;
        if got.header("x-mediatord-event") == "review_breaker" {
            assert_eq!(
                (&got.body["data"]["reviewer"], &got.body["sessionId"]),
                (&json!("guard"), &json!(sid))
            );
        }
        notified.push(got.header("x-mediatord-event").to_owned());
    }

    let events = d.turn(&sid, &mut sse, Some("alice"), "permissions 2").await;
    assert!(events.iter().all(|e| e.event != "review_breaker"), "two denials in a new turn trip nothing");
    assert!(events.iter().any(|e| e.payload().to_string().contains("outcomes: ")), "the turn ran to its end");
}

/// A reviewer that hangs: after three requests in a row got no verdict within the deadline, its
/// program is killed and started again (counted, `reason="hung"`), and the new one answers. Each
/// request it left meanwhile went to the people, who decided it.
#[tokio::test]
async fn a_hung_reviewer_is_restarted_after_three_timeouts_and_answers_again() {
    let marker = tempfile::tempdir().expect("tempdir");
    let first = marker.path().join("first");
    let Reviewed { _script, d, sid, mut sse } = reviewed(
        "hangfirst",
        first.to_str().expect("utf-8"),
        &["--reviewer-trust", "guard=edit:decide", "--review-deadline-ms", "2000"],
    )
    .await;
    for i in 0..3 {
        let request = d.raise(&sid, &mut sse, Some("alice"), &format!("write hung{i}.txt x")).await;
        let review = sse.until_type("permission_reviewed").await;
        let review = review.last().expect("reviewed").payload()["review"].clone();
        assert_eq!(review["failure"], "timeout", "request {i}: {review}");
        let rid = request_id(&request);
        assert_eq!(d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.status, 200);
        sse.until_type("turn_complete").await;
    }
    // The hung program is gone: the next one, started at the next request, allows.
    std::fs::write(&first, "").expect("mark the restart");
    assert_eq!(
        d.scrape().await.get("mediatord_review_restarts_total", &[("reviewer", "guard"), ("reason", "hung")]),
        1.0
    );
    // Bounded, but not tight: on a loaded machine (CI saw it) the new Python program can take more
    // than one deadline to start, and each request meanwhile fails as below; a start that fails
    // doubles the backoff (up to 10 s), during which every request fails `crash` at once. So the
    // bound is time (WAIT), with a count far past what that time allows as the backstop.
    let mut decided_by_reviewer = false;
    let mut failures = Vec::new();
    let deadline = Instant::now() + WAIT;
    for i in 0..200 {
        if Instant::now() > deadline {
            break;
        }
        let request = d.raise(&sid, &mut sse, Some("alice"), &format!("write awake{i}.txt x")).await;
        let events =
            sse.until(|e| e.event == "permission_resolved" || e.event == "permission_reviewed").await;
        let last = events.last().expect("an answer");
        if last.event == "permission_resolved" {
            assert_eq!(last.payload()["voterClientId"], "reviewer:guard");
            sse.until_type("turn_complete").await;
            decided_by_reviewer = true;
            break;
        }
        // Started no sooner than its backoff, a request in between finds it restarting (`crash`),
        // or the new program still starting past the deadline (`timeout`).
        let failure = &last.payload()["review"]["failure"];
        assert!(failure == "crash" || failure == "timeout", "{}", last.payload());
        failures.push(failure.clone());
        let rid = request_id(&request);
        assert_eq!(d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.status, 200);
        sse.until_type("turn_complete").await;
    }
    assert!(decided_by_reviewer, "the restarted reviewer answered; each request failed: {failures:?}");
    assert_eq!(d.get("/reviewers").await.ok()["reviewers"][0]["restarts"], 1);
}

//! Permission rules and remembered decisions (`docs/protocol.md#7-permission-rules`), black-box:
//! the rule routes and `policy_updated`, auto-answers by rule, deny over allow, remembering, the decision shorthand,
//! rules resolving requests already pending, the audit of rule answers, and `require` rules that
//! wait for several voters.
//!
//! The demo agent's `write <path> <text>` asks with kind `edit` and the absolute path in
//! `locations`; `shell <command>` asks with kind `execute` and `rawInput.command`. Both offer
//! `allow_once`, `allow_always` and `reject_once` (ids equal to kinds), so "an allow rule does not
//! apply when no allow option is offered" cannot be shown here; `permission::mediator::tests`
//! covers it.

use serde_json::{Value, json};

use crate::support::*;

/// `POST /session/:id/permission-rules` as alice.
async fn add_rule(d: &Daemon, sid: &str, rule: Value) -> (u16, Value) {
    d.post(&format!("/session/{sid}/permission-rules"), Some("alice"), rule).await.pair()
}

/// Adds a rule that must be accepted; returns its `ruleId`.
async fn add_ok(d: &Daemon, sid: &str, rule: Value) -> String {
    let (status, body) = add_rule(d, sid, rule).await;
    assert_eq!(status, 201, "{body}");
    body["rule"]["ruleId"].as_str().expect("ruleId").to_owned()
}

async fn list_rules(d: &Daemon, sid: &str) -> Vec<Value> {
    d.get(&format!("/session/{sid}/permission-rules")).await.ok()["rules"].as_array().expect("rules").clone()
}

async fn permissions(d: &Daemon, sid: &str, audit: bool) -> Value {
    let query = if audit { "?audit=1" } else { "" };
    d.get(&format!("/session/{sid}/permissions{query}")).await.ok()
}

/// A daemon, alice's session, and a stream on it.
async fn setup() -> (Daemon, String, Sse) {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let sse = Sse::connect(&d, &sid, &[]).await;
    (d, sid, sse)
}

/// Asserts the turn's permission was answered by `rule_id` with `option_id`, with no vote.
fn assert_answered_by_rule(events: &[Event], rule_id: &str, option_id: &str) {
    let kinds: Vec<&str> =
        events.iter().map(|e| e.event.as_str()).filter(|k| k.starts_with("permission_")).collect();
    assert_eq!(kinds, ["permission_request", "permission_resolved"], "rule answers publish both, in order");
    let request = find(events, "permission_request");
    let resolved = find(events, "permission_resolved");
    assert_eq!(resolved["requestId"], request["requestId"]);
    assert_eq!(resolved["resolvedBy"], "rule");
    assert_eq!(resolved["ruleId"], rule_id);
    assert_eq!(resolved["outcome"], json!({"outcome": "selected", "optionId": option_id}));
    assert!(resolved.get("voterClientId").is_none(), "{resolved}");
}

#[tokio::test]
async fn rules_can_be_added_listed_and_deleted_and_each_change_is_published() {
    let (d, sid, mut sse) = setup().await;
    let (status, body) = add_rule(&d, &sid, json!({"effect": "deny", "kinds": ["execute"]})).await;
    assert_eq!(status, 201, "{body}");
    let rule = body["rule"].clone();
    let rule_id = rule["ruleId"].as_str().expect("ruleId").to_owned();
    assert!(rule["createdAt"].as_u64().is_some_and(|t| t > 0), "{rule}");
    assert_eq!(rule["effect"], "deny");
    assert_eq!(rule["kinds"], json!(["execute"]));
    assert_eq!(rule["createdBy"], "alice");
    let updated = sse.until_type("policy_updated").await;
    let updated = updated.last().expect("event").payload();
    assert_eq!(updated["sessionId"], sid.as_str());
    assert_eq!(updated["rules"], json!([rule]));

    let second = add_ok(&d, &sid, json!({"effect": "allow", "paths": ["docs/**"]})).await;
    let updated = sse.until_type("policy_updated").await;
    assert_eq!(updated.last().expect("event").payload()["rules"].as_array().map(Vec::len), Some(2));
    let ids: Vec<Value> = list_rules(&d, &sid).await.iter().map(|r| r["ruleId"].clone()).collect();
    assert_eq!(ids, [json!(rule_id), json!(second)], "listed oldest first");

    let delete = |id: String| http().delete(d.url(&format!("/session/{sid}/permission-rules/{id}")));
    assert_eq!(send(delete(rule_id.clone())).await.pair().0, 204);
    let updated = sse.until_type("policy_updated").await;
    let rules = &updated.last().expect("event").payload()["rules"];
    assert_eq!(rules.as_array().map(Vec::len), Some(1));
    assert_eq!(rules[0]["ruleId"], second.as_str());
    assert_eq!(list_rules(&d, &sid).await.len(), 1);

    let (status, body) = send(delete(rule_id)).await.pair();
    assert_eq!(status, 404, "deleting twice: {body}");
    assert_eq!(body["code"], "rule_not_found");
    let (status, body) = send(delete("rule-unknown".into())).await.pair();
    assert_eq!((status, body["code"].clone()), (404, json!("rule_not_found")));
    let (status, body) = add_rule(&d, "no-such-session", json!({"effect": "deny", "kinds": ["read"]})).await;
    assert_eq!((status, body["code"].clone()), (404, json!("session_not_found")));
}

#[tokio::test]
async fn rule_without_any_matcher_is_invalid() {
    let (d, sid, _sse) = setup().await;
    for body in [json!({"effect": "allow"}), json!({"effect": "deny", "kinds": null, "extra": 1})] {
        let (status, answer) = add_rule(&d, &sid, body.clone()).await;
        assert_eq!((status, answer["code"].clone()), (400, json!("invalid_rule")), "{body}: {answer}");
    }
    assert!(list_rules(&d, &sid).await.is_empty());
}

#[tokio::test]
async fn rule_with_an_unknown_kind_is_invalid() {
    let (d, sid, _sse) = setup().await;
    let (status, answer) = add_rule(&d, &sid, json!({"effect": "deny", "kinds": ["execute", "write"]})).await;
    assert_eq!((status, answer["code"].clone()), (400, json!("invalid_rule")), "{answer}");
    assert!(answer["error"].as_str().is_some_and(|e| e.contains("write")), "{answer}");
    assert!(list_rules(&d, &sid).await.is_empty());
}

#[tokio::test]
async fn deny_rule_on_execute_rejects_a_command_without_a_vote() {
    let (d, sid, mut sse) = setup().await;
    let rule = add_ok(&d, &sid, json!({"effect": "deny", "kinds": ["execute"]})).await;
    let events = d.turn(&sid, &mut sse, Some("alice"), "shell rm -rf x").await;
    assert_answered_by_rule(&events, &rule, "reject_once");
    assert_eq!(find(&events, "permission_request")["toolCall"]["rawInput"]["command"], "rm -rf x");
    assert!(chunk_text(&events).contains("permission denied"), "{}", chunk_text(&events));
    assert!(permissions(&d, &sid, false).await["pending"].as_array().is_some_and(Vec::is_empty));
}

#[tokio::test]
async fn allow_rule_on_a_relative_path_glob_approves_only_matching_writes() {
    let (d, sid, mut sse) = setup().await;
    std::fs::create_dir(d.workspace.join("src")).expect("mkdir src");
    let rule = add_ok(&d, &sid, json!({"effect": "allow", "kinds": ["edit"], "paths": ["src/**"]})).await;
    let events = d.turn(&sid, &mut sse, Some("alice"), "write src/a.txt hi").await;
    assert_answered_by_rule(&events, &rule, "allow_once");
    assert_eq!(std::fs::read_to_string(d.workspace.join("src/a.txt")).expect("written"), "hi");

    let request = d.raise(&sid, &mut sse, Some("alice"), "write other.txt later").await;
    let listed = permissions(&d, &sid, false).await;
    assert_eq!(listed["pending"][0]["requestId"], request["requestId"], "outside the glob: waits for a vote");
    assert!(!d.workspace.join("other.txt").exists());
    let rid = request["requestId"].as_str().expect("requestId");
    assert_eq!(d.vote(&sid, rid, Some("alice"), selected("allow_once")).await.pair().0, 200);
    let events = sse.until_type("turn_complete").await;
    assert_eq!(find(&events, "permission_resolved")["resolvedBy"], "vote");
    assert_eq!(std::fs::read_to_string(d.workspace.join("other.txt")).expect("written"), "later");
}

#[tokio::test]
async fn deny_wins_over_allow_when_both_match() {
    let (d, sid, mut sse) = setup().await;
    // The allow rule is older and narrower; the deny still wins.
    add_ok(&d, &sid, json!({"effect": "allow", "kinds": ["edit"], "paths": ["both.txt"]})).await;
    let deny = add_ok(&d, &sid, json!({"effect": "deny", "paths": ["**"]})).await;
    let events = d.turn(&sid, &mut sse, Some("alice"), "write both.txt x").await;
    assert_answered_by_rule(&events, &deny, "reject_once");
    assert!(chunk_text(&events).contains("permission denied"));
    assert!(!d.workspace.join("both.txt").exists());
}

/// Asserts `rules` is exactly one remembered rule, narrowed to kind `edit` and this one path.
fn narrow_rule_for(rules: &[Value], path: &std::path::Path) -> Value {
    assert_eq!(rules.len(), 1, "one remembered rule: {rules:?}");
    let rule = rules[0].clone();
    assert_eq!(rule["kinds"], json!(["edit"]), "{rule}");
    assert_eq!(rule["paths"], json!([path.to_string_lossy()]), "{rule}");
    rule
}

#[tokio::test]
async fn remember_session_vote_answers_the_identical_request_by_rule() {
    let (d, sid, mut sse) = setup().await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write same.txt one").await;
    let rid = request["requestId"].as_str().expect("requestId");
    let mut body = selected("allow_once");
    body["remember"] = json!("session");
    assert_eq!(d.vote(&sid, rid, Some("alice"), body).await.pair().0, 200);
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["resolvedBy"], "vote");
    let updated = find(&events, "policy_updated");
    let rule = narrow_rule_for(&list_rules(&d, &sid).await, &d.workspace.join("same.txt"));
    assert_eq!(updated["rules"], json!([rule.clone()]));
    assert_eq!(rule["effect"], "allow");
    assert_eq!(rule["createdBy"], "alice");

    let events = d.turn(&sid, &mut sse, Some("alice"), "write same.txt two").await;
    assert_answered_by_rule(&events, rule["ruleId"].as_str().expect("ruleId"), "allow_once");
    assert_eq!(std::fs::read_to_string(d.workspace.join("same.txt")).expect("written"), "two");

    // Narrow: another path still goes to the vote.
    let other = d.raise(&sid, &mut sse, Some("alice"), "write different.txt three").await;
    let listed = permissions(&d, &sid, false).await;
    assert_eq!(listed["pending"][0]["requestId"], other["requestId"]);
}

#[tokio::test]
async fn choosing_allow_always_is_remembered_without_asking() {
    let (d, sid, mut sse) = setup().await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write always.txt one").await;
    let rid = request["requestId"].as_str().expect("requestId");
    assert_eq!(d.vote(&sid, rid, Some("alice"), selected("allow_always")).await.pair().0, 200);
    sse.until_type("turn_complete").await;
    let rule = narrow_rule_for(&list_rules(&d, &sid).await, &d.workspace.join("always.txt"));
    assert_eq!(rule["effect"], "allow");

    let events = d.turn(&sid, &mut sse, Some("alice"), "write always.txt two").await;
    // The rule answers with the `allow_once` option: a rule never widens itself.
    assert_answered_by_rule(&events, rule["ruleId"].as_str().expect("ruleId"), "allow_once");
    assert_eq!(std::fs::read_to_string(d.workspace.join("always.txt")).expect("written"), "two");
}

#[tokio::test]
async fn allow_session_shorthand_picks_allow_once_and_remembers() {
    let (d, sid, mut sse) = setup().await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write short.txt one").await;
    let rid = request["requestId"].as_str().expect("requestId");
    assert_eq!(
        d.vote(&sid, rid, Some("alice"), json!({"decision": "allow-session"})).await.pair(),
        (200, json!({}))
    );
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["outcome"], json!({"outcome": "selected", "optionId": "allow_once"}));
    assert_eq!(resolved["voterClientId"], "alice");
    let rule = narrow_rule_for(&list_rules(&d, &sid).await, &d.workspace.join("short.txt"));
    assert_eq!(rule["effect"], "allow");
    let events = d.turn(&sid, &mut sse, Some("alice"), "write short.txt two").await;
    assert_answered_by_rule(&events, rule["ruleId"].as_str().expect("ruleId"), "allow_once");
}

#[tokio::test]
async fn deny_shorthand_picks_reject_once_and_remembers_nothing() {
    let (d, sid, mut sse) = setup().await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write no.txt one").await;
    let rid = request["requestId"].as_str().expect("requestId");
    assert_eq!(d.vote(&sid, rid, Some("alice"), json!({"decision": "deny"})).await.pair(), (200, json!({})));
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["outcome"], json!({"outcome": "selected", "optionId": "reject_once"}));
    assert!(chunk_text(&events).contains("permission denied"));
    assert!(!events.iter().any(|e| e.event == "policy_updated"));
    assert!(list_rules(&d, &sid).await.is_empty());
    assert!(!d.workspace.join("no.txt").exists());
}

#[tokio::test]
async fn deny_session_shorthand_remembers_a_deny_rule() {
    let (d, sid, mut sse) = setup().await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "shell make clean").await;
    let rid = request["requestId"].as_str().expect("requestId");
    assert_eq!(
        d.vote(&sid, rid, Some("alice"), json!({"decision": "deny-session"})).await.pair(),
        (200, json!({}))
    );
    sse.until_type("turn_complete").await;
    let rules = list_rules(&d, &sid).await;
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0]["effect"], "deny");
    assert_eq!(rules[0]["kinds"], json!(["execute"]));
    assert_eq!(rules[0]["commands"], json!(["make clean"]));
    let events = d.turn(&sid, &mut sse, Some("alice"), "shell make clean").await;
    assert_answered_by_rule(&events, rules[0]["ruleId"].as_str().expect("ruleId"), "reject_once");
    // A different command is not covered.
    d.raise(&sid, &mut sse, Some("alice"), "shell make all").await;
    assert_eq!(permissions(&d, &sid, false).await["pending"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn adding_a_rule_resolves_a_matching_pending_request_at_once() {
    let (d, sid, mut sse) = setup().await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "shell cargo publish").await;
    // A rule that does not match leaves it pending.
    add_ok(&d, &sid, json!({"effect": "deny", "commands": ["rm *"]})).await;
    let listed = permissions(&d, &sid, false).await;
    assert_eq!(listed["pending"][0]["requestId"], request["requestId"]);

    let rule = add_ok(&d, &sid, json!({"effect": "allow", "commands": ["cargo *"]})).await;
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["requestId"], request["requestId"]);
    assert_eq!(resolved["resolvedBy"], "rule");
    assert_eq!(resolved["ruleId"], rule.as_str());
    assert_eq!(resolved["outcome"], json!({"outcome": "selected", "optionId": "allow_once"}));
    assert!(chunk_text(&events).contains("would run: cargo publish"), "{}", chunk_text(&events));
    assert!(permissions(&d, &sid, false).await["pending"].as_array().is_some_and(Vec::is_empty));
}

#[tokio::test]
async fn every_rule_answer_is_audited() {
    let (d, sid, mut sse) = setup().await;
    let deny = add_ok(&d, &sid, json!({"effect": "deny", "kinds": ["execute"]})).await;
    let allow = add_ok(&d, &sid, json!({"effect": "allow", "kinds": ["edit"]})).await;
    let first = d.turn(&sid, &mut sse, Some("alice"), "shell ls").await;
    let second = d.turn(&sid, &mut sse, Some("alice"), "write audited.txt x").await;
    let audit = permissions(&d, &sid, true).await["audit"].as_array().expect("audit").clone();
    assert_eq!(audit.len(), 2, "{audit:?}");
    for (entry, events, rule, option) in
        [(&audit[0], &first, &deny, "reject_once"), (&audit[1], &second, &allow, "allow_once")]
    {
        assert_eq!(entry["requestId"], find(events, "permission_request")["requestId"]);
        assert_eq!(entry["resolvedBy"], "rule");
        assert_eq!(entry["ruleId"], rule.as_str());
        assert_eq!(entry["policy"], "first-responder");
        assert_eq!(entry["outcome"], json!({"outcome": "selected", "optionId": option}));
        assert_eq!(entry["voterClientId"], Value::Null);
        assert_eq!(entry["ballots"], json!([]));
    }
}

/// Issue #27, finding 17: a rule of 64 globs of 4000 `*` each was refused only after globset had
/// built most of its automaton, and the resident memory it took (about 200 MB a post) stayed. It
/// is refused by counting its wildcards first: the daemon's memory does not move.
#[tokio::test]
async fn a_rule_with_too_many_wildcards_is_refused_without_growing_the_daemon() {
    let (d, sid, _sse) = setup().await;
    let stars = vec!["*".repeat(4000); 64];
    // Warm up: the same route with a refused rule that compiles nothing.
    let (status, _) = add_rule(&d, &sid, json!({"effect": "allow", "commands": ["{a"]})).await;
    assert_eq!(status, 400);
    let before = d.memory_kib("VmRSS");
    d.reset_peak_rss();
    for field in ["paths", "commands"] {
        let (status, body) = add_rule(&d, &sid, json!({"effect": "allow", field: stars})).await;
        assert_eq!((status, body["code"].as_str()), (400, Some("invalid_rule")), "{body}");
        assert!(body["error"].as_str().is_some_and(|e| e.contains("256000 wildcards")), "{body}");
    }
    let cwd = d.workspace.to_str().expect("utf-8").replace('/', "%2F");
    let (status, body) = d
        .post(
            &format!("/workspace/{cwd}/permission-rules"),
            Some("alice"),
            json!({"effect": "allow", "paths": stars}),
        )
        .await
        .pair();
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_rule")), "{body}");
    let grown_mib = d.memory_kib("VmHWM").saturating_sub(before) / 1024;
    assert!(grown_mib < 32, "three refused rules took {grown_mib} MiB at their peak");
    assert!(list_rules(&d, &sid).await.is_empty());
}

/// A `require` rule with `quorum: 2` on `git push*`, whatever the session's policy (`designated`
/// here, where the prompt's sender alone would decide): the operator's approval leaves it pending
/// ("1 of 2", on the event, the pending list and the card's data), the operator again under
/// another client id does not count twice, a paired device's approval decides it, and the audit
/// names both voters and the rule. A rejection by one voter decides at once.
#[tokio::test]
async fn a_require_rule_needs_two_distinct_voters_and_the_audit_names_both() {
    const TOKEN: &str = "operator-secret";
    let d = Daemon::start(&["--token", TOKEN, "--permission-policy", "designated"]);
    let (laptop, credential) = d.pair_device(Some(TOKEN), "Ada's laptop", "voter").await;
    let op = |req: reqwest::RequestBuilder, client: &str| {
        req.bearer_auth(TOKEN).header("X-Qwen-Client-Id", client)
    };
    let session = send(op(http().post(d.url("/session")), "alice").json(&json!({}))).await.ok();
    let sid = session["sessionId"].as_str().expect("sessionId").to_owned();
    assert_eq!(
        send(op(http().post(d.url("/session")), "bob").json(&json!({"sessionId": sid}))).await.status,
        200
    );
    assert_eq!(
        send(http().post(d.url("/session")).bearer_auth(&credential).json(&json!({"sessionId": sid})))
            .await
            .status,
        200
    );
    let mut sse = Sse::connect(&d, &sid, &[("Authorization", format!("Bearer {TOKEN}"))]).await;
    let rule = send(
        op(http().post(d.url(&format!("/session/{sid}/permission-rules"))), "alice")
            .json(&json!({"effect": "require", "quorum": 2, "commands": ["git push*"]})),
    )
    .await;
    assert_eq!(rule.status, 201, "{}", rule.text);
    assert_eq!(
        (rule.body["rule"]["effect"].as_str(), rule.body["rule"]["quorum"].as_u64()),
        (Some("require"), Some(2))
    );
    let rule_id = rule.body["rule"]["ruleId"].as_str().expect("ruleId").to_owned();

    let prompt = |text: &str| json!({"prompt": [{"type": "text", "text": text}]});
    let queued = op(http().post(d.url(&format!("/session/{sid}/prompt"))), "alice")
        .header("Prefer", "respond-async")
        .json(&prompt("shell git push --force"));
    assert_eq!(send(queued).await.status, 202);
    let request = sse.until_type("permission_request").await.last().expect("request").payload().clone();
    assert_eq!(request["required"], json!({"ruleId": rule_id, "quorum": 2, "approvals": 0}));
    let rid = request["requestId"].as_str().expect("requestId").to_owned();
    let vote = |req: reqwest::RequestBuilder| {
        req.json(&json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}))
    };
    let url = d.url(&format!("/session/{sid}/permission/{rid}"));

    // bob is not the prompt's sender: under `designated` alone he could not vote; the rule lets him.
    assert_eq!(send(vote(op(http().post(&url), "bob"))).await.status, 200);
    let partial = sse.until_type("permission_partial_vote").await.last().expect("partial").payload().clone();
    assert_eq!((partial["votesReceived"].as_u64(), partial["quorum"].as_u64()), (Some(1), Some(2)));
    assert_eq!(partial["ruleId"], json!(rule_id));
    // The same token as alice: the same voter, still one of two.
    assert_eq!(send(vote(op(http().post(&url), "alice"))).await.status, 200);
    let again = sse.until_type("permission_partial_vote").await.last().expect("partial").payload().clone();
    assert_eq!(again["votesReceived"].as_u64(), Some(1), "{again}");
    let pending = send(op(http().get(d.url(&format!("/session/{sid}/permissions"))), "alice")).await.ok();
    assert_eq!(pending["pending"][0]["required"]["approvals"], 1, "{pending}");
    // Ada's laptop, a second voter, decides it.
    assert_eq!(send(vote(http().post(&url).bearer_auth(&credential))).await.status, 200);
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(
        (resolved["requestId"].as_str(), resolved["voterClientId"].as_str()),
        (Some(&*rid), Some(&*laptop))
    );
    assert!(chunk_text(&events).contains("would run: git push --force"), "{}", chunk_text(&events));
    let audit = eventually(
        || http().get(d.url("/audit")).bearer_auth(TOKEN),
        |b| {
            b["entries"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["requestId"] == json!(rid) && e["status"] == "selected"))
        },
    )
    .await;
    let entry = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["requestId"] == json!(rid))
        .expect("entry")
        .clone();
    let ballots: Vec<(&str, Option<&str>)> = entry["ballots"]
        .as_array()
        .expect("ballots")
        .iter()
        .map(|b| (b["clientId"].as_str().unwrap_or(""), b["deviceName"].as_str()))
        .collect();
    assert_eq!(ballots, [("bob", None), ("alice", None), (&*laptop, Some("Ada's laptop"))]);
    assert_eq!(entry["required"]["ruleId"], json!(rule_id));
    assert_eq!(entry["voterDeviceName"], "Ada's laptop");

    // A rejection by one voter decides the next one at once.
    let queued = op(http().post(d.url(&format!("/session/{sid}/prompt"))), "alice")
        .header("Prefer", "respond-async")
        .json(&prompt("shell git push origin main"));
    assert_eq!(send(queued).await.status, 202);
    let request = sse.until_type("permission_request").await.last().expect("request").payload().clone();
    let rid = request["requestId"].as_str().expect("requestId").to_owned();
    let reject = http()
        .post(d.url(&format!("/session/{sid}/permission/{rid}")))
        .bearer_auth(&credential)
        .json(&json!({"outcome": {"outcome": "selected", "optionId": "reject_once"}}));
    assert_eq!(send(reject).await.status, 200);
    let events = sse.until_type("turn_complete").await;
    assert_eq!(
        find(&events, "permission_resolved")["outcome"],
        json!({"outcome": "selected", "optionId": "reject_once"})
    );
}

#[tokio::test]
async fn a_require_rule_without_a_valid_quorum_is_refused_with_the_reason() {
    let (d, sid, _sse) = setup().await;
    for (body, needle) in [
        (json!({"effect": "require", "commands": ["git push*"]}), "needs `quorum`"),
        (json!({"effect": "require", "quorum": 17, "commands": ["git push*"]}), "from 1 to 16"),
        (json!({"effect": "allow", "quorum": 2, "commands": ["git push*"]}), "`require` rule only"),
    ] {
        let (status, answer) = add_rule(&d, &sid, body).await;
        assert_eq!((status, answer["code"].as_str()), (400, Some("invalid_rule")), "{answer}");
        assert!(answer["error"].as_str().is_some_and(|e| e.contains(needle)), "{answer}");
    }
}

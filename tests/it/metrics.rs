//! `GET /metrics` through the real binary: a scripted session (prompts, a permission vote, a slow
//! stream evicted, an agent crash) moves exactly the counters it should; the route sits behind the
//! bearer like every other.

use serde_json::{Value, json};

use crate::support::scrape::Scrape;
use crate::support::*;

async fn scrape(d: &Daemon) -> Scrape {
    d.scrape().await
}

#[tokio::test]
async fn a_scripted_session_moves_the_right_counters() {
    let d = Daemon::start(&["--subscriber-queue", "16"]);
    let sid = d.join("alice").await;
    let before = scrape(&d).await;
    assert_eq!(before.get("mediatord_sessions", &[]), 1.0);
    assert_eq!(before.get("mediatord_agents", &[]), 1.0);

    // A plain prompt.
    let (status, body) = d.prompt(&sid, Some("alice"), "hello").await.pair();
    assert_eq!(status, 200, "{body}");

    // A prompt that asks permission, decided by alice's vote.
    let sid2 = sid.clone();
    let base = d.base.clone();
    let write = tokio::spawn(async move {
        let res = http()
            .post(format!("{base}/session/{sid2}/prompt"))
            .header("X-Qwen-Client-Id", "alice")
            .json(&text_prompt("write metrics.txt hi"))
            .send()
            .await
            .expect("prompt");
        res.status().as_u16()
    });
    let request_id = request_id(&d.first_pending(&sid).await);
    assert_eq!(scrape(&d).await.get("mediatord_pending_permissions", &[]), 1.0);
    let vote = d.vote(&sid, &request_id, Some("alice"), json!({"decision": "allow"})).await;
    assert_eq!(vote.status, 200, "{}", vote.text);
    assert_eq!(write.await.expect("join"), 200);

    // A stream paused while a long turn streams (more than the kernel's buffers hold), then read:
    // it lags more than `--subscriber-queue 16` and is evicted.
    let mut paused = Sse::paused(&d, &sid, &[]).await;
    let streamed = 1;
    let (status, body) = d.prompt(&sid, Some("alice"), "stream 30000").await.pair();
    assert_eq!(status, 200, "{body}");
    let rest = paused.rest().await;
    assert_eq!(rest.last().map(|e| e.payload()["reason"].as_str()), Some(Some("lag_limit")));

    // The agent crashes mid-prompt.
    let (status, body) = d.prompt(&sid, Some("alice"), "crash").await.pair();
    assert_eq!((status, &body["code"]), (503, &json!("agent_exited")), "{body}");

    let after = wait_for(&d, |s| s.get("mediatord_agent_exits_total", &[("reason", "exited")]) >= 1.0).await;
    let delta = |name: &str, labels: &[(&str, &str)]| after.get(name, labels) - before.get(name, labels);
    let completed = (2 + streamed) as f64;
    assert_eq!(delta("mediatord_prompts_total", &[("outcome", "completed")]), completed);
    assert_eq!(delta("mediatord_prompts_total", &[("outcome", "agent_exited")]), 1.0);
    assert_eq!(delta("mediatord_prompt_duration_seconds_count", &[]), completed + 1.0);
    assert_eq!(
        delta(
            "mediatord_permission_decisions_total",
            &[("policy", "first-responder"), ("resolved_by", "vote")]
        ),
        1.0
    );
    assert_eq!(delta("mediatord_permission_decision_seconds_count", &[]), 1.0);
    assert_eq!(delta("mediatord_streams_evicted_total", &[]), 1.0);
    assert!(delta("mediatord_events_published_total", &[]) >= 30000.0);
    assert_eq!(
        delta("mediatord_events_delivered_total", &[]),
        ids(&rest).len() as f64,
        "the paused stream was the only one"
    );
    assert_eq!(delta("mediatord_agent_exits_total", &[("reason", "exited")]), 1.0);
    assert_eq!(after.get("mediatord_pending_permissions", &[]), 0.0);
    let prompt_route = [("method", "POST"), ("route", "/session/{id}/prompt")];
    assert_eq!(
        delta("mediatord_http_requests_total", &[prompt_route[0], prompt_route[1], ("status", "200")]),
        completed
    );
    assert_eq!(
        delta("mediatord_http_requests_total", &[prompt_route[0], prompt_route[1], ("status", "503")]),
        1.0
    );
    assert_eq!(
        delta(
            "mediatord_http_requests_total",
            &[("route", "/session/{id}/permission/{request_id}"), ("status", "200")]
        ),
        1.0
    );

    // The dead session and its agent leave the gauges; an unknown path is counted as `unmatched`.
    let res = http().get(d.url("/no/such/route")).send().await.expect("404");
    assert_eq!(res.status(), 404);
    let last =
        wait_for(&d, |s| s.get("mediatord_sessions", &[]) == 0.0 && s.get("mediatord_agents", &[]) == 0.0)
            .await;
    assert_eq!(last.get("mediatord_http_requests_total", &[("route", "unmatched"), ("status", "404")]), 1.0);
    assert_eq!(last.get("mediatord_subscribers", &[]), 0.0);
}

async fn wait_for(d: &Daemon, ok: impl Fn(&Scrape) -> bool) -> Scrape {
    d.wait_for_metrics("the expected state", ok).await
}

#[tokio::test]
async fn metrics_sit_behind_the_bearer_and_are_advertised() {
    let d = Daemon::start(&["--token", "secret"]);
    let res = http().get(d.url("/metrics")).send().await.expect("scrape");
    assert_eq!(res.status(), 401);
    let res = http().get(d.url("/metrics")).bearer_auth("secret").send().await.expect("scrape");
    assert_eq!(res.status(), 200);
    let text = res.text().await.expect("body");
    assert!(text.contains("# TYPE mediatord_http_requests counter"), "{text}");
    assert!(text.ends_with("# EOF\n"));
    let caps: Value = http()
        .get(d.url("/capabilities"))
        .bearer_auth("secret")
        .send()
        .await
        .expect("caps")
        .json()
        .await
        .expect("json");
    assert!(caps["features"].as_array().expect("features").contains(&json!("metrics")));
}

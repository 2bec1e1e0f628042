//! `GET /metrics` through the real binary: a scripted session (prompts, a permission vote, a slow
//! stream evicted, an agent crash) moves exactly the counters it should; the route sits behind the
//! bearer like every other.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

/// `(series name, labels, value)`.
type Sample = (String, Vec<(String, String)>, f64);

/// One scrape: a sample per line.
struct Scrape(Vec<Sample>);

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut samples = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let (series, value) = line.rsplit_once(' ').expect("sample line");
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("value in {line:?}"));
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let rest = rest.strip_suffix('}').expect("closing brace");
                    let labels = rest
                        .split("\",")
                        .filter(|kv| !kv.is_empty())
                        .map(|kv| {
                            let (k, v) = kv.split_once("=\"").expect("label");
                            (k.to_owned(), v.trim_end_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
                None => (series.to_owned(), Vec::new()),
            };
            samples.push((name, labels, value));
        }
        Scrape(samples)
    }

    /// The sum over series called `name` carrying every label in `want`.
    fn get(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(n, labels, _)| {
                n == name && want.iter().all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }
}

async fn scrape(d: &Daemon) -> Scrape {
    let res = http().get(d.url("/metrics")).send().await.expect("scrape");
    assert_eq!(res.status(), 200);
    let ct = res.headers()["content-type"].to_str().expect("ascii").to_owned();
    assert!(ct.starts_with("application/openmetrics-text"), "content type {ct}");
    Scrape::parse(&res.text().await.expect("body"))
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

    // A stream that is never read while a long turn streams: evicted (bounded retries, since the
    // kernel's socket buffers absorb a varying amount before the 16-frame queue fills).
    let stalled = Sse::request(&d, &sid, &[]).await;
    assert_eq!(stalled.status(), 200);
    let mut streamed = 0;
    for _ in 0..10 {
        let (status, body) = d.prompt(&sid, Some("alice"), "stream 5000").await.pair();
        assert_eq!(status, 200, "{body}");
        streamed += 1;
        if scrape(&d).await.get("mediatord_streams_evicted_total", &[]) >= 1.0 {
            break;
        }
    }
    drop(stalled);

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
    assert!(delta("mediatord_events_published_total", &[]) >= 5000.0 * streamed as f64);
    assert!(delta("mediatord_events_delivered_total", &[]) >= 16.0, "the stalled queue filled");
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

/// Scrapes (bounded) until `ok` holds.
async fn wait_for(d: &Daemon, ok: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + WAIT;
    loop {
        let s = scrape(d).await;
        if ok(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "metrics never reached the expected state");
        tokio::time::sleep(Duration::from_millis(20)).await; // polling a scrape; no event to wait on
    }
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

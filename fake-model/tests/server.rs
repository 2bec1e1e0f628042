//! The fake model over real loopback HTTP, as an agent's SDK sees it.

use std::time::{Duration, Instant};

use mediatord_fake_model::FakeModel;
use serde_json::{Value, json};

/// Bound on every wait here; generous for a loaded machine.
const DEADLINE: Duration = Duration::from_secs(30);

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(DEADLINE).build().expect("client")
}

/// The `data:` payloads of an SSE body.
fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data: ")).map(str::to_owned))
        .collect()
}

async fn post(url: String, body: Value) -> reqwest::Response {
    client().post(url).json(&body).send().await.expect("an answer")
}

#[tokio::test]
async fn lists_its_model_for_openai_clients() {
    let fake = FakeModel::start().expect("start");
    let res = client().get(format!("{}/v1/models", fake.url())).send().await.expect("answer");
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.expect("json");
    assert_eq!(body["data"][0]["id"], "fake-model");
}

#[tokio::test]
async fn openai_streaming_tool_call_over_http() {
    let fake = FakeModel::start().expect("start");
    let res = post(
        format!("{}/v1/chat/completions", fake.url()),
        json!({
            "model": "fake-model", "stream": true,
            "messages": [{"role": "user", "content": "SHELL echo hi"}],
            "tools": [{"type": "function", "function": {"name": "run_shell_command"}}],
        }),
    )
    .await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let data = sse_data(&res.text().await.expect("body"));
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let call: Value = serde_json::from_str(&data[1]).expect("json");
    let call = &call["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "run_shell_command");
    assert!(call["id"].as_str().is_some_and(|id| id.starts_with("call_")), "{call}");
    assert!(fake.journal().iter().any(|l| l.contains("tool run_shell_command")), "{:?}", fake.journal());
    assert!(!fake.journal().concat().contains("echo hi"), "commands stay out of the journal");
}

#[tokio::test]
async fn anthropic_whole_message_and_token_count_over_http() {
    let fake = FakeModel::start().expect("start");
    let req = json!({"model": "claude", "max_tokens": 1, "messages": [{"role": "user", "content": "count"}]});
    let res = post(format!("{}/v1/messages?beta=true", fake.url()), req.clone()).await;
    assert_eq!(res.status(), 200);
    let msg: Value = res.json().await.expect("json");
    assert_eq!((msg["type"].as_str(), msg["stop_reason"].as_str()), (Some("message"), Some("end_turn")));
    assert_eq!(msg["content"][0]["text"], "Hello from the fake model.");
    let res = post(format!("{}/v1/messages/count_tokens?beta=true", fake.url()), req).await;
    let count: Value = res.json().await.expect("json");
    assert!(count["input_tokens"].as_u64().is_some_and(|n| n > 0), "{count}");
}

#[tokio::test]
async fn gemini_streamed_function_call_and_whole_text_over_http() {
    let fake = FakeModel::start().expect("start");
    let url = |method: &str| format!("{}/v1beta/models/gemini-2.5-flash:{method}", fake.url());
    let req = json!({
        "contents": [{"role": "user", "parts": [{"text": "<session_context>...</session_context>"}, {"text": "WRITE /w/a.txt hi"}]}],
        "tools": [{"functionDeclarations": [{"name": "write_file", "parametersJsonSchema": {}}]}],
    });
    let res = post(format!("{}?alt=sse", url("streamGenerateContent")), req.clone()).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let data = sse_data(&res.text().await.expect("body"));
    assert_eq!(data.len(), 1, "{data:?}");
    let chunk: Value = serde_json::from_str(&data[0]).expect("json");
    let candidate = &chunk["candidates"][0];
    assert_eq!(candidate["content"]["parts"][0]["functionCall"]["name"], "write_file");
    assert_eq!(candidate["finishReason"], "STOP");
    assert!(fake.journal().iter().any(|l| l.contains("tool write_file /w/a.txt")), "{:?}", fake.journal());

    let hi = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let doc: Value = post(url("generateContent"), hi.clone()).await.json().await.expect("json");
    assert_eq!(doc["candidates"][0]["content"]["parts"][0]["text"], "Hello from the fake model.");
    let count: Value = post(url("countTokens"), hi.clone()).await.json().await.expect("json");
    assert!(count["totalTokens"].as_u64().is_some_and(|n| n > 0), "{count}");

    // Gemini's error shape: a stream without `alt=sse`, an unknown method.
    for (method, status) in [("streamGenerateContent", 400), ("embedContent", 404)] {
        let res = post(url(method), hi.clone()).await;
        assert_eq!(res.status(), status, "{method}");
        let err: Value = res.json().await.expect("json");
        assert_eq!(err["error"]["code"], status, "{err}");
        assert!(err["error"]["status"].is_string() && err["error"]["message"].is_string(), "{err}");
    }
}

#[tokio::test]
async fn bad_requests_get_each_dialects_error_shape() {
    let fake = FakeModel::start().expect("start");
    let res =
        client().post(format!("{}/v1/messages", fake.url())).body("{not json").send().await.expect("answer");
    assert_eq!(res.status(), 400);
    let err: Value = res.json().await.expect("json");
    assert_eq!(
        (err["type"].as_str(), err["error"]["type"].as_str()),
        (Some("error"), Some("invalid_request_error"))
    );
    let res = post(format!("{}/v1/chat/completions", fake.url()), json!({"messages": "no"})).await;
    assert_eq!(res.status(), 400);
    let err: Value = res.json().await.expect("json");
    assert!(err["error"]["message"].as_str().is_some_and(|m| m.contains("messages")), "{err}");
    let res = client().get(format!("{}/v1beta/models", fake.url())).send().await.expect("answer");
    assert_eq!(res.status(), 404);
    let err: Value = res.json().await.expect("json");
    assert!(err["error"]["message"].as_str().is_some_and(|m| m.contains("/v1beta/models")), "{err}");
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused() {
    let fake = FakeModel::start().expect("start");
    let big = vec![b' '; mediatord_fake_model::MAX_REQUEST_BYTES + 1];
    let res = client().post(format!("{}/v1/messages", fake.url())).body(big).send().await.expect("answer");
    assert_eq!(res.status(), 413);
}

/// Polls the journal (every 20 ms, bounded) until a line contains `needle`.
async fn journal_line(fake: &FakeModel, needle: &str) -> String {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(line) = fake.journal().into_iter().find(|l| l.contains(needle)) {
            return line;
        }
        assert!(Instant::now() < deadline, "no journal line with {needle:?}: {:?}", fake.journal());
        tokio::time::sleep(Duration::from_millis(20)).await; // polling another thread's journal
    }
}

#[tokio::test]
async fn a_stall_holds_the_stream_until_the_client_goes_away() {
    let fake = FakeModel::start().expect("start");
    let mut res = post(
        format!("{}/v1/messages", fake.url()),
        json!({"model": "claude", "stream": true, "messages": [{"role": "user", "content": "STALL"}]}),
    )
    .await;
    // Read up to the opening text: the model call is now in flight and held.
    let mut seen = String::new();
    while !seen.contains("stalling...") {
        let chunk = tokio::time::timeout(DEADLINE, res.chunk()).await.expect("within the deadline");
        seen.push_str(&String::from_utf8_lossy(&chunk.expect("body").expect("more body")));
    }
    assert!(!seen.contains("message_stop"), "held before the end: {seen}");
    // Nothing more comes while it is held.
    let more = tokio::time::timeout(Duration::from_millis(300), res.chunk()).await;
    assert!(more.is_err(), "the response went on: {more:?}");
    drop(res);
    journal_line(&fake, "the client went away").await;
}

#[tokio::test]
async fn a_short_stall_resumes_and_ends_the_turn() {
    let fake = FakeModel::start().expect("start");
    let res = post(
        format!("{}/v1/chat/completions", fake.url()),
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "STALL 1"}]}),
    )
    .await;
    let data = sse_data(&res.text().await.expect("body"));
    let text: String = data
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "stalling... resumed.");
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
}

#[test]
fn dropping_the_server_ends_held_responses_and_frees_the_port() {
    let fake = FakeModel::start().expect("start");
    let url = fake.url();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mut res = rt.block_on(post(
        format!("{url}/v1/messages"),
        json!({"model": "claude", "stream": true, "messages": [{"role": "user", "content": "STALL"}]}),
    ));
    // Drop on another thread so that a drop that never returns fails the test instead of hanging it.
    let (done, dropped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(fake);
        _ = done.send(());
    });
    dropped.recv_timeout(DEADLINE).expect("dropping the server returns while a response is held");
    let rest = rt.block_on(async {
        let mut all = Vec::new();
        while let Ok(Some(c)) = res.chunk().await {
            all.extend_from_slice(&c);
        }
        String::from_utf8_lossy(&all).into_owned()
    });
    assert!(!rest.contains("message_stop"), "the held response was cut: {rest}");
    let again = rt.block_on(async { client().get(format!("{url}/v1/models")).send().await });
    assert!(again.is_err(), "nothing listens after drop: {again:?}");
}

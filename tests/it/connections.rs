//! The connection layer through the real binary (issue #16, items 2 and 10;
//! `docs/protocol.md#210-connection-deadlines`): connections that say nothing, trickle their head,
//! idle, or trickle their body do not keep their slot; bodies being received are bounded together;
//! and every answer, hyper's own included, is JSON `{error, code}`.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

const TOKEN: &str = "connections-test-token";

/// `GET path` with the token, on a fresh connection that asks to be closed.
fn authed_get(port: u16, path: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    )
}

/// Reads what the daemon sends until it closes the connection (bounded); the bytes.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout(WAIT, stream.read(&mut chunk)).await {
            Ok(Ok(0) | Err(_)) => return out,
            Ok(Ok(n)) => out.extend_from_slice(&chunk[..n]),
            Err(_) => panic!("the daemon did not close the connection within {WAIT:?}"),
        }
    }
}

/// Asks (bounded) until an authenticated request is answered 200: a slot may need a moment to be
/// given back after its connection closed. Panics if it never is.
async fn served_again(port: u16) -> RawReply {
    let deadline = Instant::now() + WAIT;
    loop {
        let reply = raw_request(port, authed_get(port, "/capabilities").as_bytes()).await;
        if reply.status == 200 {
            return reply;
        }
        assert_eq!(reply.body["code"], "connection_limit_exceeded", "{} {}", reply.head, reply.text);
        assert!(Instant::now() < deadline, "no slot came back within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await; // waiting for the daemon to see a close
    }
}

/// Opens `n` connections and checks the next one is refused at accept: every slot is taken.
async fn take_every_slot(d: &Daemon, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(TcpStream::connect(("127.0.0.1", d.port)).await.expect("connect"));
    }
    let refused = raw_request(d.port, authed_get(d.port, "/capabilities").as_bytes()).await;
    assert_eq!(
        refused.body["code"], "connection_limit_exceeded",
        "the slots are all taken: {}",
        refused.head
    );
    held
}

#[tokio::test]
async fn silent_connections_lose_their_slot_at_the_header_timeout() {
    let d = Daemon::start(&["--token", TOKEN, "--max-connections", "8", "--header-timeout-ms", "1000"]);
    let mut silent = take_every_slot(&d, 8).await;
    for stream in &mut silent {
        let answer = parse_reply(&read_until_closed(stream).await);
        assert_eq!(answer.status, 408, "{}", answer.head);
        assert_eq!(
            answer.body,
            json!({"error": "The request head did not arrive in time", "code": "header_timeout"})
        );
    }
    let reply = served_again(d.port).await;
    assert_eq!(reply.body["daemon"]["name"], "mediatord");
}

#[tokio::test]
async fn trickling_heads_lose_their_slot_at_the_header_timeout() {
    let d = Daemon::start(&["--token", TOKEN, "--max-connections", "8", "--header-timeout-ms", "1000"]);
    let held = take_every_slot(&d, 8).await;
    // Slowloris: a head that never ends, one byte at a time, until the daemon hangs up.
    let tricklers: Vec<_> = held
        .into_iter()
        .map(|mut stream| {
            tokio::spawn(async move {
                let mut sent = stream.write_all(b"GET /capabilities HTTP/1.1\r\nX-Slow: ").await.is_ok();
                let mut ticks = tokio::time::interval(Duration::from_millis(100));
                let deadline = Instant::now() + WAIT;
                while sent && Instant::now() < deadline {
                    ticks.tick().await;
                    sent = stream.write_all(b"a").await.is_ok();
                }
                assert!(!sent, "the daemon kept a trickling head open for {WAIT:?}");
            })
        })
        .collect();
    for trickler in tricklers {
        trickler.await.expect("trickler");
    }
    served_again(d.port).await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let d = Daemon::start(&["--idle-timeout-ms", "500", "--header-timeout-ms", "60000"]);
    let mut stream = TcpStream::connect(("127.0.0.1", d.port)).await.expect("connect");
    let request = format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", d.port);
    stream.write_all(request.as_bytes()).await.expect("write");
    // The whole answer (`{"status":"ok"}`, 15 bytes after the head), however it is split.
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    while !answer.ends_with(b"{\"status\":\"ok\"}") {
        let n =
            tokio::time::timeout(WAIT, stream.read(&mut chunk)).await.expect("answer in time").expect("read");
        assert!(n > 0, "closed before the answer: {:?}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&chunk[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200"));
    // Then nothing: the daemon hangs up quietly (the header timeout is a minute away).
    assert!(read_until_closed(&mut stream).await.is_empty(), "an idle close says nothing");
}

#[tokio::test]
async fn a_request_in_progress_is_not_cut_by_the_connection_deadlines() {
    let d = Daemon::start(&["--idle-timeout-ms", "300", "--header-timeout-ms", "300"]);
    let sid = d.create(None, json!({})).await["sessionId"].as_str().expect("sessionId").to_owned();
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    // A blocking prompt and an event stream both outlive both deadlines several times over.
    let reply = d.prompt(&sid, None, "sleep 1500").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let events = sse.until_type("turn_complete").await;
    assert_eq!(chunk_text(&events), "slept 1500");
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_408_and_the_connection_closes() {
    let d = Daemon::start(&["--body-timeout-ms", "500"]);
    let mut stream = TcpStream::connect(("127.0.0.1", d.port)).await.expect("connect");
    let head = format!(
        "POST /session HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"cwd\"",
        d.port
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let answer = parse_reply(&read_until_closed(&mut stream).await);
    assert_eq!(answer.status, 408, "{}", answer.head);
    assert_eq!(
        answer.body,
        json!({"error": "The request body did not arrive in time", "code": "body_timeout"})
    );
    assert_eq!(answer.header("connection"), Some("close"));
}

/// Bodies being received share one budget (64 MiB): 50 connections each sending all but the last
/// byte of a 10 MiB body used to pin 500 MB. Past the budget a body is refused `503`, and closing
/// the held ones gives the budget back.
#[tokio::test]
async fn bodies_being_received_are_bounded_together() {
    let d = Daemon::start(&["--session-scope", "thread"]);
    let port = d.port;
    let body_len = 10 * 1024 * 1024;
    let head = format!(
        "POST /session HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: {body_len}\r\n\r\n",
        d.port
    );
    let mut almost = b"{\"padding\":\"".to_vec();
    almost.resize(body_len - 1, b'x');
    let almost = std::sync::Arc::new(almost);
    // Ten bodies of 10 MiB less one byte (none of them ever complete) sent at once: the budget
    // (64 MiB) holds six whole, so at least four are refused, whichever order the daemon reads
    // them in. A held body is never answered; each refusal is awaited, never raced against a write.
    let (answers, mut answered) = tokio::sync::mpsc::channel(10);
    let senders: Vec<_> = (0..10)
        .map(|_| {
            let (head, almost, answers) = (head.clone(), almost.clone(), answers.clone());
            tokio::spawn(async move {
                let stream = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
                let (mut reader, mut writer) = stream.into_split();
                // The daemon stops reading a refused body after its answer: the write may fail,
                // and the half is kept until the task ends so a held body stays open.
                let writing = tokio::spawn(async move {
                    if writer.write_all(head.as_bytes()).await.is_ok() {
                        let _ = writer.write_all(&almost).await;
                    }
                    writer
                });
                let reply = read_one_reply(&mut reader).await;
                let _ = answers.send(reply).await;
                let _ = writing.await;
            })
        })
        .collect();
    let deadline = Instant::now() + WAIT;
    let mut refusals = Vec::new();
    while refusals.len() < 4 {
        match tokio::time::timeout_at(deadline.into(), answered.recv()).await {
            Ok(Some(reply)) => refusals.push(reply),
            _ => panic!(
                "{} of 10 bodies of 10 MiB were refused: more than 6 were held at once",
                refusals.len()
            ),
        }
    }
    for refused in &refusals {
        assert_eq!(refused.status, 503, "{}", refused.head);
        assert_eq!(refused.body["code"], "body_budget_exceeded", "{}", refused.text);
        assert_eq!(refused.header("retry-after"), Some("5"));
    }
    for sender in &senders {
        sender.abort();
    }
    // The budget comes back once the held bodies are gone: a whole body goes through again.
    let mut whole = format!(
        "POST /session HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {body_len}\r\nConnection: close\r\n\r\n",
        d.port
    )
    .into_bytes();
    whole.extend_from_slice(&almost[..body_len - 2]);
    whole.extend_from_slice(b"\"}");
    let deadline = Instant::now() + WAIT;
    loop {
        let reply = raw_request(d.port, &whole).await;
        if reply.status == 200 {
            break;
        }
        assert_eq!(reply.body["code"], "body_budget_exceeded", "{}", reply.head);
        assert!(Instant::now() < deadline, "the budget never came back");
        tokio::time::sleep(Duration::from_millis(50)).await; // waiting for the daemon to see the closes
    }
}

/// Reads one answer (its head and its `Content-Length` body) and returns it; a connection that
/// ends first gives what came.
async fn read_one_reply(reader: &mut (impl tokio::io::AsyncRead + Unpin)) -> RawReply {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let reply = parse_reply(&out);
        let whole = out.windows(4).any(|w| w == b"\r\n\r\n")
            && reply.header("content-length").and_then(|l| l.parse::<usize>().ok()) == Some(reply.text.len());
        if whole {
            return reply;
        }
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => return reply,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A perimeter refusal closes its connection: a client without the token cannot idle in a slot.
#[tokio::test]
async fn a_refused_request_closes_its_connection() {
    let d = Daemon::start(&["--token", TOKEN]);
    let mut stream = TcpStream::connect(("127.0.0.1", d.port)).await.expect("connect");
    let request = format!("GET /capabilities HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", d.port);
    stream.write_all(request.as_bytes()).await.expect("write");
    let answer = parse_reply(&read_until_closed(&mut stream).await);
    assert_eq!((answer.status, &answer.body), (401, &json!({"error": "Unauthorized"})));
    assert_eq!(answer.header("connection"), Some("close"));
}

/// Issue #16, item 10: requests that never reach a handler, or that a handler's extractor refuses,
/// are answered JSON `{error, code}` like everything else.
#[tokio::test]
async fn every_answer_is_json_even_hypers_own() {
    let d = Daemon::start(&[]);
    let p = d.port;
    let host = format!("Host: 127.0.0.1:{p}\r\nConnection: close");
    let big = "a".repeat(80 * 1024);
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (format!("GET /health?deep=1&deep=2 HTTP/1.1\r\n{host}\r\n\r\n").into_bytes(), 400, "invalid_query"),
        (
            format!("GET /session/x/permissions?audit=1&audit=0 HTTP/1.1\r\n{host}\r\n\r\n").into_bytes(),
            400,
            "invalid_query",
        ),
        (format!("GET /session/%FF HTTP/1.1\r\n{host}\r\n\r\n").into_bytes(), 400, "invalid_path"),
        (
            format!("GET /workspace/%C3%28/sessions HTTP/1.1\r\n{host}\r\n\r\n").into_bytes(),
            400,
            "invalid_path",
        ),
        (format!("POST /session/%FF/cancel HTTP/1.1\r\n{host}\r\n\r\n").into_bytes(), 400, "invalid_path"),
        (b"GARBAGE\r\n\r\n".to_vec(), 400, "bad_request"),
        (format!("GET /health HTTP/1.1\r\n{host}\r\nBad Header: x\r\n\r\n").into_bytes(), 400, "bad_request"),
        (format!("GET /health HTTP/9.9\r\n{host}\r\n\r\n").into_bytes(), 400, "bad_request"),
        (
            format!("GET /health HTTP/1.1\r\n{host}\r\nX-Big: {big}\r\n\r\n").into_bytes(),
            431,
            "headers_too_large",
        ),
    ];
    for (request, status, code) in cases {
        let reply = raw_request(p, &request).await;
        let shown = String::from_utf8_lossy(&request[..request.len().min(60)]).into_owned();
        assert_eq!(
            (reply.status, reply.body["code"].as_str()),
            (status, Some(code)),
            "{shown:?}: {} {}",
            reply.head,
            reply.text
        );
        assert!(reply.body["error"].is_string(), "{shown:?}: {}", reply.text);
        assert_eq!(reply.header("content-type"), Some("application/json"), "{shown:?}");
    }
    // The daemon is unharmed.
    assert_eq!(d.get("/health").await.ok(), json!({"status": "ok"}));
}

/// The flags are refused at boot when zero (no deadline is no defence).
#[test]
fn zero_connection_timeouts_are_refused() {
    for flag in ["--header-timeout-ms", "--idle-timeout-ms", "--body-timeout-ms"] {
        let (status, stderr) = serve_refusal(&[flag, "0", "--port", "0"], &[]);
        assert_eq!(status.code(), Some(2), "{flag} 0: {stderr}");
        assert!(stderr.contains(flag), "{stderr}");
    }
}

/// A keep-alive connection's next head has its own deadline, counted from its first byte
/// (`--header-timeout-ms`), not the idle wait's before it (`--idle-timeout-ms`): a head begun
/// within the idle time and finished within its own is served, not closed when the idle time runs
/// out (the read timer is moved to the head's deadline, not kept at the wait's).
#[tokio::test]
async fn a_keep_alive_connections_next_head_has_its_own_deadline() {
    let d = Daemon::start(&["--token", TOKEN, "--idle-timeout-ms", "2000", "--header-timeout-ms", "3000"]);
    let mut socket = TcpStream::connect(("127.0.0.1", d.port)).await.expect("connect");
    let keep_alive = format!(
        "GET /health HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n",
        d.port
    );
    socket.write_all(keep_alive.as_bytes()).await.expect("the first request");
    // The first answer, whole (its Content-Length), with the connection kept open.
    let first = tokio::time::timeout(WAIT, read_one_reply(&mut socket)).await.expect("the first answer");
    assert_eq!(first.status, 200, "{}", first.head);
    // The scenario's waits, not synchronisation: the next head starts 1 s into the idle wait
    // (whose deadline is 2 s) and ends 3 s in: past the idle deadline, within the head's (4 s).
    let request = authed_get(d.port, "/health");
    let (start, rest) = request.as_bytes().split_at(4);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    socket.write_all(start).await.expect("the next head's first bytes");
    tokio::time::sleep(Duration::from_millis(2000)).await;
    socket.write_all(rest).await.expect("the rest of the head");
    let answer = read_until_closed(&mut socket).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "the head was held to the idle wait's deadline: {text}");
}

/// The lingering close is for an answer given before its request's body was read (below): a
/// connection that read its whole request and asked to be closed gives its slot back at once,
/// while its client still holds its own side open, not after the linger's 10 s (`LINGER_TIME`:
/// a lingering connection keeps reading, and keeps its slot, until the client closes).
#[tokio::test]
async fn a_connection_that_read_its_whole_request_gives_its_slot_back_without_lingering() {
    let d = Daemon::start(&["--token", TOKEN, "--max-connections", "8"]);
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut socket = TcpStream::connect(("127.0.0.1", d.port)).await.expect("connect");
        socket.write_all(authed_get(d.port, "/health").as_bytes()).await.expect("write the request");
        let answer = read_until_closed(&mut socket).await;
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 200"), "a slot was still held by a closed connection: {text}");
        held.push(socket);
    }
    // Every one of the eight closed: a ninth is served within half the linger's time.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = raw_request(d.port, authed_get(d.port, "/capabilities").as_bytes()).await;
        if reply.status == 200 {
            break;
        }
        assert_eq!(reply.body["code"], "connection_limit_exceeded", "{} {}", reply.head, reply.text);
        assert!(Instant::now() < deadline, "the closed connections kept their slots: the daemon lingered");
        tokio::time::sleep(Duration::from_millis(20)).await; // waiting for the daemon to see a close
    }
    drop(held);
}

/// Issue #27: a client that sends its whole body before it reads (Python's `http.client`, and
/// `requests` on top of it) reads the refusal of an oversized body, and of a body sent without the
/// token, instead of a broken pipe: the daemon lingers, reading and discarding what is still
/// coming, before it closes.
#[tokio::test]
async fn a_client_that_sends_its_whole_body_first_reads_the_refusal() {
    let d = Daemon::start(&["--token", TOKEN]);
    let script = r#"
import http.client, sys
port, token = int(sys.argv[1]), sys.argv[2]
for size, auth in [(11 * 1024 * 1024, True), (30 * 1024 * 1024, True), (2 * 1024 * 1024, False)]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = "Bearer " + token
    try:
        c.request("POST", "/session", body=b"x" * size, headers=headers)
        r = c.getresponse()
        print(r.status, r.read().decode())
    except Exception as e:
        print("error", type(e).__name__, e)
    c.close()
"#;
    let run = tokio::process::Command::new("python3")
        .args(["-c", script, &d.port.to_string(), TOKEN])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(WAIT, run).await.expect("python ends in time").expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            r#"413 {"code":"body_too_large","error":"Request body too large"}"#,
            r#"413 {"code":"body_too_large","error":"Request body too large"}"#,
            r#"401 {"error":"Unauthorized"}"#,
        ],
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

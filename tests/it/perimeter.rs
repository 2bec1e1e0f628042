//! The HTTP perimeter and the boot checks (`docs/protocol.md#1-command-line`,
//! `docs/protocol.md#2-http-perimeter`, health and capabilities from `docs/protocol.md#3-routes`,
//! `docs/protocol.md#11-capabilities`), through the real binary: refusals at boot, bearer, Host,
//! Origin/CORS, body limits, route errors, health, capabilities, the connection cap and the config
//! file.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

/// 10 MiB, the body cap of `docs/protocol.md#2-http-perimeter`.
const BODY_CAP: usize = 10 * 1024 * 1024;

/// Asserts a boot refusal: exit status 2 and exactly one line on stderr that contains `why`.
fn assert_refused(args: &[&str], why: &str) {
    let (status, stderr) = serve_refusal(args, &[]);
    assert_eq!(status.code(), Some(2), "mediatord serve {args:?} should exit 2; stderr:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "mediatord serve {args:?} should print one line, got:\n{stderr}");
    assert!(
        lines[0].contains(why),
        "mediatord serve {args:?}: the refusal {:?} should mention {why:?}",
        lines[0]
    );
}

/// Writes a config file into a fresh directory and returns both (the directory keeps it alive).
fn config_file(contents: &Value) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mediatord.json");
    std::fs::write(&path, contents.to_string()).expect("write config");
    let path = path.to_str().expect("utf-8 path").to_owned();
    (dir, path)
}

async fn get(d: &Daemon, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = http().get(d.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("GET")
}

async fn json_of(res: reqwest::Response) -> (StatusCode, HeaderMap, Value) {
    let status = res.status();
    let headers = res.headers().clone();
    let text = res.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("body {text:?} is not JSON: {e}"));
    (status, headers, body)
}

async fn capabilities(d: &Daemon, headers: &[(&str, &str)]) -> Value {
    let (status, _, body) = json_of(get(d, "/capabilities", headers).await).await;
    assert_eq!(status, 200, "capabilities: {body}");
    body
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().expect("ascii header"))
}

// ---------------------------------------------------------------------------------------------
// Boot refusals (docs/protocol.md#1-command-line)

#[test]
fn non_loopback_hostname_without_token_is_refused() {
    assert_refused(&["--hostname", "0.0.0.0", "--port", "0"], "0.0.0.0");
}

#[test]
fn require_auth_without_token_is_refused() {
    assert_refused(&["--require-auth", "--port", "0"], "--require-auth");
}

#[test]
fn allow_any_origin_without_token_is_refused() {
    assert_refused(&["--allow-origin", "*", "--port", "0"], "--allow-origin '*'");
}

#[test]
fn malformed_origins_are_refused() {
    for origin in ["localhost:3000", "http://x/path", "null", "ftp://example.com"] {
        assert_refused(&["--allow-origin", origin, "--port", "0"], origin);
    }
}

/// Finding c: without a token, an allowed origin's pages get the whole API, so an origin that is not
/// loopback (a page served from elsewhere) is refused at boot, as qwen serve does; with a token it is
/// fine, and loopback origins are fine either way.
#[tokio::test]
async fn a_non_loopback_origin_without_a_token_is_refused_at_boot() {
    for origin in ["https://app.example.com", "http://10.0.0.5:3000", "http://[fe80::1]:8080"] {
        assert_refused(
            &["--allow-origin", "http://localhost:3000", "--allow-origin", origin, "--port", "0"],
            origin,
        );
    }
    let with_token = Daemon::start(&["--token", "secret", "--allow-origin", "https://app.example.com"]);
    let caps = capabilities(&with_token, &[("Authorization", "Bearer secret")]).await;
    assert!(features(&caps).contains(&"allow_origin"));
    for loopback in ["http://localhost:3000", "http://127.0.0.1:5173", "http://[::1]:8080"] {
        let d = Daemon::start(&["--allow-origin", loopback]);
        assert_eq!(d.get("/health").await.status, 200, "{loopback}");
    }
}

#[test]
fn unknown_permission_policy_is_refused() {
    assert_refused(&["--permission-policy", "whoever-shouts", "--port", "0"], "whoever-shouts");
}

#[test]
fn quorum_that_is_not_a_positive_integer_is_refused() {
    for quorum in ["0", "abc", "-1"] {
        assert_refused(
            &["--permission-policy", "consensus", "--consensus-quorum", quorum, "--port", "0"],
            "quorum",
        );
    }
}

#[test]
fn a_missing_relative_workspace_is_refused_naming_where_it_was_looked_for() {
    // Relative paths are taken from the current directory (the test's, as `serve_refusal` runs there).
    let resolved = std::env::current_dir().expect("cwd").join("relative/dir");
    assert_refused(&["--workspace", "relative/dir", "--port", "0"], &resolved.display().to_string());
}

#[test]
fn missing_workspace_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("not-there");
    let missing = missing.to_str().expect("utf-8");
    assert_refused(&["--workspace", missing, "--port", "0"], missing);
}

#[test]
fn file_as_workspace_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").expect("write");
    let file = file.to_str().expect("utf-8");
    assert_refused(&["--workspace", file, "--port", "0"], "not a directory");
}

#[test]
fn empty_agent_is_refused() {
    assert_refused(&["--agent", "", "--port", "0"], "--agent");
    assert_refused(&["--agent", "   ", "--port", "0"], "--agent");
}

#[test]
fn bad_config_file_value_is_refused() {
    let (_dir, path) = config_file(&json!({"serve": {"maxSessions": "x"}}));
    assert_refused(&["--config", &path, "--port", "0"], "maxSessions");
}

#[test]
fn config_file_that_is_not_json_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("broken.json");
    std::fs::write(&path, "{\"serve\": {").expect("write");
    assert_refused(&["--config", path.to_str().expect("utf-8"), "--port", "0"], "not valid JSON");
}

#[tokio::test]
async fn quorum_without_consensus_policy_is_a_warning_and_the_daemon_starts() {
    let d = Daemon::start(&["--consensus-quorum", "2"]);
    wait_stderr(&d, "consensus quorum is set but the permission policy is first-responder").await;
    let caps = capabilities(&d, &[]).await;
    assert_eq!(caps["policy"]["permission"], "first-responder");
}

// ---------------------------------------------------------------------------------------------
// Bearer (docs/protocol.md#2-http-perimeter)

#[tokio::test]
async fn every_bearer_failure_gets_the_identical_401() {
    let d = Daemon::start(&["--token", "secret"]);
    let mut answers = Vec::new();
    for auth in
        [None, Some("Basic c2VjcmV0"), Some("Bearer wrong"), Some("Bearer "), Some("Bearer"), Some("secret")]
    {
        let mut req = http().get(d.url("/capabilities"));
        if let Some(auth) = auth {
            req = req.header(header::AUTHORIZATION, auth);
        }
        let res = req.send().await.expect("request");
        let status = res.status();
        let mut headers: Vec<(String, String)> = res
            .headers()
            .iter()
            .filter(|(name, _)| *name != header::DATE)
            .map(|(n, v)| (n.to_string(), v.to_str().expect("ascii").to_owned()))
            .collect();
        headers.sort();
        let body = res.bytes().await.expect("body");
        assert_eq!(status, 401, "Authorization {auth:?}");
        assert_eq!(&body[..], br#"{"error":"Unauthorized"}"#, "Authorization {auth:?}");
        assert!(
            headers.contains(&("www-authenticate".into(), "Bearer".into())),
            "Authorization {auth:?}: {headers:?}"
        );
        answers.push((auth, status, headers, body));
    }
    let (_, status0, headers0, body0) = &answers[0];
    for (auth, status, headers, body) in &answers[1..] {
        assert_eq!((status, headers, body), (status0, headers0, body0), "Authorization {auth:?} differs");
    }
}

#[tokio::test]
async fn the_right_token_passes_with_any_scheme_case() {
    let d = Daemon::start(&["--token", "secret"]);
    for auth in ["Bearer secret", "bearer secret", "BEARER secret"] {
        let res = get(&d, "/capabilities", &[("Authorization", auth)]).await;
        assert_eq!(res.status(), 200, "Authorization {auth:?}");
    }
}

#[tokio::test]
async fn the_token_is_trimmed() {
    let d = Daemon::start(&["--token", "  secret \t"]);
    assert_eq!(get(&d, "/capabilities", &[("Authorization", "Bearer secret")]).await.status(), 200);
    assert_eq!(get(&d, "/capabilities", &[]).await.status(), 401);
}

#[tokio::test]
async fn token_from_mediatord_token_env() {
    let d = Daemon::start_env(&[], &[("MEDIATORD_TOKEN", "from-env")]);
    assert_eq!(get(&d, "/capabilities", &[]).await.status(), 401);
    assert_eq!(get(&d, "/capabilities", &[("Authorization", "Bearer from-env")]).await.status(), 200);
}

#[tokio::test]
async fn token_from_qwen_server_token_env() {
    let d = Daemon::start_env(&[], &[("QWEN_SERVER_TOKEN", "qwen-env")]);
    assert_eq!(get(&d, "/capabilities", &[]).await.status(), 401);
    assert_eq!(get(&d, "/capabilities", &[("Authorization", "Bearer qwen-env")]).await.status(), 200);
}

#[tokio::test]
async fn mediatord_token_wins_over_qwen_server_token() {
    let d = Daemon::start_env(&[], &[("MEDIATORD_TOKEN", "first"), ("QWEN_SERVER_TOKEN", "second")]);
    assert_eq!(get(&d, "/capabilities", &[("Authorization", "Bearer first")]).await.status(), 200);
    assert_eq!(get(&d, "/capabilities", &[("Authorization", "Bearer second")]).await.status(), 401);
}

#[tokio::test]
async fn a_non_loopback_bind_with_a_token_starts() {
    // The refusal above is about the missing token, not the address: with one, the bind is fine.
    let d = Daemon::start(&["--hostname", "0.0.0.0", "--token", "secret"]);
    assert_eq!(get(&d, "/capabilities", &[("Authorization", "Bearer secret")]).await.status(), 200);
}

// ---------------------------------------------------------------------------------------------
// Host (docs/protocol.md#2-http-perimeter)

#[tokio::test]
async fn foreign_host_headers_are_refused() {
    let d = Daemon::start(&[]);
    let wrong_port = if d.port == 1 { 2 } else { d.port - 1 };
    for host in [
        format!("evil.example:{}", d.port),
        "evil.example".to_owned(),
        format!("localhost:{wrong_port}"),
        format!("127.0.0.1:{wrong_port}"),
        "localhost".to_owned(),
        format!("127.0.0.2:{}", d.port),
    ] {
        let (status, _, body) = json_of(get(&d, "/health", &[("Host", &host)]).await).await;
        assert_eq!(status, 403, "Host {host}");
        assert_eq!(body, json!({"error": "Invalid Host header", "code": "host_not_allowed"}), "Host {host}");
    }
}

#[tokio::test]
async fn loopback_host_headers_pass() {
    let d = Daemon::start(&[]);
    let p = d.port;
    for host in [
        format!("localhost:{p}"),
        format!("127.0.0.1:{p}"),
        format!("[::1]:{p}"),
        format!("LocalHost:{p}"),
        format!("host.docker.internal:{p}"),
    ] {
        let (status, _, body) = json_of(get(&d, "/health", &[("Host", &host)]).await).await;
        assert_eq!(status, 200, "Host {host}: {body}");
        assert_eq!(body, json!({"status": "ok"}));
    }
}

/// Issue #16, item 11: more than one `Host` is a 400 (RFC 9112 §3.2), even when each would pass.
#[tokio::test]
async fn a_duplicate_host_is_400_invalid_host() {
    let d = Daemon::start(&[]);
    let p = d.port;
    for hosts in [
        [format!("127.0.0.1:{p}"), format!("127.0.0.1:{p}")],
        [format!("127.0.0.1:{p}"), "evil.example".to_owned()],
        ["evil.example".to_owned(), format!("localhost:{p}")],
    ] {
        let request = format!(
            "GET /health HTTP/1.1\r\nHost: {}\r\nHost: {}\r\nConnection: close\r\n\r\n",
            hosts[0], hosts[1]
        );
        let reply = raw_request(p, request.as_bytes()).await;
        assert_eq!(reply.status, 400, "{hosts:?}: {} {}", reply.head, reply.text);
        assert_eq!(
            reply.body,
            json!({"error": "A request needs exactly one Host header", "code": "invalid_host"}),
            "{hosts:?}"
        );
    }
}

/// Issue #16, item 11: a target in absolute form names the authority the request is for (RFC 9112
/// §3.2.2), so it is checked like `Host`: a foreign one is refused even behind a good `Host`.
#[tokio::test]
async fn an_absolute_form_target_is_checked_like_host() {
    let d = Daemon::start(&[]);
    let p = d.port;
    let request = |authority: &str| {
        format!("GET http://{authority}/health HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nConnection: close\r\n\r\n")
    };
    for foreign in [format!("evil.example:{p}"), "evil.example".to_owned(), format!("127.0.0.1:{}", p ^ 1)] {
        let reply = raw_request(p, request(&foreign).as_bytes()).await;
        assert_eq!((reply.status, reply.body["code"].as_str()), (403, Some("host_not_allowed")), "{foreign}");
    }
    let reply = raw_request(p, request(&format!("localhost:{p}")).as_bytes()).await;
    assert_eq!((reply.status, &reply.body), (200, &json!({"status": "ok"})));
}

#[tokio::test]
async fn host_is_checked_before_the_bearer() {
    let d = Daemon::start(&["--token", "secret"]);
    let (status, _, body) =
        json_of(get(&d, "/capabilities", &[("Host", &format!("evil.example:{}", d.port))]).await).await;
    assert_eq!(status, 403);
    assert_eq!(body["code"], "host_not_allowed");
}

// ---------------------------------------------------------------------------------------------
// Origin and CORS (docs/protocol.md#2-http-perimeter)

#[tokio::test]
async fn any_origin_is_refused_unless_allowed() {
    let d = Daemon::start(&[]);
    for origin in ["http://localhost:3000", "https://evil.example", "null"] {
        let (status, headers, body) = json_of(get(&d, "/health", &[("Origin", origin)]).await).await;
        assert_eq!(status, 403, "Origin {origin}");
        assert_eq!(body["code"], "origin_denied", "Origin {origin}");
        let error = body["error"].as_str().expect("error text");
        assert!(error.starts_with("Request denied by CORS policy: "), "Origin {origin}: {error}");
        assert_eq!(header_str(&headers, "vary"), Some("Origin"), "Origin {origin}");
        assert!(headers.get("access-control-allow-origin").is_none(), "Origin {origin}");
    }
}

/// Issue #16, item 11: two `Origin` headers are refused, even when both are allowed.
#[tokio::test]
async fn a_duplicate_origin_is_refused() {
    let d = Daemon::start(&[
        "--allow-origin",
        "http://localhost:3000",
        "--allow-origin",
        "http://127.0.0.1:5173",
    ]);
    let p = d.port;
    let request = format!(
        "GET /health HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nOrigin: http://localhost:3000\r\n\
         Origin: http://127.0.0.1:5173\r\nConnection: close\r\n\r\n"
    );
    let reply = raw_request(p, request.as_bytes()).await;
    assert_eq!((reply.status, reply.body["code"].as_str()), (403, Some("origin_denied")), "{}", reply.head);
    assert_eq!(reply.header("access-control-allow-origin"), None);
}

#[tokio::test]
async fn an_allowed_origin_is_echoed() {
    let d = Daemon::start(&["--allow-origin", "http://localhost:3000"]);
    let (status, headers, body) =
        json_of(get(&d, "/health", &[("Origin", "http://localhost:3000")]).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(header_str(&headers, "access-control-allow-origin"), Some("http://localhost:3000"));
    assert_eq!(
        header_str(&headers, "access-control-expose-headers"),
        Some("Retry-After, Acp-Connection-Id, Acp-Protocol-Version")
    );
    assert_eq!(header_str(&headers, "vary"), Some("Origin"));
}

#[tokio::test]
async fn an_origin_not_on_the_list_is_refused() {
    let d = Daemon::start(&["--allow-origin", "http://localhost:3000"]);
    for origin in ["http://localhost:3001", "https://localhost:3000", "http://localhost:3000/"] {
        let (status, headers, body) = json_of(get(&d, "/health", &[("Origin", origin)]).await).await;
        assert_eq!(status, 403, "Origin {origin}");
        assert_eq!(body["code"], "origin_denied", "Origin {origin}");
        assert_eq!(header_str(&headers, "vary"), Some("Origin"), "Origin {origin}");
    }
}

#[tokio::test]
async fn origin_null_is_refused_even_with_an_allow_list() {
    let d = Daemon::start(&[
        "--allow-origin",
        "http://localhost:3000",
        "--allow-origin",
        "http://127.0.0.1:5173",
    ]);
    let (status, headers, body) = json_of(get(&d, "/health", &[("Origin", "null")]).await).await;
    assert_eq!(status, 403);
    assert_eq!(
        body,
        json!({
            "error": "Request denied by CORS policy: Origin null (a local file or a sandboxed page) is never allowed",
            "code": "origin_denied"
        })
    );
    assert_eq!(header_str(&headers, "vary"), Some("Origin"));
}

#[tokio::test]
async fn origin_null_is_refused_even_with_any_origin_allowed() {
    let d = Daemon::start(&["--token", "secret", "--allow-origin", "*"]);
    let res = get(&d, "/capabilities", &[("Origin", "null"), ("Authorization", "Bearer secret")]).await;
    let (status, _, body) = json_of(res).await;
    assert_eq!(status, 403);
    assert_eq!(body["code"], "origin_denied");
    let res =
        get(&d, "/capabilities", &[("Origin", "https://a.example"), ("Authorization", "Bearer secret")])
            .await;
    assert_eq!(res.status(), 200);
    assert_eq!(header_str(res.headers(), "access-control-allow-origin"), Some("https://a.example"));
}

#[tokio::test]
async fn a_preflight_from_an_allowed_origin_gets_204_with_the_cors_headers() {
    // With a token: browsers send preflights without credentials, so the preflight must not need it.
    let d = Daemon::start(&["--token", "secret", "--allow-origin", "http://localhost:3000"]);
    let res = http()
        .request(reqwest::Method::OPTIONS, d.url("/session"))
        .header("Origin", "http://localhost:3000")
        .header("Access-Control-Request-Method", "POST")
        .header("Access-Control-Request-Headers", "authorization, content-type")
        .send()
        .await
        .expect("preflight");
    assert_eq!(res.status(), 204);
    let h = res.headers();
    assert_eq!(header_str(h, "access-control-allow-origin"), Some("http://localhost:3000"));
    assert_eq!(header_str(h, "access-control-allow-methods"), Some("GET, POST, PATCH, DELETE, OPTIONS"));
    assert_eq!(
        header_str(h, "access-control-allow-headers"),
        Some(
            "Authorization, Content-Type, X-Qwen-Client-Id, X-Client-Id, Last-Event-ID, Prefer, Acp-Connection-Id, Acp-Session-Id, Acp-Protocol-Version"
        )
    );
    assert_eq!(
        header_str(h, "access-control-expose-headers"),
        Some("Retry-After, Acp-Connection-Id, Acp-Protocol-Version")
    );
    assert_eq!(header_str(h, "vary"), Some("Origin"));
}

#[tokio::test]
async fn a_preflight_from_a_foreign_origin_is_refused() {
    let d = Daemon::start(&["--allow-origin", "http://localhost:3000"]);
    let res = http()
        .request(reqwest::Method::OPTIONS, d.url("/session"))
        .header("Origin", "http://evil.example")
        .header("Access-Control-Request-Method", "POST")
        .send()
        .await
        .expect("preflight");
    let (status, headers, body) = json_of(res).await;
    assert_eq!(status, 403);
    assert_eq!(body["code"], "origin_denied");
    assert!(headers.get("access-control-allow-methods").is_none());
}

// ---------------------------------------------------------------------------------------------
// Bodies and route errors (docs/protocol.md#2-http-perimeter)

/// Answered from the declared length, before any of the body is read: what a client sees whatever it
/// does next. (Sending the whole body first made this racy: the daemon answers and closes while the
/// client is still writing, and the client may see its write fail before it reads the answer.)
#[tokio::test]
async fn a_body_one_byte_over_10_mib_is_413() {
    let d = Daemon::start(&[]);
    let head = format!(
        "POST /session HTTP/1.1\r\nHost: 127.0.0.1:{}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{{",
        d.port,
        BODY_CAP + 1
    );
    let reply = raw_request(d.port, head.as_bytes()).await;
    assert_eq!(reply.status, 413, "{reply:?}");
    assert_eq!(reply.body, json!({"error": "Request body too large", "code": "body_too_large"}));
}

#[tokio::test]
async fn a_body_of_exactly_10_mib_is_accepted() {
    let d = Daemon::start(&[]);
    // Valid JSON with an unknown (ignored) field padding it to exactly the cap.
    let head = br#"{"padding":""#;
    let tail = br#""}"#;
    let mut body = Vec::with_capacity(BODY_CAP);
    body.extend_from_slice(head);
    body.resize(BODY_CAP - tail.len(), b'x');
    body.extend_from_slice(tail);
    assert_eq!(body.len(), BODY_CAP);
    let res = http()
        .post(d.url("/session"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .expect("POST");
    let (status, _, body) = json_of(res).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["sessionId"].is_string(), "{body}");
}

#[tokio::test]
async fn unparsable_json_is_400() {
    let d = Daemon::start(&[]);
    for bad in ["{not json", "[1, 2", "\"unterminated"] {
        let res = http()
            .post(d.url("/session"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(bad)
            .send()
            .await
            .expect("POST");
        let (status, _, body) = json_of(res).await;
        assert_eq!(status, 400, "body {bad:?}");
        assert_eq!(body, json!({"error": "Invalid JSON in request body", "code": "invalid_json"}));
    }
}

/// Issue #16, item 12: a body that is JSON but not an object (`[]`, `null`, `123`, `"x"`) is a 400
/// with a JSON `{error, code}` on every route that reads a body, never read as `{}`.
#[tokio::test]
async fn non_object_bodies_are_400_on_every_json_route() {
    let d = Daemon::start(&["--session-scope", "thread"]);
    let sid = d.join("alice").await;
    let routes = [
        ("/session".to_owned(), "invalid_json"),
        (format!("/session/{sid}/prompt"), "invalid_prompt"),
        (format!("/session/{sid}/model"), "invalid_model_id"),
        (format!("/session/{sid}/permission/some-request"), "invalid_vote"),
        ("/permission/some-request".to_owned(), "invalid_vote"),
        (format!("/session/{sid}/permission-rules"), "invalid_rule"),
    ];
    for (path, code) in &routes {
        for bad in ["[]", "null", "123", "\"x\"", "true"] {
            let res = http()
                .post(d.url(path))
                .header("X-Qwen-Client-Id", "alice")
                .header(header::CONTENT_TYPE, "application/json")
                .body(bad)
                .send()
                .await
                .expect("POST");
            let (status, _, body) = json_of(res).await;
            assert_eq!(
                (status.as_u16(), body["code"].as_str()),
                (400, Some(*code)),
                "POST {path} {bad}: {body}"
            );
            assert!(body["error"].is_string(), "POST {path} {bad}: {body}");
        }
    }
    // Nothing was created by the refused creates: the one session is still alone.
    let sessions = d.get(&format!("/workspace/{}/sessions", d.workspace.display())).await.ok();
    assert_eq!(sessions["sessions"].as_array().map(Vec::len), Some(1), "{sessions}");
}

#[tokio::test]
async fn an_unknown_route_is_404() {
    let d = Daemon::start(&[]);
    for path in ["/nope", "/session/abc/nope", "/health/extra", "/v2/capabilities"] {
        let (status, _, body) = json_of(get(&d, path, &[]).await).await;
        assert_eq!(status, 404, "GET {path}");
        assert_eq!(body, json!({"error": "Not found", "code": "route_not_found"}), "GET {path}");
    }
}

#[tokio::test]
async fn a_wrong_method_is_405_json() {
    let d = Daemon::start(&[]);
    for (method, path) in [(reqwest::Method::DELETE, "/health"), (reqwest::Method::POST, "/capabilities")] {
        let res = http().request(method.clone(), d.url(path)).send().await.expect("request");
        let (status, headers, body) = json_of(res).await;
        assert_eq!(status, 405, "{method} {path}");
        assert_eq!(header_str(&headers, "content-type"), Some("application/json"));
        assert_eq!(body["code"], "method_not_allowed", "{method} {path}: {body}");
        assert!(body["error"].is_string(), "{body}");
    }
}

// ---------------------------------------------------------------------------------------------
// Health (docs/protocol.md#3-routes)

#[tokio::test]
async fn health_needs_no_token_on_loopback() {
    let d = Daemon::start(&["--token", "secret"]);
    let (status, _, body) = json_of(get(&d, "/health", &[]).await).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"status": "ok"}));
    // Every other route still needs it.
    assert_eq!(get(&d, "/capabilities", &[]).await.status(), 401);
}

#[tokio::test]
async fn health_needs_the_token_with_require_auth() {
    let d = Daemon::start(&["--token", "secret", "--require-auth"]);
    let res = get(&d, "/health", &[]).await;
    assert_eq!(res.status(), 401);
    assert_eq!(header_str(res.headers(), "www-authenticate"), Some("Bearer"));
    let (status, _, body) = json_of(get(&d, "/health", &[("Authorization", "Bearer secret")]).await).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"status": "ok"}));
}

#[tokio::test]
async fn deep_health_has_zero_counts_on_an_idle_daemon() {
    let d = Daemon::start(&[]);
    let (status, _, body) = json_of(get(&d, "/health?deep=1", &[]).await).await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "ok");
    for field in ["sessions", "workspaces", "agents", "pendingPermissions", "activePrompts", "subscribers"] {
        assert_eq!(body[field], 0, "{field} in {body}");
    }
    assert!(body["uptimeMs"].is_u64(), "uptimeMs in {body}");
}

// ---------------------------------------------------------------------------------------------
// Capabilities (docs/protocol.md#11-capabilities)

/// Every tag `docs/protocol.md#11-capabilities` lists as always present.
const ALWAYS_FEATURES: &[&str] = &[
    "health",
    "capabilities",
    "session_create",
    "session_scope_override",
    "session_list",
    "session_status",
    "session_close",
    "session_prompt",
    "non_blocking_prompt",
    "session_cancel",
    "session_events",
    "session_set_model",
    "agents",
    "client_identity",
    "client_heartbeat",
    "permission_vote",
    "session_permission_vote",
    "permission_mediation",
    "permission_list",
    "permission_rules",
    "acp",
];

fn features(caps: &Value) -> Vec<&str> {
    caps["features"].as_array().expect("features").iter().map(|f| f.as_str().expect("tag")).collect()
}

#[tokio::test]
async fn capabilities_envelope_matches_the_spec() {
    let d = Daemon::start(&["--enable-session-shell"]);
    let caps = capabilities(&d, &[]).await;
    let ws = d.workspace.to_string_lossy().into_owned();
    assert_eq!(caps["v"], 1);
    assert_eq!(caps["protocolVersions"], json!({"current": "v1", "supported": ["v1"]}));
    assert_eq!(caps["daemon"], json!({"name": "mediatord", "version": env!("CARGO_PKG_VERSION")}));
    assert_eq!(caps["mode"], "http-bridge");
    assert_eq!(caps["workspaceCwd"], ws.as_str());
    assert_eq!(caps["workspaces"], json!([{"cwd": ws, "primary": true}]));
    assert_eq!(caps["transports"], json!(["rest", "acp-ws", "acp-http"]));
    assert_eq!(caps["policy"]["permission"], "first-responder");
    assert_eq!(
        caps["policy"]["permissionModes"],
        json!(["first-responder", "designated", "consensus", "local-only"])
    );
    assert_eq!(
        caps["limits"],
        json!({
            "maxSessions": 32,
            "maxPendingPromptsPerSession": 5,
            "maxSubscribersPerSession": 64,
            "eventRingSize": 8000,
        })
    );
    assert_eq!(caps["agent"], json!({"name": "demo", "command": "demo"}));
    assert_eq!(caps["agents"], json!(["demo"]));

    let tags = features(&caps);
    for tag in ALWAYS_FEATURES {
        assert!(tags.contains(tag), "feature {tag} missing from {tags:?}");
    }
    // The shell was asked for but has no token, so it is not effective and not advertised.
    for conditional in ["session_shell_command", "require_auth", "allow_origin"] {
        assert!(!tags.contains(&conditional), "{conditional} advertised without being effective: {tags:?}");
    }
    let mut unique = tags.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), tags.len(), "duplicate feature tags: {tags:?}");
}

#[tokio::test]
async fn capabilities_advertise_the_conditional_features_when_effective() {
    let d = Daemon::start(&[
        "--token",
        "secret",
        "--require-auth",
        "--allow-origin",
        "http://localhost:3000",
        "--enable-session-shell",
    ]);
    let caps = capabilities(&d, &[("Authorization", "Bearer secret")]).await;
    let tags = features(&caps);
    for conditional in ["session_shell_command", "require_auth", "allow_origin"] {
        assert!(tags.contains(&conditional), "{conditional} missing from {tags:?}");
    }
    for tag in ALWAYS_FEATURES {
        assert!(tags.contains(tag), "feature {tag} missing from {tags:?}");
    }
}

#[tokio::test]
async fn capabilities_list_every_workspace_with_the_first_primary() {
    let second = tempfile::tempdir().expect("tempdir");
    let second_path = std::fs::canonicalize(second.path()).expect("canonical");
    let second_str = second_path.to_str().expect("utf-8");
    let d = Daemon::start(&["--workspace", second_str]);
    let caps = capabilities(&d, &[]).await;
    let primary = d.workspace.to_string_lossy().into_owned();
    assert_eq!(caps["workspaceCwd"], primary.as_str());
    assert_eq!(
        caps["workspaces"],
        json!([{"cwd": primary, "primary": true}, {"cwd": second_str, "primary": false}])
    );
}

// ---------------------------------------------------------------------------------------------
// Connection cap (docs/protocol.md#1-command-line, --max-connections)

/// A raw HTTP/1.1 exchange on a fresh connection: sends `request` (if any) and reads to EOF.
async fn raw_exchange(port: u16, request: Option<String>) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
    if let Some(request) = request {
        stream.write_all(request.as_bytes()).await?;
    }
    let mut out = Vec::new();
    match tokio::time::timeout(WAIT, stream.read_to_end(&mut out)).await {
        Ok(result) => result.map(|_| String::from_utf8_lossy(&out).into_owned()),
        Err(_) => panic!("no answer within {WAIT:?}; got so far {:?}", String::from_utf8_lossy(&out)),
    }
}

fn plain_get(port: u16, path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
}

/// Opens an SSE stream on its own connection, retrying (bounded) while the connection cap is
/// still taken by connections the server has not yet seen closed. Returns the open stream.
async fn open_stream(port: u16, session: &str) -> TcpStream {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
        let request = format!(
            "GET /session/{session}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match tokio::time::timeout(WAIT, stream.read(&mut byte)).await.expect("stream head in time") {
                Ok(1) => head.push(byte[0]),
                _ => break,
            }
        }
        let head = String::from_utf8_lossy(&head);
        if head.starts_with("HTTP/1.1 200") {
            return stream;
        }
        assert!(
            head.is_empty() || head.contains("connection_limit_exceeded") || head.starts_with("HTTP/1.1 503"),
            "unexpected answer to an events request: {head:?}"
        );
        assert!(Instant::now() < deadline, "could not open an event stream within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await; // waiting for the server to see a close
    }
}

#[tokio::test]
async fn max_connections_refuses_the_extra_connection_until_one_closes() {
    let d = Daemon::start(&["--max-connections", "2"]);
    let sid = d.create(None, json!({})).await["sessionId"].as_str().expect("id").to_owned();
    let first = open_stream(d.port, &sid).await;
    let _second = open_stream(d.port, &sid).await;

    // The daemon answers a refused connection at accept, before any request is read.
    let refused = raw_exchange(d.port, None).await.expect("the refused connection is answered");
    assert!(refused.starts_with("HTTP/1.1 503 "), "{refused:?}");
    let body = refused.split_once("\r\n\r\n").map(|(_, b)| b).expect("a body");
    let body: Value = serde_json::from_str(body).expect("JSON body");
    assert_eq!(body["code"], "connection_limit_exceeded");
    assert!(refused.to_ascii_lowercase().contains("retry-after: 5"), "{refused:?}");

    drop(first);
    let deadline = Instant::now() + WAIT;
    loop {
        let answer = raw_exchange(d.port, Some(plain_get(d.port, "/health"))).await.unwrap_or_default();
        if answer.starts_with("HTTP/1.1 200") {
            assert!(answer.ends_with(r#"{"status":"ok"}"#), "{answer:?}");
            break;
        }
        assert!(
            answer.is_empty() || answer.contains("connection_limit_exceeded"),
            "unexpected answer: {answer:?}"
        );
        assert!(Instant::now() < deadline, "no connection accepted after a stream closed");
        tokio::time::sleep(Duration::from_millis(20)).await; // waiting for the server to see the close
    }
}

// ---------------------------------------------------------------------------------------------
// Startup line and the config file (docs/protocol.md#1-command-line)

#[tokio::test]
async fn port_zero_binds_a_real_port_named_in_the_startup_line() {
    // The harness parses `mediatord listening on http://<addr>:<port>` and uses that port.
    let d = Daemon::start(&[]);
    assert_eq!(json_of(get(&d, "/health", &[]).await).await.2, json!({"status": "ok"}));
}

#[tokio::test]
async fn config_file_sets_values() {
    let (_dir, path) = config_file(&json!({
        "serve": {"maxSessions": 1, "eventRingSize": 100},
        "policy": {"permissionStrategy": "consensus", "consensusQuorum": 2},
    }));
    let d = Daemon::start(&["--config", &path]);
    let caps = capabilities(&d, &[]).await;
    assert_eq!(caps["limits"]["maxSessions"], 1);
    assert_eq!(caps["limits"]["eventRingSize"], 100);
    assert_eq!(caps["policy"]["permission"], "consensus");

    // maxSessions 1 is enforced, not just displayed.
    d.create(None, json!({"sessionScope": "thread"})).await;
    let res =
        http().post(d.url("/session")).json(&json!({"sessionScope": "thread"})).send().await.expect("POST");
    let (status, headers, body) = json_of(res).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "session_limit_exceeded");
    assert_eq!(header_str(&headers, "retry-after"), Some("5"));
}

#[tokio::test]
async fn a_flag_wins_over_the_config_file() {
    let (_dir, path) = config_file(&json!({"serve": {"maxSessions": 1, "permissionPolicy": "consensus"}}));
    let d = Daemon::start(&["--config", &path, "--max-sessions", "7", "--permission-policy", "designated"]);
    let caps = capabilities(&d, &[]).await;
    assert_eq!(caps["limits"]["maxSessions"], 7);
    assert_eq!(caps["policy"]["permission"], "designated");
}

#[tokio::test]
async fn config_file_from_the_environment() {
    let (_cfg, path) = config_file(&json!({"serve": {"maxPendingPrompts": 3}}));
    let d = Daemon::start_env(&[], &[("MEDIATORD_CONFIG", &path)]);
    assert_eq!(capabilities(&d, &[]).await["limits"]["maxPendingPromptsPerSession"], 3);
}

#[test]
fn an_unknown_config_key_refuses_the_boot_with_a_suggestion() {
    // A mistyped `workspace` used to fall back to the current directory with a warning.
    for (contents, says) in [
        (
            json!({"serve": {"workspaces": ["/srv/a"]}}),
            "unknown key serve.workspaces; did you mean serve.workspace?",
        ),
        (
            json!({"serve": {"max-sessions": 4}}),
            "unknown key serve.max-sessions; did you mean serve.maxSessions?",
        ),
        (json!({"port": 7777}), "unknown key port; did you mean serve.port? (options go under \"serve\")"),
        (json!({"polcy": {}}), "unknown key polcy; did you mean policy?"),
        (
            json!({"policy": {"strategy": "consensus"}}),
            "unknown key policy.strategy; known keys: permissionStrategy",
        ),
        (json!({"serve": {"colour": "blue"}}), "unknown key serve.colour; known keys: hostname, port,"),
    ] {
        let (_dir, path) = config_file(&contents);
        assert_refused(&["--config", &path, "--port", "0"], says);
        assert_refused(&["--config", &path, "--port", "0"], &path);
    }
}

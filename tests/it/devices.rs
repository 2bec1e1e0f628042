//! Paired devices (issue #19, `docs/protocol.md#15-devices`), through the real binary: `mediatord
//! pair` prints a URL and its QR code, the code is exchanged for a credential that works by header
//! (never by cookie), the device's identity is bound to it (votes are its own, a forged client id is
//! refused), observers only read, revocation ends access and streams at once, codes are one-time,
//! short-lived and rate-limited, and pairings survive a restart.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Daemon, Reply, Sse, WAIT, bin, eventually, http, request_id, selected, send};

const TOKEN: &str = "operator-secret";

/// A request as the operator: the daemon's token.
fn op(req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    req.bearer_auth(TOKEN)
}

/// A request as a device: its credential as the bearer.
fn dev(req: reqwest::RequestBuilder, credential: &str) -> reqwest::RequestBuilder {
    req.bearer_auth(credential)
}

/// A request as a browser holding the device cookie.
fn cookie(req: reqwest::RequestBuilder, credential: &str) -> reqwest::RequestBuilder {
    req.header("Cookie", format!("mediatord_device={credential}"))
}

/// `mediatord <args>` against `d` with the operator token in the environment: (exit code, stdout,
/// stderr).
async fn cli(d: &Daemon, args: &[&str]) -> (i32, String, String) {
    let home = tempfile::tempdir().expect("tempdir");
    let run = tokio::process::Command::new(bin())
        .args(args)
        .env("MEDIATORD_URL", &d.base)
        .env("MEDIATORD_TOKEN", TOKEN)
        .env("HOME", home.path())
        .env("XDG_STATE_HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(WAIT, run).await.expect("the command ends in time").expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `mediatord pair <args>`: the URL it printed (its last line) and all of its output.
async fn pair_cli(d: &Daemon, args: &[&str]) -> (String, String) {
    let mut full = vec!["pair"];
    full.extend(args);
    let (code, stdout, stderr) = cli(d, &full).await;
    assert_eq!(code, 0, "mediatord pair failed: {stderr}");
    let url = stdout.lines().rev().find(|l| !l.trim().is_empty()).expect("a URL line").trim().to_owned();
    (url, stdout)
}

fn code_of(url: &str) -> String {
    url.split_once("#pair=").expect("a #pair= fragment").1.to_owned()
}

/// `POST /devices/pair {code}` with no credential.
async fn exchange(d: &Daemon, code: &str) -> Reply {
    send(http().post(d.url("/devices/pair")).json(&json!({"code": code}))).await
}

/// Pairs a device through the operator's HTTP route: (device id, credential).
async fn paired(d: &Daemon, name: &str, role: &str) -> (String, String) {
    let issued = send(op(http().post(d.url("/devices/pairing"))).json(&json!({"name": name, "role": role})))
        .await
        .ok();
    let body = exchange(d, issued["code"].as_str().expect("code")).await.ok();
    (
        body["deviceId"].as_str().expect("deviceId").to_owned(),
        body["token"].as_str().expect("token").to_owned(),
    )
}

/// The `identity` of `GET /capabilities` as `req` is signed in.
async fn identity(req: reqwest::RequestBuilder) -> Value {
    send(req).await.ok()["identity"].clone()
}

#[tokio::test]
async fn a_paired_device_is_its_credential_by_header_and_its_votes_are_its_own_until_revoked() {
    let d = Daemon::start(&["--token", TOKEN]);
    let (url, _) = pair_cli(&d, &["--name", "Ada's phone"]).await;
    assert!(url.starts_with(&format!("{}/#pair=", d.base)), "{url}");
    let code = code_of(&url);
    assert_eq!(code.len(), 32, "128 bits in hex: {code}");

    let answer = exchange(&d, &code).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.header("set-cookie"), None, "never a cookie: cookies ignore ports");
    let device_id = answer.body["deviceId"].as_str().expect("deviceId").to_owned();
    let credential = answer.body["token"].as_str().expect("token").to_owned();
    assert_eq!(
        (answer.body["role"].as_str(), answer.body["name"].as_str()),
        (Some("voter"), Some("Ada's phone"))
    );
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    let secret = credential.split_once('.').expect("id.secret").1;
    assert_eq!(secret.len(), 64, "256 bits in hex");

    // The credential works in the header, never in a cookie (issue #27, finding 7).
    let by_header = identity(dev(http().get(d.url("/capabilities")), &credential)).await;
    let expected = json!({"kind": "device", "deviceId": device_id, "name": "Ada's phone", "role": "voter", "scope": ["read", "write"]});
    assert_eq!(by_header, expected);
    let by_cookie = send(cookie(http().get(d.url("/capabilities")), &credential)).await;
    assert_eq!(by_cookie.status, 401, "a cookie is no credential");
    let cleared = by_cookie.header("set-cookie").expect("the old cookie is cleared");
    assert!(cleared.starts_with("mediatord_device=;") && cleared.contains("Max-Age=0"), "{cleared}");
    let listed = send(op(http().get(d.url("/devices")))).await.ok();
    assert_eq!(listed["devices"][0]["deviceId"], json!(device_id));

    // The operator opens the session as "op"; the device joins with no client id header and is
    // registered under its device id.
    let session =
        send(op(http().post(d.url("/session"))).header("X-Qwen-Client-Id", "op").json(&json!({}))).await.ok();
    let sid = session["sessionId"].as_str().expect("sessionId").to_owned();
    let joined = send(dev(http().post(d.url("/session")), &credential).json(&json!({}))).await.ok();
    assert_eq!(joined["clientId"], json!(device_id));
    let mut device_stream =
        Sse::connect(&d, &sid, &[("Authorization", format!("Bearer {credential}"))]).await;
    let mut op_stream = Sse::connect(&d, &sid, &[("Authorization", format!("Bearer {TOKEN}"))]).await;

    let prompt = json!({"prompt": [{"type": "text", "text": "write device.txt hello"}]});
    let queued = op(http().post(d.url(&format!("/session/{sid}/prompt"))))
        .header("X-Qwen-Client-Id", "op")
        .header("Prefer", "respond-async")
        .json(&prompt);
    assert_eq!(send(queued).await.status, 202);
    let request =
        device_stream.until_type("permission_request").await.last().expect("request").payload().clone();
    let rid = request_id(&request);

    // A forged client id with the device's credential is refused, whatever route.
    let forged = send(
        dev(http().post(d.url(&format!("/session/{sid}/permission/{rid}"))), &credential)
            .header("X-Qwen-Client-Id", "op")
            .json(&selected("allow_once")),
    )
    .await;
    assert_eq!(forged.status, 403, "{}", forged.text);
    assert_eq!(
        (forged.body["code"].as_str(), forged.body["deviceId"].as_str()),
        (Some("client_id_mismatch"), Some(&*device_id))
    );
    // Naming itself is fine; so is naming nobody.
    let vote = send(
        dev(http().post(d.url(&format!("/session/{sid}/permission/{rid}"))), &credential)
            .header("X-Qwen-Client-Id", &device_id)
            .json(&selected("allow_once")),
    )
    .await;
    assert_eq!(vote.status, 200, "{}", vote.text);
    let resolved =
        op_stream.until_type("permission_resolved").await.last().expect("resolved").payload().clone();
    assert_eq!(resolved["voterClientId"], json!(device_id), "{resolved}");

    // The audit names the device and its name, on the ballot and as the deciding voter (once
    // the decision is recorded: the audit is written behind the vote's answer).
    let decided = |b: &Value| {
        b["entries"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["requestId"] == json!(rid) && e["status"] == "selected"))
    };
    let audit = eventually(|| op(http().get(d.url("/audit"))), decided).await;
    let entry = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["requestId"] == json!(rid))
        .cloned()
        .expect("audited");
    assert_eq!(
        (entry["voterClientId"].clone(), entry["voterDeviceName"].clone()),
        (json!(device_id), json!("Ada's phone"))
    );
    assert_eq!(entry["ballots"][0]["deviceName"], json!("Ada's phone"), "{entry}");
    assert_eq!(entry["ballots"][0]["clientId"], json!(device_id));

    // Revoked with `mediatord devices revoke`: the open stream ends at once, the next request is
    // 401.
    let (status, out, err) = cli(&d, &["devices", "revoke", &device_id]).await;
    assert_eq!(status, 0, "{out}{err}");
    tokio::time::timeout(WAIT, device_stream.rest()).await.expect("the revoked device's stream ends");
    assert!(device_stream.ended);
    let refused = send(dev(http().get(d.url("/capabilities")), &credential)).await;
    assert_eq!((refused.status, refused.text.as_str()), (401, r#"{"error":"Unauthorized"}"#));
    // The operator's own stream is untouched by it.
    let (_, out, _) = cli(&d, &["devices"]).await;
    assert!(!out.contains(&device_id), "revoked devices are not listed: {out}");
    assert_eq!(send(op(http().get(d.url(&format!("/session/{sid}"))))).await.status, 200);
    assert!(!op_stream.ended);
}

#[tokio::test]
async fn a_reused_an_expired_and_a_wrong_code_get_one_answer_and_failures_are_rate_limited() {
    const TTL_MS: u64 = 2000;
    let d = Daemon::start(&["--token", TOKEN, "--pairing-code-ttl-ms", &TTL_MS.to_string()]);
    let issue = || async { send(op(http().post(d.url("/devices/pairing"))).json(&json!({}))).await.ok() };
    let stale = issue().await["code"].as_str().expect("code").to_owned();
    // Time has to pass for a code to expire: the configured lifetime is short for this test.
    tokio::time::sleep(Duration::from_millis(TTL_MS + 500)).await;
    let fresh = issue().await["code"].as_str().expect("code").to_owned();
    assert_eq!(exchange(&d, &fresh).await.status, 200);

    let reused = exchange(&d, &fresh).await;
    let expired = exchange(&d, &stale).await;
    let wrong = exchange(&d, &"0".repeat(32)).await;
    let empty = send(http().post(d.url("/devices/pair")).json(&json!({}))).await;
    assert_eq!(
        (reused.status, &reused.body),
        (401, &json!({"error": "Invalid or expired pairing code", "code": "invalid_pairing_code"}))
    );
    for refused in [&expired, &wrong, &empty] {
        assert_eq!((refused.status, refused.text.as_str()), (401, reused.text.as_str()), "byte for byte");
    }
    // Four failures so far; ten are allowed per minute and client, then a wrong code is 429.
    for _ in 4..10 {
        assert_eq!(exchange(&d, "guess").await.status, 401);
    }
    let limited = exchange(&d, "guess").await;
    assert_eq!((limited.status, limited.body["code"].as_str()), (429, Some("too_many_pairing_attempts")));
    assert_eq!(limited.header("retry-after"), Some("60"), "the window, not a guess");
    // A right code is never throttled (issue #27: the throttled address may be everyone's).
    let good = issue().await["code"].as_str().expect("code").to_owned();
    assert_eq!(exchange(&d, &good).await.status, 200);
}

#[tokio::test]
async fn an_observer_reads_and_subscribes_but_cannot_vote_prompt_or_change_rules() {
    let d = Daemon::start(&["--token", TOKEN]);
    let (device_id, credential) = paired(&d, "wall screen", "observer").await;
    let session =
        send(op(http().post(d.url("/session"))).header("X-Qwen-Client-Id", "op").json(&json!({}))).await.ok();
    let sid = session["sessionId"].as_str().expect("sessionId").to_owned();
    assert_eq!(send(dev(http().get(d.url(&format!("/session/{sid}"))), &credential)).await.status, 200);
    assert_eq!(
        send(dev(http().get(d.url(&format!("/session/{sid}/permissions"))), &credential)).await.status,
        200
    );
    let _stream = Sse::connect(&d, &sid, &[("Authorization", format!("Bearer {credential}"))]).await;
    let heartbeat = send(dev(http().post(d.url(&format!("/session/{sid}/heartbeat"))), &credential)).await;
    assert_eq!((heartbeat.status, heartbeat.body["clientId"].clone()), (200, json!(device_id)));

    let refused = [
        ("POST", format!("/session/{sid}/permission/r1"), selected("allow_once")),
        ("POST", "/permission/r1".to_owned(), selected("allow_once")),
        ("POST", format!("/session/{sid}/prompt"), json!({"prompt": [{"type": "text", "text": "hi"}]})),
        ("POST", format!("/session/{sid}/permission-rules"), json!({"effect": "allow", "kind": "read"})),
        ("DELETE", format!("/session/{sid}/permission-rules/x"), json!({})),
        ("POST", format!("/session/{sid}/cancel"), json!({})),
        ("POST", format!("/session/{sid}/mode"), json!({"modeId": "plan"})),
        ("POST", format!("/session/{sid}/model"), json!({"modelId": "demo-smart"})),
        ("POST", format!("/session/{sid}/shell"), json!({"command": "true"})),
        ("POST", "/session".to_owned(), json!({})),
        // A person's device may pair another of theirs, so this is a write: an observer is refused
        // as read-only before anything else (a voter that is nobody's: `operator_required`).
        ("POST", "/devices/pairing".to_owned(), json!({})),
    ];
    for (method, path, body) in refused {
        let req = http().request(method.parse().expect("method"), d.url(&path));
        let reply = send(dev(req, &credential).json(&body)).await;
        assert_eq!(
            (reply.status, reply.body["code"].as_str()),
            (403, Some("read_only_device")),
            "{method} {path}"
        );
    }
    for (method, path) in [("GET", "/devices"), ("DELETE", "/devices/x")] {
        let req = http().request(method.parse().expect("method"), d.url(path));
        let reply = send(dev(req, &credential).json(&json!({}))).await;
        assert_eq!(
            (reply.status, reply.body["code"].as_str()),
            (403, Some("operator_required")),
            "{method} {path}"
        );
    }
}

/// A browser still holding the cookie an earlier version set: the cookie signs nobody in, and any
/// answer tells the browser to forget it (with `Secure` behind an `https://` public URL, as it was
/// set).
#[tokio::test]
async fn the_old_device_cookie_signs_nobody_in_and_is_cleared() {
    let d = Daemon::start(&["--token", TOKEN]);
    let (_, credential) = paired(&d, "browser", "voter").await;
    let refused =
        send(cookie(http().post(d.url("/session/nope/heartbeat")), &credential).header("Origin", &d.base))
            .await;
    assert_eq!(refused.status, 401);
    let by_operator = send(cookie(op(http().get(d.url("/capabilities"))), &credential)).await;
    assert_eq!(by_operator.status, 200);
    assert_eq!(
        by_operator.header("set-cookie"),
        Some("mediatord_device=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/")
    );
    assert_eq!(send(op(http().get(d.url("/capabilities")))).await.header("set-cookie"), None);
}

#[tokio::test]
async fn pairings_and_revocations_survive_a_restart() {
    let state = tempfile::tempdir().expect("tempdir");
    let dir = state.path().join("state");
    let args = ["--token", TOKEN, "--state-dir", dir.to_str().expect("utf-8")];
    let d = Daemon::start(&args);
    let (kept_id, kept) = paired(&d, "kept", "voter").await;
    let (gone_id, gone) = paired(&d, "gone", "observer").await;
    assert_eq!(send(op(http().delete(d.url(&format!("/devices/{gone_id}"))))).await.status, 204);
    drop(d); // SIGKILL: what was answered was committed

    let d = Daemon::start(&args);
    let me = identity(dev(http().get(d.url("/capabilities")), &kept)).await;
    assert_eq!((me["deviceId"].clone(), me["name"].clone()), (json!(kept_id), json!("kept")));
    assert_eq!(send(dev(http().get(d.url("/capabilities")), &gone)).await.status, 401);
    let listed = send(op(http().get(d.url("/devices")))).await.ok();
    let ids: Vec<&str> = listed["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .filter_map(|x| x["deviceId"].as_str())
        .collect();
    assert_eq!(ids, [kept_id.as_str()]);
    assert_eq!(
        send(op(http().delete(d.url(&format!("/devices/{gone_id}"))))).await.body["code"],
        json!("device_not_found")
    );
}

/// The terminal's QR code read back into modules: each character holds two (top, bottom), drawn
/// light where the glyph is filled (`mediatord pair` draws light modules, for dark terminals).
fn modules_of(printed: &str) -> Vec<Vec<bool>> {
    let rows: Vec<&str> = printed
        .lines()
        .filter(|l| !l.is_empty() && l.chars().all(|c| matches!(c, '█' | '▀' | '▄' | ' ')))
        .collect();
    let mut grid = Vec::new();
    for row in rows {
        let (top, bottom): (Vec<bool>, Vec<bool>) =
            row.chars().map(|c| (matches!(c, '█' | '▀'), matches!(c, '█' | '▄'))).unzip();
        grid.push(top);
        grid.push(bottom);
    }
    grid
}

#[tokio::test]
async fn the_terminal_qr_code_decodes_to_the_printed_url() {
    let d = Daemon::start(&["--token", TOKEN]);
    let (url, stdout) = pair_cli(&d, &["--role", "observer"]).await;
    let light = modules_of(&stdout);
    assert!(light.len() > 21, "a QR code was printed:\n{stdout}");
    // Rendered as an image, 4 pixels a module, and read by a QR decoder (rqrr), as a camera would.
    const SCALE: usize = 4;
    let (h, w) = (light.len(), light[0].len());
    let mut image = rqrr::PreparedImage::prepare_from_greyscale(w * SCALE, h * SCALE, |x, y| {
        if light[y / SCALE].get(x / SCALE).copied().unwrap_or(true) { 255 } else { 0 }
    });
    let grids = image.detect_grids();
    assert_eq!(grids.len(), 1, "one QR code in:\n{stdout}");
    let (_, content) = grids[0].decode().expect("the QR code decodes");
    assert_eq!(content, url);
    // And the code in it pairs an observer.
    let answer = exchange(&d, &code_of(&url)).await.ok();
    assert_eq!(answer["role"], json!("observer"));
}

#[tokio::test]
async fn behind_an_https_public_url_the_pairing_url_is_the_public_one_and_the_old_cookie_is_cleared_secure() {
    let d = Daemon::start(&["--token", TOKEN, "--public-url", "https://agents.example.net/m"]);
    let issued = send(op(http().post(d.url("/devices/pairing"))).json(&json!({}))).await.ok();
    let url = issued["url"].as_str().expect("url");
    assert!(url.starts_with("https://agents.example.net/m/#pair="), "{url}");
    assert!(issued["qrSvg"].as_str().is_some_and(|svg| svg.contains("<svg")), "{issued}");
    let answer = exchange(&d, &code_of(url)).await;
    assert_eq!((answer.status, answer.header("set-cookie")), (200, None));
    let old = send(cookie(op(http().get(d.url("/capabilities"))), "x")).await;
    assert!(
        old.header("set-cookie").is_some_and(|c| c.ends_with("; Secure")),
        "{:?}",
        old.header("set-cookie")
    );
}

#[tokio::test]
async fn without_a_token_devices_still_have_their_own_identity_and_can_be_revoked() {
    let d = Daemon::start(&[]);
    let issued = send(http().post(d.url("/devices/pairing")).json(&json!({"name": "local"}))).await.ok();
    let paired = exchange(&d, issued["code"].as_str().expect("code")).await.ok();
    let (id, credential) = (paired["deviceId"].clone(), paired["token"].as_str().expect("token").to_owned());
    assert_eq!(identity(dev(http().get(d.url("/capabilities")), &credential)).await["deviceId"], id);
    assert_eq!(identity(http().get(d.url("/capabilities"))).await["kind"], "operator");
    let forged =
        send(dev(http().get(d.url("/capabilities")), &credential).header("X-Qwen-Client-Id", "alice")).await;
    assert_eq!(forged.body["code"], "client_id_mismatch");
    assert_eq!(
        send(http().delete(d.url(&format!("/devices/{}", id.as_str().expect("id"))))).await.status,
        204
    );
    assert_eq!(send(dev(http().get(d.url("/capabilities")), &credential)).await.status, 401);
    // A device credential no device has is refused, even without a token (it is not the operator).
    let (other_id, other) = paired_no_token(&d).await;
    assert_eq!(send(http().delete(d.url(&format!("/devices/{other_id}")))).await.status, 204);
    assert_eq!(send(dev(http().get(d.url("/capabilities")), &other)).await.status, 401);
}

async fn paired_no_token(d: &Daemon) -> (String, String) {
    let issued = send(http().post(d.url("/devices/pairing")).json(&json!({}))).await.ok();
    let body = exchange(d, issued["code"].as_str().expect("code")).await.ok();
    (
        body["deviceId"].as_str().expect("deviceId").to_owned(),
        body["token"].as_str().expect("token").to_owned(),
    )
}

/// Issue #27, finding 2: one device cannot take every connection. A device holds a few event
/// streams per session and a few more in all, all devices together three quarters of the
/// connections and of a session's streams; the operator keeps the rest, and revokes.
#[tokio::test]
async fn a_devices_streams_are_bounded_and_the_operator_keeps_room_to_revoke_it() {
    // 16 connections: devices together hold 12 streams at most; 8 per session: devices 6. A
    // state directory: a closed session's history is replayed from it.
    let state = tempfile::tempdir().expect("state");
    let dir = state.path().join("state");
    let d = Daemon::start(&[
        "--state-dir",
        dir.to_str().expect("utf-8"),
        "--token",
        TOKEN,
        "--max-connections",
        "16",
        "--max-subscribers",
        "8",
        "--session-scope",
        "thread",
    ]);
    let (watcher_id, watcher) = paired(&d, "watcher", "observer").await;
    let (_, other) = paired(&d, "other", "observer").await;
    let mut sessions = Vec::new();
    for _ in 0..6 {
        let created = send(op(http().post(d.url("/session"))).header("X-Qwen-Client-Id", "op")).await.ok();
        sessions.push(created["sessionId"].as_str().expect("sessionId").to_owned());
    }
    let open = |credential: &str, sid: &str| {
        dev(http().get(d.url(&format!("/session/{sid}/events"))), credential).send()
    };
    let refused = |res: reqwest::Response| async move {
        let status = res.status().as_u16();
        let body: Value = res.json().await.unwrap_or(Value::Null);
        (status, body["code"].clone(), body["scope"].clone(), body["limit"].clone())
    };
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(open(&watcher, &sessions[0]).await.expect("stream"));
    }
    assert!(held.iter().all(|r| r.status() == 200));
    let third = open(&watcher, &sessions[0]).await.expect("answer");
    assert_eq!(
        refused(third).await,
        (429, json!("stream_limit_exceeded"), json!("device_session"), json!(2))
    );
    for sid in &sessions[1..4] {
        for _ in 0..2 {
            let res = open(&watcher, sid).await.expect("stream");
            assert_eq!(res.status(), 200);
            held.push(res);
        }
    }
    let ninth = open(&watcher, &sessions[4]).await.expect("answer");
    assert_eq!(refused(ninth).await, (429, json!("stream_limit_exceeded"), json!("device"), json!(8)));
    // A closed session's replay holds a place like a live stream: none is left for it.
    let created = send(op(http().post(d.url("/session"))).header("X-Qwen-Client-Id", "op")).await.ok();
    let closed = created["sessionId"].as_str().expect("sessionId").to_owned();
    assert!(send(op(http().delete(d.url(&format!("/session/{closed}"))))).await.status < 300);
    let replay = open(&watcher, &closed).await.expect("answer");
    assert_eq!(refused(replay).await, (429, json!("stream_limit_exceeded"), json!("device"), json!(8)));
    // The other device fills what is left of the devices' share: 4 more streams.
    for sid in &sessions[4..6] {
        for _ in 0..2 {
            let res = open(&other, sid).await.expect("stream");
            assert_eq!(res.status(), 200);
            held.push(res);
        }
    }
    let over = open(&other, &sessions[0]).await.expect("answer");
    assert_eq!(refused(over).await, (429, json!("stream_limit_exceeded"), json!("devices"), json!(12)));
    // Twelve streams are open; the operator still reaches the daemon, follows a session and
    // revokes the device.
    let operator = Sse::connect(&d, &sessions[0], &[("Authorization", format!("Bearer {TOKEN}"))]).await;
    assert_eq!(send(op(http().delete(d.url(&format!("/devices/{watcher_id}"))))).await.status, 204);
    // Its streams ended, their places are free again.
    let mut ended = 0;
    for res in held.drain(..8) {
        let mut sse = Sse::from_response(res);
        sse.rest().await;
        ended += 1;
    }
    assert_eq!(ended, 8);
    let again = open(&other, &sessions[0]).await.expect("stream");
    assert_eq!(again.status(), 200);
    drop(operator);
}

/// Issue #27, finding 3: `consensus` counts the identities that may vote now. An observer that
/// opens the stream and heartbeats, and a voter revoked since it joined, are not voters: alice,
/// the only one left, decides alone.
#[tokio::test]
async fn consensus_counts_neither_observers_nor_revoked_devices() {
    let d = Daemon::start(&["--token", TOKEN, "--permission-policy", "consensus"]);
    let created = send(op(http().post(d.url("/session"))).header("X-Qwen-Client-Id", "alice")).await.ok();
    let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
    let (_, observer) = paired(&d, "watcher", "observer").await;
    let (voter_id, voter) = paired(&d, "old phone", "voter").await;
    let heartbeat = format!("/session/{sid}/heartbeat");
    assert_eq!(send(dev(http().post(d.url(&heartbeat)), &observer)).await.status, 200);
    let _watching = Sse::connect(&d, &sid, &[("Authorization", format!("Bearer {observer}"))]).await;
    assert_eq!(send(dev(http().post(d.url(&heartbeat)), &voter)).await.status, 200);
    assert_eq!(send(op(http().delete(d.url(&format!("/devices/{voter_id}"))))).await.status, 204);
    let mut sse = Sse::connect(&d, &sid, &[("Authorization", format!("Bearer {TOKEN}"))]).await;
    let prompt = op(http().post(d.url(&format!("/session/{sid}/prompt"))))
        .header("X-Qwen-Client-Id", "alice")
        .header("Prefer", "respond-async")
        .json(&json!({"prompt": [{"type": "text", "text": "write consensus.txt yes"}]}));
    assert_eq!(send(prompt).await.status, 202);
    let raised = sse.until_type("permission_request").await;
    let rid = raised.last().expect("request").payload()["requestId"].as_str().expect("id").to_owned();
    let vote = op(http().post(d.url(&format!("/session/{sid}/permission/{rid}"))))
        .header("X-Qwen-Client-Id", "alice")
        .json(&selected("allow_once"));
    assert_eq!(send(vote).await.status, 200);
    let events = sse.until_type("permission_resolved").await;
    assert!(events.iter().all(|e| e.event != "permission_partial_vote"), "alice's vote alone decides");
    let resolved = events.last().expect("resolved").payload();
    assert_eq!(
        (resolved["resolvedBy"].as_str(), resolved["voterClientId"].as_str()),
        (Some("vote"), Some("alice"))
    );
    let audit = send(op(http().get(d.url(&format!("/session/{sid}/permissions?audit=1"))))).await.ok();
    assert_eq!(audit["audit"][0]["votersAtIssue"], json!(["alice"]));
}

/// Issue #27, finding 5: wrong pairing codes cannot lock out the holder of a right one (behind a
/// same-host proxy every client is 127.0.0.1), and spreading wrong ones over 127/8 buys nothing.
#[tokio::test]
async fn wrong_pairing_codes_neither_lock_out_a_right_one_nor_multiply_over_loopback_addresses() {
    let d = Daemon::start(&["--token", TOKEN]);
    let code = send(op(http().post(d.url("/devices/pairing"))).json(&json!({}))).await.ok()["code"]
        .as_str()
        .expect("code")
        .to_owned();
    let from = |last: u8| {
        reqwest::Client::builder()
            .no_proxy()
            .local_address(std::net::IpAddr::from([127, 0, 0, last]))
            .build()
            .expect("client")
    };
    let mut answers = Vec::new();
    for last in 1..=11u8 {
        let wrong = from(last + 1).post(d.url("/devices/pair")).json(&json!({"code": "0".repeat(32)}));
        answers.push(send(wrong).await.status);
    }
    assert_eq!(answers, [401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 429], "127/8 is one client");
    let right = send(from(1).post(d.url("/devices/pair")).json(&json!({"code": code}))).await;
    assert_eq!(right.status, 200, "the right code is never throttled: {}", right.text);
}

/// Issue #27, finding 15: a name that could pass for another (a right-to-left override, a
/// zero-width space, a stack of combining marks) is refused, from the operator and from the
/// device.
#[tokio::test]
async fn names_that_could_impersonate_are_refused() {
    let d = Daemon::start(&["--token", TOKEN]);
    for name in [
        "admin\u{202E}enohp",
        "ali\u{200B}ce",
        "Z\u{0301}\u{0302}\u{0303}\u{0304}",
        "a\u{00A0}b",
        "p\u{0430}ypal",
    ] {
        let issued = send(op(http().post(d.url("/devices/pairing"))).json(&json!({"name": name}))).await;
        assert_eq!((issued.status, issued.body["code"].as_str()), (400, Some("invalid_device")), "{name:?}");
    }
    let code = send(op(http().post(d.url("/devices/pairing"))).json(&json!({}))).await.ok()["code"]
        .as_str()
        .expect("code")
        .to_owned();
    let own = send(
        http().post(d.url("/devices/pair")).json(&json!({"code": code, "name": "op\u{2066}era\u{2069}"})),
    )
    .await;
    assert_eq!((own.status, own.body["code"].as_str()), (400, Some("invalid_device")));
    assert_eq!(exchange(&d, &code).await.status, 200, "a refused name did not use the code up");
}

/// Issue #27, finding 16: an operator token that starts like a device credential is still the
/// operator's token.
#[tokio::test]
async fn an_operator_token_shaped_like_a_device_credential_still_signs_the_operator_in() {
    let token = "dev-ops.2026-rotating-operator-token";
    let d = Daemon::start(&["--token", token]);
    let me = send(http().get(d.url("/capabilities")).bearer_auth(token)).await.ok();
    assert_eq!(me["identity"]["kind"], "operator");
    assert_eq!(send(http().get(d.url("/devices")).bearer_auth(token)).await.status, 200);
    assert_eq!(send(http().get(d.url("/devices")).bearer_auth("dev-ops.2026-wrong")).await.status, 401);
}

/// A pairing refused because 256 devices are paired does not use its code up: once one is revoked,
/// the same code pairs.
#[tokio::test]
async fn a_pairing_refused_for_room_keeps_its_code() {
    let d = Daemon::start(&["--token", TOKEN]);
    let mut first = String::new();
    for i in 0..256 {
        let (id, _) = paired(&d, &format!("d{i}"), "observer").await;
        if i == 0 {
            first = id;
        }
    }
    let code =
        send(op(http().post(d.url("/devices/pairing"))).json(&json!({"name": "late"}))).await.ok()["code"]
            .as_str()
            .expect("code")
            .to_owned();
    let full = exchange(&d, &code).await;
    assert_eq!((full.status, full.body["code"].as_str()), (409, Some("pairing_unavailable")));
    assert_eq!(send(op(http().delete(d.url(&format!("/devices/{first}"))))).await.status, 204);
    let late = exchange(&d, &code).await.ok();
    assert_eq!(late["name"], "late");
}

//! What the command line and the log print of text that others chose (issue #27, finding 6): an
//! agent's tool titles in `mediatord audit`, a daemon's answers in `mediatord devices` and `pair`,
//! an agent's stderr in the daemon's log. Escape sequences, carriage returns, C1 controls, bidi
//! overrides and zero-width characters arrive as visible escapes, and a newline cannot forge a row.

use std::time::{Duration, Instant};

use axum::Json;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::*;

/// Sets the window title, clears the screen, returns the carriage, sends a C1 "next line",
/// reverses what follows, hides a zero-width space, writes the clipboard (OSC 52), and starts a
/// new line that looks like a row of its own.
const HOSTILE: &str =
    "\u{1b}]0;pwned\u{7}\u{1b}[2J\r\u{85}\u{202e}gnp.exe\u{200b}\u{1b}]52;c;cHduZWQ=\u{7}\nforged row";

/// The characters no terminal output may hold raw (a line break only between rows).
fn assert_inert(what: &str, text: &str) {
    for c in ['\u{1b}', '\u{7}', '\r', '\u{85}', '\u{202e}', '\u{200b}'] {
        assert!(!text.contains(c), "{what} holds U+{:04X} raw:\n{text:?}", c as u32);
    }
}

/// Runs the binary with `args` and `env`; (exit code, stdout, stderr).
async fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let home = tempfile::tempdir().expect("tempdir");
    let mut cmd = tokio::process::Command::new(bin());
    cmd.args(args).env("HOME", home.path()).env("XDG_STATE_HOME", home.path()).kill_on_drop(true);
    cmd.env("XDG_CONFIG_HOME", home.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(WAIT, cmd.output()).await.expect("the command ends in time").expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_audit_shows_an_agents_escape_sequences_as_text_in_the_table_and_the_json_lines() {
    let state = tempfile::tempdir().expect("tempdir");
    // A directory the daemon creates itself (0700): it refuses one others may read.
    let state_dir = state.path().join("state").to_str().expect("utf-8").to_owned();
    let d = Daemon::start(&["--state-dir", &state_dir]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    // The demo agent's `shell` asks to run the rest of the prompt, titled "Run <command>".
    let request = d.raise(&sid, &mut sse, Some("alice"), &format!("shell {HOSTILE}")).await;
    assert_eq!(request["toolCall"]["title"], format!("Run {HOSTILE}"), "the agent's title, as it sent it");
    d.vote(&sid, &request_id(&request), Some("alice"), selected("reject_once")).await.ok();
    sse.until_type("turn_complete").await;

    // The decision reaches the database a moment after the vote: read until it is there.
    let deadline = Instant::now() + WAIT;
    let json_lines = loop {
        let (code, out, err) = run(&["audit", "--json", "--state-dir", &state_dir], &[]).await;
        assert_eq!(code, 0, "{err}");
        if out.contains("\"selected\"") {
            break out;
        }
        assert!(Instant::now() < deadline, "the decision never reached the audit: {out}");
        tokio::time::sleep(Duration::from_millis(50)).await; // polling what the store's writer commits
    };
    assert_inert("mediatord audit --json", &json_lines);
    let lines: Vec<&str> = json_lines.lines().collect();
    assert_eq!(lines.len(), 1, "{json_lines:?}");
    let entry: Value = serde_json::from_str(lines[0]).expect("one JSON object");
    assert_eq!(
        entry["toolCall"]["title"],
        format!("Run {HOSTILE}"),
        "the value is kept, only its writing escaped"
    );

    let (code, table, err) = run(&["audit", "--state-dir", &state_dir], &[]).await;
    assert_eq!(code, 0, "{err}");
    assert_inert("mediatord audit", &table);
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 2, "the header and one row, no forged one:\n{table}");
    assert!(rows[0].starts_with("REQUESTED"), "{table}");
    assert!(
        rows[1].ends_with(r"execute Run \u{1b}]0;pwned\u{7}\u{1b}[2J\r\u{85}\u{202e}gnp.exe\u{200b}\u{1b}]52;c;cHduZWQ=\u{7}\nforged row"),
        "the title, escaped, on its row:\n{table}"
    );
    assert!(rows[1].contains("Rejected") && rows[1].contains("operator · alice"), "{table}");
}

/// A daemon (or anything at `MEDIATORD_URL`) whose answers carry hostile text: what `mediatord
/// devices` and `pair` print of it is escaped even if a daemon let it through.
async fn hostile_daemon() -> (String, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new()
        .route(
            "/devices",
            axum::routing::get(|| async {
                Json(json!({"devices": [{
                    "deviceId": format!("dev-1{HOSTILE}"), "role": "voter\r\u{1b}[31m",
                    "name": format!("Ada{HOSTILE}"), "createdAt": 1_700_000_000_000u64, "lastSeenAt": null,
                }]}))
            }),
        )
        .route(
            "/devices/pairing",
            axum::routing::post(|| async {
                Json(json!({"url": "http://d/#pair=x\u{1b}]0;t\u{7}", "role": "voter\u{202e}", "expiresAt": 0}))
            }),
        )
        .route(
            "/devices/{id}",
            axum::routing::delete(|| async {
                (StatusCode::BAD_REQUEST, Json(json!({"error": format!("refused{HOSTILE}"), "code": "x"})))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, task)
}

#[tokio::test]
async fn devices_and_pair_print_a_daemons_text_escaped() {
    let (base, server) = hostile_daemon().await;
    let env = [("MEDIATORD_URL", base.as_str()), ("MEDIATORD_TOKEN", "t")];

    let (code, listed, err) = run(&["devices"], &env).await;
    assert_eq!(code, 0, "{err}");
    assert_inert("mediatord devices", &listed);
    let rows: Vec<&str> = listed.lines().collect();
    assert_eq!(rows.len(), 2, "the header and one row, no forged one:\n{listed}");
    assert!(rows[1].starts_with(r"dev-1\u{1b}]0;pwned"), "{listed}");
    assert!(rows[1].contains(r"voter\r\u{1b}[31m") && rows[1].ends_with(r"\nforged row"), "{listed}");

    let (code, out, err) = run(&["pair"], &env).await;
    assert_eq!(code, 0, "{err}");
    assert_inert("mediatord pair", &out);
    assert!(out.contains(r"http://d/#pair=x\u{1b}]0;t\u{7}") && out.contains(r"voter\u{202e}"), "{out}");

    let (code, out, err) = run(&["devices", "revoke", "dev-1"], &env).await;
    assert_eq!(code, 1, "{out}");
    assert_inert("mediatord devices revoke's error", &err);
    assert_eq!(err.lines().count(), 1, "one line of error:\n{err}");
    assert!(err.contains(r"refused\u{1b}]0;pwned"), "{err}");
    server.abort();
}

#[tokio::test]
async fn an_agents_stderr_reaches_the_log_escaped() {
    // An agent that writes a carriage return, a C1 control and a bidi override to stderr, then runs
    // as the demo agent.
    let agent = format!(
        "sh -c 'printf \"booting\\r\\302\\205\\342\\200\\256done\\033[2J\\n\" >&2; exec {} demo-agent'",
        bin()
    );
    let d = Daemon::start(&["--agent", &agent]);
    d.join("alice").await;
    let log = wait_stderr(&d, "booting").await;
    let line = log.lines().find(|l| l.contains("booting")).expect("the line");
    assert_inert("the daemon's log", line);
    assert!(line.contains(r"booting\r\u{85}\u{202e}done\u{1b}[2J"), "{line}");
}

#[tokio::test]
async fn a_json_log_writes_an_agents_bidi_and_c1_characters_as_escapes_and_keeps_their_value() {
    let agent =
        format!("sh -c 'printf \"booting\\302\\205\\342\\200\\256done\\n\" >&2; exec {} demo-agent'", bin());
    let d = Daemon::start(&["--agent", &agent, "--log-format", "json"]);
    d.join("alice").await;
    let log = wait_stderr(&d, "booting").await;
    let line = log.lines().find(|l| l.contains("booting")).expect("the line");
    assert_inert("the daemon's JSON log", line);
    assert!(line.contains(r"booting\u0085\u202edone"), "{line}");
    let entry: Value = serde_json::from_str(line).expect("a JSON line");
    assert_eq!(entry["fields"]["message"], "booting\u{85}\u{202e}done", "the value is kept");
}

/// Issue 41, finding 8: every export of a session whose agent asked with a title holding a line
/// that looks like the export's own ("# Permission asked", "> Permission asked"), an OSC 52 that
/// writes the clipboard when the file is `cat`, and a right-to-left override: the CSV and JSON
/// audit downloads, `mediatord transcript` as Markdown and JSON, and the web app's Markdown
/// export (run by node on the same events). None holds a raw control or bidi character, and in none
/// does the agent's newline start a line.
#[tokio::test]
async fn every_export_writes_an_agents_newlines_escapes_and_overrides_as_text() {
    const EVIL: &str =
        "true\n# Permission asked: rm -rf ~\n> Permission asked: \u{1b}]52;c;cHduZWQ=\u{7}\u{202e}txt.exe";
    let state = tempfile::tempdir().expect("tempdir");
    let state_dir = state.path().join("state").to_str().expect("utf-8").to_owned();
    let d = Daemon::start(&["--state-dir", &state_dir]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let request = d.raise(&sid, &mut sse, Some("alice"), &format!("shell {EVIL}")).await;
    assert_eq!(request["toolCall"]["title"], format!("Run {EVIL}"));
    d.vote(&sid, &request_id(&request), Some("alice"), selected("reject_once")).await.ok();
    sse.until_type("turn_complete").await;
    let no_forged_line = |what: &str, text: &str| {
        assert_inert(what, text);
        for line in text.lines() {
            assert!(!line.starts_with("# Permission asked"), "{what}: a forged line {line:?} in\n{text}");
        }
    };

    let deadline = Instant::now() + WAIT;
    let csv = loop {
        let text = send(d.client().get(d.url("/audit?format=csv"))).await.text;
        if text.contains("Rejected") {
            break text;
        }
        assert!(Instant::now() < deadline, "the decision never reached the audit: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await; // polling what the store's writer commits
    };
    // Its rows end with CRLF (RFC 4180): the only carriage returns it may hold.
    no_forged_line("the CSV export", &csv.replace("\r\n", "\n"));
    assert_eq!(csv.lines().count(), 2, "the header and one row:\n{csv}");
    assert!(csv.contains(r"Run true\n# Permission asked: rm -rf ~\n> Permission asked: \u{1b}]52;c;cHduZWQ=\u{7}\u{202e}txt.exe"), "{csv}");
    let json = send(d.client().get(d.url("/audit?format=json"))).await.text;
    no_forged_line("the JSON export", &json);
    let entries: Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(entries[0]["toolCall"]["title"], format!("Run {EVIL}"), "the value is kept");

    let (code, md, err) = run(&["transcript", &sid, "--state-dir", &state_dir], &[]).await;
    assert_eq!(code, 0, "{err}");
    no_forged_line("mediatord transcript", &md);
    assert_eq!(md.lines().filter(|l| l.starts_with("> Permission asked")).count(), 1, "{md}");
    let (code, doc, err) =
        run(&["transcript", &sid, "--format", "json", "--state-dir", &state_dir], &[]).await;
    assert_eq!(code, 0, "{err}");
    assert_inert("mediatord transcript --format json", &doc);
    let doc: Value = serde_json::from_str(&doc).expect("JSON");

    // The web app's export of the same session (`web/history.js`), as the page would make it: its
    // modules from the source tree, with the `limits.js` the build adds to them.
    let modules = tempfile::tempdir().expect("a folder for the web app's modules");
    for entry in
        std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("web")).expect("web/")
    {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "js") {
            std::fs::copy(&path, modules.path().join(path.file_name().expect("a name"))).expect("copy");
        }
    }
    std::fs::write(modules.path().join("limits.js"), mediatord::bounds::limits_js()).expect("limits.js");
    let web = modules.path().join("history.js");
    let script = format!(
        "const {{ transcriptMarkdown }} = await import({}); \
         const doc = JSON.parse(process.argv[1]); \
         process.stdout.write(transcriptMarkdown(doc.session, doc.events, new Map()));",
        serde_json::to_string(&web.to_string_lossy()).expect("a path")
    );
    let out = tokio::process::Command::new("node")
        .args(["--input-type=module", "-e", &script, &doc.to_string()])
        .output()
        .await
        .expect("node");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let web_md = String::from_utf8_lossy(&out.stdout);
    no_forged_line("the web app's Markdown export", &web_md);
    assert_eq!(web_md.lines().filter(|l| l.starts_with("> Permission asked")).count(), 1, "{web_md}");
}

//! What only the SQLite store has (`docs/operations.md#the-state-directory`): the state
//! directory's modes and lock, its database file, `mediatord audit` reading it, and a database
//! from a newer mediatord. The store's behaviour itself is in `store.rs`, which also runs against
//! PostgreSQL (`tests/it_postgres.rs`); these stay here.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::Value;

use crate::store::{decided_request, eventually};
use crate::support::{Daemon, Sse, bin, http, selected, send, serve_refusal};
use crate::support::{Home, stop};

/// A daemon on `home`'s state directory with a session of alice's, and one write request per file
/// raised and allowed by her, in order: (the daemon, the session, alice's stream, the request ids).
async fn with_decisions(home: &Home, files: &[&str]) -> (Daemon, String, Sse, Vec<String>) {
    let d = home.start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[("X-Qwen-Client-Id", "alice".into())]).await;
    let mut rids = Vec::new();
    for file in files {
        rids.push(decided_request(&d, &sid, &mut sse, file).await);
    }
    (d, sid, sse, rids)
}

#[tokio::test]
async fn mediatord_audit_reads_the_trail_from_the_state_dir_while_the_daemon_runs() {
    let home = Home::new();
    let (_d, _sid, _sse, rids) = with_decisions(&home, &["a.txt", "b.txt", "c.txt"]).await;
    // The same trail through the command line, read-only while the daemon runs. Audit entries are
    // written behind (docs/protocol.md#145-durability-promise: committed within about 110 ms), so
    // the newest may not be on disk the moment its turn completes: read until all three are, for
    // at most 100 reads.
    let mut lines: Vec<Value> = Vec::new();
    for _ in 0..100 {
        let out = std::process::Command::new(bin())
            .args(["audit", "--json", "--state-dir", home.state.to_str().expect("utf-8")])
            .output()
            .expect("mediatord audit");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        lines = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect();
        if lines.len() >= rids.len() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let got: Vec<&str> = lines.iter().map(|e| e["requestId"].as_str().expect("id")).collect();
    assert_eq!(got, [rids[2].as_str(), rids[1].as_str(), rids[0].as_str()]);
    let table = std::process::Command::new(bin())
        .args(["audit", "--state-dir", home.state.to_str().expect("utf-8")])
        .output()
        .expect("mediatord audit");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.starts_with("REQUESTED"), "{text}");
    let allowed =
        |l: &&str| l.contains("Allowed once") && l.contains("operator · alice") && l.contains("vote");
    assert_eq!(text.lines().filter(allowed).count(), 3, "{text}");
}

/// `mediatord audit --json` on a state directory: its entries.
fn audit_lines(state: &Path) -> Vec<Value> {
    let out = std::process::Command::new(bin())
        .args(["audit", "--json", "--limit", "1000", "--state-dir", state.to_str().expect("utf-8")])
        .output()
        .expect("mediatord audit");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

/// A fresh state directory (0700) beside `home`'s holding `db` as its `state.db`, alone.
fn state_dir_with(home: &Home, name: &str, db: &Path) -> std::path::PathBuf {
    let dir = home.state.with_file_name(name);
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::copy(db, dir.join("state.db")).expect("copy");
    dir
}

/// Issue #29: after a clean stop a 737 KB `state.db-wal` stayed beside `state.db`, and a copy of
/// `state.db` alone had lost 10 of 11 audit entries. The stop checkpoints the WAL now.
#[tokio::test]
async fn after_a_clean_stop_state_db_copied_alone_has_every_audit_entry() {
    let home = Home::new();
    let files: Vec<String> = (0..11).map(|n| format!("f{n}.txt")).collect();
    let (d, _sid, sse, rids) =
        with_decisions(&home, &files.iter().map(String::as_str).collect::<Vec<_>>()).await;
    drop(sse);
    stop(d);
    let wal = home.state.join("state.db-wal");
    let wal_len = std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert_eq!(wal_len, 0, "the WAL is checkpointed and emptied at a clean stop");

    let copy = state_dir_with(&home, "copy", &home.state.join("state.db"));
    let lines = audit_lines(&copy);
    let mut got: Vec<&str> = lines.iter().map(|e| e["requestId"].as_str().expect("id")).collect();
    got.reverse();
    assert_eq!(got, rids.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(lines.iter().all(|e| e["status"] == "selected"), "decided, not pending: {lines:?}");
}

/// Issue #29: a session's transcript, exported from the command line as Markdown and as JSON.
#[tokio::test]
async fn mediatord_transcript_prints_a_recorded_session_as_markdown_or_json() {
    let home = Home::new();
    let (d, sid, sse, rids) = with_decisions(&home, &["a.txt"]).await;
    let rid = &rids[0];
    drop(sse);
    stop(d);
    let state = home.state.to_str().expect("utf-8");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(bin())
            .arg("transcript")
            .args(args)
            .args(["--state-dir", state])
            .output()
            .expect("mediatord transcript");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (status, md, stderr) = run(&[&sid]);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(md.starts_with(&format!("# Session {sid}\n")), "{md}");
    assert!(md.contains("(daemon_shutdown)"), "{md}");
    assert!(md.contains("## Prompt from alice\n\n    write a.txt x\n"), "{md}");
    assert!(md.contains("> Permission asked: "), "{md}");
    assert!(md.contains("> Decision: allow_once, by alice"), "{md}");

    let (status, json, _) = run(&[&sid, "--format", "json"]);
    assert_eq!(status, Some(0));
    let doc: Value = serde_json::from_str(&json).expect("one JSON document");
    assert_eq!(doc["session"]["sessionId"], sid.as_str());
    assert_eq!(doc["session"]["state"], "dormant");
    let events = doc["events"].as_array().expect("events");
    let ids: Vec<u64> = events.iter().filter_map(|e| e["id"].as_u64()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]) && !ids.is_empty(), "in id order: {ids:?}");
    assert!(
        events.iter().any(|e| e["type"] == "permission_resolved" && e["data"]["requestId"] == rid.as_str())
    );

    let (status, _, stderr) = run(&["never-was"]);
    assert_eq!(status, Some(2));
    assert!(stderr.contains("no session \"never-was\" in the history"), "{stderr}");
}

#[tokio::test]
async fn mediatord_backup_copies_a_running_daemons_database_whole_and_never_over_a_file() {
    let home = Home::new();
    let (d, _sid, _sse, rids) = with_decisions(&home, &["a.txt", "b.txt", "c.txt"]).await;
    // Committed (the daemon's own reads see them) before the copy is taken.
    eventually(&d, "/audit?outcome=selected", |b| b["entries"].as_array().is_some_and(|e| e.len() == 3))
        .await;
    let dest = home.state.with_file_name("backup.db");
    let state = home.state.to_str().expect("utf-8");
    let backup = |dest: &Path| {
        std::process::Command::new(bin())
            .args(["backup", dest.to_str().expect("utf-8"), "--state-dir", state])
            .output()
            .expect("mediatord backup")
    };
    let out = backup(&dest);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("bytes written to"), "{out:?}");
    assert_eq!(std::fs::metadata(&dest).expect("the copy").permissions().mode() & 0o777, 0o600);
    let names: Vec<String> = std::fs::read_dir(dest.parent().expect("parent"))
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains("partial") || n.starts_with("backup.db-")), "{names:?}");

    let restored = state_dir_with(&home, "restored", &dest);
    let got: Vec<String> =
        audit_lines(&restored).iter().map(|e| e["requestId"].as_str().expect("id").to_owned()).collect();
    assert_eq!(got, [rids[2].clone(), rids[1].clone(), rids[0].clone()]);

    // The daemon is untouched by it, and a second backup never writes over the first.
    assert_eq!(d.get("/health").await.status, 200);
    let before = std::fs::read(&dest).expect("read");
    let again = backup(&dest);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists already"), "{again:?}");
    assert_eq!(std::fs::read(&dest).expect("read"), before);
}

/// Issue #29: `mediatord audit` printed `selected vote:my phone` for both an allowed write and a
/// rejected deploy, and `--since` took only epoch milliseconds. Decisions read in words now, with
/// the device by its name, the same in the table and in the CSV export.
#[tokio::test]
async fn the_audit_reads_each_decision_in_words_in_the_table_and_the_csv_export() {
    let home = Home::new();
    let d = home.start(&[]);
    let sid = d.join("alice").await;
    let (device_id, credential) = d.pair_device(None, "my phone", "voter").await;
    let joined =
        send(http().post(d.url("/session")).bearer_auth(&credential).json(&serde_json::json!({}))).await;
    assert_eq!(joined.status, 200, "{}", joined.text);
    let mut sse = Sse::connect(&d, &sid, &[("X-Qwen-Client-Id", "alice".into())]).await;
    let decide = async |sse: &mut Sse, prompt: &str, voter: Option<&str>, body: Value| {
        let request = d.raise(&sid, sse, Some("alice"), prompt).await;
        let rid = request["requestId"].as_str().expect("requestId").to_owned();
        let path = format!("/session/{sid}/permission/{rid}");
        let reply = match voter {
            Some(credential) => send(http().post(d.url(&path)).bearer_auth(credential).json(&body)).await,
            None => d.vote(&sid, &rid, Some("alice"), body).await,
        };
        assert_eq!(reply.status, 200, "{}", reply.text);
        sse.until_type("turn_complete").await;
    };
    decide(&mut sse, "write a.txt x", Some(&credential), selected("allow_once")).await;
    decide(&mut sse, "shell =HYPERLINK(\"http://x\") && ./deploy.sh --prod", None, selected("reject_once"))
        .await;
    decide(&mut sse, "write b.txt y", None, serde_json::json!({"decision": "allow-session"})).await;
    eventually(&d, "/audit?outcome=selected", |b| b["entries"].as_array().is_some_and(|e| e.len() == 3))
        .await;

    let csv = d.get("/audit?format=csv").await;
    assert_eq!(csv.status, 200, "{}", csv.text);
    assert_eq!(csv.headers["content-type"], "text/csv; charset=utf-8");
    assert_eq!(csv.headers["content-disposition"], "attachment; filename=\"mediatord-audit.csv\"");
    let rows: Vec<&str> = csv.text.split("\r\n").collect();
    assert!(rows[0].starts_with("requested_at,decision,who,device_id,client_id,how,"), "{}", rows[0]);
    assert_eq!(rows.len(), 5, "a header, three rows, and the last line's end: {rows:?}");
    assert!(rows[1].contains(",Allowed for this session,operator · alice,,alice,vote,edit,"), "{}", rows[1]);
    assert!(rows[2].contains(",Rejected,operator · alice,,alice,vote,execute,"), "{}", rows[2]);
    assert!(rows[2].contains(",\"'=HYPERLINK(\"\"http://x\"\") && ./deploy.sh --prod\","), "{}", rows[2]);
    assert!(
        rows[3].contains(&format!(",Allowed once,my phone,{device_id},{device_id},vote,edit,")),
        "{}",
        rows[3]
    );
    let json = d.get("/audit?format=json&limit=2").await;
    assert_eq!(json.headers["content-disposition"], "attachment; filename=\"mediatord-audit.json\"");
    assert_eq!(json.body.as_array().map(Vec::len), Some(2), "{}", json.text);
    assert_eq!(json.body[0]["remembered"], "session");
    assert!(
        json.headers.contains_key("x-mediatord-next-cursor"),
        "the third is left out: {:?}",
        json.headers
    );

    let state = home.state.to_str().expect("utf-8");
    let table = |args: &[&str]| {
        let out = std::process::Command::new(bin())
            .args(["audit", "--state-dir", state])
            .args(args)
            .output()
            .expect("mediatord audit");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (status, text, _) = table(&["--since", "1h"]);
    assert_eq!(status, Some(0));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("REQUESTED") && lines[0].contains("DECISION"), "{text}");
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[1].contains("Allowed for this session") && lines[1].contains("operator · alice"), "{text}");
    assert!(lines[2].contains("Rejected ") && lines[2].contains("./deploy.sh --prod"), "{text}");
    assert!(lines[3].contains("Allowed once") && lines[3].contains("my phone"), "{text}");
    assert!(!text.contains(&device_id), "ids on demand only: {text}");
    assert!(table(&["--ids"]).1.contains(&format!("my phone ({device_id})")));
    // The command line's CSV is the export's, byte for byte.
    assert_eq!(table(&["--csv"]), (Some(0), csv.text.clone(), String::new()));
    let (_, future, _) = table(&["--since", "2999-01-01"]);
    assert_eq!(future.lines().count(), 1, "only the header: {future}");
    let (status, _, stderr) = table(&["--since", "yesterday"]);
    assert_eq!(status, Some(2));
    assert!(stderr.contains("--since") && stderr.contains("2d"), "{stderr}");
}

#[test]
fn a_state_dir_others_may_write_to_refuses_the_boot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let s = state.to_str().expect("utf-8");
    let (status, stderr) = serve_refusal(&["--agent", "demo", "--port", "0", "--state-dir", s], &[]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("group or others may read or write") && stderr.contains("chmod 700"), "{stderr}");
}

/// Issue #27: the docs say the state directory is `0700`; one that others may read (`0755`) was
/// accepted. It is refused now, like one they may write to.
#[test]
fn a_state_dir_others_may_read_refuses_the_boot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let s = state.to_str().expect("utf-8");
    let (status, stderr) = serve_refusal(&["--agent", "demo", "--port", "0", "--state-dir", s], &[]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("has mode 0755") && stderr.contains("chmod 700"), "{stderr}");
}

/// Issue #27, finding 13: a second daemon on a state directory in use refuses to boot (exit 2,
/// saying why) instead of marking the first one's pending requests abandoned; the first goes on.
#[tokio::test]
async fn a_second_daemon_on_a_state_dir_in_use_refuses_to_boot_and_the_first_goes_on() {
    let home = Home::new();
    let d = home.start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write later.txt still pending").await;
    let rid = request["requestId"].as_str().expect("requestId").to_owned();
    let state = home.state.to_str().expect("utf-8");
    let ws = home.workspace.to_str().expect("utf-8");
    let (status, stderr) =
        serve_refusal(&["--agent", "demo", "--port", "0", "--state-dir", state, "--workspace", ws], &[]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is in use by another mediatord"), "{stderr}");
    let audit = d.get(&format!("/audit?sessionId={sid}")).await.ok();
    assert_eq!(audit["entries"][0]["status"], "pending", "{audit}");
    assert_eq!(d.vote(&sid, &rid, Some("alice"), selected("allow_once")).await.status, 200);
    sse.until_type("turn_complete").await;
}

#[test]
fn a_new_state_dir_is_private() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("nested/state");
    let d = Daemon::start(&["--state-dir", state.to_str().expect("utf-8")]);
    let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join("state.db")), 0o600);
    drop(d);
}

#[test]
fn a_database_from_a_newer_mediatord_refuses_the_boot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let db = rusqlite::Connection::open(state.join("state.db")).expect("db");
    db.execute_batch(
        "CREATE TABLE schema_migrations(version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
         INSERT INTO schema_migrations VALUES (99, 0);",
    )
    .expect("a future schema");
    drop(db);
    let s = state.to_str().expect("utf-8");
    let (status, stderr) = serve_refusal(&["--agent", "demo", "--port", "0", "--state-dir", s], &[]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("schema version 99") && stderr.contains("newer"), "{stderr}");
}

/// Issue #44: a vote through a notification's link (to a target without a `clientId`) read
/// "operator · " in `mediatord audit` and the CSV, and a long voter id pushed the table's columns
/// out of line. The link's voter is `operator`, and every column is as wide as its widest cell.
#[tokio::test]
async fn a_link_vote_reads_operator_and_a_long_voter_id_keeps_the_audit_table_in_line() {
    let home = Home::new();
    let mut hook = crate::support::Receiver::start(&[]).await;
    let config = home.state.with_file_name("mediatord.json");
    let targets = serde_json::json!({"serve": {"notify": [{"url": hook.url("/hook")}]}});
    std::fs::write(&config, targets.to_string()).expect("write config");
    let d = home.start(&["--config", config.to_str().expect("utf-8")]);
    let long = "connect-5f0c9e59-46d7-4b3b-8d59-64fd0f1b40c2";
    let sid = d.join(long).await;
    let mut sse = Sse::connect(&d, &sid, &[("X-Qwen-Client-Id", long.into())]).await;
    d.raise(&sid, &mut sse, Some(long), "write linked.txt x").await;
    let link = hook.next().await.link("allow_once");
    assert_eq!(send(http().post(&link)).await.status, 200);
    sse.until_type("turn_complete").await;
    let request = d.raise(&sid, &mut sse, Some(long), "write voted.txt y").await;
    let rid = request["requestId"].as_str().expect("requestId");
    d.vote(&sid, rid, Some(long), selected("reject_once")).await.ok();
    sse.until_type("turn_complete").await;
    crate::support::eventually(
        || http().get(d.url("/audit")),
        |a: &Value| {
            a["entries"]
                .as_array()
                .is_some_and(|e| e.len() == 2 && e.iter().all(|e| e["status"] == "selected"))
        },
    )
    .await;

    let csv = send(http().get(d.url("/audit?format=csv"))).await.text;
    assert!(csv.contains(",Allowed once,operator,,,link,edit,"), "{csv}");
    assert!(csv.contains(&format!(",Rejected,operator · {long},,{long},vote,edit,")), "{csv}");
    let out = std::process::Command::new(bin())
        .args(["audit", "--state-dir", home.state.to_str().expect("utf-8")])
        .output()
        .expect("mediatord audit");
    let table = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[2].contains("Allowed once  operator  ") && lines[2].contains(" link "), "{table}");
    assert!(!lines[2].contains("operator · "), "no dangling separator: {table}");
    // Every row's POLICY and SESSION columns start where the header's do (in terminal columns).
    let column = |line: &str, needle: &str| {
        let at = line.find(needle).unwrap_or_else(|| panic!("{needle} in {line}"));
        line[..at].chars().count()
    };
    assert!(lines[1].contains(&format!("operator · {long}  vote ")), "{table}");
    for line in &lines[1..] {
        assert_eq!(column(line, "first-responder"), column(lines[0], "POLICY"), "{table}");
        assert_eq!(column(line, &sid), column(lines[0], "SESSION"), "{table}");
    }
}

/// `mediatord <args>` run to completion: (exit code, stdout, stderr).
fn mediatord(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(bin())
        .args(args)
        .env_remove("MEDIATORD_STATE_DIR")
        .output()
        .expect("run mediatord");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue #44: `mediatord audit` and `transcript` could not read a backup file: they wanted a state
/// directory. `--state-db FILE` reads one (so does a file given as `--state-dir`), and a file that
/// is not a mediatord database is refused saying so.
#[tokio::test]
async fn audit_and_transcript_read_a_backup_file_and_refuse_a_file_that_is_not_one() {
    let home = Home::new();
    let (d, sid, _sse, rids) = with_decisions(&home, &["a.txt", "b.txt"]).await;
    eventually(&d, "/audit?outcome=selected", |b| b["entries"].as_array().is_some_and(|e| e.len() == 2))
        .await;
    let backup = home.state.with_file_name("backup.db");
    let (backup_arg, state) = (backup.to_str().expect("utf-8"), home.state.to_str().expect("utf-8"));
    let (code, _, err) = mediatord(&["backup", backup_arg, "--state-dir", state]);
    assert_eq!(code, Some(0), "{err}");

    for flag in ["--state-db", "--state-dir"] {
        let (code, out, err) = mediatord(&["audit", "--json", flag, backup_arg]);
        assert_eq!(code, Some(0), "{flag}: {err}");
        let got: Vec<String> = out
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).expect("JSON")["requestId"].as_str().expect("id").to_owned()
            })
            .collect();
        assert_eq!(got, [rids[1].clone(), rids[0].clone()], "{flag}");
        let (code, out, err) = mediatord(&["transcript", &sid, flag, backup_arg]);
        assert_eq!(code, Some(0), "{flag}: {err}");
        assert!(out.contains("write a.txt") && out.contains("write b.txt"), "{flag}: {out}");
    }
    let (code, _, err) = mediatord(&["audit", "--state-db", backup_arg, "--state-dir", state]);
    assert_eq!(code, Some(2), "one or the other: {err}");

    // Not a database at all, and an SQLite database of something else.
    let text = home.state.with_file_name("notes.txt");
    std::fs::write(&text, "not a database, but long enough to have a header\n").expect("write");
    let other = home.state.with_file_name("other.db");
    rusqlite::Connection::open(&other).expect("sqlite").execute_batch("CREATE TABLE t(x)").expect("table");
    for (file, why) in
        [(&text, "it is not an SQLite database"), (&other, "an SQLite database without mediatord's tables")]
    {
        let file = file.to_str().expect("utf-8");
        for command in [vec!["audit", "--state-db", file], vec!["transcript", &sid, "--state-db", file]] {
            let (code, out, err) = mediatord(&command);
            assert_eq!((code, out.as_str()), (Some(2), ""), "{command:?}: {err}");
            assert_eq!(
                err.trim_end(),
                format!(
                    "mediatord {}: {file} is not a mediatord state database: {why} (give a state directory, its state.db, or a copy `mediatord backup` wrote)",
                    command[0]
                ),
            );
        }
    }
    let (code, _, err) =
        mediatord(&["audit", "--state-db", home.state.with_file_name("missing.db").to_str().expect("utf-8")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("missing.db") && err.contains("No such file"), "{err}");
}

/// The reviewer of [`mediatord_review_log_shows_what_each_reviewer_decided_and_why`]: it denies a
/// write of a file named `secret…` (its reason carries a comma and an escape sequence: the table
/// and the CSV must not pass either raw), escalates one named `ask…`, and allows the rest.
const JUDGE: &str = r#"
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    title = req.get("title") or ""
    if "secret" in title:
        verdict, why = "deny", "=secrets, \u001b[31mnever\u001b[0m written"
    elif "ask" in title:
        verdict, why = "escalate", "unsure: ask a person"
    else:
        verdict, why = "allow", "harmless"
    print(json.dumps({"id": req["id"], "verdict": verdict, "reason": why}), flush=True)
"#;

/// Issue #49: `mediatord review-log` shows, from the trail, what each reviewer decided and why —
/// a review that decided (an allow and a deny), one that only informed, one a person overruled —
/// newest first, filtered by verdict, effect and reviewer, as a table, JSON lines and CSV, paged
/// with a cursor; a bad filter is refused and says what it takes.
#[tokio::test]
async fn mediatord_review_log_shows_what_each_reviewer_decided_and_why() {
    let home = Home::new();
    let script = crate::support::reviewer_script("judge", JUDGE, "");
    let d = home.start(&["--reviewer", &script.spec, "--reviewer-trust", "judge=edit:decide"]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[("X-Qwen-Client-Id", "alice".into())]).await;
    d.turn(&sid, &mut sse, Some("alice"), "write fine.txt ok").await;
    d.turn(&sid, &mut sse, Some("alice"), "write secret.txt no").await;
    // Escalated, then allowed by alice; a read the judge is not trusted with, allowed by the judge
    // and rejected by alice: overruled.
    for (prompt, option) in [("write ask.txt ok", "allow_once"), ("look fine.txt", "reject_once")] {
        let rid = crate::support::request_id(&d.raise(&sid, &mut sse, Some("alice"), prompt).await);
        sse.until_type("permission_reviewed").await;
        assert_eq!(d.vote(&sid, &rid, Some("alice"), selected(option)).await.status, 200);
        sse.until_type("turn_complete").await;
    }
    assert!(home.workspace.join("fine.txt").exists() && home.workspace.join("ask.txt").exists());
    assert!(!home.workspace.join("secret.txt").exists());
    // Stopped: everything the daemon acknowledged is in the file.
    stop(d);
    let state = home.state.to_str().expect("utf-8");
    let log = |more: &[&str]| {
        let mut args = vec!["review-log", "--state-dir", state];
        args.extend_from_slice(more);
        mediatord(&args)
    };

    let (code, out, err) = log(&[]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "the header and four reviews: {out}");
    assert!(lines[0].starts_with("REVIEWED") && lines[0].ends_with("REASON"), "{out}");
    let row = |i: usize, words: &[&str]| {
        for w in words {
            assert!(lines[i].contains(w), "row {i} lacks {w:?}: {out}");
        }
    };
    row(1, &["judge", "allow", "overruled", "Rejected by operator · alice", "read", "harmless"]);
    row(
        2,
        &[
            "judge",
            "escalate",
            "informed",
            "Allowed once by operator · alice",
            "ask.txt",
            "unsure: ask a person",
        ],
    );
    row(3, &["judge", "deny", "decided", "Rejected by reviewer judge", "secret.txt"]);
    row(4, &["judge", "allow", "decided", "Allowed once by reviewer judge", "fine.txt", "harmless"]);
    assert!(lines[3].ends_with(r"=secrets, \u{1b}[31mnever\u{1b}[0m written"), "escaped: {out}");
    assert!(!out.contains('\u{1b}'), "no escape sequence reaches the terminal");

    let (code, out, _) = log(&["--verdict", "deny", "--json"]);
    assert_eq!(code, Some(0));
    let denied: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(denied.len(), 1, "{out}");
    let r = &denied[0];
    assert_eq!(
        (&r["reviewer"], &r["effect"], &r["outcome"], &r["decidedBy"], &r["sessionId"]),
        (
            &"judge".into(),
            &"decided".into(),
            &"Rejected".into(),
            &"reviewer judge".into(),
            &sid.as_str().into()
        ),
        "{r}"
    );
    assert_eq!(r["reason"], "=secrets, \u{1b}[31mnever\u{1b}[0m written", "the reviewer's words, whole");
    assert_eq!(r["toolCall"]["kind"], "edit");

    let (_, out, _) = log(&["--effect", "overruled"]);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("overruled") && !out.contains("decided "), "{out}");
    let (_, out, _) = log(&["--reviewer", "nobody"]);
    assert_eq!(out.lines().count(), 1, "only the header: {out}");

    let (_, csv, _) = log(&["--csv"]);
    let rows: Vec<&str> = csv.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(rows.len(), 5, "{csv}");
    assert!(rows[0].starts_with("reviewed_at,reviewer,verdict,effect,"), "{csv}");
    assert!(
        rows[3].contains(r#",judge,deny,decided,,"'=secrets, \u{1b}[31mnever\u{1b}[0m written",,Rejected,"#),
        "quoted, escaped, its formula defused: {csv}"
    );

    // Paged: one review, then where to go on; the cursor gives the next.
    let (code, out, err) = log(&["--limit", "1"]);
    assert_eq!((code, out.lines().count()), (Some(0), 2), "{out}{err}");
    assert!(out.contains("overruled"), "{out}");
    let cursor = err
        .trim_end()
        .strip_prefix("more: mediatord review-log --cursor ")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("where to go on: {err}"));
    let (_, out, _) = log(&["--limit", "1", "--cursor", cursor]);
    assert!(out.lines().nth(1).is_some_and(|l| l.contains("escalate")), "{out}");

    for (bad, says) in [
        (["--verdict", "maybe"], "mediatord review-log: unknown --verdict \"maybe\" (allow, deny, escalate)"),
        (
            ["--effect", "won"],
            "mediatord review-log: unknown --effect \"won\" (decided, informed, overruled, failed)",
        ),
    ] {
        let (code, out, err) = log(&bad);
        assert_eq!((code, out.as_str(), err.trim_end()), (Some(2), "", says));
    }
}

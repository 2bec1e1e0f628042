//! What a session changed (issue #42, `docs/protocol.md` § 18): each turn's change set as an event
//! and afterwards, the files nobody approved (event, audit, notification), rewinds, the workspace
//! diff, the file routes, and the user's repository left byte for byte as it was.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::*;

/// The events of one turn up to and including `turn_complete`.
async fn turn(d: &Daemon, sid: &str, sse: &mut Sse, text: &str) -> Vec<Event> {
    d.turn(sid, sse, Some("alice"), text).await
}

fn of_type<'a>(events: &'a [Event], kind: &str) -> Vec<&'a Event> {
    events.iter().filter(|e| e.event == kind).collect()
}

/// `turn_changes`'s files as (path, status, unapproved).
fn files(changes: &Value) -> Vec<(String, String, bool)> {
    changes["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| {
            (
                f["path"].as_str().expect("path").to_owned(),
                f["status"].as_str().expect("status").to_owned(),
                f["unapproved"].as_bool().expect("unapproved"),
            )
        })
        .collect()
}

fn triple(path: &str, status: &str, unapproved: bool) -> (String, String, bool) {
    (path.to_owned(), status.to_owned(), unapproved)
}

/// Runs a turn asking permission to write, and allows it.
async fn approved_write(d: &Daemon, sid: &str, sse: &mut Sse, text: &str) -> Vec<Event> {
    let request = d.raise(sid, sse, Some("alice"), text).await;
    let voted = d.vote(sid, &request_id(&request), Some("alice"), selected("allow_once")).await;
    assert_eq!(voted.status, 200, "{}", voted.text);
    sse.until_type("turn_complete").await
}

#[tokio::test]
async fn each_turns_changes_are_published_before_its_end_and_what_nobody_approved_is_marked() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;

    // Asked and allowed: approved.
    let events = approved_write(&d, &sid, &mut sse, "write notes/a.txt hello").await;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    let at = |k: &str| kinds.iter().position(|x| *x == k).unwrap_or_else(|| panic!("no {k} in {kinds:?}"));
    assert!(
        at("permission_resolved") < at("turn_changes") && at("turn_changes") < at("turn_complete"),
        "{kinds:?}"
    );
    let changes = of_type(&events, "turn_changes")[0];
    let first_prompt = changes.data["promptId"].as_str().expect("promptId").to_owned();
    assert_eq!(changes.payload()["promptId"], first_prompt.as_str());
    assert_eq!(files(changes.payload()), [triple("notes/a.txt", "added", false)]);
    assert_eq!(
        (
            &changes.payload()["filesChanged"],
            &changes.payload()["insertions"],
            &changes.payload()["unapprovedCount"]
        ),
        (&json!(1), &json!(1), &json!(0))
    );
    assert!(of_type(&events, "unapproved_change").is_empty());

    // Written unasked: by the agent itself, and by a command it ran.
    let events = turn(&d, &sid, &mut sse, "put b.txt nobody asked").await;
    let changes = of_type(&events, "turn_changes")[0].payload().clone();
    assert_eq!(files(&changes), [triple("b.txt", "added", true)]);
    assert_eq!(changes["turnIndex"], 1);
    let unapproved = of_type(&events, "unapproved_change");
    assert_eq!(unapproved.len(), 1);
    assert_eq!(unapproved[0].payload()["paths"], json!(["b.txt"]));
    assert_eq!(unapproved[0].payload()["sessionId"], sid.as_str());
    let second_prompt = unapproved[0].payload()["promptId"].as_str().expect("promptId").to_owned();

    let events = turn(&d, &sid, &mut sse, "run rm notes/a.txt && printf 'one\\ntwo\\n' > b.txt").await;
    let changes = of_type(&events, "turn_changes")[0].payload().clone();
    assert_eq!(files(&changes), [triple("b.txt", "modified", true), triple("notes/a.txt", "deleted", true)]);
    assert_eq!((&changes["insertions"], &changes["deletions"]), (&json!(2), &json!(2)));

    // A turn that changes nothing is recorded with an empty change set, and not announced.
    let events = turn(&d, &sid, &mut sse, "hello").await;
    assert!(of_type(&events, "turn_changes").is_empty(), "{events:?}");
    assert!(of_type(&events, "unapproved_change").is_empty());

    // Readable afterwards: the change sets with their marks, and qwen serve's rewind snapshots.
    let listed = d.get(&format!("/session/{sid}/turns")).await.ok();
    let turns = listed["turns"].as_array().expect("turns");
    assert_eq!(turns.len(), 4);
    assert_eq!(files(&turns[1]), [triple("b.txt", "added", true)]);
    assert_eq!((&turns[3]["turnIndex"], &turns[3]["filesChanged"]), (&json!(3), &json!(0)));
    let snapshots = d.get(&format!("/session/{sid}/rewind/snapshots")).await.ok();
    let snapshots = snapshots["snapshots"].as_array().expect("snapshots");
    let shown: Vec<(u64, &str, u64)> = snapshots
        .iter()
        .map(|s| {
            (
                s["turnIndex"].as_u64().expect("turnIndex"),
                s["promptId"].as_str().expect("promptId"),
                s["diffStats"]["filesChanged"].as_u64().expect("filesChanged"),
            )
        })
        .collect();
    assert_eq!(shown[..2], [(0, first_prompt.as_str(), 1), (1, second_prompt.as_str(), 1)]);
    assert!(snapshots[0]["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));

    // The audit has each turn's unapproved files.
    let url = d.url(&format!("/audit?sessionId={sid}&outcome=unapproved"));
    let audit =
        eventually(|| d.client().get(&url), |b| b["entries"].as_array().is_some_and(|e| e.len() == 2)).await;
    let entries = audit["entries"].as_array().expect("entries");
    let paths: Vec<&Value> = entries.iter().map(|e| &e["toolCall"]["paths"]).collect();
    assert_eq!(paths, [&json!(["b.txt", "notes/a.txt"]), &json!(["b.txt"])], "newest first");
    assert_eq!(entries[1]["promptId"], second_prompt.as_str());

    // One file's hunks in a turn, and the turn as a unified diff.
    let diff = d.get(&format!("/session/{sid}/turns/2/diff?path=b.txt")).await.ok();
    assert_eq!(diff["hunks"][0]["lines"], json!(["-nobody asked", "+one", "+two"]));
    let text = d.get(&format!("/session/{sid}/turns/2/diff?format=unified")).await;
    assert_eq!(text.header("content-type"), Some("text/x-diff; charset=utf-8"));
    assert!(
        text.text.contains("--- a/notes/a.txt\n+++ /dev/null\n@@ -1,1 +0,0 @@\n-hello\n"),
        "{}",
        text.text
    );
    assert_eq!(d.get(&format!("/session/{sid}/turns/9/diff")).await.pair().0, 404);
}

#[tokio::test]
async fn a_rewind_puts_files_back_refuses_what_was_changed_since_and_is_audited() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    std::fs::write(d.workspace.join("kept.txt"), "before\n").expect("fixture");
    let first = turn(&d, &sid, &mut sse, "put kept.txt changed").await;
    let prompt = first.last().expect("turn_complete").payload()["promptId"].as_str().expect("id").to_owned();
    turn(&d, &sid, &mut sse, "put new.txt made").await;
    // Someone edits a file the agent wrote, after the agent.
    std::fs::write(d.workspace.join("new.txt"), "edited by hand").expect("edit");

    let conflict =
        d.post(&format!("/session/{sid}/rewind"), Some("alice"), json!({"promptId": prompt})).await;
    assert_eq!(conflict.status, 409, "{}", conflict.text);
    assert_eq!(
        (&conflict.body["code"], &conflict.body["paths"]),
        (&json!("rewind_conflict"), &json!(["new.txt"]))
    );
    assert_eq!(
        std::fs::read_to_string(d.workspace.join("kept.txt")).expect("read"),
        "changed",
        "nothing changed"
    );

    let forced = d
        .post(&format!("/session/{sid}/rewind"), Some("alice"), json!({"promptId": prompt, "force": true}))
        .await;
    assert_eq!(forced.status, 200, "{}", forced.text);
    assert_eq!(
        forced.body,
        json!({"rewound": true, "targetTurnIndex": 0, "filesChanged": ["kept.txt", "new.txt"], "filesFailed": []})
    );
    assert_eq!(std::fs::read_to_string(d.workspace.join("kept.txt")).expect("read"), "before\n");
    assert!(!d.workspace.join("new.txt").exists());
    let rewound = sse.until_type("session_rewound").await.pop().expect("session_rewound");
    assert_eq!(rewound.payload()["filesChanged"], json!(["kept.txt", "new.txt"]));
    assert_eq!(rewound.payload()["clientId"], "alice");
    let url = d.url(&format!("/audit?sessionId={sid}&outcome=rewound"));
    let audit =
        eventually(|| d.client().get(&url), |b| b["entries"].as_array().is_some_and(|e| !e.is_empty())).await;
    let entry = &audit["entries"][0];
    assert_eq!(
        (&entry["voterClientId"], &entry["force"], &entry["promptId"]),
        (&json!("alice"), &json!(true), &json!(prompt))
    );

    // The rewind is a record of its own; the turns stay listed.
    let listed = d.get(&format!("/session/{sid}/turns")).await.ok();
    let kinds: Vec<&Value> = listed["turns"].as_array().expect("turns").iter().map(|t| &t["kind"]).collect();
    assert_eq!(kinds, [&Value::Null, &Value::Null, &json!("rewind")]);

    let bad = d.post(&format!("/session/{sid}/rewind"), None, json!({"promptId": "nope"})).await;
    assert_eq!((bad.status, bad.body["code"].as_str()), (400, Some("invalid_rewind_target")));
    let missing = d.post(&format!("/session/{sid}/rewind"), None, json!({})).await;
    assert_eq!((missing.status, missing.body["code"].as_str()), (400, Some("missing_prompt_id")));
    let flag = d
        .post(&format!("/session/{sid}/rewind"), None, json!({"promptId": prompt, "rewindFiles": false}))
        .await;
    assert_eq!((flag.status, flag.body["code"].as_str()), (400, Some("invalid_rewind_flag")));
    let gone = d.post("/session/nope/rewind", None, json!({"promptId": prompt})).await;
    assert_eq!((gone.status, gone.body["code"].as_str()), (404, Some("session_not_found")));
}

#[tokio::test]
async fn a_rewind_while_a_turn_runs_is_refused_and_changes_nothing() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let first = turn(&d, &sid, &mut sse, "put a.txt one").await;
    let prompt = first.last().expect("turn_complete").payload()["promptId"].as_str().expect("id").to_owned();
    d.prompt_async(&sid, Some("alice"), "stall").await;
    let busy = d.post(&format!("/session/{sid}/rewind"), None, json!({"promptId": prompt})).await;
    assert_eq!((busy.status, busy.body["code"].as_str()), (409, Some("session_busy")));
    assert_eq!(busy.header("retry-after"), Some("5"));
    assert_eq!(std::fs::read_to_string(d.workspace.join("a.txt")).expect("read"), "one");
    assert_eq!(d.post(&format!("/session/{sid}/cancel"), None, json!({})).await.status, 204);
    sse.until_type("turn_complete").await;
}

#[tokio::test]
async fn an_observer_may_read_the_changes_and_may_not_rewind() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let first = turn(&d, &sid, &mut sse, "put a.txt one").await;
    let prompt = first.last().expect("turn_complete").payload()["promptId"].as_str().expect("id").to_owned();
    let (_, observer) = d.pair_device(None, "wall screen", "observer").await;
    let read = send(http().get(d.url(&format!("/session/{sid}/turns"))).bearer_auth(&observer)).await;
    assert_eq!(read.status, 200, "{}", read.text);
    let refused = send(
        http()
            .post(d.url(&format!("/session/{sid}/rewind")))
            .bearer_auth(&observer)
            .json(&json!({"promptId": prompt})),
    )
    .await;
    assert_eq!((refused.status, refused.body["code"].as_str()), (403, Some("read_only_device")));
    let (_, voter) = d.pair_device(None, "my phone", "voter").await;
    let done = send(
        http()
            .post(d.url(&format!("/session/{sid}/rewind")))
            .bearer_auth(&voter)
            .json(&json!({"promptId": prompt})),
    )
    .await;
    assert_eq!(done.status, 200, "{}", done.text);
    assert!(!d.workspace.join("a.txt").exists());
    let url = d.url(&format!("/audit?sessionId={sid}&outcome=rewound"));
    let audit =
        eventually(|| d.client().get(&url), |b| b["entries"].as_array().is_some_and(|e| !e.is_empty())).await;
    assert_eq!(audit["entries"][0]["voterDeviceName"], "my phone", "the audit names who rewound");
}

#[tokio::test]
async fn files_nobody_approved_are_notified_to_the_targets_of_permission_requests() {
    let mut hook = Receiver::start(&[]).await;
    let (d, _cfg) =
        daemon_notifying(json!([{"url": hook.url("/hook"), "events": ["permission_request"]}]), &[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    turn(&d, &sid, &mut sse, "put sneaky.txt unasked").await;
    let got = hook.next().await;
    assert_eq!(got.header("x-mediatord-event"), "unapproved_change");
    assert_eq!(got.body["data"]["paths"], json!(["sneaky.txt"]));
    assert_eq!(got.body["sessionId"], sid.as_str());
}

/// The turn's notification says what it changed (its change set's stats); a turn that only talked
/// says nothing of changes.
#[tokio::test]
async fn a_turns_notification_carries_its_change_sets_stats() {
    let mut hook = Receiver::start(&[]).await;
    let (d, _cfg) = daemon_notifying(json!([{"url": hook.url("/hook"), "events": ["turn_complete"]}]), &[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    turn(&d, &sid, &mut sse, "put two.txt a\nb").await;
    let got = hook.next().await;
    assert_eq!(got.header("x-mediatord-event"), "turn_complete");
    let changes = &got.body["data"]["changes"];
    assert_eq!(
        (
            &changes["filesChanged"],
            &changes["insertions"],
            &changes["unapprovedCount"],
            &changes["turnIndex"]
        ),
        (&json!(1), &json!(1), &json!(1), &json!(0)),
        "{}",
        got.body
    );
    assert!(changes.get("files").is_none(), "the stats, not the files: {changes}");
    turn(&d, &sid, &mut sse, "hello").await;
    let talked = hook.next().await;
    assert!(talked.body["data"].get("changes").is_none(), "{}", talked.body);
}

#[tokio::test]
async fn with_no_snapshots_there_is_no_change_set_and_no_rewind() {
    let d = Daemon::start(&["--no-snapshots"]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let events = turn(&d, &sid, &mut sse, "put a.txt x").await;
    assert!(of_type(&events, "turn_changes").is_empty());
    let listed = d.get(&format!("/session/{sid}/turns")).await.ok();
    assert_eq!((listed["turns"].as_array().map(Vec::len), &listed["snapshots"]), (Some(0), &json!(false)));
    let refused = d.post(&format!("/session/{sid}/rewind"), None, json!({"promptId": "x"})).await;
    assert_eq!((refused.status, refused.body["code"].as_str()), (503, Some("changes_unavailable")));
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Everything of a repository a daemon must leave as it was: the index's bytes, every ref, the
/// stash, HEAD, the status.
fn repository_state(ws: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let git_dir = ws.join(".git");
    let mut todo = vec![git_dir.clone()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).expect("read .git") {
            let path = entry.expect("entry").path();
            let rel = path.strip_prefix(&git_dir).expect("under .git").to_string_lossy().into_owned();
            if path.is_dir() {
                if rel != "objects" {
                    todo.push(path);
                }
            } else {
                out.push((rel, std::fs::read(&path).expect("read")));
            }
        }
    }
    // `--no-optional-locks`: this check's own `git status` would otherwise refresh the index's
    // stat cache and write it, which is the change it looks for.
    let status = git(ws, &["--no-optional-locks", "status", "--porcelain=v2", "--untracked-files=all"]);
    out.push(("status".into(), status.into_bytes()));
    out.push(("stash".into(), git(ws, &["stash", "list"]).into_bytes()));
    out.sort();
    out
}

#[tokio::test]
async fn the_users_repository_is_left_byte_for_byte_as_it_was() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("tracked.txt"), "one\ntwo\n").expect("fixture");
    std::fs::write(ws.join(".gitignore"), "ignored/\n").expect("fixture");
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-q", "-m", "first"]);
    std::fs::write(ws.join("tracked.txt"), "one\nTWO\n").expect("stash me");
    git(&ws, &["stash", "-q"]);
    let d = Daemon::start_with(&ws, &[], &[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    // Stat-dirty on purpose: a `git status` here would refresh the index's stat cache and write it.
    std::fs::write(ws.join("tracked.txt"), "one\ntwo\n").expect("same content, new stat");
    let before = repository_state(&ws);
    let clean = d.get("/workspace/git/diff").await.ok();
    assert_eq!((&clean["filesCount"], &clean["files"]), (&json!(0), &json!([])), "same content: no change");

    let first = turn(&d, &sid, &mut sse, "run printf 'one\\nthree\\n' > tracked.txt").await;
    let prompt = first.last().expect("turn_complete").payload()["promptId"].as_str().expect("id").to_owned();
    turn(&d, &sid, &mut sse, "put ignored/x.txt not snapshotted").await;
    turn(&d, &sid, &mut sse, "put fresh.txt untracked").await;

    let diff = d.get("/workspace/git/diff").await.ok();
    assert_eq!(
        (&diff["available"], &diff["base"], &diff["filesCount"]),
        (&json!(true), &json!("head"), &json!(2))
    );
    let listed: Vec<(&str, u64, u64, bool)> = diff["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| {
            (
                f["path"].as_str().expect("path"),
                f["added"].as_u64().expect("added"),
                f["removed"].as_u64().expect("removed"),
                f["isUntracked"].as_bool().expect("isUntracked"),
            )
        })
        .collect();
    assert_eq!(listed, [("fresh.txt", 1, 0, true), ("tracked.txt", 1, 1, false)]);
    assert_eq!(diff["workspaceCwd"], ws.to_str().expect("utf-8"));
    let hunks = d.get("/workspace/git/diff/file?path=tracked.txt").await.ok();
    assert_eq!(hunks["hunks"][0]["lines"], json!([" one", "-two", "+three"]));
    let unchanged = d.get("/workspace/git/diff/file?path=.gitignore").await.ok();
    assert_eq!((&unchanged["available"], &unchanged["hunks"]), (&json!(false), &json!([])));
    let encoded = ws.to_str().expect("utf-8").replace('/', "%2F");
    let named = d.get(&format!("/workspaces/{encoded}/git/diff")).await.ok();
    assert_eq!(named["filesCount"], 2);

    let rewound = d.post(&format!("/session/{sid}/rewind"), None, json!({"promptId": prompt})).await;
    assert_eq!(rewound.status, 200, "{}", rewound.text);
    assert_eq!(std::fs::read_to_string(ws.join("tracked.txt")).expect("read"), "one\ntwo\n");
    assert!(!ws.join("fresh.txt").exists());
    assert_eq!(d.get("/workspace/git/diff").await.ok()["filesCount"], 0);

    let after = repository_state(&ws);
    let differ: Vec<&String> = before.iter().zip(&after).filter(|(b, a)| b != a).map(|(b, _)| &b.0).collect();
    assert_eq!(before.len(), after.len(), "files under .git came or went");
    assert!(differ.is_empty(), "changed in the user's repository: {differ:?}");
    // And the store is nowhere in the workspace.
    assert!(!ws.join(".git/mediatord").exists());
}

#[tokio::test]
async fn in_a_plain_directory_the_workspace_diff_compares_with_the_first_snapshot_of_its_session() {
    let d = Daemon::start(&[]);
    std::fs::write(d.workspace.join("a.txt"), "a\n").expect("fixture");
    let none = d.get("/workspace/git/diff").await.ok();
    assert_eq!(
        (&none["available"], &none["base"], &none["files"]),
        (&json!(false), &json!("none"), &json!([]))
    );
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    turn(&d, &sid, &mut sse, "put a.txt b").await;
    turn(&d, &sid, &mut sse, "put c.txt c").await;
    let diff = d.get("/workspace/git/diff").await.ok();
    assert_eq!(
        (&diff["available"], &diff["base"], &diff["filesCount"]),
        (&json!(true), &json!("snapshot"), &json!(2))
    );
    let files: Vec<(&str, &Value, &Value)> = diff["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| (f["path"].as_str().unwrap_or_default(), &f["isUntracked"], &f["isDeleted"]))
        .collect();
    let (no, yes) = (json!(false), json!(true));
    assert_eq!(files, [("a.txt", &no, &no), ("c.txt", &yes, &no)], "c.txt is new since the snapshot");
    let hunks = d.get("/workspace/git/diff/file?path=a.txt").await.ok();
    assert_eq!(hunks["hunks"][0]["lines"], json!(["-a", "+b"]));
    for bad in ["../etc/passwd", "/etc/passwd"] {
        let r = d.get(&format!("/workspace/git/diff/file?path={bad}")).await;
        assert_eq!((r.status, r.body["code"].as_str()), (400, Some("path_outside_workspace")), "{bad}");
    }
}

#[tokio::test]
async fn the_file_routes_read_write_and_edit_with_hashes_and_refuse_stale_ones() {
    let d = Daemon::start(&[]);
    let ws = &d.workspace;
    std::fs::write(ws.join("a.txt"), "one\r\ntwo\r\nthree\r\n").expect("fixture");
    let read = d.get("/file?path=a.txt").await.ok();
    assert_eq!(
        (&read["kind"], &read["content"], &read["lineEnding"], &read["encoding"], &read["sizeBytes"]),
        (&json!("file"), &json!("one\r\ntwo\r\nthree\r\n"), &json!("crlf"), &json!("utf-8"), &json!(17))
    );
    let hash = read["hash"].as_str().expect("hash").to_owned();
    assert!(hash.starts_with("sha256:") && hash.len() == 71);
    let page = d.get("/file?path=a.txt&limit=1").await.ok();
    assert_eq!((&page["content"], &page["hasMore"]), (&json!("one\r\n"), &json!(true)));
    let cursor = page["nextCursor"].as_str().expect("cursor");
    let next = d.get(&format!("/file?path=a.txt&cursor={cursor}&limit=5")).await.ok();
    assert_eq!((&next["content"], &next["hasMore"]), (&json!("two\r\nthree\r\n"), &json!(false)));

    let edited = d
        .post(
            "/file/edit",
            None,
            json!({"path": "a.txt", "oldText": "two", "newText": "2", "expectedHash": hash}),
        )
        .await;
    assert_eq!(edited.status, 200, "{}", edited.text);
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).expect("read"), "one\r\n2\r\nthree\r\n");
    let stale = d
        .post(
            "/file/write",
            None,
            json!({"path": "a.txt", "content": "x", "mode": "replace", "expectedHash": hash}),
        )
        .await;
    assert_eq!(
        (stale.status, stale.body["code"].as_str(), stale.body["errorKind"].as_str()),
        (409, Some("hash_mismatch"), Some("hash_mismatch"))
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).expect("read"),
        "one\r\n2\r\nthree\r\n",
        "not written"
    );
    let fresh = edited.body["hash"].as_str().expect("hash");
    let replaced = d
        .post(
            "/file/write",
            None,
            json!({"path": "a.txt", "content": "x\ny\n", "mode": "replace", "expectedHash": fresh}),
        )
        .await;
    assert_eq!((replaced.status, &replaced.body["created"]), (200, &json!(false)));
    assert_eq!(
        std::fs::read(ws.join("a.txt")).expect("read"),
        b"x\r\ny\r\n",
        "the file's line endings are kept"
    );
    let created =
        d.post("/file/write", None, json!({"path": "new/b.txt", "content": "b", "mode": "create"})).await;
    assert_eq!((created.status, &created.body["created"]), (201, &json!(true)));
    let again =
        d.post("/file/write", None, json!({"path": "new/b.txt", "content": "b", "mode": "create"})).await;
    assert_eq!((again.status, again.body["code"].as_str()), (409, Some("file_already_exists")));

    let stat = d.get("/stat?path=new").await.ok();
    assert_eq!((&stat["type"], &stat["path"]), (&json!("directory"), &json!("new")));
    let list = d.get("/list?path=.").await.ok();
    let names: Vec<&str> =
        list["entries"].as_array().expect("entries").iter().filter_map(|e| e["name"].as_str()).collect();
    assert_eq!(names, ["a.txt", "new"]);
    let glob = d.get("/glob?pattern=**/*.txt").await.ok();
    assert_eq!((&glob["matches"], &glob["count"]), (&json!(["a.txt", "new/b.txt"]), &json!(2)));
    let bytes = d.get("/file/bytes?path=a.txt&offset=1&maxBytes=2").await.ok();
    assert_eq!(
        (&bytes["contentBase64"], &bytes["truncated"], bytes.get("hash")),
        (&json!("DQo="), &json!(true), None)
    );
}

/// qwen serve's `/workspaces/{workspace}/…` form of each file and diff route (the workspace an
/// absolute path, URL-encoded) answers as the route without it does for the primary workspace; a
/// workspace the daemon does not serve, or a relative one, is refused before anything is read or
/// written.
#[tokio::test]
async fn each_file_route_answers_the_same_in_a_named_workspace() {
    let d = Daemon::start(&[]);
    let ws = &d.workspace;
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").expect("fixture");
    std::fs::create_dir(ws.join("sub")).expect("fixture");
    let named = format!("/workspaces/{}", ws.to_str().expect("utf-8").replace('/', "%2F"));
    let reads = [
        "/file?path=a.txt",
        "/file/bytes?path=a.txt&offset=1&maxBytes=2",
        "/stat?path=sub",
        "/list?path=.",
        "/glob?pattern=*.txt",
        "/workspace/git/diff",
        "/file?path=../outside",
    ];
    for route in reads {
        let mut primary = d.get(route).await;
        let there = route
            .strip_prefix("/workspace/")
            .map_or_else(|| format!("{named}{route}"), |r| format!("{named}/{r}"));
        let mut in_named = d.get(&there).await;
        // A glob says how long it took: the one field that may differ.
        for answer in [&mut primary.body, &mut in_named.body] {
            answer.as_object_mut().map(|o| o.remove("durationMs"));
        }
        assert_eq!((in_named.status, &in_named.body), (primary.status, &primary.body), "{there}");
        assert!(primary.status == 200 || route.contains("outside"), "{route}: {}", primary.text);
    }
    let hash = d.get("/file?path=a.txt").await.ok()["hash"].as_str().expect("hash").to_owned();
    let edit = json!({"path": "a.txt", "oldText": "two", "newText": "2", "expectedHash": hash});
    let edited = d.post(&format!("{named}/file/edit"), None, edit).await;
    assert_eq!(edited.status, 200, "{}", edited.text);
    let write = json!({"path": "sub/b.txt", "content": "b", "mode": "create"});
    let written = d.post(&format!("{named}/file/write"), None, write.clone()).await;
    assert_eq!((written.status, &written.body["created"]), (201, &json!(true)), "{}", written.text);
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).expect("read"), "one\n2\n");
    assert_eq!(std::fs::read_to_string(ws.join("sub/b.txt")).expect("read"), "b");

    let elsewhere = tempfile::tempdir().expect("tempdir");
    let other = format!("/workspaces/{}", elsewhere.path().to_str().expect("utf-8").replace('/', "%2F"));
    for (route, code) in [
        (format!("{other}/file?path=x"), "workspace_mismatch"),
        (format!("{other}/git/diff"), "workspace_mismatch"),
        ("/workspaces/relative%2Fpath/list?path=.".to_owned(), "invalid_cwd"),
    ] {
        let r = d.get(&route).await;
        assert_eq!((r.status, r.body["code"].as_str()), (400, Some(code)), "{route}: {}", r.text);
    }
    let refused = d.post(&format!("{other}/file/write"), None, write).await;
    assert_eq!((refused.status, refused.body["code"].as_str()), (400, Some("workspace_mismatch")));
    assert!(!elsewhere.path().join("sub").exists(), "nothing written there");
}

#[tokio::test]
async fn the_file_routes_refuse_paths_outside_binary_and_huge_files_with_clear_errors() {
    let d = Daemon::start(&[]);
    let ws = &d.workspace;
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("secret"), "s").expect("fixture");
    std::os::unix::fs::symlink(outside.path(), ws.join("out")).expect("symlink");
    std::os::unix::fs::symlink(outside.path().join("secret"), ws.join("link")).expect("symlink");
    std::fs::write(ws.join("bin.dat"), [0u8, 1, 2, 255]).expect("fixture");
    // A 100 MiB file, sparse: nothing but its size is written.
    std::fs::File::create(ws.join("huge.log")).and_then(|f| f.set_len(100 << 20)).expect("sparse");
    let cases = [
        ("/file?path=../secret", 400, "path_outside_workspace"),
        ("/file?path=%2Fetc%2Fpasswd", 400, "path_outside_workspace"),
        ("/file?path=out/secret", 400, "path_outside_workspace"),
        ("/file?path=link", 400, "path_outside_workspace"),
        ("/list?path=out", 400, "path_outside_workspace"),
        ("/stat?path=../..", 400, "path_outside_workspace"),
        ("/file?path=bin.dat", 422, "binary_file"),
        ("/file?path=huge.log", 413, "file_too_large"),
        ("/file?path=missing.txt", 404, "path_not_found"),
        ("/file", 400, "parse_error"),
        ("/file?path=a&maxBytes=0", 400, "parse_error"),
        ("/file?path=a&limit=2001", 400, "parse_error"),
        ("/glob?pattern=../*", 400, "parse_error"),
        ("/glob?pattern=%2Fetc%2F*", 400, "parse_error"),
    ];
    for (route, status, code) in cases {
        let r = d.get(route).await;
        assert_eq!((r.status, r.body["code"].as_str()), (status, Some(code)), "{route}: {}", r.text);
        assert_eq!(r.body["errorKind"].as_str(), Some(code), "{route}");
    }
    let writes = [
        (json!({"path": "../x", "content": "x", "mode": "create"}), 400, "path_outside_workspace"),
        (json!({"path": "out/x", "content": "x", "mode": "create"}), 400, "path_outside_workspace"),
        (json!({"path": "x", "content": "x", "mode": "replace"}), 400, "parse_error"),
        (json!({"path": "x", "content": "x", "mode": "append"}), 400, "parse_error"),
        (
            json!({"path": "x", "content": "x", "mode": "replace", "expectedHash": "md5:1"}),
            400,
            "parse_error",
        ),
        (
            json!({"path": "x", "content": "x".repeat(5 * 1024 * 1024 + 1), "mode": "create"}),
            413,
            "file_too_large",
        ),
    ];
    for (body, status, code) in writes {
        let r = d.post("/file/write", None, body.clone()).await;
        assert_eq!((r.status, r.body["code"].as_str()), (status, Some(code)), "{body:.80}: {}", r.text);
    }
    assert_eq!(std::fs::read_dir(outside.path()).expect("read").count(), 1, "nothing was written outside");
    // The bytes of the huge file are read in windows.
    let window = d.get("/file/bytes?path=huge.log&offset=1000&maxBytes=4").await.ok();
    assert_eq!((&window["contentBase64"], &window["sizeBytes"]), (&json!("AAAAAA=="), &json!(100u64 << 20)));
    // A snapshot records the huge file by its stat, and a turn still gets its change set.
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let events = turn(&d, &sid, &mut sse, "run truncate -s 1 huge.log").await;
    let changes = of_type(&events, "turn_changes")[0].payload().clone();
    assert_eq!(changes["files"][0]["path"], "huge.log");
    assert_eq!(
        (&changes["files"][0]["truncated"], &changes["files"][0]["status"]),
        (&json!(true), &json!("modified"))
    );
}

#[tokio::test]
async fn change_sets_marks_and_audit_survive_a_restart_and_a_resumed_session_rewinds() {
    let home = Home::new();
    let d = home.start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let first = turn(&d, &sid, &mut sse, "put a.txt unasked").await;
    let prompt = first.last().expect("turn_complete").payload()["promptId"].as_str().expect("id").to_owned();
    turn(&d, &sid, &mut sse, "run rm a.txt").await;
    drop(sse);
    stop(d);

    let d = home.start(&[]);
    let listed = d.get(&format!("/session/{sid}/turns")).await.ok();
    let turns = listed["turns"].as_array().expect("turns");
    assert_eq!(turns.len(), 2, "{listed}");
    assert_eq!(files(&turns[0]), [triple("a.txt", "added", true)]);
    assert_eq!(files(&turns[1]), [triple("a.txt", "deleted", true)]);
    let snapshots = d.get(&format!("/session/{sid}/rewind/snapshots")).await.ok();
    assert_eq!(snapshots["snapshots"][0]["promptId"], prompt.as_str());
    let audit = d.get(&format!("/audit?sessionId={sid}&outcome=unapproved")).await.ok();
    assert_eq!(audit["entries"].as_array().map(Vec::len), Some(2));
    // The event itself is in the history too.
    let replayed = Sse::connect(&d, &sid, &[]).await.until_type("replay_complete").await;
    assert_eq!(of_type(&replayed, "unapproved_change").len(), 2);

    // Resumed, the session rewinds to before its first turn: a.txt was not there.
    std::fs::write(home.workspace.join("a.txt"), "unasked").expect("as the first turn left it");
    let resumed = d.post(&format!("/session/{sid}/resume"), None, json!({})).await;
    assert_eq!(resumed.status, 200, "{}", resumed.text);
    let conflict = d.post(&format!("/session/{sid}/rewind"), None, json!({"promptId": prompt})).await;
    assert_eq!((conflict.status, &conflict.body["paths"]), (409, &json!(["a.txt"])), "{}", conflict.text);
    std::fs::remove_file(home.workspace.join("a.txt")).expect("as the last turn left it");
    let done = d.post(&format!("/session/{sid}/rewind"), None, json!({"promptId": prompt})).await;
    assert_eq!((done.status, &done.body["filesChanged"]), (200, &json!([])), "{}", done.text);
}

#[tokio::test]
async fn mediatord_diff_prints_a_turns_diff_and_the_workspaces() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    turn(&d, &sid, &mut sse, "put a.txt one").await;
    turn(&d, &sid, &mut sse, "run printf 'one\\ntwo\\n' > a.txt").await;
    turn(&d, &sid, &mut sse, "hello").await;

    // The last turn that changed a file, not the last turn.
    let (code, out, err) = super::attach::run(&["diff", &sid, "--url", &d.base]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "--- a/a.txt\n+++ b/a.txt\n@@ -1,1 +1,2 @@\n-one\n+one\n+two\n");
    let (code, out, err) = super::attach::run(&["diff", &sid, "--turn", "0", "--url", &d.base]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "--- a/a.txt\n+++ b/a.txt\n@@ -0,0 +1,1 @@\n+one\n");
    let (code, _, err) = super::attach::run(&["diff", &sid, "--turn", "9", "--url", &d.base]).await;
    assert_eq!(code, 1);
    assert!(err.contains("has no turn 9"), "{err}");
    // Without a session: the plain workspace against its session's first snapshot.
    let (code, out, err) = super::attach::run(&["diff", "--url", &d.base]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "--- a/a.txt\n+++ b/a.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n");
}

/// A tmpfs of `bytes` mounted on `dir` (this machine's root mounts it), unmounted on drop: a disk
/// that fills.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: &Path, bytes: u64) -> SmallDisk {
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes},mode=0755"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(status.success(), "this test mounts a small tmpfs (as root, as CI runs): mount failed");
        SmallDisk(dir.to_path_buf())
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Issue #42's bad input: a rewind on a full disk puts back what fits, says which file it could
/// not and why (`rewound: false`), leaves that file as it was (never half written), and a rewind
/// once there is room again puts it back.
#[tokio::test]
async fn a_rewind_on_a_full_disk_says_which_files_failed_and_half_restores_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical").join("ws");
    std::fs::create_dir(&ws).expect("ws");
    let _disk = SmallDisk::mount(&ws, 1024 * 1024);
    let big = "x".repeat(400 * 1024);
    std::fs::write(ws.join("big.txt"), &big).expect("a big file before the session");
    let d = Daemon::start_with(&ws, &[], &[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let first = turn(&d, &sid, &mut sse, "put big.txt small now").await;
    let prompt = first.last().expect("turn_complete").payload()["promptId"].as_str().expect("id").to_owned();
    turn(&d, &sid, &mut sse, "put other.txt made").await;
    // Someone fills the disk: the big file's old content no longer fits.
    let mut filler = std::fs::File::create(ws.join("filler.bin")).expect("filler");
    let chunk = vec![0u8; 64 * 1024];
    while std::io::Write::write_all(&mut filler, &chunk).is_ok() {}
    drop(filler);

    let full = d.post(&format!("/session/{sid}/rewind"), Some("alice"), json!({"promptId": prompt})).await;
    assert_eq!(full.status, 200, "{}", full.text);
    assert_eq!(
        (&full.body["rewound"], &full.body["filesChanged"]),
        (&json!(false), &json!(["other.txt"])),
        "{}",
        full.text
    );
    let failed = full.body["filesFailed"].as_array().expect("filesFailed");
    assert!(
        failed.len() == 1
            && failed[0].as_str().is_some_and(|f| f.starts_with("big.txt: ") && f.contains("space")),
        "which file, and why: {}",
        full.text
    );
    assert_eq!(std::fs::read_to_string(ws.join("big.txt")).expect("read"), "small now", "left as it was");
    assert!(!ws.join("other.txt").exists(), "what fits is put back");
    let names: Vec<String> = std::fs::read_dir(&ws)
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    assert!(
        names.iter().all(|n| ["big.txt", "filler.bin"].contains(&n.as_str())),
        "no temporary file left: {names:?}"
    );

    std::fs::remove_file(ws.join("filler.bin")).expect("room again");
    let again = d
        .post(&format!("/session/{sid}/rewind"), Some("alice"), json!({"promptId": prompt, "force": true}))
        .await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.body["rewound"], true, "{}", again.text);
    assert_eq!(std::fs::read_to_string(ws.join("big.txt")).expect("read"), big);
    drop(d);
}

//! A fleet (issue #33, `docs/operations.md#a-fleet`): two or three real daemons on one throwaway
//! PostgreSQL (`support::postgres`), a client talking to whichever it likes.

use serde_json::{Value, json};

use crate::support::postgres::Postgres;
use crate::support::*;

/// The lease the daemons of these tests hold: the shortest allowed, so a killed daemon is dead
/// within a second or so.
const LEASE_MS: &str = "1000";

struct Fleet {
    workspace: std::path::PathBuf,
    store: String,
    _dir: tempfile::TempDir,
}

impl Fleet {
    fn new(pg: &Postgres) -> Fleet {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = std::fs::canonicalize(dir.path()).expect("canonical");
        Fleet { workspace, store: pg.fresh_database(), _dir: dir }
    }

    /// A daemon of the fleet, with `args` more.
    fn daemon(&self, args: &[&str]) -> Daemon {
        let mut full = vec!["--store", self.store.as_str(), "--node-lease-ms", LEASE_MS];
        full.extend(args);
        Daemon::start_with(&self.workspace, &full, &[])
    }

    fn sessions_path(&self) -> String {
        format!("/workspace/{}/sessions?include=ended", self.workspace.to_string_lossy().replace('/', "%2F"))
    }
}

fn alice() -> Vec<(&'static str, String)> {
    vec![("X-Qwen-Client-Id", "alice".into())]
}

#[tokio::test]
async fn a_session_on_a_is_streamed_prompted_and_voted_on_through_b_and_after_a_dies_b_replays_it_dead() {
    let pg = Postgres::shared();
    let fleet = Fleet::new(pg);
    let a = fleet.daemon(&[]);
    let b = fleet.daemon(&[]);
    let sid = a.join("alice").await;

    // Streamed, prompted and voted on through B.
    let mut sse = Sse::connect(&b, &sid, &alice()).await;
    let request = b.raise(&sid, &mut sse, Some("alice"), "write through-b.txt hello").await;
    let rid = request_id(&request);
    let vote = b.vote(&sid, &rid, Some("alice"), selected("allow_once")).await;
    assert_eq!(vote.status, 200, "{}", vote.text);
    let turn = sse.until_type("turn_complete").await;
    assert!(turn.iter().any(|e| e.event == "permission_resolved"), "{turn:?}");
    assert_eq!(
        std::fs::read_to_string(fleet.workspace.join("through-b.txt")).expect("the file A's agent wrote"),
        "hello"
    );
    // B's audit has the decision, made on A.
    let audit = b.get(&format!("/audit?sessionId={sid}")).await.ok();
    let entry = &audit["entries"][0];
    assert_eq!((entry["requestId"].as_str(), entry["status"].as_str()), (Some(rid.as_str()), Some("selected")));
    assert_eq!(entry["voterClientId"], "alice");

    // A dies: B marks its session lost once A's lease runs out, and replays its history.
    drop(sse);
    drop(a);
    let listed = eventually(&b, &fleet.sessions_path(), |v| {
        v["sessions"].as_array().is_some_and(|s| s.iter().any(|s| s["sessionId"] == sid.as_str() && s["state"] == "dormant"))
    })
    .await;
    let record = listed["sessions"].as_array().expect("sessions").iter().find(|s| s["sessionId"] == sid.as_str()).cloned();
    assert_eq!(record.as_ref().map(|r| r["endReason"].clone()), Some(json!("node_lost")), "{listed}");
    let replay = Sse::connect(&b, &sid, &last_event_id(0)).await.rest().await;
    assert!(replay.iter().any(|e| e.event == "permission_resolved"), "the history replays: {replay:?}");
    let done = find(&replay, "replay_complete");
    assert_eq!(done["sessionState"], "dormant", "reported dead, not live: {done}");
    // Its pending-free audit is still there on B.
    assert_eq!(b.get(&format!("/audit?sessionId={sid}")).await.ok()["entries"][0]["status"], "selected");
}

/// Polls `path` on `d` until `ok` holds (bounded by [`WAIT`]); the last body.
async fn eventually(d: &Daemon, path: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let body = d.get(path).await.ok();
        if ok(&body) {
            return body;
        }
        assert!(std::time::Instant::now() < deadline, "{path} never satisfied the test: {body}");
        // Polling the daemon's answer for a lease to run out (a real second), bounded above.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

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

    /// A fleet on the cluster every test of this process shares.
    fn shared() -> Fleet {
        Fleet::new(Postgres::shared())
    }

    /// A fleet on the shared cluster, and two daemons of it, A and B, each with `args` more.
    fn two(args: &[&str]) -> (Fleet, Daemon, Daemon) {
        let fleet = Fleet::shared();
        let (a, b) = (fleet.daemon(args), fleet.daemon(args));
        (fleet, a, b)
    }

    /// A daemon of the fleet, with `args` more.
    fn daemon(&self, args: &[&str]) -> Daemon {
        self.daemon_with(args, &[])
    }

    /// A daemon of the fleet, with `args` and `env` more.
    fn daemon_with(&self, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut full = vec!["--store", self.store.as_str(), "--node-lease-ms", LEASE_MS];
        full.extend(args);
        Daemon::start_with(&self.workspace, &full, env)
    }

    /// The database's name (for `Postgres::sql`).
    fn database(&self) -> String {
        self.store.rsplit('/').next().expect("a database name").to_owned()
    }

    /// Polls the directory until session `sid`'s row reads `want` (`state|owner`), bounded by
    /// [`WAIT`]: what one daemon wrote behind, committed.
    async fn until_recorded(&self, db: &str, sid: &str, want: &str) {
        let pg = Postgres::shared();
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let row = pg.sql(
                db,
                &format!(
                    "SELECT state || '|' || COALESCE(owner, '') FROM sessions WHERE session_id = '{sid}'"
                ),
            );
            if row.starts_with(want) {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "session {sid} never recorded {want:?}: {row}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await; // polling another daemon's writer
        }
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
    let (fleet, a, b) = Fleet::two(&[]);
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
    // B's audit has the decision, made on A (once A's writer committed it: written behind).
    let audit =
        eventually(&b, &format!("/audit?sessionId={sid}"), |v| v["entries"][0]["status"] == "selected").await;
    let entry = &audit["entries"][0];
    assert_eq!(
        (entry["requestId"].as_str(), entry["status"].as_str()),
        (Some(rid.as_str()), Some("selected"))
    );
    assert_eq!(entry["voterClientId"], "alice");

    // A dies: B marks its session lost once A's lease runs out, and replays its history.
    drop(sse);
    drop(a);
    let listed = eventually(&b, &fleet.sessions_path(), |v| {
        v["sessions"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["sessionId"] == sid.as_str() && s["state"] == "dormant"))
    })
    .await;
    let record = listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|s| s["sessionId"] == sid.as_str())
        .cloned();
    assert_eq!(record.as_ref().map(|r| r["endReason"].clone()), Some(json!("node_lost")), "{listed}");
    // Issue #44: its status answers too (it was 404), as the list shows it.
    let status = b.get(&format!("/session/{sid}")).await.ok();
    assert_eq!(Some(status), record, "GET /session/{{id}} of a lost node's session");
    let replay = Sse::connect(&b, &sid, &last_event_id(0)).await.rest().await;
    assert!(replay.iter().any(|e| e.event == "permission_resolved"), "the history replays: {replay:?}");
    let done = find(&replay, "replay_complete");
    assert_eq!(done["sessionState"], "dormant", "reported dead, not live: {done}");
    // Its pending-free audit is still there on B.
    assert_eq!(b.get(&format!("/audit?sessionId={sid}")).await.ok()["entries"][0]["status"], "selected");
}

/// A live daemon renews its lease often enough (a third of it) never to lose its sessions: after
/// several leases, A's session is still A's, relayed to by B. (Waiting out leases is the behaviour
/// under test here, not a stand-in for synchronisation.)
#[tokio::test]
async fn a_live_daemon_keeps_its_sessions_lease_after_lease() {
    let (fleet, a, b) = Fleet::two(&[]);
    let sid = a.join("alice").await;
    let lease = std::time::Duration::from_millis(LEASE_MS.parse().expect("ms"));
    tokio::time::sleep(lease * 4).await;
    let listed = b.get(&fleet.sessions_path()).await.ok();
    let record =
        listed["sessions"].as_array().and_then(|s| s.iter().find(|s| s["sessionId"] == sid.as_str()));
    assert_eq!(record.map(|r| r["state"].clone()), Some(json!("live")), "{listed}");
    assert_eq!(b.get(&format!("/session/{sid}")).await.ok()["sessionId"], sid.as_str(), "relayed to A");
}

/// No split brain over `/acp`: a daemon that does not hold a session never starts an agent of its
/// own on it; an ACP client that reached it is told which daemon does.
#[tokio::test]
async fn an_acp_load_on_b_of_a_session_a_holds_starts_no_second_agent_and_names_a() {
    let (fleet, a, b) = Fleet::two(&[]);
    let sid = a.join("alice").await;
    let (mut ws, _) = AcpWs::ready(&b, &[]).await;
    let cwd = fleet.workspace.to_string_lossy().into_owned();
    for (method, params) in [
        ("session/load", json!({"sessionId": sid, "cwd": cwd, "mcpServers": []})),
        ("session/resume", json!({"sessionId": sid, "cwd": cwd, "mcpServers": []})),
        ("session/new", json!({"cwd": cwd, "mcpServers": [], "_meta": {"qwen-code/sessionId": sid}})),
    ] {
        let answer = ws.call(method, params).await;
        let error = &answer["error"];
        assert_eq!(
            (error["code"].as_i64(), error["data"]["code"].as_str(), error["data"]["httpStatus"].as_u64()),
            (Some(-32004), Some("session_held_elsewhere"), Some(409)),
            "{method}: {answer}"
        );
        assert_eq!(error["data"]["nodeUrl"], a.base.as_str(), "{method} names the daemon holding it");
        assert_eq!(error["data"]["sessionId"], sid.as_str());
    }
    // B started no agent; the session is A's alone, and still answers there.
    let agents = b.get("/agents").await.ok();
    assert_eq!(agents["agents"][0]["running"], false, "{agents}");
    assert_eq!(a.get(&format!("/session/{sid}")).await.ok()["sessionId"], sid.as_str());
}

/// An observer device (paired on A, known fleet-wide) that asks B to load a session A holds is told
/// where the session lives, as a client that may write is: B has nothing to refuse on its own
/// account, the session is not B's to serve.
#[tokio::test]
async fn an_observers_acp_load_on_b_of_a_session_a_holds_names_a() {
    let (fleet, a, b) = Fleet::two(&["--token", TOKEN]);
    let (_, credential) = a.pair_device(Some(TOKEN), "wall screen", "observer").await;
    let created = send(
        http().post(a.url("/session")).bearer_auth(TOKEN).header("X-Qwen-Client-Id", "op").json(&json!({})),
    )
    .await
    .ok();
    let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
    let bearer = format!("Bearer {credential}");
    let (mut watcher, _) = AcpWs::ready(&b, &[("Authorization", &bearer)]).await;
    let cwd = fleet.workspace.to_string_lossy().into_owned();
    let answer = watcher.call("session/load", json!({"sessionId": sid, "cwd": cwd, "mcpServers": []})).await;
    let error = &answer["error"];
    assert_eq!(
        (error["code"].as_i64(), error["data"]["code"].as_str(), error["data"]["nodeUrl"].as_str()),
        (Some(-32004), Some("session_held_elsewhere"), Some(a.base.as_str())),
        "{answer}"
    );
}

/// `/acp` through any daemon: an editor's `mediatord connect` to B, joining a session A holds,
/// names it on its upgrade, and B relays the whole connection to A: the editor is asked, its
/// answer is A's vote, A's agent writes the file, and B never starts an agent.
#[tokio::test]
async fn an_editor_connected_to_b_joining_a_session_on_a_is_relayed_to_a_and_its_vote_writes_the_file() {
    let (fleet, a, b) = Fleet::two(&[]);
    let sid = a.join("alice").await;
    let mut editor = Editor::start(&b.base, &["--client-id", "zed", "--session", &sid], &[]);
    let joined = editor.open_session(&fleet.workspace).await;
    assert_eq!(joined, sid, "--session joins A's session");
    let turn = editor
        .request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "write relayed-acp.txt through b"}]}),
        )
        .await;
    let ask = editor.until(|m| is_request(m, "session/request_permission")).await;
    editor
        .send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}))
        .await;
    let answer = editor.answer(turn).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(
        std::fs::read_to_string(fleet.workspace.join("relayed-acp.txt")).expect("written by A's agent"),
        "through b"
    );
    let audit = a.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    assert_eq!(
        (audit["audit"][0]["voterClientId"].clone(), audit["audit"][0]["via"].clone()),
        (json!("zed"), json!("acp")),
        "{audit}"
    );
    assert_eq!(b.get("/agents").await.ok()["agents"][0]["running"], false, "B started no agent");
    assert!(editor.close().await.success());
}

/// Rounds of the race below: each is a fresh chance for both daemons to pass a check before
/// either acts on it.
const RACES: usize = 12;

/// No split brain on resume: two daemons resuming the same closed session at the same moment,
/// round after round. Each round exactly one starts an agent on it: its answer says `resumed`,
/// the session is live in its tables and not the other's, and the directory names it; the other
/// is told which daemon holds the session (`409 session_held_elsewhere`), or, relayed there, is
/// handed the live session (`resumed: false`).
#[tokio::test]
async fn two_daemons_resuming_one_session_at_once_start_exactly_one_agent_on_it() {
    let pg = Postgres::shared();
    let fleet = Fleet::new(pg);
    let db = fleet.database();
    // One agent's state for both hosts (the demo agent's transcripts, which its `session/load`
    // reads, beside `XDG_STATE_HOME`), as a fleet that resumes sessions on other hosts needs.
    let agents = tempfile::tempdir().expect("tempdir");
    let shared = [("XDG_STATE_HOME", agents.path().to_str().expect("utf-8"))];
    let a = fleet.daemon_with(&[], &shared);
    let b = fleet.daemon_with(&[], &shared);
    let sid = a.join("alice").await;
    assert_eq!(a.prompt(&sid, Some("alice"), "hello").await.status, 200, "a transcript to load");
    let mut holder = &a;
    let resume = format!("/session/{sid}/resume");
    for round in 0..RACES {
        assert_eq!(holder.delete(&format!("/session/{sid}")).await.status, 204, "round {round}");
        fleet.until_recorded(&db, &sid, "closed|").await;
        let (on_a, on_b) = tokio::join!(a.post(&resume, None, json!({})), b.post(&resume, None, json!({})));
        let shown =
            format!("round {round}: A {} {} / B {} {}", on_a.status, on_a.text, on_b.status, on_b.text);
        let started = |r: &Reply| r.status == 200 && r.body["resumed"] == true;
        let (winner, loser, lost) = match (started(&on_a), started(&on_b)) {
            (true, false) => (&a, &b, on_b),
            (false, true) => (&b, &a, on_a),
            _ => panic!("exactly one daemon starts an agent on the session: {shown}"),
        };
        match lost.status {
            409 => {
                assert_eq!(lost.body["code"], "session_held_elsewhere", "{shown}");
                assert_eq!(lost.body["nodeUrl"], winner.base.as_str(), "{shown}");
            }
            200 => assert_eq!(lost.body["resumed"], false, "relayed to the winner: {shown}"),
            _ => panic!("the loser is told who holds it, or relayed there: {shown}"),
        }
        let live = |d: &Daemon| {
            let url = d.url("/health?deep=1");
            async move { send(http().get(url)).await.ok()["sessions"].as_u64() }
        };
        assert_eq!((live(winner).await, live(loser).await), (Some(1), Some(0)), "{shown}");
        assert_eq!(
            pg.sql(&db, &format!("SELECT state || '|' || owner FROM sessions WHERE session_id = '{sid}'")),
            format!("live|{}", winner.base),
            "{shown}"
        );
        holder = winner;
    }
}

/// A resume whose agent cannot load the session gives its claim back: the session is recorded as
/// it was, and another daemon resumes it at once.
#[tokio::test]
async fn a_resume_that_fails_releases_the_session_for_another_daemon() {
    let pg = Postgres::shared();
    let fleet = Fleet::new(pg);
    let db = fleet.database();
    let no_load = format!("demo={} demo-agent --no-load-session", bin());
    let a = fleet.daemon(&["--agent", &no_load]);
    let b = fleet.daemon(&[]);
    let sid = b.join("alice").await;
    assert_eq!(b.prompt(&sid, Some("alice"), "hello").await.status, 200, "a transcript to load");
    assert_eq!(b.delete(&format!("/session/{sid}")).await.status, 204);
    fleet.until_recorded(&db, &sid, "closed|").await;
    let refused = a.post(&format!("/session/{sid}/resume"), None, json!({})).await;
    assert_eq!(
        (refused.status, refused.body["code"].as_str()),
        (409, Some("resume_unsupported")),
        "{}",
        refused.text
    );
    assert_eq!(
        pg.sql(&db, &format!("SELECT state || '|' || end_reason FROM sessions WHERE session_id = '{sid}'")),
        "closed|closed_by_client",
        "recorded as it was"
    );
    let resumed = b.post(&format!("/session/{sid}/resume"), None, json!({})).await.ok();
    assert_eq!(resumed["resumed"], true, "{resumed}");
}

/// One Streamable HTTP `/acp` message to `d` (`POST`), on connection `conn` (none: `initialize`)
/// and naming `session` in `Acp-Session-Id`.
async fn acp_post(d: &Daemon, conn: Option<&str>, session: Option<&str>, message: Value) -> Reply {
    let mut req = http().post(d.url("/acp")).json(&message);
    if let Some(c) = conn {
        req = req.header("Acp-Connection-Id", c);
    }
    if let Some(s) = session {
        req = req.header("Acp-Session-Id", s);
    }
    send(req).await
}

/// A Streamable HTTP stream from `d`: connection `conn`'s own, or its session's.
async fn acp_stream(d: &Daemon, conn: &str, session: Option<&str>) -> reqwest::Response {
    let mut req =
        http().get(d.url("/acp")).header("Accept", "text/event-stream").header("Acp-Connection-Id", conn);
    if let Some(s) = session {
        req = req.header("Acp-Session-Id", s);
    }
    req.send().await.expect("an /acp stream")
}

/// The next JSON-RPC message on `sse` that `done` accepts.
async fn acp_until(sse: &mut Sse, mut done: impl FnMut(&Value) -> bool) -> Value {
    sse.until(|e| done(&e.data)).await.pop().expect("a match").data
}

/// `/acp` over Streamable HTTP through any daemon: a client that only ever talks to B, for a
/// session A holds. Its `initialize` names the session, so the connection is opened on A (its id
/// names A); every later request of the connection (its streams, its prompt, its answer to the
/// permission request, its close) is relayed to A by that id. A's agent writes the file, and B
/// never starts an agent. A connection opened on B is B's the same way, through A.
#[tokio::test]
async fn a_streamable_http_acp_client_of_b_drives_a_session_on_a_and_its_vote_writes_the_file() {
    let (fleet, a, b) = Fleet::two(&[]);
    let sid = a.join("alice").await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}});
    let opened = acp_post(&b, None, Some(&sid), init.clone()).await;
    assert_eq!(opened.status, 200, "{}", opened.text);
    let conn = opened.header("acp-connection-id").expect("Acp-Connection-Id").to_owned();
    assert_eq!(
        opened.body["result"]["agentCapabilities"]["_meta"]["mediatord"]["connectionId"],
        conn.as_str()
    );
    // The connection lives on A: A finds it by its id (B's own table never had it).
    let on_a = acp_stream(&a, &conn, None).await;
    assert_eq!(on_a.status(), 200, "the connection is A's");
    drop(on_a);

    let mut conn_stream = Sse::from_response(reopened(&b, &conn, None).await);
    let load = json!({"jsonrpc": "2.0", "id": 1, "method": "session/load", "params": {"sessionId": sid, "cwd": fleet.workspace, "mcpServers": []}});
    assert_eq!(acp_post(&b, Some(&conn), Some(&sid), load).await.status, 202);
    let loaded = acp_until(&mut conn_stream, |m| m["id"] == 1 && m.get("method").is_none()).await;
    assert!(loaded.get("error").is_none(), "{loaded}");
    let res = acp_stream(&b, &conn, Some(&sid)).await;
    assert_eq!(res.status(), 200);
    let mut session_stream = Sse::from_response(res);
    let prompt = json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "write relayed-http.txt over streamable http"}]}});
    assert_eq!(acp_post(&b, Some(&conn), Some(&sid), prompt).await.status, 202);
    let ask = acp_until(&mut session_stream, |m| is_request(m, "session/request_permission")).await;
    let vote = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}});
    assert_eq!(acp_post(&b, Some(&conn), Some(&sid), vote).await.status, 202);
    let answer = acp_until(&mut session_stream, |m| m["id"] == 2 && m.get("method").is_none()).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(
        std::fs::read_to_string(fleet.workspace.join("relayed-http.txt")).expect("written by A's agent"),
        "over streamable http"
    );
    let audit = a.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
    assert_eq!(audit["audit"][0]["via"], "acp", "{audit}");
    assert_eq!(b.get("/agents").await.ok()["agents"][0]["running"], false, "B started no agent");
    let closed = send(http().delete(b.url("/acp")).header("Acp-Connection-Id", &conn)).await;
    assert_eq!(closed.status, 202, "{}", closed.text);
    assert!(session_stream.rest().await.is_empty(), "its streams end");
    assert_eq!(acp_stream(&a, &conn, None).await.status(), 404, "gone from A");

    // The other way round: a connection opened on B (naming no session) lives on B, and its
    // requests through A are B's.
    let on_b = acp_post(&b, None, None, init).await;
    let conn_b = on_b.header("acp-connection-id").expect("Acp-Connection-Id").to_owned();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}});
    assert_eq!(acp_post(&a, Some(&conn_b), None, list).await.status, 202);
    let mut b_stream = Sse::from_response(reopened(&a, &conn_b, None).await);
    let listed = acp_until(&mut b_stream, |m| m["id"] == 1).await;
    assert!(listed["result"]["sessions"].is_array(), "{listed}");
}

/// A Streamable HTTP connection dies with the daemon it lives on: once that daemon's lease has run
/// out, another daemon answers the connection's requests itself (`404 acp_connection_not_found`,
/// as for any connection it does not know) instead of relaying them to a dead address.
#[tokio::test]
async fn a_streamable_http_connection_whose_daemon_died_is_not_found_elsewhere_once_its_lease_ran_out() {
    let (_fleet, a, b) = Fleet::two(&[]);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}});
    let opened = acp_post(&a, None, None, init).await;
    let conn = opened.header("acp-connection-id").expect("Acp-Connection-Id").to_owned();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}});
    assert_eq!(
        acp_post(&b, Some(&conn), None, list.clone()).await.status,
        202,
        "relayed to A while it lives"
    );
    drop(a);
    // Until A's lease runs out B still relays to it, and says it cannot reach it (503).
    let deadline = std::time::Instant::now() + WAIT;
    let gone = loop {
        let reply = acp_post(&b, Some(&conn), None, list.clone()).await;
        if reply.status != 503 {
            break reply;
        }
        assert_eq!(reply.body["code"], "node_unavailable", "{}", reply.text);
        assert!(std::time::Instant::now() < deadline, "B relays to a dead daemon past its lease");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await; // polling for a lease to run out (a real second)
    };
    assert_eq!(
        (gone.status, gone.body["code"].as_str()),
        (404, Some("acp_connection_not_found")),
        "{}",
        gone.text
    );
}

/// Opens connection `conn`'s stream on `d` once the previous one has been given back (`409`
/// while it is handed back).
async fn reopened(d: &Daemon, conn: &str, session: Option<&str>) -> reqwest::Response {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let res = acp_stream(d, conn, session).await;
        if res.status() != 409 {
            assert_eq!(res.status(), 200);
            return res;
        }
        assert!(std::time::Instant::now() < deadline, "the stream was never given back");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await; // polling for the hand-back
    }
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

/// Retention runs on one daemon of a fleet at a time (an advisory lock), and each pass gives its
/// lock back: a daemon started while another lives (whose own pass ran at its boot) trims the
/// fleet's history at its boot, here a session the other daemon recorded.
#[tokio::test]
async fn a_daemon_started_while_another_lives_runs_retention_on_the_fleets_history() {
    let fleet = Fleet::shared();
    let a = fleet.daemon(&[]);
    let sid = a.join("alice").await;
    let mut sse = Sse::connect(&a, &sid, &alice()).await;
    a.turn(&sid, &mut sse, Some("alice"), "stream 30").await;
    drop(sse);
    assert_eq!(a.delete(&format!("/session/{sid}")).await.status, 204);
    let whole = ids(&Sse::connect(&a, &sid, &[]).await.rest().await);
    let last = *whole.last().expect("a history");
    assert_eq!(whole, (1..=last).collect::<Vec<_>>(), "A keeps the whole history");

    let b = fleet.daemon(&["--history-events", "10"]);
    let deadline = std::time::Instant::now() + WAIT;
    let kept = loop {
        let kept = ids(&Sse::connect(&b, &sid, &[]).await.rest().await);
        if kept.len() <= 10 {
            break kept;
        }
        assert!(std::time::Instant::now() < deadline, "B's retention never ran: {} events kept", kept.len());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await; // polling a background pass
    };
    assert_eq!(kept, (last - 9..=last).collect::<Vec<_>>());
}

const TOKEN: &str = "fleet-operator-secret";

fn op(req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    req.bearer_auth(TOKEN)
}

#[tokio::test]
async fn a_code_from_a_pairs_on_b_the_device_works_on_b_and_revoked_on_b_loses_its_stream_on_a_at_once() {
    let (_fleet, a, b) = Fleet::two(&["--token", TOKEN]);
    // Each daemon listened for the fleet's notices before it served (a boot does not go on
    // without, bar a database slower than its timeout, which says so).
    for d in [&a, &b] {
        assert!(!d.stderr().contains("not listening for the fleet's notices yet"), "{}", d.stderr());
    }
    let issued =
        send(op(http().post(a.url("/devices/pairing"))).json(&json!({"name": "phone", "role": "voter"})))
            .await
            .ok();
    let code = issued["code"].as_str().expect("code").to_owned();
    // The code from A is exchanged on B, once in the whole fleet.
    let paired = send(http().post(b.url("/devices/pair")).json(&json!({"code": code}))).await.ok();
    let (device_id, credential) = (
        paired["deviceId"].as_str().expect("deviceId").to_owned(),
        paired["token"].as_str().expect("token").to_owned(),
    );
    let again = send(http().post(a.url("/devices/pair")).json(&json!({"code": code}))).await;
    assert_eq!(
        (again.status, again.body["code"].as_str()),
        (401, Some("invalid_pairing_code")),
        "{}",
        again.text
    );
    // The device works on both.
    for d in [&a, &b] {
        let caps = send(http().get(d.url("/capabilities")).bearer_auth(&credential)).await.ok();
        assert_eq!(caps["identity"]["deviceId"], device_id.as_str(), "{caps}");
    }
    // Its stream on A ends the moment B revokes it.
    let sid = send(op(http().post(a.url("/session"))).json(&json!({}))).await.ok()["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned();
    let res = http()
        .get(a.url(&format!("/session/{sid}/events")))
        .bearer_auth(&credential)
        .send()
        .await
        .expect("stream");
    assert_eq!(res.status(), 200);
    let mut stream = Sse::from_response(res);
    assert_eq!(send(op(http().delete(b.url(&format!("/devices/{device_id}"))))).await.status, 204);
    let rest = stream.rest().await;
    assert!(rest.iter().all(|e| e.event != "session_closed"), "the stream ended, not the session: {rest:?}");
    for d in [&a, &b] {
        assert_eq!(send(http().get(d.url("/capabilities")).bearer_auth(&credential)).await.status, 401);
    }
}

#[tokio::test]
async fn a_workspace_rule_added_on_b_answers_a_request_on_a_and_the_vote_route_without_a_session_is_relayed()
{
    let (fleet, a, b) = Fleet::two(&[]);
    let sid = a.join("alice").await;
    let mut sse = Sse::connect(&a, &sid, &alice()).await;
    let rules =
        format!("/workspace/{}/permission-rules", fleet.workspace.to_string_lossy().replace('/', "%2F"));
    let created = b
        .post(&rules, Some("alice"), json!({"effect": "allow", "kinds": ["edit"], "paths": ["ruled*"]}))
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    // A hears of it and tells its session at once.
    let update = sse.until_type("policy_updated").await;
    assert_eq!(update.last().expect("policy_updated").payload()["workspaceRules"][0]["effect"], "allow");
    let events = a.turn(&sid, &mut sse, Some("alice"), "write ruled.txt by rule").await;
    assert_eq!(find(&events, "permission_resolved")["resolvedBy"], "rule");
    assert_eq!(std::fs::read_to_string(fleet.workspace.join("ruled.txt")).expect("written"), "by rule");
    // A request no rule answers, voted on B through the route that names only the request.
    let request = a.raise(&sid, &mut sse, Some("alice"), "write other.txt voted").await;
    let vote = b.legacy_vote(&request_id(&request), Some("alice"), selected("allow_once")).await;
    assert_eq!(vote.status, 200, "{}", vote.text);
    sse.until_type("turn_complete").await;
    assert_eq!(std::fs::read_to_string(fleet.workspace.join("other.txt")).expect("written"), "voted");
}

/// Issue 41, finding 1: PostgreSQL lets any role that may connect `NOTIFY` on any channel. A role
/// with no privilege on any table sends notices of every kind this version and earlier ones sent
/// (a pairing code's grant, a code used, devices, rules, a resync; from a made-up daemon and in
/// the names of the two real ones), and garbage: nothing is granted (the forged code pairs
/// nothing), nothing is taken away (a device stays paired, a code issued before still works, the
/// rules stay), no session hears of a change that did not happen, and the daemons go on; the
/// legitimate path works across the fleet after it.
#[tokio::test]
async fn a_notice_any_database_role_sends_grants_nothing_and_takes_nothing_away() {
    use sha2::Digest;
    let (fleet, a, b) = Fleet::two(&[]);
    let pg = Postgres::shared();
    let db = fleet.database();
    let intruder = format!("intruder_{db}");
    pg.sql(&db, &format!("CREATE ROLE {intruder} LOGIN"));
    let denied = pg.psql_as(&intruder, &db, "SELECT secret FROM fleet_secret").expect("psql");
    assert!(
        !denied.status.success() && String::from_utf8_lossy(&denied.stderr).contains("permission denied"),
        "the intruder may read no table: {denied:?}"
    );
    let rules_path =
        format!("/workspace/{}/permission-rules", fleet.workspace.to_string_lossy().replace('/', "%2F"));
    // Before: a device paired across the fleet, a code issued and not used yet, a rule, and a
    // session on A whose stream is read.
    let (device, credential) = b.pair_device(None, "phone", "voter").await;
    let pending = send(http().post(a.url("/devices/pairing")).json(&json!({"role": "observer"}))).await.ok()
        ["code"]
        .as_str()
        .expect("code")
        .to_owned();
    let rule =
        a.post(&rules_path, None, json!({"effect": "allow", "kinds": ["read"], "paths": ["one*"]})).await;
    assert_eq!(rule.status, 201, "{}", rule.text);
    let sid = a.join("alice").await;
    let mut sse = Sse::connect(&a, &sid, &alice()).await;

    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let forged_code = "0123456789abcdef0123456789abcdef";
    let forged_digest = hex(&sha2::Sha256::digest(forged_code.as_bytes()));
    let pending_digest = hex(&sha2::Sha256::digest(pending.as_bytes()));
    let workspace = fleet.workspace.to_string_lossy().into_owned();
    let mut payloads = Vec::new();
    for from in ["http://forger.invalid:1", a.base.as_str(), b.base.as_str(), ""] {
        for n in [
            json!({"k": "code", "digest": forged_digest, "name": "forged", "role": "voter", "expiresAt": 9_999_999_999_999u64}),
            json!({"k": "used", "digest": pending_digest}),
            json!({"k": "devices"}),
            json!({"k": "rules", "workspace": workspace}),
            json!({"k": "rules", "workspace": "/etc"}),
            json!({"k": "resync"}),
        ] {
            payloads.push(json!({"from": from, "n": n}).to_string());
        }
    }
    payloads.extend(["devices", "rules", "resync", "", "{", "code", &"x".repeat(7900)].map(str::to_owned));
    for p in &payloads {
        let sent = pg
            .psql_as(&intruder, &db, &format!("SELECT pg_notify('mediatord', $forged${p}$forged$)"))
            .expect("psql");
        assert!(sent.status.success(), "any role may notify: {}", String::from_utf8_lossy(&sent.stderr));
    }
    let flood = "SELECT pg_notify('mediatord', 'rules' || i) FROM generate_series(1, 2000) AS i";
    assert!(pg.psql_as(&intruder, &db, flood).expect("psql").status.success());

    // The barrier: a legitimate change of each kind, made on B after them. Notices are delivered
    // and applied in commit order, so once A applied these it had heard every forged one.
    let (second, second_credential) = b.pair_device(None, "tablet", "voter").await;
    let known_on_a = send(http().get(a.url("/capabilities")).bearer_auth(&second_credential)).await.ok();
    assert_eq!(known_on_a["identity"]["deviceId"], second.as_str());
    let revoked = b.delete(&format!("/devices/{second}")).await;
    assert_eq!(revoked.status, 204, "{}", revoked.text);
    let deadline = std::time::Instant::now() + WAIT;
    while send(http().get(a.url("/capabilities")).bearer_auth(&second_credential)).await.status != 401 {
        assert!(std::time::Instant::now() < deadline, "A never heard of the revocation on B");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await; // polling another daemon's notice
    }
    let added =
        b.post(&rules_path, None, json!({"effect": "allow", "kinds": ["read"], "paths": ["two*"]})).await;
    assert_eq!(added.status, 201, "{}", added.text);
    // The first change A's session hears of is B's rule: the forged notices announced nothing.
    let heard = sse.until_type("policy_updated").await;
    let rules = &heard.last().expect("policy_updated").payload()["workspaceRules"];
    assert_eq!(rules.as_array().map(Vec::len), Some(2), "{rules}");

    // Nothing granted.
    for d in [&a, &b] {
        let forged = send(http().post(d.url("/devices/pair")).json(&json!({"code": forged_code}))).await;
        assert_eq!(
            (forged.status, forged.body["code"].as_str()),
            (401, Some("invalid_pairing_code")),
            "{}",
            forged.text
        );
    }
    // Nothing taken away.
    for d in [&a, &b] {
        let caps = send(http().get(d.url("/capabilities")).bearer_auth(&credential)).await.ok();
        assert_eq!(caps["identity"]["deviceId"], device.as_str(), "{caps}");
        let listed = d.get(&rules_path).await.ok();
        assert_eq!(listed["rules"].as_array().map(Vec::len), Some(2), "{listed}");
    }
    let paired = send(http().post(b.url("/devices/pair")).json(&json!({"code": pending}))).await.ok();
    assert_eq!(paired["role"], "observer", "the code issued on A before works on B: {paired}");
    for d in [&a, &b] {
        assert_eq!(d.get("/health").await.status, 200);
        assert!(!d.stderr().contains("panicked"), "{}", d.stderr());
    }
}

#[tokio::test]
async fn a_relayed_request_is_taken_with_the_proof_the_fleets_secret_makes_only_and_a_stranger_is_401_on_the_owner_too()
 {
    let (fleet, a, b) = Fleet::two(&["--token", TOKEN]);
    let sid = send(op(http().post(a.url("/session"))).json(&json!({}))).await.ok()["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned();
    // Through B without a credential: B refuses it before any relay.
    assert_eq!(send(http().get(b.url(&format!("/session/{sid}")))).await.status, 401);
    // Claiming to be a relaying daemon does not help.
    let forged = http().get(a.url(&format!("/session/{sid}"))).header("x-mediatord-relay", "00".repeat(32));
    assert_eq!(send(op(forged)).await.status, 401);
    // Through B with the token: relayed, and answered by A.
    let got = send(op(http().get(b.url(&format!("/session/{sid}"))))).await.ok();
    assert_eq!(got["sessionId"], sid.as_str());
    // What B presented is a vouch keyed by the secret the database holds for the fleet, which
    // any daemon sharing it (and nothing else) can make, for one request: A takes it as relayed,
    // once, and for that request only.
    let secret = Postgres::shared().sql(&fleet.database(), "SELECT encode(secret, 'hex') FROM fleet_secret");
    let path = format!("/session/{sid}");
    let vouch = relay_vouch(&secret, "GET", &path, "00112233445566778899aabbccddeeff");
    let proven = http().get(a.url(&path)).header("x-mediatord-relay", &vouch);
    assert_eq!(send(op(proven)).await.ok()["sessionId"], sid.as_str());
    let replayed = http().get(a.url(&path)).header("x-mediatord-relay", &vouch);
    assert_eq!(send(op(replayed)).await.status, 401, "a vouch is taken once");
    let elsewhere =
        relay_vouch(&secret, "GET", &format!("{path}/context"), "ffeeddccbbaa99887766554433221100");
    let moved = http().get(a.url(&path)).header("x-mediatord-relay", &elsewhere);
    assert_eq!(send(op(moved)).await.status, 401, "a vouch for another request");
}

/// The vouch a relaying daemon of the fleet whose secret is `secret_hex` sends for a request of
/// `method` on `path` from a caller not on its loopback, now, with `nonce_hex`
/// (`src/http/relay.rs`'s `Vouch`): `v2.<ms>.<nonce>.0.<mac>`, the MAC HMAC-SHA256 over the
/// length-prefixed label, method and path, then the time, the nonce and the locality.
fn relay_vouch(secret_hex: &str, method: &str, path: &str, nonce_hex: &str) -> String {
    use hmac::Mac;
    let bytes = |hex: &str| -> Vec<u8> {
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")).collect()
    };
    let secret = bytes(secret_hex);
    assert_eq!(secret.len(), 32, "the fleet's secret: {secret_hex}");
    let at =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as u64;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&secret).expect("a key");
    for part in [b"mediatord relay v2".as_slice(), method.as_bytes(), path.as_bytes()] {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    mac.update(&at.to_be_bytes());
    mac.update(&bytes(nonce_hex));
    mac.update(&[0]);
    let mac: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("v2.{at}.{nonce_hex}.0.{mac}")
}

/// The database restarting under load: requests waiting on it fail with a clear `503
/// store_unavailable` while it is down, work again once it is back, and nothing acknowledged is
/// lost. A cluster of its own: stopping it must not disturb the other tests.
#[tokio::test]
async fn the_database_restarting_under_load_gives_clear_503s_then_recovers_and_loses_nothing_acknowledged() {
    let pg = Postgres::start();
    let fleet = Fleet::new(&pg);
    let a = fleet.daemon(&[]);
    let sid = a.join("alice").await;
    let mut sse = Sse::connect(&a, &sid, &alice()).await;
    let rules =
        format!("/workspace/{}/permission-rules", fleet.workspace.to_string_lossy().replace('/', "%2F"));
    let add = |n: usize| {
        let body = json!({"effect": "deny", "kinds": ["execute"], "paths": [format!("load-{n}")]});
        let path = rules.clone();
        let url = a.url(&path);
        async move { send(as_client(http().post(url).json(&body), Some("alice"))).await }
    };
    // Load: rules added one after another (each acknowledged only once committed), and prompts
    // streaming events, while the database stops and starts again.
    let mut acknowledged = Vec::new();
    for n in 0..5 {
        let reply = add(n).await;
        assert_eq!(reply.status, 201, "{}", reply.text);
        acknowledged.push(reply.body["rule"]["ruleId"].as_str().expect("ruleId").to_owned());
    }
    a.prompt_async(&sid, Some("alice"), "hello before").await;
    pg.stop();
    let mut refused = 0;
    for n in 5..10 {
        let reply = add(n).await;
        match reply.status {
            201 => acknowledged.push(reply.body["rule"]["ruleId"].as_str().expect("ruleId").to_owned()),
            503 => {
                assert_eq!(reply.body["code"], "store_unavailable", "{}", reply.text);
                assert!(reply.header("retry-after").is_some(), "a 503 says when to retry");
                refused += 1;
            }
            other => panic!("a rule added while the database is down: {other} {}", reply.text),
        }
    }
    assert!(refused > 0, "the database is down: at least one write is refused");
    // The session goes on meanwhile: its turn ends, its events are streamed (recorded later as a gap).
    a.prompt_async(&sid, Some("alice"), "hello during").await;
    sse.until_type("turn_complete").await;
    pg.start_again();
    // Back: the next acknowledged write works (the pool connects again), within a bounded wait.
    let deadline = std::time::Instant::now() + WAIT;
    let mut n = 10;
    loop {
        let reply = add(n).await;
        n += 1;
        if reply.status == 201 {
            acknowledged.push(reply.body["rule"]["ruleId"].as_str().expect("ruleId").to_owned());
            break;
        }
        assert_eq!(reply.body["code"], "store_unavailable", "{}", reply.text);
        assert!(std::time::Instant::now() < deadline, "the store never recovered");
    }
    // Nothing acknowledged is lost: a daemon started afresh on the database has every rule.
    drop(sse);
    drop(a);
    let b = fleet.daemon(&[]);
    let listed = b.get(&rules).await.ok();
    let kept: Vec<&str> =
        listed["rules"].as_array().expect("rules").iter().filter_map(|r| r["ruleId"].as_str()).collect();
    for id in &acknowledged {
        assert!(kept.contains(&id.as_str()), "acknowledged rule {id} lost: {listed}");
    }
}

#[test]
fn a_postgres_database_from_a_newer_mediatord_refuses_the_boot_and_its_password_is_never_shown() {
    let pg = Postgres::shared();
    let url = pg.fresh_database();
    let name = url.rsplit('/').next().expect("database").to_owned();
    pg.sql(
        &name,
        "CREATE TABLE schema_migrations(version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL);
         INSERT INTO schema_migrations VALUES (99, 0);",
    );
    let (status, stderr) = serve_refusal(&["--agent", "demo", "--port", "0", "--store", &url], &[]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("schema version 99") && stderr.contains("newer"), "{stderr}");
    // A database that cannot be reached refuses the boot too, naming it without its password.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let url = format!("postgres://mediatord:hunter2@127.0.0.1:{closed}/nowhere");
    let (status, stderr) = serve_refusal(&["--agent", "demo", "--port", "0", "--store", &url], &[]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("postgres://mediatord@127.0.0.1:{closed}/nowhere")), "{stderr}");
    assert!(stderr.contains("error connecting to server"), "the driver's reason: {stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[tokio::test]
async fn an_agent_of_a_fleet_daemon_never_sees_the_database_url_or_password() {
    let fleet = Fleet::shared();
    let url = fleet.store.clone();
    let d = Daemon::start_with(
        &fleet.workspace,
        &["--node-lease-ms", LEASE_MS],
        &[("MEDIATORD_STORE", url.as_str()), ("PGPASSWORD", "not-for-agents")],
    );
    assert!(
        d.get("/health?deep=1").await.ok()["store"]["durable"] == true,
        "the store came from the environment"
    );
    let sid = d.join("alice").await;
    let pid = agent_pid(&d, &sid).await;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("the agent's environment");
    let names: Vec<String> = environ
        .split(|b| *b == 0)
        .filter_map(|kv| kv.split(|b| *b == b'=').next())
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert!(names.iter().any(|n| n == "HOME"), "the agent's environment was read: {names:?}");
    for var in ["MEDIATORD_STORE", "PGPASSWORD"] {
        assert!(!names.iter().any(|n| n == var), "the agent sees {var}");
    }
}

/// Issue #41, finding 5: under `local-only`, a vote relayed by another daemon of the fleet counts
/// as local only when that daemon vouches that its own caller was on its loopback. A client in
/// another network namespace, refused on B's own session, is refused on A's session through B
/// too (it was accepted: A took B's loopback connection for the client's). A client on C's
/// loopback still decides either through C. B listens only where the namespace reaches it.
#[tokio::test]
async fn local_only_refuses_a_remote_vote_relayed_over_loopback_and_takes_a_vouched_local_one() {
    const TOKEN: &str = "fleet-local-only";
    let ns = crate::support::netns::Netns::new();
    let fleet = Fleet::shared();
    let common = ["--permission-policy", "local-only", "--token", TOKEN];
    let a = fleet.daemon(&common);
    let c = fleet.daemon(&common);
    let mut b_args = common.to_vec();
    b_args.extend(["--hostname", ns.host_ip.as_str()]);
    let b = fleet.daemon(&b_args);
    let b_url = format!("http://{}:{}", ns.host_ip, b.port);
    let as_alice = |req: reqwest::RequestBuilder| req.bearer_auth(TOKEN).header("X-Qwen-Client-Id", "alice");
    let created = |reply: Reply| reply.ok()["sessionId"].as_str().expect("sessionId").to_owned();
    let on_b = created(send(as_alice(http().post(format!("{b_url}/session"))).json(&json!({}))).await);
    let on_a = created(send(as_alice(http().post(a.url("/session"))).json(&json!({}))).await);
    let bearer = format!("Bearer {TOKEN}");
    for (holder, sid) in [("A", on_a), ("B", on_b)] {
        let far = [("Authorization", bearer.as_str()), ("X-Qwen-Client-Id", "far")];
        let heartbeat = ns.curl("POST", &format!("{b_url}/session/{sid}/heartbeat"), &far, None);
        assert_eq!(heartbeat.0, 200, "{holder}: {}", heartbeat.1);
        let mut sse = Sse::connect(&c, &sid, &[("Authorization", bearer.clone())]).await;
        let prompt = as_alice(http().post(c.url(&format!("/session/{sid}/prompt"))))
            .header("Prefer", "respond-async")
            .json(&text_prompt("write far.txt x"));
        assert_eq!(send(prompt).await.status, 202, "{holder}");
        let raised = sse.until_type("permission_request").await;
        let rid = request_id(raised.last().expect("request").payload());
        let body = selected("allow_once").to_string();
        let vote = ns.curl("POST", &format!("{b_url}/session/{sid}/permission/{rid}"), &far, Some(&body));
        let answer: Value = serde_json::from_str(&vote.1).unwrap_or(Value::Null);
        assert_eq!(
            (vote.0, answer["code"].as_str(), answer["reason"].as_str()),
            (403, Some("permission_forbidden"), Some("remote_not_allowed")),
            "the far client's vote on {holder}'s session through B: {}",
            vote.1
        );
        let near = as_alice(http().post(c.url(&format!("/session/{sid}/permission/{rid}"))))
            .json(&selected("reject_once"));
        let near = send(near).await;
        assert_eq!(near.status, 200, "{holder}: {}", near.text);
        let resolved = sse.until_type("permission_resolved").await;
        assert_eq!(resolved.last().expect("resolved").payload()["voterClientId"], "alice", "{holder}");
    }
    assert!(!fleet.workspace.join("far.txt").exists(), "nothing the far client asked for was written");
}

/// Issue 44, item 2: a database that asks for a password said "db error" to a wrong one and
/// "invalid configuration" to none. A cluster of its own with password authentication: a missing
/// password, a wrong one in `PGPASSWORD` and a wrong one in the URL each refuse the boot with the
/// server's own words where it gave some and where the password comes from, never the password
/// itself; the right one boots.
#[tokio::test]
async fn a_wrong_or_missing_database_password_is_refused_in_the_servers_words_with_where_it_comes_from() {
    let pg = Postgres::with_password("right-horse");
    let url = pg.database("passworded");
    let refusal = |url: &str, env: &[(&str, &str)]| {
        let (status, err) = serve_refusal(&["--agent", "demo", "--port", "0", "--store", url], env);
        assert_eq!(status.code(), Some(2), "{err}");
        err
    };
    let none = refusal(&url, &[]);
    assert!(
        none.contains("the server asks for a password and none was given")
            && none.contains("set PGPASSWORD")
            && none.contains("postgres://USER:PASSWORD@HOST:PORT/DATABASE"),
        "{none}"
    );
    let wrong = refusal(&url, &[("PGPASSWORD", "wrong-horse")]);
    assert!(
        wrong.contains(r#"the server said FATAL: password authentication failed for user "mediatord""#)
            && wrong.contains("the password is PGPASSWORD's"),
        "{wrong}"
    );
    assert!(!wrong.contains("wrong-horse") && !wrong.contains("db error"), "{wrong}");
    let in_url = url.replacen("mediatord@", "mediatord:wrong-horse@", 1);
    let wrong = refusal(&in_url, &[]);
    assert!(wrong.contains("password authentication failed") && !wrong.contains("wrong-horse"), "{wrong}");
    let stranger = url.replacen("mediatord@", "nobody@", 1);
    let unknown = refusal(&stranger, &[("PGPASSWORD", "right-horse")]);
    assert!(unknown.contains("password authentication failed for user \"nobody\""), "{unknown}");
    // The right password boots.
    let dir = tempfile::tempdir().expect("tempdir");
    let d = Daemon::start_with(dir.path(), &["--store", &url], &[("PGPASSWORD", "right-horse")]);
    assert_eq!(d.get("/health?deep=1").await.ok()["store"]["durable"], true);
}

/// Issue 44, item 12: each daemon after the first logged PostgreSQL's NOTICE "relation
/// schema_migrations already exists, skipping" at INFO, with a source path of the build machine.
/// A daemon joining a migrated database says nothing of it, and no log line names a source file.
#[tokio::test]
async fn a_daemon_joining_a_migrated_database_logs_no_notice_and_no_build_path() {
    let (_fleet, a, b) = Fleet::two(&[]);
    for d in [&a, &b] {
        assert_eq!(d.get("/health").await.status, 200);
        let log = d.stderr();
        for needle in ["already exists", "NOTICE", "log.file", ".rs:", "registry/src"] {
            assert!(!log.contains(needle), "{needle:?} in:\n{log}");
        }
    }
}

/// Issue #42: a PostgreSQL database a daemon left at schema version 5 (before the turn records)
/// is migrated by a daemon of this version when it boots on it: the turns table comes, what the
/// database held stays, and new turns' change sets are recorded in it.
#[tokio::test]
async fn a_version_5_postgres_database_migrates_to_the_turn_records_and_keeps_its_sessions() {
    let pg = Postgres::shared();
    let url = pg.fresh_database();
    let name = url.rsplit('/').next().expect("database").to_owned();
    let dir = tempfile::tempdir().expect("tempdir");
    let earlier = {
        let d = Daemon::start_with(dir.path(), &["--store", &url], &[]);
        let sid = d.join("alice").await;
        assert_eq!(d.prompt(&sid, Some("alice"), "hello").await.status, 200);
        sid
    };
    // Back to what version 5 left: no turns table, no devices' people, no later migration.
    pg.sql(
        &name,
        "DROP TABLE turns; ALTER TABLE devices DROP COLUMN person, DROP COLUMN expires_at;
         DELETE FROM schema_migrations WHERE version >= 6;",
    );
    assert_eq!(pg.sql(&name, "SELECT MAX(version) FROM schema_migrations"), "5");
    let d = Daemon::start_with(dir.path(), &["--store", &url], &[]);
    assert_eq!(
        pg.sql(&name, "SELECT MAX(version) FROM schema_migrations"),
        mediatord::store::PG_SCHEMA_VERSION.to_string()
    );
    assert_eq!(
        pg.sql(&name, &format!("SELECT COUNT(*) FROM sessions WHERE session_id = '{earlier}'")),
        "1",
        "the earlier session is kept"
    );
    let sid = d.join("bob").await;
    assert_ne!(sid, earlier);
    assert_eq!(d.prompt(&sid, Some("bob"), "put migrated.txt recorded").await.status, 200);
    let turns = d.get(&format!("/session/{sid}/turns")).await.ok();
    assert_eq!(turns["turns"][0]["files"][0]["path"], "migrated.txt", "{turns}");
    // The record reaches the new table (the store's writer commits it after the turn).
    let deadline = std::time::Instant::now() + WAIT;
    let count = format!("SELECT COUNT(*) FROM turns WHERE session_id = '{sid}'");
    while pg.sql(&name, &count) != "1" {
        assert!(std::time::Instant::now() < deadline, "the turn never reached the turns table");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await; // polling the store's writer's commit
    }
}

/// Issue #48: Ada signs in on A, and follows a session on A and one on B with the same sign-in.
/// Disabled at the provider, she is refused at A's next renewal of her, and both streams end at
/// once: the revocation is in the store, and B applies the notice. Grace, on the same daemons,
/// stays signed in.
#[tokio::test]
async fn a_person_disabled_at_the_provider_is_signed_out_on_both_daemons() {
    use crate::support::oidc::{Browser, OidcProvider, SignInResult};
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new();
    let provider = OidcProvider::start(
        &ca,
        dir.path(),
        json!({
            "clients": [{"client_id": "placeholder", "client_secret": "x", "grant_types": ["authorization_code"],
                         "redirect_uris": ["https://127.0.0.1:1/auth/callback"]}],
            "accounts": [
                {"id": "ada", "email": "ada@example.test", "name": "Ada Lovelace"},
                {"id": "grace", "email": "grace@example.test", "name": "Grace Hopper"},
            ],
        }),
    );
    let ca_file = ca.pem_file(dir.path());
    let fleet = Fleet::shared();
    let args = [
        "--token",
        TOKEN,
        "--oidc-issuer",
        provider.issuer(),
        "--oidc-client-id",
        "mediatord",
        "--oidc-allow-domain",
        "example.test",
        "--oidc-renew-ms",
        "1000",
    ];
    let env = [("SSL_CERT_FILE", ca_file.to_str().expect("utf-8")), ("MEDIATORD_OIDC_CLIENT_SECRET", "s")];
    let (a, b) = (fleet.daemon_with(&args, &env), fleet.daemon_with(&args, &env));
    provider
        .put_client(json!({
            "client_id": "mediatord", "client_secret": "s",
            "grant_types": ["authorization_code", "refresh_token"],
            "redirect_uris": [format!("{}/auth/callback", a.base)],
        }))
        .await;
    let signed_in = |account: &'static str| {
        let (a, ca) = (&a, &ca);
        async move {
            let mut browser = Browser::new(&ca.pem());
            let SignInResult::Pair(code) = browser.sign_in(&a.base, account).await else {
                panic!("{account} did not sign in\n{}", browser.trace())
            };
            let paired = send(http().post(a.url("/devices/pair")).json(&json!({"code": code}))).await.ok();
            paired["token"].as_str().expect("token").to_owned()
        }
    };
    let (ada, grace) = (signed_in("ada").await, signed_in("grace").await);
    let mut streams = Vec::new();
    for d in [&a, &b] {
        let sid = send(op(http().post(d.url("/session"))).json(&json!({}))).await.ok()["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_owned();
        let res = http().get(d.url(&format!("/session/{sid}/events"))).bearer_auth(&ada).send().await;
        let res = res.expect("stream");
        assert_eq!(res.status(), 200, "her sign-in works on {}", d.base);
        streams.push(Sse::from_response(res));
    }
    provider.disable("ada").await;
    for mut stream in streams {
        tokio::time::timeout(WAIT, stream.rest()).await.expect("her stream ends on both daemons");
    }
    for d in [&a, &b] {
        assert_eq!(send(http().get(d.url("/capabilities")).bearer_auth(&ada)).await.status, 401);
        // Grace's renewals on A move her sign-in's end on B too (B reads it from the store's
        // notice), so B never sees it run out.
        let first = send(http().get(d.url("/capabilities")).bearer_auth(&grace)).await.ok();
        let first = first["identity"]["expiresAt"].as_u64().expect("an end");
        let later = crate::support::eventually(
            || http().get(d.url("/capabilities")).bearer_auth(&grace),
            |caps| caps["identity"]["expiresAt"].as_u64().is_some_and(|end| end > first),
        )
        .await;
        assert_eq!(later["identity"]["person"]["name"], "Grace Hopper", "{later}");
    }
}

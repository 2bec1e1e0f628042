//! Process lifetime through the real binary (`docs/protocol.md#1-command-line` signals,
//! `docs/protocol.md#10-shutdown`): drains on the first
//! signal, the second signal's kill, agents that will not leave, a SIGKILLed daemon, and an agent
//! program that does not exist.

use std::time::{Duration, Instant};

use rustix::process::Signal;
use serde_json::{Value, json};

use crate::support::*;

/// `docs/protocol.md#10-shutdown`'s per-agent grace after stdin is closed.
const AGENT_GRACE: Duration = Duration::from_secs(10);
/// Slack on top of a deadline the daemon promises, for a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(8);

/// Creates a session with no client id and returns its id.
async fn session(d: &Daemon) -> String {
    d.create(None, json!({})).await["sessionId"].as_str().expect("sessionId").to_owned()
}

/// Runs one prompt to its `turn_complete` and returns the reply text.
async fn run_prompt(d: &Daemon, sid: &str, text: &str) -> String {
    let mut sse = Sse::connect(d, sid, &[]).await;
    chunk_text(&d.turn(sid, &mut sse, None, text).await)
}

/// Makes the session's demo agent ignore SIGTERM and keep running after stdin EOF, so only a kill
/// ends it.
async fn make_agent_stubborn(d: &Daemon, sid: &str) {
    run_prompt(d, sid, "ignore-sigterm").await;
    run_prompt(d, sid, "linger").await;
}

/// Has the session's agent write a file in its private `TMPDIR`, which the daemon made beneath its
/// own `TMPDIR`; returns the file's path.
async fn write_in_agent_tmp(d: &Daemon, sid: &str) -> std::path::PathBuf {
    let reply = run_prompt(d, sid, "run echo kept > \"$TMPDIR/left\" && echo \"$TMPDIR\"").await;
    let dir = reply.lines().nth(1).unwrap_or_else(|| panic!("no TMPDIR in {reply:?}"));
    let file = std::path::Path::new(dir).join("left");
    assert_eq!(std::fs::read_to_string(&file).ok().as_deref(), Some("kept\n"), "{reply}");
    file
}

/// The parent pid of `pid`, from /proc/<pid>/stat (field 4, after the parenthesised name).
fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let (_, rest) = stat.rsplit_once(')').expect("stat format");
    rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()).expect("ppid")
}

fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

/// The agent-guard process the daemon runs between itself and the agent.
fn guard_of(d: &Daemon, agent: u32) -> u32 {
    let guard = parent_of(agent);
    assert_eq!(parent_of(guard), d.pid(), "the agent's parent should be the daemon's child");
    assert!(cmdline(guard).contains("agent-guard"), "unexpected agent parent: {}", cmdline(guard));
    guard
}

#[tokio::test]
async fn sigterm_on_an_idle_daemon_exits_0_promptly() {
    let mut d = Daemon::start(&[]);
    d.signal(Signal::TERM);
    // `wait_exit` panics past its deadline: that bound is the "promptly".
    let status = d.wait_exit(Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "stderr:\n{}", d.stderr());
}

#[tokio::test]
async fn sigint_on_an_idle_daemon_exits_0() {
    let mut d = Daemon::start(&[]);
    d.signal(Signal::INT);
    let status = d.wait_exit(Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "stderr:\n{}", d.stderr());
}

#[tokio::test]
async fn sigterm_with_a_live_session_ends_the_stream_and_the_agent_then_exits_0() {
    let mut d = Daemon::start(&[]);
    let sid = session(&d).await;
    let agent = agent_pid(&d, &sid).await;
    let guard = guard_of(&d, agent);
    let mut sse = Sse::connect(&d, &sid, &[]).await;

    let left = write_in_agent_tmp(&d, &sid).await;
    assert!(left.starts_with(d.tmp_dir()), "{left:?}: the agent's TMPDIR is beneath the daemon's");

    d.signal(Signal::TERM);
    let closed = sse.until_type("session_closed").await;
    let closed = closed.last().expect("session_closed");
    assert_eq!(closed.payload()["sessionId"], sid.as_str());
    assert_eq!(closed.payload()["reason"], "daemon_shutdown");
    let after: Vec<String> = sse.rest().await.into_iter().map(|e| e.event).collect();
    assert!(after.is_empty(), "events after session_closed: {after:?}");
    assert!(sse.ended);

    let status = d.wait_exit(AGENT_GRACE + MARGIN);
    assert_eq!(status.code(), Some(0), "stderr:\n{}", d.stderr());
    wait_gone(agent).await;
    wait_gone(guard).await;
    assert_eq!(
        d.tmp_entries(),
        Vec::<String>::new(),
        "what the agent left in its TMPDIR went with the daemon"
    );
}

#[tokio::test]
async fn sigterm_during_a_turn_ends_the_turn_then_the_session() {
    let mut d = Daemon::start(&[]);
    let sid = session(&d).await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let prompt_id =
        d.prompt_async(&sid, None, "stall").await["promptId"].as_str().expect("promptId").to_owned();
    let deadline = Instant::now() + WAIT;
    loop {
        let status: Value = http()
            .get(d.url(&format!("/session/{sid}")))
            .send()
            .await
            .expect("GET")
            .json()
            .await
            .expect("json");
        if status["hasActivePrompt"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "the stalled turn never started: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await; // polling the session's status
    }

    d.signal(Signal::TERM);
    let events = sse.until_type("session_closed").await;
    let turn: Vec<&Event> =
        events.iter().filter(|e| matches!(e.event.as_str(), "turn_complete" | "turn_error")).collect();
    assert_eq!(turn.len(), 1, "one turn event: {:?}", events.iter().map(|e| &e.event).collect::<Vec<_>>());
    assert_eq!(turn[0].payload()["promptId"], prompt_id.as_str());
    assert_eq!(events.last().expect("closed").payload()["reason"], "daemon_shutdown");
    assert!(sse.rest().await.is_empty());
    assert_eq!(d.wait_exit(AGENT_GRACE + MARGIN).code(), Some(0), "stderr:\n{}", d.stderr());
}

#[tokio::test]
async fn new_sessions_are_refused_while_draining() {
    let mut d = Daemon::start(&[]);
    let sid = session(&d).await;
    make_agent_stubborn(&d, &sid).await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    d.signal(Signal::TERM);
    // The drain ends every stream before it waits for the agents.
    sse.rest().await;
    // The stubborn agent holds the drain open for its whole grace; creates meanwhile are refused.
    let res = http().post(d.url("/session")).json(&json!({})).send().await.expect("POST");
    let status = res.status();
    let retry = res.headers().get("retry-after").map(|v| v.to_str().expect("ascii").to_owned());
    let body: Value = res.json().await.expect("json");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "daemon_draining");
    assert_eq!(retry.as_deref(), Some("5"));
    d.signal(Signal::TERM);
    d.wait_exit(WAIT);
}

#[tokio::test]
async fn a_second_sigint_kills_the_agents_and_exits_1() {
    let mut d = Daemon::start(&[]);
    let sid = session(&d).await;
    let agent = agent_pid(&d, &sid).await;
    let guard = guard_of(&d, agent);
    make_agent_stubborn(&d, &sid).await;
    write_in_agent_tmp(&d, &sid).await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;

    let started = Instant::now();
    d.signal(Signal::INT);
    // Streams end only in the drain: once this one has, the first signal has been taken.
    sse.rest().await;
    d.signal(Signal::INT);
    let status = d.wait_exit(AGENT_GRACE);
    let took = started.elapsed();
    assert_eq!(status.code(), Some(1), "stderr:\n{}", d.stderr());
    assert!(took < AGENT_GRACE, "exit took {took:?}: the second signal did not cut the grace short");
    wait_gone(agent).await;
    wait_gone(guard).await;
    assert_eq!(d.tmp_entries(), Vec::<String>::new(), "the killed agent's TMPDIR went with the daemon");
}

#[tokio::test]
async fn an_agent_ignoring_sigterm_and_lingering_is_killed_at_shutdown() {
    let mut d = Daemon::start(&[]);
    let sid = session(&d).await;
    let agent = agent_pid(&d, &sid).await;
    let guard = guard_of(&d, agent);
    make_agent_stubborn(&d, &sid).await;

    d.signal(Signal::TERM);
    let status = d.wait_exit(AGENT_GRACE + MARGIN);
    assert_eq!(status.code(), Some(0), "stderr:\n{}", d.stderr());
    wait_gone(agent).await;
    wait_gone(guard).await;
}

#[tokio::test]
async fn a_sigkilled_daemon_leaves_no_agent_behind() {
    let mut d = Daemon::start(&[]);
    let sid = session(&d).await;
    let agent = agent_pid(&d, &sid).await;
    let guard = guard_of(&d, agent);
    // Stdin EOF alone would not stop it now: only the guard's group kill does.
    make_agent_stubborn(&d, &sid).await;
    assert!(alive(agent) && alive(guard));

    d.signal(Signal::KILL);
    let status = d.wait_exit(WAIT);
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
    wait_gone(agent).await;
    wait_gone(guard).await;
}

#[tokio::test]
async fn a_sigkilled_daemon_leaves_nothing_running_in_its_workspace() {
    // Agents of every workspace die with the daemon, not just the primary one's.
    let second = tempfile::tempdir().expect("tempdir");
    let second_path = std::fs::canonicalize(second.path()).expect("canonical");
    let second_str = second_path.to_str().expect("utf-8").to_owned();
    let mut d = Daemon::start(&["--workspace", &second_str]);
    let a = session(&d).await;
    let b =
        d.create(None, json!({"cwd": second_str})).await["sessionId"].as_str().expect("sessionId").to_owned();
    let agents = [agent_pid(&d, &a).await, agent_pid(&d, &b).await];
    assert_ne!(agents[0], agents[1], "one agent per workspace");
    let guards = agents.map(|agent| guard_of(&d, agent));
    make_agent_stubborn(&d, &a).await;
    make_agent_stubborn(&d, &b).await;

    d.signal(Signal::KILL);
    d.wait_exit(WAIT);
    for pid in agents.into_iter().chain(guards) {
        wait_gone(pid).await;
    }
    let needle = format!("agent-guard\0--parent\0{}\0", d.pid());
    assert_eq!(pids_with(&needle), Vec::<u32>::new(), "guards of the dead daemon still running");
}

#[tokio::test]
async fn an_unknown_agent_program_warns_and_creates_fail_with_502() {
    let d = Daemon::start(&["--agent", "no-such-agent-xyz --acp"]);
    let warning = wait_stderr(&d, "--agent demo").await;
    let warning = warning.lines().find(|l| l.contains("--agent demo")).expect("warning line");
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("no-such-agent-xyz"), "{warning}");

    for _ in 0..2 {
        let res = http().post(d.url("/session")).json(&json!({})).send().await.expect("POST");
        let status = res.status();
        let body: Value = res.json().await.expect("json");
        assert_eq!(status, 502, "{body}");
        assert_eq!(body["code"], "agent_start_failed");
        let message = body["error"].as_str().expect("error text");
        assert!(message.contains("no-such-agent-xyz") && message.contains("not found"), "{message}");
    }
    let health = http().get(d.url("/health?deep=1")).send().await.expect("health");
    assert_eq!(health.status(), 200);
    let health: Value = health.json().await.expect("json");
    assert_eq!(health["sessions"], 0);
}

/// Issue #16, item 1: a stderr whose reader is gone (EPIPE on every log line) neither kills the
/// task that logs nor the signal path: creates (each logs several lines) and prompts still work,
/// and the first SIGTERM still drains and exits 0.
#[tokio::test]
async fn a_daemon_whose_stderr_reader_is_gone_keeps_serving_and_drains_on_sigterm() {
    let mut d = Daemon::start_with_stderr_closed(&["--session-scope", "thread"]);
    for _ in 0..3 {
        let sid = session(&d).await;
        assert_eq!(run_prompt(&d, &sid, "hello").await, "hello");
    }
    d.signal(Signal::TERM);
    let status = d.wait_exit(AGENT_GRACE + MARGIN);
    assert_eq!(status.code(), Some(0));
}

/// Issue #16, item 1: a panic in any task ends the daemon with status 101 after killing every
/// agent, rather than leaving it half alive (the debug build panics a task on SIGUSR2).
#[tokio::test]
async fn a_panicking_task_kills_the_agents_and_exits_101() {
    let mut d = Daemon::start(&[]);
    let sid = session(&d).await;
    let agent = agent_pid(&d, &sid).await;
    write_in_agent_tmp(&d, &sid).await;
    d.signal(Signal::USR2);
    let status = d.wait_exit(MARGIN + MARGIN);
    assert_eq!(status.code(), Some(101), "stderr:\n{}", d.stderr());
    assert!(d.stderr().contains("a task panicked"), "stderr:\n{}", d.stderr());
    wait_gone(agent).await;
    assert_eq!(d.tmp_entries(), Vec::<String>::new(), "the agent's TMPDIR went with the daemon");
}

/// A daemon killed outright (SIGKILL: no way out of its own) leaves its scratch directory, with
/// what its agent wrote there, in `TMPDIR`; the next daemon of the user to start removes it, and
/// leaves alone the one of a daemon still running.
#[tokio::test]
async fn what_a_sigkilled_daemons_agents_left_in_tmpdir_is_removed_by_the_next_daemon() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let tmp_path = std::fs::canonicalize(tmp.path()).expect("canonical");
    let env = [("TMPDIR", tmp_path.to_str().expect("utf-8"))];
    let running = Daemon::start_env(&[], &env);
    let running_left = write_in_agent_tmp(&running, &session(&running).await).await;
    let mut killed = Daemon::start_env(&[], &env);
    let sid = session(&killed).await;
    let agent = agent_pid(&killed, &sid).await;
    let killed_left = write_in_agent_tmp(&killed, &sid).await;
    killed.signal(Signal::KILL);
    killed.wait_exit(WAIT);
    wait_gone(agent).await;
    assert!(killed_left.exists(), "SIGKILL left it (nothing else could have removed it)");

    let next = Daemon::start_env(&[], &env);
    let scratch =
        |left: &std::path::Path| left.parent().and_then(std::path::Path::parent).map(|p| p.to_owned());
    assert!(!scratch(&killed_left).expect("scratch").exists(), "the dead daemon's scratch directory is gone");
    assert!(running_left.exists(), "the running daemon's agent keeps its file");
    let said = wait_stderr(&next, "removed the scratch directories").await;
    assert!(said.contains("swept=1"), "one, not the running daemon's: {said}");
}

/// A session the drain has already ended (its `session_closed` is out, so it left the table) is
/// still refused as draining, not as unknown: the listener answers until the agents are gone, and
/// a stubborn agent keeps that window open for its whole grace.
#[tokio::test]
async fn a_prompt_to_a_session_the_drain_ended_is_503_daemon_draining() {
    let mut d = Daemon::start(&[]);
    let sid = session(&d).await;
    make_agent_stubborn(&d, &sid).await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    d.signal(Signal::TERM);
    sse.until_type("session_closed").await;
    let refused = d.post_async(&sid, None, text_prompt("hello")).await;
    assert_eq!(
        (refused.status, refused.body["code"].as_str()),
        (503, Some("daemon_draining")),
        "{}",
        refused.text
    );
    assert_eq!(refused.header("retry-after"), Some("5"));
    let status = d.wait_exit(AGENT_GRACE + MARGIN);
    assert_eq!(status.code(), Some(0), "stderr:\n{}", d.stderr());
}

/// Finding d: while the daemon drains, a prompt to a session that is still live (its turn has not
/// answered the cancel yet) is refused `503 daemon_draining`, like a create, not `404`.
#[tokio::test]
async fn a_prompt_to_a_live_session_while_draining_is_503_daemon_draining() {
    let mut d = Daemon::start(&[]);
    let sid = session(&d).await;
    // A turn that ignores `session/cancel` keeps the session live through the drain's grace.
    let queued = d.prompt_async(&sid, None, "hold 30000").await;
    assert!(queued["promptId"].is_string(), "{queued}");
    // Running, not only queued: a drain answers a queued prompt at once, and the daemon could be
    // gone before the loop below asks (CI saw a connection closed unanswered).
    d.until_turn_runs(&sid).await;
    d.signal(Signal::TERM);
    // Prompts are queued (202, or 503 prompt_queue_full) until the drain begins; the first one after
    // that must be refused as draining, while the held turn keeps the session live (5 s).
    let deadline = Instant::now() + WAIT;
    let refused = loop {
        let reply = d.post_async(&sid, None, text_prompt("hello")).await;
        match (reply.status, reply.body["code"].as_str()) {
            (202, _) | (503, Some("prompt_queue_full")) => {}
            _ => break reply,
        }
        assert!(Instant::now() < deadline, "the drain never began");
    };
    assert_eq!(
        (refused.status, refused.body["code"].as_str()),
        (503, Some("daemon_draining")),
        "{}",
        refused.text
    );
    assert_eq!(refused.header("retry-after"), Some("5"));
    let status = d.wait_exit(AGENT_GRACE + MARGIN + MARGIN);
    assert_eq!(status.code(), Some(0), "stderr:\n{}", d.stderr());
}

/// Issue #16, item 5 (the agents' side): a process the agent started outside its process group
/// (`setsid`) dies with the agent, whether the agent dies or the daemon is SIGKILLed.
#[tokio::test]
async fn processes_the_agent_started_outside_its_group_die_with_it() {
    let mut d = Daemon::start(&["--session-scope", "thread"]);
    let sid = session(&d).await;
    let first = d.workspace.join("first.pid");
    assert_eq!(run_prompt(&d, &sid, &format!("escapee {}", first.display())).await, "started");
    let first = pid_in_file(&first).await;
    assert!(alive(first));
    // The agent crashes: its guard takes what it left behind.
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    d.prompt_async(&sid, None, "crash").await;
    sse.until_type("session_died").await;
    wait_gone(first).await;
    // A fresh agent, then a SIGKILLed daemon: the guard sees it go and takes everything.
    let sid = session(&d).await;
    let second = d.workspace.join("second.pid");
    assert_eq!(run_prompt(&d, &sid, &format!("escapee {}", second.display())).await, "started");
    let second = pid_in_file(&second).await;
    d.signal(Signal::KILL);
    d.wait_exit(WAIT);
    wait_gone(second).await;
}

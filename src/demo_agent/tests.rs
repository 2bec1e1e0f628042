//! The demo agent, driven over in-memory pipes as the daemon drives it over stdio.

use super::directive::{Directive, parse_directive, split_chunks};
use super::*;
use tokio::io::{AsyncBufReadExt, DuplexStream, Lines, ReadHalf, WriteHalf};

#[test]
fn directive_words_are_case_insensitive_and_plain_text_is_echo() {
    assert_eq!(parse_directive("hello world"), Directive::Echo);
    assert_eq!(parse_directive(""), Directive::Echo);
    assert_eq!(parse_directive("\n  \n  STALL now\nmore"), Directive::Stall);
    assert_eq!(parse_directive("Pid"), Directive::Pid);
    assert_eq!(parse_directive("echo-meta"), Directive::EchoMeta);
    assert_eq!(parse_directive("ask"), Directive::Ask);
    assert_eq!(parse_directive("elicit"), Directive::Elicit);
    assert_eq!(
        parse_directive("elicit-url https://x.example/ 250"),
        Directive::ElicitUrl { url: "https://x.example/", complete_after_ms: Some(250) }
    );
    assert_eq!(
        parse_directive("elicit-url https://x.example/"),
        Directive::ElicitUrl { url: "https://x.example/", complete_after_ms: None }
    );
    assert!(matches!(parse_directive("elicit-url"), Directive::Usage(_)));
    assert!(matches!(parse_directive("elicit-url https://x.example/ soon"), Directive::Usage(_)));
    assert_eq!(
        parse_directive("elicit-raw {\"mode\": \"url\"}\n"),
        Directive::ElicitRaw { params: "{\"mode\": \"url\"}" }
    );
    assert!(matches!(parse_directive("elicit-raw"), Directive::Usage(_)));
    assert_eq!(parse_directive("env DEMO_ROLE"), Directive::Env { name: "DEMO_ROLE" });
    assert!(matches!(parse_directive("env MEDIATORD_TOKEN"), Directive::Usage(_)));
    assert!(matches!(parse_directive("env"), Directive::Usage(_)));
    assert_eq!(parse_directive("ignore-sigterm"), Directive::IgnoreSigterm);
    assert_eq!(parse_directive("linger"), Directive::Linger);
    assert_eq!(parse_directive("malformed"), Directive::Malformed { count: None });
    assert_eq!(parse_directive("malformed 5"), Directive::Malformed { count: Some(5) });
    assert_eq!(parse_directive("early 3 10"), Directive::Early { count: 3, bytes: 10 });
    assert!(matches!(parse_directive("early 3"), Directive::Usage(_)));
    assert_eq!(parse_directive("hold 5"), Directive::Hold { ms: 5 });
    assert_eq!(parse_directive("writer of things"), Directive::Echo);
}

#[test]
fn directive_arguments_parse_or_give_usage() {
    assert_eq!(
        parse_directive("write notes/a.txt  hello   there\nnext line  "),
        Directive::Write { path: "notes/a.txt", text: "hello   there\nnext line  " }
    );
    assert_eq!(parse_directive("write a.txt"), Directive::Write { path: "a.txt", text: "" });
    assert_eq!(parse_directive("patch b.txt hi"), Directive::Patch { path: "b.txt", text: "hi" });
    assert!(matches!(parse_directive("write"), Directive::Usage(_)));
    assert_eq!(parse_directive("fswrite ../x y"), Directive::FsWrite { path: "../x", text: "y" });
    assert_eq!(parse_directive("shell rm -rf  build"), Directive::Shell { command: "rm -rf  build" });
    assert_eq!(parse_directive("put ../x y z"), Directive::Put { path: "../x", text: "y z" });
    assert_eq!(parse_directive("run touch  /tmp/x"), Directive::Run { command: "touch  /tmp/x" });
    assert_eq!(parse_directive("run"), Directive::Usage("usage: run <command...>"));
    assert_eq!(parse_directive("put x"), Directive::Put { path: "x", text: "" }, "an empty file");
    assert_eq!(parse_directive("put"), Directive::Usage("usage: put <path> <text...>"));
    assert_eq!(
        parse_directive("\n shell cat <<EOF\nline 2\nEOF\n"),
        Directive::Shell { command: "cat <<EOF\nline 2\nEOF" }
    );
    assert!(matches!(parse_directive("shell"), Directive::Usage(_)));
    assert_eq!(parse_directive("look src/a.rs"), Directive::Look { path: "src/a.rs" });
    assert!(matches!(parse_directive("look"), Directive::Usage(_)));
    assert_eq!(parse_directive("permissions 3"), Directive::Permissions { count: 3 });
    assert_eq!(parse_directive("permissions 99999999"), Directive::Permissions { count: MAX_PERMISSIONS });
    assert_eq!(parse_directive("stream 5"), Directive::Stream { count: 5, rate: None });
    assert_eq!(parse_directive("stream 5 2.5"), Directive::Stream { count: 5, rate: Some(2.5) });
    assert_eq!(
        parse_directive("stream 99999999999"),
        Directive::Stream { count: MAX_STREAM_CHUNKS, rate: None }
    );
    assert!(matches!(parse_directive("stream 5 0"), Directive::Usage(_)));
    assert!(matches!(parse_directive("stream 5 nan"), Directive::Usage(_)));
    assert!(matches!(parse_directive("stream x"), Directive::Usage(_)));
    assert_eq!(parse_directive("read a.txt"), Directive::Read { path: "a.txt", line: None, limit: None });
    assert_eq!(
        parse_directive("read /abs 2 10"),
        Directive::Read { path: "/abs", line: Some(2), limit: Some(10) }
    );
    assert!(matches!(parse_directive("read a.txt two"), Directive::Usage(_)));
    assert_eq!(parse_directive("sleep 250"), Directive::Sleep { ms: 250 });
    assert!(matches!(parse_directive("sleep"), Directive::Usage(_)));
    assert_eq!(parse_directive("crash"), Directive::Crash { code: DEFAULT_CRASH_CODE });
    assert_eq!(parse_directive("crash 7"), Directive::Crash { code: 7 });
    assert!(matches!(parse_directive("crash x"), Directive::Usage(_)));
    assert_eq!(parse_directive("edit a.txt new text"), Directive::Edit { path: "a.txt", text: "new text" });
    assert!(matches!(parse_directive("edit"), Directive::Usage(_)));
    assert_eq!(parse_directive("mode plan"), Directive::Mode { id: "plan" });
    assert!(matches!(parse_directive("mode"), Directive::Usage(_)));
    assert_eq!(parse_directive("showcase"), Directive::Showcase);
}

#[test]
fn echo_chunks_concatenate_to_the_original_text() {
    for text in ["", "a", "ab", "abc", "abcd", "hello world", "héllo wörld ✓", "ü\n\nx  "] {
        let pieces = split_chunks(text, ECHO_CHUNKS);
        assert_eq!(pieces.concat(), text);
        assert_eq!(pieces.len(), text.chars().count().min(ECHO_CHUNKS));
        assert!(pieces.iter().all(|p| !p.is_empty()));
    }
}

#[test]
fn relative_paths_join_the_cwd_without_normalising() {
    assert_eq!(join_path("/ws", "a/b.txt"), "/ws/a/b.txt");
    assert_eq!(join_path("/ws/", "../x"), "/ws/../x");
    assert_eq!(join_path("/", "x"), "/x");
    assert_eq!(join_path("/ws", "/etc/passwd"), "/etc/passwd");
}

#[test]
fn help_lists_every_directive() {
    for word in [
        "write",
        "shell",
        "look",
        "permissions",
        "options",
        "token",
        "stream",
        "read",
        "fswrite",
        "sleep",
        "hold",
        "early",
        "stall",
        "crash",
        "malformed",
        "ignore-sigterm",
        "linger",
        "pid",
        "env",
        "leak",
        "escapee",
        "echo-meta",
        "edit",
        "mode",
        "showcase",
        "hostile",
    ] {
        assert!(DIRECTIVES_HELP.lines().any(|l| l.trim_start().starts_with(word)), "{word}");
    }
}

/// The client side of an in-memory agent.
struct Client {
    to_agent: WriteHalf<DuplexStream>,
    from_agent: Lines<BufReader<ReadHalf<DuplexStream>>>,
}

const TEST_TIMEOUT: Duration = Duration::from_secs(5);

impl Client {
    fn start() -> Client {
        let (client, agent) = tokio::io::duplex(1 << 20);
        let (agent_read, agent_write) = tokio::io::split(agent);
        tokio::spawn(serve(BufReader::new(agent_read), agent_write, DemoOptions::default()));
        let (from_agent, to_agent) = tokio::io::split(client);
        Client { to_agent, from_agent: BufReader::new(from_agent).lines() }
    }

    async fn send_raw(&mut self, line: &str) {
        self.to_agent.write_all(format!("{line}\n").as_bytes()).await.expect("pipe open");
    }

    async fn send(&mut self, value: Value) {
        self.send_raw(&value.to_string()).await;
    }

    async fn request(&mut self, id: i64, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(TEST_TIMEOUT, self.from_agent.next_line())
            .await
            .expect("agent answers in time")
            .expect("pipe readable")
            .expect("agent still writing");
        serde_json::from_str(&line).expect("agent writes JSON")
    }

    async fn new_session(&mut self, cwd: &str) -> String {
        self.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []})).await;
        let reply = self.recv().await;
        reply["result"]["sessionId"].as_str().expect("a session id").to_owned()
    }

    async fn prompt(&mut self, id: i64, session: &str, text: &str) {
        let params = json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]});
        self.request(id, "session/prompt", params).await;
    }

    /// A client of a fresh agent, with a session in `/ws` and the prompt `text` sent (id 2).
    async fn prompting(text: &str) -> (Client, String) {
        let mut client = Client::start();
        let session = client.new_session("/ws").await;
        client.prompt(2, &session, text).await;
        (client, session)
    }

    async fn cancel(&mut self, session: &str) {
        self.send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}))
            .await;
    }
}

#[tokio::test]
async fn initialize_session_new_and_echo_prompt() {
    let mut client = Client::start();
    client.send_raw("this is not json").await;
    client.request(0, "initialize", json!({"protocolVersion": 1})).await;
    let init = client.recv().await;
    assert_eq!(init["id"], 0);
    assert_eq!(init["result"]["protocolVersion"], 1);
    assert_eq!(init["result"]["_meta"]["qwen-code/external-tool-guard-ready"], "required-v1");

    let session = client.new_session("/ws").await;
    assert!(session.starts_with("demo-"));

    client.prompt(2, &session, "hello world").await;
    let mut echoed = String::new();
    for _ in 0..ECHO_CHUNKS {
        let update = client.recv().await;
        assert_eq!(update["method"], "session/update");
        assert_eq!(update["params"]["sessionId"], session.as_str());
        assert_eq!(update["params"]["update"]["sessionUpdate"], "agent_message_chunk");
        echoed.push_str(update["params"]["update"]["content"]["text"].as_str().expect("text"));
    }
    assert_eq!(echoed, "hello world");
    assert_eq!(client.recv().await, json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}));

    client.request(3, "session/set_model", json!({"sessionId": session, "modelId": "nope"})).await;
    assert_eq!(client.recv().await["error"]["code"], INVALID_PARAMS);
    client.request(4, "no/such_method", json!({})).await;
    assert_eq!(client.recv().await["error"]["code"], crate::acp::METHOD_NOT_FOUND);
}

#[tokio::test]
async fn write_prompt_allowed_writes_through_the_client() {
    let (mut client, session) = Client::prompting("write notes/a.txt hi there").await;

    // The file is read first: not there, so the change is a new file's.
    let read = client.recv().await;
    assert_eq!(read["method"], "fs/read_text_file");
    assert_eq!(read["params"]["path"], "/ws/notes/a.txt");
    let missing = json!({"code": crate::acp::RESOURCE_NOT_FOUND, "message": "no such file"});
    client.send(json!({"jsonrpc": "2.0", "id": read["id"], "error": missing})).await;
    let tool_call = client.recv().await["params"]["update"].clone();
    assert_eq!(tool_call["sessionUpdate"], "tool_call");
    assert_eq!(tool_call["content"][0]["oldText"], Value::Null);
    assert_eq!(tool_call["kind"], "edit");
    assert_eq!(tool_call["title"], "Write notes/a.txt");
    assert_eq!(tool_call["locations"], json!([{"path": "/ws/notes/a.txt"}]));

    let ask = client.recv().await;
    assert_eq!(ask["method"], "session/request_permission");
    assert_eq!(ask["params"]["toolCall"]["toolCallId"], tool_call["toolCallId"]);
    assert_eq!(ask["params"]["options"][0]["kind"], "allow_once");
    let outcome = json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});
    client.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": outcome})).await;

    let write = client.recv().await;
    assert_eq!(write["method"], "fs/write_text_file");
    assert_eq!(
        write["params"],
        json!({"sessionId": session, "path": "/ws/notes/a.txt", "content": "hi there"})
    );
    client.send(json!({"jsonrpc": "2.0", "id": write["id"], "result": null})).await;

    let done = client.recv().await["params"]["update"].clone();
    assert_eq!(done["sessionUpdate"], "tool_call_update");
    assert_eq!(done["status"], "completed");
    assert_eq!(client.recv().await["params"]["update"]["content"]["text"], "wrote notes/a.txt");
    assert_eq!(client.recv().await["result"]["stopReason"], "end_turn");
}

#[tokio::test]
async fn cancel_ends_a_stalled_prompt() {
    let (mut client, session) = Client::prompting("stall").await;
    client.cancel(&session).await;
    assert_eq!(
        client.recv().await,
        json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "cancelled"}})
    );

    // The next prompt of the session is not born cancelled.
    client.prompt(3, &session, "pid").await;
    let pid = client.recv().await["params"]["update"]["content"]["text"].clone();
    assert_eq!(pid, std::process::id().to_string());
    assert_eq!(client.recv().await["result"]["stopReason"], "end_turn");
}

#[tokio::test]
async fn cancel_ends_a_turn_waiting_on_an_unanswered_permission() {
    let (mut client, session) = Client::prompting("shell make deploy").await;
    assert_eq!(client.recv().await["params"]["update"]["kind"], "execute");
    assert_eq!(client.recv().await["method"], "session/request_permission");
    client.cancel(&session).await;
    assert_eq!(client.recv().await["result"]["stopReason"], "cancelled");
}

#[tokio::test]
async fn modes_gate_writes_and_the_agent_announces_its_own_switch() {
    let mut client = Client::start();
    client.request(1, "session/new", json!({"cwd": "/ws", "mcpServers": []})).await;
    let created = client.recv().await["result"].clone();
    let session = created["sessionId"].as_str().expect("id").to_owned();
    let modes: Vec<&str> = created["modes"]["availableModes"]
        .as_array()
        .expect("modes")
        .iter()
        .map(|m| m["id"].as_str().expect("id"))
        .collect();
    assert_eq!(modes, ["default", "accept-edits", "plan"]);
    assert_eq!(created["modes"]["currentModeId"], "default");

    client.request(2, "session/set_mode", json!({"sessionId": session, "modeId": "nope"})).await;
    assert_eq!(client.recv().await["error"]["code"], INVALID_PARAMS);
    client.request(3, "session/set_mode", json!({"sessionId": session, "modeId": "accept-edits"})).await;
    assert_eq!(client.recv().await, json!({"jsonrpc": "2.0", "id": 3, "result": {}}));

    // accept-edits: the write is announced and done without a permission request.
    client.prompt(4, &session, "write a.txt hi").await;
    let read = client.recv().await;
    assert_eq!(read["method"], "fs/read_text_file");
    client.send(json!({"jsonrpc": "2.0", "id": read["id"], "result": {"content": "before"}})).await;
    assert_eq!(client.recv().await["params"]["update"]["sessionUpdate"], "tool_call");
    let write = client.recv().await;
    assert_eq!(write["method"], "fs/write_text_file");
    client.send(json!({"jsonrpc": "2.0", "id": write["id"], "result": null})).await;
    assert_eq!(client.recv().await["params"]["update"]["status"], "completed");
    assert_eq!(client.recv().await["params"]["update"]["content"]["text"], "wrote a.txt");
    assert_eq!(client.recv().await["result"]["stopReason"], "end_turn");

    // The agent switches to plan by itself, says so, and then refuses to write.
    client.prompt(5, &session, "mode plan").await;
    let update = client.recv().await["params"]["update"].clone();
    assert_eq!(update, json!({"sessionUpdate": "current_mode_update", "currentModeId": "plan"}));
    assert_eq!(client.recv().await["params"]["update"]["content"]["text"], "mode plan");
    assert_eq!(client.recv().await["result"]["stopReason"], "end_turn");
    client.prompt(6, &session, "write a.txt again").await;
    assert_eq!(client.recv().await["params"]["update"]["content"]["text"], "plan mode: not writing a.txt");
    assert_eq!(client.recv().await["result"]["stopReason"], "end_turn");
}

/// Issue #44: `write` showed "new file" over a file that exists. It reads the file first, as
/// `edit` does, and asks with the old text in its diff.
#[tokio::test]
async fn write_and_edit_read_the_file_and_ask_with_a_diff() {
    for directive in ["write", "edit"] {
        let (mut client, _) = Client::prompting(&format!("{directive} a.txt new text")).await;
        let read = client.recv().await;
        assert_eq!(read["method"], "fs/read_text_file");
        assert_eq!(read["params"]["path"], "/ws/a.txt");
        client.send(json!({"jsonrpc": "2.0", "id": read["id"], "result": {"content": "old text"}})).await;
        let tool_call = client.recv().await["params"]["update"].clone();
        assert_eq!(
            tool_call["content"],
            json!([{"type": "diff", "path": "/ws/a.txt", "oldText": "old text", "newText": "new text"}]),
            "{directive}"
        );
        assert_eq!(client.recv().await["method"], "session/request_permission");
    }
}

#[tokio::test]
async fn stream_emits_numbered_chunks_with_timestamps() {
    let (mut client, _) = Client::prompting("stream 3").await;
    for i in 0..3 {
        let update = client.recv().await["params"]["update"].clone();
        assert_eq!(update["content"]["text"], format!("tok{i} "));
        assert!(update["_meta"]["emittedAtUs"].as_u64().is_some_and(|us| us > 0));
    }
    assert_eq!(client.recv().await["result"]["stopReason"], "end_turn");
}

//! One running prompt of the demo agent: what each [`Directive`] does, the agent's own calls to
//! the client (permission requests, questions, file reads and writes) and the turn's updates.

use super::directive::{Directive, parse_directive, split_chunks};
use super::*;

/// What a write does in each mode.
pub(super) enum WriteGate {
    Ask,
    Allow,
    Refuse,
}

impl WriteGate {
    fn of(mode: &str) -> WriteGate {
        match mode {
            "accept-edits" => WriteGate::Allow,
            "plan" => WriteGate::Refuse,
            _ => WriteGate::Ask,
        }
    }
}

/// The text of `showcase`: each Markdown construct a client is expected to render.
pub(super) const SHOWCASE_MARKDOWN: &str = "## What I found\n\n\
The workspace holds **three** entries; `src/` is the *interesting* one.\n\n\
- `Cargo.toml`: the manifest\n- `README.md`: the [documentation](https://example.com/docs)\n\n\
```sh\ncargo test --workspace\n```\n\n\
> Ask me to `write` a file to see a permission request.\n";

/// What `hostile` writes: set the window title (OSC 0 and 2), write the clipboard (OSC 52), clear
/// the screen and home the cursor (CSI), ring the bell, switch off the cursor and the alternate
/// screen (DECTCEM, 1049), return the carriage, a C1 "next line", a right-to-left override that
/// reverses a file name, a zero-width space; then a visible end mark.
pub const HOSTILE: &str = "\u{1b}]0;pwned-title\u{7}\u{1b}]2;pwned-title\u{1b}\\\u{1b}]52;c;cHduZWQ=\u{7}\u{1b}[2J\u{1b}[H\u{1b}[?25l\u{1b}[?1049l\r\u{85}\u{202e}gnp.exe\u{200b} HOSTILE-END";
/// The length of `hostile`'s unbroken line.
pub(super) const HOSTILE_LINE_BYTES: usize = 1024 * 1024;

/// The turn ended because it was cancelled (by `session/cancel` or by a `cancelled` permission
/// outcome).
pub(super) struct Cancelled;

#[derive(Clone, Copy, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum StopReason {
    EndTurn,
    Cancelled,
}

pub(super) enum Permission {
    Selected(String),
    Failed(RpcError),
}

/// One running prompt.
pub(super) struct Turn {
    pub(super) shared: Arc<AgentState>,
    pub(super) session_id: String,
    /// `session_id` as a JSON string, for the hand-built `stream` lines.
    pub(super) session_json: String,
    pub(super) cwd: String,
    pub(super) cancel: CancellationToken,
}

/// Removes a pending call's entry however its wait ends.
pub(super) struct PendingGuard<'a> {
    shared: &'a AgentState,
    id: i64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(&self.shared.pending).remove(&self.id);
    }
}

impl Turn {
    /// The prompt's answer: how the turn stopped, or (`leak`) an error.
    pub(super) async fn run(&self, text: &str) -> Result<StopReason, RpcError> {
        if let Directive::Leak { name } = parse_directive(text) {
            let value = std::env::var(name).unwrap_or_default();
            let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{name}={value}\n").as_bytes());
            let mut error = RpcError::new(INTERNAL_ERROR, format!("failed with {name}={value}"));
            error.data = Some(json!({"details": format!("the value was {value}")}));
            return Err(error);
        }
        match self.directive(text).await {
            Ok(()) => Ok(StopReason::EndTurn),
            Err(Cancelled) => Ok(StopReason::Cancelled),
        }
    }

    async fn directive(&self, text: &str) -> Result<(), Cancelled> {
        match parse_directive(text) {
            Directive::Echo => {
                for piece in split_chunks(text, ECHO_CHUNKS) {
                    self.chunk(piece).await;
                }
            }
            Directive::Write { path, text } | Directive::Edit { path, text } => {
                self.write(path, text).await?
            }
            Directive::Patch { path, text } => self.patch(path, text).await?,
            Directive::Mode { id } => self.switch_mode(id).await,
            Directive::Showcase => self.showcase().await,
            Directive::Hostile => self.hostile().await,
            Directive::Shell { command } => self.shell(command).await?,
            Directive::Look { path } => self.look(path).await?,
            Directive::Permissions { count } => self.permissions(count).await?,
            Directive::Options { count } => self.options(count).await?,
            Directive::Ask => self.ask().await?,
            Directive::Elicit => self.elicit_form().await?,
            Directive::ElicitUrl { url, complete_after_ms } => {
                self.elicit_url(url, complete_after_ms).await?
            }
            Directive::ElicitRaw { params } => match serde_json::from_str::<Value>(params) {
                Ok(Value::Object(mut params)) => {
                    // A test may name another session (one the daemon must refuse).
                    params.entry("sessionId").or_insert_with(|| json!(self.session_id));
                    let reply = self.elicit(Value::Object(params)).await?;
                    self.chunk(&reply).await;
                }
                _ => self.chunk("usage: elicit-raw <a JSON object>").await,
            },
            Directive::Token { bytes, chunks, rate } => self.token(bytes, chunks, rate).await?,
            Directive::Stream { count, rate: None } => self.stream_fast(count).await?,
            Directive::Stream { count, rate: Some(rate) } => self.stream_paced(count, rate).await?,
            Directive::Read { path, line, limit } => {
                let mut params = json!({"sessionId": self.session_id, "path": join_path(&self.cwd, path)});
                if let Some(line) = line {
                    params["line"] = json!(line);
                }
                if let Some(limit) = limit {
                    params["limit"] = json!(limit);
                }
                let reply = match self.call(method::FS_READ_TEXT_FILE, params).await? {
                    Ok(result) => match result.get("content").and_then(Value::as_str) {
                        Some(content) => content.to_owned(),
                        None => "read failed: result has no content".to_owned(),
                    },
                    Err(e) => format!("read failed: {}", describe(&e)),
                };
                self.chunk(&reply).await;
            }
            Directive::FsWrite { path, text } => {
                let params = json!({"sessionId": self.session_id, "path": join_path(&self.cwd, path), "content": text});
                let reply = match self.call(method::FS_WRITE_TEXT_FILE, params).await? {
                    Ok(_) => format!("wrote {path}"),
                    Err(e) => format!("write failed: {}", describe(&e)),
                };
                self.chunk(&reply).await;
            }
            Directive::Put { path, text } => {
                let reply = match std::fs::write(join_path(&self.cwd, path), text) {
                    Ok(()) => format!("put {path}: ok"),
                    Err(e) => format!("put {path}: {e}"),
                };
                self.chunk(&reply).await;
            }
            Directive::Run { command } => self.run_command(command).await?,
            Directive::Sleep { ms } => {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ms)) => self.chunk(&format!("slept {ms}")).await,
                    () = self.cancel.cancelled() => return Err(Cancelled),
                }
            }
            Directive::Hold { ms } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                self.chunk(&format!("held {ms}")).await;
            }
            Directive::Stall => {
                self.cancel.cancelled().await;
                return Err(Cancelled);
            }
            Directive::Crash { code } => {
                tracing::info!(code, "crash directive: exiting");
                std::process::exit(code);
            }
            Directive::Malformed { count: None } => {
                self.shared.send(b"this is not json\n{\"jsonrpc\":\"2.0\"\n".to_vec()).await;
                self.chunk("sent malformed lines").await;
            }
            Directive::Malformed { count: Some(count) } => {
                for i in 0..count {
                    self.shared.send(format!("malformed line {i}\n").into_bytes()).await;
                }
                self.chunk(&format!("sent {count} malformed lines")).await;
            }
            Directive::Early { count, bytes } => {
                // A session id the daemon has never heard of, so every update is held as early.
                let unknown = format!("early-{}", uuid::Uuid::new_v4());
                let text = "x".repeat(bytes);
                for _ in 0..count {
                    let update = json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}});
                    let params = json!({"sessionId": unknown, "update": update});
                    self.shared.send(notification_line(method::SESSION_UPDATE, &params)).await;
                }
                self.chunk(&format!("sent {count} early updates")).await;
            }
            Directive::IgnoreSigterm => {
                ignore_sigterm(&self.shared);
                self.chunk("ignoring SIGTERM").await;
            }
            Directive::Linger => {
                self.shared.linger.store(true, Ordering::SeqCst);
                self.chunk("lingering").await;
            }
            Directive::Pid => self.chunk(&std::process::id().to_string()).await,
            Directive::Env { name } => {
                let value = std::env::var(name).unwrap_or_else(|_| format!("{name} is not set"));
                self.chunk(&value).await;
            }
            // Answered by `run`, before any directive runs.
            Directive::Leak { .. } => {}
            Directive::Escapee { pidfile } => {
                let script = "echo $$ > \"$1\"; exec sleep 300";
                let started = std::process::Command::new("setsid")
                    .args(["sh", "-c", script, "escapee", &join_path(&self.cwd, pidfile)])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn();
                let reply = match started {
                    Ok(_) => "started".to_owned(),
                    Err(e) => format!("cannot start: {e}"),
                };
                self.chunk(&reply).await;
            }
            Directive::EchoMeta => {
                self.update(json!({
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "echo-meta"},
                    "_meta": {"demo": {"nested": [1, 2, 3]}},
                    "extraField": "kept"
                }))
                .await;
            }
            Directive::Usage(usage) => self.chunk(usage).await,
        }
        Ok(())
    }

    async fn update(&self, update: Value) {
        record(&self.shared, &self.session_id, &update);
        let params = json!({"sessionId": self.session_id, "update": update});
        self.shared.send(notification_line(method::SESSION_UPDATE, &params)).await;
    }

    async fn chunk(&self, text: &str) {
        self.update(
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}),
        )
        .await;
    }

    async fn tool_call_status(&self, tool_call_id: &str, status: &str) {
        self.update(
            json!({"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id, "status": status}),
        )
        .await;
    }

    fn new_tool_call_id(&self) -> String {
        format!("call-{}", self.shared.next_tool_call.fetch_add(1, Ordering::Relaxed))
    }

    /// Calls the client and waits for its answer, giving up when the turn is cancelled.
    async fn call(&self, method: &str, params: Value) -> Result<Result<Value, RpcError>, Cancelled> {
        let id = self.shared.next_call_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&self.shared.pending);
            if pending.len() >= MAX_PENDING_CALLS {
                return Ok(Err(RpcError::new(INTERNAL_ERROR, "too many outstanding calls")));
            }
            pending.insert(id, tx);
        }
        let _guard = PendingGuard { shared: &self.shared, id };
        self.shared.send(request_line(id, method, &params)).await;
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(Cancelled),
            answer = rx => Ok(answer.unwrap_or_else(|_| Err(RpcError::new(INTERNAL_ERROR, "call abandoned")))),
        }
    }

    /// Asks `session/request_permission`; a `cancelled` outcome cancels the turn.
    async fn ask_permission(&self, tool_call: Value) -> Result<Permission, Cancelled> {
        self.ask_permission_with(tool_call, permission_options()).await
    }

    async fn ask_permission_with(&self, tool_call: Value, options: Value) -> Result<Permission, Cancelled> {
        let params = json!({"sessionId": self.session_id, "toolCall": tool_call, "options": options});
        let result = match self.call(method::SESSION_REQUEST_PERMISSION, params).await? {
            Ok(result) => result,
            Err(e) => return Ok(Permission::Failed(e)),
        };
        let outcome = &result["outcome"];
        match (outcome["outcome"].as_str(), outcome["optionId"].as_str()) {
            (Some("selected"), Some(option)) => Ok(Permission::Selected(option.to_owned())),
            (Some("cancelled"), _) => Err(Cancelled),
            _ => Ok(Permission::Failed(RpcError::new(
                INVALID_PARAMS,
                format!("bad permission outcome: {result}"),
            ))),
        }
    }

    /// Announces a pending tool call, asks permission for it, and reports a refusal. `Some(id)` when
    /// allowed.
    async fn gated_tool_call(&self, mut tool_call: Value) -> Result<Option<String>, Cancelled> {
        let tool_call_id = self.new_tool_call_id();
        tool_call["toolCallId"] = json!(tool_call_id);
        tool_call["status"] = json!("pending");
        let mut update = tool_call.clone();
        update["sessionUpdate"] = json!("tool_call");
        self.update(update).await;
        match self.ask_permission(tool_call).await? {
            Permission::Selected(option) if is_allow(&option) => return Ok(Some(tool_call_id)),
            Permission::Selected(_) => {
                self.tool_call_status(&tool_call_id, "failed").await;
                self.chunk("permission denied").await;
            }
            Permission::Failed(e) => {
                self.tool_call_status(&tool_call_id, "failed").await;
                self.chunk(&format!("permission request failed: {}", describe(&e))).await;
            }
        }
        Ok(None)
    }

    /// `patch`: a tool call whose approving option carries the patch (`data.diff`, as an
    /// `apply_patch` option does), so the person reads it on the option itself; written on `apply`.
    async fn patch(&self, path: &str, text: &str) -> Result<(), Cancelled> {
        let abs = join_path(&self.cwd, path);
        let tool_call_id = self.new_tool_call_id();
        let tool_call = json!({
            "toolCallId": tool_call_id, "title": format!("Patch {path}"), "kind": "edit",
            "status": "pending", "locations": [{"path": abs}],
        });
        let mut update = tool_call.clone();
        update["sessionUpdate"] = json!("tool_call");
        self.update(update).await;
        let added: String = text.split('\n').map(|l| format!("+{l}\n")).collect();
        let diff =
            format!("--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{} @@\n{added}", text.split('\n').count());
        let options = json!([
            {"optionId": "apply", "name": "Apply patch", "kind": "allow_once", "data": {"diff": diff}},
            {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"}
        ]);
        match self.ask_permission_with(tool_call, options).await? {
            Permission::Selected(option) if option == "apply" => {
                let params = json!({"sessionId": self.session_id, "path": abs, "content": text});
                let done = self.call(method::FS_WRITE_TEXT_FILE, params).await?.is_ok();
                self.tool_call_status(&tool_call_id, if done { "completed" } else { "failed" }).await;
                self.chunk(if done { "patched" } else { "patch failed" }).await;
            }
            _ => {
                self.tool_call_status(&tool_call_id, "failed").await;
                self.chunk("permission denied").await;
            }
        }
        Ok(())
    }

    /// The session's mode now.
    fn mode(&self) -> &'static str {
        lock(&self.shared.sessions).get(&self.session_id).map_or(MODES[0].0, |s| s.mode)
    }

    /// `write` (and `edit`, the same), gated by the session's mode. The file is read first
    /// (`fs/read_text_file`), so the tool call carries the change as an ACP `diff` content with
    /// the file's text as `oldText` — `null` only for a file that is not there (a new file) —, as
    /// real agents send a write, and the text in `rawInput`.
    async fn write(&self, path: &str, text: &str) -> Result<(), Cancelled> {
        let abs = join_path(&self.cwd, path);
        let ask = match WriteGate::of(self.mode()) {
            WriteGate::Refuse => {
                self.chunk(&format!("plan mode: not writing {path}")).await;
                return Ok(());
            }
            WriteGate::Ask => true,
            WriteGate::Allow => false,
        };
        let read = json!({"sessionId": self.session_id, "path": abs});
        let old_text = match self.call(method::FS_READ_TEXT_FILE, read).await? {
            Ok(result) => result.get("content").cloned().unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        let mut tool_call = json!({
            "title": format!("Write {path}"),
            "kind": "edit",
            "locations": [{"path": abs}],
            "content": [{"type": "diff", "path": abs, "oldText": old_text, "newText": text}],
            "rawInput": {"path": abs, "content": text}
        });
        let tool_call_id = if ask {
            match self.gated_tool_call(tool_call).await? {
                Some(id) => id,
                None => return Ok(()),
            }
        } else {
            let id = self.new_tool_call_id();
            tool_call["toolCallId"] = json!(id);
            tool_call["status"] = json!("in_progress");
            tool_call["sessionUpdate"] = json!("tool_call");
            self.update(tool_call).await;
            id
        };
        let params = json!({"sessionId": self.session_id, "path": abs, "content": text});
        match self.call(method::FS_WRITE_TEXT_FILE, params).await? {
            Ok(_) => {
                self.tool_call_status(&tool_call_id, "completed").await;
                self.chunk(&format!("wrote {path}")).await;
            }
            Err(e) => {
                self.tool_call_status(&tool_call_id, "failed").await;
                self.chunk(&format!("write failed: {}", e.message)).await;
            }
        }
        Ok(())
    }

    /// The agent changes its own mode, as an agent leaving plan mode does, and says so.
    async fn switch_mode(&self, id: &str) {
        let Some(mode) = mode_named(id) else {
            let known: Vec<&str> = MODES.iter().map(|(m, _, _)| *m).collect();
            self.chunk(&format!("unknown mode {id}; modes: {}", known.join(", "))).await;
            return;
        };
        if let Some(session) = lock(&self.shared.sessions).get_mut(&self.session_id) {
            session.mode = mode;
        }
        self.update(json!({"sessionUpdate": "current_mode_update", "currentModeId": mode})).await;
        self.chunk(&format!("mode {mode}")).await;
    }

    /// One of each kind of update a client renders: a thought, a plan, Markdown text, a finished
    /// tool call with output.
    async fn showcase(&self) {
        self.update(json!({
            "sessionUpdate": "agent_thought_chunk",
            "content": {"type": "text", "text": "The person wants to see every kind of update; start with a plan."}
        }))
        .await;
        self.update(json!({"sessionUpdate": "plan", "entries": [
            {"content": "Read the request", "priority": "high", "status": "completed"},
            {"content": "Run a command", "priority": "medium", "status": "completed"},
            {"content": "Answer in Markdown", "priority": "low", "status": "in_progress"}
        ]}))
        .await;
        let id = self.new_tool_call_id();
        self.update(json!({
            "sessionUpdate": "tool_call", "toolCallId": id, "title": "List the workspace", "kind": "execute",
            "status": "in_progress", "rawInput": {"command": "ls"}
        }))
        .await;
        self.update(json!({
            "sessionUpdate": "tool_call_update", "toolCallId": id, "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "Cargo.toml\nREADME.md\nsrc/\n"}}]
        }))
        .await;
        for piece in SHOWCASE_MARKDOWN.split_inclusive("\n\n") {
            self.chunk(piece).await;
        }
    }

    /// `hostile`: what a compromised or confused agent could write to take over a client's
    /// terminal or mislead its reader, in every kind of update: [`HOSTILE`] in a thought, a plan
    /// entry, a tool call's title, command and output, and a message; then a line of 1 MiB.
    async fn hostile(&self) {
        self.update(
            json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": HOSTILE}}),
        )
        .await;
        self.update(json!({"sessionUpdate": "plan", "entries": [{"content": HOSTILE, "priority": "high", "status": "pending"}]})).await;
        let id = self.new_tool_call_id();
        self.update(json!({
            "sessionUpdate": "tool_call", "toolCallId": id, "title": HOSTILE, "kind": "execute",
            "status": "completed", "rawInput": {"command": HOSTILE},
            "content": [{"type": "content", "content": {"type": "text", "text": HOSTILE}}]
        }))
        .await;
        self.chunk(&format!("{HOSTILE}\n\n")).await;
        let mut line = "M".repeat(HOSTILE_LINE_BYTES);
        line.push_str(" END-OF-THE-MEGABYTE\n");
        self.chunk(&line).await;
    }

    async fn look(&self, path: &str) -> Result<(), Cancelled> {
        let abs = join_path(&self.cwd, path);
        let tool_call = json!({
            "title": format!("Read {path}"), "kind": "read",
            "locations": [{"path": abs}], "rawInput": {"path": abs},
        });
        if let Some(tool_call_id) = self.gated_tool_call(tool_call).await? {
            self.tool_call_status(&tool_call_id, "completed").await;
            self.chunk(&format!("looked at {path}")).await;
        }
        Ok(())
    }

    async fn shell(&self, command: &str) -> Result<(), Cancelled> {
        let tool_call =
            json!({"title": format!("Run {command}"), "kind": "execute", "rawInput": {"command": command}});
        if let Some(tool_call_id) = self.gated_tool_call(tool_call).await? {
            self.tool_call_status(&tool_call_id, "completed").await;
            self.chunk(&format!("would run: {command}")).await;
        }
        Ok(())
    }

    /// `run`: the agent's own shell tool, as Claude Code's or Qwen Code's runs without asking when
    /// they are told to: a `tool_call`, `sh -c` in the session's cwd, then the call `completed` (exit
    /// 0) or `failed` with the output, and the same output as the reply.
    async fn run_command(&self, command: &str) -> Result<(), Cancelled> {
        let tool_call_id = self.new_tool_call_id();
        self.update(json!({
            "sessionUpdate": "tool_call", "toolCallId": tool_call_id, "title": format!("Run {command}"),
            "kind": "execute", "status": "in_progress", "rawInput": {"command": command},
        }))
        .await;
        let run = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(&self.cwd)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let (ok, reply) = tokio::select! {
            out = run => match out {
                Ok(out) => {
                    let code = out.status.code().map_or_else(|| "signal".to_owned(), |c| c.to_string());
                    let mut text = format!("exit {code}\n");
                    text.push_str(&String::from_utf8_lossy(&out.stdout));
                    text.push_str(&String::from_utf8_lossy(&out.stderr));
                    let mut end = text.len().min(MAX_RUN_OUTPUT);
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.truncate(end);
                    (out.status.success(), text)
                }
                Err(e) => (false, format!("cannot run sh: {e}")),
            },
            () = self.cancel.cancelled() => return Err(Cancelled),
        };
        self.update(json!({
            "sessionUpdate": "tool_call_update", "toolCallId": tool_call_id,
            "status": if ok { "completed" } else { "failed" },
            "content": [{"type": "content", "content": {"type": "text", "text": reply}}],
        }))
        .await;
        self.chunk(&reply).await;
        Ok(())
    }

    /// Asks one permission with `count` options (`opt-1`… named `Option 1`…, the first of kind
    /// `allow_once`, the rest alternating `reject_once` and `allow_always`); replies with the one
    /// chosen.
    async fn options(&self, count: u32) -> Result<(), Cancelled> {
        let options: Vec<Value> = (1..=count)
            .map(|i| {
                let kind = match i {
                    1 => "allow_once",
                    i if i % 2 == 0 => "reject_once",
                    _ => "allow_always",
                };
                json!({"optionId": format!("opt-{i}"), "name": format!("Option {i}"), "kind": kind})
            })
            .collect();
        let tool_call = json!({"toolCallId": self.new_tool_call_id(), "title": format!("Choose among {count}"), "kind": "other"});
        let params = json!({"sessionId": self.session_id, "toolCall": tool_call, "options": options});
        let reply = match self.call(method::SESSION_REQUEST_PERMISSION, params).await? {
            Ok(result) => format!("outcome: {}", result["outcome"]),
            Err(e) => format!("failed: {}", describe(&e)),
        };
        self.chunk(&reply).await;
        Ok(())
    }

    /// `ask`: Qwen Code's `ask_user_question` as Qwen Code 0.24 sends it (a permission request
    /// whose tool call's `_meta` holds the questions), then the answers as it reads them.
    async fn ask(&self) -> Result<(), Cancelled> {
        let questions = json!([
            {"question": "Which library should we use?", "header": "Library", "multiSelect": false,
                "options": [{"label": "chrono", "description": "The classic"}, {"label": "jiff", "description": "Newer, with time zones"}]},
            {"question": "Which features do you want?", "header": "Features", "multiSelect": true,
                "options": [{"label": "serde", "description": "Serialization"}, {"label": "tz", "description": "Time zones"}]},
        ]);
        let tool_call_id = self.new_tool_call_id();
        let tool_call = json!({
            "toolCallId": tool_call_id, "status": "pending", "title": "Ask user 2 questions", "kind": "think",
            "rawInput": {"questions": questions},
            "_meta": {"toolName": "ask_user_question", "qwenInteractionKind": "user_question", "qwenQuestions": questions},
        });
        let options = json!([
            {"optionId": "proceed_once", "name": "Submit", "kind": "allow_once"},
            {"optionId": "cancel", "name": "Cancel", "kind": "reject_once"},
        ]);
        let params = json!({"sessionId": self.session_id, "toolCall": tool_call, "options": options});
        let reply = match self.call(method::SESSION_REQUEST_PERMISSION, params).await? {
            Ok(result) if result["outcome"]["optionId"] == "proceed_once" => {
                format!("answers: {}", result.get("answers").unwrap_or(&Value::Null))
            }
            Ok(result) if result["outcome"]["outcome"] == "cancelled" => "question cancelled".to_owned(),
            Ok(_) => "declined to answer".to_owned(),
            Err(e) => format!("failed: {}", describe(&e)),
        };
        self.chunk(&reply).await;
        Ok(())
    }

    /// `elicit`: a form, then what the client answered.
    async fn elicit_form(&self) -> Result<(), Cancelled> {
        let params = json!({
            "sessionId": self.session_id, "mode": "form", "message": "Where should this deploy?",
            "requestedSchema": {"type": "object", "required": ["name", "replicas"], "properties": {
                "name": {"type": "string", "title": "Name", "description": "The service's name", "minLength": 1, "maxLength": 40},
                "replicas": {"type": "integer", "title": "Replicas", "minimum": 1, "maximum": 9},
                "region": {"type": "string", "title": "Region", "oneOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "United States"}]},
                "agree": {"type": "boolean", "title": "Agree to the terms"},
                "token": {"type": "string", "title": "API token", "description": "Kept out of the audit"},
            }},
        });
        let reply = self.elicit(params).await?;
        self.chunk(&reply).await;
        Ok(())
    }

    /// `elicit-url`: a URL for the person to open; `elicitation/complete` after `complete_after_ms`
    /// (while pending), or once accepted.
    async fn elicit_url(&self, url: &str, complete_after_ms: Option<u64>) -> Result<(), Cancelled> {
        let id = format!("demo-elicitation-{}", self.shared.next_tool_call.fetch_add(1, Ordering::Relaxed));
        let params = json!({
            "sessionId": self.session_id, "mode": "url", "elicitationId": id, "url": url,
            "message": "Sign in to continue",
        });
        let complete = notification_line(method::ELICITATION_COMPLETE, &json!({"elicitationId": id}));
        let early = complete_after_ms.map(|ms| {
            let (shared, line) = (self.shared.clone(), complete.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                shared.send(line).await;
            })
        });
        let reply = self.elicit(params).await?;
        match early {
            Some(task) => task.abort(),
            None if reply == "action: accept" => self.shared.send(complete).await,
            None => {}
        }
        self.chunk(&reply).await;
        Ok(())
    }

    /// Sends `elicitation/create` (when the client offered its mode at `initialize`), and says what
    /// came back: `action: accept content: {...}`, `action: decline`, `failed: ...`.
    async fn elicit(&self, params: Value) -> Result<String, Cancelled> {
        let mode = params["mode"].as_str().unwrap_or_default().to_owned();
        if !lock(&self.shared.elicitation).contains(&mode) {
            return Ok(format!("the client did not offer elicitation mode {mode:?}"));
        }
        Ok(match self.call(method::ELICITATION_CREATE, params).await? {
            Ok(result) => match (result["action"].as_str(), result.get("content")) {
                (Some(action), Some(content)) => format!("action: {action} content: {content}"),
                (Some(action), None) => format!("action: {action}"),
                _ => format!("bad elicitation result: {result}"),
            },
            Err(e) => format!("failed: {}", describe(&e)),
        })
    }

    async fn permissions(&self, count: u32) -> Result<(), Cancelled> {
        let mut outcomes = Vec::new();
        for i in 1..=count {
            let tool_call = json!({
                "toolCallId": self.new_tool_call_id(),
                "title": format!("Permission {i} of {count}"),
                "kind": "other",
                "status": "pending"
            });
            // A `cancelled` outcome is recorded; only a cancelled turn stops the sequence.
            let outcome = match self.ask_permission(tool_call).await {
                Ok(Permission::Selected(option)) => option,
                Ok(Permission::Failed(_)) => "error".to_owned(),
                Err(Cancelled) if self.cancel.is_cancelled() => return Err(Cancelled),
                Err(Cancelled) => "cancelled".to_owned(),
            };
            outcomes.push(outcome);
        }
        self.chunk(&format!("outcomes: {}", outcomes.join(","))).await;
        Ok(())
    }

    fn stream_line(&self, i: u64) -> Vec<u8> {
        format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{{\"sessionId\":{},\"update\":\
             {{\"sessionUpdate\":\"agent_message_chunk\",\"content\":{{\"type\":\"text\",\"text\":\"tok{i} \"}},\
             \"_meta\":{{\"emittedAtUs\":{}}}}}}}}}\n",
            self.session_json,
            micros_since_epoch()
        )
        .into_bytes()
    }

    async fn stream_fast(&self, count: u64) -> Result<(), Cancelled> {
        for i in 0..count {
            if self.cancel.is_cancelled() {
                return Err(Cancelled);
            }
            self.shared.send(self.stream_line(i)).await;
        }
        Ok(())
    }

    /// Streams one word of `bytes` letters (`a`…`z` in turn, no space) as `chunks` chunks, paced.
    async fn token(&self, bytes: usize, chunks: u64, rate: f64) -> Result<(), Cancelled> {
        let word: String = (0..bytes).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let parts = chunks.min(bytes.max(1) as u64) as usize;
        let period = Duration::try_from_secs_f64(1.0 / rate).unwrap_or(Duration::ZERO);
        let mut ticks = tokio::time::interval(period.max(Duration::from_micros(1)));
        for k in 0..parts {
            let piece = &word[k * bytes / parts..(k + 1) * bytes / parts];
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Err(Cancelled),
                _ = ticks.tick() => self.chunk(piece).await,
            }
        }
        Ok(())
    }

    async fn stream_paced(&self, count: u64, rate: f64) -> Result<(), Cancelled> {
        let period = match Duration::try_from_secs_f64(1.0 / rate) {
            Ok(period) if !period.is_zero() => period,
            // A rate too high to pace is no pacing at all.
            _ => return self.stream_fast(count).await,
        };
        let mut ticks = tokio::time::interval(period);
        for i in 0..count {
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Err(Cancelled),
                _ = ticks.tick() => self.shared.send(self.stream_line(i)).await,
            }
        }
        Ok(())
    }
}

//! One session as the terminal client knows it, built from its event stream alone
//! (docs/protocol.md §5): the timeline (prompts and who sent them, the agent's messages and
//! thoughts, tool calls, plans, decisions, notes), the prompts still queued, the permission
//! requests with their votes and outcomes, the current mode and model. Pure data, the twin of
//! `web/state.js`: events in, state out; the view draws it.
//!
//! Turns run one at a time in the order their prompts were queued, and the daemon echoes each
//! prompt when it is queued: so the first unfinished prompt is the running one, the others wait,
//! and a prompt enters the timeline when its turn starts.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::Value;

/// Timeline entries kept; older ones are dropped (and counted): a bound on memory per session.
pub(crate) const MAX_ENTRIES: usize = 4000;
/// Bytes of one message or thought kept; beyond it the start is dropped (the web app's bound too).
pub(crate) use crate::bounds::MAX_TEXT;
/// Tool calls remembered (to lay updates over); the oldest are forgotten.
pub(crate) const MAX_TOOL_CALLS: usize = 4000;
/// Permission requests remembered; the oldest decided ones are forgotten.
pub(crate) const MAX_PERMISSIONS: usize = 512;
/// Prompts known to be queued or running; a daemon holds far fewer (`--max-pending-prompts`).
pub(crate) const MAX_TURNS: usize = 1024;
/// Bytes of what the timeline holds (texts, commands, outputs, plans), [`size`] summed over its
/// entries; the oldest entries are dropped past it as past [`MAX_ENTRIES`]. The counts alone
/// would allow [`MAX_ENTRIES`] messages of [`MAX_TEXT`] each (4 GiB); a screen needs far less.
pub(crate) const MAX_TIMELINE_BYTES: usize = 64 * 1024 * 1024;
/// Bytes of the tool calls remembered; the oldest are forgotten past it (an agent line is up to
/// 64 MiB, so [`MAX_TOOL_CALLS`] alone bounds nothing useful).
pub(crate) const MAX_TOOL_BYTES: usize = 64 * 1024 * 1024;
/// Bytes of the decided permission requests remembered; the oldest decided ones are forgotten
/// past it. Pending ones are never forgotten for bytes: the daemon bounds them (64 a session).
pub(crate) const MAX_DECIDED_BYTES: usize = 64 * 1024 * 1024;

/// What one timeline entry shows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entry {
    /// A prompt whose turn started: who sent it, its text blocks.
    Prompt {
        prompt_id: Option<String>,
        who: Option<String>,
        text: String,
    },
    Message {
        prompt_id: Option<String>,
        text: String,
    },
    Thought {
        prompt_id: Option<String>,
        text: String,
    },
    /// Another content block from the agent (an image, a resource): its type.
    Content {
        kind: String,
    },
    /// A tool call, its state in [`SessionView::tools`].
    Tool {
        id: String,
    },
    Plan {
        entries: Vec<Value>,
    },
    /// A permission request, its state in [`SessionView::permissions`].
    Permission {
        request_id: String,
    },
    Shell {
        shell_id: String,
        command: String,
        who: Option<String>,
        result: Option<Value>,
    },
    /// A turn that did not end with `end_turn`.
    TurnEnd {
        stop_reason: String,
        error: Option<String>,
    },
    Note {
        text: String,
        level: Level,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Info,
    Warn,
    Error,
}

/// A timeline entry with its sequence number (stable while it is kept) and a version that
/// changes whenever it does (so a view may cache what it drew).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Item {
    pub(crate) seq: u64,
    pub(crate) version: u64,
    pub(crate) entry: Entry,
    /// [`size`] of `entry` when it last changed: what it counts against [`MAX_TIMELINE_BYTES`].
    bytes: usize,
}

/// A prompt queued or running.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Turn {
    pub(crate) prompt_id: String,
    pub(crate) who: Option<String>,
    pub(crate) text: String,
    pub(crate) started: bool,
}

/// A permission request and what became of it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Permission {
    /// The `permission_request` event's data.
    pub(crate) request: Value,
    /// The prompt's originator when it was raised (who decides under `designated`).
    pub(crate) originator: Option<String>,
    pub(crate) partial: Option<Value>,
    /// The `permission_resolved` event's data.
    pub(crate) resolved: Option<Value>,
    /// The reviewers' verdicts (`docs/protocol.md` §8.6): one per reviewer, so at most
    /// `config::MAX_REVIEWERS`, each reason at most 2 KiB.
    pub(crate) reviews: Vec<Value>,
    /// The option this client voted for (its name), once the daemon took the vote.
    pub(crate) my_vote: Option<String>,
    /// Why this client's vote was refused.
    pub(crate) error: Option<String>,
    /// A vote of this client is on its way.
    pub(crate) voting: bool,
}

impl Permission {
    pub(crate) fn request_id(&self) -> &str {
        self.request.get("requestId").and_then(Value::as_str).unwrap_or("")
    }

    /// Keeps a reviewer's review, once per reviewer (the event, a resync's pending list and the
    /// decision may each carry it), and no more than a daemon sends.
    fn add_review(&mut self, review: &Value) {
        let client = review.get("clientId");
        if self.reviews.len() < crate::config::MAX_REVIEWERS
            && !self.reviews.iter().any(|r| r.get("clientId") == client)
        {
            self.reviews.push(review.clone());
        }
    }

    /// The review of `client_id` (`reviewer:<name>`), if it gave one.
    pub(crate) fn review_of(&self, client_id: &str) -> Option<&Value> {
        self.reviews.iter().find(|r| r.get("clientId").and_then(Value::as_str) == Some(client_id))
    }
}

/// A tool call as announced and updated (ACP's rule: non-null fields of an update replace).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolCall {
    pub(crate) call: Value,
    pub(crate) version: u64,
    /// [`value_size`] of `call`: what it counts against [`MAX_TOOL_BYTES`].
    bytes: usize,
}

/// The session.
#[derive(Debug, Clone)]
pub(crate) struct SessionView {
    pub(crate) id: String,
    /// This client's id (prompts and votes of this id are "you").
    pub(crate) me: Option<String>,
    /// The last event id applied: the `Last-Event-ID` to resume with.
    pub(crate) last_event_id: u64,
    pub(crate) items: VecDeque<Item>,
    /// Timeline entries dropped off the front.
    pub(crate) dropped: u64,
    /// The sum of the kept entries' [`Item::bytes`].
    bytes: usize,
    next_seq: u64,
    next_version: u64,
    turns: HashMap<String, Turn>,
    /// Prompt ids of unfinished turns, in the order they run.
    fifo: VecDeque<String>,
    pub(crate) tools: HashMap<String, ToolCall>,
    tool_order: VecDeque<String>,
    /// The sum of the remembered tool calls' [`ToolCall::bytes`].
    tool_bytes: usize,
    /// Requests in the order they were raised.
    pub(crate) permissions: BTreeMap<u64, Permission>,
    by_request: HashMap<String, u64>,
    /// The sum of the remembered requests' [`value_size`] (their `permission_request` data).
    permission_bytes: usize,
    /// `{availableModels, currentModelId}` and `{availableModes, currentModeId}` as the agent
    /// reported them (`GET /session/{id}/context`), kept current by events.
    pub(crate) models: Option<Value>,
    pub(crate) modes: Option<Value>,
    /// Why the session ended, once it has.
    pub(crate) ended: Option<String>,
    /// A replay is running (its events are history, not news).
    pub(crate) replaying: bool,
}

impl SessionView {
    pub(crate) fn new(id: &str, me: Option<&str>) -> SessionView {
        SessionView {
            id: id.to_owned(),
            me: me.map(str::to_owned),
            last_event_id: 0,
            items: VecDeque::new(),
            dropped: 0,
            bytes: 0,
            next_seq: 0,
            next_version: 0,
            turns: HashMap::new(),
            fifo: VecDeque::new(),
            tools: HashMap::new(),
            tool_order: VecDeque::new(),
            tool_bytes: 0,
            permissions: BTreeMap::new(),
            by_request: HashMap::new(),
            permission_bytes: 0,
            models: None,
            modes: None,
            ended: None,
            replaying: false,
        }
    }

    fn version(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    /// Appends an entry to the timeline, dropping the oldest past the bounds ([`SessionView::trim`]).
    fn push(&mut self, entry: Entry) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let version = self.version();
        let bytes = size(&entry);
        self.bytes += bytes;
        self.items.push_back(Item { seq, version, entry, bytes });
        self.trim();
        seq
    }

    /// Drops the oldest entries while the timeline holds more than [`MAX_ENTRIES`] or more than
    /// [`MAX_TIMELINE_BYTES`]; the newest stays, whatever its size (one event's worth).
    fn trim(&mut self) {
        while self.items.len() > MAX_ENTRIES || (self.bytes > MAX_TIMELINE_BYTES && self.items.len() > 1) {
            if let Some(old) = self.items.pop_front() {
                self.bytes -= old.bytes;
                self.dropped += 1;
            }
        }
    }

    /// Re-counts the entry `seq` after a change, its new version set, and trims the timeline.
    fn changed(&mut self, seq: u64) {
        let version = self.version();
        if let Some(item) = self.items.iter_mut().rev().find(|i| i.seq == seq) {
            let bytes = size(&item.entry);
            self.bytes = self.bytes - item.bytes + bytes;
            item.bytes = bytes;
            item.version = version;
        }
        self.trim();
    }

    /// Moves the version of the newest entry `shows` picks, so a cached drawing of it is redone.
    fn touch(&mut self, shows: impl Fn(&Entry) -> bool) {
        let Some(at) = self.items.iter().rposition(|i| shows(&i.entry)) else { return };
        let version = self.version();
        self.items[at].version = version;
    }

    pub(crate) fn note(&mut self, text: impl Into<String>, level: Level) {
        self.push(Entry::Note { text: text.into(), level });
    }

    /// Starts the turn of `prompt_id` (its prompt enters the timeline), once.
    fn start(&mut self, prompt_id: &str) {
        let Some(turn) = self.turns.get_mut(prompt_id) else { return };
        if turn.started {
            return;
        }
        turn.started = true;
        let entry = Entry::Prompt {
            prompt_id: Some(prompt_id.to_owned()),
            who: turn.who.clone(),
            text: turn.text.clone(),
        };
        self.push(entry);
    }

    /// The turn of `prompt_id`, made (queued; started when nothing runs before it) if new.
    fn turn_of(&mut self, prompt_id: &str, who: Option<&str>) {
        if self.turns.contains_key(prompt_id) {
            return;
        }
        if self.fifo.len() >= MAX_TURNS
            && let Some(old) = self.fifo.pop_front()
        {
            self.turns.remove(&old);
        }
        self.turns.insert(
            prompt_id.to_owned(),
            Turn {
                prompt_id: prompt_id.to_owned(),
                who: who.map(str::to_owned),
                text: String::new(),
                started: false,
            },
        );
        self.fifo.push_back(prompt_id.to_owned());
        if self.fifo.front().is_some_and(|p| p == prompt_id) {
            self.start(prompt_id);
        }
    }

    /// The prompt an agent update belongs to, its turn started (the stream may have skipped ahead).
    fn agent_turn(&mut self, envelope: &Value) -> Option<String> {
        let prompt_id = envelope.get("promptId").and_then(Value::as_str)?.to_owned();
        self.turn_of(&prompt_id, envelope.get("originatorClientId").and_then(Value::as_str));
        self.start(&prompt_id);
        Some(prompt_id)
    }

    fn finish(&mut self, prompt_id: &str, stop_reason: &str, error: Option<String>) {
        if self.turns.remove(prompt_id).is_none() {
            return;
        }
        self.fifo.retain(|p| p != prompt_id);
        if stop_reason != "end_turn" || error.is_some() {
            self.push(Entry::TurnEnd { stop_reason: stop_reason.to_owned(), error });
        }
        if let Some(next) = self.fifo.front().cloned() {
            self.start(&next);
        }
    }

    fn append_text(&mut self, prompt_id: Option<String>, thought: bool, text: &str) {
        if let Some(last) = self.items.back_mut() {
            let same = match &mut last.entry {
                Entry::Message { prompt_id: p, text: t } if !thought && *p == prompt_id => Some(t),
                Entry::Thought { prompt_id: p, text: t } if thought && *p == prompt_id => Some(t),
                _ => None,
            };
            if let Some(t) = same {
                t.push_str(text);
                keep_end(t, MAX_TEXT);
                let seq = last.seq;
                self.changed(seq);
                return;
            }
        }
        let mut text = text.to_owned();
        keep_end(&mut text, MAX_TEXT);
        self.push(if thought {
            Entry::Thought { prompt_id, text }
        } else {
            Entry::Message { prompt_id, text }
        });
    }

    fn session_update(&mut self, envelope: &Value) {
        let update = envelope.pointer("/data/update").cloned().unwrap_or(Value::Null);
        match update.get("sessionUpdate").and_then(Value::as_str).unwrap_or("") {
            "user_message_chunk" => {
                let id = envelope.get("id").and_then(Value::as_u64).unwrap_or(0);
                let prompt_id = envelope
                    .get("promptId")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("unknown-{id}"), str::to_owned);
                let who = envelope.get("originatorClientId").and_then(Value::as_str);
                let text = block_text(update.get("content"));
                self.turn_of(&prompt_id, who);
                let started = match self.turns.get_mut(&prompt_id) {
                    Some(turn) => {
                        if !turn.text.is_empty() && !text.is_empty() {
                            turn.text.push('\n');
                        }
                        turn.text.push_str(&text);
                        keep_end(&mut turn.text, MAX_TEXT);
                        turn.started
                    }
                    None => false,
                };
                if started {
                    let whole = self.turns.get(&prompt_id).map(|t| t.text.clone()).unwrap_or_default();
                    if let Some(item) = self.items.iter_mut().rev().find(
                        |i| matches!(&i.entry, Entry::Prompt { prompt_id: Some(p), .. } if *p == prompt_id),
                    ) && let Entry::Prompt { text, .. } = &mut item.entry
                    {
                        *text = whole;
                        let seq = item.seq;
                        self.changed(seq);
                    }
                }
            }
            kind @ ("agent_message_chunk" | "agent_thought_chunk") => {
                let prompt_id = self.agent_turn(envelope);
                let content = update.get("content").cloned().unwrap_or(Value::Null);
                match content.get("text").and_then(Value::as_str) {
                    Some(text) => self.append_text(prompt_id, kind == "agent_thought_chunk", text),
                    None => {
                        let kind =
                            content.get("type").and_then(Value::as_str).unwrap_or("unknown").to_owned();
                        self.push(Entry::Content { kind });
                    }
                }
            }
            kind @ ("tool_call" | "tool_call_update") => {
                let id = update.get("toolCallId").and_then(Value::as_str).unwrap_or("").to_owned();
                let version = self.version();
                if let Some(known) = self.tools.get_mut(&id) {
                    known.call = if kind == "tool_call" {
                        crate::present::laid_over(None, &update)
                    } else {
                        crate::present::laid_over(Some(&known.call), &update)
                    };
                    known.version = version;
                    let bytes = value_size(&known.call);
                    self.tool_bytes = self.tool_bytes - known.bytes + bytes;
                    known.bytes = bytes;
                    self.trim_tools();
                    // The entry shows the call.
                    self.touch(|e| matches!(e, Entry::Tool { id: t } if *t == id));
                    return;
                }
                self.agent_turn(envelope);
                let call = crate::present::laid_over(None, &update);
                let bytes = value_size(&call);
                self.tool_bytes += bytes;
                self.tools.insert(id.clone(), ToolCall { call, version, bytes });
                self.tool_order.push_back(id.clone());
                self.trim_tools();
                self.push(Entry::Tool { id });
            }
            "plan" => {
                self.agent_turn(envelope);
                let entries = update.get("entries").and_then(Value::as_array).cloned().unwrap_or_default();
                if let Some(last) = self.items.back_mut()
                    && let Entry::Plan { entries: old } = &mut last.entry
                {
                    *old = entries;
                    let seq = last.seq;
                    self.changed(seq);
                    return;
                }
                self.push(Entry::Plan { entries });
            }
            "current_mode_update" => {
                let Some(mode) = update.get("currentModeId").and_then(Value::as_str) else { return };
                let current =
                    self.modes.as_ref().and_then(|m| m.get("currentModeId")).and_then(Value::as_str);
                if current != Some(mode) {
                    let name = self.mode_name(mode);
                    self.note(format!("mode: {name}"), Level::Info);
                }
                let modes = self.modes.get_or_insert_with(|| serde_json::json!({"availableModes": []}));
                modes["currentModeId"] = Value::String(mode.to_owned());
            }
            _ => {} // available_commands_update and the like: nothing to show
        }
    }

    /// Forgets the oldest tool calls while more than [`MAX_TOOL_CALLS`] or [`MAX_TOOL_BYTES`] are
    /// remembered; the newest stays, whatever its size.
    fn trim_tools(&mut self) {
        while self.tool_order.len() > MAX_TOOL_CALLS
            || (self.tool_bytes > MAX_TOOL_BYTES && self.tool_order.len() > 1)
        {
            if let Some(old) = self.tool_order.pop_front()
                && let Some(call) = self.tools.remove(&old)
            {
                self.tool_bytes -= call.bytes;
            }
        }
    }

    /// A mode's name, as the agent announced it (its id otherwise).
    pub(crate) fn mode_name(&self, id: &str) -> String {
        named(self.modes.as_ref(), "availableModes", "id", id)
    }

    /// A model's name, as the agent announced it (its id otherwise).
    pub(crate) fn model_name(&self, id: &str) -> String {
        named(self.models.as_ref(), "availableModels", "modelId", id)
    }

    /// Applies one event; `false` when it was already applied (its id is not past the last one).
    pub(crate) fn apply(&mut self, event: &str, id: Option<u64>, envelope: &Value) -> bool {
        if let Some(id) = id {
            if id <= self.last_event_id {
                return false;
            }
            self.last_event_id = id;
        }
        let data = envelope.get("data").cloned().unwrap_or(Value::Null);
        let field = |k: &str| data.get(k).and_then(Value::as_str).map(str::to_owned);
        match event {
            "session_update" => self.session_update(envelope),
            "turn_complete" => {
                let stop = field("stopReason").unwrap_or_else(|| "end_turn".to_owned());
                self.finish(&field("promptId").unwrap_or_default(), &stop, None);
            }
            "turn_error" => {
                let why = field("message").or_else(|| field("code")).unwrap_or_else(|| "error".to_owned());
                self.finish(&field("promptId").unwrap_or_default(), "error", Some(why));
            }
            "model_switched" => {
                let model = field("modelId").unwrap_or_default();
                if let Some(models) = self.models.as_mut() {
                    models["currentModelId"] = Value::String(model.clone());
                }
                let name = self.model_name(&model);
                self.note(format!("model: {name}"), Level::Info);
            }
            "permission_request" => self.add_request(
                data,
                envelope.get("originatorClientId").and_then(Value::as_str),
                Some(envelope),
            ),
            "permission_partial_vote" => {
                if let Some(p) = self.permission_mut(&field("requestId").unwrap_or_default()) {
                    p.partial = Some(data.clone());
                }
            }
            "permission_reviewed" => {
                // A reviewer's verdict that decided nothing: on the card until the people decide.
                if let Some(p) = self.permission_mut(&field("requestId").unwrap_or_default())
                    && let Some(review) = data.get("review")
                {
                    p.add_review(review);
                }
            }
            "permission_resolved" => {
                let request_id = field("requestId").unwrap_or_default();
                if let Some(p) = self.permission_mut(&request_id) {
                    for review in data.get("reviews").and_then(Value::as_array).into_iter().flatten() {
                        p.add_review(review);
                    }
                    p.resolved = Some(data.clone());
                    p.voting = false;
                }
                self.touch(|e| matches!(e, Entry::Permission { request_id: r } if *r == request_id));
            }
            "permission_forbidden" => {
                let me = self.me.clone();
                if let Some(p) = self.permission_mut(&field("requestId").unwrap_or_default())
                    && field("clientId") == me
                {
                    p.error = Some(forbidden_text(field("reason").as_deref().unwrap_or("")));
                    p.voting = false;
                }
            }
            "user_shell_command" => {
                self.push(Entry::Shell {
                    shell_id: field("shellId").unwrap_or_default(),
                    command: field("command").unwrap_or_default(),
                    who: field("originatorClientId"),
                    result: None,
                });
            }
            "user_shell_result" => {
                let shell = field("shellId").unwrap_or_default();
                if let Some(item) = self
                    .items
                    .iter_mut()
                    .rev()
                    .find(|i| matches!(&i.entry, Entry::Shell { shell_id, .. } if *shell_id == shell))
                    && let Entry::Shell { result, .. } = &mut item.entry
                {
                    *result = Some(data.clone());
                    let seq = item.seq;
                    self.changed(seq);
                }
            }
            "agent_refused_as_client" => {
                let attempt = field("attempt").unwrap_or_default();
                self.note(
                    format!("The agent tried to act as a client of the daemon, and was refused: {attempt}"),
                    Level::Error,
                );
            }
            "session_closed" | "session_died" => {
                let text = end_text(event, &data);
                for prompt_id in self.fifo.clone() {
                    self.finish(&prompt_id, "ended", None);
                }
                self.note(text.clone(), if event == "session_died" { Level::Error } else { Level::Info });
                self.ended = Some(text);
            }
            "state_resync_required" => {
                let from = data.get("lastDeliveredId").and_then(Value::as_u64).unwrap_or(0) + 1;
                let to =
                    data.get("earliestAvailableId").and_then(Value::as_u64).unwrap_or(from).saturating_sub(1);
                self.note(
                    format!("events {from}–{to} are no longer held by the daemon: they are missing above"),
                    Level::Warn,
                );
            }
            "history_gap" => {
                let from = data.get("fromId").and_then(Value::as_u64).unwrap_or(0);
                let to = data.get("toId").and_then(Value::as_u64).unwrap_or(from);
                self.note(
                    format!("events {from}–{to} were not recorded: they are missing above"),
                    Level::Warn,
                );
            }
            "replay_complete" => {
                self.replaying = false;
                if let Some(state) = field("sessionState") {
                    let text = format!("this session is {state}: its history is shown, it runs no more");
                    self.note(text.clone(), Level::Info);
                    self.ended.get_or_insert(text);
                }
            }
            _ => {} // slow_client_warning, client_evicted (the client reconnects), future types
        }
        true
    }

    /// Records a request (from the stream, or fetched after a resync), once.
    pub(crate) fn add_request(&mut self, data: Value, originator: Option<&str>, envelope: Option<&Value>) {
        let request_id = data.get("requestId").and_then(Value::as_str).unwrap_or("").to_owned();
        if self.by_request.contains_key(&request_id) {
            return;
        }
        if let Some(envelope) = envelope {
            self.agent_turn(envelope);
        }
        let seq = self.push(Entry::Permission { request_id: request_id.clone() });
        self.permission_bytes += value_size(&data);
        let mut permission = Permission {
            request: Value::Null,
            originator: originator.map(str::to_owned),
            partial: None,
            resolved: None,
            reviews: Vec::new(),
            my_vote: None,
            error: None,
            voting: false,
        };
        // A pending request fetched after a resync carries the reviews already given.
        for review in data.get("reviews").and_then(Value::as_array).into_iter().flatten() {
            permission.add_review(review);
        }
        permission.request = data;
        self.permissions.insert(seq, permission);
        self.by_request.insert(request_id, seq);
        self.trim_permissions();
    }

    /// Forgets the oldest decided requests while more than [`MAX_PERMISSIONS`] or
    /// [`MAX_DECIDED_BYTES`] are remembered; past the count with every request pending (a daemon
    /// holds 64 per session at most), the oldest.
    fn trim_permissions(&mut self) {
        loop {
            let over_count = self.permissions.len() > MAX_PERMISSIONS;
            if !over_count && self.permission_bytes <= MAX_DECIDED_BYTES {
                return;
            }
            let decided = self.permissions.iter().find(|(_, p)| p.resolved.is_some());
            let victim = match decided {
                Some(victim) => victim,
                None if over_count => match self.permissions.iter().next() {
                    Some(victim) => victim,
                    None => return,
                },
                // Over the bytes with nothing decided: the pending ones stay.
                None => return,
            };
            let (seq, id) = (*victim.0, victim.1.request_id().to_owned());
            if let Some(p) = self.permissions.remove(&seq) {
                self.permission_bytes -= value_size(&p.request);
            }
            self.by_request.remove(&id);
        }
    }

    pub(crate) fn permission(&self, request_id: &str) -> Option<&Permission> {
        self.by_request.get(request_id).and_then(|seq| self.permissions.get(seq))
    }

    pub(crate) fn permission_mut(&mut self, request_id: &str) -> Option<&mut Permission> {
        let seq = *self.by_request.get(request_id)?;
        self.permissions.get_mut(&seq)
    }

    /// Requests waiting for a decision, oldest first.
    pub(crate) fn pending(&self) -> Vec<&Permission> {
        if self.ended.is_some() {
            return Vec::new();
        }
        self.permissions.values().filter(|p| p.resolved.is_none()).collect()
    }

    /// Prompts waiting behind the running turn.
    pub(crate) fn queued(&self) -> Vec<&Turn> {
        self.fifo.iter().filter_map(|p| self.turns.get(p)).filter(|t| !t.started).collect()
    }

    /// Whether a turn runs now.
    pub(crate) fn running(&self) -> bool {
        self.fifo.front().and_then(|p| self.turns.get(p)).is_some_and(|t| t.started)
    }

    /// The tool call a request is about, as announced and requested.
    pub(crate) fn requested_call(&self, permission: &Permission) -> Value {
        let requested = permission.request.get("toolCall").cloned().unwrap_or(Value::Null);
        let announced = requested.get("toolCallId").and_then(Value::as_str).and_then(|id| self.tools.get(id));
        crate::present::laid_over(announced.map(|t| &t.call), &requested)
    }

    /// "allow once, by alice" — how a request was decided, for its card and its timeline line.
    pub(crate) fn resolution_text(&self, permission: &Permission) -> Option<String> {
        let r = permission.resolved.as_ref()?;
        let outcome = r.pointer("/outcome/outcome").and_then(Value::as_str);
        let chosen = match (outcome, r.pointer("/outcome/optionId").and_then(Value::as_str)) {
            (Some("selected"), Some(option)) => {
                let named = permission.request.get("options").and_then(Value::as_array).and_then(|o| {
                    o.iter().find(|o| o.get("optionId").and_then(Value::as_str) == Some(option))
                });
                named.and_then(|o| o.get("name")).and_then(Value::as_str).unwrap_or(option).to_owned()
            }
            _ => "cancelled".to_owned(),
        };
        let by = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_owned);
        let how = match by("resolvedBy").as_deref() {
            // A reviewer trusted with the kind decided: which, and why in its words.
            Some("vote") if by("via").as_deref() == Some("reviewer") => {
                let voter = by("voterClientId").unwrap_or_default();
                let name = voter.strip_prefix("reviewer:").unwrap_or(&voter);
                match permission.review_of(&voter).and_then(|r| r.get("reason")).and_then(Value::as_str) {
                    Some(reason) => format!("by reviewer {name}: {reason}"),
                    None => format!("by reviewer {name}"),
                }
            }
            Some("vote") => match by("voterClientId") {
                Some(v) if self.me.as_deref() == Some(v.as_str()) => format!("by you ({v})"),
                Some(v) => format!("by {v}"),
                None => "by a vote".to_owned(),
            },
            Some("rule") => format!("by rule {}", by("ruleId").unwrap_or_default()),
            Some("timeout") => "timed out".to_owned(),
            Some("cancel") => "the turn was cancelled".to_owned(),
            Some("session_closed") => "the session ended".to_owned(),
            Some(other) => format!("by {other}"),
            None => String::new(),
        };
        let via = by("via")
            .filter(|v| v == "link")
            .map_or(String::new(), |_| " (a notification's link)".to_owned());
        Some(format!("{chosen}, {how}{via}"))
    }
}

/// What an entry counts against [`MAX_TIMELINE_BYTES`]: the bytes of its texts and values.
fn size(entry: &Entry) -> usize {
    let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    match entry {
        Entry::Prompt { prompt_id, who, text } => opt(prompt_id) + opt(who) + text.len(),
        Entry::Message { prompt_id, text } | Entry::Thought { prompt_id, text } => {
            opt(prompt_id) + text.len()
        }
        Entry::Content { kind } => kind.len(),
        Entry::Tool { id } => id.len(),
        Entry::Plan { entries } => entries.iter().map(value_size).sum(),
        Entry::Permission { request_id } => request_id.len(),
        Entry::Shell { shell_id, command, who, result } => {
            shell_id.len() + command.len() + opt(who) + result.as_ref().map_or(0, value_size)
        }
        Entry::TurnEnd { stop_reason, error } => stop_reason.len() + opt(error),
        Entry::Note { text, .. } => text.len(),
    }
}

/// The bytes of a JSON value's strings and keys, and 8 for each other scalar: an estimate of what
/// it holds, linear in its size (serde_json caps nesting at 128, so the recursion is bounded).
fn value_size(value: &Value) -> usize {
    match value {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(value_size).sum(),
        Value::Object(fields) => fields.iter().map(|(k, v)| k.len() + value_size(v)).sum(),
        Value::Null | Value::Bool(_) | Value::Number(_) => 8,
    }
}

/// Keeps the last `max` bytes of `text` (at a character boundary).
fn keep_end(text: &mut String, max: usize) {
    if text.len() > max {
        let mut from = text.len() - max;
        while !text.is_char_boundary(from) {
            from += 1;
        }
        text.drain(..from);
    }
}

/// The text of an ACP content block (`[image]` and the like for the rest).
fn block_text(block: Option<&Value>) -> String {
    match block {
        Some(b) => match b.get("text").and_then(Value::as_str) {
            Some(t) => t.to_owned(),
            None => format!("[{}]", b.get("type").and_then(Value::as_str).unwrap_or("content")),
        },
        None => String::new(),
    }
}

fn named(list: Option<&Value>, key: &str, id_key: &str, id: &str) -> String {
    list.and_then(|l| l.get(key))
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|m| m.get(id_key).and_then(Value::as_str) == Some(id)))
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or(id)
        .to_owned()
}

fn end_text(event: &str, data: &Value) -> String {
    let s = |k: &str| data.get(k).and_then(Value::as_str);
    if event == "session_died" {
        let how = match (s("signalCode"), data.get("exitCode").and_then(Value::as_i64)) {
            (Some(signal), _) => format!(" ({signal})"),
            (None, Some(code)) => format!(" (exit {code})"),
            _ => String::new(),
        };
        return format!("the agent exited{how}: this session has ended");
    }
    match (s("reason"), s("closedBy")) {
        (Some("daemon_shutdown"), _) => "the daemon shut down: this session has ended".to_owned(),
        (_, Some(by)) => format!("session closed by {by}"),
        _ => "session closed".to_owned(),
    }
}

pub(crate) fn forbidden_text(reason: &str) -> String {
    match reason {
        "designated_mismatch" => "only the designated client may decide this request".to_owned(),
        "remote_not_allowed" => "only votes from the daemon's own machine count (local-only)".to_owned(),
        "group_required" => "only a member of the rule's group may approve this request".to_owned(),
        other => format!("vote refused ({other})"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ev(s: &mut SessionView, id: u64, kind: &str, envelope: Value) -> bool {
        s.apply(kind, Some(id), &envelope)
    }

    fn echo(prompt: &str, who: &str, text: &str) -> Value {
        json!({"promptId": prompt, "originatorClientId": who,
               "data": {"update": {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}}})
    }

    fn chunk(prompt: &str, kind: &str, text: &str) -> Value {
        json!({"promptId": prompt, "data": {"update": {"sessionUpdate": kind, "content": {"type": "text", "text": text}}}})
    }

    fn entries(s: &SessionView) -> Vec<Entry> {
        s.items.iter().map(|i| i.entry.clone()).collect()
    }

    #[test]
    fn a_turn_shows_its_prompt_then_the_agent_and_a_queued_prompt_waits() {
        let mut s = SessionView::new("s", Some("me"));
        ev(&mut s, 1, "session_update", echo("p1", "alice", "hello"));
        ev(&mut s, 2, "session_update", echo("p2", "me", "second"));
        ev(&mut s, 3, "session_update", chunk("p1", "agent_message_chunk", "Hi "));
        ev(&mut s, 4, "session_update", chunk("p1", "agent_message_chunk", "there"));
        ev(&mut s, 5, "session_update", chunk("p1", "agent_thought_chunk", "hm"));
        assert!(s.running());
        assert_eq!(s.queued().iter().map(|t| t.text.as_str()).collect::<Vec<_>>(), ["second"]);
        ev(&mut s, 6, "turn_complete", json!({"data": {"promptId": "p1", "stopReason": "end_turn"}}));
        assert!(s.queued().is_empty());
        ev(&mut s, 7, "turn_complete", json!({"data": {"promptId": "p2", "stopReason": "cancelled"}}));
        assert!(!s.running());
        assert_eq!(
            entries(&s),
            [
                Entry::Prompt {
                    prompt_id: Some("p1".into()),
                    who: Some("alice".into()),
                    text: "hello".into()
                },
                Entry::Message { prompt_id: Some("p1".into()), text: "Hi there".into() },
                Entry::Thought { prompt_id: Some("p1".into()), text: "hm".into() },
                Entry::Prompt { prompt_id: Some("p2".into()), who: Some("me".into()), text: "second".into() },
                Entry::TurnEnd { stop_reason: "cancelled".into(), error: None },
            ]
        );
    }

    #[test]
    fn an_agent_refused_as_a_client_is_an_error_note() {
        let mut s = SessionView::new("s", Some("me"));
        ev(&mut s, 1, "agent_refused_as_client", json!({"data": {"attempt": "POST /session"}}));
        assert!(
            matches!(entries(&s).last(), Some(Entry::Note { text, level: Level::Error }) if text.ends_with("refused: POST /session")),
            "{:?}",
            entries(&s)
        );
    }

    #[test]
    fn an_event_applied_twice_is_applied_once() {
        let mut s = SessionView::new("s", None);
        assert!(ev(&mut s, 1, "session_update", echo("p1", "a", "x")));
        assert!(ev(&mut s, 2, "session_update", chunk("p1", "agent_message_chunk", "y")));
        // A reconnect replays from an older id: nothing changes.
        assert!(!ev(&mut s, 2, "session_update", chunk("p1", "agent_message_chunk", "y")));
        assert!(!ev(&mut s, 1, "session_update", echo("p1", "a", "x")));
        assert!(ev(&mut s, 3, "session_update", chunk("p1", "agent_message_chunk", "z")));
        assert_eq!(s.last_event_id, 3);
        assert_eq!(entries(&s)[1], Entry::Message { prompt_id: Some("p1".into()), text: "yz".into() });
        // Id-less frames (about the stream) are always applied.
        assert!(s.apply("replay_complete", None, &json!({"data": {}})));
    }

    #[test]
    fn tool_calls_are_updated_in_place_and_a_request_is_laid_over_its_call() {
        let mut s = SessionView::new("s", Some("me"));
        ev(
            &mut s,
            1,
            "session_update",
            json!({"promptId": "p", "data": {"update": {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Write a", "kind": "edit", "status": "pending", "content": [{"type": "diff", "path": "/a", "oldText": null, "newText": "x"}]}}}),
        );
        let request = json!({"requestId": "r1", "toolCall": {"toolCallId": "t1", "title": "Write a"}, "options": [{"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"}], "policy": "first-responder"});
        ev(
            &mut s,
            2,
            "permission_request",
            json!({"promptId": "p", "originatorClientId": "alice", "data": request}),
        );
        let p = s.pending()[0].clone();
        assert_eq!(p.originator.as_deref(), Some("alice"));
        assert_eq!(s.requested_call(&p)["content"][0]["type"], "diff");
        let drawn_at = |s: &SessionView| {
            s.items.iter().find(|i| matches!(i.entry, Entry::Tool { .. })).map(|i| i.version)
        };
        let drawn = drawn_at(&s);
        ev(
            &mut s,
            3,
            "session_update",
            json!({"promptId": "p", "data": {"update": {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed", "title": null}}}),
        );
        assert_eq!(s.tools["t1"].call["status"], "completed");
        assert_eq!(s.tools["t1"].call["title"], "Write a");
        assert_ne!(drawn_at(&s), drawn, "the entry showing the call is drawn again");
        ev(
            &mut s,
            4,
            "permission_resolved",
            json!({"data": {"requestId": "r1", "outcome": {"outcome": "selected", "optionId": "allow_once"}, "resolvedBy": "vote", "voterClientId": "web-1"}}),
        );
        assert!(s.pending().is_empty());
        let p = s.permission("r1").expect("kept");
        assert_eq!(s.resolution_text(p).as_deref(), Some("Allow once, by web-1"));
        let tools: Vec<&Entry> =
            s.items.iter().map(|i| &i.entry).filter(|e| matches!(e, Entry::Tool { .. })).collect();
        assert_eq!(tools.len(), 1, "an update changes the entry, it adds none");
    }

    #[test]
    fn resolutions_say_how_and_by_whom() {
        let mut s = SessionView::new("s", Some("me"));
        let request = |id: &str| json!({"data": {"requestId": id, "toolCall": {}, "options": [{"optionId": "no", "name": "Reject", "kind": "reject_once"}]}});
        let cases = [
            (
                json!({"outcome": {"outcome": "selected", "optionId": "no"}, "resolvedBy": "vote", "voterClientId": "me"}),
                "Reject, by you (me)",
            ),
            (
                json!({"outcome": {"outcome": "selected", "optionId": "no"}, "resolvedBy": "rule", "ruleId": "r-1"}),
                "Reject, by rule r-1",
            ),
            (json!({"outcome": {"outcome": "cancelled"}, "resolvedBy": "timeout"}), "cancelled, timed out"),
            (
                json!({"outcome": {"outcome": "cancelled"}, "resolvedBy": "cancel"}),
                "cancelled, the turn was cancelled",
            ),
            (
                json!({"outcome": {"outcome": "selected", "optionId": "gone"}, "resolvedBy": "vote", "voterClientId": "x", "via": "link"}),
                "gone, by x (a notification's link)",
            ),
        ];
        for (i, (resolved, text)) in cases.into_iter().enumerate() {
            let id = format!("r{i}");
            s.apply("permission_request", None, &request(&id));
            let mut resolved = resolved;
            resolved["requestId"] = json!(id);
            s.apply("permission_resolved", None, &json!({"data": resolved}));
            assert_eq!(s.resolution_text(s.permission(&id).expect("kept")).as_deref(), Some(text));
        }
    }

    #[test]
    fn the_end_of_the_session_finishes_every_turn_and_leaves_nothing_pending() {
        let mut s = SessionView::new("s", None);
        ev(&mut s, 1, "session_update", echo("p1", "a", "x"));
        ev(&mut s, 2, "session_update", echo("p2", "a", "y"));
        s.apply(
            "permission_request",
            Some(3),
            &json!({"promptId": "p1", "data": {"requestId": "r", "toolCall": {}, "options": []}}),
        );
        ev(&mut s, 4, "session_died", json!({"data": {"exitCode": 3}}));
        assert!(!s.running() && s.queued().is_empty() && s.pending().is_empty());
        assert_eq!(s.ended.as_deref(), Some("the agent exited (exit 3): this session has ended"));
        let Some(Entry::Note { level, .. }) = s.items.back().map(|i| &i.entry) else { panic!("a note") };
        assert_eq!(*level, Level::Error, "a death is an error");
        let mut s = SessionView::new("s", None);
        ev(&mut s, 1, "session_closed", json!({"data": {"closedBy": "alice"}}));
        assert_eq!(entries(&s), [Entry::Note { text: "session closed by alice".into(), level: Level::Info }]);
    }

    #[test]
    fn shell_results_gaps_and_a_recorded_session_are_shown() {
        let mut s = SessionView::new("s", None);
        s.replaying = true;
        ev(
            &mut s,
            1,
            "user_shell_command",
            json!({"data": {"shellId": "sh", "command": "ls", "originatorClientId": "alice"}}),
        );
        ev(
            &mut s,
            2,
            "user_shell_result",
            json!({"data": {"shellId": "sh", "exitCode": 0, "output": "a\n"}}),
        );
        ev(&mut s, 3, "user_shell_result", json!({"data": {"shellId": "other", "exitCode": 1}}));
        assert_eq!(
            entries(&s),
            [Entry::Shell {
                shell_id: "sh".into(),
                command: "ls".into(),
                who: Some("alice".into()),
                result: Some(json!({"shellId": "sh", "exitCode": 0, "output": "a\n"})),
            }]
        );
        ev(
            &mut s,
            10,
            "state_resync_required",
            json!({"data": {"lastDeliveredId": 3, "earliestAvailableId": 10}}),
        );
        ev(&mut s, 20, "history_gap", json!({"data": {"fromId": 11, "toId": 19}}));
        s.apply("replay_complete", None, &json!({"data": {"replayedCount": 20, "sessionState": "closed"}}));
        let recorded = "this session is closed: its history is shown, it runs no more";
        assert_eq!(
            entries(&s)[1..],
            [
                Entry::Note {
                    text: "events 4–9 are no longer held by the daemon: they are missing above".into(),
                    level: Level::Warn
                },
                Entry::Note {
                    text: "events 11–19 were not recorded: they are missing above".into(),
                    level: Level::Warn
                },
                Entry::Note { text: recorded.into(), level: Level::Info },
            ]
        );
        assert!(!s.replaying);
        assert_eq!(s.ended.as_deref(), Some(recorded));
        // A live session's replay says nothing and ends nothing.
        let mut s = SessionView::new("s", None);
        s.replaying = true;
        s.apply("replay_complete", None, &json!({"data": {"replayedCount": 0}}));
        assert!(!s.replaying && s.ended.is_none() && s.items.is_empty());
    }

    #[test]
    fn modes_and_models_follow_events_by_name() {
        let mut s = SessionView::new("s", None);
        s.modes =
            Some(json!({"availableModes": [{"id": "plan", "name": "Plan"}], "currentModeId": "default"}));
        s.models =
            Some(json!({"availableModels": [{"modelId": "m2", "name": "Smart"}], "currentModelId": "m1"}));
        ev(
            &mut s,
            1,
            "session_update",
            json!({"data": {"update": {"sessionUpdate": "current_mode_update", "currentModeId": "plan"}}}),
        );
        ev(
            &mut s,
            2,
            "session_update",
            json!({"data": {"update": {"sessionUpdate": "current_mode_update", "currentModeId": "plan"}}}),
        );
        ev(&mut s, 3, "model_switched", json!({"data": {"modelId": "m2"}}));
        assert_eq!(s.modes.as_ref().map(|m| m["currentModeId"].clone()), Some(json!("plan")));
        assert_eq!(s.models.as_ref().map(|m| m["currentModelId"].clone()), Some(json!("m2")));
        let notes: Vec<String> = s
            .items
            .iter()
            .filter_map(|i| match &i.entry {
                Entry::Note { text, .. } => Some(text.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(notes, ["mode: Plan", "model: Smart"], "the same mode twice is one change");
    }

    #[test]
    fn the_timeline_and_a_message_are_bounded() {
        let mut s = SessionView::new("s", None);
        for i in 0..(MAX_ENTRIES as u64 + 10) {
            s.note(format!("n{i}"), Level::Info);
        }
        assert_eq!(s.items.len(), MAX_ENTRIES);
        assert_eq!(s.dropped, 10);
        let mut s = SessionView::new("s", None);
        ev(&mut s, 1, "session_update", chunk("p", "agent_message_chunk", &"é".repeat(MAX_TEXT)));
        ev(&mut s, 2, "session_update", chunk("p", "agent_message_chunk", "end"));
        let Some(Entry::Message { text, .. }) = s.items.back().map(|i| &i.entry) else { panic!("a message") };
        assert!(text.len() <= MAX_TEXT && text.ends_with("end"), "{}", text.len());
    }

    /// The counts kept beside the timeline, the tool calls and the requests are their sums.
    fn assert_counted(s: &SessionView) {
        assert!(s.items.iter().all(|i| i.bytes == size(&i.entry)));
        assert_eq!(s.bytes, s.items.iter().map(|i| i.bytes).sum::<usize>());
        assert_eq!(s.tool_bytes, s.tools.values().map(|t| value_size(&t.call)).sum::<usize>());
        assert!(s.tools.values().all(|t| t.bytes == value_size(&t.call)));
        assert_eq!(s.permission_bytes, s.permissions.values().map(|p| value_size(&p.request)).sum::<usize>());
        assert_eq!(s.tools.len(), s.tool_order.len());
        assert_eq!(s.permissions.len(), s.by_request.len());
    }

    #[test]
    fn an_entry_counts_the_bytes_of_its_texts_and_values() {
        let o = |s: &str| Some(s.to_owned());
        let cases = [
            (Entry::Prompt { prompt_id: o("pp"), who: o("www"), text: "ttttt".into() }, 10),
            (Entry::Message { prompt_id: o("pp"), text: "ttt".into() }, 5),
            (Entry::Thought { prompt_id: None, text: "ttt".into() }, 3),
            (Entry::Content { kind: "image".into() }, 5),
            (Entry::Tool { id: "t1".into() }, 2),
            (Entry::Plan { entries: vec![json!({"content": "abc"}), json!(1)] }, 7 + 3 + 8),
            (Entry::Permission { request_id: "rr".into() }, 2),
            (
                Entry::Shell {
                    shell_id: "s".into(),
                    command: "ls -l".into(),
                    who: o("al"),
                    result: Some(json!({"output": "xyz"})),
                },
                1 + 5 + 2 + 6 + 3,
            ),
            (Entry::TurnEnd { stop_reason: "error".into(), error: o("bad") }, 8),
            (Entry::Note { text: "note".into(), level: Level::Info }, 4),
        ];
        for (entry, bytes) in cases {
            assert_eq!(size(&entry), bytes, "{entry:?}");
        }
        assert_eq!(value_size(&json!({"a": [null, true, 1, "xy"]})), 1 + 8 + 8 + 8 + 2);
    }

    #[test]
    fn the_timeline_is_bounded_in_bytes_by_dropping_its_oldest_entries() {
        const MIB: usize = 1024 * 1024;
        let mut s = SessionView::new("s", None);
        let n = MAX_TIMELINE_BYTES / MIB;
        for i in 0..n {
            s.note(format!("{i:08}{}", "x".repeat(MIB - 8)), Level::Info);
        }
        assert_eq!((s.items.len(), s.dropped, s.bytes), (n, 0, MAX_TIMELINE_BYTES), "exactly at the bound");
        s.note("x", Level::Info);
        assert_eq!((s.items.len(), s.dropped, s.bytes), (n, 1, MAX_TIMELINE_BYTES - MIB + 1));
        assert_counted(&s);

        // A message that grows drops what came first, too.
        let half = "y".repeat(MIB / 2);
        ev(&mut s, 1, "session_update", chunk("p", "agent_message_chunk", &half));
        ev(&mut s, 2, "session_update", chunk("p", "agent_message_chunk", &half));
        assert!(s.bytes <= MAX_TIMELINE_BYTES, "{}", s.bytes);
        assert_eq!(s.dropped, 2);
        let Some(Entry::Message { text, .. }) = s.items.back().map(|i| &i.entry) else { panic!("a message") };
        assert_eq!(text.len(), MIB);
        assert_counted(&s);

        // The newest entry stays even alone past the bound (it is one event).
        s.note("z".repeat(MAX_TIMELINE_BYTES + 1), Level::Info);
        assert_eq!(s.items.len(), 1);
        assert_eq!(s.bytes, MAX_TIMELINE_BYTES + 1);
        assert_counted(&s);
    }

    fn tool_call(id: &str, text: &str) -> Value {
        json!({"promptId": "p", "data": {"update": {"sessionUpdate": "tool_call", "toolCallId": id, "title": "t", "kind": "edit", "rawInput": {"content": text}}}})
    }

    #[test]
    fn tool_calls_are_bounded_in_bytes_by_forgetting_the_oldest() {
        let mut s = SessionView::new("s", None);
        let mib = "x".repeat(1024 * 1024);
        let n = MAX_TOOL_BYTES / mib.len() + 4;
        for i in 0..n {
            ev(&mut s, i as u64 + 1, "session_update", tool_call(&format!("t{i}"), &mib));
        }
        assert!(s.tool_bytes <= MAX_TOOL_BYTES && s.tools.len() < n, "{} in {}", s.tool_bytes, s.tools.len());
        assert!(!s.tools.contains_key("t0") && s.tools.contains_key(&format!("t{}", n - 1)));
        // Forgetting is oldest first: what is remembered is the last ones, without a gap.
        let kept: Vec<usize> = (0..n).filter(|i| s.tools.contains_key(&format!("t{i}"))).collect();
        assert_eq!(kept, ((n - kept.len())..n).collect::<Vec<_>>());
        assert_counted(&s);
        // An update that grows a call counts, and forgets older ones.
        let before = s.tools.len();
        let update = json!({"promptId": "p", "data": {"update": {"sessionUpdate": "tool_call_update", "toolCallId": format!("t{}", n - 1), "rawOutput": {"text": "z".repeat(8 * 1024 * 1024)}}}});
        ev(&mut s, n as u64 + 1, "session_update", update);
        assert!(
            s.tool_bytes <= MAX_TOOL_BYTES && s.tools.len() < before,
            "{} in {}",
            s.tool_bytes,
            s.tools.len()
        );
        assert_counted(&s);
    }

    #[test]
    fn tool_calls_are_forgotten_exactly_past_their_bounds() {
        // The count: MAX_TOOL_CALLS are remembered, one more forgets the first.
        let mut s = SessionView::new("s", None);
        for i in 0..MAX_TOOL_CALLS {
            ev(&mut s, i as u64 + 1, "session_update", tool_call(&format!("t{i}"), ""));
        }
        assert_eq!(s.tools.len(), MAX_TOOL_CALLS);
        ev(&mut s, MAX_TOOL_CALLS as u64 + 1, "session_update", tool_call("last", ""));
        assert_eq!(s.tools.len(), MAX_TOOL_CALLS);
        assert!(!s.tools.contains_key("t0") && s.tools.contains_key("t1"));

        // The bytes: two calls of exactly MAX_TOOL_BYTES stay; a third, however small, forgets one.
        let mut s = SessionView::new("s", None);
        ev(&mut s, 1, "session_update", tool_call("t0", "x"));
        let overhead = s.tool_bytes - 1; // what a call with a one-byte text adds beyond it
        let rest = MAX_TOOL_BYTES - s.tool_bytes - overhead;
        ev(&mut s, 2, "session_update", tool_call("t1", &"y".repeat(rest)));
        assert_eq!((s.tools.len(), s.tool_bytes), (2, MAX_TOOL_BYTES), "exactly at the bound");
        ev(&mut s, 3, "session_update", tool_call("t2", ""));
        assert!(!s.tools.contains_key("t0") && s.tools.contains_key("t1") && s.tools.contains_key("t2"));

        // One call past the bound alone is remembered (it is one event).
        let mut s = SessionView::new("s", None);
        ev(&mut s, 1, "session_update", tool_call("big", &"z".repeat(MAX_TOOL_BYTES + 1)));
        assert!(s.tools.contains_key("big") && s.tool_bytes > MAX_TOOL_BYTES);
        assert_counted(&s);
    }

    fn request(id: &str, text: &str) -> Value {
        json!({"promptId": "p", "data": {"requestId": id, "toolCall": {"toolCallId": id, "title": "t", "rawInput": {"content": text}}, "options": [{"optionId": "allow_once", "name": "Allow", "kind": "allow_once"}]}})
    }

    #[test]
    fn decided_requests_are_bounded_in_bytes_and_pending_ones_are_never_forgotten_for_it() {
        let mut s = SessionView::new("s", None);
        let mib = "x".repeat(1024 * 1024);
        let mut id = 0;
        let mut next = || {
            id += 1;
            id
        };
        ev(&mut s, next(), "permission_request", request("pending", &mib));
        let n = MAX_DECIDED_BYTES / mib.len() + 4;
        for i in 0..n {
            ev(&mut s, next(), "permission_request", request(&format!("r{i}"), &mib));
            let resolved = json!({"data": {"requestId": format!("r{i}"), "outcome": {"outcome": "selected", "optionId": "allow_once"}, "resolvedBy": "vote"}});
            ev(&mut s, next(), "permission_resolved", resolved);
        }
        assert!(s.permission_bytes <= MAX_DECIDED_BYTES, "{}", s.permission_bytes);
        assert!(s.permission("pending").is_some(), "the oldest, but pending");
        assert!(s.permission("r0").is_none() && s.permission(&format!("r{}", n - 1)).is_some());
        assert_counted(&s);
        // Pending requests past the bytes stay: only decided ones make room.
        for i in 0..n {
            ev(&mut s, next(), "permission_request", request(&format!("q{i}"), &mib));
        }
        assert!((0..n).all(|i| s.permission(&format!("q{i}")).is_some()));
        assert_eq!(s.pending().len(), n + 1);
        assert_counted(&s);
    }

    #[test]
    fn requests_are_forgotten_exactly_past_their_bounds() {
        let resolved = |id: &str| json!({"data": {"requestId": id, "outcome": {"outcome": "selected", "optionId": "allow_once"}, "resolvedBy": "vote"}});
        // The count: MAX_PERMISSIONS are remembered; one more forgets the oldest decided one, or
        // the oldest when none is decided.
        let mut s = SessionView::new("s", None);
        let mut id = 0;
        for i in 0..MAX_PERMISSIONS {
            id += 1;
            ev(&mut s, id, "permission_request", request(&format!("r{i}"), ""));
        }
        id += 1;
        ev(&mut s, id, "permission_resolved", resolved("r5"));
        assert_eq!(s.permissions.len(), MAX_PERMISSIONS);
        id += 1;
        ev(&mut s, id, "permission_request", request("next", ""));
        assert_eq!(s.permissions.len(), MAX_PERMISSIONS);
        assert!(s.permission("r5").is_none() && s.permission("r0").is_some(), "the decided one went");
        id += 1;
        ev(&mut s, id, "permission_request", request("last", ""));
        assert!(s.permission("r0").is_none() && s.permission("r1").is_some(), "then the oldest");
        assert_counted(&s);

        // The bytes: requests of exactly MAX_DECIDED_BYTES stay; past it the oldest decided goes.
        let mut s = SessionView::new("s", None);
        ev(&mut s, 1, "permission_request", request("r0", "x"));
        ev(&mut s, 2, "permission_resolved", resolved("r0"));
        let overhead = s.permission_bytes - 1;
        let rest = MAX_DECIDED_BYTES - s.permission_bytes - overhead;
        ev(&mut s, 3, "permission_request", request("r1", &"y".repeat(rest)));
        assert_eq!(s.permission_bytes, MAX_DECIDED_BYTES);
        assert!(s.permission("r0").is_some(), "exactly at the bound");
        ev(&mut s, 4, "permission_request", request("r2", ""));
        assert!(s.permission("r0").is_none() && s.permission("r1").is_some() && s.permission("r2").is_some());
        assert_counted(&s);
    }

    #[test]
    fn a_turn_error_ends_the_turn_with_its_message_and_a_partial_vote_is_kept() {
        let mut s = SessionView::new("s", None);
        ev(&mut s, 1, "session_update", echo("p1", "alice", "go"));
        ev(&mut s, 2, "session_update", echo("p2", "alice", "next"));
        ev(
            &mut s,
            3,
            "turn_error",
            json!({"data": {"promptId": "p1", "code": "agent_error", "message": "the model said no"}}),
        );
        assert_eq!(
            entries(&s)[1],
            Entry::TurnEnd { stop_reason: "error".into(), error: Some("the model said no".into()) }
        );
        assert!(s.running() && s.queued().is_empty(), "the next prompt's turn started");
        ev(&mut s, 4, "turn_error", json!({"data": {"promptId": "p2", "code": "agent_exited"}}));
        assert_eq!(
            entries(&s)[3],
            Entry::TurnEnd { stop_reason: "error".into(), error: Some("agent_exited".into()) }
        );
        assert!(!s.running());

        ev(&mut s, 5, "permission_request", request("r", ""));
        let partial = json!({"requestId": "r", "votesReceived": 1, "quorum": 2});
        ev(&mut s, 6, "permission_partial_vote", json!({"data": partial}));
        assert_eq!(s.permission("r").and_then(|p| p.partial.clone()), Some(partial));
    }

    #[test]
    fn a_forbidden_vote_of_mine_is_said_on_my_card_only() {
        let mut s = SessionView::new("s", Some("me"));
        s.apply(
            "permission_request",
            Some(1),
            &json!({"data": {"requestId": "r", "toolCall": {}, "options": []}}),
        );
        s.apply(
            "permission_forbidden",
            None,
            &json!({"data": {"requestId": "r", "clientId": "other", "reason": "designated_mismatch"}}),
        );
        assert_eq!(s.permission("r").and_then(|p| p.error.clone()), None);
        s.apply(
            "permission_forbidden",
            None,
            &json!({"data": {"requestId": "r", "clientId": "me", "reason": "designated_mismatch"}}),
        );
        assert_eq!(
            s.permission("r").and_then(|p| p.error.clone()).as_deref(),
            Some("only the designated client may decide this request")
        );
    }
}

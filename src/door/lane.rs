//! One attached session as an ACP connection sees it: the session's event stream (a cursor into
//! its bus, like every SSE stream) turned into ACP messages, with the connection's answers that
//! must follow the events they depend on.
//!
//! | event | sent as |
//! |---|---|
//! | `session_update` | `session/update`, its params the agent's byte for byte (not the echo of this connection's own prompt, unless it asked) |
//! | every other event, and the stream's notices | `_qwen/notify {kind, data, eventId?, promptId?, originatorClientId?}` |
//! | `permission_request` the connection may decide | also `session/request_permission` (a request, id `perm-N`) |
//! | `permission_resolved` | also `$/cancel_request` for each of its requests still unanswered here |
//! | `turn_complete` / `turn_error` of a prompt this connection sent | also the answer to its `session/prompt` |
//!
//! An answer the connection owes (to `session/set_mode`, `session/load`, …) waits here until the
//! stream has delivered every event published before the answer was known ([`Deferred::gate`]), so
//! on one WebSocket a client sees a turn's updates before the turn's answer, as over stdio.
//!
//! Memory: the converted messages of one batch of the stream (at most 64 KiB of events), the
//! deferred answers (at most `MAX_CALLS_IN_FLIGHT`), and the requests issued (at most the
//! mediator's pending bound). The queues' room is given back once they are drained, so an idle
//! lane holds none.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use serde_json::{Value, json};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::failure::Failure;
use super::shared::Shared;
use super::wire;
use crate::acp::{RequestId, method};
use crate::daemon::{EventFrame, Marked, Piece, Session, SessionError};
use crate::sync::queue::{self, give_back_drained};

/// Byte sequence that marks the daemon's echo of a prompt (`update._meta.source`).
const ECHO_MARK: &[u8] = br#""source":"bridge-echo""#;

/// What a lane hands its transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    /// A JSON-RPC message, and the id of the event it came from (the SSE `id:`, the envelope's
    /// `eventId`), if any.
    Message { json: Bytes, event_id: Option<u64> },
    /// A `session/update` notification of the agent's update `params`, which shares the bytes of
    /// the session's stream: the transport writes the message around it
    /// ([`wire::session_update_parts`]), so the update is copied once, into the socket's buffer.
    /// The stream's next batch is read once these bytes are let go (as an SSE stream's).
    Update { params: Bytes, event_id: Option<u64> },
    /// The stream is alive and has nothing to say (a heartbeat).
    Keepalive,
    /// The stream fell too far behind and was cut (`client_evicted`, already sent as a message):
    /// the client lost events and must resume (`Last-Event-ID`, `session/load`).
    Evicted,
}

impl Out {
    /// The message in its pieces, to be written one after the other; `None` for what is no
    /// message.
    pub fn parts(&self) -> Option<[&[u8]; 3]> {
        match self {
            Out::Message { json, .. } => Some([json, b"", b""]),
            Out::Update { params, .. } => Some(wire::session_update_parts(params)),
            Out::Keepalive | Out::Evicted => None,
        }
    }

    /// The id of the event the message came from, if any.
    pub fn event_id(&self) -> Option<u64> {
        match self {
            Out::Message { event_id, .. } | Out::Update { event_id, .. } => *event_id,
            Out::Keepalive | Out::Evicted => None,
        }
    }
}

/// An answer waiting for the stream: released once the lane has delivered event `gate`.
#[derive(Debug)]
pub(super) struct Deferred {
    pub(super) gate: u64,
    pub(super) json: Bytes,
}

/// What handing a message out settles: a prompt's answer is owed until it is handed out, so a
/// stream that restarts before (Streamable HTTP, `Last-Event-ID`) converts it again.
#[derive(Debug)]
enum Settle {
    Prompt(String),
}

/// A session's stream: a live subscription's batches, their frames marked
/// ([`crate::daemon::Subscription::into_marked`]).
pub(super) type MarkedStream = Pin<Box<dyn Stream<Item = Marked> + Send>>;

/// One attached session's outbound stream on one connection.
pub struct Lane {
    session: Arc<Session>,
    shared: Arc<Shared>,
    source: MarkedStream,
    /// Converted messages not yet handed out (one batch at most), each with what its handing out
    /// settles.
    ready: VecDeque<(Out, Option<Settle>)>,
    replies: queue::Receiver<Deferred>,
    held: VecDeque<Deferred>,
    /// The id of the last event converted.
    cursor: u64,
    /// Until the stream's `replay_complete`: the pending-request sweep waits for the live edge.
    replaying: bool,
    /// The pending requests this lane has asked the client to decide (by mediator request id).
    asked: HashSet<String>,
    stop: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The same signal, to ask: a stopped lane was replaced (the session attached again) or
    /// detached, and is never handed to a stream again.
    stopped: CancellationToken,
    done: bool,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane").field("session_id", &self.session.id).field("cursor", &self.cursor).finish()
    }
}

impl Lane {
    /// A lane reading `source`, which starts after event `after` and replays first if `replaying`.
    pub(super) fn new(
        session: Arc<Session>,
        shared: Arc<Shared>,
        source: MarkedStream,
        after: u64,
        replaying: bool,
        replies: queue::Receiver<Deferred>,
        stop: CancellationToken,
    ) -> Lane {
        let mut lane = Lane {
            session,
            shared,
            source,
            ready: VecDeque::new(),
            replies,
            held: VecDeque::new(),
            cursor: after,
            replaying,
            asked: HashSet::new(),
            stopped: stop.clone(),
            stop: Box::pin(stop.cancelled_owned()),
            done: false,
        };
        // A stream with no replay has no `replay_complete` to wait for: the requests pending now
        // are asked at once (the ones raised from here on come down the stream).
        if !replaying {
            lane.sweep();
        }
        lane
    }

    pub fn session_id(&self) -> &str {
        &self.session.id
    }

    /// Whether the lane was stopped: its session was attached again (a new lane) or detached.
    pub fn is_stopped(&self) -> bool {
        self.stopped.is_cancelled()
    }

    /// The id of the last event this lane converted.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// Reads the session's stream from a new subscription (an HTTP client's resumed stream): what
    /// was converted and not handed out is converted again from the resume point, and the pending
    /// requests are asked again at the live edge (the client may have missed them).
    pub(super) fn restart(&mut self, source: MarkedStream, after: u64, replaying: bool) {
        self.source = source;
        self.cursor = after;
        self.replaying = replaying;
        self.ready.clear();
        self.asked.clear();
        self.done = false;
        if !replaying {
            self.sweep();
        }
    }

    fn push(&mut self, out: Out) {
        self.ready.push_back((out, None));
    }

    /// Queues the messages one event gives. Only the last carries the event's id (an SSE `id:`, an
    /// envelope), so a client resuming after that id has had every message of the event.
    fn event_messages(&mut self, messages: Vec<(Bytes, Option<Settle>)>, e: &EventFrame<'_>) {
        let last = messages.len().saturating_sub(1);
        for (i, (json, settle)) in messages.into_iter().enumerate() {
            self.event_message(json, settle, e, i == last);
        }
    }

    /// Queues one message of event `e` (`last`: its last, which carries the event's id).
    fn event_message(&mut self, json: Bytes, settle: Option<Settle>, e: &EventFrame<'_>, last: bool) {
        let event_id = e.id.filter(|_| last);
        let json = match event_id {
            Some(id) if self.shared.envelope() => wire::envelope(&self.session.id, id, e.prompt_id, &json),
            _ => json,
        };
        self.ready.push_back((Out::Message { json, event_id }, settle));
    }

    /// Converts one batch of the stream into messages.
    fn convert(&mut self, batch: &Marked) {
        // About one message per frame: room for the batch, reused by a burst's next batches and
        // given back once the lane idles ([`Lane::settle_idle`]).
        self.ready.reserve(batch.marks.len());
        for piece in batch.pieces() {
            match piece {
                Piece::Event(e) => self.event(&e, &batch.bytes),
                Piece::Keepalive => self.push(Out::Keepalive),
                Piece::Unknown => {
                    tracing::warn!(session_id = %self.session.id, "an unreadable frame on a session stream")
                }
            }
        }
    }

    /// Queues what event `e` gives (`batch`: the stream's bytes it was read from).
    fn event(&mut self, e: &EventFrame<'_>, batch: &Bytes) {
        if let Some(id) = e.id {
            self.cursor = id;
        }
        if e.kind == "session_update" {
            // A client resuming by cursor gets its own echoes too, in their envelopes: that is how it
            // learns which of its prompts the daemon took (`mediatord connect` drops them).
            let own_echo = !self.shared.echo_own()
                && !self.shared.envelope()
                && self.shared.client_id().is_some_and(|me| e.is_from(me))
                && memchr::memmem::find(e.data, ECHO_MARK).is_some();
            if own_echo {
                return;
            }
            if self.shared.envelope() {
                self.event_message(wire::session_update(e.data), None, e, true);
            } else {
                // `e.data` was read out of `batch` (a sub-slice of it, never a copy).
                let params = batch.slice_ref(e.data);
                self.ready.push_back((Out::Update { params, event_id: e.id }, None));
            }
            return;
        }
        let mut messages = vec![(wire::daemon_event(e.kind, e.data, e.id, e.prompt_id, e.originator), None)];
        match e.kind {
            "permission_request" => {
                if let Ok(data) = serde_json::from_slice::<Value>(e.data)
                    && let Some(ask) = self.ask(&data)
                {
                    messages.push((ask, None));
                }
            }
            "elicitation_complete" => {
                let request_id = serde_json::from_slice::<Value>(e.data)
                    .ok()
                    .and_then(|d| d.get("requestId").and_then(Value::as_str).map(str::to_owned));
                if let Some(id) = request_id.filter(|r| self.shared.take_url(&self.session.id, r)) {
                    let params = json!({"elicitationId": id, "_meta": {"mediatord/requestId": id}});
                    messages.push((wire::notification(method::ELICITATION_COMPLETE, &params), None));
                }
            }
            "permission_resolved" => {
                let data = serde_json::from_slice::<Value>(e.data).unwrap_or(Value::Null);
                if self.shared.resolved_updates.load(std::sync::atomic::Ordering::Relaxed)
                    && let Some(update) = resolved_update(&self.session.id, &data)
                {
                    messages.push((update, None));
                }
                if let Some(request_id) = data.get("requestId").and_then(Value::as_str) {
                    messages.extend(self.withdraw(request_id).into_iter().map(|m| (m, None)));
                }
            }
            "turn_complete" | "turn_error" => {
                if let Some(prompt_id) = e.prompt_id_text()
                    && let Some(answer) = self.answer_prompt(prompt_id, e.kind == "turn_complete", e.data)
                {
                    messages.push((answer, Some(Settle::Prompt(prompt_id.to_owned()))));
                }
            }
            _ => {}
        }
        self.event_messages(messages, e);
        match e.kind {
            "replay_complete" => {
                self.replaying = false;
                self.sweep();
            }
            "client_evicted" => self.push(Out::Evicted),
            _ => {}
        }
    }

    /// `session/request_permission` for a pending request this connection may decide and has not
    /// been asked yet; a question as `elicitation/create` when the client advertised its mode
    /// (`docs/protocol.md#196-over-acp`).
    fn ask(&mut self, data: &Value) -> Option<Bytes> {
        let request_id = data.get("requestId").and_then(Value::as_str)?;
        if self.asked.contains(request_id) {
            return None;
        }
        if !self.shared.desk.may_decide(&self.session, &self.shared.caller(), request_id) {
            return None;
        }
        let (form, url) = self.shared.elicitation_modes();
        let elicitation = if data.get("question").is_some() && (form || url) {
            let question = self.session.permissions().question(request_id)?;
            question
                .elicitation(&self.session.id, request_id, form, url)
                .map(|p| (p, question.link.is_some()))
        } else {
            None
        };
        let Some(our_id) = self.shared.issue(&self.session.id, request_id, elicitation.is_some()) else {
            tracing::warn!(session_id = %self.session.id, "too many unanswered permission requests on one ACP connection; not asking it");
            return None;
        };
        self.asked.insert(request_id.to_owned());
        if let Some((params, is_url)) = elicitation {
            if is_url {
                self.shared.remember_url(&self.session.id, request_id);
            }
            return Some(wire::request(&our_id, method::ELICITATION_CREATE, &params));
        }
        let tool_call = data.get("toolCall").cloned().unwrap_or_else(|| json!({}));
        // What the v2 fields describe: the request laid over what the agent announced for its
        // tool call (an agent may put the command only in the announcement).
        let announced = self.session.permissions().pending_request(request_id);
        let described = announced.as_ref().and_then(|d| d.get("toolCall")).unwrap_or(&tool_call);
        let mut params = json!({
            "sessionId": self.session.id,
            "toolCall": tool_call,
            "options": data.get("options").cloned().unwrap_or_else(|| json!([])),
            "_meta": {
                "qwen": {"requestId": request_id},
                "mediatord/requestId": request_id,
                "mediatord/policy": data.get("policy"),
            },
        });
        if let (Value::Object(out), Value::Object(v2)) =
            (&mut params, v2_fields(described, &self.session.workspace))
        {
            out.extend(v2);
        }
        Some(wire::request(&our_id, "session/request_permission", &params))
    }

    /// A decided request: the client's own requests for it are withdrawn (`$/cancel_request`).
    fn withdraw(&mut self, request_id: &str) -> Vec<Bytes> {
        self.asked.remove(request_id);
        let ours = self.shared.withdraw(&self.session.id, request_id);
        ours.into_iter().map(|id| wire::notification("$/cancel_request", &json!({"requestId": id}))).collect()
    }

    /// Asks the client about every pending request it may decide that it has not been asked about
    /// (requests raised before it attached, or before its replay's live edge).
    fn sweep(&mut self) {
        let asks: Vec<Bytes> =
            self.session.permissions().list_pending().iter().filter_map(|d| self.ask(d)).collect();
        for ask in asks {
            self.push(Out::Message { json: ask, event_id: None });
        }
    }

    /// The answer to this connection's `session/prompt`, at its turn's end (still owed until it is
    /// handed out: [`Settle::Prompt`]).
    fn answer_prompt(&self, prompt_id: &str, complete: bool, data: &[u8]) -> Option<Bytes> {
        let id = self.shared.owed_prompt(&self.session.id, prompt_id)?;
        let data: Value = serde_json::from_slice(data).unwrap_or(Value::Null);
        let json = if complete {
            let stop = data.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn");
            wire::response(
                &id,
                &json!({"stopReason": stop, "promptId": prompt_id, "_meta": {"mediatord/promptId": prompt_id}}),
            )
        } else {
            let message = data.get("message").and_then(Value::as_str).unwrap_or("the turn failed").to_owned();
            let failure = match data.get("code").and_then(Value::as_str) {
                Some("agent_exited") => SessionError::AgentExited(message),
                Some("daemon_draining") => SessionError::Draining,
                Some("session_closed") => SessionError::NotFound { session_id: self.session.id.clone() },
                _ => SessionError::Agent(message),
            };
            wire::error(Some(&id), &Failure::from(failure).render())
        };
        Some(json)
    }

    /// Gives back the room of the ready queue and of the held answers once they are empty and the
    /// stream has nothing new: an idle connection holds no batch's worth of slots (issue #46).
    fn settle_idle(&mut self) {
        give_back_drained(&mut self.ready);
        give_back_drained(&mut self.held);
    }

    /// Moves the deferred answers whose events have all been delivered to the ready queue.
    fn release(&mut self) {
        while self.held.front().is_some_and(|d| d.gate <= self.cursor || self.done) {
            if let Some(d) = self.held.pop_front() {
                self.push(Out::Message { json: d.json, event_id: None });
            }
        }
    }
}

impl Stream for Lane {
    type Item = Out;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Out>> {
        let this = self.get_mut();
        loop {
            if let Some((out, settle)) = this.ready.pop_front() {
                // A prompt answered meanwhile (cancelled while queued, `$/cancel_request`) is not
                // answered twice.
                if let Some(Settle::Prompt(prompt_id)) = settle
                    && this.shared.take_prompt(&this.session.id, &prompt_id).is_none()
                {
                    continue;
                }
                return Poll::Ready(Some(out));
            }
            while let Poll::Ready(Some(deferred)) = this.replies.poll_recv(cx) {
                this.held.push_back(deferred);
            }
            this.release();
            if !this.ready.is_empty() {
                continue;
            }
            if this.done {
                return Poll::Ready(None);
            }
            if this.stop.as_mut().poll(cx).is_ready() {
                this.done = true;
                continue;
            }
            match this.source.as_mut().poll_next(cx) {
                Poll::Ready(Some(batch)) => this.convert(&batch),
                // The session ended (its terminal event was the last) or the daemon is stopping:
                // what is still owed goes out, then the lane ends.
                Poll::Ready(None) => this.done = true,
                // Drained and nothing new: the lane idles, holding no room for a batch.
                Poll::Pending => {
                    this.settle_idle();
                    return Poll::Pending;
                }
            }
        }
    }
}

/// A decided request as the multi-client attach proposal (ACP #533) announces it to every client
/// of the session: a `session/update` of kind `permission_resolved` with the request's id, the
/// outcome the agent was given, and who or what decided it (the daemon's `permission_resolved`
/// event, which `_qwen/notify` carries too, has the rest).
fn resolved_update(session_id: &str, data: &Value) -> Option<Bytes> {
    let request_id = data.get("requestId")?.as_str()?;
    let mut update = json!({
        "sessionUpdate": "permission_resolved",
        "requestId": request_id,
        "outcome": data.get("outcome").cloned().unwrap_or(Value::Null),
        "resolvedBy": data.get("resolvedBy").cloned().unwrap_or(Value::Null),
    });
    if let Some(voter) = data.get("voterClientId").filter(|v| !v.is_null()) {
        update["resolvedByClientId"] = voter.clone();
    }
    Some(wire::notification("session/update", &json!({"sessionId": session_id, "update": update})))
}

/// ACP v2's permission fields (the v2 permission-requests RFD), derived from a v1 request's tool
/// call (every agent sends v1 today): `title` (the tool call's, else a generic one), `description`
/// (the tool call's first text content, else the paths it touches, else none) and `subject`: a
/// `command` (with `cwd`, absolute: the tool call's own when absolute, else the workspace) when the
/// tool call carries one in `rawInput.command`, else the `tool_call` by its id, else none.
fn v2_fields(tool_call: &Value, workspace: &std::path::Path) -> Value {
    fn text(v: Option<&Value>) -> Option<&str> {
        v.and_then(Value::as_str).map(str::trim).filter(|t| !t.is_empty())
    }
    let title = text(tool_call.get("title")).unwrap_or("The agent asks for permission");
    let description = tool_call
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|c| text(c.pointer("/content/text")))
        .map(str::to_owned)
        .or_else(|| {
            let paths: Vec<&str> = tool_call
                .get("locations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|l| text(l.get("path")))
                .collect();
            (!paths.is_empty()).then(|| paths.join(", "))
        });
    let tool_call_id = text(tool_call.get("toolCallId"));
    let subject = match text(tool_call.pointer("/rawInput/command")) {
        Some(command) => {
            let cwd = text(tool_call.pointer("/rawInput/cwd"))
                .filter(|c| c.starts_with('/'))
                .map_or_else(|| workspace.to_string_lossy().into_owned(), str::to_owned);
            json!({"type": "command", "command": command, "cwd": cwd, "toolCallId": tool_call_id})
        }
        None => match tool_call_id {
            Some(id) => json!({"type": "tool_call", "toolCall": {"toolCallId": id}}),
            None => Value::Null,
        },
    };
    let mut out = json!({"title": title});
    if let Some(d) = description {
        out["description"] = json!(d);
    }
    if !subject.is_null() {
        out["subject"] = subject;
    }
    out
}

/// The error an answer carries when its session is gone (the lane ended before the answer).
pub(super) fn gone(id: &RequestId, session_id: &str) -> Bytes {
    let failure = Failure::from(SessionError::NotFound { session_id: session_id.to_owned() });
    wire::error(Some(id), &failure.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1_tool_call_gives_the_v2_title_description_and_subject() {
        let ws = std::path::Path::new("/srv/project");
        let command = json!({
            "toolCallId": "call_1", "title": "Run tests", "kind": "execute",
            "rawInput": {"command": "cargo test", "cwd": "relative/dir"},
        });
        assert_eq!(
            v2_fields(&command, ws),
            json!({"title": "Run tests", "subject": {"type": "command", "command": "cargo test", "cwd": "/srv/project", "toolCallId": "call_1"}})
        );
        let mut own_cwd = command.clone();
        own_cwd["rawInput"]["cwd"] = json!("/srv/project/sub");
        assert_eq!(v2_fields(&own_cwd, ws)["subject"]["cwd"], "/srv/project/sub");
        let edit = json!({
            "toolCallId": "call_2", "title": "Write notes.txt", "kind": "edit",
            "locations": [{"path": "/srv/project/notes.txt"}, {"path": "/srv/project/b"}],
        });
        assert_eq!(
            v2_fields(&edit, ws),
            json!({"title": "Write notes.txt", "description": "/srv/project/notes.txt, /srv/project/b",
                   "subject": {"type": "tool_call", "toolCall": {"toolCallId": "call_2"}}})
        );
        let said = json!({"toolCallId": "c", "title": " ", "content": [{"type": "content", "content": {"type": "text", "text": "Delete the cache?"}}]});
        assert_eq!(v2_fields(&said, ws)["description"], "Delete the cache?");
        assert_eq!(v2_fields(&said, ws)["title"], "The agent asks for permission");
        assert_eq!(v2_fields(&json!({}), ws), json!({"title": "The agent asks for permission"}));
    }
}

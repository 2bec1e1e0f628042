//! Anthropic Messages (`POST /v1/messages`, and `/v1/messages/count_tokens`), streaming (SSE) or not,
//! with tool use: what Claude Code speaks (`ANTHROPIC_BASE_URL=<url>`).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::body::{self, Frame};
use crate::conversation::{Conversation, Message, Part, Reply, Role};
use crate::{Call, Fake, MODEL_ID, answer, parse_json};

const PATH: &str = "/v1/messages";

pub fn routes() -> Router<Arc<Fake>> {
    Router::new().route(PATH, post(messages)).route("/v1/messages/count_tokens", post(count_tokens))
}

async fn messages(State(fake): State<Arc<Fake>>, body: Bytes) -> Response {
    let Call { req, reply, what } = match answer(&fake, PATH, &body, conversation) {
        Ok(call) => call,
        Err(why) => return error(&why),
    };
    let stream = req.get("stream").and_then(Value::as_bool) == Some(true);
    let out = Out {
        id: fake.id("msg_"),
        model: req.get("model").and_then(Value::as_str).unwrap_or(MODEL_ID).to_owned(),
        tool_id: fake.id("toolu_"),
    };
    if stream {
        body::response("text/event-stream", out.stream(&reply), fake.journal.clone(), what)
    } else {
        body::response("application/json", out.whole(&reply), fake.journal.clone(), what)
    }
}

/// A rough count (four bytes a token) of a valid request: Claude Code only checks that it answers.
async fn count_tokens(State(fake): State<Arc<Fake>>, body: Bytes) -> Response {
    if let Err(why) = parse_json(&body).and_then(|req| conversation(&req)) {
        return error(&why);
    }
    fake.journal.note(format!("POST {PATH}/count_tokens ({} bytes)", body.len()));
    axum::Json(json!({ "input_tokens": (body.len() / 4).max(1) })).into_response()
}

/// The request's messages (the `system` prompt is a separate field, left out) and offered tools.
pub fn conversation(req: &Value) -> Result<Conversation, String> {
    let messages = req.get("messages").and_then(Value::as_array).ok_or("`messages` must be an array")?;
    let mut conv = Conversation::default();
    for m in messages {
        let role = match m.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            _ => return Err("every message needs `role` \"user\" or \"assistant\"".into()),
        };
        let parts = match m.get("content") {
            Some(Value::String(s)) => vec![Part::Text(s.clone())],
            Some(Value::Array(blocks)) => blocks.iter().filter_map(part).collect(),
            _ => return Err("every message needs `content`, a string or an array of blocks".into()),
        };
        conv.messages.push(Message { role, parts });
    }
    let tools = req.get("tools").and_then(Value::as_array).into_iter().flatten();
    conv.tools = tools.filter_map(|t| t.get("name")?.as_str()).map(str::to_owned).collect();
    Ok(conv)
}

/// The blocks the rule reads; images, thinking and the like are left out.
fn part(block: &Value) -> Option<Part> {
    let s = |key: &str| block.get(key).and_then(Value::as_str).map(str::to_owned);
    match block.get("type")?.as_str()? {
        "text" => s("text").map(Part::Text),
        "tool_use" => s("id").map(Part::ToolCall),
        "tool_result" => s("tool_use_id").map(Part::ToolResult),
        _ => None,
    }
}

/// What the events or the document of one response repeat.
struct Out {
    id: String,
    model: String,
    tool_id: String,
}

fn event(kind: &str, mut data: Value) -> Frame {
    data["type"] = json!(kind);
    Frame::sse(Some(kind), &data)
}

fn usage() -> Value {
    json!({ "input_tokens": 1, "output_tokens": 1 })
}

impl Out {
    fn message(&self, content: Value, stop_reason: Value) -> Value {
        json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": null, "usage": usage(),
        })
    }

    /// SSE: `message_start`, one content block (text, or a tool use), `message_delta` with the stop
    /// reason, `message_stop`.
    fn stream(&self, reply: &Reply) -> Vec<Frame> {
        let mut frames =
            vec![event("message_start", json!({ "message": self.message(json!([]), Value::Null) }))];
        let delta = |text: &str| {
            event(
                "content_block_delta",
                json!({ "index": 0, "delta": { "type": "text_delta", "text": text } }),
            )
        };
        let start =
            |block: Value| event("content_block_start", json!({ "index": 0, "content_block": block }));
        let stop_reason = match reply {
            Reply::Text(chunks) => {
                frames.push(start(json!({ "type": "text", "text": "" })));
                frames.extend(chunks.iter().map(|t| delta(t)));
                "end_turn"
            }
            Reply::Tool(call) => {
                frames.push(start(
                    json!({ "type": "tool_use", "id": self.tool_id, "name": call.name, "input": {} }),
                ));
                frames.push(event(
                    "content_block_delta",
                    json!({ "index": 0, "delta": { "type": "input_json_delta", "partial_json": call.arguments.to_string() } }),
                ));
                "tool_use"
            }
            Reply::Stall { opening, hold, closing } => {
                frames.push(start(json!({ "type": "text", "text": "" })));
                frames.push(delta(opening));
                frames.push(Frame::Hold(*hold));
                frames.push(delta(closing));
                "end_turn"
            }
        };
        frames.push(event("content_block_stop", json!({ "index": 0 })));
        frames.push(event(
            "message_delta",
            json!({ "delta": { "stop_reason": stop_reason, "stop_sequence": null }, "usage": { "output_tokens": 1 } }),
        ));
        frames.push(event("message_stop", json!({})));
        frames
    }

    /// One `message` document (after the hold, for a stall).
    fn whole(&self, reply: &Reply) -> Vec<Frame> {
        let (content, stop_reason, hold) = match reply {
            Reply::Text(chunks) => (json!([{ "type": "text", "text": chunks.concat() }]), "end_turn", None),
            Reply::Tool(call) => (
                json!([{ "type": "tool_use", "id": self.tool_id, "name": call.name, "input": call.arguments }]),
                "tool_use",
                None,
            ),
            Reply::Stall { opening, hold, closing } => {
                (json!([{ "type": "text", "text": format!("{opening}{closing}") }]), "end_turn", Some(*hold))
            }
        };
        let doc = self.message(content, json!(stop_reason));
        vec![Frame::Hold(hold.unwrap_or_default()), Frame::Data(Bytes::from(doc.to_string()))]
    }
}

fn error(why: &str) -> Response {
    let body = json!({ "type": "error", "error": { "type": "invalid_request_error", "message": why } });
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{DEFAULT_TEXT, DONE_TEXT};

    /// The shape Claude Code 2.1 (through claude-code-acp 0.16) sends: context in a
    /// `<system-reminder>` text block before the prompt, tool results as `tool_result` blocks of a
    /// user message.
    fn claude_request(messages: Vec<Value>) -> Value {
        json!({
            "model": "claude-sonnet-4-5", "stream": true, "max_tokens": 32000,
            "system": [{"type": "text", "text": "You are Claude Code. WRITE /not/a/directive x"}],
            "messages": messages,
            "tools": [{"name": "Bash", "input_schema": {}}, {"name": "mcp__acp__Write", "input_schema": {}}],
        })
    }

    fn user(blocks: Vec<Value>) -> Value {
        json!({"role": "user", "content": blocks})
    }
    fn text(t: &str) -> Value {
        json!({"type": "text", "text": t})
    }
    fn tool_use(id: &str) -> Value {
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "mcp__acp__Write", "input": {}}]})
    }
    fn tool_result(id: &str) -> Value {
        json!({"type": "tool_result", "tool_use_id": id, "content": "written"})
    }

    fn reply_to(messages: Vec<Value>) -> Reply {
        crate::conversation::reply(&conversation(&claude_request(messages)).expect("a valid request"))
    }

    fn write_path(reply: &Reply) -> Option<String> {
        match reply {
            Reply::Tool(c) if c.name == "mcp__acp__Write" => {
                c.arguments["file_path"].as_str().map(str::to_owned)
            }
            _ => None,
        }
    }

    #[test]
    fn two_writes_in_one_claude_session_each_call_the_write_tool() {
        let context = text("<system-reminder>\nAs you answer the user's questions ...\n</system-reminder>");
        let mut m = vec![user(vec![context, text("WRITE /w/a.txt one")])];
        assert_eq!(write_path(&reply_to(m.clone())).as_deref(), Some("/w/a.txt"));
        m.extend([tool_use("toolu_1"), user(vec![tool_result("toolu_1")])]);
        assert_eq!(reply_to(m.clone()), Reply::Text(vec![DONE_TEXT.into()]));
        m.extend([
            json!({"role": "assistant", "content": [text("done")]}),
            user(vec![text("WRITE /w/b.txt two")]),
        ]);
        assert_eq!(write_path(&reply_to(m.clone())).as_deref(), Some("/w/b.txt"));
        m.extend([tool_use("toolu_2"), user(vec![tool_result("toolu_2")])]);
        assert_eq!(reply_to(m), Reply::Text(vec![DONE_TEXT.into()]));
    }

    #[test]
    fn after_a_cancelled_write_the_folded_next_prompt_is_a_new_turn() {
        // What Claude Code sent in the e2e run after a cancel: the cancelled call's result, a note
        // and the next prompt, all in one user message; earlier assistant messages merged.
        let m = vec![
            user(vec![text("WRITE /w/a.txt one")]),
            tool_use("toolu_1"),
            user(vec![
                tool_result("toolu_1"),
                text("[Request interrupted by user for tool use]"),
                text("hi"),
            ]),
        ];
        assert_eq!(
            reply_to(m.clone()),
            Reply::Text(["Hello", " from", " the", " fake", " model."].map(String::from).to_vec())
        );
        let mut again = m;
        again[2] = user(vec![
            tool_result("toolu_1"),
            text("[Request interrupted by user for tool use]"),
            text("WRITE /w/b.txt two"),
        ]);
        assert_eq!(write_path(&reply_to(again)).as_deref(), Some("/w/b.txt"));
    }

    #[test]
    fn string_content_and_unknown_blocks_are_understood() {
        let m = vec![json!({"role": "user", "content": "count"})];
        assert!(matches!(reply_to(m), Reply::Text(_)));
        let with_image = vec![user(vec![json!({"type": "image", "source": {}}), text("SHELL ls")])];
        assert!(matches!(reply_to(with_image), Reply::Tool(c) if c.name == "Bash"));
    }

    #[test]
    fn malformed_requests_are_refused_with_a_reason() {
        assert!(conversation(&json!({"messages": {}})).expect_err("not an array").contains("messages"));
        let bad_role = json!({"messages": [{"role": "system", "content": "x"}]});
        assert!(conversation(&bad_role).expect_err("role").contains("role"));
        let no_content = json!({"messages": [{"role": "user"}]});
        assert!(conversation(&no_content).expect_err("content").contains("content"));
    }

    /// `(event line, data)` of every SSE frame, checking that they agree on the type.
    fn events(frames: &[Frame]) -> Vec<(String, Value)> {
        Frame::texts(frames)
            .into_iter()
            .map(|s| {
                let (ev, data) = s.trim_end().split_once('\n').expect("two lines");
                let ev = ev.strip_prefix("event: ").expect("event line").to_owned();
                let data: Value =
                    serde_json::from_str(data.strip_prefix("data: ").expect("data line")).expect("json");
                assert_eq!(data["type"], ev.as_str());
                (ev, data)
            })
            .collect()
    }

    fn out() -> Out {
        Out { id: "msg_1".into(), model: "m".into(), tool_id: "toolu_9".into() }
    }

    #[test]
    fn a_streamed_tool_use_carries_its_input_as_json_and_stops_for_tool_use() {
        let reply = reply_to(vec![user(vec![text("WRITE /w/a.txt hi there")])]);
        let evs = events(&out().stream(&reply));
        let kinds: Vec<&str> = evs.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(evs[1].1["content_block"]["id"], "toolu_9");
        let input: Value =
            serde_json::from_str(evs[2].1["delta"]["partial_json"].as_str().expect("str")).expect("json");
        assert_eq!(input, json!({"file_path": "/w/a.txt", "content": "hi there"}));
        assert_eq!(evs[4].1["delta"]["stop_reason"], "tool_use");
    }

    #[test]
    fn streamed_text_spells_the_reply_and_a_whole_message_carries_it() {
        let reply = reply_to(vec![user(vec![text("hi")])]);
        let evs = events(&out().stream(&reply));
        let text: String = evs.iter().filter_map(|(_, d)| d.pointer("/delta/text")?.as_str()).collect();
        assert_eq!(text, DEFAULT_TEXT);
        assert_eq!(
            evs.iter().rev().nth(1).map(|(_, d)| &d["delta"]["stop_reason"]),
            Some(&json!("end_turn"))
        );
        let whole = out().whole(&reply);
        let Some(Frame::Data(doc)) = whole.last() else { panic!("a document") };
        let doc: Value = serde_json::from_slice(doc).expect("json");
        assert_eq!(
            (doc["content"][0]["text"].as_str(), doc["stop_reason"].as_str()),
            (Some(DEFAULT_TEXT), Some("end_turn"))
        );
    }
}

//! OpenAI Chat Completions (`POST /v1/chat/completions`), streaming (SSE) or not, with tool calls:
//! what Qwen Code speaks (`OPENAI_BASE_URL=<url>/v1`).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::body::{self, Frame};
use crate::conversation::{Conversation, Message, Part, Reply, Role};
use crate::{Call, Fake, MODEL_ID, answer};

const PATH: &str = "/v1/chat/completions";

pub fn routes() -> Router<Arc<Fake>> {
    Router::new().route(PATH, post(chat_completions))
}

async fn chat_completions(State(fake): State<Arc<Fake>>, body: Bytes) -> Response {
    let Call { req, reply, what } = match answer(&fake, PATH, &body, conversation) {
        Ok(call) => call,
        Err(why) => return error(&why),
    };
    let stream = req.get("stream").and_then(Value::as_bool) == Some(true);
    let out = Out {
        id: fake.id("chatcmpl-"),
        model: req.get("model").and_then(Value::as_str).unwrap_or(MODEL_ID).to_owned(),
        created: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        include_usage: req.pointer("/stream_options/include_usage").and_then(Value::as_bool) == Some(true),
    };
    let tool_id = fake.id("call_");
    if stream {
        body::response("text/event-stream", out.stream(&reply, &tool_id), fake.journal.clone(), what)
    } else {
        body::response("application/json", out.whole(&reply, &tool_id), fake.journal.clone(), what)
    }
}

/// The request's messages and offered tools. Roles `system` and `developer` are left out; a `tool`
/// message is the user side's result of a call.
pub fn conversation(req: &Value) -> Result<Conversation, String> {
    let messages = req.get("messages").and_then(Value::as_array).ok_or("`messages` must be an array")?;
    let mut conv = Conversation::default();
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).ok_or("every message needs a string `role`")?;
        let mut parts = text_parts(m.get("content"));
        let role = match role {
            "user" => Role::User,
            "assistant" => {
                let calls = m.get("tool_calls").and_then(Value::as_array).into_iter().flatten();
                parts.extend(
                    calls.filter_map(|c| c.get("id")?.as_str()).map(|id| Part::ToolCall(id.to_owned())),
                );
                Role::Assistant
            }
            "tool" => {
                let id = m
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .ok_or("a `tool` message needs `tool_call_id`")?;
                let said = parts.into_iter().filter_map(|p| match p {
                    Part::Text(t) => Some(Part::ResultText(t)),
                    _ => None,
                });
                parts = std::iter::once(Part::ToolResult(id.to_owned())).chain(said).collect();
                Role::User
            }
            _ => continue,
        };
        conv.messages.push(Message { role, parts });
    }
    let tools = req.get("tools").and_then(Value::as_array).into_iter().flatten();
    conv.tools = tools.filter_map(|t| t.pointer("/function/name")?.as_str()).map(str::to_owned).collect();
    Ok(conv)
}

/// `content` as a string, or an array of parts of which the `text` ones count.
fn text_parts(content: Option<&Value>) -> Vec<Part> {
    match content {
        Some(Value::String(s)) => vec![Part::Text(s.clone())],
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text")?.as_str())
            .map(|t| Part::Text(t.to_owned()))
            .collect(),
        _ => Vec::new(),
    }
}

/// What every chunk or document of one response repeats.
struct Out {
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
}

impl Out {
    fn usage() -> Value {
        json!({ "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2 })
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Frame {
        Frame::sse(
            None,
            &json!({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{ "index": 0, "delta": delta, "finish_reason": finish, "logprobs": null }],
            }),
        )
    }

    /// SSE: a role chunk, the text or the tool call, the finish reason, usage if asked, `[DONE]`.
    fn stream(&self, reply: &Reply, tool_id: &str) -> Vec<Frame> {
        let mut frames = vec![self.chunk(json!({ "role": "assistant", "content": "" }), None)];
        let text = |frames: &mut Vec<Frame>, chunks: &[String]| {
            frames.extend(chunks.iter().map(|t| self.chunk(json!({ "content": t }), None)));
        };
        let finish = match reply {
            Reply::Text(chunks) => {
                text(&mut frames, chunks);
                "stop"
            }
            Reply::Tool(call) => {
                frames.push(self.chunk(json!({ "tool_calls": [tool_call(tool_id, call, Some(0))] }), None));
                "tool_calls"
            }
            Reply::Stall { opening, hold, closing } => {
                text(&mut frames, std::slice::from_ref(opening));
                frames.push(Frame::Hold(*hold));
                text(&mut frames, std::slice::from_ref(closing));
                "stop"
            }
        };
        frames.push(self.chunk(json!({}), Some(finish)));
        if self.include_usage {
            frames.push(Frame::sse(
                None,
                &json!({
                    "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                    "model": self.model, "choices": [], "usage": Self::usage(),
                }),
            ));
        }
        frames.push(Frame::Data(Bytes::from_static(b"data: [DONE]\n\n")));
        frames
    }

    /// One `chat.completion` document (after the hold, for a stall).
    fn whole(&self, reply: &Reply, tool_id: &str) -> Vec<Frame> {
        let (message, finish, hold) = match reply {
            Reply::Text(chunks) => (json!({ "role": "assistant", "content": chunks.concat() }), "stop", None),
            Reply::Tool(call) => (
                json!({ "role": "assistant", "content": null, "tool_calls": [tool_call(tool_id, call, None)] }),
                "tool_calls",
                None,
            ),
            Reply::Stall { opening, hold, closing } => (
                json!({ "role": "assistant", "content": format!("{opening}{closing}") }),
                "stop",
                Some(*hold),
            ),
        };
        let doc = json!({
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
            "choices": [{ "index": 0, "message": message, "finish_reason": finish, "logprobs": null }],
            "usage": Self::usage(),
        });
        let hold: Duration = hold.unwrap_or_default();
        vec![Frame::Hold(hold), Frame::Data(Bytes::from(doc.to_string()))]
    }
}

fn tool_call(id: &str, call: &crate::tools::ToolCall, index: Option<usize>) -> Value {
    let mut v = json!({
        "id": id, "type": "function",
        "function": { "name": call.name, "arguments": call.arguments.to_string() },
    });
    if let Some(i) = index {
        v["index"] = json!(i);
    }
    v
}

fn error(why: &str) -> Response {
    let body =
        json!({ "error": { "message": why, "type": "invalid_request_error", "param": null, "code": null } });
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{DEFAULT_TEXT, DONE_TEXT};

    /// The shape Qwen Code 0.24 sends: a system prompt, user content as text parts with
    /// `<system-reminder>` context first, tool results as `tool` messages.
    fn qwen_request(messages: Vec<Value>) -> Value {
        let mut all =
            vec![json!({"role": "system", "content": "You are Qwen Code ... WRITE /not/a/directive x"})];
        all.extend(messages);
        json!({
            "model": "fake-model", "stream": true, "stream_options": {"include_usage": true},
            "messages": all,
            "tools": [
                {"type": "function", "function": {"name": "edit", "parameters": {}}},
                {"type": "function", "function": {"name": "run_shell_command", "parameters": {}}},
                {"type": "function", "function": {"name": "write_file", "parameters": {}}},
            ],
        })
    }

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nskills ...\n</system-reminder>"},
            {"type": "text", "text": text},
        ]})
    }

    fn write_call(id: &str, path: &str) -> Value {
        json!({"role": "assistant", "content": "", "tool_calls": [{"id": id, "type": "function",
            "function": {"name": "write_file", "arguments": format!("{{\"file_path\":\"{path}\",\"content\":\"x\"}}")}}]})
    }

    fn tool_result(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": [{"type": "text", "text": "Successfully wrote"}]})
    }

    fn reply_to(req: &Value) -> Reply {
        crate::conversation::reply(&conversation(req).expect("a valid request"))
    }

    fn tool_name(reply: &Reply) -> Option<(&str, &str)> {
        match reply {
            Reply::Tool(c) => Some((c.name.as_str(), c.arguments["file_path"].as_str().unwrap_or(""))),
            _ => None,
        }
    }

    #[test]
    fn two_writes_in_one_qwen_session_each_call_write_file() {
        let mut m = vec![user("WRITE /w/a.txt one")];
        assert_eq!(tool_name(&reply_to(&qwen_request(m.clone()))), Some(("write_file", "/w/a.txt")));
        m.extend([write_call("call_1", "/w/a.txt"), tool_result("call_1")]);
        assert_eq!(reply_to(&qwen_request(m.clone())), Reply::Text(vec![DONE_TEXT.into()]));
        m.extend([json!({"role": "assistant", "content": "done"}), user("WRITE /w/b.txt two")]);
        assert_eq!(tool_name(&reply_to(&qwen_request(m.clone()))), Some(("write_file", "/w/b.txt")));
        m.extend([write_call("call_2", "/w/b.txt"), tool_result("call_2")]);
        assert_eq!(reply_to(&qwen_request(m)), Reply::Text(vec![DONE_TEXT.into()]));
    }

    #[test]
    fn a_tool_messages_text_is_read_as_its_result_and_never_as_a_prompt() {
        let ask = json!({"role": "assistant", "content": "", "tool_calls": [{"id": "q1", "type": "function",
            "function": {"name": "ask_user_question", "arguments": "{}"}}]});
        let answer = json!({"role": "tool", "tool_call_id": "q1", "content": "**Question**: b"});
        let req = qwen_request(vec![user("ASK Which? | a | b"), ask, answer]);
        let conv = conversation(&req).expect("valid");
        let last = conv.messages.last().expect("the tool message");
        assert_eq!(
            last.parts,
            vec![Part::ToolResult("q1".into()), Part::ResultText("**Question**: b".into())]
        );
        assert_eq!(crate::conversation::reply(&conv), Reply::Text(vec!["answered: **Question**: b".into()]));
    }

    #[test]
    fn the_system_prompt_and_plain_string_content_are_understood() {
        let req = qwen_request(vec![json!({"role": "user", "content": "hi"})]);
        assert_eq!(
            reply_to(&req),
            Reply::Text(["Hello", " from", " the", " fake", " model."].map(String::from).to_vec())
        );
        let shell = qwen_request(vec![json!({"role": "user", "content": "SHELL echo hi"})]);
        assert!(matches!(reply_to(&shell), Reply::Tool(c) if c.name == "run_shell_command"));
    }

    #[test]
    fn malformed_requests_are_refused_with_a_reason() {
        assert!(conversation(&json!({})).expect_err("no messages").contains("messages"));
        assert!(
            conversation(&json!({"messages": [{"content": "x"}]})).expect_err("no role").contains("role")
        );
        let no_id = json!({"messages": [{"role": "tool", "content": "x"}]});
        assert!(conversation(&no_id).expect_err("no id").contains("tool_call_id"));
    }

    fn out(include_usage: bool) -> Out {
        Out { id: "chatcmpl-x".into(), model: "m".into(), created: 1, include_usage }
    }

    #[test]
    fn a_streamed_tool_call_carries_its_arguments_and_finishes_with_tool_calls() {
        let reply = reply_to(&qwen_request(vec![user("WRITE /w/a.txt some text")]));
        let data = Frame::texts(&out(true).stream(&reply, "call_7"));
        assert!(data.iter().all(|d| d.starts_with("data: ") && d.ends_with("\n\n")), "{data:?}");
        assert_eq!(data.last().map(String::as_str), Some("data: [DONE]\n\n"));
        let chunks: Vec<Value> = data[..data.len() - 1]
            .iter()
            .map(|d| serde_json::from_str(d.trim_start_matches("data: ").trim()).expect("json chunk"))
            .collect();
        let call = &chunks[1]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["id"], "call_7");
        assert_eq!(call["function"]["name"], "write_file");
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().expect("a string")).expect("json");
        assert_eq!(args, json!({"file_path": "/w/a.txt", "content": "some text"}));
        assert_eq!(chunks[2]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(chunks[3]["usage"]["total_tokens"], 2, "usage chunk when include_usage");
    }

    #[test]
    fn a_whole_response_has_the_text_and_no_usage_chunk_is_sent_unasked() {
        let reply = reply_to(&qwen_request(vec![user("hi")]));
        let data = Frame::texts(&out(false).stream(&reply, "call_1"));
        assert!(!data.iter().any(|d| d.contains("\"usage\"")), "{data:?}");
        let doc: Value =
            serde_json::from_str(&Frame::texts(&out(false).whole(&reply, "call_1"))[0]).expect("json");
        assert_eq!(doc["choices"][0]["message"]["content"], DEFAULT_TEXT);
        assert_eq!(doc["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn a_stall_holds_between_its_opening_and_closing_text() {
        let reply = reply_to(&qwen_request(vec![user("STALL 5")]));
        let frames = out(false).stream(&reply, "call_1");
        let hold = frames.iter().position(|f| matches!(f, Frame::Hold(d) if *d == Duration::from_secs(5)));
        let hold = hold.expect("a hold");
        let before = Frame::texts(&frames[..hold]).concat();
        let after = Frame::texts(&frames[hold..]).concat();
        assert!(
            before.contains(crate::directive::STALL_OPENING) && !before.contains("finish_reason\":\"stop")
        );
        assert!(after.contains(crate::directive::STALL_CLOSING) && after.contains("[DONE]"));
    }
}

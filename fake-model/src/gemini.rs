//! Gemini `generateContent` (`POST /v1beta/models/{model}:streamGenerateContent?alt=sse`, and the
//! non-streamed `:generateContent` and `:countTokens`), with function calls: what Gemini CLI speaks
//! (`GOOGLE_GEMINI_BASE_URL=<url>`; the SDK appends `/v1beta/models/...`).
//!
//! A request's `contents` alternate `user` and `model`; a model's call is a `functionCall` part and
//! its result a `functionResponse` part of the next `user` content, paired by the `id` Gemini CLI
//! gives the call (by name when there is none). A streamed reply is one `GenerateContentResponse`
//! per SSE `data:` line, and its last one must carry `finishReason: "STOP"`: without it Gemini CLI
//! takes the stream for broken and asks again, up to three more times.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::body::{self, Frame};
use crate::conversation::{Conversation, Message, Part, Reply, Role};
use crate::{Call, Fake, answer, parse_json};

/// The route: `{call}` is `<model>:<method>`, one path segment.
const ROUTE: &str = "/v1beta/models/{call}";

pub fn routes() -> Router<Arc<Fake>> {
    Router::new().route(ROUTE, post(model_call))
}

async fn model_call(
    State(fake): State<Arc<Fake>>,
    Path(call): Path<String>,
    uri: Uri,
    body: Bytes,
) -> Response {
    let Some((model, method)) = call.rsplit_once(':') else {
        return error(StatusCode::NOT_FOUND, &format!("the fake model has no route {}", uri.path()));
    };
    let path = uri.path();
    match method {
        "countTokens" => {
            if let Err(why) = parse_json(&body).and_then(|req| conversation(&req)) {
                return error(StatusCode::BAD_REQUEST, &why);
            }
            fake.journal.note(format!("POST {path} ({} bytes)", body.len()));
            axum::Json(json!({ "totalTokens": (body.len() / 4).max(1) })).into_response()
        }
        "streamGenerateContent" | "generateContent" => {
            let stream = method == "streamGenerateContent";
            // Gemini CLI always asks for SSE; the JSON-array stream it does not use is not served.
            if stream && !uri.query().is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse")) {
                return error(StatusCode::BAD_REQUEST, "the fake model streams only with ?alt=sse");
            }
            let Call { req, reply, what } = match answer(&fake, path, &body, conversation) {
                Ok(call) => call,
                Err(why) => return error(StatusCode::BAD_REQUEST, &why),
            };
            // A side call wanting JSON (the `auto` model router, checkers): a bland object, which Gemini
            // CLI falls back from. Not reached with a pinned model, as in the e2e suite.
            let json_wanted = req.pointer("/generationConfig/responseMimeType").and_then(Value::as_str)
                == Some("application/json");
            let reply = if json_wanted { Reply::Text(vec!["{}".to_owned()]) } else { reply };
            let out = Out { model: model.to_owned() };
            if stream {
                body::response("text/event-stream", out.stream(&reply), fake.journal.clone(), what)
            } else {
                body::response("application/json", out.whole(&reply), fake.journal.clone(), what)
            }
        }
        _ => error(StatusCode::NOT_FOUND, &format!("the fake model has no method {method:?} ({path})")),
    }
}

/// The request's `contents` (the `systemInstruction` is a separate field, left out) and the names of
/// its function declarations.
pub fn conversation(req: &Value) -> Result<Conversation, String> {
    let contents = req.get("contents").and_then(Value::as_array).ok_or("`contents` must be an array")?;
    let mut conv = Conversation::default();
    for c in contents {
        let role = match c.get("role").and_then(Value::as_str) {
            // The API takes a content without a role as the user's.
            Some("user") | None => Role::User,
            Some("model") => Role::Assistant,
            Some(other) => {
                return Err(format!("a content's `role` must be \"user\" or \"model\", not {other:?}"));
            }
        };
        let parts =
            c.get("parts").and_then(Value::as_array).ok_or("every content needs `parts`, an array")?;
        conv.messages.push(Message { role, parts: parts.iter().filter_map(part).collect() });
    }
    let tools = req.get("tools").and_then(Value::as_array).into_iter().flatten();
    let declarations = tools.filter_map(|t| t.get("functionDeclarations")?.as_array()).flatten();
    conv.tools = declarations.filter_map(|d| d.get("name")?.as_str()).map(str::to_owned).collect();
    Ok(conv)
}

/// The parts the rule reads. Thoughts (`thought: true`), inline data and the like are left out.
fn part(p: &Value) -> Option<Part> {
    if p.get("thought").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    // A call and its response are paired by the id Gemini CLI made up, or by name without one.
    let key = |v: &Value| v.get("id").or_else(|| v.get("name")).and_then(Value::as_str).map(str::to_owned);
    if let Some(text) = p.get("text").and_then(Value::as_str) {
        Some(Part::Text(text.to_owned()))
    } else if let Some(call) = p.get("functionCall") {
        key(call).map(Part::ToolCall)
    } else if let Some(response) = p.get("functionResponse") {
        key(response).map(Part::ToolResult)
    } else {
        None
    }
}

/// What every response of one call repeats.
struct Out {
    model: String,
}

impl Out {
    /// One `GenerateContentResponse` with `parts`; `last` ends it with `finishReason: "STOP"`.
    fn response(&self, parts: Value, last: bool) -> Value {
        let mut candidate = json!({ "content": { "role": "model", "parts": parts }, "index": 0 });
        if last {
            candidate["finishReason"] = json!("STOP");
        }
        json!({
            "candidates": [candidate],
            "usageMetadata": { "promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2 },
            "modelVersion": self.model,
        })
    }

    fn text(&self, text: &str, last: bool) -> Frame {
        Frame::sse(None, &self.response(json!([{ "text": text }]), last))
    }

    /// SSE: one response per text chunk, or one with the function call; the last one says `STOP`.
    fn stream(&self, reply: &Reply) -> Vec<Frame> {
        match reply {
            Reply::Text(chunks) => {
                chunks.iter().enumerate().map(|(i, t)| self.text(t, i + 1 == chunks.len())).collect()
            }
            Reply::Tool(call) => {
                let parts = json!([{ "functionCall": { "name": call.name, "args": call.arguments } }]);
                vec![Frame::sse(None, &self.response(parts, true))]
            }
            Reply::Stall { opening, hold, closing } => {
                vec![self.text(opening, false), Frame::Hold(*hold), self.text(closing, true)]
            }
        }
    }

    /// One response document (after the hold, for a stall).
    fn whole(&self, reply: &Reply) -> Vec<Frame> {
        let (parts, hold) = match reply {
            Reply::Text(chunks) => (json!([{ "text": chunks.concat() }]), None),
            Reply::Tool(call) => {
                (json!([{ "functionCall": { "name": call.name, "args": call.arguments } }]), None)
            }
            Reply::Stall { opening, hold, closing } => {
                (json!([{ "text": format!("{opening}{closing}") }]), Some(*hold))
            }
        };
        let doc = self.response(parts, true);
        vec![Frame::Hold(hold.unwrap_or_default()), Frame::Data(Bytes::from(doc.to_string()))]
    }
}

/// Gemini's error shape: `{"error": {"code", "message", "status"}}`.
fn error(status: StatusCode, why: &str) -> Response {
    let kind = if status == StatusCode::NOT_FOUND { "NOT_FOUND" } else { "INVALID_ARGUMENT" };
    let body = json!({ "error": { "code": status.as_u16(), "message": why, "status": kind } });
    (status, axum::Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{DEFAULT_TEXT, DONE_TEXT};

    /// The shape Gemini CLI 0.61 sends (captured from `gemini --acp`): a `<session_context>` text part
    /// before the first prompt of a session, function declarations with `parametersJsonSchema`, the
    /// model's calls echoed back with the id Gemini CLI gave them (and a `thoughtSignature` on the
    /// latest), their results as `functionResponse` parts of a user content.
    fn gemini_request(contents: Vec<Value>) -> Value {
        json!({
            "contents": contents,
            "systemInstruction": {"parts": [{"text": "You are an interactive CLI agent ... WRITE /not/a/directive x"}]},
            "tools": [{"functionDeclarations": [
                {"name": "list_directory", "parametersJsonSchema": {"type": "object"}},
                {"name": "write_file", "parametersJsonSchema": {"type": "object", "required": ["file_path", "content"]}},
                {"name": "run_shell_command", "parametersJsonSchema": {"type": "object", "required": ["command"]}},
            ]}],
            "generationConfig": {"temperature": 1, "topP": 0.95, "topK": 64,
                "thinkingConfig": {"includeThoughts": true, "thinkingBudget": 8192}},
        })
    }

    fn first_prompt(text: &str) -> Value {
        json!({"role": "user", "parts": [
            {"text": "<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\nToday's date is ...\n</session_context>"},
            {"text": text},
        ]})
    }
    fn prompt(text: &str) -> Value {
        json!({"role": "user", "parts": [{"text": text}]})
    }
    fn model_text(text: &str) -> Value {
        json!({"role": "model", "parts": [{"text": text}]})
    }
    fn call(id: &str, path: &str) -> Value {
        json!({"role": "model", "parts": [{
            "functionCall": {"id": id, "name": "write_file", "args": {"file_path": path, "content": "x"}},
            "thoughtSignature": "skip_thought_signature_validator",
        }]})
    }
    fn response(id: &str, outcome: Value) -> Value {
        json!({"role": "user", "parts": [{"functionResponse": {"id": id, "name": "write_file", "response": outcome}}]})
    }
    fn written(id: &str) -> Value {
        response(id, json!({"output": "Successfully created and wrote to new file: /w/a.txt."}))
    }

    fn reply_to(contents: Vec<Value>) -> Reply {
        crate::conversation::reply(&conversation(&gemini_request(contents)).expect("a valid request"))
    }

    fn write_path(reply: &Reply) -> Option<String> {
        match reply {
            Reply::Tool(c) if c.name == "write_file" => c.arguments["file_path"].as_str().map(str::to_owned),
            _ => None,
        }
    }

    fn default_text() -> Reply {
        Reply::Text(["Hello", " from", " the", " fake", " model."].map(String::from).to_vec())
    }

    #[test]
    fn two_writes_in_one_gemini_session_each_call_write_file() {
        let mut c = vec![first_prompt("WRITE /w/a.txt one")];
        assert_eq!(write_path(&reply_to(c.clone())).as_deref(), Some("/w/a.txt"));
        c.extend([call("write_file_1795465857277_0", "/w/a.txt"), written("write_file_1795465857277_0")]);
        assert_eq!(reply_to(c.clone()), Reply::Text(vec![DONE_TEXT.into()]));
        c.extend([model_text("done"), prompt("WRITE /w/b.txt two")]);
        assert_eq!(write_path(&reply_to(c.clone())).as_deref(), Some("/w/b.txt"));
        c.extend([call("write_file_1795465858000_0", "/w/b.txt"), written("write_file_1795465858000_0")]);
        assert_eq!(reply_to(c), Reply::Text(vec![DONE_TEXT.into()]));
    }

    #[test]
    fn a_rejected_write_is_answered_done_and_the_session_goes_on() {
        // After a rejection Gemini CLI asks again with the error as the call's response.
        let cancelled = json!({"error": "Tool \"write_file\" was canceled by the user."});
        let mut c =
            vec![first_prompt("WRITE /w/a.txt one"), call("w_1", "/w/a.txt"), response("w_1", cancelled)];
        assert_eq!(reply_to(c.clone()), Reply::Text(vec![DONE_TEXT.into()]));
        c.extend([model_text("done"), prompt("hi")]);
        assert_eq!(reply_to(c), default_text());
    }

    #[test]
    fn after_a_cancel_the_next_prompt_is_a_new_turn() {
        // Cancelled while its permission was pending: the call stays in the history without a
        // response, and the next prompt follows it (captured from the e2e run).
        let c = vec![first_prompt("WRITE /w/a.txt one"), call("w_1", "/w/a.txt"), prompt("hi")];
        assert_eq!(reply_to(c.clone()), default_text());
        let mut again = c;
        again[2] = prompt("WRITE /w/b.txt two");
        assert_eq!(write_path(&reply_to(again)).as_deref(), Some("/w/b.txt"));
        // Cancelled while the model was answering: the turn is dropped from the history, and the next
        // prompt comes with the session context again.
        assert_eq!(reply_to(vec![first_prompt("hi")]), default_text());
    }

    #[test]
    fn the_session_context_part_is_not_the_prompt() {
        assert_eq!(reply_to(vec![first_prompt("hi")]), default_text());
        let Reply::Tool(shell) = reply_to(vec![first_prompt("SHELL echo hi > /w/sh.txt")]) else {
            panic!("a shell call")
        };
        assert_eq!(
            (shell.name.as_str(), &shell.arguments["command"]),
            ("run_shell_command", &json!("echo hi > /w/sh.txt"))
        );
    }

    #[test]
    fn thoughts_are_left_out_and_calls_without_ids_pair_by_name() {
        let thought =
            json!({"role": "model", "parts": [{"text": "WRITE /w/thought.txt no", "thought": true}]});
        let c = vec![
            prompt("WRITE /w/a.txt one"),
            thought,
            json!({"role": "model", "parts": [{"functionCall": {"name": "write_file", "args": {}}}]}),
            json!({"role": "user", "parts": [{"functionResponse": {"name": "write_file", "response": {"output": "ok"}}}]}),
        ];
        assert_eq!(reply_to(c), Reply::Text(vec![DONE_TEXT.into()]));
    }

    #[test]
    fn malformed_requests_are_refused_with_a_reason() {
        assert!(conversation(&json!({})).expect_err("no contents").contains("contents"));
        let bad_role = json!({"contents": [{"role": "system", "parts": []}]});
        assert!(conversation(&bad_role).expect_err("role").contains("role"));
        let no_parts = json!({"contents": [{"role": "user"}]});
        assert!(conversation(&no_parts).expect_err("parts").contains("parts"));
    }

    /// The JSON of every `data:` line.
    fn responses(frames: &[Frame]) -> Vec<Value> {
        Frame::texts(frames)
            .into_iter()
            .map(|s| {
                assert!(s.ends_with("\n\n") && !s.contains("event:"), "{s:?}");
                serde_json::from_str(s.trim_end().strip_prefix("data: ").expect("a data line")).expect("json")
            })
            .collect()
    }

    fn out() -> Out {
        Out { model: "gemini-2.5-flash".into() }
    }

    #[test]
    fn streamed_text_spells_the_reply_and_only_its_last_chunk_stops() {
        let got = responses(&out().stream(&reply_to(vec![first_prompt("hi")])));
        let text: String =
            got.iter().filter_map(|r| r.pointer("/candidates/0/content/parts/0/text")?.as_str()).collect();
        assert_eq!(text, DEFAULT_TEXT);
        let finishes: Vec<Value> = got.iter().map(|r| r["candidates"][0]["finishReason"].clone()).collect();
        let mut expected = vec![Value::Null; got.len() - 1];
        expected.push(json!("STOP"));
        assert_eq!(finishes, expected);
        assert!(
            got.iter().all(|r| r["candidates"][0]["content"]["role"] == "model"
                && r["modelVersion"] == "gemini-2.5-flash")
        );
    }

    #[test]
    fn a_function_call_is_one_stopped_response_with_the_arguments() {
        let got = responses(&out().stream(&reply_to(vec![first_prompt("WRITE /w/a.txt some text")])));
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0]["candidates"][0]["content"]["parts"][0]["functionCall"],
            json!({"name": "write_file", "args": {"file_path": "/w/a.txt", "content": "some text"}})
        );
        assert_eq!(got[0]["candidates"][0]["finishReason"], "STOP");
    }

    #[test]
    fn a_stall_holds_between_an_open_chunk_and_a_stopped_one() {
        let frames = out().stream(&reply_to(vec![prompt("STALL 4")]));
        assert!(matches!(frames[1], Frame::Hold(d) if d == std::time::Duration::from_secs(4)));
        let got = responses(&frames);
        assert_eq!(got[0]["candidates"][0]["content"]["parts"][0]["text"], crate::directive::STALL_OPENING);
        assert_eq!(got[0]["candidates"][0]["finishReason"], Value::Null);
        assert_eq!(got[1]["candidates"][0]["finishReason"], "STOP");
    }

    #[test]
    fn a_whole_response_is_one_document() {
        let frames = out().whole(&reply_to(vec![prompt("hi")]));
        let Some(Frame::Data(doc)) = frames.last() else { panic!("a document") };
        let doc: Value = serde_json::from_slice(doc).expect("json");
        assert_eq!(doc["candidates"][0]["content"]["parts"][0]["text"], DEFAULT_TEXT);
        assert_eq!(doc["candidates"][0]["finishReason"], "STOP");
    }
}

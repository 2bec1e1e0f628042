//! JSON-RPC 2.0 frames as they cross the agent's stdio, one per NDJSON line, and the error codes.
//!
//! The codec only classifies a line; it never panics on bad input: a line that is not a JSON-RPC
//! message is a [`Frame::Malformed`] value the reader logs and skips. Payloads stay as raw JSON so
//! unknown fields and `_meta` flow through untouched and nothing is re-serialised on the hot path.

use bytes::{Buf, Bytes};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// JSON-RPC "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "invalid params".
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC "internal error".
pub const INTERNAL_ERROR: i64 = -32603;
/// ACP "resource not found".
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// An error object sent back to the agent, or received from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} (code {code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }

    /// An error whose `data.errorKind` names the failure in a stable, machine-readable way.
    pub fn with_kind(code: i64, kind: &str, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: Some(json!({ "errorKind": kind })) }
    }

    /// The message with the agent's `data.details`, where some agents (Qwen Code) put the real
    /// reason behind a generic "Internal error".
    pub fn detailed_message(&self) -> String {
        match self.data.as_ref().and_then(|d| d.get("details")).and_then(Value::as_str) {
            Some(details) if !details.is_empty() && details != self.message => {
                format!("{}: {details}", self.message)
            }
            _ => self.message.clone(),
        }
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }
}

/// A request id as the peer sent it (number or string), echoed back verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    Number(i64),
    Text(String),
}

/// One line from the agent, classified.
#[derive(Debug)]
pub enum Frame {
    /// `{id, method, params}`: the agent asks the daemon something.
    Request { id: RequestId, method: String, params: Option<Box<RawValue>> },
    /// `{method, params}`: fire and forget (a streamed `session/update` is read by
    /// [`Update::parse`] first).
    Notification { method: String, params: Option<Box<RawValue>> },
    /// `{id, result}` or `{id, error}`: the answer to one of the daemon's calls.
    Response { id: RequestId, result: Result<Box<RawValue>, RpcError> },
    /// Anything else; the reason is for the log.
    Malformed(String),
}

#[derive(Deserialize)]
struct RawFrame {
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Box<RawValue>>,
    #[serde(default)]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<RpcError>,
}

/// How agents (JSON.stringify, serde) write a `session/update` notification: these keys, in this
/// order, no spaces. Such a line is all but its params (an object), read as one raw value.
const UPDATE_PREFIX: &[u8] = br#"{"jsonrpc":"2.0","method":"session/update","params":"#;

/// A `session/update`'s params exactly as the agent wrote them, known to be one JSON object (only
/// [`Update::parse`] and [`Update::from_raw`] make one). It shares the agent reader's buffer
/// instead of a copy of its own: the streaming hot path reads an update and hands it on without
/// an allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update(Bytes);

impl Update {
    /// The streaming hot path: a `session/update` line (without its newline) in the usual
    /// spelling, its params still validated as exactly one JSON object. Any other line, or any
    /// other spelling, comes back as it was for [`Frame::parse`].
    pub fn parse(mut line: Bytes) -> Result<Update, Bytes> {
        // `}}`: the params end the line with no space after them, so they are the whole slice.
        let fits = line.starts_with(UPDATE_PREFIX)
            && line.ends_with(b"}}")
            && line.get(UPDATE_PREFIX.len()) == Some(&b'{')
            && serde_json::from_slice::<&RawValue>(&line[UPDATE_PREFIX.len()..line.len() - 1]).is_ok();
        if !fits {
            return Err(line);
        }
        line.truncate(line.len() - 1);
        line.advance(UPDATE_PREFIX.len());
        Ok(Update(line))
    }

    /// The params of a `session/update` the generic parser read, if they are an object.
    pub fn from_raw(params: Box<RawValue>) -> Option<Update> {
        params.get().starts_with('{').then(|| Update(Bytes::from(String::from(Box::<str>::from(params)))))
    }

    /// The params as written: one JSON object, valid UTF-8.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// A copy that holds only its own bytes, not the reader's buffer it came from: for an update
    /// kept a while (an early one, waiting for its session).
    pub fn detached(&self) -> Update {
        Update(Bytes::copy_from_slice(&self.0))
    }
}

impl Frame {
    /// Classifies one line (without its newline).
    pub fn parse(line: &[u8]) -> Frame {
        let raw: RawFrame = match serde_json::from_slice(line) {
            Ok(raw) => raw,
            Err(e) => return Frame::Malformed(format!("not a JSON-RPC object: {e}")),
        };
        match (raw.id, raw.method) {
            (Some(id), Some(method)) => Frame::Request { id, method, params: raw.params },
            (None, Some(method)) => Frame::Notification { method, params: raw.params },
            (Some(id), None) => match (raw.result, raw.error) {
                (_, Some(error)) => Frame::Response { id, result: Err(error) },
                (Some(result), None) => Frame::Response { id, result: Ok(result) },
                // `"result": null` deserialises to None: a null result is still a success.
                (None, None) => Frame::Response { id, result: Ok(null_raw()) },
            },
            (None, None) => Frame::Malformed("neither a method nor an id".into()),
        }
    }
}

/// A request's or notification's params as a value; absent or unreadable params are `null` (each
/// method then refuses what it misses, in its own words).
pub fn params_value(params: Option<Box<RawValue>>) -> Value {
    params.and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or(Value::Null)
}

fn null_raw() -> Box<RawValue> {
    RawValue::from_string("null".to_owned()).expect("`null` is valid JSON")
}

/// Serialises a daemon → agent request line (newline included).
pub fn request_line(id: i64, method: &str, params: &Value) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

/// Serialises a daemon → agent notification line (newline included).
pub fn notification_line(method: &str, params: &Value) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
}

/// Serialises the daemon's answer to an agent request (newline included).
pub fn response_line(id: &RequestId, result: Result<Value, RpcError>) -> Vec<u8> {
    match result {
        Ok(result) => line(&json!({"jsonrpc": "2.0", "id": id, "result": result})),
        Err(error) => line(&json!({"jsonrpc": "2.0", "id": id, "error": error})),
    }
}

fn line(value: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(value).expect("a serde_json::Value always serialises");
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast path and the generic one agree on every `session/update` spelling, and the fast
    /// path never takes a line the generic one would read differently.
    #[test]
    fn session_updates_read_the_same_on_both_paths() {
        let cases: [(&[u8], bool); 9] = [
            (br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"a":[1,"}"]}}}"#, true),
            (br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s"} }"#, false),
            (br#"{"method":"session/update","jsonrpc":"2.0","params":{"sessionId":"s"}}"#, false),
            (br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s"},"id":7}"#, false),
            (br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s"}},"x":1}"#, false),
            (br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s"}"#, false),
            (br#"{"jsonrpc":"2.0","method":"session/update","params":null}"#, false),
            (br#"{"jsonrpc":"2.0","method":"session/update","params":{"a":"\u00e9\n"}}"#, true),
            (b"{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"a\":\"\xff\"}}", false),
        ];
        for (line, fast) in cases {
            let text = String::from_utf8_lossy(line);
            let generic = match serde_json::from_slice::<RawFrame>(line) {
                Ok(raw) => format!("{:?}", (raw.id, raw.method, raw.params.map(|p| p.get().to_owned()))),
                Err(_) => "malformed".to_owned(),
            };
            let parsed = match Update::parse(Bytes::copy_from_slice(line)) {
                Ok(update) => {
                    let params = String::from_utf8(update.as_bytes().to_vec()).expect("an update is UTF-8");
                    format!("{:?}", (None::<RequestId>, Some("session/update"), Some(params)))
                }
                Err(back) => {
                    assert_eq!(&back[..], line, "a line the fast path refuses comes back whole");
                    assert!(!fast, "the fast path refused {text}");
                    continue;
                }
            };
            assert!(fast, "the fast path took {text}");
            assert_eq!(parsed, generic, "{text}");
        }
    }

    /// An update read by the generic parser is kept only when its params are an object; a copy
    /// detached from the reader's buffer holds the same bytes.
    #[test]
    fn updates_from_the_generic_parser_and_detached_copies() {
        let raw = |s: &str| RawValue::from_string(s.to_owned()).expect("json");
        let update = Update::from_raw(raw(r#"{"sessionId":"s"}"#)).expect("an object");
        assert_eq!(update.as_bytes(), br#"{"sessionId":"s"}"#);
        assert_eq!(update.detached(), update);
        assert_eq!(Update::from_raw(raw("[1]")), None);
        assert_eq!(Update::from_raw(raw("null")), None);
    }

    #[test]
    fn classifies_each_kind_of_line() {
        assert!(matches!(
            Frame::parse(br#"{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file","params":{}}"#),
            Frame::Request { id: RequestId::Number(1), .. }
        ));
        assert!(matches!(
            Frame::parse(br#"{"jsonrpc":"2.0","method":"session/update","params":{"a":1}}"#),
            Frame::Notification { .. }
        ));
        match Frame::parse(br#"{"jsonrpc":"2.0","id":"x","result":null}"#) {
            Frame::Response { id: RequestId::Text(id), result: Ok(raw) } => {
                assert_eq!(id, "x");
                assert_eq!(raw.get(), "null");
            }
            other => panic!("unexpected {other:?}"),
        }
        match Frame::parse(br#"{"id":2,"error":{"code":-1,"message":"no"}}"#) {
            Frame::Response { result: Err(e), .. } => assert_eq!(e.message, "no"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(Frame::parse(b"not json"), Frame::Malformed(_)));
        assert!(matches!(Frame::parse(b"[1,2]"), Frame::Malformed(_)));
        assert!(matches!(Frame::parse(b"{}"), Frame::Malformed(_)));
    }

    #[test]
    fn params_keep_unknown_fields_byte_for_byte() {
        let line = br#"{"method":"session/update","params":{"_meta":{"x":[1, 2]},"zz":true}}"#;
        match Frame::parse(line) {
            Frame::Notification { params: Some(p), .. } => {
                assert_eq!(p.get(), r#"{"_meta":{"x":[1, 2]},"zz":true}"#)
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

//! JSON-RPC text as the ACP door writes it: responses, errors, notifications, and the events of a
//! session re-framed from the bus's bytes without re-serialising their data.
//!
//! Every message is one line of JSON (no raw newline: the data the bus holds has none), so the
//! same bytes are one WebSocket text frame or one SSE `data:` line.

use bytes::{Bytes, BytesMut};
use serde_json::{Value, json};

use crate::acp::{RequestId, RpcError};

/// JSON-RPC "parse error": the message is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "invalid request": JSON, but not a JSON-RPC message (or a batch, which ACP does not use).
pub const INVALID_REQUEST: i64 = -32600;

/// `{"jsonrpc":"2.0","id":…,"result":…}`.
pub fn response(id: &RequestId, result: &Value) -> Bytes {
    bytes(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// `{"jsonrpc":"2.0","id":…,"error":…}`; `id` is `null` when the message it answers had none.
pub fn error(id: Option<&RequestId>, error: &RpcError) -> Bytes {
    bytes(&json!({"jsonrpc": "2.0", "id": id, "error": error}))
}

/// `{"jsonrpc":"2.0","method":…,"params":…}`.
pub fn notification(method: &str, params: &Value) -> Bytes {
    bytes(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
}

/// `{"jsonrpc":"2.0","id":…,"method":…,"params":…}`: a request the daemon sends the client.
pub fn request(id: &str, method: &str, params: &Value) -> Bytes {
    bytes(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

fn bytes(v: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

const UPDATE_HEAD: &[u8] = br#"{"jsonrpc":"2.0","method":"session/update","params":"#;
const NOTIFY_HEAD: &[u8] = br#"{"jsonrpc":"2.0","method":"_qwen/notify","params":{"kind":""#;
const ENVELOPE_HEAD: &[u8] = br#"{"jsonrpc":"2.0","method":"_mediatord/event","params":{"sessionId":"#;

/// A `session/update` notification whose params are an agent's update as the bus holds it (no
/// parse).
pub fn session_update(data: &[u8]) -> Bytes {
    let parts = session_update_parts(data);
    let mut out = BytesMut::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        out.extend_from_slice(part);
    }
    out.freeze()
}

/// [`session_update`] in its three pieces, for a transport that writes them where they go (the
/// hot path: the update is not copied into a message of its own first).
pub fn session_update_parts(data: &[u8]) -> [&[u8]; 3] {
    [UPDATE_HEAD, data, b"}"]
}

/// `_qwen/notify {kind, data, eventId?, promptId?, originatorClientId?}`: one of the daemon's own
/// events (everything but `session_update`), in the shape `@qwen-code/sdk` reads on `acp-ws`.
/// `prompt_id` and `originator` are JSON strings, quotes included, as the bus wrote them.
pub fn daemon_event(
    kind: &str,
    data: &[u8],
    event_id: Option<u64>,
    prompt_id: Option<&[u8]>,
    originator: Option<&[u8]>,
) -> Bytes {
    let mut out = BytesMut::with_capacity(NOTIFY_HEAD.len() + kind.len() + data.len() + 160);
    out.extend_from_slice(NOTIFY_HEAD);
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(br#"","data":"#);
    out.extend_from_slice(data);
    if let Some(id) = event_id {
        out.extend_from_slice(br#","eventId":"#);
        out.extend_from_slice(id.to_string().as_bytes());
    }
    if let Some(p) = prompt_id {
        out.extend_from_slice(br#","promptId":"#);
        out.extend_from_slice(p);
    }
    if let Some(o) = originator {
        out.extend_from_slice(br#","originatorClientId":"#);
        out.extend_from_slice(o);
    }
    out.extend_from_slice(b"}}");
    out.freeze()
}

/// `_mediatord/event {sessionId, eventId, promptId?, message}`: `message` (one of the above) with
/// the session and the id of the event it came from (and the prompt it belongs to), for a client
/// that resumes by cursor (`mediatord connect`). `prompt_id` is a JSON string, quotes included.
pub fn envelope(session_id: &str, event_id: u64, prompt_id: Option<&[u8]>, message: &[u8]) -> Bytes {
    let session = serde_json::to_string(session_id).unwrap_or_default();
    let mut out = BytesMut::with_capacity(ENVELOPE_HEAD.len() + session.len() + message.len() + 96);
    out.extend_from_slice(ENVELOPE_HEAD);
    out.extend_from_slice(session.as_bytes());
    out.extend_from_slice(br#","eventId":"#);
    out.extend_from_slice(event_id.to_string().as_bytes());
    if let Some(p) = prompt_id {
        out.extend_from_slice(br#","promptId":"#);
        out.extend_from_slice(p);
    }
    out.extend_from_slice(br#","message":"#);
    out.extend_from_slice(message);
    out.extend_from_slice(b"}}");
    out.freeze()
}

/// Why an inbound message is no message, as the error to answer it with (`id: null`).
pub fn refusal(text: &[u8]) -> RpcError {
    let first = text.iter().copied().find(|b| !b.is_ascii_whitespace());
    if first == Some(b'[') && serde_json::from_slice::<&serde_json::value::RawValue>(text).is_ok() {
        return RpcError::with_kind(
            INVALID_REQUEST,
            "batch_unsupported",
            "JSON-RPC batches are not part of ACP",
        );
    }
    match serde_json::from_slice::<&serde_json::value::RawValue>(text) {
        Ok(_) => RpcError::with_kind(
            INVALID_REQUEST,
            "invalid_request",
            "not a JSON-RPC request, notification or response",
        ),
        Err(_) => RpcError::with_kind(PARSE_ERROR, "parse_error", "the message is not JSON"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(b: &Bytes) -> Value {
        serde_json::from_slice(b).expect("valid JSON")
    }

    #[test]
    fn events_are_valid_json_rpc_with_their_data_unchanged() {
        let data =
            br#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","_meta":{"x":[1, 2]}}}"#;
        let update = session_update(data);
        assert!(update.ends_with(br#"{"x":[1, 2]}}}}"#), "data byte for byte");
        assert_eq!(session_update_parts(data).concat(), update.to_vec(), "the pieces make the message");
        assert_eq!(parse(&update)["params"]["update"]["_meta"]["x"], json!([1, 2]));
        let n = daemon_event(
            "turn_complete",
            br#"{"stopReason":"end_turn"}"#,
            Some(9),
            Some(&b"\"p\""[..]),
            Some(&b"\"c\""[..]),
        );
        assert_eq!(
            parse(&n),
            json!({"jsonrpc": "2.0", "method": "_qwen/notify", "params": {
                "kind": "turn_complete", "data": {"stopReason": "end_turn"}, "eventId": 9, "promptId": "p",
                "originatorClientId": "c"}})
        );
        let bare = daemon_event("replay_complete", b"{}", None, None, None);
        assert_eq!(parse(&bare)["params"], json!({"kind": "replay_complete", "data": {}}));
        let wrapped = parse(&envelope("s\"1", 4, Some(&b"\"p\""[..]), &update));
        assert_eq!(wrapped["params"]["message"], parse(&update));
        assert_eq!(
            (wrapped["params"]["sessionId"].clone(), wrapped["params"]["eventId"].clone()),
            (json!("s\"1"), json!(4))
        );
        assert_eq!(wrapped["params"]["promptId"], "p");
        assert!(parse(&envelope("s", 5, None, b"{}"))["params"].get("promptId").is_none());
    }

    #[test]
    fn requests_and_notifications_are_json_rpc() {
        let params = json!({"requestId": "c-1"});
        assert_eq!(
            parse(&notification("$/cancel_request", &params)),
            json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "c-1"}})
        );
        assert_eq!(
            parse(&request("perm-1", "session/request_permission", &params)),
            json!({"jsonrpc": "2.0", "id": "perm-1", "method": "session/request_permission", "params": {"requestId": "c-1"}})
        );
    }

    #[test]
    fn refusals_say_what_was_wrong() {
        assert_eq!(refusal(b"{nope").code, PARSE_ERROR);
        assert_eq!(refusal(b"").code, PARSE_ERROR);
        assert_eq!(refusal(b" [1,2]").code, INVALID_REQUEST);
        assert_eq!(refusal(b" [1,2]").data, Some(json!({"errorKind": "batch_unsupported"})));
        assert_eq!(refusal(b"{}").code, INVALID_REQUEST);
        assert_eq!(refusal(b"{}").data, Some(json!({"errorKind": "invalid_request"})));
        assert_eq!(refusal(b"[nope").code, PARSE_ERROR, "a bracket alone makes no batch");
        assert_eq!(refusal(b"42").code, INVALID_REQUEST);
        // JSON-RPC's own codes (its section 5.1).
        assert_eq!((PARSE_ERROR, INVALID_REQUEST), (-32700, -32600));
        let e = error(None, &refusal(b"x"));
        assert_eq!(parse(&e)["id"], Value::Null);
        assert_eq!(parse(&response(&RequestId::Text("a".into()), &json!({})))["id"], "a");
    }
}

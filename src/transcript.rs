//! A recorded session as a person reads it (Markdown) or a program does (JSON), for `mediatord
//! transcript`: the events read back from their SSE frames, then who asked what, what the agent
//! answered and did, and what was decided. The web app's twin is `transcriptMarkdown` in
//! `web/history.js`.
//!
//! A leaf: it reads events as JSON values and imports only other leaves.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::audit::identity;

/// An SSE frame's event (`{id, v, type, data, …}`, `docs/protocol.md#5-event-stream`): its `data`
/// lines joined and parsed. `None` for a frame without data or whose data is not JSON.
pub fn envelope(frame: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(frame).ok()?;
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    if data.is_empty() {
        return None;
    }
    serde_json::from_str(&data.join("\n")).ok()
}

/// What the transcript's head says of the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub session_id: String,
    pub workspace: String,
    pub agent: String,
    /// ISO-8601.
    pub created_at: String,
    pub ended_at: Option<String>,
    /// `live`, `dormant` or `closed`, and why it ended.
    pub state: String,
    pub end_reason: Option<String>,
}

/// The JSON export: `{session, events}`, the events in id order (a gap as
/// `{type: "history_gap", fromId, toId}`).
pub fn json(head: &Head, events: Vec<Value>) -> Value {
    json!({
        "session": {
            "sessionId": head.session_id, "workspaceCwd": head.workspace, "agent": head.agent,
            "createdAt": head.created_at, "endedAt": head.ended_at, "state": head.state,
            "endReason": head.end_reason,
        },
        "events": events,
    })
}

/// A field others chose (a title, a kind, a name, an id) on one line of the transcript: a line
/// break in it is written `\n`, as every other character a reader cannot see (`text::escape`).
fn safe(text: &str) -> String {
    crate::text::escape(text).into_owned()
}

/// What a prompt's or an answer's lines are written after: an indented block, which Markdown shows
/// as it is. The transcript's own lines (headings, tool calls, permissions, decisions) start at
/// the margin, so nothing a prompt or an agent wrote can pass for one, nor render as a heading,
/// a link or an image.
const PROSE_INDENT: &str = "    ";

/// The Markdown export. `names`: device ids → names (a device votes and prompts as its id). Every
/// text others chose is escaped (`text::escape`, `text::indented`): none starts a line of its own.
pub fn markdown(head: &Head, events: &[Value], names: &HashMap<String, String>) -> String {
    let mut out = vec![
        format!("# Session {}", safe(&head.session_id)),
        String::new(),
        format!("- Workspace: {}", safe(&head.workspace)),
        format!("- Agent: {}", safe(&head.agent)),
        format!("- Started: {}", head.created_at),
    ];
    if let Some(ended) = &head.ended_at {
        out.push(format!("- Ended: {ended} ({})", safe(head.end_reason.as_deref().unwrap_or(&head.state))));
    }
    let who = |id: &str| safe(&identity(names.get(id).map(String::as_str), id, true));
    let mut block: Option<String> = None;
    let mut text = String::new();
    let flush = |out: &mut Vec<String>, text: &mut String| {
        if !text.is_empty() {
            out.push(String::new());
            out.push(crate::text::indented(text.trim_end(), PROSE_INDENT));
            text.clear();
        }
    };
    for env in events {
        let data = &env["data"];
        match env["type"].as_str().unwrap_or("") {
            "session_update" => {
                let update = &data["update"];
                let piece = update["content"]["text"].as_str().unwrap_or("");
                let (kind, heading) = match update["sessionUpdate"].as_str().unwrap_or("") {
                    "user_message_chunk" => {
                        let from = env["originatorClientId"].as_str().map(|id| format!(" from {}", who(id)));
                        (
                            format!("user {}", env["promptId"]),
                            format!("## Prompt{}", from.unwrap_or_default()),
                        )
                    }
                    "agent_message_chunk" => ("agent".to_owned(), "### Agent".to_owned()),
                    "tool_call" => {
                        flush(&mut out, &mut text);
                        block = None;
                        let title = update["title"].as_str().or(update["toolCallId"].as_str()).unwrap_or("");
                        let kind = update["kind"].as_str().unwrap_or("other");
                        out.push(String::new());
                        out.push(format!("- Tool call: {} ({})", safe(title), safe(kind)));
                        continue;
                    }
                    _ => continue,
                };
                if block.as_deref() != Some(&kind) {
                    flush(&mut out, &mut text);
                    out.push(String::new());
                    out.push(heading);
                    block = Some(kind);
                }
                text.push_str(piece);
            }
            kind => {
                let line = match kind {
                    "permission_request" => {
                        let title =
                            data["toolCall"]["title"].as_str().or(data["requestId"].as_str()).unwrap_or("");
                        Some(format!("> Permission asked: {}", safe(title)))
                    }
                    "permission_resolved" => {
                        let chose = match data["outcome"]["outcome"].as_str() {
                            Some("selected") => data["outcome"]["optionId"].as_str().unwrap_or("").to_owned(),
                            _ => "cancelled".to_owned(),
                        };
                        let by = match data["resolvedBy"].as_str().unwrap_or("") {
                            "vote" => who(data["voterClientId"].as_str().unwrap_or("")),
                            "rule" => format!("rule {}", data["ruleId"].as_str().unwrap_or("")),
                            other => other.to_owned(),
                        };
                        Some(format!("> Decision: {}, by {by}", safe(&chose)))
                    }
                    "history_gap" => Some(format!(
                        "_Events {} to {} were not recorded._",
                        data["fromId"].as_u64().unwrap_or(0),
                        data["toId"].as_u64().unwrap_or(0)
                    )),
                    "session_closed" => Some("_The session was closed._".to_owned()),
                    "session_died" => Some("_The agent exited: the session ended._".to_owned()),
                    "turn_complete" | "turn_error" => None,
                    _ => continue,
                };
                flush(&mut out, &mut text);
                block = None;
                if let Some(line) = line {
                    out.push(String::new());
                    out.push(line);
                }
            }
        }
    }
    flush(&mut out, &mut text);
    let mut md = out.join("\n");
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::{Value, json};

    use super::*;

    fn head() -> Head {
        Head {
            session_id: "s1".into(),
            workspace: "/ws".into(),
            agent: "demo".into(),
            created_at: "2026-11-22T20:39:19.849Z".into(),
            ended_at: Some("2026-11-22T21:00:00.000Z".into()),
            state: "dormant".into(),
            end_reason: Some("daemon_shutdown".into()),
        }
    }

    fn update(kind: &str, text: &str, prompt: &str, from: &str) -> Value {
        json!({"type": "session_update", "promptId": prompt, "originatorClientId": from,
               "data": {"update": {"sessionUpdate": kind, "content": {"type": "text", "text": text}}}})
    }

    #[test]
    fn a_frame_reads_back_as_its_event() {
        let frame =
            b"id: 7\nevent: turn_complete\ndata: {\"id\":7,\"type\":\"turn_complete\",\"data\":{}}\n\n";
        assert_eq!(envelope(frame), Some(json!({"id": 7, "type": "turn_complete", "data": {}})));
        assert_eq!(envelope(b"id: 7\nevent: x\ndata:{\"a\":1}\n\n"), Some(json!({"a": 1})));
        assert_eq!(envelope(b": heartbeat\n\n"), None);
        assert_eq!(envelope(b"data: not json\n\n"), None);
        assert_eq!(envelope(&[0xff, 0xfe]), None);
    }

    #[test]
    fn markdown_reads_prompts_answers_tools_and_decisions_with_names() {
        let events = vec![
            update("user_message_chunk", "write a.txt hi", "p1", "dev-1"),
            update("agent_message_chunk", "I will ", "p1", "dev-1"),
            update("agent_message_chunk", "write it.", "p1", "dev-1"),
            json!({"type": "session_update", "data": {"update": {"sessionUpdate": "tool_call", "title": "Write a.txt", "kind": "edit"}}}),
            json!({"type": "permission_request", "data": {"requestId": "r1", "toolCall": {"title": "Write a.txt"}}}),
            json!({"type": "permission_resolved", "data": {"requestId": "r1", "resolvedBy": "vote", "voterClientId": "dev-1",
                   "outcome": {"outcome": "selected", "optionId": "allow_once"}}}),
            json!({"type": "permission_resolved", "data": {"resolvedBy": "rule", "ruleId": "rule-2", "outcome": {"outcome": "selected", "optionId": "reject_once"}}}),
            json!({"type": "permission_resolved", "data": {"resolvedBy": "timeout", "outcome": {"outcome": "cancelled"}}}),
            json!({"type": "turn_complete", "data": {}}),
            update("agent_message_chunk", "bell \u{7} here", "p2", "alice"),
            json!({"type": "history_gap", "data": {"fromId": 9, "toId": 12}}),
            json!({"type": "session_died", "data": {}}),
            json!({"type": "something_new", "data": {}}),
        ];
        let names = HashMap::from([("dev-1".to_owned(), "my phone".to_owned())]);
        let md = markdown(&head(), &events, &names);
        assert_eq!(
            md,
            "# Session s1\n\n- Workspace: /ws\n- Agent: demo\n- Started: 2026-11-22T20:39:19.849Z\n\
             - Ended: 2026-11-22T21:00:00.000Z (daemon_shutdown)\n\n## Prompt from my phone (dev-1)\n\n\
             \x20   write a.txt hi\n\n### Agent\n\n    I will write it.\n\n- Tool call: Write a.txt (edit)\n\n\
             > Permission asked: Write a.txt\n\n> Decision: allow_once, by my phone (dev-1)\n\n\
             > Decision: reject_once, by rule rule-2\n\n> Decision: cancelled, by timeout\n\n### Agent\n\n\
             \x20   bell \\u{7} here\n\n_Events 9 to 12 were not recorded._\n\n_The agent exited: the session ended._\n"
        );
    }

    #[test]
    fn two_prompts_are_two_headings_and_a_live_session_has_no_end() {
        let mut live = head();
        live.ended_at = None;
        let events = vec![
            update("user_message_chunk", "one", "p1", "alice"),
            json!({"type": "turn_complete", "data": {}}),
            update("user_message_chunk", "two", "p2", "alice"),
        ];
        let md = markdown(&live, &events, &HashMap::new());
        assert!(!md.contains("Ended"), "{md}");
        assert_eq!(md.matches("## Prompt from alice\n").count(), 2, "{md}");
        assert!(md.ends_with("    two\n"), "{md}");
    }

    /// Issue 41, finding 8: a newline in a title others chose forged lines of the transcript (a
    /// heading, a "Permission asked"); an escape sequence wrote the clipboard when the file was
    /// `cat`; a bidi override reversed a name. Every field is one escaped line, and prose keeps its
    /// lines only after the transcript's indent.
    #[test]
    fn nothing_an_agent_or_a_client_chose_starts_a_line_of_the_transcript() {
        let evil = "Write a.txt\n# Permission asked: rm -rf ~\n> Decision: allow_once, by alice\u{1b}]52;c;cHduZWQ=\u{7}\u{202e}txt.exe";
        let events = vec![
            update("user_message_chunk", evil, "p1", evil),
            update("agent_message_chunk", evil, "p1", "alice"),
            json!({"type": "session_update", "data": {"update": {"sessionUpdate": "tool_call", "title": evil, "kind": evil}}}),
            json!({"type": "permission_request", "data": {"requestId": "r1", "toolCall": {"title": evil}}}),
            json!({"type": "permission_resolved", "data": {"requestId": "r1", "resolvedBy": "vote", "voterClientId": evil,
                   "outcome": {"outcome": "selected", "optionId": evil}}}),
        ];
        let mut evil_head = head();
        evil_head.agent = evil.into();
        evil_head.end_reason = Some(evil.into());
        let md = markdown(&evil_head, &events, &HashMap::from([(evil.to_owned(), evil.to_owned())]));
        for c in ['\u{1b}', '\u{7}', '\u{202e}', '\r'] {
            assert!(!md.contains(c), "U+{:04X} raw in:\n{md}", c as u32);
        }
        for line in md.lines() {
            assert!(
                !line.starts_with("# Permission") && !line.starts_with("> Decision: allow_once, by alice"),
                "forged: {line:?}\n{md}"
            );
        }
        assert_eq!(md.lines().filter(|l| l.starts_with("> Permission asked")).count(), 1, "{md}");
        assert_eq!(md.lines().filter(|l| l.starts_with("> Decision")).count(), 1, "{md}");
        assert!(md.contains("- Tool call: Write a.txt\\n# Permission asked: rm -rf ~\\n> Decision"), "{md}");
        assert!(md.contains("\n    # Permission asked: rm -rf ~\n"), "the agent's own lines, indented: {md}");
    }

    #[test]
    fn the_json_export_holds_the_session_and_its_events() {
        let doc = json(&head(), vec![json!({"id": 1})]);
        assert_eq!(doc["session"]["sessionId"], "s1");
        assert_eq!(doc["session"]["endReason"], "daemon_shutdown");
        assert_eq!(doc["events"], json!([{"id": 1}]));
    }
}

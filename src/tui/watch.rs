//! The two commands for scripts: `mediatord watch SESSION [--json]` prints a session's events as
//! lines (replayed from the start, then live, across dropped connections, until the session ends),
//! and `mediatord approve SESSION [REQUEST] --option KIND|ID` answers a pending request (the
//! oldest when none is named). Every line is escaped: a script's terminal or log is as safe as the
//! client's screen.

use std::io::Write;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::connect::{Incoming, Login, STREAM_QUEUE, expect_ok, follow, identify, session_path};
use crate::client::api::{Frame, segment};
use crate::text::{escape, escape_json};

/// Characters of an event's text in a `watch` line; the rest is counted (`--json` prints all).
const LINE_TEXT: usize = 400;

/// One event as a line: `<id> <type> <what it says>`.
pub(crate) fn line(frame: &Frame) -> String {
    let envelope: Value = serde_json::from_str(&frame.data).unwrap_or(Value::Null);
    let data = &envelope["data"];
    let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let what = match frame.event.as_str() {
        "session_update" => {
            let u = &data["update"];
            let kind = s(&u["sessionUpdate"]);
            match kind.as_str() {
                "user_message_chunk" => {
                    format!("{kind} {}: {}", s(&envelope["originatorClientId"]), s(&u["content"]["text"]))
                }
                "agent_message_chunk" | "agent_thought_chunk" => {
                    format!("{kind} {}", s(&u["content"]["text"]))
                }
                "tool_call" | "tool_call_update" => {
                    let mut parts = vec![kind.clone(), s(&u["toolCallId"])];
                    parts.extend(
                        ["kind", "status", "title"].iter().map(|k| s(&u[*k])).filter(|p| !p.is_empty()),
                    );
                    parts.join(" ")
                }
                "plan" => format!("{kind} {} entries", u["entries"].as_array().map_or(0, Vec::len)),
                "current_mode_update" => format!("{kind} {}", s(&u["currentModeId"])),
                _ => format!("{kind} {u}"),
            }
        }
        "permission_request" => {
            let options: Vec<String> =
                data["options"].as_array().into_iter().flatten().map(|o| s(&o["optionId"])).collect();
            format!(
                "{} {}: {} [{}]",
                s(&data["requestId"]),
                s(&data["toolCall"]["kind"]),
                s(&data["toolCall"]["title"]),
                options.join(", ")
            )
        }
        "permission_resolved" => {
            let outcome = data["outcome"]["optionId"].as_str().unwrap_or("cancelled");
            let by = match (s(&data["resolvedBy"]).as_str(), data["voterClientId"].as_str()) {
                ("vote", Some(v)) => format!("vote by {v}"),
                (by, _) => by.to_owned(),
            };
            format!("{} {outcome} ({by})", s(&data["requestId"]))
        }
        "turn_complete" => format!("{} {}", s(&data["promptId"]), s(&data["stopReason"])),
        "turn_error" => format!("{} {}: {}", s(&data["promptId"]), s(&data["code"]), s(&data["message"])),
        _ => data.to_string(),
    };
    let (shown, rest) = match what.char_indices().nth(LINE_TEXT) {
        Some((at, _)) => (&what[..at], what[at..].chars().count()),
        None => (what.as_str(), 0),
    };
    let id = frame.id.map_or_else(|| "-".to_owned(), |id| id.to_string());
    let more = if rest > 0 { format!(" …(+{rest} characters)") } else { String::new() };
    format!("{id} {} {}{more}", escape(&frame.event), escape(shown))
}

/// `mediatord watch`: 0 when the session ended (or is history), 1 when the daemon refused.
pub async fn watch(conn: Login, session_id: String, json_lines: bool) -> Result<(), String> {
    let target = conn.target()?;
    identify(&conn, &target).await?;
    let (tx, mut rx) = mpsc::channel(STREAM_QUEUE);
    let follower = tokio::spawn(follow(target, session_id, 0, tx));
    let mut out = std::io::stdout().lock();
    let mut result = Ok(());
    while let Some(incoming) = rx.recv().await {
        let written = match incoming {
            Incoming::Frame(frame) => {
                if json_lines {
                    // The envelope as the daemon sent it, its hidden characters as \uXXXX.
                    writeln!(out, "{}", escape_json(&frame.data))
                } else {
                    writeln!(out, "{}", line(&frame))
                }
            }
            Incoming::Dropped(why) => {
                let _ = writeln!(std::io::stderr(), "mediatord watch: reconnecting: {}", escape(&why));
                Ok(())
            }
            Incoming::Opened => Ok(()),
            Incoming::Finished(why) => {
                if let Some(why) = why {
                    result = Err(why);
                }
                break;
            }
        };
        // A closed stdout (`| head`) ends the watch.
        if written.and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    follower.abort();
    result
}

/// `mediatord approve`: votes `option` (an option id, or a kind: `allow_once`, `allow_always`,
/// `reject_once`, `reject_always`) on `request` or the oldest pending request; what was decided.
pub async fn approve(
    conn: Login,
    session_id: String,
    request: Option<String>,
    option: String,
    answers: Vec<(String, String)>,
) -> Result<String, String> {
    let target = conn.target()?;
    let (identity, _) = identify(&conn, &target).await?;
    if !identity.may_write {
        return Err(format!("{}: an observer may not vote", identity.shown));
    }
    let pending = expect_ok(&target, "GET", &session_path(&session_id, "/permissions"), &[], None).await?;
    let list = pending["pending"].as_array().cloned().unwrap_or_default();
    let chosen = match &request {
        Some(id) => list.iter().find(|r| r["requestId"].as_str() == Some(id.as_str())),
        None => list.first(),
    };
    let Some(chosen) = chosen else {
        return Err(match request {
            Some(id) => format!("no pending request {id} in session {session_id}"),
            None => format!("no request is pending in session {session_id}"),
        });
    };
    let request_id = chosen["requestId"].as_str().unwrap_or("").to_owned();
    let options = chosen["options"].as_array().cloned().unwrap_or_default();
    let picked = options
        .iter()
        .find(|o| o["optionId"].as_str() == Some(option.as_str()))
        .or_else(|| options.iter().find(|o| o["kind"].as_str() == Some(option.as_str())));
    let Some(picked) = picked else {
        let offered: Vec<String> = options
            .iter()
            .map(|o| {
                format!("{} ({})", o["optionId"].as_str().unwrap_or("?"), o["kind"].as_str().unwrap_or("?"))
            })
            .collect();
        return Err(escape(&format!(
            "request {request_id} offers no option {option}: {}",
            offered.join(", ")
        ))
        .into_owned());
    };
    let option_id = picked["optionId"].as_str().unwrap_or("").to_owned();
    // A vote counts only from a client registered on the session (protocol 2.7).
    expect_ok(&target, "POST", &session_path(&session_id, "/heartbeat"), &[], None).await?;
    let mut body = json!({"outcome": {"outcome": "selected", "optionId": option_id}});
    if !answers.is_empty() {
        if chosen.get("question").is_none() {
            return Err(format!("request {request_id} asks no question: --answer has nothing to answer"));
        }
        body["answers"] = answers_body(&answers);
    }
    let route = session_path(&session_id, &format!("/permission/{}", segment(&request_id)));
    expect_ok(&target, "POST", &route, &[], Some(&body)).await?;
    let answered = match answers.len() {
        0 => String::new(),
        n => format!(", {n} answer{}", if n == 1 { "" } else { "s" }),
    };
    Ok(format!(
        "{} on {}: {} (request {request_id}{answered})",
        escape(&option_id),
        escape(chosen["toolCall"]["kind"].as_str().unwrap_or("a tool call")),
        escape(chosen["toolCall"]["title"].as_str().unwrap_or("")),
    ))
}

/// `--answer KEY=VALUE`s as a vote's `answers`: one key given once is its text, given again a
/// list of its texts (several choices), in the order given. The daemon converts and checks them.
fn answers_body(answers: &[(String, String)]) -> Value {
    let mut out = serde_json::Map::new();
    for (key, value) in answers {
        match out.get_mut(key) {
            None => {
                out.insert(key.clone(), json!(value));
            }
            Some(Value::Array(list)) => list.push(json!(value)),
            Some(first) => *first = json!([first.take(), value]),
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(id: Option<u64>, event: &str, data: Value) -> Frame {
        Frame { id, event: event.into(), data: data.to_string() }
    }

    #[test]
    fn answers_given_again_with_a_key_are_its_choices() {
        let given = |pairs: &[(&str, &str)]| {
            answers_body(&pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<Vec<_>>())
        };
        assert_eq!(given(&[("name", "api"), ("replicas", "3")]), json!({"name": "api", "replicas": "3"}));
        assert_eq!(
            given(&[("1", "serde"), ("0", "jiff"), ("1", "tz"), ("1", "x=y")]),
            json!({"0": "jiff", "1": ["serde", "tz", "x=y"]})
        );
        assert_eq!(given(&[]), json!({}));
    }

    #[test]
    fn each_event_is_one_escaped_line() {
        let hostile = "\u{1b}]0;x\u{7}a\nb\u{202e}";
        let cases = [
            (
                frame(
                    Some(1),
                    "session_update",
                    json!({"originatorClientId": "alice", "data": {"update": {"sessionUpdate": "user_message_chunk", "content": {"text": hostile}}}}),
                ),
                "1 session_update user_message_chunk alice: \\u{1b}]0;x\\u{7}a\\nb\\u{202e}",
            ),
            (
                frame(
                    Some(2),
                    "permission_request",
                    json!({"data": {"requestId": "r", "toolCall": {"kind": "edit", "title": "Write a"}, "options": [{"optionId": "allow_once"}, {"optionId": "reject_once"}]}}),
                ),
                "2 permission_request r edit: Write a [allow_once, reject_once]",
            ),
            (
                frame(
                    Some(3),
                    "permission_resolved",
                    json!({"data": {"requestId": "r", "outcome": {"outcome": "selected", "optionId": "allow_once"}, "resolvedBy": "vote", "voterClientId": "tui:me"}}),
                ),
                "3 permission_resolved r allow_once (vote by tui:me)",
            ),
            (
                frame(
                    Some(4),
                    "session_update",
                    json!({"data": {"update": {"sessionUpdate": "tool_call", "toolCallId": "t", "kind": "edit", "status": "pending", "title": "Write"}}}),
                ),
                "4 session_update tool_call t edit pending Write",
            ),
            (
                frame(None, "replay_complete", json!({"data": {"replayedCount": 2}})),
                "- replay_complete {\"replayedCount\":2}",
            ),
        ];
        for (f, want) in cases {
            assert_eq!(line(&f), want);
        }
        let long = frame(
            Some(9),
            "session_update",
            json!({"data": {"update": {"sessionUpdate": "agent_message_chunk", "content": {"text": "x".repeat(1000)}}}}),
        );
        assert!(
            line(&long)
                .ends_with(&format!(" …(+{} characters)", 1000 + "agent_message_chunk ".len() - LINE_TEXT)),
            "{}",
            line(&long)
        );
    }
}

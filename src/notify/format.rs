//! What a target receives: mediatord's JSON document, or an ntfy publish body
//! (`docs/notifications.md#what-a-target-receives`). Pure functions of the event and the links
//! minted for it, tested as such.

use serde_json::{Value, json};

use crate::clock::iso8601;
use crate::config::{NotifyFormat, TargetUrl};
use crate::event::EventKind;

/// ntfy shows at most three action buttons.
const NTFY_MAX_ACTIONS: usize = 3;
/// The longest summary line: a notification is read on a lock screen.
const MAX_SUMMARY_CHARS: usize = 300;
/// Paths named in a summary at most.
const MAX_SUMMARY_PATHS: usize = 3;
/// The option kinds ntfy's buttons prefer, in order, when the agent offers more than three.
const NTFY_PREFERRED_KINDS: [&str; 3] = ["allow_once", "allow_always", "reject_once"];

/// One option of a permission request, with its action link.
#[derive(Debug, Clone)]
pub(super) struct Action {
    pub(super) option_id: String,
    pub(super) name: String,
    pub(super) kind: String,
    /// `None` when no token could be minted (the OS gave no randomness).
    pub(super) url: Option<String>,
}

/// One delivery's facts.
#[derive(Debug)]
pub(super) struct Notice<'a> {
    pub(super) kind: EventKind,
    pub(super) session_id: &'a str,
    pub(super) workspace: &'a str,
    /// The event's data as published on the session's stream.
    pub(super) data: &'a Value,
    pub(super) delivery_id: &'a str,
    pub(super) sent_at: u64,
    /// 0 for the first notification of a request, then 1, 2… for reminders.
    pub(super) reminder: u32,
    pub(super) actions: &'a [Action],
    /// The target's `clientId`: who its links vote as.
    pub(super) client_id: Option<&'a str>,
}

/// One line saying what the agent wants: `edit: Write notes.txt — notes.txt`, `execute: Run — git push`.
pub(super) fn summary(tool_call: &Value) -> String {
    let kind = tool_call.get("kind").and_then(Value::as_str).unwrap_or("other");
    let title = tool_call.get("title").and_then(Value::as_str).unwrap_or("a tool call");
    let paths: Vec<&str> = tool_call
        .get("locations")
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(|l| l.get("path").and_then(Value::as_str)).collect())
        .unwrap_or_default();
    let command = tool_call.pointer("/rawInput/command").and_then(Value::as_str);
    let mut line = format!("{kind}: {title}");
    if let Some(command) = command {
        line.push_str(" — ");
        line.push_str(command);
    } else if !paths.is_empty() {
        line.push_str(" — ");
        line.push_str(&paths.iter().take(MAX_SUMMARY_PATHS).copied().collect::<Vec<_>>().join(", "));
        if paths.len() > MAX_SUMMARY_PATHS {
            line.push_str(&format!(" (+{} more)", paths.len() - MAX_SUMMARY_PATHS));
        }
    }
    if line.chars().count() > MAX_SUMMARY_CHARS {
        line = line.chars().take(MAX_SUMMARY_CHARS - 1).collect::<String>() + "…";
    }
    line
}

/// The `expiresAt` of a request (ms), if it has one.
fn expires_at(data: &Value) -> Option<u64> {
    data.get("expiresAt").and_then(Value::as_u64)
}

/// The body for `format`, and its `Content-Type` is always JSON.
pub(super) fn body(format: NotifyFormat, url: &TargetUrl, n: &Notice<'_>) -> Value {
    match format {
        NotifyFormat::Json => json_body(n),
        NotifyFormat::Ntfy => ntfy_body(url, n),
    }
}

fn json_body(n: &Notice<'_>) -> Value {
    let mut body = json!({
        "event": n.kind.as_str(),
        "deliveryId": n.delivery_id,
        "sentAt": iso8601(n.sent_at),
        "sessionId": n.session_id,
        "workspaceCwd": n.workspace,
    });
    if n.kind != EventKind::PermissionRequest {
        body["data"] = n.data.clone();
        return body;
    }
    let tool_call = n.data.get("toolCall").cloned().unwrap_or_else(|| json!({}));
    let paths: Vec<Value> = tool_call
        .get("locations")
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(|l| l.get("path").cloned()).collect())
        .unwrap_or_default();
    body["requestId"] = n.data.get("requestId").cloned().unwrap_or(Value::Null);
    body["summary"] = json!(summary(&tool_call));
    body["toolCall"] = json!({
        "toolCallId": tool_call.get("toolCallId"),
        "kind": tool_call.get("kind"),
        "title": tool_call.get("title"),
        "paths": paths,
        "command": tool_call.pointer("/rawInput/command"),
    });
    body["options"] = n
        .actions
        .iter()
        .map(|a| json!({"optionId": a.option_id, "name": a.name, "kind": a.kind, "url": a.url}))
        .collect();
    body["policy"] = n.data.get("policy").cloned().unwrap_or(Value::Null);
    body["clientId"] = json!(n.client_id);
    body["expiresAt"] = json!(expires_at(n.data).map(iso8601));
    // What the end of --permission-timeout-ms does today: the agent is told `cancelled`.
    body["onExpiry"] = json!(if expires_at(n.data).is_some() { "cancelled" } else { "never_expires" });
    body["reminder"] = json!(n.reminder);
    body
}

/// The topic: the URL's path without its leading `/` (and without a query).
pub(super) fn ntfy_topic(url: &TargetUrl) -> &str {
    let path = url.path.split('?').next().unwrap_or("");
    path.trim_start_matches('/').trim_end_matches('/')
}

/// Up to three of the offered options, the preferred kinds first, then in the agent's order.
fn ntfy_buttons(actions: &[Action]) -> Vec<&Action> {
    let mut chosen: Vec<&Action> = Vec::new();
    for kind in NTFY_PREFERRED_KINDS {
        if let Some(a) = actions.iter().find(|a| a.kind == kind && a.url.is_some()) {
            chosen.push(a);
        }
    }
    for a in actions.iter().filter(|a| a.url.is_some()) {
        if chosen.len() >= NTFY_MAX_ACTIONS {
            break;
        }
        if !chosen.iter().any(|c| c.option_id == a.option_id) {
            chosen.push(a);
        }
    }
    chosen.truncate(NTFY_MAX_ACTIONS);
    chosen
}

fn ntfy_body(url: &TargetUrl, n: &Notice<'_>) -> Value {
    let topic = ntfy_topic(url);
    let workspace = format!("in {}", n.workspace);
    let (title, message, priority, tags) = match n.kind {
        EventKind::PermissionRequest => {
            let tool_call = n.data.get("toolCall").cloned().unwrap_or_else(|| json!({}));
            let expiry = match expires_at(n.data) {
                Some(at) => format!("Unanswered, it is cancelled at {} (UTC).", iso8601(at)),
                None => "It waits until someone answers.".to_owned(),
            };
            let title = if n.reminder > 0 {
                "Reminder: the agent still needs permission"
            } else {
                "The agent needs permission"
            };
            let message = format!("{}\n{workspace}\n{expiry}", summary(&tool_call));
            // 4 = high; a reminder goes to 5 = urgent (ntfy's scale).
            (title, message, if n.reminder > 0 { 5 } else { 4 }, json!(["lock"]))
        }
        EventKind::TurnComplete => {
            let reason = n.data.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn");
            (
                "The agent finished its turn",
                format!("Stop reason: {reason}\n{workspace}"),
                3,
                json!(["white_check_mark"]),
            )
        }
        EventKind::TurnError => {
            let error = n.data.get("message").and_then(Value::as_str).unwrap_or("the turn failed");
            ("The agent's turn failed", format!("{error}\n{workspace}"), 4, json!(["warning"]))
        }
        _ => ("The agent exited", format!("The session ended\n{workspace}"), 4, json!(["skull"])),
    };
    let mut body = json!({
        "topic": topic,
        "title": title,
        "message": message,
        "priority": priority,
        "tags": tags,
    });
    let buttons: Vec<Value> = ntfy_buttons(n.actions)
        .into_iter()
        .filter_map(|a| {
            a.url.as_ref().map(
                |u| json!({"action": "http", "label": a.name, "url": u, "method": "POST", "clear": true}),
            )
        })
        .collect();
    if !buttons.is_empty() {
        body["actions"] = Value::Array(buttons);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions() -> Vec<Action> {
        ["allow_once:Allow once", "allow_always:Always allow", "reject_once:Reject", "reject_always:Never"]
            .iter()
            .map(|s| {
                let (kind, name) = s.split_once(':').expect("pair");
                Action {
                    option_id: format!("{kind}_id"),
                    name: name.into(),
                    kind: kind.into(),
                    url: Some(format!("http://d/act/{kind}")),
                }
            })
            .collect()
    }

    fn request() -> Value {
        json!({"requestId": "r1", "sessionId": "s1", "policy": "first-responder", "expiresAt": 1_795_379_959_849u64,
               "toolCall": {"toolCallId": "t", "kind": "edit", "title": "Write notes.txt",
                            "locations": [{"path": "/w/notes.txt"}]}})
    }

    fn notice<'a>(kind: EventKind, data: &'a Value, actions: &'a [Action]) -> Notice<'a> {
        Notice {
            kind,
            session_id: "s1",
            workspace: "/w",
            data,
            delivery_id: "d1",
            sent_at: 0,
            reminder: 0,
            actions,
            client_id: Some("phone"),
        }
    }

    #[test]
    fn summaries_name_the_kind_title_and_paths_or_command() {
        assert_eq!(summary(&request()["toolCall"]), "edit: Write notes.txt — /w/notes.txt");
        let run = json!({"kind": "execute", "title": "Run", "rawInput": {"command": "git push"}, "locations": [{"path": "/x"}]});
        assert_eq!(summary(&run), "execute: Run — git push");
        assert_eq!(summary(&json!({})), "other: a tool call");
        assert!(summary(&json!({"title": "x".repeat(1000)})).chars().count() <= MAX_SUMMARY_CHARS);
    }

    #[test]
    fn the_json_document_carries_options_with_links_and_the_expiry() {
        let data = request();
        let a = actions();
        let b = json_body(&notice(EventKind::PermissionRequest, &data, &a));
        assert_eq!(b["event"], "permission_request");
        assert_eq!(b["requestId"], "r1");
        assert_eq!(b["workspaceCwd"], "/w");
        assert_eq!(b["options"][0]["url"], "http://d/act/allow_once");
        assert_eq!(b["options"].as_array().map(Vec::len), Some(4));
        assert_eq!(b["expiresAt"], "2026-11-22T20:39:19.849Z");
        assert_eq!(b["onExpiry"], "cancelled");
        assert_eq!(b["toolCall"]["paths"][0], "/w/notes.txt");
        assert_eq!(b["clientId"], "phone");
        let done = json!({"sessionId": "s1", "stopReason": "end_turn"});
        let b = json_body(&notice(EventKind::TurnComplete, &done, &[]));
        assert_eq!(
            (b["event"].as_str(), b["data"]["stopReason"].as_str()),
            (Some("turn_complete"), Some("end_turn"))
        );
    }

    #[test]
    fn ntfy_bodies_have_a_topic_and_at_most_three_preferred_buttons() {
        let data = request();
        let a = actions();
        let target = crate::config::parse_target_url("http://127.0.0.1:1/mytopic").expect("url");
        let b = ntfy_body(&target, &notice(EventKind::PermissionRequest, &data, &a));
        assert_eq!(b["topic"], "mytopic");
        assert_eq!(b["priority"], 4);
        let labels: Vec<&str> =
            b["actions"].as_array().expect("actions").iter().filter_map(|x| x["label"].as_str()).collect();
        assert_eq!(labels, ["Allow once", "Always allow", "Reject"]);
        assert!(
            b["actions"]
                .as_array()
                .expect("actions")
                .iter()
                .all(|x| x["action"] == "http" && x["method"] == "POST")
        );
        assert!(b["message"].as_str().expect("message").contains("cancelled at 2026-11-22T20:39:19.849Z"));
        let done = json!({"stopReason": "end_turn"});
        let b = ntfy_body(&target, &notice(EventKind::TurnComplete, &done, &[]));
        assert!(b.get("actions").is_none());
    }
}

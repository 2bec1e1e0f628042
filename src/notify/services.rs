//! The body each format posts ([`body`]): mediatord's JSON and ntfy's come from `format`; the
//! messages of Slack (an incoming webhook, Block Kit), Discord (a webhook, one embed) and Telegram
//! (the Bot API's `sendMessage`) are built here from the same [`Message`] and action links.
//!
//! These three services open a button's URL in the browser (none can `POST` it the way ntfy's
//! `http` action does), so every button leads to the action link's page, which shows the whole
//! request and decides with one more tap. Each body's shape is checked against an example of the
//! service's documented schema (`docs/examples/notify-*.json`) in the tests below.

use serde_json::{Value, json};

use super::deliver::Verb;
use super::format::{self, Action, Message, Notice, approves};
use crate::config::{NotifyFormat, TargetUrl, telegram_chat_id};

/// Buttons in a Slack `actions` block at most (Block Kit's limit is 25).
const SLACK_MAX_BUTTONS: usize = 25;
/// Block Kit's limit on one text object (a section's text, a context element's).
const SLACK_TEXT_MAX_CHARS: usize = 3000;
/// Discord's limit on one embed field's value.
const DISCORD_FIELD_MAX_CHARS: usize = 1024;
/// The embed's colour: amber for a request waiting on someone, grey for the rest.
const DISCORD_WAITING: u32 = 0xE8_A3_17;
const DISCORD_DONE: u32 = 0x95_A5_A6;

/// The body for `format`, and its `Content-Type` is always JSON.
pub(super) fn body(format: NotifyFormat, url: &TargetUrl, n: &Notice<'_>) -> Value {
    match format {
        NotifyFormat::Json => format::json_body(n),
        NotifyFormat::Ntfy => format::ntfy_body(url, n),
        NotifyFormat::Slack => slack(n),
        NotifyFormat::Discord => discord(n),
        NotifyFormat::Telegram => telegram(url, n),
    }
}

/// A message a service said it posted, to update once the request is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Posted {
    /// `sendMessage`'s `result.message_id`.
    Telegram(i64),
    /// The webhook's message `id` (posted with `?wait=true`).
    Discord(String),
    /// The request's id, sent as the ntfy message's `sequence_id`.
    Ntfy(String),
}

/// Where a request's notification is posted: Discord answers with the message only when asked to
/// wait (`?wait=true`), and ntfy takes JSON at its root.
pub(super) fn path(format: NotifyFormat, url: &TargetUrl, request: bool) -> String {
    match format {
        NotifyFormat::Ntfy => "/".to_owned(),
        NotifyFormat::Discord if request => {
            let sep = if url.path.contains('?') { '&' } else { '?' };
            format!("{}{sep}wait=true", url.path)
        }
        _ => url.path.clone(),
    }
}

/// The message a service posted, from its answer to a request's notification: Telegram's
/// `{"ok": true, "result": {"message_id": N}}`, Discord's message object; ntfy's is the request's
/// own id. Slack's incoming webhooks answer `ok` and cannot edit: `None`, as for JSON.
pub(super) fn posted(format: NotifyFormat, request_id: &str, answer: &[u8]) -> Option<Posted> {
    let parsed = || serde_json::from_slice::<Value>(answer).ok();
    match format {
        NotifyFormat::Telegram => parsed()?.pointer("/result/message_id")?.as_i64().map(Posted::Telegram),
        NotifyFormat::Discord => {
            let id = parsed()?.get("id")?.as_str()?.to_owned();
            // A snowflake: digits only, so it is safe in the update's path.
            (!id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit()))
                .then_some(Posted::Discord(id))
        }
        NotifyFormat::Ntfy => Some(Posted::Ntfy(request_id.to_owned())),
        NotifyFormat::Json | NotifyFormat::Slack => None,
    }
}

/// The request that turns a posted notification into its decision, `m` (the buttons gone):
/// Telegram's `editMessageText` (beside `sendMessage` in the target's URL), Discord's
/// `PATCH /webhooks/{id}/{token}/messages/{message_id}`, ntfy's publish under the same sequence id.
pub(super) fn update(url: &TargetUrl, posted: &Posted, m: &Message) -> Option<(Verb, String, Value)> {
    let text = format!("{}\n{}", m.title, m.lines.join("\n"));
    match posted {
        Posted::Telegram(message_id) => {
            let base = url.path.split('?').next().unwrap_or_default();
            let method = base.strip_suffix("/sendMessage")?;
            let body = json!({
                "chat_id": telegram_chat_id(url).unwrap_or(""),
                "message_id": message_id,
                "text": text,
                "link_preview_options": {"is_disabled": true},
            });
            Some((Verb::Post, format!("{method}/editMessageText"), body))
        }
        Posted::Discord(message_id) => {
            let base = url.path.split('?').next().unwrap_or_default().trim_end_matches('/');
            let embed = json!({
                "title": m.title,
                "description": m.lines.iter().map(|l| discord_escape(l)).collect::<Vec<_>>().join("\n"),
                "color": DISCORD_DONE,
            });
            let body = json!({
                "content": fallback(m),
                "embeds": [embed],
                "allowed_mentions": {"parse": []},
            });
            Some((Verb::Patch, format!("{base}/messages/{message_id}"), body))
        }
        Posted::Ntfy(sequence_id) => {
            let body = json!({
                "topic": format::ntfy_topic(url),
                "sequence_id": sequence_id,
                "title": m.title,
                "message": m.lines.join("\n"),
                "priority": m.priority,
                "tags": ["white_check_mark"],
            });
            Some((Verb::Post, "/".to_owned(), body))
        }
    }
}

/// The options that get a button: those with a link.
fn linked(actions: &[Action]) -> impl Iterator<Item = (&Action, &str)> {
    actions.iter().filter_map(|a| a.url.as_deref().map(|u| (a, u)))
}

/// A button's label: the option's name, with "Review…" after it when its page must be read
/// before it decides (the notification could not show the whole request).
fn label(a: &Action) -> String {
    if a.needs_review { format!("{} (review…)", a.name) } else { a.name.clone() }
}

/// Slack's mrkdwn treats `&`, `<` and `>` as markup (links, mentions): escaped, text someone else
/// chose cannot ping a channel or hide a link.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// [`slack_escape`]d and within [`SLACK_TEXT_MAX_CHARS`]: escaping can make a text up to five
/// times longer than the bound it was cut to, so the cut is made after it, never inside an
/// entity, and ends with `…` (the action page shows everything).
fn slack_text(text: &str) -> String {
    let escaped = slack_escape(text);
    if escaped.chars().count() <= SLACK_TEXT_MAX_CHARS {
        return escaped;
    }
    let mut cut: String = escaped.chars().take(SLACK_TEXT_MAX_CHARS - 1).collect();
    if let Some(amp) = cut.rfind('&')
        && !cut[amp..].contains(';')
    {
        cut.truncate(amp);
    }
    cut.push('…');
    cut
}

fn slack(n: &Notice<'_>) -> Value {
    let m = format::message(n);
    let (first, rest) = m.lines.split_first().map_or(("", &[][..]), |(f, r)| (f.as_str(), r));
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": m.title}}),
        json!({"type": "section", "text": {"type": "mrkdwn", "text": slack_text(first)}}),
    ];
    if !rest.is_empty() {
        let context = slack_text(&rest.join("\n"));
        blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]}));
    }
    let buttons: Vec<Value> = linked(n.actions)
        .take(SLACK_MAX_BUTTONS)
        .enumerate()
        .map(|(i, (a, url))| {
            let mut button = json!({
                "type": "button",
                "text": {"type": "plain_text", "text": label(a)},
                "url": url,
                "action_id": format!("mediatord-option-{i}"),
            });
            if a.kind == "allow_once" {
                button["style"] = json!("primary");
            } else if !approves(&a.kind) {
                button["style"] = json!("danger");
            }
            button
        })
        .collect();
    if !buttons.is_empty() {
        blocks.push(json!({"type": "actions", "elements": buttons}));
    }
    json!({"text": fallback(&m), "blocks": blocks})
}

/// The one-line text a lock screen or a client without rich messages shows.
fn fallback(m: &Message) -> String {
    match m.lines.first() {
        Some(first) => format!("{}: {first}", m.title),
        None => m.title.to_owned(),
    }
}

/// Discord's Markdown: a backslash before each character that formats, so the agent's text is
/// shown as it is (a `](` cannot forge a link, a `*` cannot hide anything).
fn discord_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '*' | '_' | '~' | '`' | '|' | '>' | '[' | ']' | '(' | ')' | '#' | '@') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn discord(n: &Notice<'_>) -> Value {
    let m = format::message(n);
    let mut embed = json!({
        "title": m.title,
        "description": m.lines.iter().map(|l| discord_escape(l)).collect::<Vec<_>>().join("\n"),
        "color": if n.actions.is_empty() { DISCORD_DONE } else { DISCORD_WAITING },
    });
    // One link per line, as many as the field holds whole.
    let mut links = String::new();
    for (a, url) in linked(n.actions) {
        let line = format!("[{}](<{url}>)", discord_escape(&label(a)));
        // The line, and the newline before it unless it is the first.
        let needed = links.chars().count() + usize::from(!links.is_empty()) + line.chars().count();
        if needed > DISCORD_FIELD_MAX_CHARS {
            break;
        }
        if !links.is_empty() {
            links.push('\n');
        }
        links.push_str(&line);
    }
    if !links.is_empty() {
        embed["fields"] = json!([{"name": "Decide (opens the page)", "value": links, "inline": false}]);
    }
    json!({
        "username": "mediatord",
        "content": fallback(&m),
        "embeds": [embed],
        // Nothing in the message pings anyone, whatever the agent wrote.
        "allowed_mentions": {"parse": []},
    })
}

fn telegram(url: &TargetUrl, n: &Notice<'_>) -> Value {
    let m = format::message(n);
    // No parse_mode: the text is shown as plain text, so nothing in it is markup.
    let mut body = json!({
        "chat_id": telegram_chat_id(url).unwrap_or(""),
        "text": format!("{}\n{}", m.title, m.lines.join("\n")),
        "link_preview_options": {"is_disabled": true},
    });
    let rows: Vec<Value> = linked(n.actions).map(|(a, u)| json!([{"text": label(a), "url": u}])).collect();
    if !rows.is_empty() {
        body["reply_markup"] = json!({"inline_keyboard": rows});
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventKind;

    const SLACK_DOC: &str = include_str!("../../docs/examples/notify-slack.json");
    const DISCORD_DOC: &str = include_str!("../../docs/examples/notify-discord.json");
    const TELEGRAM_DOC: &str = include_str!("../../docs/examples/notify-telegram.json");
    const NTFY_DOC: &str = include_str!("../../docs/examples/notify-ntfy.json");

    /// Every member of `ours` appears in `documented` with the same JSON type, recursively; each
    /// item of an array must conform to one of the documented items (Block Kit's blocks differ
    /// by `type`, ntfy's actions by `action`). Where it failed, if it did.
    fn conforms(ours: &Value, documented: &Value, at: &str) -> Result<(), String> {
        match (ours, documented) {
            (Value::Object(o), Value::Object(d)) => {
                // A discriminating `type` (Block Kit's block and element kinds) must be one the
                // documentation shows, not merely a string.
                if let (Some(ours), Some(theirs)) = (o.get("type"), d.get("type"))
                    && ours != theirs
                {
                    return Err(format!("{at}.type {ours} is not the documented {theirs}"));
                }
                for (k, v) in o {
                    let Some(dv) = d.get(k) else {
                        return Err(format!("{at}.{k} is not in the documented example"));
                    };
                    conforms(v, dv, &format!("{at}.{k}"))?;
                }
                Ok(())
            }
            (Value::Array(o), Value::Array(d)) => {
                for (i, item) in o.iter().enumerate() {
                    let at = format!("{at}[{i}]");
                    let mut first_error = None;
                    let fits = d.iter().any(|dv| match conforms(item, dv, &at) {
                        Ok(()) => true,
                        Err(e) => {
                            first_error.get_or_insert(e);
                            false
                        }
                    });
                    if !fits {
                        return Err(first_error.unwrap_or_else(|| format!("{at}: no documented item")));
                    }
                }
                Ok(())
            }
            (Value::String(_), Value::String(_))
            | (Value::Bool(_), Value::Bool(_))
            | (Value::Null, Value::Null) => Ok(()),
            (Value::Number(_), Value::Number(_)) => Ok(()),
            _ => Err(format!("{at}: {ours} is not of the documented type of {documented}")),
        }
    }

    fn doc(text: &str) -> Value {
        serde_json::from_str(text).expect("a documented example is JSON")
    }

    fn actions(needs_review: bool) -> Vec<Action> {
        ["allow_once:Allow once", "allow_always:Always allow", "reject_once:Reject"]
            .iter()
            .map(|s| {
                let (kind, name) = s.split_once(':').expect("pair");
                Action {
                    option_id: kind.into(),
                    name: name.into(),
                    kind: kind.into(),
                    url: Some(format!("https://m.example/act/{kind}")),
                    needs_review: needs_review && approves(kind),
                }
            })
            .collect()
    }

    fn request(command: &str) -> Value {
        json!({"requestId": "r1", "expiresAt": 1_795_379_959_849u64,
               "toolCall": {"kind": "execute", "title": "Run", "rawInput": {"command": command}}})
    }

    /// The format tests' notice, sent 5 minutes before [`request`] expires and from no client.
    fn notice<'a>(kind: EventKind, data: &'a Value, actions: &'a [Action]) -> Notice<'a> {
        Notice {
            sent_at: 1_795_379_959_849 - 5 * 60_000,
            client_id: None,
            ..format::tests::notice(kind, data, actions)
        }
    }

    /// How [`notice`]'s request expiry reads, in this machine's zone: "in 5 min (at 20:39 UTC)".
    fn in_5_min() -> String {
        let text = format::when(1_795_379_959_849, 1_795_379_959_849 - 5 * 60_000);
        assert!(text.starts_with("in 5 min (at "), "{text}");
        text
    }

    fn url(raw: &str) -> TargetUrl {
        crate::config::parse_target_url(raw).expect("url")
    }

    #[test]
    fn the_checker_refuses_a_member_or_a_type_the_documentation_lacks() {
        let documented = json!({"a": [{"type": "x", "b": 1}], "c": "s"});
        assert!(conforms(&json!({"a": [{"type": "x", "b": 2}]}), &documented, "$").is_ok());
        assert!(conforms(&json!({"d": 1}), &documented, "$").is_err_and(|e| e.contains("$.d")));
        assert!(conforms(&json!({"c": 1}), &documented, "$").is_err());
        assert!(conforms(&json!({"a": [{"type": "x", "z": 1}]}), &documented, "$").is_err());
        assert!(conforms(&json!({"a": {"b": 1}}), &documented, "$").is_err());
        assert!(
            conforms(&json!({"a": [{"type": "y", "b": 2}]}), &documented, "$").is_err(),
            "an undocumented kind"
        );
    }

    #[test]
    fn every_body_has_the_shape_its_service_documents() {
        let (data, done) = (request("git push"), json!({"stopReason": "end_turn"}));
        for needs_review in [false, true] {
            let a = actions(needs_review);
            for (kind, data, a) in
                [(EventKind::PermissionRequest, &data, &a[..]), (EventKind::TurnComplete, &done, &[][..])]
            {
                let n = notice(kind, data, a);
                let telegram_url = url("https://api.telegram.org/bot1:A/sendMessage?chat_id=42");
                for (format, target, documented) in [
                    (NotifyFormat::Slack, url("https://hooks.slack.example/services/T/B/x"), SLACK_DOC),
                    (NotifyFormat::Discord, url("https://discord.example/api/webhooks/1/x"), DISCORD_DOC),
                    (NotifyFormat::Telegram, telegram_url, TELEGRAM_DOC),
                    (NotifyFormat::Ntfy, url("https://ntfy.example/topic"), NTFY_DOC),
                ] {
                    let ours = body(format, &target, &n);
                    conforms(&ours, &doc(documented), "$")
                        .unwrap_or_else(|e| panic!("{format:?} {kind:?}: {e}\n{ours:#}"));
                }
            }
        }
    }

    /// Escaping happens after the notification's bounds were applied: a text of `&`, `<` and `>`
    /// grows fivefold. Block Kit refuses a text object past 3000 characters, so the cut is made
    /// after escaping, at an entity's edge.
    #[test]
    fn slack_texts_stay_within_block_kits_limit_after_escaping() {
        assert_eq!(slack_text("a & b"), "a &amp; b");
        let fits = "&".repeat(SLACK_TEXT_MAX_CHARS / 5);
        assert_eq!(slack_text(&fits).chars().count(), SLACK_TEXT_MAX_CHARS, "exactly the limit is whole");
        assert!(!slack_text(&fits).ends_with('…'));
        for text in ["&".repeat(700), "<".repeat(2000), format!("x{}", "&".repeat(700))] {
            let shown = slack_text(&text);
            assert!(shown.chars().count() <= SLACK_TEXT_MAX_CHARS, "{}", shown.chars().count());
            let body = shown.strip_suffix('…').expect("cut, and says so");
            let entities = body.trim_start_matches('x').replace("&amp;", "").replace("&lt;", "");
            assert_eq!(entities, "", "only whole entities: {body}");
        }
    }

    #[test]
    fn slack_buttons_link_each_option_and_escape_the_agents_text() {
        let data = request("echo <!channel> & <https://evil.example|click>");
        let a = actions(false);
        let b = slack(&notice(EventKind::PermissionRequest, &data, &a));
        let blocks = b["blocks"].as_array().expect("blocks");
        assert_eq!(blocks[0]["text"]["text"], "The agent needs permission");
        assert_eq!(
            blocks[1]["text"]["text"],
            "execute: Run — echo &lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;"
        );
        assert_eq!(
            blocks[2]["elements"][0]["text"],
            format!(
                "command:\n  $ echo &lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;\nin /w\nUnanswered, it is cancelled {}.",
                in_5_min()
            )
        );
        let buttons = blocks[3]["elements"].as_array().expect("buttons");
        let shown: Vec<(&str, &str, &str)> = buttons
            .iter()
            .map(|x| {
                (
                    x["text"]["text"].as_str().unwrap_or(""),
                    x["url"].as_str().unwrap_or(""),
                    x["style"].as_str().unwrap_or("-"),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("Allow once", "https://m.example/act/allow_once", "primary"),
                ("Always allow", "https://m.example/act/allow_always", "-"),
                ("Reject", "https://m.example/act/reject_once", "danger"),
            ]
        );
        let ids: std::collections::HashSet<&str> =
            buttons.iter().filter_map(|x| x["action_id"].as_str()).collect();
        assert_eq!(ids.len(), 3, "action ids are unique in a message");
        assert!(
            b["text"].as_str().is_some_and(|t| t.starts_with("The agent needs permission: execute: Run"))
        );

        let done = json!({"stopReason": "end_turn"});
        let b = slack(&notice(EventKind::TurnComplete, &done, &[]));
        assert_eq!(b["blocks"][1]["text"]["text"], "The agent is done and waits for you.");
        assert!(b["blocks"].as_array().is_some_and(|x| x.iter().all(|x| x["type"] != "actions")));
    }

    #[test]
    fn discord_links_each_option_escapes_markdown_and_pings_nobody() {
        let data = request("rm -rf *_x_* [ok](https://evil.example) @everyone");
        let a = actions(true);
        let b = discord(&notice(EventKind::PermissionRequest, &data, &a));
        assert_eq!(b["allowed_mentions"], json!({"parse": []}));
        let embed = &b["embeds"][0];
        let description = embed["description"].as_str().expect("description");
        assert!(
            description
                .starts_with(r"execute: Run — rm -rf \*\_x\_\* \[ok\]\(https://evil.example\) \@everyone"),
            "{description}"
        );
        assert_eq!(
            embed["fields"][0]["value"],
            "[Allow once \\(review…\\)](<https://m.example/act/allow_once>)\n\
             [Always allow \\(review…\\)](<https://m.example/act/allow_always>)\n\
             [Reject](<https://m.example/act/reject_once>)"
        );
        assert_eq!(embed["color"], DISCORD_WAITING);
    }

    #[test]
    fn discord_links_stop_before_the_field_overflows() {
        let data = request("x");
        // `count` actions named `name_chars` characters long, each linked to `url`.
        let bulk = |count: usize, name_chars: usize, url: &str| -> Vec<Action> {
            (0..count)
                .map(|i| Action {
                    option_id: format!("o{i}"),
                    name: "n".repeat(name_chars),
                    kind: "allow_once".into(),
                    url: Some(url.to_owned()),
                    needs_review: false,
                })
                .collect()
        };
        // The field of their links in the Discord message.
        let field = |actions: &[Action]| -> Option<String> {
            let b = discord(&notice(EventKind::PermissionRequest, &data, actions));
            b["embeds"][0]["fields"][0]["value"].as_str().map(str::to_owned)
        };
        let value =
            field(&bulk(16, 64, &format!("https://m.example/act/{}", "t".repeat(64)))).expect("links");
        assert!(value.chars().count() <= DISCORD_FIELD_MAX_CHARS, "{}", value.len());
        let lines = value.lines().count();
        assert!((1..16).contains(&lines), "whole links only: {lines}");
        assert!(value.lines().all(|l| l.ends_with(">)")));

        // Five links of 204 characters and their four newlines fill the field exactly: all five
        // are kept, and a sixth is not.
        let value =
            field(&bulk(6, 10, &format!("https://m.example/act/{}", "t".repeat(166)))).expect("links");
        assert_eq!(value.lines().next().map(|l| l.chars().count()), Some(204));
        assert_eq!((value.lines().count(), value.chars().count()), (5, DISCORD_FIELD_MAX_CHARS));

        // One link as long as the field is kept; one character longer, none is.
        let links = |count: usize, url_chars: usize| {
            field(&bulk(count, 10, &"u".repeat(url_chars))).map(|v| v.chars().count())
        };
        assert_eq!(links(1, DISCORD_FIELD_MAX_CHARS - 16), Some(DISCORD_FIELD_MAX_CHARS));
        assert_eq!(links(1, DISCORD_FIELD_MAX_CHARS - 15), None);
        // Two links of 512 characters need 1025 with their newline: the second is left out.
        assert_eq!(links(2, 512 - 16), Some(512));
    }

    #[test]
    fn telegram_sends_plain_text_to_the_chat_with_one_url_button_a_row() {
        let data = request("make *deploy*");
        let a = actions(false);
        let target = url("https://api.telegram.org/bot1:A/sendMessage?chat_id=-100123");
        let b = telegram(&target, &notice(EventKind::PermissionRequest, &data, &a));
        assert_eq!(b["chat_id"], "-100123");
        assert!(b.get("parse_mode").is_none(), "plain text: nothing in it is markup");
        assert_eq!(
            b["text"],
            format!(
                "The agent needs permission\nexecute: Run — make *deploy*\ncommand:\n  $ make *deploy*\nin /w\nUnanswered, it is cancelled {}.",
                in_5_min()
            )
        );
        assert_eq!(
            b["reply_markup"]["inline_keyboard"],
            json!([
                [{"text": "Allow once", "url": "https://m.example/act/allow_once"}],
                [{"text": "Always allow", "url": "https://m.example/act/allow_always"}],
                [{"text": "Reject", "url": "https://m.example/act/reject_once"}],
            ])
        );
        let done = json!({"stopReason": "max_tokens"});
        let b = telegram(&target, &notice(EventKind::TurnComplete, &done, &[]));
        assert!(b.get("reply_markup").is_none());
        assert!(b["text"].as_str().is_some_and(|t| t.contains("reached its output limit")));
    }

    #[test]
    fn times_are_said_as_a_person_would() {
        let at = 1_795_379_959_849; // 20:39:19 UTC
        let utc = jiff::tz::TimeZone::UTC;
        let when = |at, now| format::when_in(at, now, &utc);
        assert_eq!(when(at, at), "now (at 20:39 UTC)");
        let east = jiff::tz::TimeZone::fixed(jiff::tz::offset(1));
        assert_eq!(format::when_in(at, at - 60_000, &east), "in 1 min (at 21:39 +01)");
        assert_eq!(
            format::when_in(u64::MAX, at, &utc).split(" (").count(),
            1,
            "no clock beyond the calendar"
        );
        assert_eq!(when(at, at + 1), "now (at 20:39 UTC)");
        assert_eq!(when(at, at - 1), "in 1 min (at 20:39 UTC)");
        assert_eq!(when(at, at - 60_000), "in 1 min (at 20:39 UTC)");
        assert_eq!(when(at, at - 60_001), "in 2 min (at 20:39 UTC)");
        assert_eq!(when(at, at - 119 * 60_000), "in 119 min (at 20:39 UTC)");
        assert_eq!(when(at, at - 120 * 60_000), "in 2 h 0 min (at 20:39 UTC)");
        assert_eq!(when(at, at - 125 * 60_000), "in 2 h 5 min (at 20:39 UTC)");
        assert_eq!(format::stop_reason("end_turn"), "The agent is done and waits for you.");
        assert_eq!(format::stop_reason("cancelled"), "The turn was cancelled.");
        assert_eq!(format::stop_reason("refusal"), "The agent refused to go on.");
        assert_eq!(
            format::stop_reason("max_turn_requests"),
            "The agent stopped: it reached its limit of steps for one turn."
        );
        assert_eq!(format::stop_reason("something new"), "The agent stopped.");
    }

    #[test]
    fn a_request_is_posted_where_its_service_answers_with_the_message() {
        let discord = url("https://discord.com/api/webhooks/1/tok");
        assert_eq!(path(NotifyFormat::Discord, &discord, true), "/api/webhooks/1/tok?wait=true");
        assert_eq!(path(NotifyFormat::Discord, &discord, false), "/api/webhooks/1/tok");
        let threaded = url("https://discord.com/api/webhooks/1/tok?thread_id=9");
        assert_eq!(path(NotifyFormat::Discord, &threaded, true), "/api/webhooks/1/tok?thread_id=9&wait=true");
        assert_eq!(path(NotifyFormat::Ntfy, &url("https://ntfy.sh/topic"), true), "/");
        let hook = url("https://h.example/hook");
        assert_eq!(path(NotifyFormat::Json, &hook, true), "/hook");
        assert_eq!(path(NotifyFormat::Slack, &hook, true), "/hook");
    }

    #[test]
    fn the_posted_message_is_read_from_each_services_answer() {
        let telegram = br#"{"ok": true, "result": {"message_id": 42, "chat": {"id": 7}}}"#;
        assert_eq!(posted(NotifyFormat::Telegram, "r1", telegram), Some(Posted::Telegram(42)));
        assert_eq!(posted(NotifyFormat::Telegram, "r1", br#"{"ok": false}"#), None);
        let discord = br#"{"id": "1234567890123456789", "content": "x"}"#;
        assert_eq!(
            posted(NotifyFormat::Discord, "r1", discord),
            Some(Posted::Discord("1234567890123456789".into()))
        );
        for forged in
            [&br#"{"id": "12/../../x"}"#[..], br#"{"id": ""}"#, br#"{"id": "123456789012345678901"}"#, b"{"]
        {
            assert_eq!(
                posted(NotifyFormat::Discord, "r1", forged),
                None,
                "{}",
                String::from_utf8_lossy(forged)
            );
        }
        assert_eq!(posted(NotifyFormat::Ntfy, "r1", b""), Some(Posted::Ntfy("r1".into())));
        assert_eq!(posted(NotifyFormat::Slack, "r1", b"ok"), None);
        assert_eq!(posted(NotifyFormat::Json, "r1", telegram), None);
    }

    #[test]
    fn a_decision_edits_the_message_and_drops_its_buttons() {
        let m = Message {
            title: "Decided",
            lines: vec!["Allowed once by phone".into(), "execute: Run — git push".into()],
            priority: 2,
        };
        let telegram = url("https://api.telegram.org/bot123:abc/sendMessage?chat_id=-100");
        let (verb, path, body) = update(&telegram, &Posted::Telegram(42), &m).expect("update");
        assert_eq!((verb, path.as_str()), (Verb::Post, "/bot123:abc/editMessageText"));
        assert_eq!(body["chat_id"], "-100");
        assert_eq!(body["message_id"], 42);
        assert_eq!(body["text"], "Decided\nAllowed once by phone\nexecute: Run — git push");
        assert!(body.get("reply_markup").is_none(), "the buttons go");
        // A Telegram URL that is not sendMessage's has no edit beside it.
        assert_eq!(update(&url("https://h.example/hook"), &Posted::Telegram(1), &m), None);

        let discord = url("https://discord.com/api/webhooks/1/tok?thread_id=9");
        let (verb, path, body) = update(&discord, &Posted::Discord("55".into()), &m).expect("update");
        assert_eq!((verb, path.as_str()), (Verb::Patch, "/api/webhooks/1/tok/messages/55"));
        assert_eq!(body["content"], "Decided: Allowed once by phone");
        assert_eq!(body["embeds"][0]["color"], DISCORD_DONE);
        assert!(body["embeds"][0].get("fields").is_none(), "the links go");
        assert_eq!(body["allowed_mentions"], json!({"parse": []}));

        let ntfy = url("https://ntfy.sh/topic");
        let (verb, path, body) = update(&ntfy, &Posted::Ntfy("r1".into()), &m).expect("update");
        assert_eq!((verb, path.as_str()), (Verb::Post, "/"));
        assert_eq!(body["sequence_id"], "r1");
        assert_eq!(body["topic"], "topic");
        assert_eq!(body["priority"], 2);
        assert!(body.get("actions").is_none());
        conforms(&body, &doc(NTFY_DOC), "$").expect("ntfy's documented shape");
    }
}

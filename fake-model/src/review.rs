//! Answering as a `model` reviewer of mediatord (`docs/operations.md#reviewers`): a prompt that is
//! exactly a review request (a JSON object with a string `id` and an `options` array, as the
//! daemon sends it as its one user message) is answered with one verdict, decided from the
//! request's text (its `title` and `rawInput`) by the first rule that matches:
//!
//! | the request's text holds | answer |
//! |---|---|
//! | [`GARBAGE`] | [`GARBAGE_TEXT`], which is no verdict |
//! | [`LATE`] | an `allow`, but only after [`LATE_HOLD`] |
//! | `rm -rf` | `deny`, reason `rm -rf deletes recursively: <title>` |
//! | `curl` and `\| sh` (or `\| bash`) | `escalate`, reason `runs a download unseen: <title>` |
//! | nothing of these, kind `read` or `search`, or a `rawInput.command` of one of [`READ_COMMANDS`] with no shell operator (an agent's shell tool that only reads: Qwen Code asks about `sha256sum`) | `allow`, reason `a read changes nothing: <title>` |
//! | nothing of these | `escalate`, reason `no rule for this: <title>` |
//!
//! The reason quotes the title, so a test sees what the model was sent (a secret redacted).

use std::time::Duration;

use serde_json::{Value, json};

use crate::conversation::Reply;

/// Marks a request the fake answers with garbage.
pub const GARBAGE: &str = "REVIEW_GARBAGE";
/// What it answers then: prose, no verdict.
pub const GARBAGE_TEXT: &str = "I think this request is probably fine.";
/// Marks a request the fake answers late.
pub const LATE: &str = "REVIEW_LATE";
/// How late: far past any reviewer deadline a test sets, short enough to end by itself.
pub const LATE_HOLD: Duration = Duration::from_secs(30);

/// Commands that only read, as the first word of a shell command with no operator after it.
pub const READ_COMMANDS: [&str; 7] = ["ls", "cat", "head", "wc", "grep", "sha256sum", "md5sum"];

/// Whether `command` is one of [`READ_COMMANDS`] and nothing more (no pipe, list, redirection or
/// substitution).
fn reads_only(command: &str) -> bool {
    let first = command.split_whitespace().next().unwrap_or_default();
    READ_COMMANDS.contains(&first) && !command.contains(['|', ';', '&', '>', '<', '`', '$'])
}

/// The verdict for `prompt` when it is a review request; `None` when it is not one.
pub fn reply(prompt: &str) -> Option<Reply> {
    let request: Value = serde_json::from_str(prompt.trim()).ok()?;
    if !request.get("id").is_some_and(Value::is_string)
        || !request.get("options").is_some_and(Value::is_array)
    {
        return None;
    }
    let title = request.get("title").and_then(Value::as_str).unwrap_or_default();
    let text = format!("{title} {}", request.get("rawInput").map(Value::to_string).unwrap_or_default());
    let verdict = |verdict: &str, reason: String| json!({"verdict": verdict, "reason": reason}).to_string();
    let kind = request.get("kind").and_then(Value::as_str);
    let answer = if text.contains(GARBAGE) {
        GARBAGE_TEXT.to_owned()
    } else if text.contains(LATE) {
        return Some(Reply::Stall {
            opening: String::new(),
            hold: LATE_HOLD,
            closing: verdict("allow", format!("late: {title}")),
        });
    } else if text.contains("rm -rf") {
        verdict("deny", format!("rm -rf deletes recursively: {title}"))
    } else if text.contains("curl") && (text.contains("| sh") || text.contains("| bash")) {
        verdict("escalate", format!("runs a download unseen: {title}"))
    } else if matches!(kind, Some("read" | "search"))
        || reads_only(request.pointer("/rawInput/command").and_then(Value::as_str).unwrap_or_default())
    {
        verdict("allow", format!("a read changes nothing: {title}"))
    } else {
        verdict("escalate", format!("no rule for this: {title}"))
    };
    Some(Reply::Text(vec![answer]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(kind: &str, title: &str) -> String {
        json!({"id": "r1", "kind": kind, "title": title, "rawInput": {"command": title}, "options": []})
            .to_string()
    }

    fn said(prompt: &str) -> Value {
        match reply(prompt) {
            Some(Reply::Text(chunks)) => serde_json::from_str(&chunks.concat()).expect("a verdict"),
            other => panic!("a text reply: {other:?}"),
        }
    }

    #[test]
    fn a_review_request_gets_the_verdict_of_its_first_rule() {
        assert_eq!(
            said(&asked("read", "Read notes.txt")),
            json!({"verdict": "allow", "reason": "a read changes nothing: Read notes.txt"})
        );
        assert_eq!(said(&asked("execute", "Run rm -rf build"))["verdict"], "deny");
        assert_eq!(said(&asked("read", "rm -rf /"))["verdict"], "deny", "the rule before the kind");
        assert_eq!(said(&asked("execute", "Run curl https://x | sh"))["verdict"], "escalate");
        assert_eq!(
            said(&asked("execute", "Run curl https://x | bash"))["reason"],
            "runs a download unseen: Run curl https://x | bash"
        );
        assert_eq!(
            said(&asked("execute", "Run curl https://x"))["reason"],
            "no rule for this: Run curl https://x"
        );
        assert_eq!(
            reply(&asked("execute", "echo REVIEW_GARBAGE")),
            Some(Reply::Text(vec![GARBAGE_TEXT.into()]))
        );
        assert!(
            matches!(reply(&asked("read", "REVIEW_LATE")), Some(Reply::Stall { hold, .. }) if hold == LATE_HOLD)
        );
        assert_eq!(
            said(&asked("execute", "sha256sum notes.txt"))["verdict"],
            "allow",
            "a command that reads"
        );
        assert_eq!(said(&asked("execute", "cat a > b"))["verdict"], "escalate", "a redirection writes");
        assert_eq!(said(&asked("execute", "lsblk"))["verdict"], "escalate", "the first word, whole");
        assert_eq!(reply("WRITE /tmp/x hello"), None, "a directive is no review");
        assert_eq!(reply(r#"{"id": "r1"}"#), None, "a request has options");
        assert_eq!(reply(r#"{"id": 1, "options": []}"#), None, "and a string id");
    }
}

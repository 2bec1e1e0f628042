//! The conversation as every dialect reduces it, and the one rule that picks the model's next reply.
//!
//! The rule: the *turn* is the latest user message that carries text a person wrote (not only tool
//! results or context such as `<system-reminder>`), and its *prompt* is the last such text in that message.
//! The prompt's directives are the turn's script; tool steps run one per response, in order. How far
//! the script got is counted only from what follows that message: the model's tool calls after it
//! that have their result after it. Tool results inside or before the turn's message answer earlier
//! turns and change nothing, so a session can take any number of scripted turns. (Claude Code folds
//! the previous turn's tool result into the next user message, and after a cancel merges the
//! cancelled prompt, an "[Request interrupted by user]" note and the next prompt into one message.)
//!
//! Then: the first tool step not yet answered is the reply; a text step (`STREAM`, `STALL`, a
//! malformed line) reached first is the reply and ends the turn; once every tool step is answered the
//! reply is [`DONE_TEXT`]; a turn without directives gets [`DEFAULT_TEXT`]. A prompt that is a
//! mediatord reviewer's request gets a verdict instead ([`crate::review`]).

use std::collections::HashSet;
use std::time::Duration;

use crate::directive::{self, ASKED_PREFIX, Action, Directive, STALL_CLOSING, STALL_OPENING};
use crate::tools::{self, ToolCall};

/// The answer to a turn without directives, streamed in five chunks.
pub const DEFAULT_TEXT: &str = "Hello from the fake model.";
const DEFAULT_CHUNKS: &[&str] = &["Hello", " from", " the", " fake", " model."];
/// The answer once every tool step of the turn has its result.
pub const DONE_TEXT: &str = "done";

/// Agents prepend context in text parts of their own that start with one of these tags: Qwen Code
/// and Claude Code `<system-reminder>`, Gemini CLI `<session_context>` (before a session's first
/// prompt).
const CONTEXT_TAGS: &[&str] = &["<system-reminder>", "<session_context>"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// One part of a message, reduced to what the rule reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    /// A tool call the model made, by id.
    ToolCall(String),
    /// The result of the tool call with this id.
    ToolResult(String),
    /// A tool result's text (read only to say an `ASK`'s answer back).
    ResultText(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: Role,
    pub parts: Vec<Part>,
}

/// A request: the messages (system prompts left out) and the names of the tools offered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conversation {
    pub messages: Vec<Message>,
    pub tools: Vec<String>,
}

/// The model's next response, before a dialect renders it.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Streamed text; ends the turn.
    Text(Vec<String>),
    /// One tool call; the agent runs it and asks again with the result.
    Tool(ToolCall),
    /// `opening`, then the response is held open for `hold` (unless the client goes away), then
    /// `closing`; ends the turn.
    Stall { opening: String, hold: Duration, closing: String },
}

impl Reply {
    fn text(s: &str) -> Reply {
        Reply::Text(vec![s.to_owned()])
    }

    /// One line for the journal: what was answered, without file contents or commands.
    pub fn summary(&self) -> String {
        match self {
            Reply::Text(chunks) => {
                let text: String = chunks.concat();
                let head: String = text.chars().take(60).collect();
                format!(
                    "text {:?}{} ({} chunks)",
                    head,
                    if head.len() < text.len() { "..." } else { "" },
                    chunks.len()
                )
            }
            Reply::Tool(call) => match call.arguments.get("file_path").and_then(|p| p.as_str()) {
                Some(path) => format!("tool {} {path}", call.name),
                None => format!("tool {}", call.name),
            },
            Reply::Stall { hold, .. } => format!("stall {} s", hold.as_secs()),
        }
    }
}

impl Message {
    /// The last text a person wrote (or an agent wrote as the user) in this message, as opposed to
    /// tool results and context the agent attached.
    fn prompt(&self) -> Option<&str> {
        self.parts.iter().rev().find_map(|p| match p {
            Part::Text(t) if !CONTEXT_TAGS.iter().any(|tag| t.trim_start().starts_with(tag)) => {
                Some(t.as_str())
            }
            _ => None,
        })
    }
}

/// The model's reply to `conversation` (see the module doc for the rule).
pub fn reply(conversation: &Conversation) -> Reply {
    let messages = &conversation.messages;
    let latest_prompt = messages.iter().enumerate().rev().find_map(|(i, m)| match m.role {
        Role::User => m.prompt().map(|p| (i, p)),
        Role::Assistant => None,
    });
    let Some((turn, prompt)) = latest_prompt else {
        return default_reply();
    };
    // A reviewer's request is answered with a verdict (`crate::review`), not run as a script.
    if let Some(verdict) = crate::review::reply(prompt) {
        return verdict;
    }
    let script = directive::parse(prompt);
    let mut answered = answered_calls(&messages[turn + 1..]);
    let mut any_tool = false;
    let mut asked = false;
    for step in script {
        match step {
            Directive::Tool(action) => {
                any_tool = true;
                asked |= matches!(action, Action::Ask { .. });
                if answered > 0 {
                    answered -= 1;
                    continue;
                }
                return match tools::call(&action, &conversation.tools) {
                    Ok(call) => Reply::Tool(call),
                    Err(why) => Reply::Text(vec![why]),
                };
            }
            Directive::Stream(n) => return Reply::Text((0..n).map(|i| format!("tok{i} ")).collect()),
            Directive::Stall(hold) => {
                return Reply::Stall {
                    opening: STALL_OPENING.to_owned(),
                    hold,
                    closing: STALL_CLOSING.to_owned(),
                };
            }
            Directive::Invalid(why) => return Reply::Text(vec![why]),
        }
    }
    if asked {
        // The answer as the agent sent it back, on one line: what the next request carried.
        let said = parts(&messages[turn + 1..])
            .filter_map(|p| match p {
                Part::ResultText(t) => Some(t.split_whitespace().collect::<Vec<_>>().join(" ")),
                _ => None,
            })
            .last();
        return Reply::Text(vec![format!("{ASKED_PREFIX}{}", said.unwrap_or_default())]);
    }
    if any_tool { Reply::text(DONE_TEXT) } else { default_reply() }
}

fn default_reply() -> Reply {
    Reply::Text(DEFAULT_CHUNKS.iter().map(|s| (*s).to_owned()).collect())
}

/// How many of the model's tool calls in `after` have their result in `after`.
fn answered_calls(after: &[Message]) -> usize {
    let results: HashSet<&str> = parts(after)
        .filter_map(|p| match p {
            Part::ToolResult(id) => Some(id.as_str()),
            _ => None,
        })
        .collect();
    parts(after).filter(|p| matches!(p, Part::ToolCall(id) if results.contains(id.as_str()))).count()
}

fn parts(messages: &[Message]) -> impl Iterator<Item = &Part> {
    messages.iter().flat_map(|m| &m.parts)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn user(parts: &[Part]) -> Message {
        Message { role: Role::User, parts: parts.to_vec() }
    }
    fn assistant(parts: &[Part]) -> Message {
        Message { role: Role::Assistant, parts: parts.to_vec() }
    }
    fn text(s: &str) -> Part {
        Part::Text(s.to_owned())
    }
    fn call(id: &str) -> Part {
        Part::ToolCall(id.to_owned())
    }
    fn result(id: &str) -> Part {
        Part::ToolResult(id.to_owned())
    }
    fn conv(messages: Vec<Message>) -> Conversation {
        Conversation { messages, tools: vec!["Bash".into(), "mcp__acp__Write".into()] }
    }
    fn write_call(path: &str, content: &str) -> Reply {
        Reply::Tool(ToolCall {
            name: "mcp__acp__Write".into(),
            arguments: json!({"file_path": path, "content": content}),
        })
    }

    #[test]
    fn a_prompt_without_directives_gets_the_default_text() {
        assert_eq!(reply(&conv(vec![user(&[text("hi")])])), default_reply());
        assert_eq!(reply(&conv(vec![])), default_reply());
        assert_eq!(DEFAULT_CHUNKS.concat(), DEFAULT_TEXT);
    }

    #[test]
    fn a_write_turn_calls_the_tool_then_says_done_after_the_result() {
        let first = vec![user(&[text("<system-reminder>ctx</system-reminder>"), text("WRITE /w/a one")])];
        assert_eq!(reply(&conv(first.clone())), write_call("/w/a", "one"));
        let mut after = first;
        after.push(assistant(&[call("c1")]));
        after.push(user(&[result("c1")]));
        assert_eq!(reply(&conv(after)), Reply::text(DONE_TEXT));
    }

    #[test]
    fn a_second_write_in_the_same_session_calls_the_tool_again() {
        // The bug this rule fixes: the earlier turn's tool result must not end the next turn.
        let mut m = vec![
            user(&[text("WRITE /w/a one")]),
            assistant(&[call("c1")]),
            user(&[result("c1")]),
            assistant(&[text("done")]),
            user(&[text("WRITE /w/b two")]),
        ];
        assert_eq!(reply(&conv(m.clone())), write_call("/w/b", "two"));
        m.push(assistant(&[call("c2")]));
        m.push(user(&[result("c2")]));
        assert_eq!(reply(&conv(m)), Reply::text(DONE_TEXT));
    }

    #[test]
    fn a_tool_result_folded_into_the_next_prompt_belongs_to_the_earlier_turn() {
        // Claude Code after a cancelled tool call: the dangling result, a note, and the new prompt in
        // one user message.
        let m = vec![
            user(&[text("WRITE /w/a one")]),
            assistant(&[call("c1")]),
            user(&[result("c1"), text("[Request interrupted by user for tool use]"), text("WRITE /w/b two")]),
        ];
        assert_eq!(reply(&conv(m.clone())), write_call("/w/b", "two"));
        let mut hi = m;
        hi.pop();
        hi.push(user(&[result("c1"), text("[Request interrupted by user for tool use]"), text("hi")]));
        assert_eq!(reply(&conv(hi)), default_reply());
    }

    #[test]
    fn after_a_cancelled_stall_the_merged_message_answers_its_last_prompt() {
        // Claude Code after a cancel during the model's answer: the partial answer is dropped and the
        // cancelled prompt, the interruption note and the next prompt become one user message.
        let m = vec![user(&[
            text("<system-reminder>ctx</system-reminder>"),
            text("STALL"),
            text("[Request interrupted by user]"),
            text("hi"),
        ])];
        assert_eq!(reply(&conv(m)), default_reply());
        let m = vec![user(&[text("STALL"), text("[Request interrupted by user]"), text("WRITE /w/b two")])];
        assert_eq!(reply(&conv(m)), write_call("/w/b", "two"));
    }

    #[test]
    fn context_attached_to_a_tool_result_does_not_start_a_new_turn() {
        let m = vec![
            user(&[text("WRITE /w/a one")]),
            assistant(&[call("c1")]),
            user(&[result("c1"), text("<system-reminder>the file changed</system-reminder>")]),
        ];
        assert_eq!(reply(&conv(m)), Reply::text(DONE_TEXT));
    }

    #[test]
    fn tool_steps_run_one_per_response_in_order_then_a_text_step_ends_the_turn() {
        let mut m = vec![user(&[text("WRITE /w/a one\nSHELL echo hi\nSTREAM 2")])];
        assert_eq!(reply(&conv(m.clone())), write_call("/w/a", "one"));
        m.extend([assistant(&[call("c1")]), user(&[result("c1")])]);
        let Reply::Tool(shell) = reply(&conv(m.clone())) else { panic!("expected the shell call") };
        assert_eq!((shell.name.as_str(), &shell.arguments["command"]), ("Bash", &json!("echo hi")));
        m.extend([assistant(&[call("c2")]), user(&[result("c2")])]);
        assert_eq!(reply(&conv(m)), Reply::Text(vec!["tok0 ".into(), "tok1 ".into()]));
    }

    #[test]
    fn an_ask_turn_ends_saying_the_answer_its_tool_result_carried() {
        let tools = vec!["ask_user_question".to_owned()];
        let prompt = user(&[text("ASK Which? | a | b")]);
        let asking = reply(&Conversation { messages: vec![prompt.clone()], tools: tools.clone() });
        assert!(matches!(&asking, Reply::Tool(c) if c.name == "ask_user_question"), "{asking:?}");
        let answer = Part::ResultText("User has provided the following answers:\n**Question**: b".into());
        let messages = vec![prompt, assistant(&[call("q1")]), user(&[result("q1"), answer])];
        let got = reply(&Conversation { messages, tools });
        assert_eq!(got, Reply::text("answered: User has provided the following answers: **Question**: b"));
    }

    #[test]
    fn a_call_without_its_result_is_not_answered() {
        let m = vec![user(&[text("WRITE /w/a one")]), assistant(&[call("c1")]), user(&[result("other")])];
        assert_eq!(reply(&conv(m)), write_call("/w/a", "one"));
    }

    #[test]
    fn stall_and_invalid_lines_are_text_steps() {
        let stall = reply(&conv(vec![user(&[text("STALL 3")])]));
        assert!(matches!(stall, Reply::Stall { hold, .. } if hold == Duration::from_secs(3)), "{stall:?}");
        let Reply::Text(why) = reply(&conv(vec![user(&[text("STREAM lots")])])) else { panic!("text") };
        assert!(why.concat().contains("STREAM wants"), "{why:?}");
    }

    #[test]
    fn a_tool_the_agent_does_not_offer_is_answered_as_text() {
        let mut c = conv(vec![user(&[text("SHELL ls")])]);
        c.tools = vec!["Read".into()];
        let Reply::Text(why) = reply(&c) else { panic!("text") };
        assert!(why.concat().contains("offers none"), "{why:?}");
    }
}

//! From a scripted [`Action`] to a call of one of the tools the agent offered.
//!
//! Agents name their tools differently (Qwen Code `write_file`, Claude Code through Zed's adapter
//! `mcp__acp__Write`, which goes through ACP `fs/write_text_file`, or its own `Write`). The fake
//! model picks the first known name the request offers; the arguments are the same for all of them.

use serde_json::{Value, json};

use crate::directive::Action;

/// Write tools, best first: the ACP-routed `mcp__acp__Write` before Claude Code's built-in `Write`.
const WRITE_TOOLS: &[&str] = &["write_file", "mcp__acp__Write", "Write"];
/// Shell tools, best first.
const SHELL_TOOLS: &[&str] = &["run_shell_command", "mcp__acp__Bash", "Bash"];

/// Question tools: Qwen Code's (which asks through ACP `session/request_permission`).
const ASK_TOOLS: &[&str] = &["ask_user_question"];

/// A tool call the model makes, before the dialect gives it an id.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: Value,
}

/// The call for `action` among the `offered` tool names, or why there is none (answered as text,
/// so a test sees the reason instead of an agent error about an unknown tool).
pub fn call(action: &Action, offered: &[String]) -> Result<ToolCall, String> {
    let (known, arguments) = match action {
        Action::Write { path, content } => (WRITE_TOOLS, json!({ "file_path": path, "content": content })),
        Action::Shell { command } => {
            (SHELL_TOOLS, json!({ "command": command, "description": "Run the command the test scripted" }))
        }
        Action::Ask { question, options } => {
            let options: Vec<Value> =
                options.iter().map(|o| json!({ "label": o, "description": format!("Choose {o}") })).collect();
            let asked = json!({ "question": question, "header": "Question", "options": options, "multiSelect": false });
            (ASK_TOOLS, json!({ "questions": [asked] }))
        }
    };
    match known.iter().find(|k| offered.iter().any(|o| o == *k)) {
        Some(name) => Ok(ToolCall { name: (*name).to_owned(), arguments }),
        None => {
            Err(format!("fake model: the agent offers none of the tools {known:?} (offered: {offered:?})"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_acp_routed_write_tool_wins_over_the_built_in_one() {
        let write = Action::Write { path: "/w/a".into(), content: "x".into() };
        let c = call(&write, &names(&["Read", "Write", "mcp__acp__Write"])).expect("a write tool");
        assert_eq!(c.name, "mcp__acp__Write");
        assert_eq!(c.arguments, json!({"file_path": "/w/a", "content": "x"}));
        assert_eq!(call(&write, &names(&["write_file", "edit"])).expect("qwen").name, "write_file");
    }

    #[test]
    fn shell_goes_to_the_offered_shell_tool() {
        let shell = Action::Shell { command: "ls".into() };
        let c = call(&shell, &names(&["Bash", "Glob"])).expect("a shell tool");
        assert_eq!((c.name.as_str(), &c.arguments["command"]), ("Bash", &json!("ls")));
        assert_eq!(call(&shell, &names(&["run_shell_command"])).expect("qwen").name, "run_shell_command");
    }

    #[test]
    fn ask_calls_qwens_question_tool_with_one_question_and_its_options() {
        let ask = Action::Ask { question: "Which?".into(), options: vec!["a".into(), "b".into()] };
        let c = call(&ask, &names(&["read_file", "ask_user_question"])).expect("qwen's tool");
        assert_eq!(c.name, "ask_user_question");
        let q = &c.arguments["questions"][0];
        assert_eq!((q["question"].as_str(), q["header"].as_str()), (Some("Which?"), Some("Question")));
        assert_eq!(q["options"][1]["label"], "b");
        assert!(call(&ask, &names(&["Bash"])).is_err(), "an agent without a question tool");
    }

    #[test]
    fn no_known_tool_is_an_error_naming_what_was_offered() {
        let err = call(&Action::Shell { command: "ls".into() }, &names(&["Read"])).expect_err("no shell");
        assert!(err.contains("Read") && err.contains("Bash"), "{err}");
    }
}

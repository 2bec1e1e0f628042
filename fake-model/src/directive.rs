//! The script language: one directive per line of the user's prompt.
//!
//! | line | step |
//! |---|---|
//! | `WRITE <abs-path> <text>` | call the agent's write tool: `<text>` into `<abs-path>` |
//! | `SHELL <command>` | call the agent's shell tool with `<command>` |
//! | `ASK <question> \| <option> \| <option>...` | call the agent's question tool (Qwen Code `ask_user_question`); the turn then ends saying the answer it was given ([`ASKED_PREFIX`]) |
//! | `STREAM <n>` | answer `n` text chunks `tok0 `, `tok1 `, ... (ends the turn) |
//! | `STALL [seconds]` | answer [`STALL_OPENING`], hold the response open, then [`STALL_CLOSING`] |
//!
//! Keywords are upper case and start the (trimmed) line; agents wrap the prompt in context of their
//! own, so a directive may sit on any line. Lines that are not directives are ignored.

use std::time::Duration;

/// The most chunks one `STREAM` answers: far more than any test needs, few enough that a typo
/// (`STREAM 100000000`) cannot make a response of gigabytes.
pub const MAX_STREAM_CHUNKS: usize = 10_000;

/// How long `STALL` holds a response open when no duration is given, and the most it accepts. Longer
/// than any turn deadline of the e2e suite (60 s), so a cancel test always cancels a response still
/// held; short enough that a forgotten stall ends by itself.
pub const STALL_LIMIT: Duration = Duration::from_secs(300);

/// What a stalled response says before it holds (a test waits for this text to know the model call
/// is in flight), and what it says when the hold ends.
pub const STALL_OPENING: &str = "stalling...";
pub const STALL_CLOSING: &str = " resumed.";

/// How the model's reply after an `ASK` starts: the tool result it was sent (the person's answer as
/// the agent gave it back), so a test sees that the model's next request carried the answer.
pub const ASKED_PREFIX: &str = "answered: ";

/// Options an `ASK` takes: Qwen Code's question tool wants 2 to 4.
const ASK_OPTIONS: std::ops::RangeInclusive<usize> = 2..=4;

/// Written by `WRITE <path>` when the line gives no text.
const DEFAULT_WRITE_TEXT: &str = "hello";

/// One scripted step of a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Directive {
    /// A tool call the agent runs and answers with a result; the turn continues after it.
    Tool(Action),
    /// `n` streamed text chunks; ends the turn.
    Stream(usize),
    /// A response held open for this long; ends the turn.
    Stall(Duration),
    /// A line that starts with a keyword but does not parse: answered as text saying why.
    Invalid(String),
}

/// What a tool step asks the agent to do, independent of the agent's tool names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Write {
        path: String,
        content: String,
    },
    Shell {
        command: String,
    },
    /// One question with its options.
    Ask {
        question: String,
        options: Vec<String>,
    },
}

/// The directives of a prompt text, in order.
pub fn parse(text: &str) -> Vec<Directive> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Directive> {
    let line = line.trim();
    let (keyword, rest) = match line.split_once(char::is_whitespace) {
        Some((k, r)) => (k, r.trim()),
        None => (line, ""),
    };
    let invalid = |why: &str| Some(Directive::Invalid(format!("fake model: {why} (in {line:?})")));
    match keyword {
        "WRITE" => {
            let (path, content) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            if !path.starts_with('/') {
                return invalid("WRITE wants an absolute path, then the text");
            }
            let content = content.trim_start();
            let content = if content.is_empty() { DEFAULT_WRITE_TEXT } else { content };
            Some(Directive::Tool(Action::Write { path: path.to_owned(), content: content.to_owned() }))
        }
        "SHELL" if rest.is_empty() => invalid("SHELL wants a command"),
        "SHELL" => Some(Directive::Tool(Action::Shell { command: rest.to_owned() })),
        "ASK" => {
            let mut fields = rest.split('|').map(str::trim);
            let question = fields.next().unwrap_or_default().to_owned();
            let options: Vec<String> = fields.filter(|o| !o.is_empty()).map(str::to_owned).collect();
            if question.is_empty() || !ASK_OPTIONS.contains(&options.len()) {
                return invalid("ASK wants a question, then 2 to 4 options, each after a |");
            }
            Some(Directive::Tool(Action::Ask { question, options }))
        }
        "STREAM" => match rest.parse::<usize>() {
            Ok(n) if (1..=MAX_STREAM_CHUNKS).contains(&n) => Some(Directive::Stream(n)),
            _ => invalid(&format!("STREAM wants a chunk count from 1 to {MAX_STREAM_CHUNKS}")),
        },
        "STALL" if rest.is_empty() => Some(Directive::Stall(STALL_LIMIT)),
        "STALL" => match rest.parse::<u64>() {
            Ok(s) if Duration::from_secs(s) <= STALL_LIMIT => Some(Directive::Stall(Duration::from_secs(s))),
            _ => invalid(&format!("STALL wants seconds from 0 to {}", STALL_LIMIT.as_secs())),
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &str, content: &str) -> Directive {
        Directive::Tool(Action::Write { path: path.into(), content: content.into() })
    }

    #[test]
    fn directives_are_found_on_any_line_in_order_and_other_lines_are_ignored() {
        let text =
            "context the agent added\n  WRITE /tmp/a.txt two words  \nsome prose\nSHELL ls -l /tmp\nSTREAM 3";
        assert_eq!(
            parse(text),
            vec![
                write("/tmp/a.txt", "two words"),
                Directive::Tool(Action::Shell { command: "ls -l /tmp".into() }),
                Directive::Stream(3),
            ]
        );
    }

    #[test]
    fn write_keeps_inner_spacing_and_defaults_its_text() {
        assert_eq!(parse("WRITE /a b  c"), vec![write("/a", "b  c")]);
        assert_eq!(parse("WRITE /a"), vec![write("/a", DEFAULT_WRITE_TEXT)]);
    }

    #[test]
    fn ask_takes_a_question_and_two_to_four_options() {
        let got = parse("ASK Which library? | jiff | chrono ");
        let want =
            Action::Ask { question: "Which library?".into(), options: vec!["jiff".into(), "chrono".into()] };
        assert_eq!(got, vec![Directive::Tool(want)]);
        for line in ["ASK", "ASK Which? | one", "ASK | a | b", "ASK q | a | b | c | d | e"] {
            assert!(
                matches!(&parse(line)[..], [Directive::Invalid(why)] if why.contains("ASK wants")),
                "{line}"
            );
        }
    }

    #[test]
    fn stall_defaults_to_the_limit_and_takes_seconds() {
        assert_eq!(parse("STALL"), vec![Directive::Stall(STALL_LIMIT)]);
        assert_eq!(parse("STALL 2"), vec![Directive::Stall(Duration::from_secs(2))]);
    }

    #[test]
    fn keywords_are_whole_upper_case_words() {
        assert_eq!(parse("write /a b\nWRITER /a b\nSTREAMING 3\nhello WRITE /a b"), vec![]);
    }

    #[test]
    fn malformed_directives_are_invalid_steps_that_say_why() {
        for line in
            ["WRITE relative.txt x", "WRITE", "SHELL", "STREAM", "STREAM 0", "STREAM x", "STREAM 10001"]
        {
            let got = parse(line);
            assert!(matches!(&got[..], [Directive::Invalid(why)] if why.contains(line)), "{line}: {got:?}");
        }
        let too_long = format!("STALL {}", STALL_LIMIT.as_secs() + 1);
        assert!(matches!(&parse(&too_long)[..], [Directive::Invalid(_)]));
    }
}

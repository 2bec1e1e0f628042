//! The demo agent's directives: a prompt's first word and its arguments, read into a
//! [`Directive`] that a [`super::turn::Turn`] carries out.

use super::*;

/// What a prompt asks for.
#[derive(Debug, PartialEq)]
pub(super) enum Directive<'a> {
    Echo,
    Write {
        path: &'a str,
        text: &'a str,
    },
    Edit {
        path: &'a str,
        text: &'a str,
    },
    /// Ask to apply a patch making `path` hold `text`; the approving option carries the patch as
    /// its `data.diff`.
    Patch {
        path: &'a str,
        text: &'a str,
    },
    Mode {
        id: &'a str,
    },
    Showcase,
    Hostile,
    Shell {
        command: &'a str,
    },
    /// A tool call of kind `read` that asks permission first (a reviewer trusted with reads
    /// answers it alone); nothing is read.
    Look {
        path: &'a str,
    },
    Permissions {
        count: u32,
    },
    /// One permission request offering `count` options.
    Options {
        count: u32,
    },
    /// Qwen Code's `ask_user_question`.
    Ask,
    /// `elicitation/create` in form mode.
    Elicit,
    /// `elicitation/create` in URL mode; `complete_after_ms`: `elicitation/complete` then, while
    /// the question is pending.
    ElicitUrl {
        url: &'a str,
        complete_after_ms: Option<u64>,
    },
    /// `elicitation/create` with params of the prompt's (bad-input tests).
    ElicitRaw {
        params: &'a str,
    },
    /// One unbreakable word of `bytes` letters, streamed in `chunks` message chunks, `rate` a second.
    Token {
        bytes: usize,
        chunks: u64,
        rate: f64,
    },
    Stream {
        count: u64,
        rate: Option<f64>,
    },
    Read {
        path: &'a str,
        line: Option<u64>,
        limit: Option<u64>,
    },
    FsWrite {
        path: &'a str,
        text: &'a str,
    },
    /// Written by the agent process itself, as an agent's own tool would (the sandbox's concern).
    Put {
        path: &'a str,
        text: &'a str,
    },
    /// Run by the agent itself through `sh -c`, never asking.
    Run {
        command: &'a str,
    },
    Sleep {
        ms: u64,
    },
    Hold {
        ms: u64,
    },
    Stall,
    Crash {
        code: i32,
    },
    /// `None`: the two classic lines; `Some(n)`: n numbered lines.
    Malformed {
        count: Option<u64>,
    },
    Early {
        count: u64,
        bytes: usize,
    },
    IgnoreSigterm,
    Linger,
    Pid,
    /// The value of an environment variable named `DEMO_*` (what an agent's settings added).
    Env {
        name: &'a str,
    },
    /// Write `NAME=value` of a `DEMO_*` variable to stderr, and fail the prompt with an error
    /// holding it (what a failing agent does with its API key; the daemon must redact it).
    Leak {
        name: &'a str,
    },
    /// Start a process that leaves the agent's process group, its pid written to the file.
    Escapee {
        pidfile: &'a str,
    },
    EchoMeta,
    /// A directive word with unusable arguments; the text is the usage line.
    Usage(&'static str),
}

/// Reads the first word of the first non-empty line of `text`.
pub(super) fn parse_directive(text: &str) -> Directive<'_> {
    let Some(line) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return Directive::Echo;
    };
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim_start()),
        None => (line, ""),
    };
    let mut args = rest.split_whitespace();
    // A file's text is the rest of the prompt, later lines and trailing blanks too.
    let after_word = &text[text.find(line).map_or(text.len(), |at| at + word.len())..];
    let file_text = first_and_tail(after_word.trim_start());
    match word.to_ascii_lowercase().as_str() {
        "write" => match file_text {
            Some((path, text)) => Directive::Write { path, text },
            None => Directive::Usage("usage: write <relative-path> <text...>"),
        },
        "edit" => match file_text {
            Some((path, text)) => Directive::Edit { path, text },
            None => Directive::Usage("usage: edit <relative-path> <text...>"),
        },
        "patch" => match file_text {
            Some((path, text)) => Directive::Patch { path, text },
            None => Directive::Usage("usage: patch <relative-path> <text...>"),
        },
        "mode" => match args.next() {
            Some(id) => Directive::Mode { id },
            None => Directive::Usage("usage: mode <mode-id>"),
        },
        "showcase" => Directive::Showcase,
        "hostile" => Directive::Hostile,
        "fswrite" => match first_and_tail(rest) {
            Some((path, text)) => Directive::FsWrite { path, text },
            None => Directive::Usage("usage: fswrite <path> <text...>"),
        },
        "put" => match first_and_tail(rest) {
            Some((path, text)) => Directive::Put { path, text },
            None => Directive::Usage("usage: put <path> <text...>"),
        },
        "run" if rest.is_empty() => Directive::Usage("usage: run <command...>"),
        "run" => Directive::Run { command: rest },
        "look" => match args.next() {
            Some(path) => Directive::Look { path },
            None => Directive::Usage("usage: look <path>"),
        },
        "shell" => {
            // The command is the rest of the prompt, later lines too (a script, a heredoc).
            let start = text.find(line).map_or(text.len(), |at| at + word.len());
            match text[start..].trim() {
                "" => Directive::Usage("usage: shell <command...>"),
                command => Directive::Shell { command },
            }
        }
        "permissions" => match args.next().map(str::parse::<u32>) {
            Some(Ok(count)) => Directive::Permissions { count: count.min(MAX_PERMISSIONS) },
            _ => Directive::Usage("usage: permissions <K>"),
        },
        "token" => match (
            args.next().map(str::parse::<usize>),
            args.next().map(str::parse::<u64>),
            args.next().map(str::parse::<f64>),
        ) {
            (Some(Ok(bytes)), Some(Ok(chunks)), Some(Ok(rate)))
                if chunks > 0 && rate.is_finite() && rate > 0.0 =>
            {
                Directive::Token {
                    bytes: bytes.min(MAX_TOKEN_BYTES),
                    chunks: chunks.min(MAX_STREAM_CHUNKS),
                    rate,
                }
            }
            _ => Directive::Usage("usage: token <bytes> <chunks> <per_sec>"),
        },
        "options" => match args.next().map(str::parse::<u32>) {
            Some(Ok(count)) if count > 0 => Directive::Options { count: count.min(MAX_OPTIONS) },
            _ => Directive::Usage("usage: options <N> (1 or more)"),
        },
        "stream" => {
            let count = args.next().map(str::parse::<u64>);
            let rate = args.next().map(str::parse::<f64>);
            match (count, rate) {
                (Some(Ok(count)), None) => {
                    Directive::Stream { count: count.min(MAX_STREAM_CHUNKS), rate: None }
                }
                (Some(Ok(count)), Some(Ok(rate))) if rate.is_finite() && rate > 0.0 => {
                    Directive::Stream { count: count.min(MAX_STREAM_CHUNKS), rate: Some(rate) }
                }
                _ => Directive::Usage("usage: stream <N> [<rate_per_sec>]"),
            }
        }
        "read" => {
            let path = args.next();
            let line = args.next().map(str::parse::<u64>).transpose();
            let limit = args.next().map(str::parse::<u64>).transpose();
            match (path, line, limit) {
                (Some(path), Ok(line), Ok(limit)) => Directive::Read { path, line, limit },
                _ => Directive::Usage("usage: read <path> [line] [limit]"),
            }
        }
        "sleep" => match args.next().map(str::parse::<u64>) {
            Some(Ok(ms)) => Directive::Sleep { ms },
            _ => Directive::Usage("usage: sleep <ms>"),
        },
        "hold" => match args.next().map(str::parse::<u64>) {
            Some(Ok(ms)) => Directive::Hold { ms },
            _ => Directive::Usage("usage: hold <ms>"),
        },
        "stall" => Directive::Stall,
        "crash" => match args.next().map(str::parse::<i32>).transpose() {
            Ok(code) => Directive::Crash { code: code.unwrap_or(DEFAULT_CRASH_CODE) },
            Err(_) => Directive::Usage("usage: crash [code]"),
        },
        "malformed" => match args.next().map(str::parse::<u64>).transpose() {
            Ok(count) => Directive::Malformed { count: count.map(|n| n.min(MAX_MALFORMED_LINES)) },
            Err(_) => Directive::Usage("usage: malformed [N]"),
        },
        "early" => match (args.next().map(str::parse::<u64>), args.next().map(str::parse::<usize>)) {
            (Some(Ok(count)), Some(Ok(bytes))) => Directive::Early {
                count: count.min(MAX_EARLY_UPDATES),
                bytes: bytes.min(MAX_EARLY_UPDATE_BYTES),
            },
            _ => Directive::Usage("usage: early <N> <bytes>"),
        },
        "ignore-sigterm" => Directive::IgnoreSigterm,
        "linger" => Directive::Linger,
        "pid" => Directive::Pid,
        // Only `DEMO_*`: the demo agent must never become a way to read the daemon's credentials.
        "env" => match args.next() {
            Some(name) if name.starts_with(DEMO_ENV_PREFIX) => Directive::Env { name },
            _ => Directive::Usage("usage: env <DEMO_NAME> (variables named DEMO_* only)"),
        },
        "leak" => match args.next() {
            Some(name) if name.starts_with(DEMO_ENV_PREFIX) => Directive::Leak { name },
            _ => Directive::Usage("usage: leak <DEMO_NAME> (variables named DEMO_* only)"),
        },
        "escapee" => match args.next() {
            Some(pidfile) => Directive::Escapee { pidfile },
            None => Directive::Usage("usage: escapee <pidfile>"),
        },
        "echo-meta" => Directive::EchoMeta,
        "ask" => Directive::Ask,
        "elicit" => Directive::Elicit,
        "elicit-url" => match (args.next(), args.next().map(str::parse::<u64>).transpose()) {
            (Some(url), Ok(complete_after_ms)) => Directive::ElicitUrl { url, complete_after_ms },
            _ => Directive::Usage("usage: elicit-url <url> [complete-after-ms]"),
        },
        "elicit-raw" => match text[text.find(line).map_or(text.len(), |at| at + word.len())..].trim() {
            "" => Directive::Usage("usage: elicit-raw <json params>"),
            params => Directive::ElicitRaw { params },
        },
        _ => Directive::Echo,
    }
}

/// The first word of `rest` and the rest of the line after it, verbatim apart from leading
/// whitespace.
pub(super) fn first_and_tail(rest: &str) -> Option<(&str, &str)> {
    let (first, tail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    (!first.is_empty()).then(|| (first, tail.trim_start()))
}

/// Splits `text` into at most `parts` non-empty pieces on char boundaries; they concatenate back to
/// `text`. Fewer pieces when `text` has fewer chars; none for an empty text.
pub(super) fn split_chunks(text: &str, parts: usize) -> Vec<&str> {
    let boundaries: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let chars = boundaries.len();
    let parts = parts.min(chars);
    (0..parts)
        .map(|k| {
            let start = boundaries[k * chars / parts];
            let end = boundaries.get((k + 1) * chars / parts).copied().unwrap_or(text.len());
            &text[start..end]
        })
        .collect()
}

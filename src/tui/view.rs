//! Drawing the client: a bar on top (the session, its agent, mode and model, the connection), the
//! transcript, the card of a permission request in front, the queued prompts, the input line and
//! a line of keys (or the last word to the person). Pure: a function of [`App`] and the frame's
//! size, tested on ratatui's `TestBackend`.
//!
//! Every text from the daemon or the agent becomes spans through [`super::shown`]; this file never
//! puts such text in a span itself.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Position, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use serde_json::Value;
use unicode_width::UnicodeWidthChar as _;

use super::app::{App, Link, Mode, Overlay, key_for, options};
use super::markdown;
use super::model::{Entry, Item, Level, Permission};
use super::shown::{span, spans};
use super::theme::Theme;
use crate::present::{self, Bounds, Section, Tone};

/// Characters of one message or thought drawn (its end); the rest is counted. The model keeps
/// more (`MAX_TEXT`), the screen needs less, and drawing is per frame.
pub(crate) const VIEW_TEXT: usize = 64 * 1024;
/// How much of a tool call's content the transcript shows; its card shows more.
const TOOL_BOUNDS: Bounds = Bounds { lines_per_section: 12, chars_per_line: 240 };
/// Lines of a shell command's output shown.
const SHELL_LINES: usize = 20;
/// A section of one line at most this long (with its heading) is drawn on one row.
const INLINE_SECTION_CHARS: usize = 120;
/// Options listed at once on a card (a window that follows the highlighted one); the whole
/// request (`v`) lists them all.
const CARD_OPTION_ROWS: usize = 6;
/// The share of the screen below the bar a card may take, in percent.
const CARD_SHARE: u16 = 70;

/// Wraps `line` to `width` columns: at the last blank that fits when there is one, else at the
/// width (a long word is cut). A wide character never straddles two rows.
pub(crate) fn wrap(line: Line<'static>, width: usize) -> Vec<Line<'static>> {
    if width == 0 || line.width() <= width {
        return vec![line];
    }
    let cells: Vec<(char, Style)> =
        line.spans.iter().flat_map(|s| s.content.chars().map(move |c| (c, s.style))).collect();
    let mut rows = Vec::new();
    let mut start = 0;
    while start < cells.len() {
        let mut used = 0;
        let mut end = start;
        let mut last_blank = None;
        while end < cells.len() {
            let w = cells[end].0.width().unwrap_or(0);
            if used + w > width && end > start {
                break;
            }
            used += w;
            if cells[end].0 == ' ' {
                last_blank = Some(end);
            }
            end += 1;
        }
        // Break after the last blank, unless the word that would move cannot fit a row of its
        // own either (a path, a hash, an escaped sequence): then fill this row and cut it.
        let cut = match last_blank {
            Some(b) if end < cells.len() && b > start => {
                let word: usize = cells[b + 1..]
                    .iter()
                    .take_while(|(c, _)| *c != ' ')
                    .map(|(c, _)| c.width().unwrap_or(0))
                    .sum();
                if word > width { end } else { b + 1 }
            }
            _ => end,
        };
        rows.push(join(&cells[start..cut]));
        start = cut;
    }
    rows
}

/// Cells back into spans, one per run of a style.
fn join(cells: &[(char, Style)]) -> Line<'static> {
    let mut spans: Vec<Span<'static>> = Vec::new();
    let mut text = String::new();
    let mut style = cells.first().map_or(Style::new(), |c| c.1);
    for &(c, s) in cells {
        if s != style {
            spans.push(Span::styled(std::mem::take(&mut text), style));
            style = s;
        }
        text.push(c);
    }
    if !text.is_empty() {
        spans.push(Span::styled(text, style));
    }
    Line::from(spans)
}

/// The last `max` characters of `text`, and how many came before them.
fn tail(text: &str, max: usize) -> (&str, usize) {
    let count = text.chars().count();
    if count <= max {
        return (text, 0);
    }
    let skip = count - max;
    let at = text.char_indices().nth(skip).map_or(text.len(), |(i, _)| i);
    (&text[at..], skip)
}

/// Lines of plain text (one per line of it), in `style`.
fn text_lines(text: &str, style: Style, indent: &str, theme: Theme) -> Vec<Line<'static>> {
    text.split('\n')
        .map(|l| {
            let mut line = vec![Span::raw(indent.to_owned())];
            line.extend(spans(l, style, theme));
            Line::from(line)
        })
        .collect()
}

/// Who sent a prompt or ran a command, for a label: `you` for this client, else the client id as
/// others chose it, escaped (labels are built with `format!`, not through [`spans`]).
fn who(app: &App, client: Option<&str>) -> String {
    match client {
        Some(c) if app.session.me.as_deref() == Some(c) => "you".to_owned(),
        Some(c) => crate::text::escape(c).into_owned(),
        None => "someone".to_owned(),
    }
}

fn tone_style(tone: Tone, theme: Theme) -> Style {
    match tone {
        Tone::Plain => theme.text(),
        Tone::Added => theme.added(),
        Tone::Removed => theme.removed(),
        Tone::Hunk => theme.hunk(),
        Tone::Note => theme.dim(),
    }
}

/// A presented section: its heading, its lines, what it left out. A section of one short line
/// is one row (`cwd: /w`).
fn section_lines(section: &Section, indent: &str, theme: Theme) -> Vec<Line<'static>> {
    let t = theme;
    let row = |line: &present::Line, lead: Vec<Span<'static>>| {
        let mut row = lead;
        row.extend(spans(&line.text, tone_style(line.tone, t), t));
        if line.cut_chars > 0 {
            row.push(Span::styled(format!("…⟪+{} characters⟫", line.cut_chars), t.mark()));
        }
        Line::from(row)
    };
    if let [only] = section.lines.as_slice()
        && section.omitted_lines == 0
        && only.tone == Tone::Plain
        && only.text.chars().count() + section.heading.chars().count() <= INLINE_SECTION_CHARS
    {
        let lead =
            vec![Span::raw(indent.to_owned()), Span::styled(format!("{}: ", section.heading), t.dim())];
        return vec![row(only, lead)];
    }
    let mut out =
        vec![Line::from(vec![Span::raw(indent.to_owned()), Span::styled(section.heading.clone(), t.dim())])];
    let inner = format!("{indent}  ");
    out.extend(section.lines.iter().map(|l| row(l, vec![Span::raw(inner.clone())])));
    if section.omitted_lines > 0 {
        out.push(Line::from(vec![
            Span::raw(inner),
            Span::styled(format!("⟪… {} more lines⟫", section.omitted_lines), t.mark()),
        ]));
    }
    out
}

fn status_style(status: &str, theme: Theme) -> Style {
    match status {
        "completed" => theme.ok(),
        "failed" => theme.error(),
        _ => theme.warn(),
    }
}

/// One timeline entry as (unwrapped) lines.
fn entry_lines(app: &App, item: &Item) -> Vec<Line<'static>> {
    let t = app.theme;
    match &item.entry {
        Entry::Prompt { who: client, text, .. } => {
            let mut lines = vec![Line::default()];
            let mut first = vec![Span::styled(format!("{} › ", who(app, client.as_deref())), t.user())];
            let mut rest = text.split('\n');
            first.extend(spans(rest.next().unwrap_or(""), t.bold(), t));
            lines.push(Line::from(first));
            lines.extend(rest.map(|l| {
                let mut row = vec![Span::raw("  ")];
                row.extend(spans(l, t.bold(), t));
                Line::from(row)
            }));
            lines
        }
        Entry::Message { text, .. } => {
            let (shown, skipped) = tail(text, VIEW_TEXT);
            let mut lines = Vec::new();
            if skipped > 0 {
                lines.push(Line::from(Span::styled(
                    format!("⟪{skipped} earlier characters not shown⟫"),
                    t.mark(),
                )));
            }
            lines.extend(markdown::lines(shown, t));
            lines
        }
        Entry::Thought { text, .. } => {
            let (shown, skipped) = tail(text, VIEW_TEXT);
            if !app.thoughts_open {
                let first = shown.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
                let cut: String = first.chars().take(60).collect();
                let more =
                    cut.len() < first.len() || shown.lines().filter(|l| !l.trim().is_empty()).count() > 1;
                let mut row = vec![Span::styled("✻ thinking: ", t.thought())];
                row.extend(spans(&cut, t.thought(), t));
                if more {
                    row.push(Span::styled(" … (t unfolds)", t.dim()));
                }
                return vec![Line::from(row)];
            }
            let mut lines = vec![Line::from(Span::styled("✻ thinking (t folds):", t.thought()))];
            if skipped > 0 {
                lines.push(Line::from(Span::styled(
                    format!("⟪{skipped} earlier characters not shown⟫"),
                    t.mark(),
                )));
            }
            lines.extend(text_lines(shown, t.thought(), "  ", t));
            lines
        }
        Entry::Content { kind } => vec![Line::from(spans(&format!("[{kind} content]"), t.dim(), t))],
        Entry::Tool { id } => {
            let Some(call) = app.session.tools.get(id).map(|c| &c.call) else { return Vec::new() };
            let shown = present::request(call, &Value::Null, TOOL_BOUNDS);
            let status = call.get("status").and_then(Value::as_str).unwrap_or("pending");
            let mut head = vec![Span::styled("⚙ ", t.dim())];
            head.extend(spans(&shown.title, t.bold(), t));
            head.push(Span::styled(" · ", t.dim()));
            head.extend(spans(&shown.kind, t.dim(), t));
            head.push(Span::styled(" · ", t.dim()));
            head.push(span(status, status_style(status, t)));
            let mut lines = vec![Line::from(head)];
            for section in shown
                .sections
                .iter()
                .filter(|s| !s.heading.starts_with("rawInput") && !s.heading.starts_with("rawOutput"))
            {
                lines.extend(section_lines(section, "  ", t));
            }
            lines
        }
        Entry::Plan { entries } => {
            let mut lines = vec![Line::from(Span::styled("Plan", t.heading()))];
            for e in entries {
                let (mark, style) = match e.get("status").and_then(Value::as_str) {
                    Some("completed") => ("[x] ", t.dim()),
                    Some("in_progress") => ("[~] ", t.bold()),
                    _ => ("[ ] ", t.text()),
                };
                let mut row = vec![Span::styled(format!("  {mark}"), style)];
                row.extend(spans(e.get("content").and_then(Value::as_str).unwrap_or(""), style, t));
                lines.push(Line::from(row));
            }
            lines
        }
        Entry::Permission { request_id } => {
            let Some(p) = app.session.permission(request_id) else { return Vec::new() };
            let call = app.session.requested_call(p);
            let title = present::request(&call, &Value::Null, Bounds::CARD).title;
            let mut row = vec![Span::styled("⚑ permission: ", t.card())];
            row.extend(spans(&title, t.text(), t));
            match app.session.resolution_text(p) {
                Some(r) => {
                    row.push(Span::styled(" — ", t.dim()));
                    row.extend(spans(&r, t.ok(), t));
                }
                None => row.push(Span::styled(" — waiting for a decision", t.warn())),
            }
            vec![Line::from(row)]
        }
        Entry::Shell { command, who: client, result, .. } => {
            let mut head = vec![Span::styled(format!("{} ran $ ", who(app, client.as_deref())), t.user())];
            head.extend(spans(command, t.bold(), t));
            let mut lines = vec![Line::from(head)];
            match result {
                None => lines.push(Line::from(Span::styled("  running…", t.dim()))),
                Some(r) => {
                    let output = r.get("output").and_then(Value::as_str).unwrap_or("");
                    let all: Vec<&str> = output.lines().collect();
                    let from = all.len().saturating_sub(SHELL_LINES);
                    if from > 0 {
                        lines.push(Line::from(Span::styled(format!("  ⟪{from} earlier lines⟫"), t.mark())));
                    }
                    for l in &all[from..] {
                        lines.extend(text_lines(l, t.text(), "  ", t));
                    }
                    let code = r.get("exitCode").map_or_else(|| "?".to_owned(), Value::to_string);
                    lines.push(Line::from(Span::styled(format!("  exit {code}"), t.dim())));
                }
            }
            lines
        }
        Entry::TurnEnd { stop_reason, error } => {
            let text = match error {
                Some(e) => format!("— turn failed: {e}"),
                None => format!("— turn ended: {stop_reason}"),
            };
            vec![Line::from(spans(&text, if error.is_some() { t.error() } else { t.dim() }, t))]
        }
        Entry::Note { text, level } => {
            let style = match level {
                Level::Info => t.dim(),
                Level::Warn => t.warn(),
                Level::Error => t.error(),
            };
            vec![Line::from(spans(&format!("· {text}"), style, t))]
        }
    }
}

/// The rows of the transcript that fill `height` rows of `width` columns, `scroll` rows up from
/// the newest; and whether the top of the session was reached.
pub(crate) fn transcript_rows(app: &App, width: usize, height: usize) -> Vec<Line<'static>> {
    let need = height + app.scroll;
    let mut rows: Vec<Line<'static>> = Vec::new();
    let mut reached_top = true;
    for item in app.session.items.iter().rev() {
        let mut wrapped: Vec<Line<'static>> =
            entry_lines(app, item).into_iter().flat_map(|l| wrap(l, width)).collect();
        wrapped.append(&mut rows);
        rows = wrapped;
        if rows.len() >= need {
            reached_top = false;
            break;
        }
    }
    if reached_top && app.session.dropped > 0 {
        let t = app.theme;
        rows.insert(
            0,
            Line::from(Span::styled(format!("⟪{} earlier entries dropped⟫", app.session.dropped), t.mark())),
        );
    }
    let end = rows.len().saturating_sub(app.scroll.min(rows.len().saturating_sub(height)));
    let start = end.saturating_sub(height);
    rows.drain(start..end).collect()
}

/// "reviewer guard asks a person: pipes a download into a shell": a reviewer's verdict that left
/// the request to the people, as the web app's card says it; a failure says so, not a verdict.
fn review_text(review: &Value) -> String {
    let field = |k: &str| review.get(k).and_then(Value::as_str).unwrap_or("");
    let name = field("reviewer");
    let reason = field("reason");
    if !field("failure").is_empty() {
        return format!("reviewer {name} failed ({}), so a person decides: {reason}", field("failure"));
    }
    let said = match field("verdict") {
        "allow" => "allows",
        "deny" => "denies",
        "escalate" => "asks a person",
        other => other,
    };
    format!("reviewer {name} {said}: {reason}")
}

/// The card of `p`: what it asks (bounded by `bounds`), then its options; and its last line, the
/// keys or the outcome.
pub(crate) fn card_lines(
    app: &App,
    p: &Permission,
    bounds: Bounds,
) -> (Vec<Line<'static>>, Vec<Line<'static>>) {
    let t = app.theme;
    let call = app.session.requested_call(p);
    let offered = p.request.get("options").cloned().unwrap_or(Value::Null);
    let shown = present::request(&call, &offered, bounds).warned(&p.request);
    let mut lines = Vec::new();
    let mut head = vec![Span::styled("wants to ", t.dim())];
    head.extend(spans(&shown.kind, t.bold(), t));
    if let Some(tool) = &shown.tool {
        head.push(Span::styled(" with ", t.dim()));
        head.extend(spans(tool, t.bold(), t));
    }
    head.push(Span::styled(": ", t.dim()));
    head.extend(spans(&shown.title, t.bold(), t));
    lines.push(Line::from(head));
    if let Some(warning) = &shown.warning {
        lines.push(Line::from(spans(&format!("⚠ {warning}"), t.error(), t)));
    }
    // The default policy goes without saying: the first answer decides.
    let mut about: Vec<String> = Vec::new();
    match p.request.get("policy").and_then(Value::as_str) {
        None | Some("first-responder") => {}
        Some(policy) => about.push(format!("policy {policy}")),
    }
    if let Some(o) = &p.originator {
        about.push(format!("prompt by {}", who(app, Some(o))));
    }
    let required = p.request.get("required").filter(|r| r.is_object());
    let votes = |key| p.partial.as_ref().and_then(|partial| partial.get(key)).and_then(Value::as_u64);
    if let Some(r) = required {
        // A require rule replaces the policy: distinct people approve, one rejection stops it.
        let got = votes("votesReceived").or_else(|| r.get("approvals").and_then(Value::as_u64)).unwrap_or(0);
        let need = r.get("quorum").and_then(Value::as_u64).unwrap_or(0);
        let rule = r.get("ruleId").and_then(Value::as_str).unwrap_or("");
        // A rule naming a group counts only its members' approvals: say whose are asked for.
        match r.get("group").and_then(Value::as_str) {
            Some(group) => about.push(format!("{got} of {need} approvals from {group} (rule {rule})")),
            None => about.push(format!("{got} of {need} approvals (rule {rule})")),
        }
    } else if p.partial.is_some() {
        let (got, need) = (votes("votesReceived").unwrap_or(0), votes("quorum").unwrap_or(0));
        about.push(format!("{got} of {need} votes"));
    }
    if let Some(at) = p.request.get("expiresAt").and_then(Value::as_u64).filter(|_| p.resolved.is_none()) {
        // `2026-11-26T01:25:42.827Z` → `01:25:42 UTC`: the date is today's, the milliseconds noise.
        let iso = crate::clock::iso8601(at);
        let time = iso.get(11..19).unwrap_or(&iso);
        about.push(format!("cancelled at {time} UTC if nobody answers"));
    }
    if !about.is_empty() {
        lines.push(Line::from(spans(&about.join(" · "), t.dim(), t)));
    }
    lines.extend(p.reviews.iter().map(|r| Line::from(spans(&review_text(r), t.warn(), t))));
    for section in &shown.sections {
        lines.extend(section_lines(section, "", t));
    }
    lines.extend(question_lines(app, p));
    let decided = p.resolved.is_some();
    let highlight = app.card_in_front().is_some_and(|f| f.request_id() == p.request_id()) && !decided;
    // The options are the card's foot, always in sight under what the request holds; what an
    // option carries (a diff, a command) is part of the body.
    let mut foot = Vec::new();
    let mut used = [false; 4];
    let count = shown.choices.len();
    let highlighted = app.option.min(count.saturating_sub(1));
    let window = if bounds == Bounds::ALL { count } else { CARD_OPTION_ROWS };
    let first = highlighted.saturating_sub(window.saturating_sub(1)).min(count.saturating_sub(window));
    if first > 0 {
        foot.push(Line::from(Span::styled(format!("  ⟪{first} options above (↑)⟫"), t.mark())));
    }
    for (i, choice) in shown.choices.iter().enumerate() {
        // The first option of each kind gets that kind's key (as `a`, `A`, `r`, `R` pick it).
        let key = key_for(&choice.kind).filter(|k| {
            let slot = "aArR".find(*k).unwrap_or(0);
            !std::mem::replace(&mut used[slot], true)
        });
        if !choice.sections.is_empty() {
            let mut heading = vec![Span::styled("option ", t.dim())];
            heading.extend(spans(&choice.name, t.bold(), t));
            heading.push(Span::styled(" carries", t.dim()));
            lines.push(Line::from(heading));
            for section in &choice.sections {
                lines.extend(section_lines(section, "  ", t));
            }
        }
        if i < first || i >= first + window {
            continue;
        }
        let selected = highlight && i == highlighted;
        let mut row = vec![Span::raw(if selected { "▸ " } else { "  " })];
        match key {
            Some(k) if !decided && app.may_write => row.push(Span::styled(format!("[{k}] "), t.key())),
            _ => row.push(Span::raw("    ")),
        }
        let name_style = if selected { t.selected() } else { t.text() };
        row.extend(spans(&choice.name, name_style, t));
        row.push(Span::styled(" (", t.dim()));
        row.extend(spans(&choice.kind, t.dim(), t));
        row.push(Span::styled(")", t.dim()));
        foot.push(Line::from(row));
    }
    if first + window < count {
        foot.push(Line::from(Span::styled(
            format!("  ⟪{} more options (↓)⟫", count - first - window),
            t.mark(),
        )));
    }
    if let Some(outcome) = app.session.resolution_text(p) {
        let mut row = vec![Span::styled("✓ decided: ", t.ok())];
        row.extend(spans(&outcome, t.ok(), t));
        row.push(Span::styled("   (Enter puts it away)", t.dim()));
        foot.push(Line::from(row));
    } else if !app.may_write {
        foot.push(Line::from(Span::styled("observer: this device sees requests and may not vote", t.dim())));
    } else if p.voting {
        foot.push(Line::from(Span::styled("voting…", t.warn())));
    } else {
        let mut row = Vec::new();
        let key = |k: &str, what: &str, row: &mut Vec<Span<'static>>| {
            row.push(Span::styled(k.to_owned(), t.key()));
            row.push(Span::raw(format!(" {what}  ")));
        };
        let kinds: Vec<String> = options(p)
            .iter()
            .filter_map(|o| o.get("kind").and_then(Value::as_str).map(str::to_owned))
            .collect();
        let has = |k: &str| kinds.iter().any(|x| x == k);
        if has("allow_once") {
            key("a", "allow once", &mut row);
        }
        if has("allow_always") || has("allow_once") {
            key("A", if has("allow_always") { "always" } else { "for the session" }, &mut row);
        }
        if has("reject_once") {
            key("r", "reject", &mut row);
        }
        if has("reject_always") || has("reject_once") {
            key("R", if has("reject_always") { "reject always" } else { "reject for the session" }, &mut row);
        }
        key("↑↓ Enter", "choose", &mut row);
        if !shown.whole() {
            key("v", "show all", &mut row);
        }
        if app.session.pending().len() > 1 {
            key("Tab", "next", &mut row);
        }
        foot.push(Line::from(row));
        if let Some(mine) = &p.my_vote {
            foot.push(Line::from(spans(&format!("your vote: {mine}"), t.dim(), t)));
        }
    }
    if let Some(e) = &p.error {
        foot.push(Line::from(spans(e, t.error(), t)));
    }
    (lines, foot)
}

/// The bar: the session, its agent, mode and model, the connection and who we are. When it does
/// not fit, the session id is shortened, then the agent and the model left out.
fn header(app: &App, width: usize) -> Line<'static> {
    let t = app.theme;
    let s = &app.session;
    let link = match &app.link {
        Link::Connecting => "connecting".to_owned(),
        Link::Replaying => "replaying".to_owned(),
        Link::Live if s.running() => "live · working".to_owned(),
        Link::Live => "live".to_owned(),
        Link::Reconnecting(why) => format!("reconnecting ({why})"),
        Link::Done => "ended".to_owned(),
    };
    let mode =
        s.modes.as_ref().and_then(|m| m.get("currentModeId")).and_then(Value::as_str).map(|m| s.mode_name(m));
    let model = s
        .models
        .as_ref()
        .and_then(|m| m.get("currentModelId"))
        .and_then(Value::as_str)
        .map(|m| s.model_name(m));
    let short: String = s.id.chars().take(12).collect::<String>() + "…";
    let id = if s.id.chars().count() > 13 { short } else { s.id.clone() };
    let tries = [
        vec![
            Some(s.id.clone()),
            app.agent.clone(),
            mode.clone(),
            model.clone(),
            Some(link.clone()),
            Some(app.identity.clone()),
        ],
        vec![
            Some(id.clone()),
            app.agent.clone(),
            mode.clone(),
            model.clone(),
            Some(link.clone()),
            Some(app.identity.clone()),
        ],
        vec![Some(id.clone()), mode.clone(), model, Some(link.clone()), Some(app.identity.clone())],
        vec![Some(id), mode, Some(link), Some(app.identity.clone())],
    ];
    let texts: Vec<String> =
        tries.iter().map(|parts| parts.iter().flatten().cloned().collect::<Vec<_>>().join(" · ")).collect();
    let fits = |text: &String| {
        crate::text::escape(text).chars().map(|c| c.width().unwrap_or(0)).sum::<usize>() <= width
    };
    let text = texts.iter().find(|t| fits(t)).unwrap_or(&texts[texts.len() - 1]);
    Line::from(spans(text, t.bar(), t)).style(t.bar())
}

fn key_line(app: &App) -> Line<'static> {
    let t = app.theme;
    if let Some((text, level)) = &app.status {
        let style = match level {
            Level::Info => t.text(),
            Level::Warn => t.warn(),
            Level::Error => t.error(),
        };
        return Line::from(spans(text, style, t));
    }
    let hint = match app.mode {
        Mode::Typing if app.answering.is_some() => {
            "Enter answer and go on · empty for no answer · Esc drop the answers"
        }
        Mode::Typing => "Enter send · Alt-Enter newline · Esc leave the line · PgUp/PgDn scroll",
        Mode::Normal if app.session.ended.is_some() => "↑↓ PgUp/PgDn scroll · t thoughts · ? keys · q quit",
        Mode::Normal => "i type · Esc cancel the turn · t thoughts · PgUp/PgDn scroll · ? keys · q quit",
    };
    Line::from(Span::styled(hint, t.dim()))
}

fn input_line(app: &App, area: Rect, frame: &mut Frame<'_>) {
    let t = app.theme;
    if app.mode == Mode::Normal {
        let hint = if app.session.ended.is_some() {
            "(the session has ended)"
        } else if !app.may_write {
            "(observer: this device may not prompt)"
        } else if app.input.text.is_empty() {
            "press i (or Enter) to type a prompt"
        } else {
            "(a prompt is waiting: i to go on typing)"
        };
        frame.render_widget(
            Paragraph::new(Line::from(vec![Span::styled("  ", t.dim()), Span::styled(hint, t.dim())])),
            area,
        );
        return;
    }
    // Answering a question: the field asked, and a secret's answer shown as dots.
    let asked = asking(app);
    let secret = asked.as_ref().is_some_and(|f| f.get("sensitive") == Some(&Value::Bool(true)));
    let typed = if secret { "•".repeat(app.input.len()) } else { app.input.text.clone() };
    let before: String = typed.chars().take(app.input.cursor).collect();
    let shown_before = crate::text::escape(&before);
    let all = crate::text::escape(&typed);
    let cursor_col: usize = shown_before.chars().map(|c| c.width().unwrap_or(0)).sum();
    let room = (area.width as usize).saturating_sub(3).max(1);
    let skip_cols = cursor_col.saturating_sub(room);
    let mut skipped = 0;
    let visible: String = all
        .chars()
        .skip_while(|c| {
            let go = skipped < skip_cols;
            skipped += c.width().unwrap_or(0);
            go
        })
        .collect();
    let mut row = vec![Span::styled("› ", t.user())];
    let mut lead = 2;
    if let Some(field) = &asked {
        let label = format!("{} › ", field_label(field));
        lead = unicode_width::UnicodeWidthStr::width(crate::text::escape(&label).as_ref()) as u16;
        row = spans(&label, t.user(), t);
    }
    row.extend(spans(&visible, t.text(), t));
    frame.render_widget(Paragraph::new(Line::from(row)), area);
    let x = area.x + lead + (cursor_col - skip_cols.min(cursor_col)) as u16;
    frame.set_cursor_position(Position::new(x.min(area.right().saturating_sub(1)), area.y));
}

/// The question's field the input line is asking, while answering.
fn asking(app: &App) -> Option<Value> {
    let a = app.answering.as_ref()?;
    let p = app.session.permission(&a.request_id)?;
    super::app::question_fields(p).get(a.field).cloned()
}

/// A field as the input line asks it: its title, and its choices by number.
fn field_label(field: &Value) -> String {
    let title = field.get("title").and_then(Value::as_str).unwrap_or("");
    let choices = field.get("choices").and_then(Value::as_array).cloned().unwrap_or_default();
    let listed: Vec<String> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{} {}", i + 1, c.get("label").and_then(Value::as_str).unwrap_or("")))
        .collect();
    let mut label = title.to_owned();
    if !listed.is_empty() {
        let several =
            if field.get("multiple") == Some(&Value::Bool(true)) { ", several with commas" } else { "" };
        label.push_str(&format!(" ({}{several})", listed.join(", ")));
    } else if let Some(kind) = field.get("type").and_then(Value::as_str).filter(|k| *k != "text") {
        label.push_str(&format!(" ({kind})"));
    }
    label
}

/// A question's fields on its card, numbered, each with its question and choices.
fn question_lines(app: &App, p: &Permission) -> Vec<Line<'static>> {
    let t = app.theme;
    let fields = super::app::question_fields(p);
    let mut lines = Vec::new();
    if fields.is_empty() {
        return lines;
    }
    lines
        .push(Line::from(Span::styled("the agent asks (a answers in the input line, one by one):", t.dim())));
    for (i, field) in fields.iter().enumerate() {
        let asked_now =
            app.answering.as_ref().is_some_and(|a| a.request_id == p.request_id() && a.field == i);
        let mut row = vec![Span::raw(if asked_now { "▸ " } else { "  " })];
        row.extend(spans(&format!("{}. {}", i + 1, field_label(field)), t.bold(), t));
        let text = field.get("text").and_then(Value::as_str).unwrap_or("");
        if !text.is_empty() && Some(text) != field.get("title").and_then(Value::as_str) {
            row.push(Span::styled(" — ", t.dim()));
            row.extend(spans(text, t.text(), t));
        }
        if field.get("required") == Some(&Value::Bool(true)) {
            row.push(Span::styled(" *", t.warn()));
        }
        lines.push(Line::from(row));
    }
    lines
}

/// A centred rectangle of at most `w` × `h` inside `area`.
fn centred(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect::new(area.x + (area.width - w) / 2, area.y + (area.height - h) / 2, w, h)
}

/// The keys, for `?`.
pub(crate) const HELP: &[(&str, &str)] = &[
    ("i, Enter", "type a prompt (Enter sends it; it waits behind a running turn)"),
    ("Esc", "leave the input line; in normal mode, cancel the running turn"),
    ("a", "allow once (the card in front)"),
    ("A", "allow always, or for this session"),
    ("r", "reject"),
    ("R", "reject always, or for this session"),
    ("↑↓ Enter", "highlight an option, choose it"),
    ("Tab", "the next pending card"),
    ("v", "show the whole request"),
    ("d, D", "the last turn's diff; the workspace's diff"),
    ("/mode, /model", "pick from what the agent offers (or /mode ID)"),
    ("t", "fold or unfold thoughts"),
    ("PgUp PgDn g G", "scroll; G follows the session again"),
    ("?", "these keys"),
    ("q, Ctrl-C", "quit (the session goes on)"),
];

/// [`HELP`] for the `?` box, `width` columns inside: the keys in a column, what each does beside
/// it, wrapped under itself, so every key is in sight on an 80 × 24 screen.
fn help_lines(width: usize, t: Theme) -> Vec<Line<'static>> {
    let keys = HELP.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    let room = width.saturating_sub(keys + 3).max(1);
    let mut lines = Vec::new();
    for (k, what) in HELP {
        for (i, row) in wrap(Line::from(*what), room).into_iter().enumerate() {
            let key = if i == 0 { format!(" {k:>keys$}  ") } else { " ".repeat(keys + 3) };
            let mut spans = vec![Span::styled(key, t.key())];
            spans.extend(row.spans);
            lines.push(Line::from(spans));
        }
    }
    lines
}

/// [`HELP`] as text, a key and what it does per line: `attach --help` lists the same keys as `?`.
pub fn keys_text() -> String {
    let width = HELP.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    HELP.iter().map(|(k, what)| format!("  {k:<width$}  {what}")).collect::<Vec<_>>().join("\n")
}

pub(crate) fn draw(frame: &mut Frame<'_>, app: &App) {
    let t = app.theme;
    let area = frame.area();
    let queued = app.session.queued();
    let [top, body, queue_area, input_area, keys_area] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(u16::from(!queued.is_empty())),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(header(app, top.width as usize)).style(t.bar()), top);

    let card = app.card_in_front().map(|p| (p, card_lines(app, p, Bounds::CARD)));
    let (transcript_area, card_area) = match &card {
        Some((_, (lines, foot))) => {
            let inner = body.width.saturating_sub(2) as usize;
            let rows: usize = lines.iter().chain(foot).map(|l| wrap(l.clone(), inner).len()).sum();
            let max = (u32::from(body.height) * u32::from(CARD_SHARE) / 100).max(6) as u16;
            let height = (rows as u16 + 2).min(max).min(body.height);
            let [a, b] = Layout::vertical([Constraint::Min(0), Constraint::Length(height)]).areas(body);
            (a, Some(b))
        }
        None => (body, None),
    };
    app.page.set(transcript_area.height.max(1) as usize);
    let rows = transcript_rows(app, transcript_area.width as usize, transcript_area.height as usize);
    frame.render_widget(Paragraph::new(rows), transcript_area);

    if let (Some((p, (lines, foot))), Some(card_area)) = (card, card_area) {
        let pending = app.session.pending();
        let title = match pending.iter().position(|x| x.request_id() == p.request_id()) {
            Some(i) => format!(" permission {} of {} ", i + 1, pending.len()),
            None => " permission (decided) ".to_owned(),
        };
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(t.card())
            .title(Span::styled(title, t.card()));
        let inner = block.inner(card_area);
        frame.render_widget(Clear, card_area);
        frame.render_widget(block, card_area);
        let width = inner.width as usize;
        let foot: Vec<Line<'static>> = foot.into_iter().flat_map(|l| wrap(l, width)).collect();
        let room = (inner.height as usize).saturating_sub(foot.len());
        let mut body_rows: Vec<Line<'static>> = lines.into_iter().flat_map(|l| wrap(l, width)).collect();
        if body_rows.len() > room {
            body_rows.truncate(room.saturating_sub(1));
            body_rows.push(Line::from(Span::styled("⟪… more: v shows the whole request⟫", t.mark())));
        }
        let [content, keys] =
            Layout::vertical([Constraint::Min(0), Constraint::Length(foot.len() as u16)]).areas(inner);
        frame.render_widget(Paragraph::new(body_rows), content);
        frame.render_widget(Paragraph::new(foot), keys);
    }

    if !queued.is_empty() {
        let mut row = vec![Span::styled(format!("queued ({}): ", queued.len()), t.warn())];
        for (i, turn) in queued.iter().enumerate() {
            if i > 0 {
                row.push(Span::styled(" · ", t.dim()));
            }
            row.push(Span::styled(format!("{}: ", who(app, turn.who.as_deref())), t.user()));
            let first: String = turn.text.chars().take(60).collect();
            row.extend(spans(&first, t.text(), t));
        }
        frame.render_widget(Paragraph::new(Line::from(row)), queue_area);
    }
    input_line(app, input_area, frame);
    frame.render_widget(Paragraph::new(key_line(app)), keys_area);

    match &app.overlay {
        Overlay::None => {}
        Overlay::Help => {
            let lines = help_lines(area.width.min(78).saturating_sub(2) as usize, t);
            let box_area = centred(area, 78, lines.len() as u16 + 2);
            frame.render_widget(Clear, box_area);
            let block = Block::default().borders(Borders::ALL).title(" keys (any key closes) ");
            frame.render_widget(Paragraph::new(lines).block(block), box_area);
        }
        Overlay::Choose(choose) => {
            let lines: Vec<Line<'static>> = choose
                .items
                .iter()
                .enumerate()
                .map(|(i, (id, name))| {
                    let style = if i == choose.selected { t.selected() } else { t.text() };
                    let mut row = spans(name, style, t);
                    row.push(Span::styled(" (", t.dim()));
                    row.extend(spans(id, t.dim(), t));
                    row.push(Span::styled(")", t.dim()));
                    Line::from(row)
                })
                .collect();
            let box_area = centred(area, 60, lines.len() as u16 + 2);
            frame.render_widget(Clear, box_area);
            let title = format!(" {} (↑↓ Enter; Esc closes) ", choose.what);
            frame.render_widget(
                Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(title)),
                box_area,
            );
        }
        Overlay::Text { title, lines, scroll } => {
            // The text is the daemon's, escaped already (`diff::unified`); a diff's lines are painted.
            let rows = lines.iter().map(|l| {
                let style = if l.starts_with("+++") || l.starts_with("---") {
                    t.bold()
                } else if l.starts_with('+') {
                    t.added()
                } else if l.starts_with('-') {
                    t.removed()
                } else if l.starts_with("@@") {
                    t.hunk()
                } else {
                    t.text()
                };
                Line::from(Span::styled(l.clone(), style))
            });
            scrolled(frame, area, &format!(" {title} (↑↓ PgUp PgDn; any other key closes) "), rows, *scroll);
        }
        Overlay::Whole { request_id, scroll } => {
            let Some(p) = app.session.permission(request_id) else { return };
            let (lines, foot) = card_lines(app, p, Bounds::ALL);
            let title = " the whole request (↑↓ PgUp PgDn; any other key closes) ";
            scrolled(frame, area, title, lines.into_iter().chain(foot), *scroll);
        }
    }
}

/// `rows` over the whole of `area` in a box titled `title`, wrapped to its width and scrolled by
/// `scroll` rows (no further than the last screenful): the whole-request and diff overlays.
fn scrolled(
    frame: &mut Frame<'_>,
    area: Rect,
    title: &str,
    rows: impl Iterator<Item = Line<'static>>,
    scroll: usize,
) {
    let block = Block::default().borders(Borders::ALL).title(title.to_owned());
    let inner = block.inner(area);
    frame.render_widget(Clear, area);
    frame.render_widget(block, area);
    let rows: Vec<Line<'static>> = rows.flat_map(|l| wrap(l, inner.width as usize)).collect();
    let top = scroll.min(rows.len().saturating_sub(inner.height as usize));
    let visible: Vec<Line<'static>> = rows.into_iter().skip(top).take(inner.height as usize).collect();
    frame.render_widget(Paragraph::new(visible), inner);
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use serde_json::json;

    use super::*;
    use crate::tui::model::SessionView;

    fn app() -> App {
        let mut a =
            App::new(SessionView::new("demo-1", Some("me")), Theme::PLAIN, true, "operator as me".into());
        a.agent = Some("demo".into());
        a.link = Link::Live;
        a
    }

    fn screen(a: &App, w: u16, h: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("terminal");
        terminal.draw(|f| draw(f, a)).expect("draw");
        let buf = terminal.backend().buffer().clone();
        (0..h)
            .map(|y| {
                (0..w).map(|x| buf[(x, y)].symbol().to_owned()).collect::<String>().trim_end().to_owned()
            })
            .collect()
    }

    fn echo(a: &mut App, id: u64, prompt: &str, who: &str, text: &str) {
        a.event("session_update", Some(id), &json!({"promptId": prompt, "originatorClientId": who, "data": {"update": {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}}}));
    }

    fn say(a: &mut App, id: u64, prompt: &str, text: &str) {
        a.event("session_update", Some(id), &json!({"promptId": prompt, "data": {"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}}));
    }

    fn write_request(a: &mut App, id: u64, rid: &str) {
        a.event("session_update", Some(id), &json!({"promptId": "p1", "data": {"update": {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Write notes.txt", "kind": "edit", "status": "pending", "locations": [{"path": "/w/notes.txt"}], "rawInput": {"path": "/w/notes.txt", "content": "hello\n"}}}}));
        a.event("permission_request", Some(id + 1), &json!({"promptId": "p1", "originatorClientId": "alice", "data": {"requestId": rid, "policy": "first-responder", "toolCall": {"toolCallId": "t1", "title": "Write notes.txt", "kind": "edit"}, "options": [
            {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
            {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
            {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"}]}}));
    }

    #[test]
    fn an_80_by_24_screen_has_the_bar_the_transcript_the_card_and_the_keys() {
        let mut a = app();
        echo(&mut a, 1, "p1", "alice", "write notes.txt hello");
        say(&mut a, 2, "p1", "Sure: **writing** it.");
        write_request(&mut a, 3, "r1");
        let rows = screen(&a, 80, 24);
        assert!(rows[0].starts_with("demo-1 · demo · live · working · operator as me"), "{rows:#?}");
        let text = rows.join("\n");
        assert!(text.contains("alice › write notes.txt hello"), "{text}");
        assert!(text.contains("Sure: writing it."), "{text}");
        assert!(text.contains("permission 1 of 1"), "{text}");
        assert!(text.contains("wants to edit: Write notes.txt"), "{text}");
        assert!(text.contains("[a] Allow once (allow_once)"), "{text}");
        assert!(text.contains("[A] Always allow"), "{text}");
        assert!(text.contains("[r] Reject"), "{text}");
        assert!(text.contains("a allow once"), "{text}");
        assert!(rows[22].contains("press i (or Enter) to type a prompt"), "{rows:#?}");
        assert!(rows[23].contains("q quit"), "{rows:#?}");
        assert!(rows.iter().all(|r| r.chars().count() <= 80));
    }

    #[test]
    fn a_decided_card_shows_who_decided_instead_of_the_keys() {
        let mut a = app();
        echo(&mut a, 1, "p1", "alice", "write");
        write_request(&mut a, 2, "r1");
        a.event("permission_resolved", Some(4), &json!({"data": {"requestId": "r1", "outcome": {"outcome": "selected", "optionId": "allow_once"}, "resolvedBy": "vote", "voterClientId": "web-7"}}));
        let text = screen(&a, 80, 24).join("\n");
        assert!(text.contains("✓ decided: Allow once, by web-7"), "{text}");
        assert!(!text.contains("[a]") && !text.contains("a allow once"), "{text}");
    }

    /// A `require` rule's request says how many approvals it has of how many, from the request
    /// itself (a resync) and then from each partial vote.
    #[test]
    fn a_require_rules_card_counts_approvals() {
        let mut a = app();
        echo(&mut a, 1, "p1", "alice", "write");
        a.event("permission_request", Some(2), &json!({"promptId": "p1", "data": {"requestId": "r1", "policy": "designated", "required": {"ruleId": "rule-9", "quorum": 2, "approvals": 0}, "toolCall": {"toolCallId": "t1", "title": "git push", "kind": "execute"}, "options": [{"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"}]}}));
        let text = screen(&a, 100, 24).join("\n");
        assert!(text.contains("0 of 2 approvals (rule rule-9)"), "{text}");
        a.event("permission_partial_vote", Some(3), &json!({"data": {"requestId": "r1", "votesReceived": 1, "votesNeeded": 2, "quorum": 2, "ruleId": "rule-9"}}));
        let text = screen(&a, 100, 24).join("\n");
        assert!(text.contains("1 of 2 approvals (rule rule-9)"), "{text}");
        assert!(!text.contains("votes"), "not a consensus tally: {text}");
        // A rule naming a group says whose approvals it counts (its name escaped as all text is).
        let mut a = app();
        echo(&mut a, 1, "p1", "alice", "write");
        a.event("permission_request", Some(2), &json!({"promptId": "p1", "data": {"requestId": "r2", "policy": "designated", "required": {"ruleId": "rule-8", "quorum": 1, "approvals": 0, "group": "admins\u{1b}[2J"}, "toolCall": {"toolCallId": "t2", "title": "rm -rf", "kind": "execute"}, "options": [{"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"}]}}));
        let text = screen(&a, 100, 24).join("\n");
        assert!(text.contains("0 of 1 approvals from admins"), "the rule's group is named: {text}");
        assert!(text.contains("(rule rule-8)") && !text.contains('\u{1b}'), "{text}");
    }

    /// A reviewer's verdict that left the request to the people is on the card with its reason
    /// (once, though the event and a resync both carry it); one that decided is on the outcome.
    #[test]
    fn a_reviewers_reason_is_on_the_card_and_on_the_outcome_it_decided() {
        let mut a = app();
        echo(&mut a, 1, "p1", "alice", "write");
        write_request(&mut a, 2, "r1");
        let review = json!({"reviewer": "guard", "clientId": "reviewer:guard", "verdict": "escalate", "reason": "unsure\u{1b}[2J", "decides": false, "at": 1});
        for id in [4, 5] {
            a.event("permission_reviewed", Some(id), &json!({"data": {"requestId": "r1", "review": review}}));
        }
        let text = screen(&a, 100, 24).join("\n");
        assert_eq!(text.matches("reviewer guard asks a person: unsure\\u{1b}[2J").count(), 1, "{text}");
        assert!(text.contains("[a] Allow once"), "still the people's: {text}");

        write_request(&mut a, 6, "r2");
        let failed = json!({"reviewer": "guard", "clientId": "reviewer:guard", "verdict": "escalate", "reason": "no verdict within 5000 ms", "failure": "timeout", "decides": false, "at": 2});
        a.event("permission_reviewed", Some(8), &json!({"data": {"requestId": "r2", "review": failed}}));
        a.event("permission_resolved", Some(9), &json!({"data": {"requestId": "r1", "outcome": {"outcome": "selected", "optionId": "allow_once"}, "resolvedBy": "vote", "voterClientId": "web-7"}}));
        a.key(crossterm::event::KeyEvent::from(crossterm::event::KeyCode::Enter));
        let text = screen(&a, 100, 24).join("\n");
        assert!(
            text.contains("reviewer guard failed (timeout), so a person decides: no verdict within 5000 ms"),
            "{text}"
        );

        write_request(&mut a, 10, "r3");
        let allowed = json!({"reviewer": "guard", "clientId": "reviewer:guard", "verdict": "allow", "reason": "a write inside the workspace", "decides": true, "at": 3});
        a.event("permission_resolved", Some(12), &json!({"data": {"requestId": "r3", "outcome": {"outcome": "selected", "optionId": "allow_once"}, "resolvedBy": "vote", "voterClientId": "reviewer:guard", "via": "reviewer", "reviews": [allowed]}}));
        let outcome = a.session.permission("r3").and_then(|p| a.session.resolution_text(p));
        assert_eq!(outcome.as_deref(), Some("Allow once, by reviewer guard: a write inside the workspace"));
    }

    #[test]
    fn each_kind_of_option_shows_its_key_and_only_its_first_option_does() {
        let mut a = app();
        let options: Vec<Value> =
            ["allow_once", "allow_always", "reject_once", "reject_always", "allow_once"]
                .iter()
                .enumerate()
                .map(|(i, k)| json!({"optionId": format!("o{i}"), "name": format!("{k} {i}"), "kind": k}))
                .collect();
        a.event(
            "permission_request",
            Some(1),
            &json!({"data": {"requestId": "r", "toolCall": {"title": "Write"}, "options": options}}),
        );
        let text = screen(&a, 80, 24).join("\n");
        for row in [
            "[a] allow_once 0 (allow_once)",
            "[A] allow_always 1 (allow_always)",
            "[r] reject_once 2 (reject_once)",
            "[R] reject_always 3 (reject_always)",
            "    allow_once 4 (allow_once)",
        ] {
            assert!(text.contains(row), "{row:?} in\n{text}");
        }
        assert!(text.contains("R reject always"), "{text}");
    }

    #[test]
    fn an_observer_sees_the_card_without_keys() {
        let mut a = app();
        a.may_write = false;
        write_request(&mut a, 1, "r1");
        let text = screen(&a, 80, 24).join("\n");
        assert!(text.contains("Allow once (allow_once)"), "{text}");
        assert!(!text.contains("[a]"), "{text}");
        assert!(text.contains("observer: this device sees requests and may not vote"), "{text}");
    }

    #[test]
    fn hostile_text_is_drawn_as_text_in_every_cell() {
        let mut a = app();
        let hostile = "\u{1b}]0;pwned\u{7}\u{1b}[2J\r\u{85}\u{202e}gnp.exe\u{200b}";
        echo(&mut a, 1, "p1", hostile, hostile);
        say(&mut a, 2, "p1", &format!("{hostile}\n\n# {hostile}\n\n```\n{hostile}\n```"));
        a.event("session_update", Some(3), &json!({"promptId": "p1", "data": {"update": {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": hostile}}}}));
        a.event("session_update", Some(4), &json!({"promptId": "p1", "data": {"update": {"sessionUpdate": "plan", "entries": [{"content": hostile, "status": "pending"}]}}}));
        a.event("permission_request", Some(5), &json!({"promptId": "p1", "data": {"requestId": "r", "toolCall": {"title": hostile, "kind": hostile, "rawInput": {"command": hostile}}, "options": [{"optionId": hostile, "name": hostile, "kind": hostile}]}}));
        a.mode = Mode::Typing;
        a.input.insert(hostile);
        for (w, h) in [(80, 24), (200, 60)] {
            let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("terminal");
            terminal.draw(|f| draw(f, &a)).expect("draw");
            let buf = terminal.backend().buffer();
            for cell in buf.content() {
                assert!(
                    !cell.symbol().chars().any(crate::text::is_hidden),
                    "a raw {:?} in a cell",
                    cell.symbol()
                );
            }
            let text: String = buf.content().iter().map(|c| c.symbol()).collect();
            assert!(text.contains("\\u{1b}"), "the escape is shown as text");
        }
        a.thoughts_open = true;
        a.overlay = Overlay::Whole { request_id: "r".into(), scroll: 0 };
        let rows = screen(&a, 80, 24);
        assert!(rows.iter().all(|r| !r.chars().any(crate::text::is_hidden)), "{rows:#?}");
        assert!(rows[0].contains("the whole request"), "{rows:#?}");
    }

    #[test]
    fn a_diff_overlay_fills_the_screen_with_its_lines_painted() {
        let mut a = app();
        let lines = ["--- a/x.txt", "+++ b/x.txt", "@@ -1,1 +1,1 @@", "-old", "+new"];
        a.overlay = Overlay::Text {
            title: "the last turn's changes".into(),
            lines: lines.iter().map(|l| (*l).to_owned()).collect(),
            // Past the end: a text shorter than the screen is not scrolled.
            scroll: 3,
        };
        let rows = screen(&a, 80, 24);
        assert!(rows[0].contains("the last turn's changes"), "{rows:#?}");
        assert!(rows[1].contains("--- a/x.txt") && rows[5].contains("+new"), "{rows:#?}");
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("terminal");
        a.theme = Theme::COLOUR;
        terminal.draw(|f| draw(f, &a)).expect("draw");
        let buf = terminal.backend().buffer();
        assert_eq!(buf[(1, 4)].style().fg, a.theme.removed().fg, "a removed line is painted");
        assert_eq!(buf[(1, 5)].style().fg, a.theme.added().fg, "an added line is painted");
        assert_ne!(a.theme.added().fg, a.theme.text().fg);
    }

    #[test]
    fn a_client_id_others_chose_is_drawn_escaped_in_its_labels() {
        let mut a = app();
        let id = "ev\u{1b}]0;t\u{7}\u{202e}il";
        echo(&mut a, 1, "p1", id, "hi");
        echo(&mut a, 2, "p2", id, "queued one");
        a.event(
            "user_shell_command",
            Some(3),
            &json!({"data": {"shellId": "s", "command": "ls", "originatorClientId": id}}),
        );
        let text = screen(&a, 80, 24).join("\n");
        let shown = "ev\\u{1b}]0;t\\u{7}\\u{202e}il";
        assert!(text.contains(&format!("{shown} › hi")), "{text}");
        assert!(text.contains(&format!("{shown} ran $ ls")), "{text}");
        assert!(text.contains(&format!("queued (1): {shown}: queued one")), "{text}");
    }

    #[test]
    fn the_keys_box_shows_every_key_at_80_by_24() {
        let mut a = app();
        a.overlay = Overlay::Help;
        let rows = screen(&a, 80, 24);
        let text = rows.join("\n");
        for (k, what) in HELP {
            let first = what.split(' ').next().unwrap_or("");
            assert!(rows.iter().any(|r| r.contains(&format!("{k}  {first}"))), "{k} in\n{text}");
        }
        // What wraps stays in its column, under the start of what it continues.
        let at = |needle: &str| rows.iter().find_map(|r| r.find(needle)).unwrap_or(0);
        assert!(text.contains("quit (the session goes on)"), "{text}");
        assert_eq!(at("type a prompt"), at("fold or unfold"), "{text}");
    }

    #[test]
    fn a_megabyte_line_is_drawn_cut_and_counted() {
        let mut a = app();
        echo(&mut a, 1, "p1", "me", "go");
        say(&mut a, 2, "p1", &"x".repeat(1024 * 1024));
        a.scroll = usize::MAX / 2;
        let text = screen(&a, 80, 24).join("\n");
        assert!(
            text.contains(&format!("⟪{} earlier characters not shown⟫", 1024 * 1024 - VIEW_TEXT)),
            "{text}"
        );
    }

    #[test]
    fn wrapping_breaks_at_blanks_and_keeps_styles_and_wide_characters_whole() {
        let t = Theme::COLOUR;
        let line = Line::from(vec![Span::styled("hello wor", t.bold()), Span::styled("ld again", t.code())]);
        let rows = wrap(line, 8);
        let texts: Vec<String> =
            rows.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect();
        assert_eq!(texts, ["hello ", "world ", "again"]);
        assert_eq!(rows[1].spans[0].style, t.bold());
        assert_eq!(rows[1].spans[1].style, t.code());
        let rows = wrap(Line::from("日本語日本語"), 5);
        let texts: Vec<String> = rows.iter().map(|l| l.to_string()).collect();
        assert_eq!(texts, ["日本", "語日", "本語"]);
        assert_eq!(wrap(Line::from("abcdefgh"), 3).len(), 3);
        // A word longer than a row stays on the row it starts on.
        let rows: Vec<String> = wrap(Line::from("$ abcdefghij"), 5).iter().map(|l| l.to_string()).collect();
        assert_eq!(rows, ["$ abc", "defgh", "ij"]);
    }

    #[test]
    fn a_wide_screen_and_a_resize_keep_the_layout() {
        let mut a = app();
        echo(&mut a, 1, "p1", "alice", "hello");
        for (w, h) in [(80, 24), (132, 43), (40, 12), (80, 24)] {
            let rows = screen(&a, w, h);
            assert!(rows[0].starts_with("demo-1"), "{w}x{h}: {rows:#?}");
            assert!(
                rows[h as usize - 1].contains("quit") || rows[h as usize - 1].contains("i type"),
                "{w}x{h}: {rows:#?}"
            );
            assert!(rows.iter().any(|r| r.contains("alice › hello")), "{w}x{h}: {rows:#?}");
        }
    }

    #[test]
    fn scrolling_up_shows_older_rows_and_stops_at_the_top() {
        let mut a = app();
        for i in 0..100 {
            a.session.note(format!("note {i}"), Level::Info);
        }
        let rows = transcript_rows(&a, 80, 10);
        assert_eq!(rows.last().map(|l| l.to_string()), Some("· note 99".into()));
        a.scroll = 5;
        assert_eq!(transcript_rows(&a, 80, 10).last().map(|l| l.to_string()), Some("· note 94".into()));
        a.scroll = 10_000;
        let rows = transcript_rows(&a, 80, 10);
        assert_eq!(rows.first().map(|l| l.to_string()), Some("· note 0".into()));
        assert_eq!(rows.len(), 10);
    }
}

//! The first screen of `mediatord attach` without a session: the daemon's sessions, live and past,
//! of every workspace it serves (`GET /workspace/{cwd}/sessions?include=ended`), and for each
//! workspace a row that creates (or joins) its shared session.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use serde_json::Value;

use super::connect::error_text;
use super::shown::spans;
use super::theme::Theme;
use crate::client::api::{Endpoint, MAX_STATE_BYTES, segment};

/// What a row opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pick {
    Open(String),
    /// Create or join the shared session of this workspace, on the default agent.
    Create(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) label: String,
    pub(crate) pick: Pick,
    /// A live session with requests waiting.
    pub(crate) waiting: bool,
}

/// What a key on the list asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Chosen {
    Stay,
    Quit,
    Open(Pick),
}

/// The list and its highlighted row.
#[derive(Debug)]
pub(crate) struct Picker {
    pub(crate) rows: Vec<Row>,
    pub(crate) selected: usize,
    pub(crate) theme: Theme,
    pub(crate) url: String,
}

/// The rows for the daemon described by `capabilities`.
pub(crate) async fn load(target: &Endpoint, capabilities: &Value) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    let workspaces: Vec<String> = capabilities["workspaces"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w["cwd"].as_str().map(str::to_owned))
        .collect();
    for cwd in workspaces {
        let path = format!("/workspace/{}/sessions?include=ended", segment(&cwd));
        let (status, answer) = target.call_with("GET", &path, &[], None, MAX_STATE_BYTES).await?;
        if status != 200 {
            return Err(format!("listing the sessions of {cwd}: {status}: {}", error_text(&answer)));
        }
        rows.push(Row {
            label: format!("+ new or shared session in {cwd}"),
            pick: Pick::Create(cwd.clone()),
            waiting: false,
        });
        for s in answer["sessions"].as_array().into_iter().flatten() {
            let Some(id) = s["sessionId"].as_str() else { continue };
            let state = s["state"].as_str().unwrap_or("live");
            let mut label = format!("  {id} · {} · {state}", s["agent"].as_str().unwrap_or("?"));
            if let Some(n) = s["clientCount"].as_u64() {
                label.push_str(&format!(" · {n} client{}", if n == 1 { "" } else { "s" }));
            }
            if s["hasActivePrompt"].as_bool() == Some(true) {
                label.push_str(" · working");
            }
            let waiting = s["pendingPermissions"].as_u64().unwrap_or(0);
            if waiting > 0 {
                label.push_str(&format!(" · ⚑ {waiting} waiting"));
            }
            if let Some(at) = s["createdAt"].as_str() {
                label.push_str(&format!(
                    " · started {}",
                    started(at, crate::clock::now_ms(), crate::clock::zone())
                ));
            }
            rows.push(Row { label, pick: Pick::Open(id.to_owned()), waiting: waiting > 0 });
        }
    }
    Ok(rows)
}

/// A session's `createdAt` (RFC 3339, as the daemon writes it) in words, from `now_ms` in `tz`
/// ([`crate::clock::ago_in`]); the text as it came when it is not a time.
fn started(created_at: &str, now_ms: u64, tz: &jiff::tz::TimeZone) -> String {
    match created_at.parse::<jiff::Timestamp>().ok().and_then(|t| u64::try_from(t.as_millisecond()).ok()) {
        Some(at) => crate::clock::ago_in(at, now_ms, tz),
        None => created_at.to_owned(),
    }
}

impl Picker {
    pub(crate) fn key(&mut self, key: KeyEvent) -> Chosen {
        if key.kind == KeyEventKind::Release {
            return Chosen::Stay;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => Chosen::Quit,
            KeyCode::Char('c' | 'd') if ctrl => Chosen::Quit,
            KeyCode::Up | KeyCode::Char('k') => {
                self.selected = self.selected.saturating_sub(1);
                Chosen::Stay
            }
            KeyCode::Down | KeyCode::Char('j') => {
                self.selected = (self.selected + 1).min(self.rows.len().saturating_sub(1));
                Chosen::Stay
            }
            KeyCode::Enter => {
                self.rows.get(self.selected).map_or(Chosen::Stay, |r| Chosen::Open(r.pick.clone()))
            }
            _ => Chosen::Stay,
        }
    }

    pub(crate) fn draw(&self, frame: &mut Frame<'_>) {
        let t = self.theme;
        let [top, list, keys] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(1), Constraint::Length(1)])
                .areas(frame.area());
        let title = format!("mediatord · {} · pick a session", self.url);
        frame.render_widget(Paragraph::new(Line::from(spans(&title, t.bar(), t))).style(t.bar()), top);
        let height = list.height as usize;
        let first = self.selected.saturating_sub(height.saturating_sub(1));
        let lines: Vec<Line<'static>> = self
            .rows
            .iter()
            .enumerate()
            .skip(first)
            .take(height)
            .map(|(i, r)| {
                let style = if i == self.selected {
                    t.selected()
                } else if r.waiting {
                    t.warn()
                } else {
                    t.text()
                };
                Line::from(spans(&r.label, style, t))
            })
            .collect();
        frame.render_widget(Paragraph::new(lines), list);
        frame.render_widget(Paragraph::new(Span::styled("↑↓ choose · Enter open · q quit", t.dim())), keys);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrows_move_within_the_rows_and_enter_opens_the_one_highlighted() {
        let rows = vec![
            Row { label: "+ new".into(), pick: Pick::Create("/w".into()), waiting: false },
            Row { label: "  s1".into(), pick: Pick::Open("s1".into()), waiting: true },
        ];
        let mut p = Picker { rows, selected: 0, theme: Theme::PLAIN, url: "http://x".into() };
        let k = |c| KeyEvent::new(c, KeyModifiers::NONE);
        assert_eq!(p.key(k(KeyCode::Up)), Chosen::Stay);
        assert_eq!(p.key(k(KeyCode::Down)), Chosen::Stay);
        assert_eq!(p.key(k(KeyCode::Down)), Chosen::Stay);
        assert_eq!(p.selected, 1);
        assert_eq!(p.key(k(KeyCode::Enter)), Chosen::Open(Pick::Open("s1".into())));
        assert_eq!(p.key(k(KeyCode::Char('q'))), Chosen::Quit);
    }

    /// Issue #44: the picker showed `since 2026-11-28T22:46:34.126Z`.
    #[test]
    fn a_sessions_start_is_said_in_words() {
        let now = crate::clock::parse_utc("2026-11-28T23:00:00").expect("now");
        let utc = jiff::tz::TimeZone::UTC;
        assert_eq!(started("2026-11-28T22:46:34.126Z", now, &utc), "13 min ago");
        assert_eq!(started("2026-11-27T08:00:00.000Z", now, &utc), "yesterday at 08:00");
        assert_eq!(started("not a time", now, &utc), "not a time");
    }
}

//! The terminal client's state beside the session: where the keys go (the input line or the
//! screen), the card in front, the highlighted option, the scroll position, the overlay open, the
//! last word to the person. Keys in, [`Action`]s out; the loop (`run.rs`) carries the actions to
//! the daemon and their outcomes back. Pure, so every key is tested without a terminal.
//!
//! Two modes, so that a letter typed into a prompt never votes: **normal** (single keys act: `a`
//! allows, `q` quits) and **typing** (keys edit the input line; `Esc` returns to normal). A card
//! that arrives while the input line is empty takes the keys (normal mode), as a question does.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use serde_json::{Value, json};

use super::model::{Level, Permission, SessionView};
use super::theme::Theme;

/// Characters the input line holds; the daemon takes 10 MiB bodies, a person types far less, a
/// paste may be a file.
pub(crate) const MAX_INPUT_CHARS: usize = 256 * 1024;

/// What the loop is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    Prompt(String),
    Cancel,
    /// A vote on `request_id`: the body of `POST …/permission/{requestId}`, and what to call it.
    Vote {
        request_id: String,
        body: Value,
        label: String,
    },
    SetMode(String),
    SetModel(String),
    /// The last turn's diff that changed a file, or (`workspace`) the workspace's diff.
    Diff {
        workspace: bool,
    },
    Quit,
}

/// What an action came to, as the loop reports it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    Voted {
        request_id: String,
        label: String,
        result: Result<(), String>,
    },
    Prompted(Result<(), String>),
    Cancelled(Result<(), String>),
    Switched {
        what: &'static str,
        result: Result<(), String>,
    },
    /// A diff as text (a unified diff, uncoloured: the view paints it), under `title`.
    Diffed {
        title: String,
        result: Result<String, String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Normal,
    Typing,
}

/// The list `/mode` or `/model` opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Choose {
    pub(crate) what: &'static str,
    /// (id, name) of each entry.
    pub(crate) items: Vec<(String, String)>,
    pub(crate) selected: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Overlay {
    None,
    Help,
    Choose(Choose),
    /// The whole of a request (no bounds), scrolled by `scroll` rows.
    Whole {
        request_id: String,
        scroll: usize,
    },
    /// A text the daemon gave (a diff), its lines, scrolled by `scroll` rows.
    Text {
        title: String,
        lines: Vec<String>,
        scroll: usize,
    },
}

/// The state of the connection to the event stream, for the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Link {
    Connecting,
    Replaying,
    Live,
    Reconnecting(String),
    /// The stream ended for good (the session ended, or is history).
    Done,
}

/// The input line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Input {
    pub(crate) text: String,
    /// The cursor, as a character index.
    pub(crate) cursor: usize,
}

impl Input {
    fn byte(&self, chars: usize) -> usize {
        self.text.char_indices().nth(chars).map_or(self.text.len(), |(i, _)| i)
    }

    pub(crate) fn len(&self) -> usize {
        self.text.chars().count()
    }

    /// Inserts `s` at the cursor, as much as [`MAX_INPUT_CHARS`] leaves room for; `false` when
    /// some was cut.
    pub(crate) fn insert(&mut self, s: &str) -> bool {
        let room = MAX_INPUT_CHARS.saturating_sub(self.len());
        let kept: String = s.chars().take(room).collect();
        let at = self.byte(self.cursor);
        self.text.insert_str(at, &kept);
        self.cursor += kept.chars().count();
        kept.len() == s.len()
    }

    fn backspace(&mut self) {
        if self.cursor > 0 {
            let (from, to) = (self.byte(self.cursor - 1), self.byte(self.cursor));
            self.text.replace_range(from..to, "");
            self.cursor -= 1;
        }
    }

    fn delete(&mut self) {
        if self.cursor < self.len() {
            let (from, to) = (self.byte(self.cursor), self.byte(self.cursor + 1));
            self.text.replace_range(from..to, "");
        }
    }

    /// Deletes the word before the cursor (and the blanks after it), as a shell's Ctrl-W.
    fn delete_word(&mut self) {
        let chars: Vec<char> = self.text.chars().collect();
        let mut from = self.cursor;
        while from > 0 && chars[from - 1].is_whitespace() {
            from -= 1;
        }
        while from > 0 && !chars[from - 1].is_whitespace() {
            from -= 1;
        }
        let (a, b) = (self.byte(from), self.byte(self.cursor));
        self.text.replace_range(a..b, "");
        self.cursor = from;
    }

    fn take(&mut self) -> String {
        self.cursor = 0;
        std::mem::take(&mut self.text)
    }
}

/// A question being answered in the input line, one field after another
/// (`docs/protocol.md#197-the-web-app-and-the-terminal`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answering {
    pub(crate) request_id: String,
    /// The accepting option the answers go with (its id and name).
    option_id: String,
    label: String,
    /// The field being asked (an index into the question's fields).
    pub(crate) field: usize,
    answers: serde_json::Map<String, Value>,
}

/// The client.
#[derive(Debug)]
pub(crate) struct App {
    pub(crate) theme: Theme,
    pub(crate) session: SessionView,
    /// Whether this client may vote and prompt (an observer device may not).
    pub(crate) may_write: bool,
    /// Who this client is, for the header: `operator as tui:me`, `device my-laptop (observer)`.
    pub(crate) identity: String,
    pub(crate) agent: Option<String>,
    pub(crate) workspace: Option<String>,
    pub(crate) link: Link,
    pub(crate) mode: Mode,
    pub(crate) input: Input,
    /// Which pending card is in front (an index into [`SessionView::pending`]).
    pub(crate) card: usize,
    /// The highlighted option of that card.
    pub(crate) option: usize,
    /// A decided card still in front: its outcome replaces the keys until the person moves on.
    pub(crate) decided: Option<String>,
    /// The card in front when the running replay began ([`App::replay_begins`]): the only card a
    /// resolution in the replay may leave in front (the person had it on screen); the others were
    /// decided before this client saw them, and are history.
    front_at_replay: Option<String>,
    /// Rows scrolled up from the newest (0 = follow the session).
    pub(crate) scroll: usize,
    /// Rows of transcript the last drawing showed (a page, for PgUp); the view sets it.
    pub(crate) page: std::cell::Cell<usize>,
    pub(crate) thoughts_open: bool,
    pub(crate) overlay: Overlay,
    /// The last word to the person (an error, a refusal, a confirmation).
    pub(crate) status: Option<(String, Level)>,
    /// A question whose answers the input line is taking.
    pub(crate) answering: Option<Answering>,
    pub(crate) quit: bool,
}

impl App {
    pub(crate) fn new(session: SessionView, theme: Theme, may_write: bool, identity: String) -> App {
        App {
            theme,
            session,
            may_write,
            identity,
            agent: None,
            workspace: None,
            link: Link::Connecting,
            mode: Mode::Normal,
            input: Input::default(),
            card: 0,
            option: 0,
            decided: None,
            front_at_replay: None,
            scroll: 0,
            page: std::cell::Cell::new(10),
            thoughts_open: false,
            overlay: Overlay::None,
            status: None,
            answering: None,
            quit: false,
        }
    }

    /// The request whose card is in front: the pending one chosen, else a decided one lingering.
    pub(crate) fn card_in_front(&self) -> Option<&Permission> {
        let pending = self.session.pending();
        if !pending.is_empty() {
            return pending.get(self.card.min(pending.len() - 1)).copied();
        }
        self.decided.as_deref().and_then(|id| self.session.permission(id))
    }

    /// A (re)connection's replay begins: its events are history, not news.
    pub(crate) fn replay_begins(&mut self) {
        self.front_at_replay = self.card_in_front().map(|p| p.request_id().to_owned());
        self.session.replaying = true;
    }

    /// Applies an event from the stream. A new card takes the keys when nothing is being typed;
    /// a card decided (by anyone) stays in front with its outcome — live, or in a replay when it
    /// was in front before the replay began (decided while the connection was down); a card both
    /// raised and decided in a replay (attaching to a session with a past) does not.
    pub(crate) fn event(&mut self, event: &str, id: Option<u64>, envelope: &Value) {
        let before = self.card_in_front().map(|p| p.request_id().to_owned());
        let pending_before = self.session.pending().len();
        if !self.session.apply(event, id, envelope) {
            return;
        }
        // A question decided (by anyone) while its answers were being typed: they go nowhere.
        if let Some(a) = &self.answering
            && !self.session.pending().iter().any(|p| p.request_id() == a.request_id)
        {
            self.answering = None;
            self.input.take();
            self.mode = Mode::Normal;
        }
        let pending = self.session.pending();
        if pending.len() > pending_before
            && self.mode == Mode::Typing
            && self.input.text.is_empty()
            && self.answering.is_none()
        {
            self.mode = Mode::Normal;
        }
        if pending.is_empty() {
            if let Some(id) = before
                && self.session.permission(&id).is_some_and(|p| p.resolved.is_some())
                && (!self.session.replaying || self.front_at_replay.as_deref() == Some(id.as_str()))
            {
                self.decided = Some(id);
            }
        } else {
            self.decided = None;
            // Keep the same card in front when others come and go.
            if let Some(at) = before.and_then(|id| pending.iter().position(|p| p.request_id() == id)) {
                self.card = at;
            } else {
                self.card = self.card.min(pending.len() - 1);
                self.option = 0;
            }
        }
    }

    pub(crate) fn outcome(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Voted { request_id, label, result } => {
                if let Some(p) = self.session.permission_mut(&request_id) {
                    p.voting = false;
                    match result {
                        Ok(()) => p.my_vote = Some(label),
                        Err(e) => p.error = Some(e),
                    }
                }
            }
            Outcome::Prompted(Err(e)) => self.say(format!("prompt not sent: {e}"), Level::Error),
            Outcome::Prompted(Ok(())) => {}
            Outcome::Cancelled(Ok(())) => self.say("cancel sent".to_owned(), Level::Info),
            Outcome::Cancelled(Err(e)) => self.say(format!("cancel failed: {e}"), Level::Error),
            Outcome::Switched { what, result: Err(e) } => {
                self.say(format!("{what} not changed: {e}"), Level::Error)
            }
            Outcome::Switched { result: Ok(()), .. } => {}
            Outcome::Diffed { title, result: Ok(text) } => {
                let lines = text.lines().map(str::to_owned).collect();
                self.overlay = Overlay::Text { title, lines, scroll: 0 };
            }
            Outcome::Diffed { title, result: Err(e) } => self.say(format!("{title}: {e}"), Level::Error),
        }
    }

    pub(crate) fn say(&mut self, text: String, level: Level) {
        self.status = Some((text, level));
    }

    /// A paste: into the input line (which it opens).
    pub(crate) fn paste(&mut self, text: &str) -> Vec<Action> {
        if matches!(self.overlay, Overlay::None) && self.session.ended.is_none() {
            self.mode = Mode::Typing;
            if !self.input.insert(text) {
                self.say(
                    format!("the input line holds {MAX_INPUT_CHARS} characters: the rest was cut"),
                    Level::Warn,
                );
            }
        }
        Vec::new()
    }

    pub(crate) fn key(&mut self, key: KeyEvent) -> Vec<Action> {
        if key.kind == KeyEventKind::Release {
            return Vec::new();
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(key.code, KeyCode::Char('c' | 'd')) {
            self.quit = true;
            return vec![Action::Quit];
        }
        if !matches!(self.overlay, Overlay::None) {
            return self.overlay_key(key);
        }
        self.status = None;
        match self.mode {
            Mode::Typing => self.typing_key(key),
            Mode::Normal => self.normal_key(key),
        }
    }

    fn overlay_key(&mut self, key: KeyEvent) -> Vec<Action> {
        match &mut self.overlay {
            Overlay::None => Vec::new(),
            Overlay::Help => {
                self.overlay = Overlay::None;
                Vec::new()
            }
            Overlay::Whole { scroll, .. } | Overlay::Text { scroll, .. } => {
                match key.code {
                    KeyCode::Up | KeyCode::Char('k') => *scroll = scroll.saturating_sub(1),
                    KeyCode::Down | KeyCode::Char('j') => *scroll += 1,
                    KeyCode::PageUp => *scroll = scroll.saturating_sub(self.page.get().max(1)),
                    KeyCode::PageDown | KeyCode::Char(' ') => *scroll += self.page.get().max(1),
                    KeyCode::Home | KeyCode::Char('g') => *scroll = 0,
                    KeyCode::End | KeyCode::Char('G') => *scroll = usize::MAX / 2,
                    _ => self.overlay = Overlay::None,
                }
                Vec::new()
            }
            Overlay::Choose(choose) => match key.code {
                KeyCode::Up | KeyCode::Char('k') => {
                    choose.selected = choose.selected.saturating_sub(1);
                    Vec::new()
                }
                KeyCode::Down | KeyCode::Char('j') => {
                    choose.selected = (choose.selected + 1).min(choose.items.len().saturating_sub(1));
                    Vec::new()
                }
                KeyCode::Enter => {
                    let picked = choose.items.get(choose.selected).map(|(id, _)| id.clone());
                    let what = choose.what;
                    self.overlay = Overlay::None;
                    match picked {
                        Some(id) if what == "mode" => vec![Action::SetMode(id)],
                        Some(id) => vec![Action::SetModel(id)],
                        None => Vec::new(),
                    }
                }
                _ => {
                    self.overlay = Overlay::None;
                    Vec::new()
                }
            },
        }
    }

    fn typing_key(&mut self, key: KeyEvent) -> Vec<Action> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let alt = key.modifiers.contains(KeyModifiers::ALT);
        match key.code {
            KeyCode::Esc if self.answering.is_some() => {
                self.answering = None;
                self.input.take();
                self.mode = Mode::Normal;
                self.say("the answers were not sent".to_owned(), Level::Info);
            }
            KeyCode::Esc => self.mode = Mode::Normal,
            KeyCode::Enter if self.answering.is_some() => return self.answer_field(),
            // A key at the bound does nothing; only a paste is cut and said.
            KeyCode::Enter if alt || key.modifiers.contains(KeyModifiers::SHIFT) => {
                self.input.insert("\n");
            }
            KeyCode::Char('j') if ctrl => {
                self.input.insert("\n");
            }
            KeyCode::Enter => return self.submit(),
            KeyCode::Backspace => self.input.backspace(),
            KeyCode::Delete => self.input.delete(),
            KeyCode::Left => self.input.cursor = self.input.cursor.saturating_sub(1),
            KeyCode::Right => self.input.cursor = (self.input.cursor + 1).min(self.input.len()),
            KeyCode::Home => self.input.cursor = 0,
            KeyCode::Char('a') if ctrl => self.input.cursor = 0,
            KeyCode::End => self.input.cursor = self.input.len(),
            KeyCode::Char('e') if ctrl => self.input.cursor = self.input.len(),
            KeyCode::Char('u') if ctrl => {
                self.input.take();
            }
            KeyCode::Char('w') if ctrl => self.input.delete_word(),
            KeyCode::PageUp => self.scroll_by(self.page.get() as isize),
            KeyCode::PageDown => self.scroll_by(-(self.page.get() as isize)),
            KeyCode::Char(c) if !ctrl => {
                self.input.insert(c.encode_utf8(&mut [0; 4]));
            }
            _ => {}
        }
        Vec::new()
    }

    /// Enter on the input line: a slash command, or a prompt.
    fn submit(&mut self) -> Vec<Action> {
        let text = self.input.text.trim().to_owned();
        if text.is_empty() {
            return Vec::new();
        }
        if let Some(command) = text.strip_prefix('/') {
            let (name, arg) =
                command.split_once(char::is_whitespace).map_or((command, ""), |(n, a)| (n, a.trim()));
            let known = matches!(name, "mode" | "model" | "help" | "quit");
            if known {
                self.input.take();
            }
            return match name {
                "mode" | "model" => self.switch(if name == "mode" { "mode" } else { "model" }, arg),
                "help" => {
                    self.overlay = Overlay::Help;
                    Vec::new()
                }
                "quit" => {
                    self.quit = true;
                    vec![Action::Quit]
                }
                _ => {
                    self.say(format!("unknown command /{name}: /mode, /model, /help, /quit (a prompt starting with / : write it with a space first)"), Level::Warn);
                    Vec::new()
                }
            };
        }
        if self.session.ended.is_some() {
            self.say("this session has ended: prompts go nowhere".to_owned(), Level::Warn);
            return Vec::new();
        }
        if !self.may_write {
            self.say("this device is an observer: it may not prompt".to_owned(), Level::Warn);
            return Vec::new();
        }
        self.input.take();
        self.scroll = 0;
        vec![Action::Prompt(text)]
    }

    /// `/mode [id]`, `/model [id]`: switch now, or open the list the agent offers.
    fn switch(&mut self, what: &'static str, arg: &str) -> Vec<Action> {
        if !self.may_write {
            self.say(format!("this device is an observer: it may not change the {what}"), Level::Warn);
            return Vec::new();
        }
        if !arg.is_empty() {
            return vec![if what == "mode" {
                Action::SetMode(arg.to_owned())
            } else {
                Action::SetModel(arg.to_owned())
            }];
        }
        let (list, key, id_key, current) = match what {
            "mode" => (self.session.modes.as_ref(), "availableModes", "id", "currentModeId"),
            _ => (self.session.models.as_ref(), "availableModels", "modelId", "currentModelId"),
        };
        let items: Vec<(String, String)> = list
            .and_then(|l| l.get(key))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| {
                let id = m.get(id_key).and_then(Value::as_str)?;
                Some((id.to_owned(), m.get("name").and_then(Value::as_str).unwrap_or(id).to_owned()))
            })
            .collect();
        if items.is_empty() {
            self.say(format!("the agent offers no {what}s"), Level::Warn);
            return Vec::new();
        }
        let now = list.and_then(|l| l.get(current)).and_then(Value::as_str);
        let selected = items.iter().position(|(id, _)| Some(id.as_str()) == now).unwrap_or(0);
        self.overlay = Overlay::Choose(Choose { what, items, selected });
        Vec::new()
    }

    fn scroll_by(&mut self, rows: isize) {
        self.scroll = self.scroll.saturating_add_signed(rows);
    }

    fn normal_key(&mut self, key: KeyEvent) -> Vec<Action> {
        let pending = !self.session.pending().is_empty();
        match key.code {
            KeyCode::Char('q') => {
                self.quit = true;
                return vec![Action::Quit];
            }
            KeyCode::Char('?') => self.overlay = Overlay::Help,
            KeyCode::Char('i') => self.mode = Mode::Typing,
            KeyCode::Char('/') => {
                self.mode = Mode::Typing;
                if self.input.text.is_empty() {
                    self.input.insert("/");
                }
            }
            KeyCode::Char(c @ ('a' | 'A' | 'r' | 'R')) if pending => return self.vote_key(c),
            KeyCode::Enter if pending => return self.vote_highlighted(),
            KeyCode::Enter | KeyCode::Char('x') if self.decided.is_some() => self.decided = None,
            KeyCode::Enter => self.mode = Mode::Typing,
            KeyCode::Up | KeyCode::Char('k') if pending => self.option = self.option.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') if pending => {
                let n = self.card_in_front().map_or(0, |p| options(p).len());
                self.option = (self.option + 1).min(n.saturating_sub(1));
            }
            KeyCode::Up | KeyCode::Char('k') => self.scroll_by(1),
            KeyCode::Down | KeyCode::Char('j') => self.scroll_by(-1),
            KeyCode::Tab | KeyCode::BackTab if pending => {
                let n = self.session.pending().len();
                self.card =
                    if key.code == KeyCode::Tab { (self.card + 1) % n } else { (self.card + n - 1) % n };
                self.option = 0;
            }
            KeyCode::Char('v') => {
                if let Some(p) = self.card_in_front() {
                    self.overlay = Overlay::Whole { request_id: p.request_id().to_owned(), scroll: 0 };
                }
            }
            KeyCode::Char('t') => self.thoughts_open = !self.thoughts_open,
            KeyCode::Char(c @ ('d' | 'D')) => {
                self.say("fetching the diff…".to_owned(), Level::Info);
                return vec![Action::Diff { workspace: c == 'D' }];
            }
            KeyCode::PageUp => self.scroll_by(self.page.get() as isize),
            KeyCode::PageDown | KeyCode::Char(' ') => self.scroll_by(-(self.page.get() as isize)),
            KeyCode::Home | KeyCode::Char('g') => self.scroll = usize::MAX / 2,
            KeyCode::End | KeyCode::Char('G') => self.scroll = 0,
            KeyCode::Esc => {
                if !self.may_write {
                    self.say("this device is an observer: it may not cancel".to_owned(), Level::Warn);
                } else if self.session.running() {
                    return vec![Action::Cancel];
                } else {
                    self.say("nothing is running".to_owned(), Level::Info);
                }
            }
            _ => {}
        }
        Vec::new()
    }

    /// `a`, `A`, `r`, `R` on the card in front.
    fn vote_key(&mut self, key: char) -> Vec<Action> {
        let Some(p) = self.card_in_front() else { return Vec::new() };
        let request_id = p.request_id().to_owned();
        let (kind, shorthand) = match key {
            'a' => ("allow_once", None),
            'A' => ("allow_always", Some(("allow-session", "allow for this session"))),
            'r' => ("reject_once", None),
            _ => ("reject_always", Some(("deny-session", "reject for this session"))),
        };
        let offered = options(p).into_iter().find(|o| o.get("kind").and_then(Value::as_str) == Some(kind));
        if let Some(o) = &offered
            && kind == "allow_once"
            && !question_fields(p).is_empty()
        {
            let o = o.clone();
            return self.begin_answering(&request_id, &o);
        }
        let action = match (offered, shorthand) {
            (Some(o), _) => select(&request_id, &o),
            // No `*_always` option: the daemon's session shorthand (a rule for this session).
            (None, Some((decision, label)))
                if has_kind(p, if key == 'A' { "allow_once" } else { "reject_once" }) =>
            {
                Action::Vote {
                    request_id: request_id.clone(),
                    body: json!({"decision": decision}),
                    label: label.to_owned(),
                }
            }
            _ => {
                self.say(format!("the agent offers no {kind} option here"), Level::Warn);
                return Vec::new();
            }
        };
        self.cast(action)
    }

    fn vote_highlighted(&mut self) -> Vec<Action> {
        let Some(p) = self.card_in_front() else { return Vec::new() };
        let request_id = p.request_id().to_owned();
        let asks = !question_fields(p).is_empty();
        match options(p).get(self.option).cloned() {
            Some(o)
                if asks && o.get("kind").and_then(Value::as_str).is_some_and(|k| k.starts_with("allow")) =>
            {
                self.begin_answering(&request_id, &o)
            }
            Some(o) => {
                let action = select(&request_id, &o);
                self.cast(action)
            }
            None => Vec::new(),
        }
    }

    /// The accepting option of a question: its fields are asked in the input line, one after
    /// another, and the vote carries the answers.
    fn begin_answering(&mut self, request_id: &str, option: &Value) -> Vec<Action> {
        if !self.may_write {
            self.say("this device is an observer: it may not answer".to_owned(), Level::Warn);
            return Vec::new();
        }
        let option_id = option.get("optionId").and_then(Value::as_str).unwrap_or("").to_owned();
        let label = option.get("name").and_then(Value::as_str).unwrap_or(&option_id).to_owned();
        self.answering = Some(Answering {
            request_id: request_id.to_owned(),
            option_id,
            label,
            field: 0,
            answers: serde_json::Map::new(),
        });
        self.input.take();
        self.mode = Mode::Typing;
        Vec::new()
    }

    /// Enter while answering: the line is the answer to the field asked (an empty line answers
    /// nothing; a choice may be given by its number); after the last field, the vote.
    fn answer_field(&mut self) -> Vec<Action> {
        let Some(mut a) = self.answering.take() else { return Vec::new() };
        let fields = self.session.permission(&a.request_id).map(question_fields).unwrap_or_default();
        let text = self.input.take();
        if let Some(field) = fields.get(a.field)
            && let Some(answer) = answer_of(field, text.trim())
        {
            let key = field.get("key").and_then(Value::as_str).unwrap_or("").to_owned();
            a.answers.insert(key, answer);
        }
        a.field += 1;
        if a.field < fields.len() {
            self.answering = Some(a);
            return Vec::new();
        }
        self.mode = Mode::Normal;
        let action = Action::Vote {
            request_id: a.request_id,
            body: json!({"outcome": {"outcome": "selected", "optionId": a.option_id}, "answers": a.answers}),
            label: a.label,
        };
        self.cast(action)
    }

    /// Sends a vote unless this client may not vote or one is on its way.
    fn cast(&mut self, action: Action) -> Vec<Action> {
        if !self.may_write {
            self.say("this device is an observer: it may not vote".to_owned(), Level::Warn);
            return Vec::new();
        }
        let Action::Vote { request_id, .. } = &action else { return Vec::new() };
        match self.session.permission_mut(request_id) {
            Some(p) if p.voting || p.resolved.is_some() => Vec::new(),
            Some(p) => {
                p.voting = true;
                p.error = None;
                vec![action]
            }
            None => Vec::new(),
        }
    }
}

/// The fields of the question a request asks (none for a permission, or a URL to open).
pub(crate) fn question_fields(p: &Permission) -> Vec<Value> {
    p.request.pointer("/question/fields").and_then(Value::as_array).cloned().unwrap_or_default()
}

/// What a typed line answers `field` with: `None` for an empty line; a choice's number (from 1,
/// as the card lists them) becomes its value, several separated by commas; any other text is
/// sent as typed (the daemon converts it, or says why not).
fn answer_of(field: &Value, text: &str) -> Option<Value> {
    if text.is_empty() {
        return None;
    }
    let choices = field.get("choices").and_then(Value::as_array).cloned().unwrap_or_default();
    let numbered = |s: &str| -> Value {
        match s.parse::<usize>() {
            Ok(n) if (1..=choices.len()).contains(&n) => {
                choices[n - 1].get("value").cloned().unwrap_or(json!(s))
            }
            _ => json!(s),
        }
    };
    if field.get("multiple") == Some(&Value::Bool(true)) {
        let items: Vec<Value> =
            text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(numbered).collect();
        return Some(Value::Array(items));
    }
    Some(if choices.is_empty() { json!(text) } else { numbered(text) })
}

/// The options a request offers.
pub(crate) fn options(p: &Permission) -> Vec<Value> {
    p.request.get("options").and_then(Value::as_array).cloned().unwrap_or_default()
}

fn has_kind(p: &Permission, kind: &str) -> bool {
    options(p).iter().any(|o| o.get("kind").and_then(Value::as_str) == Some(kind))
}

fn select(request_id: &str, option: &Value) -> Action {
    let id = option.get("optionId").and_then(Value::as_str).unwrap_or("").to_owned();
    let label = option.get("name").and_then(Value::as_str).unwrap_or(&id).to_owned();
    Action::Vote {
        request_id: request_id.to_owned(),
        body: json!({"outcome": {"outcome": "selected", "optionId": id}}),
        label,
    }
}

/// The key that picks an option of `kind` on a card (`a`, `A`, `r`, `R`), if any.
pub(crate) fn key_for(kind: &str) -> Option<char> {
    match kind {
        "allow_once" => Some('a'),
        "allow_always" => Some('A'),
        "reject_once" => Some('r'),
        "reject_always" => Some('R'),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn ch(c: char) -> KeyEvent {
        key(KeyCode::Char(c))
    }

    fn app() -> App {
        App::new(SessionView::new("s", Some("me")), Theme::PLAIN, true, "operator".to_owned())
    }

    fn request(app: &mut App, id: &str, kinds: &[&str]) {
        let options: Vec<Value> = kinds
            .iter()
            .map(|k| json!({"optionId": format!("{k}-id"), "name": format!("{k} name"), "kind": k}))
            .collect();
        app.event(
            "permission_request",
            None,
            &json!({"data": {"requestId": id, "toolCall": {"title": "Write"}, "options": options}}),
        );
    }

    fn resolve(app: &mut App, id: &str, by: &str) {
        app.event("permission_resolved", None, &json!({"data": {"requestId": id, "outcome": {"outcome": "selected", "optionId": "allow_once-id"}, "resolvedBy": "vote", "voterClientId": by}}));
    }

    fn typed(app: &mut App, text: &str) -> Vec<Action> {
        text.chars().flat_map(|c| app.key(ch(c))).collect()
    }

    /// An app whose input line (opened with `i`) holds `text`, typed.
    fn writing(text: &str) -> App {
        let mut a = app();
        a.key(ch('i'));
        typed(&mut a, text);
        a
    }

    /// Qwen Code's question as the daemon shows it: one choice, several, a number, a secret.
    fn question(app: &mut App, id: &str) {
        let choices = |names: &[&str]| -> Value {
            names.iter().map(|n| json!({"value": n, "label": n, "description": ""})).collect()
        };
        let fields = json!([
            {"key": "0", "title": "Library", "type": "choice", "required": true, "choices": choices(&["chrono", "jiff"])},
            {"key": "1", "title": "Features", "type": "choice", "multiple": true, "choices": choices(&["serde", "tz"])},
            {"key": "n", "title": "Replicas", "type": "integer"},
            {"key": "token", "title": "Token", "type": "text", "sensitive": true},
        ]);
        let options = json!([
            {"optionId": "proceed_once", "name": "Submit", "kind": "allow_once"},
            {"optionId": "cancel", "name": "Cancel", "kind": "reject_once"},
        ]);
        app.event(
            "permission_request",
            None,
            &json!({"data": {"requestId": id, "toolCall": {"title": "Ask"}, "options": options,
                "question": {"form": "user_question", "message": "", "fields": fields}}}),
        );
    }

    /// Issue #43: `a` on a question asks its fields in the input line one after another; a
    /// choice by its number or its name, several with commas, an empty line no answer; the last
    /// Enter votes with the answers. Esc drops them; a question decided elsewhere ends it.
    #[test]
    fn a_question_is_answered_field_by_field_in_the_input_line() {
        let mut a = app();
        question(&mut a, "q1");
        assert_eq!(a.key(ch('a')), vec![], "no vote yet: the fields are asked first");
        assert_eq!((a.mode, a.answering.as_ref().map(|x| x.field)), (Mode::Typing, Some(0)));
        typed(&mut a, "2");
        assert_eq!(a.key(key(KeyCode::Enter)), vec![]);
        typed(&mut a, "1, tz");
        a.key(key(KeyCode::Enter));
        a.key(key(KeyCode::Enter));
        typed(&mut a, "sk-1");
        let voted = a.key(key(KeyCode::Enter));
        let body = json!({"outcome": {"outcome": "selected", "optionId": "proceed_once"},
            "answers": {"0": "jiff", "1": ["serde", "tz"], "token": "sk-1"}});
        assert_eq!(voted, vec![Action::Vote { request_id: "q1".into(), body, label: "Submit".into() }]);
        assert_eq!((a.mode, a.answering.is_none()), (Mode::Normal, true));

        let mut a = app();
        question(&mut a, "q2");
        a.key(key(KeyCode::Enter));
        typed(&mut a, "chrono");
        a.key(key(KeyCode::Enter));
        a.key(key(KeyCode::Esc));
        assert_eq!((a.mode, a.answering.is_none(), a.input.text.as_str()), (Mode::Normal, true, ""));
        assert!(a.session.permission("q2").is_some_and(|p| !p.voting), "nothing sent");
        assert_eq!(a.key(ch('r')).len(), 1, "declining asks nothing");

        let mut a = app();
        question(&mut a, "q3");
        a.key(ch('a'));
        typed(&mut a, "jiff");
        resolve(&mut a, "q3", "bob");
        assert_eq!((a.mode, a.answering.is_none(), a.input.text.as_str()), (Mode::Normal, true, ""));
    }

    /// A question's answers survive what else happens meanwhile: another request raised and
    /// decided, the model switched. Only its own decision ends them.
    #[test]
    fn answers_being_typed_outlive_other_requests_and_events() {
        let mut a = app();
        question(&mut a, "q1");
        a.key(ch('a'));
        typed(&mut a, "jiff");
        request(&mut a, "r9", &["allow_once"]);
        resolve(&mut a, "r9", "bob");
        a.event("model_switched", None, &json!({"data": {"modelId": "m2"}}));
        assert_eq!(
            (a.mode, a.answering.as_ref().map(|x| x.request_id.as_str()), a.input.text.as_str()),
            (Mode::Typing, Some("q1"), "jiff")
        );
    }

    /// An empty input line gives way to a new request's card, and to nothing else.
    #[test]
    fn an_empty_input_line_is_left_for_a_new_request_only() {
        let mut a = app();
        a.key(ch('i'));
        a.event("model_switched", None, &json!({"data": {"modelId": "m2"}}));
        assert_eq!(a.mode, Mode::Typing, "no new request: the line stays");
        request(&mut a, "r1", &["allow_once"]);
        assert_eq!(a.mode, Mode::Normal, "a new request's card takes the keys");
    }

    /// Esc leaves a prompt being written as it is (only answers are dropped).
    #[test]
    fn esc_keeps_a_prompts_draft() {
        let mut a = writing("draft");
        a.key(key(KeyCode::Esc));
        assert_eq!((a.mode, a.input.text.as_str()), (Mode::Normal, "draft"));
        assert!(a.status.as_ref().is_none_or(|(s, _)| !s.contains("answers")), "{:?}", a.status);
    }

    /// Enter on a question's highlighted option: an allowing one asks the fields, any other votes
    /// at once; on a plain request an allowing option votes at once.
    #[test]
    fn enter_on_a_questions_cancel_votes_and_on_a_requests_allow_votes() {
        let mut a = app();
        question(&mut a, "q1");
        a.key(key(KeyCode::Down));
        let got = a.key(key(KeyCode::Enter));
        assert!(
            matches!(&got[..], [Action::Vote { body, .. }] if body["outcome"]["optionId"] == "cancel"),
            "{got:?}"
        );
        assert!(a.answering.is_none());
        let mut a = app();
        request(&mut a, "r1", &["allow_once", "reject_once"]);
        let got = a.key(key(KeyCode::Enter));
        assert!(
            matches!(&got[..], [Action::Vote { body, .. }] if body["outcome"]["optionId"] == "allow_once-id"),
            "{got:?}"
        );
        assert!(a.answering.is_none());
    }

    /// A typed number names a choice only within the list (from 1); any other is sent as typed,
    /// for the daemon to refuse with its reason.
    #[test]
    fn a_number_outside_the_choices_is_sent_as_typed() {
        let choices = json!([{"value": "chrono"}, {"value": "jiff"}]);
        let one = json!({"key": "0", "type": "choice", "choices": choices});
        let many = json!({"key": "1", "type": "choice", "multiple": true, "choices": choices});
        assert_eq!(answer_of(&one, "2"), Some(json!("jiff")));
        assert_eq!(answer_of(&one, "0"), Some(json!("0")));
        assert_eq!(answer_of(&one, "3"), Some(json!("3")));
        assert_eq!(answer_of(&many, "1, 3,,0"), Some(json!(["chrono", "3", "0"])));
        assert_eq!(answer_of(&one, ""), None);
        assert_eq!(answer_of(&json!({"key": "n", "type": "integer"}), "2"), Some(json!("2")));
    }

    #[test]
    fn letters_typed_into_a_prompt_never_vote_or_quit() {
        let mut a = app();
        request(&mut a, "r1", &["allow_once", "reject_once"]);
        assert_eq!(a.key(ch('i')), vec![]);
        assert_eq!(typed(&mut a, "quick, add a test"), vec![]);
        assert!(!a.quit);
        assert!(a.session.permission("r1").is_some_and(|p| !p.voting));
        assert_eq!(a.key(key(KeyCode::Enter)), vec![Action::Prompt("quick, add a test".into())]);
        assert_eq!(a.input, Input::default());
        assert_eq!(a.mode, Mode::Typing, "Enter keeps the input line for the next prompt");
        a.key(key(KeyCode::Esc));
        assert_eq!(a.mode, Mode::Normal);
        assert_eq!(a.key(ch('q')), vec![Action::Quit]);
    }

    #[test]
    fn card_keys_pick_options_by_kind_and_the_session_shorthands_fill_in() {
        let mut a = app();
        request(&mut a, "r1", &["allow_once", "allow_always", "reject_once"]);
        let vote = |id: &str, option: &str, label: &str| Action::Vote {
            request_id: id.into(),
            body: json!({"outcome": {"outcome": "selected", "optionId": option}}),
            label: label.into(),
        };
        assert_eq!(a.key(ch('A')), vec![vote("r1", "allow_always-id", "allow_always name")]);
        assert_eq!(a.key(ch('a')), vec![], "one vote at a time");
        a.outcome(Outcome::Voted {
            request_id: "r1".into(),
            label: "x".into(),
            result: Err("refused".into()),
        });
        assert_eq!(a.key(ch('a')), vec![vote("r1", "allow_once-id", "allow_once name")]);
        let mut a = app();
        request(&mut a, "r2", &["allow_once", "reject_once"]);
        assert_eq!(
            a.key(ch('R')),
            vec![Action::Vote {
                request_id: "r2".into(),
                body: json!({"decision": "deny-session"}),
                label: "reject for this session".into()
            }]
        );
        let mut a = app();
        request(&mut a, "r3", &["allow_once"]);
        assert_eq!(a.key(ch('r')), vec![], "no reject option: nothing sent");
        assert!(a.status.as_ref().is_some_and(|(s, _)| s.contains("reject_once")));
        assert_eq!(a.key(ch('R')), vec![], "no reject_once either: no shorthand");
    }

    #[test]
    fn enter_chooses_the_highlighted_option_and_arrows_move_it() {
        let mut a = app();
        request(&mut a, "r1", &["allow_once", "allow_always", "reject_once"]);
        a.key(key(KeyCode::Down));
        a.key(key(KeyCode::Down));
        a.key(key(KeyCode::Down));
        assert_eq!(a.option, 2, "the last option is the bound");
        let got = a.key(key(KeyCode::Enter));
        assert!(
            matches!(&got[..], [Action::Vote { body, .. }] if body["outcome"]["optionId"] == "reject_once-id"),
            "{got:?}"
        );
    }

    #[test]
    fn a_card_decided_elsewhere_stays_in_front_with_its_outcome() {
        let mut a = app();
        request(&mut a, "r1", &["allow_once"]);
        resolve(&mut a, "r1", "web-1");
        let front = a.card_in_front().expect("still in front");
        assert_eq!(a.session.resolution_text(front).as_deref(), Some("allow_once name, by web-1"));
        assert_eq!(a.key(ch('a')), vec![], "no keys on a decided card");
        a.key(key(KeyCode::Enter));
        assert!(a.card_in_front().is_none(), "Enter puts it away");
        // A new request replaces a lingering one at once.
        request(&mut a, "r2", &["allow_once"]);
        resolve(&mut a, "r2", "me");
        request(&mut a, "r3", &["allow_once"]);
        assert_eq!(a.card_in_front().map(Permission::request_id), Some("r3"));
    }

    /// Issue #44: `attach` opened on the last card of the replay, decided long before.
    #[test]
    fn a_card_raised_and_decided_in_the_replay_is_not_left_in_front() {
        let mut a = app();
        a.replay_begins();
        request(&mut a, "r1", &["allow_once"]);
        resolve(&mut a, "r1", "web-1");
        request(&mut a, "r2", &["allow_once"]);
        resolve(&mut a, "r2", "web-1");
        a.event("replay_complete", None, &json!({"data": {}}));
        assert!(a.card_in_front().is_none(), "history, not a card");
        // A card still pending after the replay is in front, as it should be.
        a.replay_begins();
        request(&mut a, "r3", &["allow_once"]);
        a.event("replay_complete", None, &json!({"data": {}}));
        assert_eq!(a.card_in_front().map(Permission::request_id), Some("r3"));
        // Decided while the connection was down: the replay after the reconnect leaves it in
        // front with its outcome, since the person had it on screen.
        a.replay_begins();
        resolve(&mut a, "r3", "web-1");
        a.event("replay_complete", None, &json!({"data": {}}));
        assert_eq!(a.card_in_front().map(Permission::request_id), Some("r3"));
        assert!(a.card_in_front().is_some_and(|p| p.resolved.is_some()));
    }

    #[test]
    fn a_card_takes_the_keys_only_from_an_empty_input_line() {
        let mut a = app();
        a.key(ch('i'));
        request(&mut a, "r1", &["allow_once"]);
        assert_eq!(a.mode, Mode::Normal);
        let mut a = writing("half a sentence");
        request(&mut a, "r1", &["allow_once"]);
        assert_eq!(a.mode, Mode::Typing);
        assert_eq!(typed(&mut a, " a"), vec![]);
    }

    #[test]
    fn tab_cycles_cards_and_the_front_card_stays_when_others_resolve() {
        let mut a = app();
        request(&mut a, "r1", &["allow_once"]);
        request(&mut a, "r2", &["allow_once"]);
        request(&mut a, "r3", &["allow_once"]);
        a.key(key(KeyCode::Tab));
        assert_eq!(a.card_in_front().map(Permission::request_id), Some("r2"));
        resolve(&mut a, "r1", "x");
        assert_eq!(a.card_in_front().map(Permission::request_id), Some("r2"));
        a.key(key(KeyCode::BackTab));
        assert_eq!(a.card_in_front().map(Permission::request_id), Some("r3"));
    }

    #[test]
    fn a_card_index_past_the_pending_list_shows_the_last_pending_card() {
        // `event` keeps the index in range; requests fetched after a gap are added to the
        // session directly (run.rs), and the model may forget the oldest: the front still holds.
        let mut a = app();
        request(&mut a, "r1", &["allow_once"]);
        request(&mut a, "r2", &["allow_once"]);
        a.card = 7;
        assert_eq!(a.card_in_front().map(Permission::request_id), Some("r2"));
        a.card = 1;
        assert_eq!(a.card_in_front().map(Permission::request_id), Some("r2"));
        a.card = 0;
        assert_eq!(a.card_in_front().map(Permission::request_id), Some("r1"));
    }

    #[test]
    fn an_observer_sees_cards_and_cannot_vote_prompt_or_cancel() {
        let mut a = App::new(SessionView::new("s", None), Theme::PLAIN, false, "device".into());
        request(&mut a, "r1", &["allow_once"]);
        assert_eq!(a.key(ch('a')), vec![]);
        assert_eq!(a.key(key(KeyCode::Enter)), vec![]);
        a.key(ch('i'));
        typed(&mut a, "hello");
        assert_eq!(a.key(key(KeyCode::Enter)), vec![]);
        assert!(a.status.as_ref().is_some_and(|(s, _)| s.contains("observer")));
    }

    #[test]
    fn slash_commands_switch_or_list_what_the_agent_offers() {
        let mut a = app();
        a.session.modes = Some(
            json!({"availableModes": [{"id": "default", "name": "Ask"}, {"id": "plan", "name": "Plan"}], "currentModeId": "plan"}),
        );
        a.key(ch('/'));
        typed(&mut a, "mode");
        assert_eq!(a.key(key(KeyCode::Enter)), vec![]);
        assert_eq!(
            a.overlay,
            Overlay::Choose(Choose {
                what: "mode",
                items: vec![("default".into(), "Ask".into()), ("plan".into(), "Plan".into())],
                selected: 1
            })
        );
        a.key(key(KeyCode::Up));
        assert_eq!(a.key(key(KeyCode::Enter)), vec![Action::SetMode("default".into())]);
        typed(&mut a, "/model m2");
        assert_eq!(a.key(key(KeyCode::Enter)), vec![Action::SetModel("m2".into())]);
        typed(&mut a, "/model");
        a.key(key(KeyCode::Enter));
        assert!(a.status.as_ref().is_some_and(|(s, _)| s.contains("no models")));
        typed(&mut a, "/nope");
        assert_eq!(a.key(key(KeyCode::Enter)), vec![]);
        assert_eq!(a.input.text, "/nope", "an unknown command stays to be fixed");
    }

    #[test]
    fn d_and_shift_d_ask_for_a_diff_which_opens_scrolls_and_closes() {
        let mut a = app();
        assert_eq!(a.key(ch('d')), vec![Action::Diff { workspace: false }]);
        assert_eq!(a.key(ch('D')), vec![Action::Diff { workspace: true }]);
        a.key(ch('i'));
        assert_eq!(a.key(ch('d')), vec![], "typed into the input line");
        assert_eq!(a.input.text, "d");
        a.key(key(KeyCode::Esc));
        let text = "--- a/x.txt\n+++ b/x.txt\n@@ -0,0 +1,1 @@\n+made".to_owned();
        a.outcome(Outcome::Diffed { title: "the last turn's changes".into(), result: Ok(text) });
        let Overlay::Text { title, lines, scroll } = &a.overlay else { panic!("{:?}", a.overlay) };
        assert_eq!((title.as_str(), lines.len(), *scroll), ("the last turn's changes", 4, 0));
        a.key(ch('j'));
        assert!(matches!(a.overlay, Overlay::Text { scroll: 1, .. }));
        assert_eq!(a.key(ch('x')), vec![], "any other key closes it");
        assert_eq!(a.overlay, Overlay::None);
        a.outcome(Outcome::Diffed { title: "the workspace's changes".into(), result: Err("refused".into()) });
        assert_eq!(a.overlay, Overlay::None);
        assert_eq!(a.status, Some(("the workspace's changes: refused".to_owned(), Level::Error)));
    }

    #[test]
    fn esc_cancels_a_running_turn_only_in_normal_mode() {
        let mut a = app();
        assert_eq!(a.key(key(KeyCode::Esc)), vec![]);
        a.event("session_update", Some(1), &json!({"promptId": "p", "originatorClientId": "me", "data": {"update": {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "x"}}}}));
        assert!(a.session.running());
        a.key(ch('i'));
        assert_eq!(a.key(key(KeyCode::Esc)), vec![], "the first Esc leaves the input line");
        assert_eq!(a.key(key(KeyCode::Esc)), vec![Action::Cancel]);
    }

    #[test]
    fn the_input_line_edits_by_character_and_is_bounded() {
        let mut a = writing("héllo wörld");
        a.key(key(KeyCode::Left));
        a.key(key(KeyCode::Backspace));
        assert_eq!(a.input.text, "héllo wörd");
        a.key(KeyEvent::new(KeyCode::Char('w'), KeyModifiers::CONTROL));
        assert_eq!(a.input.text, "héllo d");
        a.key(key(KeyCode::Home));
        a.key(key(KeyCode::Delete));
        assert_eq!(a.input.text, "éllo d");
        a.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT));
        assert_eq!(a.input.text, "\néllo d");
        // Room for one more character after the paste: "y" goes in at the cursor, "z" is cut.
        a.paste(&"x".repeat(MAX_INPUT_CHARS - 8));
        assert_eq!(a.status, None);
        a.paste("yz");
        assert_eq!((a.input.text.chars().count(), a.input.cursor), (MAX_INPUT_CHARS, MAX_INPUT_CHARS - 6));
        assert!(a.input.text.ends_with("xyéllo d"));
        let cut = format!("the input line holds {MAX_INPUT_CHARS} characters: the rest was cut");
        assert_eq!(a.status, Some((cut, Level::Warn)));
        assert_eq!(a.key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)), vec![Action::Quit]);
    }
}

//! `mediatord attach`: who we are, which session (given, created, or picked), then one loop that
//! draws the client and waits for whatever comes first — a key, a frame from the event stream, the
//! outcome of a call, a signal — and carries each [`Action`] to the daemon in a task of its own, so
//! a slow answer never freezes the screen.

use std::io::IsTerminal as _;

use crossterm::event::{Event, EventStream};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use super::app::{Action, App, Link, Outcome};
use super::connect::{Incoming, Login, STREAM_QUEUE, expect_ok, follow, identify, session_path};
use super::model::{Level, SessionView};
use super::picker::{self, Chosen, Pick, Picker};
use super::terminal::Screen;
use super::theme::Theme;
use super::view;
use crate::client::api::Endpoint;

/// Outcomes of calls queued back to the screen; a person cannot start more at once.
const OUTCOME_QUEUE: usize = 64;
/// Frames applied before the screen is drawn again, so a burst (a replay) is drawn once, not per
/// event, and a key still gets through between bursts.
const FRAMES_PER_DRAW: usize = 512;
/// The time a detach on the way out may take: the person asked to quit.
const DETACH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// What `mediatord attach` was asked for.
#[derive(Debug, Clone, Default)]
pub struct AttachOptions {
    pub session: Option<String>,
    pub agent: Option<String>,
    pub workspace: Option<String>,
    /// `NO_COLOR`'s value.
    pub no_color: Option<String>,
}

/// Runs the client until the person quits: `Ok` to exit 0, `Err` with what to print.
pub async fn attach(conn: Login, opts: AttachOptions) -> Result<(), String> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(
            "attach needs a terminal (for a script, `mediatord watch SESSION` prints events as lines)"
                .to_owned(),
        );
    }
    let target = conn.target()?;
    let (identity, capabilities) = identify(&conn, &target).await?;
    let theme = Theme::from_env(opts.no_color.as_deref());
    let wants_new = opts.workspace.is_some() || opts.agent.is_some();
    let session_id = match (&opts.session, wants_new) {
        (Some(id), _) => Some(id.clone()),
        (None, true) => Some(create(&target, opts.workspace.as_deref(), opts.agent.as_deref()).await?),
        (None, false) => None,
    };
    let rows = match session_id {
        Some(_) => Vec::new(),
        None => picker::load(&target, &capabilities).await?,
    };

    let mut screen = Screen::enter().map_err(|e| format!("cannot take over the terminal: {e}"))?;
    let mut keys = EventStream::new();
    let mut signals = Signals::new()?;
    let session_id = match session_id {
        Some(id) => id,
        None => {
            let mut picker = Picker { rows, selected: 0, theme, url: target.url().to_owned() };
            let pick = loop {
                screen.draw(|f| picker.draw(f)).map_err(|e| e.to_string())?;
                tokio::select! {
                    key = keys.next() => match key {
                        Some(Ok(Event::Key(k))) => match picker.key(k) {
                            Chosen::Open(pick) => break pick,
                            Chosen::Quit => return Ok(()),
                            Chosen::Stay => {}
                        },
                        Some(Ok(_)) => {}
                        Some(Err(e)) => return Err(format!("reading the terminal: {e}")),
                        None => return Ok(()),
                    },
                    _ = signals.any() => return Ok(()),
                }
            };
            match pick {
                Pick::Open(id) => id,
                Pick::Create(cwd) => create(&target, Some(&cwd), None).await?,
            }
        }
    };

    let mut app = App::new(
        SessionView::new(&session_id, identity.client_id.as_deref()),
        theme,
        identity.may_write,
        identity.shown,
    );
    if let Ok(summary) = expect_ok(&target, "GET", &session_path(&session_id, ""), &[], None).await {
        app.agent = summary["agent"].as_str().map(str::to_owned);
        app.workspace = summary["workspaceCwd"].as_str().map(str::to_owned);
    }
    if let Ok(context) = expect_ok(&target, "GET", &session_path(&session_id, "/context"), &[], None).await {
        app.session.models = context.pointer("/state/models").filter(|v| !v.is_null()).cloned();
        app.session.modes = context.pointer("/state/modes").filter(|v| !v.is_null()).cloned();
    }
    let result = session_loop(&mut screen, &target, &mut app, &mut keys, &mut signals).await;
    drop(screen);
    // The session goes on without us: leave its registered clients (a consensus counts them).
    if identity.client_id.is_some() {
        let path = session_path(&session_id, "/detach");
        let _ = tokio::time::timeout(DETACH_TIMEOUT, target.call("POST", &path, None)).await;
    }
    result
}

/// `POST /session {cwd?, agent?}`: the id of the session created or joined.
async fn create(target: &Endpoint, cwd: Option<&str>, agent: Option<&str>) -> Result<String, String> {
    let cwd = cwd.map(|c| {
        std::fs::canonicalize(c).map_or_else(|_| c.to_owned(), |p| p.to_string_lossy().into_owned())
    });
    let body = json!({"cwd": cwd, "agent": agent});
    let answer = expect_ok(target, "POST", "/session", &[], Some(&body))
        .await
        .map_err(|e| format!("cannot create or join the session: {e}"))?;
    answer["sessionId"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "the daemon's answer has no sessionId".to_owned())
}

/// SIGINT, SIGTERM and SIGHUP (the SSH connection dropped): each ends the client cleanly.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Signals, String> {
        let on = |kind| signal(kind).map_err(|e| format!("cannot watch signals: {e}"));
        Ok(Signals {
            int: on(SignalKind::interrupt())?,
            term: on(SignalKind::terminate())?,
            hup: on(SignalKind::hangup())?,
        })
    }

    async fn any(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
            _ = self.hup.recv() => {}
        }
    }
}

async fn session_loop(
    screen: &mut Screen,
    target: &Endpoint,
    app: &mut App,
    keys: &mut EventStream,
    signals: &mut Signals,
) -> Result<(), String> {
    let (frames_tx, mut frames) = mpsc::channel(STREAM_QUEUE);
    let follower = tokio::spawn(follow(target.clone(), app.session.id.clone(), 0, frames_tx));
    let (outcome_tx, mut outcomes) = mpsc::channel(OUTCOME_QUEUE);
    let mut streaming = true;
    let result = loop {
        if let Err(e) = screen.draw(|f| view::draw(f, app)) {
            break Err(format!("drawing: {e}"));
        }
        tokio::select! {
            key = keys.next() => match key {
                Some(Ok(Event::Key(k))) => {
                    for action in app.key(k) {
                        dispatch(target, &app.session.id, action, &outcome_tx);
                    }
                }
                Some(Ok(Event::Paste(text))) => {
                    app.paste(&text);
                }
                Some(Ok(_)) => {} // a resize: the next drawing fits the new size
                Some(Err(e)) => break Err(format!("reading the terminal: {e}")),
                None => break Ok(()),
            },
            first = frames.recv(), if streaming => {
                // The stream's task is done (the session ended, or is history): nothing more comes.
                streaming = first.is_some();
                let mut next = first;
                let mut n = 0;
                while let Some(incoming) = next {
                    if let Some(refetch) = receive(app, incoming) && refetch {
                        refetch_pending(target, &app.session.id, &outcome_tx);
                    }
                    n += 1;
                    next = if n < FRAMES_PER_DRAW { frames.try_recv().ok() } else { None };
                }
            },
            Some(outcome) = outcomes.recv() => match outcome {
                Reply::Outcome(o) => app.outcome(o),
                Reply::Pending(list) => {
                    for request in list {
                        app.session.add_request(request, None, None);
                    }
                }
            },
            _ = signals.any() => break Ok(()),
        }
        if app.quit {
            break Ok(());
        }
    };
    follower.abort();
    result
}

/// Applies what the stream's task sent; `Some(true)` when the pending requests must be fetched
/// again (the stream had a gap).
fn receive(app: &mut App, incoming: Incoming) -> Option<bool> {
    match incoming {
        Incoming::Opened => {
            app.link = Link::Replaying;
            app.replay_begins();
            None
        }
        Incoming::Frame(frame) => {
            let envelope: Value = serde_json::from_str(&frame.data).unwrap_or(Value::Null);
            if frame.event == "replay_complete" && app.link == Link::Replaying {
                app.link = Link::Live;
            }
            app.event(&frame.event, frame.id, &envelope);
            Some(frame.event == "state_resync_required")
        }
        Incoming::Dropped(why) => {
            app.link = Link::Reconnecting(why);
            None
        }
        Incoming::Finished(why) => {
            app.link = Link::Done;
            if let Some(why) = why {
                app.session.note(why.clone(), Level::Error);
                app.session.ended.get_or_insert(why);
            }
            None
        }
    }
}

/// What a call's task sends back.
enum Reply {
    Outcome(Outcome),
    Pending(Vec<Value>),
}

fn refetch_pending(target: &Endpoint, session_id: &str, tx: &mpsc::Sender<Reply>) {
    let (target, path, tx) = (target.clone(), session_path(session_id, "/permissions"), tx.clone());
    tokio::spawn(async move {
        if let Ok(answer) = expect_ok(&target, "GET", &path, &[], None).await {
            let list = answer["pending"].as_array().cloned().unwrap_or_default();
            let _ = tx.send(Reply::Pending(list)).await;
        }
    });
}

/// Carries `action` to the daemon in a task; its outcome comes back on `tx`.
fn dispatch(target: &Endpoint, session_id: &str, action: Action, tx: &mpsc::Sender<Reply>) {
    let target = target.clone();
    let session_id = session_id.to_owned();
    let tx = tx.clone();
    tokio::spawn(async move {
        let path = |rest: &str| session_path(&session_id, rest);
        let outcome = match action {
            Action::Quit => return,
            Action::Prompt(text) => {
                let body = json!({"prompt": [{"type": "text", "text": text}]});
                let sent =
                    expect_ok(&target, "POST", &path("/prompt"), &[("prefer", "respond-async")], Some(&body))
                        .await;
                Outcome::Prompted(sent.map(|_| ()))
            }
            Action::Cancel => {
                Outcome::Cancelled(expect_ok(&target, "POST", &path("/cancel"), &[], None).await.map(|_| ()))
            }
            Action::Vote { request_id, body, label } => {
                let route = path(&format!("/permission/{}", crate::client::api::segment(&request_id)));
                let result = expect_ok(&target, "POST", &route, &[], Some(&body)).await.map(|_| ());
                Outcome::Voted { request_id, label, result }
            }
            Action::SetMode(id) => {
                let result =
                    expect_ok(&target, "POST", &path("/mode"), &[], Some(&json!({"modeId": id}))).await;
                Outcome::Switched { what: "mode", result: result.map(|_| ()) }
            }
            Action::SetModel(id) => {
                let result =
                    expect_ok(&target, "POST", &path("/model"), &[], Some(&json!({"modelId": id}))).await;
                Outcome::Switched { what: "model", result: result.map(|_| ()) }
            }
            Action::Diff { workspace } => {
                let (title, session) = if workspace {
                    ("the workspace's changes", None)
                } else {
                    ("the last turn's changes", Some(session_id.as_str()))
                };
                let result = super::diff::text(&target, session, None, false).await;
                Outcome::Diffed { title: title.to_owned(), result }
            }
        };
        let _ = tx.send(Reply::Outcome(outcome)).await;
    });
}

//! The terminal client (issue #31), driven in a real terminal: `mediatord attach` in a tmux pane
//! against the real daemon and the demo agent, keys sent with `send-keys`, the screen read with
//! `capture-pane`; and its two commands for scripts, `watch` and `approve`.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

const ME: &str = "tui:tester";

/// `mediatord attach SESSION` as [`ME`] in an 80 × 24 pane.
fn attach(d: &Daemon, sid: &str, env: &[(&str, &str)]) -> Tmux {
    Tmux::run(&[bin(), "attach", sid, "--url", &d.base, "--client-id", ME], env, 80, 24)
}

/// Waits (bounded) until `path` holds `text`.
async fn file_holds(path: &Path, text: &str) {
    let deadline = Instant::now() + WAIT;
    while std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        assert!(Instant::now() < deadline, "{} never held {text:?}", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await; // polling a file the agent writes
    }
}

/// Asserts that the command exited 0 and left the terminal as it found it: the alternate screen
/// left, the cursor visible, the line discipline back (canonical mode, echo, CR→NL, output
/// processing, signals).
fn assert_restored(t: &Tmux, screen: &str) {
    assert!(screen.contains("EXIT=0"), "{screen}");
    for flag in ["icanon", "echo", "icrnl", "opost", "isig"] {
        assert!(screen.contains(&format!("STTY {flag} on")), "{flag} is off after the client:\n{screen}");
    }
    assert_eq!(t.display("#{alternate_on}"), "0", "still on the alternate screen");
    assert_eq!(t.display("#{cursor_flag}"), "1", "the cursor is hidden");
    assert_eq!(t.display("#{pane_title}"), "test-title", "the title was changed");
}

#[tokio::test]
async fn attach_replays_the_session_and_answers_cards_with_a_and_r_as_the_terminal_client() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    assert_eq!(d.prompt(&sid, Some("alice"), "an earlier turn").await.status, 200);
    let t = attach(&d, &sid, &[]);
    t.until("the earlier turn, replayed", |s| s.contains("alice › an earlier turn") && s.contains(" live "))
        .await;

    // A prompt typed and sent reaches the agent (the demo agent echoes it).
    t.keys(&["i"]);
    t.text("hello from the terminal");
    t.keys(&["Enter"]);
    t.until("the prompt and the agent's echo", |s| {
        s.contains("you › hello from the terminal") && s.matches("hello from the terminal").count() == 2
    })
    .await;

    // A card for a write; `a` gets the file written.
    t.text("write notes.txt from the terminal");
    t.keys(&["Enter"]);
    t.until("the card", |s| s.contains("permission 1 of 1") && s.contains("[a] Allow once")).await;
    t.keys(&["a"]);
    file_holds(&d.workspace.join("notes.txt"), "from the terminal").await;
    t.until("the outcome on the card", |s| s.contains(&format!("decided: Allow once, by you ({ME})"))).await;

    // `r` on the next: no file, and the audit names the terminal client as the voter.
    t.keys(&["i"]);
    t.text("write second.txt never");
    t.keys(&["Enter"]);
    t.until("the second card", |s| s.contains("Write second.txt") && s.contains("[r] Reject")).await;
    t.keys(&["r"]);
    t.until("the refusal", |s| {
        s.contains(&format!("decided: Reject, by you ({ME})")) && s.contains("permission denied")
    })
    .await;
    assert!(!d.workspace.join("second.txt").exists());
    let entries = d.audit(&sid).await;
    let decided: Vec<(&str, &str, &str)> = entries
        .iter()
        .map(|e| {
            (
                e["toolCall"]["title"].as_str().unwrap_or(""),
                e["outcome"]["optionId"].as_str().unwrap_or(""),
                e["voterClientId"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(decided, [("Write notes.txt", "allow_once", ME), ("Write second.txt", "reject_once", ME)]);

    t.keys(&["q"]);
    let screen = t.exited().await;
    assert_restored(&t, &screen);
    // The session goes on without the client.
    assert_eq!(d.get(&format!("/session/{sid}")).await.status, 200);
}

/// Issue #42: `d` opens the last turn's diff that changed a file, `D` the workspace's, each over
/// the screen; any other key closes it.
#[tokio::test]
async fn d_shows_the_last_turns_diff_and_shift_d_the_workspaces() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    assert_eq!(d.prompt(&sid, Some("alice"), "put notes.txt made by the turn").await.status, 200);
    std::fs::write(d.workspace.join("later.txt"), "written by hand\n").expect("a file no turn made");
    let t = attach(&d, &sid, &[]);
    t.until("the turn, replayed", |s| s.contains("alice › put notes.txt") && s.contains(" live ")).await;
    t.keys(&["d"]);
    t.until("the turn's diff", |s| {
        s.contains("the last turn's changes")
            && s.contains("+++ b/notes.txt")
            && s.contains("+made by the turn")
    })
    .await;
    assert!(!t.screen().contains("later.txt"), "the turn did not make it");
    t.keys(&["x"]);
    t.until("closed", |s| !s.contains("the last turn's changes") && s.contains("alice › put notes.txt"))
        .await;
    t.keys(&["D"]);
    t.until("the workspace's diff", |s| {
        s.contains("the workspace's changes")
            && s.contains("+++ b/later.txt")
            && s.contains("+written by hand")
    })
    .await;
    // Esc, then q once it has closed the diff: an Esc and a q read at once are Alt-q (seen in CI:
    // the diff closed, the q lost, the command never exited).
    t.keys(&["Escape"]);
    t.until("the diff put away", |s| !s.contains("the workspace's changes")).await;
    t.keys(&["q"]);
    let screen = t.exited().await;
    assert_restored(&t, &screen);
}

#[tokio::test]
async fn a_decision_made_elsewhere_replaces_the_keys_with_who_decided() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    d.join("web-1").await;
    let t = attach(&d, &sid, &[]);
    t.until("the live session", |s| s.contains(" live ")).await;
    d.prompt_async(&sid, Some("alice"), "write elsewhere.txt decided in the browser").await;
    t.until("the card with its keys", |s| s.contains("[a] Allow once") && s.contains("a allow once")).await;
    let request = d.first_pending(&sid).await;
    // What the web app sends when its "Allow once" button is pressed.
    d.vote(&sid, &request_id(&request), Some("web-1"), selected("allow_once")).await.ok();
    // The keys' absence is part of the wait: a capture can land mid-frame, between the outcome's
    // cells and the erasing of the keys' row, which no user sees for longer than a redraw.
    t.until("the outcome and no keys", |s| {
        s.contains("decided: Allow once, by web-1") && !s.contains("[a]") && !s.contains("a allow once")
    })
    .await;
    file_holds(&d.workspace.join("elsewhere.txt"), "decided in the browser").await;
    t.keys(&["q"]);
    assert_restored(&t, &t.exited().await);
}

/// Issue #44: a request outside the session's workspace is marked on the terminal client's card,
/// in the words every door uses, before anyone decides.
#[tokio::test]
async fn a_card_outside_the_workspace_says_it_will_be_refused() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let t = Tmux::run(&[bin(), "attach", &sid, "--url", &d.base, "--client-id", ME], &[], 160, 24);
    t.until("the live session", |s| s.contains(" live ")).await;
    d.prompt_async(&sid, Some("alice"), "write ../outside.txt never").await;
    let outside = d.workspace.parent().expect("a parent").join("outside.txt");
    let warning =
        format!("⚠ Outside the workspace: it will be refused, whatever is answered ({}).", outside.display());
    t.until("the card with its warning", |s| s.contains("[a] Allow once") && s.contains(&warning)).await;
    d.prompt_async(&sid, Some("alice"), "write inside.txt fine").await;
    t.keys(&["r"]);
    // Unmarked is part of the wait: a capture can land mid-frame, the new card's title drawn and
    // the old card's warning row not yet erased. A mark that stays fails here at the deadline.
    t.until("the next card, unmarked", |s| {
        s.contains("Write inside.txt") && s.contains("[a] Allow once") && !s.contains("⚠")
    })
    .await;
    t.keys(&["q"]);
    assert_restored(&t, &t.exited().await);
}

#[tokio::test]
async fn resizing_keeps_the_layout_and_q_gives_the_terminal_back() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let t = attach(&d, &sid, &[]);
    d.prompt_async(&sid, Some("alice"), "write resized.txt x").await;
    t.until("the card", |s| s.contains("[a] Allow once")).await;
    for (w, h) in [(132u16, 40u16), (80, 24), (100, 30)] {
        t.resize(w, h);
        let screen = t
            .until(&format!("the layout at {w}x{h}"), |s| {
                let rows: Vec<&str> = s.lines().collect();
                rows.len() == h as usize
                    && rows[0].starts_with(&sid[..12])
                    && rows[h as usize - 1].contains("q quit")
                    && rows[h as usize - 2].contains("press i")
                    && rows[h as usize - 3].starts_with('└')
                    && rows.iter().any(|r| r.starts_with("┌ permission 1 of 1"))
            })
            .await;
        assert!(screen.lines().all(|r| r.chars().count() <= w as usize), "{screen}");
    }
    t.keys(&["q"]);
    assert_restored(&t, &t.exited().await);
}

#[tokio::test]
async fn question_mark_shows_the_keys_esc_cancels_the_turn_and_slash_mode_switches() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let t = attach(&d, &sid, &[]);
    t.until("the session, live", |s| s.lines().next().is_some_and(|l| l.contains(" live"))).await;
    t.keys(&["?"]);
    t.until("the keys", |s| s.contains("keys (any key closes)") && s.contains("quit (the session goes on)"))
        .await;
    t.keys(&["x"]);
    t.until("the keys put away", |s| !s.contains("keys (any key closes)")).await;

    d.prompt_async(&sid, Some("alice"), "write cancelled.txt x").await;
    t.until("the card", |s| s.contains("[a] Allow once")).await;
    t.keys(&["Escape"]);
    t.until("the turn cancelled", |s| s.contains("cancelled, the turn was cancelled")).await;
    assert!(d.pending(&sid).await.is_empty());
    assert!(!d.workspace.join("cancelled.txt").exists());

    t.keys(&["Enter"]); // the decided card put away
    t.keys(&["/"]);
    t.text("mode");
    t.keys(&["Enter"]);
    t.until("the modes offered", |s| s.contains("Accept edits (accept-edits)")).await;
    t.keys(&["Down", "Enter"]);
    t.until("the mode in the bar", |s| s.lines().next().is_some_and(|l| l.contains("Accept edits"))).await;
    let context = d.get(&format!("/session/{sid}/context")).await.ok();
    assert_eq!(context["state"]["modes"]["currentModeId"], "accept-edits", "{context}");
    // `/mode` was typed on the input line, which stays open: Esc leaves it, then q quits (sent
    // apart: Esc and q in one read are Alt-q).
    t.keys(&["Escape"]);
    t.until("the input line left", |s| s.contains("press i (or Enter) to type a prompt")).await;
    t.keys(&["q"]);
    assert_restored(&t, &t.exited().await);
}

/// The pid of the command the pane runs: the only child of the pane's shell.
fn command_pid(t: &Tmux) -> rustix::process::Pid {
    let shell = t.display("#{pane_pid}");
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).expect("children");
    let pid = children.split_whitespace().next().expect("the shell runs the command").parse().expect("a pid");
    rustix::process::Pid::from_raw(pid).expect("pid")
}

#[tokio::test]
async fn sigterm_and_sighup_end_the_client_and_give_the_terminal_back() {
    use rustix::process::Signal;
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    d.prompt_async(&sid, Some("alice"), "write signalled.txt x").await;
    // SIGHUP: the SSH connection dropped. The card is up, so the client is mid-session.
    for signal in [Signal::TERM, Signal::HUP] {
        let t = attach(&d, &sid, &[]);
        t.until("the card", |s| s.contains("[a] Allow once")).await;
        rustix::process::kill_process(command_pid(&t), signal).expect("kill");
        assert_restored(&t, &t.exited().await);
    }
    assert_eq!(d.pending(&sid).await.len(), 1, "the request still waits: the session goes on");
}

#[tokio::test]
async fn hostile_agent_output_is_shown_as_text_and_the_terminal_survives() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    assert_eq!(d.prompt(&sid, Some("alice"), "hostile").await.status, 200);
    // A card whose title and command carry the same sequences.
    let hostile = mediatord::demo_agent::HOSTILE;
    d.prompt_async(&sid, Some("alice"), &format!("shell {hostile}")).await;
    let t = attach(&d, &sid, &[]);
    // Rows are joined: the escaped sequences are longer than a row.
    let joined =
        |s: &str| s.lines().map(|l| l.trim_start_matches('│').trim_end_matches('│')).collect::<String>();
    let card =
        t.until("the card, as text", |s| s.contains("[a] Allow once") && s.contains("HOSTILE-END")).await;
    assert!(
        joined(&card).contains("wants to execute: Run \\u{1b}]0;pwned-title\\u{7}\\u{1b}]2;pwned-title"),
        "{card}"
    );
    t.keys(&["v"]);
    let whole = t.until("the whole request", |s| s.contains("the whole request")).await;
    assert!(whole.contains("$ \\u{1b}]0;pwned-title\\u{7}"), "{whole}");
    // Esc, then r once it has closed the box: an Esc and an r read at once are Alt-r.
    t.keys(&["Escape"]);
    t.until("the whole request put away", |s| !s.contains("the whole request")).await;
    t.keys(&["r"]);
    t.until("the card decided", |s| s.contains("decided: Reject")).await;
    t.keys(&["Enter", "t"]);
    let screen = t.until("the hostile turn, as text", |s| s.contains("END-OF-THE-MEGABYTE")).await;
    assert!(screen.lines().all(|r| r.chars().count() <= 80), "{screen}");
    // Scrolled up to the thought, the plan, the tool call and the message.
    t.keys(&["g"]);
    let shown = [
        "alice › hostile",
        "✻ thinking (t folds):",
        "[ ] \\u{1b}]0;pwned-title",
        "⚙ \\u{1b}]0;pwned-title",
        "\\u{202e}gnp.exe\\u{200b}",
        "\\u{1b}[2J\\u{1b}[H\\u{1b}[?25l\\u{1b}[?1049l\\r\\u{85}",
    ];
    // Waited for whole: a screen read while the client repaints can hold half of each frame (a
    // row's first cells from one, the rest from the next). A sequence acted on, not shown, never
    // satisfies this wait, which then fails saying which screen it saw last.
    t.until("the start of the session, every update as text", |s| {
        let text = joined(s);
        shown.iter().all(|x| text.contains(x))
    })
    .await;
    assert_eq!(t.display("#{pane_title}"), "test-title");
    assert_eq!(t.display("#{alternate_on}"), "1", "the client's screen is still up");
    assert_eq!(t.display("#{cursor_flag}"), "0", "the client hides the cursor while nobody types");
    t.keys(&["q"]);
    assert_restored(&t, &t.exited().await);
}

/// The SGR parameters of `styled` that set a colour (30–37, 38, 40–47, 48, 90–97, 100–107).
fn colours(styled: &str) -> Vec<String> {
    let mut found = Vec::new();
    for seq in styled.split("\u{1b}[").skip(1) {
        let Some(end) = seq.find(|c: char| !(c.is_ascii_digit() || c == ';')) else { continue };
        if &seq[end..end + 1] != "m" {
            continue;
        }
        for p in seq[..end].split(';').filter_map(|p| p.parse::<u32>().ok()) {
            if matches!(p, 30..=38 | 40..=48 | 90..=97 | 100..=107) {
                found.push(seq[..end].to_owned());
            }
        }
    }
    found
}

#[tokio::test]
async fn no_color_draws_without_colours_and_colour_is_the_default() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    d.prompt_async(&sid, Some("alice"), "edit coloured.txt new text").await;
    for no_color in [true, false] {
        let env: &[(&str, &str)] = if no_color { &[("NO_COLOR", "1")] } else { &[] };
        let t = attach(&d, &sid, env);
        t.until("the card with its diff", |s| s.contains("+new text") && s.contains("[a] Allow once")).await;
        let styled = t.screen_styled();
        if no_color {
            assert_eq!(colours(&styled), Vec::<String>::new(), "{styled}");
            assert!(
                styled.contains("\u{1b}[7m") || styled.contains(";7m"),
                "reverse video still marks the bar"
            );
        } else {
            assert!(!colours(&styled).is_empty(), "{styled}");
        }
        t.keys(&["q"]);
        assert_restored(&t, &t.exited().await);
    }
}

#[tokio::test]
async fn an_observer_device_sees_the_card_without_keys_and_cannot_vote() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let code =
        d.post("/devices/pairing", None, json!({"name": "wall screen", "role": "observer"})).await.ok();
    let paired = d.post("/devices/pair", None, json!({"code": code["code"]})).await.ok();
    let credential = paired["token"].as_str().expect("token").to_owned();
    d.prompt_async(&sid, Some("alice"), "write observed.txt x").await;
    let t = attach(&d, &sid, &[("MEDIATORD_DEVICE", &credential)]);
    let screen = t
        .until("the card without keys", |s| {
            s.contains("Allow once (allow_once)")
                && s.contains("observer: this device sees requests and may not vote")
        })
        .await;
    assert!(!screen.contains("[a]"), "{screen}");
    assert!(screen.lines().next().is_some_and(|l| l.ends_with("device wall screen (observer)")), "{screen}");
    t.keys(&["a"]);
    t.until("the refusal", |s| s.contains("this device is an observer: it may not vote")).await;
    assert_eq!(d.pending(&sid).await.len(), 1, "nothing was sent");
    t.keys(&["q"]);
    assert_restored(&t, &t.exited().await);
}

/// Runs `mediatord <args>` to its end (bounded): (exit code, stdout, stderr).
pub(super) async fn run(args: &[&str]) -> (i32, String, String) {
    let mut cmd = tokio::process::Command::new(bin());
    cmd.args(args).env_remove("MEDIATORD_TOKEN").env_remove("MEDIATORD_DEVICE").kill_on_drop(true);
    cmd.env("XDG_CONFIG_HOME", no_saved_logins());
    let out = tokio::time::timeout(WAIT, cmd.output()).await.expect("ends in time").expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The ids of `watch`'s lines (`-` lines, about the stream, left out).
fn line_ids(out: &str) -> Vec<u64> {
    out.lines().filter_map(|l| l.split(' ').next()?.parse().ok()).collect()
}

#[tokio::test]
async fn approve_answers_the_oldest_pending_request_and_watch_prints_every_event_once() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let watch = tokio::spawn({
        let (base, sid) = (d.base.clone(), sid.clone());
        async move { run(&["watch", &sid, "--url", &base]).await }
    });
    let json_watch = tokio::spawn({
        let (base, sid) = (d.base.clone(), sid.clone());
        async move { run(&["watch", &sid, "--json", "--url", &base]).await }
    });
    let (code, _, err) = run(&["approve", &sid, "--option", "allow_once", "--url", &d.base]).await;
    assert_eq!(
        (code, err.trim()),
        (1, format!("mediatord approve: no request is pending in session {sid}").as_str())
    );
    d.prompt_async(&sid, Some("alice"), "write first.txt one").await;
    d.first_pending(&sid).await;
    d.prompt_async(&sid, Some("alice"), "write second.txt two").await;
    let (code, out, err) =
        run(&["approve", &sid, "--option", "allow_once", "--url", &d.base, "--client-id", "script"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("allow_once on edit: Write first.txt (request "), "{out}");
    file_holds(&d.workspace.join("first.txt"), "one").await;
    let second = d.first_pending(&sid).await;
    let (code, out, err) = run(&[
        "approve",
        &sid,
        &request_id(&second),
        "--option",
        "reject_once",
        "--url",
        &d.base,
        "--client-id",
        "script",
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Write second.txt"), "{out}");
    assert_eq!(d.delete(&format!("/session/{sid}")).await.status, 204);

    let (code, out, err) = watch.await.expect("watch");
    assert_eq!(code, 0, "{err}");
    let ids = line_ids(&out);
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>(), "every event once, in order:\n{out}");
    assert!(out.contains(" permission_resolved ") && out.contains("allow_once (vote by script)"), "{out}");
    assert!(out.contains("reject_once (vote by script)"), "{out}");
    assert!(out.lines().last().is_some_and(|l| l.contains(" session_closed ")), "{out}");
    let (code, out, err) = json_watch.await.expect("watch --json");
    assert_eq!(code, 0, "{err}");
    let envelopes: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert!(envelopes.iter().any(|e| e["type"] == "permission_request"), "{out}");
    assert_eq!(envelopes.last().map(|e| e["type"].clone()), Some(json!("session_closed")));
}

/// The address of a port nobody listens on (bound, then closed).
fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

const NOT_RUNNING: &str =
    ". Is the daemon running? `mediatord serve` starts it; --url (or MEDIATORD_URL) names another address";

#[tokio::test]
async fn the_commands_say_what_to_do_when_the_daemon_is_down_or_refuses_the_credential() {
    let url = closed_url();
    for command in [vec!["watch", "s1"], vec!["approve", "s1", "--option", "allow_once"], vec!["devices"]] {
        let mut args = command.clone();
        args.extend(["--url", &url]);
        let (code, out, err) = run(&args).await;
        let err = err.trim();
        assert_eq!((code, out.as_str()), (1, ""), "{command:?}: {err}");
        let head = format!("mediatord {}: cannot reach the daemon at {url}: ", command[0]);
        assert!(err.starts_with(&head) && err.ends_with(NOT_RUNNING), "{command:?}: {err}");
    }

    let d = Daemon::start(&["--token", "the-operator-token"]);
    let base = d.base.as_str();
    let cases = [
        (
            vec![],
            format!(
                "the daemon at {base} needs a credential: set MEDIATORD_TOKEN to its operator token, or MEDIATORD_DEVICE (or --device-file) to a paired device's credential (`mediatord pair`)"
            ),
        ),
        (
            vec!["--token", "a-wrong-token"],
            format!(
                "the daemon at {base} refused the token: MEDIATORD_TOKEN (or --token) must be the operator token the daemon was started with (its --token or MEDIATORD_TOKEN)"
            ),
        ),
        (
            vec!["--device", "dev-0.not-a-credential", "--token", "the-operator-token"],
            format!(
                "the daemon at {base} refused the device credential: the device was revoked, or paired with another daemon. Pair it again (`mediatord pair` where the daemon runs) and give the new credential in MEDIATORD_DEVICE or --device-file"
            ),
        ),
    ];
    for (credential, said) in cases {
        for command in ["watch", "approve"] {
            let mut args = vec![command, "s1", "--url", base, "--option", "allow_once"];
            if command == "watch" {
                args.truncate(4);
            }
            args.extend(&credential);
            let (code, _, err) = run(&args).await;
            assert_eq!((code, err.trim()), (1, format!("mediatord {command}: {said}").as_str()), "{args:?}");
        }
    }
}

#[tokio::test]
async fn attach_says_what_to_do_when_the_daemon_is_down_and_leaves_the_terminal_alone() {
    let url = closed_url();
    let t = Tmux::run(&[bin(), "attach", "--url", &url], &[], 80, 24);
    let screen = t.exited().await;
    assert!(screen.contains("EXIT=1"), "{screen}");
    // The message wraps at the pane's width: compare it without its blanks.
    let flat = |s: &str| s.split_whitespace().collect::<String>();
    let said = flat(&screen.lines().take_while(|l| !l.starts_with("EXIT=")).collect::<Vec<_>>().join(" "));
    assert!(
        said.starts_with(&flat(&format!("mediatord attach: cannot reach the daemon at {url}: "))),
        "{screen}"
    );
    assert!(said.ends_with(&flat(NOT_RUNNING)), "{screen}");
    for flag in ["icanon", "echo", "icrnl", "opost", "isig"] {
        assert!(screen.contains(&format!("STTY {flag} on")), "{flag} is off:\n{screen}");
    }
    assert_eq!(t.display("#{alternate_on}"), "0");
}

#[tokio::test]
async fn the_client_commands_help_says_how_to_use_them_and_lists_the_keys() {
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let help = |command: &'static str| async move {
        let (code, out, err) = run(&[command, "--help"]).await;
        assert_eq!(code, 0, "{err}");
        assert!(!out.contains("=]"), "an environment variable's value in {out}");
        out
    };
    let attach = flat(&help("attach").await);
    for said in [
        "mediatord attach --workspace ~/src/app create or join that workspace's shared session",
        "ssh -L 7776:127.0.0.1:7776 host",
        "MEDIATORD_TOKEN",
        "MEDIATORD_DEVICE or --device-file",
        "Keys (? shows them in the client):",
        "i, Enter type a prompt",
        "a allow once",
        "A allow always, or for this session",
        "r reject",
        "R reject always, or for this session",
        "Esc leave the input line; in normal mode, cancel the running turn",
        "/mode, /model pick from what the agent offers",
        "? these keys",
        "q, Ctrl-C quit (the session goes on)",
    ] {
        assert!(attach.contains(said), "{said:?} in {attach}");
    }
    let watch = flat(&help("watch").await);
    assert!(watch.contains("Exit status: 0 when the session ends"), "{watch}");
    assert!(watch.contains("mediatord watch demo-7f3c2a1e-... --json"), "{watch}");
    let approve = flat(&help("approve").await);
    assert!(
        approve.contains("Exit status: 0 when the vote was taken, 1 when no request is pending"),
        "{approve}"
    );
    assert!(approve.contains("mediatord approve demo-7f3c2a1e-... --option allow_once"), "{approve}");
}

/// A relay between a client and the daemon whose connections the test can cut, as a tunnel that
/// drops would. It says the daemon's own address in each request's `Host` (the daemon refuses
/// another port on a loopback bind, protocol 2.2), then relays bytes both ways.
struct Relay {
    port: u16,
    cut: tokio::sync::watch::Sender<u32>,
    /// Connections on which the daemon has begun to answer (for an event stream: it is open, its
    /// subscription made).
    answered: tokio::sync::watch::Receiver<u32>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(to: u16) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (cut, cuts) = tokio::sync::watch::channel(0u32);
        let (answers, answered) = tokio::sync::watch::channel(0u32);
        let answers = std::sync::Arc::new(answers);
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let answers = answers.clone();
                let mut cuts = cuts.clone();
                cuts.mark_unchanged();
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await else {
                        return;
                    };
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
                        match inbound.read(&mut byte).await {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let head: Vec<String> = String::from_utf8_lossy(&head)
                        .lines()
                        .filter(|l| !l.is_empty())
                        .map(|l| {
                            if l.to_ascii_lowercase().starts_with("host:") {
                                format!("host: 127.0.0.1:{to}")
                            } else {
                                l.to_owned()
                            }
                        })
                        .collect();
                    if outbound.write_all(format!("{}\r\n\r\n", head.join("\r\n")).as_bytes()).await.is_err()
                    {
                        return;
                    }
                    // The answer's first bytes, relayed and counted.
                    let mut first = vec![0u8; 16 * 1024];
                    let n = tokio::select! {
                        read = outbound.read(&mut first) => match read {
                            Ok(n) if n > 0 => n,
                            _ => return,
                        },
                        _ = cuts.changed() => return,
                    };
                    if inbound.write_all(&first[..n]).await.is_err() {
                        return;
                    }
                    answers.send_modify(|n| *n += 1);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cuts.changed() => {} // both sockets dropped: the connection is cut
                    }
                });
            }
        });
        Relay { port, cut, answered, task }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn a_dropped_stream_is_resumed_with_no_gap_and_no_duplicate() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut relay = Relay::start(d.port).await;
    let url = format!("http://127.0.0.1:{}", relay.port);
    let watch = tokio::spawn({
        let sid = sid.clone();
        async move { run(&["watch", &sid, "--url", &url]).await }
    });
    // The watch makes two connections, both answered: the capabilities call, then its stream.
    let deadline = Instant::now() + WAIT;
    while *relay.answered.borrow() < 2 {
        assert!(Instant::now() < deadline, "the watch never connected");
        if watch.is_finished() {
            panic!("the watch ended: {:?}", watch.await);
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), relay.answered.changed()).await;
    }
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    d.turn(&sid, &mut sse, Some("alice"), "before the cut").await;
    // Every connection the watch holds now (the capabilities call, the stream) is cut; the events
    // published while it reconnects must reach it all the same.
    let before = *relay.answered.borrow();
    relay.cut.send_modify(|n| *n += 1);
    d.turn(&sid, &mut sse, Some("alice"), "stream 200").await;
    d.turn(&sid, &mut sse, Some("alice"), "after the cut").await;
    // The session is closed only once the watch's new stream is open (the daemon answered it):
    // a stream asked for after the close would find no session.
    let deadline = Instant::now() + WAIT;
    while *relay.answered.borrow() <= before {
        assert!(Instant::now() < deadline, "the watch never reconnected");
        tokio::time::timeout(WAIT, relay.answered.changed())
            .await
            .expect("a reconnect")
            .expect("relay alive");
    }
    assert_eq!(d.delete(&format!("/session/{sid}")).await.status, 204);
    let all = sse.rest().await;
    let last = ids(&all).into_iter().max().expect("events");
    let (code, out, err) = watch.await.expect("watch");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("reconnecting"), "the stream was cut: {err}");
    assert_eq!(line_ids(&out), (1..=last).collect::<Vec<_>>(), "{out}");
    assert!(out.contains("after the cut") && out.contains("tok199 "), "{out}");
}

/// The README's and docs/clients.md's picture of the client: a session at 80 × 24 with the demo
/// agent's showcase and an edit waiting for a decision, captured from tmux. The session id, the
/// workspace and the time are replaced by fixed ones of the same length (so the card's frame
/// stays where it is). With `MEDIATORD_UPDATE_SCREENSHOTS=1` it is written to
/// docs/screenshots/attach.txt, else under target/; both documents must show the committed one.
#[tokio::test]
async fn the_screenshot_in_the_docs_is_the_client_as_it_draws() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    assert_eq!(d.prompt(&sid, Some("alice"), "showcase").await.status, 200);
    std::fs::write(d.workspace.join("notes.txt"), "Hello from the demo\n").expect("write notes.txt");
    d.prompt_async(&sid, Some("alice"), "write notes.txt Hello from the terminal").await;
    let t = attach(&d, &sid, &[]);
    let screen = t
        .until("the card with its diff", |s| {
            s.contains("+Hello from the terminal") && s.contains("[a] Allow once")
        })
        .await;
    let workspace = d.workspace.to_string_lossy().into_owned();
    let fixed_workspace: String = "/home/alice/src/project"
        .chars()
        .chain(std::iter::repeat('-'))
        .take(workspace.chars().count())
        .collect();
    let short_id: String = sid.chars().take(12).collect();
    let mut picture = screen.replace(&workspace, &fixed_workspace).replace(&short_id, "demo-7f3c2a1");
    if let Some(at) = picture.find(" UTC if nobody answers") {
        picture.replace_range(at - 8..at, "12:00:00");
    }
    let picture = picture.trim_end().to_owned() + "\n";
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = if std::env::var_os("MEDIATORD_UPDATE_SCREENSHOTS").is_some() {
        root.join("docs/screenshots/attach.txt")
    } else {
        root.join("target/attach-screenshot.txt")
    };
    std::fs::write(&out, &picture).expect("write the screenshot");
    let committed = std::fs::read_to_string(root.join("docs/screenshots/attach.txt"))
        .expect("docs/screenshots/attach.txt");
    for doc in ["README.md", "docs/clients.md"] {
        let text = std::fs::read_to_string(root.join(doc)).expect("read the doc");
        assert!(text.contains(&committed), "{doc} does not show docs/screenshots/attach.txt");
    }
    t.keys(&["q"]);
    assert_restored(&t, &t.exited().await);
}

#[tokio::test]
async fn without_a_session_attach_lists_live_and_past_sessions_and_opens_the_one_picked() {
    let state = tempfile::tempdir().expect("tempdir");
    // A directory the daemon creates itself (0700): it refuses one others may read.
    let state_dir = state.path().join("state");
    let d = Daemon::start(&["--state-dir", state_dir.to_str().expect("utf-8")]);
    let past = d.join("alice").await;
    assert_eq!(d.prompt(&past, Some("alice"), "a turn of the past").await.status, 200);
    assert_eq!(d.delete(&format!("/session/{past}")).await.status, 204);
    let live = d.join("alice").await;
    assert_ne!(live, past);
    let t = Tmux::run(&[bin(), "attach", "--url", &d.base, "--client-id", ME], &[], 80, 24);
    let list = t.until("the list", |s| s.contains(&live) && s.contains(&past)).await;
    let rows: Vec<&str> = list.lines().collect();
    let workspace = d.workspace.to_string_lossy();
    assert!(rows[1].starts_with(&format!("+ new or shared session in {workspace}")), "{list}");
    assert!(rows[2].contains(&format!("{live} · demo · live")), "{list}");
    assert!(rows[3].contains(&format!("{past} · demo · closed")), "{list}");
    t.keys(&["Down", "Down", "Enter"]);
    t.until("the past session's history", |s| {
        s.contains("alice › a turn of the past") && s.contains("· session closed") && s.contains(" ended ")
    })
    .await;
    t.keys(&["q"]);
    assert_restored(&t, &t.exited().await);
}

/// Issue #44: the picker showed a session's start as `2026-11-28T22:46:34.126`, and `attach`
/// opened on the replay's last card, decided long before. The start is said in words, and a card
/// raised and decided in the replay stays in the transcript, not in front.
#[tokio::test]
async fn the_picker_says_when_in_words_and_a_replay_leaves_no_decided_card_in_front() {
    let d = Daemon::start(&[]);
    let sid = d.join("alice").await;
    let mut sse = Sse::connect(&d, &sid, &[]).await;
    let request = d.raise(&sid, &mut sse, Some("alice"), "write decided.txt before").await;
    d.vote(&sid, &request_id(&request), Some("alice"), selected("allow_once")).await.ok();
    sse.until_type("turn_complete").await;

    let t = Tmux::run(&[bin(), "attach", "--url", &d.base, "--client-id", ME], &[], 160, 24);
    let list = t.until("the list", |s| s.contains(&sid)).await;
    let row = list.lines().find(|l| l.contains(&sid)).expect("the session's row");
    assert!(row.ends_with("· started just now"), "{list}");
    t.keys(&["Down", "Enter"]);
    let screen =
        t.until("the replay, live", |s| s.contains("wrote decided.txt") && s.contains(" live ")).await;
    assert!(!screen.contains("decided:") && !screen.contains("[a]"), "no card in front:\n{screen}");
    t.keys(&["q"]);
    assert_restored(&t, &t.exited().await);
}

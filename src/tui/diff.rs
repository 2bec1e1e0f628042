//! `mediatord diff [SESSION] [--turn N]`: a turn's change set, or without a session the
//! workspace's diff, printed as a unified diff (coloured on a terminal), from the daemon's JSON
//! routes (`docs/protocol.md` § 18): the hunks come from the daemon, this file only writes them.

use serde_json::Value;

use super::connect::{Login, expect_ok, identify, session_path};
use crate::client::api::{Endpoint, segment};
use crate::text::escape;

/// The route of one listed file's hunks.
type HunksRoute = Box<dyn Fn(&str) -> String + Send + Sync>;

/// Files a printed diff shows; past it, the rest are named in a closing line.
const MAX_FILES: usize = 500;

/// The diff to print: turn `turn` of `session` (default: its last turn that changed a file), or
/// without a session the primary workspace's diff.
pub async fn diff(
    conn: Login,
    session: Option<String>,
    turn: Option<u64>,
    colour: bool,
) -> Result<String, String> {
    let target = conn.target()?;
    identify(&conn, &target).await?;
    text(&target, session.as_deref(), turn, colour).await
}

/// [`diff`] on a target already identified (the terminal client's `d` and `D` keys).
pub(crate) async fn text(
    target: &Endpoint,
    session: Option<&str>,
    turn: Option<u64>,
    colour: bool,
) -> Result<String, String> {
    let (paths, hunks_of): (Vec<String>, HunksRoute) = match session {
        Some(id) => {
            let listed = expect_ok(target, "GET", &session_path(id, "/turns"), &[], None).await?;
            let turns = listed["turns"].as_array().cloned().unwrap_or_default();
            let changed = |t: &&Value| t.get("kind").is_none() && t["filesChanged"].as_u64().unwrap_or(0) > 0;
            let chosen = match turn {
                Some(n) => {
                    turns.iter().find(|t| t.get("kind").is_none() && t["turnIndex"].as_u64() == Some(n))
                }
                None => turns.iter().rev().find(changed),
            };
            let Some(chosen) = chosen else {
                return match turn {
                    Some(n) => Err(format!("session {id} has no turn {n}")),
                    None => Ok("no turn of this session changed a file".into()),
                };
            };
            let index = chosen["turnIndex"].as_u64().unwrap_or(0);
            let id = id.to_owned();
            (
                files_of(chosen),
                Box::new(move |p| session_path(&id, &format!("/turns/{index}/diff?path={}", segment(p)))),
            )
        }
        None => {
            let listed = expect_ok(target, "GET", "/workspace/git/diff", &[], None).await?;
            if listed["available"] != Value::Bool(true) {
                return Ok(
                    "no diff: the workspace is not a git repository and no session took a snapshot of it"
                        .into(),
                );
            }
            (files_of(&listed), Box::new(|p| format!("/workspace/git/diff/file?path={}", segment(p))))
        }
    };
    if paths.is_empty() {
        return Ok("no changes".into());
    }
    let mut out = String::new();
    for path in paths.iter().take(MAX_FILES) {
        let answer = expect_ok(target, "GET", &hunks_of(path), &[], None).await?;
        out.push_str(&unified(path, &answer, colour));
    }
    if paths.len() > MAX_FILES {
        out.push_str(&format!("… and {} more files\n", paths.len() - MAX_FILES));
    }
    Ok(out.trim_end_matches('\n').to_owned())
}

/// The paths a change set or a workspace diff lists.
fn files_of(listing: &Value) -> Vec<String> {
    let files = listing["files"].as_array().map(Vec::as_slice).unwrap_or_default();
    files.iter().filter_map(|f| f["path"].as_str().map(str::to_owned)).collect()
}

/// One file's hunks (`{hunks: [{oldStart, oldLines, newStart, newLines, lines}], truncated}`) as
/// a unified diff; every line escaped (a file's text is the agent's: no control character reaches
/// the terminal).
pub(crate) fn unified(path: &str, answer: &Value, colour: bool) -> String {
    let paint = |code: &str, text: &str| {
        if colour { format!("\x1b[{code}m{text}\x1b[0m\n") } else { format!("{text}\n") }
    };
    let shown = escape(path);
    let mut out = paint(
        "1",
        &format!("--- a/{shown}\n+++ b/{shown}")
            .replace('\n', if colour { "\x1b[0m\n\x1b[1m" } else { "\n" }),
    );
    let hunks = answer["hunks"].as_array().map(Vec::as_slice).unwrap_or_default();
    if hunks.is_empty() {
        out.push_str("(no text to show: binary, too large, or unchanged)\n");
    }
    for h in hunks {
        let n = |k: &str| h[k].as_u64().unwrap_or(0);
        out.push_str(&paint(
            "36",
            &format!("@@ -{},{} +{},{} @@", n("oldStart"), n("oldLines"), n("newStart"), n("newLines")),
        ));
        for line in h["lines"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let line = escape(line.as_str().unwrap_or_default());
            match line.chars().next() {
                Some('+') => out.push_str(&paint("32", &line)),
                Some('-') => out.push_str(&paint("31", &line)),
                _ => out.push_str(&format!("{line}\n")),
            }
        }
    }
    if answer["truncated"] == Value::Bool(true) {
        out.push_str("(truncated)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn hunks_are_written_as_a_unified_diff_with_hostile_text_escaped() {
        let answer = json!({"hunks": [{"oldStart": 1, "oldLines": 2, "newStart": 1, "newLines": 2,
            "lines": [" one", "-two", "+three\u{1b}[2J"]}]});
        assert_eq!(
            unified("a.txt", &answer, false),
            "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+three\\u{1b}[2J\n"
        );
        let painted = unified("a.txt", &answer, true);
        assert!(painted.contains("\x1b[31m-two\x1b[0m\n") && painted.contains("\x1b[36m@@ -1,2 +1,2 @@"));
        assert!(!painted.contains("\x1b[2J"), "the file's escape sequence is shown, not run");
        let binary = unified("b.bin", &json!({"hunks": [], "truncated": true}), false);
        assert!(
            binary.ends_with("(no text to show: binary, too large, or unchanged)\n(truncated)\n"),
            "{binary}"
        );
    }
}

//! The reviewers (`docs/operations.md#reviewers`): programs that judge each permission request
//! beside the people. `--reviewer NAME=command:PROGRAM [ARGS]`, `--reviewer-trust
//! NAME=KIND:decide,…` and the config file's `reviewers` map; each with a trust map by tool kind
//! (absent: `inform`, so a reviewer decides nothing it is not trusted with), the workspace it
//! serves (none: every workspace) and its per-request deadline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::agents::{agent_command_in, valid_agent_name};
use super::file::{FileSettings, suggest};
use super::sandbox::{self, DaemonSandbox, SandboxSettings};
use super::{AgentCommand, ConfigError, ServeArgs, refuse};

/// How long a reviewer has to answer one request before it counts as failed (`escalate`) and the
/// request stays with the people: a program judging a request by its text answers in
/// milliseconds; five seconds is what a person waits for a card without noticing the delay much.
pub const DEFAULT_REVIEW_DEADLINE_MS: u64 = 5_000;
/// Reviewers a daemon runs at most: each is a process kept for the daemon's life, and each asked
/// about every request of the workspaces it serves.
pub const MAX_REVIEWERS: usize = 8;
/// The tool kinds of ACP's `ToolCall.kind`: the keys a trust map takes (a typo is refused, not
/// silently `inform`).
pub const TOOL_KINDS: &[&str] =
    &["read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"];
/// Keys accepted in one reviewer's object of the config file's `reviewers` map.
pub(super) const REVIEWER_KEYS: &[&str] = &["command", "trust", "workspace", "deadlineMs"];

/// What a reviewer's `allow` or `deny` does for one tool kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// The verdict is a deciding vote.
    Decide,
    /// The verdict is shown beside the request (cards, the pending list, the audit); people decide.
    Inform,
}

/// A reviewer's trust by tool kind; a kind not in it (and a request without a kind) is `inform`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustMap(BTreeMap<String, Trust>);

impl TrustMap {
    /// Whether an `allow`/`deny` on a request of tool kind `kind` decides it.
    pub fn decides(&self, kind: Option<&str>) -> bool {
        kind.and_then(|k| self.0.get(k)) == Some(&Trust::Decide)
    }

    /// Sets `kind`'s trust from its words (`decide` | `inform`); `what` names the setting in errors.
    fn set(&mut self, kind: &str, trust: &str, what: &str) -> Result<(), ConfigError> {
        if !TOOL_KINDS.contains(&kind) {
            let hint = suggest(kind, TOOL_KINDS).map_or_else(
                || format!("the tool kinds are {}", TOOL_KINDS.join(", ")),
                |k| format!("did you mean {k}?"),
            );
            return refuse(format!("{what}: unknown tool kind {kind:?}; {hint}"));
        }
        let trust = match trust {
            "decide" => Trust::Decide,
            "inform" => Trust::Inform,
            other => {
                return refuse(format!(
                    "{what}: {kind}'s trust is {other:?}; it is decide (the verdict decides) or inform (people decide, the verdict is shown)"
                ));
            }
        };
        self.0.insert(kind.to_owned(), trust);
        Ok(())
    }

    /// `read:decide,edit:inform` (the flag's form).
    pub fn parse(raw: &str, what: &str) -> Result<TrustMap, ConfigError> {
        let mut map = TrustMap::default();
        for item in raw.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((kind, trust)) = item.split_once(':') else {
                return refuse(format!(
                    "{what}: {item:?} is not KIND:decide or KIND:inform, e.g. read:decide"
                ));
            };
            map.set(kind.trim(), trust.trim(), what)?;
        }
        Ok(map)
    }

    /// `{"read": "decide", "edit": "inform"}` (the config file's form).
    fn from_json(value: &Value, what: &str) -> Result<TrustMap, ConfigError> {
        let Value::Object(kinds) = value else {
            return refuse(format!("{what} must be an object of tool kinds, e.g. {{\"read\": \"decide\"}}"));
        };
        let mut map = TrustMap::default();
        for (kind, trust) in kinds {
            let Some(trust) = trust.as_str() else {
                return refuse(format!("{what}.{kind} must be \"decide\" or \"inform\""));
            };
            map.set(kind, trust, what)?;
        }
        Ok(map)
    }
}

/// One configured reviewer.
#[derive(Debug, Clone)]
pub struct ReviewerSpec {
    /// Its name: its votes are cast as `reviewer:<name>`.
    pub name: String,
    /// The program, started once behind the agent guard and kept.
    pub command: AgentCommand,
    pub trust: TrustMap,
    /// The one workspace it serves; `None`: every workspace.
    pub workspace: Option<PathBuf>,
    /// How long one request may wait for its verdict.
    pub deadline: Duration,
    /// Confined as an agent is (the daemon's `--sandbox`).
    pub sandbox: SandboxSettings,
}

impl ReviewerSpec {
    /// Whether it judges the requests of sessions in `workspace`.
    pub fn serves(&self, workspace: &Path) -> bool {
        self.workspace.as_deref().is_none_or(|w| w == workspace)
    }
}

/// `command:PROGRAM [ARGS]` as its command line; the other kinds the issue names are refused with
/// what exists.
fn command_of<'a>(kind_and_command: &'a str, what: &str) -> Result<&'a str, ConfigError> {
    match kind_and_command.split_once(':') {
        Some(("command", command)) if !command.trim().is_empty() => Ok(command),
        Some(("command", _)) => refuse(format!("{what}: command: names no program")),
        Some((kind @ ("model" | "rules"), _)) => {
            refuse(format!("{what}: the {kind} reviewer kind is not available yet; use command:PROGRAM"))
        }
        _ => refuse(format!(
            "{what}: {kind_and_command:?} is not command:PROGRAM, e.g. --reviewer guard=command:/usr/local/bin/guard"
        )),
    }
}

fn checked_name(name: &str, what: &str) -> Result<String, ConfigError> {
    if !valid_agent_name(name) {
        return refuse(format!("{what}: a reviewer name is 1 to 64 characters of A-Z a-z 0-9 . _ -"));
    }
    Ok(name.to_owned())
}

/// The reviewers of the flags and the config file (the flags' first), their trust (flags over the
/// file's), checked: unique names, at most [`MAX_REVIEWERS`], each workspace one of `workspaces`.
pub(super) fn reviewers(
    args: &ServeArgs,
    file: &FileSettings,
    cwd: &Path,
    workspaces: &[PathBuf],
    daemon_sandbox: &DaemonSandbox,
) -> Result<Vec<ReviewerSpec>, ConfigError> {
    let deadline_ms =
        file.positive_ms(args.review_deadline_ms, "reviewDeadlineMs", DEFAULT_REVIEW_DEADLINE_MS)?;
    let mut out: Vec<ReviewerSpec> = Vec::new();
    let mut add = |spec: ReviewerSpec| -> Result<(), ConfigError> {
        if out.iter().any(|r| r.name == spec.name) {
            return refuse(format!("reviewer {} is defined twice", spec.name));
        }
        if out.len() >= MAX_REVIEWERS {
            return refuse(format!("at most {MAX_REVIEWERS} reviewers"));
        }
        out.push(spec);
        Ok(())
    };
    // The flags replace the file's list, as `--agent` does.
    let (flagged, flag_base) = if args.reviewer.is_empty() {
        (file.strings("reviewer")?, file.dir.as_path())
    } else {
        (args.reviewer.clone(), cwd)
    };
    for raw in &flagged {
        let what = format!("--reviewer {raw}");
        let Some((name, rest)) = raw.split_once('=') else {
            return refuse(format!(
                "{what}: give NAME=command:PROGRAM, e.g. --reviewer guard=command:./guard"
            ));
        };
        let name = checked_name(name.trim(), &what)?;
        let command = agent_command_in(command_of(rest.trim(), &what)?, flag_base)?;
        let sandbox = sandbox::resolve(daemon_sandbox, Default::default(), &command, &[], flag_base)?;
        let deadline = Duration::from_millis(deadline_ms);
        add(ReviewerSpec { name, command, trust: TrustMap::default(), workspace: None, deadline, sandbox })?;
    }
    for (name, value) in &file.reviewers {
        let what = format!("config file {}: reviewers.{name}", file.path.display());
        let name = checked_name(name, &what)?;
        let Value::Object(fields) = value else {
            return refuse(format!(
                "{what} must be an object, e.g. {{\"command\": \"command:./guard\", \"trust\": {{\"read\": \"decide\"}}}}"
            ));
        };
        if let Some(key) = fields.keys().find(|k| !REVIEWER_KEYS.contains(&k.as_str())) {
            let hint = suggest(key, REVIEWER_KEYS).map_or_else(
                || format!("known keys: {}", REVIEWER_KEYS.join(", ")),
                |k| format!("did you mean {k}?"),
            );
            return refuse(format!("{what}: unknown key {key}; {hint}"));
        }
        let Some(command) = fields.get("command").and_then(Value::as_str) else {
            return refuse(format!("{what}.command must be a string, command:PROGRAM [ARGS]"));
        };
        let command = agent_command_in(command_of(command.trim(), &what)?, &file.dir)?;
        let trust = match fields.get("trust") {
            None | Some(Value::Null) => TrustMap::default(),
            Some(t) => TrustMap::from_json(t, &format!("{what}.trust"))?,
        };
        let workspace = match fields.get("workspace") {
            None | Some(Value::Null) => None,
            Some(Value::String(w)) => {
                let dir = file.dir.join(w);
                let dir = std::fs::canonicalize(&dir)
                    .or_else(|e| refuse(format!("{what}.workspace {}: {e}", dir.display())))?;
                if !workspaces.contains(&dir) {
                    return refuse(format!(
                        "{what}.workspace {} is not one of the daemon's workspaces (--workspace)",
                        dir.display()
                    ));
                }
                Some(dir)
            }
            Some(_) => return refuse(format!("{what}.workspace must be a string")),
        };
        let deadline = match fields.get("deadlineMs") {
            None | Some(Value::Null) => deadline_ms,
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 => n,
                _ => return refuse(format!("{what}.deadlineMs must be a positive integer")),
            },
        };
        let sandbox = sandbox::resolve(daemon_sandbox, Default::default(), &command, &[], &file.dir)?;
        let deadline = Duration::from_millis(deadline);
        add(ReviewerSpec { name, command, trust, workspace, deadline, sandbox })?;
    }
    let trusts = if args.reviewer_trust.is_empty() {
        file.strings("reviewerTrust")?
    } else {
        args.reviewer_trust.clone()
    };
    for raw in &trusts {
        let what = format!("--reviewer-trust {raw}");
        let Some((name, kinds)) = raw.split_once('=') else {
            return refuse(format!(
                "{what}: give NAME=KIND:decide,…, e.g. --reviewer-trust guard=read:decide"
            ));
        };
        let Some(spec) = out.iter_mut().find(|r| r.name == name.trim()) else {
            return refuse(format!("{what}: no reviewer is named {}", name.trim()));
        };
        let over = TrustMap::parse(kinds, &what)?;
        spec.trust.0.extend(over.0);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trust_map_decides_only_the_kinds_marked_decide() {
        let map = TrustMap::parse("read:decide, edit:inform", "t").expect("parses");
        assert!(map.decides(Some("read")));
        assert!(!map.decides(Some("edit")));
        assert!(!map.decides(Some("execute")), "absent is inform");
        assert!(!map.decides(None), "a request without a kind is for the people");
        assert!(!TrustMap::default().decides(Some("read")), "the default trusts nothing");
        assert_eq!(TrustMap::parse("", "t").expect("empty"), TrustMap::default());
    }

    #[test]
    fn a_bad_trust_map_is_refused_with_what_to_write() {
        let err = |raw: &str| TrustMap::parse(raw, "--reviewer-trust g").expect_err(raw).0;
        assert!(err("raed:decide").contains("did you mean read?"), "{}", err("raed:decide"));
        assert!(err("read:always").contains("decide (the verdict decides) or inform"));
        assert!(err("read").contains("KIND:decide"));
        let json = |v: Value| TrustMap::from_json(&v, "reviewers.g.trust").map_err(|e| e.0);
        assert!(
            json(serde_json::json!({"read": true})).expect_err("bool").contains("\"decide\" or \"inform\"")
        );
        assert!(json(serde_json::json!(["read"])).expect_err("list").contains("must be an object"));
        assert_eq!(
            json(serde_json::json!({"execute": "decide"})).expect("ok"),
            TrustMap::parse("execute:decide", "t").expect("ok")
        );
    }

    #[test]
    fn only_the_command_kind_is_taken() {
        assert_eq!(command_of("command:./guard --strict", "r").expect("ok"), "./guard --strict");
        assert!(command_of("model:http://x", "r").expect_err("model").0.contains("not available yet"));
        assert!(command_of("command:", "r").expect_err("empty").0.contains("names no program"));
        assert!(command_of("./guard", "r").expect_err("bare").0.contains("command:PROGRAM"));
    }
}

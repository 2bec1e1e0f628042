//! The reviewers (`docs/operations.md#reviewers`): programs or model endpoints that judge each
//! permission request beside the people. `--reviewer NAME=command:PROGRAM [ARGS]`, `--reviewer
//! NAME=model:URL model=… [api=…] [keyEnv=…|keyFile=…] [systemPromptFile=…]`, `--reviewer-trust
//! NAME=KIND:decide,…` and the config file's `reviewers` map (`"command": "command:…"` or
//! `"model": {…}` with the same keys as the flag's); each with a trust map by tool kind (absent:
//! `inform`, so a reviewer decides nothing it is not trusted with), the workspace it serves (none:
//! every workspace) and its per-request deadline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use super::agents::{agent_command_in, valid_agent_name};
use super::file::{FileSettings, suggest};
use super::notify::{TargetUrl, parse_http_url};
use super::sandbox::{self, DaemonSandbox, SandboxSettings};
use super::{AgentCommand, ConfigError, Secret, ServeArgs, refuse};

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
pub(super) const REVIEWER_KEYS: &[&str] = &["command", "model", "trust", "workspace", "deadlineMs"];
/// Keys of a model reviewer's settings: the config file's `"model": {…}` object, and the flag's
/// `key=value` words after its URL (`baseUrl` is the URL there). `systemPrompt` only in the file:
/// a prompt has spaces a flag's words cannot hold.
const MODEL_KEYS: &[&str] =
    &["baseUrl", "api", "model", "keyEnv", "keyFile", "systemPrompt", "systemPromptFile"];
/// The longest API key read (from the environment or its file): keys are tens to a few hundred
/// bytes; a larger file is not a key.
const MAX_KEY_BYTES: usize = 4 * 1024;
/// The longest system prompt taken (inline or from its file): it is sent with every request,
/// and a prompt of pages is a mistake that costs on each one.
pub const MAX_SYSTEM_PROMPT_BYTES: usize = 32 * 1024;

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
    /// What answers: a program or a model endpoint.
    pub kind: ReviewerKind,
    pub trust: TrustMap,
    /// The one workspace it serves; `None`: every workspace.
    pub workspace: Option<PathBuf>,
    /// How long one request may wait for its verdict.
    pub deadline: Duration,
}

/// What answers a reviewer's requests.
#[derive(Debug, Clone)]
pub enum ReviewerKind {
    /// A program, started once behind the agent guard and kept, confined as an agent is (the
    /// daemon's `--sandbox`).
    Command { command: AgentCommand, sandbox: SandboxSettings },
    /// A chat endpoint asked once per request.
    Model(ModelSpec),
}

/// The dialect a model endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelApi {
    /// `POST {baseUrl}/chat/completions`, the key as `Authorization: Bearer`.
    OpenAi,
    /// `POST {baseUrl}/v1/messages`, the key as `x-api-key`.
    Anthropic,
}

/// A model reviewer's endpoint. Its `Debug` shows neither the key nor the URL's path.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    pub api: ModelApi,
    /// The base URL; the dialect's path is added to its path.
    pub base: TargetUrl,
    /// The model asked (`"model"` of the request body).
    pub model: String,
    /// Read once when the daemon starts, from `keyEnv` or `keyFile`; `None`: no key is sent (a
    /// local server).
    pub key: Option<Secret>,
    /// The variable the key was read from (`keyEnv`): erased from the daemon's initial environment
    /// at boot with the daemon's own secrets (`crate::environ`), so no agent inherits it.
    pub key_env: Option<String>,
    /// Replaces the default system prompt (`review::model::DEFAULT_SYSTEM_PROMPT`).
    pub system_prompt: Option<String>,
}

impl ReviewerSpec {
    /// Whether it judges the requests of sessions in `workspace`.
    pub fn serves(&self, workspace: &Path) -> bool {
        self.workspace.as_deref().is_none_or(|w| w == workspace)
    }
}

/// A reviewer's kind and what follows its `KIND:`.
#[derive(Debug, PartialEq, Eq)]
enum Kind<'a> {
    /// `command:PROGRAM [ARGS]`: the command line.
    Command(&'a str),
    /// `model:URL [key=value …]`: the URL and the words after it.
    Model(&'a str),
}

/// `command:PROGRAM [ARGS]` or `model:URL …`, split; `rules` is refused with why it needs no entry.
fn kind_of<'a>(raw: &'a str, what: &str) -> Result<Kind<'a>, ConfigError> {
    match raw.split_once(':').map(|(kind, rest)| (kind, rest.trim())) {
        Some(("command", "")) => refuse(format!("{what}: command: names no program")),
        Some(("command", command)) => Ok(Kind::Command(command)),
        Some(("model", "")) => {
            refuse(format!("{what}: model: names no URL, e.g. model:http://127.0.0.1:11434/v1 model=llama3"))
        }
        Some(("model", rest)) => Ok(Kind::Model(rest)),
        _ if raw == "rules" || raw.starts_with("rules:") => refuse(format!(
            "{what}: the workspace rules are no reviewer to add: they always judge first, before every reviewer (docs/operations.md#reviewers)"
        )),
        _ => refuse(format!(
            "{what}: {raw:?} is not command:PROGRAM or model:URL, e.g. --reviewer guard=command:/usr/local/bin/guard"
        )),
    }
}

/// A model reviewer's settings from the flag's words: `URL key=value …` (no value holds a space).
fn model_words(rest: &str, what: &str) -> Result<Map<String, Value>, ConfigError> {
    let mut words = rest.split_whitespace();
    let mut fields = Map::new();
    fields.insert("baseUrl".into(), Value::String(words.next().unwrap_or_default().to_owned()));
    for word in words {
        let Some((key, value)) = word.split_once('=') else {
            return refuse(format!("{what}: {word:?} is not key=value, e.g. model=llama3"));
        };
        if key == "baseUrl" || key == "systemPrompt" {
            return refuse(format!(
                "{what}: {key} is not a flag word (the URL comes first; a prompt goes in systemPromptFile)"
            ));
        }
        fields.insert(key.to_owned(), Value::String(value.to_owned()));
    }
    Ok(fields)
}

/// A model reviewer's settings, checked: paths relative to `base`, the key and the prompt read.
fn model_spec(fields: &Map<String, Value>, base: &Path, what: &str) -> Result<ModelSpec, ConfigError> {
    if let Some(key) = fields.keys().find(|k| !MODEL_KEYS.contains(&k.as_str())) {
        let hint = suggest(key, MODEL_KEYS).map_or_else(
            || format!("known keys: {}", MODEL_KEYS.join(", ")),
            |k| format!("did you mean {k}?"),
        );
        return refuse(format!("{what}: unknown model key {key}; {hint}"));
    }
    let text = |key: &str| -> Result<Option<&str>, ConfigError> {
        match fields.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim())),
            Some(_) => refuse(format!("{what}: {key} must be a non-empty string")),
        }
    };
    let Some(url) = text("baseUrl")? else {
        return refuse(format!("{what}: a model reviewer needs its baseUrl, e.g. http://127.0.0.1:11434/v1"));
    };
    let base_url = parse_http_url(url, &format!("{what}: model URL"), "give the key with keyEnv or keyFile")?;
    if base_url.path.contains('?') {
        return refuse(format!("{what}: the model URL is a base URL, without a query"));
    }
    let api = match text("api")? {
        None | Some("openai") => ModelApi::OpenAi,
        Some("anthropic") => ModelApi::Anthropic,
        Some(other) => return refuse(format!("{what}: api {other:?} is openai or anthropic")),
    };
    let Some(model) = text("model")? else {
        return refuse(format!("{what}: a model reviewer needs its model, e.g. model=llama3"));
    };
    let read = |key: &str, path: &str, max: usize| -> Result<String, ConfigError> {
        let path = base.join(path);
        let bytes =
            std::fs::read(&path).or_else(|e| refuse(format!("{what}: {key} {}: {e}", path.display())))?;
        if bytes.len() > max {
            return refuse(format!("{what}: {key} {} is over {max} bytes", path.display()));
        }
        String::from_utf8(bytes).or_else(|_| refuse(format!("{what}: {key} {} is not UTF-8", path.display())))
    };
    let key = match (text("keyEnv")?, text("keyFile")?) {
        (Some(_), Some(_)) => return refuse(format!("{what}: give keyEnv or keyFile, not both")),
        (Some(var), None) => match std::env::var(var) {
            Ok(key) if !key.trim().is_empty() && key.len() <= MAX_KEY_BYTES => Some(key.trim().to_owned()),
            _ => {
                return refuse(format!(
                    "{what}: keyEnv {var} is not set (or empty, or over {MAX_KEY_BYTES} bytes)"
                ));
            }
        },
        (None, Some(file)) => match read("keyFile", file, MAX_KEY_BYTES)?.trim() {
            "" => return refuse(format!("{what}: keyFile {file} is empty")),
            key => Some(key.to_owned()),
        },
        (None, None) => None,
    };
    if key.as_deref().is_some_and(|k| k.chars().any(char::is_control)) {
        return refuse(format!("{what}: the key holds control characters; an HTTP header cannot carry it"));
    }
    let system_prompt = match (text("systemPrompt")?, text("systemPromptFile")?) {
        (Some(_), Some(_)) => {
            return refuse(format!("{what}: give systemPrompt or systemPromptFile, not both"));
        }
        (Some(prompt), None) if prompt.len() > MAX_SYSTEM_PROMPT_BYTES => {
            return refuse(format!("{what}: systemPrompt is over {MAX_SYSTEM_PROMPT_BYTES} bytes"));
        }
        (Some(prompt), None) => Some(prompt.to_owned()),
        (None, Some(file)) => Some(read("systemPromptFile", file, MAX_SYSTEM_PROMPT_BYTES)?),
        (None, None) => None,
    };
    let key_env = text("keyEnv")?.map(str::to_owned);
    Ok(ModelSpec {
        api,
        base: base_url,
        model: model.to_owned(),
        key: key.map(Secret::from),
        key_env,
        system_prompt,
    })
}

/// A command reviewer's program, confined as an agent is.
fn command_kind(
    command: &str,
    base: &Path,
    daemon_sandbox: &DaemonSandbox,
) -> Result<ReviewerKind, ConfigError> {
    let command = agent_command_in(command, base)?;
    let sandbox = sandbox::resolve(daemon_sandbox, Default::default(), &command, &[], base)?;
    Ok(ReviewerKind::Command { command, sandbox })
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
                "{what}: give NAME=command:PROGRAM or NAME=model:URL model=MODEL, e.g. --reviewer guard=command:./guard"
            ));
        };
        let name = checked_name(name.trim(), &what)?;
        let kind = match kind_of(rest.trim(), &what)? {
            Kind::Command(command) => command_kind(command, flag_base, daemon_sandbox)?,
            Kind::Model(words) => {
                ReviewerKind::Model(model_spec(&model_words(words, &what)?, flag_base, &what)?)
            }
        };
        let deadline = Duration::from_millis(deadline_ms);
        add(ReviewerSpec { name, kind, trust: TrustMap::default(), workspace: None, deadline })?;
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
        let kind = match (fields.get("command"), fields.get("model")) {
            (Some(Value::String(command)), None) => match kind_of(command.trim(), &what)? {
                Kind::Command(command) => command_kind(command, &file.dir, daemon_sandbox)?,
                Kind::Model(_) => {
                    return refuse(format!(
                        "{what}.command is command:PROGRAM; a model goes in \"model\": {{…}}"
                    ));
                }
            },
            (None, Some(Value::Object(model))) => {
                ReviewerKind::Model(model_spec(model, &file.dir, &format!("{what}.model"))?)
            }
            (Some(_), Some(_)) => return refuse(format!("{what}: give command or model, not both")),
            (None, Some(_)) => {
                return refuse(format!(
                    "{what}.model must be an object, e.g. {{\"baseUrl\": \"http://127.0.0.1:11434/v1\", \"model\": \"llama3\"}}"
                ));
            }
            _ => {
                return refuse(format!(
                    "{what}.command must be a string, command:PROGRAM [ARGS] (or give a model)"
                ));
            }
        };
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
        let deadline = Duration::from_millis(deadline);
        add(ReviewerSpec { name, kind, trust, workspace, deadline })?;
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
    fn a_reviewer_is_a_command_or_a_model_and_the_rules_are_none() {
        assert_eq!(kind_of("command:./guard --strict", "r").expect("ok"), Kind::Command("./guard --strict"));
        assert_eq!(
            kind_of("model: http://x/v1 model=m", "r").expect("ok"),
            Kind::Model("http://x/v1 model=m")
        );
        assert!(kind_of("command:", "r").expect_err("empty").0.contains("names no program"));
        assert!(kind_of("model:", "r").expect_err("empty").0.contains("names no URL"));
        assert!(kind_of("./guard", "r").expect_err("bare").0.contains("command:PROGRAM or model:URL"));
        assert!(kind_of("rules", "r").expect_err("rules").0.contains("always judge first"));
        assert!(kind_of("rules:x", "r").expect_err("rules").0.contains("always judge first"));
    }

    /// A model's settings: the flag's words and the file's object give the same, every mistake is
    /// refused with what to write, and the key never shows in `Debug`.
    #[test]
    fn a_model_reviewer_is_read_from_its_words_and_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("key"), "sk-file-key-0123\n").expect("key");
        std::fs::write(dir.path().join("prompt"), "judge strictly").expect("prompt");
        let words = model_words(
            "http://127.0.0.1:9/v1 model=m api=anthropic keyFile=key systemPromptFile=prompt",
            "r",
        )
        .expect("words");
        let spec = model_spec(&words, dir.path(), "r").expect("spec");
        assert_eq!((spec.api, spec.model.as_str()), (ModelApi::Anthropic, "m"));
        assert_eq!((spec.base.port, spec.base.path.as_str()), (9, "/v1"));
        assert_eq!(spec.key.as_ref().map(Secret::expose), Some("sk-file-key-0123"), "trimmed");
        assert_eq!(spec.system_prompt.as_deref(), Some("judge strictly"));
        assert!(!format!("{spec:?}").contains("sk-file-key"), "{spec:?}");
        let plain =
            model_spec(&model_words("http://h/v1 model=m", "r").expect("w"), dir.path(), "r").expect("ok");
        assert_eq!(
            (plain.api, plain.key.is_none(), plain.system_prompt.is_none()),
            (ModelApi::OpenAi, true, true)
        );

        let err = |v: Value| match &v {
            Value::Object(m) => model_spec(m, dir.path(), "r").expect_err(&v.to_string()).0,
            _ => unreachable!(),
        };
        use serde_json::json;
        assert!(err(json!({"model": "m"})).contains("needs its baseUrl"));
        assert!(err(json!({"baseUrl": "http://h"})).contains("needs its model"));
        assert!(err(json!({"baseUrl": "ftp://h", "model": "m"})).contains("model URL"));
        assert!(err(json!({"baseUrl": "http://u:p@h", "model": "m"})).contains("keyEnv or keyFile"));
        assert!(err(json!({"baseUrl": "http://h/v1?x=1", "model": "m"})).contains("without a query"));
        assert!(
            err(json!({"baseUrl": "http://h", "model": "m", "api": "gemini"}))
                .contains("openai or anthropic")
        );
        assert!(
            err(json!({"baseUrl": "http://h", "model": "m", "modle": "x"})).contains("did you mean model?")
        );
        assert!(
            err(json!({"baseUrl": "http://h", "model": "m", "keyEnv": "MEDIATORD_TEST_NO_SUCH_VAR"}))
                .contains("is not set")
        );
        assert!(
            err(json!({"baseUrl": "http://h", "model": "m", "keyEnv": "A", "keyFile": "key"}))
                .contains("not both")
        );
        assert!(err(json!({"baseUrl": "http://h", "model": "m", "keyFile": "nope"})).contains("keyFile"));
        assert!(err(json!({"baseUrl": "http://h", "model": "m", "systemPrompt": "a", "systemPromptFile": "prompt"})).contains("not both"));
        let long = "x".repeat(MAX_SYSTEM_PROMPT_BYTES + 1);
        assert!(err(json!({"baseUrl": "http://h", "model": "m", "systemPrompt": long})).contains("over"));
        assert!(err(json!({"baseUrl": "http://h", "model": 3})).contains("non-empty string"));
        assert!(model_words("http://h model", "r").expect_err("word").0.contains("key=value"));
        assert!(
            model_words("http://h systemPrompt=x", "r").expect_err("prompt").0.contains("systemPromptFile")
        );
    }
}

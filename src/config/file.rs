//! The `--config` file: read, every key checked against the ones known (a near miss is named),
//! and its values typed (`serve.<key>`, the `policy` section, the `agents` map in written order).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::{ConfigError, refuse};

/// The config file's settings, each `None` when absent.
#[derive(Debug, Default)]
pub(super) struct FileSettings {
    pub(super) values: serde_json::Map<String, Value>,
    pub(super) policy_strategy: Option<String>,
    pub(super) policy_quorum: Option<Value>,
    /// The `agents` map, in the order written (the first agent is the default).
    pub(super) agents: Vec<(String, Value)>,
    /// The `reviewers` map (`super::reviewers`), by name.
    pub(super) reviewers: Vec<(String, Value)>,
    /// The file, for messages (empty without one).
    pub(super) path: PathBuf,
    /// The directory holding the file: relative paths in it (`workspace`, an `agent` program with a
    /// slash) are resolved against it, so the file means the same whatever directory the daemon
    /// is started from.
    pub(super) dir: PathBuf,
}

/// The members of the config file's top-level object.
pub(super) const TOP_KEYS: &[&str] = &["serve", "policy", "agents", "reviewers"];

/// Keys accepted under `"serve"`: every option of `serve` but `--config`, in camelCase.
pub(super) const SERVE_KEYS: &[&str] = &[
    "hostname",
    "port",
    "token",
    "requireAuth",
    "allowOrigin",
    "agent",
    "workspace",
    "anyWorkspace",
    "sessionScope",
    "maxSessions",
    "maxPendingPrompts",
    "maxConnections",
    "maxSubscribers",
    "eventRingSize",
    "subscriberQueue",
    "writerIdleTimeoutMs",
    "initializeTimeoutMs",
    "permissionPolicy",
    "consensusQuorum",
    "permissionTimeoutMs",
    "notifiedPermissionTimeoutMs",
    "enableSessionShell",
    "noSnapshots",
    "shellTimeoutMs",
    "headerTimeoutMs",
    "idleTimeoutMs",
    "bodyTimeoutMs",
    "logFormat",
    "stateDir",
    "ephemeral",
    "historyEvents",
    "historyDays",
    "notify",
    "notifySecret",
    "publicUrl",
    "tlsCert",
    "tlsKey",
    "mdns",
    "pairingCodeTtlMs",
    "store",
    "nodeUrl",
    "nodeLeaseMs",
    "sandbox",
    "sandboxWritable",
    "reviewer",
    "reviewerTrust",
    "reviewDeadlineMs",
    "reviewBreakerDenials",
    "reviewCritical",
    "oidcIssuer",
    "oidcClientId",
    "oidcClientSecretFile",
    "oidcAllowDomain",
    "oidcAllowGroup",
    "oidcRole",
    "oidcDefaultRole",
    "oidcRenewMs",
];

/// Keys accepted under `"policy"` (the names of Qwen Code's `settings.json`).
pub(super) const POLICY_KEYS: &[&str] = &["permissionStrategy", "consensusQuorum"];

/// Keys accepted in one agent's object of the `"agents"` map.
pub(super) const AGENT_KEYS: &[&str] =
    &["command", "env", "initializeTimeoutMs", "clientCapabilities", "sandbox"];

/// How alike two keys must be (Jaro-Winkler, 0..1) for one to be suggested for the other: above
/// clap's own threshold for mistyped flags (0.7), so a suggestion is a likely typo, not a guess.
pub(super) const SUGGESTION_SIMILARITY: f64 = 0.8;

/// The known key an unknown one most likely meant. Case, `-` and `_` are ignored first, so the
/// flag spellings (`max-sessions`, `max_sessions`) find their camelCase key.
pub(super) fn suggest<'a>(unknown: &str, known: &[&'a str]) -> Option<&'a str> {
    let fold = |k: &str| k.chars().filter(|c| !matches!(c, '-' | '_')).collect::<String>().to_lowercase();
    let folded = fold(unknown);
    known
        .iter()
        .map(|k| (*k, strsim::jaro_winkler(&folded, &fold(k))))
        .filter(|(_, score)| *score >= SUGGESTION_SIMILARITY)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
}

/// The refusal for an unknown key: a mistyped key must not silently fall back to a default (a
/// mistyped `workspace` would change which directories the agent may touch).
pub(super) fn unknown_key(path: &Path, section: Option<&str>, key: &str) -> ConfigError {
    let (known, prefix) = match section {
        None => (TOP_KEYS, String::new()),
        Some("serve") => (SERVE_KEYS, "serve.".to_owned()),
        Some("policy") => (POLICY_KEYS, "policy.".to_owned()),
        Some(agent) => (AGENT_KEYS, format!("{agent}.")),
    };
    let hint = match suggest(key, known) {
        Some(k) => format!("did you mean {prefix}{k}?"),
        // Options written at the top level instead of under "serve".
        None if section.is_none() => match suggest(key, SERVE_KEYS) {
            Some(k) => format!("did you mean serve.{k}? (options go under \"serve\")"),
            None => "the file holds only \"serve\", \"policy\", \"agents\" and \"reviewers\"".to_owned(),
        },
        None => format!("known keys: {}", known.join(", ")),
    };
    ConfigError(format!("config file {}: unknown key {prefix}{key}; {hint}", path.display()))
}

pub(super) fn read_config_file(path: &Path) -> Result<FileSettings, ConfigError> {
    let text = std::fs::read_to_string(path)
        .or_else(|e| refuse(format!("cannot read config file {}: {e}", path.display())))?;
    let root: Value = serde_json::from_str(&text)
        .or_else(|e| refuse(format!("config file {} is not valid JSON: {e}", path.display())))?;
    let Value::Object(root) = root else {
        return refuse(format!("config file {} must hold a JSON object", path.display()));
    };
    let dir = std::path::absolute(path)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .map_or_else(|| refuse(format!("cannot resolve the directory of {}", path.display())), Ok)?;
    let mut out = FileSettings { dir, path: path.to_path_buf(), ..FileSettings::default() };
    for (key, value) in root {
        match key.as_str() {
            "serve" => {
                let Value::Object(serve) = value else {
                    return refuse("config file: \"serve\" must be an object");
                };
                for (k, v) in serve {
                    if !SERVE_KEYS.contains(&k.as_str()) {
                        return Err(unknown_key(path, Some("serve"), &k));
                    }
                    out.values.insert(k, v);
                }
            }
            "policy" => {
                let Value::Object(policy) = value else {
                    return refuse("config file: \"policy\" must be an object");
                };
                for (k, v) in policy {
                    match k.as_str() {
                        "permissionStrategy" => match v {
                            Value::String(s) => out.policy_strategy = Some(s),
                            _ => return refuse("config file: policy.permissionStrategy must be a string"),
                        },
                        "consensusQuorum" => out.policy_quorum = Some(v),
                        _ => return Err(unknown_key(path, Some("policy"), &k)),
                    }
                }
            }
            "agents" => {
                let Value::Object(agents) = value else {
                    return refuse("config file: \"agents\" must be an object mapping names to agents");
                };
                let mut agents: Vec<(String, Value)> = agents.into_iter().collect();
                let order = agent_order(&text, path)?;
                agents.sort_by_key(|(name, _)| order.iter().position(|n| n == name));
                out.agents = agents;
            }
            "reviewers" => {
                let Value::Object(reviewers) = value else {
                    return refuse("config file: \"reviewers\" must be an object mapping names to reviewers");
                };
                out.reviewers = reviewers.into_iter().collect();
            }
            _ => return Err(unknown_key(path, None, &key)),
        }
    }
    Ok(out)
}

/// The names of the file's `agents` map in the order written: `serde_json`'s map (without its
/// `preserve_order` feature, which would reorder every JSON object the daemon writes) sorts its
/// keys, but the first agent is the default. A name written twice is refused.
pub(super) fn agent_order(text: &str, path: &Path) -> Result<Vec<String>, ConfigError> {
    use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};

    struct Names(Vec<String>);
    struct NamesVisitor;
    impl<'de> Visitor<'de> for NamesVisitor {
        type Value = Names;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Names, A::Error> {
            let mut names = Vec::new();
            while let Some(name) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                names.push(name);
            }
            Ok(Names(names))
        }
    }
    impl<'de> Deserialize<'de> for Names {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Names, D::Error> {
            d.deserialize_map(NamesVisitor)
        }
    }
    #[derive(serde::Deserialize)]
    struct Root {
        agents: Names,
    }
    let names = serde_json::from_str::<Root>(text)
        .map(|r| r.agents.0)
        .or_else(|e| refuse(format!("config file {}: agents: {e}", path.display())))?;
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return refuse(format!("config file {}: agents.{name} is defined twice", path.display()));
        }
    }
    Ok(names)
}

impl FileSettings {
    pub(super) fn string(&self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.values.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => refuse(format!("config file: serve.{key} must be a string")),
        }
    }

    pub(super) fn number(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.values.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) => Ok(Some(n)),
                None => refuse(format!("config file: serve.{key} must be a non-negative integer")),
            },
        }
    }

    /// A duration in ms: the flag, else `serve.<key>` (read, and refused when malformed, even when
    /// the flag is given), else `default`.
    pub(super) fn ms(&self, flag: Option<u64>, key: &str, default: u64) -> Result<u64, ConfigError> {
        Ok(flag.or(self.number(key)?).unwrap_or(default))
    }

    /// [`FileSettings::ms`] for a deadline that cannot be switched off: 0 is refused, by its flag's
    /// name.
    pub(super) fn positive_ms(&self, flag: Option<u64>, key: &str, default: u64) -> Result<u64, ConfigError> {
        match self.ms(flag, key, default)? {
            0 => refuse(format!("{} must be positive", flag_name(key))),
            n => Ok(n),
        }
    }

    pub(super) fn flag(&self, key: &str) -> Result<bool, ConfigError> {
        match self.values.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => refuse(format!("config file: serve.{key} must be true or false")),
        }
    }

    pub(super) fn strings(&self, key: &str) -> Result<Vec<String>, ConfigError> {
        match self.values.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| match i {
                    Value::String(s) => Ok(s.clone()),
                    _ => refuse(format!("config file: serve.{key} must hold strings")),
                })
                .collect(),
            Some(_) => refuse(format!("config file: serve.{key} must be a string or a list of strings")),
        }
    }
}

/// The flag of a file key: `headerTimeoutMs` is `--header-timeout-ms`.
pub(super) fn flag_name(key: &str) -> String {
    let mut name = String::from("--");
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            name.push('-');
        }
        name.push(c.to_ascii_lowercase());
    }
    name
}

pub(super) fn to_usize(n: u64, name: &str) -> Result<usize, ConfigError> {
    usize::try_from(n).or_else(|_| refuse(format!("{name} is too large")))
}

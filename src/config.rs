//! Command line, environment and `--config` file, merged and validated into one [`Config`].
//!
//! Precedence, highest first: command-line flag, environment variable, config file, built-in default.
//! Every refusal listed in `docs/protocol.md#1-command-line` is a [`ConfigError`] whose `Display` is the one line printed
//! before exiting with status 2.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Hard ceilings that still apply when an operator sets a limit to `0` ("no cap"): nothing a client
/// does may allocate without bound, so "no cap" means "the largest value we are sure is safe".
pub const HARD_MAX_SESSIONS: usize = 4096;
pub const HARD_MAX_PENDING_PROMPTS: usize = 1024;
pub const HARD_MAX_CONNECTIONS: usize = 65_536;
/// Largest accepted `--event-ring-size`, `--subscriber-queue` and `--max-subscribers`.
pub const HARD_MAX_RING: usize = 1_000_000;
pub const HARD_MAX_SUBSCRIBERS: usize = 100_000;

/// Connection deadlines' defaults, in ms: a request head is a few hundred bytes, so 10 s is ample on
/// any link; 30 s of idle keep-alive outlasts the clients' own pools (Node's is 4-5 s) without
/// holding slots for minutes; 60 s lets a full 10 MiB body through at about 1.4 Mbit/s.
const DEFAULT_HEADER_TIMEOUT_MS: u64 = 10_000;
const DEFAULT_IDLE_TIMEOUT_MS: u64 = 30_000;
const DEFAULT_BODY_TIMEOUT_MS: u64 = 60_000;

/// `mediatord serve --help`'s closing text.
pub const SERVE_HELP: &str = "\
Quick start:
  mediatord serve --agent demo          # built-in demo agent, no model needed
  mediatord serve --agent 'qwen --acp'  # Qwen Code (the default agent)

Every option may also be set in a JSON file given with --config, under \"serve\" in camelCase
(e.g. {\"serve\":{\"maxSessions\":8}}), and the permission policy also as
{\"policy\":{\"permissionStrategy\":\"consensus\",\"consensusQuorum\":2}}.
Precedence: flag, then environment variable, then config file, then default.

Relative paths (--workspace ., --agent ./my-agent, --config) are resolved against the current
directory; inside the config file, against the directory holding the file. An unknown key in the
config file refuses the boot. A commented example: docs/examples/mediatord.json.

Security: the daemon binds to 127.0.0.1 by default. Binding elsewhere requires --token (or
MEDIATORD_TOKEN); every request then needs `Authorization: Bearer <token>`. Browser origins are
refused unless listed with --allow-origin.

The HTTP API: GET /openapi.json on the running daemon (the OpenAPI 3.1 document), and
docs/protocol.md in the repository (every route, error, event and rule).";

// Every `env` option hides its value in `--help`: clap would print `[env: NAME=<current value>]`,
// which reads `[env: NAME=]` when the variable is unset and would show a token when it is set.
#[derive(Debug, Default, Args)]
pub struct ServeArgs {
    /// Bind address. 127.0.0.0/8, localhost and ::1 are loopback; anything else requires a token
    /// [default: 127.0.0.1]
    #[arg(long, env = "MEDIATORD_HOSTNAME", hide_env_values = true, value_name = "H")]
    pub hostname: Option<String>,
    /// TCP port; 0 lets the OS choose (the startup line prints the real one) [default: 7776]
    #[arg(long, env = "MEDIATORD_PORT", hide_env_values = true, value_name = "P")]
    pub port: Option<u16>,
    /// Bearer token clients must send (also MEDIATORD_TOKEN, then QWEN_SERVER_TOKEN). Trimmed; empty
    /// means none. Prefer the environment: a flag is visible in the process list
    #[arg(long, env = "MEDIATORD_TOKEN", value_name = "T", hide_env_values = true)]
    pub token: Option<Secret>,
    /// Require the token even on loopback binds and on /health
    #[arg(long)]
    pub require_auth: bool,
    /// A browser origin (exact scheme://host[:port]) allowed through CORS; repeatable. '*' needs a token
    #[arg(long = "allow-origin", value_name = "O")]
    pub allow_origin: Vec<String>,
    /// The ACP agent command line, split like a POSIX shell would; `demo` runs the built-in demo
    /// agent [default: qwen --acp]
    #[arg(long, env = "MEDIATORD_AGENT", hide_env_values = true, value_name = "CMD")]
    pub agent: Option<String>,
    /// A workspace directory sessions may use (existing; a relative path is taken from the current
    /// directory); repeatable, the first is the primary. Default: the current directory
    #[arg(long = "workspace", value_name = "DIR")]
    pub workspace: Vec<String>,
    /// Accept any absolute existing directory as a session cwd
    #[arg(long)]
    pub any_workspace: bool,
    /// Default session scope: `single` (one shared session per workspace) or `thread` (a new
    /// session per create) [default: single]
    #[arg(long, value_name = "single|thread")]
    pub session_scope: Option<String>,
    /// Live sessions at once (attaches do not count); 0 = no cap [default: 32]
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<usize>,
    /// Prompts per session, running plus queued; 0 = no cap [default: 5]
    #[arg(long, value_name = "N")]
    pub max_pending_prompts: Option<usize>,
    /// Open TCP connections; further connections are closed at accept; 0 = no cap [default: 256]
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// SSE streams per session; more are answered 429 [default: 64]
    #[arg(long, value_name = "N")]
    pub max_subscribers: Option<usize>,
    /// Events kept per session for Last-Event-ID replay [default: 8000]
    #[arg(long, value_name = "N")]
    pub event_ring_size: Option<usize>,
    /// Frames buffered per SSE stream before a slow client is evicted [default: 256]
    #[arg(long, value_name = "N")]
    pub subscriber_queue: Option<usize>,
    /// Deadline for the agent's `initialize` and `session/new` answers [default: 10000]
    #[arg(long, value_name = "MS")]
    pub initialize_timeout_ms: Option<u64>,
    /// Who decides permission requests: first-responder, designated, consensus, local-only
    /// [default: first-responder]
    #[arg(long, value_name = "P")]
    pub permission_policy: Option<String>,
    /// Votes needed under consensus (a positive integer) [default: floor(M/2)+1 of the M clients
    /// attached when the request was raised]
    // Negative numbers are values here, so `--consensus-quorum -1` gets the one-line refusal.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub consensus_quorum: Option<String>,
    /// An unanswered permission request is cancelled after this long; 0 = wait forever
    /// [default: 300000]
    #[arg(long, value_name = "MS")]
    pub permission_timeout_ms: Option<u64>,
    /// Enable POST /session/:id/shell (also needs a token)
    #[arg(long)]
    pub enable_session_shell: bool,
    /// Session shell commands are killed (with their children) after this long [default: 120000]
    #[arg(long, value_name = "MS")]
    pub shell_timeout_ms: Option<u64>,
    /// A connection must deliver each request's head (request line and headers) within this long
    /// of its first byte, and a new connection its first head within this long of connecting
    /// [default: 10000]
    #[arg(long, value_name = "MS")]
    pub header_timeout_ms: Option<u64>,
    /// A keep-alive connection with no request in progress is closed after this long [default: 30000]
    #[arg(long, value_name = "MS")]
    pub idle_timeout_ms: Option<u64>,
    /// A request body must arrive in full within this long of its head: 408 otherwise [default: 60000]
    #[arg(long, value_name = "MS")]
    pub body_timeout_ms: Option<u64>,
    /// JSON settings file; flags and environment win over it
    #[arg(long, env = "MEDIATORD_CONFIG", hide_env_values = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log format on stderr; the level comes from RUST_LOG (default info) [default: text]
    #[arg(long, value_name = "text|json")]
    pub log_format: Option<String>,
}

/// Environment variables the daemon reads that hold a secret: they are removed from the
/// environment of every process the daemon starts (agents, their guards, session shell commands),
/// so nothing the agent runs can read the token and vote on its own permission requests.
pub const SECRET_ENV: &[&str] = &["MEDIATORD_TOKEN", "QWEN_SERVER_TOKEN"];

/// A secret as given on the command line or in the environment; its `Debug` never shows it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that hashes it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// The SHA-256 of the bearer token. Its `Debug` says only that it exists: the digest of a short
/// token can be brute-forced, so it is no more fit for a log than the token.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenDigest(pub [u8; 32]);

impl std::fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenDigest(<redacted>)")
    }
}

/// Session scope (`docs/protocol.md#4-agents-workspaces-and-sessions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionScope {
    Single,
    Thread,
}

impl SessionScope {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "single" => Some(Self::Single),
            "thread" => Some(Self::Thread),
            _ => None,
        }
    }
}

/// Who decides a permission request (`--permission-policy`; the decision itself is
/// `permission::policy::decide`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    FirstResponder,
    Designated,
    Consensus,
    LocalOnly,
}

impl Policy {
    pub const ALL: [Policy; 4] =
        [Policy::FirstResponder, Policy::Designated, Policy::Consensus, Policy::LocalOnly];

    pub fn parse(s: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::FirstResponder => "first-responder",
            Policy::Designated => "designated",
            Policy::Consensus => "consensus",
            Policy::LocalOnly => "local-only",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The agent command, split once at boot.
#[derive(Debug, Clone)]
pub struct AgentCommand {
    /// As the operator wrote it (shown in capabilities; it is not a secret, tokens live in env).
    pub display: String,
    pub program: String,
    pub args: Vec<String>,
    /// The program run as the agent guard: this binary, unless an embedder whose `current_exe()`
    /// is not mediatord (an in-process test) points it at the mediatord binary.
    pub guard: PathBuf,
}

/// Allowed browser origins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origins {
    List(Vec<String>),
    /// `--allow-origin '*'` (only with a token).
    Any,
}

impl Origins {
    pub fn allows(&self, origin: &str) -> bool {
        match self {
            Origins::Any => origin != "null",
            Origins::List(list) => list.iter().any(|o| o == origin),
        }
    }

    pub fn is_empty(&self) -> bool {
        matches!(self, Origins::List(l) if l.is_empty())
    }
}

/// The validated, resolved settings the daemon runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub hostname: String,
    pub port: u16,
    /// SHA-256 of the token: the plain token is never kept, so it can never be logged.
    pub token_digest: Option<TokenDigest>,
    pub require_auth: bool,
    pub allow_origins: Origins,
    pub agent: AgentCommand,
    /// Canonical paths; the first is primary.
    pub workspaces: Vec<PathBuf>,
    pub any_workspace: bool,
    pub session_scope: SessionScope,
    pub max_sessions: usize,
    pub max_pending_prompts: usize,
    pub max_connections: usize,
    pub max_subscribers: usize,
    pub event_ring_size: usize,
    pub subscriber_queue: usize,
    pub initialize_timeout: Duration,
    pub permission_policy: Policy,
    pub consensus_quorum: Option<usize>,
    /// `None` = wait forever.
    pub permission_timeout: Option<Duration>,
    pub enable_session_shell: bool,
    pub shell_timeout: Duration,
    /// Connection deadlines (`docs/protocol.md#210-connection-deadlines`).
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub log_format: LogFormat,
    /// Non-fatal findings (a quorum without consensus), logged once tracing is up.
    pub warnings: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("mediatord: {0}")]
pub struct ConfigError(pub String);

fn refuse<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(msg.into()))
}

/// The config file's settings, each `None` when absent.
#[derive(Debug, Default)]
struct FileSettings {
    values: serde_json::Map<String, Value>,
    policy_strategy: Option<String>,
    policy_quorum: Option<Value>,
    /// The directory holding the file: relative paths in it (`workspace`, an `agent` program with a
    /// slash) are resolved against it, so the file means the same whatever directory the daemon
    /// is started from.
    dir: PathBuf,
}

/// The members of the config file's top-level object.
const TOP_KEYS: &[&str] = &["serve", "policy"];

/// Keys accepted under `"serve"`: every option of `serve` but `--config`, in camelCase.
const SERVE_KEYS: &[&str] = &[
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
    "initializeTimeoutMs",
    "permissionPolicy",
    "consensusQuorum",
    "permissionTimeoutMs",
    "enableSessionShell",
    "shellTimeoutMs",
    "headerTimeoutMs",
    "idleTimeoutMs",
    "bodyTimeoutMs",
    "logFormat",
];

/// Keys accepted under `"policy"` (the names of Qwen Code's `settings.json`).
const POLICY_KEYS: &[&str] = &["permissionStrategy", "consensusQuorum"];

/// How alike two keys must be (Jaro-Winkler, 0..1) for one to be suggested for the other: above
/// clap's own threshold for mistyped flags (0.7), so a suggestion is a likely typo, not a guess.
const SUGGESTION_SIMILARITY: f64 = 0.8;

/// The known key an unknown one most likely meant. Case, `-` and `_` are ignored first, so the
/// flag spellings (`max-sessions`, `max_sessions`) find their camelCase key.
fn suggest<'a>(unknown: &str, known: &[&'a str]) -> Option<&'a str> {
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
fn unknown_key(path: &Path, section: Option<&str>, key: &str) -> ConfigError {
    let (known, prefix) = match section {
        None => (TOP_KEYS, String::new()),
        Some("serve") => (SERVE_KEYS, "serve.".to_owned()),
        Some(other) => (POLICY_KEYS, format!("{other}.")),
    };
    let hint = match suggest(key, known) {
        Some(k) => format!("did you mean {prefix}{k}?"),
        // Options written at the top level instead of under "serve".
        None if section.is_none() => match suggest(key, SERVE_KEYS) {
            Some(k) => format!("did you mean serve.{k}? (options go under \"serve\")"),
            None => "the file holds only \"serve\" and \"policy\"".to_owned(),
        },
        None => format!("known keys: {}", known.join(", ")),
    };
    ConfigError(format!("config file {}: unknown key {prefix}{key}; {hint}", path.display()))
}

fn read_config_file(path: &Path) -> Result<FileSettings, ConfigError> {
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
    let mut out = FileSettings { dir, ..FileSettings::default() };
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
            _ => return Err(unknown_key(path, None, &key)),
        }
    }
    Ok(out)
}

impl FileSettings {
    fn string(&self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.values.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => refuse(format!("config file: serve.{key} must be a string")),
        }
    }

    fn number(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.values.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) => Ok(Some(n)),
                None => refuse(format!("config file: serve.{key} must be a non-negative integer")),
            },
        }
    }

    fn flag(&self, key: &str) -> Result<bool, ConfigError> {
        match self.values.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => refuse(format!("config file: serve.{key} must be true or false")),
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<String>, ConfigError> {
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

fn to_usize(n: u64, name: &str) -> Result<usize, ConfigError> {
    usize::try_from(n).or_else(|_| refuse(format!("{name} is too large")))
}

/// Whether a `--hostname` value names a loopback address.
pub fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.eq_ignore_ascii_case("localhost") {
        return true;
    }
    bare.parse::<IpAddr>().map(|ip| ip.is_loopback()).unwrap_or(false)
}

/// `scheme://host[:port]` with an http(s) scheme and nothing after the authority.
/// The host of a well-formed origin (`scheme://host[:port]`), brackets kept for IPv6.
fn origin_host(origin: &str) -> &str {
    let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or(authority, |(host, _)| host),
        None => authority.rsplit_once(':').map_or(authority, |(host, _)| host),
    }
}

pub fn valid_origin(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    if !matches!(scheme, "http" | "https") || rest.is_empty() {
        return false;
    }
    let (host, port) = if let Some(after) = rest.strip_prefix('[') {
        match after.split_once(']') {
            Some((h, tail)) => (
                h,
                tail.strip_prefix(':').map(Some).unwrap_or(if tail.is_empty() { None } else { Some("x") }),
            ),
            None => return false,
        }
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    let host_ok = !host.is_empty()
        && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_'));
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.parse::<u16>().is_ok());
    host_ok && port_ok
}

/// `raw` as an absolute directory: a relative path is taken from `base` (the current directory for
/// flags, the config file's directory for the file), then symlinks are resolved.
fn workspace_dir(raw: &str, base: &Path) -> Result<PathBuf, ConfigError> {
    let path: PathBuf = base.join(raw).components().collect();
    let shown = if Path::new(raw).is_absolute() {
        format!("{raw:?}")
    } else {
        format!("{raw:?} (resolved to {})", path.display())
    };
    match std::fs::canonicalize(&path) {
        Ok(p) if p.is_dir() => Ok(p),
        Ok(_) => refuse(format!("workspace {shown} is not a directory")),
        Err(e) => refuse(format!("workspace {shown} does not exist: {e}")),
    }
}

/// The current directory, which relative paths on the command line are resolved against.
fn current_dir() -> Result<PathBuf, ConfigError> {
    std::env::current_dir().or_else(|e| refuse(format!("cannot resolve the current directory: {e}")))
}

/// Splits the agent command line; `demo` becomes this binary's own demo agent. A relative program
/// path (`./my-agent`) is resolved against the current directory.
pub fn agent_command(raw: &str) -> Result<AgentCommand, ConfigError> {
    agent_command_in(raw, &current_dir()?)
}

/// [`agent_command`], with a relative program path taken from `base`: the agent runs in its
/// workspace, so a path relative to where the daemon was started would name another file there.
fn agent_command_in(raw: &str, base: &Path) -> Result<AgentCommand, ConfigError> {
    let display = raw.trim().to_owned();
    if display.is_empty() {
        return refuse(
            "--agent is empty: give the agent's command line, e.g. --agent 'qwen --acp' or --agent demo",
        );
    }
    let exe = std::env::current_exe()
        .or_else(|e| refuse(format!("cannot locate this binary (it also runs the agent guard): {e}")))?;
    if display == "demo" {
        return Ok(AgentCommand {
            display,
            program: exe.to_string_lossy().into_owned(),
            args: vec!["demo-agent".into()],
            guard: exe,
        });
    }
    let mut words = shell_words::split(&display)
        .or_else(|e| refuse(format!("--agent cannot be split into words: {e}")))?;
    if words.is_empty() {
        return refuse("--agent is empty");
    }
    let mut program = words.remove(0);
    // A bare name is looked up on PATH; only a path with a slash is relative to anything.
    if program.contains('/') && Path::new(&program).is_relative() {
        // `components` drops the `.` of `./my-agent`, so logs and errors show a clean path.
        program = base.join(&program).components().collect::<PathBuf>().to_string_lossy().into_owned();
    }
    Ok(AgentCommand { display, program, args: words, guard: exe })
}

impl Config {
    /// Merges flags/env (already in `args` via clap) with the config file, then validates.
    pub fn from_args(args: &ServeArgs) -> Result<Config, ConfigError> {
        let mut warnings = Vec::new();
        let cwd = current_dir()?;
        let file = match &args.config {
            Some(path) => read_config_file(path)?,
            None => FileSettings { dir: cwd.clone(), ..FileSettings::default() },
        };

        let hostname = match &args.hostname {
            Some(h) => h.clone(),
            None => file.string("hostname")?.unwrap_or_else(|| "127.0.0.1".into()),
        };
        let port = match args.port {
            Some(p) => p,
            None => match file.number("port")? {
                Some(p) => u16::try_from(p).or_else(|_| refuse("config file: serve.port is out of range"))?,
                None => 7776,
            },
        };
        // MEDIATORD_TOKEN reaches us through clap; QWEN_SERVER_TOKEN is the qwen-compatible fallback.
        let token = args
            .token
            .as_ref()
            .map(|t| t.expose().to_owned())
            .or_else(|| std::env::var("QWEN_SERVER_TOKEN").ok())
            .or(file.string("token")?)
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty());
        let require_auth = args.require_auth || file.flag("requireAuth")?;
        let loopback = is_loopback_host(&hostname);
        if !loopback && token.is_none() {
            return refuse(format!(
                "refusing to bind non-loopback address {hostname} without a token (set --token or MEDIATORD_TOKEN)"
            ));
        }
        if require_auth && token.is_none() {
            return refuse("--require-auth needs a token (set --token or MEDIATORD_TOKEN)");
        }

        let raw_origins = if args.allow_origin.is_empty() {
            file.strings("allowOrigin")?
        } else {
            args.allow_origin.clone()
        };
        let allow_origins = if raw_origins.iter().any(|o| o == "*") {
            if token.is_none() {
                return refuse("--allow-origin '*' needs a token (set --token or MEDIATORD_TOKEN)");
            }
            Origins::Any
        } else {
            for origin in &raw_origins {
                if origin == "null" || !valid_origin(origin) {
                    return refuse(format!(
                        "malformed --allow-origin {origin:?}: expected scheme://host[:port], e.g. http://localhost:3000"
                    ));
                }
                // Without a token, an allowed origin's pages get the whole API: a page served from
                // another machine would let whoever controls it drive this daemon through any
                // visitor's browser. qwen serve refuses it too.
                if token.is_none() && !is_loopback_host(origin_host(origin)) {
                    return refuse(format!(
                        "--allow-origin {origin} is not a loopback origin: without a token its pages, in any visitor's browser, could drive the agent; set a token (--token or MEDIATORD_TOKEN) or allow only http://localhost, 127.0.0.1 or [::1] origins"
                    ));
                }
            }
            Origins::List(raw_origins)
        };

        let agent = match &args.agent {
            Some(a) => agent_command_in(a, &cwd)?,
            None => {
                agent_command_in(&file.string("agent")?.unwrap_or_else(|| "qwen --acp".into()), &file.dir)?
            }
        };

        let (raw_workspaces, workspace_base) = if args.workspace.is_empty() {
            (file.strings("workspace")?, &file.dir)
        } else {
            (args.workspace.clone(), &cwd)
        };
        let workspaces = if raw_workspaces.is_empty() {
            vec![workspace_dir(".", &cwd)?]
        } else {
            let mut out: Vec<PathBuf> = Vec::new();
            for w in &raw_workspaces {
                let dir = workspace_dir(w, workspace_base)?;
                if !out.contains(&dir) {
                    out.push(dir);
                }
            }
            out
        };
        let any_workspace = args.any_workspace || file.flag("anyWorkspace")?;

        let scope_raw = match &args.session_scope {
            Some(s) => s.clone(),
            None => file.string("sessionScope")?.unwrap_or_else(|| "single".into()),
        };
        let session_scope = SessionScope::parse(&scope_raw).map_or_else(
            || refuse(format!("unknown --session-scope {scope_raw:?} (expected single or thread)")),
            Ok,
        )?;

        let num = |flag: Option<usize>, key: &str, default: usize| -> Result<usize, ConfigError> {
            match flag {
                Some(n) => Ok(n),
                None => match file.number(key)? {
                    Some(n) => to_usize(n, key),
                    None => Ok(default),
                },
            }
        };
        let max_sessions = num(args.max_sessions, "maxSessions", 32)?;
        let max_pending_prompts = num(args.max_pending_prompts, "maxPendingPrompts", 5)?;
        let max_connections = num(args.max_connections, "maxConnections", 256)?;
        let max_subscribers = num(args.max_subscribers, "maxSubscribers", 64)?;
        let event_ring_size = num(args.event_ring_size, "eventRingSize", 8000)?;
        let subscriber_queue = num(args.subscriber_queue, "subscriberQueue", 256)?;
        for (name, value, max) in [
            ("--max-subscribers", max_subscribers, HARD_MAX_SUBSCRIBERS),
            ("--event-ring-size", event_ring_size, HARD_MAX_RING),
            ("--subscriber-queue", subscriber_queue, HARD_MAX_RING),
        ] {
            if value == 0 || value > max {
                return refuse(format!("{name} must be between 1 and {max}"));
            }
        }

        let ms = |flag: Option<u64>, key: &str, default: u64| -> Result<u64, ConfigError> {
            Ok(flag.or(file.number(key)?).unwrap_or(default))
        };
        let init_ms = ms(args.initialize_timeout_ms, "initializeTimeoutMs", 10_000)?;
        if init_ms == 0 {
            return refuse("--initialize-timeout-ms must be positive");
        }
        let perm_ms = ms(args.permission_timeout_ms, "permissionTimeoutMs", 300_000)?;

        let policy_raw = match &args.permission_policy {
            Some(p) => p.clone(),
            None => match file.string("permissionPolicy")? {
                Some(p) => p,
                None => file.policy_strategy.clone().unwrap_or_else(|| "first-responder".into()),
            },
        };
        let permission_policy = Policy::parse(&policy_raw).map_or_else(
            || {
                refuse(format!(
                    "unknown permission policy {policy_raw:?} (expected first-responder, designated, consensus or local-only)"
                ))
            },
            Ok,
        )?;

        let quorum_raw: Option<String> = match &args.consensus_quorum {
            Some(q) => Some(q.clone()),
            None => match file.values.get("consensusQuorum").or(file.policy_quorum.as_ref()) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(v) => Some(v.to_string()),
            },
        };
        let consensus_quorum = match quorum_raw {
            None => None,
            Some(q) => match q.trim().parse::<usize>() {
                Ok(n) if n > 0 => Some(n),
                _ => return refuse(format!("consensus quorum {q:?} is not a positive integer")),
            },
        };
        if consensus_quorum.is_some() && permission_policy != Policy::Consensus {
            warnings.push(format!(
                "a consensus quorum is set but the permission policy is {}; it has no effect",
                permission_policy.as_str()
            ));
        }

        let enable_session_shell = args.enable_session_shell || file.flag("enableSessionShell")?;
        let shell_ms = ms(args.shell_timeout_ms, "shellTimeoutMs", 120_000)?;
        if shell_ms == 0 {
            return refuse("--shell-timeout-ms must be positive");
        }
        let mut connection_timeouts = [Duration::ZERO; 3];
        for (slot, (flag, key, name, default)) in connection_timeouts.iter_mut().zip([
            (args.header_timeout_ms, "headerTimeoutMs", "--header-timeout-ms", DEFAULT_HEADER_TIMEOUT_MS),
            (args.idle_timeout_ms, "idleTimeoutMs", "--idle-timeout-ms", DEFAULT_IDLE_TIMEOUT_MS),
            (args.body_timeout_ms, "bodyTimeoutMs", "--body-timeout-ms", DEFAULT_BODY_TIMEOUT_MS),
        ]) {
            // No "0 = none": a connection deadline that can be switched off is a slot an idle
            // client can hold forever.
            match ms(flag, key, default)? {
                0 => return refuse(format!("{name} must be positive")),
                n => *slot = Duration::from_millis(n),
            }
        }
        let [header_timeout, idle_timeout, body_timeout] = connection_timeouts;
        let log_raw = match &args.log_format {
            Some(f) => f.clone(),
            None => file.string("logFormat")?.unwrap_or_else(|| "text".into()),
        };
        let log_format = match log_raw.as_str() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => return refuse(format!("unknown --log-format {other:?} (expected text or json)")),
        };

        Ok(Config {
            hostname,
            port,
            token_digest: token.map(|t| TokenDigest(Sha256::digest(t.as_bytes()).into())),
            require_auth,
            allow_origins,
            agent,
            workspaces,
            any_workspace,
            session_scope,
            max_sessions,
            max_pending_prompts,
            max_connections,
            max_subscribers,
            event_ring_size,
            subscriber_queue,
            initialize_timeout: Duration::from_millis(init_ms),
            permission_policy,
            consensus_quorum,
            permission_timeout: (perm_ms > 0).then(|| Duration::from_millis(perm_ms)),
            enable_session_shell,
            shell_timeout: Duration::from_millis(shell_ms),
            header_timeout,
            idle_timeout,
            body_timeout,
            log_format,
            warnings,
        })
    }

    /// Settings for tests and embedding: demo agent, loopback, no token, the given workspace.
    pub fn for_tests(workspace: &Path) -> Config {
        let args = ServeArgs {
            agent: Some("demo".into()),
            port: Some(0),
            workspace: vec![workspace.to_string_lossy().into_owned()],
            ..ServeArgs::default()
        };
        Config::from_args(&args).expect("test settings are valid")
    }

    pub fn primary_workspace(&self) -> &Path {
        &self.workspaces[0]
    }

    /// `--max-sessions` with `0` mapped onto the hard ceiling.
    pub fn session_cap(&self) -> usize {
        if self.max_sessions == 0 { HARD_MAX_SESSIONS } else { self.max_sessions.min(HARD_MAX_SESSIONS) }
    }

    pub fn prompt_cap(&self) -> usize {
        if self.max_pending_prompts == 0 {
            HARD_MAX_PENDING_PROMPTS
        } else {
            self.max_pending_prompts.min(HARD_MAX_PENDING_PROMPTS)
        }
    }

    pub fn connection_cap(&self) -> usize {
        if self.max_connections == 0 {
            HARD_MAX_CONNECTIONS
        } else {
            self.max_connections.min(HARD_MAX_CONNECTIONS)
        }
    }

    /// Whether `POST /session/:id/shell` is usable (`docs/protocol.md#9-session-shell`).
    pub fn session_shell_effective(&self) -> bool {
        self.enable_session_shell && self.token_digest.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_must_be_scheme_host_port() {
        for good in ["http://localhost:3000", "https://example.com", "http://[::1]:8080", "http://127.0.0.1"]
        {
            assert!(valid_origin(good), "{good}");
        }
        for bad in
            ["localhost:3000", "ftp://x", "http://", "http://x/", "http://x:port", "http://a b", "null"]
        {
            assert!(!valid_origin(bad), "{bad}");
        }
    }

    #[test]
    fn origin_hosts() {
        for (origin, host, loopback) in [
            ("http://localhost:3000", "localhost", true),
            ("https://127.0.0.1", "127.0.0.1", true),
            ("http://[::1]:8080", "::1", true),
            ("https://app.example.com", "app.example.com", false),
            ("http://10.0.0.5:3000", "10.0.0.5", false),
        ] {
            assert_eq!(origin_host(origin), host, "{origin}");
            assert_eq!(is_loopback_host(origin_host(origin)), loopback, "{origin}");
        }
    }

    #[test]
    fn loopback_names() {
        for h in ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]", "LOCALHOST"] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["0.0.0.0", "10.0.0.1", "example.com", "::"] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn policy_names_round_trip() {
        for p in Policy::ALL {
            assert_eq!(Policy::parse(p.as_str()), Some(p));
        }
        assert_eq!(Policy::parse("majority"), None);
    }

    /// Issue #16, finding b: neither the parsed arguments nor the settings show the token, or its
    /// digest, when they are debug-printed (as a log line would).
    #[test]
    fn debug_output_never_shows_the_token_or_its_digest() {
        let token = "debug-redaction-token-5b1e";
        let dir = std::env::temp_dir();
        let args = ServeArgs {
            token: Some(Secret::from(token.to_owned())),
            agent: Some("demo".into()),
            workspace: vec![dir.to_string_lossy().into_owned()],
            ..ServeArgs::default()
        };
        let config = Config::from_args(&args).expect("valid settings");
        let digest = config.token_digest.expect("a token is set").0;
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        for shown in [format!("{args:?}"), format!("{config:?}"), format!("{config:#?}")] {
            assert!(!shown.contains(token), "the token is shown: {shown}");
            assert!(!shown.contains(&hex), "the digest is shown: {shown}");
            assert!(!shown.contains(&format!("{:?}", &digest[..4])), "digest bytes are shown: {shown}");
            assert!(shown.contains("<redacted>"), "{shown}");
        }
    }

    #[test]
    fn unknown_keys_suggest_the_closest_known_one() {
        for (typo, meant) in [
            ("workspaces", Some("workspace")),
            ("max-sessions", Some("maxSessions")),
            ("max_pending_prompts", Some("maxPendingPrompts")),
            ("MAXSESSIONS", Some("maxSessions")),
            ("allowOrigins", Some("allowOrigin")),
            ("permisionPolicy", Some("permissionPolicy")),
            ("colour", None),
            ("x", None),
        ] {
            assert_eq!(suggest(typo, SERVE_KEYS), meant, "{typo}");
        }
    }

    /// `ServeArgs` as clap sees it, for the tables below.
    fn serve_flags() -> Vec<String> {
        use clap::Args as _;
        ServeArgs::augment_args(clap::Command::new("serve"))
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_owned))
            .collect()
    }

    #[test]
    fn every_option_but_config_has_a_config_file_key() {
        let camel = |flag: &str| {
            let mut out = String::new();
            let mut upper = false;
            for c in flag.chars() {
                match c {
                    '-' => upper = true,
                    c if upper => {
                        out.push(c.to_ascii_uppercase());
                        upper = false;
                    }
                    c => out.push(c),
                }
            }
            out
        };
        let mut from_flags: Vec<String> =
            serve_flags().iter().filter(|f| *f != "config").map(|f| camel(f)).collect();
        let mut keys: Vec<String> = SERVE_KEYS.iter().map(|k| (*k).to_owned()).collect();
        from_flags.sort();
        keys.sort();
        assert_eq!(from_flags, keys);
    }

    const EXAMPLE: &str = include_str!("../docs/examples/mediatord.json");
    const EXAMPLE_NOTES: &str = include_str!("../docs/examples/mediatord.md");

    #[test]
    fn the_example_config_file_sets_every_key_to_its_default_and_loads() {
        let example: Value = serde_json::from_str(EXAMPLE).expect("the example is JSON");
        let serve = example["serve"].as_object().expect("a serve object");
        let mut keys: Vec<&str> = serve.keys().map(String::as_str).collect();
        let mut known = SERVE_KEYS.to_vec();
        keys.sort_unstable();
        known.sort_unstable();
        assert_eq!(keys, known, "docs/examples/mediatord.json must set every option");
        for key in SERVE_KEYS {
            assert!(
                EXAMPLE_NOTES.contains(&format!("| `{key}` |")),
                "docs/examples/mediatord.md explains {key}"
            );
        }

        // Loaded as is but for the workspace, which must exist here.
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = dir.path().to_string_lossy().into_owned();
        let mut example = example.clone();
        example["serve"]["workspace"] = serde_json::json!([workspace]);
        let path = dir.path().join("mediatord.json");
        std::fs::write(&path, example.to_string()).expect("write");
        let loaded = Config::from_args(&ServeArgs { config: Some(path), ..ServeArgs::default() })
            .expect("the example loads");
        let defaults = Config::from_args(&ServeArgs { workspace: vec![workspace], ..ServeArgs::default() })
            .expect("defaults");
        assert_eq!(format!("{loaded:?}"), format!("{defaults:?}"), "the example shows the defaults");
    }

    #[test]
    fn relative_workspaces_in_the_config_file_are_taken_from_its_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("a/b")).expect("mkdir");
        let path = dir.path().join("a/mediatord.json");
        std::fs::write(&path, r#"{"serve": {"workspace": ["b", "."]}}"#).expect("write");
        let config =
            Config::from_args(&ServeArgs { config: Some(path), ..ServeArgs::default() }).expect("loads");
        let a = std::fs::canonicalize(dir.path().join("a")).expect("canonical");
        assert_eq!(config.workspaces, vec![a.join("b"), a]);
    }

    #[test]
    fn agent_is_split_like_a_shell() {
        let a = agent_command("node '/opt/my agent/cli.js' --acp").expect("valid");
        assert_eq!(a.program, "node");
        assert_eq!(a.args, vec!["/opt/my agent/cli.js", "--acp"]);
        assert!(agent_command("   ").is_err());
        assert!(agent_command("qwen 'unbalanced").is_err());
    }
}

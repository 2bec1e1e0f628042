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

use crate::tls::TlsFiles;

mod notify;
mod sandbox;
pub mod state_dir;
pub use self::notify::{
    Escalation, MAX_TARGETS, NotifyFormat, NotifyTarget, TargetUrl, parse_target_url, split_format,
    telegram_chat_id,
};
pub use self::sandbox::{MAX_NET_PORTS, MAX_WRITABLE, NetRule, SandboxMode, SandboxSettings};

/// Hard ceilings that still apply when an operator sets a limit to `0` ("no cap"): nothing a client
/// does may allocate without bound, so "no cap" means "the largest value we are sure is safe".
pub const HARD_MAX_SESSIONS: usize = 4096;
pub const HARD_MAX_PENDING_PROMPTS: usize = 1024;
pub const HARD_MAX_CONNECTIONS: usize = 65_536;
/// Largest accepted `--event-ring-size`, `--subscriber-queue` and `--max-subscribers`.
pub const HARD_MAX_RING: usize = 1_000_000;
pub const HARD_MAX_SUBSCRIBERS: usize = 100_000;

/// Longest agent name (`--agent NAME=COMMAND`): names travel in request bodies, listings and logs.
pub const MAX_AGENT_NAME: usize = 64;

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
  mediatord serve --agent qwen='qwen --acp' --agent review=demo
                                        # two named agents; the first is the default,
                                        # POST /session {\"agent\":\"review\"} picks the other

Every option may also be set in a JSON file given with --config, under \"serve\" in camelCase
(e.g. {\"serve\":{\"maxSessions\":8}}), and the permission policy also as
{\"policy\":{\"permissionStrategy\":\"consensus\",\"consensusQuorum\":2}}. Agents with settings of
their own (added environment, initialize timeout, client capabilities) go in its \"agents\" map:
{\"agents\":{\"gemini\":{\"command\":\"gemini --acp\",\"env\":{\"GEMINI_API_KEY\":\"...\"}}}}.
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
    /// An ACP agent: `NAME=COMMAND`, or a bare COMMAND named after its program. The command line is
    /// split like a POSIX shell would; `demo` runs the built-in demo agent. Repeatable: the first is
    /// the default, `POST /session {"agent": NAME}` picks another [default: qwen --acp]
    #[arg(long = "agent", env = "MEDIATORD_AGENT", hide_env_values = true, value_name = "CMD")]
    pub agent: Vec<String>,
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
    /// Live events an SSE stream may lag behind the newest before it is evicted (it may resume
    /// with Last-Event-ID) [default: --event-ring-size]
    #[arg(long, value_name = "N")]
    pub subscriber_queue: Option<usize>,
    /// A connection whose socket accepts no bytes for this long, while the daemon has bytes to
    /// write to it, is closed [default: 60000]
    #[arg(long, value_name = "MS")]
    pub writer_idle_timeout_ms: Option<u64>,
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
    /// With a notification target for permission requests, they wait this long instead (someone
    /// away from the desk needs longer than 5 minutes); 0 = wait forever [default: 3600000]
    #[arg(long, value_name = "MS")]
    pub notified_permission_timeout_ms: Option<u64>,
    /// Enable POST /session/:id/shell (also needs a token)
    #[arg(long)]
    pub enable_session_shell: bool,
    /// Take no snapshots of the workspace at each turn: no change sets, no unapproved marks, no
    /// rewind (the file routes and the workspace diff still answer)
    #[arg(long)]
    pub no_snapshots: bool,
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
    /// Send notifications of permission requests to this http(s):// URL; repeatable. A prefix
    /// chooses the format: ntfy+, slack+, discord+, telegram+ (json+ is the default). Targets with
    /// settings (events, a signing secret, clientId, headers, reminders) go in the config file's
    /// serve.notify list (docs/notifications.md)
    #[arg(long = "notify", value_name = "[FORMAT+]URL")]
    pub notify: Vec<String>,
    /// Signs what is sent to every notification target that names no secret of its own (all the
    /// --notify ones): `X-Mediatord-Signature`. Prefer the environment: a flag shows in the
    /// process list
    #[arg(long, env = "MEDIATORD_NOTIFY_SECRET", hide_env_values = true, value_name = "SECRET")]
    pub notify_secret: Option<String>,
    /// The daemon's address as the notified person's device reaches it: the base of action links
    /// (`<public-url>/act/<token>`) [default: the listening URL]
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
    /// Serve https with this certificate (PEM: the leaf, then any intermediates); needs --tls-key.
    /// SIGHUP reloads the pair
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Advertise the daemon on the LAN over mDNS (`_mediatord._tcp`: its port, https or not, its
    /// version and certificate fingerprint), so `mediatord pair`, `attach`, `connect`… on other
    /// machines find it. Needs a LAN address (--hostname)
    #[arg(long)]
    pub mdns: bool,
    /// A device pairing code (`mediatord pair`) may be exchanged for this long after it is issued
    /// [default: 120000]
    #[arg(long, value_name = "MS")]
    pub pairing_code_ttl_ms: Option<u64>,
    /// Where the audit trail, workspace rules and session history are kept (created 0700)
    /// [default: $XDG_STATE_HOME/mediatord, else ~/.local/state/mediatord]
    #[arg(
        long,
        env = "MEDIATORD_STATE_DIR",
        hide_env_values = true,
        value_name = "DIR",
        conflicts_with = "ephemeral"
    )]
    pub state_dir: Option<PathBuf>,
    /// Keep nothing on disk: no history, the audit and rules in memory only
    #[arg(long)]
    pub ephemeral: bool,
    /// Keep the durable state in PostgreSQL instead of --state-dir, shared by every daemon given
    /// the same URL (a fleet: docs/operations.md#a-fleet), e.g. postgres://mediatord@db/mediatord
    #[arg(
        long,
        env = "MEDIATORD_STORE",
        hide_env_values = true,
        value_name = "URL",
        conflicts_with = "ephemeral"
    )]
    pub store: Option<Secret>,
    /// How the other daemons of a fleet reach this one (http://host:port) [default: the listening
    /// URL, which only daemons on the same machine can use]
    #[arg(long, env = "MEDIATORD_NODE_URL", hide_env_values = true, value_name = "URL")]
    pub node_url: Option<String>,
    /// A daemon of a fleet that stops renewing its lease for this long is dead, and its sessions
    /// are marked so [default: 10000]
    #[arg(long, value_name = "MS")]
    pub node_lease_ms: Option<u64>,
    /// Events kept per session in the history (the newest) [default: 100000]
    #[arg(long, value_name = "N")]
    pub history_events: Option<u64>,
    /// Ended sessions, their events and decided audit entries are removed after this many days;
    /// 0 = never [default: 30]
    #[arg(long, value_name = "DAYS")]
    pub history_days: Option<u64>,
    /// Confine every agent and session shell command with the kernel (Landlock): `workspace` lets
    /// them and everything they start write only beneath the session's workspace, the agent's own
    /// state directories and a private temporary directory (reading stays allowed); `off` does not
    /// confine. An agent's `sandbox` in the config file overrides it [default: workspace where the
    /// kernel supports it, with a warning where it does not]
    #[arg(long, value_name = "workspace|off")]
    pub sandbox: Option<String>,
    /// A path every confined agent and session shell command may also write beneath (repeatable;
    /// `~/` is the agent's home; ending in `/`, created as a directory when missing)
    #[arg(long = "sandbox-writable", value_name = "PATH")]
    pub sandbox_writable: Vec<String>,
}

/// `--pairing-code-ttl-ms`'s default: long enough to find a phone and scan, short enough that a
/// code seen over a shoulder is stale.
pub const DEFAULT_PAIRING_CODE_TTL_MS: u64 = 120_000;

/// `--history-events`'s default: a long agent turn streams a few thousand updates, so this keeps
/// dozens of turns per session while bounding one session's history to tens of megabytes.
pub const DEFAULT_HISTORY_EVENTS: u64 = 100_000;
/// `--history-days`'s default: a month of audit and sessions.
pub const DEFAULT_HISTORY_DAYS: u64 = 30;

/// The default state directory from `XDG_STATE_HOME` and `HOME` (in that order; XDG requires an
/// absolute path, so a relative one is ignored).
pub fn default_state_dir(xdg_state_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    if let Some(x) = xdg_state_home.filter(|x| x.starts_with('/')) {
        return Some(Path::new(x).join("mediatord"));
    }
    home.filter(|h| h.starts_with('/')).map(|h| Path::new(h).join(".local/state/mediatord"))
}

/// Environment variables the daemon reads that hold a secret: they are removed from the
/// environment of every process the daemon starts (agents, their guards, session shell commands),
/// so nothing the agent runs can read the token and vote on its own permission requests, nor
/// reach a fleet's database (`--store`'s URL may hold its password; `PGPASSWORD` is the driver's).
pub const SECRET_ENV: &[&str] = &["MEDIATORD_TOKEN", "QWEN_SERVER_TOKEN", "MEDIATORD_STORE", "PGPASSWORD"];

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

/// The file system methods offered to an agent at `initialize` (ACP `clientCapabilities.fs`), and
/// so the only `fs/*` requests the daemon serves it. Both are on unless an agent's settings turn one
/// off: Gemini CLI cannot create a file when it is offered `readTextFile` (docs/agents.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsCapabilities {
    pub read_text_file: bool,
    pub write_text_file: bool,
}

impl Default for FsCapabilities {
    fn default() -> Self {
        FsCapabilities { read_text_file: true, write_text_file: true }
    }
}

/// One configured agent: its name, its command line and its own settings.
#[derive(Clone)]
pub struct AgentSpec {
    /// Unique among the daemon's agents (`[A-Za-z0-9._-]`, at most [`MAX_AGENT_NAME`]).
    pub name: String,
    pub command: AgentCommand,
    /// Variables set for this agent on top of the daemon's environment. The values are often
    /// credentials: they are never shown, logged, or printed by `Debug`.
    pub env: Vec<(String, String)>,
    /// Deadline for this agent's `initialize`, `session/new` and `session/set_model` answers.
    pub initialize_timeout: Duration,
    pub fs: FsCapabilities,
    /// Where the agent (and the session shell of its sessions) may write (`agent::sandbox`).
    pub sandbox: SandboxSettings,
}

impl std::fmt::Debug for AgentSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("AgentSpec")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("env (names only)", &env)
            .field("initialize_timeout", &self.initialize_timeout)
            .field("fs", &self.fs)
            .field("sandbox", &self.sandbox)
            .finish()
    }
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
    /// Never empty; names are unique; the first is the default agent.
    pub agents: Vec<AgentSpec>,
    /// Canonical paths; the first is primary.
    pub workspaces: Vec<PathBuf>,
    pub any_workspace: bool,
    pub session_scope: SessionScope,
    pub max_sessions: usize,
    pub max_pending_prompts: usize,
    pub max_connections: usize,
    pub max_subscribers: usize,
    pub event_ring_size: usize,
    /// How many live events a stream may lag; at most `event_ring_size` matters.
    pub subscriber_queue: usize,
    pub writer_idle_timeout: Duration,
    /// `--initialize-timeout-ms`: the deadline of every agent without one of its own.
    pub initialize_timeout: Duration,
    pub permission_policy: Policy,
    pub consensus_quorum: Option<usize>,
    /// `None` = wait forever.
    pub permission_timeout: Option<Duration>,
    pub enable_session_shell: bool,
    /// `--no-snapshots`: no turn snapshots (`src/changes/`).
    pub snapshots: bool,
    pub shell_timeout: Duration,
    /// Connection deadlines (`docs/protocol.md#210-connection-deadlines`).
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub log_format: LogFormat,
    /// Where the durable state lives; `None` with `--ephemeral`.
    pub state_dir: Option<PathBuf>,
    /// The state directory the workspace snapshots live under (`<dir>/changes/`, `src/changes/`),
    /// also with a `--store`: a workspace is this machine's, so are its snapshots; `None` with
    /// `--ephemeral`.
    pub snapshot_dir: Option<PathBuf>,
    /// `--history-events`, `--history-days`.
    pub history_events: u64,
    pub history_days: u64,
    /// Notification targets (`docs/notifications.md`), at most [`MAX_TARGETS`].
    pub notify: Vec<NotifyTarget>,
    /// `--public-url` without a trailing `/`; `None`: the listening URL.
    pub public_url: Option<String>,
    /// `--tls-cert`/`--tls-key`: the listener speaks https; `None`: plain http.
    pub tls: Option<TlsFiles>,
    /// `--mdns`: advertise `_mediatord._tcp` on the LAN (`discovery::mdns`).
    pub mdns: bool,
    /// `--pairing-code-ttl-ms`: how long a device pairing code stays usable.
    pub pairing_code_ttl: Duration,
    /// `--store`: the PostgreSQL URL of a fleet's shared state; `None`: `state_dir` (or memory).
    /// It may hold the database's password: its `Debug` never shows it.
    pub store: Option<Secret>,
    /// `--node-url`: how the fleet's other daemons reach this one; `None`: the listening URL.
    pub node_url: Option<String>,
    /// `--node-lease-ms`.
    pub node_lease: Duration,
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
    /// The `agents` map, in the order written (the first agent is the default).
    agents: Vec<(String, Value)>,
    /// The file, for messages (empty without one).
    path: PathBuf,
    /// The directory holding the file: relative paths in it (`workspace`, an `agent` program with a
    /// slash) are resolved against it, so the file means the same whatever directory the daemon
    /// is started from.
    dir: PathBuf,
}

/// The default of `--node-lease-ms`: three renewals (every third of it) may fail in a row before
/// a daemon is counted dead, and a dead one's sessions are reported within ten seconds.
pub const DEFAULT_NODE_LEASE_MS: u64 = 10_000;
/// The shortest lease: renewals every third of it must fit a database round trip under load.
const MIN_NODE_LEASE_MS: u64 = 1_000;

/// `--store`, `--node-url` and `--node-lease-ms`, checked (docs/operations.md#a-fleet).
fn fleet_settings(
    args: &ServeArgs,
    file: &FileSettings,
    ephemeral: bool,
) -> Result<(Option<Secret>, Option<String>, u64), ConfigError> {
    let store = match &args.store {
        Some(s) => Some(s.clone()),
        None => file.string("store")?.map(Secret::from),
    };
    if let Some(url) = store.as_ref().map(Secret::expose) {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return refuse("--store takes a PostgreSQL URL: postgres://user@host[:port]/database");
        }
        if ephemeral {
            return refuse("--store and --ephemeral exclude each other");
        }
    }
    let node_url = match &args.node_url {
        Some(u) => Some(u.clone()),
        None => file.string("nodeUrl")?,
    };
    let node_url = match node_url {
        None => None,
        Some(_) if store.is_none() => {
            return refuse("--node-url needs --store (a fleet shares one PostgreSQL)");
        }
        Some(u) if !u.to_ascii_lowercase().starts_with("http://") => {
            return refuse("--node-url is http://host:port: the daemons relay to each other in plain HTTP");
        }
        Some(u) => Some(
            notify::parse_public_url(&u)
                .map_err(|_| ConfigError(format!("malformed --node-url {u:?}: expected http://host:port")))?,
        ),
    };
    let lease = match args.node_lease_ms {
        Some(n) => n,
        None => file.number("nodeLeaseMs")?.unwrap_or(DEFAULT_NODE_LEASE_MS),
    };
    if lease < MIN_NODE_LEASE_MS {
        return refuse(format!("--node-lease-ms is at least {MIN_NODE_LEASE_MS}"));
    }
    Ok((store, node_url, lease))
}

/// The members of the config file's top-level object.
const TOP_KEYS: &[&str] = &["serve", "policy", "agents"];

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
];

/// Keys accepted under `"policy"` (the names of Qwen Code's `settings.json`).
const POLICY_KEYS: &[&str] = &["permissionStrategy", "consensusQuorum"];

/// Keys accepted in one agent's object of the `"agents"` map.
const AGENT_KEYS: &[&str] = &["command", "env", "initializeTimeoutMs", "clientCapabilities", "sandbox"];

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
        Some("policy") => (POLICY_KEYS, "policy.".to_owned()),
        Some(agent) => (AGENT_KEYS, format!("{agent}.")),
    };
    let hint = match suggest(key, known) {
        Some(k) => format!("did you mean {prefix}{k}?"),
        // Options written at the top level instead of under "serve".
        None if section.is_none() => match suggest(key, SERVE_KEYS) {
            Some(k) => format!("did you mean serve.{k}? (options go under \"serve\")"),
            None => "the file holds only \"serve\", \"policy\" and \"agents\"".to_owned(),
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
            _ => return Err(unknown_key(path, None, &key)),
        }
    }
    Ok(out)
}

/// The names of the file's `agents` map in the order written: `serde_json`'s map (without its
/// `preserve_order` feature, which would reorder every JSON object the daemon writes) sorts its
/// keys, but the first agent is the default. A name written twice is refused.
fn agent_order(text: &str, path: &Path) -> Result<Vec<String>, ConfigError> {
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

/// Whether `name` may name an agent: 1 to [`MAX_AGENT_NAME`] of `A-Z a-z 0-9 . _ -`.
pub fn valid_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_AGENT_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// `NAME=COMMAND` as its name and command; anything else is a bare command. (A command line never
/// starts with `NAME=`: it is not run by a shell, so `VAR=value cmd` was never an assignment.)
fn split_agent_name(raw: &str) -> (Option<&str>, &str) {
    let raw = raw.trim();
    match raw.split_once('=') {
        Some((name, command)) if valid_agent_name(name) => (Some(name), command),
        _ => (None, raw),
    }
}

/// The name of an agent given as a bare command: its program's file name (`demo` for the demo
/// agent), each character a name may not hold replaced by `-`.
fn derived_agent_name(command: &AgentCommand) -> String {
    if command.display == "demo" {
        return "demo".to_owned();
    }
    let file = Path::new(&command.program).file_name().map(|f| f.to_string_lossy().into_owned());
    let name: String = file
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' })
        .take(MAX_AGENT_NAME)
        .collect();
    if name.is_empty() { "agent".to_owned() } else { name }
}

/// One `--agent` value (or `serve.agent` entry), `[NAME=]COMMAND`, with the daemon-wide settings.
fn agent_arg(
    raw: &str,
    base: &Path,
    initialize_timeout: Duration,
    daemon_sandbox: &sandbox::DaemonSandbox,
) -> Result<AgentSpec, ConfigError> {
    let (name, command) = split_agent_name(raw);
    if let Some(name) = name
        && command.trim().is_empty()
    {
        return refuse(format!(
            "--agent {name}= names no command: give it after the =, e.g. --agent {name}='qwen --acp'"
        ));
    }
    let command = agent_command_in(command, base)?;
    let name = name.map_or_else(|| derived_agent_name(&command), str::to_owned);
    let sandbox = sandbox::resolve(daemon_sandbox, sandbox::AgentSandbox::default(), &command, &[], base)?;
    Ok(AgentSpec {
        name,
        command,
        env: Vec::new(),
        initialize_timeout,
        fs: FsCapabilities::default(),
        sandbox,
    })
}

/// One entry of the config file's `agents` map: a command line, or an object of [`AGENT_KEYS`].
fn file_agent(
    name: &str,
    value: &Value,
    file: &FileSettings,
    initialize_timeout: Duration,
    daemon_sandbox: &sandbox::DaemonSandbox,
) -> Result<AgentSpec, ConfigError> {
    let at = |rest: &str| format!("config file {}: agents.{name}{rest}", file.path.display());
    if !valid_agent_name(name) {
        return refuse(at(&format!(
            ": an agent name is 1 to {MAX_AGENT_NAME} characters of A-Z a-z 0-9 . _ -"
        )));
    }
    let spec = |command: &str| -> Result<AgentSpec, ConfigError> {
        Ok(AgentSpec {
            name: name.to_owned(),
            command: agent_command_in(command, &file.dir)?,
            env: Vec::new(),
            initialize_timeout,
            fs: FsCapabilities::default(),
            sandbox: SandboxSettings::default(),
        })
    };
    let fields = match value {
        Value::String(command) => {
            let mut agent = spec(command)?;
            agent.sandbox = sandbox::resolve(
                daemon_sandbox,
                sandbox::AgentSandbox::default(),
                &agent.command,
                &agent.env,
                &file.dir,
            )?;
            return Ok(agent);
        }
        Value::Object(fields) => fields,
        _ => return refuse(at(" must be a command line, or an object with \"command\"")),
    };
    if let Some(key) = fields.keys().find(|k| !AGENT_KEYS.contains(&k.as_str())) {
        return Err(unknown_key(&file.path, Some(&format!("agents.{name}")), key));
    }
    let mut agent = match fields.get("command") {
        Some(Value::String(command)) => spec(command)?,
        _ => return refuse(at(".command must be the agent's command line, a string")),
    };
    match fields.get("env") {
        None | Some(Value::Null) => {}
        Some(Value::Object(vars)) => {
            for (var, value) in vars {
                match value {
                    Value::String(v)
                        if !var.is_empty() && !var.contains(['=', '\0']) && !v.contains('\0') =>
                    {
                        agent.env.push((var.clone(), v.clone()))
                    }
                    _ => {
                        return refuse(at(&format!(
                            ".env.{var} must be a string, its name non-empty without = (neither holding NUL)"
                        )));
                    }
                }
            }
        }
        Some(_) => return refuse(at(".env must be an object of variable names to strings")),
    }
    match fields.get("initializeTimeoutMs") {
        None | Some(Value::Null) => {}
        Some(v) => match v.as_u64() {
            Some(ms) if ms > 0 => agent.initialize_timeout = Duration::from_millis(ms),
            _ => return refuse(at(".initializeTimeoutMs must be a positive integer")),
        },
    }
    if let Some(caps) = fields.get("clientCapabilities") {
        agent.fs =
            client_capabilities(caps).or_else(|why| refuse(at(&format!(".clientCapabilities{why}"))))?;
    }
    let own = match fields.get("sandbox") {
        None => sandbox::AgentSandbox::default(),
        Some(v) => sandbox::parse_agent(v).or_else(|why| refuse(at(&format!(".sandbox{why}"))))?,
    };
    agent.sandbox = sandbox::resolve(daemon_sandbox, own, &agent.command, &agent.env, &file.dir)?;
    Ok(agent)
}

/// `{"fs": {"readTextFile": bool, "writeTextFile": bool}}`, each absent member on. `Err` is the
/// rest of the message (from the member's path on).
fn client_capabilities(caps: &Value) -> Result<FsCapabilities, String> {
    const KNOWN: &str = "known: fs.readTextFile, fs.writeTextFile (the daemon offers no terminal)";
    let mut fs = FsCapabilities::default();
    let Value::Object(caps) = caps else { return Err(" must be an object".to_owned()) };
    for (key, value) in caps {
        let Value::Object(members) = value else {
            return Err(if key == "fs" {
                ".fs must be an object".to_owned()
            } else {
                format!(": unknown key {key}; {KNOWN}")
            });
        };
        if key != "fs" {
            return Err(format!(": unknown key {key}; {KNOWN}"));
        }
        for (member, on) in members {
            let slot = match member.as_str() {
                "readTextFile" => &mut fs.read_text_file,
                "writeTextFile" => &mut fs.write_text_file,
                _ => return Err(format!(".fs: unknown key {member}; {KNOWN}")),
            };
            *slot = on.as_bool().ok_or_else(|| format!(".fs.{member} must be true or false"))?;
        }
    }
    Ok(fs)
}

/// The daemon's agents: the `--agent` flags (or `MEDIATORD_AGENT`), which replace the file's
/// altogether; else the file's `serve.agent` entries, then its `agents` map; else `qwen --acp`.
/// Names must differ.
fn agents(
    args: &ServeArgs,
    file: &FileSettings,
    cwd: &Path,
    initialize_timeout: Duration,
) -> Result<Vec<AgentSpec>, ConfigError> {
    let sandbox = daemon_sandbox(args, file, cwd)?;
    let mut agents = Vec::new();
    if args.agent.is_empty() {
        for raw in file.strings("agent")? {
            agents.push(agent_arg(&raw, &file.dir, initialize_timeout, &sandbox)?);
        }
        for (name, value) in &file.agents {
            agents.push(file_agent(name, value, file, initialize_timeout, &sandbox)?);
        }
        if agents.is_empty() {
            agents.push(agent_arg("qwen --acp", &file.dir, initialize_timeout, &sandbox)?);
        }
    } else {
        for raw in &args.agent {
            agents.push(agent_arg(raw, cwd, initialize_timeout, &sandbox)?);
        }
    }
    for (i, agent) in agents.iter().enumerate() {
        if agents[..i].iter().any(|a| a.name == agent.name) {
            return refuse(format!(
                "two agents are named {0}: name each one, e.g. --agent {0}-2='...' (or give them different names in the config file's agents map)",
                agent.name
            ));
        }
    }
    Ok(agents)
}

/// `--sandbox` and `--sandbox-writable` (flags first, then the file's `serve.sandbox` and
/// `serve.sandboxWritable`): what every agent starts from.
fn daemon_sandbox(
    args: &ServeArgs,
    file: &FileSettings,
    cwd: &Path,
) -> Result<sandbox::DaemonSandbox, ConfigError> {
    let raw_mode = match &args.sandbox {
        Some(m) => Some(m.clone()),
        None => file.string("sandbox")?,
    };
    let mode = match raw_mode {
        None => None,
        Some(m) => match SandboxMode::parse(&m) {
            Some(mode) => Some(mode),
            None => return refuse(format!("unknown --sandbox {m:?} (expected workspace or off)")),
        },
    };
    let (writable, base) = if args.sandbox_writable.is_empty() {
        (file.strings("sandboxWritable")?, file.dir.clone())
    } else {
        (args.sandbox_writable.clone(), cwd.to_path_buf())
    };
    if let Some(bad) = writable.iter().find(|p| p.is_empty() || p.contains('\0')) {
        return refuse(format!("--sandbox-writable {bad:?} is not a path"));
    }
    if writable.len() > MAX_WRITABLE {
        return refuse(format!("--sandbox-writable is given more than {MAX_WRITABLE} times"));
    }
    Ok(sandbox::DaemonSandbox { mode, writable, base })
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
        let subscriber_queue = num(args.subscriber_queue, "subscriberQueue", event_ring_size)?;
        for (name, value, max) in [
            ("--max-subscribers", max_subscribers, HARD_MAX_SUBSCRIBERS),
            ("--event-ring-size", event_ring_size, HARD_MAX_RING),
            ("--subscriber-queue", subscriber_queue, HARD_MAX_RING),
        ] {
            if value == 0 || value > max {
                return refuse(format!("{name} must be between 1 and {max}"));
            }
        }

        if subscriber_queue > event_ring_size {
            warnings.push(format!(
                "--subscriber-queue {subscriber_queue} is above --event-ring-size {event_ring_size}: a stream \
                 that lags more than the ring holds is evicted anyway"
            ));
        }

        let ms = |flag: Option<u64>, key: &str, default: u64| -> Result<u64, ConfigError> {
            Ok(flag.or(file.number(key)?).unwrap_or(default))
        };
        let writer_idle_ms = ms(args.writer_idle_timeout_ms, "writerIdleTimeoutMs", 60_000)?;
        if writer_idle_ms == 0 {
            return refuse("--writer-idle-timeout-ms must be positive");
        }
        let init_ms = ms(args.initialize_timeout_ms, "initializeTimeoutMs", 10_000)?;
        if init_ms == 0 {
            return refuse("--initialize-timeout-ms must be positive");
        }
        let initialize_timeout = Duration::from_millis(init_ms);
        let agents = agents(args, &file, &cwd, initialize_timeout)?;
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

        let pairing_ms = ms(args.pairing_code_ttl_ms, "pairingCodeTtlMs", DEFAULT_PAIRING_CODE_TTL_MS)?;
        if pairing_ms == 0 {
            return refuse("--pairing-code-ttl-ms must be positive");
        }
        let enable_session_shell = args.enable_session_shell || file.flag("enableSessionShell")?;
        let snapshots = !(args.no_snapshots || file.flag("noSnapshots")?);
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
        let ephemeral = args.ephemeral || (args.state_dir.is_none() && file.flag("ephemeral")?);
        let state_dir_raw = match &args.state_dir {
            Some(dir) => Some(cwd.join(dir)),
            None => file.string("stateDir")?.map(|d| file.dir.join(d)),
        };
        let state_dir = if ephemeral {
            None
        } else {
            let env = |k: &str| std::env::var(k).ok();
            match state_dir_raw {
                Some(dir) if dir.as_os_str().is_empty() => return refuse("--state-dir must not be empty"),
                Some(dir) => Some(dir),
                None => match default_state_dir(env("XDG_STATE_HOME").as_deref(), env("HOME").as_deref()) {
                    Some(dir) => Some(dir),
                    None => {
                        return refuse(
                            "no state directory: set --state-dir, XDG_STATE_HOME or HOME, or run with --ephemeral",
                        );
                    }
                },
            }
        };

        let (store, node_url, node_lease_ms) = fleet_settings(args, &file, ephemeral)?;
        // With a shared store the state directory holds only the snapshots of this machine's
        // workspaces.
        let snapshot_dir = state_dir.clone();
        let state_dir = if store.is_some() { None } else { state_dir };
        // A request someone is told about waits for a person who may be away: the notified
        // timeout replaces the desk's one (`/capabilities` reports the one in force).
        let notified_ms = ms(args.notified_permission_timeout_ms, "notifiedPermissionTimeoutMs", 3_600_000)?;
        let notify = notify::targets(
            &args.notify,
            file.values.get("notify"),
            args.notify_secret.clone().or(file.string("notifySecret")?).as_deref(),
        )?;
        let notified = notify.iter().any(|t| t.wants(crate::event::EventKind::PermissionRequest));
        let perm_ms = if notified { notified_ms } else { perm_ms };
        let public_url = match &args.public_url {
            Some(u) => Some(u.clone()),
            None => file.string("publicUrl")?,
        }
        .map(|u| notify::parse_public_url(&u))
        .transpose()?;
        let mdns = args.mdns || file.flag("mdns")?;
        if mdns && is_loopback_host(&hostname) {
            return refuse(format!(
                "--mdns advertises the daemon on the LAN, but it listens on {hostname} (loopback), which no other machine reaches: set --hostname to a LAN address (0.0.0.0 for all), or drop --mdns"
            ));
        }
        let tls_cert =
            args.tls_cert.as_ref().map(|p| cwd.join(p)).or(file.string("tlsCert")?.map(|p| file.dir.join(p)));
        let tls_key =
            args.tls_key.as_ref().map(|p| cwd.join(p)).or(file.string("tlsKey")?.map(|p| file.dir.join(p)));
        let tls = match (tls_cert, tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            (Some(_), None) => {
                return refuse("--tls-cert needs --tls-key (serve.tlsKey): the certificate's private key");
            }
            (None, Some(_)) => {
                return refuse("--tls-key needs --tls-cert (serve.tlsCert): the certificate it belongs to");
            }
        };

        Ok(Config {
            hostname,
            port,
            token_digest: token.map(|t| TokenDigest(Sha256::digest(t.as_bytes()).into())),
            require_auth,
            allow_origins,
            agents,
            workspaces,
            any_workspace,
            session_scope,
            max_sessions,
            max_pending_prompts,
            max_connections,
            max_subscribers,
            event_ring_size,
            subscriber_queue,
            writer_idle_timeout: Duration::from_millis(writer_idle_ms),
            initialize_timeout,
            permission_policy,
            consensus_quorum,
            permission_timeout: (perm_ms > 0).then(|| Duration::from_millis(perm_ms)),
            enable_session_shell,
            snapshots,
            shell_timeout: Duration::from_millis(shell_ms),
            header_timeout,
            idle_timeout,
            body_timeout,
            log_format,
            state_dir,
            snapshot_dir,
            history_events: match args.history_events {
                Some(n) => n,
                None => file.number("historyEvents")?.unwrap_or(DEFAULT_HISTORY_EVENTS),
            },
            history_days: match args.history_days {
                Some(n) => n,
                None => file.number("historyDays")?.unwrap_or(DEFAULT_HISTORY_DAYS),
            },
            notify,
            public_url,
            tls,
            mdns,
            pairing_code_ttl: Duration::from_millis(pairing_ms),
            store,
            node_url,
            node_lease: Duration::from_millis(node_lease_ms),
            warnings,
        })
    }

    /// Settings for tests and embedding: demo agent, loopback, no token, the given workspace.
    pub fn for_tests(workspace: &Path) -> Config {
        let args = ServeArgs {
            agent: vec!["demo".into()],
            port: Some(0),
            workspace: vec![workspace.to_string_lossy().into_owned()],
            ephemeral: true,
            ..ServeArgs::default()
        };
        Config::from_args(&args).expect("test settings are valid")
    }

    pub fn primary_workspace(&self) -> &Path {
        &self.workspaces[0]
    }

    /// The agent a create that names none gets: the first configured.
    pub fn default_agent(&self) -> &AgentSpec {
        &self.agents[0]
    }

    /// The configured agent called `name`.
    pub fn agent(&self, name: &str) -> Option<&AgentSpec> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// Every agent's name, the default first.
    pub fn agent_names(&self) -> Vec<String> {
        self.agents.iter().map(|a| a.name.clone()).collect()
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
    fn the_default_state_dir_follows_xdg_then_home() {
        let d = default_state_dir;
        assert_eq!(d(Some("/x"), Some("/h")), Some(PathBuf::from("/x/mediatord")));
        assert_eq!(d(Some("rel"), Some("/h")), Some(PathBuf::from("/h/.local/state/mediatord")));
        assert_eq!(d(None, Some("/h")), Some(PathBuf::from("/h/.local/state/mediatord")));
        assert_eq!(d(None, Some("h")), None);
        assert_eq!(d(None, None), None);
    }

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
        let password = "debug-redaction-db-password-77c2";
        let dir = std::env::temp_dir();
        let args = ServeArgs {
            token: Some(Secret::from(token.to_owned())),
            store: Some(Secret::from(format!("postgres://mediatord:{password}@db.internal/fleet"))),
            agent: vec!["demo".into()],
            workspace: vec![dir.to_string_lossy().into_owned()],
            ..ServeArgs::default()
        };
        let config = Config::from_args(&args).expect("valid settings");
        let digest = config.token_digest.expect("a token is set").0;
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        for shown in [format!("{args:?}"), format!("{config:?}"), format!("{config:#?}")] {
            assert!(!shown.contains(token), "the token is shown: {shown}");
            assert!(!shown.contains(password), "the database's password is shown: {shown}");
            assert!(!shown.contains(&hex), "the digest is shown: {shown}");
            assert!(!shown.contains(&format!("{:?}", &digest[..4])), "digest bytes are shown: {shown}");
            assert!(shown.contains("<redacted>"), "{shown}");
        }
    }

    /// Issue #30: a request someone is notified of waits for the notified timeout (an hour unless
    /// set; 0 forever), a request nobody is told about for the desk's.
    #[test]
    fn notified_requests_wait_for_the_notified_timeout() {
        let dir = std::env::temp_dir();
        let timeout = |notify: &[&str], notified: Option<u64>, desk: Option<u64>| {
            let args = ServeArgs {
                agent: vec!["demo".into()],
                workspace: vec![dir.to_string_lossy().into_owned()],
                notify: notify.iter().map(|s| (*s).to_owned()).collect(),
                notified_permission_timeout_ms: notified,
                permission_timeout_ms: desk,
                ephemeral: true,
                ..ServeArgs::default()
            };
            Config::from_args(&args).expect("valid settings").permission_timeout
        };
        let hook = ["http://127.0.0.1:9/hook"];
        assert_eq!(timeout(&[], None, None), Some(Duration::from_secs(300)));
        assert_eq!(timeout(&hook, None, None), Some(Duration::from_secs(3600)));
        assert_eq!(timeout(&hook, Some(0), None), None, "0 waits forever");
        assert_eq!(timeout(&hook, Some(7000), Some(1000)), Some(Duration::from_secs(7)));
        assert_eq!(timeout(&[], Some(7000), Some(1000)), Some(Duration::from_secs(1)));
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

    fn names(config: &Config) -> Vec<String> {
        config.agent_names()
    }

    fn with_agents(agents: &[&str]) -> Result<Config, ConfigError> {
        let dir = std::env::temp_dir();
        Config::from_args(&ServeArgs {
            agent: agents.iter().map(|a| (*a).to_owned()).collect(),
            workspace: vec![dir.to_string_lossy().into_owned()],
            ..ServeArgs::default()
        })
    }

    /// A config file with `text` in a fresh directory (also its only workspace), loaded with `args`.
    fn from_file(text: &str, args: ServeArgs) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mediatord.json");
        std::fs::write(&path, text).expect("write");
        let workspace = vec![dir.path().to_string_lossy().into_owned()];
        Config::from_args(&ServeArgs { config: Some(path), workspace, ..args })
    }

    #[test]
    fn agents_are_named_by_flag_or_after_their_program_and_the_first_is_the_default() {
        let c = with_agents(&["review=demo", "qwen --acp", "/opt/x/node_modules/.bin/claude-code-acp"])
            .expect("valid");
        assert_eq!(names(&c), ["review", "qwen", "claude-code-acp"]);
        assert_eq!(c.default_agent().name, "review");
        assert_eq!(c.agent("qwen").map(|a| a.command.args.clone()), Some(vec!["--acp".to_owned()]));
        assert_eq!(c.agent("review").map(|a| a.command.display.as_str()), Some("demo"));
        assert_eq!(names(&with_agents(&["demo"]).expect("demo")), ["demo"]);
        assert_eq!(names(&with_agents(&["'/opt/my agent/run' --x"]).expect("spaces")), ["run"]);
        assert_eq!(names(&with_agents(&["'/opt/my agent'"]).expect("spaces")), ["my-agent"]);
        // Not a name before the `=`: a command (a path holding `=`), named after its program.
        assert_eq!(names(&with_agents(&["/opt/a=b/agent"]).expect("path")), ["agent"]);
        let defaults = Config::from_args(&ServeArgs {
            workspace: vec![std::env::temp_dir().to_string_lossy().into_owned()],
            ..ServeArgs::default()
        });
        assert_eq!(names(&defaults.expect("defaults")), ["qwen"]);
    }

    #[test]
    fn agent_names_must_differ_and_commands_must_be_given() {
        let twice = with_agents(&["demo", "x=demo", "demo"]).expect_err("two named demo");
        assert!(twice.0.contains("two agents are named demo"), "{twice}");
        let same = with_agents(&["node a.js", "node b.js"]).expect_err("two named node");
        assert!(same.0.contains("named node") && same.0.contains("--agent node-2="), "{same}");
        let empty = with_agents(&["a="]).expect_err("no command");
        assert!(empty.0.contains("--agent a= names no command"), "{empty}");
    }

    #[test]
    fn the_agents_map_keeps_its_order_and_its_settings() {
        let c = from_file(
            r#"{"serve": {"initializeTimeoutMs": 5000},
                "agents": {
                  "zeta": "demo",
                  "alpha": {"command": "demo", "env": {"DEMO_X": "secret-value", "B": ""},
                            "initializeTimeoutMs": 30000,
                            "clientCapabilities": {"fs": {"readTextFile": false}}}}}"#,
            ServeArgs::default(),
        )
        .expect("valid");
        assert_eq!(names(&c), ["zeta", "alpha"], "the order written, not sorted");
        let (zeta, alpha) = (&c.agents[0], &c.agents[1]);
        assert_eq!((zeta.initialize_timeout, zeta.fs), (Duration::from_secs(5), FsCapabilities::default()));
        assert!(zeta.env.is_empty());
        assert_eq!(alpha.initialize_timeout, Duration::from_secs(30));
        assert_eq!(alpha.fs, FsCapabilities { read_text_file: false, write_text_file: true });
        let mut env = alpha.env.clone();
        env.sort();
        assert_eq!(env, [("B".to_owned(), String::new()), ("DEMO_X".to_owned(), "secret-value".to_owned())]);
        let shown = format!("{c:?}");
        assert!(
            shown.contains("DEMO_X") && !shown.contains("secret-value"),
            "Debug shows names only: {shown}"
        );
    }

    #[test]
    fn serve_agent_entries_come_before_the_agents_map_and_flags_replace_both() {
        let text = r#"{"serve": {"agent": ["a=demo", "b=demo"]}, "agents": {"c": "demo"}}"#;
        assert_eq!(names(&from_file(text, ServeArgs::default()).expect("file")), ["a", "b", "c"]);
        let flags = ServeArgs { agent: vec!["z=demo".into()], ..ServeArgs::default() };
        assert_eq!(names(&from_file(text, flags).expect("flags")), ["z"]);
        let twice =
            from_file(r#"{"serve": {"agent": "a=demo"}, "agents": {"a": "demo"}}"#, ServeArgs::default());
        assert!(twice.expect_err("a twice").0.contains("two agents are named a"));
    }

    #[test]
    fn malformed_agent_settings_refuse_the_boot_saying_which() {
        for (agents, says) in [
            (
                r#"{"a": {"command": "demo", "enviroment": {}}}"#,
                "unknown key agents.a.enviroment; did you mean agents.a.env?",
            ),
            (r#"{"a": {"env": {}}}"#, "agents.a.command must be"),
            (r#"{"a": 3}"#, "agents.a must be a command line"),
            (r#"{"a": {"command": "demo", "env": {"X": 1}}}"#, "agents.a.env.X must be a string"),
            (r#"{"a": {"command": "demo", "env": {"X=Y": "1"}}}"#, "agents.a.env.X=Y must be"),
            (r#"{"a": {"command": "demo", "env": []}}"#, "agents.a.env must be an object"),
            (
                r#"{"a": {"command": "demo", "initializeTimeoutMs": 0}}"#,
                "initializeTimeoutMs must be a positive",
            ),
            (
                r#"{"a": {"command": "demo", "clientCapabilities": {"terminal": true}}}"#,
                "unknown key terminal",
            ),
            (
                r#"{"a": {"command": "demo", "clientCapabilities": {"fs": {"readTextFile": 1}}}}"#,
                "fs.readTextFile must be true or false",
            ),
            (
                r#"{"a": {"command": "demo", "clientCapabilities": {"fs": {"read": false}}}}"#,
                "fs: unknown key read",
            ),
            (r#"{"a b": "demo"}"#, "an agent name is 1 to 64"),
            (r#"{"a": "demo", "a": "demo"}"#, "agents.a is defined twice"),
            (r#"["demo"]"#, "\"agents\" must be an object"),
        ] {
            let err =
                from_file(&format!(r#"{{"agents": {agents}}}"#), ServeArgs::default()).expect_err(agents);
            assert!(err.0.contains(says), "{agents}: {err}");
        }
    }

    #[test]
    fn agent_is_split_like_a_shell() {
        let a = agent_command("node '/opt/my agent/cli.js' --acp").expect("valid");
        assert_eq!(a.program, "node");
        assert_eq!(a.args, vec!["/opt/my agent/cli.js", "--acp"]);
        let empty = agent_command("   ").err().map(|e| e.0).unwrap_or_default();
        assert!(empty.contains("--agent is empty"), "{empty}");
        let unbalanced = agent_command("qwen 'unbalanced").err().map(|e| e.0).unwrap_or_default();
        assert!(unbalanced.contains("cannot be split into words"), "{unbalanced}");
    }
}

//! Command line, environment and `--config` file, merged and validated into one [`Config`].
//!
//! Precedence, highest first: command-line flag, environment variable, config file, built-in default.
//! Every refusal listed in `docs/protocol.md#1-command-line` is a [`ConfigError`] whose `Display` is the one line printed
//! before exiting with status 2.
//!
//! [`Config::from_args`] reads one concern after another, in the order of the refusals (the first
//! mistake is the one told): `flags` holds `serve`'s flags, `file` the `--config` file, `agents`
//! the agents, `policy` the permission policy; the rest (listening, origins, workspaces, caps,
//! deadlines, storage, TLS) are the small readers below.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::tls::TlsFiles;

mod agents;
mod breaker;
mod error;
mod file;
mod flags;
mod notify;
mod oidc;
mod policy;
mod reviewers;
mod sandbox;
pub mod state_dir;
use self::agents::agents;
pub use self::agents::{agent_command, valid_agent_name};
pub use self::breaker::{BreakerSettings, DEFAULT_BREAKER_DENIALS, MAX_BREAKER_DENIALS};
pub use self::error::ConfigError;
use self::error::refuse;
use self::file::{FileSettings, read_config_file, to_usize};
pub use self::flags::{SERVE_HELP, ServeArgs};
pub use self::notify::{
    Escalation, MAX_TARGETS, NotifyFormat, NotifyTarget, TargetUrl, parse_target_url, split_format,
    telegram_chat_id,
};
pub use self::oidc::{
    ClaimMatch, DEFAULT_RENEW_MS, LIFETIME_RENEWALS, OidcSettings, PersonRole, provider_url,
};
use self::policy::permission_policy;
pub use self::reviewers::{
    DEFAULT_REVIEW_DEADLINE_MS, MAX_REVIEWERS, MAX_SYSTEM_PROMPT_BYTES, ModelApi, ModelSpec, ReviewerKind,
    ReviewerSpec, TOOL_KINDS, Trust, TrustMap,
};
pub use self::sandbox::{MAX_NET_PORTS, MAX_WRITABLE, NetRule, SandboxMode, SandboxSettings};

/// Hard ceilings that still apply when an operator sets a limit to `0` ("no cap"): nothing a client
/// does may allocate without bound, so "no cap" means "the largest value we are sure is safe".
pub const HARD_MAX_SESSIONS: usize = 4096;
pub const HARD_MAX_PENDING_PROMPTS: usize = 1024;
/// Connections (and HTTP/2 streams, which hold a place each): a quarter of a million watchers, a
/// few KiB each while idle (`docs/benchmarks.md`, scenario (p)); each HTTP/1.1 connection is also
/// a file of the daemon's, so its file limit usually binds first.
pub const HARD_MAX_CONNECTIONS: usize = 262_144;
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

/// [`default_state_dir`] of this process's environment: what the daemon and every command that
/// looks for it use when no `--state-dir` is given.
pub fn env_state_dir() -> Option<PathBuf> {
    let env = |k: &str| std::env::var(k).ok();
    default_state_dir(env("XDG_STATE_HOME").as_deref(), env("HOME").as_deref())
}

/// Environment variables the daemon reads that hold a secret: they are removed from the
/// environment of every process the daemon starts (agents, their guards, session shell commands),
/// so nothing the agent runs can read the token and vote on its own permission requests, nor
/// reach a fleet's database (`--store`'s URL may hold its password; `PGPASSWORD` is the driver's).
pub const SECRET_ENV: &[&str] = &[
    "MEDIATORD_TOKEN",
    "QWEN_SERVER_TOKEN",
    "MEDIATORD_STORE",
    "PGPASSWORD",
    "MEDIATORD_OIDC_CLIENT_SECRET",
];

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
    /// How many live events a stream may lag; `None`: as far as its session's ring holds in bytes.
    pub subscriber_queue: Option<usize>,
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
    /// The reviewers (`--reviewer`, the file's `reviewers`), at most [`MAX_REVIEWERS`].
    pub reviewers: Vec<ReviewerSpec>,
    /// When reviewers' denials stop a turn (`--review-breaker-denials`, `--review-critical`).
    pub review_breaker: BreakerSettings,
    /// Sign-in with an OpenID provider (`--oidc-issuer` and the rest); `None` without it.
    pub oidc: Option<OidcSettings>,
    /// Non-fatal findings (a quorum without consensus), logged once tracing is up.
    pub warnings: Vec<String>,
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

/// Where the daemon listens and who may call it: `--hostname`, `--port`, the token (flag,
/// `MEDIATORD_TOKEN`, then qwen's `QWEN_SERVER_TOKEN`, then the file) and `--require-auth`.
struct Listen {
    hostname: String,
    port: u16,
    token: Option<String>,
    require_auth: bool,
}

impl Listen {
    fn read(args: &ServeArgs, file: &FileSettings) -> Result<Listen, ConfigError> {
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
        if !is_loopback_host(&hostname) && token.is_none() {
            return refuse(format!(
                "refusing to bind non-loopback address {hostname} without a token (set --token or MEDIATORD_TOKEN)"
            ));
        }
        if require_auth && token.is_none() {
            return refuse("--require-auth needs a token (set --token or MEDIATORD_TOKEN)");
        }
        Ok(Listen { hostname, port, token, require_auth })
    }
}

/// `--allow-origin`: `*` (only with a token), or origins each well formed, and loopback ones only
/// without a token.
fn allowed_origins(args: &ServeArgs, file: &FileSettings, token: bool) -> Result<Origins, ConfigError> {
    let raw_origins =
        if args.allow_origin.is_empty() { file.strings("allowOrigin")? } else { args.allow_origin.clone() };
    if raw_origins.iter().any(|o| o == "*") {
        if !token {
            return refuse("--allow-origin '*' needs a token (set --token or MEDIATORD_TOKEN)");
        }
        return Ok(Origins::Any);
    }
    for origin in &raw_origins {
        if origin == "null" || !valid_origin(origin) {
            return refuse(format!(
                "malformed --allow-origin {origin:?}: expected scheme://host[:port], e.g. http://localhost:3000"
            ));
        }
        // Without a token, an allowed origin's pages get the whole API: a page served from
        // another machine would let whoever controls it drive this daemon through any
        // visitor's browser. qwen serve refuses it too.
        if !token && !is_loopback_host(origin_host(origin)) {
            return refuse(format!(
                "--allow-origin {origin} is not a loopback origin: without a token its pages, in any visitor's browser, could drive the agent; set a token (--token or MEDIATORD_TOKEN) or allow only http://localhost, 127.0.0.1 or [::1] origins"
            ));
        }
    }
    Ok(Origins::List(raw_origins))
}

/// `--workspace`, each resolved (against the current directory, or the file's in the file) and
/// listed once; the current directory when none is given.
fn workspaces(args: &ServeArgs, file: &FileSettings, cwd: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let (raw_workspaces, workspace_base): (Vec<String>, &Path) = if args.workspace.is_empty() {
        (file.strings("workspace")?, &file.dir)
    } else {
        (args.workspace.clone(), cwd)
    };
    if raw_workspaces.is_empty() {
        return Ok(vec![workspace_dir(".", cwd)?]);
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for w in &raw_workspaces {
        let dir = workspace_dir(w, workspace_base)?;
        if !out.contains(&dir) {
            out.push(dir);
        }
    }
    Ok(out)
}

/// `--session-scope`: single (the default) or thread.
fn session_scope(args: &ServeArgs, file: &FileSettings) -> Result<SessionScope, ConfigError> {
    let scope_raw = match &args.session_scope {
        Some(s) => s.clone(),
        None => file.string("sessionScope")?.unwrap_or_else(|| "single".into()),
    };
    SessionScope::parse(&scope_raw).map_or_else(
        || refuse(format!("unknown --session-scope {scope_raw:?} (expected single or thread)")),
        Ok,
    )
}

/// The counted caps: sessions, queued prompts, connections, subscribers, the event ring and a
/// subscriber's queue.
struct Caps {
    max_sessions: usize,
    max_pending_prompts: usize,
    max_connections: usize,
    max_subscribers: usize,
    event_ring_size: usize,
    subscriber_queue: Option<usize>,
}

impl Caps {
    fn read(args: &ServeArgs, file: &FileSettings) -> Result<Caps, ConfigError> {
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
        // No default: a stream may lag as far as its session's ring holds in bytes (the ring keeps
        // what a live stream has not taken, up to 64 MiB), so one that keeps pace with a burst is
        // never cut for a count. A count set here cuts slow streams earlier, and may exceed the
        // ring's count: the ring keeps the events such a stream still needs.
        let subscriber_queue = match args.subscriber_queue {
            Some(n) => Some(n),
            None => file.number("subscriberQueue")?.map(|n| to_usize(n, "subscriberQueue")).transpose()?,
        };
        for (name, value, max, hint) in [
            ("--max-subscribers", Some(max_subscribers), HARD_MAX_SUBSCRIBERS, ""),
            ("--event-ring-size", Some(event_ring_size), HARD_MAX_RING, ""),
            (
                "--subscriber-queue",
                subscriber_queue,
                HARD_MAX_RING,
                " (or leave it unset: a stream may then lag as far as its session's ring holds, 64 MiB)",
            ),
        ] {
            if value.is_some_and(|value| value == 0 || value > max) {
                return refuse(format!("{name} must be between 1 and {max}{hint}"));
            }
        }
        Ok(Caps {
            max_sessions,
            max_pending_prompts,
            max_connections,
            max_subscribers,
            event_ring_size,
            subscriber_queue,
        })
    }
}

/// The connection deadlines: a request's head, an idle keep-alive, a request's body.
fn connection_deadlines(args: &ServeArgs, file: &FileSettings) -> Result<[Duration; 3], ConfigError> {
    let mut deadlines = [Duration::ZERO; 3];
    for (slot, (flag, key, default)) in deadlines.iter_mut().zip([
        (args.header_timeout_ms, "headerTimeoutMs", DEFAULT_HEADER_TIMEOUT_MS),
        (args.idle_timeout_ms, "idleTimeoutMs", DEFAULT_IDLE_TIMEOUT_MS),
        (args.body_timeout_ms, "bodyTimeoutMs", DEFAULT_BODY_TIMEOUT_MS),
    ]) {
        // No "0 = none": a connection deadline that can be switched off is a slot an idle
        // client can hold forever.
        *slot = Duration::from_millis(file.positive_ms(flag, key, default)?);
    }
    Ok(deadlines)
}

/// `--log-format`: text (the default) or json.
fn log_format(args: &ServeArgs, file: &FileSettings) -> Result<LogFormat, ConfigError> {
    let log_raw = match &args.log_format {
        Some(f) => f.clone(),
        None => file.string("logFormat")?.unwrap_or_else(|| "text".into()),
    };
    match log_raw.as_str() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => refuse(format!("unknown --log-format {other:?} (expected text or json)")),
    }
}

/// `--ephemeral`, and the state directory unless ephemeral: `--state-dir` (against the current
/// directory, or the file's), else the default; refused when there is none.
fn state_dir(
    args: &ServeArgs,
    file: &FileSettings,
    cwd: &Path,
) -> Result<(bool, Option<PathBuf>), ConfigError> {
    let ephemeral = args.ephemeral || (args.state_dir.is_none() && file.flag("ephemeral")?);
    let state_dir_raw = match &args.state_dir {
        Some(dir) => Some(cwd.join(dir)),
        None => file.string("stateDir")?.map(|d| file.dir.join(d)),
    };
    if ephemeral {
        return Ok((true, None));
    }
    let dir = match state_dir_raw {
        Some(dir) if dir.as_os_str().is_empty() => return refuse("--state-dir must not be empty"),
        Some(dir) => dir,
        None => match env_state_dir() {
            Some(dir) => dir,
            None => {
                return refuse(
                    "no state directory: set --state-dir, XDG_STATE_HOME or HOME, or run with --ephemeral",
                );
            }
        },
    };
    Ok((false, Some(dir)))
}

/// `--tls-cert` and `--tls-key`: both or neither.
fn tls_files(args: &ServeArgs, file: &FileSettings, cwd: &Path) -> Result<Option<TlsFiles>, ConfigError> {
    let tls_cert =
        args.tls_cert.as_ref().map(|p| cwd.join(p)).or(file.string("tlsCert")?.map(|p| file.dir.join(p)));
    let tls_key =
        args.tls_key.as_ref().map(|p| cwd.join(p)).or(file.string("tlsKey")?.map(|p| file.dir.join(p)));
    match (tls_cert, tls_key) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles { cert, key })),
        (None, None) => Ok(None),
        (Some(_), None) => refuse("--tls-cert needs --tls-key (serve.tlsKey): the certificate's private key"),
        (None, Some(_)) => {
            refuse("--tls-key needs --tls-cert (serve.tlsCert): the certificate it belongs to")
        }
    }
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

impl Config {
    /// Merges flags/env (already in `args` via clap) with the config file, then validates.
    pub fn from_args(args: &ServeArgs) -> Result<Config, ConfigError> {
        let mut warnings = Vec::new();
        let cwd = current_dir()?;
        let file = match &args.config {
            Some(path) => read_config_file(path)?,
            None => FileSettings { dir: cwd.clone(), ..FileSettings::default() },
        };
        // In the order of the refusals: a command line with two mistakes is told the first.
        let listen = Listen::read(args, &file)?;
        let allow_origins = allowed_origins(args, &file, listen.token.is_some())?;
        let workspaces = workspaces(args, &file, &cwd)?;
        let any_workspace = args.any_workspace || file.flag("anyWorkspace")?;
        let session_scope = session_scope(args, &file)?;
        let caps = Caps::read(args, &file)?;
        let writer_idle_ms = file.positive_ms(args.writer_idle_timeout_ms, "writerIdleTimeoutMs", 60_000)?;
        let initialize_timeout = Duration::from_millis(file.positive_ms(
            args.initialize_timeout_ms,
            "initializeTimeoutMs",
            10_000,
        )?);
        let agents = agents(args, &file, &cwd, initialize_timeout)?;
        let reviewers = reviewers::reviewers(
            args,
            &file,
            &cwd,
            &workspaces,
            &agents::daemon_sandbox(args, &file, &cwd)?,
        )?;
        let review_breaker = breaker::breaker(args, &file)?;
        let perm_ms = file.ms(args.permission_timeout_ms, "permissionTimeoutMs", 300_000)?;
        let (permission_policy, consensus_quorum) = permission_policy(args, &file, &mut warnings)?;
        let pairing_ms =
            file.positive_ms(args.pairing_code_ttl_ms, "pairingCodeTtlMs", DEFAULT_PAIRING_CODE_TTL_MS)?;
        let enable_session_shell = args.enable_session_shell || file.flag("enableSessionShell")?;
        let snapshots = !(args.no_snapshots || file.flag("noSnapshots")?);
        let shell_ms = file.positive_ms(args.shell_timeout_ms, "shellTimeoutMs", 120_000)?;
        let [header_timeout, idle_timeout, body_timeout] = connection_deadlines(args, &file)?;
        let log_format = log_format(args, &file)?;
        let (ephemeral, state_dir) = state_dir(args, &file, &cwd)?;
        let (store, node_url, node_lease_ms) = fleet_settings(args, &file, ephemeral)?;
        // With a shared store the state directory holds only the snapshots of this machine's
        // workspaces.
        let snapshot_dir = state_dir.clone();
        let state_dir = if store.is_some() { None } else { state_dir };
        // A request someone is told about waits for a person who may be away: the notified
        // timeout replaces the desk's one (`/capabilities` reports the one in force).
        let notified_ms =
            file.ms(args.notified_permission_timeout_ms, "notifiedPermissionTimeoutMs", 3_600_000)?;
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
        if mdns && is_loopback_host(&listen.hostname) {
            return refuse(format!(
                "--mdns advertises the daemon on the LAN, but it listens on {} (loopback), which no other machine reaches: set --hostname to a LAN address (0.0.0.0 for all), or drop --mdns",
                listen.hostname
            ));
        }
        let tls = tls_files(args, &file, &cwd)?;
        let oidc = oidc::oidc(args, &file)?;

        Ok(Config {
            hostname: listen.hostname,
            port: listen.port,
            token_digest: listen.token.map(|t| TokenDigest(Sha256::digest(t.as_bytes()).into())),
            require_auth: listen.require_auth,
            allow_origins,
            agents,
            workspaces,
            any_workspace,
            session_scope,
            max_sessions: caps.max_sessions,
            max_pending_prompts: caps.max_pending_prompts,
            max_connections: caps.max_connections,
            max_subscribers: caps.max_subscribers,
            event_ring_size: caps.event_ring_size,
            subscriber_queue: caps.subscriber_queue,
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
            reviewers,
            review_breaker,
            oidc,
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

    /// The variables of the daemon's environment that hold a secret it read from there besides its
    /// own ([`crate::environ::ERASED`]): each model reviewer's `keyEnv`. Erased at boot, so that no
    /// agent, shell or reviewer program inherits them.
    pub fn secret_env_read(&self) -> Vec<&str> {
        self.reviewers
            .iter()
            .filter_map(|r| match &r.kind {
                ReviewerKind::Model(m) => m.key_env.as_deref(),
                ReviewerKind::Command { .. } => None,
            })
            .collect()
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
    use super::file::{SERVE_KEYS, flag_name, suggest};
    use super::*;
    use serde_json::Value;

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

    /// A deadline that cannot be switched off refuses 0 by its flag's name, whether the zero came
    /// from the flag or from the file (`serve.<key>`); any other value is taken.
    #[test]
    fn a_deadline_of_zero_is_refused_by_its_flags_name() {
        let dir = std::env::temp_dir();
        let base = || ServeArgs {
            agent: vec!["demo".into()],
            workspace: vec![dir.to_string_lossy().into_owned()],
            ephemeral: true,
            ..ServeArgs::default()
        };
        type Set = fn(&mut ServeArgs, u64);
        let cases: [(&str, Set); 7] = [
            ("--writer-idle-timeout-ms", |a, n| a.writer_idle_timeout_ms = Some(n)),
            ("--initialize-timeout-ms", |a, n| a.initialize_timeout_ms = Some(n)),
            ("--pairing-code-ttl-ms", |a, n| a.pairing_code_ttl_ms = Some(n)),
            ("--shell-timeout-ms", |a, n| a.shell_timeout_ms = Some(n)),
            ("--header-timeout-ms", |a, n| a.header_timeout_ms = Some(n)),
            ("--idle-timeout-ms", |a, n| a.idle_timeout_ms = Some(n)),
            ("--body-timeout-ms", |a, n| a.body_timeout_ms = Some(n)),
        ];
        for (flag, set) in cases {
            let mut args = base();
            set(&mut args, 0);
            let refused = Config::from_args(&args).expect_err(flag).to_string();
            assert_eq!(refused, format!("mediatord: {flag} must be positive"));
            set(&mut args, 1);
            assert!(Config::from_args(&args).is_ok(), "{flag} 1");
        }
        assert_eq!(flag_name("headerTimeoutMs"), "--header-timeout-ms");
        let file = FileSettings {
            values: serde_json::from_str(r#"{"idleTimeoutMs": 0}"#).expect("json"),
            ..FileSettings::default()
        };
        let refused = file.positive_ms(None, "idleTimeoutMs", 5).expect_err("0 from the file");
        assert_eq!(refused.to_string(), "mediatord: --idle-timeout-ms must be positive");
        assert_eq!(file.positive_ms(Some(7), "idleTimeoutMs", 5).expect("the flag wins"), 7);
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

    /// Reviewers from the flags and the file: trust by kind (flags over the file's), the workspace
    /// served, the deadline; and each mistake refused with what to write instead.
    #[test]
    fn the_review_breaker_is_read_from_flags_over_the_file_and_refuses_unknown_kinds() {
        let none = "{}";
        assert_eq!(
            from_file(none, ServeArgs::default()).expect("loads").review_breaker,
            BreakerSettings::default()
        );
        let file = r#"{"serve": {"reviewBreakerDenials": 5, "reviewCritical": ["delete", "execute"]}}"#;
        let c = from_file(file, ServeArgs::default()).expect("loads");
        assert_eq!(
            c.review_breaker,
            BreakerSettings { denials: 5, critical: vec!["delete".into(), "execute".into()] }
        );
        let flags = ServeArgs {
            review_breaker_denials: Some(0),
            review_critical: vec!["move,delete".into(), "delete".into()],
            ..ServeArgs::default()
        };
        let c = from_file(file, flags).expect("loads");
        assert_eq!(
            c.review_breaker,
            BreakerSettings { denials: 0, critical: vec!["move".into(), "delete".into()] }
        );
        let typo = ServeArgs { review_critical: vec!["delet".into()], ..ServeArgs::default() };
        let e = from_file(none, typo).expect_err("refused").to_string();
        assert!(e.contains("unknown tool kind \"delet\"; did you mean delete?"), "{e}");
        let huge = ServeArgs { review_breaker_denials: Some(65), ..ServeArgs::default() };
        assert!(from_file(none, huge).expect_err("refused").to_string().contains("at most 64"));
        let most = ServeArgs { review_breaker_denials: Some(64), ..ServeArgs::default() };
        assert_eq!(from_file(none, most).expect("loads").review_breaker.denials, MAX_BREAKER_DENIALS);
    }

    #[test]
    fn reviewers_are_read_with_their_trust_and_refused_when_malformed() {
        let file = r#"{"reviewers": {"lint": {"command": "command:./lint --strict", "trust": {"edit": "decide"}, "workspace": ".", "deadlineMs": 750}}}"#;
        let args = ServeArgs {
            reviewer: vec!["guard=command:/bin/cat".into()],
            reviewer_trust: vec!["guard=read:decide".into(), "lint=edit:inform,search:decide".into()],
            ..ServeArgs::default()
        };
        let c = from_file(file, args).expect("valid");
        let [guard, lint] = &c.reviewers[..] else { panic!("two reviewers: {:?}", c.reviewers) };
        let command = |spec: &ReviewerSpec| match &spec.kind {
            ReviewerKind::Command { command, .. } => command.clone(),
            ReviewerKind::Model(_) => panic!("a command reviewer: {spec:?}"),
        };
        assert_eq!((guard.name.as_str(), command(guard).program.as_str()), ("guard", "/bin/cat"));
        assert!(guard.trust.decides(Some("read")) && !guard.trust.decides(Some("edit")));
        assert_eq!(guard.deadline, Duration::from_millis(DEFAULT_REVIEW_DEADLINE_MS));
        assert_eq!(guard.workspace, None);
        assert_eq!(command(lint).args, ["--strict"]);
        assert!(!lint.trust.decides(Some("edit")), "the flag's inform overrides the file's decide");
        assert!(lint.trust.decides(Some("search")));
        assert_eq!(lint.deadline, Duration::from_millis(750));
        assert_eq!(lint.workspace.as_deref(), Some(c.primary_workspace()));

        let refused = |file: &str, reviewer: &[&str], trust: &[&str]| {
            let args = ServeArgs {
                reviewer: reviewer.iter().map(|r| (*r).to_owned()).collect(),
                reviewer_trust: trust.iter().map(|r| (*r).to_owned()).collect(),
                ..ServeArgs::default()
            };
            from_file(file, args).expect_err("refused").0
        };
        let none = "{}";
        assert!(refused(none, &["g"], &[]).contains("NAME=command:PROGRAM"));
        assert!(refused(none, &["g=model:http://x"], &[]).contains("needs its model"));
        let model = r#"{"reviewers": {"m": {"model": {"baseUrl": "http://127.0.0.1:9/v1", "model": "x"}, "trust": {"read": "decide"}}}}"#;
        let c = from_file(
            model,
            ServeArgs {
                reviewer: vec!["f=model:http://127.0.0.1:8 model=y api=anthropic".into()],
                ..ServeArgs::default()
            },
        )
        .expect("models");
        let apis: Vec<_> = c
            .reviewers
            .iter()
            .map(|r| match &r.kind {
                ReviewerKind::Model(m) => {
                    (r.name.as_str(), m.api, m.model.as_str(), r.trust.decides(Some("read")))
                }
                ReviewerKind::Command { .. } => panic!("a model: {r:?}"),
            })
            .collect();
        assert_eq!(apis, [("f", ModelApi::Anthropic, "y", false), ("m", ModelApi::OpenAi, "x", true)]);
        let both = r#"{"reviewers": {"g": {"command": "command:/bin/cat", "model": {}}}}"#;
        assert!(refused(both, &[], &[]).contains("not both"));
        let model_string = r#"{"reviewers": {"g": {"model": "model:http://h"}}}"#;
        assert!(refused(model_string, &[], &[]).contains("must be an object"));
        let model_in_command = r#"{"reviewers": {"g": {"command": "model:http://h model=x"}}}"#;
        assert!(refused(model_in_command, &[], &[]).contains("a model goes in"));
        assert!(refused(none, &["g=command:/bin/cat", "g=command:/bin/cat"], &[]).contains("defined twice"));
        assert!(
            refused(none, &["g=command:/bin/cat"], &["h=read:decide"]).contains("no reviewer is named h")
        );
        assert!(refused(none, &["g=command:/bin/cat"], &["g=raed:decide"]).contains("did you mean read?"));
        let nine: Vec<String> = (0..=MAX_REVIEWERS).map(|i| format!("r{i}=command:/bin/cat")).collect();
        let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
        assert!(refused(none, &nine, &[]).contains(&format!("at most {MAX_REVIEWERS} reviewers")));
        let typo = r#"{"reviewers": {"g": {"command": "command:/bin/cat", "trusts": {}}}}"#;
        assert!(refused(typo, &[], &[]).contains("unknown key trusts; did you mean trust?"));
        let elsewhere = r#"{"reviewers": {"g": {"command": "command:/bin/cat", "workspace": "/"}}}"#;
        assert!(refused(elsewhere, &[], &[]).contains("is not one of the daemon's workspaces"));
        let zero = r#"{"reviewers": {"g": {"command": "command:/bin/cat", "deadlineMs": 0}}}"#;
        assert!(refused(zero, &[], &[]).contains("deadlineMs must be a positive integer"));
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

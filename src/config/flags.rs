//! `mediatord serve`'s flags (each also a `--config` file key, `docs/protocol.md#1-command-line`)
//! and its help's closing text.

use std::path::PathBuf;

use clap::Args;

use super::Secret;

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
    /// with Last-Event-ID) [default: none: as far as the session's ring holds, 64 MiB]
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
    /// A reviewer: command:PROGRAM is a program started once (behind the agent guard, confined like
    /// an agent) that is sent each permission request as one JSON line on its stdin and answers one
    /// line {"id","verdict":"allow"|"deny"|"escalate","reason"} on its stdout; 'model:URL
    /// model=MODEL [api=openai|anthropic] [keyEnv=VAR|keyFile=PATH] [systemPromptFile=PATH]' asks a
    /// chat endpoint the same, the agents' secrets redacted (docs/operations.md#reviewers). Its
    /// verdicts only inform (shown on the request and in the audit) unless --reviewer-trust lets it
    /// decide a tool kind. Repeatable; also the config file's "reviewers" map
    #[arg(long = "reviewer", value_name = "NAME=command:PROGRAM|NAME=model:URL model=MODEL")]
    pub reviewer: Vec<String>,
    /// The tool kinds a reviewer's allow/deny decides, e.g. guard=read:decide,search:decide; every
    /// kind not named (and escalate, a failure, a late answer) leaves the request to the people
    #[arg(long = "reviewer-trust", value_name = "NAME=KIND:decide|inform,...")]
    pub reviewer_trust: Vec<String>,
    /// How long a reviewer has to answer one request; past it the request stays with the people
    /// and the failure is counted [default: 5000]
    #[arg(long, value_name = "MS")]
    pub review_deadline_ms: Option<u64>,
    /// Requests reviewers deny within one turn before the turn is stopped (cancelled, as a
    /// client's cancel does) and people are told (review_breaker); 0 = never for a count
    /// [default: 3]
    #[arg(long, value_name = "N")]
    pub review_breaker_denials: Option<u64>,
    /// Tool kinds one reviewer denial of which stops the turn at once, e.g. delete,execute
    /// (repeatable or comma-separated)
    #[arg(long, value_name = "KIND,...")]
    pub review_critical: Vec<String>,
    /// Let people sign in with this OpenID provider (its issuer URL, e.g.
    /// https://accounts.google.com): the web app's "Sign in" and `mediatord login` (docs/people.md)
    #[arg(long, env = "MEDIATORD_OIDC_ISSUER", hide_env_values = true, value_name = "URL")]
    pub oidc_issuer: Option<String>,
    /// The client id the provider gave this daemon; register `<public-url>/auth/callback` as its
    /// redirect URI there
    #[arg(long, env = "MEDIATORD_OIDC_CLIENT_ID", hide_env_values = true, value_name = "ID")]
    pub oidc_client_id: Option<String>,
    /// A file holding the client's secret (or set MEDIATORD_OIDC_CLIENT_SECRET; never a flag: the
    /// process list shows flags). None: a public client
    #[arg(long, value_name = "FILE")]
    pub oidc_client_secret_file: Option<PathBuf>,
    /// The client secret from the environment only (MEDIATORD_OIDC_CLIENT_SECRET)
    #[arg(skip)]
    pub oidc_client_secret: Option<Secret>,
    /// People whose verified email is at this domain may sign in; repeatable
    #[arg(long = "oidc-allow-domain", value_name = "DOMAIN")]
    pub oidc_allow_domain: Vec<String>,
    /// Members of this group (the provider's `groups` claim) may sign in; repeatable
    #[arg(long = "oidc-allow-group", value_name = "GROUP")]
    pub oidc_allow_group: Vec<String>,
    /// What the people a claim matches may do: group:NAME=ROLE, email:ADDRESS=ROLE or
    /// domain:DOMAIN=ROLE, ROLE being operator, voter or observer; repeatable, the first match wins
    #[arg(long = "oidc-role", value_name = "MATCH=ROLE")]
    pub oidc_role: Vec<String>,
    /// The role of a person no --oidc-role matches [default: voter]
    #[arg(long, value_name = "operator|voter|observer")]
    pub oidc_default_role: Option<String>,
    /// How often the provider is asked to vouch again for each signed-in person; one it no longer
    /// vouches for (disabled, removed) is signed out everywhere at once, and a sign-in not renewed
    /// for twice this ends [default: 300000]
    #[arg(long, value_name = "MS")]
    pub oidc_renew_ms: Option<u64>,
}

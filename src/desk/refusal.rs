//! What the front desk and the daemon below it refuse with, in one type every door renders: each
//! variant has a [`Kind`] (the HTTP floor turns it into a status, the ACP door into a JSON-RPC
//! code), a stable `code` and its context fields (`docs/protocol.md#26-errors`). Every domain error
//! (`daemon`, `permission`, `devices`, `store`) is mapped here, once.

use serde_json::{Map, Value, json};

use crate::changes::FileError;
use crate::daemon::{CreateError, DeleteError, ResumeError, RewindError, SessionError};
use crate::devices::StreamLimit;
use crate::permission::{RuleError, VoteError};

/// What kind of refusal it is: what a door needs to render it. Each has the status REST answers
/// it with ([`Kind::status`]); the ACP door reads the kind, never the status, for its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The request is malformed or names something impossible.
    Invalid,
    /// The caller may not do this.
    Forbidden,
    /// What it names does not exist (or no longer does).
    NotFound,
    /// It conflicts with the state of what it names.
    Conflict,
    /// A bound of the caller's was reached: later, or with less.
    TooMany,
    /// The daemon cannot do it now (a limit of everyone's, a drain, the store): retry later.
    Unavailable,
    /// The agent failed.
    Upstream,
    /// The agent did not answer in time.
    UpstreamTimeout,
    /// A fault of the daemon's own.
    Internal,
    /// What it names is larger than the operation takes (qwen serve's `file_too_large`).
    TooLarge,
    /// Well formed, but the operation cannot apply to what it names (qwen serve's `binary_file`,
    /// `text_not_found`, `ambiguous_text_match`).
    Unprocessable,
}

impl Kind {
    /// The HTTP status REST answers this kind with (`docs/protocol.md#26-errors`).
    pub fn status(self) -> u16 {
        match self {
            Kind::Invalid => 400,
            Kind::Forbidden => 403,
            Kind::NotFound => 404,
            Kind::Conflict => 409,
            Kind::TooLarge => 413,
            Kind::Unprocessable => 422,
            Kind::TooMany => 429,
            Kind::Internal => 500,
            Kind::Upstream => 502,
            Kind::Unavailable => 503,
            Kind::UpstreamTimeout => 504,
        }
    }
}

/// What is wrong with a client id; all of them are `invalid_client_id`, each with its own
/// message, so a well-formed id that was merely forgotten is not told it is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClientIdProblem {
    #[error("Invalid client id: expected 1-128 characters of A-Z a-z 0-9 . _ : -")]
    Malformed,
    #[error("This route needs a client id (X-Qwen-Client-Id)")]
    Missing,
    #[error(
        "This client id is not registered on the session (or was forgotten): create or attach, open the \
         event stream or send a heartbeat with it first"
    )]
    Unregistered,
}

/// A refusal of the desk or of the daemon behind it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refusal {
    /// The connection comes from a process the daemon started (an agent, or something it ran):
    /// never served as a client, whatever it presents (`crate::peer`).
    #[error(
        "This connection comes from a process the daemon started (an agent or a command it ran): an agent is never a client of the daemon that mediates it"
    )]
    AgentNotAClient,
    #[error("{0}")]
    InvalidClientId(ClientIdProblem),
    #[error("cwd must be an absolute path to an existing directory")]
    InvalidCwd,
    #[error(
        "cwd {cwd} is not one of the daemon's workspaces ({}): start mediatord with --workspace {cwd} to serve it too, or with --any-workspace to accept any directory",
        .accepted.join(", ")
    )]
    WorkspaceMismatch { cwd: String, accepted: Vec<String> },
    #[error("sessionScope must be \"single\" or \"thread\"")]
    InvalidSessionScope,
    /// `agent` names none of the configured agents (`known`, the default first); `agent` is the
    /// name asked for, or the JSON text of a value that is not a name.
    #[error(
        "Unknown agent {agent}: this daemon runs {} (the first is the default; start mediatord with --agent NAME=COMMAND to add one)",
        .known.join(", ")
    )]
    UnknownAgent { agent: String, known: Vec<String> },
    #[error("Session limit reached")]
    SessionLimitExceeded { limit: usize },
    #[error("{}", init_timeout_text(.method, *.timeout_ms))]
    InitTimeout { method: &'static str, timeout_ms: u64 },
    #[error("The agent could not be started: {0}")]
    AgentStartFailed(String),
    #[error("The daemon is shutting down")]
    DaemonDraining,
    #[error("Session not found")]
    SessionNotFound { session_id: String },
    #[error("prompt must be a non-empty array of content blocks")]
    InvalidPrompt,
    #[error("Too many prompts queued for this session")]
    PromptQueueFull { limit: usize, pending: usize },
    #[error("{0}")]
    AgentError(String),
    #[error("The agent exited: {0}")]
    AgentExited(String),
    #[error("modelId must be a non-empty string")]
    InvalidModelId,
    /// `mode` (the JSON text of what was sent) is none of the modes the agent announced, `available`.
    #[error("{}", invalid_mode_text(.mode, .available))]
    InvalidMode { mode: String, available: Vec<String> },
    #[error("Too many event streams for this session")]
    SubscriberLimitExceeded { limit: usize },
    #[error(
        "Invalid vote: expected {{\"outcome\":{{\"outcome\":\"selected\",\"optionId\":...}}}}, {{\"outcome\":{{\"outcome\":\"cancelled\"}}}} or {{\"decision\":\"allow|deny|allow-session|deny-session\"}}, with a question's \"answers\" as an object"
    )]
    InvalidVote,
    #[error("Permission request not found")]
    PermissionRequestNotFound,
    #[error("Permission request already resolved")]
    PermissionAlreadyResolved { resolved_option_id: String },
    #[error("Option not offered for this permission request")]
    InvalidOptionId { request_id: String, option_id: String },
    #[error("This client may not decide this permission request")]
    PermissionForbidden { reason: &'static str },
    /// An approval under a `require` rule naming a group, from someone not in it
    /// (`docs/protocol.md#7-permission-rules`): it counts nothing; the request stays pending.
    #[error("Rule {rule_id} needs approval from a member of the group {group}")]
    GroupRequired { rule_id: String, group: String },
    /// A question's answers it does not take (`docs/protocol.md#19-questions`): the field and why.
    /// The question stays pending.
    #[error("Invalid answer to {field}: {reason}")]
    InvalidAnswer { field: String, reason: String },
    #[error("Invalid rule: {0}")]
    InvalidRule(String),
    #[error("Rule not found")]
    RuleNotFound,
    #[error("Internal error")]
    Internal,
    /// A parameter with a value the operation does not take; the text says which and why.
    #[error("{0}")]
    InvalidParameter(String),
    #[error(
        "The session's agent cannot load a session (it does not advertise loadSession), so it cannot be resumed"
    )]
    ResumeUnsupported { agent: String },
    /// Another daemon of the fleet holds the session live (`daemon::ResumeError::HeldElsewhere`):
    /// nothing was started here. Its URL says where the session is served.
    #[error(
        "Session {session_id} is held by another daemon of the fleet ({node_url}): connect there, or through a daemon that relays to it"
    )]
    SessionHeldElsewhere { session_id: String, node_url: String },
    /// `session/delete` of a live session: close it first (`session/close`), which ends it for
    /// every client attached, then delete what it left.
    #[error(
        "Session {session_id} is live: close it first (session/close ends it for every client), then delete its history"
    )]
    SessionLive { session_id: String },
    #[error("This credential belongs to device {device_id}: it acts as that client id, and no other")]
    ClientIdMismatch { device_id: String },
    #[error("This device is an observer: it may read and subscribe, not change anything")]
    ReadOnlyDevice,
    #[error("Only the operator's token may do this, not a paired device")]
    OperatorRequired,
    /// An acknowledged write (`docs/operations.md#durability`) the state database did not take:
    /// nothing was changed. The text says what was not done.
    #[error("{0}")]
    StoreUnavailable(String),
    /// A device's event stream or connection past one of its bounds (`devices::StreamLimit`).
    #[error("Too many event streams: {reason}; close one first")]
    StreamLimitExceeded { reason: String, scope: &'static str, limit: usize },
    /// A file route refused (`docs/protocol.md` § 18.5): qwen serve's `errorKind` is the code.
    #[error("{0}")]
    File(FileError),
    /// A rewind while a turn runs or is queued (qwen serve's `session_busy`).
    #[error("A turn is running or queued: rewind once the session is idle")]
    SessionBusy { session_id: String },
    /// `promptId` names no turn of the session (qwen serve's `invalid_rewind_target`).
    #[error("No turn of this session has promptId {prompt_id}")]
    InvalidRewindTarget { prompt_id: String },
    #[error("`promptId` is required and must be a non-empty string")]
    MissingPromptId,
    #[error("{0}")]
    InvalidRewindFlag(String),
    /// Files the rewind would put back were changed since the agent changed them.
    #[error("Files were changed since the agent changed them; send force: true to rewind them anyway: {}", .paths.join(", "))]
    RewindConflict { paths: Vec<String> },
    /// No snapshots (`--no-snapshots`), or the snapshot store failed.
    #[error("{0}")]
    ChangesUnavailable(String),
    /// `turnIndex` names no turn of the session.
    #[error("This session has no turn {turn}")]
    TurnNotFound { turn: u64 },
}

/// What `invalid_mode` says: the modes there are to choose from.
fn invalid_mode_text(mode: &str, available: &[String]) -> String {
    if available.is_empty() {
        format!("Unknown mode {mode}: this session's agent announced no modes")
    } else {
        format!("Unknown mode {mode}: this session's agent offers {}", available.join(", "))
    }
}

/// What `init_timeout` says: an agent that never answers `initialize` is most often a program that
/// does not speak ACP on stdio (an interactive CLI started without its ACP flag).
fn init_timeout_text(method: &str, timeout_ms: u64) -> String {
    let hint = if method == crate::acp::method::INITIALIZE {
        "is it an ACP agent started in ACP mode (e.g. `qwen --acp`, not `qwen`)? If it is only slow to start, raise --initialize-timeout-ms (or the agent's initializeTimeoutMs)"
    } else {
        "raise --initialize-timeout-ms (or the agent's initializeTimeoutMs) if it is only slow"
    };
    format!("The agent did not answer {method} within {timeout_ms} ms: {hint}")
}

impl Refusal {
    /// One instance of every variant, for the OpenAPI document (each code's status comes from here).
    pub fn all() -> Vec<Refusal> {
        let s = String::new;
        vec![
            Refusal::AgentNotAClient,
            Refusal::InvalidClientId(ClientIdProblem::Malformed),
            Refusal::InvalidCwd,
            Refusal::WorkspaceMismatch { cwd: s(), accepted: Vec::new() },
            Refusal::InvalidSessionScope,
            Refusal::UnknownAgent { agent: s(), known: Vec::new() },
            Refusal::SessionLimitExceeded { limit: 0 },
            Refusal::InitTimeout { method: "", timeout_ms: 0 },
            Refusal::AgentStartFailed(s()),
            Refusal::DaemonDraining,
            Refusal::SessionNotFound { session_id: s() },
            Refusal::InvalidPrompt,
            Refusal::PromptQueueFull { limit: 0, pending: 0 },
            Refusal::AgentError(s()),
            Refusal::AgentExited(s()),
            Refusal::InvalidModelId,
            Refusal::InvalidMode { mode: s(), available: Vec::new() },
            Refusal::SubscriberLimitExceeded { limit: 0 },
            Refusal::InvalidVote,
            Refusal::PermissionRequestNotFound,
            Refusal::PermissionAlreadyResolved { resolved_option_id: s() },
            Refusal::InvalidOptionId { request_id: s(), option_id: s() },
            Refusal::PermissionForbidden { reason: "" },
            Refusal::GroupRequired { rule_id: s(), group: s() },
            Refusal::InvalidAnswer { field: s(), reason: s() },
            Refusal::InvalidRule(s()),
            Refusal::RuleNotFound,
            Refusal::Internal,
            Refusal::InvalidParameter(s()),
            Refusal::ResumeUnsupported { agent: s() },
            Refusal::SessionHeldElsewhere { session_id: s(), node_url: s() },
            Refusal::SessionLive { session_id: s() },
            Refusal::ClientIdMismatch { device_id: s() },
            Refusal::ReadOnlyDevice,
            Refusal::OperatorRequired,
            Refusal::StoreUnavailable(s()),
            Refusal::StreamLimitExceeded { reason: s(), scope: "", limit: 0 },
            Refusal::SessionBusy { session_id: s() },
            Refusal::InvalidRewindTarget { prompt_id: s() },
            Refusal::MissingPromptId,
            Refusal::InvalidRewindFlag(s()),
            Refusal::RewindConflict { paths: Vec::new() },
            Refusal::ChangesUnavailable(s()),
            Refusal::TurnNotFound { turn: 0 },
        ]
        .into_iter()
        .chain(FileError::all().into_iter().map(Refusal::File))
        .collect()
    }

    pub fn kind(&self) -> Kind {
        match self {
            Self::AgentNotAClient
            | Self::ClientIdMismatch { .. }
            | Self::ReadOnlyDevice
            | Self::OperatorRequired
            | Self::PermissionForbidden { .. }
            | Self::GroupRequired { .. } => Kind::Forbidden,
            Self::InvalidClientId(_)
            | Self::InvalidCwd
            | Self::WorkspaceMismatch { .. }
            | Self::InvalidSessionScope
            | Self::UnknownAgent { .. }
            | Self::InvalidPrompt
            | Self::InvalidModelId
            | Self::InvalidMode { .. }
            | Self::InvalidVote
            | Self::InvalidOptionId { .. }
            | Self::InvalidAnswer { .. }
            | Self::InvalidRule(_)
            | Self::InvalidParameter(_) => Kind::Invalid,
            Self::ResumeUnsupported { .. } | Self::SessionHeldElsewhere { .. } | Self::SessionLive { .. } => {
                Kind::Conflict
            }
            Self::SessionNotFound { .. }
            | Self::PermissionRequestNotFound
            | Self::PermissionAlreadyResolved { .. }
            | Self::RuleNotFound => Kind::NotFound,
            Self::SessionLimitExceeded { .. }
            | Self::DaemonDraining
            | Self::PromptQueueFull { .. }
            | Self::AgentExited(_)
            | Self::StoreUnavailable(_) => Kind::Unavailable,
            Self::InitTimeout { .. } => Kind::UpstreamTimeout,
            Self::AgentStartFailed(_) | Self::AgentError(_) => Kind::Upstream,
            Self::SubscriberLimitExceeded { .. } | Self::StreamLimitExceeded { .. } => Kind::TooMany,
            Self::Internal => Kind::Internal,
            Self::File(f) => match f.status() {
                404 => Kind::NotFound,
                409 => Kind::Conflict,
                413 => Kind::TooLarge,
                422 => Kind::Unprocessable,
                503 => Kind::Unavailable,
                _ => Kind::Invalid,
            },
            Self::SessionBusy { .. } | Self::RewindConflict { .. } => Kind::Conflict,
            Self::InvalidRewindTarget { .. } | Self::MissingPromptId | Self::InvalidRewindFlag(_) => {
                Kind::Invalid
            }
            Self::ChangesUnavailable(_) => Kind::Unavailable,
            Self::TurnNotFound { .. } => Kind::NotFound,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::AgentNotAClient => "agent_not_a_client",
            Self::InvalidClientId(_) => "invalid_client_id",
            Self::InvalidCwd => "invalid_cwd",
            Self::WorkspaceMismatch { .. } => "workspace_mismatch",
            Self::InvalidSessionScope => "invalid_session_scope",
            Self::UnknownAgent { .. } => "unknown_agent",
            Self::SessionLimitExceeded { .. } => "session_limit_exceeded",
            Self::InitTimeout { .. } => "init_timeout",
            Self::AgentStartFailed(_) => "agent_start_failed",
            Self::DaemonDraining => "daemon_draining",
            Self::SessionNotFound { .. } => "session_not_found",
            Self::InvalidPrompt => "invalid_prompt",
            Self::PromptQueueFull { .. } => "prompt_queue_full",
            Self::AgentError(_) => "agent_error",
            Self::AgentExited(_) => "agent_exited",
            Self::InvalidModelId => "invalid_model_id",
            Self::InvalidMode { .. } => "invalid_mode",
            Self::SubscriberLimitExceeded { .. } => "subscriber_limit_exceeded",
            Self::InvalidVote => "invalid_vote",
            Self::PermissionRequestNotFound => "permission_request_not_found",
            Self::PermissionAlreadyResolved { .. } => "permission_already_resolved",
            Self::InvalidOptionId { .. } => "invalid_option_id",
            Self::PermissionForbidden { .. } => "permission_forbidden",
            Self::GroupRequired { .. } => "group_required",
            Self::InvalidAnswer { .. } => "invalid_answer",
            Self::InvalidRule(_) => "invalid_rule",
            Self::RuleNotFound => "rule_not_found",
            Self::Internal => "internal_error",
            Self::InvalidParameter(_) => "invalid_parameter",
            Self::ResumeUnsupported { .. } => "resume_unsupported",
            Self::SessionHeldElsewhere { .. } => "session_held_elsewhere",
            Self::SessionLive { .. } => "session_live",
            Self::ClientIdMismatch { .. } => "client_id_mismatch",
            Self::ReadOnlyDevice => "read_only_device",
            Self::OperatorRequired => "operator_required",
            Self::StoreUnavailable(_) => "store_unavailable",
            Self::StreamLimitExceeded { .. } => "stream_limit_exceeded",
            Self::File(f) => f.kind(),
            Self::SessionBusy { .. } => "session_busy",
            Self::InvalidRewindTarget { .. } => "invalid_rewind_target",
            Self::MissingPromptId => "missing_prompt_id",
            Self::InvalidRewindFlag(_) => "invalid_rewind_flag",
            Self::RewindConflict { .. } => "rewind_conflict",
            Self::ChangesUnavailable(_) => "changes_unavailable",
            Self::TurnNotFound { .. } => "turn_not_found",
        }
    }

    /// Whether the caller should retry after a while (`Retry-After` over HTTP).
    pub fn retry_later(&self) -> bool {
        matches!(
            self,
            Self::SessionLimitExceeded { .. }
                | Self::PromptQueueFull { .. }
                | Self::SubscriberLimitExceeded { .. }
                | Self::StreamLimitExceeded { .. }
                | Self::StoreUnavailable(_)
                | Self::DaemonDraining
                | Self::SessionBusy { .. }
        )
    }

    /// The context fields beside `error` and `code`.
    pub fn fields(&self) -> Map<String, Value> {
        let mut f = Map::new();
        let mut put = |k: &str, v: Value| {
            f.insert(k.to_owned(), v);
        };
        match self {
            Self::SessionLimitExceeded { limit } | Self::SubscriberLimitExceeded { limit } => {
                put("limit", json!(limit))
            }
            Self::SessionNotFound { session_id } | Self::SessionLive { session_id } => {
                put("sessionId", json!(session_id))
            }
            Self::PromptQueueFull { limit, pending } => {
                put("limit", json!(limit));
                put("pendingCount", json!(pending));
            }
            Self::PermissionAlreadyResolved { resolved_option_id } => {
                put("resolvedOptionId", json!(resolved_option_id))
            }
            Self::InvalidOptionId { request_id, option_id } => {
                put("requestId", json!(request_id));
                put("optionId", json!(option_id));
            }
            Self::PermissionForbidden { reason } => put("reason", json!(reason)),
            Self::GroupRequired { rule_id, group } => {
                put("ruleId", json!(rule_id));
                put("group", json!(group));
            }
            Self::InvalidAnswer { field, reason } => {
                put("field", json!(field));
                put("reason", json!(reason));
            }
            Self::ResumeUnsupported { agent } => put("agent", json!(agent)),
            Self::SessionHeldElsewhere { session_id, node_url } => {
                put("sessionId", json!(session_id));
                put("nodeUrl", json!(node_url));
            }
            Self::UnknownAgent { known, .. } => put("agents", json!(known)),
            Self::InvalidMode { available, .. } => put("availableModes", json!(available)),
            Self::ClientIdMismatch { device_id } => put("deviceId", json!(device_id)),
            Self::StreamLimitExceeded { scope, limit, .. } => {
                put("scope", json!(scope));
                put("limit", json!(limit));
            }
            // qwen serve's file errors say their kind as `errorKind` and their status, and
            // @qwen-code/sdk reads them so.
            Self::File(f) => {
                put("errorKind", json!(f.kind()));
                put("status", json!(f.status()));
            }
            Self::SessionBusy { session_id } => {
                put("errorKind", json!("session_busy"));
                put("retryable", json!(true));
                put("sessionId", json!(session_id));
            }
            Self::InvalidRewindTarget { prompt_id } => put("promptId", json!(prompt_id)),
            Self::RewindConflict { paths } => put("paths", json!(paths)),
            Self::TurnNotFound { turn } => put("turnIndex", json!(turn)),
            _ => {}
        }
        f
    }

    /// `503 store_unavailable`: `what` was not done, because the state database did not take it.
    /// The store's own error is logged, not answered (it may name paths).
    pub fn store_unavailable(what: &str, e: &crate::store::WriteError) -> Refusal {
        tracing::error!(error = %e, "{what}: the state database did not take the write");
        Refusal::StoreUnavailable(format!(
            "{what}: the state database did not take the write (busy, full or failing); retry later"
        ))
    }
}

/// `From` each refusal a door meets as it is (the desk's own, or a domain error the desk maps) for
/// the door's error type, which carries it as its `Refused` variant: `refused_from!(Failure: ...)`.
macro_rules! refused_from {
    ($door:ident: $($t:ty),*) => {$(
        impl From<$t> for $door {
            fn from(e: $t) -> $door {
                $door::Refused(e.into())
            }
        }
    )*};
}
pub(crate) use refused_from;

impl From<StreamLimit> for Refusal {
    fn from(e: StreamLimit) -> Refusal {
        Refusal::StreamLimitExceeded { reason: e.to_string(), scope: e.scope(), limit: e.limit() }
    }
}

impl From<CreateError> for Refusal {
    fn from(e: CreateError) -> Refusal {
        match e {
            CreateError::Draining => Refusal::DaemonDraining,
            CreateError::InvalidCwd => Refusal::InvalidCwd,
            CreateError::WorkspaceMismatch { cwd, accepted } => Refusal::WorkspaceMismatch {
                cwd: cwd.display().to_string(),
                accepted: accepted.iter().map(|w| w.display().to_string()).collect(),
            },
            CreateError::UnknownAgent { name, known } => {
                Refusal::UnknownAgent { agent: format!("{name:?}"), known }
            }
            CreateError::LimitReached { limit } => Refusal::SessionLimitExceeded { limit },
            CreateError::InitTimeout { method, timeout } => {
                Refusal::InitTimeout { method, timeout_ms: timeout.as_millis() as u64 }
            }
            CreateError::AgentStartFailed(m) => Refusal::AgentStartFailed(m),
            CreateError::AgentError(m) => Refusal::AgentError(m),
            CreateError::Internal => Refusal::Internal,
        }
    }
}

impl From<SessionError> for Refusal {
    fn from(e: SessionError) -> Refusal {
        match e {
            SessionError::NotFound { session_id } => Refusal::SessionNotFound { session_id },
            SessionError::QueueFull { limit, pending } => Refusal::PromptQueueFull { limit, pending },
            SessionError::SubscriberLimit { limit } => Refusal::SubscriberLimitExceeded { limit },
            SessionError::Agent(m) => Refusal::AgentError(m),
            SessionError::AgentExited(m) => Refusal::AgentExited(m),
            SessionError::Draining => Refusal::DaemonDraining,
            SessionError::InvalidMode { mode_id, available } => {
                Refusal::InvalidMode { mode: format!("{mode_id:?}"), available }
            }
            SessionError::Store(m) => Refusal::StoreUnavailable(m),
        }
    }
}

impl From<VoteError> for Refusal {
    fn from(e: VoteError) -> Refusal {
        match e {
            VoteError::NotFound => Refusal::PermissionRequestNotFound,
            VoteError::AlreadyResolved { resolved_option_id } => {
                Refusal::PermissionAlreadyResolved { resolved_option_id }
            }
            VoteError::UnknownClient => Refusal::InvalidClientId(ClientIdProblem::Unregistered),
            VoteError::InvalidOption { request_id, option_id } => {
                Refusal::InvalidOptionId { request_id, option_id }
            }
            VoteError::Forbidden(reason) => Refusal::PermissionForbidden { reason: reason.as_str() },
            VoteError::GroupRequired { rule_id, group } => Refusal::GroupRequired { rule_id, group },
            VoteError::ReadOnly => Refusal::ReadOnlyDevice,
            VoteError::InvalidAnswer(e) => Refusal::InvalidAnswer { field: e.field, reason: e.reason },
        }
    }
}

impl From<RuleError> for Refusal {
    fn from(e: RuleError) -> Refusal {
        match e {
            RuleError::Invalid(reason) => Refusal::InvalidRule(reason),
            RuleError::NotFound => Refusal::RuleNotFound,
            RuleError::Store(e) => Refusal::store_unavailable("The workspace rule was not changed", &e),
        }
    }
}

impl From<FileError> for Refusal {
    fn from(e: FileError) -> Refusal {
        Refusal::File(e)
    }
}

impl From<RewindError> for Refusal {
    fn from(e: RewindError) -> Refusal {
        match e {
            RewindError::Busy { session_id } => Refusal::SessionBusy { session_id },
            RewindError::UnknownPrompt(prompt_id) => Refusal::InvalidRewindTarget { prompt_id },
            RewindError::Conflict(paths) => Refusal::RewindConflict { paths },
            RewindError::Unavailable(m) => Refusal::ChangesUnavailable(m),
        }
    }
}

impl From<ResumeError> for Refusal {
    fn from(e: ResumeError) -> Refusal {
        match e {
            ResumeError::NotFound { session_id } => Refusal::SessionNotFound { session_id },
            ResumeError::Unsupported { agent } => Refusal::ResumeUnsupported { agent },
            ResumeError::HeldElsewhere { session_id, node_url } => {
                Refusal::SessionHeldElsewhere { session_id, node_url }
            }
            ResumeError::Create(e) => e.into(),
            ResumeError::Store(e) => {
                tracing::error!(error = %e, "resume: the history could not be read");
                Refusal::Internal
            }
        }
    }
}

impl From<DeleteError> for Refusal {
    fn from(e: DeleteError) -> Refusal {
        match e {
            DeleteError::Live { session_id } => Refusal::SessionLive { session_id },
            DeleteError::HeldElsewhere { session_id, node_url } => {
                Refusal::SessionHeldElsewhere { session_id, node_url }
            }
            DeleteError::Read(e) => {
                tracing::error!(error = %e, "delete: the history could not be read");
                Refusal::Internal
            }
            DeleteError::Write(e) => Refusal::store_unavailable("The session was not deleted", &e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_unique_and_every_kind_has_a_status() {
        let all = Refusal::all();
        let codes: std::collections::BTreeSet<&str> = all.iter().map(Refusal::code).collect();
        assert_eq!(codes.len(), all.len(), "one code per variant");
        for r in &all {
            assert!((400..600).contains(&r.kind().status()), "{}", r.code());
        }
    }

    #[test]
    fn a_refusal_carries_its_context() {
        let r = Refusal::from(SessionError::NotFound { session_id: "s1".into() });
        assert_eq!((r.code(), r.kind()), ("session_not_found", Kind::NotFound));
        assert_eq!(Value::Object(r.fields()), json!({"sessionId": "s1"}));
        let r = Refusal::from(VoteError::ReadOnly);
        assert_eq!((r.code(), r.kind().status()), ("read_only_device", 403));
        assert!(Refusal::DaemonDraining.retry_later());
        assert!(!Refusal::AgentNotAClient.retry_later());
    }

    /// The wire contract of `docs/protocol.md#26-errors`, one row per refusal that carries context
    /// or waits: its code, status, whether to retry later, and the fields beside `error`.
    #[test]
    fn each_refusal_answers_its_code_status_retry_and_fields() {
        let rows: Vec<(Refusal, &str, u16, bool, Value)> = vec![
            (
                Refusal::SessionLimitExceeded { limit: 7 },
                "session_limit_exceeded",
                503,
                true,
                json!({"limit": 7}),
            ),
            (
                Refusal::SubscriberLimitExceeded { limit: 8 },
                "subscriber_limit_exceeded",
                429,
                true,
                json!({"limit": 8}),
            ),
            (
                Refusal::SessionNotFound { session_id: s("s1") },
                "session_not_found",
                404,
                false,
                json!({"sessionId": "s1"}),
            ),
            (
                Refusal::SessionLive { session_id: s("s2") },
                "session_live",
                409,
                false,
                json!({"sessionId": "s2"}),
            ),
            (
                Refusal::PromptQueueFull { limit: 4, pending: 5 },
                "prompt_queue_full",
                503,
                true,
                json!({"limit": 4, "pendingCount": 5}),
            ),
            (
                Refusal::PermissionAlreadyResolved { resolved_option_id: s("allow") },
                "permission_already_resolved",
                404,
                false,
                json!({"resolvedOptionId": "allow"}),
            ),
            (
                Refusal::InvalidOptionId { request_id: s("r1"), option_id: s("o9") },
                "invalid_option_id",
                400,
                false,
                json!({"requestId": "r1", "optionId": "o9"}),
            ),
            (
                Refusal::PermissionForbidden { reason: "designated" },
                "permission_forbidden",
                403,
                false,
                json!({"reason": "designated"}),
            ),
            (
                Refusal::from(VoteError::GroupRequired { rule_id: s("rule-1"), group: s("admins") }),
                "group_required",
                403,
                false,
                json!({"ruleId": "rule-1", "group": "admins"}),
            ),
            (
                Refusal::InvalidAnswer { field: s("color"), reason: s("not offered") },
                "invalid_answer",
                400,
                false,
                json!({"field": "color", "reason": "not offered"}),
            ),
            (
                Refusal::ResumeUnsupported { agent: s("qwen") },
                "resume_unsupported",
                409,
                false,
                json!({"agent": "qwen"}),
            ),
            (
                Refusal::SessionHeldElsewhere { session_id: s("s3"), node_url: s("https://b") },
                "session_held_elsewhere",
                409,
                false,
                json!({"sessionId": "s3", "nodeUrl": "https://b"}),
            ),
            (
                Refusal::UnknownAgent { agent: s("\"x\""), known: vec![s("qwen"), s("claude")] },
                "unknown_agent",
                400,
                false,
                json!({"agents": ["qwen", "claude"]}),
            ),
            (
                Refusal::InvalidMode { mode: s("\"x\""), available: vec![s("plan")] },
                "invalid_mode",
                400,
                false,
                json!({"availableModes": ["plan"]}),
            ),
            (
                Refusal::ClientIdMismatch { device_id: s("d1") },
                "client_id_mismatch",
                403,
                false,
                json!({"deviceId": "d1"}),
            ),
            (
                Refusal::StreamLimitExceeded { reason: s("too many"), scope: "device", limit: 3 },
                "stream_limit_exceeded",
                429,
                true,
                json!({"scope": "device", "limit": 3}),
            ),
            (
                Refusal::SessionBusy { session_id: s("s4") },
                "session_busy",
                409,
                true,
                json!({"errorKind": "session_busy", "retryable": true, "sessionId": "s4"}),
            ),
            (
                Refusal::InvalidRewindTarget { prompt_id: s("p1") },
                "invalid_rewind_target",
                400,
                false,
                json!({"promptId": "p1"}),
            ),
            (
                Refusal::RewindConflict { paths: vec![s("a.txt")] },
                "rewind_conflict",
                409,
                false,
                json!({"paths": ["a.txt"]}),
            ),
            (Refusal::TurnNotFound { turn: 9 }, "turn_not_found", 404, false, json!({"turnIndex": 9})),
            (Refusal::StoreUnavailable(s("no")), "store_unavailable", 503, true, json!({})),
            (Refusal::DaemonDraining, "daemon_draining", 503, true, json!({})),
            (
                Refusal::InitTimeout { method: "initialize", timeout_ms: 5 },
                "init_timeout",
                504,
                false,
                json!({}),
            ),
            (Refusal::AgentError(s("boom")), "agent_error", 502, false, json!({})),
            (Refusal::Internal, "internal_error", 500, false, json!({})),
            (Refusal::InvalidVote, "invalid_vote", 400, false, json!({})),
        ];
        for (refusal, code, status, retry, fields) in rows {
            assert_eq!(
                (
                    refusal.code(),
                    refusal.kind().status(),
                    refusal.retry_later(),
                    Value::Object(refusal.fields())
                ),
                (code, status, retry, fields),
                "{refusal:?}"
            );
        }
    }

    /// A file route's refusal keeps qwen serve's status and says its kind as `errorKind`.
    #[test]
    fn a_file_refusal_keeps_qwens_status_and_kind() {
        let all = FileError::all();
        assert_eq!(all.len(), 10, "every kind of file error");
        for f in all {
            let (kind, status) = (f.kind(), f.status());
            let r = Refusal::from(f);
            assert_eq!(
                (r.code(), r.kind().status(), Value::Object(r.fields())),
                (kind, status, json!({"errorKind": kind, "status": status})),
            );
        }
        assert!(Refusal::all().len() > 40, "every refusal is in the OpenAPI document's list");
    }

    #[test]
    fn a_timeout_on_initialize_asks_whether_it_is_an_acp_agent_and_an_unknown_mode_lists_the_modes() {
        let init = Refusal::InitTimeout { method: crate::acp::method::INITIALIZE, timeout_ms: 5 }.to_string();
        assert!(
            init.starts_with("The agent did not answer initialize within 5 ms: is it an ACP agent"),
            "{init}"
        );
        let load = Refusal::InitTimeout { method: "session/load", timeout_ms: 6 }.to_string();
        assert!(load.starts_with("The agent did not answer session/load within 6 ms: raise"), "{load}");
        let none = Refusal::InvalidMode { mode: s("\"x\""), available: Vec::new() }.to_string();
        assert_eq!(none, "Unknown mode \"x\": this session's agent announced no modes");
        let some =
            Refusal::InvalidMode { mode: s("\"x\""), available: vec![s("plan"), s("auto")] }.to_string();
        assert_eq!(some, "Unknown mode \"x\": this session's agent offers plan, auto");
    }

    fn s(t: &str) -> String {
        t.to_owned()
    }
}

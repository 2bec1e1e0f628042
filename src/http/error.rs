//! The one error type HTTP callers see: each variant has a status and a stable `code`, and renders
//! as `{"error": <human text>, "code": <code>, ...context}`. 5xx bodies carry no internals beyond
//! the agent's own JSON-RPC error message.
//!
//! Every domain error enum is mapped here, once, by a `From` impl; handlers just use `?`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::changes::FileError;
use crate::daemon::{CreateError, ResumeError, RewindError, SessionError};
use crate::devices::{PAIRING_FAILURE_WINDOW, PairError, RevokeError, StreamLimit};
use crate::permission::{RuleError, VoteError};

/// `Retry-After` for 503s caused by load (seconds).
pub const RETRY_AFTER_SECS: u64 = 5;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("Unauthorized")]
    Unauthorized,
    /// The request's `Origin`, when it is worth repeating (`null` or a well-formed origin).
    #[error("Request denied by CORS policy: {}", origin_hint(.0.as_deref()))]
    OriginDenied(Option<String>),
    #[error("Invalid Host header")]
    HostNotAllowed,
    #[error("A request needs exactly one Host header")]
    InvalidHost,
    #[error("Request body too large")]
    BodyTooLarge,
    #[error("Invalid JSON in request body")]
    InvalidJson,
    #[error("Not found")]
    RouteNotFound,
    /// `/assets/` names no file of this build of the web app (an old page asking for renamed files).
    #[error("No such file in this version of the web app")]
    AssetNotFound,
    #[error("Method not allowed")]
    MethodNotAllowed,
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
        "Invalid vote: expected {{\"outcome\":{{\"outcome\":\"selected\",\"optionId\":...}}}}, {{\"outcome\":{{\"outcome\":\"cancelled\"}}}} or {{\"decision\":\"allow|deny|allow-session|deny-session\"}}"
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
    #[error("Invalid rule: {0}")]
    InvalidRule(String),
    #[error("Rule not found")]
    RuleNotFound,
    #[error("The session shell needs a token to be configured")]
    TokenRequired,
    #[error("The session shell is disabled (start the daemon with --enable-session-shell)")]
    SessionShellDisabled,
    #[error("The session shell needs an X-Qwen-Client-Id header")]
    ClientIdRequired,
    #[error("command must be a non-empty string of at most 64 KiB")]
    InvalidCommand,
    #[error("Internal error")]
    Internal,
    #[error("Malformed HTTP request")]
    BadRequest,
    #[error("Request head too large (at most 64 KiB)")]
    HeadersTooLarge,
    #[error("Request target too long")]
    UriTooLong,
    #[error("The request head did not arrive in time")]
    HeaderTimeout,
    /// Plain http sent to the TLS listener; written before any handshake, as nginx's 497 is.
    #[error("This port speaks https: use https:// in the URL")]
    HttpsRequired,
    #[error("The request body did not arrive in time")]
    BodyTimeout,
    #[error("Too many request bodies are being received at once; retry later")]
    BodyBudgetExceeded,
    #[error("Invalid URL path: a segment is not UTF-8 once percent-decoded")]
    InvalidPath,
    #[error("Invalid query string: a parameter given twice, or not text once percent-decoded")]
    InvalidQuery,
    /// A query parameter with a value the route does not take; the text says which and why.
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
    #[error("This link was used, or its permission request was decided or expired")]
    LinkExpired,
    #[error("Too many unknown links from this address; retry later")]
    TooManyLinkAttempts,
    /// The link's notification could not show its whole request: only its page decides.
    #[error(
        "This request was too long to show in the notification: open the link in a browser to read it whole, and decide there (or in the web app)"
    )]
    LinkNeedsReview,
    #[error("This credential belongs to device {device_id}: it acts as that client id, and no other")]
    ClientIdMismatch { device_id: String },
    #[error("This device is an observer: it may read and subscribe, not change anything")]
    ReadOnlyDevice,
    #[error("Only the operator's token may do this, not a paired device")]
    OperatorRequired,
    #[error("Invalid or expired pairing code")]
    InvalidPairingCode,
    #[error("Too many failed pairing attempts from this address; retry later")]
    TooManyPairingAttempts,
    #[error("{0}")]
    PairingUnavailable(String),
    #[error("{0}")]
    InvalidDevice(String),
    #[error("No paired device has this id")]
    DeviceNotFound,
    #[error("This request needs an Acp-Connection-Id header: send initialize first (POST /acp)")]
    AcpConnectionRequired,
    #[error("No ACP connection has this Acp-Connection-Id (it ended, or another credential opened it)")]
    AcpConnectionNotFound,
    #[error("Too many ACP connections are open; retry later")]
    AcpConnectionLimit { limit: usize },
    #[error("Another stream is open for this connection (or session); close it first")]
    AcpStreamBusy,
    #[error("GET /acp needs Accept: text/event-stream, or a WebSocket upgrade")]
    NotAcceptable,
    #[error("POST /acp takes Content-Type: application/json")]
    UnsupportedMediaType,
    #[error("Send initialize first")]
    AcpNotInitialized,
    #[error("This connection is already initialized")]
    AcpAlreadyInitialized,
    #[error("Method not found: {0}")]
    AcpMethodNotFound(String),
    #[error("This connection has not attached session {session_id}: session/new or session/load first")]
    AcpSessionNotAttached { session_id: String },
    #[error("One ACP connection may attach at most {limit} sessions")]
    AcpTooManySessions { limit: usize },
    #[error("Too many requests of this connection are being served; wait for their answers")]
    AcpTooManyRequests { limit: usize },
    #[error("This connection acts as client id {client_id}; it cannot act as another")]
    ClientIdChanged { client_id: String },
    #[error("This session's agent announced no config options")]
    ConfigOptionsUnsupported,
    #[error("Not a JSON-RPC request, notification or response (ACP does not use batches)")]
    InvalidJsonRpc,
    /// An acknowledged write (`docs/operations.md#durability`) the state database did not take:
    /// nothing was changed. The text says what was not done.
    #[error("{0}")]
    StoreUnavailable(String),
    /// The fleet's daemon holding the session cannot be reached (`http/relay.rs`).
    #[error(
        "The daemon holding this session cannot be reached; retry, or replay its history once the fleet marks it lost"
    )]
    NodeUnavailable,
    /// A device's event stream past one of its bounds (`devices::StreamLimit`).
    #[error("Too many event streams: {reason}; close one first")]
    StreamLimitExceeded { reason: String, scope: &'static str, limit: usize },
    /// A file route refused (`docs/protocol.md` § 18.4): qwen serve's `errorKind` is the code.
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

/// What is wrong with a client id; all of them answer `400 invalid_client_id`, each with its own
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

/// What `origin_denied` tells a newcomer about the refused `Origin`.
fn origin_hint(origin: Option<&str>) -> String {
    match origin {
        Some("null") => "Origin null (a local file or a sandboxed page) is never allowed".to_owned(),
        Some(o) => {
            format!("origin {o} is not allowed; start mediatord with --allow-origin {o} to let its pages in")
        }
        None => {
            "this origin is not allowed; browser origins are let in with --allow-origin scheme://host[:port]"
                .to_owned()
        }
    }
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

impl ApiError {
    /// One instance of every variant, for the OpenAPI document (each code's status comes from here).
    pub fn all() -> Vec<ApiError> {
        let s = String::new;
        vec![
            ApiError::Unauthorized,
            ApiError::OriginDenied(None),
            ApiError::HostNotAllowed,
            ApiError::InvalidHost,
            ApiError::BodyTooLarge,
            ApiError::InvalidJson,
            ApiError::RouteNotFound,
            ApiError::AssetNotFound,
            ApiError::MethodNotAllowed,
            ApiError::InvalidClientId(ClientIdProblem::Malformed),
            ApiError::InvalidCwd,
            ApiError::WorkspaceMismatch { cwd: s(), accepted: Vec::new() },
            ApiError::InvalidSessionScope,
            ApiError::UnknownAgent { agent: s(), known: Vec::new() },
            ApiError::SessionLimitExceeded { limit: 0 },
            ApiError::InitTimeout { method: "", timeout_ms: 0 },
            ApiError::AgentStartFailed(s()),
            ApiError::DaemonDraining,
            ApiError::SessionNotFound { session_id: s() },
            ApiError::InvalidPrompt,
            ApiError::PromptQueueFull { limit: 0, pending: 0 },
            ApiError::AgentError(s()),
            ApiError::AgentExited(s()),
            ApiError::InvalidModelId,
            ApiError::InvalidMode { mode: s(), available: Vec::new() },
            ApiError::SubscriberLimitExceeded { limit: 0 },
            ApiError::InvalidVote,
            ApiError::PermissionRequestNotFound,
            ApiError::PermissionAlreadyResolved { resolved_option_id: s() },
            ApiError::InvalidOptionId { request_id: s(), option_id: s() },
            ApiError::PermissionForbidden { reason: "" },
            ApiError::InvalidRule(s()),
            ApiError::RuleNotFound,
            ApiError::TokenRequired,
            ApiError::SessionShellDisabled,
            ApiError::ClientIdRequired,
            ApiError::InvalidCommand,
            ApiError::Internal,
            ApiError::BadRequest,
            ApiError::HeadersTooLarge,
            ApiError::UriTooLong,
            ApiError::HeaderTimeout,
            ApiError::HttpsRequired,
            ApiError::BodyTimeout,
            ApiError::BodyBudgetExceeded,
            ApiError::InvalidPath,
            ApiError::InvalidQuery,
            ApiError::InvalidParameter(s()),
            ApiError::ResumeUnsupported { agent: s() },
            ApiError::SessionHeldElsewhere { session_id: s(), node_url: s() },
            ApiError::LinkExpired,
            ApiError::TooManyLinkAttempts,
            ApiError::LinkNeedsReview,
            ApiError::ClientIdMismatch { device_id: s() },
            ApiError::ReadOnlyDevice,
            ApiError::OperatorRequired,
            ApiError::InvalidPairingCode,
            ApiError::TooManyPairingAttempts,
            ApiError::PairingUnavailable(s()),
            ApiError::InvalidDevice(s()),
            ApiError::DeviceNotFound,
            ApiError::AcpConnectionRequired,
            ApiError::AcpConnectionNotFound,
            ApiError::AcpConnectionLimit { limit: 0 },
            ApiError::AcpStreamBusy,
            ApiError::NotAcceptable,
            ApiError::UnsupportedMediaType,
            ApiError::AcpNotInitialized,
            ApiError::AcpAlreadyInitialized,
            ApiError::AcpMethodNotFound(s()),
            ApiError::AcpSessionNotAttached { session_id: s() },
            ApiError::AcpTooManySessions { limit: 0 },
            ApiError::AcpTooManyRequests { limit: 0 },
            ApiError::ClientIdChanged { client_id: s() },
            ApiError::ConfigOptionsUnsupported,
            ApiError::InvalidJsonRpc,
            ApiError::StoreUnavailable(s()),
            ApiError::NodeUnavailable,
            ApiError::StreamLimitExceeded { reason: s(), scope: "", limit: 0 },
            ApiError::SessionBusy { session_id: s() },
            ApiError::InvalidRewindTarget { prompt_id: s() },
            ApiError::MissingPromptId,
            ApiError::InvalidRewindFlag(s()),
            ApiError::RewindConflict { paths: Vec::new() },
            ApiError::ChangesUnavailable(s()),
            ApiError::TurnNotFound { turn: 0 },
        ]
        .into_iter()
        .chain(FileError::all().into_iter().map(ApiError::File))
        .collect()
    }

    /// The variant whose [`code`](ApiError::code) is `code`.
    pub fn by_code(code: &str) -> Option<ApiError> {
        ApiError::all().into_iter().find(|e| e.code() == code)
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::File(f) => StatusCode::from_u16(f.status()).unwrap_or(StatusCode::BAD_REQUEST),
            Self::SessionBusy { .. } | Self::RewindConflict { .. } => StatusCode::CONFLICT,
            Self::InvalidRewindTarget { .. } | Self::MissingPromptId | Self::InvalidRewindFlag(_) => {
                StatusCode::BAD_REQUEST
            }
            Self::ChangesUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::TurnNotFound { .. } => StatusCode::NOT_FOUND,
            Self::Unauthorized | Self::TokenRequired | Self::InvalidPairingCode => StatusCode::UNAUTHORIZED,
            Self::ClientIdMismatch { .. } | Self::ReadOnlyDevice | Self::OperatorRequired => {
                StatusCode::FORBIDDEN
            }
            Self::PairingUnavailable(_) => StatusCode::CONFLICT,
            Self::InvalidDevice(_) => StatusCode::BAD_REQUEST,
            Self::DeviceNotFound
            | Self::AcpConnectionNotFound
            | Self::AcpMethodNotFound(_)
            | Self::AcpSessionNotAttached { .. } => StatusCode::NOT_FOUND,
            Self::AcpConnectionRequired
            | Self::AcpNotInitialized
            | Self::AcpAlreadyInitialized
            | Self::ClientIdChanged { .. }
            | Self::ConfigOptionsUnsupported
            | Self::InvalidJsonRpc => StatusCode::BAD_REQUEST,
            Self::AcpStreamBusy => StatusCode::CONFLICT,
            Self::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::AcpConnectionLimit { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::AcpTooManySessions { .. } | Self::AcpTooManyRequests { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Self::OriginDenied(_)
            | Self::HostNotAllowed
            | Self::PermissionForbidden { .. }
            | Self::SessionShellDisabled
            | Self::ClientIdRequired => StatusCode::FORBIDDEN,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::InvalidJson
            | Self::InvalidHost
            | Self::InvalidClientId(_)
            | Self::InvalidCwd
            | Self::WorkspaceMismatch { .. }
            | Self::InvalidSessionScope
            | Self::UnknownAgent { .. }
            | Self::InvalidPrompt
            | Self::InvalidModelId
            | Self::InvalidMode { .. }
            | Self::InvalidVote
            | Self::InvalidOptionId { .. }
            | Self::InvalidRule(_)
            | Self::InvalidCommand
            | Self::BadRequest
            | Self::InvalidPath
            | Self::InvalidQuery
            | Self::InvalidParameter(_)
            | Self::HttpsRequired => StatusCode::BAD_REQUEST,
            Self::ResumeUnsupported { .. } | Self::SessionHeldElsewhere { .. } => StatusCode::CONFLICT,
            Self::HeaderTimeout | Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::UriTooLong => StatusCode::URI_TOO_LONG,
            Self::RouteNotFound
            | Self::AssetNotFound
            | Self::SessionNotFound { .. }
            | Self::PermissionRequestNotFound
            | Self::PermissionAlreadyResolved { .. }
            | Self::RuleNotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::SessionLimitExceeded { .. }
            | Self::DaemonDraining
            | Self::PromptQueueFull { .. }
            | Self::AgentExited(_)
            | Self::BodyBudgetExceeded
            | Self::StoreUnavailable(_)
            | Self::NodeUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::InitTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::AgentStartFailed(_) | Self::AgentError(_) => StatusCode::BAD_GATEWAY,
            Self::SubscriberLimitExceeded { .. }
            | Self::StreamLimitExceeded { .. }
            | Self::TooManyLinkAttempts
            | Self::TooManyPairingAttempts => StatusCode::TOO_MANY_REQUESTS,
            Self::LinkExpired => StatusCode::GONE,
            Self::LinkNeedsReview => StatusCode::CONFLICT,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::File(f) => f.kind(),
            Self::SessionBusy { .. } => "session_busy",
            Self::InvalidRewindTarget { .. } => "invalid_rewind_target",
            Self::MissingPromptId => "missing_prompt_id",
            Self::InvalidRewindFlag(_) => "invalid_rewind_flag",
            Self::RewindConflict { .. } => "rewind_conflict",
            Self::ChangesUnavailable(_) => "changes_unavailable",
            Self::TurnNotFound { .. } => "turn_not_found",
            Self::Unauthorized => "unauthorized",
            Self::OriginDenied(_) => "origin_denied",
            Self::HostNotAllowed => "host_not_allowed",
            Self::InvalidHost => "invalid_host",
            Self::BodyTooLarge => "body_too_large",
            Self::InvalidJson => "invalid_json",
            Self::RouteNotFound => "route_not_found",
            Self::AssetNotFound => "asset_not_found",
            Self::MethodNotAllowed => "method_not_allowed",
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
            Self::InvalidRule(_) => "invalid_rule",
            Self::RuleNotFound => "rule_not_found",
            Self::TokenRequired => "token_required",
            Self::SessionShellDisabled => "session_shell_disabled",
            Self::ClientIdRequired => "client_id_required",
            Self::InvalidCommand => "invalid_command",
            Self::Internal => "internal_error",
            Self::BadRequest => "bad_request",
            Self::HeadersTooLarge => "headers_too_large",
            Self::UriTooLong => "uri_too_long",
            Self::HeaderTimeout => "header_timeout",
            Self::HttpsRequired => "https_required",
            Self::BodyTimeout => "body_timeout",
            Self::BodyBudgetExceeded => "body_budget_exceeded",
            Self::InvalidPath => "invalid_path",
            Self::InvalidQuery => "invalid_query",
            Self::InvalidParameter(_) => "invalid_parameter",
            Self::ResumeUnsupported { .. } => "resume_unsupported",
            Self::SessionHeldElsewhere { .. } => "session_held_elsewhere",
            Self::LinkExpired => "link_expired",
            Self::TooManyLinkAttempts => "too_many_link_attempts",
            Self::LinkNeedsReview => "link_needs_review",
            Self::ClientIdMismatch { .. } => "client_id_mismatch",
            Self::ReadOnlyDevice => "read_only_device",
            Self::OperatorRequired => "operator_required",
            Self::InvalidPairingCode => "invalid_pairing_code",
            Self::TooManyPairingAttempts => "too_many_pairing_attempts",
            Self::PairingUnavailable(_) => "pairing_unavailable",
            Self::InvalidDevice(_) => "invalid_device",
            Self::DeviceNotFound => "device_not_found",
            Self::AcpConnectionRequired => "acp_connection_required",
            Self::AcpConnectionNotFound => "acp_connection_not_found",
            Self::AcpConnectionLimit { .. } => "acp_connection_limit",
            Self::AcpStreamBusy => "acp_stream_busy",
            Self::NotAcceptable => "not_acceptable",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::AcpNotInitialized => "not_initialized",
            Self::AcpAlreadyInitialized => "already_initialized",
            Self::AcpMethodNotFound(_) => "method_not_found",
            Self::AcpSessionNotAttached { .. } => "session_not_attached",
            Self::AcpTooManySessions { .. } => "too_many_sessions",
            Self::AcpTooManyRequests { .. } => "too_many_requests",
            Self::ClientIdChanged { .. } => "client_id_changed",
            Self::ConfigOptionsUnsupported => "config_options_unsupported",
            Self::InvalidJsonRpc => "invalid_jsonrpc",
            Self::StoreUnavailable(_) => "store_unavailable",
            Self::NodeUnavailable => "node_unavailable",
            Self::StreamLimitExceeded { .. } => "stream_limit_exceeded",
        }
    }

    pub(super) fn body(&self) -> Value {
        // The 401 is identical for every cause and carries no code (`docs/protocol.md#2-http-perimeter`).
        if matches!(self, Self::Unauthorized) {
            return json!({"error": "Unauthorized"});
        }
        let mut body = json!({"error": self.to_string(), "code": self.code()});
        match self {
            Self::SessionLimitExceeded { limit }
            | Self::SubscriberLimitExceeded { limit }
            | Self::AcpConnectionLimit { limit }
            | Self::AcpTooManySessions { limit }
            | Self::AcpTooManyRequests { limit } => body["limit"] = json!(limit),
            Self::AcpSessionNotAttached { session_id } => body["sessionId"] = json!(session_id),
            Self::ClientIdChanged { client_id } => body["clientId"] = json!(client_id),
            Self::SessionNotFound { session_id } => body["sessionId"] = json!(session_id),
            Self::PromptQueueFull { limit, pending } => {
                body["limit"] = json!(limit);
                body["pendingCount"] = json!(pending);
            }
            Self::PermissionAlreadyResolved { resolved_option_id } => {
                body["resolvedOptionId"] = json!(resolved_option_id)
            }
            Self::InvalidOptionId { request_id, option_id } => {
                body["requestId"] = json!(request_id);
                body["optionId"] = json!(option_id);
            }
            Self::PermissionForbidden { reason } => body["reason"] = json!(reason),
            Self::ResumeUnsupported { agent } => body["agent"] = json!(agent),
            Self::SessionHeldElsewhere { session_id, node_url } => {
                body["sessionId"] = json!(session_id);
                body["nodeUrl"] = json!(node_url);
            }
            Self::UnknownAgent { known, .. } => body["agents"] = json!(known),
            Self::InvalidMode { available, .. } => body["availableModes"] = json!(available),
            Self::ClientIdMismatch { device_id } => body["deviceId"] = json!(device_id),
            Self::StreamLimitExceeded { scope, limit, .. } => {
                body["scope"] = json!(scope);
                body["limit"] = json!(limit);
            }
            // qwen serve's file errors say their kind as `errorKind` and their status, and
            // @qwen-code/sdk reads them so.
            Self::File(f) => {
                body["errorKind"] = json!(f.kind());
                body["status"] = json!(f.status());
            }
            Self::SessionBusy { session_id } => {
                body["errorKind"] = json!("session_busy");
                body["retryable"] = json!(true);
                body["sessionId"] = json!(session_id);
            }
            Self::InvalidRewindTarget { prompt_id } => body["promptId"] = json!(prompt_id),
            Self::RewindConflict { paths } => body["paths"] = json!(paths),
            Self::TurnNotFound { turn } => body["turnIndex"] = json!(turn),
            _ => {}
        }
        body
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        let headers = response.headers_mut();
        match self {
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::SessionLimitExceeded { .. }
            | ApiError::AcpConnectionLimit { .. }
            | ApiError::PromptQueueFull { .. }
            | ApiError::SubscriberLimitExceeded { .. }
            | ApiError::StreamLimitExceeded { .. }
            | ApiError::StoreUnavailable(_)
            | ApiError::NodeUnavailable
            | ApiError::TooManyLinkAttempts
            | ApiError::SessionBusy { .. }
            | ApiError::DaemonDraining => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
            }
            // The body was not read to its end: the connection cannot carry another request, and
            // must not keep reading a body nobody wants.
            ApiError::BodyBudgetExceeded => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            ApiError::BodyTooLarge | ApiError::BodyTimeout => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            ApiError::OriginDenied(_) => {
                headers.insert(header::VARY, HeaderValue::from_static("Origin"));
            }
            // A throttled address waits out its whole window; telling it less only earns more 429s.
            ApiError::TooManyPairingAttempts => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(PAIRING_FAILURE_WINDOW.as_secs()));
            }
            _ => {}
        }
        response
    }
}

impl ApiError {
    /// The whole HTTP/1.1 response, for the connection layer to write itself where no handler
    /// runs (a request hyper could not parse, a head that did not arrive in time). It closes the
    /// connection.
    pub(super) fn raw_response(&self) -> Vec<u8> {
        let body = self.body().to_string();
        let status = self.status();
        let mut out = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or("Error"),
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body.as_bytes());
        out
    }
}

impl From<PairError> for ApiError {
    fn from(e: PairError) -> ApiError {
        match e {
            PairError::InvalidCode => ApiError::InvalidPairingCode,
            PairError::Throttled => ApiError::TooManyPairingAttempts,
            PairError::TooManyCodes | PairError::TooManyDevices => {
                ApiError::PairingUnavailable(e.to_string())
            }
            PairError::InvalidName => ApiError::InvalidDevice(e.to_string()),
            PairError::NoRandomness => ApiError::Internal,
            PairError::Store(e) => {
                ApiError::store_unavailable("The device was not paired (the code still works)", &e)
            }
        }
    }
}

impl From<RevokeError> for ApiError {
    fn from(e: RevokeError) -> ApiError {
        match e {
            RevokeError::NotFound => ApiError::DeviceNotFound,
            RevokeError::Store(e) => {
                ApiError::store_unavailable("The device was not revoked (it is still paired)", &e)
            }
        }
    }
}

impl From<StreamLimit> for ApiError {
    fn from(e: StreamLimit) -> ApiError {
        ApiError::StreamLimitExceeded { reason: e.to_string(), scope: e.scope(), limit: e.limit() }
    }
}

impl ApiError {
    /// `503 store_unavailable`: `what` was not done, because the state database did not take it.
    /// The store's own error is logged, not answered (it may name paths).
    pub fn store_unavailable(what: &str, e: &crate::store::WriteError) -> ApiError {
        tracing::error!(error = %e, "{what}: the state database did not take the write");
        ApiError::StoreUnavailable(format!(
            "{what}: the state database did not take the write (busy, full or failing); retry later"
        ))
    }
}

impl From<CreateError> for ApiError {
    fn from(e: CreateError) -> ApiError {
        match e {
            CreateError::Draining => ApiError::DaemonDraining,
            CreateError::InvalidCwd => ApiError::InvalidCwd,
            CreateError::WorkspaceMismatch { cwd, accepted } => ApiError::WorkspaceMismatch {
                cwd: cwd.display().to_string(),
                accepted: accepted.iter().map(|w| w.display().to_string()).collect(),
            },
            CreateError::UnknownAgent { name, known } => {
                ApiError::UnknownAgent { agent: format!("{name:?}"), known }
            }
            CreateError::LimitReached { limit } => ApiError::SessionLimitExceeded { limit },
            CreateError::InitTimeout { method, timeout } => {
                ApiError::InitTimeout { method, timeout_ms: timeout.as_millis() as u64 }
            }
            CreateError::AgentStartFailed(m) => ApiError::AgentStartFailed(m),
            CreateError::AgentError(m) => ApiError::AgentError(m),
            CreateError::Internal => ApiError::Internal,
        }
    }
}

impl From<FileError> for ApiError {
    fn from(e: FileError) -> ApiError {
        ApiError::File(e)
    }
}

impl From<RewindError> for ApiError {
    fn from(e: RewindError) -> ApiError {
        match e {
            RewindError::Busy => ApiError::SessionBusy { session_id: String::new() },
            RewindError::UnknownPrompt(prompt_id) => ApiError::InvalidRewindTarget { prompt_id },
            RewindError::Conflict(paths) => ApiError::RewindConflict { paths },
            RewindError::Unavailable(m) => ApiError::ChangesUnavailable(m),
        }
    }
}

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> ApiError {
        match e {
            SessionError::NotFound { session_id } => ApiError::SessionNotFound { session_id },
            SessionError::QueueFull { limit, pending } => ApiError::PromptQueueFull { limit, pending },
            SessionError::SubscriberLimit { limit } => ApiError::SubscriberLimitExceeded { limit },
            SessionError::Agent(m) => ApiError::AgentError(m),
            SessionError::AgentExited(m) => ApiError::AgentExited(m),
            SessionError::Draining => ApiError::DaemonDraining,
            SessionError::InvalidMode { mode_id, available } => {
                ApiError::InvalidMode { mode: format!("{mode_id:?}"), available }
            }
            SessionError::Store(m) => ApiError::StoreUnavailable(m),
        }
    }
}

impl From<VoteError> for ApiError {
    fn from(e: VoteError) -> ApiError {
        match e {
            VoteError::NotFound => ApiError::PermissionRequestNotFound,
            VoteError::AlreadyResolved { resolved_option_id } => {
                ApiError::PermissionAlreadyResolved { resolved_option_id }
            }
            VoteError::UnknownClient => ApiError::InvalidClientId(ClientIdProblem::Unregistered),
            VoteError::InvalidOption { request_id, option_id } => {
                ApiError::InvalidOptionId { request_id, option_id }
            }
            VoteError::Forbidden(reason) => ApiError::PermissionForbidden { reason: reason.as_str() },
        }
    }
}

impl From<RuleError> for ApiError {
    fn from(e: RuleError) -> ApiError {
        match e {
            RuleError::Invalid(reason) => ApiError::InvalidRule(reason),
            RuleError::NotFound => ApiError::RuleNotFound,
            RuleError::Store(e) => ApiError::store_unavailable("The workspace rule was not changed", &e),
        }
    }
}

/// The router's fallback: no route has this path.
pub(super) async fn not_found() -> ApiError {
    ApiError::RouteNotFound
}

/// The router's fallback: the path exists, the method does not.
pub(super) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

impl From<ResumeError> for ApiError {
    fn from(e: ResumeError) -> ApiError {
        match e {
            ResumeError::NotFound { session_id } => ApiError::SessionNotFound { session_id },
            ResumeError::Unsupported { agent } => ApiError::ResumeUnsupported { agent },
            ResumeError::HeldElsewhere { session_id, node_url } => {
                ApiError::SessionHeldElsewhere { session_id, node_url }
            }
            ResumeError::Create(e) => e.into(),
            ResumeError::Store(e) => {
                tracing::error!(error = %e, "resume: the history could not be read");
                ApiError::Internal
            }
        }
    }
}

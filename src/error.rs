//! The one error type HTTP callers see: each variant has a status and a stable `code`, and renders
//! as `{"error": <human text>, "code": <code>, ...context}`. 5xx bodies carry no internals beyond
//! the agent's own JSON-RPC error message.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// `Retry-After` for 503s caused by load (seconds).
pub const RETRY_AFTER_SECS: u64 = 5;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("Unauthorized")]
    Unauthorized,
    #[error("Request denied by CORS policy")]
    OriginDenied,
    #[error("Invalid Host header")]
    HostNotAllowed,
    #[error("Request body too large")]
    BodyTooLarge,
    #[error("Invalid JSON in request body")]
    InvalidJson,
    #[error("Not found")]
    RouteNotFound,
    #[error("Method not allowed")]
    MethodNotAllowed,
    #[error("Invalid client id: expected 1-128 characters of A-Z a-z 0-9 . _ : -")]
    InvalidClientId,
    #[error("cwd must be an absolute path to an existing directory")]
    InvalidCwd,
    #[error("cwd is not one of the daemon's workspaces")]
    WorkspaceMismatch,
    #[error("sessionScope must be \"single\" or \"thread\"")]
    InvalidSessionScope,
    #[error("Session limit reached")]
    SessionLimitExceeded { limit: usize },
    #[error("The agent did not finish starting in time")]
    InitTimeout,
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
}

impl ApiError {
    /// One instance of every variant, for the OpenAPI document (each code's status comes from here).
    pub fn all() -> Vec<ApiError> {
        use ApiError::*;
        let s = String::new;
        vec![
            Unauthorized,
            OriginDenied,
            HostNotAllowed,
            BodyTooLarge,
            InvalidJson,
            RouteNotFound,
            MethodNotAllowed,
            InvalidClientId,
            InvalidCwd,
            WorkspaceMismatch,
            InvalidSessionScope,
            SessionLimitExceeded { limit: 0 },
            InitTimeout,
            AgentStartFailed(s()),
            DaemonDraining,
            SessionNotFound { session_id: s() },
            InvalidPrompt,
            PromptQueueFull { limit: 0, pending: 0 },
            AgentError(s()),
            AgentExited(s()),
            InvalidModelId,
            SubscriberLimitExceeded { limit: 0 },
            InvalidVote,
            PermissionRequestNotFound,
            PermissionAlreadyResolved { resolved_option_id: s() },
            InvalidOptionId { request_id: s(), option_id: s() },
            PermissionForbidden { reason: "" },
            InvalidRule(s()),
            RuleNotFound,
            TokenRequired,
            SessionShellDisabled,
            ClientIdRequired,
            InvalidCommand,
            Internal,
        ]
    }

    /// The variant whose [`code`](ApiError::code) is `code`.
    pub fn by_code(code: &str) -> Option<ApiError> {
        ApiError::all().into_iter().find(|e| e.code() == code)
    }

    pub fn status(&self) -> StatusCode {
        use ApiError::*;
        match self {
            Unauthorized | TokenRequired => StatusCode::UNAUTHORIZED,
            OriginDenied
            | HostNotAllowed
            | PermissionForbidden { .. }
            | SessionShellDisabled
            | ClientIdRequired => StatusCode::FORBIDDEN,
            BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            InvalidJson
            | InvalidClientId
            | InvalidCwd
            | WorkspaceMismatch
            | InvalidSessionScope
            | InvalidPrompt
            | InvalidModelId
            | InvalidVote
            | InvalidOptionId { .. }
            | InvalidRule(_)
            | InvalidCommand => StatusCode::BAD_REQUEST,
            RouteNotFound
            | SessionNotFound { .. }
            | PermissionRequestNotFound
            | PermissionAlreadyResolved { .. }
            | RuleNotFound => StatusCode::NOT_FOUND,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            SessionLimitExceeded { .. } | DaemonDraining | PromptQueueFull { .. } | AgentExited(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            InitTimeout => StatusCode::GATEWAY_TIMEOUT,
            AgentStartFailed(_) | AgentError(_) => StatusCode::BAD_GATEWAY,
            SubscriberLimitExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            Unauthorized => "unauthorized",
            OriginDenied => "origin_denied",
            HostNotAllowed => "host_not_allowed",
            BodyTooLarge => "body_too_large",
            InvalidJson => "invalid_json",
            RouteNotFound => "route_not_found",
            MethodNotAllowed => "method_not_allowed",
            InvalidClientId => "invalid_client_id",
            InvalidCwd => "invalid_cwd",
            WorkspaceMismatch => "workspace_mismatch",
            InvalidSessionScope => "invalid_session_scope",
            SessionLimitExceeded { .. } => "session_limit_exceeded",
            InitTimeout => "init_timeout",
            AgentStartFailed(_) => "agent_start_failed",
            DaemonDraining => "daemon_draining",
            SessionNotFound { .. } => "session_not_found",
            InvalidPrompt => "invalid_prompt",
            PromptQueueFull { .. } => "prompt_queue_full",
            AgentError(_) => "agent_error",
            AgentExited(_) => "agent_exited",
            InvalidModelId => "invalid_model_id",
            SubscriberLimitExceeded { .. } => "subscriber_limit_exceeded",
            InvalidVote => "invalid_vote",
            PermissionRequestNotFound => "permission_request_not_found",
            PermissionAlreadyResolved { .. } => "permission_already_resolved",
            InvalidOptionId { .. } => "invalid_option_id",
            PermissionForbidden { .. } => "permission_forbidden",
            InvalidRule(_) => "invalid_rule",
            RuleNotFound => "rule_not_found",
            TokenRequired => "token_required",
            SessionShellDisabled => "session_shell_disabled",
            ClientIdRequired => "client_id_required",
            InvalidCommand => "invalid_command",
            Internal => "internal_error",
        }
    }

    fn body(&self) -> Value {
        use ApiError::*;
        // The 401 is identical for every cause and carries no code (SPEC §2).
        if matches!(self, Unauthorized) {
            return json!({"error": "Unauthorized"});
        }
        let mut body = json!({"error": self.to_string(), "code": self.code()});
        match self {
            SessionLimitExceeded { limit } | SubscriberLimitExceeded { limit } => {
                body["limit"] = json!(limit)
            }
            SessionNotFound { session_id } => body["sessionId"] = json!(session_id),
            PromptQueueFull { limit, pending } => {
                body["limit"] = json!(limit);
                body["pendingCount"] = json!(pending);
            }
            PermissionAlreadyResolved { resolved_option_id } => {
                body["resolvedOptionId"] = json!(resolved_option_id)
            }
            InvalidOptionId { request_id, option_id } => {
                body["requestId"] = json!(request_id);
                body["optionId"] = json!(option_id);
            }
            PermissionForbidden { reason } => body["reason"] = json!(reason),
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
            | ApiError::PromptQueueFull { .. }
            | ApiError::SubscriberLimitExceeded { .. }
            | ApiError::DaemonDraining => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
            }
            ApiError::OriginDenied => {
                headers.insert(header::VARY, HeaderValue::from_static("Origin"));
            }
            _ => {}
        }
        response
    }
}

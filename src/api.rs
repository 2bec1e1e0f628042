//! The route table: ONE list that expands into both the axum [`router`] and the [`OPERATIONS`] the
//! OpenAPI document ([`crate::openapi`]) is built from, so the two cannot drift apart.
//!
//! Each row is `method "axum path" => handler, Operation`. The operation names its request and
//! response schemas (components in `openapi.rs`) and the error codes the handler can answer; each
//! code's status comes from [`crate::error::ApiError`] itself.

use axum::Router;

use crate::routes::{self, AppState};

/// What a success response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// `application/json` with this component schema.
    Json(&'static str),
    /// No body (204).
    Empty,
    /// `text/event-stream` (SPEC §5).
    EventStream,
    /// The Prometheus / OpenMetrics text exposition.
    Metrics,
}

/// Request headers an operation reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// `X-Qwen-Client-Id` (alias `X-Client-Id`).
    ClientId,
    /// `Prefer: respond-async`.
    Prefer,
    /// `Last-Event-ID` for resuming a stream.
    LastEventId,
}

/// One documented operation.
#[derive(Debug, Clone, Copy)]
pub struct Operation {
    /// Lowercase HTTP method, as in the row (`get`, `post`, `delete`).
    pub method: &'static str,
    /// The axum route pattern.
    pub route: &'static str,
    /// The OpenAPI path when it differs from `route` (a wildcard).
    pub doc_path: Option<&'static str>,
    pub id: &'static str,
    pub tag: &'static str,
    pub summary: &'static str,
    /// Request body component schema, if the operation takes a JSON body.
    pub body: Option<&'static str>,
    pub ok: &'static [(u16, Body)],
    /// Error codes beyond the perimeter's (and `body_too_large` for operations with a body).
    pub errors: &'static [&'static str],
    /// Query flags (`?deep=1`), each with its description.
    pub query: &'static [(&'static str, &'static str)],
    pub headers: &'static [Header],
}

impl Operation {
    pub const fn new(id: &'static str, tag: &'static str, summary: &'static str) -> Operation {
        Operation {
            method: "",
            route: "",
            doc_path: None,
            id,
            tag,
            summary,
            body: None,
            ok: &[(200, Body::Json("Object"))],
            errors: &[],
            query: &[],
            headers: &[],
        }
    }
    pub const fn body(self, schema: &'static str) -> Operation {
        Operation { body: Some(schema), ..self }
    }
    pub const fn ok(self, ok: &'static [(u16, Body)]) -> Operation {
        Operation { ok, ..self }
    }
    pub const fn errors(self, errors: &'static [&'static str]) -> Operation {
        Operation { errors, ..self }
    }
    pub const fn query(self, query: &'static [(&'static str, &'static str)]) -> Operation {
        Operation { query, ..self }
    }
    pub const fn headers(self, headers: &'static [Header]) -> Operation {
        Operation { headers, ..self }
    }
    pub const fn doc_path(self, path: &'static str) -> Operation {
        Operation { doc_path: Some(path), ..self }
    }
    /// The path as documented.
    pub fn path(&self) -> &'static str {
        self.doc_path.unwrap_or(self.route)
    }
}

macro_rules! api {
    ($($method:ident $route:literal => $handler:path, $op:expr;)*) => {
        /// Every route of the daemon (state still to be supplied).
        pub fn router() -> Router<AppState> {
            Router::new()$(.route($route, axum::routing::$method($handler)))*
        }

        /// Every operation [`router`] serves, in table order.
        pub const OPERATIONS: &[Operation] =
            &[$(Operation { method: stringify!($method), route: $route, ..$op }),*];
    };
}

use Body::{EventStream, Json};
use Header::{ClientId, LastEventId, Prefer};

const NO_CONTENT: &[(u16, Body)] = &[(204, Body::Empty)];
const SESSION: &[&str] = &["session_not_found"];
const VOTE_ERRORS: &[&str] = &[
    "invalid_json",
    "invalid_vote",
    "invalid_client_id",
    "session_not_found",
    "permission_request_not_found",
    "permission_already_resolved",
    "invalid_option_id",
    "permission_forbidden",
];

api! {
    get "/health" => routes::health,
        Operation::new("health", "daemon", "Liveness; `?deep=1` adds the daemon's figures")
            .ok(&[(200, Json("Health"))])
            .query(&[("deep", "`1`, `true` or `yes` adds the figures")]);
    get "/capabilities" => routes::capabilities,
        Operation::new("capabilities", "daemon", "Feature tags, workspaces, policy and limits (SPEC §11)")
            .ok(&[(200, Json("Capabilities"))]);
    get "/metrics" => crate::routes::metrics,
        Operation::new("metrics", "daemon", "Prometheus metrics (OpenMetrics text)")
            .ok(&[(200, Body::Metrics)]);
    get "/openapi.json" => crate::routes::openapi,
        Operation::new("openapi", "daemon", "This OpenAPI 3.1 document").ok(&[(200, Json("Object"))]);
    post "/session" => routes::create_session,
        Operation::new("createSession", "sessions", "Create a session, or attach to the workspace's default one")
            .body("CreateSession")
            .ok(&[(200, Json("SessionCreated"))])
            .headers(&[ClientId])
            .errors(&[
                "invalid_json", "invalid_client_id", "invalid_cwd", "workspace_mismatch", "invalid_session_scope",
                "invalid_model_id", "session_limit_exceeded", "init_timeout", "agent_start_failed",
                "agent_error", "daemon_draining",
            ]);
    get "/workspace/{*rest}" => routes::list_workspace_sessions,
        Operation::new("listWorkspaceSessions", "sessions", "Live sessions of a workspace (`cwd` URL-encoded)")
            .doc_path("/workspace/{cwd}/sessions")
            .ok(&[(200, Json("SessionList"))])
            .errors(&["invalid_cwd"]);
    get "/session/{id}" => routes::get_session,
        Operation::new("getSession", "sessions", "A session's status")
            .ok(&[(200, Json("SessionStatus"))])
            .errors(SESSION);
    delete "/session/{id}" => routes::delete_session,
        Operation::new("deleteSession", "sessions", "Close a session: cancels its turn and permissions")
            .ok(NO_CONTENT)
            .headers(&[ClientId])
            .errors(&["invalid_client_id", "session_not_found"]);
    get "/session/{id}/context" => routes::session_context,
        Operation::new("sessionContext", "sessions", "Models and modes the agent reported")
            .ok(&[(200, Json("SessionContext"))])
            .errors(SESSION);
    post "/session/{id}/prompt" => routes::prompt,
        Operation::new("prompt", "prompts", "Queue a prompt; blocking unless `Prefer: respond-async`")
            .body("PromptRequest")
            .ok(&[(200, Json("PromptResult")), (202, Json("PromptAccepted"))])
            .headers(&[ClientId, Prefer])
            .errors(&[
                "invalid_json", "session_not_found", "invalid_prompt", "invalid_client_id", "prompt_queue_full",
                "agent_error", "agent_exited", "daemon_draining",
            ]);
    post "/session/{id}/cancel" => routes::cancel,
        Operation::new("cancel", "prompts", "Cancel the running turn (the body is ignored)")
            .ok(NO_CONTENT)
            .errors(SESSION);
    post "/session/{id}/model" => routes::set_model,
        Operation::new("setModel", "sessions", "Switch the session's model; emits `model_switched`")
            .body("SetModel")
            .ok(&[(200, Json("Object"))])
            .errors(&["invalid_json", "session_not_found", "invalid_model_id", "agent_error", "agent_exited"]);
    get "/session/{id}/events" => routes::events,
        Operation::new("events", "events", "The session's event stream (SSE, SPEC §5)")
            .ok(&[(200, EventStream)])
            .headers(&[ClientId, LastEventId])
            .errors(&["session_not_found", "invalid_client_id", "subscriber_limit_exceeded"]);
    post "/session/{id}/permission/{request_id}" => routes::vote,
        Operation::new("vote", "permissions", "Vote on a pending permission request (SPEC §8)")
            .body("Vote")
            .ok(&[(200, Json("Empty"))])
            .headers(&[ClientId])
            .errors(VOTE_ERRORS);
    post "/permission/{request_id}" => routes::legacy_vote,
        Operation::new("legacyVote", "permissions", "Vote, the session found from the request id")
            .body("Vote")
            .ok(&[(200, Json("Empty"))])
            .headers(&[ClientId])
            .errors(VOTE_ERRORS);
    get "/session/{id}/permissions" => routes::list_permissions,
        Operation::new("listPermissions", "permissions", "Pending permission requests; `?audit=1` adds decisions")
            .ok(&[(200, Json("PermissionList"))])
            .query(&[("audit", "`1`, `true` or `yes` adds the audit trail")])
            .errors(SESSION);
    post "/session/{id}/permission-rules" => routes::add_rule,
        Operation::new("addRule", "permissions", "Add a session permission rule")
            .body("RuleRequest")
            .ok(&[(201, Json("RuleCreated"))])
            .headers(&[ClientId])
            .errors(&["invalid_json", "session_not_found", "invalid_client_id", "invalid_rule"]);
    get "/session/{id}/permission-rules" => routes::list_rules,
        Operation::new("listRules", "permissions", "The session's permission rules")
            .ok(&[(200, Json("RuleList"))])
            .errors(SESSION);
    delete "/session/{id}/permission-rules/{rule_id}" => routes::delete_rule,
        Operation::new("deleteRule", "permissions", "Remove a permission rule")
            .ok(NO_CONTENT)
            .errors(&["session_not_found", "rule_not_found"]);
    post "/session/{id}/detach" => routes::detach,
        Operation::new("detach", "sessions", "The caller's client id leaves the session")
            .ok(NO_CONTENT)
            .headers(&[ClientId])
            .errors(&["session_not_found", "invalid_client_id"]);
    post "/session/{id}/heartbeat" => routes::heartbeat,
        Operation::new("heartbeat", "sessions", "Refresh the caller's last-seen time")
            .ok(&[(200, Json("Heartbeat"))])
            .headers(&[ClientId])
            .errors(&["session_not_found", "invalid_client_id"]);
    post "/session/{id}/shell" => crate::shell::run_shell,
        Operation::new("shell", "sessions", "Run a shell command in the workspace (SPEC §9; off by default)")
            .body("ShellCommand")
            .ok(&[(200, Json("ShellResult"))])
            .headers(&[ClientId])
            .errors(&[
                "token_required", "session_shell_disabled", "client_id_required", "invalid_client_id",
                "session_not_found", "invalid_command",
            ]);
}

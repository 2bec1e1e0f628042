//! The route table: ONE list that expands into both the axum [`router`] and the [`OPERATIONS`] the
//! OpenAPI document ([`super::openapi`]) is built from, so the two cannot drift apart.
//!
//! Each row is `method "axum path" => handler, Operation`. The operation names its request and
//! response schemas (components in `openapi.rs`) and the error codes the handler can answer; each
//! code's status comes from [`super::error::ApiError`] itself.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::extract::AppState;
use super::openapi::{self, Body, Header, Operation};
use super::{
    acp, act, changes, daemon, devices, events, history, permissions, prompts, sessions, shell, signin, web,
};

macro_rules! api {
    (
        $($method:ident $route:literal => $handler:path, $op:expr;)*
        @also $($dmethod:ident $droute:literal, $dop:expr;)*
    ) => {
        /// Every route of the daemon (state still to be supplied).
        pub fn router() -> Router<AppState> {
            Router::new()$(.route($route, axum::routing::$method($handler)))*
        }

        /// Every operation [`router`] serves, in table order; then the ones a catch-all row above
        /// also serves under another documented path.
        pub const OPERATIONS: &[Operation] = &[
            $(Operation { method: stringify!($method), route: $route, ..$op },)*
            $(Operation { method: stringify!($dmethod), route: $droute, ..$dop },)*
        ];
    };
}

use Body::{EventStream, Json};
use Header::{AcpConnectionId, AcpProtocolVersion, AcpSessionId, ClientId, LastEventId, Prefer};

/// This table's OpenAPI document (what `GET /openapi.json` serves).
pub fn document() -> Value {
    openapi::document(OPERATIONS)
}

/// [`document`] as the exact bytes of `docs/openapi.json`.
pub fn document_text() -> String {
    openapi::document_text(OPERATIONS)
}

/// `GET /openapi.json`.
async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], document_text()).into_response()
}

const NO_CONTENT: &[(u16, Body)] = &[(204, Body::Empty)];
/// The file routes' errors (qwen serve's `errorKind`s), and a named workspace's.
const FILE_READ: &[&str] = &[
    "parse_error",
    "path_outside_workspace",
    "path_not_found",
    "binary_file",
    "file_too_large",
    "hash_mismatch",
    "io_error",
    "invalid_query",
    "invalid_client_id",
    "changes_unavailable",
    "invalid_cwd",
    "workspace_mismatch",
];
const FILE_WRITE: &[&str] = &[
    "parse_error",
    "path_outside_workspace",
    "path_not_found",
    "binary_file",
    "file_too_large",
    "hash_mismatch",
    "file_already_exists",
    "text_not_found",
    "ambiguous_text_match",
    "io_error",
    "invalid_json",
    "invalid_client_id",
    "changes_unavailable",
    "invalid_cwd",
    "workspace_mismatch",
];
const DIFF: &[&str] = &[
    "parse_error",
    "path_outside_workspace",
    "invalid_query",
    "changes_unavailable",
    "invalid_cwd",
    "workspace_mismatch",
];
const PATH_Q: &[(&str, &str)] = &[("path", "a path relative to the workspace (or absolute under it)")];
const READ_Q: &[(&str, &str)] = &[
    ("path", "a path relative to the workspace (or absolute under it)"),
    ("maxBytes", "at most this many bytes of text, 1-262144"),
    ("line", "the first line, 1-based"),
    ("limit", "at most this many lines, 1-2000"),
    ("cursor", "the previous answer's `nextCursor` (excludes `line`)"),
];
const BYTES_Q: &[(&str, &str)] = &[
    ("path", "a path relative to the workspace (or absolute under it)"),
    ("offset", "the first byte, 0-based"),
    ("maxBytes", "at most this many bytes, 1-262144 (default 65536)"),
];
const LIST_Q: &[(&str, &str)] = &[
    ("path", "a folder relative to the workspace (or absolute under it); `.` for the workspace"),
    ("includeIgnored", "`1` or `true`: list what `.gitignore` excludes too (marked `ignored`)"),
];
const GLOB_Q: &[(&str, &str)] = &[
    ("pattern", "a glob relative to the workspace (`*` within a folder, `**` across); no `..`"),
    ("maxResults", "at most this many matches, 1-50000 (default 5000)"),
];
// The workspace routes a named workspace serves again (`/workspaces/{workspace}/…`): one operation
// each, which the named row renames.
const WORKSPACE_DIFF: Operation = Operation::new("workspaceGitDiff", "changes", "The workspace's changed files against git's HEAD (read from git's objects only: the index, refs and stash are never touched), or in a plain directory against the first snapshot of its newest session (docs/protocol.md §18)")
    .ok(&[(200, Json("WorkspaceDiff"))])
    .errors(DIFF);
const READ_FILE: Operation = Operation::new("readWorkspaceFile", "files", "A text file of the workspace: content, encoding, line ending, `sha256:` hash, paging (qwen serve's GET /file)")
    .ok(&[(200, Json("FileRead"))])
    .query(READ_Q)
    .headers(&[ClientId])
    .errors(FILE_READ);
const READ_FILE_BYTES: Operation = Operation::new(
    "readWorkspaceFileBytes",
    "files",
    "A window of a file's bytes, base64 (qwen serve's GET /file/bytes)",
)
.ok(&[(200, Json("FileBytes"))])
.query(BYTES_Q)
.headers(&[ClientId])
.errors(FILE_READ);
const FILE_STAT: Operation =
    Operation::new("fileStat", "files", "What is at a path, not following its last component")
        .ok(&[(200, Json("FileStat"))])
        .query(PATH_Q)
        .errors(FILE_READ);
const DIR_LIST: Operation = Operation::new("dirList", "files", "A folder's entries (at most 2000)")
    .ok(&[(200, Json("FileList"))])
    .query(LIST_Q)
    .errors(FILE_READ);
const GLOB: Operation =
    Operation::new("glob", "files", "The workspace's files matching a glob (.gitignore applied)")
        .ok(&[(200, Json("GlobResult"))])
        .query(GLOB_Q)
        .errors(FILE_READ);
const WRITE_FILE: Operation = Operation::new("writeWorkspaceFile", "files", "Create a file (201), or replace one whose `sha256:` hash is `expectedHash` (a stale hash: 409 `hash_mismatch`)")
    .body("FileWriteRequest")
    .ok(&[(200, Json("FileWritten")), (201, Json("FileWritten"))])
    .headers(&[ClientId])
    .errors(FILE_WRITE);
const EDIT_FILE: Operation = Operation::new(
    "editWorkspaceFile",
    "files",
    "Replace the one occurrence of `oldText` in a file whose hash is `expectedHash`",
)
.body("FileEditRequest")
.ok(&[(200, Json("FileWritten"))])
.headers(&[ClientId])
.errors(FILE_WRITE);
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
    "group_required",
    "store_unavailable",
];

api! {
    get "/" => web::root,
        Operation::new("root", "web", "The web app for a browser (`Accept: text/html`, no token needed); else what this is and where its API is described")
            .ok(&[(200, Body::Page("Root")), (304, Body::Empty)]);
    get "/assets/{file}" => web::asset,
        Operation::new("asset", "web", "A file of the web app by its content-hashed name (immutable; gzip or brotli by Accept-Encoding; no token needed)")
            .ok(&[(200, Body::Asset), (304, Body::Empty)])
            .errors(&["asset_not_found"]);
    get "/health" => daemon::health,
        Operation::new("health", "daemon", "Liveness; `?deep=1` adds the daemon's figures")
            .ok(&[(200, Json("Health"))])
            .query(&[("deep", "`1`, `true` or `yes` adds the figures")]);
    get "/capabilities" => daemon::capabilities,
        Operation::new("capabilities", "daemon", "Feature tags, workspaces, policy and limits (docs/protocol.md §11)")
            .ok(&[(200, Json("Capabilities"))]);
    get "/metrics" => daemon::metrics,
        Operation::new("metrics", "daemon", "Prometheus metrics (OpenMetrics text)")
            .ok(&[(200, Body::Metrics)]);
    get "/agents" => daemon::agents,
        Operation::new("agents", "daemon", "The configured agents: program, where they run, what `initialize` reported (docs/protocol.md §4.11)")
            .ok(&[(200, Json("AgentList"))]);
    get "/reviewers" => daemon::reviewers,
        Operation::new("reviewers", "daemon", "The configured reviewers and what each decided since the daemon started: allowed, denied, escalated, failures, overruled by a person, mean latency (docs/protocol.md §8.6)")
            .ok(&[(200, Json("ReviewerList"))]);
    get "/openapi.json" => openapi_json,
        Operation::new("openapi", "daemon", "This OpenAPI 3.1 document").ok(&[(200, Json("Object"))]);
    post "/session" => sessions::create_session,
        Operation::new("createSession", "sessions", "Create a session, or attach to the workspace's default one")
            .body("CreateSession")
            .ok(&[(200, Json("SessionCreated"))])
            .headers(&[ClientId])
            .errors(&[
                "invalid_json", "invalid_client_id", "invalid_cwd", "workspace_mismatch", "invalid_session_scope",
                "invalid_model_id", "unknown_agent", "session_limit_exceeded", "init_timeout", "agent_start_failed",
                "agent_error", "daemon_draining",
            ]);
    get "/workspace/{*rest}" => sessions::list_workspace_sessions,
        Operation::new("listWorkspaceSessions", "sessions", "Live sessions of a workspace (`cwd` URL-encoded); `?include=ended` adds the dormant and closed ones of the history")
            .doc_path("/workspace/{cwd}/sessions")
            .ok(&[(200, Json("SessionList"))])
            .query(&[("include", "`ended` adds the sessions that are not live (docs/protocol.md §14)")])
            .errors(&["invalid_cwd", "workspace_mismatch"]);
    post "/workspace/{*rest}" => history::workspace_post,
        Operation::new("addWorkspaceRule", "permissions", "Add a workspace permission rule: every session of the workspace, persisted (docs/protocol.md §7)")
            .doc_path("/workspace/{cwd}/permission-rules")
            .body("RuleRequest")
            .ok(&[(201, Json("WorkspaceRuleCreated"))])
            .headers(&[ClientId])
            .errors(&["invalid_json", "invalid_cwd", "workspace_mismatch", "invalid_client_id", "invalid_rule", "store_unavailable"]);
    delete "/workspace/{*rest}" => history::workspace_delete,
        Operation::new("deleteWorkspaceRule", "permissions", "Remove a workspace permission rule")
            .doc_path("/workspace/{cwd}/permission-rules/{ruleId}")
            .ok(NO_CONTENT)
            .errors(&["invalid_cwd", "workspace_mismatch", "rule_not_found", "store_unavailable"]);
    get "/audit" => history::audit,
        Operation::new("audit", "permissions", "The permission audit trail, newest first, with filters and cursor paging (docs/protocol.md §14)")
            .ok(&[(200, Body::AuditExport("AuditPage"))])
            .query(&[
                ("workspace", "a workspace (canonical path)"),
                ("sessionId", "a session id"),
                ("since", "requested at or after (ms since the Unix epoch)"),
                ("until", "requested before (ms since the Unix epoch)"),
                ("outcome", "`pending`, `selected`, `cancelled`, `timed_out`, `abandoned`, `unapproved`, `rewound`, `refused` or `deleted`"),
                ("cursor", "the previous page's `nextCursor`"),
                ("limit", "entries per page, 1-500 (default 50); in an export 1-5000 (default 5000)"),
                ("format", "`csv` or `json`: the entries as a download instead of a page"),
            ])
            .errors(&["invalid_query", "invalid_parameter"]);
    post "/session/{id}/resume" => history::resume,
        Operation::new("resumeSession", "sessions", "Bring a dormant session back on a fresh agent (ACP session/load), same id (docs/protocol.md §14)")
            .ok(&[(200, Json("SessionResumed"))])
            .errors(&[
                "session_not_found", "resume_unsupported", "invalid_cwd", "workspace_mismatch", "unknown_agent",
                "session_limit_exceeded", "init_timeout", "agent_start_failed", "daemon_draining",
                "session_held_elsewhere",
            ]);
    get "/session/{id}" => sessions::get_session,
        Operation::new("getSession", "sessions", "A session's status")
            .ok(&[(200, Json("SessionStatus"))])
            .errors(SESSION);
    delete "/session/{id}" => sessions::delete_session,
        Operation::new("deleteSession", "sessions", "Close a session: cancels its turn and permissions")
            .ok(NO_CONTENT)
            .headers(&[ClientId])
            .errors(&["invalid_client_id", "session_not_found"]);
    get "/session/{id}/context" => sessions::session_context,
        Operation::new("sessionContext", "sessions", "Models and modes the agent reported")
            .ok(&[(200, Json("SessionContext"))])
            .errors(SESSION);
    post "/session/{id}/prompt" => prompts::prompt,
        Operation::new("prompt", "prompts", "Queue a prompt; blocking unless `Prefer: respond-async`")
            .body("PromptRequest")
            .ok(&[(200, Json("PromptResult")), (202, Json("PromptAccepted"))])
            .headers(&[ClientId, Prefer])
            .errors(&[
                "invalid_json", "session_not_found", "invalid_prompt", "invalid_client_id", "prompt_queue_full",
                "agent_error", "agent_exited", "daemon_draining",
            ]);
    post "/session/{id}/cancel" => prompts::cancel,
        Operation::new("cancel", "prompts", "Cancel the running turn (the body is ignored)")
            .ok(NO_CONTENT)
            .errors(SESSION);
    post "/session/{id}/model" => sessions::set_model,
        Operation::new("setModel", "sessions", "Switch the session's model; emits `model_switched`")
            .body("SetModel")
            .ok(&[(200, Json("Object"))])
            .errors(&["invalid_json", "session_not_found", "invalid_model_id", "agent_error", "agent_exited"]);
    post "/session/{id}/mode" => sessions::set_mode,
        Operation::new("setMode", "sessions", "Switch the session's mode (ACP `session/set_mode`); emits `current_mode_update`")
            .body("SetMode")
            .ok(&[(200, Json("Object"))])
            .errors(&["invalid_json", "session_not_found", "invalid_mode", "agent_error", "agent_exited"]);
    get "/session/{id}/events" => events::events,
        Operation::new("events", "events", "The session's event stream (SSE, docs/protocol.md §5)")
            .ok(&[(200, EventStream)])
            .headers(&[ClientId, LastEventId])
            .errors(&["session_not_found", "invalid_client_id", "subscriber_limit_exceeded", "stream_limit_exceeded"]);
    post "/session/{id}/permission/{request_id}" => permissions::vote,
        Operation::new("vote", "permissions", "Vote on a pending permission request (docs/protocol.md §8)")
            .body("Vote")
            .ok(&[(200, Json("Empty"))])
            .headers(&[ClientId])
            .errors(VOTE_ERRORS);
    get "/session/{id}/permission/{request_id}" => permissions::presented,
        Operation::new("presentPermission", "permissions", "A pending permission request as a person reads it: every section the card shows, bounded unless `?all=1` (docs/protocol.md §3.15)")
            .ok(&[(200, Json("PresentedRequest"))])
            .query(&[("all", "`1`, `true` or `yes`: every line and character, nothing left out")])
            .errors(&["session_not_found", "permission_request_not_found"]);
    post "/permission/{request_id}" => permissions::legacy_vote,
        Operation::new("legacyVote", "permissions", "Vote, the session found from the request id")
            .body("Vote")
            .ok(&[(200, Json("Empty"))])
            .headers(&[ClientId])
            .errors(VOTE_ERRORS);
    get "/session/{id}/permissions" => permissions::list_permissions,
        Operation::new("listPermissions", "permissions", "Pending permission requests; `?audit=1` adds decisions")
            .ok(&[(200, Json("PermissionList"))])
            .query(&[("audit", "`1`, `true` or `yes` adds the audit trail")])
            .errors(SESSION);
    post "/session/{id}/permission-rules" => permissions::add_rule,
        Operation::new("addRule", "permissions", "Add a session permission rule")
            .body("RuleRequest")
            .ok(&[(201, Json("RuleCreated"))])
            .headers(&[ClientId])
            .errors(&["invalid_json", "session_not_found", "invalid_client_id", "invalid_rule"]);
    get "/session/{id}/permission-rules" => permissions::list_rules,
        Operation::new("listRules", "permissions", "The session's permission rules")
            .ok(&[(200, Json("RuleList"))])
            .errors(SESSION);
    delete "/session/{id}/permission-rules/{rule_id}" => permissions::delete_rule,
        Operation::new("deleteRule", "permissions", "Remove a permission rule")
            .ok(NO_CONTENT)
            .errors(&["session_not_found", "rule_not_found"]);
    post "/session/{id}/detach" => sessions::detach,
        Operation::new("detach", "sessions", "The caller's client id leaves the session")
            .ok(NO_CONTENT)
            .read()
            .headers(&[ClientId])
            .errors(&["session_not_found", "invalid_client_id"]);
    post "/session/{id}/heartbeat" => sessions::heartbeat,
        Operation::new("heartbeat", "sessions", "Refresh the caller's last-seen time")
            .ok(&[(200, Json("Heartbeat"))])
            .read()
            .headers(&[ClientId])
            .errors(&["session_not_found", "invalid_client_id"]);
    post "/session/{id}/shell" => shell::run_shell,
        Operation::new("shell", "sessions", "Run a shell command in the workspace (docs/protocol.md §9; off by default)")
            .body("ShellCommand")
            .ok(&[(200, Json("ShellResult"))])
            .headers(&[ClientId])
            .errors(&[
                "token_required", "session_shell_disabled", "client_id_required", "invalid_client_id",
                "session_not_found", "invalid_command",
            ]);
    get "/workspace/git/diff" => changes::workspace_diff,
        WORKSPACE_DIFF;
    get "/workspace/git/diff/file" => changes::workspace_diff_file,
        Operation::new("workspaceGitDiffFile", "changes", "One file's hunks in the workspace diff")
            .ok(&[(200, Json("WorkspaceDiffHunks"))])
            .query(&[("path", "the file, relative to the workspace"), ("oldPath", "accepted for qwen serve's clients; renames are not detected")])
            .errors(DIFF);
    get "/workspaces/{workspace}/git/diff" => changes::workspace_diff,
        WORKSPACE_DIFF.named("namedWorkspaceGitDiff", "The workspace diff of a workspace the daemon serves (its absolute path, URL-encoded)");
    get "/workspaces/{workspace}/git/diff/file" => changes::workspace_diff_file,
        Operation::new("namedWorkspaceGitDiffFile", "changes", "One file's hunks in a named workspace's diff")
            .ok(&[(200, Json("WorkspaceDiffHunks"))])
            .query(&[("path", "the file, relative to the workspace"), ("oldPath", "accepted; renames are not detected")])
            .errors(DIFF);
    get "/session/{id}/rewind/snapshots" => changes::rewind_snapshots,
        Operation::new("rewindSnapshots", "changes", "The session's turns with a change set: qwen serve's rewind snapshots (a live session's, or what the history kept of an ended one)")
            .ok(&[(200, Json("RewindSnapshots"))])
            .errors(&["session_not_found", "store_unavailable"]);
    post "/session/{id}/rewind" => changes::rewind,
        Operation::new("rewind", "changes", "Put the files the turns from `promptId`'s on changed back as they were before it: refused while a turn runs (409 `session_busy`) and, unless `force`, when one was changed since the agent changed it (409 `rewind_conflict`, naming them); audited with who did it; observers may not (docs/protocol.md §18.3)")
            .body("RewindRequest")
            .ok(&[(200, Json("RewindResult"))])
            .headers(&[ClientId])
            .errors(&[
                "invalid_json", "missing_prompt_id", "invalid_rewind_flag", "invalid_client_id", "session_not_found",
                "invalid_rewind_target", "session_busy", "rewind_conflict", "changes_unavailable",
            ]);
    get "/session/{id}/turns" => changes::turns,
        Operation::new("turns", "changes", "Every turn's change set of the session, each file marked `unapproved` or not, and its rewinds")
            .ok(&[(200, Json("TurnList"))])
            .errors(&["session_not_found", "store_unavailable"]);
    get "/session/{id}/turns/{turn}/diff" => changes::turn_diff,
        Operation::new("turnDiff", "changes", "A turn's diff: one file's hunks (`?path=`), or with `?format=unified` the unified diff (of the file, or of the whole turn) as text/x-diff")
            .ok(&[(200, Json("TurnDiff"))])
            .query(&[("path", "a file the turn changed"), ("format", "`json` (the default) or `unified`")])
            .errors(&[
                "session_not_found", "store_unavailable", "turn_not_found", "invalid_path", "invalid_query",
                "invalid_parameter", "path_outside_workspace", "changes_unavailable",
            ]);
    get "/file" => changes::file,
        READ_FILE;
    get "/file/bytes" => changes::file_bytes,
        READ_FILE_BYTES;
    get "/stat" => changes::file_stat,
        FILE_STAT;
    get "/list" => changes::file_list,
        DIR_LIST;
    get "/glob" => changes::file_glob,
        GLOB;
    post "/file/write" => changes::file_write,
        WRITE_FILE;
    post "/file/edit" => changes::file_edit,
        EDIT_FILE;
    get "/workspaces/{workspace}/file" => changes::file,
        READ_FILE.named("namedReadWorkspaceFile", "GET /file in a named workspace (its absolute path, URL-encoded)");
    get "/workspaces/{workspace}/file/bytes" => changes::file_bytes,
        READ_FILE_BYTES.named("namedReadWorkspaceFileBytes", "GET /file/bytes in a named workspace");
    get "/workspaces/{workspace}/stat" => changes::file_stat,
        FILE_STAT.named("namedFileStat", "GET /stat in a named workspace");
    get "/workspaces/{workspace}/list" => changes::file_list,
        DIR_LIST.named("namedDirList", "GET /list in a named workspace");
    get "/workspaces/{workspace}/glob" => changes::file_glob,
        GLOB.named("namedGlob", "GET /glob in a named workspace");
    post "/workspaces/{workspace}/file/write" => changes::file_write,
        WRITE_FILE.named("namedWriteWorkspaceFile", "POST /file/write in a named workspace");
    post "/workspaces/{workspace}/file/edit" => changes::file_edit,
        EDIT_FILE.named("namedEditWorkspaceFile", "POST /file/edit in a named workspace");
    get "/auth" => signin::offered,
        Operation::new("signInOffered", "people", "Whether people may sign in here with an OpenID provider, and which (no bearer token; docs/people.md)")
            .ok(&[(200, Json("SignInOffered"))])
            .no_auth();
    get "/auth/login" => signin::login,
        Operation::new("signInStart", "people", "Begin a sign-in: 302 to the OpenID provider, with a new state, nonce and PKCE challenge; with `terminal` (`mediatord login --browser`), the outcome goes to that loopback address instead of the web app (no bearer token; docs/people.md)")
            .ok(&[(302, Body::Empty)])
            .query(&[("terminal", "a terminal's loopback address (`http://127.0.0.1:PORT/...` or `http://[::1]:PORT/...`), sent `?code=<one-time code>` or `?error=<code>` when the sign-in ends"), ("name", "with `terminal`: the name of the device the sign-in pays for (default `terminal sign-in`)")])
            .no_auth()
            .errors(&["sign_in_not_configured", "invalid_terminal", "invalid_device"]);
    get "/auth/callback" => signin::callback,
        Operation::new("signInCallback", "people", "Where the provider sends the browser back: 302 to `<app>/#pair=<one-time code>` once the ID token and the person's claims passed every check, else to `<app>/#signin-error=<code>`; a terminal's sign-in to its address with `?code=` or `?error=` (no bearer token; docs/people.md)")
            .ok(&[(302, Body::Empty)])
            .query(&[("code", "the provider's authorization code"), ("state", "the sign-in's state"), ("error", "the provider's refusal"), ("iss", "the provider's issuer (RFC 9207)")])
            .no_auth()
            .errors(&["sign_in_not_configured"]);
    post "/auth/device" => signin::device_begin,
        Operation::new("signInDeviceStart", "people", "Begin a terminal's sign-in (`mediatord login`, the device authorization grant of RFC 8628): the provider's user code and page for the person, and `login`, the terminal's secret handle on it (no bearer token; docs/people.md)")
            .ok(&[(200, Json("DeviceSignIn"))])
            .no_auth()
            .errors(&["sign_in_not_configured", "provider_unavailable", "provider_refused", "no_device_flow"]);
    post "/auth/device/token" => signin::device_token,
        Operation::new("signInDeviceToken", "people", "Wait (up to 20 s) for a terminal's sign-in: 200 with a one-time code for `POST /devices/pair` once the person confirmed it and passed every check, 202 while they have not; the outcome is answered once (no bearer token: the login handle is the credential; docs/people.md)")
            .body("DeviceSignInPoll")
            .ok(&[(200, Json("DeviceSignedIn")), (202, Json("DeviceSignInPending"))])
            .no_auth()
            .errors(&[
                "invalid_json", "invalid_device", "sign_in_not_configured", "invalid_state", "sign_in_expired", "provider_unavailable",
                "provider_refused", "invalid_id_token", "not_allowed", "pairing_unavailable",
            ]);
    post "/auth/logout" => signin::logout,
        Operation::new("signOut", "people", "End the caller's sign-in (a person's device): refused from its next request on, its streams ended, on every daemon of a fleet; 204 for anyone else too (docs/people.md)")
            .ok(NO_CONTENT)
            .read()
            .errors(&["store_unavailable"]);
    get "/act/{token}" => act::confirm,
        Operation::new("confirmAction", "notifications", "A notification's action link: a confirmation page (no bearer token: the token is the credential; docs/notifications.md)")
            .ok(&[(200, Body::Html)])
            .no_auth()
            .errors(&["route_not_found", "link_expired", "too_many_link_attempts"]);
    post "/act/{token}" => act::act,
        Operation::new("act", "notifications", "Cast a notification link's vote, as its target's clientId (no bearer token; single use)")
            .ok(&[(200, Json("ActionDone"))])
            .no_auth()
            .errors(&[
                "route_not_found", "link_expired", "too_many_link_attempts", "link_needs_review",
                "invalid_client_id", "permission_forbidden", "group_required", "invalid_option_id",
            ]);
    post "/devices/pairing" => devices::create_pairing,
        Operation::new("createPairing", "devices", "A one-time code pairing a device, with its URL (`<public-url>/#pair=<code>`) and that URL as a QR code: the operator's token pairs any device; a signed-in person another device of theirs, with their role (docs/protocol.md §15)")
            .body("PairingRequest")
            .ok(&[(200, Json("Pairing"))])
            .errors(&["invalid_json", "invalid_device", "pairing_unavailable", "operator_required"]);
    post "/devices/pair" => devices::pair,
        Operation::new("pair", "devices", "Exchange a pairing code for a device credential (in the body only, never a cookie); no token: the code is the credential")
            .body("PairRequest")
            .ok(&[(200, Json("Paired"))])
            .no_auth()
            .errors(&["invalid_json", "invalid_device", "invalid_pairing_code", "too_many_pairing_attempts", "pairing_unavailable", "store_unavailable"]);
    get "/devices" => devices::list,
        Operation::new("listDevices", "devices", "The paired devices (operator token only)")
            .ok(&[(200, Json("DeviceList"))])
            .operator();
    delete "/devices/{id}" => devices::revoke,
        Operation::new("revokeDevice", "devices", "Revoke a device: 401 on its next request, its event streams end at once (operator token only)")
            .ok(NO_CONTENT)
            .operator()
            .errors(&["device_not_found", "store_unavailable"]);
    get "/acp" => acp::get,
        Operation::new("acpStream", "acp", "ACP over WebSocket (`Upgrade: websocket`: `101 Switching Protocols` with `Acp-Connection-Id`, then one JSON-RPC message per text frame), or with `Accept: text/event-stream` a Streamable HTTP connection's stream (`Acp-Connection-Id`), or a session's (`Acp-Session-Id`, resumable with `Last-Event-ID`) (docs/protocol.md §16)")
            .ok(&[(200, EventStream)])
            .read()
            .headers(&[ClientId, LastEventId, AcpConnectionId, AcpSessionId, AcpProtocolVersion])
            .errors(&[
                "not_acceptable", "invalid_client_id", "acp_connection_required", "acp_connection_not_found",
                "acp_connection_limit", "acp_stream_busy", "session_not_attached", "stream_limit_exceeded",
                "session_not_found", "read_only_device", "session_held_elsewhere", "too_many_sessions",
                "unsupported_protocol_version",
            ]);
    post "/acp" => acp::post,
        Operation::new("acpMessage", "acp", "One JSON-RPC message to the daemon as an ACP agent: `initialize` (no `Acp-Connection-Id`) answers 200 with its result and the connection's `Acp-Connection-Id`; any other message names its connection and is accepted (202), its answer arriving on a stream (docs/protocol.md §16)")
            .body("JsonRpcMessage")
            .ok(&[(200, Json("JsonRpcResponse")), (202, Body::Empty)])
            .read()
            .headers(&[ClientId, AcpConnectionId, AcpSessionId, AcpProtocolVersion])
            .errors(&[
                "unsupported_media_type", "invalid_json", "invalid_jsonrpc", "invalid_client_id",
                "acp_connection_required", "acp_connection_not_found", "acp_connection_limit", "already_initialized",
                "unsupported_protocol_version", "batch_not_supported",
            ]);
    delete "/acp" => acp::delete,
        Operation::new("acpClose", "acp", "End the Streamable HTTP connection named in `Acp-Connection-Id` (docs/protocol.md §16)")
            .ok(&[(202, Body::Empty)])
            .read()
            .headers(&[AcpConnectionId, AcpProtocolVersion])
            .errors(&["acp_connection_required", "acp_connection_not_found", "unsupported_protocol_version"]);
    // Served by the catch-all row above, documented under its own path.
    @also
    get "/workspace/{*rest}",
        Operation::new("listWorkspaceRules", "permissions", "A workspace's permission rules (docs/protocol.md §7)")
            .doc_path("/workspace/{cwd}/permission-rules")
            .ok(&[(200, Json("WorkspaceRuleList"))])
            .errors(&["invalid_cwd", "workspace_mismatch"]);
}

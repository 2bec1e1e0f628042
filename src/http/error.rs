//! The one error type HTTP callers see: each variant has a status and a stable `code`, and renders
//! as `{"error": <human text>, "code": <code>, ...context}`. 5xx bodies carry no internals beyond
//! the agent's own JSON-RPC error message.
//!
//! The desk's refusals ([`Refusal`], which maps every domain error once) and the ACP door's own
//! failures are rendered here from their kind; the rest are the HTTP floor's own (the perimeter,
//! bodies, links, pairing). Handlers just use `?`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::changes::FileError;
use crate::daemon::{CreateError, ResumeError, RewindError, SessionError};
pub use crate::desk::ClientIdProblem;
use crate::desk::{Kind, Refusal};
use crate::devices::{PAIRING_FAILURE_WINDOW, PairError, RevokeError, StreamLimit};
use crate::door::Failure;
use crate::permission::{RuleError, VoteError};

/// What a route handler returns: its response, or the error rendered as one.
pub type ApiResult = Result<Response, ApiError>;

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
    /// `/auth/login` or `/auth/callback` on a daemon without `--oidc-issuer`.
    #[error(
        "This daemon has no sign-in provider: start it with --oidc-issuer and --oidc-client-id (docs/people.md)"
    )]
    SignInNotConfigured,
    /// A terminal's sign-in (`/auth/device`) that failed, or is no longer waiting.
    #[error("{}", .0.message())]
    SignIn(crate::oidc::SignInError),
    #[error("Method not allowed")]
    MethodNotAllowed,
    #[error("The session shell needs a token to be configured")]
    TokenRequired,
    #[error("The session shell is disabled (start the daemon with --enable-session-shell)")]
    SessionShellDisabled,
    #[error("The session shell needs an X-Qwen-Client-Id header")]
    ClientIdRequired,
    #[error("command must be a non-empty string of at most 64 KiB")]
    InvalidCommand,
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
    #[error("This link was used, or its permission request was decided or expired")]
    LinkExpired,
    #[error("Too many unknown links from this address; retry later")]
    TooManyLinkAttempts,
    /// The link's notification could not show its whole request: only its page decides.
    #[error(
        "This request was too long to show in the notification: open the link in a browser to read it whole, and decide there (or in the web app)"
    )]
    LinkNeedsReview,
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
    #[error("Another stream is open for this connection (or session); close it first")]
    AcpStreamBusy,
    #[error("GET /acp needs Accept: text/event-stream, or a WebSocket upgrade")]
    NotAcceptable,
    #[error("POST /acp takes Content-Type: application/json")]
    UnsupportedMediaType,
    #[error("Not a JSON-RPC request, notification or response")]
    InvalidJsonRpc,
    /// A JSON-RPC batch on Streamable HTTP: the transport RFD answers it `501`.
    #[error(
        "JSON-RPC batches are not supported on ACP's Streamable HTTP transport: send one message per POST"
    )]
    BatchNotSupported,
    /// `Acp-Protocol-Version` names a version other than the one `initialize` negotiated.
    #[error("Acp-Protocol-Version {0:?} is not this connection's ACP version: the daemon speaks version 1")]
    UnsupportedProtocolVersion(String),
    /// `--max-connections` are taken: an HTTP/2 stream past them (a connection past them is
    /// answered before any request is read, `super::listener`).
    #[error("Too many open connections")]
    ConnectionLimit,
    /// The fleet's daemon holding the session cannot be reached (`http/relay.rs`).
    #[error(
        "The daemon holding this session cannot be reached; retry, or replay its history once the fleet marks it lost"
    )]
    NodeUnavailable,
    /// Refused by the front desk or the daemon behind it: the same `code` every door answers.
    #[error("{0}")]
    Refused(Refusal),
    /// Refused by the ACP door (`/acp`'s own failures).
    #[error("{0}")]
    Door(Failure),
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

/// A failed sign-in's status: the provider down is the daemon's trouble (503), a login handle
/// nobody waits under or an expired code the client's (400), a check that failed or a person not
/// let in a refusal (403), a provider without the device grant 404 (as a daemon without a provider).
fn sign_in_status(e: crate::oidc::SignInError) -> StatusCode {
    use crate::oidc::SignInError as E;
    match e {
        E::ProviderUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        E::InvalidState | E::Expired | E::InvalidTerminal => StatusCode::BAD_REQUEST,
        E::ProviderRefused | E::InvalidIdToken | E::NotAllowed => StatusCode::FORBIDDEN,
        E::NoDeviceFlow => StatusCode::NOT_FOUND,
    }
}

impl ApiError {
    /// One instance of every code's error, for the OpenAPI document (each code's status comes
    /// from here): the HTTP floor's own, the desk's and the ACP door's.
    pub fn all() -> Vec<ApiError> {
        let mut all = vec![
            ApiError::Unauthorized,
            ApiError::OriginDenied(None),
            ApiError::HostNotAllowed,
            ApiError::InvalidHost,
            ApiError::BodyTooLarge,
            ApiError::InvalidJson,
            ApiError::RouteNotFound,
            ApiError::AssetNotFound,
            ApiError::SignInNotConfigured,
            ApiError::MethodNotAllowed,
            ApiError::TokenRequired,
            ApiError::SessionShellDisabled,
            ApiError::ClientIdRequired,
            ApiError::InvalidCommand,
            ApiError::BadRequest,
            ApiError::HeadersTooLarge,
            ApiError::UriTooLong,
            ApiError::HeaderTimeout,
            ApiError::HttpsRequired,
            ApiError::BodyTimeout,
            ApiError::BodyBudgetExceeded,
            ApiError::InvalidPath,
            ApiError::InvalidQuery,
            ApiError::LinkExpired,
            ApiError::TooManyLinkAttempts,
            ApiError::LinkNeedsReview,
            ApiError::InvalidPairingCode,
            ApiError::TooManyPairingAttempts,
            ApiError::PairingUnavailable(String::new()),
            ApiError::InvalidDevice(String::new()),
            ApiError::DeviceNotFound,
            ApiError::AcpConnectionRequired,
            ApiError::AcpConnectionNotFound,
            ApiError::AcpStreamBusy,
            ApiError::NotAcceptable,
            ApiError::UnsupportedMediaType,
            ApiError::InvalidJsonRpc,
            ApiError::BatchNotSupported,
            ApiError::UnsupportedProtocolVersion(String::new()),
            ApiError::NodeUnavailable,
            ApiError::ConnectionLimit,
        ];
        all.extend(crate::oidc::SignInError::ALL.into_iter().map(ApiError::SignIn));
        all.extend(Refusal::all().into_iter().map(ApiError::Refused));
        all.extend(Failure::all_own().into_iter().map(ApiError::Door));
        all
    }

    /// The error whose [`code`](ApiError::code) is `code`.
    pub fn by_code(code: &str) -> Option<ApiError> {
        ApiError::all().into_iter().find(|e| e.code() == code)
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::Refused(r) => status_of(r.kind()),
            Self::Door(f) => status_of(f.kind()),
            Self::SignIn(e) => sign_in_status(*e),
            Self::Unauthorized | Self::TokenRequired | Self::InvalidPairingCode => StatusCode::UNAUTHORIZED,
            Self::PairingUnavailable(_) | Self::AcpStreamBusy | Self::LinkNeedsReview => StatusCode::CONFLICT,
            Self::DeviceNotFound
            | Self::AcpConnectionNotFound
            | Self::RouteNotFound
            | Self::SignInNotConfigured
            | Self::AssetNotFound => StatusCode::NOT_FOUND,
            Self::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::OriginDenied(_)
            | Self::HostNotAllowed
            | Self::SessionShellDisabled
            | Self::ClientIdRequired => StatusCode::FORBIDDEN,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::InvalidJson
            | Self::InvalidHost
            | Self::InvalidDevice(_)
            | Self::AcpConnectionRequired
            | Self::InvalidJsonRpc
            | Self::UnsupportedProtocolVersion(_)
            | Self::InvalidCommand
            | Self::BadRequest
            | Self::InvalidPath
            | Self::InvalidQuery
            | Self::HttpsRequired => StatusCode::BAD_REQUEST,
            Self::HeaderTimeout | Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::UriTooLong => StatusCode::URI_TOO_LONG,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::BodyBudgetExceeded | Self::NodeUnavailable | Self::ConnectionLimit => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::TooManyLinkAttempts | Self::TooManyPairingAttempts => StatusCode::TOO_MANY_REQUESTS,
            Self::LinkExpired => StatusCode::GONE,
            Self::BatchNotSupported => StatusCode::NOT_IMPLEMENTED,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::Refused(r) => r.code(),
            Self::Door(f) => f.code(),
            Self::SignIn(e) => e.code(),
            Self::Unauthorized => "unauthorized",
            Self::OriginDenied(_) => "origin_denied",
            Self::HostNotAllowed => "host_not_allowed",
            Self::InvalidHost => "invalid_host",
            Self::BodyTooLarge => "body_too_large",
            Self::InvalidJson => "invalid_json",
            Self::RouteNotFound => "route_not_found",
            Self::AssetNotFound => "asset_not_found",
            Self::SignInNotConfigured => "sign_in_not_configured",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::TokenRequired => "token_required",
            Self::SessionShellDisabled => "session_shell_disabled",
            Self::ClientIdRequired => "client_id_required",
            Self::InvalidCommand => "invalid_command",
            Self::BadRequest => "bad_request",
            Self::HeadersTooLarge => "headers_too_large",
            Self::UriTooLong => "uri_too_long",
            Self::HeaderTimeout => "header_timeout",
            Self::HttpsRequired => "https_required",
            Self::BodyTimeout => "body_timeout",
            Self::BodyBudgetExceeded => "body_budget_exceeded",
            Self::InvalidPath => "invalid_path",
            Self::InvalidQuery => "invalid_query",
            Self::LinkExpired => "link_expired",
            Self::TooManyLinkAttempts => "too_many_link_attempts",
            Self::LinkNeedsReview => "link_needs_review",
            Self::InvalidPairingCode => "invalid_pairing_code",
            Self::TooManyPairingAttempts => "too_many_pairing_attempts",
            Self::PairingUnavailable(_) => "pairing_unavailable",
            Self::InvalidDevice(_) => "invalid_device",
            Self::DeviceNotFound => "device_not_found",
            Self::AcpConnectionRequired => "acp_connection_required",
            Self::AcpConnectionNotFound => "acp_connection_not_found",
            Self::AcpStreamBusy => "acp_stream_busy",
            Self::NotAcceptable => "not_acceptable",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::InvalidJsonRpc => "invalid_jsonrpc",
            Self::BatchNotSupported => "batch_not_supported",
            Self::UnsupportedProtocolVersion(_) => "unsupported_protocol_version",
            Self::NodeUnavailable => "node_unavailable",
            Self::ConnectionLimit => "connection_limit_exceeded",
        }
    }

    pub(super) fn body(&self) -> Value {
        // The 401 is identical for every cause and carries no code (`docs/protocol.md#2-http-perimeter`).
        if matches!(self, Self::Unauthorized) {
            return json!({"error": "Unauthorized"});
        }
        let mut body = json!({"error": self.to_string(), "code": self.code()});
        let fields = match self {
            Self::UnsupportedProtocolVersion(_) => {
                let mut f = serde_json::Map::new();
                f.insert("supported".into(), json!([crate::acp::PROTOCOL_VERSION]));
                f
            }
            Self::Refused(r) => r.fields(),
            Self::Door(f) => f.fields(),
            _ => return body,
        };
        if let Some(obj) = body.as_object_mut() {
            obj.extend(fields);
        }
        body
    }

    /// Whether the client should retry after a while (`Retry-After`).
    fn retry_later(&self) -> bool {
        match self {
            Self::Refused(r) => r.retry_later(),
            Self::Door(f) => f.retry_later(),
            Self::NodeUnavailable | Self::TooManyLinkAttempts | Self::ConnectionLimit => true,
            _ => false,
        }
    }

    /// `503 store_unavailable`: `what` was not done, because the state database did not take it.
    pub fn store_unavailable(what: &str, e: &crate::store::WriteError) -> ApiError {
        ApiError::Refused(Refusal::store_unavailable(what, e))
    }
}

/// The status REST answers a refusal of `kind` with.
fn status_of(kind: Kind) -> StatusCode {
    StatusCode::from_u16(kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        let retry = self.retry_later();
        let headers = response.headers_mut();
        if retry {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        match self {
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
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
            PairError::NoRandomness => ApiError::Refused(Refusal::Internal),
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

// Every refusal of the desk, and every domain error it maps, as the HTTP floor answers it.
crate::desk::refused_from!(
    ApiError: Refusal,
    CreateError,
    SessionError,
    VoteError,
    RuleError,
    ResumeError,
    StreamLimit,
    FileError,
    RewindError
);

impl From<Failure> for ApiError {
    fn from(f: Failure) -> ApiError {
        match f {
            Failure::Refused(r) => ApiError::Refused(r),
            own => ApiError::Door(own),
        }
    }
}

impl From<ClientIdProblem> for ApiError {
    fn from(p: ClientIdProblem) -> ApiError {
        ApiError::Refused(Refusal::InvalidClientId(p))
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

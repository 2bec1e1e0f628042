//! What an ACP request fails with, and how it becomes a JSON-RPC error: the desk's refusals (the
//! same `code` REST answers for the same failure) and the door's own, each rendered from its
//! [`Kind`], never through another door's format.

use serde_json::{Map, Value, json};

use crate::acp::RpcError;
use crate::desk::{Kind, Refusal};

/// ACP's "Request cancelled" (the request cancellation RFD): the answer to a request the client
/// cancelled with `$/cancel_request`.
pub(super) const REQUEST_CANCELLED: i64 = -32800;

/// Why a request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Failure {
    /// Refused by the desk or the daemon, as REST would refuse it.
    #[error("{0}")]
    Refused(Refusal),
    #[error("Method not found: {0}")]
    MethodNotFound(String),
    /// A session method before `initialize`.
    #[error("Send initialize first")]
    NotInitialized,
    #[error("This connection is already initialized")]
    AlreadyInitialized,
    /// A session method on a session this connection has not attached (`session/new` or
    /// `session/load` first).
    #[error("This connection has not attached session {0}: session/new or session/load first")]
    NotAttached(String),
    /// The connection has attached as many sessions as it may (the bound).
    #[error("One ACP connection may attach at most {0} sessions")]
    TooManySessions(usize),
    /// As many of the connection's requests are being served as may be (the bound).
    #[error("Too many requests of this connection are being served; wait for their answers")]
    TooManyCalls(usize),
    /// `_meta.clientId` differs from the client id the connection acts as.
    #[error("This connection acts as client id {0}; it cannot act as another")]
    ClientIdMismatch(String),
    /// Too many ACP connections are open (the bound).
    #[error("Too many ACP connections are open; retry later")]
    TooManyConnections(usize),
    /// The agent announced no config options (`session/set_config_option`).
    #[error("This session's agent announced no config options")]
    NoConfigOptions,
    /// The client cancelled the request (`$/cancel_request`) before it was answered.
    #[error("Request cancelled")]
    Cancelled,
}

// Each refusal the door meets, as it is: the desk's, or a domain error the desk maps.
crate::desk::refused_from!(
    Failure: Refusal,
    crate::daemon::CreateError,
    crate::daemon::SessionError,
    crate::daemon::ResumeError,
    crate::permission::VoteError,
    crate::devices::StreamLimit
);

impl Failure {
    /// The params are not what the method takes; the text says what.
    pub fn invalid_params(what: impl Into<String>) -> Failure {
        Failure::Refused(Refusal::InvalidParameter(what.into()))
    }

    /// One instance of each of the door's own variants (the desk's are [`Refusal::all`]).
    pub fn all_own() -> Vec<Failure> {
        vec![
            Failure::MethodNotFound(String::new()),
            Failure::NotInitialized,
            Failure::AlreadyInitialized,
            Failure::NotAttached(String::new()),
            Failure::TooManySessions(0),
            Failure::TooManyCalls(0),
            Failure::ClientIdMismatch(String::new()),
            Failure::TooManyConnections(0),
            Failure::NoConfigOptions,
            Failure::Cancelled,
        ]
    }

    pub fn kind(&self) -> Kind {
        match self {
            Failure::Refused(r) => r.kind(),
            Failure::MethodNotFound(_) | Failure::NotAttached(_) => Kind::NotFound,
            Failure::NotInitialized
            | Failure::AlreadyInitialized
            | Failure::ClientIdMismatch(_)
            | Failure::NoConfigOptions => Kind::Invalid,
            Failure::TooManySessions(_) | Failure::TooManyCalls(_) => Kind::TooMany,
            Failure::TooManyConnections(_) => Kind::Unavailable,
            // What HTTP would say of a request its client withdrew: none fits, and none is sent
            // (the JSON-RPC code is ACP's own, [`Failure::render`]).
            Failure::Cancelled => Kind::Conflict,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Failure::Refused(r) => r.code(),
            Failure::MethodNotFound(_) => "method_not_found",
            Failure::NotInitialized => "not_initialized",
            Failure::AlreadyInitialized => "already_initialized",
            Failure::NotAttached(_) => "session_not_attached",
            Failure::TooManySessions(_) => "too_many_sessions",
            Failure::TooManyCalls(_) => "too_many_requests",
            Failure::ClientIdMismatch(_) => "client_id_changed",
            Failure::TooManyConnections(_) => "acp_connection_limit",
            Failure::NoConfigOptions => "config_options_unsupported",
            Failure::Cancelled => "request_cancelled",
        }
    }

    /// The context fields beside `error` and `code`.
    pub fn fields(&self) -> Map<String, Value> {
        let mut f = Map::new();
        match self {
            Failure::Refused(r) => return r.fields(),
            Failure::NotAttached(session_id) => {
                f.insert("sessionId".into(), json!(session_id));
            }
            Failure::ClientIdMismatch(client_id) => {
                f.insert("clientId".into(), json!(client_id));
            }
            Failure::TooManySessions(limit)
            | Failure::TooManyCalls(limit)
            | Failure::TooManyConnections(limit) => {
                f.insert("limit".into(), json!(limit));
            }
            _ => {}
        }
        f
    }

    /// Whether the caller should retry after a while.
    pub fn retry_later(&self) -> bool {
        match self {
            Failure::Refused(r) => r.retry_later(),
            Failure::TooManyConnections(_) => true,
            _ => false,
        }
    }

    /// The JSON-RPC error: `code` from the kind (`docs/protocol.md#16-acp`), `message` the text,
    /// `data` the stable `code`, the context fields and `httpStatus` (what REST answers the same
    /// failure with).
    pub fn render(&self) -> RpcError {
        let kind = self.kind();
        let code = match (self, kind) {
            (Failure::MethodNotFound(_), _) => crate::acp::METHOD_NOT_FOUND,
            (Failure::Cancelled, _) => REQUEST_CANCELLED,
            (_, Kind::Invalid | Kind::TooLarge | Kind::Unprocessable) => crate::acp::INVALID_PARAMS,
            (_, Kind::NotFound) => crate::acp::RESOURCE_NOT_FOUND,
            (_, Kind::Forbidden) => -32003,
            (_, Kind::Conflict) => -32004,
            (_, Kind::TooMany | Kind::Unavailable) => -32005,
            (_, Kind::Upstream | Kind::UpstreamTimeout | Kind::Internal) => crate::acp::INTERNAL_ERROR,
        };
        let mut data = self.fields();
        data.insert("code".into(), json!(self.code()));
        data.insert("httpStatus".into(), json!(kind.status()));
        RpcError { code, message: self.to_string(), data: Some(Value::Object(data)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::SessionError;

    #[test]
    fn failures_render_with_their_rest_code_and_status() {
        let e = Failure::from(SessionError::NotFound { session_id: "s".into() }).render();
        assert_eq!(e.code, crate::acp::RESOURCE_NOT_FOUND);
        assert_eq!(e.data, Some(json!({"code": "session_not_found", "sessionId": "s", "httpStatus": 404})));
        let e = Failure::MethodNotFound("_qwen/x".into()).render();
        assert_eq!((e.code, e.message.as_str()), (crate::acp::METHOD_NOT_FOUND, "Method not found: _qwen/x"));
        assert_eq!(Failure::Refused(Refusal::ReadOnlyDevice).render().code, -32003);
        // A `session/permission` approval from outside a `require` rule's group: REST's 403.
        let vote =
            crate::permission::VoteError::GroupRequired { rule_id: "rule-1".into(), group: "admins".into() };
        let e = Failure::from(vote).render();
        assert_eq!(
            (e.code, e.message.as_str()),
            (-32003, "Rule rule-1 needs approval from a member of the group admins")
        );
        assert_eq!(
            e.data,
            Some(json!({"code": "group_required", "ruleId": "rule-1", "group": "admins", "httpStatus": 403}))
        );
        assert_eq!(Failure::invalid_params("x").render().code, crate::acp::INVALID_PARAMS);
        assert_eq!(
            Failure::TooManyCalls(64).render().data.map(|d| d["httpStatus"].clone()),
            Some(json!(429))
        );
        assert_eq!(Failure::Refused(Refusal::AgentNotAClient).render().code, -32003);
        let conflict = Refusal::SessionHeldElsewhere { session_id: "s".into(), node_url: "http://b".into() };
        assert_eq!(Failure::Refused(conflict).render().code, -32004);
        assert_eq!(Failure::TooManyConnections(1024).render().code, -32005);
        assert_eq!(Failure::Refused(Refusal::Internal).render().code, crate::acp::INTERNAL_ERROR);
        let cancelled = Failure::Cancelled.render();
        assert_eq!((cancelled.code, cancelled.message.as_str()), (-32800, "Request cancelled"));
    }

    #[test]
    fn every_own_code_is_unique_and_none_is_a_refusals() {
        let own: Vec<&str> = Failure::all_own().iter().map(Failure::code).collect();
        let set: std::collections::BTreeSet<&&str> = own.iter().collect();
        assert_eq!(set.len(), own.len());
        for r in Refusal::all() {
            assert!(!own.contains(&r.code()), "{}", r.code());
        }
    }
}

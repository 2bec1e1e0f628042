//! What handlers take from a request, with the daemon's own errors: the state, JSON bodies under
//! the 10 MiB cap, and the self-reported client id header (parsed here and nowhere else).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use super::error::{ApiError, ClientIdProblem};
use crate::daemon::Daemon;

/// What every handler is given: the daemon.
pub type AppState = Arc<Daemon>;

/// Largest accepted request body (`docs/protocol.md#2-http-perimeter`).
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;
/// Longest accepted client id (`docs/protocol.md#2-http-perimeter`).
const MAX_CLIENT_ID_LEN: usize = 128;

/// A JSON body; an empty body reads as `{}` so optional-body routes work from plain `curl -X POST`.
#[derive(Debug)]
pub(super) struct JsonBody(pub(super) Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::BodyTooLarge
            } else {
                ApiError::InvalidJson
            }
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(Value::Object(Default::default())));
        }
        serde_json::from_slice(&bytes).map(JsonBody).map_err(|_| ApiError::InvalidJson)
    }
}

/// The query flags some routes take (`?deep=1`, `?audit=1`); each is on when `1`, `true` or `yes`.
#[derive(Debug, Deserialize)]
pub(super) struct Flags {
    deep: Option<String>,
    audit: Option<String>,
}

impl Flags {
    pub(super) fn deep(&self) -> bool {
        truthy(self.deep.as_deref())
    }

    pub(super) fn audit(&self) -> bool {
        truthy(self.audit.as_deref())
    }
}

fn truthy(v: Option<&str>) -> bool {
    matches!(v, Some("1" | "true" | "yes"))
}

/// `X-Qwen-Client-Id` (alias `X-Client-Id`): `Ok(None)` when absent or empty.
pub(super) fn client_id(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let value = headers.get("x-qwen-client-id").or_else(|| headers.get("x-client-id"));
    let Some(value) = value else { return Ok(None) };
    let malformed = ApiError::InvalidClientId(ClientIdProblem::Malformed);
    let Ok(text) = value.to_str() else { return Err(malformed) };
    if text.is_empty() {
        return Ok(None);
    }
    if valid_client_id(text) { Ok(Some(text.to_owned())) } else { Err(malformed) }
}

/// `^[A-Za-z0-9._:-]{1,128}$`
fn valid_client_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_CLIENT_ID_LEN
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_id_format() {
        assert!(valid_client_id("ide-1:abc_DEF.x"));
        assert!(valid_client_id(&"a".repeat(128)));
        assert!(!valid_client_id(&"a".repeat(129)));
        assert!(!valid_client_id("has space"));
        assert!(!valid_client_id("slash/no"));
        let mut h = HeaderMap::new();
        assert_eq!(client_id(&h).ok(), Some(None));
        h.insert("x-client-id", "".parse().expect("header"));
        assert_eq!(client_id(&h).ok(), Some(None));
        h.insert("x-client-id", "alias".parse().expect("header"));
        assert_eq!(client_id(&h).ok(), Some(Some("alias".into())));
        h.insert("x-qwen-client-id", "main".parse().expect("header"));
        assert_eq!(client_id(&h).ok(), Some(Some("main".into())));
        h.insert("x-qwen-client-id", "bad id".parse().expect("header"));
        assert!(client_id(&h).is_err());
    }
}

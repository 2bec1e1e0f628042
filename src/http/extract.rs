//! What handlers take from a request, with the daemon's own errors: the state, JSON bodies under
//! the 10 MiB cap, and the self-reported client id header (parsed here and nowhere else).

use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use futures_util::StreamExt;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::conn::BodyError;
use super::error::{ApiError, ClientIdProblem};
use crate::daemon::{Daemon, valid_client_id};
use crate::desk::Refusal;

/// What every handler is given: the daemon.
pub type AppState = Arc<Daemon>;

/// Largest accepted request body (`docs/protocol.md#2-http-perimeter`).
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// A JSON body; an empty body reads as `{}` so optional-body routes work from plain `curl -X POST`.
#[derive(Debug)]
pub(super) struct JsonBody(pub(super) Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let (bytes, held) = read_body(req).await?;
        let parsed = if bytes.iter().all(u8::is_ascii_whitespace) {
            Ok(JsonBody(Value::Object(Default::default())))
        } else {
            serde_json::from_slice(&bytes).map(JsonBody).map_err(|_| ApiError::InvalidJson)
        };
        // The body's bytes hold their share of the budget until the parse is done.
        drop(held);
        parsed
    }
}

/// A body as bytes, read like [`JsonBody`] (`POST /acp`, whose JSON the ACP door parses itself).
#[derive(Debug)]
pub(super) struct RawBody(pub(super) Vec<u8>);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        read_body(req).await.map(|(bytes, _)| RawBody(bytes))
    }
}

/// Reads the body under its deadline and the global budget (`super::conn`), refusing a declared or
/// actual length over the cap as soon as it is known. The bytes hold their share of the budget
/// until the returned body stream is dropped.
async fn read_body(req: Request) -> Result<(Vec<u8>, axum::body::BodyDataStream), ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(ApiError::BodyTooLarge);
    }
    let mut stream = req.into_body().into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(body_error)?;
        if bytes.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(ApiError::BodyTooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok((bytes, stream))
}

/// Why reading a body failed: its deadline, the budget, or the connection itself.
fn body_error(error: axum::Error) -> ApiError {
    match error.into_inner().downcast::<BodyError>() {
        Ok(e) => match *e {
            BodyError::Timeout => ApiError::BodyTimeout,
            BodyError::Budget => ApiError::BodyBudgetExceeded,
        },
        Err(_) => ApiError::InvalidJson,
    }
}

/// `Path` with the daemon's own rejection: a segment that is not UTF-8 once percent-decoded is
/// `400 invalid_path`, in JSON like every answer.
#[derive(Debug)]
pub(super) struct PathParams<T>(pub(super) T);

impl<T, S> FromRequestParts<S> for PathParams<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(PathParams(value)),
            Err(_) => Err(ApiError::InvalidPath),
        }
    }
}

/// The query flags some routes take (`?deep=1`, `?audit=1`, `?all=1`); each is on when `1`, `true` or `yes`.
/// Other parameters are ignored; one given twice, or not text once decoded, is `400 invalid_query`.
#[derive(Debug, Deserialize)]
pub(super) struct Flags {
    deep: Option<String>,
    audit: Option<String>,
    all: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for Flags {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Query::<Flags>::try_from_uri(&parts.uri).map(|Query(flags)| flags).map_err(|_| ApiError::InvalidQuery)
    }
}

impl Flags {
    pub(super) fn deep(&self) -> bool {
        truthy(self.deep.as_deref())
    }

    pub(super) fn audit(&self) -> bool {
        truthy(self.audit.as_deref())
    }

    pub(super) fn all(&self) -> bool {
        truthy(self.all.as_deref())
    }
}

fn truthy(v: Option<&str>) -> bool {
    matches!(v, Some("1" | "true" | "yes"))
}

/// `X-Qwen-Client-Id` (alias `X-Client-Id`): `Ok(None)` when absent or empty.
pub(super) fn client_id(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let value = headers.get("x-qwen-client-id").or_else(|| headers.get("x-client-id"));
    let Some(value) = value else { return Ok(None) };
    let malformed = ApiError::Refused(Refusal::InvalidClientId(ClientIdProblem::Malformed));
    let Ok(text) = value.to_str() else { return Err(malformed) };
    if text.is_empty() {
        return Ok(None);
    }
    if valid_client_id(text) { Ok(Some(text.to_owned())) } else { Err(malformed) }
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
        assert!(matches!(
            client_id(&h),
            Err(ApiError::Refused(Refusal::InvalidClientId(ClientIdProblem::Malformed)))
        ));
    }
}

//! Handler of the `events` tag: a session's SSE stream (`docs/protocol.md#5-event-stream`).

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{AppState, PathParams, client_id};

/// Largest `Last-Event-ID` honoured (JavaScript's safe integer range).
const MAX_EVENT_ID: u64 = (1 << 53) - 1;

/// `Last-Event-ID`: decimal digits only, at most 2^53-1; anything else counts as absent.
pub(super) fn last_event_id(headers: &HeaderMap) -> Option<u64> {
    let v = headers.get("last-event-id")?.to_str().ok()?.trim();
    if v.is_empty() || v.len() > 16 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<u64>().ok().filter(|n| *n <= MAX_EVENT_ID)
}

pub(super) async fn events(
    State(d): State<AppState>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
) -> Result<Response, ApiError> {
    // A device's stream ends the moment the device is revoked (the operator's streams are not
    // wrapped: nothing is added to their path).
    let revoked = caller.as_ref().and_then(|c| c.device()).map(|device| device.revoked());
    let client = client_id(&headers)?;
    let body = match d.session(&id) {
        Ok(s) => {
            let sub = s.subscribe(last_event_id(&headers))?;
            if let Some(c) = &client {
                s.touch_client(c);
            }
            let stream = sub.into_body(d.streams_end.clone());
            match revoked {
                Some(revoked) => Body::from_stream(stream.take_until(revoked.cancelled_owned())),
                None => Body::from_stream(stream),
            }
        }
        // Not live: a session of the history is replayed from the store, then the stream ends.
        Err(not_live) => match d.history(&id, last_event_id(&headers)).await {
            Ok(replay) => match revoked {
                Some(revoked) => Body::from_stream(replay.take_until(revoked.cancelled_owned())),
                None => Body::from_stream(replay),
            },
            Err(_) => return Err(not_live.into()),
        },
    };
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, no-transform"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

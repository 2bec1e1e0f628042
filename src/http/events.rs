//! Handler of the `events` tag: a session's SSE stream (`docs/protocol.md#5-event-stream`).

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use super::error::ApiError;
use super::extract::{AppState, PathParams, client_id};
use crate::desk::{Caller, Desk, Place, Seat};

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
    Extension(desk): Extension<Arc<Desk>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
) -> Result<Response, ApiError> {
    let caller = caller.acting_as(client_id(&headers)?);
    let after = last_event_id(&headers);
    // A device's stream holds a place of its bounds (`devices::StreamLimits`) until it ends, and
    // ends the moment the device is revoked; the desk gives both. The operator's streams are not
    // wrapped: nothing is added to their path.
    let body = match d.session(&id) {
        Ok(s) => {
            let watch = desk.subscribe(&s, &caller, after, Seat::Stream)?;
            device_bounded(watch.subscription.into_body(d.streams_end.clone()), watch.place)
        }
        // Not live: a session of the history is replayed from the store, then the stream ends.
        Err(not_live) => {
            let place = desk.stream_place(&caller, &id)?;
            match d.history(&id, after).await {
                Ok(replay) => device_bounded(replay, place),
                Err(_) => return Err(not_live.into()),
            }
        }
    };
    Ok(event_stream(body))
}

/// The response carrying an event stream (`/session/{id}/events`, `/acp`'s): its content type, and
/// no caching or proxy buffering (nginx's `X-Accel-Buffering`), so each frame reaches the client
/// as it is written.
pub(super) fn event_stream(body: impl IntoResponse) -> Response {
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, no-transform"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The body of `stream`; for a device, ending when it is revoked and holding its stream's place
/// until then.
fn device_bounded<S, T, E>(stream: S, place: Place) -> Body
where
    S: Stream<Item = Result<T, E>> + Send + 'static,
    T: Into<Bytes> + 'static,
    E: Into<axum::BoxError> + 'static,
{
    let Place { permit, revoked } = place;
    match revoked {
        // The closure owns the permit: it is freed when the body is dropped.
        Some(revoked) => Body::from_stream(stream.take_until(revoked.cancelled_owned()).map(move |item| {
            let _held = &permit;
            item
        })),
        None => Body::from_stream(stream),
    }
}

//! A session that is not live, replayed from the store (`docs/protocol.md#14-durable-state`):
//! `retry`, `state_resync_required` when the resume point is older than what retention kept,
//! the recorded frames after `Last-Event-ID` (a gap as an id-less `history_gap`), then
//! `replay_complete`, and the stream ends: nothing live follows.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use serde_json::json;

use super::bus::{RETRY, idless_frame};
use crate::event::EventKind;
use crate::store::{SessionRecord, Store, StoredEvent};

/// Recorded items read per page (a blocking read on a blocking thread each).
const PAGE_EVENTS: usize = 256;

/// A replay's body.
pub type HistoryStream = Pin<Box<dyn Stream<Item = Result<Bytes, Infallible>> + Send>>;

enum Step {
    Start,
    After { cursor: u64, count: u64, last: Option<u64> },
    Done,
}

/// The replay of `session` after `last_event_id` (from its first recorded event without one).
pub(super) fn replay(
    store: Arc<dyn Store>,
    session: SessionRecord,
    last_event_id: Option<u64>,
) -> HistoryStream {
    let after = last_event_id.unwrap_or(0);
    Box::pin(futures_util::stream::unfold(Step::Start, move |step| {
        let store = store.clone();
        let session = session.clone();
        async move {
            match step {
                Step::Start => {
                    let mut out = BytesMut::from(RETRY);
                    let id = session.session_id.clone();
                    let first = read(&store, move |s| s.first_event_id(&id)).await.flatten();
                    let mut cursor = after.min(session.last_event_id);
                    if let Some(first) = first
                        && last_event_id.is_some()
                        && cursor + 1 < first
                    {
                        out.extend_from_slice(&idless_frame(
                            EventKind::StateResyncRequired,
                            &json!({"reason": "history_evicted", "lastDeliveredId": after, "earliestAvailableId": first}),
                        ));
                        cursor = first - 1;
                    }
                    Some((Ok(out.freeze()), Step::After { cursor, count: 0, last: None }))
                }
                Step::After { cursor, count, last } => {
                    let id = session.session_id.clone();
                    let page =
                        read(&store, move |s| s.events(&id, cursor, PAGE_EVENTS)).await.unwrap_or_default();
                    if page.is_empty() {
                        let done = idless_frame(
                            EventKind::ReplayComplete,
                            &json!({
                                "replayedCount": count, "lastReplayedEventId": last,
                                "sessionState": session.state.as_str(),
                            }),
                        );
                        return Some((Ok(done), Step::Done));
                    }
                    let mut out = BytesMut::new();
                    let (mut cursor, mut count, mut last) = (cursor, count, last);
                    for item in &page {
                        match item {
                            StoredEvent::Frame { id, frame } => {
                                out.extend_from_slice(frame);
                                count += 1;
                                last = Some(*id);
                            }
                            StoredEvent::Gap { from, to } => out.extend_from_slice(&idless_frame(
                                EventKind::HistoryGap,
                                &json!({"sessionId": session.session_id, "fromId": from, "toId": to}),
                            )),
                        }
                        cursor = item.last_id();
                    }
                    Some((Ok(out.freeze()), Step::After { cursor, count, last }))
                }
                Step::Done => None,
            }
        }
    }))
}

/// Runs a blocking store read on a blocking thread; `None` if it failed (logged).
async fn read<T: Send + 'static>(
    store: &Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> Result<T, crate::store::ReadError> + Send + 'static,
) -> Option<T> {
    let store = store.clone();
    match tokio::task::spawn_blocking(move || f(&*store)).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "reading the session history failed");
            None
        }
        Err(_) => None,
    }
}

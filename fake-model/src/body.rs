//! Streaming response bodies: a list of frames with holds between them, written as the client reads.
//!
//! A dialect renders a reply into [`Frame`]s (SSE events, or one JSON document after a hold); this
//! module turns them into an HTTP body. When the client goes away mid-body (an agent cancelling a
//! stalled model call), hyper drops the body, the hold ends with it, and the journal says so.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use futures_util::stream;

use crate::Journal;

pub enum Frame {
    Data(Bytes),
    /// Send nothing for this long.
    Hold(Duration),
}

impl Frame {
    /// One server-sent event: an optional `event:` line and a JSON `data:` line.
    pub fn sse(event: Option<&str>, data: &serde_json::Value) -> Frame {
        let mut s = String::new();
        if let Some(event) = event {
            s.push_str("event: ");
            s.push_str(event);
            s.push('\n');
        }
        s.push_str("data: ");
        s.push_str(&data.to_string());
        s.push_str("\n\n");
        Frame::Data(Bytes::from(s))
    }
}

#[cfg(test)]
impl Frame {
    /// The text of every `Data` frame, the holds left out: what a client reads, for the dialects'
    /// tests.
    pub(crate) fn texts(frames: &[Frame]) -> Vec<String> {
        frames
            .iter()
            .filter_map(|f| match f {
                Frame::Data(b) => Some(String::from_utf8_lossy(b).into_owned()),
                Frame::Hold(_) => None,
            })
            .collect()
    }
}

/// Notes in the journal when a body is dropped before its last frame was sent.
struct Progress {
    left: VecDeque<Frame>,
    journal: Arc<Journal>,
    what: String,
}

impl Drop for Progress {
    fn drop(&mut self) {
        if !self.left.is_empty() {
            self.journal.note(format!("{}: the client went away before the response ended", self.what));
        }
    }
}

/// A 200 response of `content_type` whose body is `frames`, sent as they come due. `what` names the
/// request in the journal.
pub fn response(
    content_type: &'static str,
    frames: Vec<Frame>,
    journal: Arc<Journal>,
    what: String,
) -> Response {
    let progress = Progress { left: frames.into(), journal, what };
    let body = stream::unfold(progress, |mut p| async move {
        loop {
            match p.left.pop_front()? {
                Frame::Hold(d) => tokio::time::sleep(d).await,
                Frame::Data(bytes) => return Some((Ok::<_, Infallible>(bytes), p)),
            }
        }
    });
    let mut res = Response::new(Body::from_stream(body));
    *res.status_mut() = StatusCode::OK;
    res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    res.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

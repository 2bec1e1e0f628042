//! The one SSE reader: a session's event stream read frame by frame as a client would, with the raw
//! text kept for the tests that compare bytes.
//!
//! It parses through its buffer with a cursor, so a replay of tens of thousands of events stays
//! linear; every wait is bounded by [`WAIT`].

use std::time::Instant;

use futures_util::StreamExt;
use serde_json::Value;

use super::{Daemon, WAIT, http};

/// One SSE event as a client sees it.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub(crate) id: Option<u64>,
    pub(crate) event: String,
    /// The whole envelope: `{id, v, type, data, promptId?, originatorClientId?, _meta}`.
    pub(crate) data: Value,
}

impl Event {
    /// The envelope's `data` field (the event payload).
    pub(crate) fn payload(&self) -> &Value {
        &self.data["data"]
    }
}

/// A live SSE stream.
pub(crate) struct Sse {
    stream: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    /// Everything received so far, as text.
    raw: String,
    /// Where parsing resumes in `raw`.
    pos: usize,
    /// `:` comment lines seen (heartbeats).
    pub(crate) comments: Vec<String>,
    pub(crate) ended: bool,
}

impl Sse {
    /// Connects to `/session/:id/events` with `headers`, asserting 200.
    pub(crate) async fn connect(d: &Daemon, session: &str, headers: &[(&str, String)]) -> Sse {
        let res = Sse::request(d, session, headers).await;
        assert_eq!(res.status(), 200, "events: {}", res.text().await.unwrap_or_default());
        Sse::from_response(res)
    }

    /// The `/session/:id/events` response, whatever its status, its body unread.
    pub(crate) async fn request(d: &Daemon, session: &str, headers: &[(&str, String)]) -> reqwest::Response {
        let mut req = http().get(d.url(&format!("/session/{session}/events")));
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        req.send().await.expect("events request")
    }

    pub(crate) fn from_response(res: reqwest::Response) -> Sse {
        Sse {
            stream: Box::pin(res.bytes_stream()),
            raw: String::new(),
            pos: 0,
            comments: Vec::new(),
            ended: false,
        }
    }

    /// Reads more of the stream; `false` once it has ended.
    async fn fill(&mut self) -> bool {
        match self.stream.next().await {
            Some(Ok(chunk)) => {
                self.raw.push_str(&String::from_utf8_lossy(&chunk));
                true
            }
            _ => {
                self.ended = true;
                false
            }
        }
    }

    /// Raw access: the stream's text from its first byte up to and including the first complete
    /// frame containing `needle`. Does not move the event cursor.
    pub(crate) async fn until_frame_with(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(at) = self.raw.find(needle)
                && let Some(end) = self.raw[at..].find("\n\n")
            {
                return self.raw[..at + end + 2].to_owned();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.fill()).await {
                Ok(true) => {}
                Ok(false) => panic!("stream ended before {needle:?}"),
                Err(_) => panic!("no {needle:?} within {WAIT:?}"),
            }
        }
    }

    /// The next event, or `None` when the stream ended. Panics after [`WAIT`].
    pub(crate) async fn next(&mut self) -> Option<Event> {
        match tokio::time::timeout(WAIT, self.next_inner()).await {
            Ok(e) => e,
            Err(_) => panic!("no SSE event within {WAIT:?}"),
        }
    }

    async fn next_inner(&mut self) -> Option<Event> {
        loop {
            while let Some(len) = self.raw[self.pos..].find("\n\n") {
                let frame = &self.raw[self.pos..self.pos + len];
                self.pos += len + 2;
                let (mut id, mut event, mut data) = (None, "message", None::<String>);
                for line in frame.lines() {
                    if let Some(c) = line.strip_prefix(':') {
                        self.comments.push(c.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        id = v.parse().ok();
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event = v;
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.get_or_insert_default().push_str(v);
                    }
                }
                // `retry:` and heartbeat frames carry no data.
                if let Some(data) = data.filter(|d| !d.is_empty()) {
                    let data =
                        serde_json::from_str(&data).unwrap_or_else(|e| panic!("bad SSE data {data:?}: {e}"));
                    return Some(Event { id, event: event.to_owned(), data });
                }
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    /// Collects events until one satisfies `done` (inclusive). Panics if the stream ends first.
    pub(crate) async fn until(&mut self, mut done: impl FnMut(&Event) -> bool) -> Vec<Event> {
        let mut seen = Vec::new();
        loop {
            let Some(e) = self.next().await else {
                panic!(
                    "stream ended before the awaited event; saw {:?}",
                    seen.iter().map(|e: &Event| &e.event).collect::<Vec<_>>()
                )
            };
            let stop = done(&e);
            seen.push(e);
            if stop {
                return seen;
            }
        }
    }

    /// Collects events until the first of type `kind` (inclusive).
    pub(crate) async fn until_type(&mut self, kind: &str) -> Vec<Event> {
        self.until(|e| e.event == kind).await
    }

    /// Reads to the end of the stream.
    pub(crate) async fn rest(&mut self) -> Vec<Event> {
        let mut all = Vec::new();
        while let Some(e) = self.next().await {
            all.push(e);
        }
        all
    }
}

/// The text of all `agent_message_chunk` updates among `events`, concatenated.
pub(crate) fn chunk_text(events: &[Event]) -> String {
    events
        .iter()
        .filter(|e| e.event == "session_update")
        .filter(|e| e.payload()["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|e| e.payload()["update"]["content"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// The ids of the id-carrying events among `events`.
pub(crate) fn ids(events: &[Event]) -> Vec<u64> {
    events.iter().filter_map(|e| e.id).collect()
}

/// The payload of the first event of type `kind`; panics naming what came instead.
pub(crate) fn find<'a>(events: &'a [Event], kind: &str) -> &'a Value {
    match events.iter().find(|e| e.event == kind) {
        Some(e) => e.payload(),
        None => panic!("no {kind} among {:?}", events.iter().map(|e| &e.event).collect::<Vec<_>>()),
    }
}

/// `Last-Event-ID: n`, as a header list for [`Sse::connect`].
pub(crate) fn last_event_id(n: impl ToString) -> Vec<(&'static str, String)> {
    vec![("Last-Event-ID", n.to_string())]
}

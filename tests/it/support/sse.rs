//! The one SSE reader: a session's event stream read frame by frame as a client would, with the raw
//! text kept for the tests that compare bytes. [`Sse::connect`] reads through reqwest;
//! [`Sse::paused`] reads a raw socket with a small receive buffer, and reads nothing until asked,
//! so a test can make the daemon's writes really stall.
//!
//! It parses through its buffer with a cursor, so a replay of tens of thousands of events stays
//! linear; every wait is bounded by [`WAIT`].

use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Daemon, WAIT};

/// The receive buffer asked for on a [`Sse::paused`] socket (the kernel doubles it): small, so a
/// stream that is not read stalls the daemon's writes after a few hundred KiB at most.
const PAUSED_RCVBUF: u32 = 4096;

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
    stream: std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Bytes, String>> + Send>>,
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
        let mut req = d.client().get(d.url(&format!("/session/{session}/events")));
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        req.send().await.expect("events request")
    }

    pub(crate) fn from_response(res: reqwest::Response) -> Sse {
        Sse::from_stream(res.bytes_stream().map(|chunk| chunk.map_err(|e| e.to_string())))
    }

    /// An event stream's body read over HTTP/2 (the `h2` crate), each chunk's bytes given back to
    /// the stream's window as it is read.
    pub(crate) fn from_h2(body: h2::RecvStream) -> Sse {
        Sse::from_stream(futures_util::stream::unfold(body, |mut body| async move {
            let chunk = body.data().await?.map_err(|e| e.to_string());
            if let Ok(chunk) = &chunk {
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            Some((chunk, body))
        }))
    }

    fn from_stream(stream: impl futures_util::Stream<Item = Result<Bytes, String>> + Send + 'static) -> Sse {
        Sse { stream: Box::pin(stream), raw: String::new(), pos: 0, comments: Vec::new(), ended: false }
    }

    /// Opens the stream on a raw socket with a tiny receive buffer, reads the response head
    /// (asserting 200), and then reads nothing until the test asks for events: while it is not
    /// read, the daemon's writes to it stall once the kernel's buffers are full.
    pub(crate) async fn paused(d: &Daemon, session: &str, headers: &[(&str, String)]) -> Sse {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(PAUSED_RCVBUF).expect("SO_RCVBUF");
        let mut sock = socket.connect(([127, 0, 0, 1], d.port).into()).await.expect("connect");
        let mut request = format!("GET /session/{session}/events HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n", d.port);
        for (k, v) in headers {
            request.push_str(&format!("{k}: {v}\r\n"));
        }
        request.push_str("\r\n");
        sock.write_all(request.as_bytes()).await.expect("request");
        let mut buf = BytesMut::with_capacity(8192);
        let head_end = tokio::time::timeout(WAIT, async {
            loop {
                if let Some(at) = position(&buf, b"\r\n\r\n") {
                    return at;
                }
                assert!(sock.read_buf(&mut buf).await.expect("read") > 0, "closed before the response head");
            }
        })
        .await
        .expect("a response head in time");
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        assert!(head.starts_with("HTTP/1.1 200"), "events: {head}");
        assert!(head.to_ascii_lowercase().contains("transfer-encoding: chunked"), "{head}");
        buf.advance(head_end + 4);
        Sse::from_stream(futures_util::stream::unfold((sock, buf), |(mut sock, mut buf)| async move {
            let chunk = next_chunk(&mut sock, &mut buf).await?;
            Some((chunk, (sock, buf)))
        }))
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

fn position(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The next chunk of a chunked HTTP body read from `sock` (`None` at the body's end or EOF).
async fn next_chunk(sock: &mut tokio::net::TcpStream, buf: &mut BytesMut) -> Option<Result<Bytes, String>> {
    loop {
        if let Some(line) = position(buf, b"\r\n") {
            let size = std::str::from_utf8(&buf[..line])
                .ok()
                .and_then(|l| usize::from_str_radix(l.split(';').next().unwrap_or_default().trim(), 16).ok());
            let Some(size) = size else {
                return Some(Err(format!("bad chunk size line {:?}", String::from_utf8_lossy(&buf[..line]))));
            };
            if size == 0 {
                return None;
            }
            if buf.len() >= line + 2 + size + 2 {
                buf.advance(line + 2);
                let data = buf.split_to(size).freeze();
                buf.advance(2);
                return Some(Ok(data));
            }
        }
        match sock.read_buf(buf).await {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) => return Some(Err(e.to_string())),
        }
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

//! Splitting an SSE byte stream into frames and reading only what the benchmark needs from each.
//!
//! Both daemons frame events the same way (`id:` / `event:` / `data:` lines, a blank line after),
//! so one scanner serves both. The hot case — a `session_update` carrying the synthetic agent's
//! `_meta.emittedAtUs` — is read without a JSON parser; every other event is parsed with serde.

use bytes::{Buf, BytesMut};
use memchr::memmem;

/// What one SSE frame is, as far as the benchmark cares.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// A `session_update` with the agent's emit timestamp (µs since the UNIX epoch).
    Stamped { emitted_us: u64 },
    /// Any other event: its type and its envelope JSON (the `data:` line).
    Event { kind: String, envelope: serde_json::Value },
    /// `retry:`, comments, or a frame without data.
    Ignored,
}

/// Accumulates bytes and yields complete frames.
///
/// It walks the bytes once, a line at a time with `memchr`, as the direct-stdio reader walks the
/// agent's lines (`direct.rs`), remembering where the current frame's `event:` and `data:` values
/// lie; a blank line completes the frame. The load client shares the machine's 2 CPUs with the
/// daemon and the agent, so every nanosecond it spends per frame is taken from what it measures.
pub struct Scanner {
    buf: BytesMut,
    stamp: memmem::Finder<'static>,
    /// Where the next line not yet read starts, in `buf`.
    next_line: usize,
    /// The current frame's `event:` and `data:` values, as ranges of `buf`.
    kind: Option<(usize, usize)>,
    data: Option<(usize, usize)>,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner {
            buf: BytesMut::with_capacity(256 * 1024),
            stamp: memmem::Finder::new(STAMP),
            next_line: 0,
            kind: None,
            data: None,
        }
    }
}

const STAMP: &[u8] = b"\"emittedAtUs\":";

impl Scanner {
    /// Adds `chunk` and calls `each` for every frame it completes.
    pub fn feed(&mut self, chunk: &[u8], mut each: impl FnMut(Frame)) {
        self.buf.extend_from_slice(chunk);
        // Where the frame being read starts: everything before it is done with.
        let mut frame_start = 0;
        let mut at = self.next_line;
        while let Some(nl) = memchr::memchr(b'\n', &self.buf[at..]) {
            let (start, end) = (at, at + nl);
            at = end + 1;
            let line = &self.buf[start..end];
            if line.is_empty() {
                let kind = self.kind.take().map_or(&b"message"[..], |(s, e)| &self.buf[s..e]);
                let data = self.data.take().map(|(s, e)| &self.buf[s..e]);
                each(self.classify(kind, data));
                frame_start = at;
            } else if line.starts_with(b"event: ") {
                self.kind = Some((start + 7, end));
            } else if line.starts_with(b"data: ") {
                self.data = Some((start + 6, end));
            } else if line.starts_with(b"data:") {
                self.data = Some((start + 5, end));
            }
        }
        self.buf.advance(frame_start);
        self.next_line = at - frame_start;
        let shift = |r: &mut Option<(usize, usize)>| {
            if let Some((s, e)) = r {
                *s -= frame_start;
                *e -= frame_start;
            }
        };
        shift(&mut self.kind);
        shift(&mut self.data);
    }

    fn classify(&self, kind: &[u8], data: Option<&[u8]>) -> Frame {
        let Some(data) = data else { return Frame::Ignored };
        if kind == b"session_update"
            && let Some(at) = self.stamp.find(data)
        {
            let digits = &data[at + STAMP.len()..];
            let n = digits.iter().take_while(|b| b.is_ascii_digit()).count();
            if let Some(us) = std::str::from_utf8(&digits[..n]).ok().and_then(|s| s.parse().ok()) {
                return Frame::Stamped { emitted_us: us };
            }
        }
        match serde_json::from_slice(data) {
            Ok(envelope) => Frame::Event { kind: String::from_utf8_lossy(kind).into_owned(), envelope },
            Err(_) => Frame::Ignored,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(chunks: &[&str]) -> Vec<Frame> {
        let mut s = Scanner::default();
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c.as_bytes(), |f| out.push(f));
        }
        out
    }

    #[test]
    fn stamped_updates_and_other_events_split_across_chunks() {
        let update = "id: 2\nevent: session_update\ndata: {\"id\":2,\"v\":1,\"type\":\"session_update\",\
                      \"data\":{\"update\":{\"_meta\":{\"emittedAtUs\":1700000000000123}}}}\n\n";
        let done = "id: 3\nevent: turn_complete\ndata: {\"id\":3,\"v\":1,\"type\":\"turn_complete\",\
                    \"data\":{\"stopReason\":\"end_turn\"}}\n\n";
        let all = format!("retry: 3000\n\n{update}{done}");
        for cut in 1..all.len() {
            let got = frames(&[&all[..cut], &all[cut..]]);
            assert_eq!(got.len(), 3, "cut at {cut}");
            assert_eq!(got[0], Frame::Ignored);
            assert_eq!(got[1], Frame::Stamped { emitted_us: 1_700_000_000_000_123 });
            match &got[2] {
                Frame::Event { kind, envelope } => {
                    assert_eq!(kind, "turn_complete");
                    assert_eq!(envelope["data"]["stopReason"], "end_turn");
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn an_update_without_a_stamp_is_an_ordinary_event() {
        let got = frames(&["event: session_update\ndata: {\"type\":\"session_update\"}\n\n"]);
        assert!(matches!(&got[0], Frame::Event { kind, .. } if kind == "session_update"));
    }
}

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
pub struct Scanner {
    buf: BytesMut,
    stamp: memmem::Finder<'static>,
    /// Bytes of `buf` already searched for a separator without success.
    searched: usize,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner { buf: BytesMut::with_capacity(256 * 1024), stamp: memmem::Finder::new(STAMP), searched: 0 }
    }
}

const STAMP: &[u8] = b"\"emittedAtUs\":";

impl Scanner {
    /// Adds `chunk` and calls `each` for every frame it completes.
    pub fn feed(&mut self, chunk: &[u8], mut each: impl FnMut(Frame)) {
        self.buf.extend_from_slice(chunk);
        loop {
            // A separator may straddle the previous end: back up one byte.
            let from = self.searched.saturating_sub(1);
            match memmem::find(&self.buf[from..], b"\n\n") {
                Some(at) => {
                    let end = from + at;
                    each(self.classify(&self.buf[..end]));
                    self.buf.advance(end + 2);
                    self.searched = 0;
                }
                None => {
                    self.searched = self.buf.len();
                    return;
                }
            }
        }
    }

    fn classify(&self, frame: &[u8]) -> Frame {
        let mut kind: &[u8] = b"message";
        let mut data: Option<&[u8]> = None;
        for line in frame.split(|&b| b == b'\n') {
            if let Some(k) = line.strip_prefix(b"event: ") {
                kind = k;
            } else if let Some(d) = line.strip_prefix(b"data: ") {
                data = Some(d);
            } else if let Some(d) = line.strip_prefix(b"data:") {
                data = Some(d);
            }
        }
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

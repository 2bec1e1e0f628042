//! Splitting an SSE byte stream into frames and reading only what the benchmark needs from each.
//!
//! Both daemons frame events the same way (`id:` / `event:` / `data:` lines, a blank line after),
//! so one scanner serves both. The hot case — a `session_update` carrying the synthetic agent's
//! `_meta.emittedAtUs` — is read without a JSON parser; every other event is parsed with serde.

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

/// Yields the complete frames of the chunks it is fed.
///
/// It walks each chunk where it lies, a line at a time with `memchr`, as the direct-stdio reader
/// walks the agent's lines (`direct.rs`), remembering where the current frame's `event:` and `data:`
/// values lie; a blank line completes the frame. Only a frame cut off at a chunk's end is copied,
/// and completed with the next chunk's bytes up to its blank line. The load client shares the
/// machine's 2 CPUs with the daemon and the agent, so every nanosecond it spends per frame is taken
/// from what it measures: copying every chunk into a buffer of its own was 15% of its CPU in `perf`.
pub struct Scanner {
    /// The frame the last chunk ended inside, as far as it went (empty: the chunk ended on a frame's
    /// end). It holds no blank line.
    carry: Vec<u8>,
    stamp: memmem::Finder<'static>,
    blank: memmem::Finder<'static>,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner { carry: Vec::new(), stamp: memmem::Finder::new(STAMP), blank: memmem::Finder::new(b"\n\n") }
    }
}

const STAMP: &[u8] = b"\"emittedAtUs\":";

impl Scanner {
    /// Calls `each` for every frame `chunk` completes.
    pub fn feed(&mut self, chunk: &[u8], mut each: impl FnMut(Frame)) {
        let mut rest = chunk;
        if !self.carry.is_empty() {
            // The carried frame ends at the first blank line, which may straddle the seam.
            let end = if self.carry.ends_with(b"\n") && rest.starts_with(b"\n") {
                Some(1)
            } else {
                self.blank.find(rest).map(|at| at + 2)
            };
            let Some(end) = end else {
                self.carry.extend_from_slice(rest);
                return;
            };
            self.carry.extend_from_slice(&rest[..end]);
            rest = &rest[end..];
            let carry = std::mem::take(&mut self.carry);
            self.frames(&carry, &mut each);
            self.carry = carry;
            self.carry.clear();
        }
        let done = self.frames(rest, &mut each);
        self.carry.extend_from_slice(&rest[done..]);
    }

    /// Calls `each` for every complete frame in `bytes`, which starts at a frame's start; returns
    /// where the incomplete frame after them starts (`bytes.len()`: none).
    fn frames(&self, bytes: &[u8], each: &mut impl FnMut(Frame)) -> usize {
        let (mut kind, mut data) = (None, None);
        let (mut frame_start, mut at) = (0, 0);
        while let Some(nl) = memchr::memchr(b'\n', &bytes[at..]) {
            let line = &bytes[at..at + nl];
            at += nl + 1;
            if line.is_empty() {
                each(self.classify(kind.take().unwrap_or(&b"message"[..]), data.take()));
                frame_start = at;
            } else if let Some(value) = line.strip_prefix(b"event: ") {
                kind = Some(value);
            } else if let Some(value) = line.strip_prefix(b"data:") {
                data = Some(value.strip_prefix(b" ").unwrap_or(value));
            }
        }
        frame_start
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

    const UPDATE: &str = "id: 2\nevent: session_update\ndata: {\"id\":2,\"v\":1,\"type\":\"session_update\",\
                          \"data\":{\"update\":{\"_meta\":{\"emittedAtUs\":1700000000000123}}}}\n\n";
    const DONE: &str = "id: 3\nevent: turn_complete\ndata: {\"id\":3,\"v\":1,\"type\":\"turn_complete\",\
                        \"data\":{\"stopReason\":\"end_turn\"}}\n\n";

    fn stream() -> String {
        format!("retry: 3000\n\n{UPDATE}{DONE}")
    }

    /// The three frames of [`stream`], as they must come out however it was cut.
    fn assert_frames(got: &[Frame], cuts: &str) {
        assert_eq!(got.len(), 3, "cut at {cuts}");
        assert_eq!(got[0], Frame::Ignored, "cut at {cuts}");
        assert_eq!(got[1], Frame::Stamped { emitted_us: 1_700_000_000_000_123 }, "cut at {cuts}");
        match &got[2] {
            Frame::Event { kind, envelope } => {
                assert_eq!(kind, "turn_complete", "cut at {cuts}");
                assert_eq!(envelope["data"]["stopReason"], "end_turn", "cut at {cuts}");
            }
            other => panic!("cut at {cuts}: unexpected {other:?}"),
        }
    }

    #[test]
    fn stamped_updates_and_other_events_split_across_chunks() {
        let all = stream();
        assert_frames(&frames(&[&all]), "none");
        for cut in 1..all.len() {
            assert_frames(&frames(&[&all[..cut], &all[cut..]]), &cut.to_string());
        }
    }

    /// A frame carried over a whole chunk without its end, and every seam a blank line can
    /// straddle (the carry ending in one newline, the next chunk starting with the other).
    #[test]
    fn a_frame_cut_twice_or_into_single_bytes_is_read_whole() {
        let all = stream();
        for a in 1..all.len() {
            for b in a..all.len() {
                assert_frames(&frames(&[&all[..a], &all[a..b], &all[b..]]), &format!("{a} and {b}"));
            }
        }
        let bytes: Vec<&str> = (0..all.len()).map(|i| &all[i..=i]).collect();
        assert_frames(&frames(&bytes), "every byte");
    }

    /// Two frames complete in one chunk after a carried one: none is lost or read twice.
    #[test]
    fn the_frames_after_a_carried_one_in_the_same_chunk_are_all_read() {
        let all = format!("{UPDATE}{UPDATE}{UPDATE}{DONE}");
        for cut in 1..UPDATE.len() {
            let got = frames(&[&all[..cut], &all[cut..]]);
            let stamped = got.iter().filter(|f| matches!(f, Frame::Stamped { .. })).count();
            assert_eq!((got.len(), stamped), (4, 3), "cut at {cut}");
        }
    }

    #[test]
    fn an_update_without_a_stamp_is_an_ordinary_event() {
        let got = frames(&["event: session_update\ndata: {\"type\":\"session_update\"}\n\n"]);
        assert!(matches!(&got[0], Frame::Event { kind, .. } if kind == "session_update"));
    }
}

//! The agent's stdio as lines: the reader's line splitter and the writer task that owns stdin.
//!
//! Both sit on the hot path of a streaming agent; neither knows what a line means (that is
//! [`crate::acp`]'s frame parser, called by the actor).

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::codec::Decoder;

/// Longest line accepted from an agent; a longer one ends that agent
/// (`docs/protocol.md#4-agents-workspaces-and-sessions`).
pub(crate) const MAX_AGENT_LINE: usize = 64 * 1024 * 1024;

/// Splits the agent's stdout into lines (newline removed), finding newlines with `memchr`: this
/// is the innermost loop of a streaming agent's reader (the byte-at-a-time `AnyDelimiterCodec` it
/// replaces was the reader's top symbol in `perf`). A line over [`MAX_AGENT_LINE`] is an error,
/// which ends that agent.
#[derive(Debug, Default)]
pub(crate) struct LineCodec {
    /// Bytes at the start of the buffer already known to hold no newline.
    searched: usize,
}

impl LineCodec {
    /// Whether `buf` (the reader's buffer) holds a complete line, i.e. the next line can be had
    /// without waiting. Scans only what `decode` has not already searched.
    pub(crate) fn has_line(&self, buf: &[u8]) -> bool {
        buf.get(self.searched..).is_some_and(|rest| memchr::memchr(b'\n', rest).is_some())
    }
}

impl Decoder for LineCodec {
    type Item = BytesMut;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<BytesMut>> {
        let line = split_line(buf, self.searched)?;
        self.searched = if line.is_some() { 0 } else { buf.len() };
        Ok(line)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<BytesMut>> {
        match self.decode(buf)? {
            Some(line) => Ok(Some(line)),
            None if buf.is_empty() => Ok(None),
            // A last line without its newline still counts.
            None => {
                self.searched = 0;
                Ok(Some(buf.split_to(buf.len())))
            }
        }
    }
}

/// Takes the first complete line off `buf` (its first `searched` bytes known to hold no newline),
/// newline removed; `None` when no line is complete yet. The actor also calls it directly, between
/// reads, for the lines a read brought beyond the first (`LineCodec::decode` left `searched` at 0).
pub(crate) fn split_line(buf: &mut BytesMut, searched: usize) -> std::io::Result<Option<BytesMut>> {
    split_line_within(buf, searched, MAX_AGENT_LINE)
}

/// [`split_line`] with lines of at most `max` bytes (a unit test's bound).
fn split_line_within(buf: &mut BytesMut, searched: usize, max: usize) -> std::io::Result<Option<BytesMut>> {
    match memchr::memchr(b'\n', &buf[searched..]) {
        Some(at) => {
            let end = searched + at;
            if end > max {
                return Err(line_too_long());
            }
            let mut line = buf.split_to(end + 1);
            line.truncate(end);
            Ok(Some(line))
        }
        // Without its newline yet, a line of `max` bytes may still end at the next byte.
        None if buf.len() > max => Err(line_too_long()),
        None => Ok(None),
    }
}

fn line_too_long() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a line longer than {MAX_AGENT_LINE} bytes"))
}

/// Owns the agent's stdin: writes queued lines, flushing only when the queue runs dry so bursts
/// leave in large writes. Ends (closing stdin) when every sender is gone.
pub(crate) async fn write_lines(stdin: tokio::process::ChildStdin, mut lines: mpsc::Receiver<Bytes>) {
    let mut out = tokio::io::BufWriter::with_capacity(64 * 1024, stdin);
    while let Some(line) = lines.recv().await {
        if out.write_all(&line).await.is_err() {
            return;
        }
        while let Ok(line) = lines.try_recv() {
            if out.write_all(&line).await.is_err() {
                return;
            }
        }
        if out.flush().await.is_err() {
            return;
        }
    }
    let _ = out.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_on_newlines_across_reads_and_at_eof() {
        let mut codec = LineCodec::default();
        let mut buf = BytesMut::from(&b"{\"a\":1}\n{\"b\""[..]);
        assert_eq!(codec.decode(&mut buf).ok().flatten().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert!(codec.decode(&mut buf).ok().flatten().is_none());
        buf.extend_from_slice(b":2}\n\ntail");
        assert_eq!(codec.decode(&mut buf).ok().flatten().as_deref(), Some(&b"{\"b\":2}"[..]));
        assert_eq!(codec.decode(&mut buf).ok().flatten().as_deref(), Some(&b""[..]));
        assert!(codec.decode(&mut buf).ok().flatten().is_none());
        assert_eq!(codec.decode_eof(&mut buf).ok().flatten().as_deref(), Some(&b"tail"[..]));
        assert!(codec.decode_eof(&mut buf).ok().flatten().is_none());
    }

    /// A line of exactly the bound is taken, one byte more ends the agent, with its newline or
    /// before it arrives; the part already searched is not searched again.
    #[test]
    fn a_line_is_bounded_with_or_without_its_newline() {
        let split = |bytes: &[u8], searched: usize| {
            let mut buf = BytesMut::from(bytes);
            split_line_within(&mut buf, searched, 4).map(|line| (line.map(|l| l.to_vec()), buf.to_vec()))
        };
        assert_eq!(split(b"abcd\nef", 0).ok(), Some((Some(b"abcd".to_vec()), b"ef".to_vec())));
        assert_eq!(split(b"abcd", 0).ok(), Some((None, b"abcd".to_vec())));
        assert_eq!(split(b"ab\nc\nz", 3).ok(), Some((Some(b"ab\nc".to_vec()), b"z".to_vec())));
        for over in [&b"abcde\n"[..], b"abcde"] {
            let error = split(over, 0).expect_err("over the bound");
            assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
        }
    }
}

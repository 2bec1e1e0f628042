//! The text frames the daemon writes on an `/acp` WebSocket, framed here rather than by the
//! WebSocket library: a server's frame is a 2-, 4- or 10-byte header and the payload as it is
//! (RFC 6455 §5.2: never masked, §5.1), so a batch of messages becomes one buffer and one write,
//! with no library message, frame or UTF-8 check per message. What the client sends, and the
//! control frames (ping, pong, close), stay with the library (`tungstenite`), which parses and
//! checks them.
//!
//! The payloads are the door's messages: JSON the daemon wrote itself (serde_json's output, or an
//! event's data the bus holds as the agent's parsed JSON), so they are UTF-8 as a text frame must
//! be.

/// FIN set (the message is one frame), opcode 1 (text).
const FIN_TEXT: u8 = 0x81;
/// The 7-bit length field's escapes: a 16-bit length follows, or a 64-bit one.
const LEN_16: u8 = 126;
const LEN_64: u8 = 127;

/// The frames of one write: messages are appended, the whole is written at once. The buffer is
/// reused by the batches of a burst and given back once the connection has nothing more to write
/// ([`Frames::give_back`]), so an idle connection holds none (issue #46).
#[derive(Debug, Default)]
pub(super) struct Frames {
    buf: Vec<u8>,
}

impl Frames {
    pub(super) fn new() -> Frames {
        Frames::default()
    }

    /// Appends one text frame whose payload is `parts`, one after the other; returns the
    /// payload's length.
    pub(super) fn push_text(&mut self, parts: &[&[u8]]) -> usize {
        let len = parts.iter().map(|p| p.len()).sum();
        self.buf.reserve(len + 10);
        self.buf.push(FIN_TEXT);
        if len < usize::from(LEN_16) {
            // Fits the 7-bit field: `len` < 126.
            self.buf.push(len as u8);
        } else if let Ok(short) = u16::try_from(len) {
            self.buf.push(LEN_16);
            self.buf.extend_from_slice(&short.to_be_bytes());
        } else {
            self.buf.push(LEN_64);
            self.buf.extend_from_slice(&(len as u64).to_be_bytes());
        }
        for part in parts {
            self.buf.extend_from_slice(part);
        }
        len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes to write.
    pub(super) fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Forgets the written frames; the buffer is kept for the next batch.
    pub(super) fn clear(&mut self) {
        self.buf.clear();
    }

    /// Whether the buffer holds room (written or not).
    pub(super) fn holds_room(&self) -> bool {
        self.buf.capacity() > 0
    }

    /// Gives the buffer back: the connection has drained.
    pub(super) fn give_back(&mut self) {
        self.buf = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::{Role, WebSocket};
    use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

    use super::*;

    /// Every length class and its edges: the 7-bit field's last value, the 16-bit field's first
    /// and last, the 64-bit field's first.
    const LENGTHS: [usize; 8] = [0, 1, 125, 126, 127, 65_535, 65_536, 70_001];

    fn payload(len: usize) -> Vec<u8> {
        (0..len).map(|i| b'a' + (i % 26) as u8).collect()
    }

    #[test]
    fn a_frame_is_byte_for_byte_the_one_the_websocket_library_writes() {
        for len in LENGTHS {
            let text = payload(len);
            let mut ours = Frames::new();
            ours.push_text(&[&text[..len / 2], &text[len / 2..]]);
            let mut theirs = Vec::new();
            Frame::message(text, OpCode::Data(Data::Text), true)
                .format(&mut theirs)
                .expect("a frame formats into a Vec");
            assert_eq!(ours.bytes(), theirs.as_slice(), "a payload of {len} bytes");
        }
    }

    #[test]
    fn a_client_reads_a_batch_as_its_messages_in_order() {
        let mut frames = Frames::new();
        let sent: Vec<String> =
            LENGTHS.iter().map(|&len| String::from_utf8(payload(len)).expect("ASCII")).collect();
        for text in &sent {
            frames.push_text(&[text.as_bytes()]);
        }
        let mut client = WebSocket::from_raw_socket(Cursor::new(frames.bytes().to_vec()), Role::Client, None);
        for text in &sent {
            let message = client.read().expect("a frame the client reads");
            assert_eq!(message, Message::Text(Utf8Bytes::from(text.clone())));
        }
        assert!(client.read().is_err(), "nothing after the batch");
    }

    #[test]
    fn a_burst_reuses_the_buffer_and_a_drained_connection_gives_it_back() {
        let mut frames = Frames::new();
        assert!(!frames.holds_room(), "a new connection holds no buffer");
        frames.push_text(&[&payload(5000)]);
        frames.clear();
        assert!(frames.is_empty());
        assert!(frames.buf.capacity() >= 5002, "kept for the burst's next batch");
        assert!(frames.holds_room());
        frames.push_text(&[&payload(100)]);
        frames.clear();
        frames.give_back();
        assert_eq!(frames.buf.capacity(), 0, "an idle connection holds no buffer");
        assert!(!frames.holds_room());
    }

    #[test]
    fn push_text_answers_the_payload_length_and_a_batch_is_empty_only_when_cleared() {
        let mut frames = Frames::new();
        assert!(frames.is_empty());
        for len in LENGTHS {
            let text = payload(len);
            assert_eq!(frames.push_text(&[&text[..len / 3], &text[len / 3..]]), len);
            assert!(!frames.is_empty(), "a frame of {len} bytes was pushed");
        }
        frames.clear();
        assert!(frames.is_empty());
    }

    #[test]
    fn a_frame_reserves_about_its_own_size() {
        let mut frames = Frames::new();
        frames.push_text(&[&payload(100)]);
        let grown = frames.buf.capacity();
        assert!((102..220).contains(&grown), "{grown} bytes reserved for a 102-byte frame");
    }
}

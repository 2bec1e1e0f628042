//! HTTP/2 frames written by hand (RFC 9113 §4, §6): what no well-behaved client sends — floods of
//! resets and CONTINUATION frames, streams never read, a window never opened — so the abuse tests
//! can send it. Header blocks use HPACK's static table and literals only (RFC 7541), no Huffman.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::WAIT;

pub(crate) const HEADERS: u8 = 0x1;
pub(crate) const RST_STREAM: u8 = 0x3;
pub(crate) const SETTINGS: u8 = 0x4;
pub(crate) const GOAWAY: u8 = 0x7;
pub(crate) const CONTINUATION: u8 = 0x9;
pub(crate) const END_STREAM: u8 = 0x1;
pub(crate) const END_HEADERS: u8 = 0x4;
/// What a client speaking HTTP/2 with prior knowledge opens with.
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// `SETTINGS_INITIAL_WINDOW_SIZE`.
pub(crate) const INITIAL_WINDOW_SIZE: u16 = 0x4;
/// Error codes (RFC 9113 §7).
pub(crate) const CANCEL: u32 = 0x8;
pub(crate) const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame: its 9-byte head, then `payload`.
pub(crate) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A SETTINGS frame with `settings` (identifier, value).
pub(crate) fn settings(settings: &[(u16, u32)]) -> Vec<u8> {
    let mut payload = Vec::new();
    for (id, value) in settings {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    frame(SETTINGS, 0, 0, &payload)
}

/// A string literal of HPACK (no Huffman), shorter than 127 bytes.
fn literal(text: &str) -> Vec<u8> {
    assert!(text.len() < 127, "a short literal");
    let mut out = vec![text.len() as u8];
    out.extend_from_slice(text.as_bytes());
    out
}

/// The header block of `GET path` on `authority` over http, with `extra` headers (literal names).
pub(crate) fn get_block(authority: &str, path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    // :method GET (static index 2), :scheme http (6), :path (4) and :authority (1) as literals
    // without indexing, with an indexed name.
    let mut block = vec![0x82, 0x86, 0x04];
    block.extend(literal(path));
    block.push(0x01);
    block.extend(literal(authority));
    for (name, value) in extra {
        block.push(0x00);
        block.extend(literal(name));
        block.extend(literal(value));
    }
    block
}

/// A raw HTTP/2 connection (prior knowledge) to `port` on loopback: the preface and `settings`
/// sent.
pub(crate) async fn open(port: u16, first_settings: &[(u16, u32)]) -> TcpStream {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    let mut hello = PREFACE.to_vec();
    hello.extend(settings(first_settings));
    tcp.write_all(&hello).await.expect("preface");
    tcp
}

/// Reads frames until a GOAWAY arrives or the connection ends; its error code (`None`: ended
/// without one). Bounded by [`WAIT`].
pub(crate) async fn goaway(tcp: &mut TcpStream) -> Option<u32> {
    let read = async {
        loop {
            let mut head = [0u8; 9];
            if tcp.read_exact(&mut head).await.is_err() {
                return None;
            }
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            if tcp.read_exact(&mut payload).await.is_err() {
                return None;
            }
            if head[3] == GOAWAY && payload.len() >= 8 {
                return Some(u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]));
            }
        }
    };
    tokio::time::timeout(WAIT, read).await.expect("the connection ends or goes away in time")
}

/// Writes `bytes`, ignoring a connection the daemon closed meanwhile (what a flood runs into).
pub(crate) async fn send(tcp: &mut TcpStream, bytes: &[u8]) -> bool {
    matches!(tokio::time::timeout(Duration::from_secs(10), tcp.write_all(bytes)).await, Ok(Ok(())))
}

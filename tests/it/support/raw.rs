//! Raw HTTP/1.1 over TCP, for what a well-behaved client cannot send: duplicate headers, targets in
//! absolute form, bytes that are not HTTP, connections that say nothing.

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::WAIT;

/// An answer read off a raw connection: the status, the head as text, the body as JSON (`Null` when
/// empty or not JSON), and the body as sent.
#[derive(Debug)]
pub(crate) struct RawReply {
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) text: String,
    pub(crate) body: Value,
}

impl RawReply {
    /// The value of header `name` (case-insensitive), if present once or more (the first).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }
}

/// Splits what a connection sent into an answer (the first one, when several came).
pub(crate) fn parse_reply(bytes: &[u8]) -> RawReply {
    let text = String::from_utf8_lossy(bytes).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let reply = RawReply { status, head: head.to_owned(), text: rest.to_owned(), body: Value::Null };
    let length = reply.header("content-length").and_then(|l| l.parse::<usize>().ok());
    let body_text = match length {
        Some(n) if n <= rest.len() => rest[..n].to_owned(),
        _ => rest.to_owned(),
    };
    let body = serde_json::from_str(&body_text).unwrap_or(Value::Null);
    RawReply { text: body_text, body, ..reply }
}

/// Sends `request` on a fresh connection and reads until the daemon closes it (bounded).
pub(crate) async fn raw_request(port: u16, request: &[u8]) -> RawReply {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    stream.write_all(request).await.expect("write the request");
    let mut out = Vec::new();
    match tokio::time::timeout(WAIT, stream.read_to_end(&mut out)).await {
        Ok(Ok(_)) => {}
        // A reset after the answer still leaves the answer.
        Ok(Err(_)) if !out.is_empty() => {}
        Ok(Err(e)) => panic!("reading the answer failed: {e}"),
        Err(_) => panic!("no close within {WAIT:?}; got so far {:?}", String::from_utf8_lossy(&out)),
    }
    parse_reply(&out)
}

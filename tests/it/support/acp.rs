//! An ACP client on `/acp` over WebSocket, as plain as the protocol: JSON-RPC messages out, every
//! message in kept in order ([`AcpWs::seen`]), waits bounded by [`WAIT`]. The official SDKs are
//! exercised by the end-to-end suite; this one lets a test send what no SDK would.

use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;

use super::{Daemon, WAIT};

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How a WebSocket ended, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// A close frame with this code and reason.
    Closed(u16, String),
    /// The socket ended without a close frame.
    Dropped,
}

/// One ACP connection over WebSocket.
pub(crate) struct AcpWs {
    socket: Socket,
    next_id: i64,
    /// Every message received, in order.
    pub(crate) seen: Vec<Value>,
    /// How many of `seen` the waits have looked at.
    read: usize,
    /// The `Acp-Connection-Id` of the 101.
    pub(crate) connection_id: String,
    /// The subprotocol the daemon chose, if any.
    pub(crate) protocol: Option<String>,
    pub(crate) ended: Option<Ended>,
    /// The payloads of the pongs received, in order.
    pub(crate) pongs: Vec<Vec<u8>>,
}

impl AcpWs {
    /// Opens `/acp` with `headers`; panics on a refused upgrade.
    pub(crate) async fn open(d: &Daemon, headers: &[(&str, &str)]) -> AcpWs {
        match AcpWs::try_open(d, headers).await {
            Ok(ws) => ws,
            Err(e) => panic!("WebSocket upgrade refused: {e}"),
        }
    }

    /// Opens `/acp`; the refusal's status and body when the upgrade is refused.
    pub(crate) async fn try_open(d: &Daemon, headers: &[(&str, &str)]) -> Result<AcpWs, String> {
        let mut req = format!("ws://127.0.0.1:{}/acp", d.port).into_client_request().expect("request");
        for (k, v) in headers {
            let name =
                tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes()).expect("name");
            req.headers_mut().insert(name, HeaderValue::from_str(v).expect("header"));
        }
        let (socket, response) = match tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(req)).await
        {
            Ok(Ok(done)) => done,
            Ok(Err(tokio_tungstenite::tungstenite::Error::Http(res))) => {
                let body =
                    res.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
                return Err(format!("{} {body}", res.status().as_u16()));
            }
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => panic!("no WebSocket handshake within {WAIT:?}"),
        };
        let connection_id = response
            .headers()
            .get("acp-connection-id")
            .and_then(|v| v.to_str().ok())
            .expect("Acp-Connection-Id on the 101")
            .to_owned();
        let protocol =
            response.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok()).map(str::to_owned);
        Ok(AcpWs {
            socket,
            next_id: 1,
            seen: Vec::new(),
            read: 0,
            connection_id,
            protocol,
            ended: None,
            pongs: Vec::new(),
        })
    }

    /// Opens `/acp` over a socket with a small receive buffer (the kernel doubles it), so a client
    /// that stops reading stalls the daemon's writes after a few KiB; initializes.
    pub(crate) async fn ready_small_buffer(d: &Daemon) -> (AcpWs, Value) {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        let tcp = socket.connect(([127, 0, 0, 1], d.port).into()).await.expect("connect");
        let req = format!("ws://127.0.0.1:{}/acp", d.port).into_client_request().expect("request");
        let (socket, response) = tokio::time::timeout(
            WAIT,
            tokio_tungstenite::client_async(req, tokio_tungstenite::MaybeTlsStream::Plain(tcp)),
        )
        .await
        .expect("handshake in time")
        .expect("handshake");
        let connection_id = response
            .headers()
            .get("acp-connection-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let mut ws = AcpWs {
            socket,
            next_id: 1,
            seen: Vec::new(),
            read: 0,
            connection_id,
            protocol: None,
            ended: None,
            pongs: Vec::new(),
        };
        let init = ws.call("initialize", json!({"protocolVersion": 1})).await;
        (ws, init["result"].clone())
    }

    /// Opens `/acp` and initializes (`protocolVersion` 1), returning the result.
    pub(crate) async fn ready(d: &Daemon, headers: &[(&str, &str)]) -> (AcpWs, Value) {
        let mut ws = AcpWs::open(d, headers).await;
        let init = ws.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}})).await;
        (ws, init["result"].clone())
    }

    pub(crate) async fn send_text(&mut self, text: impl Into<String>) {
        self.socket.send(Message::Text(text.into().into())).await.expect("send");
    }

    /// Sends `text`, which the daemon may refuse by closing the socket before it is all written.
    pub(crate) async fn send_text_refused(&mut self, text: impl Into<String>) {
        let _ = self.socket.send(Message::Text(text.into().into())).await;
    }

    /// Sends one frame as it is (the library masks it, as a client must).
    pub(crate) async fn send_frame(&mut self, frame: Frame) {
        self.socket.send(Message::Frame(frame)).await.expect("send");
    }

    /// Sends a ping with `payload`.
    pub(crate) async fn ping(&mut self, payload: &[u8]) {
        self.socket.send(Message::Ping(payload.to_vec().into())).await.expect("ping");
    }

    /// Sends a close frame with `code` and `reason`.
    pub(crate) async fn close(&mut self, code: u16, reason: &str) {
        let frame = CloseFrame { code: code.into(), reason: reason.to_owned().into() };
        self.socket.send(Message::Close(Some(frame))).await.expect("close");
    }

    /// Writes `bytes` on the socket under the WebSocket library (a frame no client library would
    /// send: unmasked, say).
    pub(crate) async fn send_raw(&mut self, bytes: &[u8]) {
        use tokio::io::AsyncWriteExt;
        let tokio_tungstenite::MaybeTlsStream::Plain(tcp) = self.socket.get_mut() else {
            panic!("a plain socket");
        };
        tcp.write_all(bytes).await.expect("write");
    }

    pub(crate) async fn send(&mut self, message: &Value) {
        self.send_text(message.to_string()).await;
    }

    /// Sends a request; returns its id.
    pub(crate) async fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        id
    }

    /// Sends a request and waits for its answer (the whole message: `result` or `error`).
    pub(crate) async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params).await;
        self.answer(id).await
    }

    /// Waits for the answer to request `id`.
    pub(crate) async fn answer(&mut self, id: i64) -> Value {
        self.until(|m| m.get("method").is_none() && m["id"] == id).await
    }

    /// Answers one of the daemon's requests.
    pub(crate) async fn reply(&mut self, id: &Value, result: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result})).await;
    }

    /// The next message not looked at yet, bounded by [`WAIT`]; `None` once the socket ended.
    pub(crate) async fn next(&mut self) -> Option<Value> {
        if self.read < self.seen.len() {
            self.read += 1;
            return Some(self.seen[self.read - 1].clone());
        }
        if self.ended.is_some() {
            return None;
        }
        // One deadline for the whole wait: the daemon's pings are read here too, and a timeout
        // per frame would let them keep a wait for a message that never comes going forever.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let frame = match tokio::time::timeout_at(deadline, self.socket.next()).await {
                Ok(frame) => frame,
                Err(_) => panic!("no message within {WAIT:?}; seen: {:#?}", self.seen),
            };
            match frame {
                Some(Ok(Message::Text(text))) => {
                    let value: Value = serde_json::from_str(&text).expect("every message is JSON");
                    self.seen.push(value.clone());
                    self.read = self.seen.len();
                    return Some(value);
                }
                Some(Ok(Message::Close(frame))) => {
                    self.ended = Some(
                        frame.map_or(Ended::Dropped, |f| Ended::Closed(f.code.into(), f.reason.to_string())),
                    );
                    return None;
                }
                Some(Ok(Message::Pong(payload))) => self.pongs.push(payload.to_vec()),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => {
                    self.ended = Some(Ended::Dropped);
                    return None;
                }
            }
        }
    }

    /// Reads until a message matches `done`; returns it (the ones before stay in `seen`).
    pub(crate) async fn until(&mut self, mut done: impl FnMut(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < deadline, "nothing matched within {WAIT:?}; seen: {:#?}", self.seen);
            match self.next().await {
                Some(m) if done(&m) => return m,
                Some(_) => {}
                None => panic!("the socket ended ({:?}) before a match; seen: {:#?}", self.ended, self.seen),
            }
        }
    }

    /// Reads until the socket ends; how it ended.
    pub(crate) async fn end(&mut self) -> Ended {
        while self.next().await.is_some() {}
        self.ended.clone().expect("ended")
    }

    /// The `session/update` notifications seen so far: their `update` objects.
    pub(crate) fn updates(&self) -> Vec<Value> {
        self.seen
            .iter()
            .filter(|m| m["method"] == "session/update")
            .map(|m| m["params"]["update"].clone())
            .collect()
    }
}

/// Whether `m` is the daemon's request `method`.
pub(crate) fn is_request(m: &Value, method: &str) -> bool {
    m["method"] == method && m.get("id").is_some()
}

/// Whether `m` is the daemon's event `kind` (`_qwen/notify`).
pub(crate) fn is_event(m: &Value, kind: &str) -> bool {
    m["method"] == "_qwen/notify" && m["params"]["kind"] == kind
}

//! `/acp` (`docs/protocol.md#16-acp`): the ACP transports of the ACP Streamable HTTP & WebSocket
//! transport RFD, on the daemon's own listener and behind the same perimeter as every route.
//!
//! - `GET /acp` with `Upgrade: websocket`: one connection per socket, one JSON-RPC message per text
//!   frame (binary frames are ignored).
//! - `POST /acp`: `initialize` opens a connection and is answered `200` with its result and
//!   `Acp-Connection-Id`; any other message names its connection in that header and is answered
//!   `202`, its answer arriving on a stream.
//! - `GET /acp` (`Accept: text/event-stream`): the connection's own stream, or with
//!   `Acp-Session-Id` the session's (each message an SSE `data:` line; an event's id as `id:`, so
//!   `Last-Event-ID` resumes it from the session's ring like `/session/:id/events`).
//! - `DELETE /acp`: ends the connection.
//!
//! This file only moves text between sockets or requests and a [`door::Connection`]; what the
//! messages mean is the door's (`src/door/`). It also renders the door's failures ([`render`])
//! through [`ApiError`], so `/acp` and REST give the same `code` for the same failure.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Extension;
use axum::body::Body;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures_util::{FutureExt, SinkExt, Stream, StreamExt};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_util::sync::CancellationToken;

use super::error::ApiError;
use super::extract::{AppState, RawBody, client_id};
use super::perimeter::BEARER_SUBPROTOCOL;
use super::wsframe::Frames;
use crate::acp::{Frame, params_value};
use crate::desk::Refusal;
use crate::desk::{Caller, Desk, Place};
use crate::devices::StreamPermit;
use crate::door::{
    self, Connection, Ctx, Door, Failure, Lane, Messages, NoStream, Out, Owner, SessionStream, Transport,
    wire,
};

/// `Acp-Connection-Id`: which connection a request or stream belongs to.
const CONNECTION_HEADER: &str = "acp-connection-id";
/// `Acp-Session-Id`: which session a stream (or a session's request) is about.
const SESSION_HEADER: &str = "acp-session-id";
/// `Acp-Protocol-Version`: the ACP version a request speaks (the transport RFD's phase 4, as
/// MCP's `MCP-Protocol-Version`): said on `initialize`'s answer; optional on later requests, and
/// refused when it names another version than the one negotiated.
const VERSION_HEADER: &str = "acp-protocol-version";
/// A WebSocket is pinged after this long with nothing heard from its client ...
const WS_PING_INTERVAL: Duration = Duration::from_secs(30);
/// ... and closed after this long: a half-open socket (the peer vanished) never ends otherwise.
const WS_SILENCE_LIMIT: Duration = Duration::from_secs(90);
/// Most messages taken from the queues into one socket write (one flush).
const WS_BATCH_MESSAGES: usize = 256;
/// Most bytes taken into one socket write.
const WS_BATCH_BYTES: usize = 256 * 1024;
/// The WebSocket library's read buffer, per connection (its default is 128 KiB, allocated for
/// every socket and zeroed on each read), and the most one read takes: a client sends prompts and
/// answers, small messages, and an idle connection holds this much (issue #46: 4 KiB before); a
/// larger message grows it as it arrives, up to `MAX_MESSAGE_BYTES`, in reads of this size.
const WS_READ_BUFFER: usize = 1024;
/// Silence after which an SSE stream of `/acp` gets a `: heartbeat` (like `/session/:id/events`).
const SSE_HEARTBEAT: Duration = Duration::from_secs(15);
/// How long a session's stream opened before its session is attached waits for the attach: as
/// long as a connection nobody uses is kept ([`door::HTTP_IDLE`]), since a `session/load` that
/// brings a session back starts an agent first, which has no bound of its own.
const ATTACH_WAIT: Duration = door::HTTP_IDLE;

/// WebSocket close codes (4000–4999 are the application's).
const CLOSE_GOING_AWAY: u16 = 1001;
const CLOSE_POLICY: u16 = 1008;
const CLOSE_TOO_BIG: u16 = 1009;
/// The client's stream of a session fell off the ring: reconnect and `session/load`.
const CLOSE_EVICTED: u16 = 4001;
/// The daemon refused a message it could not parse as a WebSocket frame of text.
const CLOSE_SILENT: u16 = 4002;

/// The caller of a request to `/acp`, acting as the client id its headers name (a device's
/// own, the perimeter wrote it).
fn acting(caller: Caller, headers: &HeaderMap) -> Result<Caller, ApiError> {
    Ok(caller.acting_as(client_id(headers)?))
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
}

/// A request after `initialize` that names an ACP version in `Acp-Protocol-Version` must name
/// the one `initialize` answered (every connection speaks [`crate::acp::PROTOCOL_VERSION`]).
fn check_version(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(VERSION_HEADER) else { return Ok(()) };
    let text = value.to_str().unwrap_or("").trim();
    if text.parse::<u64>().ok() == Some(crate::acp::PROTOCOL_VERSION) {
        return Ok(());
    }
    // Quoted in the error's text: at most a few characters of what was sent.
    Err(ApiError::UnsupportedProtocolVersion(text.chars().take(16).collect()))
}

/// Whether a body is a JSON-RPC batch (a JSON array).
fn is_batch(body: &[u8]) -> bool {
    body.iter().copied().find(|b| !b.is_ascii_whitespace()) == Some(b'[')
        && serde_json::from_slice::<&serde_json::value::RawValue>(body).is_ok()
}

/// `GET /acp`: a WebSocket upgrade, or an SSE stream of an open connection.
pub(super) async fn get(
    State(d): State<AppState>,
    Extension(door): Extension<Arc<Door>>,
    Extension(desk): Extension<Arc<Desk>>,
    Extension(caller): Extension<Caller>,
    req: Request,
) -> Result<Response, ApiError> {
    let (mut parts, _body) = req.into_parts();
    check_version(&parts.headers)?;
    // Kept before axum's check of the upgrade takes it: the daemon runs the socket itself.
    let on_upgrade = parts.extensions.get::<OnUpgrade>().cloned();
    if let Ok(upgrade) = WebSocketUpgrade::from_request_parts(&mut parts, &()).await
        && let Some(on_upgrade) = on_upgrade
        && let Some(key) = parts.headers.get(header::SEC_WEBSOCKET_KEY)
    {
        let handshake = Handshake { upgrade, on_upgrade, accept: derive_accept_key(key.as_bytes()) };
        let caller = acting(caller, &parts.headers)?;
        return upgrade_to_websocket(&d, &door, caller, handshake);
    }
    let headers = &parts.headers;
    let accepts = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"));
    if !accepts {
        return Err(ApiError::NotAcceptable);
    }
    let id = header_text(headers, CONNECTION_HEADER).ok_or(ApiError::AcpConnectionRequired)?;
    let conn = door.find(id, &Owner::of(&caller)).ok_or(ApiError::AcpConnectionNotFound)?;
    // The stream holds a connection: a device's counts among its bounds, as its SSE streams do.
    let Place { permit: place, revoked } = desk.open_connection(&caller)?;
    let body = match header_text(headers, SESSION_HEADER) {
        Some(session_id) => {
            let last_event_id = super::events::last_event_id(headers);
            // A stream may open before its session is attached (the transport RFD's reconnect
            // opens it, then POSTs `session/load`): if this connection may attach the session, it
            // waits for the attach.
            let taken = match conn.take_lane(session_id, last_event_id, false) {
                Err(NoStream::NotAttached) => {
                    conn.may_attach(session_id).await?;
                    conn.take_lane(session_id, last_event_id, true)
                }
                taken => taken,
            };
            let start = taken.map_err(|no| match no {
                NoStream::Busy => ApiError::AcpStreamBusy,
                NoStream::NotAttached => ApiError::Door(Failure::NotAttached(session_id.to_owned())),
                NoStream::TooManySessions => {
                    ApiError::Door(Failure::TooManySessions(door::MAX_SESSIONS_PER_CONNECTION))
                }
            })?;
            Body::from_stream(session_stream(
                conn,
                session_id.to_owned(),
                start,
                last_event_id,
                revoked,
                place,
            ))
        }
        None => {
            let messages = conn.take_messages().ok_or(ApiError::AcpStreamBusy)?;
            Body::from_stream(connection_stream(conn, messages, revoked, place))
        }
    };
    Ok(super::events::event_stream(body))
}

/// A WebSocket upgrade axum checked (`GET`, `Connection`, `Upgrade`, version 13, a key), taken
/// over by the daemon: it answers the handshake and runs the socket (`run_websocket`).
struct Handshake {
    upgrade: WebSocketUpgrade,
    on_upgrade: OnUpgrade,
    /// `Sec-WebSocket-Accept` for the client's key.
    accept: String,
}

/// The WebSocket library's settings: the bounds on what a client sends, as axum applied them.
fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(WS_READ_BUFFER)
        .max_message_size(Some(door::MAX_MESSAGE_BYTES))
        .max_frame_size(Some(door::MAX_MESSAGE_BYTES))
}

/// The socket of one `/acp` WebSocket: the library reads the client's frames and writes the
/// control frames; the daemon writes its text frames itself (`wsframe`).
type Socket = WebSocketStream<TokioIo<Upgraded>>;

/// Accepts the upgrade: the connection is opened first (so a refusal is a plain HTTP error), its
/// id goes in `Acp-Connection-Id`, and a subprotocol the client offered is chosen, never the one
/// carrying its token.
fn upgrade_to_websocket(
    d: &AppState,
    door: &Arc<Door>,
    caller: Caller,
    handshake: Handshake,
) -> Result<Response, ApiError> {
    let local = caller.local;
    // The connection is opened first (a device's within its bounds, closed when it is revoked).
    let conn = door.open(caller, Transport::WebSocket)?;
    let Handshake { upgrade, on_upgrade, accept } = handshake;
    let offered: Vec<String> = upgrade
        .requested_protocols()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty() && !p.starts_with(BEARER_SUBPROTOCOL))
        .collect();
    let protocol = upgrade.protocols(offered).selected_protocol().cloned();
    let shutdown = d.streams_end.clone();
    let id = HeaderValue::from_str(conn.id()).ok();
    let accept = HeaderValue::from_str(&accept).map_err(|_| ApiError::Refused(Refusal::Internal))?;
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let socket =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(ws_config()))
                        .await;
                run_websocket(socket, conn, local, shutdown).await;
            }
            Err(_) => conn.close(),
        }
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let h = response.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    if let Some(protocol) = protocol {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    if let Some(id) = id {
        h.insert(CONNECTION_HEADER, id);
    }
    Ok(response)
}

/// What woke a WebSocket's loop.
enum Woke {
    /// Something to write, and whatever else is ready after it.
    Write(Out),
    /// Time to ping, or to give up on a silent client.
    Ping,
    /// Nothing to write (the loop looks again).
    Nothing,
    /// The loop ends, with this close frame if any.
    End(Option<(u16, &'static str)>),
}

/// Serves one WebSocket: messages in to the connection; its own messages and its lanes' out, a
/// batch per write. Ends with the socket, the connection, the daemon's drain, or the device's
/// revocation. One task owns the socket whole (no split halves and their lock per message): it
/// reads only while waiting, and writes after.
async fn run_websocket(mut socket: Socket, conn: Arc<Connection>, local: bool, shutdown: CancellationToken) {
    let (Some(mut messages), Some(mut new_lanes)) = (conn.take_messages(), conn.take_lanes()) else {
        conn.close();
        return;
    };
    let mut lanes = Lanes::default();
    let mut frames = Frames::new();
    let closed = conn.closed();
    let revoked = conn.revoked().unwrap_or_default();
    let mut ping = tokio::time::interval_at(Instant::now() + WS_PING_INTERVAL, WS_PING_INTERVAL);
    let mut heard = Instant::now();
    // Once the daemon drains, nothing more is read; the lanes deliver what their sessions
    // published (each ends after its session's terminal event) and then the socket closes.
    let mut draining = false;
    let mut peer_closed = false;
    let close: Option<(u16, &'static str)> = loop {
        if draining && lanes.is_empty() && messages.is_empty() && new_lanes.is_empty() {
            break Some((CLOSE_GOING_AWAY, "the daemon is shutting down"));
        }
        let woke = tokio::select! {
            biased;
            // Before the close it causes (the door closes a revoked device's connections): said so.
            () = revoked.cancelled() => Woke::End(Some((CLOSE_POLICY, "this device was revoked"))),
            () = closed.cancelled() => Woke::End(None),
            // Before the drain's signal: a session attached before it is delivered to its end.
            Some(lane) = new_lanes.recv() => {
                lanes.push(lane);
                Woke::Nothing
            }
            () = shutdown.cancelled(), if !draining => {
                draining = true;
                Woke::Nothing
            }
            frame = socket.next(), if !draining => {
                heard = Instant::now();
                match frame {
                    Some(Ok(Message::Text(text))) => {
                        conn.receive(text.as_bytes(), Ctx { local, session_header: None });
                        Woke::Nothing
                    }
                    // Binary frames are ignored (the RFD); pings are answered by the library.
                    Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {
                        Woke::Nothing
                    }
                    // The library has queued its answering close: it is flushed below.
                    Some(Ok(Message::Close(_))) => {
                        peer_closed = true;
                        Woke::End(None)
                    }
                    None => Woke::End(None),
                    Some(Err(e)) => Woke::End(Some(close_for(&e))),
                }
            }
            Some(message) = messages.recv() => Woke::Write(Out::Message { json: message, event_id: None }),
            out = lanes.next(), if !lanes.is_empty() => out.map_or(Woke::Nothing, Woke::Write),
            _ = ping.tick() => Woke::Ping,
            // Nothing is ready: the connection has drained, and gives its batch buffer back (a
            // burst's batches, back to back, reuse it).
            () = std::future::ready(()), if frames.holds_room() => {
                frames.give_back();
                Woke::Nothing
            }
        };
        match woke {
            Woke::Nothing => {}
            Woke::End(close) => break close,
            Woke::Ping => {
                if heard.elapsed() > WS_SILENCE_LIMIT {
                    break Some((CLOSE_GOING_AWAY, "nothing heard from the client"));
                }
                if socket.send(Message::Ping(Bytes::new())).await.is_err() {
                    break None;
                }
            }
            Woke::Write(first) => {
                let close = gather(&mut frames, first, &mut messages, &mut lanes);
                let written = write_frames(&mut socket, &frames).await;
                frames.clear();
                match (written, close) {
                    (Ok(()), None) => {}
                    (Ok(()), Some(code)) => break Some(code),
                    (Err(()), _) => break None,
                }
            }
        }
    };
    conn.close();
    if let Some((code, reason)) = close {
        let frame = CloseFrame { code: code.into(), reason: Utf8Bytes::from_static(reason) };
        let _ = tokio::time::timeout(WS_PING_INTERVAL, socket.send(Message::Close(Some(frame)))).await;
    } else if peer_closed {
        // The close handshake (RFC 6455 §5.5.1): the client's close is answered with its code.
        let _ = tokio::time::timeout(WS_PING_INTERVAL, socket.flush()).await;
    }
}

/// Which close a receive error deserves.
fn close_for(e: &WsError) -> (u16, &'static str) {
    match e {
        WsError::Capacity(CapacityError::MessageTooLong { .. }) => {
            (CLOSE_TOO_BIG, "a message is larger than 10 MiB")
        }
        _ => (CLOSE_SILENT, "not a WebSocket frame the daemon reads"),
    }
}

/// Frames `first` and whatever else is ready without waiting, up to a batch. Returns the close a
/// lane asked for.
fn gather(
    frames: &mut Frames,
    first: Out,
    messages: &mut Messages,
    lanes: &mut Lanes,
) -> Option<(u16, &'static str)> {
    let (mut count, mut bytes) = (0usize, 0usize);
    let mut next = Some(first);
    let mut close = None;
    while let Some(out) = next.take() {
        if let Some(parts) = out.parts() {
            bytes += frames.push_text(&parts);
            count += 1;
        } else if out == Out::Evicted {
            close = Some((CLOSE_EVICTED, "client_evicted: reconnect and session/load to resume"));
            break;
        }
        if count >= WS_BATCH_MESSAGES || bytes >= WS_BATCH_BYTES {
            break;
        }
        next = match messages.try_recv() {
            Some(m) => Some(Out::Message { json: m, event_id: None }),
            None => lanes.next().now_or_never().flatten(),
        };
    }
    lanes.rotate();
    close
}

/// Writes a batch's frames in one write. What the library owes the client first (a pong it
/// queued while reading) is flushed whole, so its frames and the daemon's never interleave.
async fn write_frames<S>(socket: &mut WebSocketStream<S>, frames: &Frames) -> Result<(), ()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if frames.is_empty() {
        return Ok(());
    }
    socket.flush().await.map_err(|_| ())?;
    let io = socket.get_mut();
    io.write_all(frames.bytes()).await.map_err(|_| ())?;
    io.flush().await.map_err(|_| ())
}

/// A WebSocket's attached sessions, polled in turn. Within a batch the lane that last had something
/// is asked first (its converted messages drain without a look at the others); each batch starts
/// one lane further, so a busy session cannot starve the others. (`SelectAll` re-queues a stream,
/// an allocation, for every item.)
#[derive(Default)]
struct Lanes {
    /// Room for exactly the lanes attached (a lane is large, and a connection usually has one;
    /// issue #46).
    lanes: Vec<Lane>,
    next: usize,
}

impl Lanes {
    fn push(&mut self, lane: Lane) {
        self.lanes.reserve_exact(1);
        self.lanes.push(lane);
    }

    fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    fn rotate(&mut self) {
        self.next = self.next.wrapping_add(1);
    }
}

impl Stream for Lanes {
    type Item = Out;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Out>> {
        let this = self.get_mut();
        let mut tried = 0;
        while tried < this.lanes.len() {
            let at = (this.next + tried) % this.lanes.len();
            match this.lanes[at].poll_next_unpin(cx) {
                Poll::Ready(Some(out)) => {
                    this.next = at;
                    return Poll::Ready(Some(out));
                }
                // An ended lane leaves; the others are tried from the start again.
                Poll::Ready(None) => {
                    this.lanes.remove(at);
                    tried = 0;
                }
                Poll::Pending => tried += 1,
            }
        }
        if this.lanes.is_empty() { Poll::Ready(None) } else { Poll::Pending }
    }
}

/// One SSE frame: `id:` when the message came from an event, then the message on one `data:` line.
fn sse_frame(out: &Out) -> Option<Bytes> {
    match (out.parts(), out) {
        (Some(parts), _) => {
            let mut f = BytesMut::with_capacity(parts.iter().map(|p| p.len()).sum::<usize>() + 32);
            if let Some(id) = out.event_id() {
                f.extend_from_slice(format!("id: {id}\n").as_bytes());
            }
            f.extend_from_slice(b"data: ");
            for part in parts {
                f.extend_from_slice(part);
            }
            f.extend_from_slice(b"\n\n");
            Some(f.freeze())
        }
        (None, Out::Keepalive) => Some(Bytes::from_static(b": heartbeat\n\n")),
        (None, _) => None,
    }
}

/// Hands a lane back to its connection when its stream ends, and counts the stream open.
struct LaneGuard {
    conn: Arc<Connection>,
    lane: Option<Lane>,
    /// A device's place, freed with the stream.
    _place: Option<StreamPermit>,
}

impl LaneGuard {
    fn new(conn: Arc<Connection>, lane: Lane, place: Option<StreamPermit>) -> LaneGuard {
        conn.stream_opened();
        LaneGuard { conn, lane: Some(lane), _place: place }
    }
}

impl Drop for LaneGuard {
    fn drop(&mut self) {
        if let Some(lane) = self.lane.take() {
            self.conn.park_lane(lane);
        }
        self.conn.stream_closed();
    }
}

/// A session's stream waiting for its session's attach; counts the stream open, and frees the
/// session's waiting place when it ends without the lane.
struct WaitGuard {
    conn: Arc<Connection>,
    session_id: String,
    lane: Option<tokio::sync::oneshot::Receiver<Lane>>,
    place: Option<StreamPermit>,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        // A lane handed over as the stream ended is given back, not dropped with the receiver.
        if let Some(Ok(lane)) = self.lane.take().map(|mut rx| rx.try_recv()) {
            self.conn.park_lane(lane);
        }
        self.conn.stop_waiting(&self.session_id);
        self.conn.stream_closed();
    }
}

/// Where a session's stream is.
enum Phase {
    Waiting(WaitGuard),
    Streaming(LaneGuard),
}

/// A session's SSE stream on a Streamable HTTP connection: the lane's messages, after waiting
/// (with heartbeats, for at most [`ATTACH_WAIT`]) for the attach when the session was not
/// attached yet. Ends with the connection, the device's revocation, or a wait that ran out.
fn session_stream(
    conn: Arc<Connection>,
    session_id: String,
    start: SessionStream,
    last_event_id: Option<u64>,
    revoked: Option<CancellationToken>,
    place: Option<StreamPermit>,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let ended = end_signal(&conn, revoked);
    let phase = match start {
        SessionStream::Ready(lane) => Phase::Streaming(LaneGuard::new(conn, lane, place)),
        SessionStream::Pending(lane) => {
            conn.stream_opened();
            Phase::Waiting(WaitGuard { conn, session_id, lane: Some(lane), place })
        }
    };
    let deadline = Instant::now() + ATTACH_WAIT;
    futures_util::stream::unfold((phase, ended), move |(phase, ended)| async move {
        let mut guard = match phase {
            Phase::Streaming(guard) => guard,
            Phase::Waiting(mut wait) => {
                let waiting = wait.lane.as_mut()?;
                let lane = tokio::select! {
                    () = ended.cancelled() => return None,
                    () = tokio::time::sleep_until(deadline) => return None,
                    // An error: the connection closed.
                    lane = waiting => lane.ok()?,
                    () = tokio::time::sleep(SSE_HEARTBEAT) => {
                        let beat = sse_frame(&Out::Keepalive)?;
                        return Some((Ok(beat), (Phase::Waiting(wait), ended)));
                    }
                };
                let lane = wait.conn.lane_arrived(lane, last_event_id)?;
                LaneGuard::new(wait.conn.clone(), lane, wait.place.take())
            }
        };
        let lane = guard.lane.as_mut()?;
        let out = tokio::select! {
            () = ended.cancelled() => return None,
            out = lane.next() => out?,
        };
        let frame = sse_frame(&out)?;
        Some((Ok(frame), (Phase::Streaming(guard), ended)))
    })
}

/// Gives the connection's queue back when its stream ends.
struct MessagesGuard {
    conn: Arc<Connection>,
    messages: Option<Messages>,
    /// A device's place, freed with the stream.
    _place: Option<StreamPermit>,
}

impl Drop for MessagesGuard {
    fn drop(&mut self) {
        if let Some(rx) = self.messages.take() {
            self.conn.park_messages(rx);
        }
        self.conn.stream_closed();
    }
}

/// A connection's own SSE stream: its answers, and a heartbeat in silence.
fn connection_stream(
    conn: Arc<Connection>,
    messages: Messages,
    revoked: Option<CancellationToken>,
    place: Option<StreamPermit>,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    conn.stream_opened();
    let ended = end_signal(&conn, revoked);
    let guard = MessagesGuard { conn, messages: Some(messages), _place: place };
    futures_util::stream::unfold((guard, ended), |(mut guard, ended)| async move {
        let rx = guard.messages.as_mut()?;
        let out = tokio::select! {
            () = ended.cancelled() => return None,
            m = rx.recv() => Out::Message { json: m?, event_id: None },
            () = tokio::time::sleep(SSE_HEARTBEAT) => Out::Keepalive,
        };
        let frame = sse_frame(&out)?;
        Some((Ok(frame), (guard, ended)))
    })
}

/// Fires when the connection closes, the daemon drains, or the device is revoked.
fn end_signal(conn: &Connection, revoked: Option<CancellationToken>) -> CancellationToken {
    let end = CancellationToken::new();
    let (closed, fire) = (conn.closed(), end.clone());
    tokio::spawn(async move {
        let revoked = revoked.unwrap_or_default();
        tokio::select! {
            () = closed.cancelled() => {}
            () = revoked.cancelled() => {}
            () = fire.cancelled() => return,
        }
        fire.cancel();
    });
    end
}

/// `POST /acp`.
pub(super) async fn post(
    Extension(door): Extension<Arc<Door>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(ApiError::UnsupportedMediaType);
    }
    let caller = acting(caller, &headers)?;
    if is_batch(&body) {
        return Err(ApiError::BatchNotSupported);
    }
    let frame = Frame::parse(&body);
    if let Frame::Malformed(_) = frame {
        return Err(if wire::refusal(&body).code == wire::PARSE_ERROR {
            ApiError::InvalidJson
        } else {
            ApiError::InvalidJsonRpc
        });
    }
    let is_initialize = matches!(&frame, Frame::Request { method, .. } if method == "initialize");
    let Some(id) = header_text(&headers, CONNECTION_HEADER) else {
        let Frame::Request { id, params, .. } = frame else { return Err(ApiError::AcpConnectionRequired) };
        if !is_initialize {
            return Err(ApiError::AcpConnectionRequired);
        }
        let conn = door.open(caller, Transport::Http)?;
        let params = params_value(params);
        let answer = match conn.initialize(&params) {
            Ok(result) => wire::response(&id, &result),
            Err(f) => wire::error(Some(&id), &f.render()),
        };
        return Ok(jsonrpc(StatusCode::OK, answer, Some(conn.id())));
    };
    if is_initialize {
        return Err(ApiError::Door(Failure::AlreadyInitialized));
    }
    check_version(&headers)?;
    let conn = door.find(id, &Owner::of(&caller)).ok_or(ApiError::AcpConnectionNotFound)?;
    let ctx =
        Ctx { local: caller.local, session_header: header_text(&headers, SESSION_HEADER).map(str::to_owned) };
    conn.receive(&body, ctx);
    Ok(StatusCode::ACCEPTED.into_response())
}

fn jsonrpc(status: StatusCode, body: Bytes, connection: Option<&str>) -> Response {
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(id) = connection.and_then(|c| HeaderValue::from_str(c).ok()) {
        h.insert(CONNECTION_HEADER, id);
    }
    h.insert(VERSION_HEADER, HeaderValue::from(crate::acp::PROTOCOL_VERSION));
    response
}

/// `DELETE /acp`: ends the connection named in `Acp-Connection-Id`.
pub(super) async fn delete(
    Extension(door): Extension<Arc<Door>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    check_version(&headers)?;
    let id = header_text(&headers, CONNECTION_HEADER).ok_or(ApiError::AcpConnectionRequired)?;
    let conn = door.find(id, &Owner::of(&caller)).ok_or(ApiError::AcpConnectionNotFound)?;
    conn.close();
    Ok(StatusCode::ACCEPTED.into_response())
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use tokio::io::AsyncReadExt;
    use tokio_tungstenite::tungstenite::protocol::WebSocket;
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;

    use super::*;

    /// A pong the library began writing while it read (the socket took only part of it) is
    /// finished before the daemon's own frames go out: the client reads the pong, then the
    /// message, each whole.
    #[tokio::test]
    async fn the_daemons_frames_follow_a_pong_the_library_began_whole() {
        // A socket that takes 16 bytes at a time, until its peer reads them.
        let (server, client) = tokio::io::duplex(16);
        let (mut client, mut client_out) = tokio::io::split(client);
        let mut socket = WebSocketStream::from_raw_socket(server, Role::Server, None).await;
        let payload = vec![b'p'; 100];
        let mut ping = Frame::ping(payload.clone());
        ping.header_mut().mask = Some([1, 2, 3, 4]);
        let mut sent = Vec::new();
        ping.format(&mut sent).expect("a frame formats");
        let writer = tokio::spawn(async move { client_out.write_all(&sent).await.map(|()| client_out) });
        assert!(matches!(socket.next().await, Some(Ok(Message::Ping(_)))));
        let _client_out = writer.await.expect("the writer").expect("the ping went in");
        // Reading on, the library writes the first 16 bytes of its pong, then waits.
        assert!(socket.next().now_or_never().is_none(), "nothing more to read");
        let reader = tokio::spawn(async move {
            let mut bytes = Vec::new();
            client.read_to_end(&mut bytes).await.expect("read");
            bytes
        });
        let mut frames = Frames::new();
        frames.push_text(&[br#"{"jsonrpc":"2.0","method":"x"}"#]);
        write_frames(&mut socket, &frames).await.expect("written");
        drop(socket);
        let bytes = reader.await.expect("the reader");
        let mut read = WebSocket::from_raw_socket(Cursor::new(bytes), Role::Client, None);
        assert_eq!(read.read().expect("the pong"), Message::Pong(payload.into()));
        assert_eq!(read.read().expect("the message"), Message::text(r#"{"jsonrpc":"2.0","method":"x"}"#));
    }
}

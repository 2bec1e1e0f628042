//! One ACP client connection: who it is, what it sent, where the answers go.
//!
//! Inbound, a message is classified ([`crate::acp::Frame`]) and a request is served on a task of
//! its own (at most [`MAX_CALLS_IN_FLIGHT`] at once), so a prompt queued behind a long turn never
//! holds up the client's other requests or its votes. Outbound, answers to connection-wide
//! requests go on the connection's own queue (bounded: a client that stops reading is closed);
//! events and the answers that must follow them go on each attached session's [`Lane`].
//!
//! A WebSocket connection hands both to the socket's writer; a Streamable HTTP connection parks
//! them until the client opens the matching `GET /acp` stream, or hands a lane to the stream of
//! its session opened before the attach (the transport RFD's reconnect: the stream, then
//! `session/load`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

use super::failure::Failure;
use super::lane::{Deferred, Lane};
use super::shared::{Owner, Shared};
use super::wire;
use crate::acp::{Frame, RequestId, RpcError, params_value};
use crate::daemon::{Daemon, Session};
use crate::desk::{Access, Caller, Desk, Place, Seat};
use crate::devices::StreamPermit;
use crate::permission::{Choice, Pick, Vote};
use crate::store::homed_id;
use crate::sync::lock;
use crate::sync::queue::{self, Refused};

/// Sessions one connection may attach.
pub const MAX_SESSIONS_PER_CONNECTION: usize = 64;
/// Requests of one connection being served at once (a prompt counts until it is queued, not for
/// its turn); past it a request is answered `too_many_requests` at once.
pub const MAX_CALLS_IN_FLIGHT: usize = 64;
/// Largest inbound message: the REST body cap (`docs/protocol.md#24-bodies`).
pub const MAX_MESSAGE_BYTES: usize = 10 * 1024 * 1024;

/// Messages queued on a connection's own stream. Each answers one of the client's requests (at
/// most [`MAX_CALLS_IN_FLIGHT`] are served at once) or refuses one of its messages, so a client
/// that reads what it is sent never fills it; one that does not is closed.
const MESSAGE_QUEUE: usize = 256;

/// Which transport carries the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    WebSocket,
    Http,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::WebSocket => "websocket",
            Transport::Http => "http",
        }
    }
}

/// What the transport knows about one inbound message.
#[derive(Debug, Clone, Default)]
pub struct Ctx {
    /// The caller is on this host's loopback, as the desk's caller of this message says (the
    /// `local-only` policy reads it from here, never a header).
    pub local: bool,
    /// Streamable HTTP's `Acp-Session-Id`, when sent: it must agree with `params.sessionId`.
    pub session_header: Option<String>,
}

/// An attached session.
struct Attached {
    /// Weak: an ended session is dropped by the daemon and by its lane, not kept by a connection.
    session: Weak<Session>,
    replies: queue::Sender<Deferred>,
    stop: CancellationToken,
    /// Streamable HTTP: the lane waiting for its `GET /acp` (`None` while a stream has it).
    parked: Option<Box<Lane>>,
    /// A device's place among the session's readers (`devices::StreamLimits`), held while
    /// attached, as an SSE stream of the session holds one.
    _place: Option<StreamPermit>,
}

/// A connection's own messages (its answers, its requests to the client), for the one transport
/// stream that drains them.
pub type Messages = queue::Receiver<Bytes>;

/// Activity, for forgetting a Streamable HTTP connection its client abandoned.
#[derive(Debug)]
struct Activity {
    last: Instant,
    streams: usize,
}

/// One ACP client connection.
pub struct Connection {
    /// Takes the connection off the door's table once it has closed.
    forget: Forget,
    pub(super) shared: Arc<Shared>,
    owner: Owner,
    pub(super) transport: Transport,
    messages_tx: queue::Sender<Bytes>,
    messages_rx: Mutex<Option<Messages>>,
    /// WebSocket: lanes go to the socket's writer as they are attached.
    lanes_tx: queue::Sender<Lane>,
    lanes_rx: Mutex<Option<queue::Receiver<Lane>>>,
    attached: Mutex<HashMap<String, Attached>>,
    /// Streamable HTTP: the session streams opened before their session was attached, by session
    /// id; the attach hands the lane over. With `attached`, at most
    /// [`MAX_SESSIONS_PER_CONNECTION`] in all. Lock order: `attached`, then this.
    waiting: Mutex<HashMap<String, oneshot::Sender<Lane>>>,
    calls: Arc<Semaphore>,
    closed: CancellationToken,
    activity: Mutex<Activity>,
    pub(super) initialized: AtomicBool,
    /// A device's place among its bounds, held while the connection is open.
    _place: Option<StreamPermit>,
    /// Fires when the connection's device is revoked (the door then closes it).
    revoked: Option<CancellationToken>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("id", &self.shared.id)
            .field("transport", &self.transport)
            .field("closed", &self.closed.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Connection {
    pub(super) fn new(
        desk: Arc<Desk>,
        forget: Forget,
        caller: Caller,
        transport: Transport,
        place: Place,
    ) -> Arc<Connection> {
        let (messages_tx, messages_rx) = queue::bounded(MESSAGE_QUEUE);
        let (lanes_tx, lanes_rx) = queue::bounded(MAX_SESSIONS_PER_CONNECTION);
        let owner = Owner::of(&caller);
        // In a fleet its id names this daemon, so any daemon passes the connection's later
        // requests here (`docs/protocol.md#173-any-daemon-answers-any-route`).
        let id = homed_id(desk.daemon().node_url().as_deref());
        let shared = Arc::new(Shared::opening(desk, id, caller.client.clone(), caller.who, caller.local));
        Arc::new(Connection {
            forget,
            shared,
            owner,
            transport,
            messages_tx,
            messages_rx: Mutex::new(Some(messages_rx)),
            lanes_tx,
            lanes_rx: Mutex::new(Some(lanes_rx)),
            attached: Mutex::new(HashMap::new()),
            waiting: Mutex::new(HashMap::new()),
            calls: Arc::new(Semaphore::new(MAX_CALLS_IN_FLIGHT)),
            closed: CancellationToken::new(),
            activity: Mutex::new(Activity { last: Instant::now(), streams: 0 }),
            initialized: AtomicBool::new(false),
            _place: place.permit,
            revoked: place.revoked,
        })
    }

    /// Fires when the device that opened the connection is revoked (`None`: the operator's).
    pub fn revoked(&self) -> Option<CancellationToken> {
        self.revoked.clone()
    }

    /// The connection's id (`Acp-Connection-Id`).
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    pub(super) fn owner(&self) -> &Owner {
        &self.owner
    }

    pub(super) fn daemon(&self) -> &Arc<Daemon> {
        self.shared.desk.daemon()
    }

    pub(super) fn desk(&self) -> &Arc<Desk> {
        &self.shared.desk
    }

    /// The connection as the desk's caller, as it stands now.
    pub(super) fn caller(&self) -> Caller {
        self.shared.caller()
    }

    /// Fires when the connection closes.
    pub fn closed(&self) -> CancellationToken {
        self.closed.clone()
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// The connection's own message queue, for the one transport stream that drains it (`None`
    /// while another has it).
    pub fn take_messages(&self) -> Option<Messages> {
        lock(&self.messages_rx).take()
    }

    /// Gives back the queue a stream was draining (Streamable HTTP: the client may open another).
    pub fn park_messages(&self, rx: Messages) {
        if !self.is_closed() {
            *lock(&self.messages_rx) = Some(rx);
        }
    }

    /// WebSocket: the lanes as sessions are attached.
    pub fn take_lanes(&self) -> Option<queue::Receiver<Lane>> {
        lock(&self.lanes_rx).take()
    }

    /// Streamable HTTP: the lane of `session_id`, for its `GET /acp` stream; `last_event_id`
    /// restarts it there. With `wait`, a session not attached yet gets a [`SessionStream::Pending`]
    /// that its attach fulfils (the caller has checked that the connection may attach it).
    pub fn take_lane(
        &self,
        session_id: &str,
        last_event_id: Option<u64>,
        wait: bool,
    ) -> Result<SessionStream, NoStream> {
        let mut attached = lock(&self.attached);
        let Some(entry) = attached.get_mut(session_id) else {
            if !wait {
                return Err(NoStream::NotAttached);
            }
            let mut waiting = lock(&self.waiting);
            if waiting.contains_key(session_id) {
                return Err(NoStream::Busy);
            }
            if attached.len() + waiting.len() >= MAX_SESSIONS_PER_CONNECTION {
                return Err(NoStream::TooManySessions);
            }
            let (tx, rx) = oneshot::channel();
            waiting.insert(session_id.to_owned(), tx);
            return Ok(SessionStream::Pending(rx));
        };
        let mut lane = entry.parked.take().ok_or(NoStream::Busy)?;
        if let Some(after) = last_event_id
            && !self.restart(&mut lane, entry, after)
        {
            entry.parked = Some(lane);
            return Err(NoStream::NotAttached);
        }
        Ok(SessionStream::Ready(*lane))
    }

    /// A lane a stream waited for ([`SessionStream::Pending`]), restarted after `last_event_id`
    /// if given; `None` (the lane parked again) when the session is gone or the ring cannot.
    pub fn lane_arrived(&self, mut lane: Lane, last_event_id: Option<u64>) -> Option<Lane> {
        let Some(after) = last_event_id else { return Some(lane) };
        let mut attached = lock(&self.attached);
        let entry = attached.get_mut(lane.session_id())?;
        if self.restart(&mut lane, entry, after) {
            return Some(lane);
        }
        entry.parked = Some(Box::new(lane));
        None
    }

    /// Restarts `lane` after event `after` from a new subscription of its session.
    fn restart(&self, lane: &mut Lane, entry: &Attached, after: u64) -> bool {
        let Some(session) = entry.session.upgrade() else { return false };
        let Ok(sub) = self.desk().resubscribe(&session, after) else { return false };
        let cursor = sub.cursor();
        let source = Box::pin(sub.into_marked(self.daemon().streams_end.clone()));
        lane.restart(source, cursor, true);
        true
    }

    /// A stream that waited for `session_id`'s attach ended: its place is free again (a lane
    /// handed over meanwhile, the stream gives back with [`Connection::park_lane`]).
    pub fn stop_waiting(&self, session_id: &str) {
        let mut waiting = lock(&self.waiting);
        if waiting.get(session_id).is_some_and(oneshot::Sender::is_closed) {
            waiting.remove(session_id);
        }
    }

    /// Gives back a lane whose stream ended (the client may open it again). A stopped lane is
    /// not: the session's entry now holds its successor (re-attached) or is gone.
    pub fn park_lane(&self, lane: Lane) {
        if self.is_closed() || lane.is_stopped() {
            return;
        }
        if let Some(entry) = lock(&self.attached).get_mut(lane.session_id()) {
            entry.parked = Some(Box::new(lane));
        }
    }

    /// A transport stream opened or closed (Streamable HTTP keeps a connection with one open).
    pub fn stream_opened(&self) {
        let mut a = lock(&self.activity);
        a.streams += 1;
        a.last = Instant::now();
    }

    pub fn stream_closed(&self) {
        let mut a = lock(&self.activity);
        a.streams = a.streams.saturating_sub(1);
        a.last = Instant::now();
    }

    fn touch(&self) {
        lock(&self.activity).last = Instant::now();
    }

    /// Whether this is a Streamable HTTP connection nobody has used for `limit`.
    pub(super) fn idle_since(&self, now: Instant, limit: Duration) -> bool {
        let a = lock(&self.activity);
        self.transport == Transport::Http && a.streams == 0 && now.duration_since(a.last) > limit
    }

    /// Queues a message on the connection's own stream; a client that lets the queue fill is not
    /// reading, and is closed.
    pub(super) fn send(&self, message: Bytes) {
        if let Err(Refused::Full(_)) = self.messages_tx.try_send(message) {
            tracing::info!(connection = %self.shared.id, "closing an ACP connection whose client reads nothing");
            self.close();
        }
    }

    /// Hands one inbound message to the connection. Requests are served on tasks of their own;
    /// this never waits on the daemon.
    pub fn receive(self: &Arc<Self>, text: &[u8], ctx: Ctx) {
        self.touch();
        self.shared.local.store(ctx.local, Ordering::Relaxed);
        if text.len() > MAX_MESSAGE_BYTES {
            let e = RpcError::with_kind(
                wire::INVALID_REQUEST,
                "message_too_large",
                "the message is larger than 10 MiB",
            );
            self.send(wire::error(None, &e));
            return;
        }
        match Frame::parse(text) {
            Frame::Malformed(_) => self.send(wire::error(None, &wire::refusal(text))),
            Frame::Response { id, result } => self.answered(&id, result),
            Frame::Notification { method, params } => self.notified(&method, params),
            Frame::Request { id, method, params } => self.requested(id, method, params, ctx),
        }
    }

    fn requested(self: &Arc<Self>, id: RequestId, method: String, params: Option<Box<RawValue>>, ctx: Ctx) {
        // Answered in order, before the next frame is read: every other request runs on a task of
        // its own, and a client that sends `initialize` and a `session/load` together (connect
        // after a reconnect) must not find the load served first and refused as uninitialized.
        if method == "initialize" {
            let params = params_value(params);
            self.send(answer(&id, self.initialize(&params)));
            return;
        }
        let Ok(permit) = self.calls.clone().try_acquire_owned() else {
            self.send(wire::error(Some(&id), &Failure::TooManyCalls(MAX_CALLS_IN_FLIGHT).render()));
            return;
        };
        // `$/cancel_request` fires it: the request's work is dropped and it is answered -32800.
        // Recorded here, before the request's task runs, so a cancel read right after the
        // request (a client cancelling at once) finds it.
        let cancel = self.shared.serving(&id);
        let this = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let closed = this.closed.clone();
            let cancelled = async {
                match &cancel {
                    Some(c) => c.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            // Biased: a request cancelled before its task ran is not served at all.
            tokio::select! {
                biased;
                () = closed.cancelled() => {}
                () = cancelled => this.send(wire::error(Some(&id), &Failure::Cancelled.render())),
                () = this.serve(id.clone(), method, params, ctx) => {}
            }
            if cancel.is_some() {
                this.shared.served(&id);
            }
        });
    }

    /// Serves one request and sends its answer where it belongs.
    async fn serve(self: &Arc<Self>, id: RequestId, method: String, params: Option<Box<RawValue>>, ctx: Ctx) {
        let params = params_value(params);
        match self.call(&method, &params, &ctx, &id).await {
            Reply::Now(result) => self.send(answer(&id, result)),
            Reply::Attached { result, lane } => {
                self.send(answer(&id, Ok(result)));
                self.deliver(lane);
            }
            Reply::After { session_id, gate, result } => {
                self.send_after(&session_id, gate, answer(&id, result))
            }
            Reply::Later => {}
        }
    }

    /// Sends `json` on `session_id`'s lane once the events published up to `gate` are sent (on
    /// the connection's own queue when the session is not attached).
    fn send_after(&self, session_id: &str, gate: u64, json: Bytes) {
        let replies = lock(&self.attached).get(session_id).map(|a| a.replies.clone());
        match replies {
            Some(tx) => {
                if tx.try_send(Deferred { gate, json: json.clone() }).is_err() {
                    self.send(json);
                }
            }
            None => self.send(json),
        }
    }

    /// `$/cancel_request {requestId}` (the request cancellation RFD): a request being served
    /// is dropped and answered `-32800`; a prompt still queued never runs and is answered
    /// `-32800` at once; a prompt whose turn is running has its turn cancelled, and is answered
    /// when the turn ends (`stopReason: "cancelled"`, the RFD's "valid response"). A request
    /// already answered, or unknown, is ignored, as the RFD says.
    fn cancel_request(&self, params: Option<Box<RawValue>>) {
        let Some(id) = params
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| p.get("requestId").cloned())
            .and_then(|id| serde_json::from_value::<RequestId>(id).ok())
        else {
            return;
        };
        // A request still being served is answered -32800 by its task. A prompt whose serving
        // ended is queued or running: its token (a child of the serving one) is fired below.
        self.shared.cancel_serving(&id);
        let Some((session_id, prompt_id, cancel)) = self.shared.prompt_of(&id) else { return };
        let running = self.attached_session(&session_id).is_some_and(|s| s.is_running(&prompt_id));
        cancel.cancel();
        if running {
            return;
        }
        // Queued: its answer is the cancellation, now; the turn that would have been its ends
        // `cancelled` unasked, and owes this connection nothing.
        if let Some(id) = self.shared.take_prompt(&session_id, &prompt_id) {
            let gate = self.attached_session(&session_id).map_or(0, |s| s.last_event_id());
            self.send_after(&session_id, gate, wire::error(Some(&id), &Failure::Cancelled.render()));
        }
    }

    /// The client's answer to one of the daemon's requests: a vote, or an abstention (an error).
    fn answered(&self, id: &RequestId, result: Result<Box<RawValue>, RpcError>) {
        let RequestId::Text(ours) = id else {
            tracing::debug!(connection = %self.shared.id, "an answer to a request the daemon never sent");
            return;
        };
        let Some(asked) = self.shared.take_asked(ours) else {
            // Withdrawn (decided elsewhere) or never asked: nothing to do.
            tracing::debug!(connection = %self.shared.id, "an answer to a withdrawn or unknown request");
            return;
        };
        // An answer to `elicitation/create` is `{action, content?}`; to `session/request_permission`
        // `{outcome, answers?}`: either is one vote.
        let parse = if asked.elicitation { Vote::from_elicitation } else { Vote::parse };
        let vote = match result {
            Ok(result) => serde_json::from_str::<Value>(result.get()).ok().and_then(|v| parse(&v)),
            // A client that cannot answer abstains; it does not cancel for everyone.
            Err(e) if e.code != super::failure::REQUEST_CANCELLED => return,
            Err(_) => {
                Some(Vote::from(Pick::Outcome { choice: Choice::Cancel, remember: Default::default() }))
            }
        };
        let Some(vote) = vote else {
            tracing::debug!(connection = %self.shared.id, elicitation = asked.elicitation, "an answer to the daemon's request that is no vote");
            return;
        };
        let (session_id, request_id) = (asked.session_id, asked.request_id);
        let Ok(session) = self.daemon().session(&session_id) else { return };
        // Cancelled on the client's side (`-32800`, or the `cancelled` outcome ACP gives a
        // question whose turn the client cancelled): that client's ballot is withdrawn, not the
        // request, which other clients may still decide.
        if matches!(vote.pick, Pick::Outcome { choice: Choice::Cancel, .. }) {
            self.desk().withdraw_ballot(&session, &self.caller(), &request_id);
            return;
        }
        // The caller as it was when the answer came (its peer among them), through the desk like
        // every vote: a decision remembered for the workspace is waited for, and a failure to
        // remember it is said in the log (nobody waits for an answer to an answer).
        let (desk, caller, connection) = (self.desk().clone(), self.caller(), self.shared.id.clone());
        tokio::spawn(async move {
            if let Err(e) = desk.vote(&session, &caller, &request_id, &vote).await {
                tracing::debug!(connection = %connection, error = %e, "a vote from an ACP client was not counted");
            }
        });
    }

    fn notified(self: &Arc<Self>, method: &str, params: Option<Box<RawValue>>) {
        if method == "$/cancel_request" {
            self.cancel_request(params);
            return;
        }
        if method != "session/cancel" {
            // `initialized`, extensions: nothing to do (ACP lets a receiver ignore the
            // notifications it does not act on).
            return;
        }
        let session_id = params
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| p.get("sessionId").and_then(Value::as_str).map(str::to_owned));
        let Some(session_id) = session_id else { return };
        if self.may_write().is_err() {
            return;
        }
        let Some(session) = self.attached_session(&session_id) else { return };
        tokio::spawn(async move { session.cancel().await });
    }

    pub(super) fn attached_session(&self, session_id: &str) -> Option<Arc<Session>> {
        lock(&self.attached).get(session_id).and_then(|a| a.session.upgrade())
    }

    /// The client id this connection acts as: the one it was opened with, else `claimed` (the
    /// first `_meta.clientId`, checked), else one the door mints. A different claim later is
    /// refused.
    pub(super) fn client_id(&self, claimed: Option<&str>) -> Result<String, Failure> {
        if let Some(c) = claimed
            && !crate::daemon::valid_client_id(c)
        {
            return Err(Failure::invalid_params("_meta.clientId must match ^[A-Za-z0-9._:-]{1,128}$"));
        }
        let bound = self.shared.client.get_or_init(|| match claimed {
            Some(c) => c.to_owned(),
            None => {
                self.shared.minted.store(true, Ordering::Relaxed);
                format!("acp-{}", uuid::Uuid::new_v4())
            }
        });
        match claimed {
            Some(c) if c != bound => Err(Failure::ClientIdMismatch(bound.clone())),
            _ => Ok(bound.clone()),
        }
    }

    /// Sets what the client asked for at `initialize`.
    pub(super) fn set_flags(&self, echo_own: bool, envelope: bool) {
        self.shared.echo_own.store(echo_own, Ordering::Relaxed);
        self.shared.envelope.store(envelope, Ordering::Relaxed);
    }

    /// Sets the elicitation modes the client advertised at `initialize`.
    pub(super) fn set_elicitation(&self, form: bool, url: bool) {
        self.shared.elicit_form.store(form, Ordering::Relaxed);
        self.shared.elicit_url.store(url, Ordering::Relaxed);
    }

    /// Whether the connection may do what `access` asks (the desk judges).
    pub(super) fn may(&self, access: Access) -> Result<(), Failure> {
        Ok(self.desk().check(&self.caller(), access)?)
    }

    pub(super) fn may_write(&self) -> Result<(), Failure> {
        self.may(Access::Write)
    }

    /// Attaches `session`: registers the client on it and opens its lane, reading from the newest
    /// event on (`after: None`) or replaying after `after`. Re-attaching replaces the lane. The
    /// lane is returned to be handed on with [`Connection::deliver`] once whatever must precede
    /// its events (the answer to `session/new`) is queued.
    pub(super) fn attach(&self, session: &Arc<Session>, after: Option<u64>) -> Result<Lane, Failure> {
        let caller = self.caller();
        let mut attached = lock(&self.attached);
        let old = attached.remove(&session.id);
        if old.is_none() && attached.len() >= MAX_SESSIONS_PER_CONNECTION {
            return Err(Failure::TooManySessions(MAX_SESSIONS_PER_CONNECTION));
        }
        // Re-attaching keeps the place it held; a first attach takes one over this connection.
        let seat = if old.is_some() { Seat::Kept } else { Seat::OverConnection };
        let watch = match self.desk().subscribe(session, &caller, after, seat) {
            Ok(watch) => watch,
            Err(e) => {
                if let Some(old) = old {
                    attached.insert(session.id.clone(), old);
                }
                return Err(e.into());
            }
        };
        let place = match old {
            Some(mut old) => {
                old.stop.cancel();
                old._place.take()
            }
            None => watch.place.permit,
        };
        let cursor = watch.subscription.cursor();
        let source = Box::pin(watch.subscription.into_marked(self.daemon().streams_end.clone()));
        let (tx, rx) = queue::bounded(MAX_CALLS_IN_FLIGHT);
        let stop = self.closed.child_token();
        let lane = Lane::new(
            session.clone(),
            self.shared.clone(),
            source,
            cursor,
            after.is_some(),
            rx,
            stop.clone(),
        );
        let entry =
            Attached { session: Arc::downgrade(session), replies: tx, stop, parked: None, _place: place };
        attached.insert(session.id.clone(), entry);
        Ok(lane)
    }

    /// Hands an attached session's lane to the transport: a WebSocket's writer, or the parking
    /// spot a Streamable HTTP client's `GET /acp` takes it from.
    pub(super) fn deliver(&self, lane: Lane) {
        match self.transport {
            Transport::Http => {
                let mut attached = lock(&self.attached);
                let Some(entry) = attached.get_mut(lane.session_id()) else { return };
                let waiter = lock(&self.waiting).remove(lane.session_id());
                let lane = match waiter {
                    Some(stream) => match stream.send(lane) {
                        Ok(()) => return,
                        // The stream that waited has just ended: parked for the next.
                        Err(lane) => lane,
                    },
                    None => lane,
                };
                entry.parked = Some(Box::new(lane));
            }
            // The queue holds as many lanes as a connection may attach.
            Transport::WebSocket => {
                let _ = self.lanes_tx.try_send(lane);
            }
        }
    }

    /// Detaches `session_id`: its lane ends, and the client leaves the session.
    pub(super) fn detach(&self, session_id: &str) -> bool {
        let Some(entry) = lock(&self.attached).remove(session_id) else { return false };
        entry.stop.cancel();
        for id in self.shared.drop_prompts(session_id) {
            self.send(super::lane::gone(&id, session_id));
        }
        if let Some(session) = entry.session.upgrade() {
            self.desk().leave(&session, &self.caller());
        }
        true
    }

    /// Ends the connection: its lanes and its requests in progress stop; a client id the door
    /// minted leaves its sessions (one the client named stays, as a REST client's does, until it
    /// detaches).
    pub fn close(&self) {
        if self.closed.is_cancelled() {
            return;
        }
        self.closed.cancel();
        let attached: Vec<Attached> = lock(&self.attached).drain().map(|(_, a)| a).collect();
        // Streams still waiting for an attach end (their sender gone).
        lock(&self.waiting).clear();
        let caller = self.caller();
        for a in attached {
            a.stop.cancel();
            if caller.minted
                && let Some(session) = a.session.upgrade()
            {
                self.desk().leave(&session, &caller);
            }
        }
        (self.forget)(&self.shared.id);
        tracing::debug!(connection = %self.shared.id, "ACP connection closed");
    }
}

/// The answer to request `id`: its result, or its failure as a JSON-RPC error.
fn answer(id: &RequestId, result: Result<Value, Failure>) -> Bytes {
    match result {
        Ok(v) => wire::response(id, &v),
        Err(f) => wire::error(Some(id), &f.render()),
    }
}

/// What a session's `GET /acp` stream gets ([`Connection::take_lane`]).
#[derive(Debug)]
pub enum SessionStream {
    /// The attached session's lane.
    Ready(Lane),
    /// The session is not attached yet: its lane comes when it is (`session/load`, `session/new`
    /// attaching it, `session/resume`), or the sender is dropped when the connection closes.
    Pending(oneshot::Receiver<Lane>),
}

/// Why a session's `GET /acp` stream cannot open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoStream {
    /// Another stream has (or waits for) the session's lane.
    Busy,
    /// The connection has not attached the session (or it is gone, or `Last-Event-ID` cannot be
    /// served from its ring).
    NotAttached,
    /// The connection's attached sessions and waiting streams are at
    /// [`MAX_SESSIONS_PER_CONNECTION`].
    TooManySessions,
}

/// What the door does when a connection closes (takes it off its table).
pub(super) type Forget = Box<dyn Fn(&str) + Send + Sync>;

/// Where a request's answer goes.
pub(super) enum Reply {
    /// On the connection's own stream, now.
    Now(Result<Value, Failure>),
    /// On the connection's own stream, now; then the lane of the session it attached, whose
    /// events must not come first.
    Attached { result: Value, lane: Lane },
    /// On the session's lane, once it has delivered event `gate` (the events the answer follows).
    After { session_id: String, gate: u64, result: Result<Value, Failure> },
    /// The lane answers by itself (a prompt, at its turn's end).
    Later,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A connection on a daemon with nothing started (no agent, no session), and the ids the door
    /// was told to forget.
    fn desk() -> Arc<Desk> {
        let dir = tempfile::tempdir().expect("workspace");
        Desk::new(Daemon::new(crate::config::Config::for_tests(dir.path())))
    }

    fn connection(transport: Transport, caller: Caller) -> (Arc<Connection>, Arc<Mutex<Vec<String>>>) {
        connection_at(desk(), transport, caller)
    }

    fn connection_at(
        desk: Arc<Desk>,
        transport: Transport,
        caller: Caller,
    ) -> (Arc<Connection>, Arc<Mutex<Vec<String>>>) {
        let forgotten = Arc::new(Mutex::new(Vec::new()));
        let seen = forgotten.clone();
        let forget: Forget = Box::new(move |id: &str| lock(&seen).push(id.to_owned()));
        (Connection::new(desk, forget, caller, transport, Place::default()), forgotten)
    }

    fn operator(client_id: Option<&str>) -> Caller {
        Caller::operator(true, crate::permission::Via::Acp).acting_as(client_id.map(str::to_owned))
    }

    fn queued(rx: &mut Messages) -> Vec<Value> {
        std::iter::from_fn(|| rx.try_recv())
            .map(|b| serde_json::from_slice(&b).expect("every message is JSON"))
            .collect()
    }

    #[test]
    fn only_a_streamable_http_connection_with_no_stream_open_past_the_limit_is_idle() {
        let limit = Duration::from_secs(300);
        let (http, _) = connection(Transport::Http, operator(None));
        let last = lock(&http.activity).last;
        assert!(!http.idle_since(last + limit, limit), "idle for exactly the limit is not yet idle");
        assert!(!http.idle_since(last + limit / 2, limit));
        assert!(http.idle_since(last + limit + Duration::from_millis(1), limit));
        http.stream_opened();
        let opened = lock(&http.activity).last;
        assert!(opened >= last, "opening a stream is activity");
        assert!(!http.idle_since(opened + limit * 2, limit), "a stream is open");
        http.stream_opened();
        http.stream_closed();
        assert!(!http.idle_since(opened + limit * 2, limit), "one of two streams is still open");
        http.stream_closed();
        let closed = lock(&http.activity).last;
        assert!(!http.idle_since(closed + limit, limit), "idle counts from the last stream's close");
        assert!(http.idle_since(closed + limit * 2, limit));
        http.stream_closed();
        assert!(http.idle_since(closed + limit * 2, limit), "a close too many counts no stream below none");

        let (ws, _) = connection(Transport::WebSocket, operator(None));
        let last = lock(&ws.activity).last;
        assert!(!ws.idle_since(last + limit * 2, limit), "a WebSocket ends with its socket, never idle");
    }

    #[test]
    fn a_message_is_activity() {
        let (conn, _) = connection(Transport::Http, operator(None));
        let now = Instant::now();
        let long_ago = now.checked_sub(Duration::from_secs(60)).unwrap_or(now);
        lock(&conn.activity).last = long_ago;
        conn.receive(b"{not json", Ctx::default());
        assert!(lock(&conn.activity).last >= now, "the message touched the connection");
    }

    #[test]
    fn a_message_of_exactly_ten_mib_is_read_and_one_byte_more_is_refused_unread() {
        let (conn, _) = connection(Transport::WebSocket, operator(None));
        let mut rx = conn.take_messages().expect("the queue");
        let mut text = vec![b'x'; 10 << 20];
        conn.receive(&text, Ctx::default());
        text.push(b'x');
        conn.receive(&text, Ctx::default());
        conn.receive(b"x", Ctx::default());
        let kinds: Vec<(Value, Value)> = queued(&mut rx)
            .iter()
            .map(|m| (m["error"]["code"].clone(), m["error"]["data"]["errorKind"].clone()))
            .collect();
        assert_eq!(
            kinds,
            [
                (json!(-32700), json!("parse_error")),
                (json!(-32600), json!("message_too_large")),
                (json!(-32700), json!("parse_error")),
            ]
        );
    }

    #[test]
    fn the_latest_messages_locality_is_the_connections() {
        let (conn, _) = connection(Transport::Http, operator(None));
        conn.receive(b"x", Ctx { local: false, session_header: None });
        assert!(!conn.caller().local);
        conn.receive(b"x", Ctx { local: true, session_header: None });
        assert!(conn.caller().local);
    }

    #[test]
    fn a_client_id_is_bound_once_and_a_different_claim_is_refused() {
        let (conn, _) = connection(Transport::WebSocket, operator(None));
        assert!(matches!(
            conn.client_id(Some("bad id")),
            Err(Failure::Refused(crate::desk::Refusal::InvalidParameter(_)))
        ));
        assert_eq!(conn.client_id(Some("ada")).expect("bound"), "ada");
        assert!(!conn.shared.minted.load(Ordering::Relaxed));
        assert_eq!(conn.client_id(Some("ada")).expect("the same claim"), "ada");
        assert_eq!(conn.client_id(None).expect("no claim"), "ada");
        assert!(
            matches!(conn.client_id(Some("bob")), Err(Failure::ClientIdMismatch(bound)) if bound == "ada")
        );

        let (named, _) = connection(Transport::WebSocket, operator(Some("op")));
        assert!(
            matches!(named.client_id(Some("ada")), Err(Failure::ClientIdMismatch(bound)) if bound == "op")
        );
        assert_eq!(named.client_id(Some("op")).expect("its own"), "op");

        let (minted, _) = connection(Transport::WebSocket, operator(None));
        let id = minted.client_id(None).expect("minted");
        assert!(id.starts_with("acp-") && crate::daemon::valid_client_id(&id), "{id}");
        assert!(minted.shared.minted.load(Ordering::Relaxed));
        assert_eq!(minted.client_id(None).expect("the same"), id);
    }

    #[tokio::test]
    async fn an_observer_may_not_write_and_its_connection_is_its_devices() {
        let desk = desk();
        let devices = &desk.daemon().devices;
        let code =
            devices.issue_code(Some("wall screen"), crate::devices::Role::Observer).await.expect("code").code;
        let peer = std::net::IpAddr::from([127, 0, 0, 1]);
        let (device, _) = devices.pair(&code, None, peer).await.expect("paired");
        let caller = Caller {
            client: Some(device.id.to_string()),
            minted: false,
            who: crate::desk::Who::Device(device.clone()),
            local: true,
            via: crate::permission::Via::Acp,
        };
        let (watcher, _) = connection_at(desk.clone(), Transport::WebSocket, caller);
        assert!(matches!(watcher.may_write(), Err(Failure::Refused(crate::desk::Refusal::ReadOnlyDevice))));
        assert_eq!(watcher.caller().device().map(|d| d.name.to_string()).as_deref(), Some("wall screen"));
        assert_eq!(watcher.owner(), &Owner::Device(device.id.clone()));
        let (op, _) = connection(Transport::WebSocket, operator(None));
        assert!(op.may_write().is_ok());
        assert!(op.caller().device().is_none());
    }

    #[test]
    fn the_flags_asked_at_initialize_are_the_lanes() {
        let (conn, _) = connection(Transport::WebSocket, operator(None));
        assert_eq!((conn.shared.echo_own(), conn.shared.envelope()), (false, false));
        conn.set_flags(true, false);
        assert_eq!((conn.shared.echo_own(), conn.shared.envelope()), (true, false));
        conn.set_flags(false, true);
        assert_eq!((conn.shared.echo_own(), conn.shared.envelope()), (false, true));
    }

    #[test]
    fn the_message_queue_is_lent_to_one_stream_and_given_back_until_the_close() {
        let (conn, forgotten) = connection(Transport::Http, operator(None));
        let rx = conn.take_messages().expect("the queue");
        assert!(conn.take_messages().is_none(), "one stream drains it at a time");
        conn.park_messages(rx);
        let rx = conn.take_messages().expect("given back");
        assert!(!conn.is_closed());
        let closed = conn.closed();
        conn.close();
        assert!(conn.is_closed() && closed.is_cancelled());
        assert_eq!(*lock(&forgotten), [conn.id().to_owned()], "the door forgets it");
        conn.park_messages(rx);
        assert!(conn.take_messages().is_none(), "a closed connection takes nothing back");
        conn.close();
        assert_eq!(lock(&forgotten).len(), 1, "closed once");
    }

    #[test]
    fn a_client_that_lets_its_queue_fill_is_closed() {
        let (conn, _) = connection(Transport::WebSocket, operator(None));
        let mut rx = conn.take_messages().expect("the queue");
        for _ in 0..MESSAGE_QUEUE {
            conn.send(Bytes::from_static(b"{}"));
        }
        assert!(!conn.is_closed(), "a full queue is not yet an overflow");
        conn.send(Bytes::from_static(b"{}"));
        assert!(conn.is_closed());
        assert_eq!(queued(&mut rx).len(), MESSAGE_QUEUE);
    }

    #[test]
    fn transports_are_named_as_initialize_reports_them() {
        assert_eq!((Transport::WebSocket.as_str(), Transport::Http.as_str()), ("websocket", "http"));
    }
}

//! The relay (`docs/operations.md#a-fleet`): a request for a session another daemon of the fleet
//! holds is passed to that daemon at the HTTP edge, whatever its method, body, stream or upgrade,
//! so a load balancer may send any request to any daemon.
//!
//! - **Where.** Inside the perimeter: the daemon that receives a request checks its Origin, Host
//!   and credential first, as for any request; only then is it relayed. A request that is not for
//!   a session (`/session/{id}/…`, an `/acp` WebSocket upgrade or Streamable HTTP `initialize`
//!   naming its session in `Acp-Session-Id`), for a permission request raised elsewhere (the
//!   vote route that names only the request) or for a Streamable HTTP `/acp` connection living
//!   elsewhere (the ids of both name their home, `store::home_of`) is never relayed, and the
//!   target is only ever a daemon the store lists as holding that session under a valid lease
//!   (`Fleet::owner`), or as a live daemon of the fleet (`Fleet::live_node`), never an address a
//!   request names alone: this is no open proxy.
//! - **Who.** The relayed request keeps the caller's own `Authorization`, and the daemon holding
//!   the session authenticates it again against the same token and the same paired devices (the
//!   store is shared): who the caller is and what its role allows is never taken on another
//!   daemon's word. What the relaying daemon vouches for is only what it already checked, Origin
//!   and Host (against the same configuration), and whether its caller is on its loopback (what
//!   `local-only` decides on): a [`Vouch`] in `x-mediatord-relay`, an HMAC under the fleet's
//!   secret over this one request (its method, path, the time and a nonce) and that locality. A
//!   request whose vouch does not verify, is older than [`VOUCH_WINDOW`] or comes a second time is
//!   the uniform 401; the relaying socket's own address never makes a caller local. A relayed
//!   request is never relayed again.
//! - **How.** One HTTP/1.1 connection per relayed request (hyper's client), the request's body
//!   streamed as it arrives and the answer's streamed back (SSE included); a `101 Switching
//!   Protocols` joins the two upgraded connections byte for byte. An owner that cannot be
//!   reached is `503 node_unavailable`.

use std::sync::Arc;
use std::time::Duration;

use axum::RequestExt;
use axum::body::Body;
use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::Mutex;

use hmac::{Hmac, Mac};
use hyper_util::rt::TokioIo;
use sha2::Sha256;

use super::error::ApiError;
use crate::daemon::Daemon;
use crate::store::Fleet;
use crate::sync::lock;

/// The daemon (not `extract::AppState`, the same type: this file stays free of the extractors,
/// which the perimeter that imports it is below).
type AppState = Arc<Daemon>;

/// The header a relaying daemon vouches for a request with ([`Vouch`]).
pub(super) const RELAY_HEADER: &str = "x-mediatord-relay";
/// How old a vouch may be when it arrives (either way: the fleet's clocks may differ a little).
/// Within it each vouch is taken once: a relayed request is answered well inside it.
pub(super) const VOUCH_WINDOW: Duration = Duration::from_secs(30);
/// Vouches remembered (to refuse a second use) at most: past it, expired ones are forgotten, and
/// if none has expired a new vouch is refused rather than memory grown. 65 536 relayed requests in
/// a [`VOUCH_WINDOW`] is over 2 000 a second, far past a fleet's relayed votes.
const MAX_VOUCHES_SEEN: usize = 65_536;
/// Random bytes of a vouch's nonce.
const NONCE_BYTES: usize = 16;
/// How long connecting to the owner and its answer's head may take. Its body (a stream) is not
/// bounded here: the owner's own deadlines apply to it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Hop-by-hop headers (RFC 9110 §7.6.1): they describe one connection, not the request.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

/// A daemon's word for one request it relays, and the check of another's: `v2.<unix ms>.<nonce
/// hex>.<local 0|1>.<mac hex>`, the MAC HMAC-SHA256 under the fleet's secret (which never leaves
/// the store and the daemons' memory) over the label, the method, the path and query, the time,
/// the nonce and the locality. Bound to one request, so it cannot be moved to another, and taken
/// once, so it cannot be replayed.
pub(super) struct Vouch {
    secret: [u8; 32],
    /// The vouches taken within the window (their nonce → when they expire, in unix ms).
    /// Await-free critical sections only.
    seen: Mutex<HashMap<[u8; NONCE_BYTES], u64>>,
}

impl std::fmt::Debug for Vouch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vouch").finish_non_exhaustive()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

impl Vouch {
    pub(super) fn new(secret: [u8; 32]) -> Vouch {
        Vouch { secret, seen: Mutex::new(HashMap::new()) }
    }

    fn mac(&self, method: &str, path: &str, at: u64, nonce: &[u8], local: bool) -> [u8; 32] {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes a key of any length");
        for part in [b"mediatord relay v2".as_slice(), method.as_bytes(), path.as_bytes()] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.update(&at.to_be_bytes());
        mac.update(nonce);
        mac.update(&[u8::from(local)]);
        mac.finalize().into_bytes().into()
    }

    /// This daemon's word for a request of `method` on `path` whose caller is `local` (or not).
    pub(super) fn sign(&self, method: &str, path: &str, local: bool, at: u64) -> Option<HeaderValue> {
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).ok()?;
        let mac = self.mac(method, path, at, &nonce, local);
        HeaderValue::from_str(&format!("v2.{at}.{}.{}.{}", hex(&nonce), u8::from(local), hex(&mac))).ok()
    }

    /// Whether `headers` carry a vouch of another daemon of the fleet for this request (`method`,
    /// `path`), fresh and never seen before: then whether its caller is local. `None` for any
    /// vouch that does not hold (the uniform 401).
    pub(super) fn check(&self, headers: &HeaderMap, method: &str, path: &str) -> Option<bool> {
        self.check_at(headers, method, path, crate::clock::now_ms())
    }

    fn check_at(&self, headers: &HeaderMap, method: &str, path: &str, now: u64) -> Option<bool> {
        use subtle::ConstantTimeEq;
        let mut values = headers.get_all(RELAY_HEADER).iter();
        let (Some(value), None) = (values.next(), values.next()) else { return None };
        let mut parts = value.to_str().ok()?.split('.');
        let (Some("v2"), Some(at), Some(nonce), Some(local), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let at: u64 = at.parse().ok()?;
        let nonce: [u8; NONCE_BYTES] = unhex(nonce)?;
        let local = match local {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        let mac: [u8; 32] = unhex(mac)?;
        let expected = self.mac(method, path, at, &nonce, local);
        if !bool::from(mac.ct_eq(&expected)) {
            return None;
        }
        let window = VOUCH_WINDOW.as_millis() as u64;
        if at.abs_diff(now) > window {
            return None;
        }
        let mut seen = lock(&self.seen);
        if seen.len() >= MAX_VOUCHES_SEEN {
            // A vouch holds up to its window's last instant (`abs_diff > window` refuses only
            // past it), so it is remembered up to that instant too, or it could be replayed there.
            seen.retain(|_, expires| *expires >= now);
        }
        if seen.len() >= MAX_VOUCHES_SEEN || seen.contains_key(&nonce) {
            return None;
        }
        seen.insert(nonce, at.saturating_add(window));
        Some(local)
    }
}

/// The relay's state: the daemon (its sessions), its fleet (the directory) and its word for what
/// it relays.
#[derive(Debug)]
pub(super) struct Relay {
    daemon: AppState,
    fleet: Arc<dyn Fleet>,
    vouch: Vouch,
}

impl Relay {
    /// `None` when the daemon is in no fleet: nothing is ever relayed.
    pub(super) fn new(daemon: AppState) -> Option<Relay> {
        let fleet = daemon.fleet.clone()?;
        let vouch = Vouch::new(fleet.fleet_secret());
        Some(Relay { daemon, fleet, vouch })
    }
}

/// `Acp-Session-Id` on an `/acp` WebSocket upgrade or `initialize`: the session the connection is
/// for.
const ACP_SESSION_HEADER: &str = "acp-session-id";
/// `Acp-Connection-Id` on a Streamable HTTP `/acp` request: the connection, which names its home.
const ACP_CONNECTION_HEADER: &str = "acp-connection-id";

/// Whether a request of `route` may be relayed (its operation documents `node_unavailable`): what
/// [`destination`] looks at.
pub(super) fn relayed_route(route: &str) -> bool {
    route.starts_with("/session/{id}") || route == "/permission/{request_id}" || route == "/acp"
}

/// Where a request goes, when it may go elsewhere.
#[derive(Debug, PartialEq, Eq)]
enum Destination {
    /// To the daemon holding this session.
    Session(String),
    /// To the daemon holding the session of this permission request (the vote route that names
    /// no session).
    Request(String),
    /// To the daemon a Streamable HTTP `/acp` connection lives on (its id names it).
    Home(String),
}

/// Where a request may go, by its route. `/acp`: a WebSocket is one connection that may attach
/// any session, relayed whole to the daemon holding the session its upgrade names in
/// `Acp-Session-Id` (`mediatord connect` names the one it joins). A Streamable HTTP connection
/// lives on the daemon that answered its `initialize`, and its id names that daemon: every later
/// request naming it goes there; an `initialize` that names a session in `Acp-Session-Id` goes to
/// the daemon holding that session, so the connection lives where its session does. The rest is
/// served here.
///
/// A session or request is the route's own parameter, as the route table names it and its handler
/// reads it (percent-decoded), never a segment of the path split again here.
async fn destination(req: &mut Request) -> Option<Destination> {
    let route = req.extensions().get::<MatchedPath>()?.as_str();
    // A relayed route other than `/acp` names its session or request in the path.
    let acp = route == "/acp";
    let named = relayed_route(route) && !acp;
    let param = |params: &RawPathParams, name: &str| {
        params.iter().find(|(key, _)| *key == name).map(|(_, value)| value.to_owned())
    };
    if named {
        let params = req.extract_parts::<RawPathParams>().await.ok()?;
        return match param(&params, "id") {
            Some(id) => Some(Destination::Session(id)),
            None => param(&params, "request_id").map(Destination::Request),
        };
    }
    let header = |name: &str| {
        let value = req.headers().get(name)?.to_str().ok()?.trim();
        (!value.is_empty()).then(|| value.to_owned())
    };
    if !acp {
        None
    } else if is_upgrade(req.headers()) {
        header(ACP_SESSION_HEADER).map(Destination::Session)
    } else if let Some(connection) = header(ACP_CONNECTION_HEADER) {
        crate::store::home_of(&connection).map(Destination::Home)
    } else if req.method() == Method::POST {
        header(ACP_SESSION_HEADER).map(Destination::Session)
    } else {
        None
    }
}

/// The middleware: a request for a session this daemon does not hold, which another daemon of
/// the fleet holds, goes there; everything else goes on here.
pub(super) async fn relay(State(relay): State<Arc<Relay>>, mut req: Request, next: Next) -> Response {
    if req.headers().contains_key(RELAY_HEADER) {
        // Relayed to here (the perimeter checked the proof): answered here, whatever happens.
        return next.run(req).await;
    }
    let Some(destination) = destination(&mut req).await else { return next.run(req).await };
    let daemon = &relay.daemon;
    let home = match destination {
        Destination::Session(id) if daemon.session(&id).is_ok() => return next.run(req).await,
        Destination::Session(id) => {
            let fleet = relay.fleet.clone();
            return match tokio::task::spawn_blocking(move || fleet.owner(&id)).await {
                Ok(Ok(Some(owner))) => relay_to(&relay, &owner, req).await,
                // Nobody else holds it (or the directory cannot be read): this daemon answers,
                // from the history if it has one.
                _ => next.run(req).await,
            };
        }
        Destination::Request(request_id) => {
            if daemon.session_with_request(&request_id).is_ok() {
                return next.run(req).await;
            }
            // A pending request lives on the daemon that raised it, whose node URL its id names
            // (`store::homed_id`): no read of the audit, which its holder writes behind.
            match crate::store::home_of(&request_id) {
                Some(home) => home,
                None => return next.run(req).await,
            }
        }
        Destination::Home(node_url) => node_url,
    };
    // Only a daemon the fleet lists as a live one, never an address a request names: this is no
    // open proxy. What names this daemon, or a dead one, is answered here
    // (`acp_connection_not_found`, `permission_request_not_found` when it is not here).
    if relay.fleet.node_url().as_deref() == Some(home.as_str()) {
        return next.run(req).await;
    }
    let fleet = relay.fleet.clone();
    let url = home.clone();
    match tokio::task::spawn_blocking(move || fleet.live_node(&url)).await {
        Ok(Ok(true)) => relay_to(&relay, &home, req).await,
        _ => next.run(req).await,
    }
}

/// Passes `req` to the daemon at `owner`, vouching for it (the perimeter said whether its caller
/// is local); `503 node_unavailable` when it cannot be reached.
async fn relay_to(relay: &Relay, owner: &str, req: Request) -> Response {
    // Every relayed route needs a credential: the perimeter attached the caller, local or not.
    let local = req.extensions().get::<crate::desk::Caller>().is_some_and(|c| c.local);
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let Some(vouch) = relay.vouch.sign(req.method().as_str(), path, local, crate::clock::now_ms()) else {
        return ApiError::Refused(crate::desk::Refusal::Internal).into_response();
    };
    match forward(owner, vouch, req).await {
        Ok(response) => response,
        Err(e) => {
            tracing::warn!(node = %owner, error = %e, "cannot relay a request to the daemon holding its session");
            ApiError::NodeUnavailable.into_response()
        }
    }
}

/// Sends `req` to `base` (`http://host:port`) and streams its answer back; joins the two
/// connections when it switches protocols.
pub(super) async fn forward(base: &str, vouch: HeaderValue, mut req: Request) -> Result<Response, String> {
    let authority = base.strip_prefix("http://").unwrap_or(base).trim_end_matches('/').to_owned();
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let upgrade = is_upgrade(req.headers());
    let downstream = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let mut out = axum::http::Request::builder()
        .method(parts.method)
        .uri(Uri::try_from(path).map_err(|e| e.to_string())?)
        .version(axum::http::Version::HTTP_11)
        .body(body)
        .map_err(|e| e.to_string())?;
    *out.headers_mut() = end_to_end(&parts.headers, upgrade);
    let host = HeaderValue::from_str(&authority).map_err(|e| e.to_string())?;
    out.headers_mut().insert(header::HOST, host);
    out.headers_mut().insert(HeaderName::from_static(RELAY_HEADER), vouch);

    let connect = async {
        let stream = tokio::net::TcpStream::connect(&authority).await.map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "a relayed connection ended with an error");
            }
        });
        sender.send_request(out).await.map_err(|e| e.to_string())
    };
    let mut answer = tokio::time::timeout(CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| "the daemon holding the session did not answer in time".to_owned())??;
    if answer.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(downstream) = downstream
    {
        let upstream = hyper::upgrade::on(&mut answer);
        tokio::spawn(async move {
            let (Ok(down), Ok(up)) = (downstream.await, upstream.await) else { return };
            let (mut down, mut up) = (TokioIo::new(down), TokioIo::new(up));
            let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
        });
    }
    let (mut parts, body) = answer.into_parts();
    let upgraded = parts.status == StatusCode::SWITCHING_PROTOCOLS;
    parts.headers = end_to_end(&parts.headers, upgraded);
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// Whether a request asks to switch protocols (`Connection: upgrade` with an `Upgrade`).
fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// `headers` without the hop-by-hop ones (those `Connection` names too); an upgrade keeps its
/// `Connection: upgrade` and `Upgrade`.
fn end_to_end(headers: &HeaderMap, upgrade: bool) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty() && t != "upgrade")
        .collect();
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let n = name.as_str();
        if HOP_BY_HOP.contains(&n) || named.iter().any(|c| c == n) || n == RELAY_HEADER || n == "host" {
            continue;
        }
        if n == "upgrade" && !upgrade {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    if upgrade {
        out.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::Router;
    use axum::routing::{any, get};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// Serves `router` on a loopback port with upgrades on (as a daemon that serves an upgrade
    /// route does), until the test ends.
    async fn serve(router: Router) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            loop {
                let Ok((io, _)) = listener.accept().await else { return };
                let service = hyper_util::service::TowerToHyperService::new(router.clone());
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(io), service)
                        .with_upgrades(),
                );
            }
        });
        format!("http://{addr}")
    }

    /// An "owner": echoes what it was asked, and speaks a byte-echo protocol after `101`.
    fn owner() -> Router {
        async fn echo(req: Request) -> Response {
            let seen = serde_json::json!({
                "method": req.method().as_str(),
                "path": req.uri().to_string(),
                "authorization": req.headers().get("authorization").and_then(|v| v.to_str().ok()),
                "relay": req.headers().get(RELAY_HEADER).and_then(|v| v.to_str().ok()),
                "keepAlive": req.headers().contains_key("keep-alive"),
                "secretHop": req.headers().contains_key("x-secret-hop"),
                "body": String::from_utf8_lossy(&axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap_or_default()),
            });
            axum::Json(seen).into_response()
        }
        async fn upgrade(mut req: Request) -> Response {
            let on = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                let Ok(io) = on.await else { return };
                let mut io = TokioIo::new(io);
                let mut buf = [0u8; 64];
                while let Ok(n) = io.read(&mut buf).await {
                    if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
            Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header(header::CONNECTION, "upgrade")
                .header(header::UPGRADE, "echo")
                .body(Body::empty())
                .unwrap_or_default()
        }
        async fn stream() -> Response {
            let chunks = futures_util::stream::iter(["data: 1\n\n", "data: 2\n\n"].map(Ok::<_, Infallible>));
            Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(Body::from_stream(chunks))
                .unwrap_or_default()
        }
        Router::new()
            .route("/upgrade", get(upgrade))
            .route("/stream", get(stream))
            .route("/{*rest}", any(echo))
    }

    /// A relaying daemon: forwards everything to `to`.
    fn relaying(to: String) -> Router {
        Router::new().fallback(move |req: Request| {
            let to = to.clone();
            async move {
                forward(&to, HeaderValue::from_static("vouch"), req)
                    .await
                    .unwrap_or_else(|_| ApiError::NodeUnavailable.into_response())
            }
        })
    }

    #[tokio::test]
    async fn a_request_keeps_its_method_path_body_and_credential_and_loses_its_hop_by_hop_headers() {
        let entry = serve(relaying(serve(owner()).await)).await;
        let (status, body) = raw(
            &entry,
            "POST /session/s1/prompt?x=1 HTTP/1.1\r\nHost: lb\r\nAuthorization: Bearer dev-1.s\r\n\
             Connection: close, x-secret-hop\r\nKeep-Alive: timeout=5\r\nX-Secret-Hop: 1\r\n\
             Content-Length: 5\r\n\r\nhello",
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let seen: serde_json::Value =
            serde_json::from_str(body.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap_or_default();
        assert_eq!(seen["method"], "POST");
        assert_eq!(seen["path"], "/session/s1/prompt?x=1");
        assert_eq!(
            seen["authorization"], "Bearer dev-1.s",
            "the caller's own credential, checked again there"
        );
        assert_eq!(seen["relay"], "vouch");
        assert_eq!(seen["body"], "hello");
        assert_eq!(seen["keepAlive"], false);
        assert_eq!(seen["secretHop"], false, "a header Connection names is hop-by-hop");
    }

    #[tokio::test]
    async fn an_event_stream_is_streamed_back() {
        let entry = serve(relaying(serve(owner()).await)).await;
        let (status, body) =
            raw(&entry, "GET /stream HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n").await;
        assert_eq!(status, 200);
        assert!(
            body.contains("text/event-stream") && body.contains("data: 1") && body.contains("data: 2"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn an_upgrade_joins_the_two_connections() {
        let entry = serve(relaying(serve(owner()).await)).await;
        let mut io =
            tokio::net::TcpStream::connect(entry.trim_start_matches("http://")).await.expect("connect");
        io.write_all(b"GET /upgrade HTTP/1.1\r\nHost: lb\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
            .await
            .expect("write");
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(io.read(&mut byte).await.expect("read"), 1, "the head: {head:?}");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 101"), "{head}");
        assert!(head.contains("upgrade: echo"), "{head}");
        for word in [&b"ping"[..], b"pong, through two daemons"] {
            io.write_all(word).await.expect("write");
            let mut back = vec![0u8; word.len()];
            io.read_exact(&mut back).await.expect("echo");
            assert_eq!(back, word);
        }
    }

    #[tokio::test]
    async fn an_owner_that_cannot_be_reached_is_503_node_unavailable() {
        let gone = {
            let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            format!("http://{}", l.local_addr().expect("addr"))
        };
        let entry = serve(relaying(gone)).await;
        let (status, body) =
            raw(&entry, "GET /session/x HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n").await;
        assert_eq!(status, 503);
        assert!(body.contains("node_unavailable"), "{body}");
    }

    #[tokio::test]
    async fn only_a_session_route_an_acp_session_or_an_acp_connection_naming_its_home_goes_elsewhere() {
        use tower::ServiceExt;
        async fn show(mut req: Request) -> String {
            format!("{:?}", destination(&mut req).await)
        }
        let app = Router::new()
            .route("/session/{id}", any(show))
            .route("/session/{id}/events", any(show))
            .route("/permission/{request_id}", any(show))
            .route("/acp", any(show))
            .route("/health", any(show));
        let upgrade = [("connection", "keep-alive, Upgrade"), ("upgrade", "websocket")];
        let homed = format!(
            "c1.{}",
            base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, "http://a:1")
        );
        let homed = homed.as_str();
        type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);
        let cases: [Case<'_>; 15] = [
            ("GET", "/session/s1", &[], r#"Some(Session("s1"))"#),
            // The id its handler reads: percent-decoded, as the route table's parameter.
            ("GET", "/session/s%2D4/events", &[], r#"Some(Session("s-4"))"#),
            ("GET", "/session/s2/events", &[], r#"Some(Session("s2"))"#),
            ("POST", "/permission/r1", &[], r#"Some(Request("r1"))"#),
            ("GET", "/health", &[("acp-session-id", "s3")], "None"),
            ("GET", "/acp", &[("acp-session-id", " s3 "), upgrade[0], upgrade[1]], r#"Some(Session("s3"))"#),
            ("GET", "/acp", &[("acp-session-id", " "), upgrade[0], upgrade[1]], "None"),
            // Streamable HTTP: a connection's requests go to its home, whatever session they name.
            (
                "POST",
                "/acp",
                &[("acp-connection-id", homed), ("acp-session-id", "s3")],
                r#"Some(Home("http://a:1"))"#,
            ),
            (
                "GET",
                "/acp",
                &[("acp-connection-id", homed), ("acp-session-id", "s3")],
                r#"Some(Home("http://a:1"))"#,
            ),
            ("DELETE", "/acp", &[("acp-connection-id", homed)], r#"Some(Home("http://a:1"))"#),
            // A connection of a daemon alone names no home.
            ("POST", "/acp", &[("acp-connection-id", "c1"), ("acp-session-id", "s3")], "None"),
            // `initialize` (no connection yet) goes where the session it names is.
            ("POST", "/acp", &[("acp-session-id", "s3")], r#"Some(Session("s3"))"#),
            ("POST", "/acp", &[], "None"),
            ("GET", "/acp", &[("acp-session-id", "s3")], "None"),
            ("GET", "/acp", &[("acp-session-id", "s3"), ("upgrade", "websocket")], "None"),
        ];
        for (method, path, headers, want) in cases {
            let mut req = Request::builder().method(method).uri(path);
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            let res = app.clone().oneshot(req.body(Body::empty()).expect("request")).await.expect("answer");
            let got = axum::body::to_bytes(res.into_body(), 1024).await.expect("body");
            assert_eq!(String::from_utf8_lossy(&got), want, "{method} {path} {headers:?}");
        }
        assert!(relayed_route("/acp") && relayed_route("/session/{id}/prompt"));
        assert!(relayed_route("/session/{id}") && relayed_route("/permission/{request_id}"));
        assert!(!relayed_route("/health") && !relayed_route("/session") && !relayed_route("/sessions"));
    }

    fn vouched(value: &HeaderValue) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RELAY_HEADER, value.clone());
        h
    }

    #[test]
    fn a_vouch_holds_for_its_one_request_once_within_its_window() {
        let now = 1_800_000_000_000;
        let a = Vouch::new([1; 32]);
        let b = Vouch::new([1; 32]);
        let local = a.sign("POST", "/session/s/permission/r", true, now).expect("signed");
        assert_eq!(b.check_at(&vouched(&local), "POST", "/session/s/permission/r", now + 5), Some(true));
        assert_eq!(
            b.check_at(&vouched(&local), "POST", "/session/s/permission/r", now + 6),
            None,
            "replayed"
        );
        let remote = a.sign("POST", "/session/s/permission/r", false, now).expect("signed");
        assert_eq!(b.check_at(&vouched(&remote), "POST", "/session/s/permission/r", now), Some(false));
        let fresh = || a.sign("POST", "/x", false, now).expect("signed");
        assert_eq!(b.check_at(&vouched(&fresh()), "GET", "/x", now), None, "another method");
        assert_eq!(b.check_at(&vouched(&fresh()), "POST", "/y", now), None, "another path");
        let window = VOUCH_WINDOW.as_millis() as u64;
        assert_eq!(b.check_at(&vouched(&fresh()), "POST", "/x", now + window + 1), None, "too old");
        assert_eq!(b.check_at(&vouched(&fresh()), "POST", "/x", now - window - 1), None, "from the future");
        assert_eq!(b.check_at(&vouched(&fresh()), "POST", "/x", now + window), Some(false), "at the edge");
        let other = Vouch::new([2; 32]);
        assert_eq!(other.check_at(&vouched(&fresh()), "POST", "/x", now), None, "another fleet's secret");
        // The locality cannot be flipped, nor any part changed.
        let text = remote.to_str().expect("text").to_owned();
        let flipped = HeaderValue::from_str(&text.replace(".0.", ".1.")).expect("header");
        assert_eq!(
            Vouch::new([1; 32]).check_at(&vouched(&flipped), "POST", "/session/s/permission/r", now),
            None
        );
        for bad in ["", "v1.1.2.0.3", "proof", &text[..text.len() - 1], &format!("{text}.x")] {
            let h = HeaderValue::from_str(bad).expect("header");
            assert_eq!(
                Vouch::new([1; 32]).check_at(&vouched(&h), "POST", "/session/s/permission/r", now),
                None,
                "{bad:?}"
            );
        }
        let mut two = vouched(&fresh());
        two.append(RELAY_HEADER, fresh());
        assert_eq!(b.check_at(&two, "POST", "/x", now), None, "two vouches");
    }

    /// On the daemon's clock: a vouch signed now holds, and says whether its caller is local.
    #[test]
    fn a_vouch_signed_now_holds_on_the_clock_and_keeps_its_locality() {
        let (a, b) = (Vouch::new([3; 32]), Vouch::new([3; 32]));
        let now = crate::clock::now_ms();
        for local in [true, false] {
            let v = a.sign("GET", "/session/s/events", local, now).expect("signed");
            assert_eq!(b.check(&vouched(&v), "GET", "/session/s/events"), Some(local));
        }
    }

    #[test]
    fn vouches_seen_are_bounded_and_expired_ones_forgotten() {
        let now = 1_800_000_000_000;
        let a = Vouch::new([3; 32]);
        {
            let mut seen = lock(&a.seen);
            for i in 0..MAX_VOUCHES_SEEN as u64 {
                let mut nonce = [0u8; NONCE_BYTES];
                nonce[..8].copy_from_slice(&i.to_be_bytes());
                seen.insert(nonce, now + 10);
            }
        }
        let one = a.sign("GET", "/x", false, now).expect("signed");
        assert_eq!(a.check_at(&vouched(&one), "GET", "/x", now), None, "full of live vouches: refused");
        let edge = a.sign("GET", "/x", false, now + 10).expect("signed");
        assert_eq!(
            a.check_at(&vouched(&edge), "GET", "/x", now + 10),
            None,
            "those expiring now still hold, so they are still remembered"
        );
        let two = a.sign("GET", "/x", false, now + 11).expect("signed");
        assert_eq!(
            a.check_at(&vouched(&two), "GET", "/x", now + 11),
            Some(false),
            "the expired are forgotten"
        );
        assert_eq!(lock(&a.seen).len(), 1);
    }

    /// Sends `request` as is; the status and everything read until the connection closes.
    async fn raw(base: &str, request: &str) -> (u16, String) {
        let mut io =
            tokio::net::TcpStream::connect(base.trim_start_matches("http://")).await.expect("connect");
        io.write_all(request.as_bytes()).await.expect("write");
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), io.read_to_end(&mut out)).await;
        let text = String::from_utf8_lossy(&out).into_owned();
        let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        (status, text)
    }
}

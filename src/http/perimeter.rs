//! The HTTP perimeter, applied to every route in `docs/protocol.md#2-http-perimeter`'s order: the
//! peer (a process the daemon started is never served, `crate::peer`) → Origin → Host →
//! credential (the operator's token or a device's, `super::auth`) → what that caller may do on
//! this route (the desk judges) → (body limits, in `extract`) → route. What it resolves is one
//! [`Caller`] of the front desk, attached to the request for the handlers.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::auth;
use super::error::ApiError;
use super::openapi::Operation;
use super::relay::Vouch;
use crate::config::{Config, Origins, TokenDigest};
use crate::desk::{Access, Caller, Desk, Who};
use crate::devices::is_device_credential;
use crate::permission::Via;

const ALLOW_METHODS: &str = "GET, POST, PATCH, DELETE, OPTIONS";
const ALLOW_HEADERS: &str = "Authorization, Content-Type, X-Qwen-Client-Id, X-Client-Id, Last-Event-ID, Prefer, \
     Acp-Connection-Id, Acp-Session-Id, Acp-Protocol-Version";
const EXPOSE_HEADERS: &str = "Retry-After, Acp-Connection-Id, Acp-Protocol-Version";
/// The prefix of a browser's bearer token offered as a WebSocket subprotocol on `/acp` (qwen
/// serve's convention: `qwen-bearer.<base64url(token)>`).
pub(super) const BEARER_SUBPROTOCOL: &str = "qwen-bearer.";
/// How long a browser may cache a preflight answer (seconds).
const PREFLIGHT_MAX_AGE: &str = "600";

/// What the perimeter checks, fixed once the listener is bound (the Host allowlist needs the port).
pub struct Perimeter {
    origins: Origins,
    /// `None` on non-loopback binds, where the Host check does not apply.
    allowed_hosts: Option<Vec<String>>,
    token_digest: Option<TokenDigest>,
    require_auth: bool,
    /// `--public-url`'s origin (`scheme://host[:port]`, lowercase): the confirmation page of an
    /// action link posts its form from there.
    public_origin: Option<String>,
    /// The listener's scheme with its `://`: the daemon's own pages' origin starts with it.
    scheme: &'static str,
    /// The front desk: who may be served, what a caller may do; paired devices' credentials.
    desk: Arc<Desk>,
    /// Who may call each route of the table ([`Operation::access`]), by (method, axum route).
    access: HashMap<(&'static str, &'static str), Access>,
    /// Whether the old device cookie is cleared with `Secure` (`--public-url` is `https://`).
    secure_cookie: bool,
    /// In a fleet, how a daemon relaying a request is told from anyone else (`super::relay`);
    /// `None` alone, where a relayed request is refused.
    vouch: Option<Vouch>,
}

/// Says whether a token is set, never anything about it (not even its digest).
impl std::fmt::Debug for Perimeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Perimeter")
            .field("origins", &self.origins)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("token", &self.token_digest.is_some())
            .field("require_auth", &self.require_auth)
            .finish()
    }
}

impl Perimeter {
    pub fn new(config: &Config, port: u16, desk: Arc<Desk>, operations: &'static [Operation]) -> Perimeter {
        let allowed_hosts = crate::config::is_loopback_host(&config.hostname).then(|| {
            let bind = config.hostname.to_ascii_lowercase();
            let bind = if bind.contains(':') && !bind.starts_with('[') { format!("[{bind}]") } else { bind };
            let mut hosts: Vec<String> =
                ["localhost", "127.0.0.1", "[::1]", "host.docker.internal", bind.as_str()]
                    .iter()
                    .map(|h| format!("{h}:{port}"))
                    .collect();
            if port == 80 {
                hosts.extend(["localhost", "127.0.0.1", "[::1]", "host.docker.internal"].map(String::from));
                hosts.push(bind);
            }
            hosts
        });
        let public_origin = config.public_url.as_deref().map(|u| {
            let cut = u.find("://").map_or(0, |at| at + 3);
            let end = u[cut..].find('/').map_or(u.len(), |at| cut + at);
            u[..end].to_ascii_lowercase()
        });
        // Behind a proxy that keeps the Host it was reached with, links arrive with the public
        // authority: it is allowed like the loopback names.
        let allowed_hosts = allowed_hosts.map(|mut hosts| {
            if let Some(origin) = &public_origin
                && let Some((_, authority)) = origin.split_once("://")
            {
                hosts.push(authority.to_owned());
            }
            hosts
        });
        let secure_cookie = auth::secure_cookie(config);
        let mut access = HashMap::new();
        for op in operations {
            // The first row of a (method, route) is the one the router serves.
            access.entry((op.method, op.route)).or_insert_with(|| op.access());
        }
        Perimeter {
            origins: config.allow_origins.clone(),
            allowed_hosts,
            token_digest: config.token_digest,
            require_auth: config.require_auth,
            public_origin,
            scheme: if config.tls.is_some() { "https://" } else { "http://" },
            desk,
            access,
            secure_cookie,
            vouch: None,
        }
    }

    /// In a fleet: the fleet's secret, under which the daemons vouch for the requests they relay.
    pub(super) fn with_fleet_secret(mut self, secret: Option<[u8; 32]>) -> Perimeter {
        self.vouch = secret.map(Vouch::new);
        self
    }

    /// Whether `origin` is this daemon's own: `--public-url`'s, or the listener's scheme (`https://`
    /// with `--tls-cert`, else `http://`) and the authority the request addresses, that authority
    /// passing the Host step. The daemon's own pages (the web app,
    /// an action link's confirmation page) carry it, so they need no `--allow-origin`
    /// (`docs/protocol.md#21-origin`).
    fn own_origin(&self, origin: &str, req: &Request) -> bool {
        if self.public_origin.as_deref().is_some_and(|own| own.eq_ignore_ascii_case(origin)) {
            return true;
        }
        let Some(authority) = authority(req) else { return false };
        origin.strip_prefix(self.scheme).is_some_and(|o| o.eq_ignore_ascii_case(authority))
            && self.check_host(req).is_ok()
    }

    /// The Host step: exactly one `Host` (RFC 9112 §3.2: more than one is a 400, whatever the
    /// bind), and on a loopback bind the request's authority on the allowlist. The authority is the
    /// request target's when it is in absolute form (`GET http://host:port/path`), which RFC 9112
    /// §3.2.2 says replaces `Host`; otherwise the `Host` header's.
    fn check_host(&self, req: &Request) -> Result<(), ApiError> {
        if req.headers().get_all(header::HOST).iter().nth(1).is_some() {
            return Err(ApiError::InvalidHost);
        }
        let Some(allowed) = &self.allowed_hosts else { return Ok(()) };
        match authority(req) {
            Some(authority) if allowed.contains(&authority.to_ascii_lowercase()) => Ok(()),
            _ => Err(ApiError::HostNotAllowed),
        }
    }

    /// Constant-time comparison of SHA-256 digests: equal-length inputs, no early exit. Without a
    /// token, any bearer is the operator's (the loopback-only daemon ignores it, as always).
    fn operator_token_ok(&self, presented: &str) -> bool {
        let Some(expected) = &self.token_digest else { return true };
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        bool::from(digest.ct_eq(&expected.0)) && !presented.is_empty()
    }

    /// Who the request is, or `Err` for the uniform 401. A bearer with a device credential's
    /// exact shape is a device when one has it; otherwise (any other bearer, or a device-shaped
    /// one no device has) it is judged as the operator's token, so an operator token of any
    /// shape works (issue #27, finding 16). On a daemon without a token, anyone but a failing
    /// device is the operator, as always. No cookie is a credential (`super::auth`).
    fn caller(&self, headers: &HeaderMap) -> Result<Who, ()> {
        let Some(presented) = auth::bearer(headers) else {
            return if self.token_digest.is_none() { Ok(Who::Operator) } else { Err(()) };
        };
        if is_device_credential(presented) {
            if let Some(device) = self.desk.daemon().devices.authenticate(presented) {
                return Ok(Who::Device(device));
            }
            if self.token_digest.is_none() {
                return Err(());
            }
        }
        if self.operator_token_ok(presented) { Ok(Who::Operator) } else { Err(()) }
    }

    /// Who may call the route `req` matched; `None` for no route (its 404 or 405 follows).
    fn access(&self, req: &Request) -> Option<Access> {
        let route = req.extensions().get::<MatchedPath>()?.as_str();
        let method = match *req.method() {
            Method::GET | Method::HEAD => "get",
            Method::POST => "post",
            Method::DELETE => "delete",
            Method::PATCH => "patch",
            Method::PUT => "put",
            _ => return None,
        };
        self.access.get(&(method, route)).copied()
    }
}

/// Whether the socket peer is loopback (`127.*`, `::1`, `::ffff:127.*`), never from headers.
pub fn is_loopback_peer(addr: Option<SocketAddr>) -> bool {
    match addr.map(|a| a.ip()) {
        Some(IpAddr::V4(v4)) => v4.is_loopback(),
        Some(IpAddr::V6(v6)) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        None => false,
    }
}

/// The socket peer of a connection, attached by the server to every request it carries: its
/// address, and who it is on this host (`crate::peer`, looked up once when it was accepted).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub addr: SocketAddr,
    pub origin: crate::peer::Origin,
}

/// Whether the caller of a request is on this host's loopback: read from the socket, or for a
/// request another daemon of the fleet relayed, what that daemon vouched for. Attached to every
/// request the perimeter lets through (a public route's handler reads it: an action link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Local(pub bool);

/// The authority the request addresses: the request target's in absolute form, else `Host`'s.
fn authority(req: &Request) -> Option<&str> {
    authority_of(req.uri(), req.headers())
}

/// [`authority`] from a request's parts: the URI's authority (the request target in absolute form,
/// or HTTP/2's `:authority`, which hyper puts there: an h2 request has no `Host`), else `Host`'s.
pub(super) fn authority_of<'a>(uri: &'a axum::http::Uri, headers: &'a HeaderMap) -> Option<&'a str> {
    match uri.authority() {
        Some(authority) => Some(authority.as_str()),
        None => headers.get(header::HOST).and_then(|h| h.to_str().ok()),
    }
}

pub fn peer_of(req: &Request) -> Option<Peer> {
    let extensions = req.extensions();
    extensions.get::<ConnectInfo<Peer>>().map(|c| c.0).or_else(|| {
        // What a test's `MockConnectInfo` layer attaches instead (the in-process router).
        extensions.get::<axum::extract::connect_info::MockConnectInfo<Peer>>().map(|c| c.0)
    })
}

/// What a request asked, as the audit records an attempt of a process of the daemon's: the
/// method and the route's pattern, never the path (it may hold a link's token).
fn attempt(req: &Request) -> String {
    let route = req.extensions().get::<MatchedPath>().map_or("(no route)", MatchedPath::as_str);
    format!("{} {route}", req.method())
}

pub async fn check(State(p): State<Arc<Perimeter>>, mut req: Request, next: Next) -> Response {
    // First, who is at the other end: a process the daemon started is never served, whatever it
    // presents, on whatever route (`docs/operations.md#the-agent-is-never-a-client`). A socket
    // this daemon did not accept (an in-process test's) has no peer and is not served either.
    let Some(peer) = peer_of(&req) else {
        return refuse(ApiError::Refused(crate::desk::Refusal::Internal), None);
    };
    if let Err(e) = p.desk.admit(peer.origin, &attempt(&req)) {
        return refuse(e.into(), None);
    }
    bearer_from_subprotocol(&mut req);
    // A request another daemon of the fleet relays had its Origin and Host checked there, against
    // the same configuration, and the daemon vouches for whether its caller is local; its caller
    // is still checked here (`super::relay`).
    let vouched = match (req.headers().contains_key(super::relay::RELAY_HEADER), &p.vouch) {
        (false, _) => None,
        (true, None) => return refuse(ApiError::Unauthorized, None),
        (true, Some(vouch)) => {
            let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
            match vouch.check(req.headers(), req.method().as_str(), path) {
                Some(local) => Some(local),
                None => return refuse(ApiError::Unauthorized, None),
            }
        }
    };
    let relayed = vouched.is_some();
    let local = vouched.unwrap_or_else(|| is_loopback_peer(Some(peer.addr)));
    req.extensions_mut().insert(Local(local));
    let headers = req.headers();
    let mut origins = headers.get_all(header::ORIGIN).iter();
    let origin = match (origins.next(), origins.next()) {
        _ if relayed => None,
        (None, _) => None,
        // Two origins cannot both be the page's: refused, whatever they say.
        (Some(_), Some(_)) => return refuse(ApiError::OriginDenied(None), None),
        (Some(value), None) => match value.to_str() {
            // The daemon's own pages: let through, and granted no CORS headers (none is needed).
            Ok(o) if p.own_origin(o, &req) => None,
            Ok(o) if o != "null" && p.origins.allows(o) => Some(value.clone()),
            _ => return refuse(origin_denied(value), None),
        },
    };
    if !relayed && let Err(e) = p.check_host(&req) {
        return refuse(e, origin.as_ref());
    }
    if origin.is_some() && req.method() == Method::OPTIONS {
        let mut preflight = StatusCode::NO_CONTENT.into_response();
        let h = preflight.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static(ALLOW_METHODS));
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static(ALLOW_HEADERS));
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(PREFLIGHT_MAX_AGE));
        return with_cors(preflight, origin.as_ref());
    }
    let access = p.access(&req);
    let old_cookie = auth::has_old_cookie(req.headers());
    let open_health = req.uri().path() == "/health" && !p.require_auth && !relayed && local;
    if !open_health && access != Some(Access::Public) && !super::web::is_public(&req) {
        let mut who = p.caller(req.headers());
        if who.is_err() && p.vouch.is_some() && auth::bearer(req.headers()).is_some_and(is_device_credential)
        {
            // In a fleet, a device paired on another daemon a moment ago (`Devices::reload_for_unknown`).
            let desk = p.desk.clone();
            if tokio::task::spawn_blocking(move || desk.daemon().devices.reload_for_unknown())
                .await
                .unwrap_or(false)
            {
                who = p.caller(req.headers());
            }
        }
        let who = match who {
            Ok(who) => who,
            Err(()) => {
                return forget_old_cookie(refuse(ApiError::Unauthorized, origin.as_ref()), old_cookie, &p);
            }
        };
        let caller = Caller { client: None, minted: false, who, local, via: Via::Rest };
        if let Err(e) = admitted(&p.desk, &mut req, caller, access) {
            return forget_old_cookie(with_cors(e.into_response(), origin.as_ref()), old_cookie, &p);
        }
    }
    let response = next.run(req).await;
    forget_old_cookie(with_cors(response, origin.as_ref()), old_cookie, &p)
}

/// A browser still holding the device cookie of an earlier version is told to forget it.
fn forget_old_cookie(mut response: Response, old_cookie: bool, p: &Perimeter) -> Response {
    if old_cookie {
        response.headers_mut().append(header::SET_COOKIE, auth::clear_cookie(p.secure_cookie));
    }
    response
}

/// A browser cannot set headers on a WebSocket upgrade, so it offers its token as the subprotocol
/// `qwen-bearer.<base64url(token)>` (qwen serve's convention): on an upgrade without
/// `Authorization`, that token is checked as if it were the bearer. `/acp` never echoes it back.
fn bearer_from_subprotocol(req: &mut Request) {
    use base64::Engine;
    if req.headers().contains_key(header::AUTHORIZATION) || !is_upgrade(req) {
        return;
    }
    let token = req
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix(BEARER_SUBPROTOCOL))
        .and_then(|encoded| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded.trim_end_matches('=')).ok()
        })
        .and_then(|raw| String::from_utf8(raw).ok());
    if let Some(value) = token.and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok()) {
        req.headers_mut().insert(header::AUTHORIZATION, value);
    }
}

/// Whether `req` asks to switch protocols (a WebSocket upgrade).
fn is_upgrade(req: &Request) -> bool {
    req.headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// What a caller's request must satisfy beyond its credential (`docs/operations.md#devices`),
/// as the desk judges it: a device's client id is its device id (a different one is refused, none
/// is filled in: the handlers read it from `X-Qwen-Client-Id`); its role allows the route. The
/// caller is then attached to the request. No route: its 404 or 405 follows.
fn admitted(desk: &Desk, req: &mut Request, caller: Caller, access: Option<Access>) -> Result<(), ApiError> {
    let headers = req.headers_mut();
    if let Some(device) = caller.device() {
        for name in ["x-qwen-client-id", "x-client-id"] {
            let claimed = headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
            caller.may_claim(claimed)?;
        }
        headers.remove("x-client-id");
        if let Ok(id) = HeaderValue::from_str(&device.client_id()) {
            headers.insert("x-qwen-client-id", id);
        }
    }
    if let Some(access) = access {
        desk.check(&caller, access)?;
    }
    req.extensions_mut().insert(caller);
    Ok(())
}

/// A refusal at the perimeter also closes the connection: a client that may not use the daemon
/// must not keep one of its `--max-connections` slots open on an idle keep-alive.
fn refuse(error: ApiError, origin: Option<&HeaderValue>) -> Response {
    let mut response = match error {
        // Refused before the origin was accepted: no CORS headers (its own `Vary` is set).
        ApiError::OriginDenied(_) => error.into_response(),
        _ => with_cors(error.into_response(), origin),
    };
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The refusal of `origin`, naming it only when it is `null` or well formed (so what is echoed
/// back is never arbitrary header bytes).
fn origin_denied(origin: &HeaderValue) -> ApiError {
    let shown = origin.to_str().ok().filter(|o| *o == "null" || crate::config::valid_origin(o));
    ApiError::OriginDenied(shown.map(str::to_owned))
}

fn with_cors(mut response: Response, origin: Option<&HeaderValue>) -> Response {
    let h = response.headers_mut();
    h.append(header::VARY, HeaderValue::from_static("Origin"));
    if let Some(origin) = origin {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        h.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static(EXPOSE_HEADERS));
    }
    response
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::path::Path;

    use axum::body::Body;
    use sha2::{Digest, Sha256};

    use super::*;
    use crate::config::TokenDigest;
    use crate::desk::Refusal;
    use crate::devices::{Devices, Role};

    const TOKEN: &str = "dev-ops.2026-operator";
    const PORT: u16 = 7776;

    /// A desk over a daemon with nothing started, on `config` (its devices paired in memory).
    fn desk(config: Config) -> Arc<Desk> {
        Desk::new(crate::daemon::Daemon::new(config))
    }

    fn perimeter(token: Option<&str>) -> (Perimeter, Arc<Devices>) {
        let mut config = Config::for_tests(Path::new("/"));
        config.token_digest = token.map(|t| TokenDigest(Sha256::digest(t.as_bytes()).into()));
        config.public_url = Some("https://Mediator.example/m".into());
        let desk = desk(config.clone());
        let devices = desk.daemon().devices.clone();
        // No route table: these tests judge callers, hosts and origins, not a route's access.
        (Perimeter::new(&config, PORT, desk, &[]), devices)
    }

    async fn paired(devices: &Devices, role: Role) -> (crate::devices::Device, String) {
        let code = devices.issue_code(Some("phone"), role).await.expect("code").code;
        devices.pair(&code, None, IpAddr::V4(Ipv4Addr::LOCALHOST)).await.expect("paired")
    }

    fn headers(bearer: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(b) = bearer {
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {b}")).expect("header"));
        }
        h
    }

    fn is_operator(caller: Result<Who, ()>) -> bool {
        matches!(caller, Ok(Who::Operator))
    }

    /// What the perimeter decides of `device`'s request to a route of `access`: `admitted`'s
    /// judgement, with the caller attached on success.
    fn device_may(
        req: &mut Request,
        device: &crate::devices::Device,
        access: Option<Access>,
    ) -> Result<(), ApiError> {
        let d = desk(Config::for_tests(Path::new("/")));
        let caller = Caller {
            client: None,
            minted: false,
            who: Who::Device(device.clone()),
            local: true,
            via: Via::Rest,
        };
        admitted(&d, req, caller, access)
    }

    fn request(method: Method, host: &str, client: Option<&str>) -> Request {
        let mut req = Request::builder().method(method).uri("/x").header(header::HOST, host);
        if let Some(c) = client {
            req = req.header("x-qwen-client-id", c);
        }
        req.body(Body::empty()).expect("request")
    }

    #[tokio::test]
    async fn the_caller_is_the_operator_by_token_a_device_by_its_credential_and_anyone_else_is_refused() {
        let (p, devices) = perimeter(Some(TOKEN));
        assert!(
            is_operator(p.caller(&headers(Some(TOKEN)))),
            "a device-shaped prefix is still the operator's token"
        );
        assert!(p.caller(&headers(Some("dev-ops.2026-wrong"))).is_err());
        assert!(p.caller(&headers(None)).is_err());
        assert!(p.caller(&headers(Some(""))).is_err());
        let (device, credential) = paired(&devices, Role::Voter).await;
        assert!(matches!(p.caller(&headers(Some(&credential))), Ok(Who::Device(d)) if d.id == device.id));
        let (id, _) = credential.split_once('.').expect("id.secret");
        let forged = format!("{id}.{}", "0".repeat(64));
        assert!(p.caller(&headers(Some(&forged))).is_err(), "a device-shaped bearer no device has");
        // An operator token of exactly a device credential's shape still signs the operator in.
        let shaped = format!("dev-{}.{}", "a".repeat(16), "b".repeat(64));
        let (p2, _) = perimeter(Some(&shaped));
        assert!(is_operator(p2.caller(&headers(Some(&shaped)))));
    }

    #[tokio::test]
    async fn without_a_token_anyone_is_the_operator_but_a_failing_device() {
        let (p, devices) = perimeter(None);
        assert!(is_operator(p.caller(&headers(None))));
        assert!(is_operator(p.caller(&headers(Some("anything")))));
        let (_, credential) = paired(&devices, Role::Observer).await;
        assert!(matches!(p.caller(&headers(Some(&credential))), Ok(Who::Device(_))));
        let (id, _) = credential.split_once('.').expect("id.secret");
        assert!(p.caller(&headers(Some(&format!("{id}.{}", "1".repeat(64))))).is_err());
    }

    #[test]
    fn an_empty_token_is_never_the_operators() {
        let (p, _) = perimeter(Some(""));
        assert!(!p.operator_token_ok(""));
    }

    #[tokio::test]
    async fn a_device_acts_as_its_own_client_id_within_its_role() {
        let (_, devices) = perimeter(Some(TOKEN));
        let (voter, _) = paired(&devices, Role::Voter).await;
        let (observer, _) = paired(&devices, Role::Observer).await;
        let mut req = request(Method::POST, "127.0.0.1:7776", None);
        req.headers_mut().insert("x-client-id", HeaderValue::from_static(""));
        assert!(device_may(&mut req, &voter, Some(Access::Write)).is_ok());
        assert_eq!(req.headers().get("x-qwen-client-id").map(|v| v.as_bytes()), Some(voter.id.as_bytes()));
        assert!(req.headers().get("x-client-id").is_none());
        let mut same = request(Method::POST, "127.0.0.1:7776", Some(&voter.id));
        assert!(device_may(&mut same, &voter, Some(Access::Write)).is_ok());
        let mut other = request(Method::POST, "127.0.0.1:7776", Some("alice"));
        assert!(matches!(
            device_may(&mut other, &voter, Some(Access::Write)),
            Err(ApiError::Refused(Refusal::ClientIdMismatch { .. }))
        ));
        let mut alias = request(Method::POST, "127.0.0.1:7776", None);
        alias.headers_mut().insert("x-client-id", HeaderValue::from_static("alice"));
        assert!(matches!(
            device_may(&mut alias, &voter, Some(Access::Read)),
            Err(ApiError::Refused(Refusal::ClientIdMismatch { .. }))
        ));
        let mut admin = request(Method::GET, "127.0.0.1:7776", None);
        assert!(matches!(
            device_may(&mut admin, &voter, Some(Access::Operator)),
            Err(ApiError::Refused(Refusal::OperatorRequired))
        ));
        let mut write = request(Method::POST, "127.0.0.1:7776", None);
        assert!(matches!(
            device_may(&mut write, &observer, Some(Access::Write)),
            Err(ApiError::Refused(Refusal::ReadOnlyDevice))
        ));
        let mut read = request(Method::GET, "127.0.0.1:7776", None);
        assert!(device_may(&mut read, &observer, Some(Access::Read)).is_ok());
        let mut unrouted = request(Method::GET, "127.0.0.1:7776", None);
        assert!(device_may(&mut unrouted, &observer, None).is_ok(), "no route: its 404 follows");
    }

    #[test]
    fn hosts_and_origins_are_the_daemons_own_or_refused() {
        let (p, _) = perimeter(Some(TOKEN));
        for ok in [
            "127.0.0.1:7776",
            "LOCALHOST:7776",
            "[::1]:7776",
            "host.docker.internal:7776",
            "mediator.example",
        ] {
            assert!(p.check_host(&request(Method::GET, ok, None)).is_ok(), "{ok}");
        }
        for bad in ["127.0.0.1:7777", "127.0.0.1", "evil.example:7776"] {
            assert!(
                matches!(p.check_host(&request(Method::GET, bad, None)), Err(ApiError::HostNotAllowed)),
                "{bad}"
            );
        }
        let mut two = request(Method::GET, "127.0.0.1:7776", None);
        two.headers_mut().append(header::HOST, HeaderValue::from_static("127.0.0.1:7776"));
        assert!(matches!(p.check_host(&two), Err(ApiError::InvalidHost)));
        let req = request(Method::GET, "127.0.0.1:7776", None);
        assert!(p.own_origin("http://127.0.0.1:7776", &req));
        assert!(p.own_origin("https://mediator.example", &req), "the public URL's origin");
        assert!(!p.own_origin("http://127.0.0.1:3000", &req), "another port is another origin");
        assert!(!p.own_origin("https://127.0.0.1:7776", &req));
        let rebinding = request(Method::GET, "evil.example:7776", None);
        assert!(!p.own_origin("http://evil.example:7776", &rebinding));
    }

    /// Issue #45: the web app over https (no `--public-url`) had every module script refused
    /// `403`: its origin is `https://` and the authority, never `http://`.
    #[test]
    fn over_https_the_daemons_own_origin_is_https() {
        let mut config = Config::for_tests(Path::new("/"));
        config.tls = Some(crate::tls::TlsFiles { cert: "/c.pem".into(), key: "/k.pem".into() });
        let p = Perimeter::new(&config, PORT, desk(config.clone()), &[]);
        let req = request(Method::GET, "127.0.0.1:7776", None);
        assert!(p.own_origin("https://127.0.0.1:7776", &req));
        assert!(!p.own_origin("http://127.0.0.1:7776", &req), "a page over plain http is another origin");
        assert!(!p.own_origin("https://127.0.0.1:3000", &req));
    }

    #[test]
    fn the_loopback_peer_is_read_from_the_socket_only() {
        let addr = |ip: &str| Some(SocketAddr::new(ip.parse().expect("ip"), 1));
        assert!(is_loopback_peer(addr("127.0.0.1")));
        assert!(is_loopback_peer(addr("127.9.9.9")));
        assert!(is_loopback_peer(addr("::1")));
        assert!(is_loopback_peer(addr("::ffff:127.0.0.1")));
        assert!(!is_loopback_peer(addr("10.0.0.1")));
        assert!(!is_loopback_peer(addr("::ffff:10.0.0.1")));
        assert!(!is_loopback_peer(addr("2001:db8::1")));
        assert!(!is_loopback_peer(None));
    }

    /// The middleware itself, on a small router of its own: a row per kind of access and per
    /// method, so the route table's access column is judged here too, not only in `it`.
    mod middleware {
        use axum::Router;
        use axum::routing::{any, get};
        use http_body_util::BodyExt;
        use tower::ServiceExt;

        use super::*;
        use crate::config::Origins;

        const APP: &str = "http://app.example";

        static OPERATIONS: [Operation; 7] = [
            Operation { method: "get", route: "/public", ..Operation::new("public", "t", "s").no_auth() },
            Operation { method: "get", route: "/read", ..Operation::new("read", "t", "s") },
            Operation { method: "post", route: "/write", ..Operation::new("write", "t", "s") },
            Operation { method: "delete", route: "/admin", ..Operation::new("admin", "t", "s").operator() },
            Operation { method: "patch", route: "/write", ..Operation::new("patch", "t", "s") },
            Operation { method: "put", route: "/write", ..Operation::new("put", "t", "s") },
            Operation { method: "get", route: "/health", ..Operation::new("health", "t", "s") },
        ];

        fn app(token: Option<&str>, require_auth: bool) -> (Router, Arc<Devices>) {
            let mut config = Config::for_tests(Path::new("/"));
            config.token_digest = token.map(|t| TokenDigest(Sha256::digest(t.as_bytes()).into()));
            config.require_auth = require_auth;
            config.allow_origins = Origins::List(vec![APP.to_owned()]);
            let desk = desk(config.clone());
            let devices = desk.daemon().devices.clone();
            let p = Arc::new(Perimeter::new(&config, PORT, desk, &OPERATIONS));
            let ok = || async { "ok" };
            let router = Router::new()
                .route("/public", get(ok))
                .route("/read", get(ok))
                .route("/write", any(ok))
                .route("/admin", any(ok))
                .route("/health", get(ok))
                .layer(axum::middleware::from_fn_with_state(p, check));
            (router, devices)
        }

        struct Sent {
            status: u16,
            headers: HeaderMap,
            body: String,
        }

        struct Call<'a> {
            method: Method,
            path: &'a str,
            bearer: Option<&'a str>,
            origin: Option<&'a str>,
            peer: &'a str,
            /// Who the peer is on this host; `None`: another host, or (loopback) a process the
            /// daemon did not start.
            process: Option<crate::peer::Origin>,
            cookie: bool,
        }

        fn call(method: Method, path: &str) -> Call<'_> {
            Call { method, path, bearer: None, origin: None, peer: "10.0.0.7", process: None, cookie: false }
        }

        impl Call<'_> {
            async fn send(self, app: &Router) -> Sent {
                let mut req = Request::builder()
                    .method(self.method)
                    .uri(self.path)
                    .header(header::HOST, format!("127.0.0.1:{PORT}"));
                if let Some(b) = self.bearer {
                    req = req.header(header::AUTHORIZATION, format!("Bearer {b}"));
                }
                if let Some(o) = self.origin {
                    req = req.header(header::ORIGIN, o);
                }
                if self.cookie {
                    req = req.header(header::COOKIE, "mediatord_device=old");
                }
                let mut req = req.body(Body::empty()).expect("request");
                let addr = SocketAddr::new(self.peer.parse().expect("ip"), 40000);
                let local = if addr.ip().is_loopback() {
                    crate::peer::Origin::Local
                } else {
                    crate::peer::Origin::Remote
                };
                let origin = self.process.unwrap_or(local);
                req.extensions_mut().insert(ConnectInfo(Peer { addr, origin }));
                let response = app.clone().oneshot(req).await.expect("infallible");
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                let bytes = response.into_body().collect().await.expect("body").to_bytes();
                Sent { status, headers, body: String::from_utf8_lossy(&bytes).into_owned() }
            }
        }

        fn code(sent: &Sent) -> String {
            serde_json::from_str::<serde_json::Value>(&sent.body)
                .ok()
                .and_then(|v| v["code"].as_str().or(v["error"].as_str()).map(str::to_owned))
                .unwrap_or_else(|| sent.body.clone())
        }

        #[tokio::test]
        async fn each_route_is_judged_by_its_access_and_each_caller_by_its_credential() {
            let (app, devices) = app(Some(TOKEN), false);
            let (_, voter) = paired(&devices, Role::Voter).await;
            let (_, observer) = paired(&devices, Role::Observer).await;
            let sent = call(Method::GET, "/public").send(&app).await;
            assert_eq!((sent.status, sent.body.as_str()), (200, "ok"), "public: no credential needed");
            let sent = call(Method::GET, "/read").send(&app).await;
            assert_eq!((sent.status, code(&sent)), (401, "Unauthorized".into()));
            assert_eq!(sent.headers.get(header::CONNECTION).map(|v| v.as_bytes()), Some(&b"close"[..]));
            let sent = Call { bearer: Some(TOKEN), ..call(Method::GET, "/read") }.send(&app).await;
            assert_eq!((sent.status, sent.body.as_str()), (200, "ok"));
            let sent = Call { bearer: Some(&observer), ..call(Method::GET, "/read") }.send(&app).await;
            assert_eq!(sent.status, 200, "an observer reads");
            for method in [Method::POST, Method::PATCH, Method::PUT] {
                let sent =
                    Call { bearer: Some(&observer), ..call(method.clone(), "/write") }.send(&app).await;
                assert_eq!((sent.status, code(&sent)), (403, "read_only_device".into()), "{method}");
                let sent = Call { bearer: Some(&voter), ..call(method.clone(), "/write") }.send(&app).await;
                assert_eq!((sent.status, sent.body.as_str()), (200, "ok"), "{method}");
            }
            let sent = Call { bearer: Some(&voter), ..call(Method::DELETE, "/admin") }.send(&app).await;
            assert_eq!((sent.status, code(&sent)), (403, "operator_required".into()));
            let sent = Call { bearer: Some(TOKEN), ..call(Method::DELETE, "/admin") }.send(&app).await;
            assert_eq!((sent.status, sent.body.as_str()), (200, "ok"));
        }

        /// Issue #41, finding 2: a process the daemon started is never served, whatever it
        /// presents, on every kind of route, the public ones included; nor is a loopback peer that
        /// was gone before it could be told apart. A process of this host it did not start is.
        #[tokio::test]
        async fn a_process_the_daemon_started_is_refused_on_every_route_with_any_credential() {
            use crate::peer::Origin;
            for token in [Some(TOKEN), None] {
                let (app, devices) = app(token, false);
                let (_, voter) = paired(&devices, Role::Voter).await;
                for origin in [Origin::Daemons { child: 4242 }, Origin::Gone] {
                    for (method, path) in [
                        (Method::GET, "/public"),
                        (Method::GET, "/read"),
                        (Method::POST, "/write"),
                        (Method::GET, "/health"),
                    ] {
                        for bearer in [Some(TOKEN), Some(voter.as_str()), None] {
                            let sent = Call {
                                bearer,
                                peer: "127.0.0.1",
                                process: Some(origin),
                                ..call(method.clone(), path)
                            }
                            .send(&app)
                            .await;
                            assert_eq!(
                                (sent.status, code(&sent)),
                                (403, "agent_not_a_client".into()),
                                "{origin:?} {method} {path} {bearer:?}"
                            );
                            assert_eq!(
                                sent.headers.get(header::CONNECTION).map(|v| v.as_bytes()),
                                Some(&b"close"[..])
                            );
                        }
                    }
                }
                let human = Call { bearer: Some(TOKEN), peer: "127.0.0.1", ..call(Method::GET, "/read") };
                assert_eq!(human.send(&app).await.status, 200, "a person's curl on the same host");
            }
        }

        #[tokio::test]
        async fn health_is_open_only_to_a_loopback_peer_and_only_without_require_auth() {
            let (open, _) = app(Some(TOKEN), false);
            let loopback = |path| Call { peer: "127.0.0.1", ..call(Method::GET, path) };
            let sent = loopback("/health").send(&open).await;
            assert_eq!((sent.status, sent.body.as_str()), (200, "ok"));
            assert_eq!(call(Method::GET, "/health").send(&open).await.status, 401, "from another host");
            assert_eq!(loopback("/read").send(&open).await.status, 401, "only /health is open");
            let (closed, _) = app(Some(TOKEN), true);
            assert_eq!(loopback("/health").send(&closed).await.status, 401, "--require-auth");
        }

        #[tokio::test]
        async fn origins_are_the_daemons_own_allowed_with_cors_or_refused_by_name() {
            let (app, _) = app(Some(TOKEN), false);
            let from =
                |origin| Call { bearer: Some(TOKEN), origin: Some(origin), ..call(Method::GET, "/read") };
            let own = from("http://127.0.0.1:7776").send(&app).await;
            assert_eq!((own.status, own.body.as_str()), (200, "ok"));
            assert!(
                own.headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none(),
                "its own pages need none"
            );
            let allowed = from(APP).send(&app).await;
            assert_eq!((allowed.status, allowed.body.as_str()), (200, "ok"));
            assert_eq!(
                allowed.headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).map(|v| v.as_bytes()),
                Some(APP.as_bytes())
            );
            assert_eq!(allowed.headers.get(header::VARY).map(|v| v.as_bytes()), Some(&b"Origin"[..]));
            for (origin, shown) in [
                ("http://evil.example", "origin http://evil.example is not allowed"),
                ("null", "Origin null"),
                ("not an origin", "this origin is not allowed"),
            ] {
                let sent = from(origin).send(&app).await;
                assert_eq!((sent.status, code(&sent)), (403, "origin_denied".into()), "{origin}");
                assert!(sent.body.contains(shown), "{origin}: {}", sent.body);
                assert!(sent.headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
                assert_eq!(sent.headers.get_all(header::VARY).iter().count(), 1, "{origin}: one Vary");
            }
            let preflight = Call { origin: Some(APP), ..call(Method::OPTIONS, "/read") }.send(&app).await;
            assert_eq!(preflight.status, 204);
            assert_eq!(
                preflight.headers.get(header::ACCESS_CONTROL_ALLOW_METHODS).map(|v| v.as_bytes()),
                Some(ALLOW_METHODS.as_bytes())
            );
            let no_origin = Call { bearer: Some(TOKEN), ..call(Method::OPTIONS, "/read") }.send(&app).await;
            assert_ne!(no_origin.status, 204, "a preflight needs an origin");
        }

        #[tokio::test]
        async fn the_old_cookie_is_cleared_on_every_answer() {
            let (app, _) = app(Some(TOKEN), false);
            for bearer in [Some(TOKEN), None] {
                let sent = Call { bearer, cookie: true, ..call(Method::GET, "/read") }.send(&app).await;
                let cleared =
                    sent.headers.get(header::SET_COOKIE).map(|v| v.to_str().unwrap_or("").to_owned());
                assert!(cleared.is_some_and(|c| c.starts_with("mediatord_device=; Max-Age=0")), "{bearer:?}");
            }
        }
    }
}

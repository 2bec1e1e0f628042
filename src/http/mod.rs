//! The HTTP floor, and the only place that knows axum, tower-http or hyper: the perimeter, the
//! route table, the handlers, the OpenAPI document, and the mapping of every domain error to a
//! status and a stable `code`.
//!
//! - this file: [`app`] (the router with its layers) and [`serve`] (the listener).
//! - [`api`]: the route table, one list expanding into the router and the documented operations.
//! - [`openapi`]: the OpenAPI 3.1 document built from those operations.
//! - [`error`]: [`ApiError`], and one `From` per domain error.
//! - `extract`: the state, JSON bodies, the client id header.
//! - [`perimeter`]: Origin → Host → bearer; the socket [`Peer`].
//! - `listener`: `--max-connections` at accept; `--writer-idle-timeout-ms` on every connection's
//!   writes.
//! - `handshake`: the TLS handshake of one connection (`--tls-cert`), and the answer to plain http
//!   on the https port.
//! - `conn`: one connection under its deadlines, the request-body budget, JSON for hyper's own
//!   answers.
//! - one handler file per OpenAPI tag: `daemon` (health, capabilities, metrics), `sessions`,
//!   `prompts`, `events`, `permissions`; `shell`, the session shell's gates; `act`, the
//!   notifications' action links.
//! - [`web`]: the web app at `/` and `/assets/`, embedded at build time from `web/`.
//! - `relay`: a request for a session another daemon of the fleet holds, passed to it.
//! - `auth`: who a request is (the operator, or a paired device by bearer or cookie); `devices`:
//!   pairing, listing and revoking devices.
//! - `acp`: `/acp`, the ACP transports (WebSocket, Streamable HTTP) onto the ACP door
//!   (`crate::door`); `wsframe`: the text frames its WebSockets write.
//!
//! Imports `door`, `daemon`, `permission` (vote and rule types), `notify` (the action links),
//! `config` and the leaves. Nothing imports
//! this floor but `server`.

mod acp;
mod act;
pub mod api;
mod auth;
mod changes;
mod coalesce;
mod conn;
mod daemon;
mod devices;
pub mod error;
mod events;
mod extract;
mod handshake;
mod history;
mod listener;
pub mod openapi;
pub mod perimeter;
mod permissions;
mod prompts;
mod relay;
mod sessions;
mod shell;
mod signin;
pub mod web;
mod wsframe;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use tokio::net::TcpListener;

pub use self::error::ApiError;
pub use self::extract::{AppState, MAX_BODY_BYTES};
pub use self::perimeter::Peer;
use crate::metrics::Metrics;

/// The whole HTTP surface for `daemon`, listening on `port` (the Host allowlist needs it). The
/// routes come from [`api::router`]; outside the perimeter sit the request counter and the trace
/// span. Tests drive it with `oneshot`, no socket needed.
pub fn app(daemon: AppState, port: u16) -> Router {
    let desk = crate::desk::Desk::new(daemon.clone());
    let perimeter = Arc::new(
        perimeter::Perimeter::new(&daemon.config, port, desk.clone(), api::OPERATIONS)
            .with_fleet_secret(daemon.fleet.as_ref().map(|fleet| fleet.fleet_secret())),
    );
    let door = crate::door::Door::new(desk.clone());
    let mut router = api::router()
        .layer(axum::Extension(door))
        .layer(axum::Extension(desk))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed);
    // In a fleet, inside the perimeter: a request is checked where it arrives, then relayed.
    if let Some(relay) = relay::Relay::new(daemon.clone()) {
        router = router.layer(axum::middleware::from_fn_with_state(Arc::new(relay), relay::relay));
    }
    router
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(perimeter, perimeter::check))
        .layer(axum::middleware::from_fn_with_state(daemon.metrics.clone(), count_request))
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_request(())
                .on_response(on_response)
                .on_failure(()),
        )
        .with_state(daemon)
}

/// Serves [`app`] on `listener`, at most `max_connections` at once, each connection under the
/// deadlines of `docs/protocol.md#210-connection-deadlines`, until `shutdown` resolves; then no
/// connection is accepted, each open one finishes its request in progress, and this returns when
/// all are closed (the caller bounds how long it waits for that).
pub async fn serve(
    listener: TcpListener,
    max_connections: usize,
    daemon: AppState,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::Listener;

    let https = tls.map(|config| handshake::Https::new(config, daemon.config.header_timeout));
    let write_idle = daemon.config.writer_idle_timeout;
    let metrics = daemon.metrics.clone();
    let limits = conn::Limits::new(&daemon.config);
    let app = app(daemon, listener.local_addr()?.port());
    let mut listener = listener::LimitedListener::new(listener, max_connections)
        .with_write_idle_timeout(write_idle, metrics.clone());
    let limits = limits.with_connections(listener.places(), metrics);
    let connections = tokio_util::task::TaskTracker::new();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::pin!(shutdown);
    loop {
        let (io, addr) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let accepted = Box::new(Accepted {
            io,
            addr,
            https: https.clone(),
            app: app.clone(),
            limits: limits.clone(),
            stop: stop.clone(),
        });
        // The task's own future holds two pointers: to what was accepted while the connection
        // opens, then to the connection's future (`conn::serve`), for as long as it lasts, an idle
        // event stream's whole life (issue #46).
        connections.spawn(async move {
            if let Some(connection) = Box::pin(accepted.open()).await {
                connection.await;
            }
        });
    }
    drop(listener);
    stop.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}

/// The route label: the matched pattern (ids appear only as `{id}`), never the raw path.
/// A connection the listener accepted, and what serving it takes.
struct Accepted {
    io: listener::LimitedStream,
    addr: std::net::SocketAddr,
    https: Option<handshake::Https>,
    app: Router,
    limits: conn::Limits,
    stop: tokio_util::sync::CancellationToken,
}

impl Accepted {
    /// Who is at the other end, which HTTP it speaks (and TLS's handshake, on https): the
    /// connection's future, or `None` when it closed, failed or said nothing in time.
    async fn open(self: Box<Self>) -> Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> {
        let Accepted { mut io, addr, https, app, limits, stop } = *self;
        // Who is at the other end, once per connection and before a byte is read: a process the
        // daemon started is refused at the perimeter (`crate::peer`).
        let origin = match io.local_addr() {
            Ok(local) => crate::peer::identify(local, addr, std::process::id()),
            Err(_) => crate::peer::Origin::Gone,
        };
        let peer = Peer { addr, origin };
        match https {
            // Plain http: HTTP/2 with prior knowledge opens with its preface, anything else is
            // HTTP/1.1.
            None => match conn::sniff(&mut io, limits.header_timeout).await {
                Some((protocol, first)) => {
                    let io = conn::Sniffed::new(first, io);
                    Some(conn::serve(io, protocol, peer, app, limits, stop))
                }
                None => {
                    // Nothing (or too little) within the head's deadline: what a late HTTP/1.1
                    // head is answered, best effort.
                    let answer = ApiError::HeaderTimeout.raw_response();
                    let _ = tokio::io::AsyncWriteExt::write_all(&mut io, &answer).await;
                    None
                }
            },
            // TLS: HTTP/2 when the client chose it by ALPN.
            Some(https) => {
                let tls = https.accept(io).await?;
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                let protocol = if h2 { conn::Protocol::Http2 } else { conn::Protocol::Http1 };
                Some(conn::serve(tls, protocol, peer, app, limits, stop))
            }
        }
    }
}

fn route_of(req: &Request) -> &str {
    req.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str)
}

/// A known method, or `other` (a client picks the method: unbounded labels are not an option).
fn method_label(m: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// One span per request: method and matched route now, status and latency when it answers. No
/// headers, query or body are recorded (they may carry tokens or prompts).
fn request_span(req: &Request) -> tracing::Span {
    let (method, route) = (method_label(req.method()), route_of(req));
    // An event stream's request lasts as long as the stream, and its span with it: at DEBUG, a
    // daemon at the default level keeps none for each idle stream (issue #46). What a stream logs
    // names its session itself.
    if is_event_stream(req) {
        return tracing::debug_span!(
            "request",
            method,
            route,
            status = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
    }
    tracing::info_span!(
        "request",
        method,
        route,
        status = tracing::field::Empty,
        latency_ms = tracing::field::Empty,
    )
}

/// A request for an event stream: a session's, or `/acp`'s (a WebSocket's upgrade is answered at
/// once and ends its request).
fn is_event_stream(req: &Request) -> bool {
    if req.method() != axum::http::Method::GET {
        return false;
    }
    match route_of(req) {
        "/session/{id}/events" => true,
        "/acp" => req
            .headers()
            .get_all(axum::http::header::ACCEPT)
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| v.to_ascii_lowercase().contains("text/event-stream"))),
        _ => false,
    }
}

fn on_response(res: &Response, latency: std::time::Duration, span: &tracing::Span) {
    let status = res.status().as_u16();
    let latency_ms = latency.as_secs_f64() * 1000.0;
    span.record("status", status);
    span.record("latency_ms", latency_ms);
    tracing::debug!(target: "mediatord::http", status, latency_ms, "request answered");
}

async fn count_request(State(m): State<Arc<Metrics>>, req: Request, next: Next) -> Response {
    let method = method_label(req.method());
    let route = route_of(&req).to_owned();
    let response = next.run(req).await;
    m.http_request(method, &route, response.status().as_u16());
    response
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    /// Which requests are event streams (their span is at DEBUG, so an idle stream keeps none at
    /// the default level): a session's `events`, and `/acp`'s GET that asks for `text/event-stream`
    /// (in any case); not a WebSocket's upgrade, another route or another method. The route is the
    /// router's (`MatchedPath`), as in the daemon.
    #[tokio::test]
    async fn event_streams_are_a_sessions_events_and_acps_sse_get() {
        async fn judged(req: Request) -> String {
            is_event_stream(&req).to_string()
        }
        let app: Router = Router::new()
            .route("/session/{id}/events", get(judged).post(judged))
            .route("/acp", get(judged).post(judged))
            .route("/session/{id}", get(judged));
        let cases: &[(&str, &str, Option<&str>, &str)] = &[
            ("GET", "/session/s1/events", None, "true"),
            ("POST", "/session/s1/events", None, "false"),
            ("GET", "/acp", Some("text/event-stream"), "true"),
            ("GET", "/acp", Some("application/json, Text/Event-Stream"), "true"),
            ("GET", "/acp", None, "false"),
            ("GET", "/acp", Some("application/json"), "false"),
            ("POST", "/acp", Some("text/event-stream"), "false"),
            ("GET", "/session/s1", Some("text/event-stream"), "false"),
        ];
        for (method, path, accept, want) in cases {
            let mut req = Request::builder().method(*method).uri(*path);
            if let Some(accept) = accept {
                req = req.header(axum::http::header::ACCEPT, *accept);
            }
            let res = app.clone().oneshot(req.body(Body::empty()).expect("request")).await.expect("answer");
            let got = axum::body::to_bytes(res.into_body(), 64).await.expect("body");
            assert_eq!(String::from_utf8_lossy(&got), *want, "{method} {path} {accept:?}");
        }
    }
}

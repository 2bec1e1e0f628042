//! mediatord — one ACP coding agent behind an HTTP + SSE API that many clients share.
//!
//! Crate map (one concept per file; start at [`server::run`] for the daemon's life):
//! - [`config`]: command line, environment and `--config` file → validated [`config::Config`].
//! - [`server`]: bind, startup line, `--max-connections` at accept, signals and the drain.
//! - [`perimeter`]: Origin → Host → bearer checks in front of every route (SPEC §2).
//! - [`extract`]: JSON bodies under the size cap and the client id header.
//! - [`api`]: the route table — one list expanding into the router and the documented operations.
//! - [`openapi`]: the OpenAPI 3.1 document built from [`api::OPERATIONS`] (`GET /openapi.json`).
//! - [`metrics`]: Prometheus counters and histograms, and the `GET /metrics` exposition.
//! - [`routes`]: the HTTP handlers, by resource (SPEC §3).
//! - [`shell`]: `POST /session/:id/shell`, locked down (SPEC §9).
//! - [`error`]: the one error type HTTP callers see, each variant with a stable code.
//! - [`daemon`]: the tables — sessions, one agent per workspace, coalesced creates, limits, drain.
//! - [`session`]: one session's clients, prompt FIFO, turn runner and ending.
//! - [`bus`]: per-session event ids, replay ring and fan-out to SSE streams (SPEC §5).
//! - [`mediator`]: who answers the agent's permission requests: pending, votes, audit, rules (§7, §8).
//! - [`policy`]: the four permission policies as one pure decision function.
//! - [`rules`]: permission rule validation and matching, pure.
//! - [`workspace`]: the actor owning one agent's stdio, pending calls and session table.
//! - [`jsonrpc`]: JSON-RPC 2.0 frames on the agent's stdio.
//! - [`agent_process`]: spawning the agent in its own process group, stderr, group kill.
//! - [`agent_guard`]: the small guard process that kills the agent group if the daemon dies.
//! - [`fs_proxy`]: the agent's `fs/*` requests, confined to the workspace.
//! - [`demo_agent`]: the built-in ACP agent behind `mediatord demo-agent` / `--agent demo`.

pub mod agent_guard;
pub mod agent_process;
pub mod api;
pub mod bus;
pub mod config;
pub mod daemon;
pub mod demo_agent;
pub mod error;
pub mod extract;
pub mod fs_proxy;
pub mod jsonrpc;
pub mod mediator;
pub mod metrics;
pub mod openapi;
pub mod perimeter;
pub mod policy;
pub mod routes;
pub mod rules;
pub mod server;
pub mod session;
pub mod shell;
pub mod workspace;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

/// Milliseconds since the UNIX epoch (event timestamps, `createdAt`, `lastSeenAt`).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `ms` since the UNIX epoch as an ISO-8601 UTC timestamp with milliseconds, e.g.
/// `2026-11-22T20:39:19.849Z` (civil-from-days, after Howard Hinnant's algorithm).
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// The whole HTTP surface for `daemon`, listening on `port` (the Host allowlist needs it). The
/// routes come from [`api::router`]; outside the perimeter sit the request counter and the trace span.
pub fn app(daemon: Arc<daemon::Daemon>, port: u16) -> Router {
    let perimeter = Arc::new(perimeter::Perimeter::new(&daemon.config, port));
    api::router()
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES))
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

/// The route label: the matched pattern (ids appear only as `{id}`), never the raw path.
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
    tracing::info_span!(
        "request",
        method = method_label(req.method()),
        route = route_of(req),
        status = tracing::field::Empty,
        latency_ms = tracing::field::Empty,
    )
}

fn on_response(res: &Response, latency: std::time::Duration, span: &tracing::Span) {
    let status = res.status().as_u16();
    let latency_ms = latency.as_secs_f64() * 1000.0;
    span.record("status", status);
    span.record("latency_ms", latency_ms);
    tracing::debug!(target: "mediatord::http", status, latency_ms, "request answered");
}

async fn count_request(State(m): State<Arc<metrics::Metrics>>, req: Request, next: Next) -> Response {
    let method = method_label(req.method());
    let route = route_of(&req).to_owned();
    let response = next.run(req).await;
    m.http_request(method, &route, response.status().as_u16());
    response
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso8601_formats_utc_with_milliseconds() {
        assert_eq!(super::iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::iso8601(951_782_400_001), "2000-02-29T00:00:00.001Z");
        assert_eq!(super::iso8601(1_795_379_959_849), "2026-11-22T20:39:19.849Z");
    }
}

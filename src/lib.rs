//! mediatord — one ACP coding agent behind an HTTP + SSE API that many clients share.
//!
//! Crate map (one concept per file; start at [`server::run`] for the daemon's life):
//! - [`config`]: command line, environment and `--config` file → validated [`config::Config`].
//! - [`server`]: bind, startup line, `--max-connections` at accept, signals and the drain.
//! - [`perimeter`]: Origin → Host → bearer checks in front of every route (SPEC §2).
//! - [`extract`]: JSON bodies under the size cap and the client id header.
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
pub mod bus;
pub mod config;
pub mod daemon;
pub mod demo_agent;
pub mod error;
pub mod extract;
pub mod fs_proxy;
pub mod jsonrpc;
pub mod mediator;
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
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

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

/// The whole HTTP surface for `daemon`, listening on `port` (the Host allowlist needs it).
pub fn app(daemon: Arc<daemon::Daemon>, port: u16) -> Router {
    use routes::*;
    let perimeter = Arc::new(perimeter::Perimeter::new(&daemon.config, port));
    Router::new()
        .route("/health", get(health))
        .route("/capabilities", get(capabilities))
        .route("/session", post(create_session))
        .route("/workspace/{*rest}", get(list_workspace_sessions))
        .route("/session/{id}", get(get_session).delete(delete_session))
        .route("/session/{id}/context", get(session_context))
        .route("/session/{id}/prompt", post(prompt))
        .route("/session/{id}/cancel", post(cancel))
        .route("/session/{id}/model", post(set_model))
        .route("/session/{id}/events", get(events))
        .route("/session/{id}/permission/{request_id}", post(vote))
        .route("/permission/{request_id}", post(legacy_vote))
        .route("/session/{id}/permissions", get(list_permissions))
        .route("/session/{id}/permission-rules", post(add_rule).get(list_rules))
        .route("/session/{id}/permission-rules/{rule_id}", axum::routing::delete(delete_rule))
        .route("/session/{id}/detach", post(detach))
        .route("/session/{id}/heartbeat", post(heartbeat))
        .route("/session/{id}/shell", post(shell::run_shell))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(perimeter, perimeter::check))
        .with_state(daemon)
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

//! Handlers of the `daemon` tag: health, capabilities (`docs/protocol.md#11-capabilities`) and the
//! Prometheus exposition. (`GET /openapi.json` is served by the route table itself.)

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::extract::{AppState, Flags};
use crate::config::{Policy, TOOL_KINDS};
use crate::daemon::Daemon;
use crate::desk::Caller;

/// `GET /health`: `{status}`, or with `?deep=1` the daemon's [`crate::metrics::Snapshot`].
pub(super) async fn health(State(d): State<AppState>, q: Flags) -> Response {
    if q.deep() { Json(d.snapshot()).into_response() } else { Json(json!({"status": "ok"})).into_response() }
}

/// Feature tags for what works at this build, plus the conditional ones.
fn features(d: &Daemon) -> Vec<&'static str> {
    let mut features = vec![
        "health",
        "capabilities",
        "session_create",
        "session_scope_override",
        "session_list",
        "session_status",
        "session_close",
        "session_detach",
        "session_prompt",
        "non_blocking_prompt",
        "session_cancel",
        "session_events",
        "session_set_model",
        "session_set_mode",
        "client_identity",
        "client_heartbeat",
        "permission_vote",
        "session_permission_vote",
        "permission_mediation",
        "permission_list",
        "permission_rules",
        "metrics",
        "agents",
        "devices",
        "acp",
    ];
    if d.config.session_shell_effective() {
        features.push("session_shell_command");
    }
    if d.config.require_auth {
        features.push("require_auth");
    }
    if !d.config.allow_origins.is_empty() {
        features.push("allow_origin");
    }
    if !d.config.notify.is_empty() {
        features.push("notifications");
    }
    features
}

/// `GET /capabilities`.
pub(super) async fn capabilities(
    State(d): State<AppState>,
    caller: Option<Extension<Caller>>,
) -> Json<Value> {
    let c = &d.config;
    let workspaces: Vec<Value> = c
        .workspaces
        .iter()
        .enumerate()
        .map(|(i, w)| json!({"cwd": w.to_string_lossy(), "primary": i == 0}))
        .collect();
    Json(json!({
        "v": 1,
        "protocolVersions": {"current": "v1", "supported": ["v1"]},
        "daemon": {"name": "mediatord", "version": env!("CARGO_PKG_VERSION")},
        "mode": "http-bridge",
        "features": features(&d),
        "workspaceCwd": c.primary_workspace().to_string_lossy(),
        "workspaces": workspaces,
        // `@qwen-code/sdk`'s `negotiateTransport` prefers `acp-ws`, then `acp-http`, then `rest`.
        "transports": ["rest", "acp-ws", "acp-http"],
        "policy": {
            "permission": c.permission_policy.as_str(),
            "permissionModes": Policy::ALL.map(Policy::as_str),
            "consensusQuorum": c.consensus_quorum,
            "permissionTimeoutMs": c.permission_timeout.map(|t| t.as_millis() as u64),
        },
        "limits": {
            "maxSessions": c.max_sessions,
            "maxPendingPromptsPerSession": c.max_pending_prompts,
            "maxSubscribersPerSession": c.max_subscribers,
            "eventRingSize": c.event_ring_size,
        },
        "agent": {"name": c.default_agent().name, "command": c.default_agent().command.display},
        "agents": c.agent_names(),
        "sandbox": d.sandbox_report(c.default_agent()),
        "identity": super::devices::identity(caller.as_deref()),
    }))
}

/// What `GET /agents` shows of an agent's `initialize` answer: who it is and what it can do.
const INITIALIZE_FIELDS: [&str; 4] = ["protocolVersion", "agentInfo", "agentCapabilities", "authMethods"];

/// `GET /agents`: every configured agent, the default first: its program (never its arguments or
/// environment, which may carry credentials), where it runs, and what its `initialize` reported.
pub(super) async fn agents(State(d): State<AppState>) -> Json<Value> {
    let agents: Vec<Value> = d
        .agents()
        .into_iter()
        .map(|a| {
            let initialize = a.initialize.map(|answer| {
                let picked: serde_json::Map<String, Value> = INITIALIZE_FIELDS
                    .iter()
                    .filter_map(|k| answer.get(*k).map(|v| ((*k).to_owned(), v.clone())))
                    .collect();
                Value::Object(picked)
            });
            let mut out = json!({
                "name": a.name,
                "default": a.default,
                "program": a.program.program,
                "found": a.program.found,
                "running": !a.workspaces.is_empty(),
                "workspaces": a.workspaces.iter().map(|w| w.to_string_lossy()).collect::<Vec<_>>(),
                "initialize": initialize,
                "sandbox": a.sandbox,
            });
            if let Some(error) = a.program.error {
                out["error"] = json!(error);
            }
            out
        })
        .collect();
    Json(json!({"agents": agents}))
}

/// `GET /reviewers`: each configured reviewer, in configuration order, with its figures, read from
/// the counters `/metrics` shows (one owner: the two cannot disagree).
pub(super) async fn reviewers(State(d): State<AppState>) -> Json<Value> {
    let reviewers: Vec<Value> = d
        .config
        .reviewers
        .iter()
        .map(|spec| {
            let decides: Vec<&str> =
                TOOL_KINDS.iter().copied().filter(|k| spec.trust.decides(Some(k))).collect();
            let mut out = json!({
                "name": spec.name,
                "workspace": spec.workspace.as_ref().map(|w| w.to_string_lossy()),
                "decides": decides,
            });
            if let (Value::Object(out), Ok(Value::Object(figures))) =
                (&mut out, serde_json::to_value(d.metrics.reviewer_figures(&spec.name)))
            {
                out.extend(figures);
            }
            out
        })
        .collect();
    Json(json!({"reviewers": reviewers}))
}

/// `GET /metrics`: the Prometheus exposition.
pub(super) async fn metrics(State(d): State<AppState>) -> Response {
    let body = d.metrics.render(&d.snapshot());
    ([(header::CONTENT_TYPE, HeaderValue::from_static(crate::metrics::CONTENT_TYPE))], body).into_response()
}

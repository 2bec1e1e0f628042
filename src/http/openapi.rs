//! The OpenAPI 3.1 document: what an operation says about itself ([`Operation`]), and the document
//! built from a list of them (the route table's, [`super::api::OPERATIONS`]), the component schemas
//! below, and [`ApiError`] (each error code's status). Served at `GET /openapi.json`;
//! `docs/openapi.json` is the same bytes (`MEDIATORD_UPDATE_OPENAPI=1 cargo test --test it openapi`
//! regenerates it).
//!
//! This file knows no handler, so the route table can use it without a cycle.

mod schemas;

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::error::ApiError;
use schemas::schemas;

/// Error codes any route can answer: the perimeter's (`docs/protocol.md#2-http-perimeter`).
const PERIMETER: &[&str] =
    &["agent_not_a_client", "unauthorized", "origin_denied", "host_not_allowed", "invalid_host"];

/// What a success response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// `application/json` with this component schema.
    Json(&'static str),
    /// No body (204).
    Empty,
    /// `text/event-stream` (`docs/protocol.md#5-event-stream`).
    EventStream,
    /// The Prometheus / OpenMetrics text exposition.
    Metrics,
    /// `text/html` for a browser, else `application/json` with this component schema.
    Page(&'static str),
    /// A file of the web app: script, style sheet, icon or manifest.
    Asset,
    /// A small `text/html` page.
    Html,
    /// `GET /audit`: a page as JSON with this component schema, or with `format` a download (CSV,
    /// or a JSON array of the entries).
    AuditExport(&'static str),
}

/// Request headers an operation reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// `X-Qwen-Client-Id` (alias `X-Client-Id`).
    ClientId,
    /// `Prefer: respond-async`.
    Prefer,
    /// `Last-Event-ID` for resuming a stream.
    LastEventId,
    /// `Acp-Connection-Id`: the ACP connection a request or stream belongs to.
    AcpConnectionId,
    /// `Acp-Session-Id`: the session an ACP stream (or session request) is about.
    AcpSessionId,
    /// `Acp-Protocol-Version`: the ACP version a Streamable HTTP request speaks.
    AcpProtocolVersion,
}

/// Who may call an operation: the desk's judgement (`crate::desk::Access`).
pub use crate::desk::Access;

/// One documented operation.
#[derive(Debug, Clone, Copy)]
pub struct Operation {
    /// Lowercase HTTP method, as in the row (`get`, `post`, `delete`).
    pub method: &'static str,
    /// The axum route pattern.
    pub route: &'static str,
    /// The OpenAPI path when it differs from `route` (a wildcard).
    pub doc_path: Option<&'static str>,
    pub id: &'static str,
    pub tag: &'static str,
    pub summary: &'static str,
    /// Request body component schema, if the operation takes a JSON body.
    pub body: Option<&'static str>,
    pub ok: &'static [(u16, Body)],
    /// Error codes beyond the perimeter's (and `body_too_large` for operations with a body).
    pub errors: &'static [&'static str],
    /// Query flags (`?deep=1`), each with its description.
    pub query: &'static [(&'static str, &'static str)],
    pub headers: &'static [Header],
    /// Served without the bearer token (an action link: its token is the credential).
    pub no_auth: bool,
    /// Who may call it, when not what the method says ([`Operation::access`]).
    pub access: Option<Access>,
}

impl Operation {
    pub const fn new(id: &'static str, tag: &'static str, summary: &'static str) -> Operation {
        Operation {
            method: "",
            route: "",
            doc_path: None,
            id,
            tag,
            summary,
            body: None,
            ok: &[(200, Body::Json("Object"))],
            errors: &[],
            query: &[],
            headers: &[],
            no_auth: false,
            access: None,
        }
    }
    /// The same operation served again under another path (a named workspace's), documented with
    /// its own id and summary.
    pub const fn named(self, id: &'static str, summary: &'static str) -> Operation {
        Operation { id, summary, ..self }
    }
    pub const fn body(self, schema: &'static str) -> Operation {
        Operation { body: Some(schema), ..self }
    }
    pub const fn ok(self, ok: &'static [(u16, Body)]) -> Operation {
        Operation { ok, ..self }
    }
    pub const fn errors(self, errors: &'static [&'static str]) -> Operation {
        Operation { errors, ..self }
    }
    pub const fn query(self, query: &'static [(&'static str, &'static str)]) -> Operation {
        Operation { query, ..self }
    }
    pub const fn headers(self, headers: &'static [Header]) -> Operation {
        Operation { headers, ..self }
    }
    pub const fn doc_path(self, path: &'static str) -> Operation {
        Operation { doc_path: Some(path), ..self }
    }
    pub const fn no_auth(self) -> Operation {
        Operation { no_auth: true, ..self }
    }
    /// Readable by observer devices although its method is not `GET` (presence: heartbeat, detach).
    pub const fn read(self) -> Operation {
        Operation { access: Some(Access::Read), ..self }
    }
    /// The operator's token only (device administration).
    pub const fn operator(self) -> Operation {
        Operation { access: Some(Access::Operator), ..self }
    }
    /// Who may call it: public without auth; else as set; else `GET` reads and the rest writes.
    pub fn access(&self) -> Access {
        match self.access {
            _ if self.no_auth => Access::Public,
            Some(access) => access,
            None if self.method == "get" => Access::Read,
            None => Access::Write,
        }
    }
    /// The path as documented.
    pub fn path(&self) -> &'static str {
        self.doc_path.unwrap_or(self.route)
    }
}

/// The document for `operations`, pretty-printed with a trailing newline (the checked-in file's
/// exact bytes).
pub fn document_text(operations: &[Operation]) -> String {
    let mut text = serde_json::to_string_pretty(&document(operations)).unwrap_or_default();
    text.push('\n');
    text
}

pub fn document(operations: &[Operation]) -> Value {
    let mut paths: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    for op in operations {
        paths.entry(op.path()).or_default().insert(op.method.to_owned(), operation(op));
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "mediatord",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "One ACP coding agent behind an HTTP + SSE API that many clients share. \
                Every error body is `{error, code, ...context}`; the `code` is stable.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "security": [{"bearerAuth": []}, {"deviceCookie": []}, {}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The operator's token (required when the daemon has one), or a paired device's credential `<deviceId>.<secret>` (docs/protocol.md §15).",
                },
                "deviceCookie": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "mediatord_device",
                    "description": "A paired device's credential as set by `POST /devices/pair` (HttpOnly, SameSite=Strict); a state-changing request carrying it must come from the daemon's own origin.",
                },
            },
            "parameters": {
                "ClientId": {
                    "name": "X-Qwen-Client-Id",
                    "in": "header",
                    "required": false,
                    "description": "The caller's self-reported client id (alias `X-Client-Id`); empty = absent.",
                    "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
                },
                "Prefer": {
                    "name": "Prefer",
                    "in": "header",
                    "required": false,
                    "description": "`respond-async` answers 202 at once instead of waiting for the turn.",
                    "schema": {"type": "string"},
                },
                "LastEventId": {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": false,
                    "description": "Resume after this event id (decimal, at most 2^53-1; anything else = absent).",
                    "schema": {"type": "string"},
                },
                "AcpConnectionId": {
                    "name": "Acp-Connection-Id",
                    "in": "header",
                    "required": false,
                    "description": "The ACP connection (from the `initialize` answer's header); absent only on `initialize` and a WebSocket upgrade. In a fleet it names the daemon the connection lives on, and any daemon relays the request there.",
                    "schema": {"type": "string"},
                },
                "AcpSessionId": {
                    "name": "Acp-Session-Id",
                    "in": "header",
                    "required": false,
                    "description": "A session of the connection: on `GET /acp`, its stream (one it attached, or one it may attach, whose stream waits for the `session/load` or `session/resume`); on `POST /acp`, it must equal `params.sessionId`; on a WebSocket upgrade or an `initialize`, the session the connection is for (in a fleet, the upgrade or the `initialize` is relayed to the daemon holding it, where the connection then lives).",
                    "schema": {"type": "string"},
                },
                "AcpProtocolVersion": {
                    "name": "Acp-Protocol-Version",
                    "in": "header",
                    "required": false,
                    "description": "The ACP protocol version the request speaks, as `initialize` negotiated it (the daemon answers `1`, and says so in this header of the `initialize` answer). Optional; when sent on any request but `initialize`, a version other than the negotiated one is `400 unsupported_protocol_version`.",
                    "schema": {"type": "string"},
                },
            },
            "schemas": schemas(),
        },
    })
}

fn operation(op: &Operation) -> Value {
    let mut params: Vec<Value> = path_params(op.path())
        .into_iter()
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
        .collect();
    for (name, description) in op.query {
        params.push(json!({
            "name": name, "in": "query", "required": false, "description": description,
            "schema": {"type": "string"},
        }));
    }
    for h in op.headers {
        let name = match h {
            Header::ClientId => "ClientId",
            Header::Prefer => "Prefer",
            Header::LastEventId => "LastEventId",
            Header::AcpConnectionId => "AcpConnectionId",
            Header::AcpSessionId => "AcpSessionId",
            Header::AcpProtocolVersion => "AcpProtocolVersion",
        };
        params.push(json!({"$ref": format!("#/components/parameters/{name}")}));
    }
    let mut responses = Map::new();
    for (status, body) in op.ok {
        responses.insert(status.to_string(), success(*body));
    }
    let mut codes: Vec<&str> =
        PERIMETER.iter().copied().filter(|c| !(op.no_auth && *c == "unauthorized")).collect();
    match op.access() {
        Access::Public => {}
        Access::Read => codes.push("client_id_mismatch"),
        Access::Write => codes.extend(["client_id_mismatch", "read_only_device"]),
        Access::Operator => codes.extend(["client_id_mismatch", "operator_required"]),
    }
    if op.body.is_some() {
        codes.extend(["body_too_large", "body_timeout", "body_budget_exceeded"]);
    }
    if !path_params(op.path()).is_empty() {
        codes.push("invalid_path");
    }
    if !op.query.is_empty() {
        codes.push("invalid_query");
    }
    codes.extend(op.errors);
    // In a fleet, a request for a session another daemon holds is relayed there (`relay.rs`).
    if super::relay::relayed_route(op.route) {
        codes.push("node_unavailable");
    }
    let mut by_status: BTreeMap<u16, Vec<&str>> = BTreeMap::new();
    for code in codes {
        let status = error_status(code);
        let list = by_status.entry(status).or_default();
        if !list.contains(&code) {
            list.push(code);
        }
    }
    for (status, codes) in by_status {
        let reason = axum::http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Error");
        responses.insert(
            status.to_string(),
            json!({
                "description": format!("{reason}: {}", codes.join(", ")),
                "content": {"application/json": {"schema": {
                    "allOf": [{"$ref": "#/components/schemas/Error"}],
                    "properties": {"code": {"enum": codes}}
                }}},
            }),
        );
    }
    let mut out = json!({
        "operationId": op.id,
        "tags": [op.tag],
        "summary": op.summary,
        "responses": responses,
    });
    if !params.is_empty() {
        out["parameters"] = json!(params);
    }
    if op.no_auth {
        out["security"] = json!([]);
    }
    out["x-mediatord-access"] = json!(op.access().as_str());
    if let Some(schema) = op.body {
        out["requestBody"] = json!({
            "required": true,
            "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}},
        });
    }
    out
}

/// `{name}` segments of an OpenAPI path.
pub fn path_params(path: &str) -> Vec<&str> {
    path.split('/').filter_map(|s| s.strip_prefix('{')?.strip_suffix('}')).collect()
}

/// The status [`ApiError`] gives `code`. Panics on an unknown code: the table must name real ones.
pub fn error_status(code: &str) -> u16 {
    match ApiError::by_code(code) {
        Some(e) => e.status().as_u16(),
        None => panic!("the route table names an unknown error code {code:?}"),
    }
}

fn success(body: Body) -> Value {
    match body {
        Body::Json(schema) => json!({
            "description": "OK",
            "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}},
        }),
        Body::Empty => json!({"description": "No Content"}),
        Body::EventStream => json!({
            "description": "Server-sent events: `id`, `event` and one `data` line of JSON \
                `{id, v, type, data, promptId?, originatorClientId?}` per event; `: heartbeat` comments.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }),
        Body::Metrics => json!({
            "description": "OpenMetrics text exposition",
            "content": {"application/openmetrics-text": {"schema": {"type": "string"}}},
        }),
        Body::Page(schema) => json!({
            "description": "The web app's page when `Accept` names `text/html` (`Cache-Control: no-cache`, an ETag), \
                else the JSON below",
            "content": {
                "text/html": {"schema": {"type": "string"}},
                "application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}},
            },
        }),
        Body::Asset => json!({
            "description": "The file, in the coding Accept-Encoding prefers (br, gzip or none)",
            "content": {
                "text/javascript": {"schema": {"type": "string"}},
                "text/css": {"schema": {"type": "string"}},
                "image/svg+xml": {"schema": {"type": "string"}},
                "application/manifest+json": {"schema": {"type": "string"}},
            },
        }),
        Body::Html => json!({
            "description": "A page (no script; strict Content-Security-Policy)",
            "content": {"text/html": {"schema": {"type": "string"}}},
        }),
        Body::AuditExport(schema) => json!({
            "description": "Without `format`, a page. With `format=csv` or `format=json`, a download \
                (`Content-Disposition: attachment`) of up to 5000 entries: RFC 4180 CSV with a header \
                row (a cell a spreadsheet would read as a formula starts with `'`), or a JSON array of \
                the entries; `X-Mediatord-Next-Cursor` names the cursor of those left out.",
            "headers": {"X-Mediatord-Next-Cursor": {
                "description": "The cursor to export the entries this download left out (it was full)",
                "schema": {"type": "string"},
            }},
            "content": {
                "application/json": {"schema": {"oneOf": [
                    {"$ref": format!("#/components/schemas/{schema}")},
                    {"type": "array", "items": {"type": "object"}},
                ]}},
                "text/csv": {"schema": {"type": "string"}},
            },
        }),
    }
}

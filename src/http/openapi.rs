//! The OpenAPI 3.1 document: what an operation says about itself ([`Operation`]), and the document
//! built from a list of them (the route table's, [`super::api::OPERATIONS`]), the component schemas
//! below, and [`ApiError`] (each error code's status). Served at `GET /openapi.json`;
//! `docs/openapi.json` is the same bytes (`MEDIATORD_UPDATE_OPENAPI=1 cargo test --test it openapi`
//! regenerates it).
//!
//! This file knows no handler, so the route table can use it without a cycle.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::error::ApiError;

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

fn schemas() -> Value {
    let string = json!({"type": "string"});
    let int = json!({"type": "integer", "minimum": 0});
    let boolean = json!({"type": "boolean"});
    let object = json!({"type": "object"});
    let summary_props = json!({
        "sessionId": string, "workspaceCwd": string,
        "agent": {"type": "string", "description": "The configured agent the session runs on"},
        "createdAt": {"type": "string", "format": "date-time"},
        "clientCount": int, "hasActivePrompt": boolean,
        "pendingPermissions": {"type": "integer", "minimum": 0, "description": "Permission requests waiting for a decision"},
        "state": {"enum": ["live", "dormant", "closed"], "description": "live: this daemon runs it; dormant (ended by a shutdown, a crash, its agent's death or a lost fleet node: resumable; GET /session/{id} answers it too) or closed (by a client; listed with include=ended only): read from the history, with the fields below instead of the live ones (docs/protocol.md 3.4, 14.3)"},
        "endedAt": {"type": ["string", "null"], "format": "date-time"},
        "endReason": {"type": ["string", "null"], "description": "closed_by_client, daemon_shutdown, daemon_stopped, agent_exited, node_lost"},
        "lastEventId": {"type": "integer", "minimum": 0, "description": "The id of its last recorded event"},
    });
    let mut status_props = summary_props.clone();
    status_props["subscribers"] = int.clone();
    status_props["pendingPrompts"] = int.clone();
    let codes: Vec<&str> = ApiError::all().iter().map(ApiError::code).collect();
    let sandbox = json!({
        "type": "object",
        "required": ["kind", "abi", "writable", "net"],
        "description": "What confines the agent and its sessions' shell commands (docs/protocol.md §4.12)",
        "properties": {
            "kind": {"enum": ["landlock", "off", "unsupported"], "description": "landlock: enforced; off: turned off; unsupported: the kernel cannot (agents run unconfined)"},
            "abi": {"type": ["integer", "null"], "description": "The Landlock ABI the kernel offers; null without Landlock"},
            "writable": {"type": ["array", "null"], "items": string, "description": "Where writes are allowed, when enforced: `<workspace>`, `<private tmp>`, then absolute paths"},
            "net": {
                "description": "TCP connections allowed, when enforced: any, none, or these ports (always any below ABI 4)",
                "oneOf": [{"enum": ["any", "none"]}, {"type": "array", "items": {"type": "integer"}}, {"type": "null"}],
            },
        },
    });
    let mut health_sandbox = sandbox.clone();
    health_sandbox["properties"]["denials"] = json!({"type": "integer", "description": "Confined tool calls and shell commands whose output read like a refused write, since the start"});
    let mut schemas = json!({
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {"type": "string", "description": "Human text"},
                "code": {"type": "string", "enum": codes, "description": "Stable; absent only on the 401"},
            },
            "additionalProperties": true,
        },
        "Object": object,
        "JsonRpcMessage": {
            "type": "object",
            "description": "One JSON-RPC 2.0 message (ACP): a request `{jsonrpc, id, method, params?}`, a notification `{jsonrpc, method, params?}` or a response to one of the daemon's requests `{jsonrpc, id, result | error}`. Batches are not part of ACP.",
            "properties": {
                "jsonrpc": {"type": "string", "enum": ["2.0"]},
                "id": {"type": ["string", "integer"]},
                "method": string,
                "params": object,
                "result": {},
                "error": object,
            },
            "required": ["jsonrpc"],
            "additionalProperties": true,
        },
        "JsonRpcResponse": {
            "type": "object",
            "description": "The answer to `initialize`: `{jsonrpc, id, result}` (the daemon's ACP capabilities, docs/protocol.md §16), or `{jsonrpc, id, error}`.",
            "properties": {"jsonrpc": {"type": "string", "enum": ["2.0"]}, "id": {}, "result": object, "error": object},
            "required": ["jsonrpc", "id"],
            "additionalProperties": true,
        },
        "Root": {
            "type": "object",
            "required": ["name", "version", "links"],
            "properties": {
                "name": {"const": "mediatord"},
                "version": string,
                "links": {
                    "type": "object",
                    "description": "Paths of this daemon's entry points",
                    "properties": {"openapi": string, "capabilities": string, "health": string, "agents": string, "app": string},
                },
            },
        },
        "Empty": {"type": "object", "maxProperties": 0},
        "Health": {
            "type": "object",
            "required": ["status"],
            "properties": {
                "status": {"enum": ["ok", "degraded"], "description": "`degraded` once the store lost a write other than an event since the start (`store.writesDropped`, `writesFailed` or `commitsFailed` above 0); the shallow `/health` says `ok` whenever the daemon answers"},
                "sessions": int, "workspaces": int, "agents": int, "pendingPermissions": int,
                "activePrompts": int, "subscribers": int, "uptimeMs": int,
                "notifications": {
                    "type": "object",
                    "properties": {"targets": int, "queued": int, "sent": int, "failed": int, "dropped": int, "links": int},
                    "description": "Notification deliveries since the start (docs/notifications.md)",
                },
                "agent": {
                    "type": "object",
                    "required": ["program", "found"],
                    "properties": {"program": string, "found": boolean, "error": string},
                    "description": "The --agent program (without its arguments) and whether an executable file of that name exists; `error` says why not",
                },
                "store": {
                    "type": "object",
                    "properties": {
                        "durable": boolean, "dbBytes": int, "eventsWritten": int, "eventsDropped": int, "gaps": int,
                        "writesDropped": int, "writesFailed": int, "commitsFailed": int,
                    },
                    "description": "The durable state: the database's size on disk, and how its writer keeps up (docs/protocol.md §14)",
                },
                "sandbox": health_sandbox,
            },
        },
        "Capabilities": {
            "type": "object",
            "required": ["v", "features", "workspaceCwd", "policy", "limits"],
            "properties": {
                "v": {"const": 1},
                "features": {"type": "array", "items": string},
                "workspaceCwd": string,
                "workspaces": {"type": "array", "items": {"type": "object", "properties": {"cwd": string, "primary": boolean}}},
                "policy": object, "limits": object, "daemon": object,
                "agent": {
                    "type": "object",
                    "properties": {"name": string, "command": string},
                    "description": "The default agent: its name and command line as written",
                },
                "agents": {"type": "array", "items": string, "description": "Every configured agent's name, the default first"},
                "identity": {
                    "type": "object",
                    "required": ["kind", "scope"],
                    "description": "Who the caller is: the operator (the daemon's token, or anyone without one) or a paired device (docs/protocol.md §15)",
                    "properties": {
                        "kind": {"enum": ["operator", "device"]},
                        "deviceId": string, "name": string, "role": {"enum": ["voter", "observer"]},
                        "scope": {"type": "array", "items": {"enum": ["read", "write", "operator"]}},
                    },
                },
                "sandbox": sandbox,
            },
        },
        "AgentList": {
            "type": "object",
            "required": ["agents"],
            "properties": {"agents": {"type": "array", "items": {
                "type": "object",
                "required": ["name", "default", "program", "found", "running", "workspaces", "initialize"],
                "properties": {
                    "name": string, "default": boolean,
                    "program": {"type": "string", "description": "The program only: never its arguments or environment"},
                    "found": boolean, "error": string, "running": boolean,
                    "workspaces": {"type": "array", "items": string, "description": "Where a process of this agent runs now"},
                    "initialize": {
                        "type": ["object", "null"],
                        "description": "The agent's latest `initialize` answer (null until it has been started)",
                        "properties": {
                            "protocolVersion": {"type": "integer"}, "agentInfo": object,
                            "agentCapabilities": object, "authMethods": {"type": "array", "items": object},
                        },
                    },
                    "sandbox": sandbox,
                },
            }}},
        },
        "CreateSession": {
            "type": "object",
            "properties": {
                "cwd": {"type": ["string", "null"], "description": "Absolute path of one of the daemon's workspaces"},
                "sessionScope": {"enum": ["single", "thread", null]},
                "modelServiceId": {"type": ["string", "null"]},
                "agent": {"type": ["string", "null"], "description": "A configured agent's name (GET /agents); absent = the default"},
            },
        },
        "SessionCreated": {
            "type": "object",
            "required": ["sessionId", "workspaceCwd", "agent", "attached", "clientId", "createdAt"],
            "properties": {
                "sessionId": string, "workspaceCwd": string, "agent": string, "attached": boolean, "clientId": string,
                "createdAt": {"type": "string", "format": "date-time"}, "models": object, "modes": object,
            },
        },
        "SessionSummary": {"type": "object", "required": ["sessionId"], "properties": summary_props},
        "SessionStatus": {"type": "object", "required": ["sessionId"], "properties": status_props},
        "SessionList": {
            "type": "object",
            "required": ["sessions"],
            "properties": {"sessions": {"type": "array", "items": {"$ref": "#/components/schemas/SessionSummary"}}},
        },
        "SessionContext": {
            "type": "object",
            "required": ["v", "sessionId", "state"],
            "properties": {"v": {"const": 1}, "sessionId": string, "workspaceCwd": string, "state": object},
        },
        "PromptRequest": {
            "type": "object",
            "required": ["prompt"],
            "properties": {
                "prompt": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "object", "description": "An ACP content block, e.g. {\"type\":\"text\",\"text\":\"hi\"}"},
                },
            },
        },
        "PromptResult": {
            "type": "object",
            "required": ["stopReason", "promptId"],
            "properties": {"stopReason": string, "promptId": string},
        },
        "PromptAccepted": {
            "type": "object",
            "required": ["promptId", "lastEventId"],
            "properties": {"promptId": string, "lastEventId": int},
        },
        "SetModel": {
            "type": "object",
            "required": ["modelId"],
            "properties": {"modelId": {"type": "string", "minLength": 1}},
        },
        "SetMode": {
            "type": "object",
            "required": ["modeId"],
            "properties": {"modeId": {"type": "string", "minLength": 1, "description": "One of the session's `modes.availableModes[].id`"}},
        },
        "Vote": {
            "oneOf": [
                {
                    "type": "object",
                    "required": ["outcome"],
                    "properties": {
                        "outcome": {
                            "oneOf": [
                                {"type": "object", "required": ["outcome", "optionId"], "properties": {"outcome": {"const": "selected"}, "optionId": string}},
                                {"type": "object", "required": ["outcome"], "properties": {"outcome": {"const": "cancelled"}}},
                            ],
                        },
                        "remember": {"enum": ["session", "workspace"]},
                        "answers": {"$ref": "#/components/schemas/Answers"},
                    },
                },
                {
                    "type": "object",
                    "required": ["decision"],
                    "properties": {
                        "decision": {"enum": ["allow", "deny", "allow-session", "deny-session", "allow-workspace", "deny-workspace"]},
                        "remember": {"enum": ["session", "workspace"]},
                        "answers": {"$ref": "#/components/schemas/Answers"},
                    },
                },
            ],
        },
        "PermissionList": {
            "type": "object",
            "required": ["pending"],
            "properties": {"pending": {"type": "array", "items": object}, "audit": {"type": "array", "items": object}},
        },
        "RuleRequest": {
            "type": "object",
            "required": ["effect"],
            "properties": {
                "effect": {"enum": ["allow", "deny"]},
                "kinds": {"type": "array", "items": string},
                "tools": {"type": "array", "items": string},
                "paths": {"type": "array", "items": string},
                "commands": {"type": "array", "items": string},
            },
        },
        "RuleCreated": {"type": "object", "required": ["rule"], "properties": {"rule": object}},
        "RuleList": {"type": "object", "required": ["rules"], "properties": {"rules": {"type": "array", "items": object}}},
        "WorkspaceRuleCreated": {
            "type": "object",
            "required": ["rule", "workspace"],
            "properties": {"rule": object, "workspace": string},
        },
        "WorkspaceRuleList": {
            "type": "object",
            "required": ["rules", "workspace"],
            "properties": {"rules": {"type": "array", "items": object}, "workspace": string},
        },
        "AuditPage": {
            "type": "object",
            "required": ["entries", "nextCursor", "durable"],
            "properties": {
                "entries": {"type": "array", "items": object},
                "nextCursor": {"type": ["string", "null"]},
                "durable": boolean,
            },
        },
        "SessionResumed": {
            "type": "object",
            "required": ["sessionId", "workspaceCwd", "agent", "resumed", "lastEventId"],
            "properties": {"sessionId": string, "workspaceCwd": string, "agent": string, "resumed": boolean, "lastEventId": int},
        },
        "Heartbeat": {
            "type": "object",
            "required": ["sessionId", "clientId", "lastSeenAt"],
            "properties": {"sessionId": string, "clientId": string, "lastSeenAt": int},
        },
        "ActionDone": {
            "type": "object",
            "required": ["sessionId", "requestId", "optionId", "via"],
            "properties": {"sessionId": string, "requestId": string, "optionId": string, "via": {"const": "link"}},
        },
        "ShellCommand": {
            "type": "object",
            "required": ["command"],
            "properties": {"command": {"type": "string", "minLength": 1, "maxLength": 65536}},
        },
        "ShellResult": {
            "type": "object",
            "required": ["shellId", "output", "aborted", "truncated"],
            "properties": {
                "shellId": string, "exitCode": {"type": ["integer", "null"]}, "output": string,
                "aborted": boolean, "truncated": boolean,
            },
        },
    });
    if let (Some(all), Value::Object(presented)) = (schemas.as_object_mut(), presented_schemas()) {
        all.extend(presented);
    }
    if let (Some(all), Value::Object(devices)) = (schemas.as_object_mut(), device_schemas()) {
        all.extend(devices);
    }
    if let (Some(all), Value::Object(changes)) = (schemas.as_object_mut(), change_schemas()) {
        all.extend(changes);
    }
    if let (Some(all), Value::Object(questions)) = (schemas.as_object_mut(), question_schemas()) {
        all.extend(questions);
    }
    schemas
}

/// What sessions changed and the file routes (docs/protocol.md § 18), in qwen serve's shapes
/// (apart, like [`device_schemas`], for the macro's recursion).
fn change_schemas() -> Value {
    let string = json!({"type": "string"});
    let int = json!({"type": "integer", "minimum": 0});
    let boolean = json!({"type": "boolean"});
    let hash = json!({"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"});
    let ignore = json!({"enum": ["file", "directory", null]});
    let ending = json!({"enum": ["lf", "crlf"]});
    let hunk = json!({
        "type": "object",
        "required": ["oldStart", "oldLines", "newStart", "newLines", "lines"],
        "properties": {
            "oldStart": int, "oldLines": int, "newStart": int, "newLines": int,
            "lines": {"type": "array", "items": string, "description": "Each prefixed with ` `, `+` or `-`"},
        },
    });
    let changed_file = json!({
        "type": "object",
        "required": ["path", "status", "added", "removed", "isBinary", "truncated", "unapproved"],
        "properties": {
            "path": string, "status": {"enum": ["added", "modified", "deleted"]}, "added": int, "removed": int,
            "isBinary": boolean, "truncated": boolean,
            "unapproved": {"type": "boolean", "description": "No permission request approved in the turn names it"},
        },
    });
    json!({
        "WorkspaceDiff": {
            "type": "object",
            "description": "qwen serve's DaemonWorkspaceGitDiff: the workspace's files against git's HEAD (or, in a plain directory, against the first snapshot of its newest session)",
            "required": ["v", "workspaceCwd", "available", "filesCount", "linesAdded", "linesRemoved", "files", "hiddenCount", "base"],
            "properties": {
                "v": {"const": 1}, "workspaceCwd": string, "available": boolean, "filesCount": int,
                "linesAdded": int, "linesRemoved": int, "hiddenCount": int,
                "base": {"enum": ["head", "snapshot", "none"]},
                "files": {"type": "array", "items": {
                    "type": "object",
                    "required": ["path", "added", "removed", "isBinary", "isUntracked", "isDeleted", "truncated"],
                    "properties": {
                        "path": string, "oldPath": string, "added": int, "removed": int, "isBinary": boolean,
                        "isUntracked": boolean, "isDeleted": boolean, "truncated": boolean,
                    },
                }},
            },
        },
        "WorkspaceDiffHunks": {
            "type": "object",
            "required": ["v", "workspaceCwd", "path", "available", "hunks"],
            "properties": {
                "v": {"const": 1}, "workspaceCwd": string, "path": string, "available": boolean,
                "hunks": {"type": "array", "items": hunk}, "truncated": boolean,
            },
        },
        "RewindSnapshots": {
            "type": "object",
            "required": ["snapshots"],
            "properties": {"snapshots": {"type": "array", "items": {
                "type": "object",
                "required": ["promptId", "turnIndex", "timestamp", "diffStats"],
                "properties": {
                    "promptId": string, "turnIndex": int, "timestamp": {"type": "string", "format": "date-time"},
                    "diffStats": {"type": "object", "required": ["filesChanged", "insertions", "deletions"],
                        "properties": {"filesChanged": int, "insertions": int, "deletions": int}},
                    "unapprovedCount": int,
                },
            }}},
        },
        "RewindRequest": {
            "type": "object",
            "required": ["promptId"],
            "properties": {
                "promptId": {"type": "string", "minLength": 1},
                "rewindFiles": {"type": "boolean", "description": "Only `true` (the default): files are rewound, the conversation is not"},
                "force": {"type": "boolean", "description": "Rewind files someone changed since the agent did"},
            },
        },
        "RewindResult": {
            "type": "object",
            "required": ["rewound", "targetTurnIndex", "filesChanged", "filesFailed"],
            "properties": {
                "rewound": boolean, "targetTurnIndex": int,
                "filesChanged": {"type": "array", "items": string},
                "filesFailed": {"type": "array", "items": string, "description": "`<path>: <why>` for each file not put back"},
            },
        },
        "TurnList": {
            "type": "object",
            "required": ["sessionId", "turns", "snapshots"],
            "properties": {
                "sessionId": string, "snapshots": boolean,
                "turns": {"type": "array", "items": {
                    "type": "object",
                    "description": "A turn's change set (`turn_changes`'s data with every listed file, `startedAt`, `endedAt`), or a rewind (`kind: rewind`)",
                    "properties": {
                        "kind": {"const": "rewind"}, "promptId": string, "turnIndex": int, "available": boolean,
                        "filesChanged": int, "insertions": int, "deletions": int, "unapprovedCount": int,
                        "hiddenCount": int, "files": {"type": "array", "items": changed_file},
                        "startedAt": int, "endedAt": int,
                    },
                }},
            },
        },
        "TurnDiff": {
            "type": "object",
            "description": "One file's hunks in a turn; with `format=unified` the turn's whole diff as text/x-diff instead",
            "required": ["v", "sessionId", "turnIndex", "available", "hunks", "truncated"],
            "properties": {
                "v": {"const": 1}, "sessionId": string, "turnIndex": int, "path": {"type": ["string", "null"]},
                "available": boolean, "hunks": {"type": "array", "items": hunk}, "truncated": boolean,
            },
        },
        "FileRead": {
            "type": "object",
            "description": "qwen serve's DaemonWorkspaceFile",
            "required": ["kind", "path", "content", "encoding", "bom", "lineEnding", "sizeBytes", "returnedBytes", "truncated", "hash", "matchedIgnore", "originalLineCount", "nextCursor", "hasMore"],
            "properties": {
                "kind": {"const": "file"}, "path": string, "content": string, "encoding": {"const": "utf-8"},
                "bom": boolean, "lineEnding": ending, "sizeBytes": int, "returnedBytes": int, "truncated": boolean,
                "hash": hash, "matchedIgnore": ignore, "originalLineCount": int,
                "nextCursor": {"type": ["string", "null"]}, "hasMore": boolean,
            },
        },
        "FileBytes": {
            "type": "object",
            "required": ["kind", "path", "offset", "sizeBytes", "returnedBytes", "truncated", "contentBase64"],
            "properties": {
                "kind": {"const": "file_bytes"}, "path": string, "offset": int, "sizeBytes": int,
                "returnedBytes": int, "truncated": boolean, "contentBase64": string, "hash": hash,
            },
        },
        "FileStat": {
            "type": "object",
            "required": ["kind", "path", "type", "sizeBytes", "modifiedMs"],
            "properties": {
                "kind": {"const": "stat"}, "path": string,
                "type": {"enum": ["file", "directory", "symlink", "other"]}, "sizeBytes": int, "modifiedMs": int,
            },
        },
        "FileList": {
            "type": "object",
            "required": ["kind", "path", "entries", "truncated", "matchedIgnore"],
            "properties": {
                "kind": {"const": "list"}, "path": string, "truncated": boolean, "matchedIgnore": ignore,
                "entries": {"type": "array", "items": {
                    "type": "object", "required": ["name", "kind", "ignored"],
                    "properties": {"name": string, "kind": {"enum": ["file", "directory", "symlink", "other"]}, "ignored": boolean},
                }},
            },
        },
        "GlobResult": {
            "type": "object",
            "required": ["kind", "pattern", "cwd", "matches", "count", "truncated", "durationMs"],
            "properties": {
                "kind": {"const": "glob"}, "pattern": string, "cwd": string,
                "matches": {"type": "array", "items": string}, "count": int, "truncated": boolean, "durationMs": int,
            },
        },
        "FileWriteRequest": {
            "type": "object",
            "required": ["path", "content", "mode"],
            "properties": {
                "path": {"type": "string", "minLength": 1}, "content": string,
                "mode": {"enum": ["create", "replace"]},
                "expectedHash": hash, "bom": boolean, "encoding": {"enum": ["utf-8", "utf8"]}, "lineEnding": ending,
            },
        },
        "FileEditRequest": {
            "type": "object",
            "required": ["path", "oldText", "newText", "expectedHash"],
            "properties": {
                "path": {"type": "string", "minLength": 1}, "oldText": {"type": "string", "minLength": 1},
                "newText": string, "expectedHash": hash,
            },
        },
        "FileWritten": {
            "type": "object",
            "description": "qwen serve's DaemonWorkspaceFileWriteResult (`kind: file_write`, with `mode` and `created`) or DaemonWorkspaceFileEditResult (`kind: file_edit`, with `replacements`)",
            "required": ["kind", "path", "sizeBytes", "hash", "encoding", "bom", "lineEnding", "matchedIgnore"],
            "properties": {
                "kind": {"enum": ["file_write", "file_edit"]}, "path": string, "mode": {"enum": ["create", "replace"]},
                "created": boolean, "replacements": {"const": 1}, "sizeBytes": int, "hash": hash,
                "encoding": {"const": "utf-8"}, "bom": boolean, "lineEnding": ending, "matchedIgnore": ignore,
            },
        },
    })
}

/// A question's parts (`docs/protocol.md#19-questions`; apart, for the macro's recursion).
fn question_schemas() -> Value {
    json!({
        "Answers": {
            "type": "object",
            "description": "A question's answers (docs/protocol.md#19-questions), by field key (`question.fields[].key`, or its index): text, a number, a boolean, or a list of choices; strings are converted to the field's type. Only a vote that accepts a question (an `allow*` option) carries them; a wrong one is `400 invalid_answer`",
            "maxProperties": 32,
            "additionalProperties": {"type": ["string", "number", "integer", "boolean", "array", "null"], "items": {"type": "string"}},
        }
    })
}

/// A request as a person reads it (apart, like [`device_schemas`], for the macro's recursion).
fn presented_schemas() -> Value {
    let string = json!({"type": "string"});
    json!({
        "PresentedRequest": {
            "type": "object",
            "description": "A pending request as a person reads it (src/present.rs): every text already revealed (nothing in it is a control, bidi or invisible character), bounded as a card unless `?all=1`",
            "required": ["requestId", "sessionId", "kind", "title", "tool", "sections", "options", "whole", "warning"],
            "properties": {
                "requestId": string, "sessionId": string, "kind": string, "title": string,
                "tool": {"type": ["string", "null"], "description": "The agent's own name for the tool"},
                "sections": {"type": "array", "items": {"$ref": "#/components/schemas/PresentedSection"}},
                "options": {"type": "array", "items": {
                    "type": "object",
                    "required": ["optionId", "shownId", "name", "kind", "sections", "meaning", "whole"],
                    "properties": {
                        "optionId": {"type": "string", "description": "As the agent sent it: the id a vote sends back"},
                        "shownId": string, "name": string, "kind": string,
                        "sections": {"type": "array", "items": {"$ref": "#/components/schemas/PresentedSection"}},
                        "meaning": {"type": ["string", "null"], "description": "What choosing it does, for the four known kinds"},
                        "whole": {"type": "boolean"},
                    },
                }},
                "whole": {"type": "boolean", "description": "Nothing was left out: no line, no character"},
                "warning": {"type": ["string", "null"], "description": "What to read first: for a request whose locations lie outside the session's workspace, that it will be refused whatever is answered (docs/protocol.md 8.5)"},
            },
        },
        "PresentedSection": {
            "type": "object",
            "required": ["heading", "lines", "omittedLines"],
            "properties": {
                "heading": string,
                "lines": {"type": "array", "items": {
                    "type": "object",
                    "required": ["tone", "text", "cutChars"],
                    "properties": {
                        "tone": {"enum": ["plain", "added", "removed", "hunk", "note"]},
                        "text": string,
                        "cutChars": {"type": "integer", "minimum": 0, "description": "Characters of the line left out"},
                    },
                }},
                "omittedLines": {"type": "integer", "minimum": 0, "description": "Lines of the section left out"},
            },
        }
    })
}

/// The `devices` tag's schemas (apart: one `json!` of every schema exceeds the macro's recursion
/// limit).
fn device_schemas() -> Value {
    let string = json!({"type": "string"});
    let int = json!({"type": "integer", "minimum": 0});
    json!({
        "PairingRequest": {
            "type": "object",
            "properties": {
                "name": {"type": ["string", "null"], "minLength": 1, "maxLength": 64, "description": "The device's name (wins over the one it gives itself)"},
                "role": {"enum": ["voter", "observer", null], "description": "Default voter"},
            },
        },
        "Pairing": {
            "type": "object",
            "required": ["code", "url", "expiresAt", "role"],
            "properties": {
                "code": {"type": "string", "pattern": "^[0-9a-f]{32}$", "description": "128 random bits, single use"},
                "url": {"type": "string", "description": "`<public-url>/#pair=<code>`: the web app exchanges the code"},
                "expiresAt": int, "role": {"enum": ["voter", "observer"]},
                "qrSvg": {"type": ["string", "null"], "description": "`url` as a QR code, an SVG document"},
            },
        },
        "PairRequest": {
            "type": "object",
            "required": ["code"],
            "properties": {
                "code": string, "name": {"type": ["string", "null"], "minLength": 1, "maxLength": 64},
                "cookieOnly": {"type": "boolean", "description": "Ignored: the credential is never a cookie (cookies ignore ports, docs/operations.md#the-browsers-credential)"},
            },
        },
        "Paired": {
            "type": "object",
            "required": ["deviceId", "token", "role", "name"],
            "properties": {
                "deviceId": string,
                "token": {"type": "string", "description": "The device credential `<deviceId>.<secret>`, shown once: send it as `Authorization: Bearer` (browsers keep it in the daemon's origin's storage; it is never a cookie)"},
                "role": {"enum": ["voter", "observer"]}, "name": string,
            },
        },
        "DeviceList": {
            "type": "object",
            "required": ["devices"],
            "properties": {"devices": {"type": "array", "items": {
                "type": "object",
                "required": ["deviceId", "name", "role", "createdAt"],
                "properties": {
                    "deviceId": string, "name": string, "role": {"enum": ["voter", "observer"]},
                    "createdAt": int, "lastSeenAt": {"type": ["integer", "null"]},
                },
            }}},
        },
    })
}

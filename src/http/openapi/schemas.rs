//! The document's component schemas: every body an operation takes or answers, by name, as
//! JSON Schema (2020-12, OpenAPI 3.1's dialect). Each group is a function of its own, merged into
//! one map: the `json!` macro's recursion limit holds one group, not all of them.

use serde_json::{Value, json};

use super::ApiError;

pub(super) fn schemas() -> Value {
    let string = json!({"type": "string"});
    let int = json!({"type": "integer", "minimum": 0});
    let boolean = json!({"type": "boolean"});
    let object = json!({"type": "object"});
    let person = json!({"type": "object", "required": ["subject", "name"], "description": "The person a signed-in device belongs to, as their OpenID provider said (docs/people.md)", "properties": {"subject": string, "name": string, "email": string, "groups": {"type": "array", "items": string}}});
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
                        "deviceId": string, "name": string, "role": {"enum": ["voter", "observer", "operator"]},
                        "person": person, "clientId": string, "expiresAt": {"type": ["integer", "null"]},
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
                "effect": {"enum": ["allow", "deny", "require"]},
                "quorum": {
                    "type": "integer", "minimum": 1, "maximum": 16,
                    "description": "`require` only, and required there unless `group` is given (then 1 if omitted): how many distinct voters must approve (docs/protocol.md 7.6)",
                },
                "group": {
                    "type": "string", "minLength": 1, "maxLength": 256,
                    "description": "`require` only: only approvals of people in this group (their OpenID provider's `groups` claim) count towards the quorum; no control characters (docs/protocol.md 7.6)",
                },
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
    if let (Some(all), Value::Object(reviewers)) = (schemas.as_object_mut(), reviewer_schemas()) {
        all.extend(reviewers);
    }
    schemas
}

/// `GET /reviewers` (docs/protocol.md §8.6; apart, like [`device_schemas`], for the macro's recursion).
fn reviewer_schemas() -> Value {
    let int = json!({"type": "integer", "minimum": 0});
    json!({
        "ReviewerList": {
            "type": "object",
            "required": ["reviewers"],
            "properties": {"reviewers": {"type": "array", "items": {
                "type": "object",
                "required": ["name", "workspace", "decides", "allowed", "denied", "escalated", "failures", "overruled", "restarts", "answered", "meanMs"],
                "description": "A configured reviewer and its figures since the daemon started: the counters of GET /metrics",
                "properties": {
                    "name": {"type": "string", "description": "Its ballots are cast as reviewer:<name>"},
                    "workspace": {"type": ["string", "null"], "description": "The one workspace it serves; null: every workspace"},
                    "decides": {"type": "array", "items": {"type": "string"}, "description": "The tool kinds its allow/deny decides; on every other kind it informs"},
                    "allowed": int, "denied": int,
                    "escalated": {"type": "integer", "minimum": 0, "description": "Escalates, failures included"},
                    "failures": {
                        "type": "object",
                        "required": ["timeout", "crash", "garbage", "unavailable"],
                        "properties": {"timeout": int, "crash": int, "garbage": int, "unavailable": int},
                        "description": "Failures by reason, each also an escalate",
                    },
                    "overruled": {"type": "integer", "minimum": 0, "description": "Allow or deny verdicts a person then decided the other way"},
                    "restarts": {"type": "integer", "minimum": 0, "description": "Times its program was killed for hanging (no verdict to 3 requests in a row) and started again"},
                    "answered": {"type": "integer", "minimum": 0, "description": "Verdicts and failures timed (a request decided before its reviewer answered is not)"},
                    "meanMs": {"type": ["number", "null"], "description": "Their mean time from the request sent to the verdict or failure; null before the first"},
                },
            }}},
        },
    })
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
    let person = json!({"type": "object", "required": ["subject", "name"], "description": "The person a signed-in device belongs to, as their OpenID provider said (docs/people.md)", "properties": {"subject": string, "name": string, "email": string, "groups": {"type": "array", "items": string}}});
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
                "role": {"enum": ["voter", "observer", "operator"]}, "name": string,
                "person": person, "clientId": {"type": "string", "description": "A person's device acts as its person's client id, `person:<subject>`"},
                "expiresAt": {"type": ["integer", "null"], "description": "A sign-in ends then unless its provider renews it"},
            },
        },
        "SignInOffered": {
            "type": "object",
            "required": ["signIn"],
            "properties": {"signIn": {
                "type": ["object", "null"],
                "description": "`null` when this daemon has no OpenID provider (`--oidc-issuer`)",
                "properties": {"issuer": string, "login": {"type": "string", "description": "The web app's link to begin a sign-in, relative to the daemon's root"}},
            }},
        },
        "DeviceSignIn": {
            "type": "object",
            "required": ["login", "userCode", "verificationUri", "expiresIn"],
            "properties": {
                "login": {"type": "string", "description": "The terminal's secret handle on its sign-in (256 random bits in hex), for `POST /auth/device/token`; show it to nobody"},
                "userCode": {"type": "string", "description": "What the person types at `verificationUri`"},
                "verificationUri": string,
                "verificationUriComplete": {"type": "string", "description": "The same page with the code filled in, when the provider offers it"},
                "expiresIn": {"type": "integer", "description": "Seconds until the code expires"},
            },
        },
        "DeviceSignInPoll": {
            "type": "object",
            "required": ["login"],
            "properties": {
                "login": {"type": "string", "minLength": 1, "maxLength": 128},
                "name": {"type": ["string", "null"], "minLength": 1, "maxLength": 64, "description": "What the terminal is called in the list of devices [default: \"terminal sign-in\"]"},
            },
        },
        "DeviceSignedIn": {
            "type": "object",
            "required": ["code", "name", "role"],
            "properties": {
                "code": {"type": "string", "description": "One-time, for `POST /devices/pair`: a device of the person's"},
                "name": {"type": "string", "description": "The person's name, as their provider gives it"},
                "role": {"enum": ["voter", "observer", "operator"]},
            },
        },
        "DeviceSignInPending": {
            "type": "object",
            "required": ["status"],
            "properties": {"status": {"const": "pending"}},
        },
        "DeviceList": {
            "type": "object",
            "required": ["devices"],
            "properties": {"devices": {"type": "array", "items": {
                "type": "object",
                "required": ["deviceId", "name", "role", "createdAt"],
                "properties": {
                    "deviceId": string, "name": string, "role": {"enum": ["voter", "observer", "operator"]},
                    "createdAt": int, "lastSeenAt": {"type": ["integer", "null"]},
                    "person": person, "clientId": string, "expiresAt": {"type": ["integer", "null"]},
                },
            }}},
        },
    })
}

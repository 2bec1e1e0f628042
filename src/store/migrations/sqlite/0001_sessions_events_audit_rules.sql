-- Sessions and their events, the audit trail, workspace rules.
CREATE TABLE sessions(
    session_id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    agent TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    ended_at INTEGER,
    state TEXT NOT NULL,
    end_reason TEXT,
    last_event_id INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_workspace ON sessions(workspace, created_at);
CREATE INDEX sessions_live ON sessions(state) WHERE state = 'live';
-- A gap marker is a row with no frame: ids id..=gap_to were streamed but not recorded.
CREATE TABLE events(
    session_id TEXT NOT NULL,
    id INTEGER NOT NULL,
    frame BLOB,
    gap_to INTEGER,
    PRIMARY KEY(session_id, id)
) WITHOUT ROWID;
-- seq orders the audit (newest first) and is the paging cursor.
CREATE TABLE audit(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL,
    workspace TEXT NOT NULL,
    requested_at INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    entry TEXT NOT NULL
);
CREATE INDEX audit_requested ON audit(requested_at);
CREATE INDEX audit_pending ON audit(outcome) WHERE outcome = 'pending';
CREATE TABLE workspace_rules(
    workspace TEXT NOT NULL,
    rule_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    rule TEXT NOT NULL,
    PRIMARY KEY(workspace, rule_id)
);

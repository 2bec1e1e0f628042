-- Sessions and their events, the audit trail, workspace rules.
CREATE TABLE sessions(
    session_id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    agent TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    ended_at BIGINT,
    state TEXT NOT NULL,
    end_reason TEXT,
    last_event_id BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX sessions_workspace ON sessions(workspace, created_at);
CREATE INDEX sessions_live ON sessions(state) WHERE state = 'live';
CREATE TABLE events(
    session_id TEXT NOT NULL,
    id BIGINT NOT NULL,
    frame BYTEA,
    gap_to BIGINT,
    PRIMARY KEY(session_id, id)
);
CREATE TABLE audit(
    seq BIGSERIAL PRIMARY KEY,
    request_id TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL,
    workspace TEXT NOT NULL,
    requested_at BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    entry TEXT NOT NULL
);
CREATE INDEX audit_requested ON audit(requested_at);
CREATE INDEX audit_session ON audit(session_id, seq);
CREATE INDEX audit_pending ON audit(outcome) WHERE outcome = 'pending';
CREATE TABLE workspace_rules(
    workspace TEXT NOT NULL,
    rule_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    seq BIGSERIAL,
    rule TEXT NOT NULL,
    PRIMARY KEY(workspace, rule_id)
);

-- Paired devices (docs/operations.md#devices): the secret only as its SHA-256; a revoked
-- device keeps its row (what the audit's device ids refer to) and is never loaded again.
CREATE TABLE devices(
    device_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    secret_hash BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    last_seen_at INTEGER,
    revoked_at INTEGER
);

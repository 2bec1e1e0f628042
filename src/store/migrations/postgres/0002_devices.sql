-- Paired devices, the secret only as its SHA-256.
CREATE TABLE devices(
    device_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    secret_hash BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    last_seen_at BIGINT,
    revoked_at BIGINT
);

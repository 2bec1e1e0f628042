-- Pairing codes waiting to be used (by their SHA-256), so a daemon learns of one from the
-- row its issuer committed, never from a notice.
CREATE TABLE pairing_codes(
    digest BYTEA PRIMARY KEY,
    name TEXT,
    role TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);

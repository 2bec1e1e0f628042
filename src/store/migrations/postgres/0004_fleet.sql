-- The fleet: who holds each live session, each daemon's lease, the pairing codes used,
-- the secret the daemons prove themselves to each other with.
ALTER TABLE sessions ADD COLUMN owner TEXT;
CREATE TABLE nodes(
    node_url TEXT PRIMARY KEY,
    lease_until BIGINT NOT NULL,
    started_at BIGINT NOT NULL
);
CREATE TABLE pairing_claims(digest BYTEA PRIMARY KEY, claimed_at BIGINT NOT NULL);
CREATE TABLE fleet_secret(id INTEGER PRIMARY KEY CHECK (id = 1), secret BYTEA NOT NULL);

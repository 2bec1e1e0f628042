-- The fleet's tables (`store/postgres/`), kept here too so one version number means one schema
-- in both databases; a daemon alone on SQLite leaves them empty.
ALTER TABLE sessions ADD COLUMN owner TEXT;
CREATE TABLE nodes(node_url TEXT PRIMARY KEY, lease_until INTEGER NOT NULL, started_at INTEGER NOT NULL);
CREATE TABLE pairing_claims(digest BLOB PRIMARY KEY, claimed_at INTEGER NOT NULL);
CREATE TABLE fleet_secret(id INTEGER PRIMARY KEY CHECK (id = 1), secret BLOB NOT NULL);

-- The fleet's pairing codes waiting to be used, by their SHA-256 (`store/postgres/`); unused
-- by a daemon alone, whose codes live in memory.
CREATE TABLE pairing_codes(
    digest BLOB PRIMARY KEY,
    name TEXT,
    role TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);

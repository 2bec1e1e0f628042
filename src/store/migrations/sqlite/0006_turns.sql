-- Each turn's change set and each rewind (src/changes/), with the snapshots they name,
-- which the snapshot store keeps while a row names them; gone with their session.
CREATE TABLE turns(
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    workspace TEXT NOT NULL,
    recorded_at INTEGER NOT NULL,
    before_id TEXT,
    after_id TEXT,
    entry TEXT NOT NULL,
    PRIMARY KEY(session_id, seq)
);

-- Each turn's change set and each rewind (src/changes/), with the snapshots they name.
CREATE TABLE turns(
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    workspace TEXT NOT NULL,
    recorded_at BIGINT NOT NULL,
    before_id TEXT,
    after_id TEXT,
    entry TEXT NOT NULL,
    PRIMARY KEY(session_id, seq)
);

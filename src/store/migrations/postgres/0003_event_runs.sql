-- Events as runs (`chunk.rs`), one row per run of consecutive events.
CREATE TABLE event_runs(
    session_id TEXT NOT NULL,
    first_id BIGINT NOT NULL,
    last_id BIGINT NOT NULL,
    frames BYTEA,
    sizes BYTEA,
    codec SMALLINT NOT NULL DEFAULT 0,
    PRIMARY KEY(session_id, last_id)
);
INSERT INTO event_runs(session_id, first_id, last_id, frames, sizes)
    SELECT session_id, id, COALESCE(gap_to, id), frame, NULL FROM events;
DROP TABLE events;
ALTER TABLE event_runs RENAME TO events;

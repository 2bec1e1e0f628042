-- Events as runs (`chunk.rs`): one row per run of consecutive events, in a rowid table,
-- LZ4-compressed when that is smaller.
-- Version 1 kept a row per event, `WITHOUT ROWID` with the frame inline: SQLite's cost per
-- row dominated the writer, and a 1 KB frame, past what a `WITHOUT ROWID` row keeps on its
-- page, spilled into an overflow page of its own (4.4x the frames' bytes on disk). Each
-- earlier row becomes a run of one (or stays a gap marker: no frames).
CREATE TABLE event_runs(
    session_id TEXT NOT NULL,
    first_id INTEGER NOT NULL,
    last_id INTEGER NOT NULL,
    -- NULL: a gap marker, ids first_id..=last_id were streamed but not recorded.
    frames BLOB,
    -- Each frame's length (u32, little-endian); NULL for a run of one frame.
    sizes BLOB,
    -- How frames is kept: 0 as it is, 1 LZ4 (chunk.rs).
    codec INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(session_id, last_id)
);
INSERT INTO event_runs(session_id, first_id, last_id, frames, sizes)
    SELECT session_id, id, COALESCE(gap_to, id), frame, NULL FROM events;
DROP TABLE events;
ALTER TABLE event_runs RENAME TO events;

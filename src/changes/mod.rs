//! What a session changed in its workspace: snapshots of the workspace's files, the change set
//! between two of them, line diffs, the workspace's diff against its git `HEAD`, the file routes,
//! rewinds, and which changes no approved permission request covered.
//!
//! - `engine`: [`Changes`], the snapshot engine of a daemon (its store, each workspace's stat
//!   cache), what a change set is, and diffs between snapshots.
//! - `scan`: the walk that takes a snapshot, reading only what changed (a stat cache like git's).
//! - `manifest`: a snapshot's content (path → kind, size, SHA-256), content-addressed.
//! - `objects`: the store on disk under the state directory: contents and manifests.
//! - `diff`: line counts and hunks (`similar`).
//! - `git`: the workspace against its `HEAD`, read from git's object store only.
//! - `files`: qwen serve's file routes (`/file`, `/stat`, `/list`, `/glob`, `/file/write`, …).
//! - `rewind`: files put back as a snapshot had them, unless someone changed them since.
//! - `approve`: which changed paths an approved permission request names.
//!
//! The engine: content-addressed blobs of its own with a stat cache, not gitoxide and not the
//! `git` binary with a private `GIT_DIR` (docs/architecture.md § Changes says why, with figures).
//! A snapshot never writes in the workspace or in its `.git`. Blocking: callers run it on a
//! blocking thread, never on the agent's reader or the runtime.

mod approve;
pub mod calls;
pub mod diff;
mod engine;
pub mod files;
pub mod git;
mod manifest;
mod objects;
mod rewind;
mod scan;

pub use self::approve::{Approval, covered};
pub use self::diff::{Hunk, LineStats};
pub use self::engine::{
    COLLECT_GRACE, ChangeSet, Changes, FileChange, LIMITS, MAX_DEPTH, MAX_FILE_BYTES, MAX_LISTED_FILES,
    MAX_SNAPSHOT_FILES, Snapshot, Status, differing,
};
pub use self::files::{FileError, Files};
pub use self::git::{WorkspaceDiff, WorkspaceFile};
pub use self::manifest::{Digest, Entry, Kind, Manifest};
pub use self::objects::Collected;
pub use self::rewind::{Restore, RewindError, Rewound};
pub use self::scan::{Limits, ScanError, ScanStats};

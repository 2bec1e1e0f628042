//! Putting files back as a snapshot had them: what a rewind writes, through [`crate::confine`]
//! (never out of the workspace, never through a symlink), after checking that nobody changed them
//! since the agent did.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::engine::{Changes, Snapshot};
use super::manifest::{Entry, Kind};
use super::scan::ScanError;
use crate::confine::{self, WriteMode};

/// What one path of a rewind should become, and what the agent left there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restore {
    /// The file as it was before the turn (`None`: it did not exist).
    pub target: Option<Entry>,
    /// The file as the last turn (or rewind) that changed it left it: anything else there now was
    /// changed by someone since.
    pub expected: Option<Entry>,
}

/// A rewind's outcome.
#[derive(Debug, Clone)]
pub struct Rewound {
    /// Paths written or removed.
    pub changed: Vec<String>,
    /// Paths that could not be put back, each with why.
    pub failed: Vec<(String, String)>,
    /// The workspace before and after (snapshots: the rewind's own record).
    pub before: Snapshot,
    pub after: Option<Snapshot>,
}

/// Why a rewind changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    /// These files differ from what the agent left: someone changed them since (`force` overrides).
    #[error("files were changed since the agent changed them: {}", .0.join(", "))]
    Conflict(Vec<String>),
    #[error(transparent)]
    Snapshot(#[from] ScanError),
}

impl Changes {
    /// Puts each path of `plan` back as its `target`. Refused, changing nothing, when a path is not
    /// as `expected` and `force` is off. Blocking.
    pub fn rewind(
        &self,
        workspace: &Path,
        plan: &BTreeMap<String, Restore>,
        force: bool,
    ) -> Result<Rewound, RewindError> {
        let before = self.snapshot(workspace)?;
        let now = |p: &str| before.manifest.entries.get(p).copied();
        let conflicts: Vec<String> =
            plan.iter().filter(|(p, r)| now(p) != r.expected).map(|(p, _)| p.clone()).collect();
        if !force && !conflicts.is_empty() {
            return Err(RewindError::Conflict(conflicts));
        }
        let mut changed = Vec::new();
        let mut failed = Vec::new();
        for (path, restore) in plan {
            if now(path) == restore.target {
                continue;
            }
            match self.restore(workspace, path, restore.target) {
                Ok(()) => changed.push(path.clone()),
                Err(why) => failed.push((path.clone(), why)),
            }
        }
        // The rewind's own record; a failure here leaves the files as they are (and said above).
        let after = self.snapshot(workspace).ok();
        Ok(Rewound { changed, failed, before, after })
    }

    /// Makes `path` what `target` says, or removes it.
    fn restore(&self, workspace: &Path, path: &str, target: Option<Entry>) -> Result<(), String> {
        let absolute = workspace.join(path);
        let refused = |why: confine::Refusal| why.to_string();
        let Some(entry) = target else {
            return match confine::remove_file(workspace, &absolute) {
                Ok(()) | Err(confine::Refusal::NotFound) => Ok(()),
                Err(why) => Err(refused(why)),
            };
        };
        if entry.kind == Kind::Oversized {
            return Err("its content was over the snapshot's size bound and was not kept".into());
        }
        let content =
            self.content(&entry).map_err(|e| format!("its content is not in the snapshot store: {e}"))?;
        if entry.kind == Kind::Symlink {
            return confine::write_symlink(workspace, &absolute, std::ffi::OsStr::from_bytes(&content))
                .map_err(refused);
        }
        // A symlink there now is replaced, not written through: the file was a file.
        if confine::stat(workspace, &absolute).is_ok_and(|s| s.kind == confine::EntryKind::Symlink) {
            confine::remove_file(workspace, &absolute).map_err(refused)?;
        }
        confine::write_file(workspace, &absolute, &content, WriteMode::Replace).map_err(refused)?;
        let file = confine::open_file(workspace, &absolute).map_err(refused)?;
        let mode = file.metadata().map_err(|e| e.to_string())?.permissions().mode();
        let wanted =
            if entry.kind == Kind::Executable { mode | ((mode & 0o444) >> 2) } else { mode & !0o111 };
        if wanted != mode {
            file.set_permissions(std::fs::Permissions::from_mode(wanted & 0o777))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

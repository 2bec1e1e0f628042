//! Lexical path arithmetic shared by the two places that judge the agent's paths: rule matching
//! ([`crate::permission`]) and the `fs/*` confinement ([`crate::agent`]). They must fold `..` the
//! same way, so neither owns it: a leaf that imports nothing.

use std::path::{Component, Path, PathBuf};

/// Folds `.` and `..` without touching the disk (at the root `..` stays at the root, as in the
/// kernel).
pub fn normalize_lexically(path: &Path) -> PathBuf {
    let mut normalized = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                normalized.pop();
            }
            other => normalized.push(other),
        }
    }
    normalized
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn dots_fold_and_the_root_absorbs_extra_parents() {
        let cases =
            [("/ws/./a/../b", "/ws/b"), ("/ws/../../etc", "/etc"), ("/a/b/./c/", "/a/b/c"), ("/..", "/")];
        for (input, expected) in cases {
            assert_eq!(super::normalize_lexically(Path::new(input)), Path::new(expected), "{input}");
        }
    }
}

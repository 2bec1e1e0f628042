//! A workspace and a state directory that outlive the daemons of one test: for the suites whose
//! daemons stop and start again on the same durable state (`store.rs`, `state_dir.rs`, `acp.rs`).

use std::path::PathBuf;

use super::{Daemon, WAIT};

/// A workspace and a state directory that outlive the daemons of one test.
pub(crate) struct Home {
    _dir: tempfile::TempDir,
    pub(crate) workspace: PathBuf,
    pub(crate) state: PathBuf,
    xdg: PathBuf,
}

impl Home {
    pub(crate) fn new() -> Home {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        let workspace = root.join("ws");
        std::fs::create_dir(&workspace).expect("workspace");
        Home { workspace, state: root.join("state"), xdg: root.join("xdg"), _dir: dir }
    }

    /// A daemon on this home's state directory, plus `args`.
    pub(crate) fn start(&self, args: &[&str]) -> Daemon {
        let mut full = vec!["--state-dir", self.state.to_str().expect("utf-8")];
        full.extend(args);
        let xdg = self.xdg.to_str().expect("utf-8");
        Daemon::start_with(&self.workspace, &full, &[("XDG_STATE_HOME", xdg), ("HOME", xdg)])
    }

    pub(crate) fn cwd(&self) -> String {
        self.workspace.to_string_lossy().into_owned()
    }

    /// `/workspace/<cwd>/<rest>` with the cwd URL-encoded.
    pub(crate) fn workspace_path(&self, rest: &str) -> String {
        format!("/workspace/{}/{rest}", self.cwd().replace('/', "%2F"))
    }
}

/// SIGTERM, and the exit it causes (the drain records every session as dormant).
pub(crate) fn stop(mut d: Daemon) {
    d.signal(rustix::process::Signal::TERM);
    let status = d.wait_exit(WAIT);
    assert!(status.success(), "daemon exit: {status:?}\n{}", d.stderr());
}

//! The state database the reading commands (`audit`, `transcript`, `backup`) open.

use std::process::ExitCode;

use mediatord::text;

use super::say;

/// The state database a reading command (`audit`, `transcript`) opens, read-only: `--state-db
/// FILE`; else `--state-dir` (its `state.db`, or, when it names a file, that file: a backup given
/// where the directory was expected); else the default state directory's. On failure it has said
/// why on stderr, as `command`'s, and the exit status is 2.
pub(super) fn read_database(
    dir: Option<&std::path::Path>,
    file: Option<&std::path::Path>,
    command: &str,
) -> Result<mediatord::store::ReadOnly, ExitCode> {
    let fail = |e: String| {
        say(&format!("mediatord {command}: {}", text::escape(&e)));
        ExitCode::from(2)
    };
    let file = file.or(dir.filter(|d| d.is_file()));
    let opened = match file {
        Some(file) => mediatord::store::open_read_only_file(file),
        None => {
            let dir = state_dir_of(dir, command).ok_or(ExitCode::from(2))?;
            if !mediatord::store::db_path(&dir).exists() {
                return Err(fail(format!(
                    "no state database in {} (has the daemon run with this --state-dir? A backup file: --state-db FILE)",
                    dir.display()
                )));
            }
            mediatord::store::open_read_only(&dir)
        }
    };
    opened.map_err(|e| fail(e.to_string()))
}

/// The state directory a command reads: `--state-dir`, else the default; `None` (said on stderr,
/// as `command`'s) when there is neither.
pub(super) fn state_dir_of(arg: Option<&std::path::Path>, command: &str) -> Option<std::path::PathBuf> {
    let dir = arg.map(std::path::Path::to_path_buf).or_else(mediatord::config::env_state_dir);
    if dir.is_none() {
        say(&format!(
            "mediatord {command}: no state directory: pass --state-dir, or set XDG_STATE_HOME or HOME"
        ));
    }
    dir
}

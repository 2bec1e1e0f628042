//! `mediatord service install --user`: the systemd user unit, for a binary installed anywhere
//! (`cargo install` puts it in `~/.cargo/bin`).
//!
//! The unit is the one the Debian package ships as `/usr/lib/systemd/user/mediatord.service`
//! (`packaging/systemd/user/mediatord.service`, compiled in), with only `ExecStart=` changed to
//! name the binary that runs this command. Beside it go the two files the unit reads, created only
//! when missing and never overwritten: the settings (`mediatord.json`: the agent and the
//! workspaces) and the environment file (`env`, mode 0600: the token and the agent's credentials,
//! all commented out, from `packaging/env` like the package's `/etc/mediatord/env`).
//!
//! Nothing here talks to systemd: the command prints the `systemctl --user` line to run, after
//! checking that a user manager is there to take it ([`user_manager`]); where none is (no login
//! session: `su`, a container, WSL without systemd), it prints the `serve --config …` line that
//! runs the same daemon by hand instead.

use std::fmt;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The user unit as shipped, naming the package's binary.
pub const USER_UNIT: &str = include_str!("../packaging/systemd/user/mediatord.service");
/// The environment file's template (also the package's `/etc/mediatord/env`).
pub const ENV_TEMPLATE: &str = include_str!("../packaging/env");
/// The start of the shipped unit's `ExecStart=` line; what follows it is kept.
const SHIPPED_EXEC: &str = "ExecStart=/usr/bin/mediatord ";
/// The agent a new settings file names: the daemon's own default, written out so it can be edited.
const DEFAULT_AGENT: &str = "qwen --acp";
/// The line that starts the service, printed last.
pub const START_LINE: &str = "systemctl --user daemon-reload && systemctl --user enable --now mediatord";
/// Where `systemctl --user` reaches the user's systemd, under `$XDG_RUNTIME_DIR`: the manager's
/// private socket, which it creates whenever it runs (systemctl tries it before the user bus).
const MANAGER_SOCKET: &str = "systemd/private";

/// Whether the user's systemd is there for `systemctl --user` to talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserManager {
    Running,
    /// Not reachable, and why (in words, naming what was looked at).
    Missing(String),
}

/// Looks for the user's systemd as `systemctl --user` does: a connection to the private socket in
/// `xdg_runtime_dir` (the session's `$XDG_RUNTIME_DIR`). Without one, systemctl says only "Failed
/// to connect to bus".
pub fn user_manager(xdg_runtime_dir: Option<&str>) -> UserManager {
    let Some(dir) = xdg_runtime_dir.filter(|d| d.starts_with('/')) else {
        return UserManager::Missing(
            "XDG_RUNTIME_DIR is not set (no login session: su or sudo without a login, a container, \
             a service)"
                .to_owned(),
        );
    };
    let socket = Path::new(dir).join(MANAGER_SOCKET);
    match std::os::unix::net::UnixStream::connect(&socket) {
        Ok(_) => UserManager::Running,
        Err(e) => UserManager::Missing(format!("nothing answers at {}: {e}", shown(&socket))),
    }
}

/// `mediatord service`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ServiceArgs {
    #[command(subcommand)]
    pub action: ServiceAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum ServiceAction {
    /// Write the systemd user unit naming this binary, and the settings and environment files it
    /// reads when they are missing; print the `systemctl --user` line that starts it
    Install(InstallArgs),
}

#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// The user's own service (~/.config/systemd/user/mediatord.service). The system service comes
    /// with the Debian package (docs/operations.md)
    #[arg(long, required = true)]
    pub user: bool,
    /// A workspace the new settings file lists (existing; repeatable, the first is the primary)
    /// [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub workspace: Vec<PathBuf>,
    /// Replace a unit file that differs from the one this version writes
    #[arg(long)]
    pub force: bool,
}

/// Where the user's files go, from `XDG_CONFIG_HOME` (when absolute, as XDG requires) or `HOME`:
/// the places the user's systemd reads (`%E` in the unit is the same directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserPaths {
    /// `<config>/systemd/user/mediatord.service`
    pub unit: PathBuf,
    /// `<config>/mediatord/mediatord.json`
    pub settings: PathBuf,
    /// `<config>/mediatord/env`
    pub env: PathBuf,
}

impl UserPaths {
    pub fn new(xdg_config_home: Option<&str>, home: Option<&str>) -> Option<UserPaths> {
        let config = match xdg_config_home.filter(|x| x.starts_with('/')) {
            Some(x) => PathBuf::from(x),
            None => Path::new(home.filter(|h| h.starts_with('/'))?).join(".config"),
        };
        Some(UserPaths {
            unit: config.join("systemd/user/mediatord.service"),
            settings: config.join("mediatord/mediatord.json"),
            env: config.join("mediatord/env"),
        })
    }
}

/// Why the unit could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("no place for the unit: set HOME (or XDG_CONFIG_HOME) to an absolute path")]
    NoHome,
    #[error(
        "this binary's path {0} cannot be named in a unit (it must be absolute UTF-8 with no control characters)"
    )]
    BinaryPath(String),
    #[error("cannot tell {0}")]
    Here(String),
    #[error("workspace {path}: {reason}")]
    Workspace { path: String, reason: String },
    #[error("{path} exists and differs from the unit this version writes; --force replaces it")]
    UnitDiffers { path: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

impl ServiceError {
    /// The process's exit status: 2 for what the user asked wrongly, 1 for what went wrong.
    pub fn exit_code(&self) -> u8 {
        match self {
            ServiceError::NoHome | ServiceError::Workspace { .. } => 2,
            ServiceError::Here(_)
            | ServiceError::BinaryPath(_)
            | ServiceError::UnitDiffers { .. }
            | ServiceError::Io { .. } => 1,
        }
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ServiceError + '_ {
    move |source| ServiceError::Io { path: shown(path), source }
}

/// The shipped user unit with `ExecStart=` naming `binary`.
pub fn user_unit(binary: &Path) -> Result<String, ServiceError> {
    let exec = exec_path(binary)?;
    let mut unit = String::with_capacity(USER_UNIT.len() + exec.len());
    for line in USER_UNIT.split_inclusive('\n') {
        match line.strip_prefix(SHIPPED_EXEC) {
            Some(rest) => {
                unit.push_str("ExecStart=");
                unit.push_str(&exec);
                unit.push(' ');
                unit.push_str(rest);
            }
            None => unit.push_str(line),
        }
    }
    Ok(unit)
}

/// `path` as the first word of an `ExecStart=` line: `%` (a specifier) doubled, and the whole in
/// double quotes when it holds a space or a `;`. systemd refuses a quote or a backslash in an
/// executable's name, and expands no `$` there, so those stay as they are or are refused.
fn exec_path(path: &Path) -> Result<String, ServiceError> {
    let text = path
        .to_str()
        .filter(|t| {
            t.starts_with('/') && !t.chars().any(|c| c.is_control() || matches!(c, '"' | '\'' | '\\'))
        })
        .ok_or_else(|| ServiceError::BinaryPath(shown(path)))?;
    let escaped = text.replace('%', "%%");
    if escaped.chars().any(|c| c.is_whitespace() || c == ';') {
        Ok(format!("\"{escaped}\""))
    } else {
        Ok(escaped)
    }
}

/// A new settings file: the agent and the workspaces, everything else at its default.
pub fn settings(workspaces: &[PathBuf]) -> String {
    let workspaces: Vec<String> = workspaces.iter().map(|w| w.to_string_lossy().into_owned()).collect();
    let value = serde_json::json!({"serve": {"agent": DEFAULT_AGENT, "workspace": workspaces}});
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

/// What became of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Wrote,
    Replaced,
    Unchanged,
    /// An existing settings or environment file, left as it was.
    Kept,
}

/// What `install` did, printed as is by the command.
#[derive(Debug)]
pub struct Report {
    pub paths: UserPaths,
    pub unit: Outcome,
    pub settings: Outcome,
    pub env: Outcome,
    /// The workspaces a new settings file lists.
    pub workspaces: Vec<PathBuf>,
    /// The mode of an existing environment file that others may read.
    pub env_open_mode: Option<u32>,
    /// The binary the unit names, which the fallback line runs.
    pub binary: PathBuf,
    /// Whether `systemctl --user` can start the unit here.
    pub manager: UserManager,
}

/// [`install_user`] for this process: its environment, its binary, its current directory.
pub fn install_user_here(args: &InstallArgs) -> Result<Report, ServiceError> {
    let env = |k: &str| std::env::var(k).ok();
    let paths = UserPaths::new(env("XDG_CONFIG_HOME").as_deref(), env("HOME").as_deref())
        .ok_or(ServiceError::NoHome)?;
    let binary =
        std::env::current_exe().map_err(|e| ServiceError::Here(format!("this binary's path: {e}")))?;
    let cwd =
        std::env::current_dir().map_err(|e| ServiceError::Here(format!("the current directory: {e}")))?;
    let manager = user_manager(env("XDG_RUNTIME_DIR").as_deref());
    install_user(args, &paths, &binary, &cwd, manager)
}

/// Writes the unit and, when missing, the settings and environment files; `cwd` is the default
/// workspace and resolves relative `--workspace` paths. `manager` says which start line to print.
pub fn install_user(
    args: &InstallArgs,
    paths: &UserPaths,
    binary: &Path,
    cwd: &Path,
    manager: UserManager,
) -> Result<Report, ServiceError> {
    let unit_text = user_unit(binary)?;
    let asked: Vec<PathBuf> =
        if args.workspace.is_empty() { vec![cwd.to_path_buf()] } else { args.workspace.clone() };
    let workspaces = asked.iter().map(|w| workspace(&cwd.join(w))).collect::<Result<Vec<_>, _>>()?;

    let unit = write_unit(&paths.unit, &unit_text, args.force)?;
    let config_dir = paths.settings.parent().unwrap_or(Path::new("/"));
    make_dir(config_dir, 0o700)?;
    let settings = create_new(&paths.settings, &settings(&workspaces), 0o644)?;
    let env = create_new(&paths.env, ENV_TEMPLATE, 0o600)?;
    let env_open_mode = match env {
        Outcome::Kept => {
            let mode = std::fs::metadata(&paths.env).map_err(io_error(&paths.env))?.permissions().mode();
            (mode & 0o077 != 0).then_some(mode & 0o7777)
        }
        _ => None,
    };
    Ok(Report {
        paths: paths.clone(),
        unit,
        settings,
        env,
        workspaces,
        env_open_mode,
        binary: binary.to_path_buf(),
        manager,
    })
}

fn workspace(path: &Path) -> Result<PathBuf, ServiceError> {
    let error = |reason: String| ServiceError::Workspace { path: shown(path), reason };
    let canonical = std::fs::canonicalize(path).map_err(|e| error(format!("does not exist: {e}")))?;
    if !canonical.is_dir() {
        return Err(error("is not a directory".to_owned()));
    }
    Ok(canonical)
}

fn make_dir(dir: &Path, mode: u32) -> Result<(), ServiceError> {
    std::fs::DirBuilder::new().recursive(true).mode(mode).create(dir).map_err(io_error(dir))
}

/// Writes the unit unless the same text is there; a different one is replaced only with `force`.
/// The new text is written beside it and renamed over it, so systemd never reads half a unit.
fn write_unit(path: &Path, text: &str, force: bool) -> Result<Outcome, ServiceError> {
    let outcome = match std::fs::read(path) {
        Ok(old) if old == text.as_bytes() => return Ok(Outcome::Unchanged),
        Ok(_) if !force => return Err(ServiceError::UnitDiffers { path: shown(path) }),
        Ok(_) => Outcome::Replaced,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Outcome::Wrote,
        Err(e) => return Err(io_error(path)(e)),
    };
    make_dir(path.parent().unwrap_or(Path::new("/")), 0o755)?;
    let partial = path.with_extension("service.partial");
    // A partial file left by an interrupted run; anything else there is refused by `write_new`.
    let _ = std::fs::remove_file(&partial);
    if let Err(e) = write_new(&partial, text, 0o644)
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(io_error(&partial))
    {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    Ok(outcome)
}

/// Creates `path` with `text` and `mode` unless it exists (then `Kept`, untouched).
fn create_new(path: &Path, text: &str, mode: u32) -> Result<Outcome, ServiceError> {
    match write_new(path, text, mode) {
        Ok(()) => Ok(Outcome::Wrote),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Outcome::Kept),
        Err(e) => Err(io_error(path)(e)),
    }
}

/// Creates `path`, which must not exist, with `text` and `mode` (whatever the umask).
fn write_new(path: &Path, text: &str, mode: u32) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

/// A path for the terminal: control characters escaped, so a hostile file name cannot drive it.
fn shown(path: &Path) -> String {
    path.to_string_lossy()
        .chars()
        .flat_map(|c| if c.is_control() { c.escape_default().collect() } else { vec![c] })
        .collect()
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = |o: Outcome| match o {
            Outcome::Wrote => "wrote",
            Outcome::Replaced => "replaced",
            Outcome::Unchanged => "unchanged",
            Outcome::Kept => "kept",
        };
        writeln!(f, "{} {}", verb(self.unit), shown(&self.paths.unit))?;
        match self.settings {
            Outcome::Wrote => {
                let workspaces: Vec<String> = self.workspaces.iter().map(|w| shown(w)).collect();
                let noun = if workspaces.len() == 1 { "workspace" } else { "workspaces" };
                writeln!(
                    f,
                    "wrote {}: the agent ({DEFAULT_AGENT}) and the {noun} {}; edit it to change them",
                    shown(&self.paths.settings),
                    workspaces.join(", ")
                )?;
            }
            other => writeln!(f, "{} {}", verb(other), shown(&self.paths.settings))?,
        }
        match self.env {
            Outcome::Wrote => writeln!(
                f,
                "wrote {} (mode 0600): the token and the agent's credentials, all commented out",
                shown(&self.paths.env)
            )?,
            other => writeln!(f, "{} {}", verb(other), shown(&self.paths.env))?,
        }
        if let Some(mode) = self.env_open_mode {
            writeln!(
                f,
                "warning: {} has mode {mode:04o}: others may read the secrets in it; run chmod 600 on it",
                shown(&self.paths.env)
            )?;
        }
        match &self.manager {
            UserManager::Running => writeln!(f, "\nStart it now and at every login:\n  {START_LINE}"),
            UserManager::Missing(why) => {
                let quoted = |p: &Path| shell_words::quote(&shown(p)).into_owned();
                writeln!(
                    f,
                    "\nNo systemd user manager runs for this login, so `systemctl --user` cannot start it: {why}.\n\
                     Run the daemon with the same settings by hand instead (the env file's variables first):\n  \
                     set -a; . {}; set +a\n  \
                     {} serve --config {}\n\
                     Where a user manager runs (a desktop or ssh login; `loginctl enable-linger $USER` starts one at boot), start the service with:\n  \
                     {START_LINE}",
                    quoted(&self.paths.env),
                    quoted(&self.binary),
                    quoted(&self.paths.settings),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_unit_names_the_package_binary_once() {
        assert_eq!(USER_UNIT.lines().filter(|l| l.starts_with("ExecStart=")).count(), 1);
        assert_eq!(USER_UNIT.lines().filter(|l| l.starts_with(SHIPPED_EXEC)).count(), 1);
    }

    #[test]
    fn the_unit_names_the_binary_and_keeps_everything_else() {
        let unit = user_unit(Path::new("/home/a/.cargo/bin/mediatord")).expect("unit");
        let exec: Vec<&str> = unit.lines().filter(|l| l.starts_with("ExecStart=")).collect();
        assert_eq!(
            exec,
            ["ExecStart=/home/a/.cargo/bin/mediatord serve --config %E/mediatord/mediatord.json"]
        );
        let others = |text: &str| -> Vec<String> {
            text.lines().filter(|l| !l.starts_with("ExecStart=")).map(str::to_owned).collect()
        };
        assert_eq!(others(&unit), others(USER_UNIT));
        assert!(unit.ends_with('\n'));
    }

    #[test]
    fn binary_paths_are_escaped_for_systemd() {
        let exec = |p: &str| exec_path(Path::new(p)).map_err(|e| e.to_string());
        assert_eq!(exec("/usr/bin/mediatord"), Ok("/usr/bin/mediatord".to_owned()));
        assert_eq!(exec("/opt/100%/m"), Ok("/opt/100%%/m".to_owned()));
        assert_eq!(exec("/opt/$HOME/m"), Ok("/opt/$HOME/m".to_owned()));
        assert_eq!(exec("/opt/my tools/m"), Ok("\"/opt/my tools/m\"".to_owned()));
        assert_eq!(exec("/opt/a;b/m"), Ok("\"/opt/a;b/m\"".to_owned()));
        assert_eq!(exec("/opt/é/m"), Ok("/opt/é/m".to_owned()));
        for refused in ["relative/m", "/opt/new\nline/m", "/opt/a\"b/m", "/opt/a'b/m", "/opt/a\\b/m"] {
            assert!(exec(refused).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn user_paths_follow_xdg_then_home() {
        let paths = UserPaths::new(Some("/x/conf"), Some("/home/a")).expect("paths");
        assert_eq!(paths.unit, Path::new("/x/conf/systemd/user/mediatord.service"));
        assert_eq!(paths.settings, Path::new("/x/conf/mediatord/mediatord.json"));
        assert_eq!(paths.env, Path::new("/x/conf/mediatord/env"));
        // XDG requires an absolute path: a relative one is ignored.
        let paths = UserPaths::new(Some("conf"), Some("/home/a")).expect("paths");
        assert_eq!(paths.unit, Path::new("/home/a/.config/systemd/user/mediatord.service"));
        assert_eq!(UserPaths::new(None, Some("home")), None);
        assert_eq!(UserPaths::new(None, None), None);
    }

    #[test]
    fn new_settings_name_the_agent_and_the_workspaces() {
        let text = settings(&[PathBuf::from("/p/one"), PathBuf::from("/p/two")]);
        let value: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(
            value,
            serde_json::json!({"serve": {"agent": "qwen --acp", "workspace": ["/p/one", "/p/two"]}})
        );
    }

    #[test]
    fn a_file_that_cannot_be_made_is_an_error_not_kept() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let missing = tmp.path().join("missing/env");
        let error = create_new(&missing, "x", 0o600).expect_err("no parent directory");
        assert!(
            matches!(&error, ServiceError::Io { path, .. } if *path == missing.display().to_string()),
            "{error}"
        );
        std::fs::write(tmp.path().join("env"), "mine").expect("write");
        assert_eq!(create_new(&tmp.path().join("env"), "x", 0o600).expect("kept"), Outcome::Kept);
        assert_eq!(std::fs::read_to_string(tmp.path().join("env")).expect("read"), "mine");
    }

    #[test]
    fn a_unit_that_cannot_be_read_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        // Its directory is a file: reading the unit fails with ENOTDIR, which is not "missing".
        std::fs::write(tmp.path().join("user"), "").expect("write");
        let unit = tmp.path().join("user/mediatord.service");
        let error = write_unit(&unit, "[Unit]\n", false).expect_err("not a directory");
        assert!(
            matches!(&error, ServiceError::Io { path, .. } if *path == unit.display().to_string()),
            "{error}"
        );
    }

    #[test]
    fn a_directory_in_the_way_of_the_partial_unit_is_refused_not_renamed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let unit = tmp.path().join("mediatord.service");
        let partial = tmp.path().join("mediatord.service.partial");
        std::fs::create_dir(&partial).expect("mkdir");
        let error = write_unit(&unit, "[Unit]\n", false).expect_err("the partial path is taken");
        assert!(
            matches!(&error, ServiceError::Io { path, .. } if *path == partial.display().to_string()),
            "{error}"
        );
        assert!(!unit.exists(), "nothing was renamed onto the unit");
        assert!(partial.is_dir(), "the directory is left alone");
    }

    #[test]
    fn the_user_manager_is_found_by_its_private_socket_and_its_absence_said_in_words() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_str().expect("utf-8");
        let UserManager::Missing(why) = user_manager(Some(dir)) else { panic!("no socket yet") };
        assert!(why.starts_with(&format!("nothing answers at {dir}/systemd/private: ")), "{why}");
        for unset in [None, Some(""), Some("relative")] {
            let UserManager::Missing(why) = user_manager(unset) else { panic!("{unset:?}") };
            assert!(why.starts_with("XDG_RUNTIME_DIR is not set"), "{why}");
        }
        std::fs::create_dir(tmp.path().join("systemd")).expect("mkdir");
        let _manager = std::os::unix::net::UnixListener::bind(tmp.path().join(MANAGER_SOCKET)).expect("bind");
        assert_eq!(user_manager(Some(dir)), UserManager::Running);
    }

    #[test]
    fn control_characters_are_escaped_for_the_terminal() {
        assert_eq!(shown(Path::new("/a\u{1b}[31mb\n")), "/a\\u{1b}[31mb\\n");
    }
}

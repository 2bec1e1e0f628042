//! `mediatord service install --user` (docs/operations.md#running-under-systemd): the user unit the
//! package ships, written for this binary, with the settings and environment files beside it.
//! Every run gets a HOME, an XDG_CONFIG_HOME and an XDG_RUNTIME_DIR of its own under a temporary
//! directory, never the runner's; a user's systemd is a socket listening where `systemctl --user`
//! looks for it (`$XDG_RUNTIME_DIR/systemd/private`), or nothing there. `tests/package.rs` checks the unit it writes with `systemd-analyze verify`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::support::{Daemon, bin};

const SHIPPED_UNIT: &str = include_str!("../../packaging/systemd/user/mediatord.service");
const SHIPPED_ENV: &str = include_str!("../../packaging/env");

/// A scratch user: `home/`, `config/` (its XDG_CONFIG_HOME), `runtime/` (its XDG_RUNTIME_DIR), a
/// project directory and an empty one to run from.
struct User {
    _dir: tempfile::TempDir,
    root: PathBuf,
    /// The user's systemd, as `systemctl --user` reaches it: its private socket, listening.
    _manager: Option<std::os::unix::net::UnixListener>,
}

impl User {
    /// A user logged in with a systemd user manager.
    fn new() -> User {
        let mut user = User::without_manager();
        std::fs::create_dir(user.path("runtime/systemd")).expect("mkdir");
        user._manager =
            Some(std::os::unix::net::UnixListener::bind(user.path("runtime/systemd/private")).expect("bind"));
        user
    }

    /// A user with no systemd user manager (`su`, a container, WSL without systemd).
    fn without_manager() -> User {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        for d in ["home", "config", "runtime", "project", "elsewhere"] {
            std::fs::create_dir(root.join(d)).expect("mkdir");
        }
        User { _dir: dir, root, _manager: None }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// `mediatord service <args>` from `elsewhere/`, with `env` on top of this user's HOME and
    /// XDG_CONFIG_HOME.
    fn service(&self, args: &[&str], env: &[(&str, Option<&Path>)]) -> Output {
        let mut cmd = Command::new(bin());
        cmd.arg("service").args(args).current_dir(self.path("elsewhere"));
        cmd.env("HOME", self.path("home"))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("XDG_RUNTIME_DIR", self.path("runtime"));
        for (k, v) in env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.output().expect("run mediatord service")
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    }

    fn mode(&self, rel: &str) -> u32 {
        std::fs::metadata(self.path(rel)).expect("stat").permissions().mode() & 0o7777
    }

    /// Every file under `rel`, relative to it, sorted.
    fn files(&self, rel: &str) -> Vec<String> {
        let base = self.path(rel);
        let mut out = Vec::new();
        let mut dirs = vec![base.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("read dir") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    out.push(path.strip_prefix(&base).expect("under base").display().to_string());
                }
            }
        }
        out.sort();
        out
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The shipped unit with `ExecStart=` naming `binary`, as the command should write it.
fn expected_unit(binary: &str) -> String {
    SHIPPED_UNIT.replace("ExecStart=/usr/bin/mediatord ", &format!("ExecStart={binary} "))
}

#[test]
fn install_writes_the_unit_the_settings_and_the_env_file_and_prints_the_start_line() {
    let user = User::new();
    let project = user.path("project");
    let out = user.service(&["install", "--user", "--workspace", project.to_str().expect("utf-8")], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let c = |rel: &str| user.path("config").join(rel).display().to_string();
    assert_eq!(
        text(&out.stdout),
        format!(
            "wrote {}\n\
             wrote {}: the agent (qwen --acp) and the workspace {}; edit it to change them\n\
             wrote {} (mode 0600): the token and the agent's credentials, all commented out\n\
             \n\
             Start it now and at every login:\n  \
             systemctl --user daemon-reload && systemctl --user enable --now mediatord\n",
            c("systemd/user/mediatord.service"),
            c("mediatord/mediatord.json"),
            project.display(),
            c("mediatord/env"),
        )
    );
    assert_eq!(text(&out.stderr), "");

    let unit = user.read("config/systemd/user/mediatord.service");
    assert_eq!(unit, expected_unit(bin()));
    assert_ne!(unit, SHIPPED_UNIT, "ExecStart= names this binary, not the package's");
    let settings: Value = serde_json::from_str(&user.read("config/mediatord/mediatord.json")).expect("json");
    assert_eq!(settings, json!({"serve": {"agent": "qwen --acp", "workspace": [project]}}));
    assert_eq!(user.read("config/mediatord/env"), SHIPPED_ENV);
    assert_eq!(user.mode("config/mediatord/env"), 0o600, "the env file holds secrets");
    assert_eq!(user.mode("config/mediatord"), 0o700);
    assert_eq!(user.mode("config/systemd/user/mediatord.service"), 0o644);
    assert_eq!(
        user.files("config"),
        ["mediatord/env", "mediatord/mediatord.json", "systemd/user/mediatord.service"]
    );
    assert_eq!(user.files("home"), Vec::<String>::new(), "HOME is untouched when XDG_CONFIG_HOME is set");
    assert_eq!(user.files("elsewhere"), Vec::<String>::new());
}

/// Issue #44: without a user manager the command printed a `systemctl --user` line that fails
/// ("Failed to connect to bus"). It says there is none, and prints the lines that run the same
/// daemon by hand; the files are written all the same, for when a manager runs.
#[test]
fn without_a_user_manager_it_says_so_and_prints_the_serve_line_that_works() {
    let user = User::without_manager();
    let out = user.service(&["install", "--user"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let runtime = user.path("runtime");
    let c = |rel: &str| user.path("config").join(rel);
    let (env, settings) = (c("mediatord/env"), c("mediatord/mediatord.json"));
    let expected = format!(
        "\nNo systemd user manager runs for this login, so `systemctl --user` cannot start it: nothing answers at {}/systemd/private: No such file or directory (os error 2).\n\
         Run the daemon with the same settings by hand instead (the env file's variables first):\n  \
         set -a; . {}; set +a\n  \
         {} serve --config {}\n\
         Where a user manager runs (a desktop or ssh login; `loginctl enable-linger $USER` starts one at boot), start the service with:\n  \
         systemctl --user daemon-reload && systemctl --user enable --now mediatord\n",
        runtime.display(),
        env.display(),
        bin(),
        settings.display(),
    );
    assert!(stdout.ends_with(&expected), "{stdout}");
    assert!(!stdout.contains("Start it now"), "{stdout}");
    assert_eq!(
        user.files("config"),
        ["mediatord/env", "mediatord/mediatord.json", "systemd/user/mediatord.service"]
    );

    // The printed lines work as printed: the env file's variables reach the command that follows.
    std::fs::write(&env, "MEDIATORD_TOKEN=from-the-env-file\n").expect("edit env");
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("  ")).map(str::trim).collect();
    let [source, serve, _systemctl] = lines[..] else { panic!("three command lines: {stdout}") };
    let shell = Command::new("sh")
        .arg("-c")
        .arg(format!("{source}\nprintf %s \"$MEDIATORD_TOKEN\""))
        .output()
        .expect("sh");
    assert_eq!(text(&shell.stdout), "from-the-env-file", "{}", text(&shell.stderr));
    let words = shell_words::split(serve).expect("a shell line");
    let settings = settings.to_str().expect("utf-8");
    assert_eq!(words, [bin(), "serve", "--config", settings]);

    // XDG_RUNTIME_DIR unset: said so.
    let out = user.service(&["install", "--user"], &[("XDG_RUNTIME_DIR", None)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("cannot start it: XDG_RUNTIME_DIR is not set (no login session"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn without_xdg_config_home_the_files_go_under_home_and_the_workspace_is_the_current_directory() {
    let user = User::new();
    // XDG requires an absolute path: a relative XDG_CONFIG_HOME is ignored, like an unset one.
    for xdg in [None, Some(Path::new("relative"))] {
        let out = user.service(&["install", "--user"], &[("XDG_CONFIG_HOME", xdg)]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    assert_eq!(
        user.files("home"),
        [
            ".config/mediatord/env",
            ".config/mediatord/mediatord.json",
            ".config/systemd/user/mediatord.service"
        ]
    );
    let settings: Value =
        serde_json::from_str(&user.read("home/.config/mediatord/mediatord.json")).expect("json");
    assert_eq!(settings["serve"]["workspace"], json!([user.path("elsewhere")]));
    assert_eq!(user.files("config"), Vec::<String>::new());
}

#[test]
fn a_second_install_keeps_the_users_files_and_replaces_a_changed_unit_only_with_force() {
    let user = User::new();
    assert!(user.service(&["install", "--user"], &[]).status.success());
    let edited_settings = r#"{"serve": {"agent": "demo"}}"#;
    std::fs::write(user.path("config/mediatord/mediatord.json"), edited_settings).expect("edit");
    std::fs::write(user.path("config/mediatord/env"), "MEDIATORD_TOKEN=mine\n").expect("edit");

    let again = user.service(&["install", "--user", "--workspace", "/"], &[]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    let stdout = text(&again.stdout);
    let first: Vec<&str> = stdout.lines().take(3).map(|l| l.split(' ').next().unwrap_or("")).collect();
    assert_eq!(first, ["unchanged", "kept", "kept"], "{stdout}");
    assert!(!stdout.contains("warning"), "the env file is still 0600: {stdout}");
    assert_eq!(user.read("config/mediatord/mediatord.json"), edited_settings);
    assert_eq!(user.read("config/mediatord/env"), "MEDIATORD_TOKEN=mine\n");

    // A unit edited by hand is not overwritten silently.
    let unit = "config/systemd/user/mediatord.service";
    std::fs::write(user.path(unit), "[Service]\nExecStart=/bin/true\n").expect("edit");
    let refused = user.service(&["install", "--user"], &[]);
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(
        text(&refused.stderr),
        format!(
            "mediatord service: {} exists and differs from the unit this version writes; --force replaces it\n",
            user.path(unit).display()
        )
    );
    assert_eq!(text(&refused.stdout), "");
    assert_eq!(user.read(unit), "[Service]\nExecStart=/bin/true\n");

    let forced = user.service(&["install", "--user", "--force"], &[]);
    assert!(forced.status.success(), "{}", text(&forced.stderr));
    assert!(text(&forced.stdout).starts_with(&format!("replaced {}\n", user.path(unit).display())));
    assert_eq!(user.read(unit), expected_unit(bin()));
    assert_eq!(user.files("config/systemd/user"), ["mediatord.service"], "no partial file left behind");
}

#[test]
fn an_env_file_others_can_read_is_kept_with_a_warning() {
    let user = User::new();
    assert!(user.service(&["install", "--user"], &[]).status.success());
    let env = user.path("config/mediatord/env");
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = user.service(&["install", "--user"], &[]);
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains(&format!(
            "warning: {} has mode 0644: others may read the secrets in it; run chmod 600 on it\n",
            env.display()
        )),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(user.mode("config/mediatord/env"), 0o644, "the user's file is not changed behind their back");
}

#[test]
fn refusals_write_nothing() {
    let user = User::new();
    let missing = user.path("project/missing");
    let out = user.service(&["install", "--user", "--workspace", missing.to_str().expect("utf-8")], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .starts_with(&format!("mediatord service: workspace {}: does not exist", missing.display())),
        "{}",
        text(&out.stderr)
    );

    let out = user.service(&["install", "--user"], &[("HOME", None), ("XDG_CONFIG_HOME", None)]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "mediatord service: no place for the unit: set HOME (or XDG_CONFIG_HOME) to an absolute path\n"
    );

    // The system unit is the package's: `--user` is not implied.
    let out = user.service(&["install"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--user"), "{}", text(&out.stderr));

    assert_eq!(user.files("config"), Vec::<String>::new());
    assert_eq!(user.files("home"), Vec::<String>::new());
}

#[tokio::test]
async fn the_settings_it_writes_boot_the_daemon_on_the_chosen_workspaces() {
    let user = User::new();
    let (project, other) = (user.path("project"), user.path("home"));
    // Relative to the current directory, like `serve --workspace`.
    let out =
        user.service(&["install", "--user", "--workspace", "../project", "--workspace", "../home"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let settings = user.path("config/mediatord/mediatord.json");
    assert!(
        text(&out.stdout).contains(&format!(
            "wrote {}: the agent (qwen --acp) and the workspaces {}, {}; edit it to change them\n",
            settings.display(),
            project.display(),
            other.display()
        )),
        "{}",
        text(&out.stdout)
    );
    // As the unit runs it (`serve --config …`), with the demo agent in place of Qwen Code.
    let d = Daemon::start_in(
        &user.path("elsewhere"),
        &["--config", settings.to_str().expect("utf-8"), "--agent", "demo"],
        &[],
    );
    let caps = d.get("/capabilities").await;
    assert_eq!(caps.status, 200);
    assert_eq!(caps.body["workspaceCwd"], json!(project), "the first is the primary");
    let second = d.post("/session", Some("alice"), json!({"cwd": other})).await;
    assert_eq!(second.status, 200, "the second is a workspace too: {}", second.text);
    let outside = d.post("/session", Some("alice"), json!({"cwd": user.path("elsewhere")})).await;
    assert_eq!(outside.body["code"], "workspace_mismatch", "{}", outside.text);
}

#[test]
fn operations_md_points_at_the_shipped_units_instead_of_copying_them() {
    let doc = include_str!("../../docs/operations.md");
    for unit in [
        "packaging/systemd/mediatord.service",
        "packaging/systemd/user/mediatord.service",
        "packaging/systemd/mediatord.sysusers",
    ] {
        assert!(doc.contains(&format!("(../{unit})")), "docs/operations.md should link {unit}");
    }
    // A unit's body in the doc would be a second copy to keep in step; a drop-in's lines are fine.
    for line in doc.lines() {
        for key in ["ExecStart=", "User=", "ProtectSystem=", "StateDirectory="] {
            assert!(!line.starts_with(key), "docs/operations.md copies the unit: {line}");
        }
    }
}

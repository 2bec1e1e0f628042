//! A real terminal for the terminal client: a private tmux server (its own socket in a temporary
//! directory, no user configuration) running one command in one pane, keys sent with `send-keys`,
//! the screen read with `capture-pane`. The script around the command prints its exit status and
//! the terminal's modes, then signals `tmux wait-for`, so a test waits for the exit with tmux's
//! own mechanism; the pane then stays, its shell waiting on a channel nobody signals, until the
//! server is killed.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use super::WAIT;

/// The pane, inside its private tmux server; dropping it kills the server (and the command).
pub(crate) struct Tmux {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

/// Variables of the test's own environment the client must not see: it gets only what the test
/// gives it.
const CLEARED: [&str; 7] = [
    "MEDIATORD_TOKEN",
    "MEDIATORD_DEVICE",
    "MEDIATORD_DEVICE_FILE",
    "MEDIATORD_URL",
    "MEDIATORD_CLIENT_ID",
    "NO_COLOR",
    // HOME is the pane's own: so is the configuration (no login the user saved).
    "XDG_CONFIG_HOME",
];

fn quote(word: &str) -> String {
    shell_words::quote(word).into_owned()
}

impl Tmux {
    /// Runs `command` in a `width` × `height` pane with `env` added.
    pub(crate) fn run(command: &[&str], env: &[(&str, &str)], width: u16, height: u16) -> Tmux {
        let path = std::env::var_os("PATH").unwrap_or_default();
        assert!(
            std::env::split_paths(&path).any(|dir| dir.join("tmux").is_file()),
            "the terminal client's tests drive it in tmux, which is not on PATH: install it (Debian/Ubuntu: apt-get install tmux)"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("tmux.sock");
        let conf = dir.path().join("tmux.conf");
        // No user configuration.
        std::fs::write(&conf, "set -g allow-rename off\nset -g set-titles off\n").expect("write tmux.conf");
        let mut script =
            format!("unset {}; export HOME={}", CLEARED.join(" "), quote(&dir.path().to_string_lossy()));
        for (k, v) in env {
            script.push_str(&format!(" {k}={}", quote(v)));
        }
        let words: Vec<String> = command.iter().map(|w| quote(w)).collect();
        script.push_str(&format!(
            "; printf '\\033]2;%s\\033\\\\' test-title; {}; echo \"EXIT=$?\"; \
             for f in icanon echo icrnl opost isig; do stty -a | grep -qw -- \"-$f\" && echo \"STTY $f off\" || echo \"STTY $f on\"; done; \
             tmux wait-for -S exited; exec tmux wait-for never",
            words.join(" ")
        ));
        let t = Tmux { socket, _dir: dir };
        let out = t.tmux(&[
            "-f",
            &conf.to_string_lossy(),
            "new-session",
            "-d",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            "-s",
            "t",
            "sh",
            "-c",
            &script,
        ]);
        assert!(out.status.success(), "tmux new-session: {}", String::from_utf8_lossy(&out.stderr));
        t
    }

    /// `tmux -S <socket> args…`.
    pub(crate) fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux (is it installed?)")
    }

    /// Sends tmux key names (`Enter`, `Escape`, `a`, `C-c`).
    pub(crate) fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend(keys);
        let out = self.tmux(&args);
        assert!(out.status.success(), "send-keys {keys:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Types `text` literally.
    pub(crate) fn text(&self, text: &str) {
        let out = self.tmux(&["send-keys", "-t", "t", "-l", text]);
        assert!(out.status.success(), "send-keys -l: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// The screen as text, one line per row.
    pub(crate) fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned()
    }

    /// The screen with its colours and attributes as escape sequences (`capture-pane -e`).
    pub(crate) fn screen_styled(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-e", "-t", "t"]).stdout).into_owned()
    }

    /// A tmux format about the pane (`#{alternate_on}`, `#{pane_title}`).
    pub(crate) fn display(&self, format: &str) -> String {
        String::from_utf8_lossy(&self.tmux(&["display-message", "-p", "-t", "t", format]).stdout)
            .trim()
            .to_owned()
    }

    pub(crate) fn resize(&self, width: u16, height: u16) {
        let out =
            self.tmux(&["resize-window", "-t", "t", "-x", &width.to_string(), "-y", &height.to_string()]);
        assert!(out.status.success(), "resize-window: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Reads the screen until `ready` holds (bounded by [`WAIT`]); the screen that satisfied it.
    pub(crate) async fn until(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(Instant::now() < deadline, "the screen never showed {what}:\n{screen}");
            // Polling a terminal's screen: tmux has no event for "the screen now shows X".
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits (with `tmux wait-for`, bounded by [`WAIT`]) for the command to exit and the script
    /// to print its status and the terminal's modes; the screen then.
    pub(crate) async fn exited(&self) -> String {
        let mut wait = tokio::process::Command::new("tmux");
        wait.arg("-S").arg(&self.socket).args(["wait-for", "exited"]).kill_on_drop(true);
        let status = tokio::time::timeout(WAIT, wait.status())
            .await
            .unwrap_or_else(|_| panic!("the command never exited:\n{}", self.screen()))
            .expect("tmux wait-for");
        assert!(status.success());
        self.screen()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

//! The README's quick start, run as written: its three marked shell blocks (`<!-- quickstart: serve
//! -->`, `client`, `stream`) go through `bash` with a given `mediatord` first on `PATH` (in place of
//! the install step), and every output line the README shows after `# →` is checked. So the
//! walkthrough cannot drift from the daemon. `tests/it/quickstart.rs` runs it with the freshly built
//! binary; `tests/package.rs` with the one installed from the packaged crate and the one in the .deb.
//!
//! Two changes are made to the blocks, and only these: the daemon gets `--port 0` (and is `exec`ed, so
//! the test can kill it), and the README's `http://127.0.0.1:7776` becomes the port it got. The client
//! runs under `set -euo pipefail`, stricter than a pasted shell, so a failing step is loud.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use super::WAIT;

pub(crate) const README: &str = include_str!("../../../README.md");
/// The address the README's blocks use.
const README_BASE: &str = "http://127.0.0.1:7776";
/// Marks an expected output line in a block; a line that is only `…` stands for any lines.
const OUTPUT: &str = "# →";

/// One marked block: the shell lines, and the output lines it documents.
#[derive(Debug)]
struct Block {
    script: String,
    expected: Vec<String>,
}

/// The ```sh block right after `<!-- quickstart: {name} -->`.
fn block(name: &str) -> Block {
    let marker = format!("<!-- quickstart: {name} -->");
    let after = README.split_once(&marker).unwrap_or_else(|| panic!("README.md has no {marker}")).1;
    let body = after
        .trim_start()
        .strip_prefix("```sh\n")
        .unwrap_or_else(|| panic!("{marker} must be followed by a ```sh block"));
    let body = body.split_once("\n```").unwrap_or_else(|| panic!("the block after {marker} never ends")).0;
    let mut script = String::new();
    let mut expected = Vec::new();
    for line in body.lines() {
        match line.strip_prefix(OUTPUT) {
            Some(out) => expected.push(out.strip_prefix(' ').unwrap_or(out).to_owned()),
            None => {
                script.push_str(line);
                script.push('\n');
            }
        }
    }
    Block { script, expected }
}

/// Whether `line` matches `pattern`, where `…` stands for any run of characters.
pub(crate) fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    let (first, rest) = parts.split_first().expect("split yields one part at least");
    let Some(mut tail) = line.strip_prefix(first) else { return false };
    let Some((last, middle)) = rest.split_last() else { return tail.is_empty() };
    for part in middle {
        match tail.find(part) {
            Some(i) => tail = &tail[i + part.len()..],
            None => return false,
        }
    }
    tail.len() >= last.len() && tail.ends_with(last)
}

/// Whether `lines` match `expected` one for one, an expected line `…` matching any number of lines.
pub(crate) fn transcript_matches(expected: &[String], lines: &[String]) -> bool {
    match expected.split_first() {
        None => lines.is_empty(),
        Some((any, rest)) if any == "…" => {
            (0..=lines.len()).any(|skip| transcript_matches(rest, &lines[skip..]))
        }
        Some((pattern, rest)) => {
            lines.first().is_some_and(|l| line_matches(pattern, l)) && transcript_matches(rest, &lines[1..])
        }
    }
}

fn assert_transcript(what: &str, expected: &[String], lines: &[String], stderr: &str) {
    assert!(
        transcript_matches(expected, lines),
        "the README's {what} output does not match.\n--- README shows:\n{}\n--- the commands printed:\n{}\n--- stderr:\n{stderr}",
        expected.join("\n"),
        lines.join("\n"),
    );
}

/// Fails loudly (never skips) when a tool the README's commands use is missing.
fn require_tools() {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for tool in ["bash", "curl", "jq"] {
        assert!(
            std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()),
            "tests/it/quickstart.rs runs the README's quick start, which needs `{tool}` on PATH: install it \
             (Debian/Ubuntu: apt-get install curl jq; GitHub's ubuntu runners have both)"
        );
    }
}

/// A `bash` running a script in its own process group, with a clean environment: the test's `bin`
/// first on `PATH`, `TMPDIR`/`HOME` in the test's directory, no proxy, no mediatord settings.
fn bash(script: &str, cwd: &Path, root: &Path) -> Child {
    let path = format!("{}:{}", root.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(script).current_dir(cwd).env("PATH", path);
    cmd.env("TMPDIR", root.join("tmp")).env("HOME", root.join("home"));
    // The daemon's state goes to its default, under this HOME, never to the runner's own.
    cmd.env_remove("XDG_STATE_HOME").env_remove("MEDIATORD_STATE_DIR");
    for var in ["http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        cmd.env_remove(var);
    }
    cmd.env("no_proxy", "127.0.0.1,localhost").env("NO_PROXY", "127.0.0.1,localhost");
    for var in [
        "MEDIATORD_HOSTNAME",
        "MEDIATORD_PORT",
        "MEDIATORD_TOKEN",
        "MEDIATORD_AGENT",
        "MEDIATORD_CONFIG",
        "QWEN_SERVER_TOKEN",
        "CURL_HOME",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("RUST_LOG", "warn");
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn().expect("spawn bash")
}

/// A running block: its stdout lines arrive on a channel, its stderr is collected; dropping it kills
/// its whole process group (the daemon and its agent, or a `curl` still following a stream).
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Running {
    fn start(script: &str, cwd: &Path, root: &Path) -> Running {
        let mut child = bash(script, cwd, root);
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = stderr.clone();
        let mut pipe = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().expect("stderr lock").push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Running { child, lines, stderr }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    /// Stdout lines until one for which `last` holds (included), or until stdout closes.
    fn lines_until(&self, what: &str, last: impl Fn(&str) -> bool) -> Vec<String> {
        let deadline = Instant::now() + WAIT;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let done = last(&line);
                    out.push(line);
                    if done {
                        return out;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return out,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                    "the README's {what} did not finish within {WAIT:?}; it printed:\n{}\nstderr:\n{}",
                    out.join("\n"),
                    self.stderr()
                ),
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let pgid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        let _ = self.child.wait();
    }
}

/// The one directory `mktemp -d` made under `tmp`: the daemon's workspace.
fn the_scratch_dir(tmp: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> =
        std::fs::read_dir(tmp).expect("read tmp").map(|e| e.expect("entry").path()).collect();
    assert_eq!(dirs.len(), 1, "the serve block should make exactly one scratch directory: {dirs:?}");
    dirs.into_iter().next().expect("one")
}

/// Runs the quick start with `binary` as the `mediatord` on `PATH`, and checks every line it shows.
pub(crate) fn run(binary: &Path) {
    require_tools();
    let root = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(root.path()).expect("canonical");
    for dir in ["bin", "tmp", "home", "elsewhere"] {
        std::fs::create_dir(root.join(dir)).expect("mkdir");
    }
    std::os::unix::fs::symlink(binary, root.join("bin/mediatord")).expect("symlink the binary");

    // Terminal 1: the daemon, in a scratch directory of its own making.
    let serve = block("serve");
    let serve_line = "mediatord serve --agent demo --workspace \"$PWD\"";
    assert_eq!(serve.script.lines().filter(|l| *l == serve_line).count(), 1, "{}", serve.script);
    let script = serve.script.replace(serve_line, &format!("exec {serve_line} --port 0"));
    let daemon = Running::start(&script, &root.join("elsewhere"), &root);
    let started = daemon.lines_until("serve block", |_| true);
    let base = started
        .first()
        .and_then(|l| l.strip_prefix("mediatord listening on "))
        .unwrap_or_else(|| panic!("no startup line: {started:?}\nstderr:\n{}", daemon.stderr()))
        .to_owned();
    let expected: Vec<String> = serve.expected.iter().map(|l| l.replace(README_BASE, &base)).collect();
    assert_transcript("serve block", &expected, &started, &daemon.stderr());
    let workspace = the_scratch_dir(&root.join("tmp"));

    // Terminal 2: the client steps, then the stream replay, from a directory that must stay empty.
    let client = block("client");
    let stream = block("stream");
    assert!(client.script.contains(README_BASE), "the client block should name {README_BASE}");
    let script = format!("set -euo pipefail\n{}{}", client.script, stream.script).replace(README_BASE, &base);
    let cwd = root.join("elsewhere");
    let run = Running::start(&script, &cwd, &root);
    let printed = run.lines_until("client and stream blocks", |l| l.contains("\"type\":\"replay_complete\""));
    let expected: Vec<String> = client.expected.iter().chain(&stream.expected).cloned().collect();
    assert_transcript(
        "client and stream blocks",
        &expected,
        &printed,
        &format!("{}{}", run.stderr(), daemon.stderr()),
    );
    drop(run);

    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.txt")).expect("the demo agent wrote notes.txt"),
        "hello from the demo"
    );
    assert_eq!(std::fs::read_dir(&cwd).expect("read cwd").count(), 0, "the client wrote into its directory");
    // HOME holds the daemon's state, where the documentation says it is, and nothing else.
    let home: Vec<_> = std::fs::read_dir(root.join("home"))
        .expect("read home")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(home, [std::ffi::OsString::from(".local")], "something else wrote into HOME");
    assert!(
        root.join("home/.local/state/mediatord/state.db").is_file(),
        "the state database is in the default place"
    );
}

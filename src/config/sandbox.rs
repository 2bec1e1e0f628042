//! The sandbox settings (`--sandbox`, `--sandbox-writable`, an agent's `sandbox` in the config
//! file), resolved at boot into one [`SandboxSettings`] per agent: absolute paths, `~` expanded with
//! the agent's own `HOME`. Enforcing them is `agent::sandbox`'s business.
//!
//! The shipped defaults (the state directories Qwen Code, Claude Code, Gemini CLI and the demo
//! agent write to) were found by running each agent under the sandbox with nothing but its
//! workspace writable and reading what it failed to write (`docs/agents.md#the-sandbox`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{AgentCommand, ConfigError, default_state_dir, refuse};

/// Keys of an agent's `sandbox` object in the config file.
const SANDBOX_KEYS: &[&str] = &["mode", "writable", "net"];
/// Ports an agent's `net` list may name; more is a configuration mistake, not a policy.
pub const MAX_NET_PORTS: usize = 64;
/// Writable paths an agent may have beyond its shipped defaults.
pub const MAX_WRITABLE: usize = 256;

/// Whether agents and session shell commands run confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    /// Writes only beneath the workspace, the agent's writable paths and a private temporary
    /// directory (Landlock).
    Workspace,
    /// Not confined: the agent may write wherever its user may.
    Off,
}

impl SandboxMode {
    pub fn parse(s: &str) -> Option<SandboxMode> {
        match s {
            "workspace" => Some(SandboxMode::Workspace),
            "off" => Some(SandboxMode::Off),
            _ => None,
        }
    }
}

/// Which TCP connections a confined agent may open (Landlock ABI 4 and later).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetRule {
    /// No network rule.
    Any,
    /// No TCP connect and no TCP bind, to any port.
    None,
    /// TCP connect to these ports only (on any host: Landlock matches ports, not addresses).
    Connect(Vec<u16>),
}

/// One agent's sandbox, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    pub mode: SandboxMode,
    /// The mode was set (flag, environment or file) rather than defaulted: a kernel that cannot
    /// enforce it then refuses the boot instead of warning.
    pub explicit: bool,
    /// Absolute paths the agent may write beneath besides its workspace and private temporary
    /// directory: the shipped defaults for its program, then `--sandbox-writable`, then its own.
    pub writable: Vec<PathBuf>,
    /// The directories among `writable` to create when missing: the shipped ones and entries
    /// written with a trailing `/`. Any other missing path is left out when the agent starts (it
    /// could be meant as a file: Claude Code's `~/.claude.json` made a directory breaks it).
    pub create: Vec<PathBuf>,
    /// Files among `writable` to create with this content when missing (shipped only: Claude
    /// Code's `~/.claude.json`, which it cannot create itself beneath a home it may not write).
    pub seed: Vec<(PathBuf, &'static str)>,
    pub net: NetRule,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            mode: SandboxMode::Workspace,
            explicit: false,
            writable: Vec::new(),
            create: Vec::new(),
            seed: Vec::new(),
            net: NetRule::Any,
        }
    }
}

/// An agent's own `sandbox` entry, as written: `"workspace"`, `"off"`, or an object of
/// [`SANDBOX_KEYS`].
#[derive(Debug, Default)]
pub(super) struct AgentSandbox {
    mode: Option<SandboxMode>,
    writable: Vec<String>,
    net: Option<NetRule>,
}

/// Parses an agent's `sandbox` value; `Err` is the rest of the message from `.sandbox` on.
pub(super) fn parse_agent(value: &Value) -> Result<AgentSandbox, String> {
    const MODES: &str = "\"workspace\" or \"off\"";
    let mode = |v: &Value, at: &str| match v.as_str().and_then(SandboxMode::parse) {
        Some(m) => Ok(m),
        None => Err(format!("{at} must be {MODES}")),
    };
    let fields = match value {
        Value::Null => return Ok(AgentSandbox::default()),
        Value::String(_) => {
            return Ok(AgentSandbox { mode: Some(mode(value, "")?), ..AgentSandbox::default() });
        }
        Value::Object(fields) => fields,
        _ => return Err(format!(" must be {MODES}, or an object with mode, writable and net")),
    };
    if let Some(key) = fields.keys().find(|k| !SANDBOX_KEYS.contains(&k.as_str())) {
        return Err(format!(": unknown key {key}; known keys: {}", SANDBOX_KEYS.join(", ")));
    }
    let mut out = AgentSandbox::default();
    if let Some(v) = fields.get("mode").filter(|v| !v.is_null()) {
        out.mode = Some(mode(v, ".mode")?);
    }
    match fields.get("writable") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) if items.len() <= MAX_WRITABLE => {
            for item in items {
                match item.as_str() {
                    Some(p) if !p.is_empty() && !p.contains('\0') => out.writable.push(p.to_owned()),
                    _ => return Err(".writable must hold non-empty paths".to_owned()),
                }
            }
        }
        Some(_) => return Err(format!(".writable must be a list of at most {MAX_WRITABLE} paths")),
    }
    if let Some(v) = fields.get("net").filter(|v| !v.is_null()) {
        out.net = Some(parse_net(v)?);
    }
    Ok(out)
}

/// `"any"`, `"none"`, or a list of TCP ports (1 to 65535).
fn parse_net(v: &Value) -> Result<NetRule, String> {
    let wrong = || format!(".net must be \"any\", \"none\" or a list of at most {MAX_NET_PORTS} TCP ports");
    match v {
        Value::String(s) if s == "any" => Ok(NetRule::Any),
        Value::String(s) if s == "none" => Ok(NetRule::None),
        Value::Array(items) if items.len() <= MAX_NET_PORTS => {
            let mut ports = Vec::new();
            for item in items {
                match item.as_u64().and_then(|p| u16::try_from(p).ok()).filter(|p| *p > 0) {
                    Some(p) if !ports.contains(&p) => ports.push(p),
                    Some(_) => {}
                    None => return Err(format!(".net: {item} is not a TCP port (1 to 65535)")),
                }
            }
            Ok(NetRule::Connect(ports))
        }
        _ => Err(wrong()),
    }
}

/// The daemon-wide settings every agent starts from.
#[derive(Debug, Default)]
pub(super) struct DaemonSandbox {
    pub(super) mode: Option<SandboxMode>,
    /// `--sandbox-writable`, as written, and the directory relative ones are taken from.
    pub(super) writable: Vec<String>,
    pub(super) base: PathBuf,
}

/// One agent's settings: its own entry over the daemon's, over the defaults; its paths absolute.
pub(super) fn resolve(
    daemon: &DaemonSandbox,
    own: AgentSandbox,
    command: &AgentCommand,
    env: &[(String, String)],
    own_base: &Path,
) -> Result<SandboxSettings, ConfigError> {
    // The agent's environment is its daemon's with its own `env` on top: `~` is the agent's home.
    let var = |name: &str| -> Option<String> {
        env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.clone()).or_else(|| std::env::var(name).ok())
    };
    let home = var("HOME").filter(|h| Path::new(h).is_absolute()).map(PathBuf::from);
    let mode = own.mode.or(daemon.mode);
    let shipped = shipped_writable(command, home.as_deref(), var("XDG_STATE_HOME").as_deref());
    let mut create = Vec::new();
    let mut seed = Vec::new();
    let mut writable = Vec::new();
    for (path, shipped) in shipped {
        match shipped {
            Shipped::Dir => create.push(path.clone()),
            Shipped::File(content) => seed.push((path.clone(), content)),
        }
        writable.push(path);
    }
    let raw = daemon
        .writable
        .iter()
        .map(|p| (p, daemon.base.as_path()))
        .chain(own.writable.iter().map(|p| (p, own_base)));
    for (path, base) in raw {
        let dir = path.ends_with('/');
        let path = expand(path, home.as_deref(), base)?;
        if dir && !create.contains(&path) {
            create.push(path.clone());
        }
        if !writable.contains(&path) {
            writable.push(path);
        }
    }
    Ok(SandboxSettings {
        mode: mode.unwrap_or(SandboxMode::Workspace),
        explicit: mode.is_some(),
        writable,
        create,
        seed,
        net: own.net.unwrap_or(NetRule::Any),
    })
}

/// `~` or `~/rest` in the agent's home; a relative path from `base`; `.` and `..` folded away.
fn expand(raw: &str, home: Option<&Path>, base: &Path) -> Result<PathBuf, ConfigError> {
    let joined = match raw.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => match home {
            Some(home) => home.join(rest.trim_start_matches('/')),
            None => {
                return refuse(format!(
                    "sandbox writable path {raw:?}: the agent has no absolute HOME to expand ~ with"
                ));
            }
        },
        _ => base.join(raw),
    };
    // Folded lexically: the path may not exist yet (it is created when the agent starts).
    let mut out = PathBuf::new();
    for part in joined.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    Ok(out)
}

/// How a shipped writable path is made when it is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shipped {
    Dir,
    /// A file with this content.
    File(&'static str),
}

/// What an agent's program writes outside its workspace, found by running it confined with nothing
/// else writable and reading what it failed to write (`docs/agents.md#the-sandbox`). Matched on
/// the program's file name (or, for the demo agent, on its being the demo).
///
/// Claude Code keeps its global settings in `~/.claude.json`, written through a temporary file,
/// a lock directory and backups beside it in the home directory, which a confined agent may not
/// write (Landlock grants directory trees, not file names). It falls back to rewriting the file in
/// place, which works when the file exists and is writable: so the file is shipped writable and,
/// when missing, created holding `{}` (what it starts from).
fn shipped_writable(
    command: &AgentCommand,
    home: Option<&Path>,
    xdg_state: Option<&str>,
) -> Vec<(PathBuf, Shipped)> {
    if command.display == "demo" {
        // Its transcripts, kept for `session/load` beside the daemon's state (src/cli/demo_agent.rs).
        let home = home.map(|h| h.to_string_lossy().into_owned());
        return default_state_dir(xdg_state, home.as_deref())
            .map(|d| (d.join("demo-agent"), Shipped::Dir))
            .into_iter()
            .collect();
    }
    let Some(home) = home else { return Vec::new() };
    let file = Path::new(&command.program).file_name().and_then(|f| f.to_str()).unwrap_or_default();
    let paths: &[(&str, Shipped)] = match file {
        "qwen" => &[(".qwen", Shipped::Dir)],
        "claude-code-acp" | "claude-agent-acp" | "claude" => {
            &[(".claude", Shipped::Dir), (".claude.json", Shipped::File("{}\n"))]
        }
        "gemini" => &[(".gemini", Shipped::Dir)],
        _ => &[],
    };
    paths.iter().map(|(p, how)| (home.join(p), *how)).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn command(program: &str) -> AgentCommand {
        AgentCommand {
            display: program.to_owned(),
            program: program.to_owned(),
            args: Vec::new(),
            guard: PathBuf::from("/bin/mediatord"),
        }
    }

    #[test]
    fn an_agent_entry_is_a_mode_or_an_object() {
        assert_eq!(parse_agent(&json!("off")).expect("mode").mode, Some(SandboxMode::Off));
        let full = parse_agent(
            &json!({"mode": "workspace", "writable": ["~/.cache/x", "rel"], "net": [443, 443, 8080]}),
        )
        .expect("object");
        assert_eq!(full.mode, Some(SandboxMode::Workspace));
        assert_eq!(full.writable, ["~/.cache/x", "rel"]);
        assert_eq!(full.net, Some(NetRule::Connect(vec![443, 8080])), "duplicates folded");
        assert_eq!(parse_agent(&json!({"net": "none"})).expect("none").net, Some(NetRule::None));
        let unset = parse_agent(&json!(null)).expect("null is unset");
        assert_eq!((unset.mode, unset.writable.len(), unset.net), (None, 0, None));
        let most: Vec<String> = (0..MAX_WRITABLE).map(|i| format!("/p{i}")).collect();
        assert_eq!(
            parse_agent(&json!({"writable": most})).expect("at the bound").writable.len(),
            MAX_WRITABLE
        );
        let ports: Vec<u16> = (1..=MAX_NET_PORTS as u16).collect();
        assert_eq!(
            parse_agent(&json!({"net": ports})).expect("at the bound").net,
            Some(NetRule::Connect(ports))
        );
        assert_eq!(parse_agent(&json!({"net": "any"})).expect("any").net, Some(NetRule::Any));
        for (bad, says) in [
            (json!("on"), " must be \"workspace\" or \"off\""),
            (json!(true), " must be \"workspace\" or \"off\", or an object with mode, writable and net"),
            (json!({"mode": "strict"}), ".mode must be \"workspace\" or \"off\""),
            (json!({"writeable": []}), ": unknown key writeable; known keys: mode, writable, net"),
            (json!({"writable": "~/.x"}), ".writable must be a list of at most 256 paths"),
            (
                json!({"writable": vec!["/p"; MAX_WRITABLE + 1]}),
                ".writable must be a list of at most 256 paths",
            ),
            (
                json!({"net": (1..=65u16).collect::<Vec<_>>()}),
                ".net must be \"any\", \"none\" or a list of at most 64 TCP ports",
            ),
            (json!({"writable": [""]}), ".writable must hold non-empty paths"),
            (json!({"net": [0]}), ".net: 0 is not a TCP port (1 to 65535)"),
            (json!({"net": [65536]}), ".net: 65536 is not a TCP port (1 to 65535)"),
            (json!({"net": "some"}), ".net must be \"any\", \"none\" or a list of at most 64 TCP ports"),
        ] {
            assert_eq!(parse_agent(&bad).map(|_| ()).expect_err("refused"), says, "{bad}");
        }
    }

    #[test]
    fn the_agents_own_settings_win_over_the_daemons_and_paths_come_after_the_shipped_ones() {
        let daemon = DaemonSandbox {
            mode: Some(SandboxMode::Off),
            writable: vec!["~/.cache".into(), "shared".into()],
            base: PathBuf::from("/cwd"),
        };
        let env = [("HOME".to_owned(), "/home/a".to_owned())];
        let own = parse_agent(&json!({"mode": "workspace", "writable": ["../x/./y/", "~"]})).expect("own");
        let s =
            resolve(&daemon, own, &command("/opt/bin/qwen"), &env, Path::new("/etc/md")).expect("resolved");
        assert_eq!(s.mode, SandboxMode::Workspace);
        assert!(s.explicit);
        let want: Vec<PathBuf> = ["/home/a/.qwen", "/home/a/.cache", "/cwd/shared", "/etc/x/y", "/home/a"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(s.writable, want);
        let made: Vec<PathBuf> = ["/home/a/.qwen", "/etc/x/y"].iter().map(PathBuf::from).collect();
        assert_eq!(s.create, made, "the shipped directories and those written with a trailing /");
        assert_eq!(s.net, NetRule::Any);

        let plain = resolve(
            &DaemonSandbox::default(),
            AgentSandbox::default(),
            &command("my-agent"),
            &env,
            Path::new("/"),
        )
        .expect("defaults");
        assert_eq!(plain, SandboxSettings::default(), "an unknown program gets nothing beyond its workspace");
        let off = resolve(&daemon, AgentSandbox::default(), &command("my-agent"), &env, Path::new("/"))
            .expect("off");
        assert_eq!(
            (off.mode, off.explicit),
            (SandboxMode::Off, true),
            "the daemon's mode when the agent sets none"
        );
    }

    #[test]
    fn the_shipped_defaults_follow_the_program_and_its_home() {
        let home = Some(Path::new("/h"));
        let paths = |program: &str| -> Vec<PathBuf> {
            shipped_writable(&command(program), home, None).into_iter().map(|(p, _)| p).collect()
        };
        assert_eq!(
            paths("/x/node_modules/.bin/claude-code-acp"),
            [PathBuf::from("/h/.claude"), PathBuf::from("/h/.claude.json")]
        );
        assert_eq!(paths("gemini"), [PathBuf::from("/h/.gemini")]);
        assert_eq!(paths("qwen"), [PathBuf::from("/h/.qwen")]);
        assert!(paths("codex-acp").is_empty());
        let mut demo = command("/bin/mediatord");
        demo.display = "demo".into();
        assert_eq!(
            shipped_writable(&demo, home, None).into_iter().map(|(p, _)| p).collect::<Vec<_>>(),
            [PathBuf::from("/h/.local/state/mediatord/demo-agent")]
        );
        assert_eq!(
            shipped_writable(&demo, home, Some("/s")),
            [(PathBuf::from("/s/mediatord/demo-agent"), Shipped::Dir)]
        );
        let claude = resolve(
            &DaemonSandbox::default(),
            AgentSandbox::default(),
            &command("claude-code-acp"),
            &[("HOME".into(), "/h".into())],
            Path::new("/"),
        )
        .expect("claude");
        assert_eq!(claude.create, [PathBuf::from("/h/.claude")]);
        assert_eq!(
            claude.seed,
            [(PathBuf::from("/h/.claude.json"), "{}\n")],
            "a file, never made a directory"
        );
        assert!(shipped_writable(&command("qwen"), None, None).is_empty(), "no home, nothing to expand");
    }

    #[test]
    fn tilde_needs_an_absolute_home() {
        let err = expand("~/.x", None, Path::new("/")).expect_err("no home");
        assert!(err.0.contains("no absolute HOME"), "{err}");
        assert_eq!(
            expand("~user", Some(Path::new("/h")), Path::new("/b")).expect("a relative name"),
            PathBuf::from("/b/~user")
        );
    }
}

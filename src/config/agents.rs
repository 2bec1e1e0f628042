//! The agents: `--agent [NAME=]COMMAND` and the file's `agents` map, each one's command, name,
//! environment, initialize timeout, client capabilities and sandbox.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::file::{AGENT_KEYS, FileSettings, unknown_key};
use super::sandbox::{self, MAX_WRITABLE, SandboxMode, SandboxSettings};
use super::{
    AgentCommand, AgentSpec, ConfigError, FsCapabilities, MAX_AGENT_NAME, ServeArgs, current_dir, refuse,
};

/// Splits the agent command line; `demo` becomes this binary's own demo agent. A relative program
/// path (`./my-agent`) is resolved against the current directory.
pub fn agent_command(raw: &str) -> Result<AgentCommand, ConfigError> {
    agent_command_in(raw, &current_dir()?)
}

/// [`agent_command`], with a relative program path taken from `base`: the agent runs in its
/// workspace, so a path relative to where the daemon was started would name another file there.
pub(super) fn agent_command_in(raw: &str, base: &Path) -> Result<AgentCommand, ConfigError> {
    let display = raw.trim().to_owned();
    if display.is_empty() {
        return refuse(
            "--agent is empty: give the agent's command line, e.g. --agent 'qwen --acp' or --agent demo",
        );
    }
    let exe = std::env::current_exe()
        .or_else(|e| refuse(format!("cannot locate this binary (it also runs the agent guard): {e}")))?;
    if display == "demo" {
        return Ok(AgentCommand {
            display,
            program: exe.to_string_lossy().into_owned(),
            args: vec!["demo-agent".into()],
            guard: exe,
        });
    }
    let mut words = shell_words::split(&display)
        .or_else(|e| refuse(format!("--agent cannot be split into words: {e}")))?;
    if words.is_empty() {
        return refuse("--agent is empty");
    }
    let mut program = words.remove(0);
    // A bare name is looked up on PATH; only a path with a slash is relative to anything.
    if program.contains('/') && Path::new(&program).is_relative() {
        // `components` drops the `.` of `./my-agent`, so logs and errors show a clean path.
        program = base.join(&program).components().collect::<PathBuf>().to_string_lossy().into_owned();
    }
    Ok(AgentCommand { display, program, args: words, guard: exe })
}

/// Whether `name` may name an agent: 1 to [`MAX_AGENT_NAME`] of `A-Z a-z 0-9 . _ -`.
pub fn valid_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_AGENT_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// `NAME=COMMAND` as its name and command; anything else is a bare command. (A command line never
/// starts with `NAME=`: it is not run by a shell, so `VAR=value cmd` was never an assignment.)
pub(super) fn split_agent_name(raw: &str) -> (Option<&str>, &str) {
    let raw = raw.trim();
    match raw.split_once('=') {
        Some((name, command)) if valid_agent_name(name) => (Some(name), command),
        _ => (None, raw),
    }
}

/// The name of an agent given as a bare command: its program's file name (`demo` for the demo
/// agent), each character a name may not hold replaced by `-`.
pub(super) fn derived_agent_name(command: &AgentCommand) -> String {
    if command.display == "demo" {
        return "demo".to_owned();
    }
    let file = Path::new(&command.program).file_name().map(|f| f.to_string_lossy().into_owned());
    let name: String = file
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' })
        .take(MAX_AGENT_NAME)
        .collect();
    if name.is_empty() { "agent".to_owned() } else { name }
}

/// One `--agent` value (or `serve.agent` entry), `[NAME=]COMMAND`, with the daemon-wide settings.
pub(super) fn agent_arg(
    raw: &str,
    base: &Path,
    initialize_timeout: Duration,
    daemon_sandbox: &sandbox::DaemonSandbox,
) -> Result<AgentSpec, ConfigError> {
    let (name, command) = split_agent_name(raw);
    if let Some(name) = name
        && command.trim().is_empty()
    {
        return refuse(format!(
            "--agent {name}= names no command: give it after the =, e.g. --agent {name}='qwen --acp'"
        ));
    }
    let command = agent_command_in(command, base)?;
    let name = name.map_or_else(|| derived_agent_name(&command), str::to_owned);
    let sandbox = sandbox::resolve(daemon_sandbox, sandbox::AgentSandbox::default(), &command, &[], base)?;
    Ok(AgentSpec {
        name,
        command,
        env: Vec::new(),
        initialize_timeout,
        fs: FsCapabilities::default(),
        sandbox,
    })
}

/// One entry of the config file's `agents` map: a command line, or an object of [`AGENT_KEYS`].
pub(super) fn file_agent(
    name: &str,
    value: &Value,
    file: &FileSettings,
    initialize_timeout: Duration,
    daemon_sandbox: &sandbox::DaemonSandbox,
) -> Result<AgentSpec, ConfigError> {
    let at = |rest: &str| format!("config file {}: agents.{name}{rest}", file.path.display());
    if !valid_agent_name(name) {
        return refuse(at(&format!(
            ": an agent name is 1 to {MAX_AGENT_NAME} characters of A-Z a-z 0-9 . _ -"
        )));
    }
    let spec = |command: &str| -> Result<AgentSpec, ConfigError> {
        Ok(AgentSpec {
            name: name.to_owned(),
            command: agent_command_in(command, &file.dir)?,
            env: Vec::new(),
            initialize_timeout,
            fs: FsCapabilities::default(),
            sandbox: SandboxSettings::default(),
        })
    };
    let fields = match value {
        Value::String(command) => {
            let mut agent = spec(command)?;
            agent.sandbox = sandbox::resolve(
                daemon_sandbox,
                sandbox::AgentSandbox::default(),
                &agent.command,
                &agent.env,
                &file.dir,
            )?;
            return Ok(agent);
        }
        Value::Object(fields) => fields,
        _ => return refuse(at(" must be a command line, or an object with \"command\"")),
    };
    if let Some(key) = fields.keys().find(|k| !AGENT_KEYS.contains(&k.as_str())) {
        return Err(unknown_key(&file.path, Some(&format!("agents.{name}")), key));
    }
    let mut agent = match fields.get("command") {
        Some(Value::String(command)) => spec(command)?,
        _ => return refuse(at(".command must be the agent's command line, a string")),
    };
    match fields.get("env") {
        None | Some(Value::Null) => {}
        Some(Value::Object(vars)) => {
            for (var, value) in vars {
                match value {
                    Value::String(v)
                        if !var.is_empty() && !var.contains(['=', '\0']) && !v.contains('\0') =>
                    {
                        agent.env.push((var.clone(), v.clone()))
                    }
                    _ => {
                        return refuse(at(&format!(
                            ".env.{var} must be a string, its name non-empty without = (neither holding NUL)"
                        )));
                    }
                }
            }
        }
        Some(_) => return refuse(at(".env must be an object of variable names to strings")),
    }
    match fields.get("initializeTimeoutMs") {
        None | Some(Value::Null) => {}
        Some(v) => match v.as_u64() {
            Some(ms) if ms > 0 => agent.initialize_timeout = Duration::from_millis(ms),
            _ => return refuse(at(".initializeTimeoutMs must be a positive integer")),
        },
    }
    if let Some(caps) = fields.get("clientCapabilities") {
        agent.fs =
            client_capabilities(caps).or_else(|why| refuse(at(&format!(".clientCapabilities{why}"))))?;
    }
    let own = match fields.get("sandbox") {
        None => sandbox::AgentSandbox::default(),
        Some(v) => sandbox::parse_agent(v).or_else(|why| refuse(at(&format!(".sandbox{why}"))))?,
    };
    agent.sandbox = sandbox::resolve(daemon_sandbox, own, &agent.command, &agent.env, &file.dir)?;
    Ok(agent)
}

/// `{"fs": {"readTextFile": bool, "writeTextFile": bool}}`, each absent member on. `Err` is the
/// rest of the message (from the member's path on).
pub(super) fn client_capabilities(caps: &Value) -> Result<FsCapabilities, String> {
    const KNOWN: &str = "known: fs.readTextFile, fs.writeTextFile (the daemon offers no terminal)";
    let mut fs = FsCapabilities::default();
    let Value::Object(caps) = caps else { return Err(" must be an object".to_owned()) };
    for (key, value) in caps {
        let Value::Object(members) = value else {
            return Err(if key == "fs" {
                ".fs must be an object".to_owned()
            } else {
                format!(": unknown key {key}; {KNOWN}")
            });
        };
        if key != "fs" {
            return Err(format!(": unknown key {key}; {KNOWN}"));
        }
        for (member, on) in members {
            let slot = match member.as_str() {
                "readTextFile" => &mut fs.read_text_file,
                "writeTextFile" => &mut fs.write_text_file,
                _ => return Err(format!(".fs: unknown key {member}; {KNOWN}")),
            };
            *slot = on.as_bool().ok_or_else(|| format!(".fs.{member} must be true or false"))?;
        }
    }
    Ok(fs)
}

/// The daemon's agents: the `--agent` flags (or `MEDIATORD_AGENT`), which replace the file's
/// altogether; else the file's `serve.agent` entries, then its `agents` map; else `qwen --acp`.
/// Names must differ.
pub(super) fn agents(
    args: &ServeArgs,
    file: &FileSettings,
    cwd: &Path,
    initialize_timeout: Duration,
) -> Result<Vec<AgentSpec>, ConfigError> {
    let sandbox = daemon_sandbox(args, file, cwd)?;
    let mut agents = Vec::new();
    if args.agent.is_empty() {
        for raw in file.strings("agent")? {
            agents.push(agent_arg(&raw, &file.dir, initialize_timeout, &sandbox)?);
        }
        for (name, value) in &file.agents {
            agents.push(file_agent(name, value, file, initialize_timeout, &sandbox)?);
        }
        if agents.is_empty() {
            agents.push(agent_arg("qwen --acp", &file.dir, initialize_timeout, &sandbox)?);
        }
    } else {
        for raw in &args.agent {
            agents.push(agent_arg(raw, cwd, initialize_timeout, &sandbox)?);
        }
    }
    for (i, agent) in agents.iter().enumerate() {
        if agents[..i].iter().any(|a| a.name == agent.name) {
            return refuse(format!(
                "two agents are named {0}: name each one, e.g. --agent {0}-2='...' (or give them different names in the config file's agents map)",
                agent.name
            ));
        }
    }
    Ok(agents)
}

/// `--sandbox` and `--sandbox-writable` (flags first, then the file's `serve.sandbox` and
/// `serve.sandboxWritable`): what every agent starts from.
pub(super) fn daemon_sandbox(
    args: &ServeArgs,
    file: &FileSettings,
    cwd: &Path,
) -> Result<sandbox::DaemonSandbox, ConfigError> {
    let raw_mode = match &args.sandbox {
        Some(m) => Some(m.clone()),
        None => file.string("sandbox")?,
    };
    let mode = match raw_mode {
        None => None,
        Some(m) => match SandboxMode::parse(&m) {
            Some(mode) => Some(mode),
            None => return refuse(format!("unknown --sandbox {m:?} (expected workspace or off)")),
        },
    };
    let (writable, base) = if args.sandbox_writable.is_empty() {
        (file.strings("sandboxWritable")?, file.dir.clone())
    } else {
        (args.sandbox_writable.clone(), cwd.to_path_buf())
    };
    if let Some(bad) = writable.iter().find(|p| p.is_empty() || p.contains('\0')) {
        return refuse(format!("--sandbox-writable {bad:?} is not a path"));
    }
    if writable.len() > MAX_WRITABLE {
        return refuse(format!("--sandbox-writable is given more than {MAX_WRITABLE} times"));
    }
    Ok(sandbox::DaemonSandbox { mode, writable, base })
}

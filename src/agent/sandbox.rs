//! Kernel confinement (Landlock) of an agent, a session shell command, and everything they start.
//!
//! The daemon is never confined. The guard (`mediatord agent-guard`, [`super::guard`]) confines
//! *itself* with [`confine`] after it has opened the daemon's pidfd and become a subreaper, and
//! before it starts the command: the command and every descendant inherit the domain and cannot
//! leave it (Landlock domains only ever shrink across `fork` and `exec`). This needs no `unsafe`
//! and no `pre_exec`: the guard is already the fork between the daemon and the command.
//!
//! What a confined process may do:
//! - read and execute anything its user may (agents need toolchains and libraries);
//! - write, create, remove, rename, link, truncate and `ioctl` devices only beneath the workspace,
//!   a private temporary directory (`TMPDIR`, made per process here and removed when it ends), the
//!   agent's writable paths (`sandbox.writable`) and [`DEVICES`];
//! - with `sandbox.net`, TCP-connect only to listed ports, or neither connect nor bind (ABI 4+);
//! - send signals to, and connect to abstract UNIX sockets of, only processes of its own domain
//!   (ABI 6+): not the daemon, not the user's other programs.
//!
//! A link or rename that would give a file more rights than it has where it is (an outside file
//! linked into the workspace) is refused with `EXDEV` (ABI 2+, `LANDLOCK_ACCESS_FS_REFER`); on ABI 1
//! every link or rename across directories is refused. What it cannot stop is in
//! `docs/operations.md#the-sandbox`: reads, a hard link made before the agent started, UDP and
//! pathname UNIX sockets (the user's other daemons).
//!
//! The daemon learns what the kernel offers once, by running `mediatord sandbox-probe` ([`probe`]
//! runs it, [`probe_main`] is it): a process that confines itself as a guard would and checks that
//! a write outside is refused. The daemon itself has no safe way to ask the kernel and must not try
//! by confining itself.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, AccessNet, LandlockStatus, NetPort, PathBeneath, PathFd, RestrictionStatus,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use crate::config::{NetRule, SandboxMode, SandboxSettings};

/// The Landlock ABI whose rights this build handles, on kernels that offer it (older kernels get
/// what they support, best effort): the file-system rights through device `ioctl` (ABI 5), TCP
/// (ABI 4) and the signal and abstract-socket scopes (ABI 6). ABI 7 and 8 add logging and thread
/// flags, nothing to enforce; ABI 9 (pathname UNIX sockets) and 10 (UDP) are left out until they
/// can be tested on a kernel that has them.
const TARGET_ABI: ABI = ABI::V6;

/// Exit code of a guard that could not confine its command: it starts nothing.
pub const EXIT_CONFINE_FAILED: i32 = 125;

/// Device files any program may open for writing: the bit buckets and the terminals (a pseudo
/// terminal is opened read-write through `/dev/ptmx`).
pub const DEVICES: [&str; 6] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts"];

/// How the workspace and the private temporary directory are shown in a [`Report`]'s `writable`.
pub const WORKSPACE_LABEL: &str = "<workspace>";
pub const PRIVATE_TMP_LABEL: &str = "<private tmp>";

/// What the kernel offers, as the probe found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// Landlock works, at this ABI (the lower of the kernel's and the newest this build knows).
    Landlock { abi: u8 },
    /// No confinement is possible here, and why.
    Unsupported(String),
}

impl Support {
    pub fn abi(&self) -> Option<u8> {
        match self {
            Support::Landlock { abi } => Some(*abi),
            Support::Unsupported(_) => None,
        }
    }
}

/// What the kernel offers, probed once per process with `guard` (the mediatord binary).
pub fn support(guard: &Path) -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| probe(guard))
}

/// Runs `guard sandbox-probe` and reads its one line.
fn probe(guard: &Path) -> Support {
    let out = match std::process::Command::new(guard)
        .arg("sandbox-probe")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) => return Support::Unsupported(format!("cannot run {} sandbox-probe: {e}", guard.display())),
    };
    parse_probe(&String::from_utf8_lossy(&out.stdout))
}

fn parse_probe(line: &str) -> Support {
    let line = line.trim();
    match line.strip_prefix("landlock ").and_then(|abi| abi.parse::<u8>().ok()) {
        Some(abi) if abi > 0 => Support::Landlock { abi },
        _ => Support::Unsupported(line.strip_prefix("unsupported: ").unwrap_or(line).to_owned()),
    }
}

/// `mediatord sandbox-probe`: confines this process as a guard would (nothing writable, no TCP),
/// checks that creating a file in the temporary directory is refused, and prints `landlock <abi>`
/// or `unsupported: <why>`. Exit code 0 either way: the line is the answer.
pub fn probe_main() -> i32 {
    let rules = Rules { writable: Vec::new(), net: NetRule::None };
    let line = match restrict(&rules) {
        Err(e) => format!("unsupported: {e}"),
        Ok(status) => match (&status.ruleset, effective_abi(&status)) {
            (RulesetStatus::NotEnforced, _) | (_, None) => {
                "unsupported: the kernel has no Landlock (Linux 5.13 or later, with landlock in the lsm= boot list)"
                    .to_owned()
            }
            (_, Some(abi)) => {
                let canary = std::env::temp_dir().join(format!("mediatord-probe-{}", std::process::id()));
                match std::fs::File::create(&canary) {
                    Ok(_) => {
                        let _ = std::fs::remove_file(&canary);
                        "unsupported: Landlock reported the ruleset enforced, yet a write outside went through".to_owned()
                    }
                    Err(_) => format!("landlock {abi}"),
                }
            }
        },
    };
    println!("{line}");
    0
}

fn effective_abi(status: &RestrictionStatus) -> Option<u8> {
    match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => {
            // `ABI` is `V1 = 1`, `V2 = 2`, …: its discriminant is the number.
            Some(effective_abi as u8).filter(|abi| *abi > 0)
        }
        _ => None,
    }
}

/// The guard's confinement flags, written by the daemon ([`Prepared`]), read by [`confine`].
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfineArgs {
    /// Confine this guard and the command (Landlock) before starting it.
    #[arg(long = "confine")]
    pub confine: bool,
    /// A path the command may write beneath (repeatable).
    #[arg(long = "confine-write", value_name = "PATH")]
    pub write: Vec<PathBuf>,
    /// The command's private temporary directory: writable, and its `TMPDIR`.
    #[arg(long = "confine-tmp", value_name = "DIR")]
    pub tmp: Option<PathBuf>,
    /// TCP: `any`, `none`, or the ports it may connect to, comma-separated.
    #[arg(long = "confine-net", value_name = "any|none|PORTS", default_value = "any")]
    pub net: String,
}

/// What [`restrict`] enforces.
#[derive(Debug)]
struct Rules {
    writable: Vec<PathBuf>,
    net: NetRule,
}

/// In the guard, before it starts the command: confines the guard itself (and so everything it
/// will start) as `args` say, and points the command's `TMPDIR` at its private directory. Does
/// nothing without `--confine`.
pub(crate) fn confine(args: &ConfineArgs, command: &mut std::process::Command) -> Result<(), String> {
    if !args.confine {
        return Ok(());
    }
    let net = parse_net(&args.net)?;
    let mut writable: Vec<PathBuf> = DEVICES.iter().map(PathBuf::from).collect();
    writable.extend(args.write.iter().cloned());
    if let Some(tmp) = &args.tmp {
        writable.push(tmp.clone());
        for var in ["TMPDIR", "TMP", "TEMP"] {
            command.env(var, tmp);
        }
    }
    let status = restrict(&Rules { writable, net })?;
    match status.ruleset {
        RulesetStatus::NotEnforced => Err("the kernel enforced none of the rules (no Landlock)".to_owned()),
        RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => Ok(()),
    }
}

fn parse_net(raw: &str) -> Result<NetRule, String> {
    match raw {
        "any" => Ok(NetRule::Any),
        "none" => Ok(NetRule::None),
        ports => ports
            .split(',')
            .map(|p| p.parse::<u16>().map_err(|_| format!("--confine-net: {p:?} is not a port")))
            .collect::<Result<Vec<u16>, String>>()
            .map(NetRule::Connect),
    }
}

/// Builds the ruleset and restricts the calling thread (the guard is single-threaded) and what it
/// starts from now on.
fn restrict(rules: &Rules) -> Result<RestrictionStatus, String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("cannot {what}: {e}");
    let abi = TARGET_ABI;
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.scope(Scope::Signal | Scope::AbstractUnixSocket))
        .map_err(|e| fail("set up the Landlock ruleset", &e))?;
    ruleset = match rules.net {
        NetRule::Any => Ok(ruleset),
        NetRule::None => ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp),
        NetRule::Connect(_) => ruleset.handle_access(AccessNet::ConnectTcp),
    }
    .map_err(|e| fail("set up the network rules", &e))?;
    let mut created = ruleset.create().map_err(|e| fail("create the Landlock ruleset", &e))?;
    let root = PathFd::new("/").map_err(|e| fail("open /", &e))?;
    created = created
        .add_rule(PathBeneath::new(root, AccessFs::from_read(abi)))
        .map_err(|e| fail("allow reading", &e))?;
    for path in &rules.writable {
        // A path that vanished since the daemon checked it grants nothing; nothing to add.
        let Ok(meta) = std::fs::metadata(path) else { continue };
        let Ok(fd) = PathFd::new(path) else { continue };
        let access = if meta.is_dir() { AccessFs::from_all(abi) } else { AccessFs::from_file(abi) };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| fail(&format!("allow writing beneath {}", path.display()), &e))?;
    }
    if let NetRule::Connect(ports) = &rules.net {
        for port in ports {
            created = created
                .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                .map_err(|e| fail(&format!("allow TCP port {port}"), &e))?;
        }
    }
    created.restrict_self().map_err(|e| fail("confine the process", &e))
}

/// A directory only one confined process tree writes to, in the daemon's scratch directory
/// ([`crate::scratch`]), removed when dropped (the tree is dead by then: its owner drops it after
/// killing the group) or with the scratch directory when the daemon goes first.
#[derive(Debug)]
pub(crate) struct PrivateTmp(PathBuf);

/// Mode of the private temporary directory: its user's alone.
const PRIVATE_TMP_MODE: u32 = 0o700;

impl PrivateTmp {
    fn create() -> io::Result<PrivateTmp> {
        use std::os::unix::fs::DirBuilderExt;
        let path = crate::scratch::dir()?.join(uuid::Uuid::new_v4().to_string());
        std::fs::DirBuilder::new().mode(PRIVATE_TMP_MODE).create(&path)?;
        Ok(PrivateTmp(path))
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.0);
        // Off the async threads when there are any: the tree may have left a lot behind.
        let remove = move || {
            let _ = std::fs::remove_dir_all(&path);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}

/// What the daemon prepares for one confined spawn: the guard's flags and the private temporary
/// directory, which lives as long as this value.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    args: Vec<OsString>,
    tmp: Option<PrivateTmp>,
}

impl Prepared {
    /// For a command run in `workspace` under `settings` on a kernel with `support`: nothing when
    /// the sandbox is off or impossible (the boot warned); else the guard's flags, with a fresh
    /// private temporary directory. A missing directory of `settings.create` is created first (the
    /// agent would create it itself, and could not beneath a parent it may not write); any other
    /// missing path is left out.
    pub(crate) fn new(
        settings: &SandboxSettings,
        support: &Support,
        workspace: &Path,
    ) -> io::Result<Prepared> {
        if settings.mode == SandboxMode::Off || support.abi().is_none() {
            return Ok(Prepared::default());
        }
        let tmp = PrivateTmp::create()?;
        let mut args: Vec<OsString> = vec!["--confine".into(), "--confine-write".into(), workspace.into()];
        for path in &settings.writable {
            if !path.exists()
                && let Some((_, content)) = settings.seed.iter().find(|(p, _)| p == path)
                && let Err(e) = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .and_then(|mut f| std::io::Write::write_all(&mut f, content.as_bytes()))
            {
                tracing::warn!(path = %path.display(), error = %e, "cannot create a sandbox writable file; it is left out");
                continue;
            }
            if !path.exists() {
                if !settings.create.contains(path) {
                    tracing::warn!(path = %path.display(), "a sandbox writable path does not exist; it is left out (end it with / to have it created as a directory)");
                    continue;
                }
                if let Err(e) = std::fs::DirBuilder::new().recursive(true).create(path) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot create a sandbox writable directory; it is left out");
                    continue;
                }
            }
            args.extend(["--confine-write".into(), path.into()]);
        }
        args.extend(["--confine-tmp".into(), tmp.0.clone().into()]);
        args.extend(["--confine-net".into(), net_arg(&settings.net).into()]);
        Ok(Prepared { args, tmp: Some(tmp) })
    }

    /// The flags to put between `agent-guard --parent PID` and `--`.
    pub(crate) fn guard_args(&self) -> &[OsString] {
        &self.args
    }

    pub(crate) fn is_confined(&self) -> bool {
        self.tmp.is_some()
    }
}

fn net_arg(net: &NetRule) -> String {
    match net {
        NetRule::Any => "any".to_owned(),
        NetRule::None => "none".to_owned(),
        NetRule::Connect(ports) if ports.is_empty() => "none".to_owned(),
        NetRule::Connect(ports) => ports.iter().map(u16::to_string).collect::<Vec<_>>().join(","),
    }
}

/// What is enforced for an agent, as `/capabilities` and `/health?deep=1` show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// `landlock` (enforced), `off` (turned off by its settings) or `unsupported` (the kernel
    /// cannot; the boot warned).
    pub kind: &'static str,
    /// The Landlock ABI in use, when the kernel has one (even with the sandbox off).
    pub abi: Option<u8>,
    /// Where writes are allowed, when enforced: [`WORKSPACE_LABEL`], [`PRIVATE_TMP_LABEL`],
    /// [`DEVICES`], then the agent's paths.
    pub writable: Option<Vec<String>>,
    /// TCP connections allowed, when enforced: `"any"`, `"none"` or the ports (always `"any"`
    /// below ABI 4).
    pub net: Option<serde_json::Value>,
}

impl Report {
    pub fn new(settings: &SandboxSettings, support: &Support) -> Report {
        let abi = support.abi();
        let kind = match (settings.mode, abi) {
            (SandboxMode::Off, _) => "off",
            (SandboxMode::Workspace, None) => "unsupported",
            (SandboxMode::Workspace, Some(_)) => "landlock",
        };
        if kind != "landlock" {
            return Report { kind, abi, writable: None, net: None };
        }
        let mut writable = vec![WORKSPACE_LABEL.to_owned(), PRIVATE_TMP_LABEL.to_owned()];
        writable.extend(DEVICES.iter().map(|d| (*d).to_owned()));
        writable.extend(settings.writable.iter().map(|p| p.to_string_lossy().into_owned()));
        let net = match &settings.net {
            _ if abi < Some(4) => serde_json::json!("any"),
            NetRule::Any => serde_json::json!("any"),
            NetRule::None => serde_json::json!("none"),
            NetRule::Connect(ports) if ports.is_empty() => serde_json::json!("none"),
            NetRule::Connect(ports) => serde_json::json!(ports),
        };
        Report { kind, abi, writable: Some(writable), net: Some(net) }
    }
}

/// Whether a tool's or a command's output reads like a refused write: the `strerror` texts and
/// errno names of `EACCES`, `EPERM` and `EROFS` as shells, coreutils, Node and Python print them.
/// Output, not the kernel, is what the daemon sees, so a refusal by file permissions counts too.
pub fn looks_denied(text: &str) -> bool {
    const MARKERS: [&str; 6] =
        ["Permission denied", "Operation not permitted", "EACCES", "EPERM", "Read-only file system", "EROFS"];
    MARKERS.iter().any(|m| text.contains(m))
}

/// The boot's words on the sandbox: `Err` refuses the boot (an agent's sandbox was asked for
/// explicitly and the kernel cannot enforce it), `Ok` holds warnings to log.
pub fn boot_check(agents: &[crate::config::AgentSpec], support: &Support) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    let Support::Unsupported(why) = support else {
        if support.abi() < Some(4) {
            for agent in agents
                .iter()
                .filter(|a| a.sandbox.mode == SandboxMode::Workspace && a.sandbox.net != NetRule::Any)
            {
                warnings.push(format!(
                    "agent {}: sandbox.net is not enforced: TCP rules need Landlock ABI 4 (Linux 6.7), this kernel offers ABI {}",
                    agent.name,
                    support.abi().unwrap_or(0)
                ));
            }
        }
        return Ok(warnings);
    };
    let confined: Vec<&crate::config::AgentSpec> =
        agents.iter().filter(|a| a.sandbox.mode == SandboxMode::Workspace).collect();
    if let Some(agent) = confined.iter().find(|a| a.sandbox.explicit) {
        return Err(format!(
            "agent {} is to run confined (sandbox workspace), but this kernel cannot confine it: {why}; run with --sandbox off to go without",
            agent.name
        ));
    }
    if !confined.is_empty() {
        warnings.push(format!(
            "agents run UNCONFINED: this kernel cannot confine them ({why}); they may write wherever this user may. Set --sandbox off to silence this warning, or use a kernel with Landlock (docs/operations.md#the-sandbox)"
        ));
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(mode: SandboxMode, net: NetRule) -> SandboxSettings {
        SandboxSettings {
            mode,
            explicit: false,
            writable: vec![PathBuf::from("/h/.qwen")],
            create: Vec::new(),
            seed: Vec::new(),
            net,
        }
    }

    #[test]
    fn the_probe_line_names_the_abi_or_why_not() {
        assert_eq!(parse_probe("landlock 7\n"), Support::Landlock { abi: 7 });
        assert_eq!(parse_probe("unsupported: no Landlock\n"), Support::Unsupported("no Landlock".into()));
        assert_eq!(parse_probe("landlock 0"), Support::Unsupported("landlock 0".into()));
        assert_eq!(parse_probe(""), Support::Unsupported(String::new()));
    }

    #[test]
    fn the_report_says_what_is_enforced() {
        let seven = Support::Landlock { abi: 7 };
        let r = Report::new(&settings(SandboxMode::Workspace, NetRule::Connect(vec![443, 8080])), &seven);
        assert_eq!(r.kind, "landlock");
        assert_eq!(r.abi, Some(7));
        let writable = r.writable.expect("writable");
        assert_eq!(writable[..2], [WORKSPACE_LABEL, PRIVATE_TMP_LABEL]);
        assert_eq!(writable[2..8], DEVICES);
        assert_eq!(writable[8..], ["/h/.qwen"]);
        assert_eq!(r.net, Some(serde_json::json!([443, 8080])));
        let none = Report::new(&settings(SandboxMode::Workspace, NetRule::None), &seven);
        assert_eq!(none.net, Some(serde_json::json!("none")));
        let empty = Report::new(&settings(SandboxMode::Workspace, NetRule::Connect(Vec::new())), &seven);
        assert_eq!(empty.net, Some(serde_json::json!("none")), "no port listed: no port allowed");
        let three =
            Report::new(&settings(SandboxMode::Workspace, NetRule::None), &Support::Landlock { abi: 3 });
        assert_eq!(three.net, Some(serde_json::json!("any")), "no TCP rules before ABI 4");
        let four =
            Report::new(&settings(SandboxMode::Workspace, NetRule::None), &Support::Landlock { abi: 4 });
        assert_eq!(four.net, Some(serde_json::json!("none")));
        let off = Report::new(&settings(SandboxMode::Off, NetRule::None), &seven);
        assert_eq!(off, Report { kind: "off", abi: Some(7), writable: None, net: None });
        let no =
            Report::new(&settings(SandboxMode::Workspace, NetRule::None), &Support::Unsupported("x".into()));
        assert_eq!(no, Report { kind: "unsupported", abi: None, writable: None, net: None });
    }

    #[test]
    fn net_flags_round_trip() {
        for net in [NetRule::Any, NetRule::None, NetRule::Connect(vec![1, 65535])] {
            assert_eq!(parse_net(&net_arg(&net)), Ok(net));
        }
        assert_eq!(net_arg(&NetRule::Connect(Vec::new())), "none");
        assert!(parse_net("80,x").is_err());
        assert!(parse_net("").is_err());
    }

    #[test]
    fn refusals_read_as_denied_and_other_failures_do_not() {
        for text in [
            "touch: cannot touch '/etc/x': Permission denied",
            "Error: EACCES: permission denied, open '/root/.bashrc'",
            "rm: cannot remove 'x': Operation not permitted",
            "OSError: [Errno 30] Read-only file system",
            "EPERM",
            "EROFS: read-only file system",
        ] {
            assert!(looks_denied(text), "{text}");
        }
        for text in ["No such file or directory", "command not found", "permission granted", ""] {
            assert!(!looks_denied(text), "{text}");
        }
    }

    #[test]
    fn nothing_is_prepared_when_off_or_unsupported() {
        let ws = Path::new("/ws");
        let off = Prepared::new(&settings(SandboxMode::Off, NetRule::Any), &Support::Landlock { abi: 7 }, ws)
            .expect("off");
        assert!(off.guard_args().is_empty() && !off.is_confined());
        let no = Prepared::new(
            &settings(SandboxMode::Workspace, NetRule::Any),
            &Support::Unsupported("x".into()),
            ws,
        )
        .expect("unsupported");
        assert!(no.guard_args().is_empty() && !no.is_confined());
    }

    #[test]
    fn a_prepared_spawn_names_every_path_and_creates_what_is_missing() {
        let home = tempfile::tempdir().expect("tempdir");
        let missing = home.path().join("a/.agent");
        let file = home.path().join(".agent.json");
        let s = SandboxSettings {
            mode: SandboxMode::Workspace,
            explicit: false,
            writable: vec![missing.clone(), file.clone()],
            create: vec![missing.clone()],
            seed: Vec::new(),
            net: NetRule::Connect(vec![443]),
        };
        let p = Prepared::new(&s, &Support::Landlock { abi: 7 }, Path::new("/ws")).expect("prepared");
        assert!(missing.is_dir(), "created");
        assert!(!file.exists(), "not a directory of `create`: left alone, and out of the rules");
        let tmp = p.tmp.as_ref().expect("a private tmp").0.clone();
        assert!(tmp.is_dir());
        let want: Vec<OsString> = [
            "--confine".into(),
            "--confine-write".into(),
            "/ws".into(),
            "--confine-write".into(),
            missing.into_os_string(),
            "--confine-tmp".into(),
            tmp.clone().into_os_string(),
            "--confine-net".into(),
            "443".into(),
        ]
        .into();
        assert_eq!(p.guard_args(), want);
        std::fs::write(tmp.join("left-behind"), "x").expect("write");
        drop(p);
        assert!(!tmp.exists(), "the private tmp goes with it");
    }

    #[test]
    fn an_explicit_sandbox_on_a_kernel_without_landlock_refuses_the_boot() {
        let mut config = crate::config::Config::for_tests(Path::new("/"));
        let no = Support::Unsupported("ENOSYS".into());
        let warnings = boot_check(&config.agents, &no).expect("a default degrades");
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("agents run UNCONFINED") && warnings[0].contains("ENOSYS"),
            "{warnings:?}"
        );
        config.agents[0].sandbox.explicit = true;
        let err = boot_check(&config.agents, &no).expect_err("refused");
        assert!(err.contains("agent demo is to run confined") && err.contains("--sandbox off"), "{err}");
        config.agents[0].sandbox.mode = SandboxMode::Off;
        assert_eq!(boot_check(&config.agents, &no), Ok(Vec::new()), "off asks nothing of the kernel");
        config.agents[0].sandbox.mode = SandboxMode::Workspace;
        config.agents[0].sandbox.net = NetRule::None;
        let three = boot_check(&config.agents, &Support::Landlock { abi: 3 }).expect("runs");
        assert!(three.len() == 1 && three[0].contains("sandbox.net is not enforced"), "{three:?}");
        assert_eq!(boot_check(&config.agents, &Support::Landlock { abi: 4 }), Ok(Vec::new()));
        config.agents[0].sandbox.net = NetRule::Any;
        assert_eq!(
            boot_check(&config.agents, &Support::Landlock { abi: 3 }),
            Ok(Vec::new()),
            "no net rule, nothing lost"
        );
        config.agents[0].sandbox.net = NetRule::None;
        config.agents[0].sandbox.mode = SandboxMode::Off;
        assert_eq!(
            boot_check(&config.agents, &Support::Landlock { abi: 3 }),
            Ok(Vec::new()),
            "not confined at all"
        );
    }
}

//! `mediatord-bench`: runs the comparison and writes the report. `bench/run.sh` is the usual way in.
//!
//! ```text
//! mediatord-bench compare --mediatord BIN [--qwen QWEN_BIN --shim bench/qwen-shim.mjs]
//!                         [--sdk SDK_DAEMON_MODULE --sdk-reader bench/sdk-reader.mjs]
//!                         [--out docs/benchmarks.md] [--runs N] [--events N] [--qwen-events N]
//! mediatord-bench smoke --mediatord BIN
//! mediatord-bench fleet --mediatord BIN --store postgres://… [--runs N] [--events N]
//! mediatord-bench review --mediatord BIN [--runs N]
//! mediatord-bench snapshots [--files N] [--bytes N] [--changed N] [--runs N]
//! mediatord-bench peer-check --mediatord BIN [--runs N]
//! mediatord-bench scale --mediatord BIN [--runs N] [--h2-streams N] [--tls-streams N] [--h1-streams N] [--acp N]
//! mediatord-bench idle --mediatord BIN [--runs N] [--only h1,h2,acp] [--streams N] [--connections N]
//!                      [--kill-at-idle 1]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use mediatord_bench::procs::Tools;
use mediatord_bench::{Plan, report};

const USAGE: &str = "usage: mediatord-bench compare --mediatord BIN [--qwen QWEN_BIN --shim SHIM.mjs] \
                     [--sdk SDK_DAEMON_MODULE --sdk-reader bench/sdk-reader.mjs]\n       \
                     [--out FILE] [--runs N] [--events N] [--qwen-events N] [--subscribers 1,10,100]\n       \
                     [--only direct,startup,bigdb,create,relay,sdk,paced,permissions,memory,acp] [--mediatord-args 'ARGS']\n       \
                     mediatord-bench smoke --mediatord BIN\n       \
                     mediatord-bench fleet --mediatord BIN --store URL [--runs N] [--events N]\n       \
                     mediatord-bench h2 --mediatord BIN [--runs N] [--events N] \
                     [--only relay1,relay10,whole,permissions,memory] [--h2-max-frame BYTES]\n       \
                     mediatord-bench review --mediatord BIN [--runs N]\n       \
                     mediatord-bench snapshots [--files N] [--bytes N] [--changed N] [--runs N]\n       \
                     mediatord-bench peer-check --mediatord BIN [--runs N]\n       \
                     mediatord-bench scale --mediatord BIN [--runs N] [--h2-streams N] [--tls-streams N] [--h1-streams N] [--acp N]\n       \
                     mediatord-bench idle --mediatord BIN [--runs N] [--only h1,h2,acp] [--streams N] \
                     [--connections N] [--kill-at-idle 1]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if command == "snapshots" {
        return snapshots(rest);
    }
    let mut tools =
        Tools { mediatord: PathBuf::new(), qwen: None, shim: None, sdk: None, mediatord_args: Vec::new() };
    let mut sdk_module: Option<PathBuf> = None;
    let mut sdk_script: Option<PathBuf> = None;
    let mut plan = if command == "smoke" { Plan::smoke() } else { Plan::full() };
    let mut out: Option<PathBuf> = None;
    let mut store: Option<String> = None;
    let mut scale = mediatord_bench::scale::ScalePlan::default();
    let mut kill_at_idle = false;
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let Some(value) = it.next() else {
            eprintln!("{flag} needs a value\n{USAGE}");
            return ExitCode::from(2);
        };
        let number = || value.parse::<u64>().map_err(|_| format!("{flag}: not a number: {value}"));
        let parsed: Result<(), String> = match flag.as_str() {
            "--mediatord" => {
                tools.mediatord = PathBuf::from(value);
                Ok(())
            }
            "--qwen" => {
                tools.qwen = Some(PathBuf::from(value));
                Ok(())
            }
            "--shim" => {
                tools.shim = Some(PathBuf::from(value));
                Ok(())
            }
            "--sdk" => {
                sdk_module = Some(PathBuf::from(value));
                Ok(())
            }
            "--sdk-reader" => {
                sdk_script = Some(PathBuf::from(value));
                Ok(())
            }
            "--mediatord-args" => {
                tools.mediatord_args = value.split_whitespace().map(str::to_owned).collect();
                Ok(())
            }
            "--store" => {
                store = Some(value.clone());
                Ok(())
            }
            "--out" => {
                out = Some(PathBuf::from(value));
                Ok(())
            }
            "--only" => {
                plan.only = Some(value.split(',').map(str::to_owned).collect());
                Ok(())
            }
            "--subscribers" => value
                .split(',')
                .map(|n| n.trim().parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
                .map(|v| plan.subscribers = v)
                .map_err(|_| format!("--subscribers: not a list of numbers: {value}")),
            "--runs" => number().map(|n| {
                plan.runs = n.max(1) as usize;
                scale.runs = plan.runs;
            }),
            "--h2-streams" => number().map(|n| scale.h2_streams = n as usize),
            "--tls-streams" => number().map(|n| scale.tls_streams = n as usize),
            "--h1-streams" => number().map(|n| scale.h1_streams = n as usize),
            "--acp" => number().map(|n| scale.acp = n as usize),
            "--streams" => number().map(|n| plan.memory_subscribers = n.max(1) as usize),
            "--connections" => number().map(|n| plan.acp_memory_connections = n.max(1) as usize),
            "--kill-at-idle" => number().map(|n| kill_at_idle = n != 0),
            "--events" => number().map(|n| plan.events = n),
            "--qwen-events" => number().map(|n| plan.qwen_events = n),
            // HTTP/2 allows 16 KiB to 16 MiB - 1.
            "--h2-max-frame" => number().and_then(|n| match u32::try_from(n) {
                Ok(n @ 16_384..=16_777_215) => {
                    plan.h2_max_frame = Some(n);
                    Ok(())
                }
                _ => Err(format!("--h2-max-frame: {n} is outside HTTP/2's 16384..=16777215")),
            }),
            _ => Err(format!("unknown option {flag}")),
        };
        if let Err(e) = parsed {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    if tools.mediatord.as_os_str().is_empty() {
        eprintln!("--mediatord is required\n{USAGE}");
        return ExitCode::from(2);
    }
    // The daemons run in their own directories: relative paths would not resolve there.
    fn absolute(p: &PathBuf) -> PathBuf {
        std::path::absolute(p).unwrap_or_else(|_| p.clone())
    }
    tools.mediatord = absolute(&tools.mediatord);
    tools.qwen = tools.qwen.as_ref().map(absolute);
    tools.shim = tools.shim.as_ref().map(absolute);
    if let (Some(module), Some(script)) = (&sdk_module, &sdk_script) {
        tools.sdk =
            Some(mediatord_bench::procs::SdkReader { script: absolute(script), module: absolute(module) });
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match command.as_str() {
        "peer-check" => match run(&runtime, peer_check(&tools, plan.runs)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("peer-check: {e}");
                ExitCode::FAILURE
            }
        },
        "compare" => {
            let report = run(&runtime, mediatord_bench::compare(&tools, &plan));
            let text = report.markdown();
            print!("{}", report.summary_table());
            if let Some(path) = out {
                if let Err(e) = std::fs::write(&path, text) {
                    eprintln!("cannot write {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
                eprintln!("bench: wrote {}", path.display());
            }
            if report.failed() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
        }
        "fleet" => {
            let Some(store) = store else {
                eprintln!("fleet needs --store (bench/fleet.sh makes a throwaway PostgreSQL)\n{USAGE}");
                return ExitCode::from(2);
            };
            let events = plan.events.min(20_000);
            match run(
                &runtime,
                mediatord_bench::fleet::run(&tools, &store, plan.runs, plan.permissions, events),
            ) {
                Ok(report) => {
                    print!("{}", report.markdown());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("fleet: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        "review" => printed(
            "review",
            run(&runtime, mediatord_bench::review::run(&tools, &plan)).map(|r| (r.markdown(), r.failures)),
        ),
        "scale" => printed(
            "scale",
            run(&runtime, mediatord_bench::scale::run(&tools, &scale))
                .map(|r| (r.markdown(), r.failures.clone())),
        ),
        "idle" => {
            let idle = mediatord_bench::idle::IdlePlan {
                runs: plan.runs,
                streams: plan.memory_subscribers,
                connections: plan.acp_memory_connections,
                only: plan.only.clone(),
                kill_at_idle,
            };
            printed(
                "idle",
                run(&runtime, mediatord_bench::idle::run(&tools, &idle)).map(|r| (r.markdown(), r.failures)),
            )
        }
        "h2" => printed(
            "h2",
            run(&runtime, mediatord_bench::h2::run(&tools, &plan)).map(|r| (r.markdown(), r.failures)),
        ),
        "smoke" => {
            let tools = tools.clone();
            let report = run(&runtime, async {
                let mut machine = report::Machine::probe(&tools).await;
                let direct = mediatord_bench::run_direct(&tools, &plan).await;
                let daemon = mediatord_bench::run_daemon(
                    mediatord_bench::procs::Kind::Mediatord,
                    &tools,
                    &plan,
                    machine.mediatord.clone(),
                )
                .await;
                machine.finish();
                report::Report { machine, plan: plan.clone(), direct, daemons: vec![daemon] }
            });
            print!("{}", report.summary_table());
            if report.failed() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
        }
        _ => {
            eprintln!("unknown command {command}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// Runs `work` until it ends or the bench is interrupted (Ctrl-C, SIGTERM). Interrupted, `work` is
/// dropped, which kills every daemon it started (each is spawned `kill_on_drop`, in a process group
/// of its own that a terminal's Ctrl-C does not reach; the daemons' guards then end their agents),
/// and the bench exits with 130.
fn run<F: std::future::Future>(runtime: &tokio::runtime::Runtime, work: F) -> F::Output {
    let finished = runtime.block_on(async {
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match terminate.as_mut() {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            out = work => Some(out),
            _ = tokio::signal::ctrl_c() => None,
            () = terminated => None,
        }
    });
    match finished {
        Some(out) => out,
        None => {
            eprintln!("bench: interrupted; the daemons it started were stopped");
            std::process::exit(130)
        }
    }
}

/// A scenario's report printed: its table, and failure if any of its runs failed (or it could not
/// run at all: `name`'s error).
fn printed(name: &str, report: mediatord_bench::Res<(String, Vec<String>)>) -> ExitCode {
    match report {
        Ok((table, failures)) => {
            print!("{table}");
            if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `mediatord-bench snapshots …`: scenario (m), no daemon.
fn snapshots(rest: &[String]) -> ExitCode {
    let (mut files, mut bytes, mut changed, mut runs) = (10_000usize, 200u64 << 20, 10usize, 3usize);
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let value = it.next().and_then(|v| v.parse::<u64>().ok());
        let Some(value) = value else {
            eprintln!("{flag} needs a number\n{USAGE}");
            return ExitCode::from(2);
        };
        match flag.as_str() {
            "--files" => files = value.max(1) as usize,
            "--bytes" => bytes = value,
            "--changed" => changed = value as usize,
            "--runs" => runs = value.max(1) as usize,
            _ => {
                eprintln!("unknown option {flag}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    match mediatord_bench::snapshots::run(files, bytes, changed, runs) {
        Ok(report) => {
            print!("{}", report.markdown());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("snapshots: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Connections per fresh-connection run of `peer-check`, and look-ups per in-process run.
const PEER_CONNECTIONS: usize = 2_000;
const PEER_LOOKUPS: usize = 20_000;

/// `peer-check`: the look-up of a connection's peer in this process (none, then 8 processes below
/// it to search), and fresh loopback connections to `tools.mediatord` with the demo agent running
/// below it (one session), `runs` times each; one line per run, in microseconds.
async fn peer_check(tools: &Tools, runs: usize) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use mediatord_bench::procs::{Daemon, Kind};
    for children in [0, 8] {
        for run in 0..runs {
            let cost = tokio::task::spawn_blocking(move || {
                mediatord_bench::peer::identify_cost(PEER_LOOKUPS, children)
            })
            .await??;
            println!("identify, {children} processes below: run {run}: {:.1} us", cost.as_secs_f64() * 1e6);
        }
    }
    let daemon = Daemon::start(Kind::Mediatord, tools, &["--ephemeral"]).await?;
    let api = mediatord_bench::api::Api::new(&daemon.base)?;
    api.create(&daemon.workspace, None).await?;
    let port: u16 = daemon.base.rsplit(':').next().and_then(|p| p.parse().ok()).ok_or("no port")?;
    for run in 0..runs {
        let cost = tokio::task::spawn_blocking(move || {
            mediatord_bench::peer::fresh_connection_cost(port, PEER_CONNECTIONS)
        })
        .await??;
        println!("fresh loopback connection (GET /health): run {run}: {:.1} us", cost.as_secs_f64() * 1e6);
    }
    daemon.stop().await;
    Ok(())
}

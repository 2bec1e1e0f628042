//! The task that owns one reviewer's program: it starts it (behind the guard, confined, as an
//! agent), writes each request as one line, matches each verdict line to its request by `id`, and
//! restarts the program when it dies, no sooner than a backoff that doubles up to
//! [`RESTART_BACKOFF_MAX`] and resets on a verdict. Every failure answers the requests it hits
//! with a failed review (`crash`, `garbage`, `timeout`): an `escalate`, never a decision.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::wire::{self, Garbage};
use crate::agent::Helper;
use crate::config::{AgentCommand, SandboxSettings};
use crate::exec::ProcessGroups;
use crate::metrics::Metrics;
use crate::permission::Review;

/// Longest verdict line read, in bytes: a verdict is an id, a word, a reason of at most
/// `wire::MAX_REASON_BYTES` and an option id. A longer line is out of protocol.
pub(super) const MAX_LINE_BYTES: usize = 16 * 1024;
/// Requests sent to one reviewer and awaiting its verdict at most; past it a request fails at once.
/// A request's waiter gives up at its deadline, so only a reviewer far behind fills it.
const MAX_IN_FLIGHT: usize = 256;
/// Lines read ahead of the task: the reader waits when the task is behind.
const LINE_QUEUE: usize = 16;
/// The first wait before a dead reviewer is started again, and the longest: a reviewer that dies
/// at once is started at most every ten seconds, and never in a busy loop.
const RESTART_BACKOFF_MIN: Duration = Duration::from_millis(100);
const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Requests in a row a running program leaves past their deadline before it counts as hung and is
/// killed and started again: one slow answer is a slow request, three in a row with nothing between
/// is a program stuck (a deadlock, a read it never finishes) that a restart may cure.
const HUNG_AFTER_TIMEOUTS: u32 = 3;

/// The program of one command reviewer, as its task needs it.
#[derive(Debug, Clone)]
pub(super) struct Program {
    pub(super) name: String,
    pub(super) command: AgentCommand,
    pub(super) sandbox: SandboxSettings,
    /// The reviewer's deadline: also how long one write to a program not reading may take.
    pub(super) deadline: Duration,
}

/// One request for the task: the line to send and where its review goes.
#[derive(Debug)]
pub(super) struct Ask {
    pub(super) request: serde_json::Value,
    pub(super) reply: oneshot::Sender<Review>,
}

/// What the reader task hands over.
#[derive(Debug)]
enum Line {
    Text(Vec<u8>),
    TooLong,
    /// Its stdout closed: the program is gone.
    End,
}

/// A running program.
struct Running {
    helper: Helper,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Line>,
}

pub(super) async fn run(
    spec: Program,
    cwd: PathBuf,
    groups: ProcessGroups,
    mut asks: mpsc::Receiver<Ask>,
    stop: CancellationToken,
    metrics: Arc<Metrics>,
) {
    let name = spec.name.clone();
    // Each request awaiting a verdict, with the instant its deadline passes.
    let mut waiting: HashMap<String, (oneshot::Sender<Review>, Instant)> = HashMap::new();
    // Requests in a row that got no verdict within their deadline; any verdict resets it.
    let mut timeouts = 0;
    let mut backoff = RESTART_BACKOFF_MIN;
    let mut not_before = Instant::now();
    let mut running = start(&spec, &cwd, &groups, &mut backoff, &mut not_before);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            ask = asks.recv() => {
                let Some(Ask { request, reply }) = ask else { break };
                // Waiters whose request was decided first leave; those past their deadline are
                // counted as timeouts below, first.
                let now = Instant::now();
                waiting.retain(|_, (tx, at)| !tx.is_closed() || *at <= now);
                if running.is_none() && Instant::now() >= not_before {
                    running = start(&spec, &cwd, &groups, &mut backoff, &mut not_before);
                }
                let Some(run) = running.as_mut() else {
                    let _ = reply.send(Review::failed("crash", format!("reviewer {name} is not running (restarting)")));
                    continue;
                };
                let Some(id) = request.get("id").and_then(|v| v.as_str()).map(str::to_owned) else { continue };
                if waiting.len() >= MAX_IN_FLIGHT {
                    let _ = reply.send(Review::failed("timeout", format!("reviewer {name} has {MAX_IN_FLIGHT} requests unanswered")));
                    continue;
                }
                let mut line = serde_json::to_vec(&request).unwrap_or_default();
                line.push(b'\n');
                // A reviewer that stops reading its stdin holds this write: bounded by the deadline
                // the waiter has anyway, then it counts as dead.
                let wrote = tokio::time::timeout(spec.deadline, run.stdin.write_all(&line)).await;
                waiting.insert(id, (reply, Instant::now() + spec.deadline));
                if !matches!(wrote, Ok(Ok(()))) {
                    tracing::debug!(reviewer = %name, "cannot write to the reviewer");
                    fail_all(&mut waiting, "crash", &format!("reviewer {name} stopped reading its requests"));
                    running = None;
                    not_before = Instant::now() + backoff;
                }
            }
            () = next_deadline(&waiting) => {
                let now = Instant::now();
                // Answered here as its waiter would (their deadlines fall on the same tick), never
                // by a dropped sender, which the waiter would read as a crash.
                let expired: Vec<String> =
                    waiting.iter().filter(|(_, (_, at))| *at <= now).map(|(id, _)| id.clone()).collect();
                for id in expired {
                    if let Some((tx, _)) = waiting.remove(&id) {
                        timeouts += 1;
                        let why = format!("reviewer {name} gave no verdict within {} ms", spec.deadline.as_millis());
                        let _ = tx.send(Review::failed("timeout", why));
                    }
                }
                if timeouts >= HUNG_AFTER_TIMEOUTS && running.is_some() {
                    tracing::warn!(reviewer = %name, timeouts, "the reviewer answered none of {timeouts} requests in a row within its deadline; killed, it is started again at the next request");
                    metrics.review_restart(&name, "hung");
                    fail_all(&mut waiting, "timeout", &format!("reviewer {name} hung; restarted"));
                    running = None;
                    not_before = now + backoff;
                    backoff = (backoff * 2).min(RESTART_BACKOFF_MAX);
                    timeouts = 0;
                }
            }
            line = next_line(&mut running) => match line {
                Line::Text(text) => match wire::parse(&text) {
                    Ok((id, review)) => {
                        backoff = RESTART_BACKOFF_MIN;
                        timeouts = 0;
                        match waiting.remove(&id) {
                            Some((tx, _)) => { let _ = tx.send(review); }
                            // Its waiter gave up (deadline) or the request was decided: too late.
                            None => tracing::debug!(reviewer = %name, request_id = %id, "a verdict for no request waiting; dropped"),
                        }
                    }
                    Err(Garbage { id: Some(id), why }) if waiting.contains_key(&id) => {
                        if let Some((tx, _)) = waiting.remove(&id) {
                            let _ = tx.send(Review::failed("garbage", format!("reviewer {name} answered garbage: {why}")));
                        }
                    }
                    // A line that names no request waiting: the stream is out of protocol, and no
                    // later line of it can be trusted to answer the request it names.
                    Err(Garbage { why, .. }) => {
                        fail_all(&mut waiting, "garbage", &format!("reviewer {name} answered garbage: {why}; restarted"));
                        running = None;
                        not_before = Instant::now() + backoff;
                        backoff = (backoff * 2).min(RESTART_BACKOFF_MAX);
                    }
                },
                Line::TooLong => {
                    fail_all(&mut waiting, "garbage", &format!("reviewer {name} wrote a line over {MAX_LINE_BYTES} bytes; restarted"));
                    running = None;
                    not_before = Instant::now() + backoff;
                    backoff = (backoff * 2).min(RESTART_BACKOFF_MAX);
                }
                Line::End => {
                    let tail = running.as_ref().map(|r| r.helper.stderr_tail()).unwrap_or_default();
                    tracing::warn!(reviewer = %name, stderr = %tail, "the reviewer exited; it is started again at the next request");
                    fail_all(&mut waiting, "crash", &format!("reviewer {name} exited"));
                    running = None;
                    not_before = Instant::now() + backoff;
                    backoff = (backoff * 2).min(RESTART_BACKOFF_MAX);
                }
            },
        }
    }
    // Dropping `running` kills the program's group: no reviewer outlives its daemon's drain.
    fail_all(&mut waiting, "crash", &format!("reviewer {name} stopped with the daemon"));
}

/// The earliest deadline of the requests awaiting a verdict; pending forever when none waits. At
/// most `MAX_IN_FLIGHT` to look through.
async fn next_deadline(waiting: &HashMap<String, (oneshot::Sender<Review>, Instant)>) {
    match waiting.values().map(|(_, at)| *at).min() {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The next line of the running program; pending forever when none runs.
async fn next_line(running: &mut Option<Running>) -> Line {
    match running {
        Some(run) => run.lines.recv().await.unwrap_or(Line::End),
        None => std::future::pending().await,
    }
}

fn fail_all(
    waiting: &mut HashMap<String, (oneshot::Sender<Review>, Instant)>,
    failure: &'static str,
    reason: &str,
) {
    for (_, (tx, _)) in waiting.drain() {
        let _ = tx.send(Review::failed(failure, reason));
    }
}

/// Starts the program; on failure logs why and schedules the next try after the backoff.
fn start(
    spec: &Program,
    cwd: &std::path::Path,
    groups: &ProcessGroups,
    backoff: &mut Duration,
    not_before: &mut Instant,
) -> Option<Running> {
    match Helper::spawn(&spec.command, cwd, groups, &spec.sandbox) {
        Ok((helper, stdin, stdout)) => {
            tracing::info!(reviewer = %spec.name, pid = helper.pid(), "reviewer started");
            let (tx, lines) = mpsc::channel(LINE_QUEUE);
            tokio::spawn(read_lines(stdout, tx));
            Some(Running { helper, stdin, lines })
        }
        Err(e) => {
            tracing::warn!(reviewer = %spec.name, error = %e, "cannot start the reviewer; its requests stay with the people");
            *not_before = Instant::now() + *backoff;
            *backoff = (*backoff * 2).min(RESTART_BACKOFF_MAX);
            None
        }
    }
}

/// Reads the program's stdout line by line, each at most [`MAX_LINE_BYTES`]; ends after the first
/// line too long (the task restarts the program) or at the end of the stream.
async fn read_lines(stdout: ChildStdout, tx: mpsc::Sender<Line>) {
    let mut reader = BufReader::new(stdout);
    let mut buf = Vec::with_capacity(256);
    loop {
        buf.clear();
        let line = match (&mut reader).take(MAX_LINE_BYTES as u64 + 1).read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => Line::End,
            Ok(_) if buf.last() == Some(&b'\n') => {
                buf.pop();
                Line::Text(std::mem::take(&mut buf))
            }
            Ok(_) if buf.len() > MAX_LINE_BYTES => Line::TooLong,
            // The stream ended inside a line: what came is judged, then the end.
            Ok(_) => Line::Text(std::mem::take(&mut buf)),
        };
        let last = matches!(line, Line::End | Line::TooLong);
        if tx.send(line).await.is_err() || last {
            return;
        }
    }
}

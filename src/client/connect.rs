//! `mediatord connect URL` (`docs/clients.md`): an editor that only launches agents over stdio (Zed,
//! JetBrains, Neovim plugins) runs this as its agent and joins a daemon's shared, mediated session.
//! ACP over stdio on one side (one JSON-RPC message per line), the daemon's `/acp` WebSocket on the
//! other.
//!
//! It relays messages as they are, with four additions that make the daemon's side survivable:
//!
//! - it asks the daemon for event ids (`_meta["mediatord/eventIds"]`) and keeps, per attached
//!   session, the id of the last event it passed on; after a dropped connection or a restarted
//!   daemon it connects again, `initialize`s again and `session/load`s each session after that id,
//!   so the editor sees every update once, in order (`docs/protocol.md#166-resuming-by-cursor`);
//! - it names each prompt (`_meta["mediatord/promptId"]`), so after a reconnect it still answers the
//!   editor's `session/prompt` from the turn's end, or says plainly that the daemon never got it;
//! - it numbers the daemon's permission requests itself, so a request asked again after a reconnect
//!   is the same request to the editor, and withdraws those decided while it was away;
//! - with `--session` an editor's `session/new` joins that session, with `--agent` it picks the agent.
//!
//! It passes the editor only what the daemon may ask of it: the editor's `initialize` goes without
//! its `fs` and `terminal` capabilities, and a request of the daemon's other than those in
//! [`EDITOR_ANSWERS`] is answered `-32601` here. The real daemon asks nothing else; an impostor
//! (an mDNS answer, a planted `daemon.json`, a man in the middle on plain http) would have the
//! editor run its commands and write its files.
//!
//! When resuming cannot be exact (the session is gone, the daemon's ring no longer holds the
//! resume point, the credential was revoked) it answers what is owed with an error, says why on
//! stderr, and exits 1: the editor sees its agent end, which it can act on.
//!
//! A client of the daemon, beside `api.rs` (the HTTP API's client) in the clients' room.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

/// Longest line taken from the editor: the daemon takes messages of up to 10 MiB; a longer line is
/// answered with an error and skipped.
const MAX_EDITOR_LINE: usize = 10 * 1024 * 1024;
/// Largest message taken from the daemon (an agent's update can be large; the daemon's own bound
/// on an agent's line is 64 MiB).
const MAX_DAEMON_MESSAGE: usize = 64 * 1024 * 1024;
/// The first pause before connecting again; it doubles up to [`RECONNECT_MAX_PAUSE`].
const RECONNECT_FIRST_PAUSE: Duration = Duration::from_millis(100);
const RECONNECT_MAX_PAUSE: Duration = Duration::from_secs(5);
/// Permission requests remembered (asked, or answered and not yet seen decided); past it the oldest
/// answered ones are forgotten.
const MAX_ASKED: usize = 256;
/// Turn ends remembered for this editor's prompts whose answer has not come (the daemon's answer
/// follows the turn's end at once; this only spans a reconnect).
const MAX_TURN_ENDS: usize = 1024;

/// The daemon's requests the editor is asked (each under the relay's own id, [`Bridge::ask`]). Any
/// other request of the daemon is answered `-32601` and never reaches the editor.
const EDITOR_ANSWERS: &[&str] =
    &[crate::acp::method::SESSION_REQUEST_PERMISSION, crate::acp::method::ELICITATION_CREATE];
/// The editor's client capabilities that are never offered to the daemon: the editor's files and
/// terminals are its machine's, and the daemon's agents have their own.
const LOCAL_CAPABILITIES: &[&str] = &["fs", "terminal"];
/// Methods of refused daemon requests said on stderr (once each), at most: an impostor's flood of
/// made-up methods fills no log.
const MAX_REFUSALS_SAID: usize = 16;

/// `mediatord connect`'s command line.
#[derive(Debug, clap::Args)]
pub struct ConnectArgs {
    /// The daemon: `http(s)://HOST:PORT` (its `/acp` is used), or a `ws(s)://` URL [default: the
    /// one the running daemon wrote to its state directory, else a daemon found on the LAN over
    /// mDNS, else http://127.0.0.1:7776]
    #[arg(value_name = "URL", env = "MEDIATORD_URL")]
    pub url: Option<String>,
    /// The state directory of the daemon to find, as `serve --state-dir` [default:
    /// $XDG_STATE_HOME/mediatord, else ~/.local/state/mediatord]
    #[arg(long, env = "MEDIATORD_STATE_DIR", hide_env_values = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Do not look for a daemon on the LAN (mDNS) when none on this machine wrote its state
    /// directory
    #[arg(long, env = "MEDIATORD_NO_MDNS", hide_env_values = true, value_parser = clap::builder::BoolishValueParser::new())]
    pub no_mdns: bool,
    /// Join this session when the editor asks for a new one (resumed if it is dormant)
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// The configured agent the editor's new sessions run on
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// The client id the editor acts as, kept across reconnects [default: connect-<random>; a
    /// device acts as its device id]
    #[arg(long, value_name = "ID")]
    pub client_id: Option<String>,
    /// The daemon's operator token. Prefer the environment: a flag shows in the process list
    #[arg(long, env = "MEDIATORD_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// A paired device's credential (`<deviceId>.<secret>`), instead of the operator's token
    #[arg(long, env = "MEDIATORD_DEVICE", hide_env_values = true, value_name = "CREDENTIAL")]
    pub device: Option<String>,
    /// A file holding a paired device's credential
    #[arg(long, env = "MEDIATORD_DEVICE_FILE", value_name = "PATH")]
    pub device_file: Option<PathBuf>,
    /// How long to keep trying to reach the daemon again after losing it (seconds)
    #[arg(long, value_name = "SECONDS", default_value = "300")]
    pub reconnect_timeout: u64,
    /// How long to wait, once the editor closed its input, for the answers to what it had sent
    /// (seconds); what is still unanswered then is answered with an error and said on stderr
    #[arg(long, value_name = "SECONDS", default_value = "60")]
    pub finish_timeout: u64,
}

/// Runs `mediatord connect` until the editor closes its input (0) or the daemon cannot be reached
/// again, or refuses (1).
pub fn main(args: ConnectArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            say(&format!("cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let state_dir = args.state_dir.clone().or_else(crate::config::env_state_dir);
    let daemon = crate::discovery::locate(args.url.as_deref(), state_dir.as_deref(), !args.no_mdns);
    if let Some(why) = &daemon.ignored {
        say(why);
    }
    // Named before anything is sent: any machine on the LAN can answer a browse.
    if let Some(line) = daemon.announcement("a URL argument") {
        say(&line);
    }
    let relay = match Bridge::new(&args, &daemon) {
        Ok(relay) => relay,
        Err(e) => {
            say(&e);
            return ExitCode::from(2);
        }
    };
    let code = runtime.block_on(
        relay.run(Duration::from_secs(args.reconnect_timeout), Duration::from_secs(args.finish_timeout)),
    );
    // The read of stdin is a blocking thread that may still wait for a line the editor will never
    // send (connect gave up): do not wait for it.
    runtime.shutdown_background();
    code
}

/// One line on stderr (the editor's log); stdout is the editor's ACP stream.
fn say(text: &str) {
    eprintln!("mediatord connect: {text}");
}

/// What ended one connection to the daemon.
#[derive(Debug)]
enum End {
    /// The editor closed its input: the relay is done.
    EditorClosed,
    /// The connection was lost; connect again and resume.
    Lost(String),
    /// Resuming cannot be exact, or the daemon refuses this client: stop.
    Fatal(String),
}

/// A request sent to the daemon, by the id the relay gave it.
#[derive(Debug)]
enum Up {
    /// The editor's, with its own id.
    Editor { id: Value, method: String, session: Option<String>, joined: Option<String> },
    /// The relay's own `initialize` after a reconnect.
    Initialize,
    /// The relay's own `session/load` after a reconnect.
    Load(String),
}

/// One of the editor's prompts, by the id the relay gave it.
#[derive(Debug)]
struct Prompt {
    /// The editor's request id.
    id: Value,
    /// The connection it was sent on.
    generation: u64,
    /// The daemon took it (its echo was seen).
    taken: bool,
    /// Its turn's end (`turn_complete`/`turn_error` data), once seen.
    ended: Option<(bool, Value)>,
}

/// A permission request the editor was asked, by the id the relay gave it (`c-<n>`), kept until
/// it is decided (its `permission_resolved`), so that when the daemon asks again after a
/// reconnect it is the same request to the editor, and an answer the drop swallowed is given again.
#[derive(Debug)]
struct Asked {
    /// The daemon's id for it on the current connection.
    upstream: Value,
    /// The daemon's request id (stable across connections).
    request_id: String,
    /// The editor's answer (`result` or `error` and its value), once given.
    answer: Option<(String, Value)>,
}

/// The bridge between the editor's stdio and the daemon's `/acp` WebSocket, across reconnects
/// ("relay" is the fleet's word, for a request passed between daemons).
struct Bridge {
    url: String,
    /// The certificate the daemon advertised (state dir or mDNS), trusted exactly over `wss://`.
    fingerprint: Option<String>,
    credential: Option<String>,
    client_id: Option<String>,
    join: Option<String>,
    agent: Option<String>,
    stdout: tokio::io::BufWriter<tokio::io::Stdout>,
    next_up: u64,
    up: HashMap<u64, Up>,
    /// The editor's `initialize` params, sent again (with event ids asked for) on each reconnect.
    init: Option<Value>,
    /// Attached sessions: their `cwd` and the id of the last event passed on.
    sessions: HashMap<String, (Value, u64)>,
    prompts: HashMap<String, Prompt>,
    asked: HashMap<String, Asked>,
    next_asked: u64,
    generation: u64,
    /// The editor's line reader just refused a line: it ends its stream once after an error (then
    /// reads on), which is not the editor closing its side.
    refused_line: bool,
    /// Methods of the daemon's requests refused so far and said on stderr (bounded by
    /// [`MAX_REFUSALS_SAID`]).
    refused_methods: Vec<String>,
    /// The editor closed its input with answers still owed: until when they are waited for.
    finishing: Option<tokio::time::Instant>,
    /// How long they are waited for (`--finish-timeout`).
    finish_for: Duration,
}

impl Bridge {
    fn new(args: &ConnectArgs, daemon: &crate::discovery::Located) -> Result<Bridge, String> {
        let credential = match (&args.device, &args.device_file, &args.token) {
            (Some(d), _, _) => Some(d.trim().to_owned()),
            (None, Some(path), _) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read the device credential in {}: {e}", path.display()))?
                    .trim()
                    .to_owned(),
            ),
            (None, None, t) => t.as_deref().map(str::trim).map(str::to_owned),
        }
        .filter(|c| !c.is_empty());
        // Given none, the sign-in `mediatord login` saved for this daemon, as the person.
        let (credential, device) = match credential {
            Some(c) => (Some(c), args.device.is_some() || args.device_file.is_some()),
            None => match crate::client::saved::credential_for(&daemon.url)? {
                Some(saved) => (Some(saved), true),
                None => (None, false),
            },
        };
        Ok(Bridge {
            url: acp_url(&daemon.url)?,
            fingerprint: daemon.fingerprint.clone(),
            credential,
            // A device acts as its device id (the daemon refuses any other); the operator's editor
            // gets one of its own, kept across reconnects.
            client_id: match (&args.client_id, device) {
                (Some(id), _) => Some(id.clone()),
                (None, true) => None,
                (None, false) => Some(format!("connect-{}", uuid::Uuid::new_v4())),
            },
            join: args.session.clone(),
            agent: args.agent.clone(),
            stdout: tokio::io::BufWriter::new(tokio::io::stdout()),
            next_up: 1,
            up: HashMap::new(),
            init: None,
            sessions: HashMap::new(),
            prompts: HashMap::new(),
            asked: HashMap::new(),
            next_asked: 1,
            generation: 0,
            refused_line: false,
            refused_methods: Vec::new(),
            finishing: None,
            finish_for: Duration::ZERO,
        })
    }

    async fn run(mut self, reconnect_for: Duration, finish_for: Duration) -> ExitCode {
        self.finish_for = finish_for;
        let mut editor =
            FramedRead::new(tokio::io::stdin(), LinesCodec::new_with_max_length(MAX_EDITOR_LINE));
        loop {
            let socket = match self.dial(reconnect_for).await {
                Ok(socket) => socket,
                Err(why) => return self.fail(&why).await,
            };
            match self.serve(socket, &mut editor).await {
                End::EditorClosed => {
                    let _ = self.stdout.flush().await;
                    return ExitCode::SUCCESS;
                }
                End::Fatal(why) => return self.fail(&why).await,
                // Nobody will send anything more: what is owed is not worth a reconnect.
                End::Lost(why) if self.finishing.is_some() => {
                    self.drop_owed(&format!("the connection to the daemon was lost ({why})")).await;
                    let _ = self.stdout.flush().await;
                    return ExitCode::SUCCESS;
                }
                End::Lost(why) => {
                    say(&format!("lost the daemon ({why}); connecting again"));
                    self.lost().await;
                }
            }
        }
    }

    /// Connects to the daemon, trying again with a growing pause for `reconnect_for`; a refusal of
    /// the credential is final at once.
    async fn dial(&mut self, reconnect_for: Duration) -> Result<Socket, String> {
        let deadline = tokio::time::Instant::now() + reconnect_for;
        let mut pause = RECONNECT_FIRST_PAUSE;
        loop {
            match self.open().await {
                Ok(socket) => return Ok(socket),
                Err(Dial::Refused(why)) => return Err(why),
                Err(Dial::Retry(why)) => {
                    if tokio::time::Instant::now() + pause > deadline {
                        return Err(format!(
                            "could not reach the daemon at {} for {reconnect_for:?}: {why}",
                            self.url
                        ));
                    }
                    tokio::time::sleep(pause).await; // a pause between attempts, not synchronisation
                    pause = (pause * 2).min(RECONNECT_MAX_PAUSE);
                }
            }
        }
    }

    async fn open(&self) -> Result<Socket, Dial> {
        let mut request =
            self.url.as_str().into_client_request().map_err(|e| Dial::Refused(e.to_string()))?;
        let headers = request.headers_mut();
        if let Some(c) = &self.credential
            && let Ok(v) = HeaderValue::from_str(&format!("Bearer {c}"))
        {
            headers.insert("authorization", v);
        }
        if let Some(id) = &self.client_id
            && let Ok(v) = HeaderValue::from_str(id)
        {
            headers.insert("x-qwen-client-id", v);
        }
        // In a fleet, the daemon reached relays the whole connection to the one holding this
        // session, so the editor's agent is never started twice (`docs/protocol.md#173`).
        if let Some(session) = self.session_for_upgrade()
            && let Ok(v) = HeaderValue::from_str(session)
        {
            headers.insert("acp-session-id", v);
        }
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_DAEMON_MESSAGE))
            .max_frame_size(Some(MAX_DAEMON_MESSAGE));
        let stream = self.transport(request.uri()).await?;
        match tokio_tungstenite::client_async_with_config(request, stream, Some(config)).await {
            Ok((socket, _)) => Ok(socket),
            Err(tungstenite::Error::Http(res)) => {
                let status = res.status().as_u16();
                let body =
                    res.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
                let why = format!("the daemon answered {status}: {body}");
                if matches!(status, 401 | 403 | 404) {
                    Err(Dial::Refused(why))
                } else {
                    Err(Dial::Retry(why))
                }
            }
            Err(e) => Err(Dial::Retry(e.to_string())),
        }
    }

    /// A connection to the daemon, over TLS for `wss://`: trusting the certificate the daemon
    /// advertised (state dir or mDNS) when it did, else the system's roots and `SSL_CERT_FILE`.
    async fn transport(&self, uri: &tokio_tungstenite::tungstenite::http::Uri) -> Result<Transport, Dial> {
        let tls = uri.scheme_str() == Some("wss");
        let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| Dial::Retry(format!("cannot reach {host}:{port}: {e}")))?;
        if !tls {
            return Ok(tokio_util::either::Either::Left(tcp));
        }
        let config = match &self.fingerprint {
            Some(fingerprint) => crate::tls::pinned_client(fingerprint),
            None => crate::tls::client_trust().map(|t| t.config),
        }
        .map_err(|e| Dial::Refused(e.to_string()))?;
        let name = rustls::pki_types::ServerName::try_from(host).map_err(|e| Dial::Refused(e.to_string()))?;
        match tokio_rustls::TlsConnector::from(config).connect(name, tcp).await {
            Ok(stream) => Ok(tokio_util::either::Either::Right(stream)),
            // Trying again cannot change the certificate: say so at once.
            Err(e) => match crate::tls::certificate_problem(&e) {
                Some(problem) => {
                    Err(Dial::Refused(super::api::untrusted(&self.url, self.fingerprint.is_some(), &problem)))
                }
                None => Err(Dial::Retry(format!("TLS: {e}"))),
            },
        }
    }

    /// The session the connection is for: the one `--session` joins, else the first attached (by
    /// id, so each reconnect names the same one).
    fn session_for_upgrade(&self) -> Option<&str> {
        self.join.as_deref().or_else(|| self.sessions.keys().min().map(String::as_str))
    }

    /// Serves one connection: resumes first (after a reconnect), then relays both ways.
    async fn serve(&mut self, socket: Socket, editor: &mut FramedRead<tokio::io::Stdin, LinesCodec>) -> End {
        self.generation += 1;
        let (mut sink, mut stream) = socket.split();
        // After a reconnect: initialize and load every session again; the editor's input waits
        // until the daemon has answered (its requests name sessions that must be attached first).
        let mut resuming = 0usize;
        if let Some(params) = self.init.clone() {
            let mut out = vec![(Up::Initialize, "initialize", with_event_ids(params))];
            for (session, (cwd, cursor)) in &self.sessions {
                let params = json!({
                    "sessionId": session, "cwd": cwd, "mcpServers": [],
                    "_meta": {"mediatord/afterEventId": cursor},
                });
                out.push((Up::Load(session.clone()), "session/load", params));
            }
            resuming = out.len();
            for (up, method, params) in out {
                let text = self.request_text(up, method, params);
                if sink.send(Message::Text(text.into())).await.is_err() {
                    return End::Lost("the connection closed at once".into());
                }
            }
        }
        loop {
            tokio::select! {
                frame = stream.next() => match frame {
                    Some(Ok(Message::Text(text))) => {
                        match self.on_daemon_text(&text, &mut resuming).await {
                            Ok(replies) => {
                                for r in replies {
                                    if sink.send(Message::Text(r.into())).await.is_err() {
                                        return End::Lost("the connection closed while writing".into());
                                    }
                                }
                            }
                            Err(end) => return end,
                        }
                    }
                    Some(Ok(Message::Close(frame))) => {
                        let (code, reason) = frame.map_or((1005, String::new()), |f| (u16::from(f.code), f.reason.to_string()));
                        return match code {
                            1008 => End::Fatal(format!("the daemon closed the connection: {reason}")),
                            _ => End::Lost(format!("closed {code} {reason}")),
                        };
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return End::Lost(e.to_string()),
                    None => return End::Lost("the connection ended".into()),
                },
                () = sleep_until_some(self.finishing) => {
                    self.drop_owed(&format!("the editor closed its input {:?} ago", self.finish_for)).await;
                    let _ = sink.send(Message::Close(None)).await;
                    return End::EditorClosed;
                }
                line = editor.next(), if resuming == 0 && self.finishing.is_none() => match line {
                    Some(Ok(line)) => {
                        if let Some(text) = self.on_editor_line(&line).await
                            && sink.send(Message::Text(text.into())).await.is_err()
                        {
                            return End::Lost("the connection closed while writing".into());
                        }
                    }
                    Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                        self.refused_line = true;
                        self.send_editor(&json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "message larger than 10 MiB"}})).await;
                    }
                    None if std::mem::take(&mut self.refused_line) => {}
                    Some(Err(LinesCodecError::Io(_))) | None => {
                        let owed = self.owed();
                        if owed == 0 {
                            let _ = sink.send(Message::Close(None)).await;
                            return End::EditorClosed;
                        }
                        // What it sent is finished: its answers still go to its output.
                        say(&format!(
                            "the editor closed its input; waiting up to {:?} for the answers to its {owed} request(s) still open",
                            self.finish_for
                        ));
                        self.finishing = Some(tokio::time::Instant::now() + self.finish_for);
                    }
                },
            }
            if self.finishing.is_some() && self.owed() == 0 {
                let _ = sink.send(Message::Close(None)).await;
                return End::EditorClosed;
            }
        }
    }

    /// The editor's requests not answered yet: sent on this connection, or prompts sent on an
    /// earlier one that the relay answers from their turn's end.
    fn owed(&self) -> usize {
        let sent = self.up.values().filter(|up| matches!(up, Up::Editor { .. })).count();
        let generation = self.generation;
        sent + self.prompts.values().filter(|p| p.generation < generation).count()
    }

    /// The ids of the editor's requests not answered yet, each once (a prompt sent on this
    /// connection is both in flight and remembered), forgotten here: the caller answers them.
    fn take_owed(&mut self) -> Vec<Value> {
        let mut ids: Vec<Value> = Vec::new();
        let in_flight = self.up.drain().filter_map(|(_, up)| match up {
            Up::Editor { id, .. } => Some(id),
            _ => None,
        });
        for id in in_flight.chain(self.prompts.drain().map(|(_, p)| p.id)) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }

    /// Answers what the editor is still owed with an error, and says so on stderr: `why` it will
    /// not come.
    async fn drop_owed(&mut self, why: &str) {
        let ids = self.take_owed();
        if ids.is_empty() {
            return;
        }
        let shown: Vec<String> = ids.iter().map(Value::to_string).collect();
        say(&format!(
            "dropped the editor's request(s) {} unanswered: {why}",
            crate::text::escape(&shown.join(", "))
        ));
        for id in ids {
            let error = json!({"code": -32603, "message": format!("mediatord connect stopped before the answer: {why}"), "data": {"code": "connection_lost"}});
            self.send_editor(&json!({"jsonrpc": "2.0", "id": id, "error": error})).await;
        }
    }

    fn request_text(&mut self, up: Up, method: &str, params: Value) -> String {
        let id = self.next_up;
        self.next_up += 1;
        self.up.insert(id, up);
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    }

    /// One line from the editor; what to send the daemon, if anything.
    async fn on_editor_line(&mut self, line: &str) -> Option<String> {
        let Ok(Value::Object(mut m)) = serde_json::from_str::<Value>(line) else {
            if !line.trim().is_empty() {
                self.send_editor(&json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "not a JSON-RPC message"}})).await;
            }
            return None;
        };
        let method = m.get("method").and_then(Value::as_str).map(str::to_owned);
        match (method, m.remove("id")) {
            // An answer to one of the daemon's requests, under the relay's id for it: kept until the
            // request is seen decided, in case the connection drops before the daemon has it.
            (None, Some(id)) => {
                let asked = id.as_str().and_then(|k| self.asked.get_mut(k))?;
                if asked.answer.is_some() {
                    return None;
                }
                let (key, value) = m.iter().find(|(k, _)| *k == "result" || *k == "error")?;
                asked.answer = Some((key.clone(), value.clone()));
                m.insert("id".into(), asked.upstream.clone());
                Some(Value::Object(m).to_string())
            }
            (Some(method), Some(id)) => {
                let mut params = m.remove("params").unwrap_or_else(|| json!({}));
                let (method, joined) = self.rewrite(&method, &mut params);
                let session = params.get("sessionId").and_then(Value::as_str).map(str::to_owned);
                if method == "initialize" {
                    without_local_capabilities(&mut params);
                    self.init = Some(params.clone());
                    params = with_event_ids(params);
                }
                if method == "session/prompt" {
                    let prompt_id = uuid::Uuid::new_v4().to_string();
                    set_meta(&mut params, "mediatord/promptId", json!(prompt_id));
                    let prompt =
                        Prompt { id: id.clone(), generation: self.generation, taken: false, ended: None };
                    self.prompts.insert(prompt_id, prompt);
                }
                if matches!(method.as_str(), "session/load" | "session/resume")
                    && let Some(session) = &session
                {
                    let cwd = params.get("cwd").cloned().unwrap_or(Value::Null);
                    self.sessions.entry(session.clone()).or_insert((Value::Null, 0)).0 = cwd;
                }
                let up = Up::Editor { id, method: method.clone(), session, joined };
                Some(self.request_text(up, &method, params))
            }
            (Some(_), None) => Some(Value::Object(m).to_string()),
            (None, None) => None,
        }
    }

    /// What the relay changes in an editor's request: `session/new` joins `--session` (as a
    /// `session/resume`: no replay, it resumes a dormant session), or picks `--agent`. Returns the
    /// method to send and the session joined.
    fn rewrite(&self, method: &str, params: &mut Value) -> (String, Option<String>) {
        if method != "session/new" {
            return (method.to_owned(), None);
        }
        if let Some(join) = &self.join {
            let cwd = params.get("cwd").cloned().unwrap_or(Value::Null);
            *params = json!({"sessionId": join, "cwd": cwd, "mcpServers": []});
            return ("session/resume".to_owned(), Some(join.clone()));
        }
        if let Some(agent) = &self.agent {
            set_meta(params, "mediatord/agent", json!(agent));
        }
        (method.to_owned(), None)
    }

    /// One message from the daemon; what to send back to it (answers the relay gives itself).
    async fn on_daemon_text(&mut self, text: &str, resuming: &mut usize) -> Result<Vec<String>, End> {
        let Ok(mut m) = serde_json::from_str::<Value>(text) else { return Ok(Vec::new()) };
        // An event's message comes in an envelope naming the session and the event's id: the
        // cursor moves once the message is handled.
        let mut cursor = None;
        let mut prompt = None;
        if m["method"] == "_mediatord/event" {
            let mut params = m["params"].take();
            let (Some(session), Some(event_id)) = (params["sessionId"].as_str(), params["eventId"].as_u64())
            else {
                return Ok(Vec::new());
            };
            cursor = Some((session.to_owned(), event_id));
            prompt = params["promptId"].as_str().map(str::to_owned);
            m = params["message"].take();
        }
        let out = match m.get("id").and_then(Value::as_u64).filter(|_| m.get("method").is_none()) {
            Some(id) => match self.up.remove(&id) {
                Some(up) => self.answered(up, m, resuming).await.map(|()| Vec::new())?,
                None => Vec::new(),
            },
            None => self.message(m, prompt.as_deref()).await?,
        };
        if let Some((session, event_id)) = cursor {
            let entry = self.sessions.entry(session).or_insert((Value::Null, 0));
            entry.1 = entry.1.max(event_id);
        }
        Ok(out)
    }

    /// The daemon's answer to request `up`.
    async fn answered(&mut self, up: Up, mut m: Value, resuming: &mut usize) -> Result<(), End> {
        let was_resuming = *resuming > 0;
        match up {
            Up::Initialize => {
                if m.get("error").is_some() {
                    return Err(End::Fatal(format!("the daemon refused initialize: {}", m["error"])));
                }
                *resuming = resuming.saturating_sub(1);
            }
            Up::Load(session) => {
                if m.get("error").is_some() {
                    return Err(End::Fatal(format!(
                        "session {session} could not be resumed: {}",
                        m["error"]["message"]
                    )));
                }
                *resuming = resuming.saturating_sub(1);
            }
            Up::Editor { id, method, session, joined } => {
                if method == "session/prompt" {
                    // Answered by the daemon: the relay's own record of it goes.
                    self.prompts.retain(|_, p| p.id != id || p.generation != self.generation);
                }
                if let Some(result) = m.get_mut("result").filter(|r| r.is_object()) {
                    let attached = match method.as_str() {
                        "session/new" => result.get("sessionId").and_then(Value::as_str).map(str::to_owned),
                        "session/resume" | "session/load" => joined.clone().or(session.clone()),
                        _ => None,
                    };
                    if let Some(joined) = &joined {
                        result["sessionId"] = json!(joined);
                    }
                    if let Some(sid) = attached {
                        let start = result
                            .pointer("/_meta/mediatord/startEventId")
                            .and_then(Value::as_u64)
                            .unwrap_or(0);
                        let cwd =
                            result.pointer("/_meta/mediatord/workspaceCwd").cloned().unwrap_or(Value::Null);
                        let entry = self.sessions.entry(sid).or_insert((Value::Null, 0));
                        entry.0 = cwd;
                        entry.1 = entry.1.max(start);
                    }
                }
                m["id"] = id;
                self.send_editor(&m).await;
            }
        }
        if was_resuming && *resuming == 0 {
            self.resumed().await;
        }
        Ok(())
    }

    /// After a reconnect's resume: a prompt sent on an earlier connection that the daemon never
    /// took (no echo in what it replayed) is answered with an error the editor can act on.
    async fn resumed(&mut self) {
        let generation = self.generation;
        let lost: Vec<String> = self
            .prompts
            .iter()
            .filter(|(_, p)| p.generation < generation && !p.taken && p.ended.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        for key in lost {
            if let Some(p) = self.prompts.remove(&key) {
                let error = json!({"code": -32603, "message": "the connection to the daemon was lost before it received this prompt: send it again", "data": {"code": "prompt_not_received"}});
                self.send_editor(&json!({"jsonrpc": "2.0", "id": p.id, "error": error})).await;
            }
        }
    }

    /// A message of the daemon's own (inside an event envelope, or not).
    async fn message(&mut self, m: Value, prompt: Option<&str>) -> Result<Vec<String>, End> {
        let method = m.get("method").and_then(Value::as_str).unwrap_or_default().to_owned();
        if let Some(id) = m.get("id")
            && !EDITOR_ANSWERS.contains(&method.as_str())
        {
            return Ok(vec![self.refuse(id, &method)]);
        }
        match method.as_str() {
            "session/update" => {
                let echo =
                    m.pointer("/params/update/_meta/source").and_then(Value::as_str) == Some("bridge-echo");
                if echo && let Some(p) = prompt.and_then(|p| self.prompts.get_mut(p)) {
                    // The daemon took this editor's prompt; the editor shows its prompt itself.
                    p.taken = true;
                    return Ok(Vec::new());
                }
                self.send_editor(&m).await;
            }
            "_qwen/notify" => return self.daemon_event(&m["params"]).await.map(|()| Vec::new()),
            "session/request_permission" | "elicitation/create" => return Ok(self.ask(m).await),
            "$/cancel_request" => {
                let upstream = m.pointer("/params/requestId").cloned().unwrap_or(Value::Null);
                let ours = self.asked.iter().find(|(_, a)| a.upstream == upstream).map(|(k, _)| k.clone());
                if let Some(ours) = ours {
                    self.withdraw(&ours).await;
                }
            }
            "" => {}
            // Extension notifications of the daemon's own stay here.
            m_ if m_.starts_with("_mediatord/") => {}
            _ => self.send_editor(&m).await,
        }
        Ok(Vec::new())
    }

    /// One of the daemon's events: the relay follows turns and decisions; the editor is not sent
    /// them (an ACP client has no use for them).
    async fn daemon_event(&mut self, params: &Value) -> Result<(), End> {
        match params["kind"].as_str().unwrap_or_default() {
            kind @ ("turn_complete" | "turn_error") => {
                let Some(prompt_id) = params["promptId"].as_str() else { return Ok(()) };
                let current = self.generation;
                let Some(p) = self.prompts.get_mut(prompt_id) else { return Ok(()) };
                p.taken = true;
                p.ended = Some((kind == "turn_complete", params["data"].clone()));
                // Sent on an earlier connection: this one's daemon side does not know it, so the
                // relay answers from the turn's end.
                if p.generation < current
                    && let Some(p) = self.prompts.remove(prompt_id)
                {
                    self.answer_from_turn(p).await;
                }
                if self.prompts.len() > MAX_TURN_ENDS {
                    self.prompts.retain(|_, p| p.ended.is_none());
                }
            }
            "permission_resolved" => {
                let request_id = params["data"]["requestId"].as_str().unwrap_or_default();
                let ours =
                    self.asked.iter().find(|(_, a)| a.request_id == request_id).map(|(k, _)| k.clone());
                if let Some(ours) = ours {
                    self.withdraw(&ours).await;
                }
            }
            "state_resync_required" => {
                return Err(End::Fatal(format!(
                    "the daemon no longer holds the events this editor missed ({}): reopen the session",
                    params["data"]
                )));
            }
            _ => {}
        }
        Ok(())
    }

    /// The daemon asks the editor to decide: under the relay's own id, the same one when it asks
    /// again after a reconnect (and if the editor had answered, its answer goes again).
    async fn ask(&mut self, mut m: Value) -> Vec<String> {
        let upstream = m["id"].take();
        let request_id = m
            .pointer("/params/_meta/mediatord~1requestId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if let Some(asked) =
            self.asked.values_mut().find(|a| !request_id.is_empty() && a.request_id == request_id)
        {
            asked.upstream = upstream.clone();
            return match &asked.answer {
                Some((key, value)) => vec![json!({"jsonrpc": "2.0", "id": upstream, key: value}).to_string()],
                None => Vec::new(),
            };
        }
        if self.asked.len() >= MAX_ASKED {
            let answered = self.asked.iter().find(|(_, a)| a.answer.is_some()).map(|(k, _)| k.clone());
            if let Some(k) = answered {
                self.asked.remove(&k);
            }
        }
        let ours = format!("c-{}", self.next_asked);
        self.next_asked += 1;
        self.asked.insert(ours.clone(), Asked { upstream, request_id, answer: None });
        m["id"] = json!(ours);
        self.send_editor(&m).await;
        Vec::new()
    }

    /// The answer to a request of the daemon's the editor is never asked ([`EDITOR_ANSWERS`]); the
    /// first of each method is said on stderr.
    fn refuse(&mut self, id: &Value, method: &str) -> String {
        if self.refused_methods.len() < MAX_REFUSALS_SAID && !self.refused_methods.iter().any(|m| m == method)
        {
            self.refused_methods.push(method.to_owned());
            say(&format!(
                "refused the daemon's {} request: only permission requests and questions are passed to \
                 the editor (a mediatord daemon sends no other; is {} the daemon you meant?)",
                crate::text::escape(method),
                self.url
            ));
        }
        let error = json!({"code": -32601, "message": format!("mediatord connect does not pass {method} to the editor")});
        json!({"jsonrpc": "2.0", "id": id, "error": error}).to_string()
    }

    /// A request was decided (or withdrawn by the daemon): the editor's is withdrawn too, unless it
    /// answered it already.
    async fn withdraw(&mut self, ours: &str) {
        if let Some(asked) = self.asked.remove(ours)
            && asked.answer.is_none()
        {
            let cancel =
                json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": ours}});
            self.send_editor(&cancel).await;
        }
    }

    /// The editor's answer to a prompt, from its turn's end.
    async fn answer_from_turn(&mut self, p: Prompt) {
        let Some((complete, data)) = p.ended else { return };
        let message = if complete {
            let stop = data["stopReason"].as_str().unwrap_or("end_turn");
            json!({"jsonrpc": "2.0", "id": p.id, "result": {"stopReason": stop}})
        } else {
            let code = data["code"].as_str().unwrap_or("agent_error");
            let rpc = match code {
                "daemon_draining" => -32005,
                "session_closed" => -32002,
                _ => -32603,
            };
            let text = data["message"].as_str().unwrap_or("the turn failed");
            json!({"jsonrpc": "2.0", "id": p.id, "error": {"code": rpc, "message": text, "data": {"code": code}}})
        };
        self.send_editor(&message).await;
    }

    /// The connection is lost: what the editor is owed and will not get is answered now.
    async fn lost(&mut self) {
        let owed: Vec<Up> = self.up.drain().map(|(_, up)| up).collect();
        for up in owed {
            let Up::Editor { id, method, .. } = up else { continue };
            if method == "session/prompt" {
                // Answered from its turn's end: already seen, or after the resume.
                let seen = self
                    .prompts
                    .iter()
                    .find(|(_, p)| p.id == id)
                    .map(|(k, p)| (k.clone(), p.ended.is_some()));
                if let Some((key, true)) = seen
                    && let Some(p) = self.prompts.remove(&key)
                {
                    self.answer_from_turn(p).await;
                }
                continue;
            }
            let error = json!({"code": -32603, "message": "the connection to the daemon was lost before the answer: it may or may not have been done", "data": {"code": "connection_lost"}});
            self.send_editor(&json!({"jsonrpc": "2.0", "id": id, "error": error})).await;
        }
    }

    /// Gives up: answers everything owed with an error, says why, exits 1.
    async fn fail(&mut self, why: &str) -> ExitCode {
        say(why);
        for id in self.take_owed() {
            let error = json!({"code": -32603, "message": format!("mediatord connect stopped: {why}"), "data": {"code": "connection_lost"}});
            self.send_editor(&json!({"jsonrpc": "2.0", "id": id, "error": error})).await;
        }
        let _ = self.stdout.flush().await;
        ExitCode::FAILURE
    }

    async fn send_editor(&mut self, m: &Value) {
        let mut line = m.to_string();
        line.push('\n');
        if self.stdout.write_all(line.as_bytes()).await.is_err() || self.stdout.flush().await.is_err() {
            // The editor is gone; the next read of its input ends the relay.
        }
    }
}

/// Resolves at `deadline`, never without one.
async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A plain or TLS connection to the daemon.
type Transport =
    tokio_util::either::Either<tokio::net::TcpStream, tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;
type Socket = tokio_tungstenite::WebSocketStream<Transport>;

/// Why a connection attempt failed.
enum Dial {
    /// Worth trying again (the daemon is down, restarting, or full).
    Retry(String),
    /// Final (the credential or the address is refused).
    Refused(String),
}

/// The daemon's `/acp` WebSocket URL from what the user gave.
fn acp_url(url: &str) -> Result<String, String> {
    let url = url.trim().trim_end_matches('/');
    let ws = if let Some(rest) = url.strip_prefix("http://") {
        format!("ws://{rest}")
    } else if let Some(rest) = url.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if url.starts_with("ws://") || url.starts_with("wss://") {
        url.to_owned()
    } else {
        return Err(format!("{url}: expected http(s)://HOST:PORT or ws(s)://HOST:PORT/acp"));
    };
    Ok(if ws.ends_with("/acp") { ws } else { format!("{ws}/acp") })
}

/// An `initialize`'s params without the capabilities that would let the daemon act on the editor's
/// machine ([`LOCAL_CAPABILITIES`]).
fn without_local_capabilities(params: &mut Value) {
    if let Some(caps) = params.get_mut("clientCapabilities").and_then(Value::as_object_mut) {
        for name in LOCAL_CAPABILITIES {
            caps.remove(*name);
        }
    }
}

/// `params` with the daemon asked for event ids (what resuming by cursor needs).
fn with_event_ids(mut params: Value) -> Value {
    set_meta(&mut params, "mediatord/eventIds", json!(true));
    params
}

fn set_meta(params: &mut Value, key: &str, value: Value) {
    if !params.is_object() {
        *params = json!({});
    }
    if !params.get("_meta").is_some_and(Value::is_object) {
        params["_meta"] = Value::Object(Map::new());
    }
    params["_meta"][key] = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_acp_url_comes_from_the_daemons_address() {
        assert_eq!(acp_url("http://127.0.0.1:7776").as_deref(), Ok("ws://127.0.0.1:7776/acp"));
        assert_eq!(acp_url("http://h:1/").as_deref(), Ok("ws://h:1/acp"));
        assert_eq!(acp_url("ws://h:1/acp").as_deref(), Ok("ws://h:1/acp"));
        assert_eq!(acp_url("https://h:1").as_deref(), Ok("wss://h:1/acp"));
        assert_eq!(acp_url("wss://h/acp").as_deref(), Ok("wss://h/acp"));
        assert!(acp_url("h:1").is_err());
    }

    /// A relay as `connect http://h:1 --client-id c` makes it, not connected.
    fn relay() -> Bridge {
        let args = ConnectArgs {
            url: Some("http://h:1".into()),
            state_dir: None,
            no_mdns: true,
            session: None,
            agent: None,
            client_id: Some("c".into()),
            token: None,
            device: None,
            device_file: None,
            reconnect_timeout: 1,
            finish_timeout: 1,
        };
        let daemon = crate::discovery::Located {
            url: "http://h:1".into(),
            fingerprint: None,
            source: crate::discovery::Source::Explicit,
            ignored: None,
        };
        Bridge::new(&args, &daemon).expect("relay")
    }

    #[tokio::test]
    async fn the_upgrade_names_the_session_joined_else_the_first_attached() {
        let mut relay = relay();
        assert_eq!(relay.session_for_upgrade(), None, "nothing to name before a session");
        relay.sessions.insert("s-b".into(), (Value::Null, 3));
        relay.sessions.insert("s-a".into(), (Value::Null, 1));
        assert_eq!(relay.session_for_upgrade(), Some("s-a"), "the same one at every reconnect");
        relay.join = Some("s-z".into());
        assert_eq!(relay.session_for_upgrade(), Some("s-z"));
    }

    /// What the editor is owed: each of its requests in flight once (a prompt of this connection
    /// is both in flight and remembered), the relay's own requests never, and prompts sent on an
    /// earlier connection until their turn ends. Dropping it answers each of them.
    #[tokio::test]
    async fn what_is_owed_counts_each_open_request_once_and_earlier_prompts_until_their_turn_ends() {
        let mut relay = relay();
        assert_eq!(relay.owed(), 0);
        relay.generation = 2;
        let editor = |id: u64, method: &str| Up::Editor {
            id: json!(id),
            method: method.into(),
            session: None,
            joined: None,
        };
        let prompt = |id: u64, generation| Prompt { id: json!(id), generation, taken: true, ended: None };
        relay.up.insert(1, editor(7, "session/set_mode"));
        relay.up.insert(2, Up::Load("s".into()));
        relay.up.insert(3, editor(8, "session/prompt"));
        relay.prompts.insert("p8".into(), prompt(8, 2));
        relay.prompts.insert("p5".into(), prompt(5, 1));
        relay.prompts.insert("p4".into(), prompt(4, 0));
        assert_eq!(relay.owed(), 4, "7 and 8 in flight, 5 and 4 from earlier connections");
        let mut ids: Vec<u64> = relay.take_owed().iter().filter_map(Value::as_u64).collect();
        ids.sort_unstable();
        assert_eq!(ids, [4, 5, 7, 8], "each once");
        assert_eq!(relay.owed(), 0);
    }

    /// A request of the daemon's the editor is never asked is answered `-32601`; each method is
    /// said on stderr once, and at most [`MAX_REFUSALS_SAID`] of them (an impostor's flood of
    /// made-up methods fills no log).
    #[tokio::test]
    async fn a_refused_method_is_said_once_and_a_flood_of_them_is_bounded() {
        let mut relay = relay();
        let answer: Value =
            serde_json::from_str(&relay.refuse(&json!(1), "fs/read_text_file")).expect("JSON");
        assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (json!(1), json!(-32601)));
        relay.refuse(&json!(2), "fs/read_text_file");
        assert_eq!(relay.refused_methods, ["fs/read_text_file"], "said once");
        for i in 0..MAX_REFUSALS_SAID + 4 {
            relay.refuse(&json!(i), &format!("made/up{i}"));
        }
        assert_eq!(relay.refused_methods.len(), MAX_REFUSALS_SAID);
        assert_eq!(relay.refused_methods[1], "made/up0");
    }

    #[test]
    fn meta_is_added_without_losing_what_was_there() {
        let p = with_event_ids(json!({"protocolVersion": 1, "_meta": {"x": 1}}));
        assert_eq!(p, json!({"protocolVersion": 1, "_meta": {"x": 1, "mediatord/eventIds": true}}));
        assert_eq!(with_event_ids(Value::Null), json!({"_meta": {"mediatord/eventIds": true}}));
    }
}

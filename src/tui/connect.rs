//! Reaching the daemon as someone: which credential is sent (a paired device's, else the operator's
//! token), which client id (a device's is its device id; the operator names itself), who the daemon
//! says we are (`GET /capabilities`), and a session's events followed across dropped connections
//! (`Last-Event-ID`, docs/protocol.md §5.3) into a bounded channel.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::client::api::{Endpoint, Frame, OpenError, segment, unanswered};

/// Frames queued between the stream's task and the screen: the task waits when the screen is
/// behind, and the daemon's ring keeps what it has not sent (a lagging stream is its business).
pub(crate) const STREAM_QUEUE: usize = 1024;
/// The first wait before reconnecting, doubled after each failure up to [`RECONNECT_MAX`].
const RECONNECT_MIN: Duration = Duration::from_millis(250);
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// A login to the daemon, as the command line gave it: which daemon (and the certificate to
/// trust), with which credential, as which client id. Not a connection: each call opens its own.
#[derive(Clone, Default)]
pub struct Login {
    pub url: String,
    /// The certificate to trust over https, as the daemon advertised it (its state dir, or mDNS);
    /// `None`: the system's roots.
    pub fingerprint: Option<String>,
    /// The operator's token (`MEDIATORD_TOKEN`).
    pub token: Option<String>,
    /// A paired device's credential (`MEDIATORD_DEVICE`, or read from `--device-file`); wins over
    /// the token.
    pub device: Option<String>,
    /// The client id the operator's token votes and prompts as (a device's is its id).
    pub client_id: Option<String>,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("device", &self.device.as_ref().map(|_| "…"))
            .field("client_id", &self.client_id)
            .finish()
    }
}

/// A client id from a user name: the characters the daemon accepts
/// (`^[A-Za-z0-9._:-]{1,128}$`), the rest as `-`.
pub fn default_client_id(user: Option<&str>) -> String {
    let user: String = user
        .unwrap_or("")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' })
        .take(100)
        .collect();
    if user.is_empty() { "tui".to_owned() } else { format!("tui:{user}") }
}

/// Who the daemon says the caller is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// `operator as tui:me`, `device my-laptop (observer)`.
    pub shown: String,
    /// Voters and the operator may vote, prompt, cancel and switch; observers may not.
    pub may_write: bool,
    /// The client id the daemon knows this client by (a device's id), when known.
    pub client_id: Option<String>,
}

impl Login {
    /// The target to call, with the credential and client id to send.
    pub(crate) fn target(&self) -> Result<Endpoint, String> {
        let target = match &self.device {
            Some(device) => Endpoint::new(&self.url, Some(device), None),
            None => Endpoint::new(&self.url, self.token.as_deref(), self.client_id.as_deref()),
        };
        target.map(|t| t.pinned(self.fingerprint.clone()))
    }
}

/// `GET /capabilities`: who we are and the daemon's answer (its workspaces, agents). When the
/// daemon cannot be reached or refuses the credential, the error says what to do about it.
pub(crate) async fn identify(conn: &Login, target: &Endpoint) -> Result<(Identity, Value), String> {
    let (status, answer) = target.call("GET", "/capabilities", None).await.map_err(|e| unanswered(&e))?;
    match status {
        200 => {}
        401 => return Err(conn.refused(target.url())),
        s => return Err(format!("the daemon answered {s}: {}", error_text(&answer))),
    }
    let id = &answer["identity"];
    let scope: Vec<&str> = id["scope"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let may_write = scope.contains(&"write") || id.get("scope").is_none();
    let identity = match id["kind"].as_str() {
        Some("device") => Identity {
            shown: format!(
                "device {} ({})",
                id["name"].as_str().unwrap_or("?"),
                id["role"].as_str().unwrap_or(if may_write { "voter" } else { "observer" })
            ),
            may_write,
            client_id: id["deviceId"].as_str().map(str::to_owned),
        },
        _ => Identity {
            shown: format!("operator as {}", target.client_id().unwrap_or("?")),
            may_write,
            client_id: target.client_id().map(str::to_owned),
        },
    };
    Ok((identity, answer))
}

impl Login {
    /// A 401, said as what to fix: the credential that was sent (a device's, the operator's
    /// token, or none) and where the right one comes from.
    fn refused(&self, url: &str) -> String {
        let sent = |c: &Option<String>| c.as_deref().is_some_and(|c| !c.trim().is_empty());
        if sent(&self.device) {
            format!(
                "the daemon at {url} refused the device credential: the device was revoked, or paired with another daemon. Pair it again (`mediatord pair` where the daemon runs) and give the new credential in MEDIATORD_DEVICE or --device-file"
            )
        } else if sent(&self.token) {
            format!(
                "the daemon at {url} refused the token: MEDIATORD_TOKEN (or --token) must be the operator token the daemon was started with (its --token or MEDIATORD_TOKEN)"
            )
        } else {
            format!(
                "the daemon at {url} needs a credential: set MEDIATORD_TOKEN to its operator token, or MEDIATORD_DEVICE (or --device-file) to a paired device's credential (`mediatord pair`)"
            )
        }
    }
}

/// The daemon's words in an error answer (`error`), or the whole answer.
pub(crate) fn error_text(answer: &Value) -> String {
    answer["error"].as_str().map_or_else(|| answer.to_string(), str::to_owned)
}

/// A call whose success is any 2xx: `Ok(answer)`, or `Err` with the daemon's words.
pub(crate) async fn expect_ok(
    target: &Endpoint,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: Option<&Value>,
) -> Result<Value, String> {
    let (status, answer) =
        target.call_with(method, path, extra, body, crate::client::api::MAX_STATE_BYTES).await?;
    if (200..300).contains(&status) { Ok(answer) } else { Err(format!("{status}: {}", error_text(&answer))) }
}

/// What the stream's task reports.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Incoming {
    /// A connection was opened (its replay follows).
    Opened,
    Frame(Frame),
    /// The connection dropped; the task reconnects after the reason is shown.
    Dropped(String),
    /// The stream ended for good: the session ended, is history, or is unknown.
    Finished(Option<String>),
}

/// Whether a frame ends the session's stream for good.
fn is_terminal(frame: &Frame) -> bool {
    matches!(frame.event.as_str(), "session_closed" | "session_died")
}

/// Follows the events of `session_id` from after `from` into `tx`, reconnecting with the last id
/// forwarded after a drop, until the session ends, the receiver is gone, or the daemon refuses.
pub(crate) async fn follow(target: Endpoint, session_id: String, from: u64, tx: mpsc::Sender<Incoming>) {
    let mut last = from;
    let mut wait = RECONNECT_MIN;
    loop {
        let why = match target.events(&session_id, Some(last)).await {
            Ok(mut events) => {
                if tx.send(Incoming::Opened).await.is_err() {
                    return;
                }
                wait = RECONNECT_MIN;
                loop {
                    match events.next().await {
                        Some(Ok(frame)) => {
                            if let Some(id) = frame.id {
                                last = last.max(id);
                            }
                            let terminal = is_terminal(&frame);
                            let history =
                                frame.event == "replay_complete" && frame.data.contains("\"sessionState\"");
                            let evicted = frame.event == "client_evicted";
                            if tx.send(Incoming::Frame(frame)).await.is_err() {
                                return;
                            }
                            if terminal || history {
                                let _ = tx.send(Incoming::Finished(None)).await;
                                return;
                            }
                            if evicted {
                                break "evicted: the stream fell behind".to_owned();
                            }
                        }
                        Some(Err(e)) => break e,
                        None => break "the stream ended".to_owned(),
                    }
                }
            }
            Err(OpenError::Refused(404, _)) => {
                let _ = tx
                    .send(Incoming::Finished(Some(format!("no session {session_id} on this daemon"))))
                    .await;
                return;
            }
            Err(OpenError::Refused(status @ (400 | 401 | 403), answer)) => {
                let _ = tx
                    .send(Incoming::Finished(Some(format!(
                        "the daemon refused the stream ({status}): {}",
                        error_text(&answer)
                    ))))
                    .await;
                return;
            }
            Err(OpenError::Refused(status, answer)) => format!("{status}: {}", error_text(&answer)),
            Err(OpenError::Unreachable(e)) => e,
        };
        if tx.send(Incoming::Dropped(why)).await.is_err() {
            return;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RECONNECT_MAX);
    }
}

/// The path of a session's route.
pub(crate) fn session_path(session_id: &str, rest: &str) -> String {
    format!("/session/{}{rest}", segment(session_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_name_becomes_a_client_id_the_daemon_accepts() {
        assert_eq!(default_client_id(Some("alice")), "tui:alice");
        assert_eq!(default_client_id(Some("Dr Who@host")), "tui:Dr-Who-host");
        assert_eq!(default_client_id(None), "tui");
        assert_eq!(default_client_id(Some(&"x".repeat(500))).len(), 104);
    }

    #[test]
    fn a_device_credential_wins_and_sends_no_client_id() {
        let c = Login {
            url: "http://127.0.0.1:1".into(),
            fingerprint: None,
            token: Some("op".into()),
            device: Some("dev-1.s".into()),
            client_id: Some("tui:me".into()),
        };
        assert_eq!(c.target().expect("target").client_id(), None);
        let c = Login { device: None, ..c };
        assert_eq!(c.target().expect("target").client_id(), Some("tui:me"));
        assert!(!format!("{c:?}").contains("op\""), "{c:?}");
    }
}

//! The command line's client for a running daemon (`mediatord pair`, `devices`, `attach`, `watch`,
//! `approve`): JSON requests over HTTP/1.1 with a credential and a client id, and a session's
//! event stream read frame by frame, to where [`crate::discovery::locate`] found the daemon. Over
//! https it trusts the certificate the daemon advertised (by fingerprint), else the system's roots
//! and `SSL_CERT_FILE`/`SSL_CERT_DIR`.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use http_body_util::{BodyDataStream, BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, header};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Largest answer read by `pair` and `devices`: a device list of 256 devices is a few tens of KiB.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// Largest answer read for a session's state (its pending requests, a listing of every session):
/// 64 pending requests of up to an agent line each would be more, but a request that large is
/// also on the event stream, which the terminal client reads first.
pub const MAX_STATE_BYTES: usize = 16 * 1024 * 1024;
/// Largest event frame read from a stream: an event holds at most one agent line (64 MiB,
/// `MAX_AGENT_LINE`) re-serialised in its envelope, which can grow with escapes.
pub const MAX_EVENT_BYTES: usize = 96 * 1024 * 1024;
/// The whole exchange's deadline: the daemon answers these routes at once (a prompt is sent with
/// `Prefer: respond-async`).
const TIMEOUT: Duration = Duration::from_secs(30);
/// How long an event stream may say nothing before it counts as dropped: the daemon sends a
/// heartbeat after 15 s of silence, so three missed ones.
pub const STREAM_SILENCE: Duration = Duration::from_secs(45);

/// Why a call got no answer the command can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoAnswer {
    /// Nothing answered, or the exchange broke off (names the address): most often the daemon is
    /// not running, or listens at another address.
    Unreachable(String),
    /// Something answered over https with a certificate this client does not trust: the whole
    /// message, with what to do ([`untrusted`]). Asking whether the daemon runs would mislead.
    Untrusted(String),
}

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoAnswer::Unreachable(why) | NoAnswer::Untrusted(why) => f.write_str(why),
        }
    }
}

impl From<NoAnswer> for String {
    fn from(e: NoAnswer) -> String {
        e.to_string()
    }
}

/// A call that got no answer, said with what to do: most often the daemon is not running, or
/// listens at another address; a certificate not trusted says so instead.
pub fn unanswered(e: &NoAnswer) -> String {
    match e {
        NoAnswer::Unreachable(why) => format!(
            "{why}. Is the daemon running? `mediatord serve` starts it; --url (or MEDIATORD_URL) names another address"
        ),
        NoAnswer::Untrusted(why) => why.clone(),
    }
}

/// The daemon at `url` answered over https with a certificate this client refused (`pinned`: the
/// client trusted only the fingerprint the daemon advertised): what is wrong, and what to do.
/// Shared by every command-line client (`pair`, `devices`, `attach`, `watch`, `approve`, `connect`).
pub fn untrusted(url: &str, pinned: bool, problem: &crate::tls::CertificateProblem) -> String {
    let what_to_do = if pinned {
        "the pin is the fingerprint the daemon advertised (daemon.json in its state directory, or mDNS \
         on the LAN): another server answers at this address, or the advert is stale"
    } else if problem.a_ca_helps {
        "trust its CA with SSL_CERT_FILE, or use the URL in daemon.json (pinned: that exact certificate \
         is trusted, whatever issued it)"
    } else {
        "no CA this machine trusts can change that: use the URL in daemon.json (pinned: that exact \
         certificate is trusted, whatever it is), or give the daemon a certificate a CA issued \
         (docs/operations.md#https)"
    };
    format!("the daemon at {url} answered, but its certificate is not trusted: {problem}; {what_to_do}")
}

/// `http(s)://host[:port][/prefix]` split into (https, authority, host, port, prefix).
fn parse(url: &str) -> Result<(bool, String, String, u16, String), String> {
    let (https, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => {
            return Err(format!(
                "{url}: the daemon's URL must start with http:// or https:// (its listening address)"
            ));
        }
    };
    let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => {
            (h, p.parse::<u16>().map_err(|_| format!("{url}: {p:?} is not a port"))?)
        }
        _ => (authority, if https { 443 } else { 80 }),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("{url}: no host"));
    }
    Ok((https, authority.to_owned(), host.to_owned(), port, prefix.trim_end_matches('/').to_owned()))
}

/// `text` as one path segment: every byte but the unreserved ones percent-encoded.
pub fn segment(text: &str) -> String {
    crate::text::url_segment(text)
}

/// A daemon and who calls it: its URL, the credential sent as the bearer (the operator's token or
/// a device's), and the client id sent as `X-Qwen-Client-Id` (none for a device: the daemon uses
/// its device id).
#[derive(Clone)]
pub struct Endpoint {
    url: String,
    authority: String,
    host: String,
    port: u16,
    prefix: String,
    https: bool,
    /// The SHA-256 fingerprint of the certificate the daemon advertised in its state dir: over
    /// https, trusted instead of the system's roots.
    fingerprint: Option<String>,
    credential: Option<String>,
    client_id: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("credential", &self.credential.as_ref().map(|_| "…"))
            .field("client_id", &self.client_id)
            .finish()
    }
}

/// Why an event stream could not be opened.
#[derive(Debug, Clone, PartialEq)]
pub enum OpenError {
    /// The daemon answered with this status and body.
    Refused(u16, Value),
    /// No answer (unreachable, reset, timed out).
    Unreachable(String),
}

impl Endpoint {
    /// `credential` is sent as `Authorization: Bearer …` when present (trimmed; empty is none).
    pub fn new(url: &str, credential: Option<&str>, client_id: Option<&str>) -> Result<Endpoint, String> {
        let (https, authority, host, port, prefix) = parse(url)?;
        Ok(Endpoint {
            url: url.to_owned(),
            authority,
            host,
            port,
            prefix,
            https,
            fingerprint: None,
            credential: credential.map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned),
            client_id: client_id.map(str::to_owned),
        })
    }

    /// Over https, trust exactly the certificate with this fingerprint (the one the daemon
    /// advertised in its state dir); `None` keeps the system's roots.
    pub fn pinned(self, fingerprint: Option<String>) -> Endpoint {
        Endpoint { fingerprint, ..self }
    }

    /// The URL the target was made with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The client id sent, if any.
    pub fn client_id(&self) -> Option<&str> {
        self.client_id.as_deref()
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        extra: &[(&str, &str)],
        body: String,
    ) -> Result<Request<Full<Bytes>>, String> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.prefix))
            .header(header::HOST, self.authority.as_str())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::CONTENT_LENGTH, body.len());
        if let Some(token) = &self.credential {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(id) = &self.client_id {
            request = request.header("x-qwen-client-id", id.as_str());
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        request.body(Full::new(Bytes::from(body))).map_err(|e| e.to_string())
    }

    /// Sends `request` on a fresh connection: the response and the task driving the connection
    /// (aborted by the caller once it has read what it wants).
    async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<(Response<Incoming>, tokio::task::JoinHandle<()>), NoAnswer> {
        let unreachable = |e: String| NoAnswer::Unreachable(e);
        let stream = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| unreachable(format!("cannot reach the daemon at {}: {e}", self.url)))?;
        let (mut sender, driver) = if self.https {
            let config = match &self.fingerprint {
                Some(fingerprint) => crate::tls::pinned_client(fingerprint),
                None => crate::tls::client_trust().map(|t| t.config),
            }
            .map_err(|e| unreachable(e.to_string()))?;
            let name = rustls::pki_types::ServerName::try_from(self.host.clone())
                .map_err(|e| unreachable(e.to_string()))?;
            let stream =
                tokio_rustls::TlsConnector::from(config).connect(name, stream).await.map_err(|e| {
                    match crate::tls::certificate_problem(&e) {
                        Some(problem) => {
                            NoAnswer::Untrusted(untrusted(&self.url, self.fingerprint.is_some(), &problem))
                        }
                        None => {
                            unreachable(format!("cannot reach the daemon at {} over https: {e}", self.url))
                        }
                    }
                })?;
            handshake(stream).await.map_err(unreachable)?
        } else {
            handshake(stream).await.map_err(unreachable)?
        };
        match sender.send_request(request).await {
            Ok(response) => Ok((response, driver)),
            Err(e) => {
                driver.abort();
                Err(unreachable(format!("the daemon at {} did not answer: {e}", self.url)))
            }
        }
    }

    /// `method path` with `body` as JSON and `extra` headers: the status and the parsed answer
    /// (`null` when empty or not JSON), read up to `limit` bytes; or why there is none.
    pub async fn call_with(
        &self,
        method: &str,
        path: &str,
        extra: &[(&str, &str)],
        body: Option<&Value>,
        limit: usize,
    ) -> Result<(u16, Value), NoAnswer> {
        let method =
            Method::from_bytes(method.as_bytes()).map_err(|e| NoAnswer::Unreachable(e.to_string()))?;
        let text = body.map(Value::to_string).unwrap_or_default();
        let request = self
            .request(method, path, &[&[("accept", "application/json")], extra].concat(), text)
            .map_err(NoAnswer::Unreachable)?;
        let exchange = async {
            let (response, driver) = self.send(request).await?;
            let status = response.status().as_u16();
            let read = read_limited(response.into_body(), limit).await;
            driver.abort();
            let bytes = read
                .map_err(|e| NoAnswer::Unreachable(format!("the daemon's answer could not be read: {e}")))?;
            Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
        };
        tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| NoAnswer::Unreachable(format!("the daemon at {} did not answer", self.url)))?
    }

    /// [`Endpoint::call_with`] without extra headers, reading at most 1 MiB.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), NoAnswer> {
        self.call_with(method, path, &[], body, MAX_RESPONSE_BYTES).await
    }

    /// Opens `GET /session/{id}/events`, replaying after `last_event_id` when given.
    pub async fn events(&self, session_id: &str, last_event_id: Option<u64>) -> Result<Events, OpenError> {
        let path = format!("/session/{}/events", segment(session_id));
        let last = last_event_id.map(|id| id.to_string());
        let mut extra = vec![("accept", "text/event-stream")];
        if let Some(last) = &last {
            extra.push(("last-event-id", last.as_str()));
        }
        let request =
            self.request(Method::GET, &path, &extra, String::new()).map_err(OpenError::Unreachable)?;
        let (response, driver) = tokio::time::timeout(TIMEOUT, self.send(request))
            .await
            .map_err(|_| OpenError::Unreachable(format!("the daemon at {} did not answer", self.url)))?
            .map_err(|e| OpenError::Unreachable(e.to_string()))?;
        let status = response.status().as_u16();
        let body = response.into_body();
        if status != 200 {
            let bytes = tokio::time::timeout(TIMEOUT, read_limited(body, MAX_RESPONSE_BYTES)).await;
            driver.abort();
            let answer = match bytes {
                Ok(Ok(bytes)) => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                _ => Value::Null,
            };
            return Err(OpenError::Refused(status, answer));
        }
        Ok(Events { body: BodyDataStream::new(body), frames: Frames::new(MAX_EVENT_BYTES), driver })
    }
}

/// One frame of an event stream: a session event (with its `id`) or a frame about the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub id: Option<u64>,
    /// The `event:` name (`message` when none was given).
    pub event: String,
    /// The `data:` lines, joined by newlines.
    pub data: String,
}

/// An open event stream. Dropping it closes the connection.
#[derive(Debug)]
pub struct Events {
    body: BodyDataStream<Incoming>,
    frames: Frames,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Events {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Events {
    /// The next frame; `None` when the stream ended; an error when it broke, went silent for
    /// [`STREAM_SILENCE`], or sent a frame larger than [`MAX_EVENT_BYTES`].
    pub async fn next(&mut self) -> Option<Result<Frame, String>> {
        loop {
            if let Some(frame) = self.frames.next_frame() {
                return Some(frame);
            }
            match tokio::time::timeout(STREAM_SILENCE, self.body.next()).await {
                Err(_) => return Some(Err("the event stream went silent".to_owned())),
                Ok(None) => return None,
                Ok(Some(Err(e))) => return Some(Err(format!("the event stream broke: {e}"))),
                Ok(Some(Ok(bytes))) => self.frames.push(&bytes),
            }
        }
    }
}

/// The `text/event-stream` reader: bytes in, frames out, one frame at most `max` bytes.
#[derive(Debug)]
pub struct Frames {
    buf: Vec<u8>,
    /// Where the next line starts in `buf`.
    at: usize,
    id: Option<u64>,
    event: Option<String>,
    data: Option<String>,
    /// Bytes of the frame being read.
    size: usize,
    max: usize,
    failed: bool,
}

impl Frames {
    pub fn new(max: usize) -> Frames {
        Frames { buf: Vec::new(), at: 0, id: None, event: None, data: None, size: 0, max, failed: false }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame in what was pushed, or an error once a frame passes the bound (after
    /// which nothing more is read).
    pub fn next_frame(&mut self) -> Option<Result<Frame, String>> {
        if self.failed {
            return None;
        }
        loop {
            let Some(end) = memchr::memchr(b'\n', &self.buf[self.at..]).map(|i| self.at + i) else {
                if self.size + self.buf.len() - self.at > self.max {
                    self.failed = true;
                    return Some(Err(format!("an event of more than {} bytes", self.max)));
                }
                self.buf.drain(..self.at);
                self.at = 0;
                return None;
            };
            let mut line = &self.buf[self.at..end];
            self.at = end + 1;
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            self.size += line.len() + 1;
            if self.size > self.max {
                self.failed = true;
                return Some(Err(format!("an event of more than {} bytes", self.max)));
            }
            if line.is_empty() {
                self.size = 0;
                let (id, event, data) = (self.id.take(), self.event.take(), self.data.take());
                if let Some(data) = data {
                    return Some(Ok(Frame {
                        id,
                        event: event.unwrap_or_else(|| "message".to_owned()),
                        data,
                    }));
                }
                continue;
            }
            let line = String::from_utf8_lossy(line);
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line.as_ref(), ""),
            };
            match field {
                "id" => self.id = value.parse().ok(),
                "event" => self.event = Some(value.to_owned()),
                "data" => match &mut self.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => self.data = Some(value.to_owned()),
                },
                _ => {} // a comment (`: heartbeat`), `retry:`, or a field this reader ignores
            }
        }
    }
}

/// A response's body whole, refused past `limit` bytes (a daemon's answer is bounded here, not by
/// its word).
async fn read_limited(body: Incoming, limit: usize) -> Result<Bytes, String> {
    Limited::new(body, limit).collect().await.map(|whole| whole.to_bytes()).map_err(|e| e.to_string())
}

/// An HTTP/1.1 client connection on `stream`, and the task driving it.
async fn handshake<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
) -> Result<(hyper::client::conn::http1::SendRequest<Full<Bytes>>, tokio::task::JoinHandle<()>), String> {
    let (sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((sender, driver))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_authority_host_port_and_prefix() {
        let p = parse;
        assert_eq!(
            p("http://127.0.0.1:7776"),
            Ok((false, "127.0.0.1:7776".into(), "127.0.0.1".into(), 7776, "".into()))
        );
        assert_eq!(
            p("http://[::1]:80/pre/"),
            Ok((false, "[::1]:80".into(), "::1".into(), 80, "/pre".into()))
        );
        assert_eq!(p("http://localhost"), Ok((false, "localhost".into(), "localhost".into(), 80, "".into())));
        assert_eq!(p("https://x"), Ok((true, "x".into(), "x".into(), 443, "".into())));
        assert_eq!(p("https://x:7776"), Ok((true, "x:7776".into(), "x".into(), 7776, "".into())));
        assert!(p("ftp://x").is_err());
        assert!(p("http://:1").is_err());
    }

    #[test]
    fn a_segment_escapes_everything_but_unreserved_bytes() {
        assert_eq!(segment("demo-1.a_b~"), "demo-1.a_b~");
        assert_eq!(segment("a/b c?é"), "a%2Fb%20c%3F%C3%A9");
    }

    #[test]
    fn a_pin_is_kept_and_none_keeps_the_systems_roots() {
        let t = Endpoint::new("https://127.0.0.1:1", None, None).expect("target");
        assert_eq!(t.fingerprint, None);
        let pinned = t.pinned(Some("AB:CD".to_owned()));
        assert_eq!(pinned.fingerprint.as_deref(), Some("AB:CD"));
        assert_eq!(pinned.pinned(None).fingerprint, None);
    }

    /// Issue #44: a certificate not trusted is the daemon's answer, not a daemon that is down.
    #[test]
    fn no_answer_asks_whether_the_daemon_runs_and_an_untrusted_certificate_says_what_to_do() {
        let down = unanswered(&NoAnswer::Unreachable("cannot reach the daemon at http://h:1".to_owned()));
        assert_eq!(
            down,
            "cannot reach the daemon at http://h:1. Is the daemon running? `mediatord serve` starts it; --url (or MEDIATORD_URL) names another address"
        );
        let problem =
            |why: &str, a_ca_helps| crate::tls::CertificateProblem { why: why.to_owned(), a_ca_helps };
        let unknown = untrusted("https://localhost:7776", false, &problem("it was issued by X", true));
        assert_eq!(
            unknown,
            "the daemon at https://localhost:7776 answered, but its certificate is not trusted: it was issued by X; trust its CA with SSL_CERT_FILE, or use the URL in daemon.json (pinned: that exact certificate is trusted, whatever issued it)"
        );
        assert_eq!(unanswered(&NoAnswer::Untrusted(unknown.clone())), unknown, "nothing added");
        let ca = untrusted("https://h:1", false, &problem("it is a CA certificate", false));
        assert!(ca.ends_with("; no CA this machine trusts can change that: use the URL in daemon.json (pinned: that exact certificate is trusted, whatever it is), or give the daemon a certificate a CA issued (docs/operations.md#https)"), "{ca}");
        let pinned =
            untrusted("https://h:1", true, &problem("it is not the certificate that was pinned", false));
        assert!(pinned.contains("not trusted: it is not the certificate that was pinned; the pin is the fingerprint the daemon advertised"), "{pinned}");
        assert_eq!(String::from(NoAnswer::Untrusted("x".to_owned())), "x");
    }

    #[test]
    fn the_debug_form_hides_the_credential() {
        let t = Endpoint::new("http://127.0.0.1:1", Some("dev-1.secret"), Some("me")).expect("target");
        assert!(!format!("{t:?}").contains("secret"));
    }

    fn all(frames: &mut Frames) -> Vec<Result<Frame, String>> {
        std::iter::from_fn(|| frames.next_frame()).collect()
    }

    #[test]
    fn frames_are_read_across_chunks_with_ids_names_and_comments() {
        let mut f = Frames::new(1024);
        f.push(b"retry: 3000\n\n: heartbeat\n\nid: 7\nevent: session_update\nda");
        assert_eq!(all(&mut f), vec![]);
        f.push(b"ta: {\"a\":1}\r\n\r\nevent: replay_complete\ndata: x\ndata: y\n\n");
        let frame = |id, event: &str, data: &str| Ok(Frame { id, event: event.into(), data: data.into() });
        assert_eq!(
            all(&mut f),
            vec![frame(Some(7), "session_update", "{\"a\":1}"), frame(None, "replay_complete", "x\ny")]
        );
        f.push(b"data:no space\n\n");
        assert_eq!(all(&mut f), vec![frame(None, "message", "no space")]);
    }

    #[test]
    fn a_frame_past_the_bound_is_an_error_and_ends_the_reading() {
        let mut f = Frames::new(20);
        f.push(b"data: 0123456789\n\n");
        assert_eq!(all(&mut f).len(), 1, "18 bytes in two lines pass a bound of 20: {f:?}");
        f.push(b"data: 0123456789abcdef");
        assert!(matches!(f.next_frame(), Some(Err(_))), "an unfinished line past the bound");
        assert_eq!(f.next_frame(), None);
        let mut f = Frames::new(20);
        f.push(b"data: 01234\ndata: 56789\n\n");
        assert!(matches!(f.next_frame(), Some(Err(_))), "a frame of several lines past the bound");
    }
}

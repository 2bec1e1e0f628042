//! One delivery: an HTTP/1.1 request (a POST; a PATCH for a Discord update) with hyper's client, over TCP or, for an `https://` target, TLS
//! (rustls, trusting [`crate::tls::client_trust`]), signed when the target has a secret, tried up
//! to [`MAX_ATTEMPTS`] times; a certificate the client does not trust is not retried. The only
//! file of the crate outside `src/http/` that names hyper: this is the daemon's one outgoing HTTP
//! client.

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderName, HeaderValue, USER_AGENT};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::config::NotifyTarget;

/// Attempts per delivery: the first and two retries, on network errors, timeouts and 5xx only.
pub(super) const MAX_ATTEMPTS: u32 = 3;
/// One attempt (connect, send, status line) at most: a webhook answers in well under a second,
/// and a hanging receiver must not hold its target's queue for long.
pub(super) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a receiver's answer kept: Telegram's and Discord's name the message sent (a few
/// hundred bytes of JSON, more with a long text echoed back), to update it once decided.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// Waits before the second and the third attempt: a restarting receiver is usually back within
/// seconds, and a person waiting for a notification should not wait for a long schedule.
const BACKOFF: [Duration; 2] = [Duration::from_millis(500), Duration::from_secs(2)];

/// The request's method: every delivery is a POST but a Discord message's update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verb {
    Post,
    Patch,
}

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// A 2xx, and the start of its body (at most [`MAX_ANSWER_BYTES`]).
    Sent { status: u16, attempts: u32, answer: Vec<u8> },
    /// A status that retrying cannot change (4xx, or a 1xx/3xx this client does not follow).
    Refused { status: u16 },
    /// Every attempt failed on the network, timed out or got a 5xx; the last reason.
    Failed { reason: String, attempts: u32 },
    /// The target's certificate is not trusted (unknown issuer, another name, expired): not
    /// retried, since only its owner or the daemon's trust store can change that.
    Untrusted { reason: String },
}

/// Why one attempt got no status.
#[derive(Debug)]
enum AttemptError {
    /// Worth another try (connect refused, reset, a timeout).
    Transient(String),
    /// The server's certificate, as [`Outcome::Untrusted`].
    Untrusted(String),
}

impl From<String> for AttemptError {
    fn from(reason: String) -> AttemptError {
        AttemptError::Transient(reason)
    }
}

/// `sha256=<hex>` of the HMAC-SHA256 of `body` under `secret`.
pub(super) fn signature(secret: &str, body: &[u8]) -> String {
    // An HMAC takes a key of any length: this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Sends `body` to `path` on `target`'s server with its headers and the mediatord ones, retrying
/// as documented.
pub(super) async fn deliver(
    tls: Option<&Arc<rustls::ClientConfig>>,
    target: &NotifyTarget,
    method: Verb,
    path: &str,
    event: &str,
    delivery_id: &str,
    body: String,
) -> Outcome {
    let mut headers: Vec<(HeaderName, HeaderValue)> = Vec::new();
    let mut add = |name: &str, value: &str| {
        if let (Ok(n), Ok(v)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            headers.push((n, v));
        }
    };
    add("x-mediatord-event", event);
    add("x-mediatord-delivery", delivery_id);
    if let Some(secret) = &target.secret {
        add("x-mediatord-signature", &signature(secret.expose(), body.as_bytes()));
    }
    for (name, value) in &target.headers {
        add(name, value.expose());
    }
    let outgoing = Outgoing { target, method, path, headers: &headers };
    let mut attempts = 0;
    loop {
        attempts += 1;
        let reason = match tokio::time::timeout(ATTEMPT_TIMEOUT, attempt(tls, &outgoing, body.clone())).await
        {
            Ok(Ok((status, answer))) if (200..300).contains(&status) => {
                return Outcome::Sent { status, attempts, answer };
            }
            Ok(Ok((status, _))) if status < 500 => return Outcome::Refused { status },
            Ok(Ok((status, _))) => format!("HTTP {status}"),
            Ok(Err(AttemptError::Untrusted(reason))) => return Outcome::Untrusted { reason },
            Ok(Err(AttemptError::Transient(e))) => e,
            Err(_) => format!("no answer within {} ms", ATTEMPT_TIMEOUT.as_millis()),
        };
        if attempts >= MAX_ATTEMPTS {
            return Outcome::Failed { reason, attempts };
        }
        tokio::time::sleep(BACKOFF[(attempts as usize - 1).min(BACKOFF.len() - 1)]).await;
    }
}

/// What every attempt of one delivery sends besides its body.
struct Outgoing<'a> {
    target: &'a NotifyTarget,
    method: Verb,
    path: &'a str,
    /// The target's own headers and the mediatord ones.
    headers: &'a [(HeaderName, HeaderValue)],
}

/// One request; the status it got and its body's start, or why none.
async fn attempt(
    tls: Option<&Arc<rustls::ClientConfig>>,
    outgoing: &Outgoing<'_>,
    body: String,
) -> Result<(u16, Vec<u8>), AttemptError> {
    let url = &outgoing.target.url;
    let stream =
        TcpStream::connect((url.host.as_str(), url.port)).await.map_err(|e| format!("connect: {e}"))?;
    if !url.tls {
        return Ok(exchange(stream, outgoing, body).await?);
    }
    let Some(config) = tls else {
        return Err(AttemptError::Untrusted("the daemon has no TLS client settings".to_owned()));
    };
    let name = rustls::pki_types::ServerName::try_from(url.host.clone()).map_err(|_| {
        AttemptError::Untrusted(format!("{:?} is not a name a certificate can be for", url.host))
    })?;
    let stream = tokio_rustls::TlsConnector::from(config.clone()).connect(name, stream).await.map_err(|e| {
        match crate::tls::certificate_problem(&e) {
            Some(problem) if problem.a_ca_helps => AttemptError::Untrusted(format!(
                "the receiver's certificate is not trusted: {problem}; trust its CA with SSL_CERT_FILE or SSL_CERT_DIR"
            )),
            Some(problem) => {
                AttemptError::Untrusted(format!("the receiver's certificate is not trusted: {problem}"))
            }
            None => AttemptError::Transient(format!("TLS handshake: {e}")),
        }
    })?;
    Ok(exchange(stream, outgoing, body).await?)
}

/// The request itself, on a connected stream.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    outgoing: &Outgoing<'_>,
    body: String,
) -> Result<(u16, Vec<u8>), String> {
    let url = &outgoing.target.url;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    // The connection is driven beside the request; it ends when the exchange does (or is dropped
    // with this future on a timeout).
    let driver = tokio::spawn(connection);
    let _abort = AbortOnDrop(driver);
    let mut request = Request::builder()
        .method(match outgoing.method {
            Verb::Post => Method::POST,
            Verb::Patch => Method::PATCH,
        })
        .uri(outgoing.path)
        .header(HOST, url.host_header.as_str())
        .header(CONTENT_TYPE, "application/json")
        .header(CONTENT_LENGTH, body.len())
        .header(USER_AGENT, concat!("mediatord/", env!("CARGO_PKG_VERSION")))
        .body(body)
        .map_err(|e| format!("request: {e}"))?;
    for (name, value) in outgoing.headers {
        request.headers_mut().append(name.clone(), value.clone());
    }
    let response = sender.send_request(request).await.map_err(|e| format!("send: {e}"))?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut answer = Vec::new();
    // The body is read only while it fits: the rest of a longer one is not needed.
    while answer.len() < MAX_ANSWER_BYTES {
        let frame =
            std::future::poll_fn(|cx| hyper::body::Body::poll_frame(std::pin::Pin::new(&mut body), cx));
        match frame.await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    answer.extend_from_slice(&data[..data.len().min(MAX_ANSWER_BYTES - answer.len())]);
                }
            }
            // The status is what decides; an answer cut short is only an answer not understood.
            Some(Err(_)) | None => break,
        }
    }
    Ok((status, answer))
}

struct AbortOnDrop(tokio::task::JoinHandle<Result<(), hyper::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hmac_sha256_in_hex() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}

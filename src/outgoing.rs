//! The daemon's one outgoing HTTP client: one HTTP/1.1 request with hyper's client, over TCP or,
//! for an `https://` URL, TLS (rustls, trusting what the caller passes, usually
//! [`crate::tls::client_trust`]), its answer read up to a bound. Used by the notifications
//! (`notify::deliver`, which adds retries and signatures), the model reviewers (`review::model`)
//! and the OpenID provider's endpoints (`oidc::http`). The only file of the crate outside
//! `src/http/` and the clients that names hyper.
//!
//! A leaf: it imports only the configuration's URL and the TLS helpers.

use std::sync::Arc;

use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderName, HeaderValue, USER_AGENT};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::config::TargetUrl;

/// The request's method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// No body (an OpenID provider's discovery document and keys).
    Get,
    Post,
    Patch,
}

/// One request: a body (JSON unless its headers name another `Content-Type`) to `path` on `url`'s
/// server.
pub struct Outgoing<'a> {
    pub url: &'a TargetUrl,
    pub verb: Verb,
    /// The path and query sent (a notification's differs from its target's own path).
    pub path: &'a str,
    /// Extra headers; a name or value HTTP cannot carry is left out (each caller validated its
    /// own when it was configured).
    pub headers: &'a [(String, String)],
    /// The most of the answer's body read; the rest is not.
    pub max_answer: usize,
}

/// Header names only: their values carry keys and tokens.
impl std::fmt::Debug for Outgoing<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outgoing")
            .field("url", self.url)
            .field("verb", &self.verb)
            .field("headers", &self.headers.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>())
            .field("max_answer", &self.max_answer)
            .finish_non_exhaustive()
    }
}

/// The status and the start of the body of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// At most the request's `max_answer` bytes.
    pub body: Vec<u8>,
    /// Whether the body went on past `max_answer` (or broke off): what was read is only a part.
    pub cut: bool,
    /// The answer's `Content-Type`, when it has one HTTP allows as text.
    pub content_type: Option<String>,
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The network: connect refused, reset, a handshake or send that failed. Worth another try.
    Transient(String),
    /// The server's certificate is not trusted (unknown issuer, another name, expired): only its
    /// owner or the daemon's trust store can change that.
    Untrusted(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Transient(why) | Failure::Untrusted(why) => f.write_str(why),
        }
    }
}

/// Sends `body` as `request` says; no timeout of its own (each caller bounds it by its own).
pub async fn send(
    tls: Option<&Arc<rustls::ClientConfig>>,
    request: &Outgoing<'_>,
    body: Vec<u8>,
) -> Result<Answer, Failure> {
    let url = request.url;
    let stream = TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|e| Failure::Transient(format!("connect: {e}")))?;
    if !url.tls {
        return exchange(stream, request, body).await.map_err(Failure::Transient);
    }
    let Some(config) = tls else {
        return Err(Failure::Untrusted("the daemon has no TLS client settings".to_owned()));
    };
    let name = rustls::pki_types::ServerName::try_from(url.host.clone())
        .map_err(|_| Failure::Untrusted(format!("{:?} is not a name a certificate can be for", url.host)))?;
    let stream = tokio_rustls::TlsConnector::from(config.clone()).connect(name, stream).await.map_err(|e| {
        match crate::tls::certificate_problem(&e) {
            Some(problem) if problem.a_ca_helps => Failure::Untrusted(format!(
                "the server's certificate is not trusted: {problem}; trust its CA with SSL_CERT_FILE or SSL_CERT_DIR"
            )),
            Some(problem) => Failure::Untrusted(format!("the server's certificate is not trusted: {problem}")),
            None => Failure::Transient(format!("TLS handshake: {e}")),
        }
    })?;
    exchange(stream, request, body).await.map_err(Failure::Transient)
}

/// The request itself, on a connected stream.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    outgoing: &Outgoing<'_>,
    body: Vec<u8>,
) -> Result<Answer, String> {
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    // The connection is driven beside the request; it ends when the exchange does (or is dropped
    // with this future on a caller's timeout).
    let driver = tokio::spawn(connection);
    let _abort = AbortOnDrop(driver);
    let mut request = Request::builder()
        .method(match outgoing.verb {
            Verb::Get => Method::GET,
            Verb::Post => Method::POST,
            Verb::Patch => Method::PATCH,
        })
        .uri(outgoing.path)
        .header(HOST, outgoing.url.host_header.as_str())
        .header(USER_AGENT, concat!("mediatord/", env!("CARGO_PKG_VERSION")));
    if outgoing.verb != Verb::Get {
        // A caller's own `Content-Type` (a form to a token endpoint) replaces the JSON one.
        if !outgoing.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-type")) {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        request = request.header(CONTENT_LENGTH, body.len());
    }
    let mut request = request
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .map_err(|e| format!("request: {e}"))?;
    for (name, value) in outgoing.headers {
        if let (Ok(n), Ok(v)) = (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value.as_str())) {
            request.headers_mut().append(n, v);
        }
    }
    let response = sender.send_request(request).await.map_err(|e| format!("send: {e}"))?;
    let status = response.status().as_u16();
    let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut body = response.into_body();
    let (max, mut answer, mut cut) = (outgoing.max_answer, Vec::new(), false);
    // The body is read only while it fits: the rest of a longer one is not needed.
    loop {
        let frame =
            std::future::poll_fn(|cx| hyper::body::Body::poll_frame(std::pin::Pin::new(&mut body), cx));
        match frame.await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let room = max - answer.len();
                    answer.extend_from_slice(&data[..data.len().min(room)]);
                    if data.len() > room {
                        cut = true;
                        break;
                    }
                }
            }
            Some(Err(_)) => {
                cut = true;
                break;
            }
            None => break,
        }
    }
    Ok(Answer { status, body: answer, cut, content_type })
}

struct AbortOnDrop(tokio::task::JoinHandle<Result<(), hyper::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The TLS client's settings for `https://` URLs, as [`crate::tls::client_trust`] finds them, its
/// problems logged under `what` (`notification`, `model reviewer`); `None` if they cannot be
/// built (every https request is then refused as untrusted, and says so).
pub fn client_tls(what: &str) -> Option<Arc<rustls::ClientConfig>> {
    match crate::tls::client_trust() {
        Ok(trust) => {
            for problem in &trust.problems {
                tracing::warn!("{what} TLS client: {problem}");
            }
            if trust.roots == 0 {
                tracing::warn!(
                    "{what} TLS client: no trusted root certificates (system store, SSL_CERT_FILE, SSL_CERT_DIR); https targets will be refused"
                );
            }
            Some(trust.config)
        }
        Err(e) => {
            tracing::error!("{what} TLS client: {e}; https targets will be refused");
            None
        }
    }
}

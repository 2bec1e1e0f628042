//! The provider's endpoints asked through the daemon's one outgoing HTTP client
//! (`crate::outgoing`: hyper, and rustls trusting what notifications trust), as `openidconnect`
//! asks them: one request, its whole answer up to a bound, within a deadline, no redirect followed
//! (a redirect from a token endpoint is not an answer to trust).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::outgoing::{self, Outgoing, Verb};

/// One request to the provider at most: its endpoints answer in milliseconds; a provider that
/// hangs must not hold a person's sign-in (or the renewals) for long.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read: a discovery document or a key set is a few KiB, a token answer less.
const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// Why the provider gave no usable answer: it could not be reached, did not answer in time,
/// answered a server error, or answered more than [`MAX_ANSWER_BYTES`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Unreachable(pub(super) String);

/// The provider's endpoints as `openidconnect` asks them: each request through [`call`], with what
/// the provider's certificate must chain to. One per daemon, lent to every exchange.
pub(super) struct Provider {
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Provider {
    /// Trusting the system's store, or `SSL_CERT_FILE` (`crate::outgoing::client_tls`).
    pub(super) fn new() -> Provider {
        Provider { tls: crate::outgoing::client_tls("OpenID provider") }
    }
}

impl<'c> openidconnect::AsyncHttpClient<'c> for Provider {
    type Error = Unreachable;
    type Future = Pin<Box<dyn Future<Output = Result<openidconnect::HttpResponse, Unreachable>> + Send + 'c>>;

    fn call(&'c self, request: openidconnect::HttpRequest) -> Self::Future {
        Box::pin(call(self.tls.clone(), request))
    }
}

/// Asks `request` of the provider.
async fn call(
    tls: Option<Arc<rustls::ClientConfig>>,
    request: openidconnect::HttpRequest,
) -> Result<openidconnect::HttpResponse, Unreachable> {
    let url = crate::config::provider_url(&request.uri().to_string()).map_err(|e| Unreachable(e.0))?;
    let verb = match *request.method() {
        openidconnect::http::Method::GET => Verb::Get,
        openidconnect::http::Method::POST => Verb::Post,
        ref other => return Err(Unreachable(format!("{other} is not asked of a provider"))),
    };
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let outgoing =
        Outgoing { url: &url, verb, path: &url.path, headers: &headers, max_answer: MAX_ANSWER_BYTES };
    let answer = match tokio::time::timeout(
        REQUEST_TIMEOUT,
        outgoing::send(tls.as_ref(), &outgoing, request.into_body()),
    )
    .await
    {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => return Err(Unreachable(format!("{}: {e}", url.authority))),
        Err(_) => {
            return Err(Unreachable(format!(
                "{}: no answer within {} s",
                url.authority,
                REQUEST_TIMEOUT.as_secs()
            )));
        }
    };
    if answer.status >= 500 {
        return Err(Unreachable(format!("{}: answered HTTP {}", url.authority, answer.status)));
    }
    if answer.cut {
        return Err(Unreachable(format!("{}: an answer over {MAX_ANSWER_BYTES} bytes", url.authority)));
    }
    let mut response = openidconnect::http::Response::builder().status(answer.status);
    if let Some(content_type) = &answer.content_type {
        response = response.header(openidconnect::http::header::CONTENT_TYPE, content_type.as_str());
    }
    response.body(answer.body).map_err(|e| Unreachable(e.to_string()))
}

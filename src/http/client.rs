//! The command line's client for a running daemon (`mediatord pair`, `mediatord devices`): one
//! JSON request over HTTP/1.1, with the operator's token, to where [`crate::discovery::locate`]
//! found the daemon. Over https it trusts the certificate the daemon advertised (by fingerprint),
//! else the system's roots and `SSL_CERT_FILE`/`SSL_CERT_DIR`.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, header};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::discovery::Located;

/// Largest answer read: a device list of 256 devices is a few tens of KiB.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// The whole exchange's deadline: the daemon answers these routes at once.
const TIMEOUT: Duration = Duration::from_secs(30);

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

/// `method path` on the daemon `at`, with `token` as the bearer and `body` as JSON: the status
/// and the parsed answer (`null` when empty or not JSON), or why there is none.
pub async fn call(
    at: &Located,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let base = at.url.as_str();
    let (https, authority, host, port, prefix) = parse(base)?;
    let method = Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
    let exchange = async {
        let stream = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| format!("cannot reach the daemon at {base}: {e}"))?;
        if !https {
            return exchange(stream, method, &authority, &prefix, path, token, body).await;
        }
        let config = match &at.fingerprint {
            Some(fingerprint) => crate::tls::pinned_client(fingerprint),
            None => crate::tls::client_trust().map(|t| t.config),
        }
        .map_err(|e| e.to_string())?;
        let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| e.to_string())?;
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, stream)
            .await
            .map_err(|e| format!("cannot reach the daemon at {base} over https: {e}"))?;
        exchange(stream, method, &authority, &prefix, path, token, body).await
    };
    tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| format!("the daemon at {base} did not answer"))?
}

/// The request and its answer on a connected stream.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    method: Method,
    authority: &str,
    prefix: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    let driver = tokio::spawn(connection);
    let text = body.map(Value::to_string).unwrap_or_default();
    let mut request = Request::builder()
        .method(method)
        .uri(format!("{prefix}{path}"))
        .header(header::HOST, authority)
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, text.len());
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request.body(Body::from(text)).map_err(|e| e.to_string())?;
    let response = sender.send_request(request).await.map_err(|e| e.to_string());
    let result = match response {
        Ok(response) => {
            let status = response.status().as_u16();
            let bytes = axum::body::to_bytes(Body::new(response.into_body()), MAX_RESPONSE_BYTES)
                .await
                .map_err(|e| e.to_string())?;
            Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
        }
        Err(e) => Err(e),
    };
    driver.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::parse;

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
}

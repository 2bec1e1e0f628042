//! The command line's client for a running daemon (`mediatord pair`, `mediatord devices`): one
//! JSON request over plain HTTP/1.1, with the operator's token. Plain HTTP only: these commands
//! run on the daemon's machine, against its listening address.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, header};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// Largest answer read: a device list of 256 devices is a few tens of KiB.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// The whole exchange's deadline: the daemon answers these routes at once.
const TIMEOUT: Duration = Duration::from_secs(30);

/// `http://host[:port][/prefix]` split into (authority, host, port, prefix).
fn parse(url: &str) -> Result<(String, String, u16, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: the daemon's URL must start with http:// (its listening address)"))?;
    let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => {
            (h, p.parse::<u16>().map_err(|_| format!("{url}: {p:?} is not a port"))?)
        }
        _ => (authority, 80),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("{url}: no host"));
    }
    Ok((authority.to_owned(), host.to_owned(), port, prefix.trim_end_matches('/').to_owned()))
}

/// `method path` on the daemon at `base`, with `token` as the bearer and `body` as JSON: the
/// status and the parsed answer (`null` when empty or not JSON), or why there is none.
pub async fn call(
    base: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let (authority, host, port, prefix) = parse(base)?;
    let method = Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
    let exchange = async {
        let stream = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| format!("cannot reach the daemon at {base}: {e}"))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
        let driver = tokio::spawn(connection);
        let text = body.map(Value::to_string).unwrap_or_default();
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{prefix}{path}"))
            .header(header::HOST, authority.as_str())
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
    };
    tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| format!("the daemon at {base} did not answer"))?
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn urls_split_into_authority_host_port_and_prefix() {
        let p = parse;
        assert_eq!(
            p("http://127.0.0.1:7776"),
            Ok(("127.0.0.1:7776".into(), "127.0.0.1".into(), 7776, "".into()))
        );
        assert_eq!(p("http://[::1]:80/pre/"), Ok(("[::1]:80".into(), "::1".into(), 80, "/pre".into())));
        assert_eq!(p("http://localhost"), Ok(("localhost".into(), "localhost".into(), 80, "".into())));
        assert!(p("https://x").is_err());
        assert!(p("http://:1").is_err());
    }
}

//! The REST + SSE surface both daemons share, as the benchmark uses it.
//!
//! Differences handled here: mediatord answers a prompt 202 only with `Prefer: respond-async`
//! (qwen serve always does); both end a turn with `turn_complete` on the stream; both take votes at
//! `POST /session/:id/permission/:requestId`; both hand back the caller's `clientId` on create.

use std::time::Duration;

use serde_json::{Value, json};

use crate::Res;

/// Deadline for one control request (create, prompt, vote).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A client of one daemon. Cheap to clone (one connection pool).
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    pub base: String,
}

/// What `POST /session` answered.
#[derive(Debug, Clone)]
pub struct Created {
    pub session_id: String,
    pub client_id: Option<String>,
    pub attached: bool,
}

impl Api {
    pub fn new(base: &str) -> Res<Api> {
        Api::build(base, false, None)
    }

    /// A client speaking HTTP/2 with prior knowledge (h2c): every request of this client is a
    /// stream of its one connection (up to the daemon's concurrent-stream limit, 128).
    /// An HTTP/2 client (prior knowledge) accepting DATA frames of up to `max_frame` bytes
    /// (`None`: the protocol's default, 16 KiB).
    pub fn new_h2(base: &str, max_frame: Option<u32>) -> Res<Api> {
        Api::build(base, true, max_frame)
    }

    /// An HTTP/1.1 client whose connections come from `source` (a loopback address: many of them
    /// spread the connections of the scale scenario over more ephemeral ports than one has).
    pub fn new_from(base: &str, source: std::net::IpAddr) -> Res<Api> {
        if !source.is_loopback() {
            return Err(format!("refusing a non-loopback source address {source}").into());
        }
        Api::build_with(base, false, None, Some(source))
    }

    fn build(base: &str, h2: bool, max_frame: Option<u32>) -> Res<Api> {
        Api::build_with(base, h2, max_frame, None)
    }

    /// A client of a daemon serving https (`base` is `https://127.0.0.1:<port>`) that trusts the
    /// CA `ca_pem` and nothing else: HTTP/2 (offered alone in ALPN) when `h2`, else HTTP/1.1.
    pub fn new_tls(base: &str, ca_pem: &str, h2: bool) -> Res<Api> {
        if !base.starts_with("https://127.0.0.1:") {
            return Err(format!("refusing a non-loopback https base URL {base}").into());
        }
        let builder = Api::builder(None)
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes())?);
        let http = if h2 { builder.http2_prior_knowledge() } else { builder.http1_only() }.build()?;
        Ok(Api { http, base: base.to_owned() })
    }

    fn build_with(
        base: &str,
        h2: bool,
        max_frame: Option<u32>,
        source: Option<std::net::IpAddr>,
    ) -> Res<Api> {
        if !base.starts_with("http://127.0.0.1:") {
            return Err(format!("refusing a non-loopback base URL {base}").into());
        }
        let builder = Api::builder(source);
        let http = if h2 { builder.http2_prior_knowledge().http2_max_frame_size(max_frame) } else { builder }
            .build()?;
        Ok(Api { http, base: base.to_owned() })
    }

    /// What every client of the bench shares: no proxy, no Nagle, idle connections kept.
    fn builder(source: Option<std::net::IpAddr>) -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(usize::MAX)
            .local_address(source)
    }

    /// `POST /session {cwd, sessionScope?}`.
    pub async fn create(&self, cwd: &std::path::Path, scope: Option<&str>) -> Res<Created> {
        let mut body = json!({"cwd": cwd});
        if let Some(scope) = scope {
            body["sessionScope"] = json!(scope);
        }
        let resp = self
            .http
            .post(format!("{}/session", self.base))
            .json(&body)
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await?;
        let status = resp.status();
        let v: Value = resp.json().await?;
        if !status.is_success() {
            return Err(format!("create: {status} {v}").into());
        }
        Ok(Created {
            session_id: v["sessionId"].as_str().ok_or("create: no sessionId")?.to_owned(),
            client_id: v["clientId"].as_str().map(str::to_owned),
            attached: v["attached"].as_bool().unwrap_or(false),
        })
    }

    /// Submits `text` as a prompt without waiting for the turn (202 from both daemons).
    pub async fn prompt_async(&self, session: &str, text: &str, client: Option<&str>) -> Res<()> {
        let mut req = self
            .http
            .post(format!("{}/session/{session}/prompt", self.base))
            .header("Prefer", "respond-async")
            .json(&json!({"prompt": [{"type": "text", "text": text}]}))
            .timeout(REQUEST_TIMEOUT);
        if let Some(c) = client {
            req = req.header("X-Qwen-Client-Id", c);
        }
        let resp = req.send().await?;
        let status = resp.status();
        if status.as_u16() != 202 {
            let body = resp.text().await.unwrap_or_default();
            return Err(format!("prompt: expected 202, got {status} {body}").into());
        }
        Ok(())
    }

    /// Votes `option_id` on a pending permission request; the HTTP status.
    pub async fn vote(
        &self,
        session: &str,
        request: &str,
        option_id: &str,
        client: Option<&str>,
    ) -> Res<u16> {
        let mut req = self
            .http
            .post(format!("{}/session/{session}/permission/{request}", self.base))
            .json(&json!({"outcome": {"outcome": "selected", "optionId": option_id}}))
            .timeout(REQUEST_TIMEOUT);
        if let Some(c) = client {
            req = req.header("X-Qwen-Client-Id", c);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let _ = resp.bytes().await;
        Ok(status)
    }

    /// Opens `GET /session/:id/events` (live only) and returns once the first bytes (`retry:`)
    /// arrived, so the stream is registered before anything is published.
    pub async fn subscribe(&self, session: &str, client: Option<&str>) -> Res<Stream> {
        let mut req = self
            .http
            .get(format!("{}/session/{session}/events", self.base))
            .header("Accept", "text/event-stream");
        if let Some(c) = client {
            req = req.header("X-Qwen-Client-Id", c);
        }
        let mut resp =
            tokio::time::timeout(REQUEST_TIMEOUT, req.send()).await.map_err(|_| "subscribe: timeout")??;
        if !resp.status().is_success() {
            let status = resp.status();
            let body = resp.text().await.unwrap_or_default();
            return Err(format!("subscribe: {status} {body}").into());
        }
        let first = tokio::time::timeout(REQUEST_TIMEOUT, resp.chunk())
            .await
            .map_err(|_| "subscribe: no first frame")??
            .ok_or("subscribe: stream ended at once")?;
        Ok(Stream { resp, pending: Some(first) })
    }

    /// `GET /health?deep=1` (mediatord's subscriber count; qwen's has other fields).
    pub async fn deep_health(&self) -> Res<Value> {
        let resp =
            self.http.get(format!("{}/health?deep=1", self.base)).timeout(REQUEST_TIMEOUT).send().await?;
        Ok(resp.json().await?)
    }
}

/// An open event stream.
pub struct Stream {
    resp: reqwest::Response,
    pending: Option<bytes::Bytes>,
}

impl Stream {
    /// The next chunk of bytes; `None` at the end of the stream.
    pub async fn chunk(&mut self) -> Res<Option<bytes::Bytes>> {
        if let Some(first) = self.pending.take() {
            return Ok(Some(first));
        }
        Ok(self.resp.chunk().await?)
    }
}

//! The typed client: requests to a [`Daemon`] answered as [`Reply`] values, and the steps most tests
//! share, written once: join a session, prompt (blocking, or queued and followed to its turn
//! event), raise a permission request, vote, list what is pending.

use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::{Daemon, Event, Sse, WAIT};

/// An HTTP client; no proxies (tests talk to loopback only).
pub(crate) fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(60)).build().expect("client")
}

/// A client that trusts only `ca_pem` (a CA the test made), over rustls.
pub(crate) fn https_trusting(ca_pem: &str) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA PEM");
    reqwest::Client::builder()
        .no_proxy()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("https client")
}

/// A response as a test sees it: status, headers, and the body as JSON (`Null` when it is empty or
/// not JSON; `text` keeps it as sent).
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) text: String,
    pub(crate) body: Value,
}

impl Reply {
    /// A header's value as text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `(status, body)`, the pair most assertions compare.
    pub(crate) fn pair(self) -> (u16, Value) {
        (self.status, self.body)
    }

    /// The body of a 200, or a panic naming what came instead.
    pub(crate) fn ok(self) -> Value {
        assert_eq!(self.status, 200, "expected 200, got {}: {}", self.status, self.text);
        self.body
    }
}

/// Sends `req` and reads the whole answer.
pub(crate) async fn send(req: reqwest::RequestBuilder) -> Reply {
    let res = req.send().await.expect("request");
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let text = res.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply { status, headers, text, body }
}

/// Sends the request `make` builds until its `200` body satisfies `ok` (bounded by [`WAIT`]), and
/// returns that body. For what a durable store writes behind its answer (`docs/protocol.md#145-durability-promise`:
/// the audit, session records), read back a moment later; the memory store's first answer holds.
pub(crate) async fn eventually(
    make: impl Fn() -> reqwest::RequestBuilder,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let body = send(make()).await.ok();
        if ok(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "never satisfied the test within {WAIT:?}: {body}");
        tokio::time::sleep(Duration::from_millis(25)).await; // polling what a background writer commits
    }
}

/// Adds `X-Qwen-Client-Id` when there is a client id.
pub(crate) fn as_client(req: reqwest::RequestBuilder, client: Option<&str>) -> reqwest::RequestBuilder {
    match client {
        Some(c) => req.header("X-Qwen-Client-Id", c),
        None => req,
    }
}

/// A text prompt body.
pub(crate) fn text_prompt(text: &str) -> Value {
    json!({"prompt": [{"type": "text", "text": text}]})
}

/// A vote body choosing `option_id`.
pub(crate) fn selected(option_id: &str) -> Value {
    json!({"outcome": {"outcome": "selected", "optionId": option_id}})
}

/// The vote body that cancels a request.
pub(crate) fn cancel_vote() -> Value {
    json!({"outcome": {"outcome": "cancelled"}})
}

/// The `requestId` of a `permission_request` payload (or a listed pending request).
pub(crate) fn request_id(request: &Value) -> String {
    request["requestId"].as_str().expect("requestId").to_owned()
}

impl Daemon {
    /// The client for this daemon: plain, or trusting its test CA when it serves https.
    pub(crate) fn client(&self) -> reqwest::Client {
        match &self.ca {
            Some(ca) => https_trusting(ca),
            None => http(),
        }
    }

    pub(crate) async fn get(&self, path: &str) -> Reply {
        send(self.client().get(self.url(path))).await
    }

    pub(crate) async fn post(&self, path: &str, client: Option<&str>, body: Value) -> Reply {
        send(as_client(self.client().post(self.url(path)).json(&body), client)).await
    }

    pub(crate) async fn delete(&self, path: &str) -> Reply {
        send(self.client().delete(self.url(path))).await
    }

    /// `POST /session` as `client` with `body`; returns the 200's body.
    pub(crate) async fn create(&self, client: Option<&str>, body: Value) -> Value {
        let reply = self.post("/session", client, body).await;
        assert_eq!(reply.status, 200, "create failed: {}", reply.text);
        reply.body
    }

    /// Creates (or, in single scope, attaches to) the workspace's session as `client`; its id.
    pub(crate) async fn join(&self, client: &str) -> String {
        self.create(Some(client), json!({})).await["sessionId"].as_str().expect("sessionId").to_owned()
    }

    /// A blocking prompt: the reply arrives with the turn's result.
    pub(crate) async fn prompt(&self, sid: &str, client: Option<&str>, text: &str) -> Reply {
        self.post(&format!("/session/{sid}/prompt"), client, text_prompt(text)).await
    }

    /// `POST /session/:id/prompt` with `Prefer: respond-async` and any body; the raw reply.
    pub(crate) async fn post_async(&self, sid: &str, client: Option<&str>, body: Value) -> Reply {
        let req =
            self.client().post(self.url(&format!("/session/{sid}/prompt"))).header("Prefer", "respond-async");
        send(as_client(req.json(&body), client)).await
    }

    /// Waits (bounded by [`WAIT`]) until a turn of `sid` runs, not only queued: a queued prompt is
    /// answered at once by a drain or a cancel, a running one by its agent.
    pub(crate) async fn until_turn_runs(&self, sid: &str) {
        let deadline = Instant::now() + WAIT;
        while self.get(&format!("/session/{sid}")).await.ok()["hasActivePrompt"] != true {
            assert!(Instant::now() < deadline, "the turn never started");
            tokio::time::sleep(Duration::from_millis(20)).await; // polling a status route
        }
    }

    /// Queues a text prompt (`Prefer: respond-async`); returns the 202 body.
    pub(crate) async fn prompt_async(&self, sid: &str, client: Option<&str>, text: &str) -> Value {
        let reply = self.post_async(sid, client, text_prompt(text)).await;
        assert_eq!(reply.status, 202, "async prompt failed: {}", reply.text);
        reply.body
    }

    /// Queues `text` and follows `sse` to its `turn_complete`; the events of the turn.
    pub(crate) async fn turn(
        &self,
        sid: &str,
        sse: &mut Sse,
        client: Option<&str>,
        text: &str,
    ) -> Vec<Event> {
        self.prompt_async(sid, client, text).await;
        sse.until_type("turn_complete").await
    }

    /// Queues `text` and waits on `sse` for the permission request it raises; returns its payload.
    pub(crate) async fn raise(&self, sid: &str, sse: &mut Sse, client: Option<&str>, text: &str) -> Value {
        self.prompt_async(sid, client, text).await;
        let events = sse.until_type("permission_request").await;
        events.last().expect("permission_request").payload().clone()
    }

    /// `POST /session/:sid/permission/:rid`.
    pub(crate) async fn vote(&self, sid: &str, rid: &str, client: Option<&str>, body: Value) -> Reply {
        self.post(&format!("/session/{sid}/permission/{rid}"), client, body).await
    }

    /// `POST /permission/:rid` (the session is found from the request id).
    pub(crate) async fn legacy_vote(&self, rid: &str, client: Option<&str>, body: Value) -> Reply {
        self.post(&format!("/permission/{rid}"), client, body).await
    }

    /// Pairs a device through `POST /devices/pairing` (as the operator, with `token` if the daemon
    /// has one) and `POST /devices/pair`: (device id, credential).
    pub(crate) async fn pair_device(&self, token: Option<&str>, name: &str, role: &str) -> (String, String) {
        let mut req = http().post(self.url("/devices/pairing")).json(&json!({"name": name, "role": role}));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let issued = send(req).await.ok();
        let body =
            send(http().post(self.url("/devices/pair")).json(&json!({"code": issued["code"]}))).await.ok();
        (
            body["deviceId"].as_str().expect("deviceId").to_owned(),
            body["token"].as_str().expect("token").to_owned(),
        )
    }

    /// The audit entries of a session, as `GET .../permissions?audit=1` lists them.
    pub(crate) async fn audit(&self, sid: &str) -> Vec<Value> {
        let listed = self.get(&format!("/session/{sid}/permissions?audit=1")).await.ok();
        listed["audit"].as_array().expect("audit").clone()
    }

    /// The pending requests of a session, as `GET .../permissions` lists them.
    pub(crate) async fn pending(&self, sid: &str) -> Vec<Value> {
        let listed = self.get(&format!("/session/{sid}/permissions")).await.ok();
        listed["pending"].as_array().expect("pending").clone()
    }

    /// Polls the listing (bounded) until a request is pending; returns the first. For when nobody
    /// is subscribed, so the listing is the only way to learn of it.
    pub(crate) async fn first_pending(&self, sid: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(first) = self.pending(sid).await.into_iter().next() {
                return first;
            }
            assert!(Instant::now() < deadline, "no pending request within {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(20)).await; // polling a listing; nothing to subscribe to
        }
    }
}

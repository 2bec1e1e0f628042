//! `GET /act/{token}` and `POST /act/{token}`: a notification's action link
//! (`docs/notifications.md#action-links`). The token is the credential (the perimeter lets these
//! routes through without the bearer token, Host still checked), so it is never logged; the
//! request spans record the matched route, `/act/{token}`, not the path.
//!
//! `GET` only shows a confirmation page, so a link preview or a prefetch decides nothing; `POST`
//! casts the vote through the mediator's normal vote path, as the target's `clientId`, marked
//! `via: "link"`.
//!
//! The page shows the pending request whole, as the mediator holds it (every fact revealed: blank
//! runs and invisible characters made visible, nothing cut), so what its button approves is what
//! the person read. A link whose notification could not show the whole request decides only from
//! its page ([`Link::needs_review`]).

use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::ApiError;
use super::extract::{AppState, PathParams};
use super::perimeter::{Peer, is_loopback_peer};
use crate::notify::{Asked, Link, LinkError, well_formed};
use crate::permission::{Choice, Via, Vote, VoteError};

/// The page allows no script, no external resource, no framing, and forms only back to itself.
const PAGE_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
/// The most a page shows of one request, in characters of its revealed facts. A longer request
/// (a megabyte of command) is not shown, and its links do not decide at all: the web app shows it.
const MAX_PAGE_CHARS: usize = 64 * 1024;
/// The form field the page's button sends: the person had the page, the whole request, before them.
const REVIEWED_FIELD: &[u8] = b"reviewed=1";

/// The live link `token` leads to, or the refusal: an unknown token is the same 404 as an unknown
/// route; a client that presented too many unknown tokens (or everyone together) gets 429 for the
/// next unknown one until the window passes. A live token is looked up first and always served,
/// so nobody's bogus tokens lock a link's holder out (issue #27, finding 5).
fn live_link(d: &AppState, peer: Peer, token: &str) -> Result<Link, ApiError> {
    let links = d.notifier.links();
    let now = Instant::now();
    let ip = peer.0.ip();
    let unknown = || {
        if links.is_throttled(ip, now) || !links.unknown_attempt(ip, now) {
            ApiError::TooManyLinkAttempts
        } else {
            ApiError::RouteNotFound
        }
    };
    if !well_formed(token) {
        return Err(unknown());
    }
    match links.get(token) {
        Ok(link) => Ok(link),
        Err(LinkError::Unknown) => Err(unknown()),
        Err(LinkError::Expired) => Err(ApiError::LinkExpired),
    }
}

/// What the link's request asks, while it awaits a decision; expires the link when it does not.
fn asked(d: &AppState, token: &str, link: &Link) -> Option<Asked> {
    let request =
        d.session(&link.session_id).ok().and_then(|s| s.permissions().pending_request(&link.request_id));
    if request.is_none() {
        d.notifier.links().expire(token);
    }
    request.map(|r| Asked::of(r.get("toolCall").unwrap_or(&Value::Null)))
}

/// `GET /act/{token}`: what the agent wants, whole, the option, and a button that POSTs here.
pub(super) async fn confirm(
    State(d): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    PathParams(token): PathParams<String>,
) -> Response {
    let (link, asked) = match live_link(&d, peer, &token) {
        Ok(link) => match asked(&d, &token, &link) {
            Some(asked) => (link, asked),
            None => return ApiError::LinkExpired.into_response(),
        },
        Err(e) => return e.into_response(),
    };
    if asked.shown_chars() > MAX_PAGE_CHARS {
        let text = format!(
            "The agent asks to {}, with a request of {} characters: too long to show here. Open the web app to read it whole and decide.",
            asked.kind,
            asked.shown_chars()
        );
        return page(StatusCode::OK, "Decide a permission request", &[text], None);
    }
    let mut paragraphs = vec![format!("The agent asks to {}: {}", asked.kind, asked.title)];
    if let Some(command) = &asked.command {
        paragraphs.push(format!("Command: {command}"));
    }
    if !asked.paths.is_empty() {
        paragraphs.push(format!("Paths: {}", asked.paths.join(", ")));
    }
    page(StatusCode::OK, "Decide a permission request", &paragraphs, Some(&link.option_name))
}

/// `POST /act/{token}`: casts the link's vote. JSON answers (what ntfy's buttons and scripts read),
/// or, on success, a page for a browser's form (`Accept: text/html`).
pub(super) async fn act(
    State(d): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    PathParams(token): PathParams<String>,
    body: Bytes,
) -> Response {
    let html =
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"));
    let reviewed = body.split(|b| *b == b'&').any(|field| field == REVIEWED_FIELD);
    match cast(&d, peer, &token, reviewed) {
        Ok(link) if html => page(StatusCode::OK, "Done", &[format!("Answered: {}.", link.option_name)], None),
        Ok(link) => Json(json!({
            "sessionId": link.session_id, "requestId": link.request_id, "optionId": link.option_id, "via": "link",
        }))
        .into_response(),
        // Errors are the API's JSON, like every other answer (an unknown token's 404 is any
        // unknown URL's).
        Err(e) => e.into_response(),
    }
}

/// Casts the link's vote. `reviewed`: the `POST` came from the link's page (its form field), which
/// showed the request whole; a link that needs it refuses without it (and when the page could not
/// show the request), and stays usable.
fn cast(d: &AppState, peer: Peer, token: &str, reviewed: bool) -> Result<Link, ApiError> {
    let link = live_link(d, peer, token)?;
    let asked = asked(d, token, &link).ok_or(ApiError::LinkExpired)?;
    if link.needs_review && !(reviewed && asked.shown_chars() <= MAX_PAGE_CHARS) {
        return Err(ApiError::LinkNeedsReview);
    }
    let links = d.notifier.links();
    let link = links.claim(token).map_err(|_| ApiError::LinkExpired)?;
    let session = match d.session(&link.session_id) {
        Ok(s) => s,
        Err(_) => {
            links.expire(token);
            return Err(ApiError::LinkExpired);
        }
    };
    if let Some(client) = &link.client_id {
        // The link's holder acts as that client, as a client naming itself in its header does.
        session.touch_client(client);
    }
    let vote = Vote::Outcome {
        choice: Choice::Option(link.option_id.clone()),
        remember: crate::permission::Remember::No,
    };
    let loopback = is_loopback_peer(Some(peer.0));
    match session.permissions().vote_via(
        &link.request_id,
        link.client_id.as_deref(),
        loopback,
        &vote,
        Via::Link,
    ) {
        Ok(()) => Ok(link),
        Err(VoteError::NotFound | VoteError::AlreadyResolved { .. }) => {
            links.expire(token);
            Err(ApiError::LinkExpired)
        }
        Err(e) => {
            // Refused under the session's policy: the request stays pending, and so does the link.
            links.release(token);
            Err(e.into())
        }
    }
}

/// A minimal page, one `<p>` per paragraph; `button` adds the form that POSTs to this same URL.
fn page(status: StatusCode, title: &str, paragraphs: &[String], button: Option<&str>) -> Response {
    let form = button.map_or_else(String::new, |label| {
        format!(
            r#"<form method="post"><input type="hidden" name="reviewed" value="1"><button type="submit">{}</button></form>"#,
            escape(label)
        )
    });
    let text: String = paragraphs.iter().map(|p| format!("<p>{}</p>", escape(p))).collect();
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <title>mediatord — {title}</title><style>body{{font:16px system-ui,sans-serif;margin:2em;max-width:40em}}\
         p{{overflow-wrap:anywhere}}button{{font-size:1.2em;padding:.6em 1.2em}}</style></head><body><h1>{title}</h1>{text}{form}</body></html>",
        title = escape(title),
    );
    let mut response = (status, html).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(PAGE_CSP));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // The URL holds the token: it must not leave in a Referer (nor stay in a cache). Not
    // `no-referrer`: under it a browser sends `Origin: null` with the page's own form, which the
    // perimeter refuses; `same-origin` only ever sends it back here.
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn page_text_is_escaped() {
        assert_eq!(
            super::escape(r#"<script>"x"&'y'</script>"#),
            "&lt;script&gt;&quot;x&quot;&amp;&#39;y&#39;&lt;/script&gt;"
        );
    }
}

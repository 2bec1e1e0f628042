//! `GET /act/{token}` and `POST /act/{token}`: a notification's action link
//! (`docs/notifications.md#action-links`). The token is the credential (the perimeter lets these
//! routes through without the bearer token, Host still checked), so it is never logged; the
//! request spans record the matched route, `/act/{token}`, not the path.
//!
//! `GET` only shows a confirmation page, so a link preview or a prefetch decides nothing; `POST`
//! casts the vote through the mediator's normal vote path, as the target's `clientId`, marked
//! `via: "link"`.
//!
//! The page shows the pending request as every door does ([`present`]: its sections in the same
//! order, every text revealed), bounded as a card with "Show all" (`?all=1`) when it is longer.
//! Its button sends `reviewed=1` only when the page showed the request whole, so what it approves
//! is what the person read: a link whose notification could not show the whole request decides
//! only from a page that did ([`Link::needs_review`]). Refusals are pages too for a browser.

use std::time::Instant;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::error::ApiError;
use super::extract::{AppState, Flags, PathParams};
use super::perimeter::{Local, Peer};
use crate::desk::{Caller, Desk, Refusal, Who};
use crate::notify::{Link, LinkError, well_formed};
use crate::permission::{Choice, Pick, Via, Vote};
use crate::present::{self, Bounds, Tone};
use crate::text::html as escape;

/// The page allows no script, no external resource, no framing, and forms only back to itself.
const PAGE_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
/// The most a page shows of one request, in characters of its revealed facts. A longer request
/// (a megabyte of command) is not shown, and its links do not decide at all: the web app shows it.
const MAX_PAGE_CHARS: usize = 64 * 1024;
/// The form field the page's button sends: the person had the page, the whole request, before them.
const REVIEWED_FIELD: &[u8] = b"reviewed=1";

/// Whether a request of `chars` revealed characters is past what a page shows.
fn too_long_to_show(chars: usize) -> bool {
    chars > MAX_PAGE_CHARS
}

/// The live link `token` leads to, or the refusal: an unknown token is the same 404 as an unknown
/// route; a client that presented too many unknown tokens (or everyone together) gets 429 for the
/// next unknown one until the window passes. A live token is looked up first and always served,
/// so nobody's bogus tokens lock a link's holder out (issue #27, finding 5).
fn live_link(d: &AppState, peer: Peer, token: &str) -> Result<Link, ApiError> {
    let links = d.notifier.links();
    let now = Instant::now();
    let ip = peer.addr.ip();
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

/// The link's request as a person reads it ([`present`]), within `bounds`, while it awaits a
/// decision; expires the link when it does not.
fn asked(d: &AppState, token: &str, link: &Link, bounds: Bounds) -> Option<present::Request> {
    let request =
        d.session(&link.session_id).ok().and_then(|s| s.permissions().pending_request(&link.request_id));
    if request.is_none() {
        d.notifier.links().expire(token);
    }
    request.map(|r| {
        present::request(
            r.get("toolCall").unwrap_or(&Value::Null),
            r.get("options").unwrap_or(&Value::Null),
            bounds,
        )
        .warned(&r)
    })
}

/// Whether the answer is for a browser (a page rather than the API's JSON).
fn wants_html(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"))
}

/// `GET /act/{token}[?all=1]`: what the agent wants, as every door shows it (bounded as a card, or
/// all of it), the option, and a button that POSTs here.
pub(super) async fn confirm(
    State(d): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    PathParams(token): PathParams<String>,
    q: Flags,
) -> Response {
    let html = wants_html(&headers);
    let bounds = if q.all() { Bounds::ALL } else { Bounds::CARD };
    let (link, asked) = match live_link(&d, peer, &token) {
        Ok(link) => match asked(&d, &token, &link, bounds) {
            Some(asked) => (link, asked),
            None => return refusal(ApiError::LinkExpired, html),
        },
        Err(e) => return refusal(e, html),
    };
    let app = app_link(&link.session_id);
    if too_long_to_show(asked.shown_chars()) {
        let text = format!(
            "The agent asks to {}, with a request of {} characters: too long to show here. Open the web app to read it whole and decide.",
            asked.kind,
            asked.shown_chars()
        );
        return page(StatusCode::OK, "Decide a permission request", &paragraph(&text), &app);
    }
    let mut body = request_html(&asked, &link.option_id);
    // A question this link accepts: its form, whose answers the POST carries (never the URL).
    let fields = question_asked(&d, &link).map_or_else(String::new, |q| fields_html(&q));
    let form = |label: &str, reviewed: bool| form(label, reviewed, &fields);
    if asked.whole() {
        body.push_str(&form(&link.option_name, true));
    } else if link.needs_review {
        body.push_str(
            r#"<p class="note">Part of the request is left out above. Read all of it to decide.</p><p><a class="button" href="?all=1">Show all</a></p>"#,
        );
    } else {
        body.push_str(&form(&link.option_name, false));
        body.push_str(r#"<p><a href="?all=1">Show all</a></p>"#);
    }
    page(StatusCode::OK, "Decide a permission request", &body, &app)
}

/// `POST /act/{token}`: casts the link's vote. JSON answers (what ntfy's buttons and scripts read),
/// or pages for a browser's form (`Accept: text/html`), the refusals included.
pub(super) async fn act(
    State(d): State<AppState>,
    Extension(desk): Extension<Arc<Desk>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Extension(Local(local)): Extension<Local>,
    headers: HeaderMap,
    PathParams(token): PathParams<String>,
    body: Bytes,
) -> Response {
    let html = wants_html(&headers);
    let reviewed = body.split(|b| *b == b'&').any(|field| field == REVIEWED_FIELD);
    let answers = answers_posted(&body);
    match cast(&d, &desk, peer, local, &token, reviewed, answers).await {
        Ok(link) if html => page(
            StatusCode::OK,
            "Done",
            &paragraph(&format!("Answered: {}.", link.option_name)),
            &app_link(&link.session_id),
        ),
        Ok(link) => Json(json!({
            "sessionId": link.session_id, "requestId": link.request_id, "optionId": link.option_id, "via": "link",
        }))
        .into_response(),
        // Errors are the API's JSON, like every other answer (an unknown token's 404 is any
        // unknown URL's), or the same refusal as a page.
        Err(e) => refusal(e, html),
    }
}

/// Casts the link's vote. `reviewed`: the `POST` came from the link's page (its form field), which
/// showed the request whole; a link that needs it refuses without it (and when the page could not
/// show the request), and stays usable.
async fn cast(
    d: &AppState,
    desk: &Desk,
    peer: Peer,
    local: bool,
    token: &str,
    reviewed: bool,
    answers: Option<crate::permission::Answers>,
) -> Result<Link, ApiError> {
    let link = live_link(d, peer, token)?;
    let asked = asked(d, token, &link, Bounds::ALL).ok_or(ApiError::LinkExpired)?;
    if link.needs_review && (!reviewed || too_long_to_show(asked.shown_chars())) {
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
    // The link's holder acts as its target's client id, as a client naming itself does.
    let caller =
        Caller { client: link.client_id.clone(), minted: false, who: Who::Link, local, via: Via::Link };
    let pick = Pick::Outcome {
        choice: Choice::Option(link.option_id.clone()),
        remember: crate::permission::Remember::No,
    };
    let vote = Vote { pick, answers };
    match desk.vote(&session, &caller, &link.request_id, &vote).await {
        Ok(()) => Ok(link),
        Err(Refusal::PermissionRequestNotFound | Refusal::PermissionAlreadyResolved { .. }) => {
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

/// A refusal: the API's JSON, or for a browser the same status (and headers) with a page saying
/// what happened in words.
fn refusal(e: ApiError, html: bool) -> Response {
    if !html {
        return e.into_response();
    }
    let (title, text) = match &e {
        ApiError::LinkExpired => (
            "This link was used",
            "This link has already been used, or its request was decided, timed out or its session ended. Nothing more to do here.".to_owned(),
        ),
        ApiError::RouteNotFound => ("Unknown link", "This link is not known here: it may be mistyped or too old.".to_owned()),
        ApiError::TooManyLinkAttempts => {
            ("Too many attempts", "Too many unknown links came from here. Try again in a minute.".to_owned())
        }
        ApiError::LinkNeedsReview => (
            "Read the request first",
            "This answer approves something the notification could not show whole: open the link, read the request, and decide there.".to_owned(),
        ),
        other => ("Not answered", format!("{} ({}).", other.body()["error"].as_str().unwrap_or("refused"), other.code())),
    };
    let json = e.into_response();
    let mut response = page(json.status(), title, &paragraph(&text), "../");
    for (name, value) in json.headers() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            response.headers_mut().insert(name.clone(), value.clone());
        }
    }
    response
}

/// Where the web app shows `session_id`, relative to `/act/{token}` (so it holds behind a proxy's
/// sub-path too).
fn app_link(session_id: &str) -> String {
    let mut out = String::from("../#/s/");
    for b in session_id.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn paragraph(text: &str) -> String {
    format!("<p>{}</p>", escape(text))
}

/// The request's sections in [`present`]'s order, then the link's option with what it carries.
fn request_html(asked: &present::Request, option_id: &str) -> String {
    let mut out = String::new();
    let tool = asked.tool.as_ref().map_or_else(String::new, |t| format!(" with {}", escape(t)));
    out.push_str(&format!(
        r#"<p class="what">The agent asks to <strong>{}</strong>{tool}:</p><p class="title">{}</p>"#,
        escape(&asked.kind),
        escape(&asked.title)
    ));
    if let Some(warning) = &asked.warning {
        out.push_str(&format!(r#"<p class="warning" role="alert">{}</p>"#, escape(warning)));
    }
    for s in &asked.sections {
        out.push_str(&section_html(s));
    }
    for c in &asked.choices {
        if c.option_id != option_id {
            continue;
        }
        out.push_str(&format!(
            r#"<p class="option">This link answers <strong>{}</strong> ({}).</p>"#,
            escape(&c.name),
            escape(&c.kind)
        ));
        if let Some(meaning) = c.meaning {
            out.push_str(&format!(r#"<p class="note">{}</p>"#, escape(meaning)));
        }
        for s in &c.sections {
            out.push_str(&section_html(s));
        }
    }
    out
}

fn section_html(s: &present::Section) -> String {
    let mut out = format!(r#"<section><h2>{}</h2><pre>"#, escape(&s.heading));
    for l in &s.lines {
        let class = match l.tone {
            Tone::Plain => "plain",
            Tone::Added => "added",
            Tone::Removed => "removed",
            Tone::Hunk => "hunk",
            Tone::Note => "note",
        };
        out.push_str(&format!(r#"<span class="{class}">{}"#, escape(&l.text)));
        if l.cut_chars > 0 {
            out.push_str(&format!(r#"<span class="cut"> … {} more characters</span>"#, l.cut_chars));
        }
        out.push_str("</span>\n");
    }
    out.push_str("</pre>");
    if s.omitted_lines > 0 {
        out.push_str(&format!(r#"<p class="cut">… {} more lines</p>"#, s.omitted_lines));
    }
    out.push_str("</section>");
    out
}

/// The form that POSTs the link's answer; `reviewed` only when the page showed the request whole;
/// `fields`, a question's inputs ([`fields_html`]).
fn form(label: &str, reviewed: bool, fields: &str) -> String {
    let field = if reviewed { r#"<input type="hidden" name="reviewed" value="1">"# } else { "" };
    format!(r#"<form method="post">{field}{fields}<button type="submit">{}</button></form>"#, escape(label))
}

/// The question the link's request asks, when the link's option accepts it (a decline asks
/// nothing more).
fn question_asked(d: &AppState, link: &Link) -> Option<crate::permission::Question> {
    let session = d.session(&link.session_id).ok()?;
    let pending = session.permissions().pending_request(&link.request_id)?;
    let accepts = pending["options"].as_array()?.iter().any(|o| {
        o["optionId"] == link.option_id.as_str() && o["kind"].as_str().is_some_and(|k| k.starts_with("allow"))
    });
    session.permissions().question(&link.request_id).filter(|_| accepts)
}

/// The form field of the answer to `key` (`answer.<key>`; `other.<key>`: a single choice's text of
/// one's own, which wins over the choice).
const ANSWER_PREFIX: &str = "answer.";
const OTHER_PREFIX: &str = "other.";

/// A question's fields as HTML inputs (every text escaped): text (a password box for a secret),
/// numbers, yes/no, radio buttons, check boxes; a URL's link with its host, opened in a new tab.
fn fields_html(q: &crate::permission::Question) -> String {
    let wire = q.wire();
    let mut out = String::new();
    if let (Some(url), Some(host)) = (wire["url"].as_str(), wire["host"].as_str()) {
        out.push_str(&format!(
            r#"<p>Opens a page on <strong>{}</strong>: <a href="{}" target="_blank" rel="noopener noreferrer">{}</a></p>"#,
            escape(host),
            escape(url),
            escape(url)
        ));
    }
    for f in wire["fields"].as_array().into_iter().flatten() {
        let key = escape(f["key"].as_str().unwrap_or(""));
        let name = format!("{ANSWER_PREFIX}{key}");
        let title = escape(f["title"].as_str().unwrap_or(""));
        let text = f["text"].as_str().filter(|t| !t.is_empty() && Some(*t) != f["title"].as_str());
        let text = text.map_or(String::new(), |t| format!(r#"<span class="note"> {}</span>"#, escape(t)));
        let required = if f["required"] == true { " *" } else { "" };
        out.push_str(&format!(r#"<fieldset data-key="{key}"><legend>{title}{required}</legend>{text}"#));
        match f["type"].as_str().unwrap_or("text") {
            "boolean" => out.push_str(&format!(
                r#"<select name="{name}"><option value="">—</option><option value="true">Yes</option><option value="false">No</option></select>"#
            )),
            "choice" => {
                let kind = if f["multiple"] == true { "checkbox" } else { "radio" };
                for c in f["choices"].as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        r#"<label><input type="{kind}" name="{name}" value="{}"> {}</label> "#,
                        escape(c["value"].as_str().unwrap_or("")),
                        escape(c["label"].as_str().unwrap_or(""))
                    ));
                }
                if f["other"] == true {
                    let other = if f["multiple"] == true { name.clone() } else { format!("{OTHER_PREFIX}{key}") };
                    out.push_str(&format!(r#"<input type="text" name="{other}" placeholder="Other" autocomplete="off">"#));
                }
            }
            kind => {
                let input = if f["sensitive"] == true { "password" } else { "text" };
                let mode = match kind {
                    "integer" => r#" inputmode="numeric""#,
                    "number" => r#" inputmode="decimal""#,
                    _ => "",
                };
                out.push_str(&format!(r#"<input type="{input}" name="{name}"{mode} autocomplete="off">"#));
            }
        }
        out.push_str("</fieldset>");
    }
    out
}

/// The answers a page's form POSTed (`answer.<key>=…`, a key again for several choices; an empty
/// value is no answer), or `None` when it sent none. The daemon checks and converts them as any
/// vote's.
fn answers_posted(body: &[u8]) -> Option<crate::permission::Answers> {
    let mut answers = serde_json::Map::new();
    let mut others = Vec::new();
    for (name, value) in url::form_urlencoded::parse(body) {
        if value.is_empty() {
            continue;
        }
        if let Some(key) = name.strip_prefix(OTHER_PREFIX) {
            others.push((key.to_owned(), value.into_owned()));
            continue;
        }
        let Some(key) = name.strip_prefix(ANSWER_PREFIX) else { continue };
        match answers.get_mut(key) {
            None => {
                answers.insert(key.to_owned(), json!(value));
            }
            Some(Value::Array(list)) => list.push(json!(value)),
            Some(first) => *first = json!([first.take(), value]),
        }
    }
    for (key, value) in others {
        answers.insert(key, json!(value));
    }
    (!answers.is_empty()).then_some(answers)
}

/// Pages share one look: readable on a phone, light or dark as the device is, the app one tap away.
const PAGE_STYLE: &str = "\
:root{color-scheme:light dark;--muted:#6b7280;--add:#dcfce7;--del:#fee2e2;--code:#f3f4f6;--accent:#2563eb;--warn:#b91c1c}\
@media (prefers-color-scheme:dark){:root{--add:#14532d;--del:#7f1d1d;--code:#1f2937;--accent:#60a5fa;--warn:#fca5a5}}\
body{font:16px/1.5 system-ui,sans-serif;margin:0 auto;padding:1rem;max-width:48rem}\
header{display:flex;justify-content:space-between;align-items:center;border-bottom:1px solid var(--muted);padding-bottom:.5rem}\
header a{font-weight:600;text-decoration:none;color:var(--accent)}\
h1{font-size:1.3rem}h2{font-size:.85rem;font-family:ui-monospace,monospace;color:var(--muted);margin:.8rem 0 .2rem;overflow-wrap:anywhere}\
p{overflow-wrap:anywhere}.title{font-weight:600}.note,.cut{color:var(--muted);font-size:.9rem}.warning{color:var(--warn);font-weight:600}\
pre{background:var(--code);padding:.5rem 0;border-radius:8px;white-space:pre-wrap;overflow-wrap:anywhere;font:14px/1.4 ui-monospace,monospace;margin:0}\
pre>span{display:block;padding:0 .75rem}.added{background:var(--add)}.removed{background:var(--del)}.hunk,.note{color:var(--muted)}\
button,a.button{display:inline-block;font-size:1.1rem;padding:.7em 1.4em;border-radius:10px;border:2px solid var(--accent);background:var(--accent);color:#fff;text-decoration:none;margin-top:1rem}";

/// A page: the header with a link into the app (`app`, relative to this URL), the title, `body`
/// (HTML made here, every text in it escaped).
fn page(status: StatusCode, title: &str, body: &str, app: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>mediatord — {title}</title><style>{PAGE_STYLE}</style></head><body>\
         <header><a href=\"{app}\">mediatord</a><a href=\"{app}\">Open the app</a></header><h1>{title}</h1>{body}</body></html>",
        title = escape(title),
        app = escape(app),
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::answers_posted;

    #[test]
    fn answers_come_from_the_forms_body_a_key_again_for_several() {
        let posted = answers_posted(
            b"reviewed=1&answer.1=serde&answer.0=jiff&answer.1=tz&answer.1=a%26b&other.0=mine&answer.x=&y=1",
        );
        assert_eq!(
            posted.map(Value::Object),
            Some(json!({"0": "mine", "1": ["serde", "tz", "a&b"]})),
            "an Other text wins over the choice; an empty value is no answer; other fields are not answers"
        );
        assert_eq!(answers_posted(b"reviewed=1"), None);
        assert_eq!(answers_posted(b""), None);
    }

    #[test]
    fn a_page_shows_up_to_64_kib_characters_of_a_request() {
        assert!(!super::too_long_to_show(0));
        assert!(!super::too_long_to_show(65_536));
        assert!(super::too_long_to_show(65_537));
    }

    /// A line the page cut says how much it left out, and a section the lines it left out; what is
    /// whole says nothing more.
    #[test]
    fn a_cut_line_and_a_cut_section_say_how_much_is_left_out() {
        use crate::present::{Line, Section, Tone};
        let line = |text: &str, cut_chars| Line { tone: Tone::Added, text: text.into(), cut_chars };
        let html = super::section_html(&Section {
            heading: "Diff".into(),
            lines: vec![line("whole", 0), line("<cut>", 5)],
            omitted_lines: 0,
        });
        assert!(html.contains(r#"<span class="added">whole</span>"#), "{html}");
        assert!(
            html.contains(
                r#"<span class="added">&lt;cut&gt;<span class="cut"> … 5 more characters</span></span>"#
            ),
            "{html}"
        );
        assert_eq!(html.matches("more characters").count(), 1, "{html}");
        assert!(!html.contains("more lines"), "every line shown: {html}");
        let cut = super::section_html(&Section {
            heading: "Diff".into(),
            lines: vec![line("one", 0)],
            omitted_lines: 3,
        });
        assert!(cut.ends_with(r#"</pre><p class="cut">… 3 more lines</p></section>"#), "{cut}");
    }

    /// A refusal shown as a page keeps the API's status and headers (a throttle's Retry-After), with
    /// the page's own type.
    #[test]
    fn a_refusal_page_keeps_the_status_and_retry_after() {
        let page = super::refusal(super::ApiError::TooManyLinkAttempts, true);
        assert_eq!(page.status(), axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert!(page.headers().contains_key(axum::http::header::RETRY_AFTER), "{:?}", page.headers());
        assert_eq!(page.headers()[axum::http::header::CONTENT_TYPE], "text/html; charset=utf-8");
    }

    /// Each kind of field as the page's input: the note only when it says more than the title, a
    /// mark on a required field, numbers' keyboards, a secret's password box, and qwen's Other: its
    /// own text box for one choice, one more choice among several.
    #[test]
    fn a_questions_fields_are_the_inputs_a_phone_expects() {
        use crate::permission::Question;
        let form = Question::from_elicitation(&json!({
            "mode": "form", "message": "Deploy",
            "requestedSchema": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "title": "Name", "description": "Name"},
                "size": {"type": "number", "title": "Size", "description": "In GiB"},
                "count": {"type": "integer", "title": "Count"},
                "agree": {"type": "boolean", "title": "Agree"},
                "token": {"type": "string", "title": "Token"},
            }},
        }))
        .expect("a form");
        let html = super::fields_html(&form);
        for part in [
            r#"<legend>Name *</legend><input type="text" name="answer.name" autocomplete="off">"#,
            r#"<legend>Size</legend><span class="note"> In GiB</span><input type="text" name="answer.size" inputmode="decimal" autocomplete="off">"#,
            r#"<legend>Count</legend><input type="text" name="answer.count" inputmode="numeric" autocomplete="off">"#,
            r#"<select name="answer.agree">"#,
            r#"<input type="password" name="answer.token" autocomplete="off">"#,
        ] {
            assert!(html.contains(part), "{part} in {html}");
        }
        let qwen = Question::from_qwen(&json!({"_meta": {"qwenInteractionKind": "user_question", "qwenQuestions": [
            {"question": "One?", "header": "One", "options": [{"label": "a"}]},
            {"question": "Several?", "header": "Several", "multiSelect": true, "options": [{"label": "b"}]},
        ]}}))
        .expect("a question")
        .expect("well formed");
        let html = super::fields_html(&qwen);
        for part in [
            r#"<input type="radio" name="answer.0" value="a"> a</label> <input type="text" name="other.0" placeholder="Other""#,
            r#"<input type="checkbox" name="answer.1" value="b"> b</label> <input type="text" name="answer.1" placeholder="Other""#,
        ] {
            assert!(html.contains(part), "{part} in {html}");
        }
    }

    #[test]
    fn page_text_is_escaped() {
        assert_eq!(
            super::escape(r#"<script>"x"&'y'</script>"#),
            "&lt;script&gt;&quot;x&quot;&amp;&#39;y&#39;&lt;/script&gt;"
        );
    }
}

//! Notification targets (`--notify URL`, `serve.notify` in the config file) and `--public-url`,
//! validated at boot (`docs/notifications.md`).
//!
//! Targets are `http://` or `https://` (the daemon's TLS client trusts the system's roots and
//! `SSL_CERT_FILE`/`SSL_CERT_DIR`, `crate::tls`).

use std::time::Duration;

use serde_json::Value;

use super::file::suggest;
use super::{ConfigError, Secret, refuse};
use crate::event::EventKind;

/// Targets at most: each has its own queue and worker task.
pub const MAX_TARGETS: usize = 16;
/// Extra headers per target, and the longest header value: generous for an `Authorization`
/// header, small enough that a target's request head stays far below any server's limit.
const MAX_HEADERS: usize = 16;
const MAX_HEADER_VALUE: usize = 4096;
/// The longest target URL or `--public-url`.
const MAX_URL: usize = 2048;
/// ntfy's own limit on a topic name.
const MAX_NTFY_TOPIC: usize = 64;
/// The shortest accepted `remindAfterMs`: a reminder every few seconds would be spam, not escalation.
const MIN_REMIND_AFTER_MS: u64 = 1000;

/// The events a target may ask for, with the name it asks with.
const EVENTS: &[(&str, EventKind)] = &[
    ("permission_request", EventKind::PermissionRequest),
    ("turn_complete", EventKind::TurnComplete),
    ("turn_error", EventKind::TurnError),
    ("session_died", EventKind::SessionDied),
];
/// Keys of one target object in the config file.
const TARGET_KEYS: &[&str] =
    &["url", "events", "format", "secret", "clientId", "headers", "remindAfterMs", "escalate"];
/// Keys of a target's `escalate` object.
const ESCALATE_KEYS: &[&str] = &["afterMs", "to"];
/// Headers a target may not set: the daemon writes them (or they frame the request).
const RESERVED_HEADERS: &[&str] =
    &["host", "content-length", "content-type", "transfer-encoding", "connection", "user-agent"];

/// The body a target receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyFormat {
    /// mediatord's own JSON document, for webhooks.
    Json,
    /// An ntfy publish body (JSON, to the server's root, with the topic from the URL's path).
    Ntfy,
    /// A Slack incoming-webhook message: Block Kit, with link buttons to the action pages.
    Slack,
    /// A Discord webhook execution: one embed, the action pages as links.
    Discord,
    /// A Telegram Bot API `sendMessage`, with an inline keyboard of URL buttons.
    Telegram,
}

impl NotifyFormat {
    /// Every format, by the name `format` and the `name+https://` prefix use.
    pub const ALL: [(&'static str, NotifyFormat); 5] = [
        ("json", NotifyFormat::Json),
        ("ntfy", NotifyFormat::Ntfy),
        ("slack", NotifyFormat::Slack),
        ("discord", NotifyFormat::Discord),
        ("telegram", NotifyFormat::Telegram),
    ];

    pub fn parse(name: &str) -> Option<NotifyFormat> {
        NotifyFormat::ALL.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
    }

    pub fn name(self) -> &'static str {
        NotifyFormat::ALL.iter().find(|(_, f)| *f == self).map_or("json", |(n, _)| n)
    }
}

/// `ntfy+https://ntfy.sh/topic` → (`Some(Ntfy)`, `https://ntfy.sh/topic`); a URL without a known
/// `name+` before its scheme is returned whole.
pub fn split_format(raw: &str) -> (Option<NotifyFormat>, &str) {
    if let Some((name, rest)) = raw.split_once('+')
        && !name.contains(':')
        && let Some(format) = NotifyFormat::parse(&name.to_ascii_lowercase())
    {
        return (Some(format), rest);
    }
    (None, raw)
}

/// An `http(s)://host[:port]/path` URL, split.
#[derive(Clone, PartialEq, Eq)]
pub struct TargetUrl {
    /// `https://`: the request goes over TLS, and the server's certificate must be trusted.
    pub tls: bool,
    /// `host:port` (IPv6 in brackets), for logs and the connection.
    pub authority: String,
    /// The `Host` header: the authority without the scheme's default port (80, 443), as
    /// browsers and curl send it.
    pub host_header: String,
    /// The host as it is connected to (no brackets).
    pub host: String,
    pub port: u16,
    /// The path and query, at least `/`.
    pub path: String,
}

/// Only the authority: a path may carry a secret (an ntfy topic is a password).
impl std::fmt::Debug for TargetUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}/…", if self.tls { "https" } else { "http" }, self.authority)
    }
}

/// One notification target.
#[derive(Clone)]
pub struct NotifyTarget {
    pub url: TargetUrl,
    /// Empty only for a target that hears nothing but what another target escalates to it.
    pub events: Vec<EventKind>,
    pub format: NotifyFormat,
    /// Signs each body (`X-Mediatord-Signature`) when set.
    pub secret: Option<Secret>,
    /// The identity a decision made through this target's links votes as; `None` votes without one.
    pub client_id: Option<String>,
    /// Extra headers (an ntfy access token, say): names and values, both validated.
    pub headers: Vec<(String, Secret)>,
    /// Send a permission request again while it is still pending, this long after the last time.
    pub remind_after: Option<Duration>,
    /// Hand a request still pending this long after this target was first told to another target.
    pub escalate: Option<Escalation>,
}

/// `escalate`: after `after`, a request nobody has decided goes to target `to` as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escalation {
    pub after: Duration,
    /// The index of the target in `serve.notify`.
    pub to: usize,
}

/// Never the path, the secret or a header's value.
impl std::fmt::Debug for NotifyTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyTarget")
            .field("url", &self.url)
            .field("events", &self.events)
            .field("format", &self.format)
            .field("secret", &self.secret.is_some())
            .field("client_id", &self.client_id)
            .field("headers", &self.headers.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>())
            .field("remind_after", &self.remind_after)
            .field("escalate", &self.escalate)
            .finish()
    }
}

impl NotifyTarget {
    /// Whether this target is sent events of `kind`. An agent refused as a client goes wherever
    /// permission requests go: it is an agent trying to decide for itself; so does a turn the
    /// reviewers' breaker stopped: whoever would have been asked hears why the agent stopped.
    pub fn wants(&self, kind: EventKind) -> bool {
        let kind = match kind {
            EventKind::AgentRefusedAsClient | EventKind::ReviewBreaker => EventKind::PermissionRequest,
            other => other,
        };
        self.events.contains(&kind)
    }
}

/// `http(s)://host[:port][/path]`: no user info (credentials go in `headers`), no fragment.
pub fn parse_target_url(raw: &str) -> Result<TargetUrl, ConfigError> {
    parse_http_url(raw, "notification target", "put credentials in the target's headers")
}

/// `http(s)://host[:port][/path]` of what `what` names in its errors; no user info (`credentials`
/// says where they go instead), no fragment.
pub(super) fn parse_http_url(raw: &str, what: &str, credentials: &str) -> Result<TargetUrl, ConfigError> {
    let bad = |why: &str| Err(ConfigError(format!("{what} {}: {why}", shown_url(raw))));
    if raw.len() > MAX_URL {
        return bad(&format!("longer than {MAX_URL} bytes"));
    }
    let lower = raw.to_ascii_lowercase();
    let (tls, rest) = if lower.starts_with("https://") {
        (true, &raw["https://".len()..])
    } else if lower.starts_with("http://") {
        (false, &raw["http://".len()..])
    } else {
        return bad("expected http(s)://host[:port]/path");
    };
    if raw.bytes().any(|b| b.is_ascii_control() || b == b' ') || rest.contains('#') {
        return bad("spaces, control characters and fragments are not allowed");
    }
    let (authority, path) = match rest.find(['/', '?']) {
        Some(at) => (&rest[..at], rest[at..].to_owned()),
        None => (rest, "/".to_owned()),
    };
    let path = if path.starts_with('?') { format!("/{path}") } else { path };
    if authority.contains('@') {
        return bad(&format!("user info in the URL is not allowed: {credentials}"));
    }
    let default_port = if tls { 443 } else { 80 };
    let Some((host, port)) = split_host_port(authority, default_port) else {
        return bad("malformed host or port");
    };
    let shown_host = if host.contains(':') { format!("[{host}]") } else { host.clone() };
    let host_header = if port == default_port { shown_host.clone() } else { format!("{shown_host}:{port}") };
    Ok(TargetUrl { tls, authority: format!("{shown_host}:{port}"), host_header, host, port, path })
}

/// `host`, `host:port`, `[v6]` or `[v6]:port` → (host without brackets, port; `default_port`
/// without one).
fn split_host_port(authority: &str, default_port: u16) -> Option<(String, u16)> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        host.parse::<std::net::Ipv6Addr>().ok()?;
        (host.to_owned(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (authority.to_owned(), None),
        }
    };
    let valid_host = !host.is_empty()
        && (host.contains(':')
            || host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-')));
    if !valid_host {
        return None;
    }
    let port = match port {
        None => default_port,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0)?,
    };
    Some((host, port))
}

/// A URL as it may appear in a message: scheme and authority only (the path may be a secret topic).
fn shown_url(raw: &str) -> String {
    let cut = raw.find("://").map_or(0, |at| at + 3);
    let end = raw[cut..].find(['/', '?', '#']).map_or(raw.len(), |at| cut + at);
    let authority = &raw[cut..end];
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    format!("{}{authority}{}", &raw[..cut], if end < raw.len() { "/…" } else { "" })
}

/// `--public-url`: `http(s)://host[:port][/prefix]`, kept without a trailing `/`.
pub(super) fn parse_public_url(raw: &str) -> Result<String, ConfigError> {
    let bad = || {
        refuse(format!(
            "malformed --public-url {raw:?}: expected http(s)://host[:port][/prefix], e.g. https://mediatord.example.net"
        ))
    };
    let lower = raw.to_ascii_lowercase();
    let rest = match (lower.strip_prefix("http://"), lower.strip_prefix("https://")) {
        (Some(_), _) => &raw["http://".len()..],
        (_, Some(_)) => &raw["https://".len()..],
        _ => return bad(),
    };
    if raw.len() > MAX_URL
        || raw.bytes().any(|b| b.is_ascii_control() || b == b' ' || matches!(b, b'?' | b'#'))
    {
        return bad();
    }
    let authority = rest.split('/').next().unwrap_or("");
    if authority.contains('@') || split_host_port(authority, 80).is_none() {
        return bad();
    }
    Ok(raw.trim_end_matches('/').to_owned())
}

fn parse_events(v: &Value, at: &str) -> Result<Vec<EventKind>, ConfigError> {
    let Value::Array(items) = v else { return refuse(format!("{at}.events must be a list of event names")) };
    let mut out = Vec::new();
    for item in items {
        let Some(name) = item.as_str() else { return refuse(format!("{at}.events must hold strings")) };
        let Some((_, kind)) = EVENTS.iter().find(|(n, _)| *n == name) else {
            let names: Vec<&str> = EVENTS.iter().map(|(n, _)| *n).collect();
            let hint = match suggest(name, &names) {
                Some(k) => format!("did you mean {k}?"),
                None => format!("known events: {}", names.join(", ")),
            };
            return refuse(format!("{at}.events: unknown event {name:?}; {hint}"));
        };
        if !out.contains(kind) {
            out.push(*kind);
        }
    }
    Ok(out)
}

fn valid_client_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

fn parse_headers(v: &Value, at: &str) -> Result<Vec<(String, Secret)>, ConfigError> {
    let Value::Object(map) = v else { return refuse(format!("{at}.headers must be an object of strings")) };
    if map.len() > MAX_HEADERS {
        return refuse(format!("{at}.headers: at most {MAX_HEADERS} headers"));
    }
    let mut out = Vec::new();
    for (name, value) in map {
        let token = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        let lower = name.to_ascii_lowercase();
        if !token || RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("x-mediatord-") {
            return refuse(format!("{at}.headers: {name:?} is not a header the target may set"));
        }
        let Some(value) = value.as_str() else {
            return refuse(format!("{at}.headers.{name} must be a string"));
        };
        if value.len() > MAX_HEADER_VALUE || value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return refuse(format!(
                "{at}.headers.{name}: control characters or longer than {MAX_HEADER_VALUE} bytes"
            ));
        }
        out.push((name.clone(), Secret::from(value.to_owned())));
    }
    Ok(out)
}

/// One `serve.notify` entry: a URL, or an object with the keys of [`TARGET_KEYS`].
pub(super) fn parse_target(entry: &Value, index: usize) -> Result<NotifyTarget, ConfigError> {
    let at = format!("serve.notify[{index}]");
    let map = match entry {
        Value::String(url) => return target_from_url(url),
        Value::Object(map) => map,
        _ => return refuse(format!("{at} must be a URL or an object")),
    };
    for key in map.keys() {
        if !TARGET_KEYS.contains(&key.as_str()) {
            let hint = match suggest(key, TARGET_KEYS) {
                Some(k) => format!("did you mean {at}.{k}?"),
                None => format!("known keys: {}", TARGET_KEYS.join(", ")),
            };
            return refuse(format!("config file: unknown key {at}.{key}; {hint}"));
        }
    }
    let string = |key: &str| -> Result<Option<&str>, ConfigError> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => refuse(format!("{at}.{key} must be a string")),
        }
    };
    let Some(url) = string("url")? else { return refuse(format!("{at}.url is required")) };
    let mut target = target_from_url(url)?;
    if let Some(events) = map.get("events").filter(|v| !v.is_null()) {
        target.events = parse_events(events, &at)?;
    }
    match string("format")? {
        None => {}
        Some(name) => match NotifyFormat::parse(name) {
            Some(format) if split_format(url).0.is_some_and(|f| f != format) => {
                return refuse(format!(
                    "{at}: format {name:?} and the URL's {}+ prefix disagree",
                    split_format(url).0.map_or("", |f| f.name())
                ));
            }
            Some(format) => target.format = format,
            None => {
                let names: Vec<&str> = NotifyFormat::ALL.iter().map(|(n, _)| *n).collect();
                return refuse(format!("{at}.format {name:?}: expected one of {}", names.join(", ")));
            }
        },
    }
    check_format_url(&target, &at)?;
    target.secret = match string("secret")? {
        None => None,
        Some("") => return refuse(format!("{at}.secret must not be empty")),
        Some(s) => Some(Secret::from(s.to_owned())),
    };
    target.client_id = match string("clientId")? {
        None => None,
        Some(id) if valid_client_id(id) => Some(id.to_owned()),
        Some(_) => return refuse(format!("{at}.clientId: expected 1-128 characters of A-Z a-z 0-9 . _ : -")),
    };
    if let Some(headers) = map.get("headers").filter(|v| !v.is_null()) {
        target.headers = parse_headers(headers, &at)?;
    }
    target.escalate = match map.get("escalate") {
        None | Some(Value::Null) => None,
        Some(Value::Object(e)) => {
            if let Some(key) = e.keys().find(|k| !ESCALATE_KEYS.contains(&k.as_str())) {
                return refuse(format!(
                    "config file: unknown key {at}.escalate.{key}; known keys: afterMs, to"
                ));
            }
            let after = e.get("afterMs").and_then(Value::as_u64).filter(|ms| *ms >= MIN_REMIND_AFTER_MS);
            let to = e.get("to").and_then(Value::as_u64).and_then(|i| usize::try_from(i).ok());
            match (after, to) {
                (Some(ms), Some(to)) => Some(Escalation { after: Duration::from_millis(ms), to }),
                _ => {
                    return refuse(format!(
                        "{at}.escalate: expected {{\"afterMs\": at least {MIN_REMIND_AFTER_MS}, \"to\": the index of another target}}"
                    ));
                }
            }
        }
        Some(_) => return refuse(format!("{at}.escalate must be an object {{afterMs, to}}")),
    };
    target.remind_after = match map.get("remindAfterMs") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(0) => None,
            Some(ms) if ms >= MIN_REMIND_AFTER_MS => Some(Duration::from_millis(ms)),
            _ => {
                return refuse(format!(
                    "{at}.remindAfterMs must be 0 (no reminder) or at least {MIN_REMIND_AFTER_MS}"
                ));
            }
        },
    };
    Ok(target)
}

/// A target given only as a URL (`--notify URL`): JSON, permission requests, no secret.
/// A target from its URL, `format+` prefix included (`ntfy+https://ntfy.sh/topic`).
pub(super) fn target_from_url(raw: &str) -> Result<NotifyTarget, ConfigError> {
    let (format, url) = split_format(raw);
    let target = NotifyTarget {
        url: parse_target_url(url)?,
        events: vec![EventKind::PermissionRequest],
        format: format.unwrap_or(NotifyFormat::Json),
        secret: None,
        client_id: None,
        headers: Vec::new(),
        remind_after: None,
        escalate: None,
    };
    check_format_url(&target, &format!("notification target {}", shown_url(url)))?;
    Ok(target)
}

/// What a format needs of its URL: ntfy, the topic as the one path segment; Telegram, a
/// `chat_id` in the query (the bot token is in the path, `/bot<token>/sendMessage`).
fn check_format_url(target: &NotifyTarget, at: &str) -> Result<(), ConfigError> {
    match target.format {
        NotifyFormat::Ntfy => {
            let topic = target.url.path.trim_start_matches('/');
            if topic.is_empty() || topic.contains(['/', '?']) || topic.len() > MAX_NTFY_TOPIC {
                return refuse(format!(
                    "{at}: an ntfy target's URL is the server and the topic, http(s)://host[:port]/<topic> (one path segment)"
                ));
            }
        }
        NotifyFormat::Telegram => {
            if telegram_chat_id(&target.url).is_none() {
                return refuse(format!(
                    "{at}: a telegram target's URL is https://api.telegram.org/bot<token>/sendMessage?chat_id=<chat>"
                ));
            }
        }
        NotifyFormat::Json | NotifyFormat::Slack | NotifyFormat::Discord => {}
    }
    Ok(())
}

/// The `chat_id` of a Telegram target's URL query: a number (`-100…` for a group) or `@channel`.
pub fn telegram_chat_id(url: &TargetUrl) -> Option<&str> {
    let query = url.path.split_once('?')?.1;
    let id = query.split('&').find_map(|kv| kv.strip_prefix("chat_id="))?;
    let number = id.strip_prefix('-').unwrap_or(id);
    let valid = (!number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()))
        || id
            .strip_prefix('@')
            .is_some_and(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
    valid.then_some(id)
}

/// `--notify` flags win over the file's list (as every list option does).
/// The targets of `--notify` (which replace the file's list) or of the config file; `secret`
/// (`MEDIATORD_NOTIFY_SECRET`) signs every one that names no secret of its own: a `--notify`
/// target has no other way to be signed.
pub(super) fn targets(
    flags: &[String],
    file: Option<&Value>,
    secret: Option<&str>,
) -> Result<Vec<NotifyTarget>, ConfigError> {
    if secret.is_some_and(str::is_empty) {
        return refuse(
            "MEDIATORD_NOTIFY_SECRET (--notify-secret) is empty: unset it, or give the receiver's secret",
        );
    }
    let mut targets: Vec<NotifyTarget> = if !flags.is_empty() {
        flags.iter().map(|u| target_from_url(u)).collect::<Result<_, _>>()?
    } else {
        match file {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                items.iter().enumerate().map(|(i, v)| parse_target(v, i)).collect::<Result<_, _>>()?
            }
            Some(_) => return refuse("config file: serve.notify must be a list of targets"),
        }
    };
    if targets.len() > MAX_TARGETS {
        return refuse(format!("at most {MAX_TARGETS} notification targets"));
    }
    for (i, target) in targets.iter().enumerate() {
        if let Some(e) = target.escalate
            && (e.to == i || e.to >= targets.len())
        {
            return refuse(format!(
                "serve.notify[{i}].escalate.to: {} is not another target (0 to {}, not {i})",
                e.to,
                targets.len() - 1
            ));
        }
        if target.events.is_empty() && !targets.iter().any(|t| t.escalate.is_some_and(|e| e.to == i)) {
            return refuse(format!(
                "serve.notify[{i}].events is empty and no target escalates to it: name at least one event"
            ));
        }
    }
    for target in targets.iter_mut().filter(|t| t.secret.is_none()) {
        target.secret = secret.map(|s| Secret::from(s.to_owned()));
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn target_urls_are_split_with_their_scheme_and_default_port() {
        let u = parse_target_url("http://127.0.0.1:8080/hook?x=1").expect("valid");
        assert_eq!((u.host.as_str(), u.port, u.path.as_str()), ("127.0.0.1", 8080, "/hook?x=1"));
        assert_eq!((u.tls, u.host_header.as_str()), (false, "127.0.0.1:8080"));
        let u = parse_target_url("http://[::1]:9/").expect("valid");
        assert_eq!((u.authority.as_str(), u.host.as_str()), ("[::1]:9", "::1"));
        let u = parse_target_url("http://ntfy.lan").expect("valid");
        assert_eq!((u.port, u.path.as_str(), u.host_header.as_str()), (80, "/", "ntfy.lan"));
        let u = parse_target_url("HTTPS://ntfy.sh/secret-topic").expect("https");
        assert_eq!((u.tls, u.port, u.host_header.as_str()), (true, 443, "ntfy.sh"));
        assert_eq!(u.authority, "ntfy.sh:443");
        assert!(!format!("{u:?}").contains("secret-topic"), "{u:?}");
        assert_eq!(format!("{u:?}"), "https://ntfy.sh:443/…");
        let u = parse_target_url("https://hooks.example:8443/x").expect("https");
        assert_eq!((u.port, u.host_header.as_str()), (8443, "hooks.example:8443"));
        let u = parse_target_url("http://hooks.example:443/x").expect("http on 443");
        assert_eq!((u.tls, u.host_header.as_str()), (false, "hooks.example:443"));
        let e = parse_target_url("ftp://ntfy.sh/secret-topic").expect_err("ftp").0;
        assert!(e.contains("expected http(s)://"), "{e}");
        assert!(!e.contains("secret-topic"), "the path is never shown: {e}");
        for bad in [
            "ftp://x/",
            "http://u:p@host/",
            "http://host:0/",
            "http://ho st/",
            "http:///x",
            "http://h:99999/",
        ] {
            let e = parse_target_url(bad).expect_err(bad).0;
            assert!(!e.contains("u:p"), "{e}");
        }
    }

    #[test]
    fn target_objects_validate_every_key_and_suggest_event_names() {
        let t = parse_target(
            &json!({"url": "http://127.0.0.1:1/t", "events": ["turn_complete", "permission_request"],
                    "format": "ntfy", "secret": "s3", "clientId": "phone", "headers": {"Authorization": "Bearer tk"},
                    "remindAfterMs": 60000}),
            0,
        )
        .expect("valid");
        assert_eq!(t.events, vec![EventKind::TurnComplete, EventKind::PermissionRequest]);
        assert_eq!(t.format, NotifyFormat::Ntfy);
        assert_eq!(t.client_id.as_deref(), Some("phone"));
        assert_eq!(t.remind_after, Some(Duration::from_secs(60)));
        let shown = format!("{t:?}");
        assert!(!shown.contains("s3") && !shown.contains("Bearer tk") && !shown.contains("/t"), "{shown}");

        let err = |v: Value| parse_target(&v, 2).expect_err("refused").0;
        let e = err(json!({"url": "http://h/", "events": ["permision_request"]}));
        assert!(e.contains("did you mean permission_request?"), "{e}");
        let e = err(json!({"url": "http://h/", "evnts": []}));
        assert!(e.contains("did you mean serve.notify[2].events?"), "{e}");
        assert!(
            err(json!({"url": "http://h/", "format": "xml"}))
                .contains("expected one of json, ntfy, slack, discord, telegram")
        );
        assert!(err(json!({"url": "http://h/", "format": "ntfy"})).contains("topic"));
        assert!(err(json!({"url": "http://h/a/b", "format": "ntfy"})).contains("topic"));
        assert!(err(json!({"url": "http://h/", "headers": {"Host": "x"}})).contains("may set"));
        assert!(err(json!({"url": "http://h/", "headers": {"X-A": "a\r\nb"}})).contains("control"));
        assert!(err(json!({"url": "http://h/", "remindAfterMs": 5})).contains("at least"));
        assert!(err(json!({"url": "http://h/", "clientId": "a b"})).contains("clientId"));
        assert!(err(json!({"events": []})).contains("url is required"));
    }

    #[test]
    fn public_urls_lose_their_trailing_slash() {
        assert_eq!(parse_public_url("https://m.example.net/").expect("ok"), "https://m.example.net");
        assert_eq!(parse_public_url("http://127.0.0.1:7776/pre/").expect("ok"), "http://127.0.0.1:7776/pre");
        for bad in ["m.example.net", "http://u@h/", "http://h/?q", "ftp://h"] {
            assert!(parse_public_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_format_prefix_chooses_the_format_and_leaves_the_url() {
        assert_eq!(split_format("ntfy+https://ntfy.sh/t"), (Some(NotifyFormat::Ntfy), "https://ntfy.sh/t"));
        assert_eq!(split_format("Slack+https://h/x"), (Some(NotifyFormat::Slack), "https://h/x"));
        assert_eq!(split_format("discord+http://h/x"), (Some(NotifyFormat::Discord), "http://h/x"));
        assert_eq!(split_format("json+http://h/x"), (Some(NotifyFormat::Json), "http://h/x"));
        // A plus elsewhere, or an unknown name, is part of the URL.
        assert_eq!(split_format("https://h/a+b"), (None, "https://h/a+b"));
        assert_eq!(split_format("gotify+https://h/x"), (None, "gotify+https://h/x"));
        assert_eq!(split_format("http://h:1/ntfy+x"), (None, "http://h:1/ntfy+x"));
        for (name, format) in NotifyFormat::ALL {
            assert_eq!(NotifyFormat::parse(name), Some(format));
            assert_eq!(format.name(), name);
        }
        assert_eq!(NotifyFormat::parse("Ntfy"), None, "names are lower case");

        let t = target_from_url("ntfy+https://ntfy.sh/agent-7f3c").expect("ntfy");
        assert_eq!((t.format, t.url.tls, t.url.path.as_str()), (NotifyFormat::Ntfy, true, "/agent-7f3c"));
        let e = target_from_url("ntfy+https://ntfy.sh/").expect_err("no topic").0;
        assert!(e.contains("an ntfy target's URL is the server and the topic"), "{e}");
        let e = target_from_url("gotify+https://h/x").expect_err("unknown prefix").0;
        assert!(e.contains("expected http(s)://"), "{e}");
        let e =
            parse_target(&json!({"url": "slack+https://h/x", "format": "discord"}), 0).expect_err("both").0;
        assert!(e.contains("disagree"), "{e}");
        let t = parse_target(&json!({"url": "slack+https://h/x", "format": "slack"}), 0).expect("agree");
        assert_eq!(t.format, NotifyFormat::Slack);
        let e = parse_target(&json!({"url": "https://h/x", "format": "pushover"}), 0).expect_err("unknown").0;
        assert!(e.contains("expected one of json, ntfy, slack, discord, telegram"), "{e}");
    }

    #[test]
    fn a_telegram_target_needs_a_chat_id_in_its_query() {
        let url = |q: &str| {
            parse_target_url(&format!("https://api.telegram.org/bot1:AA/sendMessage{q}")).expect("url")
        };
        assert_eq!(telegram_chat_id(&url("?chat_id=12345")), Some("12345"));
        assert_eq!(telegram_chat_id(&url("?x=1&chat_id=-1001234")), Some("-1001234"));
        assert_eq!(telegram_chat_id(&url("?chat_id=@my_channel")), Some("@my_channel"));
        for bad in ["", "?chat_id=", "?chat_id=-", "?chat_id=12a", "?chat_id=@", "?chat_id=@a-b", "?chatid=1"]
        {
            assert_eq!(telegram_chat_id(&url(bad)), None, "{bad}");
        }
        let e =
            target_from_url("telegram+https://api.telegram.org/bot1:AA/sendMessage").expect_err("no chat").0;
        assert!(e.contains("chat_id=<chat>") && !e.contains("bot1:AA"), "the token is never shown: {e}");
        assert!(target_from_url("telegram+https://api.telegram.org/bot1:AA/sendMessage?chat_id=7").is_ok());
    }

    #[test]
    fn an_ntfy_topic_may_be_as_long_as_ntfy_allows_and_no_longer() {
        let at_limit = format!("ntfy+https://ntfy.sh/{}", "t".repeat(MAX_NTFY_TOPIC));
        assert_eq!(target_from_url(&at_limit).expect("64 characters").format, NotifyFormat::Ntfy);
        let over = format!("ntfy+https://ntfy.sh/{}", "t".repeat(MAX_NTFY_TOPIC + 1));
        let e = target_from_url(&over).expect_err("65 characters").0;
        assert!(e.contains("an ntfy target's URL is the server and the topic"), "{e}");
        assert!(target_from_url("ntfy+https://ntfy.sh/a").is_ok());
    }

    #[test]
    fn the_environments_secret_signs_every_target_that_names_none() {
        let flags = ["http://127.0.0.1:9/a".to_owned(), "http://127.0.0.1:9/b".to_owned()];
        let signed = targets(&flags, None, Some("env-secret")).expect("valid");
        let secrets: Vec<Option<&str>> =
            signed.iter().map(|t| t.secret.as_ref().map(Secret::expose)).collect();
        assert_eq!(secrets, [Some("env-secret"), Some("env-secret")]);
        assert!(targets(&flags, None, None).expect("valid").iter().all(|t| t.secret.is_none()));

        let file = json!([{"url": "http://127.0.0.1:9/", "secret": "own"}, "http://127.0.0.1:9/"]);
        let mixed = targets(&[], Some(&file), Some("env-secret")).expect("valid");
        let secrets: Vec<Option<&str>> =
            mixed.iter().map(|t| t.secret.as_ref().map(Secret::expose)).collect();
        assert_eq!(secrets, [Some("own"), Some("env-secret")], "a target's own secret wins");

        let e = targets(&flags, None, Some("")).expect_err("empty").0;
        assert!(e.contains("MEDIATORD_NOTIFY_SECRET"), "{e}");
    }

    #[test]
    fn escalation_names_another_target_and_only_an_escalation_target_may_hear_nothing_else() {
        let file = json!([
            {"url": "http://127.0.0.1:9/a", "escalate": {"afterMs": 600000, "to": 1}},
            {"url": "http://127.0.0.1:9/b", "events": []},
        ]);
        let parsed = targets(&[], Some(&file), None).expect("valid");
        assert_eq!(parsed[0].escalate, Some(Escalation { after: Duration::from_secs(600), to: 1 }));
        assert!(parsed[1].events.is_empty() && parsed[1].escalate.is_none());

        let refused = |file: Value| targets(&[], Some(&file), None).expect_err("refused").0;
        let e = refused(json!([{"url": "http://127.0.0.1:9/a", "escalate": {"afterMs": 600000, "to": 0}}]));
        assert!(e.contains("escalate.to: 0 is not another target"), "{e}");
        let e = refused(json!([{"url": "http://127.0.0.1:9/a", "escalate": {"afterMs": 600000, "to": 1}}]));
        assert!(e.contains("escalate.to: 1 is not another target"), "{e}");
        let e = refused(json!(["http://127.0.0.1:9/a", {"url": "http://127.0.0.1:9/b", "events": []}]));
        assert!(e.contains("events is empty and no target escalates to it"), "{e}");
        for bad in [
            json!({"afterMs": 999, "to": 1}),
            json!({"to": 1}),
            json!({"afterMs": 1000}),
            json!({"afterMs": 1000, "to": -1}),
        ] {
            let e =
                refused(json!([{"url": "http://127.0.0.1:9/a", "escalate": bad}, "http://127.0.0.1:9/b"]));
            assert!(e.contains("escalate: expected"), "{e}");
        }
        let e = refused(
            json!([{"url": "http://127.0.0.1:9/a", "escalate": {"afterMs": 1000, "to": 1, "then": 2}}, "http://127.0.0.1:9/b"]),
        );
        assert!(e.contains("unknown key serve.notify[0].escalate.then"), "{e}");
        let e = refused(json!([{"url": "http://127.0.0.1:9/a", "escalate": 1}, "http://127.0.0.1:9/b"]));
        assert!(e.contains("escalate must be an object"), "{e}");
    }
}

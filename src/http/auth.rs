//! Who a request is (`docs/operations.md#devices`, `docs/protocol.md#23-bearer-token`): the
//! operator (the daemon's token, or anyone on a daemon without one) or a paired device, by its
//! credential in `Authorization: Bearer` or in the [`COOKIE`]. The perimeter resolves it once and
//! attaches the [`Caller`] to the request; handlers read it with `Option<Extension<Caller>>`.
//!
//! The cookie is `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's page makes
//! the browser send it) and `Path=/`, plus `Secure` when `--public-url` is `https://`. It is what
//! lets a browser's `EventSource` and plain navigations carry the credential without a script
//! ever holding it.

use axum::http::{HeaderMap, HeaderValue, header};

use crate::config::Config;
use crate::devices::Device;

/// The device credential's cookie.
pub(super) const COOKIE: &str = "mediatord_device";
/// How long a browser keeps the cookie: 400 days, the most browsers allow (RFC 6265bis §5.5).
/// Revocation, not expiry, is how a device's access ends.
const COOKIE_MAX_AGE_SECS: u64 = 400 * 24 * 60 * 60;

/// Who is calling.
#[derive(Debug, Clone)]
pub(super) enum Caller {
    /// The daemon's token, or anyone when the daemon has none (loopback only): the trusted
    /// operator path, whose client ids are self-reported.
    Operator,
    /// A paired device; `by_cookie` when its credential came in the cookie (so a state-changing
    /// request must carry the daemon's own `Origin`).
    Device { device: Device, by_cookie: bool },
}

impl Caller {
    pub(super) fn device(&self) -> Option<&Device> {
        match self {
            Caller::Operator => None,
            Caller::Device { device, .. } => Some(device),
        }
    }

    /// Whether the caller may vote: the operator's clients and voter devices, not observers.
    pub(super) fn may_vote(&self) -> bool {
        self.device().is_none_or(|d| d.role == crate::devices::Role::Voter)
    }
}

/// Registers `client` on `session` as the caller may: a voter, or (a paired observer) a client
/// that is never counted among the voters. No caller (the router without the perimeter, in
/// tests) is the operator.
pub(super) fn touch(session: &crate::daemon::Session, client: &str, caller: Option<&Caller>) -> u64 {
    if caller.is_none_or(Caller::may_vote) {
        session.touch_client(client)
    } else {
        session.touch_observer(client)
    }
}

/// The credential `Authorization` presents: `Some("")` for a header that is not a bearer one (it
/// still counts as presented, and fails).
pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?;
    Some(
        value
            .to_str()
            .ok()
            .and_then(|h| h.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map_or("", |(_, token)| token.trim()),
    )
}

/// The device cookie's value, from any `Cookie` header.
pub(super) fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim())
}

/// Whether the cookie gets `Secure`: when `--public-url` is `https://` (over plain `http://` a
/// browser would refuse to store it).
pub(super) fn secure_cookie(config: &Config) -> bool {
    config.public_url.as_deref().is_some_and(|u| u.starts_with("https://"))
}

fn attributes(secure: bool) -> &'static str {
    if secure { "; HttpOnly; SameSite=Strict; Path=/; Secure" } else { "; HttpOnly; SameSite=Strict; Path=/" }
}

/// `Set-Cookie` holding `credential` (hex and one `.`: always a valid header value).
pub(super) fn set_cookie(credential: &str, secure: bool) -> Option<HeaderValue> {
    let value = format!("{COOKIE}={credential}; Max-Age={COOKIE_MAX_AGE_SECS}{}", attributes(secure));
    HeaderValue::from_str(&value).ok()
}

/// `Set-Cookie` that makes the browser forget the cookie (sent with the 401 of a revoked one, so
/// the page can sign in again without a cookie it cannot delete itself).
pub(super) fn clear_cookie(secure: bool) -> HeaderValue {
    HeaderValue::from_static(if secure {
        "mediatord_device=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/; Secure"
    } else {
        "mediatord_device=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_found_among_others_and_the_bearer_is_trimmed() {
        let mut h = HeaderMap::new();
        assert_eq!(cookie(&h), None);
        h.append(header::COOKIE, HeaderValue::from_static("a=1; mediatord_device=dev-1.ab ; b=2"));
        assert_eq!(cookie(&h), Some("dev-1.ab"));
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer  tok "));
        assert_eq!(bearer(&h), Some("tok"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic x"));
        assert_eq!(bearer(&h), Some(""));
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_only_over_https() {
        let plain = set_cookie("dev-1.ab", false).expect("value");
        assert_eq!(
            plain.to_str().ok(),
            Some("mediatord_device=dev-1.ab; Max-Age=34560000; HttpOnly; SameSite=Strict; Path=/")
        );
        assert!(set_cookie("dev-1.ab", true).expect("value").to_str().is_ok_and(|v| v.ends_with("; Secure")));
        assert!(clear_cookie(true).to_str().is_ok_and(|v| v.contains("Max-Age=0") && v.ends_with("Secure")));
    }
}

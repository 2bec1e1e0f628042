//! Who a request is (`docs/operations.md#devices`, `docs/protocol.md#23-bearer-token`): the
//! operator (the daemon's token, or anyone on a daemon without one) or a paired device, by its
//! credential in `Authorization: Bearer`. The perimeter resolves it once and attaches the front
//! desk's `Caller` to the request; handlers read it with `Extension<Caller>`.
//!
//! A device credential is never a cookie (issue #27): cookies ignore ports, so every other server
//! on the daemon's host name (a dev server on `localhost:3000`) would receive it, and any page of
//! theirs could make the browser send it here (an `<img>` counts as same-site). The web app keeps
//! the credential in `localStorage`, which is scoped to the daemon's exact origin, and sends it
//! as the bearer; the trade-off is in `docs/operations.md#the-browsers-credential`. The cookie an
//! earlier version set ([`COOKIE`]) is no credential any more: a request carrying it is answered
//! with [`clear_cookie`], so the browser forgets it.

use axum::http::{HeaderMap, HeaderValue, header};

use crate::config::Config;

/// The device cookie earlier versions set; now only cleared.
pub(super) const COOKIE: &str = "mediatord_device";

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

/// The request's cookies, `(name, value)`, across every `Cookie` header, in order.
pub(super) fn cookies(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
}

/// Whether the request carries the device cookie an earlier version set.
pub(super) fn has_old_cookie(headers: &HeaderMap) -> bool {
    cookies(headers).any(|(name, _)| name == COOKIE)
}

/// `Set-Cookie` that makes the browser forget the old device cookie (with `Secure` when
/// `--public-url` is `https://`, as it was set).
pub(super) fn clear_cookie(config_secure: bool) -> HeaderValue {
    HeaderValue::from_static(if config_secure {
        "mediatord_device=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/; Secure"
    } else {
        "mediatord_device=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/"
    })
}

/// Whether cookies this daemon clears get `Secure`: when it serves https, or `--public-url` is
/// `https://`.
pub(super) fn secure_cookie(config: &Config) -> bool {
    config.tls.is_some() || config.public_url.as_deref().is_some_and(|u| u.starts_with("https://"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_cookie_is_found_among_others_and_the_bearer_is_trimmed() {
        let mut h = HeaderMap::new();
        assert!(!has_old_cookie(&h));
        h.append(header::COOKIE, HeaderValue::from_static("a=1; mediatord_device_x=2"));
        assert!(!has_old_cookie(&h));
        h.append(header::COOKIE, HeaderValue::from_static("a=1; mediatord_device=dev-1.ab ; b=2"));
        assert!(has_old_cookie(&h));
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer  tok "));
        assert_eq!(bearer(&h), Some("tok"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic x"));
        assert_eq!(bearer(&h), Some(""));
    }

    #[test]
    fn cookies_are_cleared_secure_only_behind_an_https_public_url_or_listener() {
        let mut config = Config::for_tests(std::path::Path::new("/"));
        assert!(!secure_cookie(&config));
        config.public_url = Some("http://phone.example:7776".into());
        assert!(!secure_cookie(&config));
        config.tls = Some(crate::tls::TlsFiles { cert: "c.pem".into(), key: "k.pem".into() });
        assert!(secure_cookie(&config), "the daemon itself serves https");
        config.tls = None;
        config.public_url = Some("https://mediator.example".into());
        assert!(secure_cookie(&config));
    }

    #[test]
    fn clearing_the_cookie_keeps_its_attributes() {
        assert_eq!(
            clear_cookie(false).to_str().ok(),
            Some("mediatord_device=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/")
        );
        assert!(
            clear_cookie(true).to_str().is_ok_and(|v| v.contains("Max-Age=0") && v.ends_with("; Secure"))
        );
    }
}

//! Who a request is (`docs/operations.md#devices`, `docs/protocol.md#23-bearer-token`): the
//! operator (the daemon's token, or anyone on a daemon without one) or a paired device, by its
//! credential in `Authorization: Bearer`. The perimeter resolves it once and attaches the
//! [`Caller`] to the request; handlers read it with `Option<Extension<Caller>>`.
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
use crate::devices::Device;

/// The device cookie earlier versions set; now only cleared.
pub(super) const COOKIE: &str = "mediatord_device";

/// Who is calling.
#[derive(Debug, Clone)]
pub(super) enum Caller {
    /// The daemon's token, or anyone when the daemon has none (loopback only): the trusted
    /// operator path, whose client ids are self-reported.
    Operator,
    /// A paired device.
    Device(Device),
}

impl Caller {
    pub(super) fn device(&self) -> Option<&Device> {
        match self {
            Caller::Operator => None,
            Caller::Device(device) => Some(device),
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

/// Whether the request carries the device cookie an earlier version set.
pub(super) fn has_old_cookie(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .any(|(name, _)| name == COOKIE)
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

    #[tokio::test]
    async fn only_the_operator_and_voter_devices_may_vote() {
        use std::sync::Arc;
        use std::time::Duration;

        use crate::devices::{Devices, Role, StreamLimits};
        use crate::store::MemoryStore;

        let limits = StreamLimits { all_devices: 8, per_session: 8 };
        let devices = Devices::new(Arc::new(MemoryStore::default()), Duration::from_secs(60), limits);
        let peer = std::net::IpAddr::from([127, 0, 0, 1]);
        let mut paired = Vec::new();
        for role in [Role::Voter, Role::Observer] {
            let code = devices.issue_code(None, role).await.expect("code").code;
            paired.push(devices.pair(&code, None, peer).await.expect("paired").0);
        }
        assert!(Caller::Operator.device().is_none());
        assert!(Caller::Operator.may_vote());
        let voter = Caller::Device(paired[0].clone());
        assert_eq!(voter.device().map(|d| d.id.clone()), Some(paired[0].id.clone()));
        assert!(voter.may_vote());
        assert!(!Caller::Device(paired[1].clone()).may_vote(), "an observer");
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

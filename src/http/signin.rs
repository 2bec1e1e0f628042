//! Sign-in with an OpenID provider over HTTP (`docs/people.md`, `docs/protocol.md#15-devices`):
//!
//! - `GET /auth`: whether this daemon offers it (public: the web app asks before anyone signed in).
//! - `GET /auth/login[?terminal=<loopback address>&name=<device name>]`: sends the browser to the
//!   provider (`302`). With `terminal` (`mediatord login --browser`), the sign-in's outcome goes to
//!   that address on the browser's machine (`?code=` or `?error=`), not to the web app.
//! - `GET /auth/callback`: where the provider sends it back. The person, once every check passed,
//!   is given a device through a one-time code: the browser lands on `<app>/#pair=<code>`, which
//!   the web app exchanges as it does a pairing code, so no credential rides in a URL, a log or a
//!   `Referer`. A refusal lands on `<app>/#signin-error=<code>`, which the web app explains.
//!
//! - `POST /auth/device`: a terminal's sign-in (`mediatord login`, RFC 8628's device grant): the
//!   provider's user code and page for the person, and the terminal's login handle.
//! - `POST /auth/device/token`: waits for that person, then answers a one-time code the terminal
//!   exchanges at `POST /devices/pair`, as the web app does its callback's.
//!
//! Public routes (the perimeter's Host check still applies): the provider's answer is the
//! credential, and everything it says is checked in `crate::oidc` before anything is granted.

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::devices::{no_store, optional_str};
use super::error::{ApiError, ApiResult};
use super::extract::AppState;
use super::perimeter::Peer;
use crate::desk::Caller;
use crate::oidc::SignInError;

/// The sign-in binding cookie ([`binding_cookie`]): not a credential, and named apart from every
/// cookie a provider on the same host sets (cookies ignore ports).
const BINDING_COOKIE: &str = "mediatord_signin";
/// How long the binding cookie lives: as long as a sign-in may take at the provider.
const BINDING_MAX_AGE: u64 = crate::oidc::SIGN_IN_WINDOW.as_secs();

/// The longest `code` and `state` taken from the provider's redirect: providers' codes are tens
/// to a few hundred characters; a longer value is nobody's.
const MAX_PARAM_CHARS: usize = 2048;

/// `GET /auth`: `{"signIn": {"issuer"}}` when people may sign in here, else `{"signIn": null}`.
pub(super) async fn offered(State(d): State<AppState>) -> Response {
    let sign_in = d.oidc().map(|o| json!({"issuer": o.settings().issuer, "login": "auth/login"}));
    axum::Json(json!({ "signIn": sign_in })).into_response()
}

/// What `/auth/login` may carry: a terminal's browser sign-in (`mediatord login --browser`).
#[derive(Debug, Deserialize)]
pub(super) struct Login {
    terminal: Option<String>,
    name: Option<String>,
}

/// The default name of the device a terminal's sign-in pays for.
const TERMINAL_NAME: &str = "terminal sign-in";

/// `GET /auth/login`: to the provider, with a new sign-in's `state`, `nonce` and PKCE challenge;
/// a terminal's (`?terminal=`) ends at the terminal's loopback address.
pub(super) async fn login(
    State(d): State<AppState>,
    query: Result<Query<Login>, QueryRejection>,
) -> Response {
    let Some(oidc) = d.oidc() else { return ApiError::SignInNotConfigured.into_response() };
    // A terminal's address or name that is not good is the terminal's bug, or someone else's
    // link: refused at once, before anything is begun, with what a good one is.
    let Ok(Query(login)) = query else {
        return ApiError::SignIn(SignInError::InvalidTerminal).into_response();
    };
    let terminal = match (login.terminal, login.name) {
        (None, None) => None,
        (None, Some(_)) => return ApiError::SignIn(SignInError::InvalidTerminal).into_response(),
        (Some(target), name) => {
            let name = match name.as_deref().map(crate::devices::valid_name).transpose() {
                Ok(name) => name.unwrap_or_else(|| TERMINAL_NAME.to_owned()),
                Err(e) => return ApiError::from(e).into_response(),
            };
            match crate::oidc::Terminal::parse(&target, name) {
                Ok(t) => Some(t),
                Err(e) => return ApiError::SignIn(e).into_response(),
            }
        }
    };
    let begun = oidc.begin(terminal.clone()).await;
    match begun {
        Ok(begun) => {
            let mut response = redirect(&begun.url);
            let cookie =
                binding_cookie(&begun.binding, BINDING_MAX_AGE, super::auth::secure_cookie(&d.config));
            if let Ok(cookie) = HeaderValue::from_str(&cookie) {
                response.headers_mut().append(header::SET_COOKIE, cookie);
            }
            response
        }
        Err(e) => outcome(&d, terminal.as_ref(), Err(e.code())),
    }
}

/// Where a sign-in's outcome goes: the terminal's address (`?code=` or `?error=`), else the web
/// app (`#pair=` or `#signin-error=`).
fn outcome(d: &AppState, terminal: Option<&crate::oidc::Terminal>, result: Result<&str, &str>) -> Response {
    match (terminal, result) {
        (Some(t), Ok(code)) => redirect(&t.answer("code", code)),
        (Some(t), Err(error)) => redirect(&t.answer("error", error)),
        (None, Ok(code)) => back_to_app(d, &format!("pair={code}")),
        (None, Err(error)) => back_to_app(d, &format!("signin-error={error}")),
    }
}

/// The cookie that binds a sign-in to the browser that began it: no credential (it grants
/// nothing: it only lets this browser finish its own sign-in), sent only to the callback, `Lax`
/// because the provider's redirect back is a navigation from another site.
fn binding_cookie(value: &str, max_age: u64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{BINDING_COOKIE}={value}; Max-Age={max_age}; Path=/auth/callback; HttpOnly; SameSite=Lax{secure}"
    )
}

/// The sign-in binding cookie's value, if the request carries exactly one.
fn binding_of(headers: &HeaderMap) -> Option<String> {
    let mut found = super::auth::cookies(headers)
        .filter(|(name, _)| *name == BINDING_COOKIE)
        .map(|(_, value)| value.to_owned());
    let first = found.next();
    // Two of them: another page of this host set one too; neither is trusted.
    if found.next().is_some() { None } else { first }
}

/// What the provider's redirect carries (RFC 6749 §4.1.2, RFC 9207's `iss`).
#[derive(Debug, Deserialize)]
pub(super) struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// `GET /auth/callback`: the sign-in's end. Every failure is one stable code for the web app; the
/// log says more (never the code, the state or a token).
pub(super) async fn callback(
    State(d): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<Callback>, QueryRejection>,
) -> Response {
    let response = finish(&d, binding_of(&headers).as_deref(), query).await;
    forget_binding(&d, response)
}

/// The callback's answer, before the binding cookie is cleared.
async fn finish(
    d: &AppState,
    binding: Option<&str>,
    query: Result<Query<Callback>, QueryRejection>,
) -> Response {
    let Some(oidc) = d.oidc() else { return ApiError::SignInNotConfigured.into_response() };
    // A query no form decoder takes (a parameter twice) is nobody's redirect.
    let Ok(Query(callback)) = query else {
        return outcome(d, None, Err(SignInError::InvalidState.code()));
    };
    // The sign-in is taken whatever follows, so its outcome, whatever it is, goes where it began.
    let taken = callback.state.as_deref().filter(|s| s.len() <= MAX_PARAM_CHARS).and_then(|s| oidc.take(s));
    let terminal = taken.as_ref().and_then(|t| t.terminal().cloned());
    let fail = |e: SignInError| outcome(d, terminal.as_ref(), Err(e.code()));
    if let Some(error) = &callback.error {
        // `access_denied` when the person cancelled; the provider's code is a short token.
        let shown: String = error.chars().take(64).filter(|c| c.is_ascii_graphic()).collect();
        tracing::info!(error = %shown, "the OpenID provider ended a sign-in without a code");
        return fail(SignInError::ProviderRefused);
    }
    let (Some(code), Some(taken)) = (callback.code.as_deref().filter(|c| c.len() <= MAX_PARAM_CHARS), taken)
    else {
        return fail(SignInError::InvalidState);
    };
    let verified = match oidc.finish(taken, code, binding).await {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let name = terminal.as_ref().map_or("web sign-in", |t| t.name());
    match d.sign_in_code(&verified, name) {
        Ok(issued) => {
            tracing::info!(
                subject = %verified.person.subject,
                role = verified.role.as_str(),
                terminal = terminal.is_some(),
                "a person signed in"
            );
            outcome(d, terminal.as_ref(), Ok(&issued.code))
        }
        Err(e) => {
            tracing::warn!(error = %e, "a person signed in, but no sign-in code could be issued");
            outcome(d, terminal.as_ref(), Err("sign_in_unavailable"))
        }
    }
}

/// The binding cookie is spent whatever the callback answered.
fn forget_binding(d: &AppState, mut response: Response) -> Response {
    let cleared = binding_cookie("", 0, super::auth::secure_cookie(&d.config));
    if let Ok(cookie) = HeaderValue::from_str(&cleared) {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// The longest login handle taken: one is 64 hex characters.
const MAX_HANDLE_CHARS: usize = 128;

/// `POST /auth/device {}` → `{login, userCode, verificationUri, verificationUriComplete?, expiresIn}`:
/// a terminal's sign-in begun at the provider. `login` is the terminal's secret handle on it.
pub(super) async fn device_begin(
    State(d): State<AppState>,
    ConnectInfo(Peer { addr: peer, .. }): ConnectInfo<Peer>,
) -> ApiResult {
    let Some(oidc) = d.oidc() else { return Err(ApiError::SignInNotConfigured) };
    let begun = oidc.begin_device(peer.ip()).await.map_err(ApiError::SignIn)?;
    let mut answer = json!({
        "login": begun.handle,
        "userCode": begun.user_code,
        "verificationUri": begun.verification_uri,
        "expiresIn": begun.expires_in,
    });
    if let Some(complete) = &begun.verification_uri_complete {
        answer["verificationUriComplete"] = json!(complete);
    }
    Ok(no_store(axum::Json(answer).into_response()))
}

/// `POST /auth/device/token {login, name?}` → `200 {code, name, role}` once the person confirmed and
/// passed every check (`code`: one-time, for `POST /devices/pair`), `202 {status: "pending"}`
/// after waiting [`crate::oidc::LONG_POLL`] without an answer, else the sign-in's error. The
/// outcome is answered once.
pub(super) async fn device_token(
    State(d): State<AppState>,
    super::extract::JsonBody(body): super::extract::JsonBody,
) -> ApiResult {
    let Some(oidc) = d.oidc() else { return Err(ApiError::SignInNotConfigured) };
    let handle = body.get("login").and_then(serde_json::Value::as_str).unwrap_or("");
    if handle.is_empty() || handle.len() > MAX_HANDLE_CHARS {
        return Err(ApiError::SignIn(SignInError::InvalidState));
    }
    // The terminal's own name for itself (`mediatord login --name`), checked as a device's, before
    // the outcome (answered once) is taken.
    let name = optional_str(&body, "name")?
        .map(crate::devices::valid_name)
        .transpose()?
        .unwrap_or_else(|| TERMINAL_NAME.to_owned());
    let verified = match oidc.device_outcome(handle, crate::oidc::LONG_POLL).await {
        None => return Err(ApiError::SignIn(SignInError::InvalidState)),
        Some(crate::oidc::Outcome::Pending) => {
            return Ok((StatusCode::ACCEPTED, axum::Json(json!({"status": "pending"}))).into_response());
        }
        Some(crate::oidc::Outcome::Done(outcome)) => outcome.map_err(ApiError::SignIn)?,
    };
    let issued = d.sign_in_code(&verified, &name).map_err(|e| {
        tracing::warn!(error = %e, "a person signed in from a terminal, but no sign-in code could be issued");
        ApiError::PairingUnavailable(e.to_string())
    })?;
    tracing::info!(
        subject = %verified.person.subject,
        role = verified.role.as_str(),
        "a person signed in from a terminal"
    );
    let answer = json!({
        "code": issued.code,
        "name": verified.person.name,
        "role": verified.role.as_str(),
    });
    Ok(no_store(axum::Json(answer).into_response()))
}

/// `POST /auth/logout`: ends the caller's sign-in (a person's device) on disk first, so on every
/// daemon of a fleet: its next request is refused and its streams end. Anyone else (the operator,
/// a paired device) has no sign-in to end: `204` all the same, so signing out twice is no error.
pub(super) async fn logout(State(d): State<AppState>, Extension(caller): Extension<Caller>) -> ApiResult {
    if let Some(device) = caller.device().filter(|dv| dv.person.is_some()) {
        d.revoke_device(&device.id).await?;
        tracing::info!(device = %device.id, "a person signed out");
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `302` to `url`, not stored, not told where it came from.
fn redirect(url: &str) -> Response {
    let mut response = StatusCode::FOUND.into_response();
    let h = response.headers_mut();
    match HeaderValue::from_str(url) {
        Ok(v) => h.insert(header::LOCATION, v),
        Err(_) => return ApiError::Refused(crate::desk::Refusal::Internal).into_response(),
    };
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // The callback's address carries the provider's code: the next page is not told it.
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// `302` to the web app with `fragment` (never sent to any server, kept out of logs).
fn back_to_app(d: &AppState, fragment: &str) -> Response {
    let base = d.config.public_url.as_deref().map_or(String::new(), |u| u.trim_end_matches('/').to_owned());
    redirect(&format!("{base}/#{fragment}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binding_cookie_goes_only_to_the_callback_and_one_of_it_is_read() {
        assert_eq!(
            binding_cookie("ab12", 600, false),
            "mediatord_signin=ab12; Max-Age=600; Path=/auth/callback; HttpOnly; SameSite=Lax"
        );
        assert!(binding_cookie("", 0, true).ends_with("SameSite=Lax; Secure"));
        let mut h = HeaderMap::new();
        assert_eq!(binding_of(&h), None);
        h.append(header::COOKIE, HeaderValue::from_static("_session=x; mediatord_signin=ab12"));
        assert_eq!(binding_of(&h).as_deref(), Some("ab12"));
        h.append(header::COOKIE, HeaderValue::from_static("mediatord_signin_x=1"));
        assert_eq!(binding_of(&h).as_deref(), Some("ab12"), "another name");
        h.append(header::COOKIE, HeaderValue::from_static("mediatord_signin=cd34"));
        assert_eq!(binding_of(&h), None, "two of them: neither is trusted");
    }
}

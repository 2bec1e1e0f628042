//! Handlers of the `devices` tag (`docs/protocol.md#15-devices`): issue a pairing code (the
//! operator), exchange it for a device credential (anyone holding the code), list and revoke.
//! A pairing or a revocation is on disk before it is answered (`devices::Devices`), or answered
//! `503 store_unavailable` and not done.

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::extract::{AppState, JsonBody, PathParams};
use super::perimeter::Peer;
use crate::desk::{Caller, Refusal};
use crate::devices::{Device, Role, qr};

fn device_json(d: &Device) -> Value {
    let mut device = json!({
        "deviceId": &*d.id,
        "name": &*d.name,
        "role": d.role.as_str(),
        "createdAt": d.created_at,
        "lastSeenAt": d.last_seen_at,
    });
    with_person(&mut device, d);
    device
}

/// A person's device also names its person, the client id it acts as, and when its sign-in ends.
fn with_person(json: &mut Value, d: &Device) {
    if let Some(person) = &d.person {
        json["person"] = json!(&**person);
        json["clientId"] = json!(&*d.client_id());
        json["expiresAt"] = json!(d.expires_at);
    }
}

/// An optional string field: absent or `null` is `None`; anything but a string is refused.
pub(super) fn optional_str<'a>(body: &'a Value, key: &str) -> Result<Option<&'a str>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::InvalidDevice(format!("{key} must be a string"))),
    }
}

/// Where the pairing URL points: `--public-url`, else the address the operator reached the daemon
/// at (what `mediatord pair` was pointed to), https when the daemon serves it.
fn base_url(d: &AppState, req_host: Option<&str>) -> String {
    let scheme = if d.config.tls.is_some() { "https" } else { "http" };
    match (&d.config.public_url, req_host) {
        (Some(public), _) => public.clone(),
        (None, Some(host)) => format!("{scheme}://{host}"),
        (None, None) => format!("{scheme}://127.0.0.1"),
    }
}

/// `POST /devices/pairing {name?, role?}` → `{code, url, expiresAt, qrSvg}`. The operator pairs a
/// device of any role; a signed-in person pairs another device of theirs, with their role
/// (`Devices::issue_for_person`), and a person with the operator's rights also a device of a lesser
/// role that is nobody's (a wall display: it must not follow their role); any other device pairs
/// nothing (`403 operator_required`).
pub(super) async fn create_pairing(
    State(d): State<AppState>,
    Extension(caller): Extension<Caller>,
    uri: Uri,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let host = super::perimeter::authority_of(&uri, &headers);
    if !body.is_object() {
        return Err(ApiError::InvalidJson);
    }
    let name = optional_str(&body, "name")?;
    let asked = match optional_str(&body, "role")? {
        None => None,
        Some(r) => Some(
            Role::parse(r)
                .ok_or_else(|| ApiError::InvalidDevice(format!("unknown role {r:?}: voter or observer")))?,
        ),
    };
    let (issued, role) = match caller.device() {
        // In a fleet the code is shown once every daemon can read it (`Devices::issue_code`).
        None if caller.role() == crate::desk::Role::Operator => {
            let role = asked.unwrap_or(Role::Voter);
            (d.devices.issue_code(name, role).await?, role)
        }
        Some(by) if by.person.is_some() => match asked {
            // A device of a lesser role must not follow its person's role up at a renewal: it is
            // nobody's, as the operator's token pairs it.
            Some(r) if r != by.role && by.role == Role::Operator => (d.devices.issue_code(name, r).await?, r),
            Some(r) if r != by.role => {
                return Err(ApiError::InvalidDevice(format!(
                    "a device you pair is yours, with your role ({}): leave out the role; a device with another role is paired with the operator's token",
                    by.role.as_str()
                )));
            }
            _ => (d.devices.issue_for_person(by, name).ok_or(Refusal::OperatorRequired)??, by.role),
        },
        _ => return Err(Refusal::OperatorRequired.into()),
    };
    let url = format!("{}/#pair={}", base_url(&d, host), issued.code);
    Ok(Json(json!({
        "code": issued.code,
        "url": url,
        "expiresAt": issued.expires_at,
        "role": role.as_str(),
        "qrSvg": qr::svg(&url),
    }))
    .into_response())
}

/// `POST /devices/pair {code, name?}` → `{deviceId, token, role, name}`. A wrong, used or
/// expired code is one answer, `401 invalid_pairing_code`, counted against the client's limit.
/// The credential is in the body only, never in a cookie (`super::auth`); `cookieOnly`, which
/// asked for a cookie alone before, is ignored.
pub(super) async fn pair(
    State(d): State<AppState>,
    ConnectInfo(Peer { addr: peer, .. }): ConnectInfo<Peer>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let code = body.get("code").and_then(Value::as_str).unwrap_or("");
    let name = optional_str(&body, "name")?;
    let (device, credential) = d.devices.pair(code, name, peer.ip()).await?;
    tracing::info!(device_id = %device.id, role = device.role.as_str(), "a device was paired");
    let mut answer = json!({
        "deviceId": &*device.id,
        "token": credential,
        "role": device.role.as_str(),
        "name": &*device.name,
    });
    with_person(&mut answer, &device);
    // The credential is in this body.
    Ok(no_store(Json(answer).into_response()))
}

/// An answer that carries a secret (a credential, a sign-in's handle or one-time code): no cache
/// may keep it.
pub(super) fn no_store(mut response: Response) -> Response {
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `GET /devices`.
pub(super) async fn list(State(d): State<AppState>) -> Json<Value> {
    let devices: Vec<Value> = d.devices.list().iter().map(device_json).collect();
    Json(json!({"devices": devices}))
}

/// `DELETE /devices/{id}`: refused from its next request on; its event streams and its `/acp`
/// connections end now (closed before the answer: their places are free once it is read).
pub(super) async fn revoke(
    State(d): State<AppState>,
    Extension(door): Extension<std::sync::Arc<crate::door::Door>>,
    PathParams(id): PathParams<String>,
) -> ApiResult {
    let device = d.revoke_device(&id).await?;
    door.close_owned_by(&crate::door::Owner::Device(device.id.clone()));
    tracing::info!(device_id = %device.id, "a device was revoked");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The `identity` of `GET /capabilities`: who the caller is and what it may do.
pub(super) fn identity(caller: Option<&crate::desk::Caller>) -> Value {
    match caller.and_then(crate::desk::Caller::device) {
        Some(device) => {
            let mut identity = json!({
                "kind": "device",
                "deviceId": &*device.id,
                "name": &*device.name,
                "role": device.role.as_str(),
                "scope": match device.role {
                    Role::Voter => json!(["read", "write"]),
                    Role::Observer => json!(["read"]),
                    Role::Operator => json!(["read", "write", "operator"]),
                },
            });
            with_person(&mut identity, device);
            identity
        }
        None => json!({"kind": "operator", "scope": ["read", "write", "operator"]}),
    }
}

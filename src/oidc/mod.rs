//! Sign-in with an OpenID provider (`docs/people.md`): the authorization code flow with PKCE for
//! the web app, and the renewal of each signed-in person at the provider. What the provider says
//! is checked by the `openidconnect` crate: the discovery document's issuer, the ID token's
//! signature against the provider's published keys (never `alg: none`, never a key the provider
//! did not publish), its issuer, audience, expiry and nonce; then the person's claims by this
//! room's own rules (`admit`): who may sign in at all (a verified email domain, a group), and
//! with which role.
//!
//! - A sign-in begins at `GET /auth/login` ([`Oidc::begin`]): a fresh `state`, `nonce` and PKCE
//!   verifier are kept here (bounded, short-lived, single use) and the browser is sent to the
//!   provider.
//! - It ends at `GET /auth/callback` ([`Oidc::take`], [`Oidc::finish`]): the `state` is taken (a
//!   second use, or one never issued, is refused), the code exchanged with its verifier, the ID
//!   token checked. The person is then given a device of theirs through a one-time code
//!   (`devices::SignIn`), which the web app exchanges as it does a pairing code: no credential ever
//!   rides in a URL. A terminal's browser sign-in ([`Terminal`]) gets that code at its loopback
//!   address instead.
//! - The provider's refresh token stays here, in memory, never on disk nor in a browser; every
//!   `--oidc-renew-ms` the daemon asks the provider to vouch for each person again
//!   ([`Oidc::renew`]). A refusal (the account disabled or removed, the grant revoked) signs the
//!   person out everywhere (`daemon::people`).
//!
//! On floor 3: it knows the devices (what a sign-in pays for) and the daemon's outgoing client,
//! never the daemon.

mod admit;
mod claims;
mod device;
mod error;
mod http;
mod terminal;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreAuthenticationFlow, CoreClaimName, CoreClaimType,
    CoreClientAuthMethod, CoreErrorResponseType, CoreGenderClaim, CoreGrantType, CoreJsonWebKey,
    CoreJweContentEncryptionAlgorithm, CoreJweKeyManagementAlgorithm, CoreJwsSigningAlgorithm,
    CoreResponseMode, CoreResponseType, CoreRevocableToken, CoreRevocationErrorResponse,
    CoreSubjectIdentifierType, CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalProviderMetadata, AuthorizationCode, ClaimsVerificationError, Client, ClientId, ClientSecret,
    CsrfToken, DeviceAuthorizationUrl, EmptyExtraTokenFields, EndpointMaybeSet, EndpointNotSet, EndpointSet,
    ErrorResponseType, IdTokenFields, IssuerUrl, Nonce, OAuth2TokenResponse, PkceCodeChallenge,
    PkceCodeVerifier, ProviderMetadata, RedirectUrl, RefreshToken, RequestTokenError, Scope,
    SignatureVerificationError, StandardErrorResponse, StandardTokenResponse, TokenResponse,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub use self::admit::Verified;
use self::claims::{Claims, Extra};
pub use self::device::{DeviceBegun, LONG_POLL, MAX_PENDING_LOGINS, MAX_PENDING_LOGINS_PER_CLIENT, Outcome};
pub use self::error::SignInError;
pub use self::http::REQUEST_TIMEOUT;
pub use self::terminal::{MAX_TARGET_CHARS, Terminal};
use crate::config::OidcSettings;
use crate::devices::Person;
use crate::sync::lock;

/// Sign-ins begun and not yet finished, at most: one per person at their browser, a few hundred
/// at once is far beyond a team. Past it the oldest is forgotten (its person starts again), so a
/// flood of unfinished sign-ins costs bounded memory and never locks everyone out.
pub const MAX_PENDING_SIGN_INS: usize = 256;
/// How long a sign-in may take at the provider (typing a password, a second factor).
pub const SIGN_IN_WINDOW: Duration = Duration::from_secs(600);
/// How long the provider's discovery document and keys are kept before they are read again (a
/// provider rotating its keys is followed within it; a token signed by a key not yet known makes
/// it read again at once).
const DISCOVERY_TTL: Duration = Duration::from_secs(600);
/// Random bytes in a sign-in's browser binding ([`Begun::binding`]): 128 bits.
const BINDING_BYTES: usize = 16;
/// People whose refresh token this daemon keeps at most (each renewed every period).
pub const MAX_RENEWALS: usize = 4096;

type Fields = IdTokenFields<
    Extra,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type Tokens = StandardTokenResponse<Fields, CoreTokenType>;
/// What discovery reads beyond the core: the device authorization endpoint (RFC 8628 §4), which
/// `mediatord login` needs and a provider may not have.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct DeviceEndpoint {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device_authorization_endpoint: Option<DeviceAuthorizationUrl>,
}
impl AdditionalProviderMetadata for DeviceEndpoint {}

type Metadata = ProviderMetadata<
    DeviceEndpoint,
    CoreAuthDisplay,
    CoreClientAuthMethod,
    CoreClaimName,
    CoreClaimType,
    CoreGrantType,
    CoreJweContentEncryptionAlgorithm,
    CoreJweKeyManagementAlgorithm,
    CoreJsonWebKey,
    CoreResponseMode,
    CoreResponseType,
    CoreSubjectIdentifierType,
>;
type ProviderClient = Client<
    Extra,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    Tokens,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// What a renewal found.
#[derive(Debug)]
pub enum Renewal {
    /// The provider vouched for the person again (as they are now).
    Vouched(Verified),
    /// The provider refused (the account disabled or removed, the grant revoked), or vouches for
    /// someone this daemon no longer lets in: the person is signed out.
    Refused(String),
    /// The provider could not be reached: the sign-ins last until they expire.
    Unreachable(String),
}

/// A sign-in begun: what its callback must match.
struct Pending {
    verifier: PkceCodeVerifier,
    nonce: Nonce,
    /// SHA-256 of the browser's binding ([`Begun::binding`]): the callback must come from the
    /// browser that began the sign-in, or someone could make a victim's browser finish a sign-in
    /// the attacker began, as the attacker (a login CSRF).
    binding: [u8; 32],
    /// A terminal's browser sign-in: where its outcome goes instead of to the web app.
    terminal: Option<Terminal>,
    at: Instant,
}

/// A sign-in whose `state` the callback brought back, taken (a state is good for one use): its
/// terminal, if any, and what [`Oidc::finish`] checks the rest against.
pub struct Taken(Pending);

impl Taken {
    /// The terminal that began this sign-in (`mediatord login --browser`), if one did.
    pub fn terminal(&self) -> Option<&Terminal> {
        self.0.terminal.as_ref()
    }
}

impl std::fmt::Debug for Taken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taken").field("terminal", &self.0.terminal).finish_non_exhaustive()
    }
}

/// A sign-in begun: where to send the browser, and the value it must bring back.
#[derive(Debug)]
pub struct Begun {
    /// The provider's authorization URL.
    pub url: String,
    /// 128 random bits in hex, kept by the browser (a short-lived cookie on the callback's path)
    /// and by this daemon only as its SHA-256.
    pub binding: String,
}

/// The provider as discovered, with when.
struct Discovered {
    client: ProviderClient,
    /// The scopes asked: `openid` and those of `email profile groups offline_access` the provider
    /// lists (one it does not list may be refused outright, as Google refuses `offline_access`).
    scopes: Vec<Scope>,
    /// Where a terminal's sign-in begins, if the provider offers one.
    device: Option<DeviceAuthorizationUrl>,
    at: Instant,
}

/// The daemon's OpenID client. One per daemon.
pub struct Oidc {
    settings: OidcSettings,
    /// The provider's endpoints, asked through the daemon's outgoing client.
    http: http::Provider,
    redirect: RedirectUrl,
    /// The provider as last discovered. Never held across a request to it.
    provider: Mutex<Option<Arc<Discovered>>>,
    /// Sign-ins begun, by their `state`.
    pending: Mutex<HashMap<String, Pending>>,
    /// The refresh token of each person signed in through this daemon, by subject.
    refresh: Mutex<HashMap<String, RefreshToken>>,
    /// Terminals' sign-ins waiting for their person (`mediatord login`).
    logins: device::Logins,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc").field("issuer", &self.settings.issuer).finish_non_exhaustive()
    }
}

impl Oidc {
    /// A client of the provider `settings` names, whose callback is `<base>/auth/callback` (`base`:
    /// `--public-url`, else the listening URL). `Err` for a base no URL parser takes.
    pub fn new(settings: OidcSettings, base: &str) -> Result<Oidc, String> {
        let redirect = RedirectUrl::new(format!("{}/auth/callback", base.trim_end_matches('/')))
            .map_err(|e| format!("the sign-in's redirect URI: {e}"))?;
        Ok(Oidc {
            settings,
            http: http::Provider::new(),
            redirect,
            provider: Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
            refresh: Mutex::new(HashMap::new()),
            logins: device::Logins::default(),
        })
    }

    pub fn settings(&self) -> &OidcSettings {
        &self.settings
    }

    /// The redirect URI to register at the provider.
    pub fn redirect_uri(&self) -> &str {
        self.redirect.as_str()
    }

    /// The provider's client, discovered again when `fresh` is asked or the last is old.
    async fn provider(&self, fresh: bool) -> Result<Arc<Discovered>, String> {
        if !fresh
            && let Some(known) = lock(&self.provider).as_ref()
            && known.at.elapsed() < DISCOVERY_TTL
        {
            return Ok(known.clone());
        }
        let issuer = IssuerUrl::new(self.settings.issuer.clone()).map_err(|e| e.to_string())?;
        // The chain says what failed (the issuer a document names, a key set it cannot read).
        let metadata = Metadata::discover_async(issuer, &self.http).await.map_err(|e| reason(&e))?;
        let device = metadata.additional_metadata().device_authorization_endpoint.clone();
        let listed = metadata.scopes_supported().cloned().unwrap_or_default();
        let scopes = ["email", "profile", "groups", "offline_access"]
            .into_iter()
            .filter(|s| {
                listed.iter().any(|l| l.as_str() == *s) || (listed.is_empty() && *s != "offline_access")
            })
            .map(|s| Scope::new(s.to_owned()))
            .collect();
        let client = ProviderClient::from_provider_metadata(
            metadata,
            ClientId::new(self.settings.client_id.clone()),
            self.settings.client_secret.as_ref().map(|s| ClientSecret::new(s.expose().to_owned())),
        )
        .set_redirect_uri(self.redirect.clone());
        let discovered = Arc::new(Discovered { client, scopes, device, at: Instant::now() });
        *lock(&self.provider) = Some(discovered.clone());
        Ok(discovered)
    }

    /// Begins a sign-in: the provider's authorization URL to send the browser to, and the value
    /// the browser must bring back to finish it. A `terminal`'s sign-in ends at its address.
    pub async fn begin(&self, terminal: Option<Terminal>) -> Result<Begun, SignInError> {
        let provider = self.provider(false).await.map_err(|e| {
            tracing::warn!(issuer = %self.settings.issuer, error = %e, "cannot read the OpenID provider's configuration");
            SignInError::ProviderUnavailable
        })?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state, nonce) = provider
            .client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .add_scopes(provider.scopes.iter().cloned())
            .set_pkce_challenge(challenge)
            .url();
        let Some(binding) = crate::devices::random_hex(BINDING_BYTES) else {
            tracing::error!("the operating system's random number generator failed; no sign-in begins");
            return Err(SignInError::ProviderUnavailable);
        };
        let digest: [u8; 32] = Sha256::digest(binding.as_bytes()).into();
        let now = Instant::now();
        let mut pending = lock(&self.pending);
        pending.retain(|_, p| now.duration_since(p.at) < SIGN_IN_WINDOW);
        if pending.len() >= MAX_PENDING_SIGN_INS
            && let Some(oldest) = pending.iter().min_by_key(|(_, p)| p.at).map(|(s, _)| s.clone())
        {
            pending.remove(&oldest);
        }
        pending
            .insert(state.secret().clone(), Pending { verifier, nonce, binding: digest, terminal, at: now });
        Ok(Begun { url: url.to_string(), binding })
    }

    /// The sign-in begun under `state`, taken whatever follows (a state is good for one
    /// exchange); `None` when none was, it was taken already, or it is older than
    /// [`SIGN_IN_WINDOW`].
    pub fn take(&self, state: &str) -> Option<Taken> {
        let pending = lock(&self.pending).remove(state)?;
        (pending.at.elapsed() < SIGN_IN_WINDOW).then_some(Taken(pending))
    }

    /// Ends the sign-in `taken` that the browser bringing `binding` began: the person the
    /// provider vouched for, once every check passed.
    pub async fn finish(
        &self,
        taken: Taken,
        code: &str,
        binding: Option<&str>,
    ) -> Result<Verified, SignInError> {
        let pending = taken.0;
        let presented: [u8; 32] = Sha256::digest(binding.unwrap_or("").as_bytes()).into();
        if binding.is_none() || !bool::from(presented.ct_eq(&pending.binding)) {
            tracing::warn!(
                "a sign-in's callback came from another browser than the one that began it; refused"
            );
            return Err(SignInError::InvalidState);
        }
        let provider = self.provider(false).await.map_err(|e| {
            tracing::warn!(error = %e, "cannot read the OpenID provider's configuration");
            SignInError::ProviderUnavailable
        })?;
        let exchange =
            provider.client.exchange_code(AuthorizationCode::new(code.to_owned())).map_err(|e| {
                tracing::warn!(error = %e, "the OpenID provider names no token endpoint");
                SignInError::ProviderUnavailable
            })?;
        let tokens =
            exchange.set_pkce_verifier(pending.verifier).request_async(&self.http).await.map_err(|e| {
                let refused = token_refusal(&e);
                tracing::warn!(error = %refused.1, "the OpenID provider did not exchange a sign-in's code");
                refused.0
            })?;
        self.admitted(&provider, &tokens, Some(&pending.nonce)).await
    }

    /// The person `tokens` (a token endpoint's answer) vouch for, once its ID token passed every
    /// check and the person is let in; their refresh token is kept for renewals.
    async fn admitted(
        &self,
        provider: &Discovered,
        tokens: &Tokens,
        nonce: Option<&Nonce>,
    ) -> Result<Verified, SignInError> {
        let refused = |e: &ClaimsVerificationError| {
            tracing::warn!(error = %reason(e), "a sign-in's ID token was refused");
            SignInError::InvalidIdToken
        };
        let claims = match Self::verified(provider, tokens, nonce) {
            Ok(claims) => claims,
            // Signed by a key the provider published after it was last read: read again, once.
            Err(ClaimsVerificationError::SignatureVerification(
                SignatureVerificationError::NoMatchingKey,
            )) => {
                let fresh = self.provider(true).await.map_err(|_| SignInError::ProviderUnavailable)?;
                Self::verified(&fresh, tokens, nonce).map_err(|e| refused(&e))?
            }
            Err(e) => return Err(refused(&e)),
        };
        let verified = admit::admit(&self.settings, &claims).map_err(|why| {
            tracing::info!(subject = %claims.subject().as_str(), why, "a sign-in was refused");
            SignInError::NotAllowed
        })?;
        if let Some(refresh) = tokens.refresh_token() {
            let mut kept = lock(&self.refresh);
            if kept.len() < MAX_RENEWALS || kept.contains_key(&verified.person.subject) {
                kept.insert(verified.person.subject.clone(), refresh.clone());
            }
        }
        Ok(verified)
    }

    /// Begins a terminal's sign-in (`mediatord login`, RFC 8628): the provider's user code and
    /// page for the person, and the terminal's handle on it. The provider is polled from here until
    /// it answers or the code expires; [`Oidc::device_outcome`] tells the terminal.
    pub async fn begin_device(self: &Arc<Self>, peer: std::net::IpAddr) -> Result<DeviceBegun, SignInError> {
        let provider = self.provider(false).await.map_err(|e| {
            tracing::warn!(issuer = %self.settings.issuer, error = %e, "cannot read the OpenID provider's configuration");
            SignInError::ProviderUnavailable
        })?;
        let Some(url) = provider.device.clone() else { return Err(SignInError::NoDeviceFlow) };
        let client = provider.client.clone().set_device_authorization_url(url);
        let details: openidconnect::core::CoreDeviceAuthorizationResponse = client
            .exchange_device_code()
            .add_scopes(provider.scopes.iter().cloned())
            .request_async(&self.http)
            .await
            .map_err(|e| {
                let refused = token_refusal(&e);
                tracing::warn!(error = %refused.1, "the OpenID provider did not begin a terminal's sign-in");
                // Nobody has signed in yet, so a refusal here is of this client, not of a person:
                // the grant is not enabled for it (Keycloak: `unauthorized_client`; Google's web
                // clients: `invalid_client`; oidc-provider: `invalid_request`). The terminal signs
                // in through a browser instead.
                if matches!(e, RequestTokenError::ServerResponse(_)) {
                    SignInError::NoDeviceFlow
                } else {
                    refused.0
                }
            })?;
        let Some(handle) = crate::devices::random_hex(device::HANDLE_BYTES) else {
            tracing::error!("the operating system's random number generator failed; no sign-in begins");
            return Err(SignInError::ProviderUnavailable);
        };
        let lasts = details.expires_in().min(SIGN_IN_WINDOW);
        let begun = DeviceBegun {
            handle: handle.clone(),
            user_code: details.user_code().secret().clone(),
            verification_uri: details.verification_uri().to_string(),
            verification_uri_complete: details.verification_uri_complete().map(|u| u.secret().clone()),
            expires_in: lasts.as_secs(),
        };
        let (tx, rx) = tokio::sync::watch::channel(Outcome::Pending);
        self.logins.insert(&handle, rx, lasts, peer);
        let oidc = self.clone();
        tokio::spawn(async move {
            let polled = match client.exchange_device_access_token(&details) {
                Ok(request) => {
                    // Ends when the terminal is gone (its login dropped) as well as when the
                    // provider answers or the code expires.
                    let poll = request.request_async(&oidc.http, tokio::time::sleep, Some(lasts));
                    tokio::select! {
                        polled = poll => Some(polled),
                        () = tx.closed() => None,
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the OpenID provider names no token endpoint");
                    tx.send_replace(Outcome::Done(Err(SignInError::ProviderUnavailable)));
                    return;
                }
            };
            let Some(polled) = polled else { return };
            let outcome = match polled {
                // No nonce in this grant: the token came straight from the token endpoint, over
                // TLS, for this client's device code.
                Ok(tokens) => oidc.admitted(&provider, &tokens, None).await,
                Err(e) => {
                    let (kind, why) = token_refusal(&e);
                    tracing::info!(error = %why, "a terminal's sign-in ended at the provider");
                    Err(if why == "expired_token" { SignInError::Expired } else { kind })
                }
            };
            tx.send_replace(Outcome::Done(outcome));
        });
        Ok(begun)
    }

    /// Where the terminal sign-in `handle` is, waiting up to `wait` for its outcome; `None` for a
    /// handle this daemon has no login for (never begun, expired, or already answered).
    pub async fn device_outcome(&self, handle: &str, wait: Duration) -> Option<Outcome> {
        self.logins.outcome(handle, wait).await
    }

    /// The ID token's claims, checked (`nonce`: the sign-in's; `None` on a renewal, where the
    /// provider sends none).
    fn verified(
        provider: &Discovered,
        tokens: &Tokens,
        nonce: Option<&Nonce>,
    ) -> Result<Claims, ClaimsVerificationError> {
        let id_token = tokens
            .id_token()
            .ok_or_else(|| ClaimsVerificationError::Other("the provider answered no ID token".into()))?;
        let verifier = provider.client.id_token_verifier();
        let claims = match nonce {
            Some(nonce) => id_token.claims(&verifier, nonce),
            None => id_token.claims(&verifier, |_: Option<&Nonce>| Ok(())),
        };
        claims.cloned()
    }

    /// Drops `subject`'s refresh token (none of their devices is left).
    pub fn forget(&self, subject: &str) {
        lock(&self.refresh).remove(subject);
    }

    /// The subjects this daemon renews (it keeps their refresh token).
    pub fn renewing(&self) -> Vec<String> {
        lock(&self.refresh).keys().cloned().collect()
    }

    /// Asks the provider to vouch for `subject` again; `None` when this daemon keeps no refresh
    /// token of theirs. A refusal forgets the token.
    pub async fn renew(&self, subject: &str, known: &Person) -> Option<Renewal> {
        let token = lock(&self.refresh).get(subject).cloned()?;
        let outcome = self.renew_with(&token, known).await;
        let mut kept = lock(&self.refresh);
        match &outcome {
            (Renewal::Refused(_), _) => {
                kept.remove(subject);
            }
            (_, Some(next)) => {
                kept.insert(subject.to_owned(), next.clone());
            }
            _ => {}
        }
        Some(outcome.0)
    }

    async fn renew_with(&self, token: &RefreshToken, known: &Person) -> (Renewal, Option<RefreshToken>) {
        let provider = match self.provider(false).await {
            Ok(p) => p,
            Err(e) => return (Renewal::Unreachable(e), None),
        };
        let request = match provider.client.exchange_refresh_token(token) {
            Ok(r) => r,
            Err(e) => return (Renewal::Unreachable(e.to_string()), None),
        };
        let tokens = match request.request_async(&self.http).await {
            Ok(t) => t,
            Err(e) => {
                let (kind, why) = token_refusal(&e);
                return match kind {
                    SignInError::ProviderUnavailable => (Renewal::Unreachable(why), None),
                    _ => (Renewal::Refused(why), None),
                };
            }
        };
        // A rotating provider sends a new refresh token (the old one is spent); another keeps it.
        let next = tokens.refresh_token().cloned();
        if tokens.id_token().is_none() {
            // Vouched for by the token it granted, as they were.
            let claims_free = Verified { person: known.clone(), role: admit::role_of(&self.settings, known) };
            return (Renewal::Vouched(claims_free), next);
        }
        let claims = match Self::verified(&provider, &tokens, None) {
            Ok(c) => c,
            Err(e) => {
                return (Renewal::Refused(format!("its renewed ID token was refused: {}", reason(&e))), next);
            }
        };
        if claims.subject().as_str() != known.subject {
            return (Renewal::Refused("the provider renewed another person".into()), None);
        }
        match admit::admit(&self.settings, &claims) {
            Ok(verified) => (Renewal::Vouched(verified), next),
            Err(why) => (Renewal::Refused(why.to_owned()), None),
        }
    }
}

/// An error and what caused it, in one line (the check that failed, and why).
fn reason(e: &dyn std::error::Error) -> String {
    let mut why = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        why.push_str(": ");
        why.push_str(&s.to_string());
        source = s.source();
    }
    why
}

/// What a token endpoint's failure means: a refusal (the grant is bad: the person is out), or the
/// provider unreachable; and the reason for the log (the provider's error code, never a token).
fn token_refusal<E: std::error::Error, T: ErrorResponseType + AsRef<str> + std::fmt::Display>(
    e: &RequestTokenError<E, StandardErrorResponse<T>>,
) -> (SignInError, String) {
    match e {
        RequestTokenError::ServerResponse(r) => (SignInError::ProviderRefused, r.error().as_ref().to_owned()),
        RequestTokenError::Request(e) => (SignInError::ProviderUnavailable, e.to_string()),
        RequestTokenError::Parse(_, _) => {
            (SignInError::ProviderRefused, "the token endpoint's answer is not a token response".into())
        }
        RequestTokenError::Other(why) => (SignInError::ProviderRefused, why.clone()),
    }
}

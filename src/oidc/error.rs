//! Why a sign-in failed, as every door of it says so: the web app's `#signin-error=<code>`, the
//! terminal's JSON error (`/auth/device`), the log.

/// Why a sign-in failed: a stable code the web app shows a sentence for (`#signin-error=<code>`),
/// and what the log says. Nothing is granted on any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignInError {
    /// The provider could not be reached, or answered a server error (the operator's token and
    /// paired devices still work).
    ProviderUnavailable,
    /// The callback's `state` is unknown, used already or expired: a forged or replayed callback,
    /// or a sign-in left at the provider for too long.
    InvalidState,
    /// The provider refused (the person cancelled, the code was spent, the client is not allowed).
    ProviderRefused,
    /// The ID token failed a check: signature, algorithm, issuer, audience, expiry or nonce.
    InvalidIdToken,
    /// The provider vouched for someone this daemon does not let in (another email domain, not in
    /// an allowed group, an unverified email).
    NotAllowed,
    /// A terminal's code expired before its person confirmed it (`mediatord login`).
    Expired,
    /// The provider offers no sign-in by code from a terminal: its discovery document names no
    /// device authorization endpoint, or it does not allow the device grant to this client.
    NoDeviceFlow,
    /// A terminal's browser sign-in named an address that is not this machine's loopback
    /// (`mediatord login --browser`, `terminal::Terminal`).
    InvalidTerminal,
}

impl SignInError {
    /// Every kind, for the OpenAPI document's error codes.
    pub const ALL: [SignInError; 8] = [
        SignInError::ProviderUnavailable,
        SignInError::InvalidState,
        SignInError::ProviderRefused,
        SignInError::InvalidIdToken,
        SignInError::NotAllowed,
        SignInError::Expired,
        SignInError::NoDeviceFlow,
        SignInError::InvalidTerminal,
    ];

    /// What a person is told, with what to do.
    pub fn message(self) -> &'static str {
        match self {
            SignInError::ProviderUnavailable => {
                "The sign-in provider cannot be reached; try again later (the operator's token and paired devices still work)"
            }
            SignInError::InvalidState => {
                "No sign-in is waiting under this login: it expired, was answered already, or was never begun; sign in again"
            }
            SignInError::ProviderRefused => {
                "The sign-in provider refused the sign-in (cancelled, or not allowed)"
            }
            SignInError::InvalidIdToken => {
                "The sign-in provider's ID token failed a check; nothing was granted"
            }
            SignInError::NotAllowed => {
                "The sign-in provider vouched for someone this daemon does not let in (see its --oidc-allow-domain and --oidc-allow-group)"
            }
            SignInError::Expired => "The code expired before it was confirmed; sign in again",
            SignInError::NoDeviceFlow => {
                "The sign-in provider offers no sign-in by code to this daemon (no device authorization endpoint, or the device grant is not enabled for its client): mediatord login --browser signs in through a browser on this machine instead"
            }
            SignInError::InvalidTerminal => {
                "A terminal's sign-in hands its code only to this machine's loopback: terminal must be http://127.0.0.1:PORT/... or http://[::1]:PORT/..., without a user, query or fragment"
            }
        }
    }

    /// The kind whose [`SignInError::code`] is `code`.
    pub fn from_code(code: &str) -> Option<SignInError> {
        SignInError::ALL.into_iter().find(|e| e.code() == code)
    }

    pub fn code(self) -> &'static str {
        match self {
            SignInError::ProviderUnavailable => "provider_unavailable",
            SignInError::InvalidState => "invalid_state",
            SignInError::ProviderRefused => "provider_refused",
            SignInError::InvalidIdToken => "invalid_id_token",
            SignInError::NotAllowed => "not_allowed",
            SignInError::Expired => "sign_in_expired",
            SignInError::NoDeviceFlow => "no_device_flow",
            SignInError::InvalidTerminal => "invalid_terminal",
        }
    }
}

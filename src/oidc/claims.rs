//! The ID token's claims as this daemon reads them: the standard ones, and `groups`.

use openidconnect::core::CoreGenderClaim;
use openidconnect::{AdditionalClaims, IdTokenClaims};
use serde::{Deserialize, Serialize};

/// The claims beyond the standard ones the ID token may carry: `groups` (Keycloak's, Dex's,
/// Authentik's name for them), an array of names; anything else there is ignored.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Extra {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) groups: Option<serde_json::Value>,
}

impl AdditionalClaims for Extra {}

/// An ID token's claims, with `groups`.
pub(super) type Claims = IdTokenClaims<Extra, CoreGenderClaim>;

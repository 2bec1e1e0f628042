//! A person: someone an OpenID provider vouched for (`crate::oidc`). Every device a person signs in
//! with, or pairs while signed in, belongs to them, and the person, not the device, is the voter
//! (`docs/operations.md#people`): a person with a phone and a laptop counts once.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::names::neutralised;

/// The most groups kept of a person (a provider may list hundreds; a rule names a few).
pub const MAX_GROUPS: usize = 64;
/// The longest subject, email or group name kept; a longer one is refused at sign-in.
pub const MAX_CLAIM_CHARS: usize = 256;

/// What a person's client id starts with.
pub const PERSON_PREFIX: &str = "person:";
/// The longest subject used as it is in a client id (the prefix and it fit the client id's 128).
const MAX_PLAIN_SUBJECT: usize = 100;

/// Who a person is, as their provider said at their last sign-in or renewal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    /// The provider's `sub`: stable, never reassigned (OpenID Connect Core §5.7), unlike an email.
    pub subject: String,
    /// What everyone sees: the `name` claim, else the email, else the subject (neutralised like a
    /// device's name: no controls, no bidi overrides).
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

impl Person {
    /// A person with `name` made safe to show (a provider's claims are text anyone may have typed
    /// into their profile).
    pub fn new(subject: String, name: Option<&str>, email: Option<String>, groups: Vec<String>) -> Person {
        let shown = name.filter(|n| !n.trim().is_empty()).or(email.as_deref()).unwrap_or(&subject);
        Person { name: neutralised(shown), subject, email, groups }
    }

    /// The client id every device of this person acts as, on every door: `person:<subject>`, so
    /// a person is one client, one voter under `consensus`, the one `designated` names and one in
    /// a `require` rule's quorum, whichever device they use (no device id or `operator` looks like
    /// it). A subject a client id cannot hold (a client id is `[A-Za-z0-9._:-]`, at most 128) is
    /// named by the first 128 bits of its SHA-256 in hex instead.
    pub fn client_id(&self) -> Arc<str> {
        let plain = self.subject.len() <= MAX_PLAIN_SUBJECT
            && !self.subject.is_empty()
            && self.subject.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if plain {
            return Arc::from(format!("{PERSON_PREFIX}{}", self.subject));
        }
        let digest = Sha256::digest(self.subject.as_bytes());
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        Arc::from(format!("{PERSON_PREFIX}{hex}"))
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// What a sign-in's one-time code pays for: a device of `person`'s that lasts `lasts` unless the
/// provider renews it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignIn {
    pub person: Person,
    pub lasts: std::time::Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_person_is_shown_by_name_else_email_else_subject_and_votes_as_their_subject() {
        let ada = Person::new("ada".into(), Some("Ada\u{202e} Lovelace"), Some("ada@x.test".into()), vec![]);
        assert!(!ada.name.contains('\u{202e}'), "a bidi override is not shown: {:?}", ada.name);
        assert!(ada.name.starts_with("Ada"));
        assert_eq!(&*ada.client_id(), "person:ada");
        let odd = Person::new("ada@example.test/1".into(), None, None, vec![]);
        assert!(odd.client_id().starts_with("person:") && odd.client_id().len() == "person:".len() + 32);
        assert_ne!(odd.client_id(), Person::new("ada@example.test/2".into(), None, None, vec![]).client_id());
        let long = Person::new("a".repeat(MAX_PLAIN_SUBJECT + 1), None, None, vec![]);
        assert_eq!(long.client_id().len(), "person:".len() + 32, "hashed, within a client id's 128");
        let edge = Person::new("a".repeat(MAX_PLAIN_SUBJECT), None, None, vec![]);
        assert_eq!(edge.client_id().len(), "person:".len() + MAX_PLAIN_SUBJECT);
        let no_name =
            Person::new("g1".into(), Some("  "), Some("grace@x.test".into()), vec!["admins".into()]);
        assert_eq!(no_name.name, "grace@x.test");
        assert!(no_name.in_group("admins") && !no_name.in_group("admin"));
        assert_eq!(Person::new("s-1".into(), None, None, vec![]).name, "s-1");
    }
}

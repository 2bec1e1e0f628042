//! Who may sign in, and as what: a person's checked claims against `--oidc-allow-domain`,
//! `--oidc-allow-group` and `--oidc-role`. Pure: unit-tested on claims as a provider sends them.

use crate::config::{ClaimMatch, OidcSettings, PersonRole};
use crate::devices::{MAX_CLAIM_CHARS, MAX_GROUPS, Person};

use super::claims::Claims;

/// A person the provider vouched for and this daemon lets in, with what they may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub person: Person,
    pub role: PersonRole,
}

/// The person `claims` describe, if this daemon lets them in; else why not (for the log).
pub(super) fn admit(settings: &OidcSettings, claims: &Claims) -> Result<Verified, &'static str> {
    let subject = claims.subject().as_str();
    if subject.is_empty() || subject.chars().count() > MAX_CLAIM_CHARS {
        return Err("a subject of no or too many characters");
    }
    // Only a verified address says anything about who someone is: an unverified one is whatever
    // they typed into their profile.
    let email = match (claims.email(), claims.email_verified()) {
        (Some(email), Some(true)) if email.as_str().chars().count() <= MAX_CLAIM_CHARS => {
            Some(email.as_str().to_ascii_lowercase())
        }
        _ => None,
    };
    let name = claims.name().and_then(|n| n.get(None)).map(|n| n.as_str().to_owned());
    let groups = groups(claims.additional_claims().groups.as_ref());
    let person = Person::new(subject.to_owned(), name.as_deref(), email, groups);
    let in_domain = domain(&person).is_some_and(|d| settings.allow_domains.iter().any(|a| a == d));
    let in_group = settings.allow_groups.iter().any(|g| person.in_group(g));
    if !in_domain && !in_group {
        return Err(if person.email.is_none() && !settings.allow_domains.is_empty() {
            "no verified email, and in no allowed group"
        } else {
            "neither in an allowed email domain nor in an allowed group"
        });
    }
    let role = role_of(settings, &person);
    Ok(Verified { person, role })
}

/// What `person` may do: the first `--oidc-role` entry that matches, else the default.
pub(super) fn role_of(settings: &OidcSettings, person: &Person) -> PersonRole {
    settings
        .roles
        .iter()
        .find(|(matcher, _)| match matcher {
            ClaimMatch::Group(g) => person.in_group(g),
            ClaimMatch::Email(e) => person.email.as_deref() == Some(e.as_str()),
            ClaimMatch::Domain(d) => domain(person) == Some(d.as_str()),
        })
        .map_or(settings.default_role, |(_, role)| *role)
}

/// The domain of a person's verified email.
fn domain(person: &Person) -> Option<&str> {
    person.email.as_deref().and_then(|e| e.rsplit_once('@')).map(|(_, d)| d)
}

/// The `groups` claim: an array of names (one name alone is taken as an array of one); other
/// members, empty or overlong names are left out, and at most [`MAX_GROUPS`] kept.
fn groups(claim: Option<&serde_json::Value>) -> Vec<String> {
    let names: Vec<&serde_json::Value> = match claim {
        Some(serde_json::Value::Array(items)) => items.iter().collect(),
        Some(one @ serde_json::Value::String(_)) => vec![one],
        _ => Vec::new(),
    };
    names
        .into_iter()
        .filter_map(serde_json::Value::as_str)
        .filter(|g| !g.is_empty() && g.chars().count() <= MAX_CLAIM_CHARS)
        .take(MAX_GROUPS)
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;

    fn settings(domains: &[&str], groups: &[&str], roles: Vec<(ClaimMatch, PersonRole)>) -> OidcSettings {
        OidcSettings {
            issuer: "https://id.example.test".into(),
            client_id: "mediatord".into(),
            client_secret: None,
            allow_domains: domains.iter().map(|d| d.to_string()).collect(),
            allow_groups: groups.iter().map(|g| g.to_string()).collect(),
            roles,
            default_role: PersonRole::Voter,
            renew: Duration::from_secs(300),
        }
    }

    /// Claims as a provider's ID token carries them (the library has checked the token already).
    fn claims(extra: Value) -> Claims {
        let mut base = json!({
            "iss": "https://id.example.test", "sub": "ada", "aud": "mediatord",
            "exp": 4_000_000_000u64, "iat": 1_700_000_000u64,
        });
        if let (Value::Object(b), Value::Object(e)) = (&mut base, extra) {
            b.extend(e);
        }
        serde_json::from_value(base).expect("claims")
    }

    #[test]
    fn a_verified_email_in_an_allowed_domain_lets_a_person_in() {
        let s = settings(&["example.test"], &[], vec![]);
        let ada =
            admit(&s, &claims(json!({"email": "Ada@Example.test", "email_verified": true, "name": "Ada"})))
                .expect("in");
        assert_eq!((ada.person.name.as_str(), ada.role), ("Ada", PersonRole::Voter));
        assert_eq!(ada.person.email.as_deref(), Some("ada@example.test"));
        let unverified = claims(json!({"email": "ada@example.test", "email_verified": false}));
        assert_eq!(admit(&s, &unverified), Err("no verified email, and in no allowed group"));
        let silent = claims(json!({"email": "ada@example.test"}));
        assert!(admit(&s, &silent).is_err(), "an email not said to be verified is not");
        let elsewhere = claims(json!({"email": "mallory@elsewhere.test", "email_verified": true}));
        assert_eq!(admit(&s, &elsewhere), Err("neither in an allowed email domain nor in an allowed group"));
        let lookalike = claims(json!({"email": "eve@notexample.test", "email_verified": true}));
        assert!(admit(&s, &lookalike).is_err(), "a domain matches whole");
    }

    #[test]
    fn a_group_lets_a_person_in_and_maps_their_role_first_match_first() {
        let roles = vec![
            (ClaimMatch::Group("admins".into()), PersonRole::Operator),
            (ClaimMatch::Email("grace@example.test".into()), PersonRole::Observer),
            (ClaimMatch::Domain("example.test".into()), PersonRole::Voter),
        ];
        let s =
            OidcSettings { default_role: PersonRole::Observer, ..settings(&[], &["staff", "admins"], roles) };
        let grace = claims(json!({
            "email": "grace@example.test", "email_verified": true, "groups": ["staff", "admins"]
        }));
        assert_eq!(admit(&s, &grace).map(|v| v.role), Ok(PersonRole::Operator), "the first match wins");
        let staff = claims(json!({"email": "grace@example.test", "email_verified": true, "groups": "staff"}));
        assert_eq!(admit(&s, &staff).map(|v| v.role), Ok(PersonRole::Observer), "one group as a string");
        let domain =
            claims(json!({"email": "bob@example.test", "email_verified": true, "groups": ["staff"]}));
        assert_eq!(admit(&s, &domain).map(|v| v.role), Ok(PersonRole::Voter));
        let other = claims(json!({"groups": ["staff", 7, "", "x".repeat(MAX_CLAIM_CHARS + 1)]}));
        let other = admit(&s, &other).expect("in");
        assert_eq!(
            (other.role, other.person.groups.clone()),
            (PersonRole::Observer, vec!["staff".to_owned()])
        );
        assert!(admit(&s, &claims(json!({"groups": ["Staff"]}))).is_err(), "group names match exactly");
    }

    #[test]
    fn groups_are_bounded_and_an_odd_subject_is_refused() {
        let many: Vec<String> = (0..MAX_GROUPS + 10).map(|i| format!("g{i}")).collect();
        assert_eq!(groups(Some(&json!(many))).len(), MAX_GROUPS);
        assert!(groups(Some(&json!({"a": 1}))).is_empty());
        let s = settings(&[], &["staff"], vec![]);
        let long = claims(json!({"sub": "s".repeat(MAX_CLAIM_CHARS + 1), "groups": ["staff"]}));
        assert!(admit(&s, &long).is_err());
        let edge = claims(json!({"sub": "s".repeat(MAX_CLAIM_CHARS), "groups": ["staff"]}));
        assert!(admit(&s, &edge).is_ok(), "a subject of exactly the bound is kept");
    }

    #[test]
    fn an_overlong_email_is_no_email() {
        let s = settings(&["example.test"], &["staff"], vec![]);
        let local = "a".repeat(MAX_CLAIM_CHARS);
        let long = claims(
            json!({"email": format!("{local}@example.test"), "email_verified": true, "groups": ["staff"]}),
        );
        let long = admit(&s, &long).expect("in by group");
        assert_eq!(long.person.email, None, "an address past the bound is not kept");
        let edge = format!("{}@example.test", "a".repeat(MAX_CLAIM_CHARS - "@example.test".len()));
        let fits = admit(&s, &claims(json!({"email": edge, "email_verified": true}))).expect("in by domain");
        assert_eq!(fits.person.email.as_deref(), Some(edge.as_str()));
    }
}

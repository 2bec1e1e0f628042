//! Sign-in with an OpenID provider (`docs/people.md`): `--oidc-issuer`, `--oidc-client-id`, the
//! client secret from `--oidc-client-secret-file` or `MEDIATORD_OIDC_CLIENT_SECRET` (never a flag's
//! value: the process list shows flags), who may sign in (`--oidc-allow-domain`,
//! `--oidc-allow-group`), what each person may do (`--oidc-role`, `--oidc-default-role`) and how
//! often the provider is asked to vouch for them again (`--oidc-renew-ms`).

use std::path::Path;
use std::time::Duration;

use super::file::FileSettings;
use super::notify::parse_http_url;
use super::{ConfigError, Secret, ServeArgs, refuse};

/// The default of `--oidc-renew-ms`: five minutes between two renewals of a sign-in at the
/// provider, so a person disabled there loses every device here within about that (a sign-in
/// lasts [`LIFETIME_RENEWALS`] of them unless renewed).
pub const DEFAULT_RENEW_MS: u64 = 300_000;
/// The shortest renewal period taken (a test's provider renews every second; a real one would
/// be asked a token a second by every signed-in person).
const MIN_RENEW_MS: u64 = 1_000;
/// A sign-in lasts this many renewal periods past its last renewal: one renewal may fail (the
/// provider restarting) without anyone being signed out.
pub const LIFETIME_RENEWALS: u32 = 2;
/// The longest client secret read from its file or the environment.
const MAX_SECRET_BYTES: usize = 4 * 1024;
/// Where the client secret is read from when no file is given (erased from the daemon's own
/// environment once read, and never passed to an agent: `config::SECRET_ENV`).
pub(super) const SECRET_VAR: &str = "MEDIATORD_OIDC_CLIENT_SECRET";
/// `--oidc-allow-domain`, `--oidc-allow-group` and `--oidc-role` entries at most, each.
const MAX_ENTRIES: usize = 64;

/// What a person may do, as `--oidc-role` names it (the devices' roles, and `operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersonRole {
    Operator,
    Voter,
    Observer,
}

impl PersonRole {
    fn parse(s: &str) -> Option<PersonRole> {
        match s {
            "operator" => Some(PersonRole::Operator),
            "voter" => Some(PersonRole::Voter),
            "observer" => Some(PersonRole::Observer),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PersonRole::Operator => "operator",
            PersonRole::Voter => "voter",
            PersonRole::Observer => "observer",
        }
    }
}

/// What one `--oidc-role` entry matches in a person's claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimMatch {
    /// A member of this group (the `groups` claim).
    Group(String),
    /// This verified email address (lowercase).
    Email(String),
    /// A verified email address at this domain (lowercase).
    Domain(String),
}

/// The OpenID sign-in's settings.
#[derive(Debug, Clone)]
pub struct OidcSettings {
    /// The issuer URL (`https://`, or `http://` on loopback for a provider on this machine), as the
    /// provider's discovery document must repeat it, without a trailing `/`.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<Secret>,
    /// Verified email domains (lowercase) whose people may sign in.
    pub allow_domains: Vec<String>,
    /// Groups whose members may sign in.
    pub allow_groups: Vec<String>,
    /// First match wins.
    pub roles: Vec<(ClaimMatch, PersonRole)>,
    pub default_role: PersonRole,
    pub renew: Duration,
}

impl OidcSettings {
    /// How long a sign-in lasts past its last renewal.
    pub fn lifetime(&self) -> Duration {
        self.renew * LIFETIME_RENEWALS
    }
}

/// An endpoint the provider's discovery document names (its token endpoint, its keys), as the
/// daemon's outgoing client asks it.
pub fn provider_url(raw: &str) -> Result<super::TargetUrl, ConfigError> {
    parse_http_url(raw, "the OpenID provider's endpoint", "the provider's endpoints carry no credentials")
}

/// The OpenID settings of the command line and the config file; `None` without `--oidc-issuer`.
pub(super) fn oidc(args: &ServeArgs, file: &FileSettings) -> Result<Option<OidcSettings>, ConfigError> {
    let issuer = match &args.oidc_issuer {
        Some(i) => Some(i.clone()),
        None => file.string("oidcIssuer")?,
    };
    let client_id = match &args.oidc_client_id {
        Some(c) => Some(c.clone()),
        None => file.string("oidcClientId")?,
    };
    let Some(issuer) = issuer else {
        if client_id.is_some() {
            return refuse("--oidc-client-id needs --oidc-issuer (the provider's URL)");
        }
        return Ok(None);
    };
    let issuer = issuer.trim().trim_end_matches('/').to_owned();
    let url = parse_http_url(&issuer, "--oidc-issuer", "put no credentials in the issuer URL")?;
    if !url.tls && !super::is_loopback_host(&url.host) {
        return refuse(format!(
            "--oidc-issuer {issuer} is http:// on another machine: the provider's keys and tokens would cross the network in the clear; use its https:// URL"
        ));
    }
    let Some(client_id) = client_id.filter(|c| !c.trim().is_empty()) else {
        return refuse(
            "--oidc-issuer needs --oidc-client-id: the client id the provider gave this daemon when it was registered",
        );
    };
    let secret_file = match &args.oidc_client_secret_file {
        Some(p) => Some(p.clone()),
        None => file.string("oidcClientSecretFile")?.map(|p| file.dir.join(p)),
    };
    let env_secret =
        args.oidc_client_secret.clone().or_else(|| secret_in_env(std::env::var(SECRET_VAR).ok()));
    let client_secret = client_secret(secret_file.as_deref(), env_secret.as_ref())?;
    let allow_domains = lowercase(list(&args.oidc_allow_domain, file, "oidcAllowDomain")?);
    let allow_groups = list(&args.oidc_allow_group, file, "oidcAllowGroup")?;
    if allow_domains.is_empty() && allow_groups.is_empty() {
        return refuse(
            "--oidc-issuer needs --oidc-allow-domain or --oidc-allow-group: without either, anyone with an account at the provider (any Google account, say) could sign in",
        );
    }
    let mut roles = Vec::new();
    for entry in list(&args.oidc_role, file, "oidcRole")? {
        roles.push(role_entry(&entry)?);
    }
    let default_role = match args.oidc_default_role.clone().or(file.string("oidcDefaultRole")?) {
        None => PersonRole::Voter,
        Some(r) => PersonRole::parse(&r).ok_or_else(|| {
            ConfigError(format!("--oidc-default-role {r:?}: it is operator, voter or observer"))
        })?,
    };
    let renew_ms = file.positive_ms(args.oidc_renew_ms, "oidcRenewMs", DEFAULT_RENEW_MS)?;
    if renew_ms < MIN_RENEW_MS {
        return refuse(format!("--oidc-renew-ms {renew_ms}: at least {MIN_RENEW_MS}"));
    }
    Ok(Some(OidcSettings {
        issuer,
        client_id: client_id.trim().to_owned(),
        client_secret,
        allow_domains,
        allow_groups,
        roles,
        default_role,
        renew: Duration::from_millis(renew_ms),
    }))
}

/// The secret from its file (trimmed), else the environment's; none for a public client.
fn client_secret(file: Option<&Path>, env: Option<&Secret>) -> Result<Option<Secret>, ConfigError> {
    let raw = match (file, env) {
        (Some(_), Some(_)) => {
            return refuse(
                "the OpenID client secret is given twice: --oidc-client-secret-file and MEDIATORD_OIDC_CLIENT_SECRET; keep one",
            );
        }
        (Some(path), None) => {
            let text = std::fs::read(path).map_err(|e| {
                ConfigError(format!("--oidc-client-secret-file {}: cannot read it: {e}", path.display()))
            })?;
            if text.len() > MAX_SECRET_BYTES {
                return refuse(format!(
                    "--oidc-client-secret-file {}: over {MAX_SECRET_BYTES} bytes, which is no client secret",
                    path.display()
                ));
            }
            String::from_utf8(text).map_err(|_| {
                ConfigError(format!("--oidc-client-secret-file {}: not UTF-8 text", path.display()))
            })?
        }
        (None, Some(secret)) => secret.expose().to_owned(),
        (None, None) => return Ok(None),
    };
    let secret = raw.trim();
    Ok((!secret.is_empty()).then(|| Secret::from(secret.to_owned())))
}

/// [`SECRET_VAR`]'s value as a secret: a blank one is none (an unset variable, as a shell leaves it).
fn secret_in_env(value: Option<String>) -> Option<Secret> {
    value.filter(|v| !v.trim().is_empty()).map(Secret::from)
}

/// A repeatable flag's values, else the config file's list under `key`; at most [`MAX_ENTRIES`].
fn list(flag: &[String], file: &FileSettings, key: &str) -> Result<Vec<String>, ConfigError> {
    let values = if flag.is_empty() { file.strings(key)? } else { flag.to_vec() };
    let values: Vec<String> = values.iter().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).collect();
    if values.len() > MAX_ENTRIES {
        return refuse(format!("{key}: at most {MAX_ENTRIES} entries"));
    }
    Ok(values)
}

fn lowercase(values: Vec<String>) -> Vec<String> {
    values.into_iter().map(|v| v.trim_start_matches('@').to_ascii_lowercase()).collect()
}

/// `group:NAME=ROLE`, `email:ADDRESS=ROLE` or `domain:DOMAIN=ROLE`.
fn role_entry(entry: &str) -> Result<(ClaimMatch, PersonRole), ConfigError> {
    let bad = || {
        ConfigError(format!(
            "--oidc-role {entry:?}: expected group:NAME=ROLE, email:ADDRESS=ROLE or domain:DOMAIN=ROLE, ROLE being operator, voter or observer (e.g. group:admins=operator)"
        ))
    };
    let (matcher, role) = entry.rsplit_once('=').ok_or_else(bad)?;
    let role = PersonRole::parse(role.trim()).ok_or_else(bad)?;
    let (kind, value) = matcher.split_once(':').ok_or_else(bad)?;
    let value = value.trim();
    if value.is_empty() {
        return Err(bad());
    }
    let matcher = match kind.trim() {
        "group" => ClaimMatch::Group(value.to_owned()),
        "email" => ClaimMatch::Email(value.to_ascii_lowercase()),
        "domain" => ClaimMatch::Domain(value.trim_start_matches('@').to_ascii_lowercase()),
        _ => return Err(bad()),
    };
    Ok((matcher, role))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// The settings of `args` (a workspace added), or the refusal's text.
    fn settings(args: ServeArgs) -> Result<Option<OidcSettings>, String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = vec![dir.path().to_string_lossy().into_owned()];
        Config::from_args(&ServeArgs { workspace, ..args }).map(|c| c.oidc).map_err(|e| e.0)
    }

    fn issuer(extra: ServeArgs) -> ServeArgs {
        ServeArgs {
            oidc_issuer: Some("https://id.example.test/realms/dev/".into()),
            oidc_client_id: Some(" mediatord ".into()),
            oidc_allow_domain: vec!["@Example.TEST".into()],
            ..extra
        }
    }

    #[test]
    fn an_issuer_needs_a_client_and_someone_to_let_in_and_is_https_unless_loopback() {
        assert!(settings(ServeArgs::default()).expect("none").is_none(), "no issuer: no sign-in");
        let s = settings(issuer(ServeArgs::default())).expect("loads").expect("a sign-in");
        assert_eq!(
            (s.issuer.as_str(), s.client_id.as_str(), s.allow_domains.clone()),
            ("https://id.example.test/realms/dev", "mediatord", vec!["example.test".to_owned()])
        );
        assert_eq!(
            (s.default_role, s.renew, s.lifetime()),
            (PersonRole::Voter, Duration::from_secs(300), Duration::from_secs(600))
        );
        assert!(s.client_secret.is_none() && s.roles.is_empty() && s.allow_groups.is_empty());

        let alone = ServeArgs { oidc_client_id: Some("x".into()), ..ServeArgs::default() };
        assert!(settings(alone).expect_err("refused").contains("needs --oidc-issuer"));
        let no_client = ServeArgs { oidc_client_id: None, ..issuer(ServeArgs::default()) };
        assert!(settings(no_client).expect_err("refused").contains("needs --oidc-client-id"));
        let blank = ServeArgs { oidc_client_id: Some("  ".into()), ..issuer(ServeArgs::default()) };
        assert!(settings(blank).expect_err("refused").contains("needs --oidc-client-id"));
        let anyone = ServeArgs { oidc_allow_domain: vec![], ..issuer(ServeArgs::default()) };
        assert!(settings(anyone).expect_err("refused").contains("--oidc-allow-domain or --oidc-allow-group"));
        let group = ServeArgs {
            oidc_allow_domain: vec![],
            oidc_allow_group: vec!["devs".into()],
            ..issuer(ServeArgs::default())
        };
        assert_eq!(settings(group).expect("loads").expect("on").allow_groups, ["devs"]);

        let plain =
            ServeArgs { oidc_issuer: Some("http://id.example.test".into()), ..issuer(ServeArgs::default()) };
        assert!(settings(plain).expect_err("refused").contains("in the clear"));
        let local =
            ServeArgs { oidc_issuer: Some("http://127.0.0.1:5556".into()), ..issuer(ServeArgs::default()) };
        assert!(settings(local).expect("loads").is_some(), "a provider on this machine's loopback");
        let odd =
            ServeArgs { oidc_issuer: Some("ftp://id.example.test".into()), ..issuer(ServeArgs::default()) };
        assert!(settings(odd).is_err());
    }

    #[test]
    fn roles_the_default_role_and_the_renewal_period_are_read_and_checked() {
        let args = ServeArgs {
            oidc_role: vec!["group:admins=operator".into(), "domain:example.test=observer".into()],
            oidc_default_role: Some("observer".into()),
            oidc_renew_ms: Some(1_000),
            ..issuer(ServeArgs::default())
        };
        let s = settings(args).expect("loads").expect("on");
        assert_eq!(s.roles.len(), 2);
        assert_eq!((s.default_role, s.renew), (PersonRole::Observer, Duration::from_millis(1_000)));
        let bad_role = ServeArgs { oidc_default_role: Some("admin".into()), ..issuer(ServeArgs::default()) };
        assert!(settings(bad_role).expect_err("refused").contains("operator, voter or observer"));
        let fast = ServeArgs { oidc_renew_ms: Some(999), ..issuer(ServeArgs::default()) };
        assert!(settings(fast).expect_err("refused").contains("at least 1000"));
        let many = ServeArgs {
            oidc_allow_group: (0..=MAX_ENTRIES).map(|i| format!("g{i}")).collect(),
            ..issuer(ServeArgs::default())
        };
        assert!(settings(many).expect_err("refused").contains("at most"));
        let bad = ServeArgs { oidc_role: vec!["admins".into()], ..issuer(ServeArgs::default()) };
        assert!(settings(bad).is_err());
    }

    #[test]
    fn role_entries_name_a_group_an_email_or_a_domain_and_a_role() {
        assert_eq!(
            role_entry("group:admins=operator").ok(),
            Some((ClaimMatch::Group("admins".into()), PersonRole::Operator))
        );
        assert_eq!(
            role_entry("email: Ada@Example.TEST =observer").ok(),
            Some((ClaimMatch::Email("ada@example.test".into()), PersonRole::Observer))
        );
        assert_eq!(
            role_entry("domain:@example.test=voter").ok(),
            Some((ClaimMatch::Domain("example.test".into()), PersonRole::Voter))
        );
        for bad in ["admins=operator", "group:admins=root", "group:=voter", "team:x=voter", "group:admins"] {
            let e = role_entry(bad).expect_err(bad);
            assert!(e.0.contains("group:NAME=ROLE"), "{bad}: {}", e.0);
        }
    }

    #[test]
    fn a_role_reads_back_as_its_name_and_a_list_holds_up_to_its_bound() {
        for role in [PersonRole::Operator, PersonRole::Voter, PersonRole::Observer] {
            assert_eq!(PersonRole::parse(role.as_str()), Some(role));
        }
        assert_eq!(PersonRole::Observer.as_str(), "observer");
        let domains = |n: usize| (0..n).map(|i| format!("d{i}.example.test")).collect::<Vec<_>>();
        let at_bound = ServeArgs { oidc_allow_domain: domains(MAX_ENTRIES), ..issuer(ServeArgs::default()) };
        assert_eq!(settings(at_bound).expect("loads").expect("on").allow_domains.len(), MAX_ENTRIES);
        let past = ServeArgs { oidc_allow_domain: domains(MAX_ENTRIES + 1), ..issuer(ServeArgs::default()) };
        assert!(settings(past).expect_err("refused").contains("at most 64 entries"));
    }

    #[test]
    fn the_secret_comes_from_one_place_trimmed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("secret");
        std::fs::write(&path, "s3cret\n").expect("write");
        assert_eq!(
            client_secret(Some(&path), None).expect("read").map(|s| s.expose().to_owned()),
            Some("s3cret".into())
        );
        let env = Secret::from("e".to_owned());
        assert!(client_secret(Some(&path), Some(&env)).is_err(), "given twice");
        assert_eq!(
            client_secret(None, Some(&env)).expect("env").map(|s| s.expose().to_owned()),
            Some("e".into())
        );
        assert!(client_secret(None, None).expect("none").is_none(), "a public client");
        std::fs::write(&path, vec![b'x'; 4096]).expect("write");
        assert!(client_secret(Some(&path), None).is_ok(), "4 KiB is still a secret");
        let shown = |v: Option<&str>| secret_in_env(v.map(str::to_owned)).map(|s| s.expose().to_owned());
        assert_eq!(shown(Some("e")), Some("e".into()));
        assert_eq!((shown(Some(" \n")), shown(None)), (None, None), "blank is unset");
        std::fs::write(&path, vec![b'x'; MAX_SECRET_BYTES + 1]).expect("write");
        assert!(client_secret(Some(&path), None).is_err(), "too large");
        assert!(client_secret(Some(&dir.path().join("missing")), None).is_err());
    }
}

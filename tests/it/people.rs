//! People (issue #48, `docs/people.md`), black-box against a real OpenID provider (`tests/oidc/`,
//! oidc-provider on loopback HTTPS with a CA the test makes) and a forging one
//! (`support::fake_oidc`): who may sign in and as what, a person as one client and one voter on
//! every device, their sign-in renewed at the provider and ended everywhere when it stops
//! vouching for them, and every forged or replayed answer refused with nothing granted.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::fake_oidc::{FakeAccount, FakeOidc, Forgery};
use crate::support::oidc::{Browser, OidcProvider, SignInResult};
use crate::support::*;

pub(crate) const TOKEN: &str = "operator-secret";
pub(crate) const CLIENT: &str = "mediatord-web";
pub(crate) const SECRET: &str = "web-client-secret";

/// A daemon whose people sign in at a real provider: Ada (example.test, a voter), Grace (an
/// admin: `group:admins=operator`), Mallory (another domain: refused).
pub(crate) struct People {
    pub(crate) d: Daemon,
    pub(crate) provider: OidcProvider,
    pub(crate) ca: TestCa,
    _dir: tempfile::TempDir,
}

impl People {
    pub(crate) async fn start(extra: &[&str]) -> People {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = TestCa::new();
        let provider = OidcProvider::start(
            &ca,
            dir.path(),
            json!({
                "ttl": {"access_token": 30, "id_token": 30, "refresh_token": 600},
                "clients": [{"client_id": "placeholder", "client_secret": "x", "grant_types": ["authorization_code"],
                             "redirect_uris": ["https://127.0.0.1:1/auth/callback"]}],
                "accounts": [
                    {"id": "ada", "email": "ada@example.test", "name": "Ada Lovelace"},
                    {"id": "grace", "email": "grace@example.test", "name": "Grace Hopper", "groups": ["admins"]},
                    {"id": "mallory", "email": "mallory@elsewhere.test", "name": "Mallory"},
                ],
            }),
        );
        let ca_file = ca.pem_file(dir.path());
        let d = start_daemon(provider.issuer(), &ca_file, extra);
        provider
            .put_client(json!({
                "client_id": CLIENT, "client_secret": SECRET,
                // The device grant too: `mediatord login` (tests/it/login.rs).
                "grant_types": ["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"],
                "redirect_uris": [format!("{}/auth/callback", d.base)],
            }))
            .await;
        People { d, provider, ca, _dir: dir }
    }

    /// A fresh browser of the person `account`: signs in and exchanges the code, as the web app
    /// does; the device's credential.
    pub(crate) async fn signed_in(&self, account: &str) -> String {
        let mut browser = Browser::new(&self.ca.pem());
        let code = match browser.sign_in(&self.d.base, account).await {
            SignInResult::Pair(code) => code,
            other => panic!("{account} did not sign in: {other:?}\n{}", browser.trace()),
        };
        let paired = send(http().post(self.d.url("/devices/pair")).json(&json!({"code": code}))).await;
        assert_eq!(paired.status, 200, "{}", paired.text);
        assert!(paired.body["person"].is_object(), "{}", paired.body);
        paired.body["token"].as_str().expect("token").to_owned()
    }
}

pub(crate) fn start_daemon(issuer: &str, ca_file: &std::path::Path, extra: &[&str]) -> Daemon {
    let mut args = vec![
        "--token",
        TOKEN,
        "--oidc-issuer",
        issuer,
        "--oidc-client-id",
        CLIENT,
        "--oidc-allow-domain",
        "example.test",
        "--oidc-role",
        "group:admins=operator",
    ];
    args.extend(extra);
    let ca = ca_file.to_str().expect("utf-8 path");
    Daemon::start_env(&args, &[("SSL_CERT_FILE", ca), ("MEDIATORD_OIDC_CLIENT_SECRET", SECRET)])
}

/// A daemon whose provider forges on demand (`support::fake_oidc`), Ada its one account.
pub(crate) struct Forging {
    pub(crate) d: Daemon,
    pub(crate) fake: FakeOidc,
    pub(crate) ca: TestCa,
    /// The CA's PEM file, which a second daemon of the same provider trusts too.
    pub(crate) ca_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Forging {
    pub(crate) async fn start() -> Forging {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = TestCa::new();
        let ada = FakeAccount::new("ada", "ada@example.test", "Ada Lovelace", &[]);
        let fake = FakeOidc::start(&ca, dir.path(), CLIENT, ada).await;
        let ca_file = ca.pem_file(dir.path());
        let d = start_daemon(fake.issuer(), &ca_file, &[]);
        Forging { d, fake, ca, ca_file, _dir: dir }
    }
}

/// The audit entry of request `rid`, once the store has its decision (it records the request
/// pending first).
pub(crate) async fn audit_entry(d: &Daemon, rid: &str) -> Value {
    let decided = |e: &Value| e["requestId"] == rid && e["status"] != "pending";
    let audit = eventually(
        || http().get(d.url("/audit")).bearer_auth(TOKEN),
        |b| b["entries"].as_array().is_some_and(|e| e.iter().any(decided)),
    )
    .await;
    let entries = audit["entries"].as_array().expect("entries");
    entries.iter().find(|e| decided(e)).cloned().expect("the entry")
}

/// `GET /capabilities`'s identity for `credential`.
pub(crate) async fn identity(d: &Daemon, credential: &str) -> Reply {
    send(http().get(d.url("/capabilities")).bearer_auth(credential)).await
}

/// Ada and Grace sign in with the real provider and are told apart by name, role and client id;
/// Mallory, at another domain, is refused with the reason the web app explains, and nothing is
/// paired for her. The daemon offers the sign-in before anyone has signed in.
#[tokio::test]
async fn two_people_sign_in_and_a_third_from_another_domain_is_refused() {
    let p = People::start(&[]).await;
    let offered = send(http().get(p.d.url("/auth"))).await;
    assert_eq!(offered.status, 200, "public, before any sign-in");
    assert_eq!(offered.body["signIn"]["issuer"], json!(p.provider.issuer()));

    let ada = p.signed_in("ada").await;
    let me = identity(&p.d, &ada).await.ok();
    let who = &me["identity"];
    assert_eq!(
        (who["person"]["name"].as_str(), who["role"].as_str(), who["clientId"].as_str()),
        (Some("Ada Lovelace"), Some("voter"), Some("person:ada")),
        "{me}"
    );
    assert!(who["expiresAt"].as_u64().is_some(), "a sign-in ends unless renewed: {who}");
    let refused = send(http().get(p.d.url("/devices")).bearer_auth(&ada)).await;
    assert_eq!(refused.status, 403, "a voter is no operator: {}", refused.text);

    let grace = p.signed_in("grace").await;
    let me = identity(&p.d, &grace).await.ok();
    assert_eq!(
        (me["identity"]["person"]["groups"].clone(), me["identity"]["role"].as_str()),
        (json!(["admins"]), Some("operator"))
    );
    let devices = send(http().get(p.d.url("/devices")).bearer_auth(&grace)).await.ok();
    let names: Vec<&str> = devices["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| d["person"]["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, ["Ada Lovelace", "Grace Hopper"], "{devices}");

    assert_eq!(p.provider.sign_in(&p.d.base, "mallory").await, SignInResult::Error("not_allowed".into()));
    let devices = send(http().get(p.d.url("/devices")).bearer_auth(TOKEN)).await.ok();
    assert_eq!(devices["devices"].as_array().map(Vec::len), Some(2), "nothing paired for her: {devices}");
}

/// A callback whose `state` was tampered with, one replayed, and one opened in another browser
/// than the one that began the sign-in (a login CSRF) are each refused, and nothing is granted.
#[tokio::test]
async fn a_tampered_replayed_or_foreign_callback_is_refused() {
    let p = People::start(&[]).await;
    let mut browser = Browser::new(&p.ca.pem());
    let callback = browser.authorize_only(&p.d.base, "ada").await;
    let tampered = callback.with_param("state", "not-the-state");
    assert_eq!(browser.callback(&tampered).await, SignInResult::Error("invalid_state".into()));

    let mut browser = Browser::new(&p.ca.pem());
    let callback = browser.authorize_only(&p.d.base, "ada").await;
    let mut other = Browser::new(&p.ca.pem());
    assert_eq!(
        other.callback(&callback.url).await,
        SignInResult::Error("invalid_state".into()),
        "another browser, without the sign-in's binding"
    );
    // The state is spent by that attempt: its own browser cannot use it afterwards either.
    assert_eq!(browser.callback(&callback.url).await, SignInResult::Error("invalid_state".into()));

    let mut browser = Browser::new(&p.ca.pem());
    let callback = browser.authorize_only(&p.d.base, "ada").await;
    assert!(matches!(browser.callback(&callback.url).await, SignInResult::Pair(_)));
    assert_eq!(
        browser.callback(&callback.url).await,
        SignInResult::Error("invalid_state".into()),
        "replayed"
    );
    let without = callback.without_param("code");
    assert_eq!(browser.callback(&without).await, SignInResult::Error("invalid_state".into()));
    let devices = send(http().get(p.d.url("/devices")).bearer_auth(TOKEN)).await.ok();
    assert_eq!(devices["devices"].as_array().map(Vec::len), Some(0), "no code was exchanged: {devices}");
}

/// The consensus quorum counts people: Ada on her laptop and her phone is one voter, so her two
/// approvals leave a two-person consensus waiting until Grace votes; the audit names both.
#[tokio::test]
async fn under_consensus_a_person_with_two_devices_counts_once() {
    let p = People::start(&["--permission-policy", "consensus"]).await;
    let (laptop, phone, grace) =
        (p.signed_in("ada").await, p.signed_in("ada").await, p.signed_in("grace").await);
    assert_ne!(laptop, phone, "two devices");
    let created = send(http().post(p.d.url("/session")).bearer_auth(&laptop).json(&json!({}))).await.ok();
    let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
    for who in [&phone, &grace] {
        let joined =
            send(http().post(p.d.url("/session")).bearer_auth(who).json(&json!({"sessionId": sid}))).await;
        assert_eq!(joined.status, 200, "{}", joined.text);
    }
    let mut sse = Sse::connect(&p.d, &sid, &[("Authorization", format!("Bearer {TOKEN}"))]).await;
    let prompt = json!({"prompt": [{"type": "text", "text": "write people.txt hello"}]});
    let queued = http()
        .post(p.d.url(&format!("/session/{sid}/prompt")))
        .bearer_auth(&laptop)
        .header("Prefer", "respond-async")
        .json(&prompt);
    assert_eq!(send(queued).await.status, 202);
    let request = sse.until_type("permission_request").await.last().expect("request").payload().clone();
    let rid = request["requestId"].as_str().expect("requestId").to_owned();
    let url = p.d.url(&format!("/session/{sid}/permission/{rid}"));
    let allow = json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});

    assert_eq!(send(http().post(&url).bearer_auth(&laptop).json(&allow)).await.status, 200);
    let partial = sse.until_type("permission_partial_vote").await.last().expect("partial").payload().clone();
    assert_eq!(
        (partial["votesReceived"].as_u64(), partial["quorum"].as_u64()),
        (Some(1), Some(2)),
        "{partial}"
    );
    assert_eq!(send(http().post(&url).bearer_auth(&phone).json(&allow)).await.status, 200);
    let again = sse.until_type("permission_partial_vote").await.last().expect("partial").payload().clone();
    assert_eq!(again["votesReceived"].as_u64(), Some(1), "her phone is her again: {again}");
    assert!(!p.d.workspace.join("people.txt").exists(), "nothing written on one person's word");

    assert_eq!(send(http().post(&url).bearer_auth(&grace).json(&allow)).await.status, 200);
    let events = sse.until_type("turn_complete").await;
    let resolved = find(&events, "permission_resolved");
    assert_eq!(resolved["voterClientId"], "person:grace", "{resolved}");
    assert_eq!(std::fs::read_to_string(p.d.workspace.join("people.txt")).ok().as_deref(), Some("hello"));
    let entry = audit_entry(&p.d, &rid).await;
    let ballots: Vec<(String, String)> = entry["ballots"]
        .as_array()
        .expect("ballots")
        .iter()
        .map(|b| {
            (
                b["clientId"].as_str().unwrap_or("").to_owned(),
                b["deviceName"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let named = |c: &str, n: &str| (c.to_owned(), n.to_owned());
    assert_eq!(
        ballots,
        [
            named("person:ada", "Ada Lovelace"),
            named("person:ada", "Ada Lovelace"),
            named("person:grace", "Grace Hopper")
        ]
    );
}

/// A `require` rule with `quorum: 2` on `git push*`: Ada's approval leaves it at "1 of 2", her
/// phone's does not make it two, Grace's decides it.
#[tokio::test]
async fn a_require_rule_counts_people_not_devices() {
    let p = People::start(&[]).await;
    let (laptop, phone, grace) =
        (p.signed_in("ada").await, p.signed_in("ada").await, p.signed_in("grace").await);
    let created = send(http().post(p.d.url("/session")).bearer_auth(&laptop).json(&json!({}))).await.ok();
    let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
    for who in [&phone, &grace] {
        let joined =
            send(http().post(p.d.url("/session")).bearer_auth(who).json(&json!({"sessionId": sid}))).await;
        assert_eq!(joined.status, 200, "{}", joined.text);
    }
    let rule = send(
        http()
            .post(p.d.url(&format!("/session/{sid}/permission-rules")))
            .bearer_auth(&laptop)
            .json(&json!({"effect": "require", "quorum": 2, "commands": ["git push*"]})),
    )
    .await;
    assert_eq!(rule.status, 201, "{}", rule.text);
    let mut sse = Sse::connect(&p.d, &sid, &[("Authorization", format!("Bearer {TOKEN}"))]).await;
    let prompt = json!({"prompt": [{"type": "text", "text": "shell git push --force"}]});
    let queued = http()
        .post(p.d.url(&format!("/session/{sid}/prompt")))
        .bearer_auth(&laptop)
        .header("Prefer", "respond-async")
        .json(&prompt);
    assert_eq!(send(queued).await.status, 202);
    let request = sse.until_type("permission_request").await.last().expect("request").payload().clone();
    let rid = request["requestId"].as_str().expect("requestId").to_owned();
    let url = p.d.url(&format!("/session/{sid}/permission/{rid}"));
    let allow = json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});
    for device in [&laptop, &phone] {
        assert_eq!(send(http().post(&url).bearer_auth(device).json(&allow)).await.status, 200);
        let partial =
            sse.until_type("permission_partial_vote").await.last().expect("partial").payload().clone();
        assert_eq!(partial["votesReceived"].as_u64(), Some(1), "Ada is one voter: {partial}");
    }
    let pending =
        send(http().get(p.d.url(&format!("/session/{sid}/permissions"))).bearer_auth(TOKEN)).await.ok();
    assert_eq!(pending["pending"][0]["required"]["approvals"], 1, "{pending}");
    assert_eq!(send(http().post(&url).bearer_auth(&grace).json(&allow)).await.status, 200);
    let events = sse.until_type("turn_complete").await;
    assert_eq!(find(&events, "permission_resolved")["voterClientId"], "person:grace");
    assert!(chunk_text(&events).contains("would run: git push --force"), "{}", chunk_text(&events));
}

/// A workspace rule `{"effect":"require","group":"admins","commands":["rm -rf*"]}` (its quorum one
/// by default): the request says whose approval it waits for; Ada (signed in, in no group) and the
/// operator's token are each refused `403 group_required` naming the rule and the group, and it
/// stays pending with no approval; Grace, an admin, decides it, and the audit names her and the
/// group beside the refused ballots. On the next such request Ada's rejection stops it.
#[tokio::test]
async fn a_require_rule_naming_a_group_is_decided_by_a_member_only() {
    let p = People::start(&[]).await;
    let (ada, grace) = (p.signed_in("ada").await, p.signed_in("grace").await);
    let created = send(http().post(p.d.url("/session")).bearer_auth(&ada).json(&json!({}))).await.ok();
    let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
    let joined =
        send(http().post(p.d.url("/session")).bearer_auth(&grace).json(&json!({"sessionId": sid}))).await;
    assert_eq!(joined.status, 200, "{}", joined.text);
    let rules =
        format!("/workspace/{}/permission-rules", p.d.workspace.to_string_lossy().replace('/', "%2F"));
    let rule = send(
        http()
            .post(p.d.url(&rules))
            .bearer_auth(TOKEN)
            .json(&json!({"effect": "require", "group": "admins", "commands": ["rm -rf*"]})),
    )
    .await;
    assert_eq!(rule.status, 201, "{}", rule.text);
    assert_eq!(
        (rule.body["rule"]["group"].clone(), rule.body["rule"]["quorum"].clone()),
        (json!("admins"), json!(1))
    );
    let rule_id = rule.body["rule"]["ruleId"].as_str().expect("ruleId").to_owned();
    let listed = send(http().get(p.d.url(&rules)).bearer_auth(TOKEN)).await.ok();
    assert_eq!(listed["rules"][0]["group"], "admins", "{listed}");

    let mut sse = Sse::connect(&p.d, &sid, &[("Authorization", format!("Bearer {TOKEN}"))]).await;
    let raise = |text: &str| {
        http()
            .post(p.d.url(&format!("/session/{sid}/prompt")))
            .bearer_auth(&ada)
            .header("Prefer", "respond-async")
            .json(&json!({"prompt": [{"type": "text", "text": text}]}))
    };
    assert_eq!(send(raise("shell rm -rf build")).await.status, 202);
    let request = sse.until_type("permission_request").await.last().expect("request").payload().clone();
    assert_eq!(
        request["required"],
        json!({"ruleId": rule_id, "quorum": 1, "approvals": 0, "group": "admins"})
    );
    let rid = request["requestId"].as_str().expect("requestId").to_owned();
    let url = p.d.url(&format!("/session/{sid}/permission/{rid}"));
    let allow = json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});

    for (who, credential) in [("Ada", &ada), ("the operator", &TOKEN.to_owned())] {
        let refused = send(http().post(&url).bearer_auth(credential).json(&allow)).await;
        assert_eq!(
            (refused.status, refused.body["code"].as_str(), refused.body["group"].as_str()),
            (403, Some("group_required"), Some("admins")),
            "{who}: {}",
            refused.text
        );
        assert_eq!(refused.body["ruleId"], json!(rule_id), "{who}");
        let message = refused.body["error"].as_str().unwrap_or("");
        assert!(message.contains(&rule_id) && message.contains("member of the group admins"), "{message}");
    }
    let forbidden = sse.until_type("permission_forbidden").await.last().expect("forbidden").payload().clone();
    assert_eq!(
        (forbidden["reason"].as_str(), forbidden["clientId"].as_str()),
        (Some("group_required"), Some("person:ada"))
    );
    let pending =
        send(http().get(p.d.url(&format!("/session/{sid}/permissions"))).bearer_auth(TOKEN)).await.ok();
    assert_eq!(pending["pending"][0]["requestId"], json!(rid), "still pending: {pending}");
    assert_eq!(pending["pending"][0]["required"]["approvals"], 0, "nothing counted: {pending}");

    assert_eq!(send(http().post(&url).bearer_auth(&grace).json(&allow)).await.status, 200);
    let events = sse.until_type("turn_complete").await;
    assert_eq!(find(&events, "permission_resolved")["voterClientId"], "person:grace");
    assert!(chunk_text(&events).contains("would run: rm -rf build"), "{}", chunk_text(&events));
    let entry = audit_entry(&p.d, &rid).await;
    assert_eq!(
        (entry["voterClientId"].as_str(), entry["voterDeviceName"].as_str()),
        (Some("person:grace"), Some("Grace Hopper")),
        "{entry}"
    );
    assert_eq!(entry["required"]["group"], "admins", "{entry}");
    let ballots: Vec<(Option<&str>, bool)> = entry["ballots"]
        .as_array()
        .expect("ballots")
        .iter()
        .map(|b| (b["clientId"].as_str(), b["counted"] == true))
        .collect();
    assert_eq!(ballots, [(Some("person:ada"), false), (None, false), (Some("person:grace"), true)]);

    // Anyone may stop what the rule holds for the admins.
    assert_eq!(send(raise("shell rm -rf dist")).await.status, 202);
    let request = sse.until_type("permission_request").await.last().expect("request").payload().clone();
    let url = p.d.url(&format!("/session/{sid}/permission/{}", request["requestId"].as_str().expect("id")));
    let reject = json!({"outcome": {"outcome": "selected", "optionId": "reject_once"}});
    assert_eq!(send(http().post(&url).bearer_auth(&ada).json(&reject)).await.status, 200);
    let events = sse.until_type("turn_complete").await;
    assert_eq!(
        find(&events, "permission_resolved")["outcome"],
        json!({"outcome": "selected", "optionId": "reject_once"})
    );
}

/// Disabling Ada at the provider: her next renewal is refused, and every device of hers is signed
/// out then, before her sign-in would have ended on its own (401 on its next request), her open
/// stream ended; Grace, renewed, stays.
#[tokio::test]
async fn a_person_disabled_at_the_provider_is_signed_out_at_the_next_renewal() {
    // Renewed every 3 s, a sign-in lasts 6 s past its last renewal: the refusal at the next
    // renewal signs her out well before that end.
    let p = People::start(&["--oidc-renew-ms", "3000"]).await;
    let (ada, grace) = (p.signed_in("ada").await, p.signed_in("grace").await);
    let created = send(http().post(p.d.url("/session")).bearer_auth(&ada).json(&json!({}))).await.ok();
    let sid = created["sessionId"].as_str().expect("sessionId").to_owned();
    let mut stream = Sse::connect(&p.d, &sid, &[("Authorization", format!("Bearer {ada}"))]).await;
    // Just after a renewal of hers: her sign-in's end is as far off as it gets.
    let signed_in_end = identity(&p.d, &ada).await.ok()["identity"]["expiresAt"].as_u64().expect("end");
    let renewed = eventually(
        || http().get(p.d.url("/capabilities")).bearer_auth(&ada),
        |b| b["identity"]["expiresAt"].as_u64().is_some_and(|end| end > signed_in_end),
    )
    .await;
    let end = renewed["identity"]["expiresAt"].as_u64().expect("end");
    p.provider.disable("ada").await;
    tokio::time::timeout(WAIT, stream.rest()).await.expect("her stream ends when she is signed out");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis();
    assert!(now < u128::from(end), "signed out by the refused renewal, not by her sign-in running out");
    assert_eq!(identity(&p.d, &ada).await.status, 401, "signed out");
    // Grace's sign-in outlives several renewals (its end moves with each).
    let first_end = identity(&p.d, &grace).await.ok()["identity"]["expiresAt"].as_u64().expect("end");
    let renewed = eventually(
        || http().get(p.d.url("/capabilities")).bearer_auth(&grace),
        |b| b["identity"]["expiresAt"].as_u64().is_some_and(|end| end > first_end),
    )
    .await;
    assert_eq!(renewed["identity"]["person"]["name"], "Grace Hopper");
}

/// Signing out ends this browser's sign-in: its credential is refused from then on.
#[tokio::test]
async fn signing_out_ends_the_sign_in() {
    let p = People::start(&[]).await;
    let ada = p.signed_in("ada").await;
    let out = send(http().post(p.d.url("/auth/logout")).bearer_auth(&ada)).await;
    assert_eq!(out.status, 204, "{}", out.text);
    assert_eq!(identity(&p.d, &ada).await.status, 401);
    let again = send(http().post(p.d.url("/auth/logout")).bearer_auth(TOKEN)).await;
    assert_eq!(again.status, 204, "the operator has no sign-in to end: nothing done, no error");
}

/// Every forged ID token (another key, `alg: none`, another audience or issuer, expired, another
/// nonce or none) is refused with `invalid_id_token` and nothing is paired; a valid one signs in.
/// A provider that is down is said to be (`provider_unavailable`), and the operator's token still
/// works. A credential one daemon gave is refused by another.
#[tokio::test]
async fn forged_id_tokens_a_provider_down_and_another_daemons_credential_are_refused() {
    let Forging { d, fake, ca, ca_file, _dir } = Forging::start().await;
    for forgery in Forgery::ALL.into_iter().filter(|f| *f != Forgery::Valid) {
        fake.set_forgery(forgery);
        let mut browser = Browser::new(&ca.pem());
        assert_eq!(
            browser.sign_in(&d.base, "ada").await,
            SignInResult::Error("invalid_id_token".into()),
            "{forgery:?}\n{}",
            browser.trace()
        );
    }
    let devices = send(http().get(d.url("/devices")).bearer_auth(TOKEN)).await.ok();
    assert_eq!(devices["devices"].as_array().map(Vec::len), Some(0), "{devices}");

    fake.set_forgery(Forgery::Valid);
    let mut browser = Browser::new(&ca.pem());
    let SignInResult::Pair(code) = browser.sign_in(&d.base, "ada").await else {
        panic!("a valid token signs in\n{}", browser.trace())
    };
    let paired = send(http().post(d.url("/devices/pair")).json(&json!({"code": code}))).await.ok();
    let credential = paired["token"].as_str().expect("token").to_owned();

    // Another daemon of the same provider does not know this daemon's sign-ins.
    let other = start_daemon(fake.issuer(), &ca_file, &[]);
    assert_eq!(identity(&other, &credential).await.status, 401);

    fake.set_down(true);
    let mut browser = Browser::new(&ca.pem());
    assert_eq!(
        browser.sign_in(&other.base, "ada").await,
        SignInResult::Error("provider_unavailable".into()),
        "{}",
        browser.trace()
    );
    let operator: Value = identity(&other, TOKEN).await.ok();
    assert_eq!(operator["identity"]["kind"], "operator", "the operator's token still works");
}

//! The sign-in tests' two providers checked on their own, without the daemon: the real one
//! (`support::oidc`: node's oidc-provider, driven by the browser-less [`Browser`]) and the forging
//! one (`support::fake_oidc`). Where a daemon would stand, a stand-in relying party of a few lines
//! ([`StandIn`]) answers `/auth/login` and `/auth/callback` as the daemon's routes are specified,
//! so that the driver's whole path, to the fragment the callback answers, is exercised here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::support::fake_oidc::{self, FakeAccount, FakeOidc, Forgery};
use crate::support::oidc::{self, Browser, OidcProvider, SignInResult};
use crate::support::{TestCa, WAIT, alive};

const WEB_SECRET: &str = "stand-in-secret";

/// The real provider's configuration: two accounts and a device client (a configuration needs one
/// client; the code-flow client is added once the stand-in has its port, by `put_client`).
fn provider_config() -> Value {
    json!({
        "accounts": [
            { "id": "ada", "email": "ada@example.test", "name": "Ada Lovelace", "groups": ["admins", "engineers"] },
            { "id": "mallory", "email": "mallory@elsewhere.test", "name": "Mallory" }
        ],
        "clients": [
            { "client_id": "cli", "grant_types": ["urn:ietf:params:oauth:grant-type:device_code", "refresh_token"] }
        ]
    })
}

/// `GET <issuer>/.well-known/openid-configuration`.
async fn discovery(client: &reqwest::Client, issuer: &str) -> Value {
    let res =
        client.get(format!("{issuer}/.well-known/openid-configuration")).send().await.expect("discovery");
    assert_eq!(res.status(), 200);
    res.json().await.expect("discovery JSON")
}

/// A token request as the confidential client `web` (HTTP Basic): status and JSON body.
async fn token(client: &reqwest::Client, endpoint: &str, form: &[(&str, &str)]) -> (u16, Value) {
    let res = client
        .post(endpoint)
        .basic_auth("web", Some(WEB_SECRET))
        .form(form)
        .send()
        .await
        .expect("token request");
    let status = res.status().as_u16();
    (status, res.json().await.expect("token JSON"))
}

/// The PKCE verifier and nonce of one `/auth/login` of the stand-in.
#[derive(Debug, Clone)]
struct Flow {
    verifier: String,
    nonce: String,
}

struct StandInState {
    authorization_endpoint: String,
    token_endpoint: String,
    redirect_uri: String,
    /// `SameSite` of the state cookie it sets at `/auth/login`.
    same_site: &'static str,
    /// Trusts the test's CA, as the daemon will.
    client: reqwest::Client,
    /// By state. A `std::sync::Mutex`: nothing awaits under it.
    flows: Mutex<HashMap<String, Flow>>,
}

/// A relying party of a few lines in the daemon's place, on plain HTTP: `/auth/login` answers 302 to
/// the provider (code, PKCE S256, state, nonce, the four scopes) and sets a cookie holding the
/// state; `/auth/callback` checks the cookie against `state`, redeems the code as the client `web`,
/// checks the ID token's nonce, and answers `302 /#pair=<sub>` or `302 /#signin-error=<why>`.
struct StandIn {
    base: String,
    state: Arc<StandInState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    async fn start(discovery: &Value, ca_pem: &str, same_site: &'static str) -> StandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the stand-in");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let endpoint = |k: &str| discovery[k].as_str().expect("an endpoint").to_owned();
        let state = Arc::new(StandInState {
            authorization_endpoint: endpoint("authorization_endpoint"),
            token_endpoint: endpoint("token_endpoint"),
            redirect_uri: format!("{base}/auth/callback"),
            same_site,
            client: oidc::client_trusting(ca_pem),
            flows: Mutex::default(),
        });
        let app = axum::Router::new().fallback(stand_in).with_state(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        StandIn { base, state, task }
    }

    fn redirect_uri(&self) -> &str {
        &self.state.redirect_uri
    }

    /// The flow `/auth/login` began with `state`.
    fn flow(&self, state: &str) -> Flow {
        let flows = self.state.flows.lock().expect("flows");
        flows.get(state).unwrap_or_else(|| panic!("the stand-in never issued state {state}")).clone()
    }
}

async fn stand_in(
    axum::extract::State(rp): axum::extract::State<Arc<StandInState>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let query: HashMap<String, String> = uri
        .query()
        .map(|q| url::form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let to = |location: String| (StatusCode::FOUND, [(header::LOCATION, location)]).into_response();
    match uri.path() {
        "/auth/login" => {
            let (state, verifier, nonce) =
                (fake_oidc::random_b64url(), fake_oidc::random_b64url(), fake_oidc::random_b64url());
            let mut url = url::Url::parse(&rp.authorization_endpoint).expect("authorization endpoint");
            url.query_pairs_mut()
                .append_pair("response_type", "code")
                .append_pair("client_id", "web")
                .append_pair("redirect_uri", &rp.redirect_uri)
                .append_pair("scope", "openid email profile groups")
                .append_pair("state", &state)
                .append_pair("nonce", &nonce)
                .append_pair("code_challenge", &fake_oidc::s256(&verifier))
                .append_pair("code_challenge_method", "S256");
            rp.flows.lock().expect("flows").insert(state.clone(), Flow { verifier, nonce });
            let cookie = format!("standin_state={state}; Path=/auth; HttpOnly; SameSite={}", rp.same_site);
            (StatusCode::FOUND, [(header::LOCATION, url.to_string()), (header::SET_COOKIE, cookie)])
                .into_response()
        }
        "/auth/callback" => {
            if let Some(error) = query.get("error") {
                return to(format!("/#signin-error={error}"));
            }
            let cookie = headers
                .get(header::COOKIE)
                .and_then(|v| v.to_str().ok())
                .and_then(|c| c.split("; ").find_map(|kv| kv.strip_prefix("standin_state=")));
            let state = query.get("state").map(String::as_str);
            if cookie.is_none() || cookie != state {
                return to("/#signin-error=state_mismatch".to_owned());
            }
            let flow = rp.flows.lock().expect("flows").get(state.unwrap_or_default()).cloned();
            let Some(flow) = flow else { return to("/#signin-error=unknown_state".to_owned()) };
            let code = query.get("code").map(String::as_str).unwrap_or_default();
            let (status, body) = token(
                &rp.client,
                &rp.token_endpoint,
                &[
                    ("grant_type", "authorization_code"),
                    ("code", code),
                    ("redirect_uri", &rp.redirect_uri),
                    ("code_verifier", &flow.verifier),
                ],
            )
            .await;
            if status != 200 {
                return to(format!("/#signin-error=token_{}", body["error"].as_str().unwrap_or("failed")));
            }
            let claims = oidc::jwt_claims(body["id_token"].as_str().expect("id_token"));
            if claims["nonce"] != flow.nonce.as_str() {
                return to("/#signin-error=nonce_mismatch".to_owned());
            }
            to(format!("/#pair={}", claims["sub"].as_str().expect("sub")))
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The real provider and a stand-in on it, the client `web` registered with the stand-in's
/// redirect URI by `put_client`.
async fn real_with_stand_in(
    ca: &TestCa,
    dir: &std::path::Path,
    same_site: &'static str,
) -> (OidcProvider, StandIn) {
    let provider = OidcProvider::start(ca, dir, provider_config());
    let disc = discovery(&oidc::client_trusting(&ca.pem()), provider.issuer()).await;
    let rp = StandIn::start(&disc, &ca.pem(), same_site).await;
    provider
        .put_client(json!({
            "client_id": "web",
            "client_secret": WEB_SECRET,
            "grant_types": ["authorization_code", "refresh_token"],
            "redirect_uris": [rp.redirect_uri()],
        }))
        .await;
    (provider, rp)
}

#[tokio::test]
async fn the_driver_brings_the_real_providers_code_back_and_it_redeems_for_the_accounts_claims() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (provider, rp) = real_with_stand_in(&ca, dir.path(), "Lax").await;
    let client = oidc::client_trusting(&ca.pem());
    let disc = discovery(&client, provider.issuer()).await;
    let token_endpoint = disc["token_endpoint"].as_str().expect("token endpoint");

    // put_client's client is there beside the configuration's.
    let listed: Value = crate::support::http()
        .get(format!("{}/", provider.control()))
        .send()
        .await
        .expect("GET / of the control port")
        .json()
        .await
        .expect("JSON");
    assert_eq!(listed["clients"], json!(["cli", "web"]), "{listed}");

    let mut browser = provider.browser();
    let callback = browser.authorize_only(&rp.base, "ada").await;
    assert!(callback.showed_login, "a fresh browser has no session at the provider:\n{}", browser.trace());
    assert!(callback.url.starts_with(&format!("{}?", rp.redirect_uri())), "{}", callback.url);
    assert_eq!(callback.iss.as_deref(), Some(provider.issuer()), "RFC 9207's iss");
    assert_eq!(callback.error, None);
    let flow = rp.flow(callback.state.as_deref().expect("state"));

    let code = callback.code.as_deref().expect("code");
    let redeem = |verifier| {
        [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", rp.redirect_uri()),
            ("code_verifier", verifier),
        ]
    };
    // A wrong verifier is refused without spending the code (the fake does the same).
    let wrong = fake_oidc::random_b64url();
    let (status, refused) = token(&client, token_endpoint, &redeem(&wrong)).await;
    assert_eq!((status, refused["error"].as_str()), (400, Some("invalid_grant")), "{refused}");
    let (status, tokens) = token(&client, token_endpoint, &redeem(&flow.verifier)).await;
    assert_eq!(status, 200, "{tokens}\nprovider stderr:\n{}", provider.stderr());
    let claims = oidc::jwt_claims(tokens["id_token"].as_str().expect("id_token"));
    assert_eq!(claims["iss"], provider.issuer());
    assert_eq!(claims["aud"], "web");
    assert_eq!(claims["sub"], "ada");
    assert_eq!(claims["nonce"], flow.nonce.as_str());
    assert_eq!(claims["email"], "ada@example.test");
    assert_eq!(claims["email_verified"], true);
    assert_eq!(claims["name"], "Ada Lovelace");
    assert_eq!(claims["groups"], json!(["admins", "engineers"]));

    // The refresh token is refused while ada is disabled, and works again once she is enabled.
    let refresh = tokens["refresh_token"].as_str().expect("refresh_token");
    let renew = [("grant_type", "refresh_token"), ("refresh_token", refresh)];
    provider.disable("ada").await;
    let (status, refused) = token(&client, token_endpoint, &renew).await;
    assert_eq!((status, refused["error"].as_str()), (400, Some("invalid_grant")), "{refused}");
    provider.enable("ada").await;
    let (status, renewed) = token(&client, token_endpoint, &renew).await;
    assert_eq!(status, 200, "{renewed}");
    // What the daemon's renewal sees: a new refresh token (rotation), and an ID token that repeats
    // the sign-in's nonce.
    assert_ne!(renewed["refresh_token"], refresh);
    let claims = oidc::jwt_claims(renewed["id_token"].as_str().expect("id_token"));
    assert_eq!((claims["sub"].as_str(), claims["nonce"].as_str()), (Some("ada"), Some(flow.nonce.as_str())));

    // A code redeemed again is refused, and oidc-provider revokes the grant it came from: the
    // refresh token of the first redemption dies with it.
    let (status, replayed) = token(&client, token_endpoint, &redeem(&flow.verifier)).await;
    assert_eq!((status, replayed["error"].as_str()), (400, Some("invalid_grant")), "{replayed}");
    let latest = renewed["refresh_token"].as_str().expect("refresh_token");
    let (status, revoked) =
        token(&client, token_endpoint, &[("grant_type", "refresh_token"), ("refresh_token", latest)]).await;
    assert_eq!((status, revoked["error"].as_str()), (400, Some("invalid_grant")), "{revoked}");
}

#[tokio::test]
async fn sign_in_through_the_real_provider_ends_at_what_the_stand_in_answers() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (provider, rp) = real_with_stand_in(&ca, dir.path(), "Lax").await;

    let mut browser = provider.browser();
    let signed = browser.sign_in(&rp.base, "ada").await;
    assert_eq!(signed, SignInResult::Pair("ada".to_owned()), "{}", browser.trace());

    // The same browser keeps its session at the provider: no form the second time.
    let again = browser.authorize_only(&rp.base, "ada").await;
    assert!(!again.showed_login, "{}", browser.trace());
    assert_eq!(browser.callback(&again.url).await, SignInResult::Pair("ada".to_owned()));
    // Replayed, the code is spent at the provider; the stand-in says so.
    assert_eq!(browser.callback(&again.url).await, SignInResult::Error("token_invalid_grant".to_owned()));

    // The stand-in's state cookie is this browser's: a forged state, or another browser, is refused.
    let third = browser.authorize_only(&rp.base, "ada").await;
    let forged = third.with_param("state", "forged");
    let query = |url: &str| -> Vec<(String, String)> {
        url::Url::parse(url).expect("URL").query_pairs().into_owned().collect()
    };
    let (code, state, iss) = (
        third.code.clone().expect("code"),
        third.state.clone().expect("state"),
        third.iss.clone().expect("iss"),
    );
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(query(&third.url), [pair("code", &code), pair("state", &state), pair("iss", &iss)]);
    assert_eq!(query(&forged), [pair("code", &code), pair("iss", &iss), pair("state", "forged")]);
    assert_eq!(query(&third.without_param("iss")), [pair("code", &code), pair("state", &state)]);
    assert_eq!(browser.callback(&forged).await, SignInResult::Error("state_mismatch".to_owned()));
    assert_eq!(
        provider.browser().callback(&third.url).await,
        SignInResult::Error("state_mismatch".to_owned())
    );

    // An account the provider refuses never comes back to the daemon.
    provider.disable("mallory").await;
    let refused = provider.sign_in(&rp.base, "mallory").await;
    assert_eq!(refused, SignInResult::AtProvider(403, "The account mallory is disabled.".to_owned()));

    // Dropped, the provider is gone.
    let pid = provider.pid();
    drop(provider);
    assert!(!alive(pid), "the provider (pid {pid}) outlived its OidcProvider");
}

/// A browser sends a `SameSite=Strict` cookie on no navigation that came through another site, so a
/// state cookie of that kind never reaches the callback; the driver does the same.
#[tokio::test]
async fn a_strict_state_cookie_does_not_come_back_from_the_provider() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (provider, rp) = real_with_stand_in(&ca, dir.path(), "Strict").await;
    let mut browser = provider.browser();
    let result = browser.sign_in(&rp.base, "ada").await;
    assert_eq!(result, SignInResult::Error("state_mismatch".to_owned()), "{}", browser.trace());
}

/// An authorization request to the fake for `web` (PKCE S256 with `verifier`), not followed: the
/// query of its redirect.
async fn authorize(
    client: &reqwest::Client,
    fake: &FakeOidc,
    state: &str,
    nonce: &str,
    verifier: &str,
) -> HashMap<String, String> {
    let res = client
        .get(fake.url("/auth"))
        .query(&[
            ("response_type", "code"),
            ("client_id", "web"),
            ("redirect_uri", CALLBACK),
            ("scope", "openid email profile groups"),
            ("state", state),
            ("nonce", nonce),
            ("code_challenge", &fake_oidc::s256(verifier)),
            ("code_challenge_method", "S256"),
        ])
        .send()
        .await
        .expect("authorization request");
    assert_eq!(res.status(), 302);
    let location = res.headers()[header::LOCATION].to_str().expect("Location");
    assert!(location.starts_with(&format!("{CALLBACK}?")), "{location}");
    let url = url::Url::parse(location).expect("Location URL");
    url.query_pairs().into_owned().collect()
}

/// Never requested: the fake's redirect is read, not followed.
const CALLBACK: &str = "http://127.0.0.1:9/auth/callback";

/// The ID token of one sign-in at the fake with a fresh nonce, and that nonce.
async fn id_token(client: &reqwest::Client, fake: &FakeOidc) -> (String, String) {
    let (verifier, nonce) = (fake_oidc::random_b64url(), fake_oidc::random_b64url());
    let q = authorize(client, fake, "s", &nonce, &verifier).await;
    let (status, tokens) = token(
        client,
        &fake.url("/token"),
        &[
            ("grant_type", "authorization_code"),
            ("code", &q["code"]),
            ("redirect_uri", CALLBACK),
            ("code_verifier", &verifier),
        ],
    )
    .await;
    assert_eq!(status, 200, "{tokens}");
    (tokens["id_token"].as_str().expect("id_token").to_owned(), nonce)
}

fn ada() -> FakeAccount {
    FakeAccount::new("ada", "ada@example.test", "Ada Lovelace", &["admins"])
}

/// The one key of the fake's JWKS.
async fn jwk(client: &reqwest::Client, fake: &FakeOidc) -> Value {
    let jwks: Value = client.get(fake.url("/jwks")).send().await.expect("jwks").json().await.expect("JSON");
    let keys = jwks["keys"].as_array().expect("keys");
    assert_eq!(keys.len(), 1, "{jwks}");
    keys[0].clone()
}

#[tokio::test]
async fn the_fake_publishes_its_issuer_and_a_key_its_valid_id_token_verifies_against() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let fake = FakeOidc::start(&ca, dir.path(), "web", ada()).await;
    let client = oidc::client_trusting(&ca.pem());
    let issuer = fake.issuer();
    assert!(issuer.starts_with("https://127.0.0.1:"), "{issuer}");

    let disc = discovery(&client, issuer).await;
    assert_eq!(disc["issuer"], issuer);
    for (k, path) in [
        ("authorization_endpoint", "/auth"),
        ("token_endpoint", "/token"),
        ("jwks_uri", "/jwks"),
        ("userinfo_endpoint", "/userinfo"),
        ("device_authorization_endpoint", "/device/auth"),
    ] {
        assert_eq!(disc[k], fake.url(path), "{k}");
    }
    assert_eq!(disc["response_types_supported"], json!(["code"]));
    assert_eq!(disc["subject_types_supported"], json!(["public"]));
    assert_eq!(disc["id_token_signing_alg_values_supported"], json!(["RS256"]));
    assert_eq!(disc["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(
        disc["grant_types_supported"],
        json!(["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"])
    );

    let key = jwk(&client, &fake).await;
    assert_eq!(
        (&key["kty"], &key["kid"], &key["alg"], &key["use"], &key["e"]),
        (&json!("RSA"), &json!("k1"), &json!("RS256"), &json!("sig"), &json!("AQAB"))
    );
    assert!(key.get("d").is_none(), "the JWKS publishes a private key: {key}");

    // /auth answers at once with the code, the state and the issuer (RFC 9207), and remembers what
    // it was asked.
    let (verifier, nonce) = (fake_oidc::random_b64url(), fake_oidc::random_b64url());
    let q = authorize(&client, &fake, "the-state", &nonce, &verifier).await;
    assert_eq!((q["state"].as_str(), q["iss"].as_str()), ("the-state", issuer));
    let asked = fake.authorizations();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["nonce"], nonce);
    assert_eq!(asked[0]["code_challenge"], fake_oidc::s256(&verifier));

    let (status, tokens) = token(
        &client,
        &fake.url("/token"),
        &[
            ("grant_type", "authorization_code"),
            ("code", &q["code"]),
            ("redirect_uri", CALLBACK),
            ("code_verifier", &verifier),
        ],
    )
    .await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!((&tokens["token_type"], &tokens["expires_in"]), (&json!("Bearer"), &json!(60)));
    let id_token = tokens["id_token"].as_str().expect("id_token");
    assert!(fake_oidc::verifies(&key, id_token), "a Valid ID token does not verify against the JWKS");
    assert_eq!(oidc::jwt_header(id_token), json!({"alg": "RS256", "typ": "JWT", "kid": "k1"}));
    let claims = oidc::jwt_claims(id_token);
    let now = jiff::Timestamp::now().as_second();
    let exp = claims["exp"].as_i64().expect("exp");
    assert!(exp > now, "exp {exp} is not after now {now}");
    assert_eq!(exp - claims["iat"].as_i64().expect("iat"), 60);
    assert_eq!(
        claims,
        json!({
            "iss": issuer, "aud": "web", "sub": "ada", "nonce": nonce, "iat": claims["iat"], "exp": exp,
            "email": "ada@example.test", "email_verified": true, "name": "Ada Lovelace", "groups": ["admins"],
        })
    );

    let me = client
        .get(fake.url("/userinfo"))
        .bearer_auth(tokens["access_token"].as_str().expect("access_token"))
        .send()
        .await
        .expect("userinfo");
    assert_eq!(me.status(), 200);
    assert_eq!(me.json::<Value>().await.expect("JSON")["sub"], "ada");
    assert_eq!((fake.hits("/auth"), fake.hits("/token"), fake.hits("/userinfo")), (1, 1, 1));
}

/// What a relying party's checks of an ID token find wrong with it, by name.
fn faults(id_token: &str, key: &Value, issuer: &str, nonce: &str) -> Vec<&'static str> {
    let header = oidc::jwt_header(id_token);
    let claims = oidc::jwt_claims(id_token);
    let mut found = Vec::new();
    if header["alg"] != "RS256" || header["kid"] != "k1" {
        found.push("header");
    }
    if !fake_oidc::verifies(key, id_token) {
        found.push("signature");
    }
    if claims["iss"] != issuer {
        found.push("iss");
    }
    if claims["aud"] != "web" {
        found.push("aud");
    }
    if claims["exp"].as_i64().expect("exp") <= jiff::Timestamp::now().as_second() {
        found.push("exp");
    }
    if claims["nonce"] != nonce {
        found.push("nonce");
    }
    found
}

#[tokio::test]
async fn each_forgery_breaks_exactly_what_it_names() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let fake = FakeOidc::start(&ca, dir.path(), "web", ada()).await;
    let client = oidc::client_trusting(&ca.pem());
    let key = jwk(&client, &fake).await;

    for forgery in Forgery::ALL {
        fake.set_forgery(forgery);
        let (id_token, nonce) = id_token(&client, &fake).await;
        let wanted: &[&str] = match forgery {
            Forgery::Valid => &[],
            Forgery::WrongKey => &["signature"],
            Forgery::AlgNone => &["header", "signature"],
            Forgery::WrongAudience => &["aud"],
            Forgery::WrongIssuer => &["iss"],
            Forgery::Expired => &["exp"],
            Forgery::NonceMismatch | Forgery::NoNonce => &["nonce"],
        };
        assert_eq!(faults(&id_token, &key, fake.issuer(), &nonce), wanted, "{forgery:?}: {id_token}");

        let (header, claims) = (oidc::jwt_header(&id_token), oidc::jwt_claims(&id_token));
        match forgery {
            Forgery::WrongKey => assert_eq!(header["kid"], "k1", "a wrong key still names k1"),
            Forgery::AlgNone => {
                assert_eq!(header, json!({"alg": "none", "typ": "JWT"}));
                assert!(id_token.ends_with('.'), "an empty signature: {id_token}");
            }
            Forgery::Expired => {
                let (iat, exp) = (claims["iat"].as_i64().expect("iat"), claims["exp"].as_i64().expect("exp"));
                let now = jiff::Timestamp::now().as_second();
                assert!(iat < exp && exp + 300 < now, "iat {iat}, exp {exp}, now {now}");
            }
            Forgery::NoNonce => assert!(claims.get("nonce").is_none(), "{claims}"),
            Forgery::NonceMismatch => assert!(claims["nonce"].is_string(), "{claims}"),
            _ => {}
        }
    }
}

#[tokio::test]
async fn the_fakes_token_endpoint_checks_pkce_spends_codes_and_rotates_refresh_tokens() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let fake = FakeOidc::start(&ca, dir.path(), "web", ada()).await;
    let client = oidc::client_trusting(&ca.pem());
    let key = jwk(&client, &fake).await;
    let endpoint = fake.url("/token");

    let (verifier, nonce) = (fake_oidc::random_b64url(), fake_oidc::random_b64url());
    let q = authorize(&client, &fake, "s", &nonce, &verifier).await;
    let wrong = [
        ("grant_type", "authorization_code"),
        ("code", q["code"].as_str()),
        ("redirect_uri", CALLBACK),
        ("code_verifier", "a-verifier-that-is-not-the-one-whose-challenge-was-sent"),
    ];
    let (status, body) = token(&client, &endpoint, &wrong).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")), "{body}");

    // The refused attempt did not spend the code; its redemption does.
    let right = [
        ("grant_type", "authorization_code"),
        ("code", q["code"].as_str()),
        ("redirect_uri", CALLBACK),
        ("code_verifier", &verifier),
    ];
    let (status, first) = token(&client, &endpoint, &right).await;
    assert_eq!(status, 200, "{first}");
    let (status, body) = token(&client, &endpoint, &right).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")), "a spent code: {body}");

    // Each refresh spends its token; the account the test sets next is in the next ID token, with
    // the sign-in's nonce.
    let old = first["refresh_token"].as_str().expect("refresh_token");
    fake.set_account(FakeAccount::new("mallory", "mallory@elsewhere.test", "Mallory", &[]));
    let (status, renewed) =
        token(&client, &endpoint, &[("grant_type", "refresh_token"), ("refresh_token", old)]).await;
    assert_eq!(status, 200, "{renewed}");
    assert_ne!(renewed["refresh_token"], old);
    let id_token = renewed["id_token"].as_str().expect("id_token");
    assert!(fake_oidc::verifies(&key, id_token));
    let claims = oidc::jwt_claims(id_token);
    assert_eq!(
        (&claims["sub"], &claims["nonce"], &claims["groups"]),
        (&json!("mallory"), &json!(nonce), &json!([]))
    );
    let (status, body) =
        token(&client, &endpoint, &[("grant_type", "refresh_token"), ("refresh_token", old)]).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant")),
        "a spent refresh token: {body}"
    );

    // Another client is not this provider's.
    let res = client
        .post(&endpoint)
        .basic_auth("stranger", Some("x"))
        .form(&right)
        .send()
        .await
        .expect("token request");
    assert_eq!(res.status(), 401);
    assert_eq!(fake.hits("/token"), 6);
}

/// One HTTP/1.1 connection to `port` over TLS, trusting `ca`, kept open.
async fn open_connection(ca: &TestCa, port: u16) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der()).expect("CA root");
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("handshake");
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.expect("http/1.1");
    tokio::spawn(conn);
    sender
}

/// `GET /jwks` on an open connection: its status.
async fn jwks_on(sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>, port: u16) -> u16 {
    let req = hyper::Request::get("/jwks")
        .header("host", format!("127.0.0.1:{port}"))
        .body(Empty::new())
        .expect("request");
    let res = tokio::time::timeout(WAIT, sender.send_request(req))
        .await
        .expect("an answer within WAIT")
        .expect("an answer on the open connection");
    let status = res.status().as_u16();
    tokio::time::timeout(WAIT, res.into_body().collect()).await.expect("the body within WAIT").expect("body");
    status
}

#[tokio::test]
async fn a_fake_that_is_down_closes_new_connections_and_answers_503_on_open_ones() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let fake = FakeOidc::start(&ca, dir.path(), "web", ada()).await;
    let port: u16 = fake.issuer().rsplit_once(':').and_then(|(_, p)| p.parse().ok()).expect("port");
    let mut open = open_connection(&ca, port).await;
    assert_eq!(jwks_on(&mut open, port).await, 200);

    fake.set_down(true);
    assert_eq!(jwks_on(&mut open, port).await, 503, "a request on a connection opened before");
    let err = oidc::client_trusting(&ca.pem())
        .get(fake.url("/.well-known/openid-configuration"))
        .send()
        .await
        .expect_err("a new connection while down");
    assert!(err.is_connect(), "{err:?}");
    assert_eq!((fake.hits("/jwks"), fake.hits("/.well-known/openid-configuration")), (2, 0));

    fake.set_down(false);
    let disc = discovery(&oidc::client_trusting(&ca.pem()), fake.issuer()).await;
    assert_eq!(disc["issuer"], fake.issuer());
}

/// The driver through the fake: no login page, the stand-in's checks see what the fake forged.
#[tokio::test]
async fn the_driver_passes_through_the_fake_without_a_login_page() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let fake = FakeOidc::start(&ca, dir.path(), "web", ada()).await;
    let disc = discovery(&oidc::client_trusting(&ca.pem()), fake.issuer()).await;
    let rp = StandIn::start(&disc, &ca.pem(), "Lax").await;

    let mut browser = Browser::new(&ca.pem());
    let callback = browser.authorize_only(&rp.base, "ignored").await;
    assert!(!callback.showed_login, "{}", browser.trace());
    assert_eq!(callback.iss.as_deref(), Some(fake.issuer()));
    assert_eq!(browser.callback(&callback.url).await, SignInResult::Pair("ada".to_owned()));

    fake.set_forgery(Forgery::NonceMismatch);
    let result = browser.sign_in(&rp.base, "ignored").await;
    assert_eq!(result, SignInResult::Error("nonce_mismatch".to_owned()), "{}", browser.trace());
    assert_eq!(fake.hits("/token"), 2);
}

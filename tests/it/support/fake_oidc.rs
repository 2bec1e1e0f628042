//! A forging OpenID Connect provider, in process, for the sign-in tests the real one
//! ([`super::oidc::OidcProvider`]) cannot serve: ID tokens signed by the wrong key, with
//! `alg: none`, for another audience or issuer, expired, with another nonce or none; and a provider
//! that is down. HTTPS on 127.0.0.1:0 with a leaf of the test's CA; its issuer is its own base URL.
//!
//! It serves discovery, `/jwks`, `/auth` (no login page: a redirect back at once), `/token`
//! (authorization code with PKCE S256, refresh, the device grant), `/userinfo` and
//! `/device/auth` (approved at once). What the ID token says is the current [`Forgery`] and
//! [`FakeAccount`], which the test changes at any time. It checks the client id, not a secret.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{TestCa, WAIT};

/// The `kid` of the one key the JWKS publishes; a [`Forgery::WrongKey`] token names it too.
pub(crate) const KID: &str = "k1";

/// `expires_in` of the access token, and the life of a valid ID token, in seconds.
const TOKEN_LIFE: i64 = 60;

/// How far in the past a [`Forgery::Expired`] token's `exp` is, in seconds: well beyond a relying
/// party's leeway for clock skew (jsonwebtoken's default is 60 s).
const EXPIRED_BY: i64 = 600;

/// The device grant's type (RFC 8628).
const DEVICE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// What is wrong with the ID tokens the token endpoint answers from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forgery {
    /// Nothing: RS256 by the JWKS key, this issuer, the client as `aud`, the request's nonce.
    Valid,
    /// Signed by another RSA key, its header still naming [`KID`].
    WrongKey,
    /// Header `{"alg":"none"}` and an empty signature.
    AlgNone,
    /// `aud` another client's.
    WrongAudience,
    /// `iss` another issuer's.
    WrongIssuer,
    /// `exp` [`EXPIRED_BY`] seconds ago, `iat` a life before that.
    Expired,
    /// A `nonce` the relying party never sent.
    NonceMismatch,
    /// No `nonce` claim.
    NoNonce,
}

impl Forgery {
    /// Every mode, [`Forgery::Valid`] first.
    pub(crate) const ALL: [Forgery; 8] = [
        Forgery::Valid,
        Forgery::WrongKey,
        Forgery::AlgNone,
        Forgery::WrongAudience,
        Forgery::WrongIssuer,
        Forgery::Expired,
        Forgery::NonceMismatch,
        Forgery::NoNonce,
    ];
}

/// The account the fake signs in (there is no login page: whoever the test set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FakeAccount {
    pub(crate) sub: String,
    pub(crate) email: String,
    pub(crate) email_verified: bool,
    pub(crate) name: String,
    pub(crate) groups: Vec<String>,
}

impl FakeAccount {
    /// An account whose email is verified.
    pub(crate) fn new(sub: &str, email: &str, name: &str, groups: &[&str]) -> FakeAccount {
        FakeAccount {
            sub: sub.to_owned(),
            email: email.to_owned(),
            email_verified: true,
            name: name.to_owned(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    fn claims(&self) -> Value {
        json!({
            "sub": self.sub,
            "email": self.email,
            "email_verified": self.email_verified,
            "name": self.name,
            "groups": self.groups,
        })
    }
}

/// The query of one authorization request, as the fake received it.
pub(crate) type AuthRequest = HashMap<String, String>;

/// The two RSA keys (from `openssl genpkey`), made once per test process and never written
/// anywhere but a temporary directory deleted at once: `signing` is the JWKS's, `other` signs
/// [`Forgery::WrongKey`].
struct Keys {
    signing: RsaKeyPair,
    other: RsaKeyPair,
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        Keys {
            signing: rsa_key(&dir.path().join("signing.pem")),
            other: rsa_key(&dir.path().join("other.pem")),
        }
    })
}

/// A 2048-bit RSA key made by openssl, bounded by coreutils' `timeout`: ring (and rcgen on ring)
/// cannot make RSA keys, and no crate in the lock file can.
fn rsa_key(path: &Path) -> RsaKeyPair {
    use rustls::pki_types::pem::PemObject;
    let out = Command::new("timeout")
        .arg(WAIT.as_secs().to_string())
        .args(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
        .arg("-out")
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .expect("run timeout(1) for openssl genpkey");
    match out.status.code() {
        Some(0) => {}
        Some(127) => {
            panic!("the forging OIDC provider needs openssl for its RSA keys: 'openssl' is not on PATH")
        }
        Some(124) => panic!("openssl genpkey made no RSA key within {WAIT:?}"),
        _ => panic!("openssl genpkey failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)),
    }
    // PEM: genpkey writes PKCS#8 there ("PRIVATE KEY"), but PKCS#1 with `-outform DER`.
    let pem = rustls::pki_types::PrivatePkcs8KeyDer::from_pem_file(path).expect("a PKCS#8 PEM key");
    RsaKeyPair::from_pkcs8(pem.secret_pkcs8_der())
        .unwrap_or_else(|e| panic!("ring refused openssl's key: {e}"))
}

/// 32 random bytes, base64url: codes, tokens, a PKCE verifier, a state or a nonce.
pub(crate) fn random_b64url() -> String {
    let mut bytes = [0u8; 32];
    SystemRandom::new().fill(&mut bytes).expect("random");
    URL_SAFE_NO_PAD.encode(bytes)
}

/// PKCE's S256 challenge of `verifier` (RFC 7636 4.2).
pub(crate) fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Whether the RS256 signature of `jwt` verifies against the RSA key `jwk` (a JWKS entry), by ring.
pub(crate) fn verifies(jwk: &Value, jwt: &str) -> bool {
    let part = |k: &str| URL_SAFE_NO_PAD.decode(jwk[k].as_str().expect("n and e")).expect("base64url");
    let Some((input, sig)) = jwt.rsplit_once('.') else { return false };
    let Ok(sig) = URL_SAFE_NO_PAD.decode(sig) else { return false };
    ring::signature::RsaPublicKeyComponents { n: part("n"), e: part("e") }
        .verify(&ring::signature::RSA_PKCS1_2048_8192_SHA256, input.as_bytes(), &sig)
        .is_ok()
}

/// A code the fake issued and has not seen redeemed.
struct Grant {
    redirect_uri: String,
    challenge: String,
    nonce: Option<String>,
}

/// What the test sets and the handlers share. A `std::sync::Mutex`: every critical section is short
/// and awaits nothing.
struct Inner {
    forgery: Forgery,
    account: FakeAccount,
    /// Requests per path, counted on arrival (also those answered 503 while down).
    hits: HashMap<String, usize>,
    authorizations: Vec<AuthRequest>,
    codes: HashMap<String, Grant>,
    /// Live refresh tokens and the nonce of the sign-in they come from (repeated in the ID token of
    /// a refresh, as oidc-provider does).
    refresh: HashMap<String, Option<String>>,
    access: HashSet<String>,
    devices: HashSet<String>,
}

struct Fake {
    issuer: String,
    client_id: String,
    /// Read by the accept loop without the lock.
    down: AtomicBool,
    inner: Mutex<Inner>,
}

/// The forging provider. Dropping it stops the server (its connections with it).
pub(crate) struct FakeOidc {
    fake: Arc<Fake>,
    /// The accept loop; its connections are tasks of a `JoinSet` it owns, aborted with it.
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeOidc {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeOidc {
    /// Starts the fake for the client `client_id`, signing `account` in, [`Forgery::Valid`]; its
    /// certificate is a leaf of `ca` written to `dir`.
    pub(crate) async fn start(ca: &TestCa, dir: &Path, client_id: &str, account: FakeAccount) -> FakeOidc {
        use hyper_util::rt::TokioIo;
        use hyper_util::service::TowerToHyperService;
        use rustls::pki_types::pem::PemObject;

        let _ = keys(); // made now, so that a missing openssl fails here rather than in a handler
        let (crt, key) = ca.leaf(dir, "fake-oidc");
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(&crt)
            .expect("cert")
            .collect::<Result<Vec<_>, _>>()
            .expect("certs");
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key).expect("key");
        let config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake provider");
        let port = listener.local_addr().expect("addr").port();
        let fake = Arc::new(Fake {
            issuer: format!("https://127.0.0.1:{port}"),
            client_id: client_id.to_owned(),
            down: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                forgery: Forgery::Valid,
                account,
                hits: HashMap::new(),
                authorizations: Vec::new(),
                codes: HashMap::new(),
                refresh: HashMap::new(),
                access: HashSet::new(),
                devices: HashSet::new(),
            }),
        });
        let app = axum::Router::new().fallback(handle).with_state(fake.clone());
        let serving = fake.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                while connections.try_join_next().is_some() {}
                if serving.down.load(Ordering::SeqCst) {
                    // Down: the connection is closed before the TLS handshake.
                    drop(tcp);
                    continue;
                }
                let (acceptor, app) = (acceptor.clone(), app.clone());
                connections.spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                        .await;
                });
            }
        });
        FakeOidc { fake, task }
    }

    /// `https://127.0.0.1:PORT`: the issuer and the base of every endpoint.
    pub(crate) fn issuer(&self) -> &str {
        &self.fake.issuer
    }

    /// `issuer` + `path`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.fake.issuer)
    }

    /// What the ID tokens answered from now on get wrong.
    pub(crate) fn set_forgery(&self, forgery: Forgery) {
        self.fake.lock().forgery = forgery;
    }

    /// Whom the tokens answered from now on name (a refresh included).
    pub(crate) fn set_account(&self, account: FakeAccount) {
        self.fake.lock().account = account;
    }

    /// Down: a new connection is closed at once, before TLS; a request on a connection opened before
    /// (a client's pool) is answered 503 with `Connection: close`. Up again with `false`.
    pub(crate) fn set_down(&self, down: bool) {
        self.fake.down.store(down, Ordering::SeqCst);
    }

    /// Requests that arrived at `path` (`/token`, `/auth`, `/jwks`, ...), 503s included.
    pub(crate) fn hits(&self, path: &str) -> usize {
        self.fake.lock().hits.get(path).copied().unwrap_or(0)
    }

    /// The queries of the authorization requests so far, in order.
    pub(crate) fn authorizations(&self) -> Vec<AuthRequest> {
        self.fake.lock().authorizations.clone()
    }
}

impl Fake {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("fake provider lock")
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.issuer)
    }

    fn discovery(&self) -> Value {
        json!({
            "issuer": self.issuer,
            "authorization_endpoint": self.url("/auth"),
            "token_endpoint": self.url("/token"),
            "userinfo_endpoint": self.url("/userinfo"),
            "jwks_uri": self.url("/jwks"),
            "device_authorization_endpoint": self.url("/device/auth"),
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
            "grant_types_supported": ["authorization_code", "refresh_token", DEVICE_GRANT],
            "scopes_supported": ["openid", "email", "profile", "groups"],
            "claims_supported": ["sub", "iss", "aud", "exp", "iat", "nonce", "email", "email_verified", "name", "groups"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
            "authorization_response_iss_parameter_supported": true,
        })
    }

    fn jwks() -> Value {
        let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(keys().signing.public());
        json!({"keys": [{
            "kty": "RSA",
            "kid": KID,
            "alg": "RS256",
            "use": "sig",
            "n": URL_SAFE_NO_PAD.encode(&public.n),
            "e": URL_SAFE_NO_PAD.encode(&public.e),
        }]})
    }

    /// No login page: the code goes back at once. PKCE S256 is required, as at the real provider.
    fn authorize(&self, query: AuthRequest) -> Response {
        if query.get("client_id") != Some(&self.client_id) {
            return (StatusCode::BAD_REQUEST, "unknown client_id").into_response();
        }
        let Some(redirect_uri) = query.get("redirect_uri").cloned() else {
            return (StatusCode::BAD_REQUEST, "no redirect_uri").into_response();
        };
        let Ok(mut to) = url::Url::parse(&redirect_uri) else {
            return (StatusCode::BAD_REQUEST, "redirect_uri is not a URL").into_response();
        };
        let mut lock = self.lock();
        lock.authorizations.push(query.clone());
        let refused = if query.get("response_type").map(String::as_str) != Some("code") {
            Some("unsupported_response_type")
        } else if query.get("code_challenge_method").map(String::as_str) != Some("S256")
            || !query.contains_key("code_challenge")
        {
            Some("invalid_request")
        } else {
            None
        };
        {
            let mut q = to.query_pairs_mut();
            match refused {
                Some(error) => {
                    q.append_pair("error", error);
                }
                None => {
                    let code = random_b64url();
                    lock.codes.insert(
                        code.clone(),
                        Grant {
                            redirect_uri: redirect_uri.clone(),
                            challenge: query["code_challenge"].clone(),
                            nonce: query.get("nonce").cloned(),
                        },
                    );
                    q.append_pair("code", &code);
                }
            }
            if let Some(state) = query.get("state") {
                q.append_pair("state", state);
            }
            q.append_pair("iss", &self.issuer);
        }
        (StatusCode::FOUND, [(header::LOCATION, to.to_string())]).into_response()
    }

    fn token(&self, headers: &HeaderMap, body: &[u8]) -> Response {
        let form: HashMap<String, String> = url::form_urlencoded::parse(body).into_owned().collect();
        if client_of(headers, &form).as_ref() != Some(&self.client_id) {
            return oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "not this provider's client");
        }
        let field = |k: &str| form.get(k).map(String::as_str).unwrap_or("");
        let nonce = match field("grant_type") {
            "authorization_code" => {
                // A code is spent by its redemption, not by a refused attempt: oidc-provider 8 checks
                // PKCE and the redirect URI before it consumes the code.
                let mut lock = self.lock();
                let Some(grant) = lock.codes.get(field("code")) else {
                    return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "unknown or spent code");
                };
                if grant.redirect_uri != field("redirect_uri") {
                    return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "redirect_uri mismatch");
                }
                // RFC 7636 4.1's length, checked first as oidc-provider does (invalid_request).
                if !(43..=128).contains(&field("code_verifier").len()) {
                    return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "code_verifier length");
                }
                if s256(field("code_verifier")) != grant.challenge {
                    return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "PKCE verification failed");
                }
                lock.codes.remove(field("code")).map(|g| g.nonce).unwrap_or_default()
            }
            "refresh_token" => match self.lock().refresh.remove(field("refresh_token")) {
                Some(nonce) => nonce,
                None => {
                    return oauth_error(
                        StatusCode::BAD_REQUEST,
                        "invalid_grant",
                        "unknown or spent refresh token",
                    );
                }
            },
            DEVICE_GRANT => {
                if !self.lock().devices.remove(field("device_code")) {
                    return oauth_error(
                        StatusCode::BAD_REQUEST,
                        "invalid_grant",
                        "unknown or spent device code",
                    );
                }
                None
            }
            other => {
                return oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type", other);
            }
        };
        axum::Json(self.tokens(nonce)).into_response()
    }

    /// A new access token, a new refresh token (each refresh spends the old one) and an ID token
    /// as the current [`Forgery`] makes it.
    fn tokens(&self, nonce: Option<String>) -> Value {
        let (access, refresh) = (random_b64url(), random_b64url());
        let (forgery, account) = {
            let mut lock = self.lock();
            lock.access.insert(access.clone());
            lock.refresh.insert(refresh.clone(), nonce.clone());
            (lock.forgery, lock.account.clone())
        };
        json!({
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": TOKEN_LIFE,
            "refresh_token": refresh,
            "id_token": self.id_token(forgery, &account, nonce.as_deref()),
            "scope": "openid email profile groups",
        })
    }

    fn id_token(&self, forgery: Forgery, account: &FakeAccount, nonce: Option<&str>) -> String {
        let now = jiff::Timestamp::now().as_second();
        let (iat, exp) = match forgery {
            Forgery::Expired => (now - EXPIRED_BY - TOKEN_LIFE, now - EXPIRED_BY),
            _ => (now, now + TOKEN_LIFE),
        };
        let mut claims = account.claims();
        claims["iss"] = json!(match forgery {
            Forgery::WrongIssuer => "https://issuer.invalid",
            _ => &self.issuer,
        });
        claims["aud"] = json!(match forgery {
            Forgery::WrongAudience => "another-client",
            _ => &self.client_id,
        });
        claims["iat"] = json!(iat);
        claims["exp"] = json!(exp);
        match (forgery, nonce) {
            (Forgery::NoNonce, _) => {}
            (Forgery::NonceMismatch, _) => claims["nonce"] = json!(random_b64url()),
            (_, Some(nonce)) => claims["nonce"] = json!(nonce),
            (_, None) => {}
        }
        let keys = keys();
        let (header, key) = match forgery {
            Forgery::AlgNone => (json!({"alg": "none", "typ": "JWT"}), None),
            Forgery::WrongKey => (json!({"alg": "RS256", "typ": "JWT", "kid": KID}), Some(&keys.other)),
            _ => (json!({"alg": "RS256", "typ": "JWT", "kid": KID}), Some(&keys.signing)),
        };
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = match key {
            Some(key) => {
                let mut sig = vec![0u8; key.public().modulus_len()];
                key.sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), input.as_bytes(), &mut sig).expect("sign");
                sig
            }
            None => Vec::new(),
        };
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    fn userinfo(&self, headers: &HeaderMap) -> Response {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let lock = self.lock();
        match token {
            Some(token) if lock.access.contains(token) => axum::Json(lock.account.claims()).into_response(),
            _ => {
                (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer error=\"invalid_token\"")], "")
                    .into_response()
            }
        }
    }

    /// RFC 8628's device authorization, approved at once: the first poll has the tokens.
    fn device_authorization(&self, headers: &HeaderMap, body: &[u8]) -> Response {
        let form: HashMap<String, String> = url::form_urlencoded::parse(body).into_owned().collect();
        if client_of(headers, &form).as_ref() != Some(&self.client_id) {
            return oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "not this provider's client");
        }
        let device_code = random_b64url();
        self.lock().devices.insert(device_code.clone());
        axum::Json(json!({
            "device_code": device_code,
            "user_code": "BCDF-GHJK",
            "verification_uri": self.url("/device"),
            "verification_uri_complete": self.url("/device?user_code=BCDF-GHJK"),
            "expires_in": 300,
            "interval": 1,
        }))
        .into_response()
    }
}

/// The client id a token request names: HTTP Basic (RFC 6749 2.3.1: form-urlencoded, then base64)
/// or the form's `client_id`.
fn client_of(headers: &HeaderMap, form: &HashMap<String, String>) -> Option<String> {
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok());
    match basic {
        Some(pair) => {
            let id = pair.split_once(':').map_or(pair.as_str(), |(id, _)| id);
            url::form_urlencoded::parse(format!("id={id}").as_bytes()).next().map(|(_, v)| v.into_owned())
        }
        None => form.get("client_id").cloned(),
    }
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    (status, axum::Json(json!({"error": error, "error_description": description}))).into_response()
}

/// Every request: counted, then answered 503 while down, else by its path.
async fn handle(
    State(fake): State<Arc<Fake>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    *fake.lock().hits.entry(uri.path().to_owned()).or_default() += 1;
    if fake.down.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, [(header::CONNECTION, "close")], "").into_response();
    }
    let query: AuthRequest = uri
        .query()
        .map(|q| url::form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    match (method, uri.path()) {
        (Method::GET, "/.well-known/openid-configuration") => axum::Json(fake.discovery()).into_response(),
        (Method::GET, "/jwks") => axum::Json(Fake::jwks()).into_response(),
        (Method::GET, "/auth") => fake.authorize(query),
        (Method::POST, "/token") => fake.token(&headers, &body),
        (Method::GET | Method::POST, "/userinfo") => fake.userinfo(&headers),
        (Method::POST, "/device/auth") => fake.device_authorization(&headers, &body),
        (method, path) => oauth_error(StatusCode::NOT_FOUND, "not_found", &format!("{method} {path}")),
    }
}

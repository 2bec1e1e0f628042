//! The real OpenID Connect provider of `tests/oidc/` (panva's certified `oidc-provider` under node,
//! `tests/oidc/README.md`) for the sign-in tests, and [`Browser`]: a browser without a screen that
//! signs in through it as a person would, from the daemon's `/auth/login` to what the daemon's
//! `/auth/callback` answers.
//!
//! Nothing here knows the daemon's side beyond its two routes and the fragment its callback
//! answers with (`/#pair=CODE`, `/#signin-error=CODE`). Every wait is bounded by [`WAIT`].

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use reqwest::Method;
use reqwest::header::{COOKIE, HeaderMap, LOCATION, SET_COOKIE};
use serde_json::Value;
use url::Url;

use super::{TestCa, WAIT};

/// Redirects one navigation follows at most, as Chromium's `kMaxRedirects`. From the daemon's
/// `/auth/login` to its callback, the real provider takes 6 (the login form's and the consent's
/// interactions each go out and back through `/auth/<uid>`), the forging one 2.
const MAX_REDIRECTS: usize = 20;

/// Stands in the navigation chain of [`Browser::callback`] for the provider it came from.
const ANOTHER_SITE: &str = "(the provider)";

/// Installs the pinned `oidc-provider` (`tests/oidc/install.sh`, a no-op once `node_modules` matches
/// the lock file) once per test process; it fails with one `oidc: ERROR` line without node or npm.
fn install() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc/install.sh");
        let status = Command::new("bash")
            .arg(&script)
            .stdin(Stdio::null())
            .status()
            .expect("run tests/oidc/install.sh");
        assert!(
            status.success(),
            "tests/oidc/install.sh failed (its `oidc: ERROR` line says why): the sign-in tests need \
             Node.js 20 or later and npm, and the npm registry on the first run"
        );
    });
}

/// `tests/oidc/provider.mjs` running on loopback over HTTPS with a leaf of the test's CA. Dropping it
/// closes its stdin (the provider exits on that) and kills and reaps it, so nothing outlives the test.
pub(crate) struct OidcProvider {
    child: Child,
    /// The write end of the provider's stdin: it lives while this is open (README: "Start, ready,
    /// stop"), so a test process that dies takes it along.
    stdin: Option<ChildStdin>,
    issuer: String,
    control: String,
    /// The CA the provider's certificate chains to: a [`Browser`] of this provider trusts it.
    ca_pem: String,
    stderr: Arc<Mutex<String>>,
}

impl OidcProvider {
    /// Starts the provider with `config` (README's configuration: `accounts`, `clients`, `ttl`, ...),
    /// adding `cert` and `key` of a fresh leaf of `ca` written to `dir`, and waits (bounded) for its
    /// ready line.
    pub(crate) fn start(ca: &TestCa, dir: &Path, mut config: Value) -> OidcProvider {
        install();
        let (cert, key) = ca.leaf(dir, "oidc");
        let fields = config.as_object_mut().expect("the provider's configuration is a JSON object");
        fields.insert("cert".to_owned(), Value::from(cert.to_str().expect("utf-8 path")));
        fields.insert("key".to_owned(), Value::from(key.to_str().expect("utf-8 path")));
        let file = dir.join("oidc.json");
        std::fs::write(&file, config.to_string()).expect("write the provider's configuration");

        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc/provider.mjs");
        let mut child = match Command::new("node")
            .arg(&script)
            .arg(&file)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("the OIDC provider needs Node.js 20 or later: 'node' is not on PATH")
            }
            Err(e) => panic!("spawn node {}: {e}", script.display()),
        };

        let stderr = Arc::new(Mutex::new(String::new()));
        let (stderr_done, stderr_read) = std::sync::mpsc::channel::<()>();
        let sink = stderr.clone();
        let pipe = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            let _done = stderr_done;
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().expect("stderr lock");
                s.push_str(&line);
                s.push('\n');
            }
        });
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            // The provider prints nothing after its ready line; drained all the same, so that a
            // future change cannot block it on a full pipe.
            for _ in lines {}
        });

        let line = match rx.recv_timeout(WAIT) {
            Ok(line) => line,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                // The provider is gone: its last stderr line (`oidc: ERROR: ...`) is in the pipe.
                let _ = stderr_read.recv_timeout(WAIT);
                panic!(
                    "the OIDC provider printed no ready line ({e}); stderr:\n{}",
                    stderr.lock().expect("stderr lock")
                );
            }
        };
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the provider's ready line is not JSON ({e}): {line}"));
        let field = |k: &str| ready[k].as_str().unwrap_or_else(|| panic!("no {k} in {line}")).to_owned();
        OidcProvider {
            issuer: field("issuer"),
            control: field("control"),
            stdin: child.stdin.take(),
            child,
            ca_pem: ca.pem(),
            stderr,
        }
    }

    /// `https://127.0.0.1:PORT`, no trailing slash: what discovery and the ID tokens say.
    pub(crate) fn issuer(&self) -> &str {
        &self.issuer
    }

    /// `http://127.0.0.1:PORT` of the control requests.
    pub(crate) fn control(&self) -> &str {
        &self.control
    }

    /// What the provider wrote to stderr so far (sign-ins, control requests, OAuth errors with
    /// oidc-provider's detail; never a secret): for a failing test's message.
    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// From now on `account` (id or email) cannot sign in, refresh, or use its access tokens.
    pub(crate) async fn disable(&self, account: &str) {
        let answer = self.control_request(Method::POST, &["disable", account], None).await;
        assert_eq!(answer["enabled"], false, "disable {account}: {answer}");
    }

    /// Undoes [`OidcProvider::disable`].
    pub(crate) async fn enable(&self, account: &str) {
        let answer = self.control_request(Method::POST, &["enable", account], None).await;
        assert_eq!(answer["enabled"], true, "enable {account}: {answer}");
    }

    /// Adds or replaces a client (README's client object), e.g. one whose redirect URI is on the
    /// port a daemon got after the provider started.
    pub(crate) async fn put_client(&self, client: Value) {
        let id = client["client_id"].as_str().expect("the client has a client_id").to_owned();
        let answer = self.control_request(Method::PUT, &["clients", &id], Some(&client)).await;
        assert_eq!(answer["client_id"], id.as_str(), "PUT /clients/{id}: {answer}");
    }

    /// One control request, awaited to its 200: the change is in effect when it returns.
    async fn control_request(&self, method: Method, segments: &[&str], body: Option<&Value>) -> Value {
        let mut url = Url::parse(&self.control).expect("control URL");
        url.path_segments_mut().expect("a base URL").clear().extend(segments);
        let mut req = super::http().request(method.clone(), url.clone());
        if let Some(body) = body {
            req = req.json(body);
        }
        let res = req.send().await.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = res.status().as_u16();
        let text = res.text().await.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        assert_eq!(
            status,
            200,
            "{method} {url} answered {status}: {text}\nprovider stderr:\n{}",
            self.stderr()
        );
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {url}: not JSON ({e}): {text}"))
    }

    /// A fresh browser (no cookies, so no session at the provider) that trusts this provider's CA.
    pub(crate) fn browser(&self) -> Browser {
        Browser::new(&self.ca_pem)
    }

    /// Signs in at the daemon `daemon_base` as `account` in a fresh browser: [`Browser::sign_in`].
    pub(crate) async fn sign_in(&self, daemon_base: &str, account: &str) -> SignInResult {
        self.browser().sign_in(daemon_base, account).await
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        // Closing stdin alone ends the provider (exit 0); the kill makes the end not depend on it.
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a sign-in came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SignInResult {
    /// The daemon answered a redirect to `...#pair=CODE`: the one-time code for `POST /devices/pair`.
    Pair(String),
    /// The daemon answered a redirect to `...#signin-error=CODE`.
    Error(String),
    /// The daemon answered anything else: its status and body (for a redirect the driver does not
    /// follow, `Location: ...` as the body).
    Status(u16, String),
    /// The sign-in never came back to the daemon: the provider answered a page of its own (the
    /// login form again after a refused account, 403; an error page): its status and the text of
    /// its `#error` element (the whole body when it has none).
    AtProvider(u16, String),
}

/// Where a provider sent the browser back to the daemon, not yet followed: for a test that replays
/// it, tampers with it, or opens it in another browser ([`Browser::callback`]).
#[derive(Debug, Clone)]
pub(crate) struct Callback {
    /// The whole URL (`<daemon>/auth/callback?code=..&state=..&iss=..`).
    pub(crate) url: String,
    pub(crate) code: Option<String>,
    pub(crate) state: Option<String>,
    pub(crate) iss: Option<String>,
    /// The OAuth error of a provider that refused the request (`access_denied`, ...).
    pub(crate) error: Option<String>,
    /// Whether this pass showed the provider's login form (and submitted it): false when the
    /// browser's session at the provider signed in without it.
    pub(crate) showed_login: bool,
}

impl Callback {
    /// [`Callback::url`] with the query parameter `name` set to `value` (added if absent).
    pub(crate) fn with_param(&self, name: &str, value: &str) -> String {
        self.edited(name, Some(value))
    }

    /// [`Callback::url`] without the query parameter `name`.
    pub(crate) fn without_param(&self, name: &str) -> String {
        self.edited(name, None)
    }

    fn edited(&self, name: &str, value: Option<&str>) -> String {
        let mut url = Url::parse(&self.url).expect("callback URL");
        let mut pairs: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(k, _)| k != name)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        if let Some(value) = value {
            pairs.push((name.to_owned(), value.to_owned()));
        }
        url.query_pairs_mut().clear().extend_pairs(pairs);
        url.into()
    }
}

/// A browser without a screen: an HTTPS client that trusts one CA, follows redirects itself (so it
/// can stop at the daemon's callback), keeps cookies as a browser does, and fills the provider's
/// login form (`#login-form`, its `login` input) with an account. Like a real browser it keeps the
/// session the provider gives it: a second sign-in with the same `Browser` skips the form, and then
/// signs in as whoever signed in first, whatever `account` says ([`Callback::showed_login`]).
pub(crate) struct Browser {
    client: reqwest::Client,
    jar: Jar,
    /// One line per request (`GET url -> status [Location]`), for a failing test's message.
    trace: Vec<String>,
}

/// One answer to one request.
struct Answer {
    url: Url,
    status: u16,
    location: Option<Url>,
    body: String,
}

/// Where a navigation from the daemon's `/auth/login` stopped.
enum Stop {
    /// A redirect to the daemon's `/auth/callback`, not followed.
    Callback(Callback),
    /// The daemon or the provider answered before the callback was reached.
    Answered(SignInResult),
}

impl Browser {
    /// A browser that trusts `ca_pem` (the test's CA: the provider's and an https daemon's) and no
    /// other root, with no cookies.
    pub(crate) fn new(ca_pem: &str) -> Browser {
        let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA PEM");
        let client = reqwest::Client::builder()
            .no_proxy()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(WAIT)
            .build()
            .expect("browser client");
        Browser { client, jar: Jar::default(), trace: Vec::new() }
    }

    /// The requests made so far, one line each.
    pub(crate) fn trace(&self) -> String {
        self.trace.join("\n")
    }

    /// Signs in at the daemon `daemon_base` (`http(s)://127.0.0.1:PORT`) as `account`: opens
    /// `/auth/login`, follows the redirects to the provider, submits its login form with `account`
    /// when it is shown, follows the redirects back to the daemon's `/auth/callback`, opens it, and
    /// returns what the daemon answered.
    pub(crate) async fn sign_in(&mut self, daemon_base: &str, account: &str) -> SignInResult {
        let login = Url::parse(daemon_base).and_then(|b| b.join("/auth/login"));
        let login = login.unwrap_or_else(|e| panic!("daemon base {daemon_base}: {e}"));
        self.sign_in_at(login.as_str(), account).await
    }

    /// [`Browser::sign_in`] from `login`, a URL of the daemon's `/auth/login` with a query (a
    /// terminal's sign-in: `mediatord login --browser`). A daemon that then sends the browser
    /// elsewhere (the terminal's address) answers `Status(302, "Location: <url>")`, not followed.
    pub(crate) async fn sign_in_at(&mut self, login: &str, account: &str) -> SignInResult {
        match self.navigate(login, account).await {
            Stop::Callback(callback) => self.callback(&callback.url).await,
            Stop::Answered(result) => result,
        }
    }

    /// [`Browser::sign_in`] up to the redirect to the daemon's `/auth/callback`, which it returns
    /// without opening it. Panics, with the trace, when the flow stops anywhere else.
    pub(crate) async fn authorize_only(&mut self, daemon_base: &str, account: &str) -> Callback {
        let login = Url::parse(daemon_base).and_then(|b| b.join("/auth/login"));
        let login = login.unwrap_or_else(|e| panic!("daemon base {daemon_base}: {e}"));
        match self.navigate(login.as_str(), account).await {
            Stop::Callback(callback) => callback,
            Stop::Answered(result) => {
                panic!("the sign-in stopped before the callback: {result:?}\n{}", self.trace())
            }
        }
    }

    /// Opens `url` (a daemon URL: the callback of [`Browser::authorize_only`], replayed or edited)
    /// in this browser, with its cookies, as the navigation a provider's redirect makes, and returns
    /// what the daemon answered. Redirects the daemon answers without a fragment are followed.
    pub(crate) async fn callback(&mut self, url: &str) -> SignInResult {
        let mut url = Url::parse(url).unwrap_or_else(|e| panic!("callback URL {url}: {e}"));
        let daemon = authority(&url);
        // It arrives by a redirect from the provider: a navigation through another site.
        let mut chain = vec![ANOTHER_SITE.to_owned()];
        for _ in 0..=MAX_REDIRECTS {
            let answer = self.request(Method::GET, &url, None, &chain).await;
            match classify_daemon(&answer) {
                Some(result) => return result,
                None => {
                    chain.push(authority(&answer.url));
                    url = answer.location.expect("a redirect has a Location");
                    if authority(&url) != daemon {
                        return SignInResult::Status(answer.status, format!("Location: {url}"));
                    }
                }
            }
        }
        panic!("more than {MAX_REDIRECTS} redirects at the daemon\n{}", self.trace())
    }

    /// The person at a browser of their own confirming a terminal's code (the device grant, RFC
    /// 8628): opens `page` (the provider's verification page), enters `user_code`, confirms it,
    /// signs in as `account` when the form is shown, and returns the text of the page it ends on
    /// (`#device-success` when the provider accepted; else its `#error`). Panics, with the trace,
    /// on a page it does not know.
    pub(crate) async fn confirm_device(&mut self, page: &str, user_code: &str, account: &str) -> String {
        let page = Url::parse(page).unwrap_or_else(|e| panic!("verification page {page}: {e}"));
        let input = self.request(Method::GET, &page, None, &[]).await;
        let (action, mut fields) = self.form(&input, "op.deviceInputForm");
        fields.push(("user_code".to_owned(), user_code.to_owned()));
        let confirm = self.request(Method::POST, &action, Some(&fields), &[authority(&page)]).await;
        if let Some(error) = element_text(&confirm.body, "error") {
            return error;
        }
        let (action, fields) = self.form(&confirm, "op.deviceConfirmForm");
        let mut answer = self.request(Method::POST, &action, Some(&fields), &[authority(&page)]).await;
        let mut signed_in = false;
        for _ in 0..=MAX_REDIRECTS * 2 {
            if let Some(next) = answer.location.clone() {
                answer = self.request(Method::GET, &next, None, &[authority(&answer.url)]).await;
                continue;
            }
            if answer.body.contains("id=\"device-success\"") {
                return element_text(&answer.body, "device-success").expect("the success text");
            }
            match form_action(&answer.body, "login-form") {
                Some(action) if !signed_in => {
                    signed_in = true;
                    let url = answer.url.join(&action).expect("the form's action");
                    let form = [("login".to_owned(), account.to_owned())];
                    answer = self.request(Method::POST, &url, Some(&form), &[authority(&answer.url)]).await;
                }
                _ => {
                    return element_text(&answer.body, "error")
                        .unwrap_or_else(|| panic!("an unknown page: {}\n{}", answer.body, self.trace()));
                }
            }
        }
        panic!("more than {} steps confirming a device\n{}", MAX_REDIRECTS * 2, self.trace())
    }

    /// The form `id` of `answer`'s page: its action (absolute) and its hidden fields.
    fn form(&self, answer: &Answer, id: &str) -> (Url, Vec<(String, String)>) {
        let Some(action) = form_action(&answer.body, id) else {
            panic!("no form #{id} on {} ({}):\n{}\n{}", answer.url, answer.status, answer.body, self.trace())
        };
        let start = answer.body.find(&format!("id=\"{id}\"")).expect("the form");
        let end = start + answer.body[start..].find("</form>").unwrap_or(answer.body.len() - start);
        let hidden = answer.body[start..end]
            .split("<input")
            .skip(1)
            .filter(|tag| tag.contains("type=\"hidden\""))
            .filter_map(|tag| Some((attribute(tag, "name")?, attribute(tag, "value").unwrap_or_default())))
            .collect();
        (answer.url.join(&action).expect("the form's action"), hidden)
    }

    /// Opens `url` (a page the daemon sent this browser to, such as a terminal's address) as the
    /// navigation a redirect from the daemon makes: its status and body, redirects not followed.
    pub(crate) async fn open(&mut self, url: &str, from: &str) -> (u16, String) {
        let url = Url::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        let from = Url::parse(from).unwrap_or_else(|e| panic!("{from}: {e}"));
        let answer = self.request(Method::GET, &url, None, &[authority(&from)]).await;
        (answer.status, answer.body)
    }

    /// From `login` (the daemon's `/auth/login`, with its query) to the redirect back to the
    /// daemon's `/auth/callback`.
    async fn navigate(&mut self, login: &str, account: &str) -> Stop {
        let mut url = Url::parse(login).unwrap_or_else(|e| panic!("login URL {login}: {e}"));
        let daemon = authority(&url);
        let mut form: Option<Vec<(String, String)>> = None;
        // The authorities this navigation went through: a typed URL starts with none, a submitted
        // form with the page's (the initiator), and each redirect adds the one it left.
        let mut chain: Vec<String> = Vec::new();
        let mut showed_login = false;
        let mut redirects = 0;
        loop {
            let method = if form.is_some() { Method::POST } else { Method::GET };
            let answer = self.request(method, &url, form.take().as_deref(), &chain).await;
            let at_daemon = authority(&answer.url) == daemon;
            if let Some(next) = &answer.location {
                if authority(next) == daemon && next.path() == "/auth/callback" {
                    return Stop::Callback(callback_of(next, showed_login));
                }
                if at_daemon && next.fragment().is_some() {
                    return Stop::Answered(classify_daemon(&answer).expect("a redirect with a fragment"));
                }
                redirects += 1;
                assert!(redirects <= MAX_REDIRECTS, "more than {MAX_REDIRECTS} redirects\n{}", self.trace());
                chain.push(authority(&answer.url));
                url = next.clone();
                continue;
            }
            if at_daemon {
                return Stop::Answered(SignInResult::Status(answer.status, answer.body));
            }
            // A page of the provider's: its login form once, anything else ends the sign-in there.
            match form_action(&answer.body, "login-form") {
                Some(action) if !showed_login && answer.status == 200 => {
                    showed_login = true;
                    url = answer.url.join(&action).expect("the form's action");
                    form = Some(vec![("login".to_owned(), account.to_owned())]);
                    chain = vec![authority(&answer.url)];
                    redirects = 0;
                }
                _ => {
                    let error = element_text(&answer.body, "error").unwrap_or(answer.body);
                    return Stop::Answered(SignInResult::AtProvider(answer.status, error));
                }
            }
        }
    }

    /// One request with this browser's cookies; the answer's cookies are kept.
    async fn request(
        &mut self,
        method: Method,
        url: &Url,
        form: Option<&[(String, String)]>,
        chain: &[String],
    ) -> Answer {
        let target = authority(url);
        // Cookies follow the site rules of a browser, each authority taken for a site of its own as
        // the daemon and the provider are in production (both are 127.0.0.1 in a test).
        let cross_site = chain.iter().any(|a| *a != target);
        let mut req = self.client.request(method.clone(), url.clone());
        if let Some(cookie) = self.jar.header(url, method == Method::GET, cross_site) {
            req = req.header(COOKIE, cookie);
        }
        if let Some(form) = form {
            let body: String =
                url::form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
            req = req.header("content-type", "application/x-www-form-urlencoded").body(body);
        }
        let res = match req.send().await {
            Ok(res) => res,
            Err(e) => panic!("{method} {url}: {e:?}\n{}", self.trace()),
        };
        let status = res.status().as_u16();
        self.jar.store(url, res.headers());
        let location = res
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .filter(|_| (300..400).contains(&status))
            .map(|l| url.join(l).unwrap_or_else(|e| panic!("Location {l} from {url}: {e}")));
        let body = match res.text().await {
            Ok(body) => body,
            Err(e) => panic!("{method} {url}: the body: {e}\n{}", self.trace()),
        };
        self.trace.push(match &location {
            Some(to) => format!("{method} {url} -> {status} {to}"),
            None => format!("{method} {url} -> {status}"),
        });
        Answer { url: url.clone(), status, location, body }
    }
}

/// `host:port` (the port explicit or the scheme's), with the scheme: what the jar and the site
/// rules key on.
fn authority(url: &Url) -> String {
    format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.port_or_known_default().unwrap_or(0)
    )
}

fn callback_of(url: &Url, showed_login: bool) -> Callback {
    let q: HashMap<String, String> = url.query_pairs().into_owned().collect();
    Callback {
        url: url.to_string(),
        code: q.get("code").cloned(),
        state: q.get("state").cloned(),
        iss: q.get("iss").cloned(),
        error: q.get("error").cloned(),
        showed_login,
    }
}

/// The daemon's answer as a result, or `None` for a redirect without a fragment (to follow).
fn classify_daemon(answer: &Answer) -> Option<SignInResult> {
    let Some(location) = &answer.location else {
        return Some(SignInResult::Status(answer.status, answer.body.clone()));
    };
    let fragment = location.fragment()?;
    let pairs: HashMap<String, String> =
        url::form_urlencoded::parse(fragment.as_bytes()).into_owned().collect();
    Some(if let Some(code) = pairs.get("pair") {
        SignInResult::Pair(code.clone())
    } else if let Some(code) = pairs.get("signin-error") {
        SignInResult::Error(code.clone())
    } else {
        SignInResult::Status(answer.status, format!("Location: {location}"))
    })
}

/// The `action` of the form with id `id`, unescaped.
fn form_action(html: &str, id: &str) -> Option<String> {
    let at = html.find(&format!("id=\"{id}\""))?;
    let start = html[..at].rfind("<form")?;
    let end = at + html[at..].find('>')?;
    let tag = &html[start..end];
    let from = tag.find("action=\"")? + "action=\"".len();
    let len = tag[from..].find('"')?;
    Some(unescape(&tag[from..from + len]))
}

/// The value of attribute `name` in `tag` (the text after `<input`), unescaped.
fn attribute(tag: &str, name: &str) -> Option<String> {
    let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
    let from = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[from..].find('"')?;
    Some(unescape(&tag[from..from + len]))
}

/// The text of the element with id `id` (up to its first tag), unescaped.
fn element_text(html: &str, id: &str) -> Option<String> {
    let at = html.find(&format!("id=\"{id}\""))?;
    let open = at + html[at..].find('>')? + 1;
    let len = html[open..].find('<')?;
    Some(unescape(&html[open..open + len]))
}

/// The five escapes provider.mjs's pages write (its `esc`).
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// How a cookie travels to another site (RFC 6265bis `SameSite`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SameSite {
    /// Only when every step of the navigation was on its own site.
    Strict,
    /// Also on a top-level GET from another site (the default of browsers for a cookie without it).
    Lax,
    None,
}

#[derive(Debug, Clone)]
struct Cookie {
    name: String,
    value: String,
    path: String,
    same_site: SameSite,
}

/// A browser's cookie store, per authority. A real browser keys cookies by host only (RFC 6265
/// isolates no ports), so in a test, where the daemon and the provider are both 127.0.0.1, it would
/// send each the other's cookies; keyed by authority the jar behaves as a browser does for a daemon
/// and a provider on two hosts. `Secure` and `Domain` are not looked at: everything is loopback,
/// which browsers count as secure. Expired cookies (`Max-Age` ≤ 0, `Expires` past) are removed.
#[derive(Debug, Default)]
struct Jar {
    cookies: HashMap<String, Vec<Cookie>>,
}

impl Jar {
    fn store(&mut self, url: &Url, headers: &HeaderMap) {
        let jar = self.cookies.entry(authority(url)).or_default();
        for line in headers.get_all(SET_COOKIE).iter().filter_map(|v| v.to_str().ok()) {
            let mut parts = line.split(';').map(str::trim);
            let Some((name, value)) = parts.next().and_then(|p| p.split_once('=')) else { continue };
            // RFC 6265 5.1.4: the default path is the request path's directory.
            let mut path = match url.path().rfind('/') {
                Some(0) | None => "/".to_owned(),
                Some(i) => url.path()[..i].to_owned(),
            };
            let mut same_site = SameSite::Lax;
            let mut gone = false;
            for attr in parts {
                let (k, v) = attr.split_once('=').unwrap_or((attr, ""));
                match k.to_ascii_lowercase().as_str() {
                    "path" if v.starts_with('/') => path = v.to_owned(),
                    "max-age" => gone |= v.parse::<i64>().is_ok_and(|s| s <= 0),
                    "expires" => {
                        gone |= jiff::fmt::rfc2822::DateTimeParser::new()
                            .parse_timestamp(v)
                            .is_ok_and(|t| t <= jiff::Timestamp::now())
                    }
                    "samesite" => {
                        same_site = match v.to_ascii_lowercase().as_str() {
                            "strict" => SameSite::Strict,
                            "none" => SameSite::None,
                            _ => SameSite::Lax,
                        }
                    }
                    _ => {}
                }
            }
            jar.retain(|c| !(c.name == name && c.path == path));
            if !gone {
                jar.push(Cookie { name: name.to_owned(), value: value.to_owned(), path, same_site });
            }
        }
    }

    /// The `Cookie` header for a request to `url`: RFC 6265's path match, longer paths first, and
    /// `SameSite` (`get`: a GET navigation; `cross_site`: the navigation came from or through
    /// another site).
    fn header(&self, url: &Url, get: bool, cross_site: bool) -> Option<String> {
        let p = url.path();
        let mut sent: Vec<&Cookie> = self
            .cookies
            .get(&authority(url))?
            .iter()
            .filter(|c| {
                p == c.path
                    || (p.starts_with(&c.path)
                        && (c.path.ends_with('/') || p[c.path.len()..].starts_with('/')))
            })
            .filter(|c| match c.same_site {
                SameSite::Strict => !cross_site,
                SameSite::Lax => !cross_site || get,
                SameSite::None => true,
            })
            .collect();
        if sent.is_empty() {
            return None;
        }
        sent.sort_by_key(|c| std::cmp::Reverse(c.path.len()));
        Some(sent.iter().map(|c| format!("{}={}", c.name, c.value)).collect::<Vec<_>>().join("; "))
    }
}

/// An https client that trusts `ca_pem` only and follows no redirect: for a test that talks to a
/// provider's endpoints itself (token, JWKS, `/auth` whose redirect it reads).
pub(crate) fn client_trusting(ca_pem: &str) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA PEM");
    reqwest::Client::builder()
        .no_proxy()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(WAIT)
        .build()
        .expect("https client")
}

/// The claims of a JWT (its middle part), not verified: for tests that look at what a provider put
/// in an ID token.
pub(crate) fn jwt_claims(jwt: &str) -> Value {
    jwt_part(jwt, 1)
}

/// The header of a JWT (its first part).
pub(crate) fn jwt_header(jwt: &str) -> Value {
    jwt_part(jwt, 0)
}

fn jwt_part(jwt: &str, i: usize) -> Value {
    use base64::Engine as _;
    let part = jwt.split('.').nth(i).unwrap_or_else(|| panic!("not a JWT: {jwt}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap_or_else(|e| panic!("JWT part {i} is not base64url ({e}): {jwt}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("JWT part {i} is not JSON ({e}): {jwt}"))
}

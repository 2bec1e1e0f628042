//! `mediatord login` (issue #48, `docs/people.md#from-a-terminal`): a person signs a terminal in
//! by the device authorization grant (RFC 8628) at a real provider (`tests/oidc/`), in a real
//! terminal (tmux), the code confirmed in a browser of theirs; the device credential it pays for
//! is saved `0600` for that daemon and used by the other commands; someone the daemon does not let
//! in gets nothing; `mediatord logout` ends it on the daemon.

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::people::{Forging, People, TOKEN, identity};
use crate::support::oidc::{Browser, SignInResult};
use crate::support::*;

/// The provider's page and the code, from what `login` printed (the line after each heading).
fn page_and_code(printed: &str) -> (String, String) {
    let after = |heading: &str| {
        let mut lines = printed.lines().skip_while(|l| !l.contains(heading)).skip(1);
        lines.find(|l| !l.trim().is_empty()).map(|l| l.trim().to_owned())
    };
    match (after("open this page"), after("enter the code")) {
        (Some(page), Some(code)) => (page, code),
        _ => panic!("no page or code in:\n{printed}"),
    }
}

/// The credential `login` saved for the daemon at `base` in the logins file `file`, which is
/// readable by its owner only.
fn saved_credential(file: &std::path::Path, base: &str) -> String {
    let mode = std::fs::metadata(file).expect("saved").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "readable by its owner only");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(file).expect("read")).expect("json");
    saved["logins"][base]["credential"].as_str().expect("a credential").to_owned()
}

/// A `mediatord` client command with `config` as its configuration directory and no credential
/// of the test's environment.
fn client(config: &std::path::Path, args: &[&str]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(bin());
    c.args(args)
        .env("XDG_CONFIG_HOME", config)
        .env("HOME", config)
        .env_remove("MEDIATORD_TOKEN")
        .env_remove("MEDIATORD_DEVICE")
        .env_remove("MEDIATORD_DEVICE_FILE")
        .env_remove("MEDIATORD_URL")
        .env("MEDIATORD_NO_MDNS", "1")
        .kill_on_drop(true);
    c
}

/// Ada runs `mediatord login` in a terminal, confirms its code at the provider in her browser, and
/// the terminal says who it is now; the credential is saved readable by her only, is a device of
/// hers (her name, her client id, the name the terminal gave), and the next command given no
/// credential uses it (a voter's `devices` is refused as a voter's, not as nobody's). `logout`
/// revokes it on the daemon and forgets it.
#[tokio::test]
async fn a_terminal_signs_in_by_device_code_and_the_commands_act_as_its_person() {
    let p = People::start(&[]).await;
    let config = tempfile::tempdir().expect("tempdir");
    let xdg = config.path().to_str().expect("utf-8").to_owned();
    let t = Tmux::run(
        &[bin(), "login", "--url", &p.d.base, "--name", "ada's terminal"],
        &[("XDG_CONFIG_HOME", &xdg), ("MEDIATORD_NO_MDNS", "1")],
        120,
        30,
    );
    let screen = t.until("the code to confirm", |s| s.contains("Waiting for you")).await;
    let (page, code) = page_and_code(&screen);
    assert!(page.starts_with(p.provider.issuer()), "the provider's page: {page}");

    let mut browser = Browser::new(&p.ca.pem());
    let said = browser.confirm_device(&page, &code, "ada").await;
    assert!(said.contains("signed in"), "the provider: {said}\n{}", browser.trace());
    let screen = t.exited().await;
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(screen.contains("as Ada Lovelace (voter)"), "{screen}");

    let file = config.path().join("mediatord/logins.json");
    let credential = saved_credential(&file, &p.d.base);
    let me = identity(&p.d, &credential).await.ok();
    assert_eq!(
        (me["identity"]["clientId"].as_str(), me["identity"]["person"]["name"].as_str()),
        (Some("person:ada"), Some("Ada Lovelace")),
        "{me}"
    );
    let devices = send(http().get(p.d.url("/devices")).bearer_auth(TOKEN)).await.ok();
    let named: Vec<(&str, &str)> = devices["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| (d["name"].as_str().unwrap_or(""), d["person"]["subject"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(named, [("ada's terminal", "ada")], "{devices}");

    // The next command, given no credential, is Ada: a voter on an operator's route.
    let listed = client(config.path(), &["devices", "--url", &p.d.base]).output().await.expect("devices");
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert!(!listed.status.success());
    assert!(stderr.contains("403") && stderr.contains("operator"), "as Ada, not as nobody (401): {stderr}");

    // An editor's `connect`, given no credential, is Ada too.
    let mut editor = Editor::start(&p.d.base, &[], &[("XDG_CONFIG_HOME", &xdg)]);
    let init =
        editor.call("initialize", serde_json::json!({"protocolVersion": 1, "clientCapabilities": {}})).await;
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    let new = editor.call("session/new", serde_json::json!({"cwd": p.d.workspace, "mcpServers": []})).await;
    assert_eq!(new["result"]["_meta"]["mediatord"]["clientId"], "person:ada", "{new}");
    drop(editor);

    let out = client(config.path(), &["logout", "--url", &p.d.base]).output().await.expect("logout");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("Signed out"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(identity(&p.d, &credential).await.status, 401, "revoked on the daemon");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    assert_eq!(saved["logins"], serde_json::json!({}), "forgotten here");

    // A file others may read is refused before anyone signs in (no code shown, nothing paired).
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    // (Without the check, login would show a code and wait for it: bounded here by WAIT.)
    let login = client(config.path(), &["login", "--url", &p.d.base]).output();
    let out = tokio::time::timeout(WAIT, login).await.expect("refused at once").expect("login");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("chmod 600"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("enter the code"), "no sign-in began");
}

/// Mallory (another domain) confirms the code at the provider, which vouches for her; the daemon
/// does not let her in: `login` fails saying why, nothing is saved and nothing paired. A handle
/// nobody began is refused as one.
#[tokio::test]
async fn someone_not_let_in_gets_nothing_from_a_terminal_sign_in() {
    let p = People::start(&[]).await;
    let config = tempfile::tempdir().expect("tempdir");
    let mut login = client(config.path(), &["login", "--url", &p.d.base])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("login");
    let mut lines = BufReader::new(login.stdout.take().expect("stdout")).lines();
    let mut printed = String::new();
    while !printed.contains("Waiting for you") {
        let line = tokio::time::timeout(WAIT, lines.next_line()).await.expect("in time").expect("read");
        printed.push_str(&line.unwrap_or_else(|| panic!("login ended early:\n{printed}")));
        printed.push('\n');
    }
    let (page, code) = page_and_code(&printed);
    let said = Browser::new(&p.ca.pem()).confirm_device(&page, &code, "mallory").await;
    assert!(said.contains("signed in"), "the provider vouches for her: {said}");
    let out = tokio::time::timeout(WAIT, login.wait_with_output()).await.expect("in time").expect("exit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("403") && stderr.contains("does not let in"), "{stderr}");
    assert!(!config.path().join("mediatord/logins.json").exists(), "nothing saved");
    let devices = send(http().get(p.d.url("/devices")).bearer_auth(TOKEN)).await.ok();
    assert_eq!(devices["devices"], serde_json::json!([]), "nothing paired: {devices}");

    let unknown =
        send(http().post(p.d.url("/auth/device/token")).json(&serde_json::json!({"login": "ab".repeat(32)})))
            .await;
    assert_eq!(
        (unknown.status, unknown.body["code"].as_str()),
        (400, Some("invalid_state")),
        "{}",
        unknown.text
    );
}

/// `POST /devices/pairing` with `credential`: a pairing code asked for.
async fn pairing(d: &Daemon, credential: &str, body: Value) -> Reply {
    send(http().post(d.url("/devices/pairing")).bearer_auth(credential).json(&body)).await
}

/// `POST /devices/pair` with `code`: the device it pays for, and its credential.
async fn paired(d: &Daemon, code: &Value) -> Value {
    send(http().post(d.url("/devices/pair")).json(&serde_json::json!({"code": code}))).await.ok()
}

/// A signed-in person pairs another device of theirs (with their own credential, as `mediatord
/// pair` from a signed-in terminal does): it is theirs (their name, their client id, their role, ending with their
/// sign-in), and when the provider stops vouching for them it is signed out with the rest. Asking
/// for another role is refused saying how; a device paired by the operator pairs nothing.
#[tokio::test]
async fn a_person_pairs_a_device_of_their_own_which_ends_with_them() {
    let p = People::start(&["--oidc-renew-ms", "3000"]).await;
    let ada = p.signed_in("ada").await;
    let issued = pairing(&p.d, &ada, serde_json::json!({"name": "ada's phone"})).await;
    assert_eq!((issued.status, issued.body["role"].as_str()), (200, Some("voter")), "{}", issued.text);
    let phone = paired(&p.d, &issued.body["code"]).await;
    assert_eq!(
        (
            phone["name"].as_str(),
            phone["clientId"].as_str(),
            phone["person"]["name"].as_str(),
            phone["role"].as_str()
        ),
        (Some("ada's phone"), Some("person:ada"), Some("Ada Lovelace"), Some("voter")),
        "{phone}"
    );
    let her_end = identity(&p.d, &ada).await.ok()["identity"]["expiresAt"].as_u64().expect("her end");
    let phone_end = phone["expiresAt"].as_u64().expect("the phone ends too");
    // Computed a moment apart from the same end: the same within the time the pairing took.
    assert!(phone_end <= her_end + 1_000 && phone_end + 1_000 >= her_end, "{phone_end} vs {her_end}");
    let phone = phone["token"].as_str().expect("credential").to_owned();

    let observer = pairing(&p.d, &ada, serde_json::json!({"role": "observer"})).await;
    assert_eq!(
        (observer.status, observer.body["code"].as_str()),
        (400, Some("invalid_device")),
        "{}",
        observer.text
    );
    assert!(observer.text.contains("operator's token"), "says how: {}", observer.text);

    // Grace (an operator) pairs a wall display as an observer: nobody's, so it never follows her role.
    let grace = p.signed_in("grace").await;
    let wall = pairing(&p.d, &grace, serde_json::json!({"role": "observer"})).await.ok();
    let wall = paired(&p.d, &wall["code"]).await;
    assert_eq!((wall["role"].as_str(), wall["person"].is_null()), (Some("observer"), true), "{wall}");

    // A device the operator paired is nobody's: it pairs nothing.
    let by_operator = pairing(&p.d, TOKEN, serde_json::json!({})).await.ok();
    let plain = paired(&p.d, &by_operator["code"]).await;
    let plain = plain["token"].as_str().expect("credential").to_owned();
    let refused = pairing(&p.d, &plain, serde_json::json!({})).await;
    assert_eq!(
        (refused.status, refused.body["code"].as_str()),
        (403, Some("operator_required")),
        "{}",
        refused.text
    );

    p.provider.disable("ada").await;
    eventually(
        || http().get(p.d.url("/devices")).bearer_auth(TOKEN),
        |b| b["devices"].as_array().is_some_and(|all| all.iter().all(|d| d["person"]["subject"] != "ada")),
    )
    .await;
    assert_eq!(identity(&p.d, &phone).await.status, 401, "her phone is signed out with her");
    assert_eq!(identity(&p.d, &ada).await.status, 401);
    assert_eq!(identity(&p.d, &plain).await.status, 200, "nobody's device stays");
}

/// A terminal's sign-in checks the ID token as the browser's does: one forged (another key, `alg:
/// none`, another audience or issuer, expired) is refused `invalid_id_token` and pays for nothing;
/// a valid one pays for a code. (A device grant has no nonce: the token comes straight from the
/// token endpoint for this client's device code, so the nonce forgeries are not this door's.) A
/// provider that is down is said to be, and the operator's token still works.
#[tokio::test]
async fn a_forged_id_token_or_a_provider_down_fails_a_terminal_sign_in_with_nothing_granted() {
    use crate::support::fake_oidc::Forgery;
    let Forging { d, fake, .. } = Forging::start().await;
    let sign_in = || async {
        let begun = send(http().post(d.url("/auth/device")).json(&serde_json::json!({}))).await.ok();
        assert_eq!(begun["userCode"], "BCDF-GHJK", "{begun}");
        let login = serde_json::json!({"login": begun["login"]});
        send(http().post(d.url("/auth/device/token")).json(&login)).await
    };
    let forged =
        [Forgery::WrongKey, Forgery::AlgNone, Forgery::WrongAudience, Forgery::WrongIssuer, Forgery::Expired];
    for forgery in forged {
        fake.set_forgery(forgery);
        let answer = sign_in().await;
        assert_eq!(
            (answer.status, answer.body["code"].as_str()),
            (403, Some("invalid_id_token")),
            "{forgery:?}: {}",
            answer.text
        );
    }
    let devices = send(http().get(d.url("/devices")).bearer_auth(TOKEN)).await.ok();
    assert_eq!(devices["devices"], serde_json::json!([]), "nothing paired: {devices}");

    fake.set_forgery(Forgery::Valid);
    let answer = sign_in().await;
    assert_eq!((answer.status, answer.body["name"].as_str()), (200, Some("Ada Lovelace")), "{}", answer.text);
    let device = paired(&d, &answer.body["code"]).await;
    assert_eq!(device["clientId"], "person:ada", "{device}");

    fake.set_down(true);
    let down = send(http().post(d.url("/auth/device")).json(&serde_json::json!({}))).await;
    assert_eq!(
        (down.status, down.body["code"].as_str()),
        (503, Some("provider_unavailable")),
        "{}",
        down.text
    );
    assert_eq!(
        identity(&d, TOKEN).await.ok()["identity"]["kind"],
        "operator",
        "the operator's token still works"
    );
}

/// `mediatord login` (its stdout piped), and what it printed up to the line containing `until`.
async fn login_until(
    config: &std::path::Path,
    args: &[&str],
    until: &str,
) -> (tokio::process::Child, tokio::io::Lines<BufReader<tokio::process::ChildStdout>>, String) {
    let mut login =
        client(config, args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("login");
    let mut lines = BufReader::new(login.stdout.take().expect("stdout")).lines();
    let mut printed = String::new();
    while !printed.contains(until) {
        let line = tokio::time::timeout(WAIT, lines.next_line()).await.expect("in time").expect("read");
        let Some(line) = line else {
            let out = login.wait_with_output().await.expect("exit");
            panic!("login ended early:\n{printed}{}", String::from_utf8_lossy(&out.stderr));
        };
        printed.push_str(&line);
        printed.push('\n');
    }
    (login, lines, printed)
}

/// How `login` ended: whether it succeeded, the rest of what it printed, and its stderr.
async fn ended(
    login: tokio::process::Child,
    mut lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) -> (bool, String, String) {
    let mut rest = String::new();
    while let Some(line) =
        tokio::time::timeout(WAIT, lines.next_line()).await.expect("in time").expect("read")
    {
        rest.push_str(&line);
        rest.push('\n');
    }
    let out = tokio::time::timeout(WAIT, login.wait_with_output()).await.expect("in time").expect("exit");
    (out.status.success(), rest, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The daemon's page `login` printed for a browser on this machine, and the terminal's address in it.
fn browser_page(printed: &str) -> (String, String) {
    let page = printed
        .lines()
        .map(str::trim)
        .find(|l| l.contains("/auth/login?"))
        .unwrap_or_else(|| panic!("no page in:\n{printed}"))
        .to_owned();
    let url = url::Url::parse(&page).expect("the page is a URL");
    let terminal = url.query_pairs().find(|(k, _)| k == "terminal").map(|(_, v)| v.into_owned());
    (page.clone(), terminal.unwrap_or_else(|| panic!("no terminal address in {page}")))
}

/// Where the daemon sent the browser once the sign-in ended: the terminal's address, with the
/// outcome.
fn sent_to(result: &SignInResult, browser: &Browser) -> String {
    match result {
        SignInResult::Status(302, location) if location.starts_with("Location: ") => {
            location["Location: ".len()..].to_owned()
        }
        other => panic!("the daemon did not send the browser on: {other:?}\n{}", browser.trace()),
    }
}

/// The daemon's client at the provider without the device grant (as a Google web client is):
/// `login` says the provider offers no code and signs in through a browser on this machine
/// instead. Ada opens the page it printed; the provider sends her back to the daemon, which sends
/// her browser to the terminal's loopback address with a one-time code; the terminal pairs the
/// device, tells the browser, and saves the credential, which is Ada's, under the name given. A
/// knock at the port at another path gets a 404 and changes nothing.
#[tokio::test]
async fn without_the_device_grant_a_terminal_signs_in_through_a_browser_on_its_machine() {
    let p = People::start(&[]).await;
    p.provider
        .put_client(serde_json::json!({
            "client_id": crate::people::CLIENT, "client_secret": crate::people::SECRET,
            "grant_types": ["authorization_code", "refresh_token"],
            "redirect_uris": [format!("{}/auth/callback", p.d.base)],
        }))
        .await;
    let config = tempfile::tempdir().expect("tempdir");
    let (login, lines, printed) = login_until(
        config.path(),
        &["login", "--url", &p.d.base, "--name", "ada's laptop"],
        "Waiting for the browser",
    )
    .await;
    assert!(printed.contains("offers no code for this daemon"), "{printed}");
    let (page, terminal) = browser_page(&printed);
    assert!(terminal.starts_with("http://127.0.0.1:"), "{terminal}");

    let stranger = url::Url::parse(&terminal).expect("address").join("/").expect("root");
    let knock = send(http().get(stranger.as_str())).await;
    assert_eq!(knock.status, 404, "{}", knock.text);

    let mut browser = Browser::new(&p.ca.pem());
    let result = browser.sign_in_at(&page, "ada").await;
    let location = sent_to(&result, &browser);
    assert!(location.starts_with(&format!("{terminal}?code=")), "{location}");
    let (status, body) = browser.open(&location, &p.d.base).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("signed in as Ada Lovelace (voter)"), "{body}");

    let (success, stdout, stderr) = ended(login, lines).await;
    assert!(success, "{stdout}{stderr}");
    assert!(stdout.contains("as Ada Lovelace (voter)"), "{stdout}");
    let credential = saved_credential(&config.path().join("mediatord/logins.json"), &p.d.base);
    let me = identity(&p.d, &credential).await.ok();
    assert_eq!(
        (me["identity"]["clientId"].as_str(), me["identity"]["name"].as_str()),
        (Some("person:ada"), Some("ada's laptop")),
        "{me}"
    );
    // The code was spent on the terminal's pairing: the browser's URL pays for nothing more.
    let code = url::Url::parse(&location)
        .expect("URL")
        .query_pairs()
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned());
    let again = send(http().post(p.d.url("/devices/pair")).json(&serde_json::json!({"code": code}))).await;
    assert_eq!(again.status, 401, "{}", again.text);
}

/// `login --browser` (the device grant available, not used) for Mallory, whom the daemon does not
/// let in: her browser comes back to the terminal with the reason, which the browser and the
/// terminal both say; nothing is saved and nothing paired.
#[tokio::test]
async fn someone_not_let_in_gets_nothing_from_a_browser_sign_in() {
    let p = People::start(&[]).await;
    let config = tempfile::tempdir().expect("tempdir");
    let (login, lines, printed) =
        login_until(config.path(), &["login", "--browser", "--url", &p.d.base], "Waiting for the browser")
            .await;
    assert!(!printed.contains("enter the code"), "no code asked for: {printed}");
    let (page, terminal) = browser_page(&printed);
    let mut browser = Browser::new(&p.ca.pem());
    let result = browser.sign_in_at(&page, "mallory").await;
    let location = sent_to(&result, &browser);
    assert_eq!(location, format!("{terminal}?error=not_allowed"));
    let (status, body) = browser.open(&location, &p.d.base).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("does not let in"), "{body}");

    let (success, _, stderr) = ended(login, lines).await;
    assert!(!success, "{stderr}");
    assert!(stderr.contains("does not let in") && stderr.contains("not_allowed"), "{stderr}");
    assert!(!config.path().join("mediatord/logins.json").exists(), "nothing saved");
    let devices = send(http().get(p.d.url("/devices")).bearer_auth(TOKEN)).await.ok();
    assert_eq!(devices["devices"], serde_json::json!([]), "nothing paired: {devices}");
}

/// `/auth/login` takes a terminal's address only on this machine's loopback: anything else (another
/// host, https, a host name, no port, a user, a planted query), a name without an address, or a
/// bad device name is refused at once, before a sign-in begins (no redirect, no cookie); a good
/// one goes to the provider.
#[tokio::test]
async fn a_terminal_address_off_this_machine_is_refused_before_a_sign_in_begins() {
    let p = People::start(&[]).await;
    let no_redirects = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(WAIT)
        .build()
        .expect("client");
    let login = |query: &[(&str, &str)]| {
        let mut url = url::Url::parse(&p.d.url("/auth/login")).expect("URL");
        url.query_pairs_mut().extend_pairs(query);
        no_redirects.get(url.as_str()).send()
    };
    for (target, code) in [
        ("http://evil.example:4000/x", "invalid_terminal"),
        ("https://127.0.0.1:4000/x", "invalid_terminal"),
        ("http://localhost:4000/x", "invalid_terminal"),
        ("http://127.0.0.1/x", "invalid_terminal"),
        ("http://ada@127.0.0.1:4000/x", "invalid_terminal"),
        ("http://127.0.0.1:4000/x?code=planted", "invalid_terminal"),
    ] {
        let res = login(&[("terminal", target)]).await.expect("answered");
        assert_eq!(res.status().as_u16(), 400, "{target}");
        assert!(
            res.headers().get("set-cookie").is_none() && res.headers().get("location").is_none(),
            "{target}"
        );
        let body: Value = res.json().await.expect("JSON");
        assert_eq!(body["code"], code, "{target}: {body}");
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains("127.0.0.1")),
            "says what is taken: {body}"
        );
    }
    let name_only = login(&[("name", "laptop")]).await.expect("answered");
    assert_eq!(name_only.status().as_u16(), 400);
    let bad_name =
        login(&[("terminal", "http://127.0.0.1:4000/x"), ("name", "a\u{202e}b")]).await.expect("answered");
    assert_eq!(bad_name.status().as_u16(), 400);
    let body: Value = bad_name.json().await.expect("JSON");
    assert_eq!(body["code"], "invalid_device", "{body}");
    let good = login(&[("terminal", "http://127.0.0.1:4000/x"), ("name", "laptop")]).await.expect("answered");
    assert_eq!(good.status().as_u16(), 302);
    let to = good.headers().get("location").and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(to.starts_with(p.provider.issuer()), "to the provider: {to}");
}

/// A daemon without a sign-in provider: `login` says so and stops; it does not take that `404`
/// for a provider without codes and wait for a browser.
#[tokio::test]
async fn login_to_a_daemon_without_a_provider_says_so_at_once() {
    let d = Daemon::start(&[]);
    let config = tempfile::tempdir().expect("tempdir");
    let login = client(config.path(), &["login", "--url", &d.base]).output();
    let out = tokio::time::timeout(WAIT, login).await.expect("ends at once").expect("login");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("404"), "{stderr}");
    assert!(!stdout.contains("browser"), "no browser sign-in begun: {stdout}");
}

//! `mediatord login` and `mediatord logout`: a person signs a terminal in with the daemon's OpenID
//! provider (the device authorization grant, RFC 8628: a code to confirm in any browser; or, with
//! `--browser` or a provider without that grant, a browser on this machine that brings the sign-in
//! back to a loopback address, `mediatord::client::loopback`), and the device credential it pays
//! for is saved for this daemon (`mediatord::client::saved`), so the other commands act as that
//! person.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mediatord::client::api::Endpoint;
use mediatord::client::loopback::{Loopback, Outcome};
use mediatord::client::saved::{self, Saved};
use mediatord::oidc::SignInError;
use mediatord::text;

use super::reach::{DaemonArgs, locate};
use super::say;

#[derive(Debug, clap::Args)]
pub(super) struct LoginArgs {
    /// What this terminal is called in the daemon's list of devices [default: "terminal sign-in"]
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Sign in through a browser on this machine instead of by a code (what login does anyway
    /// when the provider offers no code for this daemon)
    #[arg(long)]
    browser: bool,
    #[command(flatten)]
    daemon: DaemonArgs,
}

#[derive(Debug, clap::Args)]
pub(super) struct LogoutArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
}

pub(super) const LOGIN_HELP: &str = "\
The daemon must have a sign-in provider (serve --oidc-issuer, docs/people.md). login prints a page
and a code: open the page in any browser, on any device, type the code, and sign in there. Where
the provider offers no code for this daemon (its client lacks the device grant), or with --browser,
login prints a page of the daemon's to open in a browser on this machine instead: the sign-in comes
back to this terminal at a loopback address only this machine can reach. This terminal then holds
a device of yours, saved (readable by you only) in $XDG_CONFIG_HOME/mediatord/logins.json, else ~/.config/mediatord/logins.json: attach,
watch, approve, diff, connect, pair and devices use it for this daemon when given no --device,
--device-file or token. The daemon renews it with the provider while you stay allowed there;
mediatord logout ends it.";

/// How long `login` waits for its person at most, whatever the provider says: the daemon's own
/// bound on a sign-in (`mediatord::oidc::SIGN_IN_WINDOW`), and a minute for the last answer.
const MAX_WAIT: Duration = Duration::from_secs(660);
/// The most times `login` asks whether its person confirmed: each ask waits up to 20 s at the
/// daemon, so this is far past [`MAX_WAIT`] unless a daemon answers at once.
const MAX_POLLS: u32 = 200;
/// The least time between two asks, should a daemon answer "pending" at once.
const MIN_POLL_GAP: Duration = Duration::from_secs(1);

/// `mediatord login`.
pub(super) fn run(args: &LoginArgs) -> ExitCode {
    let Some(file) = saved::path(None) else {
        say("mediatord login: neither XDG_CONFIG_HOME nor HOME is set: nowhere to keep the sign-in");
        return ExitCode::from(2);
    };
    let daemon = locate("login", &args.daemon);
    let endpoint = match Endpoint::new(&daemon.url, None, None) {
        Ok(e) => e.pinned(daemon.fingerprint.clone()),
        Err(e) => {
            say(&format!("mediatord login: {}", text::escape(&e)));
            return ExitCode::from(2);
        }
    };
    // A file that cannot be trusted or read is said before anyone signs in, not after a device
    // was paired whose credential then has nowhere to go.
    if let Err(e) = saved::load(&file, &daemon.url) {
        say(&format!("mediatord login: {}", text::escape(&e)));
        return ExitCode::FAILURE;
    }
    let name = args.name.clone().unwrap_or_else(|| "terminal sign-in".to_owned());
    let browser = args.browser;
    let url = daemon.url.clone();
    super::reach::client_command("login", async move {
        let by_code = if browser { None } else { by_code(&endpoint, &name).await? };
        let saved = match by_code {
            Some(saved) => saved,
            None => through_browser(&endpoint, &url, &name).await?,
        };
        let shown = saved.to_string();
        saved::save(&file, &daemon.url, saved)?;
        Ok(Some(format!(
            "Signed in to {} as {}. Saved in {} (readable by you only); `mediatord logout` ends it.",
            text::escape(&daemon.url),
            text::escape(&shown),
            file.display()
        )))
    })
}

/// The sign-in by a code (the device grant): the code shown, the wait, the device paired; `None`
/// when the daemon's provider offers none (`no_device_flow`), said so.
async fn by_code(endpoint: &Endpoint, name: &str) -> Result<Option<Saved>, String> {
    let begun = match endpoint.call("POST", "/auth/device", Some(&serde_json::json!({}))).await {
        Ok((404, body)) if body["code"] == "no_device_flow" => {
            say_out(
                "The sign-in provider offers no code for this daemon: signing in through a browser instead.\n",
            );
            return Ok(None);
        }
        other => answer(other, 200)?,
    };
    let (Some(login), Some(code), Some(page)) =
        (begun["login"].as_str(), begun["userCode"].as_str(), begun["verificationUri"].as_str())
    else {
        return Err("the daemon's answer to /auth/device lacks login, userCode or verificationUri".into());
    };
    let minutes = begun["expiresIn"].as_u64().unwrap_or(0).div_ceil(60);
    // The provider's page and code are the provider's text: escaped for the terminal.
    let mut shown = format!(
        "To sign in, open this page in a browser, on any device:\n\n    {}\n\nand enter the code:\n\n    {}\n\n",
        text::escape(page),
        text::escape(code)
    );
    if let Some(complete) = begun["verificationUriComplete"].as_str() {
        shown.push_str(&format!("(or open {}, which has the code in it)\n\n", text::escape(complete)));
    }
    shown.push_str(&format!(
        "Waiting for you to confirm it (the code expires in {minutes} min; Ctrl-C stops)...\n"
    ));
    say_out(&shown);
    let poll = serde_json::json!({ "login": login, "name": name });
    let started = Instant::now();
    let mut polls = 0;
    let signed_in = loop {
        polls += 1;
        if started.elapsed() > MAX_WAIT || polls > MAX_POLLS {
            return Err("no answer from the daemon about this sign-in; run mediatord login again".into());
        }
        let asked = Instant::now();
        match endpoint.call("POST", "/auth/device/token", Some(&poll)).await {
            Ok((202, _)) => tokio::time::sleep(MIN_POLL_GAP.saturating_sub(asked.elapsed())).await,
            other => break answer(other, 200)?,
        }
    };
    let Some(code) = signed_in["code"].as_str() else {
        return Err("the daemon's sign-in answer lacks its code".into());
    };
    pair(endpoint, code).await.map(Some)
}

/// The sign-in through a browser on this machine: the daemon's page shown, the browser's answer
/// taken at a loopback address, the device paired, the browser told.
async fn through_browser(endpoint: &Endpoint, url: &str, name: &str) -> Result<Saved, String> {
    let mut loopback = Loopback::bind().await?;
    let query = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("terminal", &loopback.address())
        .append_pair("name", name)
        .finish();
    let page = format!("{}/auth/login?{query}", url.trim_end_matches('/'));
    say_out(&format!(
        "To sign in, open this page in a browser on this machine:\n\n    {}\n\nWaiting for the browser to come back (at most {} min; Ctrl-C stops)...\n",
        text::escape(&page),
        MAX_WAIT.as_secs() / 60
    ));
    let arrival = loopback.wait(MAX_WAIT).await?;
    let result = match &arrival.outcome {
        Outcome::Code(code) => pair(endpoint, code).await,
        Outcome::Error(code) => Err(match SignInError::from_code(code) {
            Some(e) => format!("{} ({code})", e.message()),
            None => format!("the daemon ended the sign-in: {code}"),
        }),
    };
    match &result {
        Ok(saved) => arrival.answer(
            true,
            "Signed in",
            &format!("The terminal is signed in as {saved}. You can close this tab."),
        ),
        Err(why) => arrival.answer(false, "Not signed in", why),
    }
    loopback.finish().await;
    result
}

/// The device a sign-in's one-time code pays for, paired: what is saved.
async fn pair(endpoint: &Endpoint, code: &str) -> Result<Saved, String> {
    let paired = answer(
        endpoint.call("POST", "/devices/pair", Some(&serde_json::json!({ "code": code }))).await,
        200,
    )?;
    let Some(credential) = paired["token"].as_str() else {
        return Err("the daemon's pairing answer lacks the credential".into());
    };
    Ok(Saved {
        credential: credential.to_owned(),
        name: paired["person"]["name"].as_str().unwrap_or("?").to_owned(),
        role: paired["role"].as_str().unwrap_or("voter").to_owned(),
        saved_at: mediatord::clock::now_ms(),
    })
}

/// `text` on stdout, at once (the person acts on it while the command waits).
fn say_out(text: &str) {
    let mut out = io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// The body of an answer with status `want`, else the daemon's error (or why it did not answer).
fn answer(
    result: Result<(u16, serde_json::Value), mediatord::client::api::NoAnswer>,
    want: u16,
) -> Result<serde_json::Value, String> {
    match result {
        Ok((status, body)) if status == want => Ok(body),
        Ok((status, body)) => Err(format!(
            "the daemon answered {status}: {}",
            body["error"].as_str().unwrap_or("no explanation")
        )),
        Err(e) => Err(mediatord::client::api::unanswered(&e)),
    }
}

/// `mediatord logout`: the saved sign-in for this daemon ended there (its device revoked) and
/// forgotten here. Forgotten here even when the daemon cannot be reached (said so).
pub(super) fn logout(args: &LogoutArgs) -> ExitCode {
    let Some(file) = saved::path(None) else {
        say("mediatord logout: neither XDG_CONFIG_HOME nor HOME is set: no sign-in is saved");
        return ExitCode::from(2);
    };
    let daemon = locate("logout", &args.daemon);
    let saved = match saved::load(&file, &daemon.url) {
        Ok(Some(s)) => s,
        Ok(None) => {
            say(&format!("mediatord logout: no sign-in is saved for {}", daemon.url));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            say(&format!("mediatord logout: {}", text::escape(&e)));
            return ExitCode::FAILURE;
        }
    };
    let endpoint = match Endpoint::new(&daemon.url, Some(&saved.credential), None) {
        Ok(e) => e.pinned(daemon.fingerprint.clone()),
        Err(e) => {
            say(&format!("mediatord logout: {}", text::escape(&e)));
            return ExitCode::from(2);
        }
    };
    let url = daemon.url.clone();
    super::reach::client_command("logout", async move {
        let ended = match endpoint.call("POST", "/auth/logout", None).await {
            // 401: revoked or expired already; ended either way.
            Ok((204 | 401, _)) => None,
            other => Some(answer(other, 204).err().unwrap_or_default()),
        };
        saved::forget(&file, &url)?;
        Ok(Some(match ended {
            None => format!("Signed out of {url}."),
            Some(why) => format!(
                "Forgotten here, but the daemon did not end the sign-in ({why}); it ends at the provider's next renewal refusal, or an operator revokes it (mediatord devices)."
            ),
        }))
    })
}

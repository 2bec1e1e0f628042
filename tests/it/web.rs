//! The web app as HTTP sees it (`docs/protocol.md#13-the-web-app`): `GET /` negotiated between the page
//! and JSON, the embedded assets (hashed names, precompressed, cached for good), the page's security
//! headers, the token exemption for the app's files only, the same-origin rule of the perimeter, the
//! page weight, and that the committed screenshots were made from the app as it is.
//!
//! What the page does in a browser is `tests/browser.rs`.

use std::collections::BTreeSet;
use std::io::Read;

use serde_json::{Value, json};

use crate::support::*;

const BROWSER_ACCEPT: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
/// The issue's budget for everything the first load fetches, compressed.
const FIRST_LOAD_BUDGET: usize = 150 * 1024;

async fn fetch(
    d: &Daemon,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let mut req = http().get(d.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = req.send().await.expect("request");
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    (status, headers, res.bytes().await.expect("body").to_vec())
}

fn header<'a>(h: &'a reqwest::header::HeaderMap, name: &str) -> &'a str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

fn decode(encoding: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match encoding {
        "br" => brotli::Decompressor::new(body, 4096).read_to_end(&mut out).map(drop).expect("brotli"),
        "gzip" => flate2::read::GzDecoder::new(body).read_to_end(&mut out).map(drop).expect("gzip"),
        "" => out.extend_from_slice(body),
        other => panic!("unexpected Content-Encoding {other}"),
    }
    out
}

/// The `./x` and `assets/x` references in a text file: what a browser fetches next.
fn references(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for quote in ['"', '\''] {
        for part in text.split(quote).skip(1).step_by(2) {
            if let Some(name) = part.strip_prefix("assets/").or_else(|| part.strip_prefix("./"))
                && !name.is_empty()
                && !name.contains('/')
                && name.contains('.')
            {
                out.insert(name.to_owned());
            }
        }
    }
    out
}

#[tokio::test]
async fn root_is_json_for_api_clients_and_the_page_for_browsers() {
    let d = Daemon::start(&[]);
    let (status, h, body) = fetch(&d, "/", &[]).await;
    assert_eq!(status, 200);
    assert!(header(&h, "content-type").starts_with("application/json"));
    let body: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(body["name"], "mediatord");
    assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(body["links"]["openapi"], "/openapi.json");
    assert!(h.get_all("vary").iter().any(|v| v == "Accept"));

    let (status, h, body) = fetch(&d, "/", &[("Accept", BROWSER_ACCEPT)]).await;
    assert_eq!(status, 200);
    assert_eq!(header(&h, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&h, "cache-control"), "no-cache");
    let csp = header(&h, "content-security-policy");
    for directive in
        ["default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "connect-src 'self'"]
    {
        assert!(csp.contains(directive), "CSP {csp:?} lacks {directive}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
    assert_eq!(header(&h, "x-content-type-options"), "nosniff");
    assert_eq!(header(&h, "referrer-policy"), "no-referrer");
    let html = String::from_utf8(body).expect("utf-8");
    assert!(html.contains("<script type=\"module\" src=\"assets/app."), "{html}");
    assert!(
        !html.contains("<script>") && !html.contains("style="),
        "no inline script or style: the CSP forbids them"
    );
}

#[tokio::test]
async fn the_page_revalidates_with_its_etag() {
    let d = Daemon::start(&[]);
    let (_, h, _) = fetch(&d, "/", &[("Accept", BROWSER_ACCEPT)]).await;
    let etag = header(&h, "etag").to_owned();
    assert!(etag.starts_with('"') && etag.len() > 10, "{etag}");
    let (status, h, body) = fetch(&d, "/", &[("Accept", BROWSER_ACCEPT), ("If-None-Match", &etag)]).await;
    assert_eq!(status, 304);
    assert!(body.is_empty());
    assert_eq!(header(&h, "etag"), etag);
    let (status, _, _) = fetch(&d, "/", &[("Accept", BROWSER_ACCEPT), ("If-None-Match", "\"stale\"")]).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn assets_have_hashed_names_are_immutable_and_precompressed() {
    let d = Daemon::start(&[]);
    let (_, _, page) = fetch(&d, "/", &[("Accept", BROWSER_ACCEPT)]).await;
    let names = references(&String::from_utf8(page).expect("utf-8"));
    assert!(names.len() >= 5, "the page names its files: {names:?}");
    for name in names {
        // `app.0123456789.js`: the stem, ten hex digits, the extension.
        let parts: Vec<&str> = name.split('.').collect();
        assert!(
            parts.len() == 3 && parts[1].len() == 10 && parts[1].chars().all(|c| c.is_ascii_hexdigit()),
            "{name}"
        );
        let path = format!("/assets/{name}");
        let (status, h, identity) = fetch(&d, &path, &[]).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(header(&h, "cache-control"), "public, max-age=31536000, immutable", "{path}");
        assert_eq!(header(&h, "x-content-type-options"), "nosniff");
        assert_eq!(header(&h, "content-encoding"), "", "{path}: no coding unless asked");
        for coding in ["br", "gzip"] {
            let (status, h, body) = fetch(&d, &path, &[("Accept-Encoding", coding)]).await;
            assert_eq!(status, 200);
            let sent = header(&h, "content-encoding").to_owned();
            assert!(sent == coding || sent.is_empty(), "{path}: {coding} → {sent:?}");
            assert_eq!(decode(&sent, &body), identity, "{path}: {coding} decodes to the file");
        }
    }
    let (status, _, body) = fetch(&d, "/assets/app.0000000000.js", &[]).await;
    assert_eq!(status, 404);
    assert_eq!(serde_json::from_slice::<Value>(&body).expect("json")["code"], "asset_not_found");
}

/// Everything the first load fetches, transitively (the page, its style sheet, its modules and what
/// they import, the manifest and icon), summed as sent with brotli. Printed for docs/benchmarks.md.
#[tokio::test]
async fn the_first_load_weighs_at_most_150_kb_compressed() {
    let d = Daemon::start(&[]);
    let (_, h, page) = fetch(&d, "/", &[("Accept", BROWSER_ACCEPT), ("Accept-Encoding", "br, gzip")]).await;
    let mut total = page.len();
    let mut raw = decode(header(&h, "content-encoding"), &page).len();
    let mut todo: Vec<String> =
        references(&String::from_utf8(decode(header(&h, "content-encoding"), &page)).expect("utf-8"))
            .into_iter()
            .collect();
    let mut seen = BTreeSet::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let (status, h, body) =
            fetch(&d, &format!("/assets/{name}"), &[("Accept-Encoding", "br, gzip")]).await;
        assert_eq!(status, 200, "{name}");
        total += body.len();
        let plain = decode(header(&h, "content-encoding"), &body);
        raw += plain.len();
        if let Ok(text) = String::from_utf8(plain) {
            todo.extend(references(&text).into_iter().filter(|n| !seen.contains(n)));
        }
    }
    eprintln!("first load: {} files, {total} bytes compressed ({raw} bytes uncompressed)", seen.len() + 1);
    assert!(
        total <= FIRST_LOAD_BUDGET,
        "the first load is {total} bytes compressed, over the {FIRST_LOAD_BUDGET} budget"
    );
    let served: BTreeSet<String> = mediatord::http::web::files()
        .filter_map(|(p, _, _)| p.strip_prefix("/assets/").map(str::to_owned))
        .collect();
    assert_eq!(seen, served, "the page reaches every embedded file, and nothing else");
}

#[tokio::test]
async fn with_a_token_only_the_apps_files_are_served_without_it() {
    let d = Daemon::start(&["--token", "secret"]);
    let (status, _, page) = fetch(&d, "/", &[("Accept", BROWSER_ACCEPT)]).await;
    assert_eq!(status, 200, "a browser navigation cannot carry the token: the page asks for it");
    let asset = references(&String::from_utf8(page).expect("utf-8")).into_iter().next().expect("an asset");
    assert_eq!(fetch(&d, &format!("/assets/{asset}"), &[]).await.0, 200);
    let (status, h, body) = fetch(&d, "/", &[]).await;
    assert_eq!((status, header(&h, "www-authenticate")), (401, "Bearer"), "the JSON of / is the API's");
    assert_eq!(serde_json::from_slice::<Value>(&body).expect("json"), json!({"error": "Unauthorized"}));
    assert_eq!(fetch(&d, "/capabilities", &[("Accept", BROWSER_ACCEPT)]).await.0, 401);
    let res = http().post(d.url("/")).header("Accept", BROWSER_ACCEPT).send().await.expect("post");
    assert_eq!(res.status(), 401, "only GET and HEAD of the app are open");
}

#[tokio::test]
async fn the_pages_own_origin_is_let_in_and_every_other_is_refused() {
    let d = Daemon::start(&[]);
    let port = d.port;
    let post = |origin: String, host: String| {
        http()
            .post(d.url("/session"))
            .header("Origin", origin)
            .header("Host", host)
            .header("X-Qwen-Client-Id", "page")
            .json(&json!({}))
            .send()
    };
    // The page at http://127.0.0.1:P (or localhost:P) calls the API from its own origin.
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("LOCALHOST:{port}")] {
        let res = post(format!("http://{}", host.to_ascii_lowercase()), host.clone()).await.expect("post");
        assert_eq!(res.status(), 200, "{host}");
        assert!(
            res.headers().get("access-control-allow-origin").is_none(),
            "same-origin needs no CORS answer"
        );
    }
    let refused = [
        (format!("http://localhost:{port}"), format!("127.0.0.1:{port}")), // another origin than the one addressed
        (format!("https://127.0.0.1:{port}"), format!("127.0.0.1:{port}")), // another scheme
        (format!("http://127.0.0.1:{}", port.wrapping_add(1)), format!("127.0.0.1:{port}")), // another port
        ("http://evil.example".to_owned(), format!("127.0.0.1:{port}")),
        (format!("http://evil.example:{port}"), format!("evil.example:{port}")), // DNS rebinding: Host refused
        ("null".to_owned(), format!("127.0.0.1:{port}")),
    ];
    for (origin, host) in refused {
        let res = post(origin.clone(), host).await.expect("post");
        assert_eq!(res.status(), 403, "{origin}");
        let body: Value = res.json().await.expect("json");
        assert_eq!(body["code"], "origin_denied", "{origin}");
    }
}

#[tokio::test]
async fn the_public_urls_origin_is_the_daemons_own_too() {
    // Behind a TLS proxy the page's origin is the public one; --public-url says what it is.
    let d = Daemon::start(&["--public-url", "https://mediator.example"]);
    let res = http()
        .post(d.url("/session"))
        .header("Origin", "https://mediator.example")
        .header("X-Qwen-Client-Id", "page")
        .json(&json!({}))
        .send()
        .await
        .expect("post");
    assert_eq!(res.status(), 200);
    assert!(res.headers().get("access-control-allow-origin").is_none());
    let res = http()
        .post(d.url("/session"))
        .header("Origin", "https://other.example")
        .json(&json!({}))
        .send()
        .await;
    assert_eq!(res.expect("post").status(), 403);
}

/// The bounds the web app keeps alike with the terminal client come from one source: the served
/// app's `limits.js` is written from `src/bounds.rs` (each value the crate's), and `state.js` takes
/// its `MAX_TEXT` from it rather than a number of its own.
#[tokio::test]
async fn the_web_apps_shared_bounds_are_the_crates() {
    let d = Daemon::start(&[]);
    let (_, _, html) = fetch(&d, "/", &[("Accept", BROWSER_ACCEPT)]).await;
    let assets = references(&String::from_utf8(html).expect("utf-8"));
    let find = |stem: &str| {
        assets
            .iter()
            .find(|a| a.starts_with(stem))
            .cloned()
            .unwrap_or_else(|| panic!("no {stem}* in {assets:?}"))
    };
    let (limits, state) = (find("limits."), find("state."));
    let (status, _, body) = fetch(&d, &format!("/assets/{limits}"), &[]).await;
    assert_eq!(status, 200);
    let body = String::from_utf8(body).expect("utf-8");
    let exported: Vec<&str> = body.lines().filter(|l| l.starts_with("export const ")).collect();
    let expected: Vec<String> = mediatord::bounds::SHARED_WITH_THE_WEB_APP
        .iter()
        .map(|(name, value)| format!("export const {name} = {value};"))
        .collect();
    assert_eq!(exported, expected, "{body}");
    assert!(expected.contains(&format!("export const MAX_TEXT = {};", mediatord::bounds::MAX_TEXT)));
    let (_, _, state_js) = fetch(&d, &format!("/assets/{state}"), &[]).await;
    let state_js = String::from_utf8(state_js).expect("utf-8");
    assert!(state_js.contains(&format!("import {{ MAX_TEXT }} from './{limits}';")), "{state_js}");
    assert!(!state_js.contains("const MAX_TEXT"), "state.js has a MAX_TEXT of its own");
}

/// The screenshots in docs/screenshots/ are made by tests/browser.rs from the app as it is: the file
/// `bundle.txt` beside them names the build of `web/` they show, and must name this one.
#[test]
fn the_committed_screenshots_show_this_version_of_the_app() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots");
    let recorded = std::fs::read_to_string(dir.join("bundle.txt")).unwrap_or_default();
    assert_eq!(
        recorded.trim(),
        mediatord::http::web::BUNDLE_HASH,
        "docs/screenshots/ shows another version of web/: regenerate the pictures with \
         MEDIATORD_UPDATE_SCREENSHOTS=1 cargo test --test browser screenshots"
    );
    for name in ["phone.png", "phone-approval.png", "desktop.png"] {
        let png = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("docs/screenshots/{name}: {e}"));
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is a PNG");
    }
}

//! The web app (`docs/protocol.md#13-the-web-app`): `GET /` answers a browser with the page and an API
//! client with a JSON pointer to the API; `GET /assets/{file}` serves the page's scripts, styles and
//! icons. Everything is embedded at build time by `build.rs` from `web/`: hashed names, and gzip and
//! brotli variants made once, chosen here by `Accept-Encoding`.
//!
//! The page and its assets hold no secret, so they are the one thing served without the bearer token
//! ([`is_public`]): a browser cannot send `Authorization` on a navigation, and the page asks for the
//! token itself. The page's API calls go through the perimeter like any client's.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::error::ApiError;

/// One embedded file.
#[derive(Debug)]
struct Asset {
    /// `index.html`, or the content-hashed file name under `/assets/`.
    name: &'static str,
    content_type: &'static str,
    /// A strong ETag: the start of the SHA-256 of `identity`, quoted.
    etag: &'static str,
    identity: &'static [u8],
    /// Present only when smaller than `identity`.
    gzip: Option<&'static [u8]>,
    br: Option<&'static [u8]>,
}

include!(concat!(env!("OUT_DIR"), "/web_assets.rs"));

/// The page's Content-Security-Policy: its own files only, no inline script or style, no framing,
/// API calls to this origin only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
    connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/// Hashed names never change content: a year, and no revalidation.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// Whether `req` asks for the web app's files, which need no token: `GET`/`HEAD` of `/` from a
/// browser (`Accept` names `text/html`), or of anything under `/assets/`.
pub(super) fn is_public(req: &Request) -> bool {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return false;
    }
    let path = req.uri().path();
    path.starts_with("/assets/") || (path == "/" && wants_html(req.headers()))
}

/// Whether `Accept` names `text/html` (a browser navigation does; curl's `*/*` and API clients do not).
fn wants_html(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).any(|accept| {
        accept.split(',').any(|range| {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim();
            media.eq_ignore_ascii_case("text/html") && quality(parts) > 0.0
        })
    })
}

/// The `q` parameter among a header element's parameters (1 when absent or unreadable).
fn quality<'a>(mut params: impl Iterator<Item = &'a str>) -> f32 {
    params
        .find_map(|p| p.trim().strip_prefix("q=").or_else(|| p.trim().strip_prefix("Q=")))
        .and_then(|q| q.trim().parse::<f32>().ok())
        .unwrap_or(1.0)
}

/// A content coding the client accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coding {
    Brotli,
    Gzip,
    Identity,
}

/// The best coding `Accept-Encoding` allows among brotli, gzip and none (RFC 9110 §12.5.3: a
/// coding with `q=0` is refused; `*` stands for the codings not named).
fn negotiate(headers: &HeaderMap) -> Coding {
    let mut br = None;
    let mut gzip = None;
    let mut any = None;
    for value in headers.get_all(header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()) {
        for element in value.split(',') {
            let mut parts = element.split(';');
            let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = quality(parts);
            match coding.as_str() {
                "br" => br = Some(q),
                "gzip" | "x-gzip" => gzip = Some(q),
                "*" => any = Some(q),
                _ => {}
            }
        }
    }
    let accepts = |named: Option<f32>| named.or(any).is_some_and(|q| q > 0.0);
    if accepts(br) {
        Coding::Brotli
    } else if accepts(gzip) {
        Coding::Gzip
    } else {
        Coding::Identity
    }
}

/// Whether `If-None-Match` names `etag` (or is `*`); weak validators compare equal (RFC 9110 §13.1.2).
fn not_modified(headers: &HeaderMap, etag: &str) -> bool {
    headers.get_all(header::IF_NONE_MATCH).iter().filter_map(|v| v.to_str().ok()).any(|list| {
        list.split(',').map(str::trim).any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
    })
}

/// The headers every file of the app carries: no sniffing, no referrer, no framing.
fn protect(headers: &mut HeaderMap) {
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
}

/// `asset` in the best coding `request` accepts, with `cache_control`.
fn serve(asset: &Asset, request: &HeaderMap, cache_control: &'static str) -> Response {
    let (coding, body) = match negotiate(request) {
        Coding::Brotli if asset.br.is_some() => (Some("br"), asset.br),
        Coding::Brotli | Coding::Gzip if asset.gzip.is_some() => (Some("gzip"), asset.gzip),
        _ => (None, Some(asset.identity)),
    };
    let mut response = if not_modified(request, asset.etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        body.unwrap_or(asset.identity).into_response()
    };
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache_control));
    h.insert(header::ETAG, HeaderValue::from_static(asset.etag));
    h.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    if let Some(coding) = coding {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(coding));
    }
    protect(h);
    response
}

/// `GET /`: the page for a browser, revalidated on every load (its name never changes); for anyone
/// else, what this is and where its API is described.
pub(super) async fn root(headers: HeaderMap) -> Response {
    if wants_html(&headers) {
        let mut response = serve(&INDEX, &headers, "no-cache");
        let h = response.headers_mut();
        h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
        h.append(header::VARY, HeaderValue::from_static("Accept"));
        return response;
    }
    let body = json!({
        "name": "mediatord",
        "version": env!("CARGO_PKG_VERSION"),
        "links": {
            "openapi": "/openapi.json",
            "capabilities": "/capabilities",
            "health": "/health",
            "agents": "/agents",
            "app": "/",
        },
    });
    let mut response = axum::Json(body).into_response();
    response.headers_mut().append(header::VARY, HeaderValue::from_static("Accept"));
    response
}

/// `GET /assets/{file}`: an embedded file by its hashed name, cached for good. The name is read from
/// the raw path: hashed names are plain ASCII, so anything percent-encoded names no file.
pub(super) async fn asset(uri: Uri, headers: HeaderMap) -> Result<Response, ApiError> {
    let file = uri.path().strip_prefix("/assets/").unwrap_or_default();
    let asset = ASSETS.iter().find(|a| a.name == file).ok_or(ApiError::AssetNotFound)?;
    Ok(serve(asset, &headers, IMMUTABLE))
}

/// Every file the app serves: `(path, content type, identity bytes)`, the page first. For the page
/// weight measured by the tests and `GET /` clients that want a manifest of the app.
pub fn files() -> impl Iterator<Item = (String, &'static str, &'static [u8])> {
    std::iter::once(("/".to_owned(), INDEX.content_type, INDEX.identity))
        .chain(ASSETS.iter().map(|a| (format!("/assets/{}", a.name), a.content_type, a.identity)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn accept_encoding_picks_brotli_then_gzip_and_honours_q_zero() {
        let cases = [
            ("gzip, deflate, br, zstd", Coding::Brotli),
            ("gzip, deflate", Coding::Gzip),
            ("br;q=0, gzip", Coding::Gzip),
            ("BR;Q=0.5", Coding::Brotli),
            ("*", Coding::Brotli),
            ("*;q=0, gzip", Coding::Gzip),
            ("gzip;q=0, br;q=0", Coding::Identity),
            ("identity", Coding::Identity),
            ("", Coding::Identity),
        ];
        for (value, want) in cases {
            assert_eq!(negotiate(&headers(&[("accept-encoding", value)])), want, "{value:?}");
        }
        assert_eq!(negotiate(&HeaderMap::new()), Coding::Identity);
    }

    #[test]
    fn only_an_accept_naming_text_html_gets_the_page() {
        let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
        assert!(wants_html(&headers(&[("accept", browser)])));
        assert!(!wants_html(&headers(&[("accept", "*/*")])));
        assert!(!wants_html(&headers(&[("accept", "application/json")])));
        assert!(!wants_html(&headers(&[("accept", "text/html;q=0")])));
        assert!(!wants_html(&HeaderMap::new()));
    }

    #[test]
    fn if_none_match_compares_strong_weak_and_star() {
        let etag = "\"abc\"";
        assert!(not_modified(&headers(&[("if-none-match", "\"abc\"")]), etag));
        assert!(not_modified(&headers(&[("if-none-match", "W/\"abc\"")]), etag));
        assert!(not_modified(&headers(&[("if-none-match", "\"x\", \"abc\"")]), etag));
        assert!(not_modified(&headers(&[("if-none-match", "*")]), etag));
        assert!(!not_modified(&headers(&[("if-none-match", "\"abcd\"")]), etag));
        assert!(!not_modified(&HeaderMap::new(), etag));
    }

    #[test]
    fn every_compressed_variant_decodes_to_its_file_and_is_smaller() {
        use std::io::Read as _;
        for asset in std::iter::once(&INDEX).chain(ASSETS.iter()) {
            assert!(asset.etag.starts_with('"') && asset.etag.ends_with('"'), "{}", asset.name);
            if let Some(gz) = asset.gzip {
                let mut plain = Vec::new();
                flate2::read::GzDecoder::new(gz).read_to_end(&mut plain).expect("gunzip");
                assert_eq!(plain, asset.identity, "{}: gzip", asset.name);
                assert!(gz.len() < asset.identity.len(), "{}: kept only when smaller", asset.name);
            }
            if let Some(br) = asset.br {
                let mut plain = Vec::new();
                brotli::Decompressor::new(br, 4096).read_to_end(&mut plain).expect("unbrotli");
                assert_eq!(plain, asset.identity, "{}: brotli", asset.name);
                assert!(br.len() < asset.identity.len(), "{}: kept only when smaller", asset.name);
            }
        }
        assert!(ASSETS.iter().all(|a| a.name != "index.html"));
    }
}

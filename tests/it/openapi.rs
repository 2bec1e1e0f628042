//! The OpenAPI document: checked in byte for byte, shaped as OpenAPI 3.1, served at
//! `/openapi.json`, and in agreement with the router (every documented operation is routed, no
//! undocumented method answers on a documented path, every error status is `ApiError`'s).
//!
//! Regenerate `docs/openapi.json` after changing the route table or a schema:
//! `MEDIATORD_UPDATE_OPENAPI=1 cargo test --test it openapi`.

use std::collections::{BTreeSet, HashSet};

use mediatord::http::ApiError;
use serde_json::Value;

use crate::support::*;

const CHECKED_IN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");
const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

fn doc() -> Value {
    mediatord::http::api::document()
}

#[test]
fn the_checked_in_document_is_current() {
    let fresh = mediatord::http::api::document_text();
    if std::env::var_os("MEDIATORD_UPDATE_OPENAPI").is_some() {
        std::fs::write(CHECKED_IN, &fresh).expect("write docs/openapi.json");
    }
    let on_disk = std::fs::read_to_string(CHECKED_IN).unwrap_or_default();
    assert!(
        on_disk == fresh,
        "docs/openapi.json is stale; regenerate it with `MEDIATORD_UPDATE_OPENAPI=1 cargo test --test it openapi`"
    );
}

/// Every `$ref` in `v`.
fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r),
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[test]
fn the_document_is_openapi_3_1() {
    let doc = doc();
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());
    let mut all_refs = Vec::new();
    refs(&doc, &mut all_refs);
    for r in all_refs {
        let pointer = r.strip_prefix('#').unwrap_or_else(|| panic!("external $ref {r}"));
        assert!(doc.pointer(pointer).is_some(), "dangling $ref {r}");
    }
    let mut ids = HashSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        assert!(path.starts_with('/'), "{path}");
        let declared: BTreeSet<&str> = mediatord::http::openapi::path_params(path).into_iter().collect();
        for (method, op) in item.as_object().expect("path item") {
            assert!(METHODS.contains(&method.as_str()), "{method} {path}");
            assert!(ids.insert(op["operationId"].as_str().expect("operationId")), "duplicate operationId");
            let params: BTreeSet<&str> = op["parameters"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .filter(|p| p["in"] == "path")
                        .map(|p| p["name"].as_str().expect("name"))
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(params, declared, "path parameters of {method} {path}");
            let responses = op["responses"].as_object().expect("responses");
            // A redirect route's success is its 302 (the sign-in's: to the provider, back to the app).
            assert!(
                responses.keys().any(|s| s.starts_with('2') || s == "302"),
                "{method} {path} has no success"
            );
            for (status, r) in responses {
                let n: u16 = status.parse().expect("numeric status");
                assert!((200..600).contains(&n));
                assert!(r["description"].is_string(), "{method} {path} {status} description");
            }
        }
    }
}

#[test]
fn every_documented_error_status_is_the_one_api_error_gives() {
    let doc = doc();
    let mut seen = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("item") {
            for (status, r) in op["responses"].as_object().expect("responses") {
                let Some(codes) = r.pointer("/content/application~1json/schema/properties/code/enum") else {
                    continue;
                };
                for code in codes.as_array().expect("enum") {
                    let code = code.as_str().expect("code");
                    let e = ApiError::by_code(code).unwrap_or_else(|| panic!("unknown code {code}"));
                    assert_eq!(e.status().as_str(), status, "{method} {path}: {code}");
                    seen += 1;
                }
            }
        }
    }
    assert!(seen > 50, "only {seen} documented error codes");
    // And ApiError's own list is whole: every code distinct.
    let codes: HashSet<&str> = ApiError::all().iter().map(ApiError::code).collect();
    assert_eq!(codes.len(), ApiError::all().len());
}

/// A concrete URL path for a documented one: `{id}` → `x`, the workspace's cwd URL-encoded.
fn concrete(path: &str) -> String {
    path.replace("{cwd}", "%2Ftmp")
        .replace("{id}", "x")
        .replace("{request_id}", "x")
        .replace("{rule_id}", "x")
}

#[tokio::test]
async fn the_router_and_the_document_agree() {
    let d = Daemon::start(&[]);
    let served: Value =
        http().get(d.url("/openapi.json")).send().await.expect("get").json().await.expect("json");
    assert_eq!(served, doc(), "GET /openapi.json serves the document");
    let client = http();
    for (path, item) in doc()["paths"].as_object().expect("paths") {
        let url = d.url(&concrete(path));
        for method in METHODS {
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let mut req = client.request(m, &url);
            if method != "get" && method != "delete" {
                req = req.header("content-type", "application/json").body("{}");
            }
            let res = req.send().await.expect("send");
            let status = res.status().as_u16();
            let body: Value = res.json().await.unwrap_or(Value::Null);
            if item.get(method).is_some() {
                // An unknown action link answers the 404 of an unknown route, by design.
                if !path.contains("{token}") {
                    assert_ne!(
                        body["code"], "route_not_found",
                        "{method} {path} is documented but not routed"
                    );
                }
                assert_ne!(status, 405, "{method} {path} is documented but not routed");
                let documented = item[method]["responses"].get(status.to_string());
                assert!(documented.is_some(), "{method} {path} answered an undocumented {status}: {body}");
            } else {
                assert_eq!(status, 405, "{method} {path} answers but is not documented: {body}");
            }
        }
    }
    // And nothing outside the document is routed.
    let res = client.get(d.url("/session")).send().await.expect("send");
    assert_eq!(res.status(), 405);
    let res = client.get(d.url("/sessions")).send().await.expect("send");
    assert_eq!(res.status(), 404);
}

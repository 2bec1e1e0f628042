//! Embeds the web app (`web/`) in the binary, ready to serve: every file except `index.html` gets a
//! content-hashed name (`app.js` → `app.3f9c0e12ab.js`, served under `/assets/` with an immutable
//! cache), references between files are rewritten to those names, and each file is stored as is,
//! gzipped and brotli-compressed (the smaller variants only). The result is `web_assets.rs` in
//! `OUT_DIR`, which `src/http/web.rs` includes. No Node, no network: `cargo build` is the build step.
//!
//! A reference is written `./<file name>` in any text file of `web/` (an ES module import, a CSS
//! `url(./x.svg)`, a manifest icon, an attribute in `index.html`), quoted or in `url(...)`. A file's
//! hash covers its rewritten bytes, so it changes whenever anything it loads changes: the files are
//! hashed in dependency order, and a reference cycle is refused.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Hex digits of the content hash in a file name: 40 bits, plenty to tell versions of one file apart.
const HASH_HEX: usize = 10;
/// The page itself: served at `/` with revalidation, never renamed.
const ENTRY: &str = "index.html";
/// Where the page finds the other files (what `./name` becomes in `index.html`).
const ASSET_PREFIX: &str = "assets/";
/// brotli at its best: the cost is paid once per build, on a few tens of kilobytes.
const BROTLI_QUALITY: u32 = 11;
const BROTLI_WINDOW: u32 = 22;

/// The bounds the web app keeps alike with the terminal client: `src/bounds.rs`, compiled here
/// too, is the one source of the `limits.js` this script adds to the app.
#[allow(dead_code, unreachable_pub)]
mod bounds {
    include!("src/bounds.rs");
}

/// The generated module's name in the app (no file of `web/` may take it).
const LIMITS: &str = "limits.js";

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let web = Path::new(&manifest).join("web");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo::rerun-if-changed=web");
    println!("cargo::rerun-if-changed=src/bounds.rs");

    let mut sources = read_sources(&web);
    assert!(!sources.contains_key(LIMITS), "web/{LIMITS} is written by build.rs (from src/bounds.rs)");
    sources.insert(LIMITS.to_owned(), bounds::limits_js().into_bytes());
    let order = dependency_order(&sources);
    let mut hashed: BTreeMap<String, String> = BTreeMap::new();
    let mut built: Vec<Built> = Vec::new();
    for name in order {
        let source = &sources[&name];
        let is_entry = name == ENTRY;
        let prefix = if is_entry { ASSET_PREFIX } else { "./" };
        let bytes = rewrite(source, &hashed, prefix);
        let digest = hex(&Sha256::digest(&bytes));
        let served = if is_entry { name.clone() } else { hashed_name(&name, &digest[..HASH_HEX]) };
        hashed.insert(name.clone(), served.clone());
        built.push(Built { served, content_type: content_type(&name), digest, bytes });
    }
    let code = generate(&built, &out);
    std::fs::write(out.join("web_assets.rs"), code).expect("write web_assets.rs");
}

/// One file as served.
struct Built {
    /// `index.html`, or the hashed name under `/assets/`.
    served: String,
    content_type: &'static str,
    /// SHA-256 of `bytes`, hex.
    digest: String,
    bytes: Vec<u8>,
}

/// Every file of `web/` (flat: one directory), by name.
fn read_sources(web: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut sources = BTreeMap::new();
    let entries = std::fs::read_dir(web).unwrap_or_else(|e| panic!("cannot read {}: {e}", web.display()));
    for entry in entries {
        let entry = entry.expect("a directory entry of web/");
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        assert!(path.is_file(), "web/ is flat: {} is not a file", path.display());
        assert!(
            name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_'),
            "web/{name}: file names are [A-Za-z0-9._-]"
        );
        println!("cargo::rerun-if-changed=web/{name}");
        sources.insert(name, std::fs::read(&path).expect("read a web/ file"));
    }
    assert!(sources.contains_key(ENTRY), "web/{ENTRY} is missing");
    sources
}

/// The ways a text file names another: `"./x"`, `'./x'`, `(./x)`.
fn reference_forms(name: &str) -> [String; 3] {
    [format!("\"./{name}\""), format!("'./{name}'"), format!("(./{name})")]
}

fn references(source: &[u8], name: &str) -> bool {
    let text = String::from_utf8_lossy(source);
    reference_forms(name).iter().any(|form| text.contains(form.as_str()))
}

/// The files in an order where each comes after everything it references.
fn dependency_order(sources: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let deps: BTreeMap<&str, BTreeSet<&str>> = sources
        .iter()
        .map(|(name, source)| {
            let uses = sources.keys().filter(|other| *other != name && references(source, other));
            (name.as_str(), uses.map(String::as_str).collect())
        })
        .collect();
    let mut done: Vec<String> = Vec::new();
    while done.len() < sources.len() {
        let ready: Vec<&str> = deps
            .iter()
            .filter(|(name, uses)| {
                !done.iter().any(|d| d == *name) && uses.iter().all(|u| done.iter().any(|d| d == u))
            })
            .map(|(name, _)| *name)
            .collect();
        assert!(
            !ready.is_empty(),
            "web/: a reference cycle among {:?}: hashed names need an acyclic graph",
            { deps.keys().filter(|n| !done.iter().any(|d| d == *n)).collect::<Vec<_>>() }
        );
        done.extend(ready.into_iter().map(str::to_owned));
    }
    done
}

/// `source` with every reference to an already hashed file replaced by `prefix` + its hashed name.
fn rewrite(source: &[u8], hashed: &BTreeMap<String, String>, prefix: &str) -> Vec<u8> {
    let Ok(text) = std::str::from_utf8(source) else { return source.to_vec() };
    let mut text = text.to_owned();
    for (name, served) in hashed {
        let [dq, sq, paren] = reference_forms(name);
        text = text
            .replace(&dq, &format!("\"{prefix}{served}\""))
            .replace(&sq, &format!("'{prefix}{served}'"))
            .replace(&paren, &format!("({prefix}{served})"));
    }
    text.into_bytes()
}

/// `app.js` + `3f9c…` → `app.3f9c….js`.
fn hashed_name(name: &str, hash: &str) -> String {
    match name.rsplit_once('.') {
        Some((stem, ext)) => format!("{stem}.{hash}.{ext}"),
        None => format!("{name}.{hash}"),
    }
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map_or("", |(_, ext)| ext) {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "webmanifest" => "application/manifest+json",
        "json" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        other => panic!("web/{name}: no content type known for .{other}; add it to build.rs"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

fn brotli(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut writer = brotli::CompressorWriter::new(&mut out, 64 * 1024, BROTLI_QUALITY, BROTLI_WINDOW);
        writer.write_all(bytes).expect("brotli into memory");
    }
    out
}

/// Writes each variant into `out` and returns the Rust that embeds them.
fn generate(built: &[Built], out: &Path) -> String {
    let mut code = String::from("// Generated by build.rs from web/; do not edit.\n\n");
    let mut all = Sha256::new();
    let mut assets: Vec<String> = Vec::new();
    let mut index = None;
    for file in built {
        all.update(file.served.as_bytes());
        all.update(&file.bytes);
        let write = |suffix: &str, bytes: &[u8]| -> String {
            let path = out.join(format!("web-{}{suffix}", file.served));
            std::fs::write(&path, bytes).expect("write an embedded web file");
            format!("include_bytes!({:?})", path.to_str().expect("OUT_DIR is UTF-8"))
        };
        let variant = |suffix: &str, bytes: Vec<u8>| -> String {
            if bytes.len() < file.bytes.len() {
                format!("Some({})", write(suffix, &bytes))
            } else {
                "None".into()
            }
        };
        let literal = format!(
            "Asset {{ name: {:?}, content_type: {:?}, etag: {:?}, identity: {}, gzip: {}, br: {} }}",
            file.served,
            file.content_type,
            format!("\"{}\"", &file.digest[..HASH_HEX * 2]),
            write("", &file.bytes),
            variant(".gz", gzip(&file.bytes)),
            variant(".br", brotli(&file.bytes)),
        );
        if file.served == ENTRY {
            index = Some(literal);
        } else {
            assets.push(literal);
        }
    }
    assets.sort();
    let _ = writeln!(
        code,
        "/// `index.html`, served at `/`.\nstatic INDEX: Asset = {};\n",
        index.expect("the entry")
    );
    let _ = writeln!(
        code,
        "/// Every other file of `web/`, by hashed name (sorted), served under `/assets/`.\nstatic ASSETS: [Asset; {}] = [\n    {}\n];\n",
        assets.len(),
        assets.join(",\n    ")
    );
    let _ = writeln!(
        code,
        "/// A digest of everything the app serves: it changes whenever any file of `web/` does.\npub const BUNDLE_HASH: &str = {:?};",
        &hex(&all.finalize())[..HASH_HEX * 2]
    );
    code
}

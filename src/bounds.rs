// The bounds the daemon's clients keep alike: the terminal client (`tui`) reads them here, the web
// app from `limits.js`, which build.rs writes from this very file (it includes it) into the
// embedded app. So this file imports nothing and has no inner doc comment.

/// Bytes of one message or thought a client keeps (the web app counts UTF-16 units); beyond it
/// the start is dropped and the end, the latest, kept.
pub const MAX_TEXT: usize = 1024 * 1024;

/// What build.rs writes into the web app's `limits.js`, each as `export const NAME = value;`.
pub const SHARED_WITH_THE_WEB_APP: &[(&str, usize)] = &[("MAX_TEXT", MAX_TEXT)];

/// The web app's `limits.js`: [`SHARED_WITH_THE_WEB_APP`] as ES module constants (build.rs embeds
/// it; a test that runs `web/`'s modules from the source tree writes it beside them).
pub fn limits_js() -> String {
    let mut js =
        String::from("// Written from src/bounds.rs: the bounds every client of the daemon keeps alike.\n");
    for (name, value) in SHARED_WITH_THE_WEB_APP {
        js.push_str(&format!("export const {name} = {value};\n"));
    }
    js
}

//! The README's quick start, run as written with the freshly built binary (in place of `cargo
//! install`): the runner is `support::quickstart`, which `tests/package.rs` also runs against the
//! installed binaries.

use crate::support::bin;
use crate::support::quickstart::{README, line_matches, run, transcript_matches};

#[test]
fn the_readme_quick_start_runs_as_written_and_prints_what_it_shows() {
    for install in ["cargo install --locked --path .", "cargo install --locked mediatord"] {
        assert!(
            README.contains(&format!("```sh\n{install}\n```")),
            "README.md should install with `{install}`"
        );
    }
    run(std::path::Path::new(bin()));
}

#[test]
fn transcripts_match_with_ellipses() {
    let e = |lines: &[&str]| lines.iter().map(|l| (*l).to_owned()).collect::<Vec<_>>();
    assert!(line_matches("demo-…", "demo-123"));
    assert!(line_matches("{…\"a\":1…}", "{\"b\":2,\"a\":1,\"c\":3}"));
    assert!(!line_matches("demo-…", "other"));
    assert!(!line_matches("a…b", "ab-c"));
    assert!(!line_matches("ab…b", "ab"), "the prefix and the suffix may not overlap");
    assert!(!line_matches("exact", "exact and more"));
    assert!(transcript_matches(&e(&["a", "…", "z"]), &e(&["a", "b", "c", "z"])));
    assert!(transcript_matches(&e(&["a", "…", "z"]), &e(&["a", "z"])));
    assert!(!transcript_matches(&e(&["a", "z"]), &e(&["a", "b", "z"])));
    assert!(!transcript_matches(&e(&["a"]), &e(&["a", "b"])));
}

//! `packaging/release-notes.sh`: the section of CHANGELOG.md the release workflow publishes as a
//! release's notes (`.github/workflows/release.yml`), and the changelog it reads.

use std::process::{Command, Output};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/release-notes.sh");
const CHANGELOG: &str = include_str!("../../CHANGELOG.md");

fn notes(version: &str, changelog: &str) -> Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("CHANGELOG.md");
    std::fs::write(&path, changelog).expect("write");
    Command::new("bash").arg(SCRIPT).arg(version).arg(&path).output().expect("run release-notes.sh")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const SAMPLE: &str = "# Changelog\n\nIntro.\n\n## [Unreleased]\n\n### Added\n\n- next\n\n\
## [0.2.0] - 2026-12-01\n\n### Fixed\n\n- a fix\n  on two lines\n\n### Added\n\n- a thing\n\n\
## [0.1.0] - 2026-11-01\n\n- the first\n";

#[test]
fn the_notes_are_the_versions_section_alone() {
    let out = notes("0.2.0", SAMPLE);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "### Fixed\n\n- a fix\n  on two lines\n\n### Added\n\n- a thing\n");
    let last = notes("0.1.0", SAMPLE);
    assert_eq!(text(&last.stdout), "- the first\n");
    let unreleased = notes("Unreleased", SAMPLE);
    assert_eq!(text(&unreleased.stdout), "### Added\n\n- next\n");
}

#[test]
fn a_version_without_a_section_or_with_an_empty_one_has_no_notes() {
    for (version, changelog) in [
        ("0.3.0", SAMPLE),
        // A prefix of a version is not that version.
        ("0.2", SAMPLE),
        ("0.2.0", "# Changelog\n\n## [0.2.0] - 2026-12-01\n\n \n## [0.1.0]\n\n- x\n"),
    ] {
        let out = notes(version, changelog);
        assert_eq!(out.status.code(), Some(1), "{version}: {}", text(&out.stdout));
        assert_eq!(text(&out.stdout), "");
        assert!(text(&out.stderr).starts_with("release-notes: "), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(&format!("\"## [{version}]\"")), "{}", text(&out.stderr));
    }
}

#[test]
fn the_changelog_keeps_an_unreleased_section_and_dated_versions() {
    assert!(CHANGELOG.starts_with("# Changelog\n"));
    let headings: Vec<&str> = CHANGELOG.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(headings.first(), Some(&"## [Unreleased]"), "the next release's entries go on top");
    for heading in &headings[1..] {
        // `## [X.Y.Z] - YYYY-MM-DD`, the heading release-notes.sh looks for.
        let (version, date) = heading
            .strip_prefix("## [")
            .and_then(|h| h.split_once("] - "))
            .unwrap_or_else(|| panic!("{heading:?} is not `## [X.Y.Z] - YYYY-MM-DD`"));
        assert!(version.split('.').count() >= 3, "{heading:?}");
        assert!(date.len() == 10 && date.chars().filter(|c| *c == '-').count() == 2, "{heading:?}");
    }
}

//! The snapshot engine, on real directories: what a snapshot holds and skips, what it reads again,
//! what survives the engine, and the change sets and diffs between snapshots.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use super::super::manifest::{self, Kind};
use super::super::objects::Objects;
use super::*;

/// A later walk start than anything the test writes: what it wrote counts as settled.
fn later() -> i64 {
    scan::now_ns() + 10 * scan::RACY_MARGIN_NS
}

struct Fixture {
    _root: tempfile::TempDir,
    ws: PathBuf,
    state: PathBuf,
}

fn fixture() -> Fixture {
    let root = tempfile::tempdir().expect("tempdir");
    let base = fs::canonicalize(root.path()).expect("canonical");
    let (ws, state) = (base.join("ws"), base.join("state"));
    fs::create_dir_all(&ws).expect("ws");
    Fixture { _root: root, ws, state }
}

fn write(ws: &Path, rel: &str, content: &str) {
    let path = ws.join(rel);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, content).expect("write");
}

fn paths(s: &Snapshot) -> Vec<&str> {
    s.manifest.entries.keys().map(String::as_str).collect()
}

fn engine(f: &Fixture) -> Changes {
    Changes::open(Some(&f.state), LIMITS).expect("open")
}

/// A workspace whose `a.txt` held `before` at a first snapshot and `after` at a second: the
/// fixture, its engine and both snapshots.
fn rewritten(before: &str, after: &str) -> (Fixture, Changes, Snapshot, Snapshot) {
    let f = fixture();
    write(&f.ws, "a.txt", before);
    let changes = engine(&f);
    let first = changes.snapshot_at(&f.ws, later()).expect("first");
    write(&f.ws, "a.txt", after);
    let second = changes.snapshot_at(&f.ws, later()).expect("second");
    (f, changes, first, second)
}

#[test]
fn a_snapshot_holds_the_files_and_skips_git_ignored_and_the_store() {
    let f = fixture();
    write(&f.ws, "a.txt", "a\n");
    write(&f.ws, "src/lib.rs", "fn x() {}\n");
    write(&f.ws, ".gitignore", "target/\n*.log\n!keep.log\n");
    write(&f.ws, "target/debug/big", "built");
    write(&f.ws, "run.log", "noise");
    write(&f.ws, "keep.log", "kept");
    // A pattern with a slash is anchored at its own file's folder: `sub/only/x` only.
    write(&f.ws, "sub/.gitignore", "local.txt\n/only/x\n");
    write(&f.ws, "sub/local.txt", "ignored here");
    write(&f.ws, "sub/only/x", "ignored: anchored at sub/");
    write(&f.ws, "sub/deeper/only/x", "kept: the anchor is sub/, not any folder");
    write(&f.ws, "local.txt", "not ignored at the root");
    write(&f.ws, ".git/HEAD", "ref: refs/heads/main\n");
    write(&f.ws, ".git/info/exclude", "secret.env\n");
    write(&f.ws, "secret.env", "x");
    write(&f.ws, "vendor/.git", "gitdir: elsewhere");
    symlink("a.txt", f.ws.join("link")).expect("symlink");
    fs::set_permissions(f.ws.join("src/lib.rs"), fs::Permissions::from_mode(0o755)).expect("chmod");
    // The store inside the workspace is never snapshotted.
    let changes = Changes::open(Some(&f.ws.join(".state")), LIMITS).expect("open");
    let s = changes.snapshot_at(&f.ws, later()).expect("snapshot");
    assert_eq!(
        paths(&s),
        [
            ".gitignore",
            "a.txt",
            "keep.log",
            "link",
            "local.txt",
            "src/lib.rs",
            "sub/.gitignore",
            "sub/deeper/only/x"
        ]
    );
    let e = |p: &str| s.manifest.entries[p];
    assert_eq!((e("a.txt").kind, e("a.txt").size), (Kind::File, 2));
    assert_eq!(e("src/lib.rs").kind, Kind::Executable);
    assert_eq!(e("link").kind, Kind::Symlink);
    assert_eq!(changes.content(&e("link")).expect("target"), b"a.txt");
    assert_eq!(changes.content(&e("a.txt")).expect("content"), b"a\n");
    assert_eq!(s.stats.hashed, 8);
}

/// A workspace with `a/b/x.tmp` and `a/b/y.txt` (and an ignore file holding its patterns, when
/// given), its engine, and a first snapshot of it.
fn two_files(ignore: Option<(&str, &str)>) -> (Fixture, Changes, Snapshot) {
    let f = fixture();
    if let Some((file, patterns)) = ignore {
        write(&f.ws, file, patterns);
    }
    write(&f.ws, "a/b/x.tmp", "x");
    write(&f.ws, "a/b/y.txt", "y");
    let changes = engine(&f);
    let first = changes.snapshot_at(&f.ws, later()).expect("first");
    (f, changes, first)
}

/// Runs `scan` on a thread of its own and waits for its answer within a bound far above a small
/// snapshot on a loaded machine: a scan that blocks (an open waiting for a pipe's writer) fails
/// the test instead of hanging it.
fn bounded<T: Send + 'static>(scan: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(scan());
    });
    finished.recv_timeout(std::time::Duration::from_secs(60)).expect("the snapshot ended")
}

#[test]
fn an_unchanged_workspace_is_stat_only_and_keeps_its_snapshot_id() {
    let f = fixture();
    for i in 0..50 {
        write(&f.ws, &format!("d{}/f{i}.txt", i % 5), &format!("{i}\n"));
    }
    let changes = engine(&f);
    let first = changes.snapshot_at(&f.ws, later()).expect("first");
    assert_eq!((first.stats.hashed, first.stats.files, first.stats.directories_read), (50, 50, 6));
    assert_eq!(first.stats.directories, 6, "the root and its five folders");
    let again = changes.snapshot_at(&f.ws, later()).expect("again");
    assert_eq!(again.id, first.id);
    assert_eq!((again.stats.hashed, again.stats.directories_read), (0, 0), "nothing read: {:?}", again.stats);
    write(&f.ws, "d1/f1.txt", "one\n");
    write(&f.ws, "d2/new.txt", "new\n");
    fs::remove_file(f.ws.join("d3/f3.txt")).expect("rm");
    let changed = changes.snapshot_at(&f.ws, later()).expect("changed");
    assert_ne!(changed.id, first.id);
    assert_eq!((changed.stats.hashed, changed.stats.directories_read), (2, 2), "{:?}", changed.stats);
    let set = changes.change_set(&first.manifest, &changed.manifest);
    let summary: Vec<(&str, Status, u64, u64)> =
        set.files.iter().map(|c| (c.path.as_str(), c.status, c.added, c.removed)).collect();
    assert_eq!(
        summary,
        [
            ("d1/f1.txt", Status::Modified, 1, 1),
            ("d2/new.txt", Status::Added, 1, 0),
            ("d3/f3.txt", Status::Deleted, 0, 1)
        ]
    );
    assert_eq!((set.files_changed, set.insertions, set.deletions, set.hidden_count), (3, 2, 2, 0));
}

#[test]
fn a_same_size_rewrite_is_seen_and_a_racy_file_is_read_again() {
    let (f, changes, first, second) = rewritten("aaaa", "bbbb");
    assert_ne!(first.id, second.id, "same size, same second: the change time differs");
    // A walk that starts within the margin of a file's times does not trust them next time.
    write(&f.ws, "b.txt", "b");
    let racy = changes.snapshot_at(&f.ws, scan::now_ns()).expect("racy");
    assert_eq!(racy.stats.hashed, 1);
    let reread = changes.snapshot_at(&f.ws, later()).expect("re-read");
    // Both files were written within the margin of the racy walk: neither is trusted after it.
    assert_eq!(reread.stats.hashed, 2, "{:?}", reread.stats);
    assert_eq!(reread.id, racy.id);
}

#[test]
fn the_stat_cache_survives_the_engine() {
    let f = fixture();
    write(&f.ws, "a.txt", "a");
    write(&f.ws, "deep/b.txt", "b");
    let first = engine(&f).snapshot_at(&f.ws, later()).expect("first");
    let reopened = engine(&f);
    let again = reopened.snapshot_at(&f.ws, later()).expect("after a restart");
    assert_eq!(again.id, first.id);
    assert_eq!((again.stats.hashed, again.stats.directories_read), (0, 0), "{:?}", again.stats);
    // A damaged cache costs a full read, never a wrong snapshot.
    let index = reopened.index_path(&f.ws);
    drop(reopened);
    fs::write(&index, b"garbage").expect("damage");
    let rebuilt = engine(&f).snapshot_at(&f.ws, later()).expect("rebuilt");
    assert_eq!((rebuilt.id, rebuilt.stats.hashed), (first.id, 2));
}

#[test]
fn a_changed_gitignore_is_applied_to_cached_folders() {
    let (f, changes, first) = two_files(None);
    assert_eq!(paths(&first), ["a/b/x.tmp", "a/b/y.txt"]);
    write(&f.ws, ".gitignore", "*.tmp\n");
    let second = changes.snapshot_at(&f.ws, later()).expect("second");
    assert_eq!(paths(&second), [".gitignore", "a/b/y.txt"]);
    write(&f.ws, ".gitignore", "*.txt\n");
    let third = changes.snapshot_at(&f.ws, later()).expect("third");
    assert_eq!(paths(&third), [".gitignore", "a/b/x.tmp"]);
}

/// `.git/info/exclude` counts like the root's `.gitignore`: a change to it alone (the root
/// folder's own times unchanged) is applied to the cached folders.
#[test]
fn a_changed_git_info_exclude_is_applied_to_cached_folders() {
    let (f, changes, first) = two_files(Some((".git/info/exclude", "")));
    assert_eq!(paths(&first), ["a/b/x.tmp", "a/b/y.txt"]);
    write(&f.ws, ".git/info/exclude", "*.tmp\n");
    let second = changes.snapshot_at(&f.ws, later()).expect("second");
    assert_eq!(paths(&second), ["a/b/y.txt"]);
}

/// `.git/info/exclude` rewritten in place to the same size, its mtime set back (what a tool that
/// restores times leaves): its inode, size and mtime are as before, only its ctime moved, and that
/// alone has the exclusions read again.
#[test]
fn an_exclude_rewritten_in_place_with_its_mtime_set_back_is_read_again() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let (f, changes, first) = two_files(Some((".git/info/exclude", "*.tmp\n")));
    assert_eq!(paths(&first), ["a/b/y.txt"]);
    let path = f.ws.join(".git/info/exclude");
    let before = fs::metadata(&path).expect("stat");
    let file = fs::OpenOptions::new().write(true).open(&path).expect("open");
    file.write_all_at(b"*.txt\n", 0).expect("rewrite in place");
    // Setting the mtime sets the ctime to now; on a file system whose clock is coarse, now can
    // still be the creation's tick, so set it again until the ctime has moved (bounded).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let after = loop {
        file.set_modified(before.modified().expect("mtime")).expect("set the mtime back");
        let after = fs::metadata(&path).expect("stat");
        if (after.ctime(), after.ctime_nsec()) != (before.ctime(), before.ctime_nsec()) {
            break after;
        }
        assert!(std::time::Instant::now() < deadline, "the ctime never moved");
    };
    assert_eq!(
        (after.ino(), after.len(), after.mtime(), after.mtime_nsec()),
        (before.ino(), before.len(), before.mtime(), before.mtime_nsec()),
        "only the ctime may differ"
    );
    let second = changes.snapshot_at(&f.ws, later()).expect("second");
    assert_eq!(paths(&second), ["a/b/x.tmp"]);
}

/// A long `.gitignore` is read up to [`scan::MAX_IGNORE_FILE_BYTES`]: a pattern a few KiB in
/// applies, a pattern past the bound does not (its file is snapshotted).
#[test]
fn a_gitignore_is_read_up_to_its_bound() {
    let f = fixture();
    let cap = usize::try_from(scan::MAX_IGNORE_FILE_BYTES).expect("fits");
    let comments = |bytes: usize| "# a comment line of a long ignore file\n".repeat(bytes / 39 + 1);
    let near = format!("{}near.log\n", comments(4096));
    let far = format!("{near}{}far.log\n", comments(cap));
    assert!(near.len() < cap && far.len() > cap && far.len() - "far.log\n".len() > cap);
    write(&f.ws, ".gitignore", &far);
    write(&f.ws, "near.log", "n");
    write(&f.ws, "far.log", "f");
    let s = engine(&f).snapshot_at(&f.ws, later()).expect("snapshot");
    assert_eq!(paths(&s), [".gitignore", "far.log"]);
}

/// A `.gitignore` (or `.git/info/exclude`) that is a symbolic link is not followed: its target,
/// outside the workspace, is nobody's ignore file here (the link itself is snapshotted as a link).
#[test]
fn an_ignore_file_that_is_a_symlink_is_not_followed() {
    let f = fixture();
    let outside = tempfile::tempdir().expect("outside");
    fs::write(outside.path().join("patterns"), "*.log\n").expect("write");
    symlink(outside.path().join("patterns"), f.ws.join(".gitignore")).expect("symlink");
    fs::create_dir_all(f.ws.join(".git/info")).expect("mkdir");
    symlink(outside.path().join("patterns"), f.ws.join(".git/info/exclude")).expect("symlink");
    write(&f.ws, "kept.log", "k");
    let s = engine(&f).snapshot_at(&f.ws, later()).expect("snapshot");
    assert_eq!(paths(&s), [".gitignore", "kept.log"]);
    assert_eq!(s.manifest.entries[".gitignore"].kind, Kind::Symlink);
}

/// A `.gitignore` that is a named pipe is no ignore file: it is opened without waiting for a
/// writer that never comes (`O_NONBLOCK`), refused as not a regular file, and not kept. A blocking
/// open would hold the session's turn until someone wrote to the pipe.
#[test]
fn an_ignore_file_that_is_a_named_pipe_never_holds_the_snapshot() {
    use rustix::fs::{CWD, FileType, Mode, mknodat};
    let f = fixture();
    mknodat(CWD, f.ws.join(".gitignore"), FileType::Fifo, Mode::from_raw_mode(0o600), 0).expect("mkfifo");
    write(&f.ws, "kept.log", "k");
    let (ws, state) = (f.ws.clone(), f.state.clone());
    let kept = bounded(move || {
        let changes = Changes::open(Some(&state), LIMITS).expect("open");
        let s = changes.snapshot_at(&ws, later()).expect("snapshot");
        paths(&s).iter().map(|p| p.to_string()).collect::<Vec<_>>()
    });
    assert_eq!(kept, ["kept.log"]);
}

/// A workspace path that is no directory (here a named pipe, put where the folder was) is refused
/// at once as not a directory (`O_DIRECTORY`), never opened as a file and waited on for a writer.
#[test]
fn a_workspace_that_is_a_named_pipe_is_refused_at_once() {
    use rustix::fs::{CWD, FileType, Mode, mknodat};
    let f = fixture();
    fs::remove_dir(&f.ws).expect("rmdir");
    mknodat(CWD, &f.ws, FileType::Fifo, Mode::from_raw_mode(0o600), 0).expect("mkfifo");
    let (ws, state) = (f.ws.clone(), f.state.clone());
    let answer = bounded(move || {
        let changes = Changes::open(Some(&state), LIMITS).expect("open");
        changes.snapshot_at(&ws, later()).map(|s| s.id)
    });
    match answer {
        Err(ScanError::Workspace(e)) => {
            assert_eq!(e.raw_os_error(), Some(rustix::io::Errno::NOTDIR.raw_os_error()), "{e}")
        }
        other => panic!("expected the workspace refused as not a directory, got {other:?}"),
    }
}

/// A file the scan may not open (`EACCES`: here a Landlock ruleset on the scanning thread denies
/// reading it, which root cannot step past as it steps past permissions) is skipped and counted;
/// the rest of the workspace is snapshotted. Needs a kernel with Landlock, as the sandbox tests do.
#[test]
fn a_file_the_scan_may_not_read_is_skipped_and_counted() {
    use landlock::{AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr};
    let f = fixture();
    write(&f.ws, "ok.txt", "ok");
    write(&f.ws, "locked.txt", "no");
    let (ws, state) = (f.ws.clone(), f.state.clone());
    // Landlock confines the thread that asks (and what it starts), so the scan runs on its own.
    let (status, snapshot) = bounded(move || {
        let changes = Changes::open(Some(&state), LIMITS).expect("open");
        let allow = |path: &Path| PathBeneath::new(PathFd::new(path).expect("path fd"), AccessFs::ReadFile);
        let status = Ruleset::default()
            .handle_access(AccessFs::ReadFile)
            .and_then(|r| r.create())
            .and_then(|r| r.add_rule(allow(&state)))
            .and_then(|r| r.add_rule(allow(&ws.join("ok.txt"))))
            .and_then(|r| r.restrict_self())
            .expect("the Landlock ruleset");
        let snapshot = changes
            .snapshot_at(&ws, later())
            .map(|s| (paths(&s).iter().map(|p| p.to_string()).collect::<Vec<_>>(), s.stats.skipped));
        (status.ruleset, snapshot)
    });
    assert_eq!(
        status,
        landlock::RulesetStatus::FullyEnforced,
        "this test needs a kernel with Landlock (Linux 5.13 or later, landlock in the lsm= boot list)"
    );
    assert_eq!(snapshot.expect("snapshot"), (vec!["ok.txt".to_owned()], 1));
}

/// A name that is not UTF-8 cannot be a manifest's path: it is skipped, and counted.
#[test]
fn a_name_that_is_not_utf8_is_skipped_and_counted() {
    use std::os::unix::ffi::OsStrExt;
    let f = fixture();
    write(&f.ws, "ok.txt", "ok");
    fs::write(f.ws.join(std::ffi::OsStr::from_bytes(b"bad\xff.txt")), "bad").expect("write");
    let s = engine(&f).snapshot_at(&f.ws, later()).expect("snapshot");
    assert_eq!(paths(&s), ["ok.txt"]);
    assert_eq!(s.stats.skipped, 1, "{:?}", s.stats);
}

/// A file deleted with nothing else changed is a new snapshot without it (nothing was read or
/// hashed for it: it was only not seen).
#[test]
fn a_file_deleted_alone_makes_a_new_snapshot_without_it() {
    let f = fixture();
    write(&f.ws, "keep.txt", "keep");
    write(&f.ws, "d/gone.txt", "gone");
    let changes = engine(&f);
    let first = changes.snapshot_at(&f.ws, later()).expect("first");
    fs::remove_file(f.ws.join("d/gone.txt")).expect("rm");
    let second = changes.snapshot_at(&f.ws, later()).expect("second");
    assert_ne!(second.id, first.id);
    assert_eq!(paths(&second), ["keep.txt"]);
    assert_eq!(second.stats.hashed, 0, "{:?}", second.stats);
}

/// The bounds' edges: exactly `max_files` files, and a file of exactly `max_file_bytes`, are
/// taken whole; an oversized file stays counted when a snapshot takes it from the cache.
#[test]
fn the_bounds_take_exactly_their_limit() {
    let f = fixture();
    write(&f.ws, "a", &"x".repeat(50));
    write(&f.ws, "b", &"y".repeat(51));
    write(&f.ws, "c", "z");
    let limits = Limits { max_files: 3, max_file_bytes: 50, max_depth: 2 };
    let changes = Changes::open(Some(&f.state), limits).expect("open");
    let s = changes.snapshot_at(&f.ws, later()).expect("three files: the limit");
    assert_eq!(s.manifest.entries["a"].kind, Kind::File, "exactly max_file_bytes is kept");
    assert_eq!(s.manifest.entries["b"].kind, Kind::Oversized);
    assert_eq!((s.stats.hashed, s.stats.bytes_hashed, s.stats.oversized), (2, 51, 1), "{:?}", s.stats);
    let again = changes.snapshot_at(&f.ws, later()).expect("again");
    assert_eq!(again.id, s.id);
    assert_eq!((again.stats.hashed, again.stats.oversized), (0, 1), "{:?}", again.stats);
    write(&f.ws, "d", "one too many");
    let refused = changes.snapshot_at(&f.ws, later());
    assert!(matches!(refused, Err(ScanError::TooManyFiles { limit: 3 })), "{refused:?}");
}

/// A change set cannot count the lines of a file one side of which the store does not hold: a file
/// grown past the size bound (its new content was never kept), or one whose kept content was lost
/// from the store since. Either is listed as truncated, with no line counted.
#[test]
fn a_change_set_marks_a_side_not_kept_or_lost_as_truncated() {
    let f = fixture();
    write(&f.ws, "grow.txt", "a\n");
    write(&f.ws, "lost.txt", "x\ny\n");
    let small = Limits { max_files: 10, max_file_bytes: 50, max_depth: 2 };
    let changes = Changes::open(Some(&f.state), small).expect("open");
    let first = changes.snapshot_at(&f.ws, later()).expect("first");
    write(&f.ws, "grow.txt", &"b\n".repeat(50));
    write(&f.ws, "lost.txt", "x\nz\n");
    let second = changes.snapshot_at(&f.ws, later()).expect("second");
    // The first side of lost.txt goes from the store.
    let gone = manifest::hex(&first.manifest.entries["lost.txt"].digest);
    let blob = f.state.join("changes/objects").join(&gone[..2]).join(&gone[2..]);
    fs::remove_file(&blob).expect("the blob is where the store keeps it");
    let set = changes.change_set(&first.manifest, &second.manifest);
    let shown: Vec<(&str, bool, u64, u64)> =
        set.files.iter().map(|c| (c.path.as_str(), c.truncated, c.added, c.removed)).collect();
    assert_eq!(shown, [("grow.txt", true, 0, 0), ("lost.txt", true, 0, 0)]);
    assert_eq!((set.insertions, set.deletions), (0, 0));
}

/// A change set lists its first [`MAX_LISTED_FILES`] files and counts the rest as hidden.
#[test]
fn a_change_set_lists_at_most_its_bound_and_counts_the_rest() {
    let f = fixture();
    let changes = engine(&f);
    let before = changes.snapshot_at(&f.ws, later()).expect("empty");
    for i in 0..MAX_LISTED_FILES + 3 {
        write(&f.ws, &format!("f{i:05}"), "x\n");
    }
    let after = changes.snapshot_at(&f.ws, later()).expect("after");
    let set = changes.change_set(&before.manifest, &after.manifest);
    assert_eq!(
        (set.files_changed, set.files.len(), set.hidden_count),
        (MAX_LISTED_FILES + 3, MAX_LISTED_FILES, 3)
    );
    assert_eq!(set.insertions, MAX_LISTED_FILES as u64, "lines counted for the listed files");
}

#[test]
fn bounds_refuse_too_many_files_and_keep_oversized_ones_by_stat() {
    let f = fixture();
    for i in 0..5 {
        write(&f.ws, &format!("f{i}"), "x");
    }
    write(&f.ws, "big.bin", &"z".repeat(100));
    let small = Limits { max_files: 10, max_file_bytes: 50, max_depth: 2 };
    let changes = Changes::open(Some(&f.state), small).expect("open");
    let s = changes.snapshot_at(&f.ws, later()).expect("snapshot");
    let big = s.manifest.entries["big.bin"];
    assert_eq!((big.kind, big.size, s.stats.oversized), (Kind::Oversized, 100, 1));
    assert!(changes.content(&big).is_err(), "its content is not kept");
    write(&f.ws, "big.bin", &"y".repeat(100));
    let after = changes.snapshot_at(&f.ws, later()).expect("again");
    let set = changes.change_set(&s.manifest, &after.manifest);
    assert_eq!(set.files.len(), 1);
    assert!(set.files[0].truncated && set.files[0].status == Status::Modified);
    // Depth 2 is the deepest walked: `a/b` (depth 2) is, `a/b/c` (depth 3) is skipped and counted.
    write(&f.ws, "a/b/c/too/deep.txt", "deep");
    write(&f.ws, "a/b/c/out.txt", "out");
    write(&f.ws, "a/b/in.txt", "in");
    let deep = changes.snapshot_at(&f.ws, later()).expect("deep");
    assert!(!deep.manifest.entries.contains_key("a/b/c/too/deep.txt"));
    assert!(!deep.manifest.entries.contains_key("a/b/c/out.txt"), "{:?}", paths(&deep));
    assert!(deep.manifest.entries.contains_key("a/b/in.txt"), "{:?}", paths(&deep));
    assert_eq!(deep.stats.skipped, 1, "{:?}", deep.stats);
    for i in 5..12 {
        write(&f.ws, &format!("f{i}"), "x");
    }
    let refused = changes.snapshot_at(&f.ws, later());
    assert!(matches!(refused, Err(ScanError::TooManyFiles { limit: 10 })), "{refused:?}");
}

#[test]
fn a_folder_swapped_for_a_symlink_is_not_followed_out() {
    let f = fixture();
    let outside = f.ws.parent().expect("parent").join("outside");
    write(&outside, "secret.txt", "secret");
    write(&f.ws, "dir/in.txt", "in");
    let changes = engine(&f);
    changes.snapshot_at(&f.ws, later()).expect("first");
    fs::remove_dir_all(f.ws.join("dir")).expect("rm");
    symlink(&outside, f.ws.join("dir")).expect("symlink");
    let s = changes.snapshot_at(&f.ws, later()).expect("second");
    assert_eq!(paths(&s), ["dir"], "the link itself, not what it points at");
    assert_eq!(s.manifest.entries["dir"].kind, Kind::Symlink);
}

#[test]
fn hunks_and_unified_diffs_come_from_the_store() {
    let (_f, changes, before, after) = rewritten("1\n2\n3\n", "1\ntwo\n3\n");
    let (o, n) = (before.manifest.entries.get("a.txt"), after.manifest.entries.get("a.txt"));
    let (hunks, truncated) = changes.hunks(o, n);
    assert!(!truncated);
    assert_eq!(hunks[0].lines, [" 1", "-2", "+two", " 3"]);
    assert!(changes.unified("a.txt", o, n).contains("@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n"));
}

#[test]
fn collection_keeps_the_snapshots_asked_for_and_the_latest() {
    let (_f, changes, first, second) = rewritten("one", "two");
    // Nothing is old enough for the real grace: collection removes nothing.
    assert_eq!(changes.collect(HashSet::new()).expect("collect"), Collected::default());
    let objects = Objects::open(changes.dir()).expect("objects");
    let keep: HashSet<String> = [second.id.clone()].into();
    let done = objects.collect(&keep, Duration::ZERO).expect("collect");
    assert_eq!(done, Collected { manifests: 1, blobs: 1 });
    assert!(changes.manifest(&first.id).is_err() && changes.manifest(&second.id).is_ok());
}

/// [`Changes::collect`] takes what is older than [`COLLECT_GRACE`]: objects aged past it go
/// (the first snapshot's; the second is the workspace's latest, kept unasked).
#[test]
fn collection_takes_what_is_older_than_its_grace() {
    let (_f, changes, first, second) = rewritten("one", "two");
    let aged = std::time::SystemTime::now() - COLLECT_GRACE - Duration::from_secs(60);
    let mut dirs = vec![changes.dir().to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).expect("read").map(|e| e.expect("entry")) {
            if entry.file_type().expect("type").is_dir() {
                dirs.push(entry.path());
            } else {
                fs::File::options()
                    .write(true)
                    .open(entry.path())
                    .and_then(|f| f.set_modified(aged))
                    .expect("age");
            }
        }
    }
    assert_eq!(changes.collect(HashSet::new()).expect("collect"), Collected { manifests: 1, blobs: 1 });
    assert!(changes.manifest(&first.id).is_err() && changes.manifest(&second.id).is_ok());
}

/// In a git repository the workspace diff compares each file's git blob id with `HEAD`'s; the ids
/// are remembered by content, so a second diff (from the memo) says what the first said.
#[test]
fn a_git_workspace_diff_is_the_same_from_the_remembered_blob_ids() {
    let f = fixture();
    write(&f.ws, "a.txt", "a\n");
    write(&f.ws, "b.txt", "b\n");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"])
            .args(args)
            .current_dir(&f.ws)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "first"]);
    write(&f.ws, "b.txt", "b2\n");
    let changes = engine(&f);
    for pass in ["computed", "remembered"] {
        let diff = changes.workspace_diff(&f.ws, None).expect("diff");
        let files: Vec<&str> = diff.files.iter().map(|w| w.path.as_str()).collect();
        assert_eq!((diff.base, files), ("head", vec!["b.txt"]), "{pass}");
    }
}

#[test]
fn collection_keeps_each_workspaces_latest_snapshot_unasked() {
    let (_f, changes, first, latest) = rewritten("one", "two");
    let done = changes.collect_older_than(HashSet::new(), Duration::ZERO).expect("collect");
    assert_eq!(done, Collected { manifests: 1, blobs: 1 }, "the first snapshot and its content");
    assert!(changes.manifest(&first.id).is_err());
    let kept = changes.manifest(&latest.id).expect("the workspace's latest snapshot is kept");
    let entry = kept.entries.get("a.txt").expect("a.txt");
    assert_eq!(changes.content(entry).expect("its content"), b"two");
}

#[test]
fn an_ephemeral_engine_removes_its_directory() {
    let changes = Changes::open(None, LIMITS).expect("open");
    let dir = changes.dir().to_path_buf();
    assert!(dir.is_dir());
    drop(changes);
    assert!(!dir.exists());
}

/// Issue #42's bad input: a workspace of 50 000 files (half the bound) is snapshotted whole, a
/// later snapshot reads only what a turn changed, and the change set names exactly that.
#[test]
fn fifty_thousand_files_are_snapshotted_and_a_change_among_them_is_found() {
    const FILES: usize = 50_000;
    let f = fixture();
    for d in 0..100 {
        let dir = f.ws.join(format!("d{d:03}"));
        fs::create_dir_all(&dir).expect("mkdir");
        for i in 0..FILES / 100 {
            fs::write(dir.join(format!("f{i:03}.txt")), format!("{d} {i}\n")).expect("write");
        }
    }
    let changes = engine(&f);
    let first = changes.snapshot_at(&f.ws, later()).expect("50 000 files are under the bound");
    assert_eq!((first.stats.files, first.manifest.entries.len()), (FILES, FILES));
    write(&f.ws, "d042/f007.txt", "changed\n");
    write(&f.ws, "d099/new.txt", "new\n");
    let second = changes.snapshot_at(&f.ws, later()).expect("second");
    assert_eq!(second.stats.hashed, 2, "only what changed is read: {:?}", second.stats);
    let set = changes.change_set(&first.manifest, &second.manifest);
    let got: Vec<(&str, Status)> = set.files.iter().map(|c| (c.path.as_str(), c.status)).collect();
    assert_eq!(got, [("d042/f007.txt", Status::Modified), ("d099/new.txt", Status::Added)]);
}

/// Issue #42's bad input: a file written to all through a snapshot (an agent's log, a build
/// output) never fails the snapshot, and its content as taken is not trusted: once it stops
/// changing, the next snapshot reads it again and records what it ended as.
#[test]
fn a_file_that_changes_during_a_snapshot_is_read_again_once_it_settles() {
    use std::io::Write as _;
    use std::sync::atomic::{AtomicBool, Ordering};
    let f = fixture();
    for i in 0..2_000 {
        write(&f.ws, &format!("many/f{i}.txt"), "x\n");
    }
    write(&f.ws, "growing.log", "start\n");
    let changes = engine(&f);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let path = f.ws.join("growing.log");
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut file = fs::OpenOptions::new().append(true).open(&path).expect("open");
            let mut lines = 0u64;
            // Bounded: stopped by the test, or after a million lines at most.
            while !stop.load(Ordering::Relaxed) && lines < 1_000_000 {
                writeln!(file, "line {lines}").expect("append");
                lines += 1;
            }
            lines
        })
    };
    // Snapshots while the file grows: none fails.
    for _ in 0..3 {
        changes.snapshot_at(&f.ws, scan::now_ns()).expect("a snapshot while a file changes");
    }
    stop.store(true, Ordering::Relaxed);
    let lines = writer.join().expect("writer");
    let expected = fs::read(f.ws.join("growing.log")).expect("read");
    assert!(expected.len() > "start\n".len(), "the file grew ({lines} lines)");
    let settled = changes.snapshot_at(&f.ws, later()).expect("settled");
    let entry = settled.manifest.entries["growing.log"];
    assert_eq!(entry.size, expected.len() as u64);
    assert_eq!(changes.content(&entry).expect("content"), expected, "what the file ended as");
}

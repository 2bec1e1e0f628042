//! The agent's `fs/read_text_file` and `fs/write_text_file` requests
//! (`docs/protocol.md#4-agents-workspaces-and-sessions`), confined to the session's workspace by
//! the kernel: every path is resolved beneath a descriptor of the workspace, never from `/`
//! ([`crate::confine`], shared with the file routes, snapshots and rewinds of `changes`).

use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::acp::{INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND, RpcError};
use crate::confine::{self, MAX_SYMLINK_HOPS, Refusal, WriteMode};

/// The read cap from `docs/protocol.md#4-agents-workspaces-and-sessions`.
pub(crate) const MAX_READ_BYTES: u64 = 16 * 1024 * 1024;
/// An agent line is at most 64 MiB, so no legitimate `content` is larger.
pub(crate) const MAX_WRITE_BYTES: usize = 64 * 1024 * 1024;
/// `fs/read_text_file {sessionId, path, line?, limit?}` → `{"content": ...}`.
///
/// `line` is 1-based; `limit` is a maximum number of lines. Line endings are kept as in the file.
pub(crate) async fn read_text_file(workspace: &Path, params: &Value) -> Result<Value, RpcError> {
    let path = absolute_path(params)?;
    let line = positive_integer(params, "line")?;
    let limit = positive_integer(params, "limit")?;
    let workspace = workspace.to_path_buf();
    let text = blocking(move || read_confined(&workspace, &path)).await?;
    Ok(json!({ "content": slice_lines(&text, line.unwrap_or(1), limit) }))
}

/// `fs/write_text_file {sessionId, path, content}` → `null`.
///
/// Atomic (temp file in the target's directory, fsync, rename), keeps an existing file's permission
/// bits, and writes through a symlink to its target rather than replacing the link.
pub(crate) async fn write_text_file(workspace: &Path, params: &Value) -> Result<Value, RpcError> {
    let path = absolute_path(params)?;
    let Some(content) = params.get("content").and_then(Value::as_str) else {
        return Err(RpcError::with_kind(INVALID_PARAMS, "invalid_params", "`content` must be a string"));
    };
    if content.len() > MAX_WRITE_BYTES {
        return Err(RpcError::with_kind(
            INVALID_PARAMS,
            "file_too_large",
            format!("content is over the {MAX_WRITE_BYTES}-byte write cap"),
        ));
    }
    // The copy is the price of moving the write off the async runtime; it is bounded by the cap.
    let content = content.to_owned();
    let workspace = workspace.to_path_buf();
    blocking(move || write_confined(&workspace, &path, content.as_bytes())).await?;
    Ok(Value::Null)
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, RpcError> + Send + 'static,
) -> Result<T, RpcError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|_| Err(RpcError::new(INTERNAL_ERROR, "file operation task failed")))
}

fn absolute_path(params: &Value) -> Result<PathBuf, RpcError> {
    match params.get("path").and_then(Value::as_str) {
        Some(path) if Path::new(path).is_absolute() => Ok(PathBuf::from(path)),
        _ => Err(RpcError::with_kind(INVALID_PARAMS, "invalid_path", "`path` must be an absolute path")),
    }
}

/// An optional positive integer parameter; JSON `null` counts as absent.
fn positive_integer(params: &Value, field: &str) -> Result<Option<usize>, RpcError> {
    match params.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(n) if n >= 1 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            _ => Err(RpcError::with_kind(
                INVALID_PARAMS,
                "invalid_params",
                format!("`{field}` must be a positive integer"),
            )),
        },
    }
}

fn slice_lines(text: &str, line: usize, limit: Option<usize>) -> String {
    let lines = text.split_inclusive('\n').skip(line - 1);
    match limit {
        Some(limit) => lines.take(limit).collect(),
        None => lines.collect(),
    }
}

fn read_confined(workspace: &Path, path: &Path) -> Result<String, RpcError> {
    let bytes = confine::read_file(workspace, path, MAX_READ_BYTES).map_err(|why| refused(path, why))?;
    String::from_utf8(bytes).map_err(|_| {
        RpcError::with_kind(INVALID_PARAMS, "not_text", format!("{} is not UTF-8 text", path.display()))
    })
}

fn write_confined(workspace: &Path, path: &Path, content: &[u8]) -> Result<(), RpcError> {
    confine::write_file(workspace, path, content, WriteMode::Replace).map_err(|why| refused(path, why))
}

/// The agent-facing error for a path the confinement refused; the message names the path, never
/// the content.
fn refused(path: &Path, why: Refusal) -> RpcError {
    match why {
        Refusal::Outside => outside(path),
        Refusal::DotDotAfterMissing => RpcError::with_kind(
            INVALID_PARAMS,
            "invalid_path",
            format!("{} has `..` after a component that does not exist", path.display()),
        ),
        Refusal::TooManyLinks => RpcError::with_kind(
            INVALID_PARAMS,
            "invalid_path",
            format!("{} has more than {MAX_SYMLINK_HOPS} levels of symlinks", path.display()),
        ),
        Refusal::NotFound => not_found(path),
        Refusal::NotAFile | Refusal::Exists => not_a_file(path),
        Refusal::TooLarge => too_large(path),
        Refusal::Io(e) => io_error(path, &e),
    }
}

fn outside(path: &Path) -> RpcError {
    RpcError::with_kind(
        INVALID_PARAMS,
        "path_outside_workspace",
        format!("{} is outside the session's workspace", path.display()),
    )
}

fn not_found(path: &Path) -> RpcError {
    RpcError::with_kind(RESOURCE_NOT_FOUND, "not_found", format!("{} does not exist", path.display()))
}

fn not_a_file(path: &Path) -> RpcError {
    RpcError::with_kind(INVALID_PARAMS, "not_a_file", format!("{} is not a regular file", path.display()))
}

fn too_large(path: &Path) -> RpcError {
    RpcError::with_kind(
        INVALID_PARAMS,
        "file_too_large",
        format!("{} is over the {MAX_READ_BYTES}-byte read cap", path.display()),
    )
}

/// Maps an OS error to the agent-facing error; the message names the path, never the content.
fn io_error(path: &Path, error: &io::Error) -> RpcError {
    match error.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => not_found(path),
        io::ErrorKind::IsADirectory => not_a_file(path),
        _ => RpcError::with_kind(INTERNAL_ERROR, "io_error", format!("{}: {error}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::confine::fixture::{dir_names, dirs};
    use std::fs::{self, File};
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn path_str(path: &Path) -> &str {
        path.to_str().expect("UTF-8 temp path")
    }

    async fn read(ws: &Path, params: Value) -> Result<String, RpcError> {
        let result = read_text_file(ws, &params).await?;
        Ok(result["content"].as_str().expect("content is a string").to_owned())
    }

    async fn write(ws: &Path, path: &Path, content: &str) -> Result<Value, RpcError> {
        write_text_file(ws, &json!({"sessionId": "s", "path": path_str(path), "content": content})).await
    }

    fn kind(error: &RpcError) -> Option<&str> {
        error.data.as_ref().and_then(|d| d["errorKind"].as_str())
    }

    #[tokio::test]
    async fn reads_a_whole_file() {
        let d = dirs();
        let file = d.ws.join("a.txt");
        fs::write(&file, "one\ntwo\r\nthree").expect("write fixture");
        let content = read(&d.ws, json!({"sessionId": "s", "path": path_str(&file)})).await;
        assert_eq!(content.ok().as_deref(), Some("one\ntwo\r\nthree"));
    }

    #[tokio::test]
    async fn reads_line_and_limit_slices_one_based() {
        let d = dirs();
        let file = d.ws.join("a.txt");
        fs::write(&file, "1\n2\n3\n4\n").expect("write fixture");
        let table: [(Value, Value, &str); 6] = [
            (json!(1), json!(null), "1\n2\n3\n4\n"),
            (json!(2), json!(2), "2\n3\n"),
            (json!(null), json!(1), "1\n"),
            (json!(4), json!(10), "4\n"),
            (json!(5), json!(1), ""),
            (json!(99), json!(null), ""),
        ];
        for (line, limit, expected) in table {
            let params = json!({"path": path_str(&file), "line": line, "limit": limit});
            assert_eq!(
                read(&d.ws, params).await.ok().as_deref(),
                Some(expected),
                "line {line} limit {limit}"
            );
        }
    }

    #[tokio::test]
    async fn bad_params_are_refused() {
        let d = dirs();
        let file = path_str(&d.ws.join("a.txt")).to_owned();
        fs::write(&file, "x").expect("write fixture");
        let table = [
            (json!({"path": "a.txt"}), "invalid_path"),
            (json!({"path": 3}), "invalid_path"),
            (json!({}), "invalid_path"),
            (json!({"path": file, "line": 0}), "invalid_params"),
            (json!({"path": file, "limit": -1}), "invalid_params"),
            (json!({"path": file, "line": "2"}), "invalid_params"),
            (json!({"path": file, "limit": 1.5}), "invalid_params"),
        ];
        for (params, expected) in table {
            let error = read(&d.ws, params.clone()).await.expect_err("refused");
            assert_eq!((error.code, kind(&error)), (INVALID_PARAMS, Some(expected)), "{params}");
        }
    }

    #[tokio::test]
    async fn reading_a_missing_file_is_not_found() {
        let d = dirs();
        for missing in [d.ws.join("nope.txt"), d.ws.join("no/such/dir.txt")] {
            let error = read(&d.ws, json!({"path": path_str(&missing)})).await.expect_err("missing");
            assert_eq!((error.code, kind(&error)), (RESOURCE_NOT_FOUND, Some("not_found")));
        }
    }

    #[tokio::test]
    async fn reading_over_the_cap_is_file_too_large() {
        let d = dirs();
        let file = d.ws.join("big.txt");
        // Sparse: the cap is checked on the size, so no real 16 MiB is written.
        File::create(&file).and_then(|f| f.set_len(MAX_READ_BYTES + 1)).expect("sparse file");
        let error = read(&d.ws, json!({"path": path_str(&file)})).await.expect_err("too large");
        assert_eq!((error.code, kind(&error)), (INVALID_PARAMS, Some("file_too_large")));
    }

    #[tokio::test]
    async fn reading_binary_or_a_directory_is_refused() {
        let d = dirs();
        let file = d.ws.join("bin");
        fs::write(&file, [0xff, 0xfe, 0x00]).expect("write fixture");
        let error = read(&d.ws, json!({"path": path_str(&file)})).await.expect_err("binary");
        assert_eq!(kind(&error), Some("not_text"));
        let error = read(&d.ws, json!({"path": path_str(&d.ws)})).await.expect_err("directory");
        assert_eq!(kind(&error), Some("not_a_file"));
    }

    #[tokio::test]
    async fn reading_outside_the_workspace_is_refused() {
        let d = dirs();
        fs::write(d.outside.join("secret"), "s").expect("write fixture");
        symlink(d.outside.join("secret"), d.ws.join("link")).expect("symlink");
        symlink(&d.outside, d.ws.join("dirlink")).expect("symlink");
        let escape = format!("{}/../outside/secret", path_str(&d.ws));
        let candidates = [
            path_str(&d.outside.join("secret")).to_owned(),
            escape,
            path_str(&d.ws.join("link")).to_owned(),
            path_str(&d.ws.join("dirlink/secret")).to_owned(),
            // Missing outside files are reported as outside too, revealing nothing about them.
            path_str(&d.outside.join("missing")).to_owned(),
            "/etc/passwd".to_owned(),
        ];
        for path in candidates {
            let error = read(&d.ws, json!({"path": path})).await.expect_err("outside");
            assert_eq!(
                (error.code, kind(&error)),
                (INVALID_PARAMS, Some("path_outside_workspace")),
                "{path}"
            );
        }
    }

    #[tokio::test]
    async fn reading_through_an_inside_symlink_works() {
        let d = dirs();
        fs::write(d.ws.join("real.txt"), "hi").expect("write fixture");
        symlink("real.txt", d.ws.join("link.txt")).expect("symlink");
        let content = read(&d.ws, json!({"path": path_str(&d.ws.join("link.txt"))})).await;
        assert_eq!(content.ok().as_deref(), Some("hi"));
    }

    #[tokio::test]
    async fn write_creates_a_new_file() {
        let d = dirs();
        let file = d.ws.join("new.txt");
        assert_eq!(write(&d.ws, &file, "hello\n").await.ok(), Some(Value::Null));
        assert_eq!(fs::read_to_string(&file).ok().as_deref(), Some("hello\n"));
        assert_eq!(dir_names(&d.ws), ["new.txt"]);
    }

    #[tokio::test]
    async fn overwrite_keeps_the_existing_mode() {
        let d = dirs();
        let file = d.ws.join("run.sh");
        fs::write(&file, "old").expect("write fixture");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o755)).expect("chmod");
        write(&d.ws, &file, "#!/bin/sh\n").await.expect("written");
        assert_eq!(fs::read_to_string(&file).ok().as_deref(), Some("#!/bin/sh\n"));
        let mode = fs::metadata(&file).expect("stat").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755);
        assert_eq!(dir_names(&d.ws), ["run.sh"]);
    }

    #[tokio::test]
    async fn write_through_a_symlink_updates_the_target_and_keeps_the_link() {
        let d = dirs();
        fs::create_dir(d.ws.join("sub")).expect("mkdir");
        fs::write(d.ws.join("sub/real.txt"), "old").expect("write fixture");
        symlink("sub/real.txt", d.ws.join("link.txt")).expect("symlink");
        write(&d.ws, &d.ws.join("link.txt"), "new").await.expect("written");
        assert_eq!(fs::read_to_string(d.ws.join("sub/real.txt")).ok().as_deref(), Some("new"));
        let link = fs::symlink_metadata(d.ws.join("link.txt")).expect("lstat");
        assert!(link.file_type().is_symlink());
        assert_eq!(dir_names(&d.ws.join("sub")), ["real.txt"]);
    }

    #[tokio::test]
    async fn write_through_a_dangling_symlink_creates_its_target() {
        let d = dirs();
        symlink("made.txt", d.ws.join("link.txt")).expect("symlink");
        write(&d.ws, &d.ws.join("link.txt"), "x").await.expect("written");
        assert_eq!(fs::read_to_string(d.ws.join("made.txt")).ok().as_deref(), Some("x"));
        assert!(fs::symlink_metadata(d.ws.join("link.txt")).expect("lstat").file_type().is_symlink());
    }

    #[tokio::test]
    async fn write_outside_is_refused_and_creates_nothing() {
        let d = dirs();
        symlink(&d.outside, d.ws.join("dirlink")).expect("symlink");
        symlink(d.outside.join("dangling.txt"), d.ws.join("dangling")).expect("symlink");
        let candidates = [
            d.outside.join("a.txt"),
            PathBuf::from(format!("{}/../outside/b.txt", path_str(&d.ws))),
            d.ws.join("dirlink/c.txt"),
            d.ws.join("dangling"),
        ];
        for path in candidates {
            let error = write(&d.ws, &path, "x").await.expect_err("outside");
            assert_eq!(kind(&error), Some("path_outside_workspace"), "{}", path.display());
        }
        assert!(dir_names(&d.outside).is_empty());
        assert_eq!(dir_names(&d.ws), ["dangling", "dirlink"]);
    }

    #[tokio::test]
    async fn write_refuses_bad_targets_and_leaves_no_temp_files() {
        let d = dirs();
        fs::create_dir(d.ws.join("dir")).expect("mkdir");
        fs::write(d.ws.join("plain"), "p").expect("write fixture");
        let file_as_folder =
            write(&d.ws, &d.ws.join("plain/such.txt"), "x").await.expect_err("a file as folder");
        assert_eq!((file_as_folder.code, kind(&file_as_folder)), (RESOURCE_NOT_FOUND, Some("not_found")));
        let directory = write(&d.ws, &d.ws.join("dir"), "x").await.expect_err("directory");
        assert_eq!(kind(&directory), Some("not_a_file"));
        let dot_dot = write(&d.ws, &d.ws.join("no/../x.txt"), "x").await.expect_err("dot dot");
        assert_eq!(kind(&dot_dot), Some("invalid_path"));
        let relative = write_text_file(&d.ws, &json!({"path": "x.txt", "content": "x"})).await;
        assert_eq!(relative.as_ref().err().and_then(kind), Some("invalid_path"));
        let no_content = write_text_file(&d.ws, &json!({"path": path_str(&d.ws.join("x"))})).await;
        assert_eq!(no_content.as_ref().err().and_then(kind), Some("invalid_params"));
        assert_eq!(dir_names(&d.ws), ["dir", "plain"]);
        assert!(dir_names(&d.ws.join("dir")).is_empty());
    }

    /// `demo-agent --help`'s own example, `write notes/a.txt hi`, failed with "…/notes/a.txt does
    /// not exist" (issue #29): a write makes its file's missing folders, inside the workspace only.
    #[tokio::test]
    async fn write_makes_the_missing_folders_of_its_file() {
        let d = dirs();
        write(&d.ws, &d.ws.join("notes/a.txt"), "hi").await.expect("written");
        assert_eq!(fs::read_to_string(d.ws.join("notes/a.txt")).ok().as_deref(), Some("hi"));
        write(&d.ws, &d.ws.join("notes/deep/er/b.txt"), "b").await.expect("written");
        assert_eq!(fs::read_to_string(d.ws.join("notes/deep/er/b.txt")).ok().as_deref(), Some("b"));
        // Not through a symlink to outside, and not past a `..`: nothing is made there.
        symlink(&d.outside, d.ws.join("out")).expect("symlink");
        let error = write(&d.ws, &d.ws.join("out/new/c.txt"), "x").await.expect_err("outside");
        assert_eq!(kind(&error), Some("path_outside_workspace"));
        let error = write(&d.ws, &d.ws.join("made/../../outside/d/e.txt"), "x").await.expect_err("dot dot");
        assert_eq!(kind(&error), Some("invalid_path"));
        assert!(dir_names(&d.outside).is_empty());
        assert_eq!(dir_names(&d.ws), ["notes", "out"]);
    }

    #[tokio::test]
    async fn symlinks_inside_are_followed_absolute_or_relative_and_dot_dot_is_physical() {
        let d = dirs();
        fs::create_dir_all(d.ws.join("a/b")).expect("mkdir");
        fs::write(d.ws.join("a/real.txt"), "real").expect("write fixture");
        symlink(d.ws.join("a/real.txt"), d.ws.join("abs.txt")).expect("absolute symlink inside");
        symlink(d.ws.join("a/b"), d.ws.join("deep")).expect("absolute directory symlink inside");
        let cases = [d.ws.join("abs.txt"), d.ws.join("a/b/../real.txt"), d.ws.join("deep/../real.txt")];
        for path in cases {
            let content = read(&d.ws, json!({"path": path_str(&path)})).await;
            assert_eq!(content.ok().as_deref(), Some("real"), "{}", path.display());
        }
        write(&d.ws, &d.ws.join("abs.txt"), "new").await.expect("write through an absolute link");
        assert_eq!(fs::read_to_string(d.ws.join("a/real.txt")).ok().as_deref(), Some("new"));
        assert!(fs::symlink_metadata(d.ws.join("abs.txt")).expect("lstat").file_type().is_symlink());
    }

    /// What changed with the kernel's confinement (`docs/protocol.md#45-what-the-agent-may-ask`):
    /// the path must be written under the workspace; another name for it, or a `..` that leaves it
    /// before coming back, is outside.
    #[tokio::test]
    async fn paths_must_be_written_under_the_workspace() {
        let d = dirs();
        fs::write(d.ws.join("a.txt"), "a").expect("write fixture");
        symlink(&d.ws, d.outside.join("alias")).expect("an alias of the workspace");
        let ws_name = d.ws.file_name().expect("name").to_string_lossy().into_owned();
        for path in [d.outside.join("alias/a.txt"), d.ws.join(format!("../{ws_name}/a.txt"))] {
            let error = read(&d.ws, json!({"path": path_str(&path)})).await.expect_err("outside");
            assert_eq!(kind(&error), Some("path_outside_workspace"), "{}", path.display());
        }
    }

    /// Issue #16, item 4: a thread swaps a directory of the workspace with a symlink to the outside
    /// (`renameat2(RENAME_EXCHANGE)`) as fast as it can while writes and reads go through that
    /// directory. Not one write lands outside, not one read returns the outside file, and no temp
    /// file is left anywhere. Bounded: 3000 operations or 8 seconds.
    #[tokio::test]
    async fn swapping_a_directory_for_a_symlink_never_leads_outside() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

        let d = dirs();
        fs::create_dir(d.ws.join("sub")).expect("mkdir");
        fs::write(d.ws.join("sub/file.txt"), "inside").expect("write fixture");
        fs::write(d.outside.join("file.txt"), "OUTSIDE").expect("write fixture");
        symlink(&d.outside, d.ws.join("swap")).expect("symlink");
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let swapper = {
            let (stop, swaps) = (stop.clone(), swaps.clone());
            let (a, b) = (d.ws.join("sub"), d.ws.join("swap"));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    rustix::fs::renameat_with(
                        rustix::fs::CWD,
                        &a,
                        rustix::fs::CWD,
                        &b,
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .expect("exchange");
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let target = d.ws.join("sub/file.txt");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(8);
        let (mut tries, mut written, mut read_inside, mut escaped_reads) = (0u32, 0u32, 0u32, 0u32);
        while tries < 3000 && std::time::Instant::now() < deadline {
            tries += 1;
            if tries % 2 == 0 {
                if write(&d.ws, &target, &format!("inside {tries}")).await.is_ok() {
                    written += 1;
                }
            } else {
                match read(&d.ws, json!({"path": path_str(&target)})).await {
                    Ok(content) if content.contains("OUTSIDE") => escaped_reads += 1,
                    Ok(_) => read_inside += 1,
                    Err(_) => {}
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().expect("swapper");
        assert!(swaps.load(Ordering::Relaxed) > 100, "the swap barely ran: the test proves nothing");
        assert!(
            written > 0 && read_inside > 0,
            "{tries} tries: {written} writes, {read_inside} reads went through"
        );
        assert_eq!(escaped_reads, 0, "reads returned the outside file");
        assert_eq!(dir_names(&d.outside), ["file.txt"], "a write landed outside");
        assert_eq!(fs::read_to_string(d.outside.join("file.txt")).ok().as_deref(), Some("OUTSIDE"));
        // Whichever name the real directory has now, it holds the one file and no temp file.
        let real = ["sub", "swap"]
            .map(|n| d.ws.join(n))
            .into_iter()
            .find(|p| fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()));
        assert_eq!(dir_names(&real.expect("the real directory")), ["file.txt"]);
        assert_eq!(dir_names(&d.ws), ["sub", "swap"]);
    }
}

//! The agent's `fs/read_text_file` and `fs/write_text_file` requests
//! (`docs/protocol.md#4-agents-workspaces-and-sessions`), confined to the session's workspace.
//!
//! Confinement resolves symlinks before checking, so a link inside the workspace that points outside
//! is outside. The check and the later open are separate syscalls: a process that can swap path
//! components inside the workspace in between can race it. That is accepted because such a process
//! already writes the workspace; the final open refuses a symlink (`O_NOFOLLOW`) to narrow the window.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};

use crate::acp::{INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND, RpcError};
use crate::path::normalize_lexically;

/// The read cap from `docs/protocol.md#4-agents-workspaces-and-sessions`.
pub(crate) const MAX_READ_BYTES: u64 = 16 * 1024 * 1024;
/// An agent line is at most 64 MiB, so no legitimate `content` is larger.
pub(crate) const MAX_WRITE_BYTES: usize = 64 * 1024 * 1024;
/// Symlinks followed while resolving one path; Linux's own `MAXSYMLINKS`.
const MAX_SYMLINK_HOPS: u32 = 40;
/// Bytes of the target's name kept in its temp file's name, so the temp name stays under the
/// 255-byte `NAME_MAX` once the prefix, UUID and suffix are added.
const MAX_TEMP_NAME_STEM: usize = 128;
/// Permission bits carried over to a rewritten file. Set-id and sticky bits are dropped, as the
/// kernel itself does when a non-root process writes a set-id file.
const KEPT_MODE_BITS: u32 = 0o777;

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
    let resolved = resolve_confined(workspace, path)?;
    if !resolved.missing.is_empty() {
        return Err(not_found(path));
    }
    // O_NONBLOCK so a FIFO planted in the workspace cannot hang the read; the type is checked on
    // the opened descriptor, not the path, so the check and the read see the same file.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOFOLLOW).bits() as i32)
        .open(&resolved.existing)
        .map_err(|e| io_error(path, &e))?;
    let metadata = file.metadata().map_err(|e| io_error(path, &e))?;
    if !metadata.is_file() {
        return Err(not_a_file(path));
    }
    if metadata.len() > MAX_READ_BYTES {
        return Err(too_large(path));
    }
    // The file may grow between the stat and the read; `take` keeps the cap regardless.
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES + 1).read_to_end(&mut bytes).map_err(|e| io_error(path, &e))?;
    if bytes.len() as u64 > MAX_READ_BYTES {
        return Err(too_large(path));
    }
    String::from_utf8(bytes).map_err(|_| {
        RpcError::with_kind(INVALID_PARAMS, "not_text", format!("{} is not UTF-8 text", path.display()))
    })
}

fn write_confined(workspace: &Path, path: &Path, content: &[u8]) -> Result<(), RpcError> {
    let resolved = resolve_confined(workspace, path)?;
    let (dir, name, mode) = match resolved.missing.as_slice() {
        [] => {
            let metadata = fs::metadata(&resolved.existing).map_err(|e| io_error(path, &e))?;
            if !metadata.is_file() {
                return Err(not_a_file(path));
            }
            let (Some(dir), Some(name)) = (resolved.existing.parent(), resolved.existing.file_name()) else {
                return Err(not_a_file(path));
            };
            (dir.to_path_buf(), name.to_owned(), Some(metadata.permissions().mode() & KEPT_MODE_BITS))
        }
        [name] => (resolved.existing, name.clone(), None),
        // The parent directory is missing; creating directories is not the agent's to ask here.
        _ => return Err(not_found(path)),
    };
    let target = dir.join(&name);
    let temp = TempFile::create_in(&dir, &name).map_err(|e| io_error(path, &e))?;
    temp.fill(content, mode).map_err(|e| io_error(path, &e))?;
    fs::rename(&temp.path, &target).map_err(|e| io_error(path, &e))?;
    temp.disarm();
    // Makes the rename itself durable; the data is already synced, so a failure here only risks
    // seeing the old file after a crash and is not worth failing a completed write for.
    if let Ok(dir) = File::open(&dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// A temp file that removes itself unless it was renamed into place.
struct TempFile {
    path: PathBuf,
    file: Option<File>,
    armed: bool,
}

impl TempFile {
    fn create_in(dir: &Path, target_name: &OsStr) -> io::Result<Self> {
        let stem = &target_name.as_bytes()[..target_name.len().min(MAX_TEMP_NAME_STEM)];
        let mut name = OsString::from(".");
        name.push(OsStr::from_bytes(stem));
        name.push(format!(".mediatord-{}.tmp", uuid::Uuid::new_v4()));
        let path = dir.join(name);
        let file = OpenOptions::new().write(true).create_new(true).open(&path)?;
        Ok(Self { path, file: Some(file), armed: true })
    }

    /// Writes, sets the mode (explicitly, so the umask does not narrow a kept mode) and syncs.
    fn fill(&self, content: &[u8], mode: Option<u32>) -> io::Result<()> {
        let Some(mut file) = self.file.as_ref() else {
            return Err(io::Error::other("temp file already closed"));
        };
        file.write_all(content)?;
        if let Some(mode) = mode {
            file.set_permissions(fs::Permissions::from_mode(mode))?;
        }
        file.sync_all()
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        self.file.take();
        if self.armed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// A path with its symlinks resolved: `existing` is canonical, `missing` are the trailing components
/// that do not exist yet (plain names only).
#[derive(Debug)]
struct Resolved {
    existing: PathBuf,
    missing: Vec<OsString>,
}

/// Resolves `path` and requires the result to be inside `workspace` (which is canonical).
fn resolve_confined(workspace: &Path, path: &Path) -> Result<Resolved, RpcError> {
    let outside = || {
        RpcError::with_kind(
            INVALID_PARAMS,
            "path_outside_workspace",
            format!("{} is outside the session's workspace", path.display()),
        )
    };
    let resolved = resolve(path).map_err(|error| match error {
        // An error on the way to an outside path is reported as outside, so the agent learns
        // nothing about what exists there.
        _ if !lexically_inside(workspace, path) => outside(),
        ResolveError::DotDotAfterMissing => RpcError::with_kind(
            INVALID_PARAMS,
            "invalid_path",
            format!("{} has `..` after a component that does not exist", path.display()),
        ),
        ResolveError::TooManyLinks => RpcError::with_kind(
            INVALID_PARAMS,
            "invalid_path",
            format!("{} has more than {MAX_SYMLINK_HOPS} levels of symlinks", path.display()),
        ),
        ResolveError::Io(e) => io_error(path, &e),
    })?;
    if !resolved.existing.starts_with(workspace) {
        return Err(outside());
    }
    Ok(resolved)
}

#[derive(Debug)]
enum ResolveError {
    DotDotAfterMissing,
    TooManyLinks,
    Io(io::Error),
}

/// Canonicalises the longest existing prefix of `path` and keeps the rest as names. A dangling
/// symlink on the way is followed by hand (`canonicalize` refuses it), so writing through a link
/// to a file that does not exist yet creates the link's target, not a file replacing the link.
fn resolve(path: &Path) -> Result<Resolved, ResolveError> {
    let mut current = path.to_path_buf();
    let mut hops = 0;
    'restart: loop {
        let components: Vec<Component<'_>> = current.components().collect();
        for split in (1..=components.len()).rev() {
            let prefix: PathBuf = components[..split].iter().collect();
            let rest = &components[split..];
            match fs::canonicalize(&prefix) {
                Ok(existing) => {
                    let missing = rest
                        .iter()
                        .map(|component| match component {
                            Component::Normal(name) => Ok(name.to_os_string()),
                            _ => Err(ResolveError::DotDotAfterMissing),
                        })
                        .collect::<Result<_, _>>()?;
                    return Ok(Resolved { existing, missing });
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let is_link = fs::symlink_metadata(&prefix).is_ok_and(|m| m.file_type().is_symlink());
                    if is_link {
                        hops += 1;
                        if hops > MAX_SYMLINK_HOPS {
                            return Err(ResolveError::TooManyLinks);
                        }
                        let target = fs::read_link(&prefix).map_err(ResolveError::Io)?;
                        let base = prefix.parent().unwrap_or(Path::new("/"));
                        current = rest.iter().fold(base.join(target), |acc, c| acc.join(c));
                        continue 'restart;
                    }
                }
                Err(e) => return Err(ResolveError::Io(e)),
            }
        }
        // Only reachable if even `/` failed to canonicalise with NotFound.
        return Err(ResolveError::Io(io::Error::from(io::ErrorKind::NotFound)));
    }
}

fn lexically_inside(workspace: &Path, path: &Path) -> bool {
    normalize_lexically(path).starts_with(workspace)
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
    use std::os::unix::fs::symlink;

    /// A canonical workspace (tempdirs may sit under a symlinked `/tmp`) and an outside directory.
    struct Dirs {
        _root: tempfile::TempDir,
        ws: PathBuf,
        outside: PathBuf,
    }

    fn dirs() -> Dirs {
        let root = tempfile::tempdir().expect("tempdir");
        let root_path = fs::canonicalize(root.path()).expect("canonical tempdir");
        let (ws, outside) = (root_path.join("ws"), root_path.join("outside"));
        fs::create_dir(&ws).expect("mkdir ws");
        fs::create_dir(&outside).expect("mkdir outside");
        Dirs { _root: root, ws, outside }
    }

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

    fn dir_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
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
        let missing_parent = write(&d.ws, &d.ws.join("no/such.txt"), "x").await.expect_err("no parent");
        assert_eq!((missing_parent.code, kind(&missing_parent)), (RESOURCE_NOT_FOUND, Some("not_found")));
        let directory = write(&d.ws, &d.ws.join("dir"), "x").await.expect_err("directory");
        assert_eq!(kind(&directory), Some("not_a_file"));
        let dot_dot = write(&d.ws, &d.ws.join("no/../x.txt"), "x").await.expect_err("dot dot");
        assert_eq!(kind(&dot_dot), Some("invalid_path"));
        let relative = write_text_file(&d.ws, &json!({"path": "x.txt", "content": "x"})).await;
        assert_eq!(relative.as_ref().err().and_then(kind), Some("invalid_path"));
        let no_content = write_text_file(&d.ws, &json!({"path": path_str(&d.ws.join("x"))})).await;
        assert_eq!(no_content.as_ref().err().and_then(kind), Some("invalid_params"));
        assert_eq!(dir_names(&d.ws), ["dir"]);
        assert!(dir_names(&d.ws.join("dir")).is_empty());
    }

    #[tokio::test]
    async fn failed_write_removes_its_temp_file() {
        let d = dirs();
        // Stands in for a target swapped for a non-empty directory after resolution, which makes
        // the rename fail: the guard must still remove the temp file.
        let dir = d.ws.join("d");
        fs::create_dir(&dir).expect("mkdir");
        let temp = TempFile::create_in(&dir, OsStr::new("t")).expect("temp");
        temp.fill(b"x", None).expect("filled");
        fs::create_dir(dir.join("t")).expect("mkdir target");
        fs::write(dir.join("t/inner"), "keep").expect("non-empty dir");
        assert!(fs::rename(&temp.path, dir.join("t")).is_err());
        drop(temp);
        assert_eq!(dir_names(&dir), ["t"]);
    }

    #[test]
    fn temp_names_stay_short_for_long_targets() {
        let d = dirs();
        let long = "n".repeat(250);
        let temp = TempFile::create_in(&d.ws, OsStr::new(&long)).expect("temp with a long target name");
        assert!(temp.path.file_name().is_some_and(|n| n.len() <= 255));
        drop(temp);
        assert!(dir_names(&d.ws).is_empty());
    }
}

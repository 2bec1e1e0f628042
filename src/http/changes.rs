//! What sessions changed (`docs/protocol.md` § 18), in qwen serve's shapes where it has them: the
//! workspace diff (`/workspace/git/diff[/file]`), a session's turns and rewind
//! (`/session/{id}/rewind/snapshots`, `POST /session/{id}/rewind`, `/session/{id}/turns…`), and the
//! file routes (`/file`, `/file/bytes`, `/stat`, `/list`, `/glob`, `POST /file/write`,
//! `/file/edit`), each also under `/workspaces/{workspace}/…` as qwen serve has them. The work is
//! `changes`' (on a blocking thread); this file parses, picks the workspace, and renders.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, FromRequestParts, OptionalFromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::extract::{AppState, JsonBody, PathParams, client_id};
use crate::changes::calls::FileCall;
use crate::changes::{Changes, Entry, FileError};
use crate::desk::{Caller, Desk, Refusal};
use crate::store::TurnRecord;

/// The query parameters these routes take; each one given twice, or not text, is `invalid_query`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Params {
    path: Option<String>,
    /// qwen serve's clients send it with a renamed file's diff; renames are not detected here, so
    /// the diff of `path` alone is the answer.
    #[serde(rename = "oldPath")]
    _old_path: Option<String>,
    max_bytes: Option<String>,
    line: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
    offset: Option<String>,
    pattern: Option<String>,
    max_results: Option<String>,
    include_ignored: Option<String>,
    format: Option<String>,
}

impl Params {
    /// A file call's argument by its name in qwen serve's query (`crate::changes::calls`).
    fn get(&self, name: &str) -> Option<String> {
        match name {
            "path" => &self.path,
            "maxBytes" => &self.max_bytes,
            "line" => &self.line,
            "limit" => &self.limit,
            "cursor" => &self.cursor,
            "offset" => &self.offset,
            "pattern" => &self.pattern,
            "maxResults" => &self.max_results,
            "includeIgnored" => &self.include_ignored,
            _ => &None,
        }
        .clone()
    }
}

fn params(uri: &Uri) -> Result<Params, ApiError> {
    Query::<Params>::try_from_uri(uri).map(|Query(p)| p).map_err(|_| ApiError::InvalidQuery)
}

fn required<'a>(name: &str, raw: Option<&'a str>) -> Result<&'a str, ApiError> {
    raw.filter(|v| !v.is_empty())
        .ok_or_else(|| FileError::Parse(format!("{name} query parameter is required")).into())
}

fn engine(d: &AppState) -> Result<Arc<Changes>, ApiError> {
    d.changes
        .clone()
        .ok_or_else(|| Refusal::ChangesUnavailable("the snapshot store could not be opened".into()).into())
}

/// Runs `work` on a blocking thread (the file system and the snapshot store block).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work).await.map_err(|_| ApiError::Refused(Refusal::Internal))?
}

/// qwen serve's read answers are never cached and never sniffed.
fn no_store(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    response
}

fn json_ok(value: impl serde::Serialize) -> ApiResult {
    Ok(no_store(Json(value).into_response()))
}

/// The workspace a route works in: the one `/workspaces/{workspace}/…` names (an absolute path,
/// URL-encoded), or the primary workspace on the same route without that prefix. One handler
/// serves both forms; the name is resolved in the handler, after the other extractors, as each
/// form's own handler did.
pub(super) struct Named(Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for Named {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Named, ApiError> {
        match <axum::extract::Path<String> as OptionalFromRequestParts<S>>::from_request_parts(parts, state)
            .await
        {
            Ok(named) => Ok(Named(named.map(|axum::extract::Path(w)| w))),
            Err(_) => Err(ApiError::InvalidPath),
        }
    }
}

impl Named {
    fn workspace(&self, d: &AppState) -> Result<PathBuf, ApiError> {
        match &self.0 {
            Some(named) => Ok(d.workspace(named)?),
            None => Ok(d.config.primary_workspace().to_path_buf()),
        }
    }
}

// The workspace diff.

async fn diff_of(d: AppState, workspace: PathBuf) -> ApiResult {
    let engine = engine(&d)?;
    let base = d.workspace_base(&workspace).await;
    let ws = workspace.clone();
    let diff = blocking(move || engine.workspace_diff(&ws, base.as_deref()).map_err(diff_error)).await?;
    let mut body = serde_json::to_value(&diff).map_err(|_| ApiError::Refused(Refusal::Internal))?;
    body["v"] = json!(1);
    body["workspaceCwd"] = json!(workspace.to_string_lossy());
    json_ok(body)
}

fn diff_error(e: crate::changes::git::DiffError) -> ApiError {
    Refusal::ChangesUnavailable(e.to_string()).into()
}

/// A path as a diff names it: relative to the workspace, `..` refused (qwen serve's
/// `toRepoRelativePath`); an absolute one under the workspace is made relative.
fn diff_path(workspace: &Path, raw: &str) -> Result<String, ApiError> {
    let outside = || ApiError::from(FileError::Outside(raw.to_owned()));
    let path = Path::new(raw);
    let rel = if path.is_absolute() { path.strip_prefix(workspace).map_err(|_| outside())? } else { path };
    if rel.components().any(|c| !matches!(c, std::path::Component::Normal(_))) || rel.as_os_str().is_empty() {
        return Err(outside());
    }
    Ok(rel.to_string_lossy().into_owned())
}

async fn diff_file_of(d: AppState, workspace: PathBuf, uri: Uri) -> ApiResult {
    let p = params(&uri)?;
    let raw = required("path", p.path.as_deref())?.to_owned();
    let path = diff_path(&workspace, &raw)?;
    let engine = engine(&d)?;
    let base = d.workspace_base(&workspace).await;
    let ws = workspace.clone();
    let found =
        blocking(move || engine.workspace_diff_file(&ws, base.as_deref(), &path).map_err(diff_error)).await?;
    let (hunks, truncated) = found.clone().unwrap_or_default();
    let mut body = json!({
        "v": 1,
        "workspaceCwd": workspace.to_string_lossy(),
        "path": raw,
        "available": found.is_some_and(|(h, _)| !h.is_empty()),
        "hunks": hunks,
    });
    if truncated {
        body["truncated"] = json!(true);
    }
    json_ok(body)
}

/// `GET /workspace/git/diff`, `GET /workspaces/{workspace}/git/diff`.
pub(super) async fn workspace_diff(State(d): State<AppState>, named: Named) -> ApiResult {
    let ws = named.workspace(&d)?;
    diff_of(d, ws).await
}

/// `GET /workspace/git/diff/file`, `GET /workspaces/{workspace}/git/diff/file`.
pub(super) async fn workspace_diff_file(State(d): State<AppState>, named: Named, uri: Uri) -> ApiResult {
    let ws = named.workspace(&d)?;
    diff_file_of(d, ws, uri).await
}

// A session's turns and rewind.

fn is_turn(r: &TurnRecord) -> bool {
    r.entry.get("kind").is_none() && r.entry.get("available") != Some(&json!(false))
}

/// `GET /session/{id}/rewind/snapshots`: qwen serve's `{snapshots: [{promptId, turnIndex,
/// timestamp, diffStats}]}`, one per turn with a change set.
pub(super) async fn rewind_snapshots(
    State(d): State<AppState>,
    PathParams(id): PathParams<String>,
) -> ApiResult {
    let records = d.turn_records(&id).await?;
    let snapshots: Vec<Value> = records
        .iter()
        .filter(|r| is_turn(r))
        .map(|r| {
            let e = &r.entry;
            let started = e.get("startedAt").and_then(Value::as_u64).unwrap_or(r.at);
            json!({
                "promptId": e.get("promptId"),
                "turnIndex": e.get("turnIndex"),
                "timestamp": crate::clock::iso8601(started),
                "diffStats": {
                    "filesChanged": e.get("filesChanged"),
                    "insertions": e.get("insertions"),
                    "deletions": e.get("deletions"),
                },
                "unapprovedCount": e.get("unapprovedCount"),
            })
        })
        .collect();
    json_ok(json!({"snapshots": snapshots}))
}

/// `POST /session/{id}/rewind {promptId, rewindFiles?, force?}`.
pub(super) async fn rewind(
    State(d): State<AppState>,
    PathParams(id): PathParams<String>,
    Extension(desk): Extension<Arc<Desk>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let Some(body) = body.as_object() else { return Err(ApiError::InvalidJson) };
    let prompt_id = match body.get("promptId") {
        Some(Value::String(p)) if !p.is_empty() => p.clone(),
        _ => return Err(Refusal::MissingPromptId.into()),
    };
    let flag = |name: &str| match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::from(Refusal::InvalidRewindFlag(format!(
            "`{name}` must be a boolean when provided"
        )))),
    };
    if flag("rewindFiles")? == Some(false) {
        return Err(Refusal::InvalidRewindFlag(
            "`rewindFiles: false` asks to rewind the conversation only, which no ACP agent offers: mediatord rewinds files".into(),
        )
        .into());
    }
    let force = flag("force")?.unwrap_or(false);
    let caller = caller.acting_as(client_id(&headers)?);
    let session = d.session(&id)?;
    let outcome = desk.rewind(&session, &caller, &prompt_id, force).await?;
    json_ok(json!({
        "rewound": outcome.rewound,
        "targetTurnIndex": outcome.target_turn_index,
        "filesChanged": outcome.files_changed,
        "filesFailed": outcome.files_failed,
    }))
}

/// `GET /session/{id}/turns`: every turn's change set (with its files, each marked `unapproved`
/// or not) and every rewind, oldest first.
pub(super) async fn turns(State(d): State<AppState>, PathParams(id): PathParams<String>) -> ApiResult {
    let records = d.turn_records(&id).await?;
    let entries: Vec<&Value> = records.iter().map(|r| &r.entry).collect();
    json_ok(json!({"sessionId": id, "turns": entries, "snapshots": d.config.snapshots}))
}

/// `GET /session/{id}/turns/{turn}/diff[?path=…][&format=unified]`: one file's hunks in a turn
/// (qwen serve's hunk shape), or the turn's whole unified diff as text.
pub(super) async fn turn_diff(
    State(d): State<AppState>,
    PathParams((id, turn)): PathParams<(String, u64)>,
    uri: Uri,
) -> ApiResult {
    let p = params(&uri)?;
    let unified = match p.format.as_deref() {
        None | Some("json") => false,
        Some("unified") => true,
        Some(f) => {
            return Err(
                Refusal::InvalidParameter(format!("format must be json or unified, got {f:?}")).into()
            );
        }
    };
    let records = d.turn_records(&id).await?;
    let record = records
        .into_iter()
        .filter(is_turn)
        .find(|r| r.entry.get("turnIndex").and_then(Value::as_u64) == Some(turn))
        .ok_or(Refusal::TurnNotFound { turn })?;
    let (Some(before), Some(after)) = (record.before.clone(), record.after.clone()) else {
        return Err(Refusal::ChangesUnavailable("that turn has no snapshots".into()).into());
    };
    let engine = engine(&d)?;
    let workspace = PathBuf::from(&record.workspace);
    let path = p.path.as_deref().map(|raw| diff_path(&workspace, raw)).transpose()?;
    let answer = blocking(move || {
        let missing = |e: std::io::Error| {
            ApiError::from(Refusal::ChangesUnavailable(format!("the turn's snapshot is gone: {e}")))
        };
        let b = engine.manifest(&before).map_err(missing)?;
        let a = engine.manifest(&after).map_err(missing)?;
        let changed: Vec<(String, Option<Entry>, Option<Entry>)> = crate::changes::differing(&b, &a)
            .into_iter()
            .filter(|(p, _, _)| path.as_deref().is_none_or(|want| want == *p))
            .map(|(p, o, n)| (p.to_owned(), o.copied(), n.copied()))
            .collect();
        if unified {
            let text: String =
                changed.iter().map(|(p, o, n)| engine.unified(p, o.as_ref(), n.as_ref())).collect();
            return Ok(Err(text));
        }
        let (hunks, truncated) = match changed.first() {
            Some((_, o, n)) => engine.hunks(o.as_ref(), n.as_ref()),
            None => (Vec::new(), false),
        };
        Ok(Ok(json!({
            "v": 1,
            "sessionId": record.session_id,
            "turnIndex": turn,
            "path": path,
            "available": !hunks.is_empty(),
            "hunks": hunks,
            "truncated": truncated,
        })))
    })
    .await?;
    match answer {
        Ok(body) => json_ok(body),
        Err(text) => Ok(no_store(
            ([(header::CONTENT_TYPE, HeaderValue::from_static("text/x-diff; charset=utf-8"))], text)
                .into_response(),
        )),
    }
}

// The file routes.

/// File call `op` (`crate::changes::calls`) in workspace `ws`, from the query and (a write, an
/// edit) the body; `named`: the caller must name itself (`X-Qwen-Client-Id`), as qwen serve asks of
/// reads and writes.
async fn file_call(
    d: AppState,
    ws: PathBuf,
    op: &str,
    uri: &Uri,
    named: Option<&HeaderMap>,
    body: Value,
) -> ApiResult {
    if let Some(headers) = named {
        client_id(headers)?;
    }
    let p = params(uri)?;
    let call =
        FileCall::parse(op, |name| p.get(name), || body).ok_or(ApiError::Refused(Refusal::Internal))??;
    let engine = engine(&d)?;
    let answer = blocking(move || Ok(call.run(&engine.files(&ws))?)).await?;
    let status = if answer.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok(no_store((status, Json(answer.json)).into_response()))
}

/// What every file route takes before its body: the daemon, the workspace the route names
/// ([`Named`], resolved by the call, after the body), its query and its headers.
pub(super) struct FileRoute {
    d: AppState,
    named: Named,
    uri: Uri,
    headers: HeaderMap,
}

impl FromRequestParts<AppState> for FileRoute {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<FileRoute, ApiError> {
        let named = Named::from_request_parts(parts, state).await?;
        Ok(FileRoute { d: state.clone(), named, uri: parts.uri.clone(), headers: parts.headers.clone() })
    }
}

impl FileRoute {
    /// A call read from the query alone; `named`: the caller must name itself.
    async fn query(self, op: &str, named: bool) -> ApiResult {
        let ws = self.named.workspace(&self.d)?;
        file_call(self.d, ws, op, &self.uri, named.then_some(&self.headers), Value::Null).await
    }

    /// A change, read from the body alone (the query is not read), by a caller that names itself.
    async fn change(self, op: &str, body: Value) -> ApiResult {
        let ws = self.named.workspace(&self.d)?;
        file_call(self.d, ws, op, &Uri::from_static("/"), Some(&self.headers), body).await
    }
}

/// `GET /file`, `GET /workspaces/{workspace}/file`.
pub(super) async fn file(route: FileRoute) -> ApiResult {
    route.query("read", true).await
}

/// `GET /file/bytes`, `GET /workspaces/{workspace}/file/bytes`.
pub(super) async fn file_bytes(route: FileRoute) -> ApiResult {
    route.query("read_bytes", true).await
}

/// `GET /stat`, `GET /workspaces/{workspace}/stat`.
pub(super) async fn file_stat(route: FileRoute) -> ApiResult {
    route.query("stat", false).await
}

/// `GET /list`, `GET /workspaces/{workspace}/list`.
pub(super) async fn file_list(route: FileRoute) -> ApiResult {
    route.query("list", false).await
}

/// `GET /glob`, `GET /workspaces/{workspace}/glob`.
pub(super) async fn file_glob(route: FileRoute) -> ApiResult {
    route.query("glob", false).await
}

/// `POST /file/write`, `POST /workspaces/{workspace}/file/write`.
pub(super) async fn file_write(route: FileRoute, JsonBody(b): JsonBody) -> ApiResult {
    route.change("write", b).await
}

/// `POST /file/edit`, `POST /workspaces/{workspace}/file/edit`.
pub(super) async fn file_edit(route: FileRoute, JsonBody(b): JsonBody) -> ApiResult {
    route.change("edit", b).await
}

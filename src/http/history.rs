//! Handlers of the durable state (`docs/protocol.md#14-durable-state`): the audit trail
//! (`GET /audit`), a workspace's rules (`/workspace/:cwd/permission-rules[/:ruleId]`), and
//! resuming a dormant session (`POST /session/:id/resume`). The dormant replay itself is
//! `GET /session/:id/events` (`events.rs`), and the listing with `?include=ended` is in
//! `sessions.rs`.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::extract::{AppState, JsonBody, PathParams, client_id};
use crate::clock::now_ms;
use crate::desk::Refusal;
use crate::permission::parse_rule;
use crate::store::{AuditOutcome, AuditQuery, Cursor, MAX_TIME_MS};

/// `GET /audit`'s page size when `limit` is not given.
const DEFAULT_AUDIT_PAGE: usize = 50;
/// Its largest page: one answer stays well under a megabyte of JSON for typical entries.
const MAX_AUDIT_PAGE: usize = 500;
/// The most entries one export (`?format=csv|json`) holds, and its default: an answer of a few
/// megabytes for typical entries, built in memory once. More are reached with the cursor the
/// answer's `X-Mediatord-Next-Cursor` header gives.
const MAX_AUDIT_EXPORT: usize = 5000;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditParams {
    workspace: Option<String>,
    session_id: Option<String>,
    since: Option<String>,
    until: Option<String>,
    outcome: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
    format: Option<String>,
}

/// What `GET /audit` answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AuditFormat {
    /// A page: `{entries, nextCursor, durable}`.
    Page,
    /// A download: RFC 4180 CSV, one row per entry (`audit::CSV_HEADER`).
    Csv,
    /// A download: a JSON array of the entries.
    Json,
}

fn bad(text: String) -> ApiError {
    ApiError::Refused(Refusal::InvalidParameter(text))
}

/// A time parameter: milliseconds since the Unix epoch, at most [`MAX_TIME_MS`].
fn millis(name: &str, v: Option<&str>) -> Result<Option<u64>, ApiError> {
    v.map(|v| {
        v.parse::<u64>().ok().filter(|t| *t <= MAX_TIME_MS).ok_or_else(|| {
            bad(format!("{name} must be milliseconds since the Unix epoch, 0 to {MAX_TIME_MS}, got {v:?}"))
        })
    })
    .transpose()
}

/// The audit query a request's parameters ask for, and the answer's format.
fn audit_query(uri: &Uri) -> Result<(AuditQuery, AuditFormat), ApiError> {
    let Query(p) = Query::<AuditParams>::try_from_uri(uri).map_err(|_| ApiError::InvalidQuery)?;
    let format = match p.format.as_deref() {
        None => AuditFormat::Page,
        Some("csv") => AuditFormat::Csv,
        Some("json") => AuditFormat::Json,
        Some(f) => return Err(bad(format!("format must be csv or json, got {f:?}"))),
    };
    let max = if format == AuditFormat::Page { MAX_AUDIT_PAGE } else { MAX_AUDIT_EXPORT };
    let outcome = match p.outcome.as_deref() {
        None => None,
        Some(o) => Some(AuditOutcome::parse(o).ok_or_else(|| {
            let all: Vec<&str> = AuditOutcome::ALL.iter().map(|o| o.as_str()).collect();
            bad(format!("outcome must be one of {}, got {o:?}", all.join(", ")))
        })?),
    };
    let cursor = match p.cursor.as_deref() {
        None => None,
        Some(c) => Some(Cursor::decode(c).ok_or_else(|| bad("cursor is not one this daemon gave".into()))?),
    };
    let limit = match p.limit.as_deref() {
        None if format == AuditFormat::Page => DEFAULT_AUDIT_PAGE,
        None => MAX_AUDIT_EXPORT,
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => n,
            _ => return Err(bad(format!("limit must be 1 to {max}, got {l:?}"))),
        },
    };
    let (since, until) = (millis("since", p.since.as_deref())?, millis("until", p.until.as_deref())?);
    if let (Some(s), Some(u)) = (since, until)
        && s > u
    {
        return Err(bad(format!("since ({s}) is after until ({u}): the window is empty")));
    }
    // A workspace is matched as the daemon stores it: canonical.
    let workspace =
        p.workspace.map(|w| std::fs::canonicalize(&w).map_or(w, |c| c.to_string_lossy().into_owned()));
    Ok((AuditQuery { workspace, session_id: p.session_id, since, until, outcome, cursor, limit }, format))
}

/// `GET /audit`: decisions and pending requests, newest first, filtered, a page at a time.
pub(super) async fn audit(State(d): State<AppState>, uri: Uri) -> ApiResult {
    let (query, format) = audit_query(&uri)?;
    let store = d.store.clone();
    let page = tokio::task::spawn_blocking(move || store.query_audit(&query))
        .await
        .map_err(|_| ApiError::Refused(Refusal::Internal))?
        .map_err(|e| {
            tracing::error!(error = %e, "GET /audit");
            ApiError::Refused(Refusal::Internal)
        })?;
    let next = page.next_cursor.map(Cursor::encode);
    let (body, content_type, file) = match format {
        AuditFormat::Page => {
            return Ok(Json(
                json!({"entries": page.entries, "nextCursor": next, "durable": d.store.durable()}),
            )
            .into_response());
        }
        AuditFormat::Csv => {
            let mut csv = String::from(crate::audit::CSV_HEADER);
            page.entries.iter().for_each(|e| csv.push_str(&crate::audit::csv_line(e)));
            (csv, "text/csv; charset=utf-8", "mediatord-audit.csv")
        }
        // serde leaves C1 controls and bidi characters raw: written as `\uXXXX`, the same JSON.
        AuditFormat::Json => (
            crate::text::escape_json(&Value::Array(page.entries).to_string()).into_owned(),
            "application/json",
            "mediatord-audit.json",
        ),
    };
    let mut response = (
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{file}\"")),
        ],
        body,
    )
        .into_response();
    if let Some(next) = next.and_then(|n| HeaderValue::from_str(&n).ok()) {
        response.headers_mut().insert(NEXT_CURSOR, next);
    }
    Ok(response)
}

/// An export's header naming the cursor of the entries it left out (the export was full).
const NEXT_CURSOR: &str = "x-mediatord-next-cursor";

/// What a `/workspace/{*rest}` path names: the workspace and what follows it.
pub(super) enum WorkspacePath {
    Sessions(String),
    Rules(String),
    Rule(String, String),
}

/// Splits `<cwd>/sessions`, `<cwd>/permission-rules` and `<cwd>/permission-rules/<ruleId>` (the
/// cwd may arrive with its slashes encoded or not).
pub(super) fn workspace_path(raw: &str) -> Result<WorkspacePath, ApiError> {
    let absolute = |cwd: &str| {
        let cwd = if cwd.starts_with('/') { cwd.to_owned() } else { format!("/{cwd}") };
        if cwd.contains('\0') { Err(ApiError::Refused(Refusal::InvalidCwd)) } else { Ok(cwd) }
    };
    if let Some(cwd) = raw.strip_suffix("/sessions") {
        return Ok(WorkspacePath::Sessions(absolute(cwd)?));
    }
    if let Some(cwd) = raw.strip_suffix("/permission-rules") {
        return Ok(WorkspacePath::Rules(absolute(cwd)?));
    }
    if let Some((cwd, rule)) = raw.rsplit_once("/permission-rules/")
        && !rule.is_empty()
        && !rule.contains('/')
    {
        return Ok(WorkspacePath::Rule(absolute(cwd)?, rule.to_owned()));
    }
    Err(ApiError::RouteNotFound)
}

/// `GET /workspace/:cwd/permission-rules`.
pub(super) fn list_workspace_rules(d: &AppState, cwd: &str) -> ApiResult {
    let workspace = d.workspace(cwd)?;
    Ok(Json(json!({"workspace": workspace.to_string_lossy(), "rules": d.workspace_rules(&workspace).list()}))
        .into_response())
}

/// `POST /workspace/:cwd/permission-rules`: answered once the rule is on disk.
pub(super) async fn workspace_post(
    State(d): State<AppState>,
    headers: HeaderMap,
    PathParams(raw): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let WorkspacePath::Rules(cwd) = workspace_path(&raw)? else { return Err(ApiError::MethodNotAllowed) };
    let workspace = d.workspace(&cwd)?;
    let client = client_id(&headers)?;
    let rule = parse_rule(&body, &workspace, client, now_ms())
        .map_err(|e| ApiError::Refused(Refusal::InvalidRule(e)))?;
    let wire = d.workspace_rules(&workspace).add(rule, "").await?;
    Ok((StatusCode::CREATED, Json(json!({"rule": wire, "workspace": workspace.to_string_lossy()})))
        .into_response())
}

/// `DELETE /workspace/:cwd/permission-rules/:ruleId`: answered once the removal is on disk.
pub(super) async fn workspace_delete(
    State(d): State<AppState>,
    PathParams(raw): PathParams<String>,
) -> ApiResult {
    let WorkspacePath::Rule(cwd, rule_id) = workspace_path(&raw)? else {
        return Err(ApiError::MethodNotAllowed);
    };
    let workspace = d.workspace(&cwd)?;
    d.workspace_rules(&workspace).remove(&rule_id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /session/:id/resume`.
pub(super) async fn resume(State(d): State<AppState>, PathParams(id): PathParams<String>) -> ApiResult {
    let (s, resumed) = d.resume(&id).await?;
    Ok(Json(json!({
        "sessionId": s.id,
        "workspaceCwd": s.workspace.to_string_lossy(),
        "agent": s.agent_name,
        "resumed": resumed,
        "lastEventId": s.last_event_id(),
    }))
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_paths_split_at_their_resource() {
        let ok = |raw: &str| workspace_path(raw).ok();
        assert!(matches!(ok("/a/b/sessions"), Some(WorkspacePath::Sessions(c)) if c == "/a/b"));
        assert!(matches!(ok("a/b/sessions"), Some(WorkspacePath::Sessions(c)) if c == "/a/b"));
        assert!(matches!(ok("/a/permission-rules"), Some(WorkspacePath::Rules(c)) if c == "/a"));
        assert!(
            matches!(ok("/a/permission-rules/rule-1"), Some(WorkspacePath::Rule(c, r)) if c == "/a" && r == "rule-1")
        );
        assert!(ok("/a/permission-rules/").is_none());
        assert!(ok("/a/other").is_none());
    }

    #[test]
    fn audit_queries_are_checked() {
        let q = |s: &str| audit_query(&s.parse::<Uri>().expect("uri")).map(|(query, _)| query);
        let all = q("/audit").expect("no filters");
        assert_eq!(all.limit, DEFAULT_AUDIT_PAGE);
        let full =
            q("/audit?sessionId=s&since=5&until=9&outcome=abandoned&cursor=cff&limit=3").expect("valid");
        assert_eq!(full.session_id.as_deref(), Some("s"));
        assert_eq!((full.since, full.until), (Some(5), Some(9)));
        assert_eq!(full.outcome, Some(AuditOutcome::Abandoned));
        assert_eq!(full.cursor, Some(Cursor(255)));
        assert_eq!(full.limit, 3);
        for bad in [
            "/audit?since=yesterday",
            "/audit?outcome=maybe",
            "/audit?cursor=zz",
            "/audit?limit=0",
            "/audit?limit=501",
            "/audit?since=9223372036854775808",
            "/audit?since=18446744073709551615",
            "/audit?until=9007199254740992",
            "/audit?since=-1",
            "/audit?since=5&until=4",
            "/audit?cursor=cffffffffffffffff",
            "/audit?format=xml",
            "/audit?format=csv&limit=5001",
        ] {
            assert!(matches!(q(bad), Err(ApiError::Refused(Refusal::InvalidParameter(_)))), "{bad}");
        }
    }

    #[test]
    fn an_export_is_a_bounded_download_of_the_same_filters() {
        let q = |s: &str| audit_query(&s.parse::<Uri>().expect("uri")).expect("valid");
        assert_eq!(q("/audit").1, AuditFormat::Page);
        let (csv, format) = q("/audit?format=csv&sessionId=s");
        assert_eq!(
            (format, csv.limit, csv.session_id.as_deref()),
            (AuditFormat::Csv, MAX_AUDIT_EXPORT, Some("s"))
        );
        let (json, format) = q("/audit?format=json&limit=5000");
        assert_eq!((format, json.limit), (AuditFormat::Json, MAX_AUDIT_EXPORT));
        assert_eq!(q("/audit?format=csv&limit=7").0.limit, 7);
        assert_eq!(q("/audit?limit=500").0.limit, MAX_AUDIT_PAGE);
    }
}

//! `POST /session/:id/shell` (SPEC §9).

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;

use crate::error::ApiError;
use crate::extract::JsonBody;
use crate::routes::AppState;

pub async fn run_shell(
    State(d): State<AppState>,
    _headers: HeaderMap,
    Path(_id): Path<String>,
    JsonBody(_body): JsonBody,
) -> Result<Response, ApiError> {
    if d.config.token_digest.is_none() {
        return Err(ApiError::TokenRequired);
    }
    Err(ApiError::SessionShellDisabled)
}

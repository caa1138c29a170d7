//! The admin API's key routes, behind the head's admin key: create, list
//! and revoke API keys. The `superfluid keys` commands call them.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::admin_state::AdminState;
use super::extract::ApiJson;
use super::ApiError;
use crate::keys::{KeyRecord, NewKey, UsageSnapshot};

/// The key routes, under `/admin/v1/keys`; the caller adds the admin-key check.
pub fn routes() -> Router<AdminState> {
    Router::new()
        .route("/admin/v1/keys", get(list).post(create))
        .route("/admin/v1/keys/{name}/revoke", post(revoke))
}

/// `POST /admin/v1/keys` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    /// The key's unique name.
    name: String,
    /// The models it may use (default: all).
    models: Option<Vec<String>>,
    /// Seconds until it expires (default: never).
    expires_in_secs: Option<u64>,
    /// Requests per minute (default: no limit).
    rpm: Option<u32>,
    /// Prompt and completion tokens per minute (default: no limit).
    tpm: Option<u32>,
}

async fn create(
    State(state): State<AdminState>,
    ApiJson(req): ApiJson<CreateRequest>,
) -> Result<Json<Value>, ApiError> {
    if req.expires_in_secs == Some(0) {
        return Err(ApiError::param(
            "expires_in_secs",
            "expires_in_secs must be at least 1",
        ));
    }
    if req.models.as_ref().is_some_and(Vec::is_empty) {
        return Err(ApiError::param(
            "models",
            "models must name at least one model; leave it out for all models",
        ));
    }
    let (secret, record) = state.keys.create(NewKey {
        name: req.name,
        expires_in: req.expires_in_secs.map(Duration::from_secs),
        models: req.models,
        rpm: req.rpm,
        tpm: req.tpm,
    })?;
    tracing::info!(key = %record.name, "created an API key");
    let mut body = key_json(&record, &UsageSnapshot::default());
    body["key"] = json!(secret);
    Ok(Json(body))
}

async fn list(State(state): State<AdminState>) -> Json<Value> {
    Json(Value::Array(
        state
            .keys
            .list()
            .iter()
            .map(|(record, usage)| key_json(record, usage))
            .collect(),
    ))
}

async fn revoke(
    State(state): State<AdminState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let record = state.keys.revoke(&name)?;
    tracing::info!(key = %record.name, "revoked an API key");
    Ok(Json(json!({"name": record.name})))
}

/// One key as `keys list --json` prints it; never its secret.
pub fn key_json(record: &KeyRecord, usage: &UsageSnapshot) -> Value {
    json!({
        "name": record.name,
        "created": record.created,
        "expires": record.expires,
        "models": record.models,
        "rpm": record.rpm,
        "tpm": record.tpm,
        "last_used": usage.last_used,
        "usage": {
            "requests": usage.requests,
            "prompt_tokens": usage.prompt_tokens,
            "cached_tokens": usage.cached_tokens,
            "completion_tokens": usage.completion_tokens,
        },
    })
}

//! The admin API's model routes, behind the head's admin key: where each
//! model is loaded, and loading or unloading one by hand. The
//! `superfluid models` commands call them.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::admin_state::AdminState;
use super::extract::ApiJson;
use super::ApiError;

/// The model routes, under `/admin/v1/models`; the caller adds the
/// admin-key check.
pub fn routes() -> Router<AdminState> {
    Router::new()
        .route("/admin/v1/models", get(list))
        .route("/admin/v1/models/{model}/load", post(load))
        .route("/admin/v1/models/{model}/unload", post(unload))
}

/// `POST /admin/v1/models/{model}/load|unload` body.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlaceRequest {
    /// The node's id, name or key fingerprint; none: where the head chooses
    /// (load) or every node that has it (unload).
    node: Option<String>,
}

async fn list(State(state): State<AdminState>) -> Json<Value> {
    let models = state.fleet.placements().into_iter().map(|m| {
        json!({
            "id": m.id,
            "sha256": m.sha256,
            "size": m.size,
            "loaded_on": m.loaded_on.into_iter().map(|(node_id, name)| json!({"node_id": node_id, "name": name})).collect::<Vec<_>>(),
        })
    });
    Json(Value::Array(models.collect()))
}

async fn load(
    State(state): State<AdminState>,
    Path(model): Path<String>,
    ApiJson(req): ApiJson<PlaceRequest>,
) -> Result<Json<Value>, ApiError> {
    known(&state, &model)?;
    let node = state.fleet.load_model(&model, req.node.as_deref()).await?;
    Ok(Json(json!({"model": model, "loaded_on": node})))
}

async fn unload(
    State(state): State<AdminState>,
    Path(model): Path<String>,
    ApiJson(req): ApiJson<PlaceRequest>,
) -> Result<Json<Value>, ApiError> {
    known(&state, &model)?;
    let told = state.fleet.unload_model(&model, req.node.as_deref())?;
    Ok(Json(json!({"model": model, "unloading_on": told})))
}

/// A 404 naming the head's models unless `model` is one of them.
fn known(state: &AdminState, model: &str) -> Result<(), ApiError> {
    let served: Vec<String> = state.fleet.placements().into_iter().map(|m| m.id).collect();
    if served.iter().any(|id| id == model) {
        return Ok(());
    }
    Err(ApiError::UnknownModel {
        model: model.to_owned(),
        served,
    })
}

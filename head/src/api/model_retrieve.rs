//! `GET /v1/models/{id}`: one served model as OpenAI's model object, as
//! the official clients' `models.retrieve` reads it.

use super::auth::{self, Caller};
use super::wire::models::ModelCard;
use super::wire::Object;
use super::{ApiError, AppState};
use axum::extract::{Path, State};
use axum::{Extension, Json};
use std::time::{SystemTime, UNIX_EPOCH};

/// `GET /v1/models/{id}`: the model's card, or 404 in OpenAI's shape when
/// the head does not serve it or the caller's key may not use it; the
/// error lists the models the key may use, as `/v1/models` does.
pub async fn retrieve(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    let listable: Vec<String> = state
        .catalog
        .ids()
        .into_iter()
        .filter(|served| auth::may_list(caller.as_ref(), served))
        .collect();
    if !listable.contains(&id) {
        return Err(ApiError::UnknownModel {
            model: id,
            served: listable,
        });
    }
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(Json(ModelCard {
        loaded_on: state.fleet.loaded_on(&id),
        id,
        object: Object::Model,
        created,
        owned_by: "superfluid".to_owned(),
    }))
}

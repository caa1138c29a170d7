//! Ollama's model listings and probes: `/api/tags`, `/api/ps`,
//! `/api/show`, `/api/version` and `/`.

use super::super::auth::{self, Caller};
use super::super::generate::residency;
use super::super::AppState;
use super::clock::rfc3339;
use super::extract::OllamaJson;
use crate::api::ApiError;
use crate::codec::ModelCodec;
use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::time::UNIX_EPOCH;

/// The Ollama API version superfluid answers as: the one whose endpoints
/// and fields it speaks.
pub const OLLAMA_VERSION: &str = "0.12.0";

/// `GET /api/version`.
pub async fn version() -> Json<Value> {
    Json(json!({ "version": OLLAMA_VERSION }))
}

/// `GET /api/tags`: the models this head serves and the caller may use.
pub async fn tags(State(state): State<AppState>, caller: Option<Extension<Caller>>) -> Json<Value> {
    let models: Vec<Value> = visible(&state, caller.as_ref())
        .map(|codec| card(&state, codec))
        .collect();
    Json(json!({ "models": models }))
}

/// `GET /api/ps`: the models a node serves now, loaded as long as it runs.
pub async fn ps(State(state): State<AppState>, caller: Option<Extension<Caller>>) -> Json<Value> {
    let models: Vec<Value> = visible(&state, caller.as_ref())
        .filter_map(|codec| {
            let ctx = residency::context(&state, codec.id())?;
            let mut card = card(&state, codec);
            if let Value::Object(fields) = &mut card {
                fields.remove("modified_at");
                fields.insert("expires_at".into(), "2318-01-01T00:00:00.000000000Z".into());
                fields.insert("size_vram".into(), 0.into());
                fields.insert("context_length".into(), ctx.into());
            }
            Some(card)
        })
        .collect();
    Json(json!({ "models": models }))
}

/// The body of `POST /api/show`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShowRequest {
    /// The model id.
    pub model: Option<String>,
    /// The older name of `model`.
    pub name: Option<String>,
    /// Whether to list long metadata values in full (they are summarized).
    pub verbose: Option<bool>,
}

/// `POST /api/show`: the model's template, parameters and GGUF metadata.
pub async fn show(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    OllamaJson(req): OllamaJson<ShowRequest>,
) -> Result<Json<Value>, ApiError> {
    let Some(name) = req.model.as_deref().or(req.name.as_deref()) else {
        return Err(ApiError::param(
            "model",
            "missing required parameter `model`; set it to one of the names GET /api/tags lists",
        ));
    };
    let id = name.strip_suffix(":latest").unwrap_or(name);
    let codec = state.catalog.get(id).ok_or_else(|| {
        ApiError::refused(
            StatusCode::NOT_FOUND,
            format!(
                "model '{name}' not found; served models: {}",
                state.catalog.ids().join(", ")
            ),
        )
    })?;
    auth::check_model(caller.as_ref(), codec.id())?;
    let metadata = codec.metadata();
    let mut model_info = Map::new();
    for (key, value) in &metadata {
        if key == "tokenizer.chat_template" {
            continue;
        }
        model_info.insert(key.clone(), typed(value));
    }
    let parameters = match residency::context(&state, codec.id()) {
        Some(ctx) => format!("num_ctx {ctx}"),
        None => String::new(),
    };
    let details = details(&metadata);
    Ok(Json(json!({
        "template": codec.template_source().unwrap_or_default(),
        "parameters": parameters,
        "modelfile": format!("FROM {}\n", codec.path().display()),
        "details": details,
        "model_info": model_info,
        "capabilities": ["completion"],
        "modified_at": modified(codec),
    })))
}

/// The codecs the caller may list.
fn visible<'a>(
    state: &'a AppState,
    caller: Option<&'a Extension<Caller>>,
) -> impl Iterator<Item = &'a std::sync::Arc<ModelCodec>> + 'a {
    state
        .catalog
        .models()
        .iter()
        .filter(move |codec| auth::may_list(caller, codec.id()))
}

/// One model as `/api/tags` lists it.
fn card(state: &AppState, codec: &ModelCodec) -> Value {
    let size = std::fs::metadata(codec.path())
        .map(|m| m.len())
        .unwrap_or(0);
    let digest = state
        .fleet
        .models()
        .iter()
        .find(|m| m.id == codec.id())
        .map(|m| m.sha256.clone())
        .unwrap_or_default();
    json!({
        "name": codec.id(),
        "model": codec.id(),
        "modified_at": modified(codec),
        "size": size,
        "digest": digest,
        "details": details(&codec.metadata()),
    })
}

/// When the model's file last changed.
fn modified(codec: &ModelCodec) -> String {
    let since = std::fs::metadata(codec.path())
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .unwrap_or_default();
    rfc3339(since.as_secs(), since.subsec_nanos())
}

/// Ollama's `details`, from the GGUF metadata.
fn details(metadata: &[(String, String)]) -> Value {
    let get = |key: &str| {
        metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let family = get("general.architecture");
    json!({
        "parent_model": "",
        "format": "gguf",
        "family": family,
        "families": [family],
        "parameter_size": get("general.size_label"),
        "quantization_level": quantization(&get("general.file_type")),
    })
}

/// The name of a GGUF `general.file_type`.
fn quantization(file_type: &str) -> String {
    let name = match file_type {
        "0" => "F32",
        "1" => "F16",
        "2" => "Q4_0",
        "3" => "Q4_1",
        "7" => "Q8_0",
        "8" => "Q5_0",
        "9" => "Q5_1",
        "10" => "Q2_K",
        "11" => "Q3_K_S",
        "12" => "Q3_K_M",
        "13" => "Q3_K_L",
        "14" => "Q4_K_S",
        "15" => "Q4_K_M",
        "16" => "Q5_K_S",
        "17" => "Q5_K_M",
        "18" => "Q6_K",
        "32" => "BF16",
        other => other,
    };
    name.to_owned()
}

/// A metadata value as JSON: a number or boolean where it reads as one.
fn typed(value: &str) -> Value {
    if let Ok(n) = value.parse::<i64>() {
        return n.into();
    }
    if let Ok(x) = value.parse::<f64>() {
        if x.is_finite() {
            return x.into();
        }
    }
    match value {
        "true" => true.into(),
        "false" => false.into(),
        _ => value.into(),
    }
}

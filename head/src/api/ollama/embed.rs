//! Ollama's `POST /api/embed` and its older `POST /api/embeddings`, as a
//! codec on the one embeddings path ([`crate::api::embeddings::compute`]):
//! same keys, limits, routing and metrics as `/v1/embeddings`, Ollama's
//! shapes.

use super::super::admission::Admission;
use super::super::auth::Caller;
use super::super::embeddings::{self, input, with_node};
use super::super::generate::residency;
use super::super::handlers::{next_request_id, request_span};
use super::super::request_log;
use super::super::request_metrics::RequestModel;
use super::super::AppState;
use super::extract::OllamaJson;
use crate::api::ApiError;
use axum::extract::State;
use axum::response::Response;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Instant;

/// `POST /api/embed`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedRequest {
    /// The model id; it must be an embedding model.
    pub model: Option<String>,
    /// A string or a list of strings.
    pub input: Option<Value>,
    /// Cut inputs longer than the context to fit (Ollama's default);
    /// `false` refuses them.
    pub truncate: Option<bool>,
    /// The vectors' length: accepted only as the model's own length.
    pub dimensions: Option<i64>,
    /// Model options: none apply to embeddings, so any is refused.
    pub options: Option<Value>,
    /// How long the model stays loaded.
    pub keep_alive: Option<Value>,
}

/// `POST /api/embeddings` (Ollama's older endpoint).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LegacyRequest {
    /// The model id; it must be an embedding model.
    pub model: Option<String>,
    /// The one text to embed.
    pub prompt: Option<String>,
    /// Model options: none apply to embeddings, so any is refused.
    pub options: Option<Value>,
    /// How long the model stays loaded.
    pub keep_alive: Option<Value>,
}

fn check_common(options: Option<&Value>, keep_alive: Option<&Value>) -> Result<(), ApiError> {
    if options.is_some_and(|o| o.as_object().is_none_or(|o| !o.is_empty())) {
        return Err(ApiError::param(
            "options",
            "`options` is not supported on embeddings: none of Ollama's model options change an embedding model's vectors here; send the request without `options`",
        ));
    }
    super::keep_alive::parse(keep_alive).map(|_| ())
}

fn model_field(model: Option<&str>) -> Result<&str, ApiError> {
    model.ok_or_else(|| {
        ApiError::param(
            "model",
            "`model` is required: name an embedding model (GET /api/tags lists them)",
        )
    })
}

/// `POST /api/embed`: `{"model", "embeddings": [[...]], "total_duration",
/// "load_duration", "prompt_eval_count"}`.
pub async fn embed(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    OllamaJson(req): OllamaJson<EmbedRequest>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let span = request_span("ollama_embed", &next_request_id());
    let work = async move {
        check_common(req.options.as_ref(), req.keep_alive.as_ref())?;
        let admission = Admission {
            state: &state,
            received,
            caller: caller.as_ref(),
        };
        let model = model_field(req.model.as_deref())?;
        let codec = admission.model(model, counted.as_ref())?;
        let keep = super::keep_alive::parse(req.keep_alive.as_ref())?;
        residency::keep_for(&state, codec.id(), keep);
        let dims = embeddings::require_embedding(&state, &codec, "model")?;
        if let Some(asked) = req.dimensions.filter(|&d| d != i64::from(dims)) {
            return Err(ApiError::param("dimensions", format!("`dimensions` {asked} is not supported: {model} gives vectors of {dims} dimensions and was not trained to be shortened; leave `dimensions` out or set it to {dims}")));
        }
        let inputs = match req.input.as_ref() {
            Some(Value::String(_)) | Some(Value::Array(_)) => {
                let inputs = input::parse(req.input.as_ref(), "input")?;
                if matches!(inputs, input::Inputs::Tokens(_)) {
                    return Err(ApiError::param(
                        "input",
                        "`input` must be a string or a list of strings",
                    ));
                }
                inputs
            }
            _ => {
                return Err(ApiError::param(
                    "input",
                    "`input` is required: give a string or a list of strings",
                ))
            }
        };
        let truncate = req.truncate.unwrap_or(true);
        let done = embeddings::compute(&admission, &codec, inputs, "input", truncate).await?;
        let nanos = received.elapsed().as_nanos() as u64;
        let body = json!({
            "model": codec.id(),
            "embeddings": done.vectors,
            "total_duration": nanos,
            "load_duration": 0,
            "prompt_eval_count": done.prompt_tokens,
        });
        Ok(with_node(&done.node, Json(body)))
    };
    request_log::logged(span, work).await
}

/// `POST /api/embeddings`: `{"embedding": [...]}`.
pub async fn legacy(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    OllamaJson(req): OllamaJson<LegacyRequest>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let span = request_span("ollama_embeddings", &next_request_id());
    let work = async move {
        check_common(req.options.as_ref(), req.keep_alive.as_ref())?;
        let admission = Admission {
            state: &state,
            received,
            caller: caller.as_ref(),
        };
        let model = model_field(req.model.as_deref())?;
        let codec = admission.model(model, counted.as_ref())?;
        let keep = super::keep_alive::parse(req.keep_alive.as_ref())?;
        residency::keep_for(&state, codec.id(), keep);
        embeddings::require_embedding(&state, &codec, "model")?;
        let prompt = req.prompt.unwrap_or_default();
        let inputs = input::parse(Some(&Value::String(prompt)), "prompt")?;
        let done = embeddings::compute(&admission, &codec, inputs, "prompt", true).await?;
        let embedding = done.vectors.into_iter().next().unwrap_or_default();
        Ok(with_node(
            &done.node,
            Json(json!({ "embedding": embedding })),
        ))
    };
    request_log::logged(span, work).await
}

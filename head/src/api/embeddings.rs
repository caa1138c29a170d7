//! `POST /v1/embeddings`, and the path every embeddings endpoint shares
//! (OpenAI's here, Ollama's `/api/embed` and `/api/embeddings`): the model
//! admitted for the caller's key and checked to embed, the inputs
//! tokenized and checked against its context, the request routed to a
//! node that serves the model (the fleet's admission and metrics) and
//! metered to the key.

pub mod input;

use super::admission::Admission;
use super::auth::Caller;
use super::extract::ApiJson;
use super::handlers::{next_request_id, request_span};
use super::request_log;
use super::request_metrics::RequestModel;
use super::{ApiError, AppState};
use crate::codec::ModelCodec;
use axum::extract::State;
use axum::response::Response;
use axum::{Extension, Json};
use input::Inputs;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;
use superfluid_proto::{EmbedReply, EmbedRequest, TokenId};

/// The body of `/v1/embeddings`. Every field OpenAI documents is read;
/// any other is refused with a 400 that names it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingsRequest {
    /// The model id; it must be an embedding model.
    pub model: Option<String>,
    /// What to embed (see [`input::parse`]).
    pub input: Option<Value>,
    /// `float` (the default) or `base64`.
    pub encoding_format: Option<String>,
    /// The vectors' length: accepted only as the model's own length.
    pub dimensions: Option<i64>,
    /// The end user, logged.
    pub user: Option<String>,
}

/// Embeddings of a request's inputs, in order.
#[derive(Debug)]
pub struct Embeddings {
    /// One vector per input, each of unit length.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens embedded, over all inputs.
    pub prompt_tokens: u32,
    /// The node that computed them.
    pub node: String,
}

/// `model` as an embedding model: a 400 that says it cannot embed, naming
/// the models here that can, otherwise.
pub fn require_embedding(
    state: &AppState,
    codec: &ModelCodec,
    param: &str,
) -> Result<u32, ApiError> {
    if let Some(shape) = codec.embedding() {
        return Ok(shape.dimensions);
    }
    let embedders: Vec<String> = state
        .catalog
        .models()
        .iter()
        .filter(|m| m.embedding().is_some())
        .map(|m| m.id().to_owned())
        .collect();
    let instead = if embedders.is_empty() {
        "no model served here embeds; start the head with an embedding model too (`superfluid serve --embedding-model PATH.gguf`, e.g. all-MiniLM-L6-v2, which scripts/setup installs)".to_owned()
    } else {
        format!("embedding models served here: {}", embedders.join(", "))
    };
    Err(ApiError::param(
        param,
        format!(
            "model {:?} cannot compute embeddings: it is a text-generation model, and its GGUF names no pooling type; {instead}",
            codec.id()
        ),
    ))
}

/// Tokenizes and checks `inputs`, runs them on a node and meters the
/// tokens to the caller's key. `param` names the request's input field.
/// With `truncate`, a text longer than the model's context is cut to fit
/// (its last token, the model's end token, kept); without, it is refused.
pub(crate) async fn compute(
    admission: &Admission<'_>,
    codec: &Arc<ModelCodec>,
    inputs: Inputs,
    param: &'static str,
    truncate: bool,
) -> Result<Embeddings, ApiError> {
    let state = admission.state;
    let max = state.fleet.ready(codec.id()).await?;
    let mut inputs = match inputs {
        Inputs::Texts(texts) => {
            let codec = codec.clone();
            tokio::task::spawn_blocking(move || {
                texts
                    .iter()
                    .map(|t| codec.tokenize_for_embedding(t))
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(|e| ApiError::Generation {
                message: format!("tokenizing the input failed ({e}); retry the request"),
            })?
        }
        Inputs::Tokens(tokens) => tokens,
    };
    if truncate {
        for tokens in inputs.iter_mut().filter(|t| t.len() > max as usize) {
            let last = tokens.last().copied();
            tokens.truncate((max as usize).saturating_sub(1));
            tokens.extend(last);
        }
    }
    check_tokens(&inputs, max, codec.vocab_size(), param)?;
    let prompt_tokens: u64 = inputs.iter().map(|i| i.len() as u64).sum();
    if let Some(Extension(Caller(key))) = admission.caller {
        if let Some(limiter) = key.limiter() {
            limiter.debit_tokens(prompt_tokens, tokio::time::Instant::now());
        }
    }
    let request = EmbedRequest {
        model: codec.id().to_owned(),
        inputs,
    };
    let embedded = state.fleet.embed(&request).await?;
    tracing::Span::current().record("node", embedded.node_name.as_str());
    match embedded.reply {
        EmbedReply::Embeddings {
            vectors,
            prompt_tokens,
        } => {
            if let Some(Extension(Caller(key))) = admission.caller {
                key.usage.count_tokens(prompt_tokens.into(), 0, 0);
            }
            Ok(Embeddings {
                vectors,
                prompt_tokens,
                node: embedded.node_name,
            })
        }
        EmbedReply::Failed { kind, message } => Err(ApiError::NodeFailed {
            kind,
            message,
            param,
        }),
    }
}

/// Each input fits the model's context and holds only its tokens.
fn check_tokens(
    inputs: &[Vec<TokenId>],
    max: u32,
    vocab: u32,
    param: &str,
) -> Result<(), ApiError> {
    for (i, tokens) in inputs.iter().enumerate() {
        if tokens.len() > max as usize {
            return Err(ApiError::param(param, format!("`{param}[{i}]` has {} tokens, but this model embeds at most {max} tokens at once; shorten it or split it into parts", tokens.len())));
        }
        if let Some(bad) = tokens.iter().find(|&&t| t >= vocab) {
            return Err(ApiError::param(
                param,
                format!("`{param}[{i}]` has token {bad}, which is not in the model's vocabulary of {vocab} tokens"),
            ));
        }
    }
    Ok(())
}

pub use super::node_header::with_node;

#[derive(Serialize)]
struct EmbeddingList<'a> {
    object: &'static str,
    data: Vec<EmbeddingItem>,
    model: &'a str,
    usage: EmbedUsage,
}

#[derive(Serialize)]
struct EmbeddingItem {
    object: &'static str,
    index: usize,
    embedding: Encoded,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Encoded {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Serialize)]
struct EmbedUsage {
    prompt_tokens: u32,
    total_tokens: u32,
}

/// `POST /v1/embeddings`.
pub async fn create(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    ApiJson(req): ApiJson<EmbeddingsRequest>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let id = next_request_id();
    let span = request_span("embeddings", &id);
    let work = async move {
        let admission = Admission {
            state: &state,
            received,
            caller: caller.as_ref(),
        };
        let model = req.model.as_deref().ok_or_else(|| {
            ApiError::param(
                "model",
                "`model` is required: name an embedding model (GET /v1/models lists them)",
            )
        })?;
        let codec = admission.model(model, counted.as_ref())?;
        let dims = require_embedding(&state, &codec, "model")?;
        let base64 = match req.encoding_format.as_deref() {
            None | Some("float") => false,
            Some("base64") => true,
            Some(other) => {
                return Err(ApiError::param(
                    "encoding_format",
                    format!("`encoding_format` must be \"float\" or \"base64\", not {other:?}"),
                ))
            }
        };
        if let Some(asked) = req.dimensions.filter(|&d| d != i64::from(dims)) {
            return Err(ApiError::param("dimensions", format!("`dimensions` {asked} is not supported: {model} gives vectors of {dims} dimensions and was not trained to be shortened; leave `dimensions` out or set it to {dims}")));
        }
        if let Some(user) = req.user.as_deref() {
            tracing::info!(user = %user, "user");
        }
        let inputs = input::parse(req.input.as_ref(), "input")?;
        let done = compute(&admission, &codec, inputs, "input", false).await?;
        let data = done
            .vectors
            .into_iter()
            .enumerate()
            .map(|(index, v)| EmbeddingItem {
                object: "embedding",
                index,
                embedding: if base64 {
                    Encoded::Base64(input::base64_floats(&v))
                } else {
                    Encoded::Float(v)
                },
            })
            .collect();
        let body = EmbeddingList {
            object: "list",
            data,
            model: codec.id(),
            usage: EmbedUsage {
                prompt_tokens: done.prompt_tokens,
                total_tokens: done.prompt_tokens,
            },
        };
        Ok(with_node(&done.node, Json(body)))
    };
    request_log::logged(span, work).await
}

//! The steps every generating endpoint takes, whichever API it speaks
//! (OpenAI's, Ollama's, Anthropic's): the model admitted for the caller's
//! key, and the generation started on a node and metered to that key.
//! Each endpoint then answers the generation in its own shape.

use super::auth::{self, Caller};
use super::generate::Generation;
use super::request_metrics::RequestModel;
use super::types::Params;
use super::{ApiError, AppState};
use crate::codec::ModelCodec;
use axum::Extension;
use std::sync::Arc;
use std::time::Instant;
use superfluid_proto::TokenId;
use tracing::Span;

/// One request on its way to a node.
pub(crate) struct Admission<'a> {
    /// The head's state.
    pub state: &'a AppState,
    /// When the request arrived.
    pub received: Instant,
    /// The key that sent it, when keys are on.
    pub caller: Option<&'a Extension<Caller>>,
}

impl Admission<'_> {
    /// The codec of model `id` once the caller's key may use it: 404 if it
    /// is not served, 403 if the key may not use it. The request's metrics
    /// are labelled with the model from here on, and its log span names
    /// the model and the key.
    pub fn model(
        &self,
        id: &str,
        counted: Option<&Extension<RequestModel>>,
    ) -> Result<Arc<ModelCodec>, ApiError> {
        Span::current().record("model", id);
        let codec = self
            .state
            .catalog
            .get(id)
            .cloned()
            .ok_or_else(|| ApiError::UnknownModel {
                model: id.to_owned(),
                served: self.state.catalog.ids(),
            })?;
        if let Some(Extension(counted)) = counted {
            counted.set(codec.id());
        }
        if let Some(Extension(Caller(key))) = self.caller {
            Span::current().record("key", key.record.name.as_str());
        }
        auth::check_model(self.caller, codec.id())?;
        Ok(codec)
    }

    /// [`Admission::model`] for a request that generates text: an
    /// embedding model is refused with a 400 that says so, before its
    /// missing chat template could be blamed.
    pub fn text_model(
        &self,
        id: &str,
        counted: Option<&Extension<RequestModel>>,
    ) -> Result<Arc<ModelCodec>, ApiError> {
        let codec = self.model(id, counted)?;
        self.text_only(&codec)?;
        Ok(codec)
    }

    /// Refuses an embedding model for a request that generates text.
    pub fn text_only(&self, codec: &ModelCodec) -> Result<(), ApiError> {
        refuse_embedding_model(self.state, codec)
    }

    /// Sends `prompt` to a node and meters the generation to the caller's
    /// key; `param` names the request field the prompt came from.
    pub async fn start(
        &self,
        codec: Arc<ModelCodec>,
        prompt: Vec<TokenId>,
        params: &Params,
        param: &'static str,
        span: Span,
    ) -> Result<Generation, ApiError> {
        refuse_embedding_model(self.state, &codec)?;
        let mut generation = Generation::start(
            self.state,
            self.received,
            codec,
            prompt,
            params,
            param,
            span,
        )
        .await?;
        auth::meter(self.caller, &mut generation);
        Ok(generation)
    }
}

/// An embedding model cannot generate: a 400 that says so and names the
/// models here that can, rather than a failure from its node.
fn refuse_embedding_model(state: &AppState, codec: &ModelCodec) -> Result<(), ApiError> {
    if codec.embedding().is_none() {
        return Ok(());
    }
    let chat: Vec<String> = state
        .catalog
        .models()
        .iter()
        .filter(|m| m.embedding().is_none())
        .map(|m| m.id().to_owned())
        .collect();
    Err(ApiError::param(
        "model",
        format!(
            "model {:?} is an embedding model and cannot generate text; use it with POST /v1/embeddings (or Ollama's /api/embed), and name a text model here{}",
            codec.id(),
            if chat.is_empty() { String::new() } else { format!(": {}", chat.join(", ")) }
        ),
    ))
}

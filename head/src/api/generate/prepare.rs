//! The one preparation every generating request takes, whichever dialect
//! decoded it: the model admitted for the caller's key, its logit biases
//! checked against the vocabulary, the tools offered in the prompt and a
//! required call enforced, the session it records in held, the prompt
//! rendered and tokenized; then its choices started on nodes (where the
//! context is checked, in [`Generation::start`]).

use std::sync::Arc;

use axum::Extension;
use superfluid_proto::TokenId;
use tracing::Span;

use super::prompt::Prompt;
use super::request::GenerationRequest;
use super::Generation;
use crate::api::admission::Admission;
use crate::api::bias;
use crate::api::request_metrics::RequestModel;
use crate::api::sessions::record::{self, Committed, Recording};
use crate::api::tools::{grammar, prompt as tool_prompt, ToolSet};
use crate::api::types::Params;
use crate::api::ApiError;
use crate::codec::ModelCodec;

/// A request ready to send to a node.
pub struct Prepared {
    /// The model's codec.
    pub codec: Arc<ModelCodec>,
    /// The prompt as the model's tokens.
    pub tokens: Vec<TokenId>,
    /// The parameters, with a required tool call's constraint set.
    pub params: Params,
    /// The tools offered to the model, whose calls the answer reads out.
    pub tools: Option<ToolSet>,
    field: &'static str,
    recording: Option<Recording>,
}

/// A request's generations, started.
pub struct Started {
    /// The model's codec.
    pub codec: Arc<ModelCodec>,
    /// The parameters it was started with.
    pub params: Params,
    /// The tools offered to the model.
    pub tools: Option<ToolSet>,
    /// The first choice: the one a session records.
    pub first: Generation,
    /// The further choices (`n` above 1), in order.
    pub more: Vec<Generation>,
    /// Resolves once the first choice's answer is in the session, when the
    /// request is recorded in one.
    pub committed: Option<Committed>,
}

/// Prepares a request for the caller: model `id` admitted first (404 for a
/// model not served, 403 for one the key may not use, 400 for an
/// embedding model), then the rest decoded by `decode`, then prepared for
/// it.
pub(crate) async fn prepare(
    admission: &Admission<'_>,
    counted: Option<&Extension<RequestModel>>,
    id: &str,
    decode: impl FnOnce() -> Result<GenerationRequest, ApiError>,
) -> Result<Prepared, ApiError> {
    let codec = admission.text_model(id, counted)?;
    let request = decode()?;
    prepare_for(admission, codec, request).await
}

/// [`prepare`] for a model the dialect admitted already (Ollama's, which
/// applies `keep_alive` first; a Responses turn's, which may come from the
/// response it continues).
pub(crate) async fn prepare_for(
    admission: &Admission<'_>,
    codec: Arc<ModelCodec>,
    request: GenerationRequest,
) -> Result<Prepared, ApiError> {
    let GenerationRequest {
        prompt,
        field,
        mut params,
        tools,
        session,
    } = request;
    admission.text_only(&codec)?;
    bias::check_vocab(&params.sampling.logit_bias, codec.vocab_size())?;
    let tools = tools.filter(ToolSet::offered);
    let prompt = match &tools {
        Some(tools) => {
            enforce(tools, &mut params)?;
            offer(prompt, tools)?
        }
        None => prompt,
    };
    let recording = match session {
        Some(turn) => Some(record::begin(admission.state, turn).await?),
        None => None,
    };
    let tokens = prompt.tokens(&codec).await?;
    Ok(Prepared {
        codec,
        tokens,
        params,
        tools,
        field,
        recording,
    })
}

/// The prompt with the tools described to the model.
pub fn offer(prompt: Prompt, tools: &ToolSet) -> Result<Prompt, ApiError> {
    match prompt {
        Prompt::Chat { messages, prefill } => Ok(Prompt::Chat {
            messages: tool_prompt::with_tools(messages, tools),
            prefill,
        }),
        Prompt::Raw(_) => Err(ApiError::param(
            "tools",
            "tools are offered in a conversation; send `messages` rather than a raw prompt, or leave `tools` out",
        )),
    }
}

/// A call the tool choice requires, enforced as the output's constraint;
/// `n` and log-probabilities refused beside tools, since an answer's calls
/// are read from one choice's text.
fn enforce(tools: &ToolSet, params: &mut Params) -> Result<(), ApiError> {
    if params.n > 1 {
        return Err(ApiError::param(
            "n",
            "`n` above 1 is not supported together with `tools`; send one request per choice, or the request without `tools`",
        ));
    }
    if params.logprobs.is_some() {
        return Err(ApiError::param(
            "logprobs",
            "`logprobs` is not supported together with `tools`; send the request without one of them",
        ));
    }
    if let Some(constraint) = grammar::constraint(tools)? {
        if params.constraint.is_some() {
            return Err(ApiError::param(
                "tool_choice",
                "a `tool_choice` that requires a call cannot be combined with a response format (`response_format`, `text.format`, Ollama's `format`); send one or the other",
            ));
        }
        params.constraint = Some(constraint);
    }
    Ok(())
}

impl Prepared {
    /// Starts the request's `n` choices, each with its own seed, the later
    /// ones on the first one's node (which computes the prompt once), and
    /// has the first one's answer recorded in the session it names.
    pub(crate) async fn start(
        self,
        admission: &Admission<'_>,
        span: Span,
    ) -> Result<Started, ApiError> {
        let Prepared {
            codec,
            mut tokens,
            params,
            tools,
            field,
            recording,
        } = self;
        let later = params.n > 1;
        let first_tokens = if later {
            tokens.clone()
        } else {
            std::mem::take(&mut tokens)
        };
        let mut first = admission
            .start(codec.clone(), first_tokens, &params, field, span.clone())
            .await?;
        let beside = first.node_id().map(str::to_owned);
        let mut more = Vec::new();
        for i in 1..params.n.max(1) {
            let mut choice = params.clone();
            choice.sampling.seed = params.sampling.seed.wrapping_add(i);
            choice.beside.clone_from(&beside);
            let generation = admission
                .start(codec.clone(), tokens.clone(), &choice, field, span.clone())
                .await?;
            more.push(generation);
        }
        let committed = match recording {
            Some(recording) => Some(recording.attach(&mut first).await?),
            None => None,
        };
        Ok(Started {
            codec,
            params,
            tools,
            first,
            more,
            committed,
        })
    }
}

/// Waits, before a whole answer is sent, until it is in the session the
/// request records in, so that the session shows it to the client's next
/// read; a stream is sent as it comes.
pub async fn recorded(committed: Option<Committed>, stream: bool) {
    if let (false, Some(committed)) = (stream, committed) {
        committed.wait().await;
    }
}

#[cfg(test)]
mod tests;

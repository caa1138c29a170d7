//! `POST /api/chat` and `POST /api/generate`: each request becomes the
//! OpenAI request it asks for and runs on the one generation path
//! ([`Generation`](super::super::generate::Generation)), answered in Ollama's shape by [`reply`](super::reply).

use super::super::admission::Admission;
use super::super::auth::Caller;
use super::super::generate::prepare::{prepare_for, recorded, Prepared};
use super::super::generate::prompt::Prompt;
use super::super::generate::request::GenerationRequest;
use super::super::generate::residency;
use super::super::generate::residency::KeepAlive;
use super::super::handlers::{next_request_id, request_span};
use super::super::request_log;
use super::super::request_metrics::RequestModel;
use super::super::sessions::record;
use super::super::tools::requested;
use super::super::types::{CompletionRequest, Params};
use super::super::AppState;
use super::extract::OllamaJson;
use super::options::{rename, Options};
use super::reply::{self, Kind, Reply};
use super::request::{ChatRequest, GenerateRequest};
use crate::api::ApiError;
use crate::codec::ModelCodec;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;
use std::time::Instant;

/// `POST /api/chat`.
pub async fn chat(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    headers: HeaderMap,
    OllamaJson(req): OllamaJson<ChatRequest>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let id = next_request_id();
    let span = request_span("ollama_chat", &id);
    let inner = span.clone();
    let work = async move {
        let openai = req.to_openai()?;
        let admission = Admission {
            state: &state,
            received,
            caller: caller.as_ref(),
        };
        let codec = admission.model(openai.model_id()?, counted.as_ref())?;
        let keep = keep_alive(&state, &codec, req.keep_alive.as_ref())?;
        if req.messages.is_empty() {
            return load_only(&state, Kind::Chat, &codec, keep).await;
        }
        let mut request = GenerationRequest::new(
            Prompt::chat(openai.chat_messages()?),
            "messages",
            params(&state, &codec, &openai, req.options.as_ref())?,
        );
        request.tools = requested(&openai)?;
        request.session = record::turn(&headers, || record::openai_messages(&openai))?;
        let prepared = prepare_for(&admission, codec, request).await?;
        let run = Run {
            kind: Kind::Chat,
            stream: req.streams(),
        };
        run.start(&admission, prepared, inner).await
    };
    request_log::logged(span, work).await
}

/// `POST /api/generate`.
pub async fn generate(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    OllamaJson(req): OllamaJson<GenerateRequest>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let id = next_request_id();
    let span = request_span("ollama_generate", &id);
    let inner = span.clone();
    let work = async move {
        let openai = req.to_openai()?;
        let admission = Admission {
            state: &state,
            received,
            caller: caller.as_ref(),
        };
        let codec = admission.model(openai.model_id()?, counted.as_ref())?;
        let keep = keep_alive(&state, &codec, req.keep_alive.as_ref())?;
        if req.only_loads() {
            return load_only(&state, Kind::Generate, &codec, keep).await;
        }
        let prompt = if req.is_raw() {
            Prompt::Raw(openai.prompt_text()?.to_owned())
        } else {
            Prompt::chat(openai.chat_messages()?)
        };
        let params = params(&state, &codec, &openai, req.options.as_ref())?;
        let request = GenerationRequest::new(prompt, "prompt", params);
        let prepared = prepare_for(&admission, codec, request).await?;
        let run = Run {
            kind: Kind::Generate,
            stream: req.streams(),
        };
        run.start(&admission, prepared, inner).await
    };
    request_log::logged(span, work).await
}

/// Applies the request's `keep_alive` to its model's placement; what it asked.
fn keep_alive(
    state: &AppState,
    codec: &ModelCodec,
    keep_alive: Option<&serde_json::Value>,
) -> Result<Option<KeepAlive>, ApiError> {
    let keep = super::keep_alive::parse(keep_alive)?;
    residency::keep_for(state, codec.id(), keep);
    Ok(keep)
}

/// A request with no messages or prompt, as Ollama's clients send to load
/// a model (or, with `keep_alive: 0`, to unload it): done once the fleet
/// has it loaded, or once its nodes were told to unload it.
async fn load_only(
    state: &AppState,
    kind: Kind,
    codec: &ModelCodec,
    keep: Option<KeepAlive>,
) -> Result<Response, ApiError> {
    if residency::unloads(keep) {
        let nodes = residency::unload(state, codec.id())?;
        tracing::info!(model = %codec.id(), ?nodes, "unloading the model, as keep_alive 0 asked");
        return Ok(Reply::finished(kind, codec.id(), "unload"));
    }
    residency::load(state, codec.id()).await?;
    Ok(Reply::finished(kind, codec.id(), "load"))
}

/// The generation parameters, with errors naming Ollama's fields,
/// `repeat_last_n` applied and `num_ctx` honoured.
fn params(
    state: &AppState,
    codec: &ModelCodec,
    openai: &CompletionRequest,
    options: Option<&Options>,
) -> Result<Params, ApiError> {
    let mut params = openai.params().map_err(rename)?;
    if let (Some(options), Some(served)) = (options, residency::context(state, codec.id())) {
        if let Some(n) = options.penalty_last_n(served)? {
            params.sampling.penalty_last_n = n;
        }
        params.context = Some(options.context(served)?);
    }
    Ok(params)
}

/// How one request's generation is answered.
struct Run {
    kind: Kind,
    stream: bool,
}

impl Run {
    /// Sends the prompt to a node and answers in Ollama's shape.
    async fn start(
        self,
        admission: &Admission<'_>,
        prepared: Prepared,
        span: tracing::Span,
    ) -> Result<Response, ApiError> {
        let started = prepared.start(admission, span).await?;
        let reply = Reply::new(
            self.kind,
            started.codec.id(),
            admission.received,
            Instant::now(),
        );
        let response = if self.stream {
            reply::stream(started.first, reply, started.tools).await
        } else {
            reply::complete(started.first, reply, started.tools.as_ref()).await
        };
        recorded(started.committed, self.stream).await;
        response
    }
}

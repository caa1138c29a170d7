//! `POST /api/chat` and `POST /api/generate`: each request becomes the
//! OpenAI request it asks for and runs on the one generation path
//! ([`Generation`](super::super::generate::Generation)), answered in Ollama's shape by [`reply`](super::reply).

use super::super::admission::Admission;
use super::super::auth::Caller;
use super::super::generate::prompt::Prompt;
use super::super::generate::residency;
use super::super::generate::residency::KeepAlive;
use super::super::handlers::{next_request_id, request_span};
use super::super::request_log;
use super::super::request_metrics::RequestModel;
use super::super::sessions::record::{self, Recording};
use super::super::tools::{prepare, ToolSet};
use super::super::types::{CompletionRequest, Params};
use super::super::AppState;
use super::extract::OllamaJson;
use super::options::{rename, Options};
use super::reply::{self, Kind, Reply};
use super::request::{ChatRequest, GenerateRequest};
use super::OllamaError;
use crate::codec::ModelCodec;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;
use std::sync::Arc;
use std::time::Instant;

/// `POST /api/chat`.
pub async fn chat(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    headers: HeaderMap,
    OllamaJson(req): OllamaJson<ChatRequest>,
) -> Result<Response, OllamaError> {
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
        admission.text_only(&codec)?;
        let mut params = params(&state, &codec, &openai, req.options.as_ref())?;
        let messages = openai.chat_messages()?;
        let (messages, tools) = prepare(&openai, messages, &mut params)?;
        let recording = record::begin(&state, &headers, &openai).await?;
        let prompt = Prompt::chat(messages).tokens(&codec).await?;
        let run = Run {
            kind: Kind::Chat,
            stream: req.streams(),
            param: "messages",
            tools: tools.filter(ToolSet::offered),
            recording,
        };
        run.start(
            &admission,
            codec,
            prompt,
            params,
            req.options.as_ref(),
            inner,
        )
        .await
    };
    request_log::logged(span, work).await
}

/// `POST /api/generate`.
pub async fn generate(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    OllamaJson(req): OllamaJson<GenerateRequest>,
) -> Result<Response, OllamaError> {
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
        admission.text_only(&codec)?;
        let params = params(&state, &codec, &openai, req.options.as_ref())?;
        let prompt = if req.is_raw() {
            Prompt::Raw(openai.prompt_text()?.to_owned())
        } else {
            Prompt::chat(openai.chat_messages()?)
        };
        let prompt = prompt.tokens(&codec).await?;
        let run = Run {
            kind: Kind::Generate,
            stream: req.streams(),
            param: "prompt",
            tools: None,
            recording: None,
        };
        run.start(
            &admission,
            codec,
            prompt,
            params,
            req.options.as_ref(),
            inner,
        )
        .await
    };
    request_log::logged(span, work).await
}

/// Applies the request's `keep_alive` to its model's placement; what it asked.
fn keep_alive(
    state: &AppState,
    codec: &ModelCodec,
    keep_alive: Option<&serde_json::Value>,
) -> Result<Option<KeepAlive>, OllamaError> {
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
) -> Result<Response, OllamaError> {
    if residency::unloads(keep) {
        let nodes = residency::unload(state, codec.id())?;
        tracing::info!(model = %codec.id(), ?nodes, "unloading the model, as keep_alive 0 asked");
        return Ok(Reply::finished(kind, codec.id(), "unload"));
    }
    residency::load(state, codec.id()).await?;
    Ok(Reply::finished(kind, codec.id(), "load"))
}

/// The generation parameters, with errors naming Ollama's fields and
/// `repeat_last_n` applied.
fn params(
    state: &AppState,
    codec: &ModelCodec,
    openai: &CompletionRequest,
    options: Option<&Options>,
) -> Result<Params, OllamaError> {
    let mut params = openai.params().map_err(rename)?;
    if let (Some(options), Some(served)) = (options, residency::context(state, codec.id())) {
        if let Some(n) = options.penalty_last_n(served)? {
            params.sampling.penalty_last_n = n;
        }
    }
    Ok(params)
}

/// How one request's generation is started and answered.
struct Run {
    kind: Kind,
    stream: bool,
    /// The request field the prompt came from.
    param: &'static str,
    /// The tools the model may call, whose calls the answer reads out.
    tools: Option<ToolSet>,
    /// The session the answer is recorded in (`x-superfluid-session`).
    recording: Option<Recording>,
}

impl Run {
    /// Honours `num_ctx`, sends the prompt to a node and answers.
    async fn start(
        self,
        admission: &Admission<'_>,
        codec: Arc<ModelCodec>,
        prompt: Vec<superfluid_proto::TokenId>,
        mut params: Params,
        options: Option<&Options>,
        span: tracing::Span,
    ) -> Result<Response, OllamaError> {
        let state = admission.state;
        if let (Some(options), Some(served)) = (options, residency::context(state, codec.id())) {
            params.context = Some(options.context(served)?);
        }
        let model = codec.id().to_owned();
        let mut generation = admission
            .start(codec, prompt, &params, self.param, span)
            .await?;
        let committed = match self.recording {
            Some(recording) => Some(recording.attach(&mut generation).await?),
            None => None,
        };
        let reply = Reply::new(self.kind, &model, admission.received, Instant::now());
        let response = if self.stream {
            reply::stream(generation, reply, self.tools).await
        } else {
            reply::complete(generation, reply, self.tools.as_ref()).await
        };
        // A whole answer is sent once it is recorded, so that the session
        // shows it to the client's next read.
        if let (false, Some(committed)) = (self.stream, committed) {
            committed.wait().await;
        }
        response
    }
}

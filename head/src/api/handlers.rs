//! The route handlers: each validates its request, builds the prompt and
//! hands the generation to [`respond`](super::respond).

use super::admission::Admission;
use super::auth::{self, Caller};
use super::extract::ApiJson;
use super::fields::Endpoint;
use super::generate::prepare::{prepare, recorded, Started};
use super::generate::prompt::Prompt;
use super::generate::request::GenerationRequest;
use super::generate::Generation;
use super::request_log;
pub(crate) use super::request_log::next_request_id;
use super::request_metrics::RequestModel;
use super::respond::{self, Envelope, Flavor};
use super::sessions::record;
use super::types::CompletionRequest;
use super::wire::models::{ModelCard, ModelList};
use super::wire::Object;
use super::{ApiError, AppState};
use crate::keys::Keys;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::{Extension, Json};
use serde_json::{json, Value};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tracing::Span;

/// `POST /v1/chat/completions`.
pub async fn chat(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let id = next_request_id();
    let span = request_span("chat", &id);
    let inner = span.clone();
    let work = async move {
        let admission = Admission {
            state: &state,
            received,
            caller: caller.as_ref(),
        };
        let prepared = prepare(&admission, counted.as_ref(), req.model_id()?, || {
            req.check_fields(Endpoint::Chat)?;
            log_user(&req);
            let mut request = GenerationRequest::new(
                Prompt::chat(req.chat_messages()?),
                "messages",
                req.openai_params(Endpoint::Chat)?,
            );
            request.tools = super::tools::requested(&req)?;
            request.session = record::turn(&headers, || record::openai_messages(&req))?;
            Ok(request)
        })
        .await?;
        let started = prepared.start(&admission, inner).await?;
        let mut envelope = Envelope::new(Flavor::Chat, started.codec.id(), &id);
        envelope.logprobs = started.params.logprobs.is_some();
        let stream = started.params.stream;
        let response = match started.tools {
            // Tools come with one choice (the path refuses `n` beside them).
            Some(tools) => {
                let params = &started.params;
                super::tools::respond::answer(started.first, envelope, params, tools).await
            }
            None => {
                let mut generations = vec![started.first];
                generations.extend(started.more);
                let params = &started.params;
                run(generations, envelope, params.stream, params.include_usage).await
            }
        };
        recorded(started.committed, stream).await;
        response
    };
    request_log::logged(span, work).await
}

/// `POST /v1/completions`.
pub async fn completions(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let id = next_request_id();
    let span = request_span("completions", &id);
    let inner = span.clone();
    let work = async move {
        let admission = Admission {
            state: &state,
            received,
            caller: caller.as_ref(),
        };
        let prepared = prepare(&admission, counted.as_ref(), req.model_id()?, || {
            let text = req.prompt_text()?;
            req.check_fields(Endpoint::Completions)?;
            log_user(&req);
            super::tools::spec::refuse_on_completions(
                req.tools.as_ref(),
                req.tool_choice.as_ref(),
            )?;
            Ok(GenerationRequest::new(
                Prompt::Raw(text.to_owned()),
                "prompt",
                req.openai_params(Endpoint::Completions)?,
            ))
        })
        .await?;
        let Started {
            codec,
            params,
            first,
            more,
            ..
        } = prepared.start(&admission, inner).await?;
        let mut generations = vec![first];
        generations.extend(more);
        let mut envelope = Envelope::new(Flavor::Text, codec.id(), &id);
        envelope.logprobs = params.logprobs.is_some();
        if req.echo == Some(true) {
            envelope.echo = Some(req.prompt_text()?.to_owned());
        }
        run(generations, envelope, params.stream, params.include_usage).await
    };
    request_log::logged(span, work).await
}

/// Logs the end user a request names in `user`.
fn log_user(req: &CompletionRequest) {
    if let Some(user) = req.user.as_deref() {
        tracing::info!(user = %user, "user");
    }
}

/// `GET /v1/models`.
pub async fn models(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
) -> Json<ModelList> {
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let data = state
        .catalog
        .ids()
        .into_iter()
        .filter(|id| auth::may_list(caller.as_ref(), id))
        .map(|id| ModelCard {
            loaded_on: state.fleet.loaded_on(&id),
            id,
            object: Object::Model,
            created,
            owned_by: "superfluid".to_owned(),
        })
        .collect();
    Json(ModelList {
        object: Object::List,
        data,
    })
}

/// `GET /health`.
///
/// 200 `{"status":"ok"}` while every served model has a node that takes
/// work (or a node that would load it on the first request for it); otherwise 503 naming the models without one (`no_nodes`) or whose
/// every node is draining (`draining`), so that load balancers and scripts
/// wait rather than send requests that would get 503 anyway.
pub async fn health(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let (mut waiting, mut draining) = (Vec::new(), Vec::new());
    for id in state.catalog.ids() {
        if state.fleet.context_len(&id).is_none() && !state.fleet.can_load(&id) {
            waiting.push(id);
        } else if state.fleet.only_draining(&id) {
            draining.push(id);
        }
    }
    if waiting.is_empty() && draining.is_empty() {
        return (StatusCode::OK, Json(json!({"status": "ok"})));
    }
    let mut told = Vec::new();
    if !waiting.is_empty() {
        told.push(format!(
            "no node serves {} yet; start a node or wait for one to join",
            waiting.join(", ")
        ));
    }
    if !draining.is_empty() {
        told.push(format!(
            "every node that serves {} is draining and takes no new requests; start another node or wait for one to rejoin",
            draining.join(", ")
        ));
    }
    let status = if waiting.is_empty() {
        "draining"
    } else {
        "no_nodes"
    };
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({
            "status": status,
            "models_without_nodes": waiting,
            "models_draining": draining,
            "message": told.join("; "),
        })),
    )
}

/// `GET /metrics`: the head's counters, histograms and each node's load, in the
/// Prometheus text format.
pub async fn metrics(
    State(state): State<AppState>,
    keys: Option<Extension<Keys>>,
) -> impl axum::response::IntoResponse {
    let keys = keys.map(|Extension(keys)| keys).unwrap_or_default();
    (
        [(
            axum::http::header::CONTENT_TYPE,
            super::metrics_page::CONTENT_TYPE,
        )],
        super::metrics_page::render(&state.fleet, &keys),
    )
}

/// Any path no route matches.
pub async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

/// A known path with the wrong method.
pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

async fn run(
    generations: Vec<Generation>,
    envelope: Envelope,
    stream: bool,
    include_usage: bool,
) -> Result<Response, ApiError> {
    if stream {
        respond::stream_all(generations, envelope, include_usage).await
    } else {
        respond::complete_all(generations, envelope).await
    }
}

/// The span every request's logs go to, with a fresh request id.
pub(crate) fn request_span(endpoint: &'static str, id: &str) -> Span {
    request_log::span(endpoint, id)
}

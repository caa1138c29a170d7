//! Anthropic's Messages API as a codec on the one generation path:
//! `POST /v1/messages` and `POST /v1/messages/count_tokens`, behind the
//! same key check, limits, metrics and logging as the OpenAI routes.
//!
//! - [`request`]: the request bodies and their validation.
//! - [`blocks`]: content blocks to text.
//! - [`wire`]: the answer's serde types.
//! - [`answer`]: one `message`.
//! - [`stream`]: Anthropic's server-sent events, text and `tool_use` blocks.
//! - [`tools`]: `tools`, `tool_choice`, `tool_use` and `tool_result` blocks.
//! - [`errors`]: Anthropic's error shape, and the layer that gives it to
//!   every error on these routes.

pub mod answer;
pub mod blocks;
pub mod errors;
pub mod request;
pub mod stream;
pub mod tools;
pub mod wire;

#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;

use super::admission::Admission;
use super::auth::Caller;
use super::extract::ApiJson;
use super::generate::prepare::{offer, prepare, recorded};
use super::generate::prompt::Prompt;
use super::generate::request::GenerationRequest;
use super::handlers::{next_request_id, request_span};
use super::request_log;
use super::request_metrics::RequestModel;
use super::sessions::record;
use super::tools::ToolSet;
use super::{ApiError, AppState};
use answer::Reply;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::{Extension, Json};
use request::{Conversation, CountTokensRequest, MessagesRequest};
use std::time::Instant;
use wire::TokenCount;

/// `POST /v1/messages`.
pub async fn messages(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<MessagesRequest>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let id = next_request_id();
    let span = request_span("messages", &id);
    let inner = span.clone();
    let work = async move {
        let admission = Admission {
            state: &state,
            received,
            caller: caller.as_ref(),
        };
        let prepared = prepare(&admission, counted.as_ref(), req.model_id()?, || {
            if let Some(user) = req.user_id() {
                tracing::info!(user_id = %user, "metadata.user_id");
            }
            let conversation = req.conversation()?;
            let session = record::turn(&headers, || record::chat_messages(&conversation.messages))?;
            let mut request =
                GenerationRequest::new(prompt_of(conversation), "messages", req.params()?);
            request.tools = req.tool_set()?;
            request.session = session;
            Ok(request)
        })
        .await?;
        let started = prepared.start(&admission, inner).await?;
        let reply = Reply {
            id: format!("msg_{id}"),
            model: started.codec.id().to_owned(),
        };
        let (stream, generation) = (started.params.stream, started.first);
        let response = match (stream, started.tools) {
            (true, tools) => stream::stream(generation, reply, tools).await,
            (false, Some(tools)) => tools::complete(generation, reply, &tools).await,
            (false, None) => answer::complete(generation, reply).await,
        };
        recorded(started.committed, stream).await;
        response
    };
    request_log::logged(span, work).await
}

/// `POST /v1/messages/count_tokens`: the prompt's length in tokens as the
/// model's chat template renders it.
pub async fn count_tokens(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    ApiJson(req): ApiJson<CountTokensRequest>,
) -> Result<Json<TokenCount>, ApiError> {
    let id = next_request_id();
    let span = request_span("count_tokens", &id);
    let work = async move {
        let admission = Admission {
            state: &state,
            received: Instant::now(),
            caller: caller.as_ref(),
        };
        let codec = admission.text_model(req.model_id()?, counted.as_ref())?;
        let conversation = req.conversation()?;
        let mut prompt = prompt_of(conversation);
        if let Some(tools) = req.tool_set()?.filter(ToolSet::offered) {
            prompt = offer(prompt, &tools)?;
        }
        let prompt = prompt.tokens(&codec).await?;
        let input_tokens = u32::try_from(prompt.len()).unwrap_or(u32::MAX);
        Ok(Json(TokenCount { input_tokens }))
    };
    request_log::logged(span, work).await
}

/// The prompt: the chat with the assistant turn opened, followed by the
/// text of a last assistant turn, which the answer continues.
fn prompt_of(conversation: Conversation) -> Prompt {
    Prompt::Chat {
        messages: conversation.messages,
        prefill: conversation.prefill,
    }
}

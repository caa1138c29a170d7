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
use super::generate::prompt::Prompt;
use super::handlers::{next_request_id, request_span};
use super::request_log;
use super::request_metrics::RequestModel;
use super::sessions::record;
use super::tools::{grammar, prompt, ToolSet};
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
        let codec = admission.text_model(req.model_id()?, counted.as_ref())?;
        if let Some(user) = req.user_id() {
            tracing::info!(user_id = %user, "metadata.user_id");
        }
        let mut conversation = req.conversation()?;
        let mut params = req.params()?;
        let tools = req.tool_set()?.filter(ToolSet::offered);
        if let Some(tools) = &tools {
            params.constraint = grammar::constraint(tools)?;
            conversation.messages = prompt::with_tools(conversation.messages, tools);
        }
        let recording = record::begin_chat(&state, &headers, &conversation.messages).await?;
        let prompt = prompt_of(conversation).tokens(&codec).await?;
        let mut generation = admission
            .start(codec.clone(), prompt, &params, "messages", inner)
            .await?;
        let committed = match recording {
            Some(recording) => Some(recording.attach(&mut generation).await?),
            None => None,
        };
        let reply = Reply {
            id: format!("msg_{id}"),
            model: codec.id().to_owned(),
        };
        let response = if params.stream {
            stream::stream(generation, reply, tools).await
        } else if let Some(tools) = &tools {
            tools::complete(generation, reply, tools).await
        } else {
            answer::complete(generation, reply).await
        };
        // A whole answer is sent once it is recorded, so that the session
        // shows it to the client's next read.
        if let (false, Some(committed)) = (params.stream, committed) {
            committed.wait().await;
        }
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
        let mut conversation = req.conversation()?;
        if let Some(tools) = req.tool_set()? {
            conversation.messages = prompt::with_tools(conversation.messages, &tools);
        }
        let prompt = prompt_of(conversation).tokens(&codec).await?;
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

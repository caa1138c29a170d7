//! Answers a running [`Generation`] as one JSON object or as server-sent
//! events, in the shape of either chat or text completions.

use super::generate::{Generation, Usage};
use super::output::{FinishReason, Step};
use super::wire::chat::{
    AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletion, ChatCompletionChunk, Delta, Role,
};
use super::wire::completion::{TextChoice, TextChunkChoice, TextCompletion, TextCompletionChunk};
use super::wire::{self, NoLogprobs, Object};
use super::ApiError;
use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::stream::{self, Stream};
use serde::Serialize;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The response header naming the node that served the request.
pub const NODE_HEADER: &str = "x-superfluid-node";

/// Which OpenAI endpoint is answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Text,
}

/// What every object of one response shares.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// `chatcmpl-...` or `cmpl-...`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model id.
    pub model: String,
    /// Chat or text.
    pub flavor: Flavor,
    /// The prompt, when the client asked for it before the completion
    /// (`echo` on `/v1/completions`).
    pub echo: Option<String>,
}

impl Envelope {
    /// A new response id for this flavor.
    pub fn new(flavor: Flavor, model: &str, request_id: &str) -> Self {
        let prefix = match flavor {
            Flavor::Chat => "chatcmpl",
            Flavor::Text => "cmpl",
        };
        Envelope {
            id: format!("{prefix}-{request_id}"),
            created: unix_now(),
            model: model.to_owned(),
            flavor,
            echo: None,
        }
    }

    /// The whole, non-streamed answer.
    fn complete(&self, mut text: String, finish: FinishReason, usage: Usage) -> Response {
        let usage = usage.into();
        if let Some(echo) = &self.echo {
            text.insert_str(0, echo);
        }
        match self.flavor {
            Flavor::Chat => Json(ChatCompletion {
                id: self.id.clone(),
                object: Object::ChatCompletion,
                created: self.created,
                model: self.model.clone(),
                choices: vec![ChatChoice {
                    index: 0,
                    message: AssistantMessage {
                        role: Role::Assistant,
                        content: Some(text),
                        tool_calls: None,
                    },
                    logprobs: NoLogprobs,
                    finish_reason: finish,
                }],
                usage,
            })
            .into_response(),
            Flavor::Text => Json(TextCompletion {
                id: self.id.clone(),
                object: Object::TextCompletion,
                created: self.created,
                model: self.model.clone(),
                choices: vec![TextChoice {
                    index: 0,
                    text,
                    logprobs: NoLogprobs,
                    finish_reason: finish,
                }],
                usage,
            })
            .into_response(),
        }
    }

    /// A streamed chunk with text (and the assistant role on the first
    /// chat chunk) or with a finish reason.
    fn chunk(&self, text: Option<String>, role: bool, finish: Option<FinishReason>) -> Event {
        match self.flavor {
            Flavor::Chat => data(&self.chat_chunk(
                vec![ChatChunkChoice {
                    index: 0,
                    delta: Delta {
                        role: role.then_some(Role::Assistant),
                        content: text,
                        tool_calls: None,
                    },
                    logprobs: NoLogprobs,
                    finish_reason: finish,
                }],
                None,
            )),
            Flavor::Text => data(&self.text_chunk(
                vec![TextChunkChoice {
                    index: 0,
                    text: text.unwrap_or_default(),
                    logprobs: NoLogprobs,
                    finish_reason: finish,
                }],
                None,
            )),
        }
    }

    /// The chunk after the finish reason that carries only the usage.
    fn usage_chunk(&self, usage: Usage) -> Event {
        let usage = Some(usage.into());
        match self.flavor {
            Flavor::Chat => data(&self.chat_chunk(Vec::new(), usage)),
            Flavor::Text => data(&self.text_chunk(Vec::new(), usage)),
        }
    }

    fn chat_chunk(
        &self,
        choices: Vec<ChatChunkChoice>,
        usage: Option<wire::Usage>,
    ) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.id.clone(),
            object: Object::ChatCompletionChunk,
            created: self.created,
            model: self.model.clone(),
            choices,
            usage,
        }
    }

    fn text_chunk(
        &self,
        choices: Vec<TextChunkChoice>,
        usage: Option<wire::Usage>,
    ) -> TextCompletionChunk {
        TextCompletionChunk {
            id: self.id.clone(),
            object: Object::TextCompletion,
            created: self.created,
            model: self.model.clone(),
            choices,
            usage,
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(super) fn with_node(node: &str, response: impl IntoResponse) -> Response {
    let mut response = response.into_response();
    if let Ok(value) = HeaderValue::from_str(node) {
        response.headers_mut().insert(NODE_HEADER, value);
    }
    response
}

/// Runs the generation to its end and answers with one JSON object.
pub async fn complete(
    mut generation: Generation,
    envelope: Envelope,
) -> Result<Response, ApiError> {
    let mut text = String::new();
    // The JSON renderer: every kind of output is rendered or refused here.
    let finish = loop {
        match generation.next().await? {
            Step::Text(piece) => text.push_str(&piece),
            Step::Done(finish) => break finish,
        }
    };
    let body = envelope.complete(text, finish, generation.usage());
    Ok(with_node(&generation.node, body))
}

/// Answers with server-sent events as the node generates. If the client
/// goes away the stream, and with it the generation, is dropped.
///
/// The response starts with the generation's first text (or its end), so
/// that its `x-superfluid-node` header names the node that answers even if
/// the first one was lost before its first token, and a generation that
/// fails before any text gets an error status instead of a stream.
pub async fn stream(
    mut generation: Generation,
    envelope: Envelope,
    include_usage: bool,
) -> Result<Response, ApiError> {
    let first = generation.next().await?;
    let node = generation.node.clone();
    let mut state = StreamState {
        generation,
        envelope,
        include_usage,
        pending: VecDeque::new(),
        done: false,
    };
    if state.envelope.flavor == Flavor::Chat {
        let role = state.envelope.chunk(Some(String::new()), true, None);
        state.pending.push_back(role);
    }
    if let Some(echo) = state.envelope.echo.take() {
        let prompt = state.envelope.chunk(Some(echo), false, None);
        state.pending.push_back(prompt);
    }
    state.push(Ok(first));
    let sse =
        Sse::new(events(state)).keep_alive(KeepAlive::new().interval(Duration::from_secs(10)));
    Ok(with_node(&node, sse))
}

struct StreamState {
    generation: Generation,
    envelope: Envelope,
    include_usage: bool,
    pending: VecDeque<Event>,
    done: bool,
}

impl StreamState {
    /// Queues the events for one step of the generation: the SSE renderer,
    /// where every kind of output is rendered or refused.
    fn push(&mut self, step: Result<Step, ApiError>) {
        match step {
            Ok(Step::Text(text)) => {
                let chunk = self.envelope.chunk(Some(text), false, None);
                self.pending.push_back(chunk);
            }
            Ok(Step::Done(finish)) => {
                let last = self.envelope.chunk(None, false, Some(finish));
                self.pending.push_back(last);
                if self.include_usage {
                    let usage = self.envelope.usage_chunk(self.generation.usage());
                    self.pending.push_back(usage);
                }
                self.pending.push_back(Event::default().data("[DONE]"));
                self.done = true;
            }
            Err(err) => {
                tracing::warn!(error = %err, "generation failed mid-stream");
                self.pending
                    .push_back(Event::default().data(err.body().to_string()));
                self.pending.push_back(Event::default().data("[DONE]"));
                self.done = true;
            }
        }
    }
}

/// `value` as one `data:` event.
pub(super) fn data(value: &impl Serialize) -> Event {
    match serde_json::to_string(value) {
        Ok(json) => Event::default().data(json),
        // The wire types have string keys and no custom serializers, so
        // this does not happen; if it did, the client gets an error event.
        Err(e) => {
            let err = ApiError::Generation {
                message: format!(
                    "the head could not encode a stream chunk ({e}); retry the request"
                ),
            };
            Event::default().data(err.body().to_string())
        }
    }
}

fn events(state: StreamState) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    stream::unfold(state, |mut st| async move {
        loop {
            if let Some(event) = st.pending.pop_front() {
                return Some((Ok(event), st));
            }
            if st.done {
                return None;
            }
            let step = st.generation.next().await;
            st.push(step);
        }
    })
}

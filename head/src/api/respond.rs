//! Answers a running [`Generation`] as one JSON object or as server-sent
//! events, in the shape of either chat or text completions.

use super::generate::{Generation, Step, Usage};
use super::ApiError;
use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::stream::{self, Stream};
use serde_json::{json, Value};
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
        }
    }

    fn object(&self, streaming: bool) -> &'static str {
        match (self.flavor, streaming) {
            (Flavor::Chat, false) => "chat.completion",
            (Flavor::Chat, true) => "chat.completion.chunk",
            (Flavor::Text, _) => "text_completion",
        }
    }

    fn wrap(&self, streaming: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(streaming),
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }

    /// A streamed chunk with text (and the assistant role on the first
    /// chat chunk) or with a finish reason.
    fn chunk(&self, text: Option<&str>, role: bool, finish: Option<&str>) -> Value {
        let choice = match self.flavor {
            Flavor::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), "assistant".into());
                }
                if let Some(text) = text {
                    delta.insert("content".into(), text.into());
                }
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Flavor::Text => {
                json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish})
            }
        };
        self.wrap(true, json!([choice]))
    }

    /// The whole, non-streamed answer.
    fn complete(&self, text: &str, finish: &str, usage: Usage) -> Value {
        let choice = match self.flavor {
            Flavor::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": finish,
            }),
            Flavor::Text => {
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
            }
        };
        let mut body = self.wrap(false, json!([choice]));
        body["usage"] = usage_json(usage);
        body
    }
}

fn usage_json(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens.saturating_add(usage.completion_tokens),
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    })
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn with_node(node: &str, response: impl IntoResponse) -> Response {
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
    let finish = loop {
        match generation.next().await? {
            Step::Text(piece) => text.push_str(&piece),
            Step::Done(finish) => break finish,
        }
    };
    let body = envelope.complete(&text, finish, generation.usage());
    Ok(with_node(&generation.node, Json(body)))
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
        let role = state.envelope.chunk(Some(""), true, None);
        state.pending.push_back(data(&role));
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
    /// Queues the events for one step of the generation.
    fn push(&mut self, step: Result<Step, ApiError>) {
        match step {
            Ok(Step::Text(text)) => {
                let chunk = self.envelope.chunk(Some(&text), false, None);
                self.pending.push_back(data(&chunk));
            }
            Ok(Step::Done(finish)) => {
                let last = self.envelope.chunk(None, false, Some(finish));
                self.pending.push_back(data(&last));
                if self.include_usage {
                    let mut usage = self.envelope.wrap(true, json!([]));
                    usage["usage"] = usage_json(self.generation.usage());
                    self.pending.push_back(data(&usage));
                }
                self.pending.push_back(Event::default().data("[DONE]"));
                self.done = true;
            }
            Err(err) => {
                tracing::warn!(error = %err, "generation failed mid-stream");
                self.pending.push_back(data(&err.body()));
                self.pending.push_back(Event::default().data("[DONE]"));
                self.done = true;
            }
        }
    }
}

fn data(value: &Value) -> Event {
    Event::default().data(value.to_string())
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

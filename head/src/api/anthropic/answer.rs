//! Answers a running [`Generation`] as one Messages API `message`, or as
//! Anthropic's server-sent events: `message_start`, `content_block_start`,
//! `ping`, `content_block_delta` (`text_delta`) per piece of text,
//! `content_block_stop`, `message_delta` (stop reason and usage) and
//! `message_stop`; a failure after the stream began is an `error` event.

use super::errors;
use super::wire::{stop_of, ContentBlock, Message, MessageUsage, TextBlock};
use crate::api::generate::Generation;
use crate::api::output::Step;
use crate::api::{ApiError, NODE_HEADER};
use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::stream::{self, Stream};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

/// What every event of one answer shares.
#[derive(Debug, Clone)]
pub struct Reply {
    /// `msg_...`.
    pub id: String,
    /// The model id.
    pub model: String,
}

impl Reply {
    /// A message holding `text` as its one text block.
    pub fn message(&self, text: Option<String>, usage: MessageUsage) -> Message {
        Message {
            id: self.id.clone(),
            kind: "message",
            role: "assistant",
            model: self.model.clone(),
            content: text
                .map(|t| ContentBlock::Text(TextBlock::new(t)))
                .into_iter()
                .collect(),
            stop_reason: None,
            stop_sequence: None,
            usage,
        }
    }
}

/// `response` with the header naming the node that answered.
pub fn with_node(node: &str, response: impl IntoResponse) -> Response {
    let mut response = response.into_response();
    if let Ok(value) = HeaderValue::from_str(node) {
        response.headers_mut().insert(NODE_HEADER, value);
    }
    response
}

/// Runs the generation to its end and answers with one `message`.
pub async fn complete(mut generation: Generation, reply: Reply) -> Result<Response, ApiError> {
    let mut text = String::new();
    let finish = loop {
        match generation.next().await? {
            Step::Text(piece) => text.push_str(&piece),
            Step::Done(finish) => break finish,
        }
    };
    let (stop_reason, stop_sequence) = stop_of(&generation, finish);
    let mut message = reply.message(Some(text), generation.usage().into());
    message.stop_reason = Some(stop_reason);
    message.stop_sequence = stop_sequence;
    Ok(with_node(&generation.node, Json(message)))
}

/// Answers with Anthropic's events as the node generates. As with the
/// OpenAI stream, the response starts once the first text (or the end) is
/// known, so a generation failing before it gets an error status.
pub async fn stream(mut generation: Generation, reply: Reply) -> Result<Response, ApiError> {
    let first = generation.next().await?;
    let node = generation.node.clone();
    let mut state = StreamState {
        generation,
        pending: VecDeque::new(),
        done: false,
    };
    let mut usage = MessageUsage::from(state.generation.usage());
    // The cached part is known once the node finishes; until then the
    // whole prompt counts as read.
    usage.output_tokens = 0;
    let start = json!({"type": "message_start", "message": reply.message(None, usage)});
    state.queue("message_start", start);
    state.queue(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": TextBlock::new(String::new())}),
    );
    state.queue("ping", json!({"type": "ping"}));
    state.push(Ok(first));
    let sse =
        Sse::new(events(state)).keep_alive(KeepAlive::new().interval(Duration::from_secs(10)));
    Ok(with_node(&node, sse))
}

struct StreamState {
    generation: Generation,
    pending: VecDeque<Event>,
    done: bool,
}

impl StreamState {
    fn queue(&mut self, name: &'static str, data: Value) {
        self.pending
            .push_back(Event::default().event(name).data(data.to_string()));
    }

    /// Queues the events of one step of the generation.
    fn push(&mut self, step: Result<Step, ApiError>) {
        match step {
            Ok(Step::Text(text)) => self.queue(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
            ),
            Ok(Step::Done(finish)) => {
                let (stop_reason, stop_sequence) = stop_of(&self.generation, finish);
                let usage = MessageUsage::from(self.generation.usage());
                self.queue(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 0}),
                );
                self.queue(
                    "message_delta",
                    json!({
                        "type": "message_delta",
                        "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                        "usage": usage,
                    }),
                );
                self.queue("message_stop", json!({"type": "message_stop"}));
                self.done = true;
            }
            Err(err) => {
                tracing::warn!(error = %err, "generation failed mid-stream");
                self.queue("error", errors::api_error_body(&err));
                self.done = true;
            }
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

//! Answers a running [`Generation`] with Anthropic's server-sent events:
//! `message_start`, `ping`, then each content block as
//! `content_block_start`, its `content_block_delta`s and
//! `content_block_stop`, then `message_delta` (stop reason and usage) and
//! `message_stop`; a failure after the stream began is an `error` event.
//!
//! Text is a `text` block of `text_delta`s. With tools, the calls the
//! answer ends with (read on the generation path, [`Answer`]) are each a
//! `tool_use` block (`id`, `name`, `input: {}`) whose input follows in
//! `input_json_delta` pieces, and the stop reason is `tool_use`.

use super::answer::{with_node, Reply};
use super::errors;
use super::wire::{stop_of, MessageUsage, TextBlock};
use crate::api::generate::answer::{Answer, Output};
use crate::api::generate::Generation;
use crate::api::output::FinishReason;
use crate::api::tools::ToolSet;
use crate::api::ApiError;
use axum::response::sse::{Event, Sse};
use axum::response::Response;
use futures::stream::{self, Stream};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::convert::Infallible;

/// Answers with Anthropic's events as the node generates. As with the
/// OpenAI stream, the response starts once the first text (or the end) is
/// known, so a generation failing before it gets an error status.
pub async fn stream(
    generation: Generation,
    reply: Reply,
    tools: Option<ToolSet>,
) -> Result<Response, ApiError> {
    let offers_tools = tools.as_ref().is_some_and(ToolSet::offered);
    let mut answer = Answer::new(generation, tools);
    let first = answer.next().await?;
    let node = answer.generation().node.clone();
    let mut usage = MessageUsage::from(answer.generation().usage());
    // The cached part is known once the node finishes; until then the
    // whole prompt counts as read.
    usage.output_tokens = 0;
    let start = json!({"type": "message_start", "message": reply.message(None, usage)});
    let mut state = StreamState {
        answer,
        reply,
        pending: VecDeque::new(),
        text_block: None,
        blocks: 0,
        done: false,
    };
    state.queue("message_start", start);
    if !offers_tools {
        // Without tools the answer is one text block, opened at once.
        state.open_text();
    }
    state.queue("ping", json!({"type": "ping"}));
    state.push(Ok(first));
    let sse = Sse::new(events(state)).keep_alive(crate::api::sse::keep_alive());
    Ok(with_node(&node, sse))
}

struct StreamState {
    answer: Answer,
    reply: Reply,
    pending: VecDeque<Event>,
    /// The index of the text block, while it is open.
    text_block: Option<u32>,
    /// How many blocks were opened.
    blocks: u32,
    done: bool,
}

impl StreamState {
    fn queue(&mut self, name: &'static str, data: Value) {
        self.pending
            .push_back(Event::default().event(name).data(data.to_string()));
    }

    /// Queues the events of one event of the answer.
    fn push(&mut self, output: Result<Output, ApiError>) {
        match output {
            Ok(Output::Text(text)) => self.text(text),
            // Each call is a `tool_use` block: its start with an empty
            // input, the input in `input_json_delta` pieces, and its stop.
            Ok(Output::CallStart { index, name }) => {
                self.close_text();
                let at = self.blocks;
                self.blocks += 1;
                let block = json!({"type": "tool_use", "id": self.reply.tool_use_id(index as usize), "name": name, "input": {}});
                self.queue(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": at, "content_block": block}),
                );
            }
            Ok(Output::CallArguments { piece, .. }) => {
                let at = self.blocks.saturating_sub(1);
                self.queue(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": at, "delta": {"type": "input_json_delta", "partial_json": piece}}),
                );
            }
            // The Messages API has no log-probabilities to ask for.
            Ok(Output::Logprobs(_)) => {}
            Ok(Output::CallEnd { .. }) => {
                let at = self.blocks.saturating_sub(1);
                self.queue(
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": at}),
                );
            }
            Ok(Output::Done(finish)) => {
                if self.blocks == 0 {
                    // An empty answer is still one (empty) text block.
                    self.open_text();
                }
                self.close_text();
                self.end(finish);
            }
            Err(err) => {
                tracing::warn!(error = %err, "generation failed mid-stream");
                self.queue("error", errors::api_error_body(&err));
                self.done = true;
            }
        }
    }

    /// A piece of text, in the text block (opened if it is not).
    fn text(&mut self, text: String) {
        if text.is_empty() {
            return;
        }
        let index = match self.text_block {
            Some(index) => index,
            None => self.open_text(),
        };
        self.queue(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}),
        );
    }

    fn open_text(&mut self) -> u32 {
        let index = self.blocks;
        self.blocks += 1;
        self.text_block = Some(index);
        self.queue(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": TextBlock::new(String::new())}),
        );
        index
    }

    fn close_text(&mut self) {
        if let Some(index) = self.text_block.take() {
            self.queue(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            );
        }
    }

    /// `message_delta` with the stop reason and usage, and `message_stop`.
    fn end(&mut self, finish: FinishReason) {
        let (stop_reason, stop_sequence) = stop_of(self.answer.generation(), finish);
        let usage = MessageUsage::from(self.answer.generation().usage());
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
            let output = st.answer.next().await;
            st.push(output);
        }
    })
}

//! Answers a running [`Generation`] with Anthropic's server-sent events:
//! `message_start`, `ping`, then each content block as
//! `content_block_start`, its `content_block_delta`s and
//! `content_block_stop`, then `message_delta` (stop reason and usage) and
//! `message_stop`; a failure after the stream began is an `error` event.
//!
//! Text is a `text` block of `text_delta`s. With tools, text that may
//! begin a call is held back (by the one tools module's
//! [`CallSplitter`]); each call the answer ends with is a `tool_use`
//! block (`id`, `name`, `input: {}`) whose input follows in
//! `input_json_delta` pieces, and the stop reason is `tool_use`.

use super::answer::{with_node, Reply};
use super::errors;
use super::wire::{stop_of, MessageUsage, TextBlock};
use crate::api::generate::Generation;
use crate::api::output::{FinishReason, Step};
use crate::api::tools::parse::ParsedCall;
use crate::api::tools::split::{pieces, CallSplitter, Ending, ARGUMENT_PIECE};
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
    mut generation: Generation,
    reply: Reply,
    tools: Option<ToolSet>,
) -> Result<Response, ApiError> {
    let first = generation.next().await?;
    let node = generation.node.clone();
    let mut usage = MessageUsage::from(generation.usage());
    // The cached part is known once the node finishes; until then the
    // whole prompt counts as read.
    usage.output_tokens = 0;
    let start = json!({"type": "message_start", "message": reply.message(None, usage)});
    let offers_tools = tools.is_some();
    let mut state = StreamState {
        generation,
        reply,
        tools: tools.map(|tools| (tools, CallSplitter::default())),
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
    generation: Generation,
    reply: Reply,
    /// The tools offered, and what of the answer is held back as a call.
    tools: Option<(ToolSet, CallSplitter)>,
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

    /// Queues the events of one step of the generation.
    fn push(&mut self, step: Result<Step, ApiError>) {
        match step {
            Ok(Step::Text(text)) => {
                let text = match &mut self.tools {
                    Some((_, split)) => split.text(&text),
                    None => text,
                };
                self.text(text);
            }
            Ok(Step::Done(mut finish)) => {
                if let Some((tools, split)) = &mut self.tools {
                    match split.finish(tools) {
                        Ending::Calls(calls) => {
                            self.close_text();
                            for (i, call) in calls.into_iter().enumerate() {
                                self.tool_use(i, call);
                            }
                            finish = FinishReason::ToolCalls;
                        }
                        Ending::Text(held) => self.text(held),
                    }
                }
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

    /// The `i`th call as a `tool_use` block: its start with an empty
    /// input, the input in `input_json_delta` pieces, and its stop.
    fn tool_use(&mut self, i: usize, call: ParsedCall) {
        let index = self.blocks;
        self.blocks += 1;
        let block = json!({"type": "tool_use", "id": self.reply.tool_use_id(i), "name": call.name, "input": {}});
        self.queue(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        );
        for piece in pieces(&call.arguments, ARGUMENT_PIECE) {
            self.queue(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
            );
        }
        self.queue(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
    }

    /// `message_delta` with the stop reason and usage, and `message_stop`.
    fn end(&mut self, finish: FinishReason) {
        let (stop_reason, stop_sequence) = stop_of(&self.generation, finish);
        let usage = MessageUsage::from(self.generation.usage());
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
            let step = st.generation.next().await;
            st.push(step);
        }
    })
}

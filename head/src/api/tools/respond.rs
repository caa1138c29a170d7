//! The answer to a request that offered tools: `message.tool_calls` and
//! `finish_reason: "tool_calls"` when the model called them, whole or
//! streamed as OpenAI's deltas (the call's index, id, type and name first,
//! then its arguments in pieces).
//!
//! While streaming, text is passed on as it comes until a `<tool_call>` tag
//! starts; from there the text is held to the end and read as calls. What
//! cannot be read as calls is sent as text after all.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::stream;

use super::parse::{parse, ParsedCall};
use super::spec::ToolSet;
use super::split::{pieces, CallSplitter, Ending, ARGUMENT_PIECE};
use crate::api::generate::Generation;
use crate::api::output::{FinishReason, Step};
use crate::api::respond::{data, with_node, Envelope};
use crate::api::wire::chat::{
    AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletion, ChatCompletionChunk, Delta,
    FunctionCall, FunctionDelta, Role, ToolCall, ToolCallDelta,
};
use crate::api::wire::Object;
use crate::api::ApiError;

/// Runs the generation to its end and answers with one JSON object.
pub async fn complete(
    mut generation: Generation,
    envelope: Envelope,
    tools: &ToolSet,
) -> Result<Response, ApiError> {
    let mut text = String::new();
    let finish = loop {
        match generation.next().await? {
            Step::Text(piece) => text.push_str(&piece),
            Step::Done(finish) => break finish,
        }
    };
    let (content, tool_calls, finish) = match parse(&text, tools) {
        Some(parsed) => {
            let calls = parsed
                .calls
                .into_iter()
                .enumerate()
                .map(|(i, call)| ToolCall {
                    id: call_id(&envelope, i),
                    kind: "function".to_owned(),
                    function: FunctionCall {
                        name: call.name,
                        arguments: call.arguments,
                    },
                })
                .collect();
            (parsed.content, Some(calls), FinishReason::ToolCalls)
        }
        None => (Some(text), None, finish),
    };
    let body = Json(ChatCompletion {
        id: envelope.id.clone(),
        object: Object::ChatCompletion,
        created: envelope.created,
        model: envelope.model.clone(),
        choices: vec![ChatChoice {
            index: 0,
            message: AssistantMessage {
                role: Role::Assistant,
                content,
                tool_calls,
            },
            logprobs: None,
            finish_reason: finish,
        }],
        usage: generation.usage().into(),
    });
    Ok(with_node(&generation.node, body.into_response()))
}

/// Answers with server-sent events as the node generates.
pub async fn stream(
    mut generation: Generation,
    envelope: Envelope,
    include_usage: bool,
    tools: ToolSet,
) -> Result<Response, ApiError> {
    let first = generation.next().await?;
    let node = generation.node.clone();
    let mut state = ToolStream {
        generation,
        envelope,
        include_usage,
        tools,
        pending: VecDeque::new(),
        split: CallSplitter::default(),
        done: false,
    };
    let role = Delta {
        role: Some(Role::Assistant),
        content: Some(String::new()),
        tool_calls: None,
    };
    state.send(role, None);
    state.push(Ok(first));
    let events = stream::unfold(state, |mut st| async move {
        loop {
            if let Some(event) = st.pending.pop_front() {
                return Some((Ok::<Event, Infallible>(event), st));
            }
            if st.done {
                return None;
            }
            let step = st.generation.next().await;
            st.push(step);
        }
    });
    let sse = Sse::new(events).keep_alive(crate::api::sse::keep_alive());
    Ok(with_node(&node, sse))
}

/// The id of the `index`th call of a response.
fn call_id(envelope: &Envelope, index: usize) -> String {
    let unique = envelope.id.trim_start_matches("chatcmpl-");
    format!("call_{unique}{index}")
}

struct ToolStream {
    generation: Generation,
    envelope: Envelope,
    include_usage: bool,
    tools: ToolSet,
    pending: VecDeque<Event>,
    /// Holds back what may be a call.
    split: CallSplitter,
    done: bool,
}

impl ToolStream {
    /// Queues the events for one step of the generation.
    fn push(&mut self, step: Result<Step, ApiError>) {
        match step {
            Ok(Step::Text(text)) => {
                let text = self.split.text(&text);
                self.text(text);
            }
            Ok(Step::Done(finish)) => {
                let finish = match self.split.finish(&self.tools) {
                    Ending::Calls(calls) => {
                        for (i, call) in calls.into_iter().enumerate() {
                            self.call(i, call);
                        }
                        FinishReason::ToolCalls
                    }
                    Ending::Text(held) => {
                        self.text(held);
                        finish
                    }
                };
                self.send(Delta::default(), Some(finish));
                if self.include_usage {
                    let chunk = self.chunk(Vec::new(), Some(self.generation.usage().into()));
                    self.pending.push_back(data(&chunk));
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

    fn text(&mut self, text: String) {
        if !text.is_empty() {
            let delta = Delta {
                content: Some(text),
                ..Delta::default()
            };
            self.send(delta, None);
        }
    }

    /// One call as deltas: index, id, type and name with empty arguments,
    /// then the arguments in pieces.
    fn call(&mut self, index: usize, call: ParsedCall) {
        let at = u32::try_from(index).unwrap_or(u32::MAX);
        let head = ToolCallDelta {
            index: at,
            id: Some(call_id(&self.envelope, index)),
            kind: Some("function".to_owned()),
            function: FunctionDelta {
                name: Some(call.name),
                arguments: String::new(),
            },
        };
        self.send_call(head);
        for piece in pieces(&call.arguments, ARGUMENT_PIECE) {
            let delta = ToolCallDelta {
                index: at,
                id: None,
                kind: None,
                function: FunctionDelta {
                    name: None,
                    arguments: piece.to_owned(),
                },
            };
            self.send_call(delta);
        }
    }

    fn send_call(&mut self, call: ToolCallDelta) {
        let delta = Delta {
            tool_calls: Some(vec![call]),
            ..Delta::default()
        };
        self.send(delta, None);
    }

    fn send(&mut self, delta: Delta, finish: Option<FinishReason>) {
        let choice = ChatChunkChoice {
            index: 0,
            delta,
            logprobs: None,
            finish_reason: finish,
        };
        let chunk = self.chunk(vec![choice], None);
        self.pending.push_back(data(&chunk));
    }

    fn chunk(
        &self,
        choices: Vec<ChatChunkChoice>,
        usage: Option<crate::api::wire::Usage>,
    ) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.envelope.id.clone(),
            object: Object::ChatCompletionChunk,
            created: self.envelope.created,
            model: self.envelope.model.clone(),
            choices,
            usage,
        }
    }
}

/// Answers a generation whose request offered tools, whole or streamed.
pub async fn answer(
    generation: Generation,
    envelope: Envelope,
    params: &crate::api::types::Params,
    tools: ToolSet,
) -> Result<Response, ApiError> {
    if params.stream {
        stream(generation, envelope, params.include_usage, tools).await
    } else {
        complete(generation, envelope, &tools).await
    }
}

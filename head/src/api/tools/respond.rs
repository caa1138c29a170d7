//! The answer to a request that offered tools: `message.tool_calls` and
//! `finish_reason: "tool_calls"` when the model called them, whole or
//! streamed as OpenAI's deltas (the call's index, id, type and name first,
//! then its arguments in pieces).
//!
//! The calls are read out of the text once, on the generation path
//! ([`Answer`]); this module only encodes its events.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::stream;

use super::spec::ToolSet;
use crate::api::generate::answer::{Answer, Output};
use crate::api::generate::Generation;
use crate::api::output::FinishReason;
use crate::api::respond::{data, with_node, Envelope};
use crate::api::wire::chat::{
    AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletion, ChatCompletionChunk, Delta,
    FunctionCall, FunctionDelta, Role, ToolCall, ToolCallDelta,
};
use crate::api::wire::Object;
use crate::api::ApiError;

/// Runs the generation to its end and answers with one JSON object.
pub async fn complete(
    generation: Generation,
    envelope: Envelope,
    tools: &ToolSet,
) -> Result<Response, ApiError> {
    let mut answer = Answer::new(generation, Some(tools.clone()));
    let whole = answer.whole().await?;
    let content = whole.content();
    let tool_calls = (!whole.calls.is_empty()).then(|| {
        whole
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
            .collect()
    });
    let generation = answer.generation();
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
            finish_reason: whole.finish,
        }],
        usage: generation.usage().into(),
    });
    Ok(with_node(&generation.node, body.into_response()))
}

/// Answers with server-sent events as the node generates.
pub async fn stream(
    generation: Generation,
    envelope: Envelope,
    include_usage: bool,
    tools: ToolSet,
) -> Result<Response, ApiError> {
    let mut answer = Answer::new(generation, Some(tools));
    let first = answer.next().await?;
    let node = answer.generation().node.clone();
    let mut state = ToolStream {
        answer,
        envelope,
        include_usage,
        pending: VecDeque::new(),
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
            let output = st.answer.next().await;
            st.push(output);
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
    answer: Answer,
    envelope: Envelope,
    include_usage: bool,
    pending: VecDeque<Event>,
    done: bool,
}

impl ToolStream {
    /// Queues the chunks of one event of the answer.
    fn push(&mut self, output: Result<Output, ApiError>) {
        match output {
            Ok(Output::Text(text)) => {
                let delta = Delta {
                    content: Some(text),
                    ..Delta::default()
                };
                self.send(delta, None);
            }
            // The index, id, type and name with empty arguments first,
            // then the arguments in pieces.
            Ok(Output::CallStart { index, name }) => self.send_call(ToolCallDelta {
                index,
                id: Some(call_id(&self.envelope, index as usize)),
                kind: Some("function".to_owned()),
                function: FunctionDelta {
                    name: Some(name),
                    arguments: String::new(),
                },
            }),
            Ok(Output::CallArguments { index, piece }) => self.send_call(ToolCallDelta {
                index,
                id: None,
                kind: None,
                function: FunctionDelta {
                    name: None,
                    arguments: piece,
                },
            }),
            // Refused with tools, so never asked for here.
            Ok(Output::CallEnd { .. } | Output::Logprobs(_)) => {}
            Ok(Output::Done(finish)) => {
                self.send(Delta::default(), Some(finish));
                if self.include_usage {
                    let usage = self.answer.generation().usage().into();
                    let chunk = self.chunk(Vec::new(), Some(usage));
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

//! Answers a running [`Generation`] as Ollama does: one JSON object, or
//! newline-delimited JSON objects as the node generates, the last with
//! `done: true`, the reason and the counts and durations in nanoseconds.

use super::super::generate::answer::{Answer, Output, Whole};
use super::super::generate::{Generation, Usage};
use super::super::node_header::with_node;
use super::super::output::FinishReason;
use super::super::tools::parse::ParsedCall;
use super::super::tools::ToolSet;
use super::clock::rfc3339_now;
use super::tools;
use crate::api::dialect::Dialect;
use crate::api::ApiError;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::stream::{self, Stream};
use serde_json::{json, Map, Value};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::{Duration, Instant};

/// The content type of a streamed answer.
const NDJSON: &str = "application/x-ndjson";

/// Which endpoint answers: its text goes in `message.content` or in
/// `response`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/api/chat`.
    Chat,
    /// `/api/generate`.
    Generate,
}

/// What every object of one answer shares, and its clock.
#[derive(Debug, Clone)]
pub struct Reply {
    kind: Kind,
    model: String,
    received: Instant,
    dispatched: Instant,
    first_text: Option<Instant>,
}

impl Reply {
    /// An answer from `model` to a request that arrived at `received` and
    /// went to a node at `dispatched`.
    pub fn new(kind: Kind, model: &str, received: Instant, dispatched: Instant) -> Self {
        Reply {
            kind,
            model: model.to_owned(),
            received,
            dispatched,
            first_text: None,
        }
    }

    /// An object carrying `text`, not yet done.
    fn text(&mut self, text: &str) -> Value {
        self.first_text.get_or_insert_with(Instant::now);
        let mut object = self.head(text);
        object.insert("done".into(), Value::Bool(false));
        Value::Object(object)
    }

    /// An object carrying the model's calls, not yet done.
    fn calls(&mut self, calls: &[ParsedCall]) -> Value {
        let mut object = Value::Object(self.head(""));
        object["message"]["tool_calls"] = tools::calls(calls);
        object["done"] = Value::Bool(false);
        object
    }

    /// The last object: `text` (all of it when not streamed), the reason
    /// and the counts.
    fn done(&self, text: &str, reason: &str, usage: Usage) -> Value {
        let now = Instant::now();
        let first = self.first_text.unwrap_or(now);
        let mut object = self.head(text);
        object.insert("done".into(), Value::Bool(true));
        object.insert("done_reason".into(), reason.into());
        object.insert("total_duration".into(), nanos(now - self.received).into());
        object.insert(
            "load_duration".into(),
            nanos(self.dispatched.saturating_duration_since(self.received)).into(),
        );
        let evaluated = usage.prompt_tokens.saturating_sub(usage.cached_tokens);
        object.insert("prompt_eval_count".into(), evaluated.into());
        object.insert(
            "prompt_eval_duration".into(),
            nanos(first.saturating_duration_since(self.dispatched)).into(),
        );
        object.insert("eval_count".into(), usage.completion_tokens.into());
        object.insert(
            "eval_duration".into(),
            nanos(now.saturating_duration_since(first)).into(),
        );
        object.insert("prompt_cached_count".into(), usage.cached_tokens.into());
        Value::Object(object)
    }

    /// The fields every object has, with `text` where this endpoint puts it.
    fn head(&self, text: &str) -> Map<String, Value> {
        let mut object = Map::new();
        object.insert("model".into(), self.model.clone().into());
        object.insert("created_at".into(), rfc3339_now().into());
        match self.kind {
            Kind::Chat => {
                object.insert(
                    "message".into(),
                    json!({"role": "assistant", "content": text}),
                );
            }
            Kind::Generate => {
                object.insert("response".into(), text.into());
            }
        }
        object
    }

    /// The answer to a request that only loads (`reason` "load") or
    /// unloads ("unload") the model.
    pub fn finished(kind: Kind, model: &str, reason: &str) -> Response {
        let now = Instant::now();
        let reply = Reply::new(kind, model, now, now);
        Json(reply.done("", reason, Usage::default())).into_response()
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn reason(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        // Ollama reports an answer of tool calls as a plain stop.
        FinishReason::ToolCalls => "stop",
    }
}

/// Runs the generation to its end and answers with one JSON object; with
/// `tools`, calls in the answer are `message.tool_calls`.
pub async fn complete(
    generation: Generation,
    mut reply: Reply,
    tools: Option<&ToolSet>,
) -> Result<Response, ApiError> {
    let mut answer = Answer::new(generation, tools.cloned());
    let mut whole = Whole::default();
    loop {
        let output = answer.next().await?;
        if reply.first_text.is_none() && !matches!(output, Output::Done(_)) {
            reply.text("");
        }
        if whole.add(&output) {
            break;
        }
    }
    let generation = answer.generation();
    let finish = reason(whole.finish);
    let body = if whole.calls.is_empty() {
        reply.done(&whole.text, finish, generation.usage())
    } else {
        let mut body = reply.done(whole.text.trim(), finish, generation.usage());
        body["message"]["tool_calls"] = tools::calls(&whole.calls);
        body
    };
    Ok(with_node(&generation.node, Json(body)))
}

/// Answers with one JSON object per line as the node generates. The first
/// event is awaited before the response starts, so that a generation that
/// fails before any text gets an error status, and the node header names
/// the node that answers. With `tools`, the calls come in one object before
/// the last, as Ollama sends them.
pub async fn stream(
    generation: Generation,
    reply: Reply,
    tools: Option<ToolSet>,
) -> Result<Response, ApiError> {
    let mut answer = Answer::new(generation, tools);
    let first = answer.next().await?;
    let node = answer.generation().node.clone();
    let mut state = StreamState {
        answer,
        reply,
        gathered: Whole::default(),
        pending: VecDeque::new(),
        done: false,
    };
    state.push(Ok(first));
    let body = Body::from_stream(lines(state));
    let response = ([(header::CONTENT_TYPE, NDJSON)], body);
    Ok(with_node(&node, response))
}

struct StreamState {
    answer: Answer,
    reply: Reply,
    /// The calls the answer ends with, gathered for their one object.
    gathered: Whole,
    pending: VecDeque<Bytes>,
    done: bool,
}

impl StreamState {
    /// Queues the line for one event of the answer; an error mid-stream is
    /// a last `{"error": ...}` line, as Ollama sends it.
    fn push(&mut self, output: Result<Output, ApiError>) {
        match output {
            Ok(Output::Text(text)) => {
                let line = self.reply.text(&text);
                self.line(&line);
            }
            // Calls go out whole, in one object before the last.
            Ok(
                output @ (Output::CallStart { .. }
                | Output::CallArguments { .. }
                | Output::CallEnd { .. }
                | Output::Logprobs(_)),
            ) => {
                self.gathered.add(&output);
            }
            Ok(Output::Done(finish)) => {
                if !self.gathered.calls.is_empty() {
                    let line = self.reply.calls(&self.gathered.calls);
                    self.line(&line);
                }
                self.done = true;
                let usage = self.answer.generation().usage();
                let line = self.reply.done("", reason(finish), usage);
                self.line(&line);
            }
            Err(err) => {
                tracing::warn!(error = %err, "generation failed mid-stream");
                self.done = true;
                self.line(&err.body_in(Dialect::Ollama));
            }
        }
    }

    fn line(&mut self, value: &Value) {
        let mut line = value.to_string();
        line.push('\n');
        self.pending.push_back(Bytes::from(line));
    }
}

fn lines(state: StreamState) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    stream::unfold(state, |mut st| async move {
        loop {
            if let Some(line) = st.pending.pop_front() {
                return Some((Ok(line), st));
            }
            if st.done {
                return None;
            }
            let output = st.answer.next().await;
            st.push(output);
        }
    })
}

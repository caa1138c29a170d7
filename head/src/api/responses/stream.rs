//! The streamed answer: server-sent events with `event:` lines and the
//! Responses API's event types, each with its `sequence_number`, in the
//! order the official clients expect:
//!
//! `response.created`, `response.in_progress`, `response.output_item.added`,
//! `response.content_part.added`, `response.output_text.delta` (one per
//! piece of text), `response.output_text.done`, `response.content_part.done`,
//! `response.output_item.done`, then `response.completed` (or
//! `response.incomplete` when cut by `max_output_tokens`). A failure is an
//! `error` event followed by `response.failed`.
//!
//! With tools offered, the message item opens only once there is text to
//! show, text that may start a call is held back, and each call the model
//! made follows as a `function_call` item: `response.output_item.added`,
//! `response.function_call_arguments.delta` (the arguments in pieces),
//! `response.function_call_arguments.done`, `response.output_item.done`.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::super::tools::parse::split_answer;
use super::super::tools::split::{pieces, CallSplitter, ARGUMENT_PIECE};
use super::drive::{finished, Progress};
use super::reply::{output_text, ResponseView, Status};
use super::tools::call_item;

/// Where the stream stands.
struct State {
    progress: mpsc::Receiver<Progress>,
    view: ResponseView,
    /// Events made and not yet sent, as (type, data without the common
    /// fields).
    queue: VecDeque<(&'static str, Value)>,
    sequence: u64,
    ended: bool,
    /// With tools offered: what holds back text that may start a call.
    splitter: Option<CallSplitter>,
    /// Whether the message item was opened.
    message_open: bool,
    /// The text sent in deltas so far.
    sent: String,
}

/// The event-stream answer for `view`, fed by `progress`.
pub fn answer(view: ResponseView, progress: mpsc::Receiver<Progress>) -> Response {
    let mut queue = VecDeque::new();
    queue.push_back(("response.created", json!({"response": view.body()})));
    queue.push_back(("response.in_progress", json!({"response": view.body()})));
    let tools = view.echo.tools.offered();
    let mut state = State {
        progress,
        view,
        queue,
        sequence: 0,
        ended: false,
        splitter: tools.then(CallSplitter::default),
        message_open: false,
        sent: String::new(),
    };
    if !tools {
        open_message(&mut state);
    }
    Sse::new(stream::unfold(state, next))
        .keep_alive(crate::api::sse::keep_alive())
        .into_response()
}

/// The message item before any text.
fn empty_message(view: &ResponseView) -> Value {
    let mut item = view.message(Status::InProgress);
    item["content"] = json!([]);
    item
}

/// Opens the message item, the first of the output.
fn open_message(state: &mut State) {
    let mut opening = state.view.clone();
    opening.text = None;
    state.queue.push_back((
        "response.output_item.added",
        json!({"output_index": 0, "item": empty_message(&opening)}),
    ));
    let mut part = json!({"item_id": state.view.message_id, "output_index": 0, "content_index": 0});
    part["part"] = output_text("");
    state.queue.push_back(("response.content_part.added", part));
    state.message_open = true;
}

/// Sends `delta` of the message's text, opening the message first.
fn send_text(state: &mut State, delta: String) {
    if delta.is_empty() {
        return;
    }
    if !state.message_open {
        open_message(state);
    }
    state.sent.push_str(&delta);
    let data = json!({
        "item_id": state.view.message_id,
        "output_index": 0,
        "content_index": 0,
        "delta": delta,
        "logprobs": [],
    });
    state.queue.push_back(("response.output_text.delta", data));
}

async fn next(mut state: State) -> Option<(Result<SseEvent, Infallible>, State)> {
    loop {
        if let Some((kind, mut data)) = state.queue.pop_front() {
            data["type"] = json!(kind);
            data["sequence_number"] = json!(state.sequence);
            state.sequence += 1;
            let event = SseEvent::default().event(kind).data(data.to_string());
            return Some((Ok(event), state));
        }
        if state.ended {
            return None;
        }
        match state.progress.recv().await {
            Some(Progress::Text(delta)) => {
                let delta = match state.splitter.as_mut() {
                    Some(splitter) => splitter.text(&delta),
                    None => delta,
                };
                send_text(&mut state, delta);
            }
            Some(Progress::Done {
                text,
                finish,
                usage,
            }) => {
                let view = finished(state.view.clone(), text, finish, usage);
                state.view = view;
                ending(&mut state);
                state.ended = true;
            }
            Some(Progress::Failed(err)) => {
                let body = err.body();
                let error = &body["error"];
                state.queue.push_back((
                    "error",
                    json!({"code": error["code"], "message": error["message"], "param": error["param"]}),
                ));
                state.view.status = Status::Failed;
                state.view.error = error["message"].as_str().map(str::to_owned);
                state
                    .queue
                    .push_back(("response.failed", json!({"response": state.view.body()})));
                state.ended = true;
            }
            None => {
                state.view.status = Status::Failed;
                state.view.error = Some(
                    "the generation ended without an answer; send the request again".to_owned(),
                );
                state
                    .queue
                    .push_back(("response.failed", json!({"response": state.view.body()})));
                state.ended = true;
            }
        }
    }
}

/// The events that close a finished response: the rest of its text, the
/// message's end, and its calls.
fn ending(state: &mut State) {
    let whole = state.view.text.clone().unwrap_or_default();
    let (text, calls) = split_answer(&whole, state.view.echo.tools.set.as_ref());
    if !text.is_empty() || calls.is_empty() {
        // Text held back that turned out not to start a call.
        let rest = text
            .strip_prefix(state.sent.as_str())
            .unwrap_or_default()
            .to_owned();
        send_text(state, rest);
        if !state.message_open {
            open_message(state);
        }
    }
    let view = &state.view;
    let queue = &mut state.queue;
    let mut index = 0;
    if state.message_open {
        let location =
            || json!({"item_id": view.message_id, "output_index": 0, "content_index": 0});
        let mut done = location();
        done["text"] = json!(text);
        done["logprobs"] = json!([]);
        queue.push_back(("response.output_text.done", done));
        let mut part = location();
        part["part"] = output_text(&text);
        queue.push_back(("response.content_part.done", part));
        queue.push_back((
            "response.output_item.done",
            json!({"output_index": 0, "item": view.message_with(Some(&text), view.status)}),
        ));
        index = 1;
    }
    for (i, call) in calls.iter().enumerate() {
        let output_index = index + i;
        let mut item = call_item(&view.id, i, call, "in_progress");
        item["arguments"] = json!("");
        let item_id = item["id"].clone();
        queue.push_back((
            "response.output_item.added",
            json!({"output_index": output_index, "item": item}),
        ));
        for piece in pieces(&call.arguments, ARGUMENT_PIECE) {
            queue.push_back((
                "response.function_call_arguments.delta",
                json!({"item_id": item_id, "output_index": output_index, "delta": piece}),
            ));
        }
        queue.push_back((
            "response.function_call_arguments.done",
            json!({"item_id": item_id, "output_index": output_index, "arguments": call.arguments}),
        ));
        queue.push_back((
            "response.output_item.done",
            json!({"output_index": output_index, "item": call_item(&view.id, i, call, "completed")}),
        ));
    }
    let last = match view.status {
        Status::Incomplete => "response.incomplete",
        _ => "response.completed",
    };
    queue.push_back((last, json!({"response": view.body()})));
}

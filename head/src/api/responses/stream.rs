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

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::drive::{finished, Progress};
use super::reply::{output_text, ResponseView, Status};

/// Where the stream stands.
struct State {
    progress: mpsc::Receiver<Progress>,
    view: ResponseView,
    /// Events made and not yet sent, as (type, data without the common
    /// fields).
    queue: VecDeque<(&'static str, Value)>,
    sequence: u64,
    ended: bool,
}

/// The event-stream answer for `view`, fed by `progress`.
pub fn answer(view: ResponseView, progress: mpsc::Receiver<Progress>) -> Response {
    let location = json!({"item_id": view.message_id, "output_index": 0, "content_index": 0});
    let mut queue = VecDeque::new();
    queue.push_back(("response.created", json!({"response": view.body()})));
    queue.push_back(("response.in_progress", json!({"response": view.body()})));
    let mut opening = view.clone();
    opening.text = None;
    queue.push_back((
        "response.output_item.added",
        json!({"output_index": 0, "item": empty_message(&opening)}),
    ));
    let mut part = location.clone();
    part["part"] = output_text("");
    queue.push_back(("response.content_part.added", part));
    let state = State {
        progress,
        view,
        queue,
        sequence: 0,
        ended: false,
    };
    Sse::new(stream::unfold(state, next))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The message item before any text.
fn empty_message(view: &ResponseView) -> Value {
    let mut item = view.message(Status::InProgress);
    item["content"] = json!([]);
    item
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
                let data = json!({
                    "item_id": state.view.message_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": delta,
                    "logprobs": [],
                });
                state.queue.push_back(("response.output_text.delta", data));
            }
            Some(Progress::Done {
                text,
                finish,
                usage,
            }) => {
                let view = finished(state.view.clone(), text, finish, usage);
                ending(&mut state.queue, &view);
                state.view = view;
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

/// The events that close a finished response.
fn ending(queue: &mut VecDeque<(&'static str, Value)>, view: &ResponseView) {
    let text = view.text.clone().unwrap_or_default();
    let location = || json!({"item_id": view.message_id, "output_index": 0, "content_index": 0});
    let mut done = location();
    done["text"] = json!(text);
    done["logprobs"] = json!([]);
    queue.push_back(("response.output_text.done", done));
    let mut part = location();
    part["part"] = output_text(&text);
    queue.push_back(("response.content_part.done", part));
    queue.push_back((
        "response.output_item.done",
        json!({"output_index": 0, "item": view.message(view.status)}),
    ));
    let last = match view.status {
        Status::Incomplete => "response.incomplete",
        _ => "response.completed",
    };
    queue.push_back((last, json!({"response": view.body()})));
}

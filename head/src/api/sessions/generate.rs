//! `POST /v1/sessions/{id}/generate`: the session's history goes through
//! the chat handler's path (template, tokens, the fleet's warm-prefix
//! routing, so a continued conversation lands on the node that holds its
//! prefix), and what the model says is committed as a `generated` event.
//!
//! The generation runs in its own task that holds the session: a client
//! that goes away does not lose the reply, which is committed all the same.

use std::convert::Infallible;
use std::time::Instant;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::HeaderValue;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::stream;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::super::admission::Admission;
use super::super::auth::Caller;
use super::super::extract::ApiJson;
use super::super::generate::answer::{Answer, Output, Whole};
use super::super::generate::prepare::{prepare, Started};
use super::super::generate::prompt::Prompt;
use super::super::generate::request::GenerationRequest;
use super::super::generate::Generation;
use super::super::handlers::{next_request_id, request_span};
use super::super::request_log;
use super::super::request_metrics::RequestModel;
use super::super::tools::ToolSet;
use super::super::{ApiError, AppState, NODE_HEADER};
use super::bodies::{self, GenerateBody};
use super::{history, params, session_id, store};
use crate::sessions::{Event, EventKind, GenerationGuard, SessionStore};

/// What the generation task tells the answer.
enum Progress {
    /// Text as the model produced it (not committed yet).
    Text(String),
    /// An event, once committed.
    Committed(Event),
    /// The generation or its commit failed.
    Failed(ApiError),
}

/// `POST /v1/sessions/{id}/generate` `{"stream": bool, "params": {...}}`.
pub async fn generate(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    id: Result<Path<i64>, PathRejection>,
    ApiJson(body): ApiJson<GenerateBody>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let request_id = next_request_id();
    let span = request_span("sessions", &request_id);
    let inner = span.clone();
    let work = async move {
        let store = store(&state)?.clone();
        let id = session_id(id)?;
        if let Some(over) = &body.params {
            params::check_keys(over)?;
        }
        let guard = store.begin_generation(id).await?;
        let events = history::load(&store, id).await?;
        // Room for the prompt and the reply, before a node is asked.
        let len = events.last().map_or(0, |e| e.seq);
        store.limits().check_events(Some(id), len, 1, 1)?;
        let conversation = history::conversation(id, &events)?;
        let tools =
            ToolSet::from_request(Some(&conversation.tools), body.tool_choice.as_ref(), None)?;
        let settings = params::merged(&conversation.params, body.params.as_ref());
        let req = params::request(&conversation.model, conversation.messages, &settings)?;
        let admission = Admission {
            state: &state,
            received,
            caller: caller.as_ref(),
        };
        let prepared = prepare(&admission, counted.as_ref(), req.model_id()?, || {
            let mut request = GenerationRequest::new(
                Prompt::chat(req.chat_messages()?),
                "messages",
                req.params()?,
            );
            request.tools = tools;
            Ok(request)
        })
        .await?;
        let Started {
            codec,
            first: generation,
            tools,
            ..
        } = prepared.start(&admission, inner).await?;
        let given = json!({
            "model": codec.id(),
            "params": settings,
            "prompt_tokens": generation.usage().prompt_tokens,
            "node": generation.node,
        });
        let prompt_event = store
            .append_generated(&guard, EventKind::GenerationPrompt, given)
            .await?;
        let node = generation.node.clone();
        let (tx, rx) = mpsc::channel(64);
        let turn = Turn {
            store,
            guard,
            tools,
        };
        tokio::spawn(drive(turn, generation, prompt_event, tx));
        let mut response = if body.stream {
            Sse::new(sse(rx))
                .keep_alive(crate::api::sse::keep_alive())
                .into_response()
        } else {
            collect(rx).await?
        };
        if let Ok(value) = HeaderValue::from_str(&node) {
            response.headers_mut().insert(NODE_HEADER, value);
        }
        Ok(response)
    };
    request_log::logged(span, work).await
}

/// A generation's hold on its session, and the tools it offers.
struct Turn {
    store: SessionStore,
    guard: GenerationGuard,
    tools: Option<ToolSet>,
}

/// Runs the generation to its end and commits its reply, telling `tx`
/// (while anyone listens) what happens. With tools offered, the calls the
/// model made (read on the generation path, [`Answer`]) are the
/// `tool_calls` of the `generated` event.
async fn drive(
    turn: Turn,
    generation: Generation,
    prompt_event: Event,
    tx: mpsc::Sender<Progress>,
) {
    let Turn {
        store,
        guard,
        tools,
    } = turn;
    let prompt_id = prompt_event.id;
    let _ = tx.send(Progress::Committed(prompt_event)).await;
    let mut answer = Answer::new(generation, tools);
    let mut whole = Whole::default();
    loop {
        match answer.next().await {
            Ok(output) => {
                if let Output::Text(piece) = &output {
                    let _ = tx.send(Progress::Text(piece.clone())).await;
                }
                if whole.add(&output) {
                    break;
                }
            }
            Err(err) => {
                // The turn ends in a failure event, so that replays drop it.
                let body = bodies::failed(&err.body(), prompt_id);
                drop(answer);
                match store
                    .append_generated(&guard, EventKind::GenerationFailed, body)
                    .await
                {
                    Ok(event) => {
                        let _ = tx.send(Progress::Committed(event)).await;
                    }
                    Err(error) => {
                        tracing::warn!(session = %guard.session(), %error, "the failed generation could not be recorded");
                    }
                }
                drop(guard);
                let _ = tx.send(Progress::Failed(err)).await;
                return;
            }
        }
    }
    let generation = answer.generation();
    let usage = generation.usage();
    let content = whole.content().unwrap_or_default();
    let mut body = bodies::generated(&content, whole.finish, &usage);
    if !whole.calls.is_empty() {
        let calls: Vec<Value> = whole
            .calls
            .iter()
            .enumerate()
            .map(|(i, call)| {
                json!({
                    "id": format!("call_{}_{i}", prompt_id.0),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                })
            })
            .collect();
        body["tool_calls"] = json!(calls);
    }
    body["node"] = json!(generation.node);
    drop(answer);
    let committed = store
        .append_generated(&guard, EventKind::Generated, body)
        .await;
    drop(guard);
    let _ = tx
        .send(match committed {
            Ok(event) => Progress::Committed(event),
            Err(err) => Progress::Failed(err.into()),
        })
        .await;
}

/// The JSON answer: the events the generation committed.
async fn collect(mut rx: mpsc::Receiver<Progress>) -> Result<Response, ApiError> {
    let mut events = Vec::new();
    while let Some(progress) = rx.recv().await {
        match progress {
            Progress::Text(_) => {}
            Progress::Committed(event) => events.push(event),
            Progress::Failed(err) => return Err(err),
        }
    }
    let next_cursor = events.last().map_or(0, |e| e.seq);
    Ok(Json(json!({
        "object": "list",
        "events": events,
        "next_cursor": next_cursor,
    }))
    .into_response())
}

/// The event-stream answer: `delta` for text as it comes, `event` for each
/// committed event, `error` if it fails, and `done` at the end.
fn sse(
    rx: mpsc::Receiver<Progress>,
) -> impl futures::Stream<Item = Result<SseEvent, Infallible>> + Send {
    stream::unfold((rx, 0_i64, false), |(mut rx, last_seq, ended)| async move {
        if ended {
            return None;
        }
        let event = match rx.recv().await {
            Some(Progress::Text(text)) => (named("delta", &json!({"content": text})), last_seq),
            Some(Progress::Committed(event)) => {
                let seq = event.seq;
                (named("event", &json!(event)), seq)
            }
            Some(Progress::Failed(err)) => (named("error", &err.body()), last_seq),
            None => {
                let done = named("done", &json!({"next_cursor": last_seq}));
                return Some((Ok(done), (rx, last_seq, true)));
            }
        };
        Some((Ok(event.0), (rx, event.1, false)))
    })
}

fn named(name: &str, data: &Value) -> SseEvent {
    SseEvent::default().event(name).data(data.to_string())
}

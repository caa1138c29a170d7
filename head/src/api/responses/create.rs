//! `POST /v1/responses`: the new turn joins its conversation's history and
//! goes through the chat path (template, tokens, the fleet's warm-prefix
//! routing), and, unless `store` is false, the turn is kept in a session.
//!
//! A first response starts a session. A response that continues the
//! latest response of its session goes on in that session, so the node
//! that holds its prefix is picked again; one that continues an older
//! response (or one whose session is generating) forks the session at
//! that response, leaving the other branch as it was.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::super::admission::Admission;
use super::super::auth::Caller;
use super::super::extract::ApiJson;
use super::super::generate::prepare::{prepare_for, Started};
use super::super::generate::prompt::Prompt;
use super::super::generate::request::GenerationRequest;
use super::super::handlers::{next_request_id, request_span};
use super::super::request_log;
use super::super::request_metrics::RequestModel;
use super::super::sessions::{history, owner, params, store as session_store};
use super::super::{ApiError, AppState, NODE_HEADER};
use super::drive::{self, Hold};
use super::reply::{Echo, ResponseView, Status};
use super::request::{Checked, ResponsesBody};
use super::stream;
use super::turn::{self, Found, TurnRef};
use crate::sessions::{EventKind, GenerationGuard, Meta, SessionId, SessionStore, Turn};

/// Where the new turn is written.
enum Plan {
    /// Nowhere: `store` is false.
    Nothing,
    /// A new session.
    New,
    /// The session of the previous response, held for this turn.
    Continue(GenerationGuard),
    /// A fork of the previous response's session at its answer.
    Fork(SessionId, crate::sessions::EventId),
}

/// `POST /v1/responses`.
pub async fn create(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    counted: Option<Extension<RequestModel>>,
    ApiJson(body): ApiJson<ResponsesBody>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let request_id = next_request_id();
    let span = request_span("responses", &request_id);
    let inner = span.clone();
    let work = async move {
        let checked = body.check()?;
        let store = session_store(&state)?.clone();
        let previous = match &checked.previous {
            Some(id) => Some(previous_turn(&store, id).await?),
            None => None,
        };
        let model = match (&checked.model, &previous) {
            (Some(model), _) => model.clone(),
            (None, Some(found)) => Echo::from_prompt_event(&found.prompt().body).model,
            (None, None) => String::new(),
        };
        let admission = Admission {
            state: &state,
            received,
            caller: caller.as_ref(),
        };
        let codec = admission.text_model(&model, counted.as_ref())?;
        let messages = messages(previous.as_ref(), &checked)?;
        let req = params::request(codec.id(), messages, &checked.settings)?;
        let mut request =
            GenerationRequest::new(Prompt::chat(req.chat_messages()?), "input", req.params()?);
        request.tools = checked.tools.set.clone();
        let prepared = prepare_for(&admission, codec, request).await?;
        // A message over the size limit is refused before a node is asked.
        for message in &checked.input {
            store.limits().check_message(&message.event_body())?;
        }
        let plan = plan(&store, &checked, previous.as_ref()).await?;
        let Started {
            codec,
            first: generation,
            ..
        } = prepared.start(&admission, inner).await?;
        let echo = Echo {
            model: codec.id().to_owned(),
            instructions: checked.instructions.clone(),
            max_output_tokens: checked.max_output_tokens,
            temperature: checked.temperature,
            top_p: checked.top_p,
            previous_response_id: checked.previous.clone(),
            store: checked.store,
            tools: checked.tools.clone(),
        };
        let given = json!({
            "model": codec.id(),
            "params": checked.settings,
            "prompt_tokens": generation.usage().prompt_tokens,
            "node": generation.node,
            "response": echo.to_value(),
        });
        let owner = owner(caller.as_ref());
        let (hold, ids) = write_turn(&store, plan, &checked, (given, owner), &request_id).await?;
        let view = ResponseView {
            id: ids.0,
            message_id: ids.1,
            created_at: now_secs(),
            status: Status::InProgress,
            echo,
            text: None,
            usage: None,
            error: None,
        };
        let node = generation.node.clone();
        let progress = drive::spawn(hold, generation);
        let mut response = if checked.stream {
            stream::answer(view, progress)
        } else {
            Json(drive::collect(view, progress).await?).into_response()
        };
        if let Ok(value) = axum::http::HeaderValue::from_str(&node) {
            response.headers_mut().insert(NODE_HEADER, value);
        }
        Ok(response)
    };
    request_log::logged(span, work).await
}

/// The stored response a request continues from; 400 when it has no
/// answer to continue from.
async fn previous_turn(store: &SessionStore, id: &str) -> Result<Found, ApiError> {
    let found = turn::find(store, id).await.map_err(|e| match e {
        ApiError::ResponseNotFound { id } => ApiError::param(
            "previous_response_id",
            format!("no stored response {id}: it was never stored (store: false), was deleted, or the id is mistyped; start a new conversation without `previous_response_id`"),
        ),
        other => other,
    })?;
    if found.generated().is_none() {
        let status = found.view(store.is_generating(found.turn.session)).status;
        return Err(ApiError::param(
            "previous_response_id",
            format!("response {id} is {} and has no answer to continue from; wait for it to complete, or continue from an earlier response", status.as_str()),
        ));
    }
    Ok(found)
}

/// The chat messages the model is given: the earlier turns (without the
/// first turn's instructions, which OpenAI does not carry over), this
/// request's instructions, and the new input.
fn messages(previous: Option<&Found>, checked: &Checked) -> Result<Vec<Value>, ApiError> {
    let mut messages = Vec::new();
    if let Some(instructions) = &checked.instructions {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    if let Some(found) = previous {
        let end = found.generated_index().map_or(found.index, |i| i + 1);
        let events = &found.events[..end];
        let earlier = history::conversation(found.turn.session, events)?.messages;
        let skip = events
            .first()
            .and_then(|e| e.body["system"].as_str())
            .is_some_and(|s| !s.is_empty());
        messages.extend(earlier.into_iter().skip(usize::from(skip)));
    }
    for message in &checked.input {
        messages.push(message.event_body());
    }
    Ok(messages)
}

/// Where the turn will be written; takes hold of the previous response's
/// session when the turn goes on in it.
async fn plan(
    store: &SessionStore,
    checked: &Checked,
    previous: Option<&Found>,
) -> Result<Plan, ApiError> {
    if !checked.store {
        return Ok(Plan::Nothing);
    }
    let Some(found) = previous else {
        return Ok(Plan::New);
    };
    let answer = found
        .generated()
        .map(|e| (e.id, e.seq))
        .ok_or_else(|| turn::not_found(&found.turn.response_id()))?;
    let session = found.turn.session;
    if let Ok(guard) = store.begin_generation(session).await {
        // Read again under the hold: nothing can be appended meanwhile.
        if store.get(session).await?.last_seq == answer.1 {
            return Ok(Plan::Continue(guard));
        }
    }
    Ok(Plan::Fork(session, answer.0))
}

/// Writes the turn's start: the session (new or forked), the input
/// messages and the `generation_prompt` event; the hold on the session and
/// the response's and message's ids.
async fn write_turn(
    store: &SessionStore,
    plan: Plan,
    checked: &Checked,
    (given, owner): (Value, Option<String>),
    request_id: &str,
) -> Result<(Option<Hold>, (String, String)), ApiError> {
    let given_model = given["model"].clone();
    let mut events: Vec<(EventKind, Value)> = checked
        .input
        .iter()
        .map(|message| (EventKind::Message, message.event_body()))
        .collect();
    events.push((EventKind::GenerationPrompt, given));
    // The input and the prompt are written in one change, with room kept
    // for the answer: a turn is never half written.
    let turn = Turn { events, reserve: 1 };
    let (guard, written) = match plan {
        Plan::Nothing => {
            let ids = (format!("resp_{request_id}"), format!("msg_{request_id}"));
            return Ok((None, ids));
        }
        Plan::Continue(guard) => {
            let written = store.append_turn(&guard, turn).await?;
            (guard, written)
        }
        Plan::New => {
            let created = json!({
                "model": given_model,
                "system": checked.instructions,
                "tools": [],
                "params": {},
            });
            let mut made = store
                .create_for(owner, created, Meta::default(), turn)
                .await?;
            made.events.remove(0);
            (made.guard, made.events)
        }
        Plan::Fork(session, at) => {
            let mut made = store.fork_for(owner, session, at, turn).await?;
            made.events.remove(0);
            (made.guard, made.events)
        }
    };
    let (Some(first), Some(prompt)) = (written.first(), written.last()) else {
        return Err(ApiError::Generation {
            message: "the response's turn was not written; send the request again".to_owned(),
        });
    };
    let turn = TurnRef {
        session: guard.session(),
        prompt: prompt.id,
    };
    tracing::info!(session = %turn.session, response = %turn.response_id(), "response stored");
    let ids = (turn.response_id(), turn.message_id());
    Ok((
        Some(Hold {
            store: store.clone(),
            guard,
            turn: first.id,
        }),
        ids,
    ))
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

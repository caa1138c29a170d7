//! Reading and deleting stored responses: `GET /v1/responses/{id}`,
//! `GET /v1/responses/{id}/input_items`, `DELETE /v1/responses/{id}`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::super::sessions::manage::query;
use super::super::sessions::store as session_store;
use super::super::{ApiError, AppState};
use super::reply::output_text;
use super::turn;
use crate::sessions::{Event, EventKind};

/// Input items listed per page unless `limit` says otherwise, and the most.
const ITEMS_DEFAULT: i64 = 20;
const ITEMS_MAX: i64 = 100;

/// `GET /v1/responses/{id}`.
pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let store = session_store(&state)?;
    let found = turn::find(store, &id).await?;
    let generating = store.is_generating(found.turn.session);
    Ok(Json(found.view(generating).body()))
}

/// `DELETE /v1/responses/{id}`: the response and its input go; the
/// earlier responses of its conversation stay. Only the latest response
/// of a conversation branch can be deleted (later ones were generated
/// from it).
pub async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let store = session_store(&state)?;
    let found = turn::find(store, &id).await?;
    if !found.is_latest() {
        return Err(ApiError::ResponseContinued { id });
    }
    let session = found.turn.session;
    match found.before_inputs() {
        Some(kept) if !matches!(kept.kind, EventKind::Created | EventKind::Forked) => {
            store.trim(session, kept.id, None).await?;
        }
        // Nothing of the session's own would be left.
        _ => {
            store.purge(session, None, false).await?;
        }
    }
    tracing::info!(%session, response = %id, "response deleted");
    Ok(Json(
        json!({"id": id, "object": "response", "deleted": true}),
    ))
}

/// `GET /v1/responses/{id}/input_items` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItemsQuery {
    /// `asc` or `desc` (the default, newest first).
    pub order: Option<String>,
    /// At most this many (1 to 100, default 20).
    pub limit: Option<i64>,
    /// Items after this item id, in the order asked for.
    pub after: Option<String>,
}

/// `GET /v1/responses/{id}/input_items`: the messages the response was
/// given (this turn's input, not the earlier turns').
pub async fn input_items(
    State(state): State<AppState>,
    Path(id): Path<String>,
    q: Result<Query<ItemsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let store = session_store(&state)?;
    let q = query(q)?;
    let limit = q.limit.unwrap_or(ITEMS_DEFAULT);
    if !(1..=ITEMS_MAX).contains(&limit) {
        return Err(ApiError::param(
            "limit",
            format!("`limit` must be from 1 to {ITEMS_MAX} (got {limit}); page on with `after`"),
        ));
    }
    let found = turn::find(store, &id).await?;
    let mut items: Vec<Value> = found.inputs().iter().flat_map(items_of).collect();
    match q.order.as_deref() {
        None | Some("desc") => items.reverse(),
        Some("asc") => {}
        Some(other) => {
            return Err(ApiError::param(
                "order",
                format!("`order` must be asc or desc (got {other:?})"),
            ))
        }
    }
    if let Some(after) = &q.after {
        let at = items
            .iter()
            .position(|i| i["id"] == after.as_str())
            .ok_or_else(|| {
                ApiError::param(
                    "after",
                    format!("{after:?} is not an input item of {id}; pass the `last_id` of the previous page"),
                )
            })?;
        items.drain(..=at);
    }
    let has_more = items.len() > limit as usize;
    items.truncate(limit as usize);
    Ok(Json(page(items, has_more)))
}

/// A page of items in OpenAI's list shape.
fn page(items: Vec<Value>, has_more: bool) -> Value {
    json!({
        "object": "list",
        "first_id": items.first().map(|i| i["id"].clone()),
        "last_id": items.last().map(|i| i["id"].clone()),
        "has_more": has_more,
        "data": items,
    })
}

/// An input message as Responses API items: a message, a tool's result
/// (`function_call_output`), or an assistant's text (if any) and calls
/// (`function_call`).
fn items_of(event: &Event) -> Vec<Value> {
    let role = event.body["role"].as_str().unwrap_or("user");
    let text = event.body["content"].as_str().unwrap_or_default();
    let id = |kind: &str| format!("{kind}_{}_{}", event.session, event.id);
    if role == "tool" {
        return vec![json!({
            "id": id("fco"),
            "type": "function_call_output",
            "status": "completed",
            "call_id": event.body["tool_call_id"],
            "output": text,
        })];
    }
    let calls = event.body["tool_calls"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let mut items = Vec::with_capacity(calls.len() + 1);
    if !text.is_empty() || calls.is_empty() {
        let part = if role == "assistant" {
            output_text(text)
        } else {
            json!({"type": "input_text", "text": text})
        };
        items.push(json!({
            "id": id("msg"),
            "type": "message",
            "status": "completed",
            "role": role,
            "content": [part],
        }));
    }
    for (i, call) in calls.iter().enumerate() {
        items.push(json!({
            "id": format!("{}_{i}", id("fc")),
            "type": "function_call",
            "status": "completed",
            "call_id": call["id"],
            "name": call["function"]["name"],
            "arguments": call["function"]["arguments"],
        }));
    }
    items
}

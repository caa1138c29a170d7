//! Appending a client's message to a session, and reading its history.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::super::extract::ApiJson;
use super::super::{ApiError, AppState};
use super::bodies::{EventsQuery, MessageBody};
use super::manage::query;
use super::{session_id, store};
use crate::sessions::{Event, EventKind};

/// Events listed per page unless `limit` says otherwise, and the most.
const EVENTS_DEFAULT: i64 = 100;
const EVENTS_MAX: i64 = 1000;

/// The roles a client's message may have.
const ROLES: &[&str] = &["user", "assistant", "system", "tool"];

/// `POST /v1/sessions/{id}/messages` `{"role", "content"}`: the committed
/// event; 409 while the session generates.
pub async fn append_message(
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
    ApiJson(body): ApiJson<MessageBody>,
) -> Result<(StatusCode, Json<Event>), ApiError> {
    let store = store(&state)?;
    let id = session_id(id)?;
    if !ROLES.contains(&body.role.as_str()) {
        return Err(ApiError::param(
            "role",
            format!("unknown role {:?}; use {}", body.role, ROLES.join(", ")),
        ));
    }
    let mut message = json!({"role": body.role, "content": body.content});
    match (body.role.as_str(), body.tool_call_id) {
        ("tool", Some(call)) => message["tool_call_id"] = json!(call),
        ("tool", None) => {
            return Err(ApiError::param(
                "tool_call_id",
                "a `tool` message needs `tool_call_id`: the id of the call it answers, from the `tool_calls` of the session's last `generated` event",
            ))
        }
        (_, Some(_)) => {
            return Err(ApiError::param(
                "tool_call_id",
                "only a `tool` message takes `tool_call_id`; leave it out, or send the result with role `tool`",
            ))
        }
        (_, None) => {}
    }
    let event = store.append(id, EventKind::Message, message).await?;
    Ok((StatusCode::CREATED, Json(event)))
}

/// `GET /v1/sessions/{id}/events?cursor=N&limit=M`: the history after
/// `seq` N, and the cursor to read on from.
pub async fn list(
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
    q: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let store = store(&state)?;
    let id = session_id(id)?;
    let q = query(q)?;
    let cursor = q.cursor.unwrap_or(0);
    if cursor < 0 {
        return Err(ApiError::param(
            "cursor",
            format!("`cursor` is a `seq` from 0 (got {cursor}); pass the `next_cursor` of the last page"),
        ));
    }
    let limit = q.limit.unwrap_or(EVENTS_DEFAULT);
    if !(1..=EVENTS_MAX).contains(&limit) {
        return Err(ApiError::param(
            "limit",
            format!("`limit` must be from 1 to {EVENTS_MAX} (got {limit}); page on with `cursor`"),
        ));
    }
    let (events, next_cursor) = store.events(id, cursor, limit as usize).await?;
    Ok(Json(json!({
        "object": "list",
        "events": events,
        "next_cursor": next_cursor,
    })))
}

//! A session's history as the chat request its next generation runs:
//! the system prompt, model and settings of its `created` event, then its
//! messages and generated replies in order.

use serde_json::{json, Map, Value};

use super::super::ApiError;
use crate::sessions::{Event, EventKind, SessionId, SessionStore};

/// Events read per query while loading a whole history.
const PAGE: usize = 1000;

/// What a generation needs from the history.
#[derive(Debug)]
pub struct Conversation {
    /// The session's model.
    pub model: String,
    /// Its stored settings.
    pub params: Map<String, Value>,
    /// The chat messages, oldest first.
    pub messages: Vec<Value>,
}

/// Every event of `session`'s history, oldest first.
pub async fn load(store: &SessionStore, session: SessionId) -> Result<Vec<Event>, ApiError> {
    let mut all = Vec::new();
    let mut cursor = 0;
    loop {
        let (events, next) = store.events(session, cursor, PAGE).await?;
        let done = events.len() < PAGE;
        all.extend(events);
        if done {
            return Ok(all);
        }
        cursor = next;
    }
}

/// The conversation `events` hold.
pub fn conversation(session: SessionId, events: &[Event]) -> Result<Conversation, ApiError> {
    let created = events
        .iter()
        .find(|e| e.kind == EventKind::Created)
        .ok_or_else(|| ApiError::Generation {
            message: format!("session {session} has no `created` event, so its model is unknown; create a new session"),
        })?;
    let model = created.body["model"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let params = created.body["params"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut messages = Vec::new();
    for event in events {
        match event.kind {
            EventKind::Created => {
                if let Some(system) = event.body["system"].as_str().filter(|s| !s.is_empty()) {
                    messages.push(json!({"role": "system", "content": system}));
                }
            }
            EventKind::Message => {
                let mut message = json!({
                    "role": event.body["role"],
                    "content": event.body["content"],
                });
                if let Some(id) = event.body.get("tool_call_id") {
                    message["tool_call_id"] = id.clone();
                }
                messages.push(message);
            }
            EventKind::Generated => messages.push(json!({
                "role": "assistant",
                "content": event.body["content"],
            })),
            // What a generation was given, and where a fork began, are
            // records, not turns; tool events are not written by this API.
            EventKind::GenerationPrompt
            | EventKind::Forked
            | EventKind::ToolUse
            | EventKind::ToolResult => {}
        }
    }
    Ok(Conversation {
        model,
        params,
        messages,
    })
}

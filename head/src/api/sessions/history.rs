//! A session's history as the chat request its next generation runs:
//! the system prompt, model and settings of its `created` event, then its
//! messages and generated replies in order.

use serde_json::{json, Map, Value};

use super::super::ApiError;
use crate::sessions::{Event, EventId, EventKind, SessionId, SessionStore};

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
    /// The function tools the session offers (chat completions' shape).
    pub tools: Value,
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
    // Each message with the id of the event it came from, so that a failed
    // turn's messages can be taken back out.
    let mut messages: Vec<(EventId, Value)> = Vec::new();
    for event in events {
        match event.kind {
            EventKind::Created => {
                if let Some(system) = event.body["system"].as_str().filter(|s| !s.is_empty()) {
                    messages.push((event.id, json!({"role": "system", "content": system})));
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
                if let Some(calls) = event.body.get("tool_calls") {
                    message["tool_calls"] = calls.clone();
                }
                messages.push((event.id, message));
            }
            EventKind::Generated => {
                let mut message = json!({"role": "assistant", "content": event.body["content"]});
                if let Some(calls) = event.body.get("tool_calls") {
                    message["tool_calls"] = calls.clone();
                }
                messages.push((event.id, message));
            }
            // A failed turn is left out: its messages from the event it
            // names on (its prompt, or a response's input).
            EventKind::GenerationFailed => {
                if let Some(turn) = event.body["turn"].as_i64() {
                    while messages.last().is_some_and(|(id, _)| id.0 >= turn) {
                        messages.pop();
                    }
                }
            }
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
        messages: messages.into_iter().map(|(_, m)| m).collect(),
        tools: created.body["tools"].clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64, kind: EventKind, body: Value) -> Event {
        Event {
            id: EventId(id),
            session: SessionId(1),
            seq: id,
            kind,
            body,
            created_ms: 0,
        }
    }

    fn user(id: i64, text: &str) -> Event {
        event(
            id,
            EventKind::Message,
            json!({"role": "user", "content": text}),
        )
    }

    #[test]
    fn a_failed_turn_is_left_out_of_the_replay() {
        let events = [
            event(
                1,
                EventKind::Created,
                json!({"model": "m", "system": "be brief"}),
            ),
            user(2, "first"),
            event(3, EventKind::GenerationPrompt, json!({})),
            event(4, EventKind::Generated, json!({"content": "one"})),
            // A response's turn: its input, its prompt, then its failure.
            user(5, "lost"),
            event(6, EventKind::GenerationPrompt, json!({})),
            event(
                7,
                EventKind::GenerationFailed,
                json!({"turn": 5, "error": {}}),
            ),
            // A native generation's failure names its prompt: the client's
            // own message before it stays.
            user(8, "kept"),
            event(9, EventKind::GenerationPrompt, json!({})),
            event(
                10,
                EventKind::GenerationFailed,
                json!({"turn": 9, "error": {}}),
            ),
        ];
        let conversation = conversation(SessionId(1), &events).unwrap();
        let contents: Vec<&str> = conversation
            .messages
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(contents, ["be brief", "first", "one", "kept"]);
    }
}

//! The request bodies of `/v1/sessions` and the session as clients see it.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::super::generate::Usage;
use super::super::output::FinishReason;

use crate::sessions::{Event, EventId, SessionId, SessionInfo};

/// `POST /v1/sessions`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// The model the session's generations use.
    pub model: Option<String>,
    /// The system prompt.
    pub system: Option<String>,
    /// Function tools the model may call, in chat completions' shape.
    pub tools: Option<Value>,
    /// Generation settings for every generation (see [`super::params`]).
    pub params: Option<Map<String, Value>>,
    /// A title for people.
    pub title: Option<String>,
    /// Free-form tags.
    pub tags: Option<Vec<String>>,
}

/// `POST /v1/sessions/{id}/messages`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageBody {
    /// `user`, `assistant`, `system` or `tool`.
    pub role: String,
    /// The message's text.
    pub content: String,
    /// The call a `tool` message answers (the `id` of one of the
    /// `tool_calls` of a `generated` event).
    pub tool_call_id: Option<String>,
}

/// `POST /v1/sessions/{id}/generate`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateBody {
    /// Answer with server-sent events as they commit.
    #[serde(default)]
    pub stream: bool,
    /// Settings for this generation only, over the session's.
    pub params: Option<Map<String, Value>>,
    /// Whether and which of the session's tools the model must call, as
    /// on chat completions (`auto` when left out).
    pub tool_choice: Option<Value>,
}

/// `POST /v1/sessions/{id}/fork` and `/trim`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtBody {
    /// The event to fork at or trim to.
    pub at: EventId,
}

/// `PATCH /v1/sessions/{id}`: fields left out stay as they are.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchBody {
    /// A new title; `null` clears it.
    #[serde(default, deserialize_with = "present")]
    pub title: Option<Option<String>>,
    /// New tags, replacing the old ones.
    pub tags: Option<Vec<String>>,
    /// Archived or not.
    pub archived: Option<bool>,
}

/// A field that is present (even as `null`) is `Some`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// `GET /v1/sessions` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Sessions after this id.
    pub after: Option<i64>,
    /// At most this many (1 to 100, default 20).
    pub limit: Option<i64>,
}

/// `GET /v1/sessions/{id}/events` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Events after this `seq` (0, the default, for the start).
    pub cursor: Option<i64>,
    /// At most this many (1 to 1000, default 100).
    pub limit: Option<i64>,
}

/// `DELETE /v1/sessions/{id}` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeQuery {
    /// Also purge the session's forks.
    #[serde(default)]
    pub cascade: bool,
}

/// A session as the API answers it.
#[derive(Debug, Serialize)]
pub struct SessionView {
    /// Its id.
    pub id: SessionId,
    /// Always `session`.
    pub object: &'static str,
    /// The session it was forked from.
    pub parent: Option<SessionId>,
    /// The parent's event it was forked at.
    pub at: Option<EventId>,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// Its title.
    pub title: Option<String>,
    /// Its tags.
    pub tags: Vec<String>,
    /// Whether it is archived.
    pub archived: bool,
    /// The version a change must name in `If-Match`.
    pub version: i64,
    /// The `seq` of its last event.
    pub last_seq: i64,
    /// Whether a generation is writing to it now.
    pub generating: bool,
}

impl SessionView {
    /// The view of `info`.
    pub fn new(info: SessionInfo, generating: bool) -> SessionView {
        SessionView {
            id: info.id,
            object: "session",
            parent: info.parent,
            at: info.at,
            created_ms: info.created_ms,
            title: info.meta.title,
            tags: info.meta.tags,
            archived: info.meta.archived,
            version: info.version,
            last_seq: info.last_seq,
            generating,
        }
    }
}

/// The body of a `generated` event: the assistant's reply, how it ended
/// and its usage.
pub fn generated(text: &str, finish: FinishReason, usage: &Usage) -> Value {
    json!({
        "role": "assistant",
        "content": text,
        "finish_reason": finish,
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "cached_tokens": usage.cached_tokens,
        },
    })
}

/// The body of a `generation_failed` event: the error the client got and
/// the first event of the turn that failed, which replays leave out.
pub fn failed(error: &Value, turn: EventId) -> Value {
    json!({"error": error["error"], "turn": turn})
}

/// The `generation_failed` body that ends a turn a stopped head left open
/// (see [`crate::sessions::SessionStore::end_interrupted_turns`]; `turn` is
/// its trailing `message` events and its `generation_prompt`, last). A
/// response's turn is left out from its first input message, since its
/// input was written with its prompt; a sessions API turn from its prompt,
/// since the client's messages were committed on their own and stay.
pub fn interrupted(turn: &[Event]) -> Value {
    let error = json!({"error": {
        "message": "the head stopped before this generation finished, so nothing was answered; send the request again",
        "type": "server_error",
        "code": "head_stopped",
    }});
    let from = match turn.last() {
        Some(prompt) if prompt.body.get("response").is_some() => turn.first(),
        prompt => prompt,
    };
    failed(&error, from.map_or(EventId(0), |e| e.id))
}

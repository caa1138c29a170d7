//! A stored response is one turn of a session: the input messages, the
//! `generation_prompt` event that began the generation, and the
//! `generated` event that holds the answer. Its id names the session and
//! that `generation_prompt` event: `resp_<session>_<event>`.

use serde_json::Value;

use super::super::generate::Usage;
use super::super::output::FinishReason;
use super::super::sessions::history;
use super::super::ApiError;
use super::reply::{Echo, ResponseView, Status};
use crate::sessions::{Event, EventId, EventKind, SessionError, SessionId, SessionStore};

/// Where a stored response lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnRef {
    /// The session.
    pub session: SessionId,
    /// The turn's `generation_prompt` event.
    pub prompt: EventId,
}

impl TurnRef {
    /// `resp_<session>_<event>`.
    pub fn response_id(&self) -> String {
        format!("resp_{}_{}", self.session, self.prompt)
    }

    /// The id of the turn's output message.
    pub fn message_id(&self) -> String {
        format!("msg_{}_{}", self.session, self.prompt)
    }

    /// The turn a response id names, if it is one of this head's.
    pub fn parse(id: &str) -> Option<TurnRef> {
        let (session, prompt) = id.strip_prefix("resp_")?.split_once('_')?;
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<i64>().ok())
                .flatten()
        };
        Some(TurnRef {
            session: SessionId(number(session)?),
            prompt: EventId(number(prompt)?),
        })
    }
}

/// A stored turn and the history it is part of.
#[derive(Debug)]
pub struct Found {
    /// Where it is.
    pub turn: TurnRef,
    /// The session's whole history.
    pub events: Vec<Event>,
    /// The index of the `generation_prompt` event in `events`.
    pub index: usize,
}

/// The 404 for a response id that names nothing stored.
pub fn not_found(id: &str) -> ApiError {
    ApiError::ResponseNotFound { id: id.to_owned() }
}

/// Finds the stored response `id`; 404 when there is none.
pub async fn find(store: &SessionStore, id: &str) -> Result<Found, ApiError> {
    let turn = TurnRef::parse(id).ok_or_else(|| not_found(id))?;
    let events = match history::load(store, turn.session).await {
        Ok(events) => events,
        Err(ApiError::Session(SessionError::NotFound { .. })) => return Err(not_found(id)),
        Err(e) => return Err(e),
    };
    let index = events
        .iter()
        .position(|e| {
            e.id == turn.prompt
                && e.session == turn.session
                && e.kind == EventKind::GenerationPrompt
        })
        .ok_or_else(|| not_found(id))?;
    Ok(Found {
        turn,
        events,
        index,
    })
}

impl Found {
    /// The `generation_prompt` event.
    pub fn prompt(&self) -> &Event {
        &self.events[self.index]
    }

    /// The event that ended the turn: `generated` or `generation_failed`.
    pub fn ending(&self) -> Option<&Event> {
        self.events
            .get(self.index + 1)
            .filter(|e| matches!(e.kind, EventKind::Generated | EventKind::GenerationFailed))
    }

    /// The `generated` event holding the answer, once committed.
    pub fn generated(&self) -> Option<&Event> {
        self.ending().filter(|e| e.kind == EventKind::Generated)
    }

    /// The index of the `generated` event, once committed.
    pub fn generated_index(&self) -> Option<usize> {
        self.generated().map(|_| self.index + 1)
    }

    /// The turn's input messages, oldest first.
    pub fn inputs(&self) -> &[Event] {
        let start = self.events[..self.index]
            .iter()
            .rposition(|e| e.kind != EventKind::Message)
            .map_or(0, |i| i + 1);
        &self.events[start..self.index]
    }

    /// The event just before the turn's input: what the session keeps
    /// when the turn is deleted.
    pub fn before_inputs(&self) -> Option<&Event> {
        let start = self.index - self.inputs().len();
        start.checked_sub(1).map(|i| &self.events[i])
    }

    /// Whether the turn is the last thing in its session.
    pub fn is_latest(&self) -> bool {
        let end = self.index + usize::from(self.ending().is_some());
        end + 1 == self.events.len()
    }

    /// The response as it stands; `generating` says whether a generation
    /// holds its session now.
    pub fn view(&self, generating: bool) -> ResponseView {
        let prompt = self.prompt();
        let echo = Echo::from_prompt_event(&prompt.body);
        let (status, text, usage, error) = match self.generated() {
            Some(event) => {
                let finish =
                    serde_json::from_value::<FinishReason>(event.body["finish_reason"].clone())
                        .unwrap_or(FinishReason::Stop);
                let text = event.body["content"].as_str().unwrap_or_default();
                let usage = stored_usage(&event.body["usage"]);
                (Status::of(finish), Some(text.to_owned()), Some(usage), None)
            }
            None if generating && self.index + 1 == self.events.len() => {
                (Status::InProgress, None, None, None)
            }
            None => {
                let said = self
                    .ending()
                    .and_then(|e| e.body["error"]["message"].as_str())
                    .map_or(String::new(), |m| format!(" ({m})"));
                let error = format!(
                    "the generation failed before it answered{said}; send the request again"
                );
                (Status::Failed, None, None, Some(error))
            }
        };
        ResponseView {
            id: self.turn.response_id(),
            message_id: self.turn.message_id(),
            created_at: prompt.created_ms / 1000,
            status,
            echo,
            text,
            usage,
            error,
        }
    }
}

/// Token counts as a `generated` event keeps them.
fn stored_usage(usage: &Value) -> Usage {
    let count = |name: &str| {
        usage[name]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0)
    };
    Usage {
        prompt_tokens: count("prompt_tokens"),
        cached_tokens: count("cached_tokens"),
        completion_tokens: count("completion_tokens"),
    }
}

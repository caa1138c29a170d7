//! A chat request with `x-superfluid-session: ID` (OpenAI's
//! `/v1/chat/completions`, Anthropic's `/v1/messages`, Ollama's `/api/chat`)
//! is recorded in that session: the request's new messages (those after its
//! last assistant message, system messages aside) and the reply, as events.
//! The session is held for the whole generation, as a session generation
//! holds it: a second writer meanwhile gets 409.

use axum::http::HeaderMap;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::super::generate::request::SessionTurn;
use super::super::generate::Generation;
use super::super::types::CompletionRequest;
use super::super::{ApiError, AppState};
use super::{bodies, store};
use crate::codec::ChatMessage;
use crate::sessions::{EventKind, GenerationGuard, SessionId, SessionStore, Turn};

/// The header that names the session a chat request is recorded in.
pub use super::super::request_log::SESSION_HEADER;

/// A chat request's hold on the session it is recorded in.
pub struct Recording {
    store: SessionStore,
    guard: GenerationGuard,
    messages: Vec<Value>,
}

/// Resolves once the reply is committed (or will not be).
pub struct Committed(oneshot::Receiver<()>);

impl Committed {
    /// Waits until the reply is in the session.
    pub async fn wait(self) {
        let _ = self.0.await;
    }
}

/// The session the request's header names, if it names one, with the
/// turn's new messages (`messages()`, called only then): 400 for a header
/// that is not a session id.
pub fn turn(
    headers: &HeaderMap,
    messages: impl FnOnce() -> Vec<Value>,
) -> Result<Option<SessionTurn>, ApiError> {
    let Some(value) = headers.get(SESSION_HEADER) else {
        return Ok(None);
    };
    let id = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .ok_or_else(|| {
            ApiError::param(
                SESSION_HEADER,
                format!("`{SESSION_HEADER}` must be a session id, a number as POST /v1/sessions answers it; create a session first"),
            )
        })?;
    Ok(Some(SessionTurn {
        id: SessionId(id),
        messages: messages(),
    }))
}

/// Holds the turn's session: 404 for an unknown session, 409 while it is
/// generating, 400 for a message over the size limit.
pub async fn begin(state: &AppState, turn: SessionTurn) -> Result<Recording, ApiError> {
    let store = store(state)?.clone();
    for message in &turn.messages {
        store.limits().check_message(message)?;
    }
    let guard = store.begin_generation(turn.id).await?;
    Ok(Recording {
        store,
        guard,
        messages: turn.messages,
    })
}

/// An OpenAI chat request's messages after its last assistant message,
/// without system messages (a session has its own system prompt).
pub fn openai_messages(req: &CompletionRequest) -> Vec<Value> {
    let all = req.messages.as_deref().unwrap_or_default();
    after_last_assistant(all, |m| &m.role)
        .iter()
        .filter(|m| m.role != "system" && m.role != "developer")
        .map(|m| {
            let mut body = json!({"role": m.role, "content": m.content});
            if let Some(id) = &m.tool_call_id {
                body["tool_call_id"] = json!(id);
            }
            body
        })
        .collect()
}

/// A conversation's messages after its last assistant turn, system
/// messages aside, in the template's form (Anthropic's Messages).
pub fn chat_messages(chat: &[ChatMessage]) -> Vec<Value> {
    after_last_assistant(chat, |m| &m.role)
        .iter()
        .filter(|m| m.role != "system")
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect()
}

/// The messages after the last assistant message: what a turn adds.
fn after_last_assistant<T>(all: &[T], role: impl Fn(&T) -> &String) -> &[T] {
    let start = all
        .iter()
        .rposition(|m| role(m) == "assistant")
        .map_or(0, |i| i + 1);
    &all[start..]
}

impl Recording {
    /// Commits the request's new messages (all or none, with room kept for
    /// the reply), then has the reply committed when `generation` ends, or
    /// a `generation_failed` event if it ends without one; the session is
    /// released after that.
    pub async fn attach(self, generation: &mut Generation) -> Result<Committed, ApiError> {
        let turn = Turn {
            events: self
                .messages
                .into_iter()
                .map(|m| (EventKind::Message, m))
                .collect(),
            reserve: 1,
        };
        let first = self
            .store
            .append_turn(&self.guard, turn)
            .await?
            .first()
            .map(|e| e.id);
        let (done, committed) = oneshot::channel();
        let (store, guard) = (self.store, self.guard);
        generation.record(Box::new(move |ending, usage| {
            let (kind, body) = match (ending, first) {
                (Some((text, finish)), _) => {
                    (EventKind::Generated, bodies::generated(&text, finish, &usage))
                }
                // The turn's messages are left out of replays from here.
                (None, Some(first)) => {
                    let error = json!({"error": {"message": "the generation ended without a reply"}});
                    (EventKind::GenerationFailed, bodies::failed(&error, first))
                }
                (None, None) => return,
            };
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                tracing::warn!(session = %guard.session(), "the reply could not be recorded: no runtime");
                return;
            };
            runtime.spawn(async move {
                if let Err(error) = store.append_generated(&guard, kind, body).await
                {
                    tracing::warn!(session = %guard.session(), %error, "the reply could not be recorded in the session");
                }
                drop(guard);
                let _ = done.send(());
            });
        }));
        Ok(Committed(committed))
    }
}

//! A `/v1/chat/completions` request with `x-superfluid-session: ID` is
//! recorded in that session: the request's new messages (those after its
//! last assistant message, system messages aside) and the reply, as events.
//! The session is held for the whole generation, as a session generation
//! holds it: a second writer meanwhile gets 409.

use axum::http::HeaderMap;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::super::generate::Generation;
use super::super::types::CompletionRequest;
use super::super::{ApiError, AppState};
use super::{bodies, store};
use crate::sessions::{EventKind, GenerationGuard, SessionId, SessionStore};

/// The header that names the session a chat request is recorded in.
pub const SESSION_HEADER: &str = "x-superfluid-session";

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

/// Holds the session the request names, if it names one: 404 for an
/// unknown session, 409 while it is generating.
pub async fn begin(
    state: &AppState,
    headers: &HeaderMap,
    req: &CompletionRequest,
) -> Result<Option<Recording>, ApiError> {
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
    let store = store(state)?.clone();
    let guard = store.begin_generation(SessionId(id)).await?;
    Ok(Some(Recording {
        store,
        guard,
        messages: new_messages(req),
    }))
}

/// The request's messages after its last assistant message, without
/// system messages (a session has its own system prompt).
fn new_messages(req: &CompletionRequest) -> Vec<Value> {
    let all = req.messages.as_deref().unwrap_or_default();
    let start = all
        .iter()
        .rposition(|m| m.role == "assistant")
        .map_or(0, |i| i + 1);
    all[start..]
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

impl Recording {
    /// Commits the request's new messages, then has the reply committed
    /// when `generation` ends; the session is released after that.
    pub async fn attach(self, generation: &mut Generation) -> Result<Committed, ApiError> {
        for message in self.messages {
            self.store
                .append_generated(&self.guard, EventKind::Message, message)
                .await?;
        }
        let (done, committed) = oneshot::channel();
        let (store, guard) = (self.store, self.guard);
        generation.record(Box::new(move |ending, usage| {
            let Some((text, finish)) = ending else {
                return;
            };
            let body = bodies::generated(&text, finish, &usage);
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                tracing::warn!(session = %guard.session(), "the reply could not be recorded: no runtime");
                return;
            };
            runtime.spawn(async move {
                if let Err(error) = store
                    .append_generated(&guard, EventKind::Generated, body)
                    .await
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

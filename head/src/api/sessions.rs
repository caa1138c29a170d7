//! `/v1/sessions`: the native API on the session store
//! ([`crate::sessions`]), behind the same key check, limits, metrics and
//! logs as the other client routes.
//!
//! - [`bodies`]: the request bodies and the session as clients see it.
//! - [`params`]: the generation settings a session keeps.
//! - [`manage`]: create, list, read, metadata, fork, trim, purge.
//! - [`events`]: appending messages and reading the history.
//! - [`history`]: a session's history as a chat request.
//! - [`generate`]: a generation into a session, as JSON or events.
//! - [`record`]: chat completions recorded in a session.

pub mod bodies;
pub mod events;
pub mod generate;
pub mod history;
pub mod manage;
pub mod params;
pub mod record;

use axum::extract::rejection::PathRejection;
use axum::extract::Path;
use axum::http::HeaderMap;
use axum::routing::{get, post, MethodRouter};
use axum::{Extension, Router};

use super::auth::Caller;
use super::{ApiError, AppState};
use crate::sessions::{SessionId, SessionStore};

/// The routes under `/v1/sessions`; `once` wraps the routes that write
/// (the `Idempotency-Key` layer).
pub fn routes(once: &dyn Fn(MethodRouter<AppState>) -> MethodRouter<AppState>) -> Router<AppState> {
    Router::new()
        .route("/v1/sessions", once(post(manage::create)).get(manage::list))
        .route(
            "/v1/sessions/{id}",
            get(manage::get).patch(manage::patch).delete(manage::purge),
        )
        .route(
            "/v1/sessions/{id}/messages",
            once(post(events::append_message)),
        )
        .route("/v1/sessions/{id}/events", get(events::list))
        .route("/v1/sessions/{id}/generate", once(post(generate::generate)))
        .route("/v1/sessions/{id}/fork", once(post(manage::fork)))
        .route("/v1/sessions/{id}/trim", once(post(manage::trim)))
}

/// The head's session store, or the 404 that says how to get one.
pub fn store(state: &AppState) -> Result<&SessionStore, ApiError> {
    state.sessions.as_ref().ok_or(ApiError::NoSessions)
}

/// Who holds the sessions a request makes: its API key's name, or no one
/// when the head has no keys (the per-key limit then counts all sessions).
pub fn owner(caller: Option<&Extension<Caller>>) -> Option<String> {
    caller.map(|Extension(Caller(key))| key.record.name.clone())
}

/// The version in `If-Match` (`3` or `"3"`, as an ETag), if the header is
/// there; a value that is not a version is refused.
pub fn if_match(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get(axum::http::header::IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim();
    let bare = text.trim_start_matches("W/").trim_matches('"');
    bare.parse::<i64>().map(Some).map_err(|_| {
        ApiError::param(
            "If-Match",
            format!("`If-Match` must be the session's version, a number such as 3 (got {text:?}); GET the session to read its `version`"),
        )
    })
}

/// The session id in the path; ids are numbers.
pub fn session_id(path: Result<Path<i64>, PathRejection>) -> Result<SessionId, ApiError> {
    path.map(|Path(id)| SessionId(id)).map_err(|e| {
        ApiError::param(
            "id",
            format!("session ids are numbers, as POST /v1/sessions answers them ({}); list sessions with GET /v1/sessions", e.body_text()),
        )
    })
}

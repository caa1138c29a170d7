//! OpenAI's Responses API (`/v1/responses`) on the session store: a stored
//! response is a turn of a session ([`crate::sessions`]), so a client that
//! continues with `previous_response_id` sends only its new turn, and the
//! head, which holds the history, routes it to the node with its prefix.
//! Behind the same key check, limits, metrics and logs as the other client
//! routes. See docs/responses.md.
//!
//! - [`request`]: the request body, checked; unsupported fields refused.
//! - [`turn`]: response ids and finding a stored response in its session.
//! - [`reply`]: the response object.
//! - [`create`]: `POST /v1/responses`.
//! - [`drive`]: the generation task, which commits the answer.
//! - [`stream`]: the streamed answer's events.
//! - [`read`]: retrieve, input items, delete.
//! - [`tools`]: function tools, their calls and results.

pub mod create;
pub mod drive;
pub mod read;
pub mod reply;
pub mod request;
pub mod stream;
pub mod tools;
pub mod turn;

#[cfg(test)]
mod tests;

use axum::routing::{get, post, MethodRouter};
use axum::Router;

use super::AppState;

/// The routes under `/v1/responses`; `once` wraps the route that generates
/// (the `Idempotency-Key` layer).
pub fn routes(once: &dyn Fn(MethodRouter<AppState>) -> MethodRouter<AppState>) -> Router<AppState> {
    Router::new()
        .route("/v1/responses", once(post(create::create)))
        .route("/v1/responses/{id}", get(read::get).delete(read::delete))
        .route("/v1/responses/{id}/input_items", get(read::input_items))
}

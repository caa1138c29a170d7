//! OpenAI-compatible HTTP API.
//!
//! - [`types`]: the request body and its validation.
//! - [`extract`]: the JSON extractor whose rejections are OpenAI errors.
//! - [`error`]: [`ApiError`], the one place errors become HTTP responses.
//! - [`generate`]: context check, dispatch to the fleet, tokens to text.
//! - [`respond`]: JSON and server-sent-event answers.
//! - [`handlers`]: the routes.

pub mod admin;
pub mod error;
pub mod extract;
pub mod generate;
pub mod handlers;
pub mod respond;
pub mod types;
pub mod unsupported;

#[cfg(test)]
mod flow_tests;
#[cfg(test)]
mod node_failure_tests;
#[cfg(test)]
mod node_tests;
#[cfg(test)]
mod tests;

pub use error::ApiError;
pub use respond::NODE_HEADER;

use crate::codec::Catalog;
use crate::fleet::Fleet;
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The models this head serves.
    pub catalog: Arc<Catalog>,
    /// The connected nodes.
    pub fleet: Fleet,
}

/// The head's HTTP routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(handlers::chat))
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/models", get(handlers::models))
        .route("/health", get(handlers::health))
        .route("/metrics", get(handlers::metrics))
        .fallback(handlers::not_found)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .with_state(state)
}

//! Ollama's API, as a codec on the one generation path: `/api/chat` and
//! `/api/generate` become the OpenAI request they ask for and run through
//! the same [`Generation`](super::generate::Generation), keys, limits and
//! metrics; only the request and answer shapes are Ollama's.
//!
//! - [`request`]: the bodies of `/api/chat` and `/api/generate`, and the
//!   fields refused.
//! - [`options`]: `options`, `format`, `keep_alive` and `think`.
//! - [`generation`]: the two generating handlers.
//! - [`message`]: a chat message, its `tool_calls` and a `tool` message's
//!   result, as the OpenAI message it stands for.
//! - [`tools`]: the model's calls in Ollama's shape.
//! - [`reply`]: NDJSON and whole answers with Ollama's counts and durations.
//! - [`info`]: `/api/tags`, `/api/ps`, `/api/show`, `/api/version` and `/`.
//! - [`embed`]: `/api/embed` and `/api/embeddings`, on the one embeddings path.
//! - [`refusals`]: model management and unknown paths.

pub mod clock;
pub mod embed;
pub mod extract;
pub mod generation;
pub mod info;
pub mod keep_alive;
pub mod message;
pub mod options;
pub mod refusals;
pub mod reply;
pub mod request;
pub mod tools;

use super::AppState;
use axum::routing::{any, get, post, MethodRouter};
use axum::Router;

/// The Ollama routes that answer for models; they go behind the key check
/// with the OpenAI routes. `once` wraps the routes that generate (the
/// `Idempotency-Key` layer).
pub fn routes(once: &dyn Fn(MethodRouter<AppState>) -> MethodRouter<AppState>) -> Router<AppState> {
    Router::new()
        .route("/api/chat", once(post(generation::chat)))
        .route("/api/generate", once(post(generation::generate)))
        .route("/api/tags", get(info::tags))
        .route("/api/ps", get(info::ps))
        .route("/api/show", post(info::show))
        .route("/api/version", get(info::version))
        .route("/api/embed", post(embed::embed))
        .route("/api/embeddings", post(embed::legacy))
        .route("/api/pull", post(refusals::manage))
        .route("/api/push", post(refusals::manage))
        .route("/api/create", post(refusals::manage))
        .route("/api/copy", post(refusals::manage))
        .route("/api/delete", any(refusals::manage))
        .route("/api/blobs/{digest}", any(refusals::manage))
        .route("/api/{*rest}", any(refusals::not_found))
}

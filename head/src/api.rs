//! OpenAI-compatible HTTP API.
//!
//! - [`types`]: the request body and its validation.
//! - [`fields`]: which request fields each endpoint takes.
//! - [`bias`]: `logit_bias`, read and checked against the vocabulary.
//! - [`extract`]: the JSON extractor whose rejections are OpenAI errors.
//! - [`error`]: [`ApiError`], the one place errors become HTTP responses.
//! - [`dialect`]: which API a request speaks, so its errors take that shape.
//! - [`embeddings`]: `/v1/embeddings`, and the path Ollama's embeddings share.
//! - [`generate`]: context check, dispatch to the fleet, tokens to text.
//! - [`output`]: [`output::Step`], what a generation hands to the answer.
//! - [`wire`]: the response bodies and stream chunks as serde types.
//! - [`respond`]: JSON and server-sent-event answers.
//! - [`node_header`]: `x-superfluid-node` on every answer.
//! - [`sse`]: the keep-alive every server-sent-event stream shares.
//! - [`handlers`]: the routes.
//! - [`auth`]: the key check in front of the client routes.
//! - [`browser`]: CORS and the `Host` check against DNS rebinding.
//! - [`limits`]: a limited key's 429 and `x-ratelimit-*` headers.
//! - [`metrics_page`]: the Prometheus page of the fleet's counters and nodes.
//! - [`metrics_key`]: the optional key in front of that page.
//! - [`request_metrics`]: the layer that counts every response.
//! - [`request_log`]: each request's span and its last log line.
//! - [`recent`]: the last requests answered, kept for [`fleet_view`].
//! - [`fleet_view`]: `GET /v1/fleet`, nodes, load and recent requests.
//! - [`status_page`]: `GET /`, the status page for browsers.
//! - [`sessions`]: `/v1/sessions`, conversations the head keeps.
//! - [`responses`]: `/v1/responses`, OpenAI's Responses API on the sessions.
//! - [`idempotency`]: `Idempotency-Key` on the routes that generate or write.

pub mod admin;
pub mod admin_keys;
pub mod admin_models;
pub mod admin_state;
pub mod admission;
pub mod anthropic;
pub mod auth;
pub mod bias;
pub mod browser;
pub mod choices;
pub mod dialect;
pub mod embeddings;
pub mod error;
pub mod extract;
pub mod fields;
pub mod fleet_view;
pub mod generate;
pub mod handlers;
pub mod idempotency;
pub mod limits;
pub mod metrics_key;
pub mod metrics_page;
pub mod model_retrieve;
pub mod node_header;
pub mod ollama;
pub mod output;
pub mod recent;
pub mod request_log;
pub mod request_metrics;
pub mod respond;
pub mod responses;
pub mod sessions;
pub mod sse;
pub mod status_page;
pub mod structured;
pub mod tools;
pub mod types;
pub mod unsupported;
pub mod wire;

#[cfg(test)]
mod flow_tests;
#[cfg(test)]
mod node_drain_tests;
#[cfg(test)]
mod node_failure_tests;
#[cfg(test)]
mod node_tests;
#[cfg(test)]
mod overload_tests;
#[cfg(test)]
mod session_failure_tests;
#[cfg(test)]
mod shape_tests;
#[cfg(test)]
mod tests;

pub use error::ApiError;
pub use metrics_key::MetricsKey;
pub use node_header::NODE_HEADER;
pub use request_metrics::count_requests;

use crate::codec::Catalog;
use crate::fleet::Fleet;
use crate::keys::Keys;
use crate::sessions::SessionStore;
use axum::middleware;
use axum::routing::{get, post, MethodRouter};
use axum::{Extension, Router};
use std::sync::Arc;

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The models this head serves.
    pub catalog: Arc<Catalog>,
    /// The connected nodes.
    pub fleet: Fleet,
    /// The stored sessions, when the head keeps them.
    pub sessions: Option<SessionStore>,
}

/// The head's HTTP routes, open to every client.
pub fn router(state: AppState) -> Router {
    router_with_keys(state, Keys::default())
}

/// The head's HTTP routes; once `keys` holds a key, the client routes
/// (not `/health` and `/metrics`) need one.
pub fn router_with_keys(state: AppState, keys: Keys) -> Router {
    router_with_access(state, keys, MetricsKey::default())
}

/// [`router_with_keys`], with `/metrics` behind `metrics_key` when it is
/// set.
pub fn router_with_access(state: AppState, keys: Keys, metrics_key: MetricsKey) -> Router {
    // The page lists usage by key name; the keys themselves are not on it.
    let metrics = get(handlers::metrics)
        .layer(Extension(keys.clone()))
        .route_layer(middleware::from_fn_with_state(
            metrics_key,
            metrics_key::require,
        ));
    let recent_requests = Arc::new(recent::Recent::default());
    let keyed = state.clone();
    let once = move |route: MethodRouter<AppState>| {
        route.layer(middleware::from_fn_with_state(
            keyed.clone(),
            idempotency::once,
        ))
    };
    Router::new()
        .route("/v1/chat/completions", once(post(handlers::chat)))
        .route("/v1/completions", once(post(handlers::completions)))
        .route("/v1/embeddings", post(embeddings::create))
        .route("/v1/models", get(handlers::models))
        .route("/v1/models/{*id}", get(model_retrieve::retrieve))
        .route("/v1/fleet", get(fleet_view::fleet))
        .merge(ollama::routes(&once))
        .merge(sessions::routes(&once))
        .merge(responses::routes(&once))
        .route("/v1/messages", once(post(anthropic::messages)))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        // Only the routes above pass the key check.
        .route_layer(middleware::from_fn_with_state(keys, auth::require_key))
        .route("/", get(status_page::root))
        .route("/health", get(handlers::health))
        .route("/metrics", metrics)
        .fallback(handlers::not_found)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .layer(middleware::from_fn_with_state(
            recent_requests.clone(),
            recent::record,
        ))
        .layer(Extension(recent_requests))
        // Every error below, the layers' included, in the request's
        // dialect's shape.
        .layer(middleware::from_fn(dialect::note))
        .with_state(state)
}

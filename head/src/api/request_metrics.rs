//! Counting every HTTP response by endpoint, model and status code.
//!
//! One layer around all routes sees each response, whichever layer or
//! handler made it: a 401 from the key check, a 400 from the JSON
//! extractor, a 404 from the fallback. The model is known only once a
//! handler has read the body, so the layer hands the handler a
//! [`RequestModel`] to fill in.

use std::sync::{Arc, OnceLock};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;

use crate::metrics::Metrics;

/// The endpoint label of a request no route matched (the 404 fallback).
pub const UNMATCHED: &str = "unmatched";

/// The served model a request named, set by its handler once found in the
/// catalog; left empty for a request that named none the head serves.
#[derive(Debug, Clone, Default)]
pub struct RequestModel(Arc<OnceLock<String>>);

impl RequestModel {
    /// Records the request's model (the first call wins).
    pub fn set(&self, model: &str) {
        let _ = self.0.set(model.to_owned());
    }

    /// The model, or `""` if none was set.
    pub fn get(&self) -> &str {
        self.0.get().map_or("", String::as_str)
    }
}

/// `app` with every response counted in `metrics`.
pub fn count_requests(app: Router, metrics: Arc<Metrics>) -> Router {
    app.layer(middleware::from_fn_with_state(metrics, count))
}

/// The layer: endpoint from the route that matched (a fixed set), model
/// from the handler, status from the response.
async fn count(State(metrics): State<Arc<Metrics>>, mut request: Request, next: Next) -> Response {
    let endpoint = request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str)
        .to_owned();
    let model = RequestModel::default();
    request.extensions_mut().insert(model.clone());
    let response = next.run(request).await;
    metrics.record_request(&endpoint, model.get(), response.status().as_u16());
    response
}

#[cfg(test)]
mod tests;

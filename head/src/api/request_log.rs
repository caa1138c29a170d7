//! Each client request's log: the span its lines go to (request id,
//! endpoint, model, key name, node, prompt and cached tokens, time to first
//! token, outcome) and one line when it ends. A generation ends with
//! `generation done` (see [`Generation`](super::generate::Generation)); a
//! request refused before it got one ends here, with `request refused`.
//! With `--log-format json` each line carries the span's fields, so a
//! collector gets one record per request with everything on it.

use std::future::Future;

use axum::response::Response;
use tracing::{field, Instrument, Span};

use super::ApiError;

/// The span every request's logs go to, with its request id.
pub fn span(endpoint: &'static str, id: &str) -> Span {
    tracing::info_span!(
        "request",
        id = %id,
        endpoint,
        model = field::Empty,
        key = field::Empty,
        node = field::Empty,
        prompt_tokens = field::Empty,
        cached_tokens = field::Empty,
        ttft_ms = field::Empty,
        outcome = field::Empty,
    )
}

/// Runs a request's `work` in `span`; a refusal is logged with its status
/// and message.
pub async fn logged(
    span: Span,
    work: impl Future<Output = Result<Response, ApiError>>,
) -> Result<Response, ApiError> {
    let answer = work.instrument(span.clone()).await;
    if let Err(error) = &answer {
        let status = error.status().as_u16();
        span.record("outcome", status);
        span.in_scope(|| tracing::info!(status, error = %error, "request refused"));
    }
    answer
}

//! Errors in Anthropic's shape, `{"type":"error","error":{"type","message"}}`.
//! Every error on the Messages routes, the shared layers' included (the
//! key check's 401 and 403, a limited key's 429), gets this body from
//! [`ApiError`]'s one rendering, as the request's dialect is Anthropic's;
//! a stream that fails after it began sends it as an `error` event.

use crate::api::dialect::Dialect;
use crate::api::ApiError;
use serde_json::Value;

/// The Anthropic error body of `err`.
pub fn api_error_body(err: &ApiError) -> Value {
    err.body_in(Dialect::Anthropic)
}

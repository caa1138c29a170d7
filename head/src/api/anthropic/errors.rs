//! Errors in Anthropic's shape, `{"type":"error","error":{"type","message"}}`,
//! for every error on the Messages routes: the handlers' own, and those of
//! the shared layers in front of them (the key check's 401 and 403, a
//! limited key's 429), which answer in OpenAI's shape and are reshaped here.

use crate::api::ApiError;
use axum::body::{to_bytes, Body};
use axum::extract::Request;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{json, Value};

/// The path prefix of the routes this layer reshapes.
pub const PREFIX: &str = "/v1/messages";

/// The longest error body the layer reads (the head's are far shorter).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Anthropic's error type for an HTTP status.
pub fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// The Anthropic error body for `message` answered with `status`.
pub fn body(status: StatusCode, message: &str) -> Value {
    json!({
        "type": "error",
        "error": {"type": error_type(status), "message": message},
    })
}

/// The Anthropic error body of `err`.
pub fn api_error_body(err: &ApiError) -> Value {
    body(err.status(), &err.to_string())
}

/// The layer: an error response to a request on [`PREFIX`] gets the same
/// status and headers and Anthropic's body, keeping the message.
pub async fn reshape(request: Request, next: Next) -> Response {
    let ours = request.uri().path().starts_with(PREFIX);
    let response = next.run(request).await;
    let status = response.status();
    if !ours || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body_in) = response.into_parts();
    let message = match to_bytes(body_in, MAX_ERROR_BODY).await {
        Ok(bytes) => message_of(&bytes),
        Err(e) => format!("the head could not read its own error ({e}); retry the request"),
    };
    let text = body(status, &message).to_string();
    parts.headers.remove(CONTENT_LENGTH);
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(text))
}

/// The message of an OpenAI error body, or the body itself as text.
fn message_of(bytes: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(bytes).ok();
    let said = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    said.unwrap_or_else(|| String::from_utf8_lossy(bytes).trim().to_owned())
}

//! An error's body in each dialect's shape; the status is the same in
//! every dialect.

use axum::http::StatusCode;
use serde_json::{json, Value};

use super::super::dialect::Dialect;
use super::ApiError;

impl ApiError {
    /// The OpenAI error body: `{"error":{"message","type","param","code"}}`.
    pub fn body(&self) -> Value {
        self.body_in(Dialect::OpenAi)
    }

    /// Its body in `dialect`'s shape: OpenAI's `{"error": {message, type,
    /// param, code}}`, Anthropic's `{"type": "error", "error": {type,
    /// message}}` or Ollama's `{"error": message}`. The status is the same
    /// in every dialect.
    pub fn body_in(&self, dialect: Dialect) -> Value {
        match dialect {
            Dialect::OpenAi => self.openai_body(),
            Dialect::Anthropic => json!({
                "type": "error",
                "error": {"type": anthropic_type(self.status()), "message": self.to_string()},
            }),
            Dialect::Ollama => json!({ "error": self.to_string() }),
        }
    }

    fn openai_body(&self) -> Value {
        let (_, kind, param, code) = self.parts();
        json!({
            "error": {
                "message": self.to_string(),
                "type": kind,
                "param": param,
                "code": code,
            }
        })
    }
}

/// Anthropic's error type for an HTTP status.
pub fn anthropic_type(status: StatusCode) -> &'static str {
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

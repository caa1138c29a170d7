//! [`OllamaError`]: errors in Ollama's shape, `{"error": "..."}`, with the
//! status codes Ollama answers with.

use super::super::dialect::Dialect;
use super::super::ApiError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// A request to the Ollama API that could not be served.
#[derive(Debug, thiserror::Error)]
pub enum OllamaError {
    /// Any error the OpenAI API would answer; the status is the same, the
    /// body is Ollama's.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// An Ollama endpoint that superfluid answers differently, with the
    /// status to answer and what to do instead.
    #[error("{message}")]
    Refused {
        /// 400, 404 or 501.
        status: StatusCode,
        /// What is not done and what to do instead.
        message: String,
    },
}

impl OllamaError {
    /// A field of the request that is not supported: 400 naming it.
    pub fn field(field: &str, message: impl Into<String>) -> Self {
        OllamaError::Api(ApiError::param(field, message))
    }

    /// An error with its own status.
    pub fn refused(status: StatusCode, message: impl Into<String>) -> Self {
        OllamaError::Refused {
            status,
            message: message.into(),
        }
    }

    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            OllamaError::Api(err) => err.status(),
            OllamaError::Refused { status, .. } => *status,
        }
    }

    /// Ollama's error body.
    pub fn body(&self) -> serde_json::Value {
        match self {
            OllamaError::Api(err) => err.body_in(Dialect::Ollama),
            OllamaError::Refused { .. } => json!({ "error": self.to_string() }),
        }
    }
}

impl super::super::request_log::Refused for OllamaError {
    fn status(&self) -> StatusCode {
        OllamaError::status(self)
    }
}

impl IntoResponse for OllamaError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(%status, error = %self, "request failed");
        } else {
            tracing::debug!(%status, error = %self, "request rejected");
        }
        (status, Json(self.body())).into_response()
    }
}

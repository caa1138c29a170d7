//! The OpenAI error object: the body of every error answer and the event a
//! stream sends when its generation fails mid-way.
//!
//! [`ApiError::body`](crate::api::ApiError::body) writes it; this type is
//! what a client (and the tests) read it as.

use serde::{Deserialize, Serialize};

/// `{"error": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The error itself; `param` and `code` are always present, `null` when
/// they do not apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// What went wrong and what to do about it.
    pub message: String,
    /// `invalid_request_error`, `server_error`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault.
    pub param: Option<String>,
    /// A machine-readable code such as `context_length_exceeded`.
    pub code: Option<String>,
}

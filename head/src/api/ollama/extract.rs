//! [`OllamaJson`]: the request body as Ollama reads it.
//!
//! Ollama takes any content type (its own examples use `curl -d`, which
//! sends a form content type), so only the body's JSON is checked; its
//! errors, including unknown fields, come back in Ollama's shape naming the
//! field.

use super::super::extract::parse;
use super::super::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

/// A JSON request body deserialized into `T`.
#[derive(Debug)]
pub struct OllamaJson<T>(pub T);

impl<S, T> FromRequest<S> for OllamaJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::TooLarge
            } else {
                ApiError::BadJson {
                    message: format!("could not read the request body: {}", rejection.body_text()),
                    param: None,
                }
            }
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::refused(
                StatusCode::BAD_REQUEST,
                "missing request body; send a JSON object such as {\"model\": \"...\"}",
            ));
        }
        Ok(OllamaJson(parse(&bytes)?))
    }
}

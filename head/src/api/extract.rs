//! [`ApiJson`]: the JSON body extractor whose every rejection is an
//! [`ApiError`], so axum's plain-text 400/415/422 bodies never reach clients.

use super::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

/// A JSON request body deserialized into `T`.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        check_content_type(req.headers().get(CONTENT_TYPE).map(|v| v.as_bytes()))?;
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
        parse(&bytes).map(ApiJson)
    }
}

/// Accepts `application/json` (with parameters such as `charset`) and
/// `application/*+json`.
fn check_content_type(value: Option<&[u8]>) -> Result<(), ApiError> {
    let wrong = |got: &str| {
        ApiError::BadJson {
        message: format!(
            "the request body must be JSON with the header Content-Type: application/json (got {got})"
        ),
        param: None,
    }
    };
    let Some(value) = value else {
        return Err(wrong("no Content-Type"));
    };
    let text = String::from_utf8_lossy(value);
    let essence = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let is_json = essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    if is_json {
        Ok(())
    } else {
        Err(wrong(&format!("{text:?}")))
    }
}

/// Deserializes a body, naming the field at fault when there is one.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let result: Result<T, _> = serde_path_to_error::deserialize(de);
    let err = match result {
        Ok(value) => return Ok(value),
        Err(err) => err,
    };
    let path = err.path().to_string();
    let inner = err.inner();
    let param = (path != "." && !path.is_empty()).then_some(path);
    let message = match (inner.classify(), &param) {
        (serde_json::error::Category::Data, Some(field)) => {
            format!("invalid value for `{field}`: {inner}")
        }
        (serde_json::error::Category::Data, None) => {
            format!("the request body does not have the expected shape: {inner}")
        }
        (serde_json::error::Category::Eof, _) => {
            format!("the request body is not valid JSON: it ends too early ({inner})")
        }
        _ => format!("the request body is not valid JSON: {inner}"),
    };
    Err(ApiError::BadJson { message, param })
}

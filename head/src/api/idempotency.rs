//! `Idempotency-Key` on the POST routes that generate or write (chat
//! completions, completions, responses, the sessions routes that create,
//! append, generate, fork or trim, Anthropic's messages, and Ollama's chat
//! and generate).
//!
//! The first answer to a keyed request is kept for 24 hours beside the
//! sessions ([`crate::sessions::idempotency`]), scoped to the API key that
//! sent it. The same key with the same request (method, path and body)
//! answers the kept result again (status, body, `Content-Type` and the
//! `x-superfluid-node` that answered first), with `Idempotent-Replayed:
//! true`, and generates nothing; the same key with another request is refused with
//! 422; the same key while its first request still runs, with 409.
//!
//! Answers that a retry should not get again are not kept: 5xx, 408, 409,
//! 425 and 429. A streamed request (`"stream": true`; on Ollama's routes,
//! which stream unless told not to, any request without `"stream": false`)
//! with a key is refused with 400: its answer is a live event stream, not a
//! result to hand back twice.

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::auth::Caller;
use super::dialect::Dialect;
use super::{ApiError, AppState, NODE_HEADER};
use crate::sessions::idempotency::Kept;

/// The request header.
pub const HEADER: &str = "idempotency-key";

/// The header on an answer given again.
pub const REPLAYED: &str = "idempotent-replayed";

/// The longest key taken.
const MAX_KEY: usize = 255;

/// The largest request body read (axum's default limit, which the routes'
/// own extractors apply).
const MAX_BODY: usize = 2 * 1024 * 1024;

/// The largest answer kept.
const MAX_KEPT: usize = 16 * 1024 * 1024;

/// The middleware, for `middleware::from_fn_with_state`. Ollama's routes
/// stream unless the body says `"stream": false`; the others stream only
/// when it says `"stream": true`.
pub async fn once(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let streams_by_default = Dialect::current() == Dialect::Ollama;
    keyed(&state, caller, request, next, streams_by_default).await
}

async fn keyed(
    state: &AppState,
    caller: Option<Extension<Caller>>,
    request: Request,
    next: Next,
    streams_by_default: bool,
) -> Result<Response, ApiError> {
    let Some(value) = request.headers().get(HEADER) else {
        return Ok(next.run(request).await);
    };
    if request.method() != Method::POST {
        return Ok(next.run(request).await);
    }
    let key = value
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|k| !k.is_empty() && k.len() <= MAX_KEY)
        .ok_or_else(|| {
            ApiError::param(
                "Idempotency-Key",
                format!("`Idempotency-Key` must be 1 to {MAX_KEY} visible ASCII characters, such as a UUID"),
            )
        })?
        .to_owned();
    let store = state.sessions.clone().ok_or_else(|| {
        ApiError::param(
            "Idempotency-Key",
            "this head has no data dir to keep answers in; start it with --data-dir DIR, or send the request without `Idempotency-Key`",
        )
    })?;
    let scope = caller
        .map(|Extension(Caller(k))| k.record.name.clone())
        .unwrap_or_default();
    let (parts, body) = request.into_parts();
    let bytes = to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::TooLarge)?;
    if streams(&bytes, streams_by_default) {
        let ask = if streams_by_default {
            "send `\"stream\": false` (this route streams unless told not to)"
        } else {
            "ask without streaming"
        };
        return Err(ApiError::param(
            "Idempotency-Key",
            format!("`Idempotency-Key` is not taken with a streamed answer: a stream cannot be answered again; drop the key, or {ask}"),
        ));
    }
    let fingerprint = fingerprint(&parts.method, parts.uri.path(), &bytes);
    let scoped = (scope, key.clone());
    let _running = store
        .begin_keyed(scoped.clone(), &fingerprint)
        .map_err(|running| {
            if running == fingerprint {
                ApiError::IdempotencyInFlight { key: key.clone() }
            } else {
                ApiError::IdempotencyMismatch { key: key.clone() }
            }
        })?;
    if let Some(kept) = store.kept_answer(scoped.clone()).await? {
        if kept.fingerprint != fingerprint {
            return Err(ApiError::IdempotencyMismatch { key });
        }
        tracing::info!(key = %key, "answered again for its Idempotency-Key");
        return Ok(replay(kept));
    }
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    if !kept_status(response.status()) {
        return Ok(response);
    }
    let (parts, body) = response.into_parts();
    let bytes = to_bytes(body, MAX_KEPT)
        .await
        .map_err(|e| ApiError::Generation {
            message: format!(
                "the answer could not be read to keep it ({e}); send the request again"
            ),
        })?;
    let kept = Kept {
        fingerprint,
        status: parts.status.as_u16(),
        content_type: parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        node: parts
            .headers
            .get(NODE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: bytes.to_vec(),
    };
    if let Err(error) = store.keep_answer(scoped, kept).await {
        tracing::warn!(key = %key, %error, "the answer could not be kept for its Idempotency-Key");
    }
    Ok(Response::from_parts(parts, Body::from(bytes)))
}

/// Whether the body asks for a stream (`by_default`: unless it says
/// `"stream": false`).
fn streams(body: &[u8], by_default: bool) -> bool {
    let stream = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("stream").and_then(Value::as_bool));
    stream.unwrap_or(by_default)
}

/// What identifies a request: its method, path and body.
fn fingerprint(method: &Method, path: &str, body: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update(method.as_str().as_bytes());
    hash.update(b" ");
    hash.update(path.as_bytes());
    hash.update(b"\n");
    hash.update(body);
    hex::encode(hash.finalize())
}

/// Whether an answer with `status` is kept: not the ones a retry should
/// get fresh.
fn kept_status(status: StatusCode) -> bool {
    let transient = [
        StatusCode::REQUEST_TIMEOUT,
        StatusCode::CONFLICT,
        StatusCode::TOO_EARLY,
        StatusCode::TOO_MANY_REQUESTS,
    ];
    (status.is_success() || status.is_client_error()) && !transient.contains(&status)
}

/// The kept answer, marked as given again.
fn replay(kept: Kept) -> Response {
    let status = StatusCode::from_u16(kept.status).unwrap_or(StatusCode::OK);
    let mut response = (status, kept.body).into_response();
    let headers = response.headers_mut();
    headers.remove(header::CONTENT_TYPE);
    if let Some(value) = kept
        .content_type
        .as_deref()
        .and_then(|v| HeaderValue::from_str(v).ok())
    {
        headers.insert(header::CONTENT_TYPE, value);
    }
    if let Some(value) = kept
        .node
        .as_deref()
        .and_then(|v| HeaderValue::from_str(v).ok())
    {
        headers.insert(NODE_HEADER, value);
    }
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_request_has_the_same_fingerprint_and_another_does_not() {
        let a = fingerprint(&Method::POST, "/v1/chat/completions", b"{\"a\":1}");
        assert_eq!(
            a,
            fingerprint(&Method::POST, "/v1/chat/completions", b"{\"a\":1}")
        );
        assert_ne!(
            a,
            fingerprint(&Method::POST, "/v1/chat/completions", b"{\"a\":2}")
        );
        assert_ne!(
            a,
            fingerprint(&Method::POST, "/v1/completions", b"{\"a\":1}")
        );
    }

    #[test]
    fn streamed_bodies_are_recognised() {
        assert!(streams(br#"{"model":"m","stream":true}"#, false));
        assert!(!streams(br#"{"model":"m","stream":false}"#, false));
        assert!(!streams(b"not json", false));
        // Ollama's routes stream unless told not to.
        assert!(streams(br#"{"model":"m"}"#, true));
        assert!(!streams(br#"{"model":"m","stream":false}"#, true));
    }

    #[test]
    fn transient_answers_are_not_kept() {
        assert!(kept_status(StatusCode::OK));
        assert!(kept_status(StatusCode::BAD_REQUEST));
        assert!(!kept_status(StatusCode::TOO_MANY_REQUESTS));
        assert!(!kept_status(StatusCode::CONFLICT));
        assert!(!kept_status(StatusCode::BAD_GATEWAY));
    }
}

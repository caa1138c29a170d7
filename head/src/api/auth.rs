//! The key check in front of the client routes.
//!
//! Once any key exists (static or stored), every client request must
//! present one, as `Authorization: Bearer KEY` (OpenAI clients) or
//! `x-api-key: KEY` (Anthropic clients). The key found is put in the
//! request's extensions as [`Caller`]; handlers check the model there,
//! once the request names it. A key with limits is admitted or refused
//! here too, and every response to it carries its limits ([`limits`]).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use axum::Extension;
use tokio::time::Instant;

use super::generate::Generation;
use super::{limits, ApiError};
use crate::keys::{unix_now, ApiKey, Keys, Refusal};

#[cfg(test)]
mod tests;

/// The header Anthropic clients send their key in.
pub const API_KEY_HEADER: &str = "x-api-key";

/// The key a request was let in with.
#[derive(Debug, Clone)]
pub struct Caller(pub Arc<ApiKey>);

/// Refuses a client request without a valid key, when keys are required.
pub async fn require_key(
    State(keys): State<Keys>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if !keys.required() {
        return Ok(next.run(request).await);
    }
    let secret = presented_key(request.headers()).ok_or(ApiError::MissingApiKey)?;
    let now = unix_now();
    let key = keys
        .authenticate(secret, now)
        .map_err(|refusal| match refusal {
            Refusal::Unknown => ApiError::InvalidApiKey,
            Refusal::Expired { name } => ApiError::ExpiredApiKey { name },
        })?;
    key.usage.count_request(now);
    super::request_log::note_key(&key.record.name);
    tracing::debug!(key = %key.record.name, "request authenticated");
    if let Some(limiter) = key.limiter() {
        if let Err(limited) = limiter.admit(Instant::now()) {
            tracing::debug!(key = %key.record.name, limit = limited.kind.as_str(), "request over the key's limit");
            return Ok(limits::refused(&key, &limited));
        }
    }
    request.extensions_mut().insert(Caller(key.clone()));
    let mut response = next.run(request).await;
    if let Some(limiter) = key.limiter() {
        // Read after the handler, so a whole answer's tokens are counted.
        limits::add_headers(response.headers_mut(), &limiter.quota(Instant::now()));
    }
    Ok(response)
}

/// The key in `Authorization: Bearer KEY` or else `x-api-key: KEY`.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(rest.trim())
        });
    let plain = || {
        headers
            .get(API_KEY_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    bearer.or_else(plain).filter(|k| !k.is_empty())
}

/// 403 unless the caller's key may use `model`; any model without keys.
pub fn check_model(caller: Option<&Extension<Caller>>, model: &str) -> Result<(), ApiError> {
    match caller {
        Some(Extension(Caller(key))) if !key.allows(model) => Err(ApiError::ModelNotAllowed {
            model: model.to_owned(),
            key: key.record.name.clone(),
        }),
        _ => Ok(()),
    }
}

/// Whether the caller may see `model` in `/v1/models`.
pub fn may_list(caller: Option<&Extension<Caller>>, model: &str) -> bool {
    check_model(caller, model).is_ok()
}

/// Counts `generation`'s tokens against the caller's key: in its usage
/// when the generation ends, and in its token limit as they become known,
/// the prompt now and the completion at the end.
pub fn meter(caller: Option<&Extension<Caller>>, generation: &mut Generation) {
    if let Some(Extension(Caller(key))) = caller {
        if let Some(limiter) = key.limiter() {
            let prompt = generation.usage().prompt_tokens;
            limiter.debit_tokens(prompt.into(), Instant::now());
        }
        let key = key.clone();
        generation.on_end(Box::new(move |usage| {
            key.usage.count_tokens(
                usage.prompt_tokens.into(),
                usage.cached_tokens.into(),
                usage.completion_tokens.into(),
            );
            if let Some(limiter) = key.limiter() {
                limiter.debit_tokens(usage.completion_tokens.into(), Instant::now());
            }
        }));
    }
}

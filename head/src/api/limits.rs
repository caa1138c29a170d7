//! Per-key limits on the HTTP side: the 429 for a refused request and
//! OpenAI's `x-ratelimit-*` headers on every response to a limited key.
//! The buckets themselves are [`crate::keys::limiter`].

use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::keys::limiter::{format_reset, whole_seconds_up, Limited, Quota, Remaining};
use crate::keys::ApiKey;

#[cfg(test)]
mod tests;

/// The 429 for a request `key` may not make now, with `Retry-After` and
/// the key's limits.
pub fn refused(key: &ApiKey, limited: &Limited) -> Response {
    let retry_after = whole_seconds_up(limited.retry_after);
    let error = ApiError::RateLimited {
        key: key.record.name.clone(),
        kind: limited.kind,
        limit: limited.limit,
        retry_after,
    };
    let mut response = error.into_response();
    let headers = response.headers_mut();
    headers.insert(RETRY_AFTER, HeaderValue::from(retry_after));
    add_headers(headers, &limited.quota);
    response
}

/// OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, for
/// each limit the key has.
pub fn add_headers(headers: &mut HeaderMap, quota: &Quota) {
    if let Some(requests) = &quota.requests {
        add_trio(headers, "requests", requests);
    }
    if let Some(tokens) = &quota.tokens {
        add_trio(headers, "tokens", tokens);
    }
}

fn add_trio(headers: &mut HeaderMap, kind: &str, remaining: &Remaining) {
    let values = [
        ("limit", HeaderValue::from(remaining.limit)),
        ("remaining", HeaderValue::from(remaining.remaining)),
        ("reset", reset_value(remaining)),
    ];
    for (what, value) in values {
        if let Ok(name) = HeaderName::try_from(format!("x-ratelimit-{what}-{kind}")) {
            headers.insert(name, value);
        }
    }
}

fn reset_value(remaining: &Remaining) -> HeaderValue {
    // format_reset writes only digits, letters and a dot.
    HeaderValue::try_from(format_reset(remaining.reset))
        .unwrap_or_else(|_| HeaderValue::from_static("0s"))
}

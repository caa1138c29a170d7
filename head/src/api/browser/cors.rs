//! Which web pages may call the client API from a browser (CORS).
//!
//! With no `--cors-origin` the head sends no CORS header at all, so a
//! browser lets no page on another origin read an answer. Each origin given
//! is echoed back to that origin alone; `*` lets every page call the API,
//! which is only safe when every call needs a key that the page must be
//! given, so it is refused unless keys are required, and then keeps them
//! required even after the last key is revoked.

use std::time::Duration;

use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

use super::host_check::parse_host;
use super::BrowserError;
use crate::api::auth::API_KEY_HEADER;
use crate::keys::Keys;

/// How long a browser may reuse a preflight's answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// The headers a browser app may read from an answer besides the simple
/// ones: the rate-limit headers OpenAI sends, and when to retry.
const EXPOSED: [&str; 7] = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "retry-after",
];

/// The headers the official OpenAI and Anthropic browser clients send
/// besides `authorization` and `content-type`; a preflight naming any other
/// header is refused by the browser, so each is listed here by name.
const CLIENT_HEADERS: [&str; 20] = [
    API_KEY_HEADER,
    "anthropic-version",
    "anthropic-beta",
    "anthropic-dangerous-direct-browser-access",
    "openai-organization",
    "openai-project",
    "openai-beta",
    "x-stainless-lang",
    "x-stainless-package-version",
    "x-stainless-os",
    "x-stainless-arch",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-retry-count",
    "x-stainless-timeout",
    "x-stainless-async",
    "x-stainless-helper-method",
    "x-stainless-poll-helper",
    "x-stainless-custom-poll-interval",
    "x-stainless-read-timeout",
];

/// The origins whose pages may call the client API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum CorsOrigins {
    /// No CORS headers: no page on another origin may read an answer.
    #[default]
    None,
    /// Exactly these origins, as browsers send them (lower case, no path).
    Only(Vec<HeaderValue>),
    /// Every origin (`*`); keys are required.
    Any,
}

impl CorsOrigins {
    /// The `--cors-origin` values, checked: each is an origin or `*`, and
    /// `*` only while `keys` are required, which it then keeps so.
    pub fn parse(values: &[String], keys: &Keys) -> Result<CorsOrigins, BrowserError> {
        let values: Vec<&str> = values
            .iter()
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .collect();
        if values.is_empty() {
            return Ok(CorsOrigins::None);
        }
        if values.contains(&"*") {
            if !keys.required() {
                return Err(BrowserError::AnyOriginWithoutKeys);
            }
            keys.keep_required();
            return Ok(CorsOrigins::Any);
        }
        let mut origins = Vec::with_capacity(values.len());
        for value in values {
            let origin = normalize_origin(value).ok_or_else(|| BrowserError::BadOrigin {
                origin: value.to_owned(),
            })?;
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
        Ok(CorsOrigins::Only(origins))
    }

    /// The layer that answers preflights and marks answers for the allowed
    /// origins; `None` when no origin is allowed.
    pub fn layer(&self) -> Option<CorsLayer> {
        let allow = match self {
            CorsOrigins::None => return None,
            CorsOrigins::Only(origins) => AllowOrigin::list(origins.iter().cloned()),
            CorsOrigins::Any => AllowOrigin::any(),
        };
        Some(
            CorsLayer::new()
                .allow_origin(allow)
                .allow_methods([Method::GET, Method::POST])
                .allow_headers(
                    [AUTHORIZATION, CONTENT_TYPE]
                        .into_iter()
                        .chain(CLIENT_HEADERS.map(HeaderName::from_static))
                        .collect::<Vec<_>>(),
                )
                .expose_headers(EXPOSED.map(HeaderName::from_static))
                .max_age(PREFLIGHT_MAX_AGE),
        )
    }
}

/// `scheme://host[:port]` as a browser sends it in `Origin`: lower case,
/// no trailing slash. `None` for anything else (a path, `null`, no scheme).
fn normalize_origin(text: &str) -> Option<HeaderValue> {
    let lower = text.trim_end_matches('/').to_ascii_lowercase();
    let (scheme, authority) = lower.split_once("://")?;
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return None;
    }
    parse_host(authority)?;
    HeaderValue::from_str(&lower).ok()
}

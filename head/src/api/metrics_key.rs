//! The optional key in front of `GET /metrics`.
//!
//! Without one, `/metrics` is open, as Prometheus scrapers expect by
//! default. With one (`--metrics-key`), a scrape must send it as
//! `Authorization: Bearer KEY` (Prometheus' `authorization` setting), so
//! node names, models and load stay private on a reachable head.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};

use super::ApiError;

/// The key `/metrics` needs, if any. Only its SHA-256 is kept, and
/// compared with the presented key's, so a comparison's time tells nothing
/// of the key.
#[derive(Debug, Clone, Default)]
pub struct MetricsKey(Option<Arc<[u8; 32]>>);

impl MetricsKey {
    /// `/metrics` needs `key`, or is open when `None`.
    pub fn new(key: Option<&str>) -> MetricsKey {
        MetricsKey(key.map(|k| Arc::new(digest(k))))
    }

    /// Whether `presented` opens `/metrics`.
    fn admits(&self, presented: Option<&str>) -> bool {
        match (&self.0, presented) {
            (None, _) => true,
            (Some(want), Some(key)) => **want == digest(key),
            (Some(_), None) => false,
        }
    }
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Refuses a scrape without the metrics key, when one is set.
pub async fn require(
    State(key): State<MetricsKey>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if !key.admits(presented) {
        return Err(ApiError::MetricsKey);
    }
    Ok(next.run(request).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_key_every_scrape_is_let_in() {
        assert!(MetricsKey::new(None).admits(None));
        assert!(MetricsKey::new(None).admits(Some("anything")));
    }

    #[test]
    fn with_a_key_only_that_key_is_let_in() {
        let key = MetricsKey::new(Some("s3cret"));
        assert!(key.admits(Some("s3cret")));
        assert!(!key.admits(Some("s3cre")));
        assert!(!key.admits(None));
    }
}

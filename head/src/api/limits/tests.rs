use super::*;
use crate::keys::limiter::{LimitKind, Limiter};
use crate::keys::{Keys, NewKey};
use axum::http::StatusCode;
use tokio::time::Instant;

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn limited_key(dir: &std::path::Path) -> std::sync::Arc<ApiKey> {
    let keys = Keys::open(dir, &[]).expect("opening");
    let (secret, _) = keys
        .create(NewKey {
            name: "ivy".into(),
            rpm: Some(1),
            tpm: Some(600),
            ..NewKey::default()
        })
        .expect("creating");
    keys.authenticate(&secret, crate::keys::unix_now())
        .expect("the key works")
}

#[tokio::test]
async fn an_exhausted_key_gets_openais_429() {
    let dir = std::env::temp_dir().join(format!("superfluid-limits-429-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let key = limited_key(&dir);
    let limiter = key.limiter().expect("a limiter");
    let now = Instant::now();
    limiter.admit(now).expect("the first of the minute");
    let limited = limiter.admit(now).expect_err("the second is refused");
    let response = refused(&key, &limited);
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let headers = response.headers();
    assert_eq!(header(headers, "retry-after"), Some("60"));
    assert_eq!(header(headers, "x-ratelimit-limit-requests"), Some("1"));
    assert_eq!(header(headers, "x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(header(headers, "x-ratelimit-reset-requests"), Some("1m0s"));
    assert_eq!(header(headers, "x-ratelimit-limit-tokens"), Some("600"));
    assert_eq!(header(headers, "x-ratelimit-remaining-tokens"), Some("600"));
    assert_eq!(header(headers, "x-ratelimit-reset-tokens"), Some("0s"));

    let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .expect("a body");
    let body: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(body["error"]["type"], "requests", "{body}");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
    assert!(body["error"]["param"].is_null(), "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    for said in [
        "\"ivy\"",
        "requests per minute",
        "limit is 1",
        "retry in 60 s",
    ] {
        assert!(message.contains(said), "{said:?} missing from {message}");
    }
}

#[test]
fn only_the_limits_a_key_has_become_headers() {
    let limiter = Limiter::new(None, Some(120)).expect("a limiter");
    let now = Instant::now();
    limiter.debit_tokens(30, now);
    let mut headers = HeaderMap::new();
    add_headers(&mut headers, &limiter.quota(now));
    assert_eq!(header(&headers, "x-ratelimit-limit-tokens"), Some("120"));
    assert_eq!(header(&headers, "x-ratelimit-remaining-tokens"), Some("90"));
    assert_eq!(header(&headers, "x-ratelimit-reset-tokens"), Some("15s"));
    assert_eq!(headers.len(), 3, "no request headers without an rpm");
}

#[test]
fn a_token_refusal_is_typed_tokens() {
    let error = ApiError::RateLimited {
        key: "ivy".into(),
        kind: LimitKind::Tokens,
        limit: 600,
        retry_after: 2,
    };
    let body = error.body();
    assert_eq!(body["error"]["type"], "tokens", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("tokens per minute"), "{message}");
}

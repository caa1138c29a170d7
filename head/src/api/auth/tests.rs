use super::*;
use crate::api::generate::EventSource;
use crate::api::output::Step;
use crate::fleet::FleetError;
use axum::http::HeaderValue;
use futures::future::BoxFuture;
use superfluid_proto::{FinishReason, GenerateEvent, Outcome};

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, HeaderValue::from_str(value).expect("a header value"));
    }
    map
}

#[test]
fn a_bearer_key_is_read_whatever_the_scheme_case() {
    assert_eq!(
        presented_key(&headers(&[("authorization", "Bearer sk-sf-abc")])),
        Some("sk-sf-abc")
    );
    assert_eq!(
        presented_key(&headers(&[("authorization", "bearer  sk-sf-abc ")])),
        Some("sk-sf-abc")
    );
}

#[test]
fn an_x_api_key_is_read_when_there_is_no_bearer() {
    assert_eq!(
        presented_key(&headers(&[("x-api-key", "sk-sf-xyz")])),
        Some("sk-sf-xyz")
    );
    assert_eq!(
        presented_key(&headers(&[
            ("authorization", "Bearer sk-sf-abc"),
            ("x-api-key", "sk-sf-xyz")
        ])),
        Some("sk-sf-abc")
    );
}

#[test]
fn other_schemes_and_empty_keys_present_nothing() {
    assert_eq!(presented_key(&headers(&[])), None);
    assert_eq!(
        presented_key(&headers(&[("authorization", "Basic dXNlcjpwYXNz")])),
        None
    );
    assert_eq!(
        presented_key(&headers(&[("authorization", "Bearer ")])),
        None
    );
    assert_eq!(presented_key(&headers(&[("x-api-key", "  ")])), None);
}

/// Plays back events, then waits forever.
struct Replay(std::collections::VecDeque<GenerateEvent>);

impl EventSource for Replay {
    fn next_event(&mut self) -> BoxFuture<'_, Result<Option<GenerateEvent>, FleetError>> {
        let event = self.0.pop_front();
        match event {
            Some(event) => Box::pin(async move { Ok(Some(event)) }),
            None => Box::pin(futures::future::pending()),
        }
    }
}

#[tokio::test]
async fn a_finished_generation_counts_its_tokens_against_the_key() {
    let keys = Keys::in_memory(&["team".into()]).expect("a static key");
    let key = keys.authenticate("team", 1).expect("the key works");
    let caller = Extension(Caller(key.clone()));
    let codec = match crate::api::tests::catalog().get(crate::api::tests::MODEL) {
        Some(codec) => codec.clone(),
        None => panic!("the model is not loaded"),
    };
    let finished = GenerateEvent::Finished(Outcome {
        finish: FinishReason::Length,
        prompt_tokens: 12,
        cached_tokens: 8,
        generated_tokens: 3,
    });
    let mut generation = Generation::from_source(
        Box::new(Replay([finished].into())),
        codec,
        &[],
        12,
        "node".into(),
        tracing::Span::none(),
    );
    meter(Some(&caller), &mut generation);
    while !matches!(generation.next().await, Ok(Step::Done(_)) | Err(_)) {}
    assert_eq!(
        key.usage.snapshot().completion_tokens,
        0,
        "counted at the end"
    );
    drop(generation);
    let usage = key.usage.snapshot();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.cached_tokens,
            usage.completion_tokens
        ),
        (12, 8, 3)
    );
}

async fn status_of(app: axum::Router, path: &str, key: Option<&str>) -> (u16, Option<String>) {
    use tower::ServiceExt;
    let mut request = axum::http::Request::get(path);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    let request = request.body(axum::body::Body::empty()).unwrap_or_default();
    let response = match app.oneshot(request).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (response.status().as_u16(), challenge)
}

#[tokio::test]
async fn only_the_client_routes_need_the_key() {
    let keys = Keys::in_memory(&["team".into()]).expect("a static key");
    let app = crate::api::router_with_keys(
        crate::api::AppState {
            catalog: crate::api::tests::catalog(),
            fleet: crate::fleet::Fleet::new(),
            sessions: None,
        },
        keys,
    );
    assert_eq!(
        status_of(app.clone(), "/v1/models", None).await,
        (401, Some("Bearer".into()))
    );
    assert_eq!(
        status_of(app.clone(), "/v1/models", Some("team")).await.0,
        200
    );
    // No node: /health says 503, but it answers without a key.
    assert_eq!(status_of(app.clone(), "/health", None).await.0, 503);
    assert_eq!(status_of(app, "/metrics", None).await.0, 200);
}

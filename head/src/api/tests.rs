//! HTTP behaviour without a network: the router driven with `oneshot`,
//! the real SmolLM2 codec, and a fleet with no node.

use super::generate::check_context;
use super::*;
use crate::codec::tests::{backend, model_path};
use crate::codec::Catalog;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::OnceLock;
use tower::ServiceExt;

pub(super) const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

pub(crate) fn catalog() -> Arc<Catalog> {
    static CATALOG: OnceLock<Arc<Catalog>> = OnceLock::new();
    CATALOG
        .get_or_init(|| match Catalog::load(backend(), [model_path()]) {
            Ok(c) => Arc::new(c),
            Err(e) => panic!("{e}"),
        })
        .clone()
}

fn app() -> Router {
    router(AppState {
        catalog: catalog(),
        fleet: Fleet::new(),
        sessions: None,
    })
}

pub(super) async fn send(request: Request<Body>) -> (StatusCode, Value) {
    let response = match app().oneshot(request).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    let status = response.status();
    let bytes = match response.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => panic!("body: {e}"),
    };
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("not JSON: {:?}", String::from_utf8_lossy(&bytes)));
    (status, body)
}

fn post(path: &str, content_type: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path)
        .header("content-type", content_type)
        .body(body.into())
        .unwrap_or_default()
}

async fn chat(body: Value) -> (StatusCode, Value) {
    send(post(
        "/v1/chat/completions",
        "application/json",
        body.to_string(),
    ))
    .await
}

fn hello() -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]})
}

fn with(mut base: Value, key: &str, value: Value) -> Value {
    base[key] = value;
    base
}

/// Asserts an OpenAI error body and returns its message.
fn error(body: &Value) -> String {
    let err = &body["error"];
    assert!(err["type"].is_string(), "not an OpenAI error: {body}");
    assert!(
        err.get("param").is_some() && err.get("code").is_some(),
        "{body}"
    );
    err["message"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn malformed_json_is_a_400_openai_error() {
    let (status, body) = send(post(
        "/v1/chat/completions",
        "application/json",
        "{\"model\": ",
    ))
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("not valid JSON"), "{body}");
}

#[tokio::test]
async fn wrong_content_type_is_a_400_naming_it() {
    let (status, body) = send(post(
        "/v1/chat/completions",
        "text/plain",
        hello().to_string(),
    ))
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("Content-Type"), "{body}");
    let no_type = Request::post("/v1/completions")
        .body(Body::from("{}"))
        .unwrap_or_default();
    let (status, body) = send(no_type).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("Content-Type"), "{body}");
}

#[tokio::test]
async fn wrong_field_type_names_the_field() {
    let (status, body) = chat(with(hello(), "temperature", json!("hot"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["param"], "temperature", "{body}");
    let (status, body) = chat(with(hello(), "messages", json!([{"role": 3}]))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("messages[0].role"), "{body}");
}

#[tokio::test]
async fn missing_model_is_a_400() {
    let (status, body) = chat(json!({"messages": [{"role": "user", "content": "Hi"}]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["param"], "model");
    assert!(error(&body).contains("model"));
}

#[tokio::test]
async fn unknown_model_is_a_404_listing_served_ids() {
    let (status, body) = chat(with(hello(), "model", json!("gpt-9"))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let message = error(&body);
    assert!(
        message.contains("gpt-9") && message.contains(MODEL),
        "{message}"
    );
    assert_eq!(body["error"]["code"], "model_not_found");
}

#[tokio::test]
async fn bad_parameter_values_name_the_parameter() {
    for (key, value) in [
        ("temperature", json!(2.5)),
        ("temperature", json!(-0.1)),
        ("top_p", json!(0)),
        ("top_p", json!(1.5)),
        ("max_tokens", json!(0)),
        ("max_tokens", json!(-5)),
        ("max_completion_tokens", json!(0)),
        ("top_k", json!(-1)),
        ("min_p", json!(2)),
        ("presence_penalty", json!(3)),
        ("repeat_penalty", json!(0)),
        ("stop", json!(5)),
        ("n", json!(9)),
        ("n", json!(0)),
    ] {
        let (status, body) = chat(with(hello(), key, value.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}={value}: {body}");
        let expected = if key == "repeat_penalty" {
            "repetition_penalty"
        } else {
            key
        };
        assert_eq!(body["error"]["param"], expected, "{key}={value}: {body}");
        assert!(error(&body).contains(expected), "{body}");
    }
}

#[tokio::test]
async fn bad_messages_are_400s() {
    let (status, body) = chat(with(hello(), "messages", json!([]))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("empty"), "{body}");
    let (status, body) = chat(with(
        hello(),
        "messages",
        json!([{"role": "wizard", "content": "x"}]),
    ))
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("wizard"), "{body}");
    let image =
        json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]);
    let (status, body) = chat(with(hello(), "messages", image)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&body).contains("image_url"), "{body}");
}

#[tokio::test]
async fn valid_request_without_a_node_is_503_with_the_fleet_message() {
    let parts = json!([{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]);
    for body in [
        hello(),
        with(with(hello(), "messages", parts), "stream", json!(true)),
    ] {
        let (status, body) = chat(body).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(
            error(&body).contains("no node in the fleet serves model"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn params_are_checked_before_the_context_and_the_fleet() {
    let long = "word ".repeat(20_000);
    let too_long = json!({"model": MODEL, "messages": [{"role": "user", "content": long}]});
    // A bad parameter is reported even though the prompt is also too long.
    let (status, body) = chat(with(too_long.clone(), "temperature", json!(9))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["param"], "temperature");
    // With no node the context length is unknown: 503, never a panic or 500.
    let (status, _) = chat(too_long).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

#[test]
fn context_check_has_the_exact_message() {
    assert!(check_context(10, 11, "messages").is_ok());
    let err = check_context(11, 11, "prompt");
    let err = match err {
        Err(e) => e,
        Ok(()) => panic!("11 prompt tokens leave no room in 11"),
    };
    assert_eq!(err.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        err.to_string(),
        "this model's maximum context length is 11 tokens, but your request has 11 tokens; shorten the prompt or drop earlier turns"
    );
    let body = err.body();
    assert_eq!(body["error"]["param"], "prompt");
    assert_eq!(body["error"]["code"], "context_length_exceeded");
}

#[tokio::test]
async fn completions_validate_the_prompt() {
    let send_c = |body: Value| {
        send(post(
            "/v1/completions",
            "application/json",
            body.to_string(),
        ))
    };
    let (status, body) = send_c(json!({"model": MODEL})).await;
    assert_eq!(
        (status, body["error"]["param"].clone()),
        (StatusCode::BAD_REQUEST, json!("prompt"))
    );
    let (status, _) = send_c(json!({"model": MODEL, "prompt": ["a", "b"]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = send_c(json!({"model": MODEL, "prompt": ""})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) =
        send_c(json!({"model": MODEL, "prompt": ["Once upon"], "stop": ["\n"]})).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
}

#[tokio::test]
async fn models_lists_the_served_model() {
    let (status, body) = send(
        Request::get("/v1/models")
            .body(Body::empty())
            .unwrap_or_default(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["object"], "list");
    assert_eq!(body["data"][0]["id"], MODEL);
    assert_eq!(body["data"][0]["object"], "model");
    assert_eq!(body["data"][0]["owned_by"], "superfluid");
}

#[tokio::test]
async fn health_is_unavailable_while_no_node_serves_the_model() {
    let (status, body) = send(
        Request::get("/health")
            .body(Body::empty())
            .unwrap_or_default(),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["status"], "no_nodes");
    assert_eq!(body["models_without_nodes"], json!([MODEL]));
}

#[tokio::test]
async fn unknown_routes_and_methods_get_openai_errors() {
    let (status, body) = send(
        Request::get("/v2/nothing")
            .body(Body::empty())
            .unwrap_or_default(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(error(&body).contains("/v2/nothing"));
    let (status, body) = send(
        Request::get("/v1/chat/completions")
            .body(Body::empty())
            .unwrap_or_default(),
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    error(&body);
}

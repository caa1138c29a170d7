//! Each refused field's 400 and the accepted off values, through the
//! router with no node (an accepted request gets the fleet's 503).

use crate::api::tests::{send, MODEL};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};

async fn post(path: &str, body: Value) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_default();
    send(request).await
}

fn chat(extra: Value) -> Value {
    merge(
        json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}),
        extra,
    )
}

fn completion(extra: Value) -> Value {
    merge(json!({"model": MODEL, "prompt": "Once"}), extra)
}

fn merge(mut base: Value, extra: Value) -> Value {
    if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
    base
}

/// Asserts a 400 naming `param` with exactly `message`.
async fn refused(path: &str, body: Value, param: &str, message: &str) {
    let (status, reply) = post(path, body.clone()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body} -> {reply}");
    assert_eq!(
        reply,
        json!({"error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": null,
        }}),
        "{body}"
    );
}

/// Asserts the request passed validation: with no node it gets the 503.
async fn accepted(path: &str, body: Value) {
    let (status, reply) = post(path, body.clone()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body} -> {reply}");
}

#[tokio::test]
async fn suffix_on_completions_is_refused_naming_it() {
    refused(
        "/v1/completions",
        completion(json!({"suffix": " the end."})),
        "suffix",
        "`suffix` (text to insert before) is not supported: this server only continues `prompt`; send the request without `suffix`",
    )
    .await;
    accepted("/v1/completions", completion(json!({"suffix": ""}))).await;
    accepted("/v1/completions", completion(json!({"suffix": null}))).await;
}

#[tokio::test]
async fn best_of_other_than_one_or_n_is_refused() {
    refused(
        "/v1/completions",
        completion(json!({"best_of": 3})),
        "best_of",
        "`best_of` must be 1 or equal to `n` (got best_of 3, n 1): this server does not rank candidates and returns every choice it generates; send `n` choices instead",
    )
    .await;
    accepted("/v1/completions", completion(json!({"best_of": 1}))).await;
    accepted("/v1/completions", completion(json!({"echo": true}))).await;
}

#[tokio::test]
async fn completions_fields_sent_to_chat_are_refused_naming_them() {
    for (field, value) in [
        ("prompt", json!("Hi")),
        ("echo", json!(true)),
        ("suffix", json!("!")),
        ("best_of", json!(2)),
    ] {
        refused(
            "/v1/chat/completions",
            chat(json!({ field: value })),
            field,
            &format!("`{field}` is a /v1/completions parameter; /v1/chat/completions takes `messages` and does not read it, so send the request without it"),
        )
        .await;
    }
    accepted("/v1/chat/completions", chat(json!({"echo": false}))).await;
}

#[tokio::test]
async fn messages_sent_to_completions_are_refused() {
    refused(
        "/v1/completions",
        completion(json!({"messages": [{"role": "user", "content": "Hi"}]})),
        "messages",
        "`messages` is a /v1/chat/completions parameter; /v1/completions takes a `prompt` string, so send the chat there or the text as `prompt`",
    )
    .await;
}

#[tokio::test]
async fn an_unknown_field_is_refused_naming_it() {
    refused(
        "/v1/chat/completions",
        chat(json!({"mirostat": 2})),
        "mirostat",
        "unknown parameter `mirostat` for /v1/chat/completions; remove it (docs/api.md lists every field this server reads)",
    )
    .await;
    refused(
        "/v1/completions",
        completion(json!({"typical_p": 0.5})),
        "typical_p",
        "unknown parameter `typical_p` for /v1/completions; remove it (docs/api.md lists every field this server reads)",
    )
    .await;
}

#[tokio::test]
async fn openai_features_not_offered_are_refused_unless_off() {
    refused(
        "/v1/chat/completions",
        chat(json!({"store": true})),
        "store",
        "`store` is not supported: this server stores no completions; send `store: false` or leave it out",
    )
    .await;
    refused(
        "/v1/chat/completions",
        chat(json!({"modalities": ["text", "audio"]})),
        "modalities",
        "`modalities` may only be [\"text\"]: the served models write text",
    )
    .await;
    refused(
        "/v1/chat/completions",
        chat(json!({"service_tier": "flex"})),
        "service_tier",
        "`service_tier` must be \"auto\" or \"default\": every request is served alike",
    )
    .await;
    refused(
        "/v1/chat/completions",
        chat(json!({"functions": [{"name": "f"}]})),
        "functions",
        "`functions` is not supported: the legacy `functions` field is not supported; send the functions as `tools` with {\"type\": \"function\", \"function\": {...}}",
    )
    .await;
    accepted(
        "/v1/chat/completions",
        chat(json!({
            "store": false, "modalities": ["text"], "service_tier": "auto",
            "audio": null, "metadata": {}, "functions": [], "user": "u-42",
            "repeat_penalty": 1.1,
        })),
    )
    .await;
}

#[tokio::test]
async fn a_model_id_with_a_slash_reaches_model_retrieval() {
    let request = Request::get("/v1/models/org/some-model")
        .body(Body::empty())
        .unwrap_or_default();
    let (status, body) = send(request).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "model_not_found", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("org/some-model")),
        "{body}"
    );
}

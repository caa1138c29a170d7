//! The Messages API without a network: validation and error shapes through
//! the router, and answers from scripted node events.

use super::answer::{self, Reply};
use crate::api::flow_tests::{finished, generation, json_body, started};
use crate::api::tests::{send, MODEL};
use crate::api::NODE_HEADER;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::Response;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use superfluid_proto::{FailureKind, FinishReason, GenerateEvent};

fn post(path: &str, body: &Value) -> Request<Body> {
    Request::post(path)
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .body(Body::from(body.to_string()))
        .unwrap_or_default()
}

fn hello() -> Value {
    json!({"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]})
}

fn with(mut base: Value, key: &str, value: Value) -> Value {
    base[key] = value;
    base
}

/// Asserts an Anthropic error body of `kind` and returns its message.
fn anthropic_error(body: &Value, kind: &str) -> String {
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], kind, "{body}");
    body["error"]["message"].as_str().unwrap_or("").to_owned()
}

async fn refused(body: Value, needle: &str) {
    let (status, answer) = send(post("/v1/messages", &body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let message = anthropic_error(&answer, "invalid_request_error");
    assert!(message.contains(needle), "{needle:?} not in {message:?}");
}

#[tokio::test]
async fn missing_max_tokens_is_a_400_naming_it() {
    let mut body = hello();
    body.as_object_mut().map(|o| o.remove("max_tokens"));
    refused(body, "max_tokens").await;
}

#[tokio::test]
async fn unknown_fields_are_refused_by_name() {
    refused(
        with(hello(), "frequency_penalty", json!(1)),
        "frequency_penalty",
    )
    .await;
    refused(
        with(hello(), "metadata", json!({"session": "x"})),
        "session",
    )
    .await;
    let block = json!([{"role": "user", "content": [{"type": "text", "text": "Hi", "colour": 1}]}]);
    refused(
        with(hello(), "messages", block),
        "messages[0].content[0].colour",
    )
    .await;
}

#[tokio::test]
async fn bad_tools_and_blocks_are_refused_by_name() {
    refused(
        with(hello(), "tools", json!([{"name": "f"}])),
        "`tools[0].input_schema` is required",
    )
    .await;
    refused(
        with(
            hello(),
            "tools",
            json!([{"name": "f", "input_schema": {}, "strict": true}]),
        ),
        "tools[0].strict",
    )
    .await;
    let tools = json!([{"name": "f", "input_schema": {"type": "object"}}]);
    let offered = with(hello(), "tools", tools);
    refused(
        with(offered.clone(), "tool_choice", json!({"type": "tool"})),
        "needs the `name`",
    )
    .await;
    refused(
        with(offered.clone(), "tool_choice", json!({"type": "sometimes"})),
        "`tool_choice` must be",
    )
    .await;
    refused(
        with(offered, "tool_choice", json!({"type": "tool", "name": "g"})),
        "tool_choice",
    )
    .await;
    let misplaced = json!([{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "4"}]}]);
    refused(
        with(hello(), "messages", misplaced),
        "`messages[0].content[0]` is a tool_result block in a turn of role assistant",
    )
    .await;
    let no_id = json!([{"role": "user", "content": [{"type": "tool_result", "content": "4"}]}]);
    refused(
        with(hello(), "messages", no_id),
        "messages[0].content[0].tool_use_id",
    )
    .await;
    let image = json!([{"role": "user", "content": [{"type": "image", "source": {}}]}]);
    refused(with(hello(), "messages", image), "image block").await;
}

#[tokio::test]
async fn bad_values_are_refused_by_name() {
    refused(with(hello(), "temperature", json!(1.5)), "`temperature`").await;
    refused(with(hello(), "top_p", json!(0)), "`top_p`").await;
    refused(with(hello(), "top_k", json!(-1)), "`top_k`").await;
    refused(with(hello(), "max_tokens", json!(0)), "`max_tokens`").await;
    refused(
        with(hello(), "stop_sequences", json!([""])),
        "stop_sequences[0]",
    )
    .await;
    let system = json!([{"role": "system", "content": "Be brief."}]);
    refused(with(hello(), "messages", system), "`system`").await;
}

#[tokio::test]
async fn a_valid_request_without_a_node_is_an_overloaded_error() {
    let body = with(
        hello(),
        "system",
        json!([{"type": "text", "text": "Be brief."}]),
    );
    let (status, answer) = send(post("/v1/messages", &body)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    anthropic_error(&answer, "overloaded_error");
}

#[tokio::test]
async fn an_unknown_model_is_a_not_found_error() {
    let (status, answer) = send(post("/v1/messages", &with(hello(), "model", json!("nope")))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert!(anthropic_error(&answer, "not_found_error").contains("nope"));
}

#[tokio::test]
async fn count_tokens_counts_the_rendered_prompt() {
    let short = json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]});
    let (status, answer) = send(post("/v1/messages/count_tokens", &short)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let n = answer["input_tokens"].as_u64().unwrap_or(0);
    assert!(n > 2, "{answer}");
    // Longer than the template's own default system prompt.
    let system = "You answer every question in one word, never more. ".repeat(4);
    let longer = with(short, "system", json!(system));
    let (_, answer) = send(post("/v1/messages/count_tokens", &longer)).await;
    assert!(answer["input_tokens"].as_u64().unwrap_or(0) > n, "{answer}");
    let (status, answer) = send(post(
        "/v1/messages/count_tokens",
        &json!({"model": MODEL, "max_tokens": 5, "messages": []}),
    ))
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    anthropic_error(&answer, "invalid_request_error");
}

pub(super) fn reply() -> Reply {
    Reply {
        id: "msg_t".into(),
        model: MODEL.into(),
    }
}

#[tokio::test]
async fn a_message_has_text_stop_reason_and_cached_usage() {
    let (generation, _) = generation("Hello there", finished(FinishReason::Stop, 2), &[]);
    let body = json_body(started(answer::complete(generation, reply()).await)).await;
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(
        body["content"],
        json!([{"type": "text", "text": "Hello there"}])
    );
    assert_eq!(body["stop_reason"], "end_turn");
    assert_eq!(body["stop_sequence"], Value::Null);
    // 7 prompt tokens, 3 of them from the node's cache.
    assert_eq!(body["usage"]["input_tokens"], 4);
    assert_eq!(body["usage"]["cache_read_input_tokens"], 3);
    assert_eq!(body["usage"]["output_tokens"], 2);
}

#[tokio::test]
async fn a_stop_sequence_and_the_token_limit_are_named() {
    let (stopped, _) = generation("One. Two. Three.", None, &["Nine", "Two"]);
    let body = json_body(started(answer::complete(stopped, reply()).await)).await;
    assert_eq!(body["content"][0]["text"], "One. ");
    assert_eq!(body["stop_reason"], "stop_sequence");
    assert_eq!(body["stop_sequence"], "Two");
    let (generation, _) = generation("One", finished(FinishReason::Length, 1), &[]);
    let body = json_body(started(answer::complete(generation, reply()).await)).await;
    assert_eq!(body["stop_reason"], "max_tokens");
}

/// `(event, data)` of each server-sent event.
pub(super) async fn sse_events(response: Response) -> Vec<(String, Value)> {
    assert!(response.headers().contains_key(NODE_HEADER));
    let bytes = match response.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => panic!("{e}"),
    };
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let mut events = Vec::new();
    let mut name = String::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_owned();
        } else if let Some(d) = line.strip_prefix("data: ") {
            events.push((name.clone(), serde_json::from_str(d).unwrap_or(Value::Null)));
        }
    }
    events
}

#[tokio::test]
async fn a_stream_has_anthropics_event_sequence() {
    let text = "Hi there, 日本!";
    let (generation, _) = generation(text, finished(FinishReason::Stop, 5), &[]);
    let events = sse_events(started(
        super::stream::stream(generation, reply(), None).await,
    ))
    .await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let n = names.len();
    assert_eq!(
        names[..3],
        ["message_start", "content_block_start", "ping"],
        "{names:?}"
    );
    assert_eq!(
        names[n - 3..],
        ["content_block_stop", "message_delta", "message_stop"],
        "{names:?}"
    );
    assert!(names[3..n - 3].iter().all(|n| *n == "content_block_delta"));
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str(), "{data}");
    }
    assert_eq!(events[0].1["message"]["content"], json!([]));
    let joined: String = events[3..n - 3]
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(joined, text);
    let delta = &events[n - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 5);
    assert_eq!(delta["usage"]["cache_read_input_tokens"], 3);
}

#[tokio::test]
async fn a_failure_mid_stream_is_an_error_event() {
    let failed = Some(GenerateEvent::Failed {
        kind: FailureKind::Engine,
        message: "node crashed".into(),
    });
    let (generation, _) = generation("Hi", failed, &[]);
    let events = sse_events(started(
        super::stream::stream(generation, reply(), None).await,
    ))
    .await;
    let (name, data) = &events[events.len() - 1];
    assert_eq!(name, "error");
    assert!(anthropic_error(data, "api_error").contains("node crashed"));
}

/// The answer of `request` to a head whose keys are `keys`.
async fn send_with_keys(keys: crate::keys::Keys, request: Request<Body>) -> Response {
    let app = crate::api::router_with_keys(
        crate::api::AppState {
            catalog: crate::api::tests::catalog(),
            fleet: crate::fleet::Fleet::new(),
            sessions: None,
        },
        keys,
    );
    match tower::ServiceExt::oneshot(app, request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

async fn body_of(response: Response) -> Value {
    let bytes = match response.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => panic!("{e}"),
    };
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

#[tokio::test]
async fn the_shared_layers_429_and_403_come_in_anthropics_shape() {
    use crate::keys::{Keys, NewKey};
    let dir = std::env::temp_dir().join(format!(
        "superfluid-anthropic-limits-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let keys = Keys::open(&dir, &[]).expect("opening the keys");
    let (limited, _) = keys
        .create(NewKey {
            name: "ivy".into(),
            rpm: Some(1),
            ..NewKey::default()
        })
        .expect("creating a limited key");
    let (elsewhere, _) = keys
        .create(NewKey {
            name: "oak".into(),
            models: Some(vec!["another-model".into()]),
            ..NewKey::default()
        })
        .expect("creating a key for another model");
    let count = json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]});
    let with_key = |key: &str| {
        let mut request = post("/v1/messages/count_tokens", &count);
        if let Ok(value) = key.parse() {
            request.headers_mut().insert("x-api-key", value);
        }
        request
    };
    let first = send_with_keys(keys.clone(), with_key(&limited)).await;
    assert_eq!(first.status(), StatusCode::OK);
    let second = send_with_keys(keys.clone(), with_key(&limited)).await;
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(second.headers().contains_key("retry-after"));
    let message = anthropic_error(&body_of(second).await, "rate_limit_error");
    assert!(message.contains("ivy"), "{message}");
    let denied = send_with_keys(keys.clone(), with_key(&elsewhere)).await;
    assert_eq!(denied.status(), StatusCode::FORBIDDEN);
    anthropic_error(&body_of(denied).await, "permission_error");
    let _ = std::fs::remove_dir_all(&dir);
}

//! Anthropic's Messages API through `superfluid serve` with the real model,
//! by raw HTTP and with the official `anthropic` Python client.

use std::time::Duration;

use crate::fleet_support::serial;
use crate::support::{Server, MODEL};
use serde_json::{json, Value};

const KEY: &str = "sk-sf-anthropic-client-test";

fn ask(question: &str, max_tokens: u32) -> Value {
    json!({
        "model": MODEL,
        "max_tokens": max_tokens,
        "temperature": 0,
        "system": "You are a helpful assistant.",
        "messages": [{"role": "user", "content": question}],
    })
}

async fn post(server: &Server, path: &str, body: &Value, key: Option<&str>) -> (u16, Value) {
    let mut request = server
        .client
        .post(server.url(path))
        .header("anthropic-version", "2023-06-01")
        .json(body);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    let response = request.send().await.expect("sending the request");
    let status = response.status().as_u16();
    let text = response.text().await.expect("reading the answer");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, body)
}

fn text_of(message: &Value) -> String {
    message["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text block in {message}"))
        .to_owned()
}

/// Asserts Anthropic's error shape with `kind` and returns the message.
fn anthropic_error(body: &Value, kind: &str) -> String {
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], kind, "{body}");
    body["error"]["message"].as_str().unwrap_or("").to_owned()
}

/// `(event, data)` of each server-sent event of a streamed request.
async fn stream(server: &Server, body: &Value) -> Vec<(String, Value)> {
    let response = server
        .client
        .post(server.url("/v1/messages"))
        .json(body)
        .send()
        .await
        .expect("sending the request");
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.expect("reading the stream");
    let mut events = Vec::new();
    let mut name = String::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_owned();
        } else if let Some(d) = line.strip_prefix("data: ") {
            let data = serde_json::from_str(d).unwrap_or_else(|_| panic!("not JSON: {d}"));
            events.push((name.clone(), data));
        }
    }
    events
}

#[tokio::test]
async fn messages_answer_with_fields_stop_reasons_and_a_warm_second_turn() {
    let server = Server::start(&[]).unwrap();
    let (status, first) = post(
        &server,
        "/v1/messages",
        &ask("What is the capital of France?", 48),
        None,
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["type"], "message");
    assert_eq!(first["role"], "assistant");
    assert_eq!(first["model"], MODEL);
    assert!(
        first["id"].as_str().unwrap_or("").starts_with("msg_"),
        "{first}"
    );
    let answer = text_of(&first);
    assert!(answer.contains("Paris"), "{first}");
    assert_eq!(first["stop_reason"], "end_turn", "{first}");
    assert!(
        first["usage"]["input_tokens"].as_u64().unwrap_or(0) > 10,
        "{first}"
    );
    assert!(
        first["usage"]["output_tokens"].as_u64().unwrap_or(0) > 0,
        "{first}"
    );

    // The second turn of the same conversation finds its prefix cached.
    let mut second = ask("What is the capital of France?", 16);
    second["messages"] = json!([
        {"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "And of Italy?"},
    ]);
    second["metadata"] = json!({"user_id": "user-1"});
    second["top_p"] = json!(0.9);
    second["top_k"] = json!(40);
    let (status, body) = post(&server, "/v1/messages", &second, None).await;
    assert_eq!(status, 200, "{body}");
    let cached = body["usage"]["cache_read_input_tokens"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        cached > 10,
        "the second turn read nothing from the cache: {body}"
    );

    let (_, limited) = post(
        &server,
        "/v1/messages",
        &ask("Count from 1 to 50.", 3),
        None,
    )
    .await;
    assert_eq!(limited["stop_reason"], "max_tokens", "{limited}");
    assert_eq!(limited["usage"]["output_tokens"], 3, "{limited}");

    let mut stopped = ask("Count from 1 to 10, separated by commas.", 64);
    stopped["stop_sequences"] = json!(["5", "never"]);
    let (_, body) = post(&server, "/v1/messages", &stopped, None).await;
    assert_eq!(body["stop_reason"], "stop_sequence", "{body}");
    assert_eq!(body["stop_sequence"], "5", "{body}");
    assert!(!text_of(&body).contains('5'), "{body}");

    // A last assistant turn is continued.
    let mut prefilled = ask("What is the capital of France?", 8);
    if let Some(turns) = prefilled["messages"].as_array_mut() {
        turns.push(json!({"role": "assistant", "content": "The capital of France is"}));
    }
    let (status, body) = post(&server, "/v1/messages", &prefilled, None).await;
    assert_eq!(status, 200, "{body}");
    assert!(text_of(&body).contains("Paris"), "{body}");

    let (status, count) = post(
        &server,
        "/v1/messages/count_tokens",
        &json!({"model": MODEL, "system": "You are a helpful assistant.", "messages": [{"role": "user", "content": "What is the capital of France?"}]}),
        None,
    )
    .await;
    assert_eq!(status, 200, "{count}");
    let whole = first["usage"]["input_tokens"].as_u64().unwrap_or(0)
        + first["usage"]["cache_read_input_tokens"]
            .as_u64()
            .unwrap_or(0);
    assert_eq!(
        count["input_tokens"].as_u64(),
        Some(whole),
        "{count} vs {first}"
    );
}

#[tokio::test]
async fn a_stream_carries_anthropics_events_and_the_same_text() {
    let server = Server::start(&[]).unwrap();
    let request = ask("What is the capital of France?", 32);
    let (_, whole) = post(&server, "/v1/messages", &request, None).await;
    let mut streaming = request.clone();
    streaming["stream"] = json!(true);
    let events = stream(&server, &streaming).await;
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
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "text_delta", "{d}");
            d["delta"]["text"].as_str().unwrap_or("").to_owned()
        })
        .collect();
    assert_eq!(text, text_of(&whole));
    let delta = &events[n - 2].1;
    assert_eq!(
        delta["delta"]["stop_reason"], whole["stop_reason"],
        "{delta}"
    );
    assert_eq!(
        delta["usage"]["output_tokens"],
        whole["usage"]["output_tokens"]
    );
}

#[tokio::test]
async fn refusals_and_errors_come_in_anthropics_shape() {
    let server = Server::start(&[]).unwrap();
    let mut no_max = ask("Hi", 8);
    no_max.as_object_mut().map(|o| o.remove("max_tokens"));
    let tools = json!([{"name": "add"}]);
    let tool_use = json!([
        {"role": "user", "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {}}]},
    ]);
    let image = json!([{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]);
    let cases: Vec<(Value, &str)> = vec![
        (no_max, "max_tokens"),
        (
            with(ask("Hi", 8), "tools", tools),
            "`tools[0].input_schema`",
        ),
        (
            with(ask("Hi", 8), "tool_choice", json!({"type": "sometimes"})),
            "`tool_choice`",
        ),
        (with(ask("Hi", 8), "messages", tool_use), "tool_use block"),
        (with(ask("Hi", 8), "messages", image), "image block"),
        (
            with(
                ask("Hi", 8),
                "thinking",
                json!({"type": "enabled", "budget_tokens": 1024}),
            ),
            "`thinking`",
        ),
        (with(ask("Hi", 8), "temperature", json!(2)), "`temperature`"),
        (
            with(ask("Hi", 8), "service_tier", json!("auto")),
            "service_tier",
        ),
        (with(ask("Hi", 8), "metadata", json!({"user": "x"})), "user"),
    ];
    for (body, needle) in cases {
        let (status, answer) = post(&server, "/v1/messages", &body, None).await;
        assert_eq!(status, 400, "{answer}");
        let message = anthropic_error(&answer, "invalid_request_error");
        assert!(message.contains(needle), "{needle:?} not in {message:?}");
    }
    let (status, answer) = post(
        &server,
        "/v1/messages",
        &with(ask("Hi", 8), "model", json!("claude-x")),
        None,
    )
    .await;
    assert_eq!(status, 404, "{answer}");
    anthropic_error(&answer, "not_found_error");
    let response = server
        .client
        .post(server.url("/v1/messages"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("sending");
    assert_eq!(response.status().as_u16(), 400);
    let answer: Value = response.json().await.expect("JSON");
    anthropic_error(&answer, "invalid_request_error");
}

fn with(mut base: Value, key: &str, value: Value) -> Value {
    base[key] = value;
    base
}

#[tokio::test]
async fn keys_are_taken_from_x_api_key_and_refused_in_anthropics_shape() {
    let server = Server::start(&["--api-key", KEY]).unwrap();
    let (status, answer) = post(&server, "/v1/messages", &ask("Hi", 4), Some("sk-sf-wrong")).await;
    assert_eq!(status, 401, "{answer}");
    assert!(anthropic_error(&answer, "authentication_error").contains("not valid"));
    let (status, answer) = post(&server, "/v1/messages", &ask("Hi", 4), None).await;
    assert_eq!(status, 401, "{answer}");
    assert!(anthropic_error(&answer, "authentication_error").contains("x-api-key"));
    let (status, answer) = post(&server, "/v1/messages", &ask("Hi", 4), Some(KEY)).await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn the_anthropic_python_client_works_against_the_head() {
    let _serial = serial().await;
    let server = Server::start(&["--api-key", KEY]).expect("starting superfluid serve");
    crate::python_clients::python_cases(
        "anthropic_client.py",
        &server.base,
        &[("SUPERFLUID_TEST_KEY", KEY)],
        &[
            "messages_create",
            "messages_stream",
            "second_turn_reads_the_cache",
            "count_tokens",
            "tool_use_then_tool_result",
            "tool_use_streamed",
            "unknown_field_raises_bad_request",
            "wrong_key_raises_authentication_error",
        ],
        Duration::from_secs(180),
    );
}

//! The exact JSON a client gets: every field, which are null and which are
//! absent, for each kind of answer and stream chunk. Only `created` (the
//! clock) is set to 0 before comparing.

use super::flow_tests::{finished, generation, json_body, sse_data, started};
use super::respond::{self, Envelope, Flavor};
use super::tests::MODEL;
use serde_json::{json, Value};
use superfluid_proto::{FinishReason, GenerateEvent};

/// `value` with its `created` time zeroed.
fn at_zero(mut value: Value) -> Value {
    if let Some(created) = value.get_mut("created") {
        *created = json!(0);
    }
    value
}

/// The stream's `data:` payloads: JSON objects with `created` zeroed, and
/// the final `[DONE]` as a string.
async fn stream(flavor: Flavor, id: &str, end: Option<GenerateEvent>, usage: bool) -> Vec<Value> {
    let (generation, _) = generation("Hi", end, &[]);
    let envelope = Envelope::new(flavor, MODEL, id);
    let response = started(respond::stream(generation, envelope, usage).await);
    sse_data(response)
        .await
        .into_iter()
        .map(|data| match serde_json::from_str(&data) {
            Ok(value) => at_zero(value),
            Err(_) => Value::String(data),
        })
        .collect()
}

async fn complete(flavor: Flavor, id: &str, finish: FinishReason) -> Value {
    let (generation, _) = generation("Hi", finished(finish, 1), &[]);
    let envelope = Envelope::new(flavor, MODEL, id);
    match respond::complete(generation, envelope).await {
        Ok(response) => at_zero(json_body(response).await),
        Err(e) => panic!("{e}"),
    }
}

fn usage() -> Value {
    json!({
        "prompt_tokens": 7,
        "completion_tokens": 1,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 3},
    })
}

#[tokio::test]
async fn chat_completion_has_exactly_the_openai_fields() {
    assert_eq!(
        complete(Flavor::Chat, "s1", FinishReason::Stop).await,
        json!({
            "id": "chatcmpl-s1",
            "object": "chat.completion",
            "created": 0,
            "model": MODEL,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": "Hi"},
                "logprobs": null,
                "finish_reason": "stop",
            }],
            "usage": usage(),
        })
    );
}

#[tokio::test]
async fn text_completion_has_exactly_the_openai_fields() {
    assert_eq!(
        complete(Flavor::Text, "s2", FinishReason::Length).await,
        json!({
            "id": "cmpl-s2",
            "object": "text_completion",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "text": "Hi", "logprobs": null, "finish_reason": "length"}],
            "usage": usage(),
        })
    );
}

#[tokio::test]
async fn chat_stream_chunks_have_exactly_the_openai_fields() {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-s3",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    };
    let usage_chunk = json!({
        "id": "chatcmpl-s3",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [],
        "usage": usage(),
    });
    let end = finished(FinishReason::Stop, 1);
    assert_eq!(
        stream(Flavor::Chat, "s3", end, true).await,
        vec![
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": "Hi"}), Value::Null),
            chunk(json!({}), json!("stop")),
            usage_chunk,
            json!("[DONE]"),
        ]
    );
}

#[tokio::test]
async fn text_stream_chunks_have_exactly_the_openai_fields() {
    let chunk = |text: &str, finish: Value| {
        json!({
            "id": "cmpl-s4",
            "object": "text_completion",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}],
        })
    };
    let end = finished(FinishReason::Length, 1);
    assert_eq!(
        stream(Flavor::Text, "s4", end, false).await,
        vec![
            chunk("Hi", Value::Null),
            chunk("", json!("length")),
            json!("[DONE]"),
        ]
    );
}

#[tokio::test]
async fn stream_error_event_is_the_openai_error_body() {
    let failed = Some(GenerateEvent::Failed {
        message: "node crashed".into(),
    });
    let data = stream(Flavor::Chat, "s5", failed, false).await;
    assert_eq!(
        data.get(data.len().saturating_sub(2)..),
        Some(
            &[
                json!({
                    "error": {
                        "message": "the node could not run the generation: node crashed",
                        "type": "server_error",
                        "param": null,
                        "code": null,
                    }
                }),
                json!("[DONE]"),
            ][..]
        )
    );
}

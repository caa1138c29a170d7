//! The exact JSON a client gets: every field, which are null and which are
//! absent, for each kind of answer and stream chunk, and that each reads
//! back into its [`wire`](super::wire) type and writes the same JSON again.
//! Only `created` (the clock) is set to 0 before comparing.

use super::flow_tests::{finished, generation, json_body, sse_data, started};
use super::respond::{self, Envelope, Flavor};
use super::tests::{send, MODEL};
use super::wire::chat::{ChatCompletion, ChatCompletionChunk};
use super::wire::completion::{TextCompletion, TextCompletionChunk};
use super::wire::error::ErrorBody;
use super::wire::models::ModelList;
use axum::body::Body;
use axum::http::Request;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use superfluid_proto::{FailureKind, FinishReason, GenerateEvent};

/// `value` with its `created` time zeroed.
fn at_zero(mut value: Value) -> Value {
    if let Some(created) = value.get_mut("created") {
        *created = json!(0);
    }
    value
}

/// Fails unless `value` reads into a `T` that writes `value` again.
fn reads_back<T: Serialize + DeserializeOwned>(value: &Value) {
    let typed: T = match serde_json::from_value(value.clone()) {
        Ok(t) => t,
        Err(e) => panic!("{value} is not a {}: {e}", std::any::type_name::<T>()),
    };
    assert_eq!(serde_json::to_value(typed).ok().as_ref(), Some(value));
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
    let body = complete(Flavor::Chat, "s1", FinishReason::Stop).await;
    reads_back::<ChatCompletion>(&body);
    assert_eq!(
        body,
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
    let body = complete(Flavor::Text, "s2", FinishReason::Length).await;
    reads_back::<TextCompletion>(&body);
    assert_eq!(
        body,
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
    let data = stream(Flavor::Chat, "s3", end, true).await;
    data.iter()
        .filter(|d| d.is_object())
        .for_each(reads_back::<ChatCompletionChunk>);
    assert_eq!(
        data,
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
    let data = stream(Flavor::Text, "s4", end, true).await;
    data.iter()
        .filter(|d| d.is_object())
        .for_each(reads_back::<TextCompletionChunk>);
    assert_eq!(
        data,
        vec![
            chunk("Hi", Value::Null),
            chunk("", json!("length")),
            json!({
                "id": "cmpl-s4",
                "object": "text_completion",
                "created": 0,
                "model": MODEL,
                "choices": [],
                "usage": usage(),
            }),
            json!("[DONE]"),
        ]
    );
}

#[tokio::test]
async fn stream_error_event_is_the_openai_error_body() {
    let failed = Some(GenerateEvent::Failed {
        kind: FailureKind::Engine,
        message: "node crashed".into(),
    });
    let data = stream(Flavor::Chat, "s5", failed, false).await;
    let error = data
        .get(data.len().saturating_sub(2))
        .unwrap_or(&Value::Null);
    reads_back::<ErrorBody>(error);
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

#[tokio::test]
async fn model_list_has_the_openai_fields_and_where_each_is_loaded() {
    let (_, body) = send(
        Request::get("/v1/models")
            .body(Body::empty())
            .unwrap_or_default(),
    )
    .await;
    let mut body = body;
    if let Some(Value::Array(cards)) = body.get_mut("data") {
        cards
            .iter_mut()
            .for_each(|card| *card = at_zero(card.take()));
    }
    reads_back::<ModelList>(&body);
    assert_eq!(
        body,
        json!({
            "object": "list",
            // `loaded_on`, the one extension: the nodes that have it loaded
            // (none in this fleet without nodes).
            "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "superfluid", "loaded_on": []}],
        })
    );
}

//! `seed`, `logit_bias`, `echo` and the streamed usage chunk through
//! `superfluid serve` with the real model.

use crate::support::{Server, MODEL};
use serde_json::{json, Value};

const PROMPT: &str = "The capital of France is";

fn completion(extra: Value) -> Value {
    let mut body = json!({"model": MODEL, "prompt": PROMPT, "max_tokens": 6, "temperature": 0});
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    body
}

fn text(body: &Value) -> String {
    body["choices"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {body}"))
        .to_owned()
}

/// The chunks of a stream before `[DONE]`, checking it ends with `[DONE]`
/// preceded by the usage chunk, whose choices are empty.
fn chunks_ending_in_usage(events: &[String]) -> (Vec<Value>, Value) {
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap_or_else(|_| panic!("not JSON: {e}")))
        .collect();
    let (usage, rest) = chunks.split_last().expect("at least the usage chunk");
    assert_eq!(usage["choices"], json!([]), "{usage}");
    assert!(
        usage["usage"]["completion_tokens"].as_u64() > Some(0),
        "{usage}"
    );
    for chunk in rest {
        assert!(
            chunk["usage"].is_null(),
            "usage before the last chunk: {chunk}"
        );
    }
    (rest.to_vec(), usage["usage"].clone())
}

#[tokio::test]
async fn the_same_seed_gives_the_same_text_at_temperature_one() {
    let server = Server::start(&[]).unwrap();
    let request = json!({"model": MODEL, "max_tokens": 32, "temperature": 1.0, "seed": 99,
        "messages": [{"role": "user", "content": "Tell me a short story."}]});
    let (status, first) = server.post("/v1/chat/completions", &request).await.unwrap();
    assert_eq!(status, 200, "{first}");
    let (_, second) = server.post("/v1/chat/completions", &request).await.unwrap();
    let content = |b: &Value| b["choices"][0]["message"]["content"].clone();
    assert!(
        content(&first).as_str().is_some_and(|t| !t.is_empty()),
        "{first}"
    );
    assert_eq!(content(&first), content(&second));
}

#[tokio::test]
async fn logit_bias_forces_a_token_and_an_unknown_token_is_refused() {
    let server = Server::start(&[]).unwrap();
    let forced = completion(json!({"max_tokens": 3, "logit_bias": {"1000": 100}}));
    let (status, body) = server.post("/v1/completions", &forced).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let text = text(&body);
    let third = text.len() / 3;
    assert!(third > 0 && text.len() % 3 == 0, "{text:?}");
    assert_eq!(text, text[..third].repeat(3), "one token three times");

    let unknown = completion(json!({"logit_bias": {"4000000": -100}}));
    let (status, body) = server.post("/v1/completions", &unknown).await.unwrap();
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "logit_bias", "{body}");
    assert_eq!(
        body["error"]["message"],
        "`logit_bias` names token 4000000, but this model's token ids go from 0 to 49151"
    );
}

#[tokio::test]
async fn echo_puts_the_prompt_before_the_completion() {
    let server = Server::start(&[]).unwrap();
    let (_, plain) = server
        .post("/v1/completions", &completion(json!({})))
        .await
        .unwrap();
    let echoed = completion(json!({"echo": true}));
    let (status, body) = server.post("/v1/completions", &echoed).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(text(&body), format!("{PROMPT}{}", text(&plain)));

    let mut streaming = echoed.clone();
    streaming["stream"] = json!(true);
    streaming["stream_options"] = json!({"include_usage": true});
    let (events, _) = server.stream("/v1/completions", &streaming).await.unwrap();
    let (chunks, usage) = chunks_ending_in_usage(&events);
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, text(&body));
    assert_eq!(
        usage["completion_tokens"],
        body["usage"]["completion_tokens"]
    );
}

#[tokio::test]
async fn streamed_chat_sends_the_usage_chunk_last() {
    let server = Server::start(&[]).unwrap();
    let request = json!({"model": MODEL, "max_tokens": 8, "temperature": 0, "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Say hello."}]});
    let (events, _) = server
        .stream("/v1/chat/completions", &request)
        .await
        .unwrap();
    let (chunks, usage) = chunks_ending_in_usage(&events);
    let finish = chunks
        .last()
        .map(|c| c["choices"][0]["finish_reason"].clone());
    assert_eq!(finish, Some(json!("length")), "{chunks:?}");
    assert_eq!(usage["completion_tokens"], 8);
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(8 + usage["prompt_tokens"].as_u64().unwrap_or(0))
    );
}

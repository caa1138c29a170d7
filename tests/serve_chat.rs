//! Chat completions through `superfluid serve` with the real model.

use crate::support::{chat, Server};
use serde_json::{json, Value};

fn france() -> Value {
    json!([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France?"}
    ])
}

fn content(body: &Value) -> String {
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no content in {body}"))
        .to_owned()
}

#[tokio::test]
async fn greedy_capital_of_france_answers_paris() {
    let server = Server::start(&[]).unwrap();
    let (status, body) = server
        .post("/v1/chat/completions", &chat(france(), 48))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(content(&body).contains("Paris"), "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    let usage = &body["usage"];
    assert!(usage["prompt_tokens"].as_u64().unwrap() > 10, "{usage}");
    assert!(usage["completion_tokens"].as_u64().unwrap() > 0, "{usage}");
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
}

#[tokio::test]
async fn streamed_chunks_concatenate_to_the_non_streamed_text() {
    let server = Server::start(&[]).unwrap();
    let request = chat(france(), 40);
    let (status, body) = server.post("/v1/chat/completions", &request).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let whole = content(&body);

    let mut streaming = request.clone();
    streaming["stream"] = json!(true);
    streaming["stream_options"] = json!({"include_usage": true});
    let (events, node) = server
        .stream("/v1/chat/completions", &streaming)
        .await
        .unwrap();
    assert!(
        node.is_some_and(|n| !n.is_empty()),
        "x-superfluid-node header missing on the stream"
    );
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let mut text = String::new();
    let mut finish = None;
    let mut usage = None;
    for e in &events[..events.len() - 1] {
        let chunk: Value = serde_json::from_str(e).unwrap();
        assert_eq!(chunk["object"], "chat.completion.chunk", "{chunk}");
        if let Some(choice) = chunk["choices"].get(0) {
            if let Some(piece) = choice["delta"]["content"].as_str() {
                text.push_str(piece);
            }
            if !choice["finish_reason"].is_null() {
                finish = Some(choice["finish_reason"].clone());
            }
        }
        if !chunk["usage"].is_null() {
            usage = Some(chunk["usage"].clone());
        }
    }
    assert_eq!(text, whole);
    assert_eq!(finish, Some(body["choices"][0]["finish_reason"].clone()));
    let usage = usage.expect("include_usage asks for a usage chunk");
    assert_eq!(
        usage["completion_tokens"],
        body["usage"]["completion_tokens"]
    );
}

#[tokio::test]
async fn follow_up_turn_reports_cached_tokens() {
    let server = Server::start(&[]).unwrap();
    let (status, first) = server
        .post("/v1/chat/completions", &chat(france(), 24))
        .await
        .unwrap();
    assert_eq!(status, 200, "{first}");
    let mut turns = france().as_array().unwrap().clone();
    turns.push(json!({"role": "assistant", "content": content(&first)}));
    turns.push(json!({"role": "user", "content": "And of Italy?"}));
    let (status, second) = server
        .post("/v1/chat/completions", &chat(Value::Array(turns), 24))
        .await
        .unwrap();
    assert_eq!(status, 200, "{second}");
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    let first_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(cached > 0, "{second}");
    assert!(
        cached >= first_prompt - 1,
        "the whole first prompt should be reused: {cached} of {first_prompt}"
    );
}

/// Batched decoding is not bit-identical to decoding alone (llama.cpp's sums
/// run in another order), so long greedy answers may drift apart; each must
/// still answer its own question, which a mix-up between slots would break.
#[tokio::test]
async fn four_concurrent_requests_all_complete_correctly() {
    let server = Server::start(&["--slots", "4"]).unwrap();
    let cases = [
        ("France", "Paris"),
        ("Germany", "Berlin"),
        ("Japan", "Tokyo"),
        ("England", "London"),
    ];
    let answers = futures::future::join_all(cases.iter().map(|(country, _)| {
        let msgs = json!([
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": format!("What is the capital of {country}?")}
        ]);
        let server = &server;
        async move { server.post("/v1/chat/completions", &chat(msgs, 32)).await }
    }))
    .await;
    for ((country, city), answer) in cases.iter().zip(answers) {
        let (status, body) = answer.unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(content(&body).contains(city), "{country}: {body}");
        assert_eq!(body["choices"][0]["finish_reason"], "stop", "{body}");
    }
}

#[tokio::test]
async fn stop_string_ends_the_answer_and_is_not_emitted() {
    let server = Server::start(&[]).unwrap();
    let (_, full) = server
        .post("/v1/chat/completions", &chat(france(), 48))
        .await
        .unwrap();
    let text = content(&full);
    let cut = text
        .find("Paris")
        .expect("the unstopped answer names Paris");
    let mut request = chat(france(), 48);
    request["stop"] = json!(["Paris"]);
    let (status, body) = server.post("/v1/chat/completions", &request).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(content(&body), text[..cut]);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn max_tokens_limits_the_answer_with_finish_reason_length() {
    let server = Server::start(&[]).unwrap();
    let (status, body) = server
        .post("/v1/chat/completions", &chat(france(), 3))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["completion_tokens"], 3);
    assert_eq!(body["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn dropped_stream_frees_its_slot() {
    use futures::StreamExt;
    let server = Server::start(&["--slots", "1"]).unwrap();
    // Greedy counting goes on until max_tokens: minutes of work if never cancelled.
    let endless = json!({
        "model": crate::support::MODEL, "prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "temperature": 0,
        "max_tokens": 4000, "stream": true,
    });
    let resp = server
        .client
        .post(server.url("/v1/completions"))
        .json(&endless)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let first = stream.next().await.expect("one chunk").unwrap();
    assert!(!first.is_empty());
    drop(stream);
    // With one slot, this runs only once the abandoned generation is cancelled.
    let answer = server
        .client
        .post(server.url("/v1/chat/completions"))
        .json(&chat(france(), 8))
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
        .expect("the slot was not freed: the abandoned generation kept running");
    assert_eq!(answer.status(), 200);
}

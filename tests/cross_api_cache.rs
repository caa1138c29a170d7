//! One conversation through the OpenAI, Ollama and Anthropic APIs of one
//! `superfluid serve`: each API is a codec on the one generation path, so
//! each one's second turn finds the conversation's start in the node's
//! cache and says so in its own usage field.

use crate::support::{Server, MODEL};
use serde_json::{json, Value};

const SYSTEM: &str = "You are a helpful assistant.";
const QUESTION: &str = "What is the capital of France?";
const FOLLOW_UP: &str = "And of Italy?";

fn cached(body: &Value, pointer: &str) -> u64 {
    body.pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no {pointer} in {body}"))
}

#[tokio::test]
async fn each_apis_second_turn_reports_the_cached_prompt() {
    let server = Server::start(&[]).expect("starting superfluid serve");
    let first = json!({
        "model": MODEL,
        "temperature": 0,
        "max_tokens": 16,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
        ],
    });
    let (status, answer) = server.post("/v1/chat/completions", &first).await.unwrap();
    assert_eq!(status, 200, "{answer}");
    let reply = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!reply.is_empty(), "{answer}");
    let first_prompt = answer["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    assert!(first_prompt > 10, "{answer}");
    let turns = json!([
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": FOLLOW_UP},
    ]);

    let openai = json!({"model": MODEL, "temperature": 0, "max_tokens": 8, "messages": turns});
    let (status, body) = server.post("/v1/chat/completions", &openai).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let from_openai = cached(&body, "/usage/prompt_tokens_details/cached_tokens");

    let ollama = json!({
        "model": MODEL,
        "stream": false,
        "options": {"temperature": 0, "num_predict": 8},
        "messages": turns,
    });
    let (status, body) = server.post("/api/chat", &ollama).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let from_ollama = cached(&body, "/prompt_cached_count");

    let anthropic = json!({
        "model": MODEL,
        "temperature": 0,
        "max_tokens": 8,
        "system": SYSTEM,
        "messages": [
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": reply},
            {"role": "user", "content": FOLLOW_UP},
        ],
    });
    let (status, body) = server.post("/v1/messages", &anthropic).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let from_anthropic = cached(&body, "/usage/cache_read_input_tokens");

    // The first turn's whole prompt starts the second turn's.
    for (api, count) in [
        ("openai", from_openai),
        ("ollama", from_ollama),
        ("anthropic", from_anthropic),
    ] {
        assert!(
            count >= first_prompt,
            "{api}: {count} cached tokens, fewer than the first turn's {first_prompt}"
        );
    }
}

//! Tool use on Anthropic's Messages API through `superfluid serve` with the
//! real model: a required call answered as a `tool_use` block, then its
//! `tool_result` on the next turn answered with text.

use crate::support::{Server, MODEL};
use serde_json::{json, Value};

fn weather_tool() -> Value {
    json!([{
        "name": "get_weather",
        "description": "The current weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }])
}

async fn post(server: &Server, body: &Value) -> (u16, Value) {
    let response = server
        .client
        .post(server.url("/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .expect("sending the request");
    let status = response.status().as_u16();
    let text = response.text().await.expect("reading the answer");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, body)
}

#[tokio::test]
async fn a_required_tool_use_then_its_result_gets_a_text_answer() {
    let server = Server::start(&[]).unwrap();
    let question = json!({"role": "user", "content": "What is the weather in Paris?"});
    let first = json!({
        "model": MODEL,
        "max_tokens": 64,
        "temperature": 0,
        "tools": weather_tool(),
        "tool_choice": {"type": "any"},
        "messages": [question],
    });
    let (status, answer) = post(&server, &first).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["stop_reason"], "tool_use", "{answer}");
    let blocks = answer["content"].as_array().cloned().unwrap_or_default();
    let call = blocks
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap_or_else(|| panic!("no tool_use block in {answer}"))
        .clone();
    assert_eq!(call["name"], "get_weather", "{answer}");
    assert!(call["input"].is_object(), "{answer}");
    assert!(call["input"]["city"].is_string(), "{answer}");
    let id = call["id"].as_str().unwrap_or("");
    assert!(id.starts_with("toolu_"), "{answer}");

    let second = json!({
        "model": MODEL,
        "max_tokens": 48,
        "temperature": 0,
        "tools": weather_tool(),
        "tool_choice": {"type": "none"},
        "messages": [
            question,
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [{
                "type": "tool_result",
                "tool_use_id": id,
                "content": [{"type": "text", "text": "Sunny, 24 degrees Celsius."}],
            }]},
        ],
    });
    let (status, answer) = post(&server, &second).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["content"][0]["type"], "text", "{answer}");
    let text = answer["content"][0]["text"].as_str().unwrap_or("");
    assert!(!text.trim().is_empty(), "{answer}");
    assert_ne!(answer["stop_reason"], "tool_use", "{answer}");
}

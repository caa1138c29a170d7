//! Tool use on Anthropic's Messages API through `superfluid serve` with the
//! real model: a required call answered as a `tool_use` block, then its
//! `tool_result` on the next turn answered with text, and a named call
//! streamed as `input_json_delta` events.

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

#[tokio::test]
async fn a_streamed_tool_use_sends_its_input_as_json_deltas() {
    let server = Server::start(&[]).unwrap();
    let request = json!({
        "model": MODEL,
        "max_tokens": 64,
        "temperature": 0,
        "stream": true,
        "tools": weather_tool(),
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    });
    let (data, node) = server.stream("/v1/messages", &request).await.unwrap();
    assert!(node.is_some_and(|n| !n.is_empty()), "no node header");
    let events: Vec<Value> = data
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{d}: {e}")))
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds[..2], ["message_start", "ping"], "{kinds:?}");
    // A required call is the whole answer: one tool_use block, index 0.
    assert_eq!(kinds[2], "content_block_start", "{kinds:?}");
    let block = &events[2]["content_block"];
    assert_eq!(block["type"], "tool_use", "{block}");
    assert_eq!(block["name"], "get_weather", "{block}");
    assert_eq!(block["input"], json!({}), "{block}");
    assert!(
        block["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("toolu_")),
        "{block}"
    );
    let n = kinds.len();
    assert_eq!(
        kinds[n - 3..],
        ["content_block_stop", "message_delta", "message_stop"],
        "{kinds:?}"
    );
    let deltas = &events[3..n - 3];
    assert!(!deltas.is_empty(), "{kinds:?}");
    let mut json_text = String::new();
    for delta in deltas {
        assert_eq!(delta["type"], "content_block_delta", "{delta}");
        assert_eq!(delta["index"], 0, "{delta}");
        assert_eq!(delta["delta"]["type"], "input_json_delta", "{delta}");
        json_text.push_str(delta["delta"]["partial_json"].as_str().unwrap_or_default());
    }
    let input: Value = serde_json::from_str(&json_text)
        .unwrap_or_else(|e| panic!("the pieces are not JSON ({e}): {json_text}"));
    assert!(input["city"].is_string(), "{input}");
    assert_eq!(events[n - 2]["delta"]["stop_reason"], "tool_use");
    assert!(
        events[n - 2]["usage"]["output_tokens"]
            .as_u64()
            .unwrap_or(0)
            > 0
    );
}

//! Streamed answers of requests that offer tools, from scripted node
//! events: text, then `tool_use` blocks with `input_json_delta` pieces.

use super::tests::{reply, sse_events};
use super::tools::tool_set;
use crate::api::flow_tests::{finished, generation, started};
use crate::api::tools::ToolSet;
use serde_json::{json, Value};
use superfluid_proto::FinishReason;

fn weather() -> ToolSet {
    let tools = json!([{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    match tool_set(Some(&tools), None) {
        Ok(Some(tools)) => tools,
        other => panic!("{other:?}"),
    }
}

async fn streamed(text: &str, finish: FinishReason) -> Vec<(String, Value)> {
    let (generation, _) = generation(text, finished(finish, 20), &[]);
    let response = super::stream::stream(generation, reply(), Some(weather())).await;
    sse_events(started(response)).await
}

#[tokio::test]
async fn a_call_after_text_is_a_tool_use_block_with_its_input_in_pieces() {
    let text = "Let me check. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>";
    let events = streamed(text, FinishReason::Stop).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..3], ["message_start", "ping", "content_block_start"]);
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str(), "{data}");
    }
    let starts: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(starts.len(), 2, "{names:?}");
    assert_eq!(starts[0]["index"], 0);
    assert_eq!(
        starts[0]["content_block"],
        json!({"type": "text", "text": ""})
    );
    assert_eq!(starts[1]["index"], 1);
    assert_eq!(
        starts[1]["content_block"],
        json!({"type": "tool_use", "id": "toolu_t_0", "name": "get_weather", "input": {}})
    );
    let of = |index: u64, kind: &str| -> String {
        events
            .iter()
            .filter(|(n, d)| n == "content_block_delta" && d["index"] == index)
            .map(|(_, d)| {
                assert_eq!(d["delta"]["type"], kind, "{d}");
                let field = if kind == "text_delta" {
                    "text"
                } else {
                    "partial_json"
                };
                d["delta"][field].as_str().unwrap_or_default().to_owned()
            })
            .collect()
    };
    assert_eq!(of(0, "text_delta"), "Let me check. ");
    assert_eq!(of(1, "input_json_delta"), "{\"city\":\"Paris\"}");
    let pieces = events
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "input_json_delta")
        .count();
    assert!(pieces >= 1);
    let stops: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "content_block_stop")
        .map(|(_, d)| &d["index"])
        .collect();
    assert_eq!(stops, [&json!(0), &json!(1)]);
    let n = names.len();
    assert_eq!(names[n - 2..], ["message_delta", "message_stop"]);
    assert_eq!(events[n - 2].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(events[n - 2].1["usage"]["output_tokens"], 20);
}

#[tokio::test]
async fn a_call_alone_is_block_zero_and_plain_text_stays_text() {
    let call = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>";
    let events = streamed(call, FinishReason::Stop).await;
    let starts: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0]["index"], 0);
    assert_eq!(starts[0]["content_block"]["type"], "tool_use");

    let text = "Sunny. <tool";
    let events = streamed(text, FinishReason::Stop).await;
    let joined: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(joined, text);
    let last_delta = events.iter().rev().find(|(n, _)| n == "message_delta");
    assert_eq!(
        last_delta.map(|(_, d)| d["delta"]["stop_reason"].clone()),
        Some(json!("end_turn"))
    );

    let cut = "<tool_call>{\"name\": \"get_weather\", \"argu";
    let events = streamed(cut, FinishReason::Length).await;
    let joined: String = events
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(joined, cut);
    let last_delta = events.iter().rev().find(|(n, _)| n == "message_delta");
    assert_eq!(
        last_delta.map(|(_, d)| d["delta"]["stop_reason"].clone()),
        Some(json!("max_tokens"))
    );
}

//! Function tools in the sessions API, with the real model: a session
//! created with `tools` generates a call (its `generated` event carries
//! `tool_calls`), the tool's result goes back as a `tool` message naming the
//! call, and the next generation answers with text; mistakes are 400s
//! naming the field.

use serde_json::{json, Value};

use crate::sessions_api::{get, post, serve};
use crate::sessions_crash::temp_dir;
use crate::support::MODEL;

fn weather() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather", "description": "The weather forecast for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                       "required": ["city"], "additionalProperties": false}}}])
}

/// The last event of a generation's answer.
fn last_event(body: &Value) -> Value {
    body["events"]
        .as_array()
        .and_then(|events| events.last())
        .cloned()
        .unwrap_or_else(|| panic!("no events in {body}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_with_tools_calls_one_and_answers_its_result() {
    let dir = temp_dir("sessions-tools");
    let server = serve(&dir, &[]);
    let bad = json!({"model": MODEL, "tools": [{"type": "function", "function": {"name": "a b"}}]});
    let refused = post(&server, "/v1/sessions", &bad).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.body["error"]["param"], "tools[0].function.name");

    let made = post(
        &server,
        "/v1/sessions",
        &json!({"model": MODEL, "tools": weather()}),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let sid = made.body["id"].as_i64().expect("id");
    let messages = format!("/v1/sessions/{sid}/messages");
    let ask = json!({"role": "user", "content": "What will the weather be in Paris tomorrow?"});
    assert_eq!(post(&server, &messages, &ask).await.status, 201);

    let generate = format!("/v1/sessions/{sid}/generate");
    let named = json!({"tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "params": {"max_tokens": 64}});
    let called = post(&server, &generate, &named).await;
    assert_eq!(called.status, 200, "{}", called.body);
    let answer = last_event(&called.body);
    assert_eq!(answer["kind"], "generated", "{answer}");
    assert_eq!(answer["body"]["finish_reason"], "tool_calls", "{answer}");
    let call = &answer["body"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{answer}");
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or(""))
            .unwrap_or_else(|e| panic!("arguments not JSON ({e}): {answer}"));
    assert!(arguments["city"].is_string(), "{arguments}");
    let call_id = call["id"].as_str().expect("a call id").to_owned();

    // The result: a `tool` message naming the call.
    let nameless = json!({"role": "tool", "content": "Sunny, 24 C"});
    let refused = post(&server, &messages, &nameless).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.body["error"]["param"], "tool_call_id");
    let result = json!({"role": "tool", "tool_call_id": call_id, "content": "Sunny, 24 C"});
    assert_eq!(post(&server, &messages, &result).await.status, 201);

    let text = json!({"tool_choice": "none", "params": {"max_tokens": 32}});
    let answered = post(&server, &generate, &text).await;
    assert_eq!(answered.status, 200, "{}", answered.body);
    let answer = last_event(&answered.body);
    assert!(answer["body"].get("tool_calls").is_none(), "{answer}");
    assert!(
        answer["body"]["content"]
            .as_str()
            .is_some_and(|t| !t.trim().is_empty()),
        "{answer}"
    );
    // The call and its result are in the history the prompt was made of.
    let events = get(&server, &format!("/v1/sessions/{sid}/events")).await;
    let kinds: Vec<&str> = events.body["events"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter_map(|e| e["body"]["role"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        kinds,
        ["user", "assistant", "tool", "assistant"],
        "{}",
        events.body
    );
    let _ = std::fs::remove_dir_all(&dir);
}

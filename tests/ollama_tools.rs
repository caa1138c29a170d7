//! Tools on Ollama's `/api/chat` through `superfluid serve` with the real
//! model: what `auto` gives, whole and streamed, a tool's result on the
//! next turn, and the refusals, in Ollama's error shape. The call's shape
//! from scripted node output is checked in the head's unit tests.

use crate::support::{Server, MODEL};
use serde_json::{json, Value};

fn weather() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }}])
}

/// A greedy chat that offers the weather tool.
fn ask(messages: Value, stream: bool) -> Value {
    json!({
        "model": MODEL,
        "messages": messages,
        "tools": weather(),
        "stream": stream,
        "options": {"temperature": 0, "num_predict": 64},
    })
}

/// A request that asks plainly for the call.
fn plainly() -> Value {
    json!([{"role": "user", "content": "Call the get_weather function for Paris."}])
}

/// Checks one call in Ollama's shape: the function's name and its
/// arguments as an object whose `city` is a string; returns the call.
fn assert_call(calls: &Value) -> Value {
    let calls = calls
        .as_array()
        .unwrap_or_else(|| panic!("tool_calls is not an array: {calls}"));
    assert!(!calls.is_empty(), "no call");
    let call = &calls[0];
    let function = call["function"]
        .as_object()
        .unwrap_or_else(|| panic!("no function in {call}"));
    assert_eq!(function.len(), 2, "{call}");
    assert_eq!(call["function"]["name"], "get_weather", "{call}");
    assert!(
        call["function"]["arguments"]["city"].is_string(),
        "arguments must be an object with a city: {call}"
    );
    call.clone()
}

async fn ndjson(server: &Server, body: &Value) -> Vec<Value> {
    let response = server
        .client
        .post(server.url("/api/chat"))
        .json(body)
        .send()
        .await
        .expect("request sent");
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.expect("body read");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?} is not JSON: {e}")))
        .collect()
}

/// The model decides whether to call (Ollama has no `tool_choice`); the
/// small test model answers a plain request for the call with text. Either
/// answer must be well formed: a call in Ollama's shape with `done_reason`
/// stop, or text. Returns the calls, if any.
fn assert_text_or_call(answer: &Value) -> Option<Value> {
    assert_eq!(answer["done"], true, "{answer}");
    assert_eq!(answer["message"]["role"], "assistant", "{answer}");
    let content = answer["message"]["content"].as_str();
    match answer["message"].get("tool_calls") {
        Some(calls) => {
            assert_call(calls);
            assert_eq!(answer["done_reason"], "stop", "{answer}");
            assert!(content.is_some(), "{answer}");
            Some(calls.clone())
        }
        None => {
            assert!(content.is_some_and(|c| !c.trim().is_empty()), "{answer}");
            let reason = &answer["done_reason"];
            assert!(reason == "stop" || reason == "length", "{answer}");
            None
        }
    }
}

#[tokio::test]
async fn auto_answers_whole_and_streamed_alike_and_a_result_gets_text() {
    let server = Server::start(&[]).expect("starting superfluid serve");
    let (status, whole) = server
        .post("/api/chat", &ask(plainly(), false))
        .await
        .unwrap();
    assert_eq!(status, 200, "{whole}");
    let calls = assert_text_or_call(&whole);

    // Streamed, the answer is the same kind: text in pieces, or one line
    // of calls before the last. (A cached prompt may change greedy text
    // a little, so the text itself is not compared.)
    let lines = ndjson(&server, &ask(plainly(), true)).await;
    let (last, before) = lines.split_last().expect("lines");
    assert_eq!(last["done"], true, "{last}");
    assert!(last["message"].get("tool_calls").is_none(), "{last}");
    assert!(before.iter().all(|l| l["done"] == false), "{lines:?}");
    let streamed_calls: Vec<&Value> = before
        .iter()
        .filter_map(|l| l["message"].get("tool_calls"))
        .collect();
    let text: String = lines
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect();
    match (&calls, streamed_calls.as_slice()) {
        (Some(_), [one]) => {
            assert_call(one);
            assert_eq!(last["done_reason"], "stop", "{last}");
        }
        (None, []) => assert!(!text.trim().is_empty(), "{lines:?}"),
        _ => panic!("whole {whole} and streamed {lines:?} differ in kind"),
    }

    // A call the client made, and its result, on the next turn.
    let call = json!({"function": {"name": "get_weather", "arguments": {"city": "Paris"}}});
    let mut turns = plainly().as_array().cloned().unwrap_or_default();
    turns.push(json!({"role": "assistant", "content": "", "tool_calls": [call]}));
    turns.push(json!({"role": "tool", "tool_name": "get_weather", "content": "Sunny, 24 degrees Celsius."}));
    let (status, answer) = server
        .post("/api/chat", &ask(json!(turns), false))
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");
    let reply = answer["message"]["content"].as_str().unwrap_or_default();
    assert!(!reply.trim().is_empty(), "{answer}");
    assert!(answer["message"].get("tool_calls").is_none(), "{answer}");
    assert!(
        answer["prompt_cached_count"].as_u64().unwrap_or(0) > 0,
        "the result's turn should find the question's turn cached: {answer}"
    );
}

#[tokio::test]
async fn misplaced_tool_fields_and_bad_tools_are_refused_naming_them() {
    let server = Server::start(&[]).expect("starting superfluid serve");
    let user = |extra: Value| {
        let mut m = json!({"role": "user", "content": "Hi"});
        if let (Some(m), Some(extra)) = (m.as_object_mut(), extra.as_object()) {
            m.extend(extra.clone());
        }
        json!([m])
    };
    let call = json!([{"function": {"name": "get_weather", "arguments": {}}}]);
    for (body, says) in [
        (
            ask(user(json!({"tool_calls": call})), false),
            "messages[0].tool_calls",
        ),
        (
            ask(user(json!({"tool_name": "get_weather"})), false),
            "messages[0].tool_name",
        ),
        (
            ask(
                json!([{"role": "tool", "tool_name": 3, "content": "x"}]),
                false,
            ),
            "messages[0].tool_name",
        ),
        (
            ask(user(json!({})), false).tap("tools", json!([{"type": "retrieval"}])),
            "tools[0].type",
        ),
        (
            ask(
                json!([{"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": {}}}]}]),
                false,
            ),
            "messages[0].tool_calls[0] must be",
        ),
    ] {
        let (status, answer) = server.post("/api/chat", &body).await.unwrap();
        assert_eq!(status, 400, "{body}: {answer}");
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{body}: {answer}");
        assert_eq!(answer.as_object().map(|o| o.len()), Some(1), "{answer}");
    }
}

/// `value` with `key` set.
trait Tap {
    fn tap(self, key: &str, value: Value) -> Value;
}

impl Tap for Value {
    fn tap(mut self, key: &str, value: Value) -> Value {
        self[key] = value;
        self
    }
}

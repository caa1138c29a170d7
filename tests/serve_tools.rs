//! Tool calling through `superfluid serve` with the real model and the
//! official `openai` Python client (tests/python/openai_tools.py): named and
//! required calls whose arguments validate against their schemas, `auto`,
//! streamed deltas, a tool's result on the next turn, `none`, and refusals.

use std::time::Duration;

use serde_json::json;

use crate::fleet_support::serial;
use crate::python_clients::python_cases;
use crate::support::{chat, Server, MODEL};

#[tokio::test]
async fn the_openai_python_client_calls_tools() {
    let _serial = serial().await;
    let server = Server::start(&["--ctx", "2048"]).expect("starting superfluid serve");
    python_cases(
        "openai_tools.py",
        &server.url("/v1"),
        &[],
        &[
            "named_tool_choice_returns_that_function_with_valid_arguments",
            "required_returns_a_call",
            "auto_returns_text_or_a_call",
            "streamed_tool_call_deltas_assemble_to_valid_json",
            "a_tool_result_on_the_next_turn_gets_a_text_answer",
            "tool_choice_none_gets_no_call",
            "bad_tools_get_a_400_naming_the_field",
        ],
        Duration::from_secs(400),
    );
}

#[tokio::test]
async fn tools_on_completions_and_a_tool_message_without_its_call_id_are_refused() {
    let server = Server::start(&[]).expect("serve starts");
    let tools = json!([{"type": "function", "function": {"name": "f"}}]);
    let completion = json!({"model": MODEL, "prompt": "Hi", "max_tokens": 4, "tools": tools});
    let (status, body) = server
        .post("/v1/completions", &completion)
        .await
        .expect("completion");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "tools", "{body}");

    let mut orphan = chat(
        json!([{"role": "user", "content": "Hi"}, {"role": "tool", "content": "42"}]),
        4,
    );
    orphan["tools"] = tools;
    let (status, body) = server
        .post("/v1/chat/completions", &orphan)
        .await
        .expect("chat");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "messages[1].tool_call_id", "{body}");
}

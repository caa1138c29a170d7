use serde_json::{json, Value};

use super::super::extract::parse;
use super::super::tools::Choice;
use super::super::ApiError;
use super::reply::{Echo, ResponseView, Status};
use super::request::{Checked, InputMessage, ResponsesBody};
use super::tools::Tools;
use super::turn::TurnRef;
use crate::sessions::{EventId, SessionId};

fn check(body: Value) -> Result<Checked, ApiError> {
    parse::<ResponsesBody>(body.to_string().as_bytes())?.check()
}

fn refused_param(body: Value) -> (String, String) {
    match check(body) {
        Err(ApiError::InvalidParam { param, message }) => (param, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn response_ids_name_the_session_and_event_and_nothing_else_parses() {
    let turn = TurnRef {
        session: SessionId(12),
        prompt: EventId(345),
    };
    assert_eq!(turn.response_id(), "resp_12_345");
    assert_eq!(TurnRef::parse("resp_12_345"), Some(turn));
    for bad in [
        "resp_12",
        "resp_x_1",
        "resp_1_-2",
        "msg_1_2",
        "resp__1",
        "resp_1_2_3",
        "resp_18f3a0c10001",
    ] {
        assert_eq!(TurnRef::parse(bad), None, "{bad}");
    }
}

#[test]
fn a_string_input_is_one_user_message() {
    let checked = check(json!({"model": "m", "input": "hi"})).unwrap();
    assert_eq!(
        checked.input,
        vec![InputMessage {
            role: "user".into(),
            text: "hi".into(),
            ..InputMessage::default()
        }]
    );
    assert!(checked.store, "store defaults to true");
    assert!(!checked.stream);
}

#[test]
fn message_items_take_strings_and_input_text_parts() {
    let checked = check(json!({"model": "m", "input": [
        {"role": "developer", "content": "be brief"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}
        ]},
    ], "max_output_tokens": 9, "temperature": 0, "top_p": 0.5}))
    .unwrap();
    let roles: Vec<_> = checked.input.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user"]);
    assert_eq!(checked.input[1].text, "ab");
    assert_eq!(checked.settings["max_tokens"], 9);
    assert_eq!(checked.settings["top_p"], 0.5);
}

#[test]
fn unsupported_fields_are_refused_by_name() {
    for field in [
        "tools",
        "max_tool_calls",
        "reasoning",
        "background",
        "metadata",
        "include",
        "whatever",
    ] {
        let mut body = json!({"model": "m", "input": "hi"});
        body[field] = json!({"x": 1});
        let (param, message) = refused_param(body);
        assert_eq!(param, field);
        assert!(message.contains(field), "{message}");
    }
    let (param, _) = refused_param(
        json!({"model": "m", "input": "hi", "text": {"format": {"type": "json_object"}}}),
    );
    assert_eq!(param, "text");
}

#[test]
fn defaults_that_ask_for_nothing_new_are_taken() {
    check(
        json!({"model": "m", "input": "hi", "tools": [], "text": {"format": {"type": "text"}},
        "truncation": "disabled", "metadata": {}, "include": [], "reasoning": null}),
    )
    .unwrap();
}

#[test]
fn bad_input_names_the_item_at_fault() {
    let (param, _) = refused_param(json!({"model": "m"}));
    assert_eq!(param, "input");
    let (param, _) = refused_param(json!({"model": "m", "input": []}));
    assert_eq!(param, "input");
    let (param, _) =
        refused_param(json!({"model": "m", "input": [{"role": "robot", "content": "x"}]}));
    assert_eq!(param, "input[0].role");
    let (param, message) = refused_param(json!({"model": "m", "input": [
        {"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}));
    assert_eq!(param, "input[0].content[0].type");
    assert!(message.contains("input_image"), "{message}");
    let (param, _) = refused_param(
        json!({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}),
    );
    assert_eq!(param, "input[0].call_id");
    let (param, _) =
        refused_param(json!({"model": "m", "input": [{"type": "reasoning", "summary": []}]}));
    assert_eq!(param, "input[0].type");
}

#[test]
fn model_is_needed_unless_continuing_and_token_limits_are_positive() {
    let (param, _) = refused_param(json!({"input": "hi"}));
    assert_eq!(param, "model");
    check(json!({"input": "hi", "previous_response_id": "resp_1_2"})).unwrap();
    let (param, _) = refused_param(json!({"model": "m", "input": "hi", "max_output_tokens": 0}));
    assert_eq!(param, "max_output_tokens");
}

fn weather() -> Value {
    json!({"type": "function", "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
        "required": ["city"], "additionalProperties": false}, "strict": true})
}

#[test]
fn function_tools_are_read_in_the_responses_shape() {
    let checked = check(
        json!({"model": "m", "input": "weather in Paris?", "tools": [weather()],
        "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": false}),
    )
    .unwrap();
    let set = checked.tools.set.as_ref().expect("a tool set");
    assert_eq!(set.functions[0].name, "get_weather");
    assert_eq!(set.choice, Choice::Named("get_weather".into()));
    assert!(!set.parallel);
    assert_eq!(checked.tools.given["tools"][0]["name"], "get_weather");
    assert_eq!(checked.tools.given["parallel_tool_calls"], false);
    // A round trip through what a stored turn keeps.
    assert_eq!(Tools::from_given(&checked.tools.given), checked.tools);
}

#[test]
fn hosted_tools_and_bad_functions_are_refused_by_their_field() {
    let (param, message) =
        refused_param(json!({"model": "m", "input": "hi", "tools": [{"type": "web_search"}]}));
    assert_eq!(param, "tools[0].type");
    assert!(message.contains("web_search"), "{message}");
    let (param, _) = refused_param(
        json!({"model": "m", "input": "hi", "tools": [{"type": "function", "name": "a b"}]}),
    );
    assert_eq!(param, "tools[0].name");
    let (param, _) = refused_param(json!({"model": "m", "input": "hi", "tools": [weather()],
        "tool_choice": {"type": "function", "name": "nope"}}));
    assert_eq!(param, "tool_choice");
}

#[test]
fn calls_and_their_outputs_become_the_conversations_tool_messages() {
    let checked = check(json!({"model": "m", "tools": [weather()], "input": [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{\"city\":\"Rome\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": "rain"},
    ]}))
    .unwrap();
    let roles: Vec<_> = checked.input.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool"]);
    let assistant = checked.input[1].event_body();
    assert_eq!(assistant["tool_calls"][1]["id"], "call_2");
    assert_eq!(
        assistant["tool_calls"][0]["function"]["name"],
        "get_weather"
    );
    assert_eq!(checked.input[2].event_body()["tool_call_id"], "call_1");
    assert_eq!(checked.input[3].text, "rain");
}

#[test]
fn an_answer_with_a_call_is_a_function_call_item() {
    let checked = check(json!({"model": "m", "input": "hi", "tools": [weather()]})).unwrap();
    let mut view = ResponseView {
        id: "resp_12_345".into(),
        message_id: "msg_12_345".into(),
        created_at: 0,
        status: Status::Completed,
        echo: Echo {
            tools: checked.tools,
            ..Echo::default()
        },
        text: Some("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>".into()),
        usage: None,
        error: None,
    };
    let output = view.output();
    assert_eq!(output.len(), 1, "{output:?}");
    assert_eq!(output[0]["type"], "function_call");
    assert_eq!(output[0]["call_id"], "call_12_345_0");
    assert_eq!(output[0]["name"], "get_weather");
    let arguments: Value = serde_json::from_str(output[0]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Paris"}));
    assert_eq!(view.body()["tools"][0]["name"], "get_weather");
    // Text that holds no call stays a message.
    view.text = Some("It is sunny.".into());
    let output = view.output();
    assert_eq!(output.len(), 1);
    assert_eq!(output[0]["type"], "message");
    assert_eq!(output[0]["content"][0]["text"], "It is sunny.");
}

use serde_json::{json, Value};

use super::super::extract::parse;
use super::super::ApiError;
use super::request::{Checked, InputMessage, ResponsesBody};
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
            text: "hi".into()
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

use serde_json::{json, Value};

use super::{enforce, offer};
use crate::api::extract::parse;
use crate::api::generate::prompt::Prompt;
use crate::api::tools::ToolSet;
use crate::api::types::{CompletionRequest, Endpoint, Params};
use crate::api::ApiError;
use crate::codec::ChatMessage;

fn params(body: Value) -> Params {
    let req: CompletionRequest = parse(body.to_string().as_bytes()).expect("a request");
    req.openai_params(Endpoint::Chat).expect("its parameters")
}

fn weather(choice: Value) -> ToolSet {
    let tools = json!([{"type": "function", "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }}]);
    ToolSet::from_request(Some(&tools), Some(&choice), None)
        .expect("valid tools")
        .expect("tools offered")
}

fn refused_param(result: Result<(), ApiError>) -> String {
    match result {
        Err(ApiError::InvalidParam { param, .. }) => param,
        other => panic!("not refused: {other:?}"),
    }
}

const BASE: &str = r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]"#;

fn body(extra: &str) -> Value {
    serde_json::from_str(&format!("{BASE}{extra}}}")).expect("json")
}

#[test]
fn a_required_call_becomes_the_constraint() {
    let mut p = params(body(""));
    enforce(&weather(json!("required")), &mut p).expect("enforced");
    assert!(p.constraint.is_some(), "a required call is constrained");
    let mut p = params(body(""));
    enforce(&weather(json!("auto")), &mut p).expect("enforced");
    assert!(p.constraint.is_none(), "an optional call is not");
}

#[test]
fn what_cannot_go_beside_tools_is_refused_naming_the_field() {
    let mut p = params(body(r#", "n": 2"#));
    assert_eq!(refused_param(enforce(&weather(json!("auto")), &mut p)), "n");
    let mut p = params(body(r#", "logprobs": true"#));
    assert_eq!(
        refused_param(enforce(&weather(json!("auto")), &mut p)),
        "logprobs"
    );
    let mut p = params(body(r#", "response_format": {"type": "json_object"}"#));
    assert_eq!(
        refused_param(enforce(&weather(json!("required")), &mut p)),
        "tool_choice"
    );
}

#[test]
fn tools_are_described_in_a_conversation_and_refused_for_raw_text() {
    let tools = weather(json!("auto"));
    let chat = Prompt::chat(vec![ChatMessage::new("user", "hi")]);
    let Ok(Prompt::Chat { messages, .. }) = offer(chat, &tools) else {
        panic!("a conversation stays one");
    };
    assert!(
        messages.iter().any(|m| m.content.contains("get_weather")),
        "the tools are described: {messages:?}"
    );
    match offer(Prompt::Raw("hi".into()), &tools) {
        Err(ApiError::InvalidParam { param, .. }) => assert_eq!(param, "tools"),
        other => panic!("raw text with tools was not refused: {other:?}"),
    }
}

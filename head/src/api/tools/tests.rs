use serde_json::{json, Value};
use superfluid_proto::Constraint;

use super::grammar::constraint;
use super::parse::parse;
use super::prompt::{assistant_calls, with_tools};
use super::split::{partial_tag, pieces};
use super::{Choice, ToolSet};
use crate::api::ApiError;
use crate::codec::ChatMessage;

fn weather() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }}])
}

fn set(tools: Value, choice: Value) -> Result<Option<ToolSet>, ApiError> {
    ToolSet::from_request(Some(&tools), Some(&choice), None)
}

fn refused(tools: Value, choice: Value) -> String {
    match set(tools, choice) {
        Err(ApiError::InvalidParam { param, .. }) => param,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn bad_tools_are_refused_naming_the_field() {
    let not_function = json!([{"type": "retrieval"}]);
    assert_eq!(refused(not_function, Value::Null), "tools[0].type");
    let bad_schema = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string", "pattern": "(a"}}}}}]);
    assert_eq!(
        refused(bad_schema, Value::Null),
        "tools[0].function.parameters"
    );
    let not_object =
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]);
    assert_eq!(
        refused(not_object, Value::Null),
        "tools[0].function.parameters"
    );
    let no_name = json!([{"type": "function", "function": {"parameters": {}}}]);
    assert_eq!(refused(no_name, Value::Null), "tools[0].function.name");
    let unknown = json!({"type": "function", "function": {"name": "nope"}});
    assert_eq!(refused(weather(), unknown), "tool_choice");
    assert_eq!(refused(weather(), json!("sometimes")), "tool_choice");
    assert_eq!(refused(json!("f"), Value::Null), "tools");
}

#[test]
fn tool_choice_is_read_in_each_form() {
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    for (choice, expected) in [
        (Value::Null, Choice::Auto),
        (json!("auto"), Choice::Auto),
        (json!("none"), Choice::None),
        (json!("required"), Choice::Required),
        (named, Choice::Named("get_weather".into())),
    ] {
        let tools = set(weather(), choice).ok().flatten().expect("tools");
        assert_eq!(tools.choice, expected);
        assert!(tools.parallel);
    }
    assert_eq!(set(json!([]), json!("none")).ok(), Some(None));
}

#[test]
fn tools_are_described_in_the_system_message_and_calls_rendered() {
    let tools = set(weather(), Value::Null).ok().flatten().expect("tools");
    let messages = with_tools(vec![ChatMessage::new("user", "Weather in Paris?")], &tools);
    assert_eq!(messages[0].role, "system");
    assert!(messages[0].content.contains("<tools>"));
    assert!(messages[0].content.contains("\"get_weather\""));
    let none = set(weather(), json!("none")).ok().flatten().expect("tools");
    let plain = with_tools(vec![ChatMessage::new("user", "Hi")], &none);
    assert_eq!(plain.len(), 1);

    let calls = json!([{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]);
    let text = assistant_calls(String::new(), &calls, 1).expect("rendered");
    assert_eq!(
        text,
        "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call>"
    );
    let bad =
        json!([{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{"}}]);
    match assistant_calls(String::new(), &bad, 3) {
        Err(ApiError::InvalidParam { param, .. }) => {
            assert_eq!(param, "messages[3].tool_calls[0].function.arguments")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn calls_are_parsed_and_unreadable_ones_stay_text() {
    let tools = set(weather(), Value::Null).ok().flatten().expect("tools");
    let text =
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>";
    let parsed = parse(text, &tools).expect("a call");
    assert_eq!(parsed.content, None);
    assert_eq!(parsed.calls[0].name, "get_weather");
    assert_eq!(parsed.calls[0].arguments, "{\"city\":\"Paris\"}");
    let two = format!("Let me look.\n{text}\n{text}");
    let parsed = parse(&two, &tools).expect("two calls");
    assert_eq!(parsed.content.as_deref(), Some("Let me look."));
    assert_eq!(parsed.calls.len(), 2);
    for unreadable in [
        "It is sunny.",
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\"",
        "<tool_call>{\"name\": \"unknown\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": 3}</tool_call>",
    ] {
        assert_eq!(parse(unreadable, &tools), None, "{unreadable}");
    }
}

#[test]
fn a_required_call_is_a_lark_grammar_that_compiles() {
    let required = set(weather(), json!("required"))
        .ok()
        .flatten()
        .expect("tools");
    match constraint(&required) {
        Ok(Some(Constraint::Lark(lark))) => {
            assert!(lark.starts_with("start: \"<tool_call>\" %json"), "{lark}");
            assert!(lark.contains("\"const\":\"get_weather\""), "{lark}");
        }
        other => panic!("{other:?}"),
    }
    let auto = set(weather(), Value::Null).ok().flatten().expect("tools");
    assert_eq!(constraint(&auto).ok(), Some(None));
}

#[test]
fn streamed_text_holds_back_only_what_may_start_a_call() {
    assert_eq!(partial_tag("Hello <tool"), "<tool".len());
    assert_eq!(partial_tag("Hello"), 0);
    assert_eq!(partial_tag("a <"), 1);
    assert_eq!(
        pieces("{\"city\":\"Zürich\"}", 4).concat(),
        "{\"city\":\"Zürich\"}"
    );
    assert!(pieces("", 4).is_empty());
}

fn weather_tools() -> ToolSet {
    match set(weather(), Value::Null) {
        Ok(Some(tools)) => tools,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_streamed_call_is_sent_as_openai_deltas_after_the_text_before_it() {
    use crate::api::flow_tests::{finished, generation, sse_data, started};
    use crate::api::respond::{Envelope, Flavor};
    use crate::api::tests::MODEL;
    let text = "Let me check. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>";
    let (generation, _) = generation(
        text,
        finished(superfluid_proto::FinishReason::Stop, 30),
        &[],
    );
    let envelope = Envelope::new(Flavor::Chat, MODEL, "t9");
    let response = super::respond::stream(generation, envelope, false, weather_tools()).await;
    let events = sse_data(started(response)).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events
        .iter()
        .filter_map(|e| serde_json::from_str(e).ok())
        .collect();
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "Let me check. ");
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
        .collect();
    assert_eq!(calls[0]["index"], 0);
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert_eq!(calls[0]["function"]["arguments"], "");
    assert!(calls[0]["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("call_")));
    let arguments: String = calls[1..]
        .iter()
        .map(|c| {
            assert!(
                c.get("id").is_none() && c["function"].get("name").is_none(),
                "{c}"
            );
            c["function"]["arguments"].as_str().unwrap_or_default()
        })
        .collect();
    assert_eq!(arguments, "{\"city\":\"Paris\"}");
    let finishes: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finishes, [&json!("tool_calls")]);
}

#[tokio::test]
async fn a_call_cut_by_the_token_limit_is_answered_as_text() {
    use crate::api::flow_tests::{finished, generation, json_body};
    use crate::api::respond::{Envelope, Flavor};
    use crate::api::tests::MODEL;
    let text = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"ci";
    let (generation, _) = generation(
        text,
        finished(superfluid_proto::FinishReason::Length, 12),
        &[],
    );
    let envelope = Envelope::new(Flavor::Chat, MODEL, "t10");
    let body = match super::respond::complete(generation, envelope, &weather_tools()).await {
        Ok(response) => json_body(response).await,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(body["choices"][0]["message"]["content"], text);
    assert!(
        body["choices"][0]["message"].get("tool_calls").is_none(),
        "{body}"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "length");
}

#[test]
fn parameters_nested_too_deep_are_refused_naming_them() {
    let mut deep = json!({"type": "string"});
    for _ in 0..crate::api::structured::MAX_SCHEMA_DEPTH {
        deep = json!({"type": "object", "properties": {"a": deep}});
    }
    let tools = json!([{"type": "function", "function": {"name": "f", "parameters": deep}}]);
    match set(tools, json!("required")) {
        Err(ApiError::InvalidParam { param, message }) => {
            assert_eq!(param, "tools[0].function.parameters");
            assert!(message.contains("levels deep"), "{message}");
        }
        other => panic!("not refused: {other:?}"),
    }
}

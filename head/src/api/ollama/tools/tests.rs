use super::super::request::ChatRequest;
use crate::api::extract::parse;
use crate::api::tools::parse::ParsedCall;
use crate::api::tools::prompt;
use crate::codec::ChatMessage;
use serde_json::json;

fn messages(body: serde_json::Value) -> Vec<ChatMessage> {
    let req: ChatRequest = match parse(body.to_string().as_bytes()) {
        Ok(req) => req,
        Err(e) => panic!("{e}"),
    };
    let openai = match req.to_openai() {
        Ok(openai) => openai,
        Err(e) => panic!("{e}"),
    };
    assert!(openai.tools.is_some());
    match openai.chat_messages() {
        Ok(messages) => messages,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn calls_and_results_are_the_prompt_text_of_openais() {
    let got = messages(json!({
        "model": "m",
        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
            ]},
            {"role": "tool", "tool_name": "get_weather", "content": "Sunny"},
        ],
    }));
    assert_eq!(got.len(), 3);
    assert_eq!(got[1].role, "assistant");
    assert_eq!(
        got[1].content,
        "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call>"
    );
    assert_eq!(got[2].role, "user");
    assert_eq!(
        got[2].content,
        prompt::tool_result(Some("get_weather"), "Sunny")
    );
}

#[test]
fn calls_are_answered_with_arguments_as_an_object() {
    let calls = [ParsedCall {
        name: "get_weather".into(),
        arguments: "{\"city\":\"Paris\"}".into(),
    }];
    assert_eq!(
        super::calls(&calls),
        json!([{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}])
    );
}

#[tokio::test]
async fn a_streamed_call_is_one_line_before_the_last() {
    use super::super::reply::{stream, Kind, Reply};
    use crate::api::flow_tests::{finished, generation};
    use crate::api::tests::MODEL;
    use crate::api::tools::ToolSet;
    use http_body_util::BodyExt;
    use std::time::Instant;
    let tools = json!([{"type": "function", "function": {"name": "get_weather"}}]);
    let tools = match ToolSet::from_request(Some(&tools), None, None) {
        Ok(Some(tools)) => tools,
        other => panic!("{other:?}"),
    };
    let text = "Checking. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>";
    let (generation, _) = generation(
        text,
        finished(superfluid_proto::FinishReason::Stop, 20),
        &[],
    );
    let now = Instant::now();
    let reply = Reply::new(Kind::Chat, MODEL, now, now);
    let response = match stream(generation, reply, Some(tools)).await {
        Ok(response) => response,
        Err(e) => panic!("{e}"),
    };
    let bytes = match response.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => panic!("{e}"),
    };
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&bytes)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_default())
        .collect();
    let (last, before) = match lines.split_last() {
        Some(split) => split,
        None => panic!("no lines"),
    };
    assert_eq!(last["done"], true);
    assert_eq!(last["done_reason"], "stop");
    let content: String = lines
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect();
    assert_eq!(content, "Checking. ");
    let call_line = &before[before.len() - 1];
    assert_eq!(call_line["done"], false);
    assert_eq!(
        call_line["message"]["tool_calls"],
        json!([{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}])
    );
    assert!(before[..before.len() - 1]
        .iter()
        .all(|l| l["message"].get("tool_calls").is_none()));
}

//! Tool calling on `/api/chat`, through the one tools module
//! ([`crate::api::tools`]): an assistant message's `tool_calls` and a
//! `tool` message's result (named by `tool_name`) become the same prompt
//! text as OpenAI's, and the model's calls are answered in Ollama's shape,
//! `[{"function": {"name": ..., "arguments": {...}}}]`, arguments as an
//! object.

use super::super::tools::parse::ParsedCall;
use super::super::tools::prompt;
use super::super::types::RequestMessage;
use super::request::Message;
use super::OllamaError;
use serde_json::{json, Value};

#[cfg(test)]
mod tests;

/// Message `i` of a chat as the OpenAI message it stands for; a `tool`
/// message is its result, rendered as OpenAI's `tool` messages are.
pub fn message(i: usize, m: &Message) -> Result<RequestMessage, OllamaError> {
    let content = m.content.clone().unwrap_or_default();
    let calls = m.tool_calls.clone().unwrap_or(Value::Null);
    let has_calls = match &calls {
        Value::Null => false,
        Value::Array(items) => !items.is_empty(),
        _ => true,
    };
    if has_calls && m.role != "assistant" {
        return Err(OllamaError::field(
            &format!("messages[{i}].tool_calls"),
            format!("`messages[{i}].tool_calls`: only assistant messages carry calls, and this one has role {:?}; send the calls in the assistant message that made them", m.role),
        ));
    }
    let name_field = format!("messages[{i}].tool_name");
    let tool_name = match &m.tool_name {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if m.role == "tool" => Some(name.as_str()),
        Some(Value::String(_)) => {
            return Err(OllamaError::field(
                &name_field,
                format!("`{name_field}`: only tool messages carry a tool's name, and this one has role {:?}; send it with role \"tool\" or without `tool_name`", m.role),
            ))
        }
        Some(_) => {
            return Err(OllamaError::field(
                &name_field,
                format!("`{name_field}` must be the name of the tool whose result the message carries"),
            ))
        }
    };
    if m.role == "tool" {
        let result = prompt::tool_result(tool_name.filter(|n| !n.is_empty()), &content);
        return Ok(RequestMessage {
            role: "user".into(),
            content: Value::String(result),
            tool_calls: Value::Null,
            tool_call_id: None,
        });
    }
    Ok(RequestMessage {
        role: m.role.clone(),
        content: Value::String(content),
        tool_calls: calls,
        tool_call_id: None,
    })
}

/// `message.tool_calls` in Ollama's shape.
pub fn calls(calls: &[ParsedCall]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|call| {
            let arguments: Value =
                serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
            json!({"function": {"name": call.name, "arguments": arguments}})
        })
        .collect();
    Value::Array(calls)
}

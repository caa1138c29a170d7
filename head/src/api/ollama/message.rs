//! One message of Ollama's `/api/chat`, and the OpenAI message it stands
//! for: an assistant message's `tool_calls` and a `tool` message's result
//! (named by `tool_name`) become the same prompt text as OpenAI's.

use super::super::tools::prompt;
use super::super::types::RequestMessage;
use crate::api::ApiError;
use serde::Deserialize;
use serde_json::Value;

/// One chat message.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text.
    #[serde(default)]
    pub content: Option<String>,
    /// Base64 images (not supported).
    pub images: Option<Value>,
    /// Calls the assistant made: `[{"function": {"name", "arguments"}}]`.
    pub tool_calls: Option<Value>,
    /// The tool whose result a `tool` message carries.
    pub tool_name: Option<Value>,
    /// An earlier answer's reasoning (not supported).
    pub thinking: Option<Value>,
}

/// Message `i` of a chat as the OpenAI message it stands for; a `tool`
/// message is its result, rendered as OpenAI's `tool` messages are.
pub fn to_openai(i: usize, m: &Message) -> Result<RequestMessage, ApiError> {
    let content = m.content.clone().unwrap_or_default();
    let calls = m.tool_calls.clone().unwrap_or(Value::Null);
    let has_calls = match &calls {
        Value::Null => false,
        Value::Array(items) => !items.is_empty(),
        _ => true,
    };
    if has_calls && m.role != "assistant" {
        return Err(ApiError::param(
            format!("messages[{i}].tool_calls"),
            format!("`messages[{i}].tool_calls`: only assistant messages carry calls, and this one has role {:?}; send the calls in the assistant message that made them", m.role),
        ));
    }
    let name_field = format!("messages[{i}].tool_name");
    let tool_name = match &m.tool_name {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if m.role == "tool" => Some(name.as_str()),
        Some(Value::String(_)) => {
            return Err(ApiError::param(
                &name_field,
                format!("`{name_field}`: only tool messages carry a tool's name, and this one has role {:?}; send it with role \"tool\" or without `tool_name`", m.role),
            ))
        }
        Some(_) => {
            return Err(ApiError::param(
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

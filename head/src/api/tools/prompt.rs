//! The tools, the assistant's calls and the tools' results as prompt text.
//!
//! The format is Hermes's, which llama.cpp's server also uses for models
//! whose chat template has no tool format: the functions as JSON inside
//! `<tools></tools>` in the system message, each call as
//! `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the
//! assistant's turn, and each result as
//! `<tool_response>...</tool_response>` in a user turn (templates without a
//! tool format do not know a `tool` role).

use serde_json::{json, Value};

use super::spec::ToolSet;
use crate::api::ApiError;
use crate::codec::ChatMessage;

/// The tag that opens a call in the model's text.
pub const CALL_OPEN: &str = "<tool_call>";
/// The tag that closes a call.
pub const CALL_CLOSE: &str = "</tool_call>";

/// `messages` with the tools' description at the start of the system
/// message (a new one when there is none). Tools with `tool_choice: "none"`
/// are not described.
pub fn with_tools(mut messages: Vec<ChatMessage>, tools: &ToolSet) -> Vec<ChatMessage> {
    if !tools.offered() {
        return messages;
    }
    let described = describe(tools);
    match messages.first_mut() {
        Some(first) if first.role == "system" => {
            first.content = format!("{}\n\n{described}", first.content);
        }
        _ => messages.insert(0, ChatMessage::new("system", described)),
    }
    messages
}

/// The system text that offers the tools.
fn describe(tools: &ToolSet) -> String {
    let mut text = String::from(
        "You may call functions to help with the user's request. The functions are given as JSON inside <tools></tools>:\n<tools>\n",
    );
    for f in &tools.functions {
        let mut spec = json!({"name": f.name, "parameters": f.parameters});
        if let Some(d) = &f.description {
            spec["description"] = json!(d);
        }
        let tool = json!({"type": "function", "function": spec});
        text.push_str(&tool.to_string());
        text.push('\n');
    }
    text.push_str("</tools>\nTo call a function, answer with a JSON object giving its name and arguments inside <tool_call></tool_call> tags:\n");
    text.push_str(
        "<tool_call>{\"name\": <function-name>, \"arguments\": <arguments-object>}</tool_call>\n",
    );
    if tools.parallel {
        text.push_str("You may call several functions, one <tool_call> after another. ");
    }
    text.push_str("Results come back inside <tool_response></tool_response> tags. Answer with text when no function is needed.");
    text
}

/// The text of an assistant message with `tool_calls`: its content, then
/// each call in a `<tool_call>` tag.
///
/// # Errors
/// [`ApiError::InvalidParam`] naming `messages[i].tool_calls...` when a call
/// is not `{"id", "type": "function", "function": {"name", "arguments"}}`.
pub fn assistant_calls(content: String, calls: &Value, i: usize) -> Result<String, ApiError> {
    let param = format!("messages[{i}].tool_calls");
    let Some(calls) = calls.as_array() else {
        if calls.is_null() {
            return Ok(content);
        }
        return Err(ApiError::param(
            param.clone(),
            format!("`{param}` must be an array of tool calls"),
        ));
    };
    let mut text = content;
    for (j, call) in calls.iter().enumerate() {
        let at = format!("{param}[{j}]");
        let function = call.get("function");
        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
        let Some(name) = name else {
            return Err(ApiError::param(
                format!("{at}.function.name"),
                format!("{at} must be {{\"id\": ..., \"type\": \"function\", \"function\": {{\"name\": ..., \"arguments\": \"{{...}}\"}}}}"),
            ));
        };
        // OpenAI sends the arguments as JSON text; an object is taken too.
        let arguments = match function.and_then(|f| f.get("arguments")) {
            None | Some(Value::Null) => json!({}),
            Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| {
                ApiError::param(
                    format!("{at}.function.arguments"),
                    format!("{at}.function.arguments is not JSON ({e}); send the arguments the call was answered with"),
                )
            })?,
            Some(v) => v.clone(),
        };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(CALL_OPEN);
        text.push_str(&json!({"name": name, "arguments": arguments}).to_string());
        text.push_str(CALL_CLOSE);
    }
    Ok(text)
}

/// The text of a `tool` message: its result in a `<tool_response>` tag,
/// with the name of the function whose call it answers when known.
pub fn tool_result(name: Option<&str>, content: &str) -> String {
    let body = match name {
        Some(name) => json!({"name": name, "content": content}).to_string(),
        None => content.to_owned(),
    };
    format!("<tool_response>\n{body}\n</tool_response>")
}

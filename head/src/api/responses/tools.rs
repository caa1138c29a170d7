//! Function tools on the Responses API: `tools`, `tool_choice` and
//! `parallel_tool_calls` in the Responses shape (`{"type": "function",
//! "name": ..., "parameters": {...}}`), read into the same [`ToolSet`] the
//! chat completions path uses, so the same prompt, grammar and parser
//! apply; `function_call` and `function_call_output` input items as the
//! assistant calls and tool results of the conversation; and the calls the
//! model made as `function_call` output items.

use serde_json::{json, Map, Value};

use super::super::tools::parse::ParsedCall;
use super::super::tools::ToolSet;
use super::super::ApiError;

/// The tools a request offers, as given (echoed in the response) and
/// checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tools {
    /// `tools`, `tool_choice` and `parallel_tool_calls` as the request gave
    /// them, for the response to echo and a stored turn to keep.
    pub given: Value,
    /// The checked set; `None` when no tool is offered.
    pub set: Option<ToolSet>,
}

impl Tools {
    /// Reads the three fields; a mistake is a 400 naming the field at fault
    /// in the Responses shape.
    ///
    /// # Errors
    /// [`ApiError::InvalidParam`] naming `tools[i]...`, `tool_choice` or
    /// `parallel_tool_calls`.
    pub fn from_request(
        tools: Option<&Value>,
        tool_choice: Option<&Value>,
        parallel: Option<&Value>,
    ) -> Result<Tools, ApiError> {
        let chat_tools = match tools {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, t)| chat_tool(i, t))
                    .collect::<Result<_, _>>()?,
            )),
            Some(_) => {
                return Err(ApiError::param(
                    "tools",
                    "`tools` must be an array of {\"type\": \"function\", \"name\": ..., \"parameters\": {...}}",
                ))
            }
        };
        let chat_choice = tool_choice.map(chat_choice).transpose()?;
        let set = ToolSet::from_request(chat_tools.as_ref(), chat_choice.as_ref(), parallel)
            .map_err(responses_param)?;
        let given = json!({
            "tools": tools.cloned().unwrap_or_else(|| json!([])),
            "tool_choice": tool_choice.cloned().unwrap_or_else(|| json!("auto")),
            "parallel_tool_calls": parallel.and_then(Value::as_bool).unwrap_or(true),
        });
        Ok(Tools { given, set })
    }

    /// Whether the model is offered tools.
    pub fn offered(&self) -> bool {
        self.set.as_ref().is_some_and(ToolSet::offered)
    }

    /// Read back from what a stored turn kept ([`Tools::given`]); no tools
    /// where it kept none (a turn from before tools, or without them).
    pub fn from_given(given: &Value) -> Tools {
        Tools::from_request(
            given.get("tools"),
            given.get("tool_choice"),
            given.get("parallel_tool_calls"),
        )
        .unwrap_or_default()
    }
}

/// A Responses function tool in the chat completions shape.
fn chat_tool(i: usize, tool: &Value) -> Result<Value, ApiError> {
    let Some(object) = tool.as_object() else {
        return Err(ApiError::param(
            format!("tools[{i}]"),
            format!("tools[{i}] must be an object {{\"type\": \"function\", \"name\": ..., \"parameters\": {{...}}}}"),
        ));
    };
    match object.get("type").and_then(Value::as_str) {
        Some("function") => {}
        other => {
            return Err(ApiError::param(
                format!("tools[{i}].type"),
                format!(
                    "tools[{i}].type is {}; only \"function\" tools are run here (no hosted tools such as web search or file search)",
                    other.map_or("missing".to_owned(), |t| format!("{t:?}"))
                ),
            ))
        }
    }
    let mut function = Map::new();
    for (key, value) in object {
        match key.as_str() {
            "type" => {}
            // Every call's arguments are made to match the schema anyway.
            "strict" if value.is_boolean() || value.is_null() => {}
            "name" | "description" | "parameters" => {
                function.insert(key.clone(), value.clone());
            }
            other => {
                return Err(ApiError::param(
                    format!("tools[{i}].{other}"),
                    format!("tools[{i}] has an unknown field `{other}`; a function tool takes type, name, description, parameters and strict"),
                ))
            }
        }
    }
    Ok(json!({"type": "function", "function": function}))
}

/// A Responses `tool_choice` in the chat completions shape.
fn chat_choice(choice: &Value) -> Result<Value, ApiError> {
    match choice {
        Value::String(_) | Value::Null => Ok(choice.clone()),
        Value::Object(object) => match (
            object.get("type").and_then(Value::as_str),
            object.get("name").and_then(Value::as_str),
        ) {
            (Some("function"), Some(name)) => {
                Ok(json!({"type": "function", "function": {"name": name}}))
            }
            _ => Err(ApiError::param(
                "tool_choice",
                "`tool_choice` must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}",
            )),
        },
        _ => Err(ApiError::param(
            "tool_choice",
            "`tool_choice` must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}",
        )),
    }
}

/// The chat path's error, naming the field as the Responses shape has it
/// (`tools[0].name` rather than `tools[0].function.name`).
fn responses_param(error: ApiError) -> ApiError {
    match error {
        ApiError::InvalidParam { param, message } => ApiError::InvalidParam {
            param: param.replace(".function.", "."),
            message: message.replace(".function.", ".").replace(
                "{\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}",
                "{\"type\": \"function\", \"name\": ..., \"parameters\": {...}}",
            ),
        },
        other => other,
    }
}

/// A `function_call` input item as a call in the chat completions shape,
/// for an assistant message's `tool_calls`.
pub fn input_call(item: &Value, i: usize) -> Result<Value, ApiError> {
    let field = |name: &str| item.get(name).and_then(Value::as_str);
    let (Some(call_id), Some(name)) = (field("call_id"), field("name")) else {
        return Err(ApiError::param(
            format!("input[{i}]"),
            format!("input[{i}] is a function_call without its `call_id` and `name`; send the item as the response gave it"),
        ));
    };
    let arguments = field("arguments").unwrap_or("{}");
    Ok(json!({
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }))
}

/// A `function_call_output` input item: the call id and the result text.
pub fn input_output(item: &Value, i: usize) -> Result<(String, String), ApiError> {
    let Some(call_id) = item.get("call_id").and_then(Value::as_str) else {
        return Err(ApiError::param(
            format!("input[{i}].call_id"),
            format!("input[{i}] is a function_call_output without `call_id`; give the id of the call it answers"),
        ));
    };
    let output = match item.get("output") {
        Some(Value::String(text)) => text.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    };
    Ok((call_id.to_owned(), output))
}

/// The `function_call` output item of the `index`th call of response `id`.
pub fn call_item(response_id: &str, index: usize, call: &ParsedCall, status: &str) -> Value {
    let suffix = response_id.strip_prefix("resp_").unwrap_or(response_id);
    json!({
        "id": format!("fc_{suffix}_{index}"),
        "type": "function_call",
        "status": status,
        "call_id": format!("call_{suffix}_{index}"),
        "name": call.name,
        "arguments": call.arguments,
    })
}

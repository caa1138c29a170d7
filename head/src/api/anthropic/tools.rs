//! Tool use on the Messages API, through the OpenAI tools module: `tools`
//! and `tool_choice` become a [`ToolSet`], `tool_use` and `tool_result`
//! blocks become the same prompt text as OpenAI's `tool_calls` and `tool`
//! messages, and the model's calls are answered as `tool_use` blocks.

use super::answer::{with_node, Reply};
use super::blocks;
use super::wire::{stop_of, ContentBlock, TextBlock, ToolUseBlock};
use crate::api::generate::answer::Answer;
use crate::api::generate::Generation;
use crate::api::tools::prompt;
use crate::api::tools::ToolSet;
use crate::api::ApiError;
use axum::response::Response;
use axum::Json;
use serde_json::{json, Value};
use std::collections::HashMap;

/// The keys a tool may carry.
const TOOL_KEYS: &[&str] = &[
    "name",
    "description",
    "input_schema",
    "type",
    "cache_control",
];

/// The tool set `tools` and `tool_choice` ask for, in OpenAI's terms:
/// `any` is `required`, `tool` names a function.
///
/// # Errors
/// [`ApiError::InvalidParam`] naming `tools[i]...` or `tool_choice`.
pub fn tool_set(
    tools: Option<&Value>,
    choice: Option<&Value>,
) -> Result<Option<ToolSet>, ApiError> {
    let functions = match tools {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .enumerate()
                .map(|(i, t)| function(i, t))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => {
            return Err(ApiError::param(
                "tools",
                "`tools` must be an array of {\"name\": ..., \"description\": ..., \"input_schema\": {...}}",
            ))
        }
    };
    let (choice, parallel) = tool_choice(choice)?;
    ToolSet::from_request(
        functions.map(Value::Array).as_ref(),
        choice.as_ref(),
        parallel.as_ref(),
    )
    .map_err(rename)
}

/// Error params of the OpenAI module named as the Messages API names them.
fn rename(error: ApiError) -> ApiError {
    match error {
        ApiError::InvalidParam { param, message } => ApiError::InvalidParam {
            param: param
                .replace(".function.parameters", ".input_schema")
                .replace(".function.name", ".name")
                .replace(".function.description", ".description"),
            message,
        },
        other => other,
    }
}

fn function(i: usize, tool: &Value) -> Result<Value, ApiError> {
    let at = format!("tools[{i}]");
    let Some(fields) = tool.as_object() else {
        return Err(ApiError::param(
            at.clone(),
            format!(
                "`{at}` must be {{\"name\": ..., \"input_schema\": {{\"type\": \"object\", ...}}}}"
            ),
        ));
    };
    if let Some(key) = fields.keys().find(|k| !TOOL_KEYS.contains(&k.as_str())) {
        return Err(ApiError::param(
            format!("{at}.{key}"),
            format!("`{at}.{key}` is not supported; tools take name, description and input_schema"),
        ));
    }
    match fields.get("type").and_then(Value::as_str) {
        None | Some("custom") => {}
        Some(kind) => {
            return Err(ApiError::param(
                format!("{at}.type"),
                format!("`{at}` is a {kind} tool, which this head does not run; give client tools with name and input_schema"),
            ))
        }
    }
    let Some(schema) = fields.get("input_schema") else {
        return Err(ApiError::param(
            format!("{at}.input_schema"),
            format!("`{at}.input_schema` is required: the JSON Schema of the tool's input, e.g. {{\"type\": \"object\", \"properties\": {{}}}}"),
        ));
    };
    let mut spec =
        json!({"name": fields.get("name").cloned().unwrap_or(Value::Null), "parameters": schema});
    if let Some(d) = fields.get("description") {
        spec["description"] = d.clone();
    }
    Ok(json!({"type": "function", "function": spec}))
}

/// `tool_choice` as OpenAI's `tool_choice` and `parallel_tool_calls`.
fn tool_choice(choice: Option<&Value>) -> Result<(Option<Value>, Option<Value>), ApiError> {
    let Some(choice) = choice.filter(|c| !c.is_null()) else {
        return Ok((None, None));
    };
    let bad = || {
        ApiError::param(
            "tool_choice",
            "`tool_choice` must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": \"tool\", \"name\": ...} or {\"type\": \"none\"}",
        )
    };
    let Some(fields) = choice.as_object() else {
        return Err(bad());
    };
    let allowed = ["type", "name", "disable_parallel_tool_use"];
    if let Some(key) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ApiError::param(
            format!("tool_choice.{key}"),
            format!("`tool_choice.{key}` is not a field of tool_choice"),
        ));
    }
    let openai = match fields.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => match fields.get("name").and_then(Value::as_str) {
            Some(name) => json!({"type": "function", "function": {"name": name}}),
            None => {
                return Err(ApiError::param(
                    "tool_choice.name",
                    "`tool_choice` of type tool needs the `name` of the tool to call",
                ))
            }
        },
        _ => return Err(bad()),
    };
    let parallel = match fields.get("disable_parallel_tool_use") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(off)) => Some(json!(!off)),
        Some(_) => {
            return Err(ApiError::param(
                "tool_choice.disable_parallel_tool_use",
                "`tool_choice.disable_parallel_tool_use` must be true or false",
            ))
        }
    };
    Ok((Some(openai), parallel))
}

/// The text of one turn whose content may hold `tool_use` blocks (in an
/// assistant turn) or `tool_result` blocks (in a user turn). `names` maps
/// each `tool_use` id seen so far to its tool's name.
pub fn turn_text(
    role: &str,
    content: &Value,
    param: &str,
    names: &mut HashMap<String, String>,
) -> Result<String, ApiError> {
    let Value::Array(items) = content else {
        return blocks::text(content, param);
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for (j, block) in items.iter().enumerate() {
        let at = format!("{param}[{j}]");
        match (role, block.get("type").and_then(Value::as_str)) {
            ("assistant", Some("tool_use")) => calls.push(tool_use(block, &at, names)?),
            ("user", Some("tool_result")) => results.push(tool_result(block, &at, names)?),
            (_, Some(kind @ ("tool_use" | "tool_result"))) => {
                return Err(ApiError::param(
                    at.clone(),
                    format!("`{at}` is a {kind} block in a turn of role {role}; tool_use blocks go in assistant turns, tool_result blocks in user turns"),
                ))
            }
            _ => text.push_str(blocks::block_text(block, &at)?),
        }
    }
    if !calls.is_empty() {
        let i = param_index(param);
        text = prompt::assistant_calls(text, &Value::Array(calls), i)?;
    }
    if !results.is_empty() {
        results.push(text);
        text = results
            .into_iter()
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
    }
    Ok(text)
}

fn param_index(param: &str) -> usize {
    param
        .trim_start_matches("messages[")
        .split(']')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn tool_use(
    block: &Value,
    at: &str,
    names: &mut HashMap<String, String>,
) -> Result<Value, ApiError> {
    let name = block.get("name").and_then(Value::as_str);
    let id = block.get("id").and_then(Value::as_str);
    let (Some(name), Some(id)) = (name, id) else {
        return Err(ApiError::param(
            at,
            format!("`{at}` must be {{\"type\": \"tool_use\", \"id\": ..., \"name\": ..., \"input\": {{...}}}}"),
        ));
    };
    let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
    if !input.is_object() {
        return Err(ApiError::param(
            format!("{at}.input"),
            format!("`{at}.input` must be an object"),
        ));
    }
    names.insert(id.to_owned(), name.to_owned());
    Ok(json!({"id": id, "type": "function", "function": {"name": name, "arguments": input}}))
}

fn tool_result(
    block: &Value,
    at: &str,
    names: &HashMap<String, String>,
) -> Result<String, ApiError> {
    let Some(id) = block.get("tool_use_id").and_then(Value::as_str) else {
        return Err(ApiError::param(
            format!("{at}.tool_use_id"),
            format!(
                "`{at}.tool_use_id` is required: the id of the tool_use block this result answers"
            ),
        ));
    };
    let content = match block.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(c) => blocks::text(c, &format!("{at}.content"))?,
    };
    let content = match block.get("is_error") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => content,
        Some(Value::Bool(true)) => format!("Error: {content}"),
        Some(_) => {
            return Err(ApiError::param(
                format!("{at}.is_error"),
                format!("`{at}.is_error` must be true or false"),
            ))
        }
    };
    Ok(prompt::tool_result(
        names.get(id).map(String::as_str),
        &content,
    ))
}

/// Runs the generation to its end and answers with one `message` whose
/// calls are `tool_use` blocks, with stop reason `tool_use`.
pub async fn complete(
    generation: Generation,
    reply: Reply,
    tools: &ToolSet,
) -> Result<Response, ApiError> {
    let mut answer = Answer::new(generation, Some(tools.clone()));
    let whole = answer.whole().await?;
    let generation = answer.generation();
    let mut message = reply.message(None, generation.usage().into());
    if let Some(content) = whole.content() {
        message
            .content
            .push(ContentBlock::Text(TextBlock::new(content)));
    }
    for (i, call) in whole.calls.into_iter().enumerate() {
        let input = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
        message.content.push(ContentBlock::ToolUse(ToolUseBlock {
            kind: "tool_use",
            id: reply.tool_use_id(i),
            name: call.name,
            input,
        }));
    }
    let (stop_reason, stop_sequence) = stop_of(generation, whole.finish);
    message.stop_reason = Some(stop_reason);
    message.stop_sequence = stop_sequence;
    Ok(with_node(&generation.node, Json(message)))
}

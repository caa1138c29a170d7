//! Tool calling on `/api/chat`, through the one tools module
//! ([`crate::api::tools`]): an assistant message's `tool_calls` and a
//! `tool` message's result (named by `tool_name`) become the same prompt
//! text as OpenAI's, and the model's calls are answered in Ollama's shape,
//! `[{"function": {"name": ..., "arguments": {...}}}]`, arguments as an
//! object.

use super::super::tools::parse::ParsedCall;
use serde_json::{json, Value};

#[cfg(test)]
mod tests;

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

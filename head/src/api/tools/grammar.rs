//! The constraint that makes the model's answer a tool call.
//!
//! With `tool_choice: "required"` or a named function, the node samples
//! under a Lark grammar (compiled by llguidance, as JSON schemas are):
//! `<tool_call>`, a JSON object whose `name` is one of the allowed
//! functions and whose `arguments` match that function's parameter schema,
//! then `</tool_call>`. The JSON is compact (no free whitespace), so a small
//! model cannot spend its tokens on blank space.

use serde_json::{json, Value};
use superfluid_proto::Constraint;

use super::prompt::{CALL_CLOSE, CALL_OPEN};
use super::spec::{Choice, Function, ToolSet};
use crate::api::structured::check_grammar;
use crate::api::ApiError;
use llguidance::api::TopLevelGrammar;

/// The constraint `tools` asks for: `None` unless a call is required.
///
/// # Errors
/// [`ApiError::InvalidParam`] naming `tools` when the grammar cannot be
/// compiled (the functions' schemas together are too large).
pub fn constraint(tools: &ToolSet) -> Result<Option<Constraint>, ApiError> {
    let allowed: Vec<&Function> = match &tools.choice {
        Choice::Auto | Choice::None => return Ok(None),
        Choice::Required => tools.functions.iter().collect(),
        Choice::Named(name) => tools.get(name).into_iter().collect(),
    };
    let calls: Vec<Value> = allowed.iter().copied().map(call_schema).collect();
    let mut schema = match <[Value; 1]>::try_from(calls) {
        Ok([one]) => one,
        Err(calls) => json!({"anyOf": calls}),
    };
    schema["x-guidance"] = json!({
        "whitespace_flexible": false,
        "key_separator": ": ",
        "item_separator": ", ",
    });
    let lark = format!(
        "start: {} %json {} {}\n",
        lark_string(CALL_OPEN),
        schema,
        lark_string(CALL_CLOSE)
    );
    check_grammar(TopLevelGrammar::from_lark(lark.clone())).map_err(|reason| {
        ApiError::param(
            "tools",
            format!("the functions' parameter schemas cannot be enforced together: {reason}; simplify them"),
        )
    })?;
    Ok(Some(Constraint::Lark(lark)))
}

/// `{"name": <name>, "arguments": <parameters>}`, name first.
fn call_schema(function: &Function) -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"const": function.name},
            "arguments": function.parameters,
        },
        "required": ["name", "arguments"],
        "additionalProperties": false,
    })
}

/// `text` as a Lark string literal.
fn lark_string(text: &str) -> String {
    // JSON's string escapes are a subset of what Lark literals accept.
    Value::String(text.to_owned()).to_string()
}

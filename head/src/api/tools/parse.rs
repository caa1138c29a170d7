//! The tool calls in a model's text.
//!
//! The model writes each call as `<tool_call>{"name": ..., "arguments":
//! {...}}</tool_call>`. Text that is not a readable call of an offered
//! function (bad JSON, an unknown name, arguments that are not an object)
//! is answered as text: the client sees what the model wrote, never a 500.

use serde_json::Value;

use super::prompt::{CALL_CLOSE, CALL_OPEN};
use super::spec::ToolSet;

/// A call read from the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCall {
    /// The function's name, one of the offered ones.
    pub name: String,
    /// Its arguments, as compact JSON text of an object.
    pub arguments: String,
}

/// The answer read from the model's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The text outside the calls, if any is not blank.
    pub content: Option<String>,
    /// The calls, in order (at most one when parallel calls are off).
    pub calls: Vec<ParsedCall>,
}

/// The calls in `text`, or `None` when it holds none that can be read.
pub fn parse(text: &str, tools: &ToolSet) -> Option<Parsed> {
    let start = text.find(CALL_OPEN)?;
    let mut rest = &text[start..];
    let mut calls = Vec::new();
    let mut after = String::new();
    while let Some(open) = rest.find(CALL_OPEN) {
        after.push_str(&rest[..open]);
        let body_start = open + CALL_OPEN.len();
        // A call the model ended without its closing tag still counts
        // when its JSON is whole.
        let (body, next) = match rest[body_start..].find(CALL_CLOSE) {
            Some(close) => (
                &rest[body_start..body_start + close],
                &rest[body_start + close + CALL_CLOSE.len()..],
            ),
            None => (&rest[body_start..], ""),
        };
        calls.push(call(body, tools)?);
        rest = next;
    }
    after.push_str(rest);
    if !after.trim().is_empty() {
        // Text between or after the calls is not part of a clean call.
        return None;
    }
    if !tools.parallel {
        calls.truncate(1);
    }
    let before = text[..start].trim();
    Some(Parsed {
        content: (!before.is_empty()).then(|| before.to_owned()),
        calls,
    })
}

/// The answer split into its text and its calls: all text when no tool was
/// offered or the text holds no readable call.
pub fn split_answer(text: &str, tools: Option<&ToolSet>) -> (String, Vec<ParsedCall>) {
    match tools.and_then(|t| parse(text, t)) {
        Some(parsed) => (parsed.content.unwrap_or_default(), parsed.calls),
        None => (text.to_owned(), Vec::new()),
    }
}

/// One call's JSON.
fn call(body: &str, tools: &ToolSet) -> Option<ParsedCall> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    let name = value.get("name")?.as_str()?;
    tools.get(name)?;
    let arguments = match value.get("arguments") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        // Some models write the arguments as JSON text, as the API does.
        Some(Value::String(s)) => serde_json::from_str(s).ok()?,
        Some(v) => v.clone(),
    };
    if !arguments.is_object() {
        return None;
    }
    Some(ParsedCall {
        name: name.to_owned(),
        arguments: arguments.to_string(),
    })
}

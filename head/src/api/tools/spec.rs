//! `tools`, `tool_choice` and `parallel_tool_calls` as the client sent
//! them, checked: each mistake is a 400 naming the field at fault.

use serde_json::{Map, Value};

use crate::api::structured::{check_depth, check_grammar};
use crate::api::ApiError;
use llguidance::api::TopLevelGrammar;

/// The most tools one request may offer.
const MAX_TOOLS: usize = 128;

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    /// Its name, as calls must give it.
    pub name: String,
    /// What it does, for the model.
    pub description: Option<String>,
    /// The JSON Schema of its arguments (an object schema).
    pub parameters: Value,
}

/// What `tool_choice` asks of the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// The model answers with text or calls, as it likes.
    Auto,
    /// The model answers with text; the tools are not offered.
    None,
    /// The model must call one of the tools.
    Required,
    /// The model must call this function.
    Named(String),
}

/// The tools of one request and how they may be used.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSet {
    /// The functions offered.
    pub functions: Vec<Function>,
    /// `tool_choice`.
    pub choice: Choice,
    /// Whether one answer may call several functions.
    pub parallel: bool,
}

impl ToolSet {
    /// The tool set a request asks for; `None` when it offers no tools
    /// (or turns them off with `tool_choice: "none"` and offers none).
    ///
    /// # Errors
    /// [`ApiError::InvalidParam`] naming `tools[i]...`, `tool_choice` or
    /// `parallel_tool_calls` when one is not what OpenAI's API accepts.
    pub fn from_request(
        tools: Option<&Value>,
        tool_choice: Option<&Value>,
        parallel: Option<&Value>,
    ) -> Result<Option<ToolSet>, ApiError> {
        let functions = match tools {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) if items.len() <= MAX_TOOLS => items
                .iter()
                .enumerate()
                .map(|(i, tool)| function(i, tool))
                .collect::<Result<_, _>>()?,
            Some(Value::Array(_)) => {
                return Err(ApiError::param(
                    "tools",
                    format!("`tools` may list at most {MAX_TOOLS} functions"),
                ))
            }
            Some(_) => {
                return Err(ApiError::param(
                    "tools",
                    "`tools` must be an array of {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}",
                ))
            }
        };
        for (i, f) in functions.iter().enumerate() {
            if functions[..i].iter().any(|g| g.name == f.name) {
                return Err(ApiError::param(
                    format!("tools[{i}].function.name"),
                    format!(
                        "two tools are named {:?}; give each function its own name",
                        f.name
                    ),
                ));
            }
        }
        let parallel = match parallel {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ApiError::param(
                    "parallel_tool_calls",
                    "`parallel_tool_calls` must be true or false",
                ))
            }
        };
        let choice = choice(tool_choice, &functions)?;
        if functions.is_empty() {
            return Ok(None);
        }
        Ok(Some(ToolSet {
            functions,
            choice,
            parallel,
        }))
    }

    /// The function named `name`, if offered.
    pub fn get(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.name == name)
    }

    /// Whether the model is offered the tools at all.
    pub fn offered(&self) -> bool {
        self.choice != Choice::None
    }
}

/// `tools[i]`, checked.
fn function(i: usize, tool: &Value) -> Result<Function, ApiError> {
    let at = |field: &str| format!("tools[{i}]{field}");
    let Some(tool) = tool.as_object() else {
        return Err(ApiError::param(
            at(""),
            format!(
                "tools[{i}] must be an object {{\"type\": \"function\", \"function\": {{...}}}}"
            ),
        ));
    };
    match tool.get("type").and_then(Value::as_str) {
        Some("function") => {}
        other => {
            return Err(ApiError::param(
                at(".type"),
                format!(
                    "tools[{i}].type is {}; only \"function\" tools are supported",
                    other.map_or("missing".to_owned(), |t| format!("{t:?}"))
                ),
            ))
        }
    }
    let Some(spec) = tool.get("function").and_then(Value::as_object) else {
        return Err(ApiError::param(
            at(".function"),
            format!(
                "tools[{i}].function must be an object {{\"name\": ..., \"parameters\": {{...}}}}"
            ),
        ));
    };
    let name = match spec.get("name").and_then(Value::as_str) {
        Some(n) if valid_name(n) => n.to_owned(),
        _ => {
            return Err(ApiError::param(
                at(".function.name"),
                format!("tools[{i}].function.name must be 1 to 64 letters, digits, '_' or '-'"),
            ))
        }
    };
    let description = match spec.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.clone()),
        Some(_) => {
            return Err(ApiError::param(
                at(".function.description"),
                format!("tools[{i}].function.description must be a string"),
            ))
        }
    };
    let parameters = parameters(spec, i)?;
    Ok(Function {
        name,
        description,
        parameters,
    })
}

/// `tools[i].function.parameters`: an object schema that compiles; absent,
/// an empty object.
fn parameters(spec: &Map<String, Value>, i: usize) -> Result<Value, ApiError> {
    let param = format!("tools[{i}].function.parameters");
    let schema = match spec.get("parameters") {
        None | Some(Value::Null) => {
            return Ok(serde_json::json!({"type": "object", "properties": {}}))
        }
        Some(schema @ Value::Object(_)) => schema.clone(),
        Some(_) => {
            return Err(ApiError::param(
                param.clone(),
                format!("`{param}` must be a JSON Schema object"),
            ))
        }
    };
    match schema.get("type") {
        None => {}
        Some(Value::String(t)) if t == "object" => {}
        Some(_) => {
            return Err(ApiError::param(
                param.clone(),
                format!("`{param}` must describe an object: its \"type\" must be \"object\""),
            ))
        }
    }
    check_depth(&schema, &param)?;
    check_grammar(TopLevelGrammar::from_json_schema(schema.clone())).map_err(|reason| {
        ApiError::param(
            param.clone(),
            format!("the schema of `{param}` cannot be enforced: {reason}; fix or simplify it"),
        )
    })?;
    Ok(schema)
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `tool_choice`, checked against the functions offered.
fn choice(value: Option<&Value>, functions: &[Function]) -> Result<Choice, ApiError> {
    let bad = || {
        ApiError::param(
            "tool_choice",
            "`tool_choice` must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}",
        )
    };
    let choice = match value {
        None | Some(Value::Null) => Choice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Choice::Auto,
            "none" => Choice::None,
            "required" => Choice::Required,
            _ => return Err(bad()),
        },
        Some(Value::Object(o)) => {
            if o.get("type").and_then(Value::as_str) != Some("function") {
                return Err(bad());
            }
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(bad)?;
            if !functions.iter().any(|f| f.name == name) {
                return Err(ApiError::param(
                    "tool_choice",
                    format!("`tool_choice` names the function {name:?}, which is not in `tools`; name one of the functions given"),
                ));
            }
            Choice::Named(name.to_owned())
        }
        Some(_) => return Err(bad()),
    };
    if functions.is_empty() && matches!(choice, Choice::Required | Choice::Named(_)) {
        return Err(ApiError::param(
            "tool_choice",
            "`tool_choice` asks for a call but `tools` offers no function; give `tools`",
        ));
    }
    Ok(choice)
}

/// `/v1/completions` takes no tools: a request that offers some is refused
/// rather than answered as if it had not.
///
/// # Errors
/// [`ApiError::InvalidParam`] naming `tools` or `tool_choice`.
pub fn refuse_on_completions(
    tools: Option<&Value>,
    tool_choice: Option<&Value>,
) -> Result<(), ApiError> {
    let offered = |v: Option<&Value>| match v {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    };
    for (field, value) in [("tools", tools), ("tool_choice", tool_choice)] {
        if offered(value) {
            return Err(ApiError::param(
                field,
                format!("`{field}` is only supported on /v1/chat/completions; send the request there or without `{field}`"),
            ));
        }
    }
    Ok(())
}

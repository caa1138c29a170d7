//! The body of `POST /v1/responses`: the fields the head honours, read and
//! checked, and every other field refused by name.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::super::ApiError;
use super::tools::{self, Tools};

/// What `POST /v1/responses` takes, as sent.
#[derive(Debug, Default, Deserialize)]
pub struct ResponsesBody {
    /// The model id; optional when continuing a stored response.
    pub model: Option<String>,
    /// A string (one user message) or a list of message items.
    pub input: Option<Value>,
    /// A system prompt for this response only.
    pub instructions: Option<String>,
    /// The most tokens to generate.
    pub max_output_tokens: Option<i64>,
    /// Sampling temperature in [0, 2].
    pub temperature: Option<f64>,
    /// Nucleus sampling mass in (0, 1].
    pub top_p: Option<f64>,
    /// Answer with server-sent events.
    pub stream: Option<bool>,
    /// Keep the response (default true); false keeps nothing.
    pub store: Option<bool>,
    /// Continue from this stored response.
    pub previous_response_id: Option<String>,
    /// Function tools the model may call.
    pub tools: Option<Value>,
    /// Whether and which tool the model must call.
    pub tool_choice: Option<Value>,
    /// Whether one answer may call several functions.
    pub parallel_tool_calls: Option<Value>,
    /// Every other field: refused unless it asks for what the head does
    /// anyway (see [`check_others`]).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// One input message, as the chat template takes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputMessage {
    /// `user`, `assistant`, `system` (`developer` is read as `system`) or
    /// `tool` (a `function_call_output` item).
    pub role: String,
    /// Its text.
    pub text: String,
    /// An assistant's calls (`function_call` items), in the chat
    /// completions shape.
    pub tool_calls: Option<Value>,
    /// The call a `tool` message answers.
    pub tool_call_id: Option<String>,
}

impl InputMessage {
    /// The body of the `message` event that records it.
    pub fn event_body(&self) -> Value {
        let mut body = json!({"role": self.role, "content": self.text});
        if let Some(calls) = &self.tool_calls {
            body["tool_calls"] = calls.clone();
        }
        if let Some(id) = &self.tool_call_id {
            body["tool_call_id"] = json!(id);
        }
        body
    }
}

/// A request once checked.
#[derive(Debug)]
pub struct Checked {
    /// The model asked for, if any.
    pub model: Option<String>,
    /// The new turn's messages.
    pub input: Vec<InputMessage>,
    /// The system prompt for this response.
    pub instructions: Option<String>,
    /// The generation settings, as a session keeps them (`max_tokens`,
    /// `temperature`, `top_p`).
    pub settings: Map<String, Value>,
    /// `max_output_tokens` as given.
    pub max_output_tokens: Option<i64>,
    /// `temperature` as given.
    pub temperature: Option<f64>,
    /// `top_p` as given.
    pub top_p: Option<f64>,
    /// Answer with events.
    pub stream: bool,
    /// Keep the response.
    pub store: bool,
    /// The response continued from.
    pub previous: Option<String>,
    /// The function tools offered.
    pub tools: Tools,
}

/// Fields of OpenAI's Responses API the head does not implement, with
/// what to do instead.
const REFUSED: &[(&str, &str)] = &[
    ("max_tool_calls", "the number of calls is not capped; leave `max_tool_calls` out, or set `parallel_tool_calls: false` for at most one call per response"),
    ("reasoning", "the served models do not take reasoning settings; leave `reasoning` out"),
    ("text", "only plain text output is supported (`text: {\"format\": {\"type\": \"text\"}}`); for JSON use /v1/chat/completions with `response_format`"),
    ("background", "background responses are not supported; leave `background` out, or use `stream: true` for a long answer"),
    ("include", "no extra output can be included; leave `include` out"),
    ("metadata", "responses keep no metadata; leave `metadata` out, or use the sessions API's `title` and `tags`"),
    ("truncation", "only `truncation: \"disabled\"` is supported: a conversation longer than the context is refused, not cut"),
    ("conversation", "conversation objects are not supported; continue with `previous_response_id`"),
    ("prompt", "stored prompt templates are not supported; send `input` and `instructions`"),
    ("service_tier", "there are no service tiers; leave `service_tier` out"),
    ("top_logprobs", "log probabilities are not supported; leave `top_logprobs` out"),
    ("stream_options", "no stream options are supported; leave `stream_options` out"),
];

/// Refuses a field the head does not honour, unless its value asks only
/// for what the head does anyway (an empty list, plain text, no truncation).
fn check_others(other: &Map<String, Value>) -> Result<(), ApiError> {
    for (name, value) in other {
        let harmless = match name.as_str() {
            _ if value.is_null() => true,
            "include" => value.as_array().is_some_and(Vec::is_empty),
            "metadata" => value.as_object().is_some_and(Map::is_empty),
            "truncation" => value == "disabled",
            "text" => value == &json!({"format": {"type": "text"}}),
            _ => false,
        };
        if harmless {
            continue;
        }
        let message = match REFUSED.iter().find(|(known, _)| known == name) {
            Some((_, why)) => format!("`{name}` is not supported: {why}; see docs/responses.md"),
            None => format!(
                "unknown field `{name}`; see docs/responses.md for the fields /v1/responses takes"
            ),
        };
        return Err(ApiError::param(name.clone(), message));
    }
    Ok(())
}

impl ResponsesBody {
    /// Checks every field; the error names the first bad one.
    pub fn check(self) -> Result<Checked, ApiError> {
        check_others(&self.other)?;
        let tools = Tools::from_request(
            self.tools.as_ref(),
            self.tool_choice.as_ref(),
            self.parallel_tool_calls.as_ref(),
        )?;
        let input = match self.input {
            None | Some(Value::Null) => {
                return Err(ApiError::param(
                    "input",
                    "missing required parameter `input`; give a string, or a list of {\"role\": \"user\", \"content\": \"...\"} items",
                ))
            }
            Some(value) => input_messages(&value)?,
        };
        let mut settings = Map::new();
        if let Some(max) = self.max_output_tokens {
            if max < 1 || max > i64::from(u32::MAX) {
                return Err(ApiError::param(
                    "max_output_tokens",
                    format!("`max_output_tokens` must be a positive number of tokens (got {max})"),
                ));
            }
            settings.insert("max_tokens".into(), json!(max));
        }
        if let Some(t) = self.temperature {
            settings.insert("temperature".into(), json!(t));
        }
        if let Some(p) = self.top_p {
            settings.insert("top_p".into(), json!(p));
        }
        let model = self.model.filter(|m| !m.trim().is_empty());
        if model.is_none() && self.previous_response_id.is_none() {
            return Err(ApiError::param(
                "model",
                "missing required parameter `model`; set it to one of the ids listed by GET /v1/models",
            ));
        }
        Ok(Checked {
            model,
            input,
            instructions: self.instructions.filter(|i| !i.is_empty()),
            settings,
            max_output_tokens: self.max_output_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            stream: self.stream.unwrap_or(false),
            store: self.store.unwrap_or(true),
            previous: self.previous_response_id,
            tools,
        })
    }
}

/// `input` as messages: a string is one user message.
pub fn input_messages(input: &Value) -> Result<Vec<InputMessage>, ApiError> {
    let items = match input {
        Value::String(text) => {
            return Ok(vec![InputMessage {
                role: "user".into(),
                text: text.clone(),
                ..InputMessage::default()
            }])
        }
        Value::Array(items) if !items.is_empty() => items,
        Value::Array(_) => {
            return Err(ApiError::param(
                "input",
                "`input` is empty; give at least one message",
            ))
        }
        _ => {
            return Err(ApiError::param(
                "input",
                "`input` must be a string or a list of message items",
            ))
        }
    };
    let mut messages: Vec<InputMessage> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => messages.push(input_item(item, i)?),
            // Calls after an assistant message belong to it.
            "function_call" => {
                let call = tools::input_call(item, i)?;
                match messages.last_mut() {
                    Some(last) if last.role == "assistant" => {
                        let calls = last.tool_calls.get_or_insert_with(|| json!([]));
                        if let Some(calls) = calls.as_array_mut() {
                            calls.push(call);
                        }
                    }
                    _ => messages.push(InputMessage {
                        role: "assistant".into(),
                        tool_calls: Some(json!([call])),
                        ..InputMessage::default()
                    }),
                }
            }
            "function_call_output" => {
                let (call_id, output) = tools::input_output(item, i)?;
                messages.push(InputMessage {
                    role: "tool".into(),
                    text: output,
                    tool_call_id: Some(call_id),
                    ..InputMessage::default()
                });
            }
            other => {
                return Err(ApiError::param(
                    format!("input[{i}].type"),
                    format!("input[{i}] has type {other:?}; message, function_call and function_call_output items are supported"),
                ))
            }
        }
    }
    Ok(messages)
}

fn input_item(item: &Value, i: usize) -> Result<InputMessage, ApiError> {
    let role = match item.get("role").and_then(Value::as_str) {
        Some("developer" | "system") => "system",
        Some(r @ ("user" | "assistant")) => r,
        other => {
            return Err(ApiError::param(
                format!("input[{i}].role"),
                format!(
                    "input[{i}] has role {}; use user, assistant, system or developer",
                    other.map_or("missing".to_owned(), |r| format!("{r:?}"))
                ),
            ))
        }
    };
    let param = || format!("input[{i}].content");
    let text = match item.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str);
                match (kind, part.get("text").and_then(Value::as_str)) {
                    (Some("input_text" | "output_text"), Some(t)) => text.push_str(t),
                    _ => {
                        return Err(ApiError::param(
                            format!("input[{i}].content[{j}].type"),
                            format!("input[{i}].content[{j}] has type {}; only {{\"type\": \"input_text\", \"text\": \"...\"}} parts are supported", kind.unwrap_or("missing")),
                        ))
                    }
                }
            }
            text
        }
        _ => {
            return Err(ApiError::param(
                param(),
                format!("input[{i}].content must be a string or a list of input_text parts"),
            ))
        }
    };
    Ok(InputMessage {
        role: role.to_owned(),
        text,
        ..InputMessage::default()
    })
}

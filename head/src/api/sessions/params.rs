//! The generation settings a session keeps (`params` on create) and a
//! generation may override: the sampling fields of chat completions.

use serde_json::{Map, Value};

use super::super::types::CompletionRequest;
use super::super::ApiError;

/// The `params` a session takes; anything else is refused by name.
pub const KEYS: &[&str] = &[
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "stop",
    "response_format",
];

/// Refuses a key of `params` that is not a generation setting.
pub fn check_keys(params: &Map<String, Value>) -> Result<(), ApiError> {
    match params.keys().find(|k| !KEYS.contains(&k.as_str())) {
        Some(key) => Err(ApiError::param(
            format!("params.{key}"),
            format!(
                "`params.{key}` is not a generation setting sessions keep; use {}",
                KEYS.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// `over` laid over `base`: its keys win.
pub fn merged(base: &Map<String, Value>, over: Option<&Map<String, Value>>) -> Map<String, Value> {
    let mut out = base.clone();
    if let Some(over) = over {
        for (k, v) in over {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// The chat request for `model`, `messages` and `params`, as the chat
/// handler would read it from a client.
pub fn request(
    model: &str,
    messages: Vec<Value>,
    params: &Map<String, Value>,
) -> Result<CompletionRequest, ApiError> {
    let mut body = params.clone();
    body.insert("model".into(), Value::String(model.to_owned()));
    body.insert("messages".into(), Value::Array(messages));
    serde_json::from_value(Value::Object(body)).map_err(|e| ApiError::BadJson {
        message: format!(
            "invalid `params`: {e}; see docs/sessions.md for the settings and their types"
        ),
        param: Some("params".into()),
    })
}

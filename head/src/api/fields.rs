//! Which fields of an OpenAI request body each endpoint takes.
//!
//! `/v1/chat/completions` and `/v1/completions` share one request type
//! ([`CompletionRequest`]). A field of the other endpoint, a field OpenAI
//! defines for a feature superfluid does not have, and a field OpenAI does
//! not define are each a 400 naming the field, so that no field is silently
//! ignored. The "off" values clients send by default (`false`, `null`, an
//! empty list, `store: false`, `modalities: ["text"]`) are accepted.

use super::types::CompletionRequest;
pub use super::types::Endpoint;
use super::unsupported::asks;
use super::ApiError;
use serde_json::Value;

/// OpenAI fields for features superfluid does not have, with what to do
/// instead; each is refused unless it holds an off value.
const FEATURES_NOT_OFFERED: &[(&str, &str)] = &[
    ("audio", "audio output is not supported; ask for text"),
    ("prediction", "predicted outputs are not supported; send the request without a prediction"),
    ("web_search_options", "this server does not search the web; send the request without it"),
    ("functions", "the legacy `functions` field is not supported; send the functions as `tools` with {\"type\": \"function\", \"function\": {...}}"),
    ("function_call", "the legacy `function_call` field is not supported; use `tool_choice`"),
    ("reasoning_effort", "the served models do not reason before answering; send the request without it"),
    ("verbosity", "answer length is not adjustable this way; use `max_tokens` or say so in the prompt"),
    ("metadata", "`metadata` tags stored completions, and this server stores none; send the request without it"),
    ("store", "this server stores no completions; send `store: false` or leave it out"),
];

impl CompletionRequest {
    /// Refuses the fields `endpoint` does not take, naming the first.
    pub fn check_fields(&self, endpoint: Endpoint) -> Result<(), ApiError> {
        match endpoint {
            Endpoint::Chat => self.refuse_completions_fields()?,
            Endpoint::Completions => self.check_completions_fields()?,
        }
        for (field, value) in &self.other {
            check_other(field, value, endpoint)?;
        }
        Ok(())
    }

    /// The fields only `/v1/completions` takes, sent to chat.
    fn refuse_completions_fields(&self) -> Result<(), ApiError> {
        let sent = [
            ("prompt", self.prompt.as_ref().is_some_and(|p| !p.is_null())),
            ("echo", self.echo == Some(true)),
            ("suffix", asks(self.suffix.as_ref())),
            ("best_of", self.best_of.is_some_and(|b| b != 1)),
        ];
        match sent.into_iter().find(|(_, sent)| *sent) {
            Some((field, _)) => Err(ApiError::param(
                field,
                format!("`{field}` is a /v1/completions parameter; /v1/chat/completions takes `messages` and does not read it, so send the request without it"),
            )),
            None => Ok(()),
        }
    }

    /// `messages` sent to `/v1/completions`, and `suffix` and `best_of`.
    fn check_completions_fields(&self) -> Result<(), ApiError> {
        if self.messages.is_some() {
            return Err(ApiError::param(
                "messages",
                "`messages` is a /v1/chat/completions parameter; /v1/completions takes a `prompt` string, so send the chat there or the text as `prompt`",
            ));
        }
        let suffix = match &self.suffix {
            None | Some(Value::Null) => false,
            Some(Value::String(s)) => !s.is_empty(),
            Some(_) => true,
        };
        if suffix {
            return Err(ApiError::param(
                "suffix",
                "`suffix` (text to insert before) is not supported: this server only continues `prompt`; send the request without `suffix`",
            ));
        }
        let n = self.n.unwrap_or(1);
        match self.best_of {
            None => Ok(()),
            Some(best_of) if best_of == 1 || best_of == n => Ok(()),
            Some(best_of) => Err(ApiError::param(
                "best_of",
                format!("`best_of` must be 1 or equal to `n` (got best_of {best_of}, n {n}): this server does not rank candidates and returns every choice it generates; send `n` choices instead"),
            )),
        }
    }
}

/// A field outside the ones the request type reads.
fn check_other(field: &str, value: &Value, endpoint: Endpoint) -> Result<(), ApiError> {
    let off = match field {
        "service_tier" => {
            matches!(value, Value::Null) || matches!(value.as_str(), Some("auto" | "default"))
        }
        "modalities" => match value {
            Value::Null => true,
            Value::Array(items) => items.iter().all(|m| m.as_str() == Some("text")),
            _ => false,
        },
        _ => !asks(Some(value)),
    };
    if let Some((_, instead)) = FEATURES_NOT_OFFERED.iter().find(|(f, _)| *f == field) {
        if off {
            return Ok(());
        }
        return Err(ApiError::param(
            field,
            format!("`{field}` is not supported: {instead}"),
        ));
    }
    match field {
        "service_tier" | "modalities" if off => Ok(()),
        "service_tier" => Err(ApiError::param(
            field,
            "`service_tier` must be \"auto\" or \"default\": every request is served alike",
        )),
        "modalities" => Err(ApiError::param(
            field,
            "`modalities` may only be [\"text\"]: the served models write text",
        )),
        _ => Err(ApiError::param(
            field,
            format!(
                "unknown parameter `{field}` for {}; remove it (docs/api.md lists every field this server reads)",
                endpoint.path()
            ),
        )),
    }
}

#[cfg(test)]
mod tests;

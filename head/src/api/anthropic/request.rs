//! The bodies of `POST /v1/messages` and `POST /v1/messages/count_tokens`
//! and their validation into a chat and the fleet's parameters.
//!
//! Every field Anthropic defines is either honoured or refused with a 400
//! naming it; a field Anthropic does not define is refused by serde
//! (`deny_unknown_fields`), naming it too.

use super::blocks;
use super::tools;
use crate::api::tools::ToolSet;
use crate::api::types::{random_seed, Params};
use crate::api::ApiError;
use crate::codec::ChatMessage;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use superfluid_proto::Sampling;

/// The most stop sequences one request may give.
const MAX_STOP_SEQUENCES: usize = 16;

/// The body of `POST /v1/messages`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessagesRequest {
    /// The model id.
    pub model: Option<String>,
    /// The conversation: alternating `user` and `assistant` turns.
    pub messages: Option<Vec<InputMessage>>,
    /// The system prompt: a string or an array of text blocks.
    pub system: Option<Value>,
    /// The most tokens to generate; required, as Anthropic requires it.
    pub max_tokens: Option<i64>,
    /// Strings that end the answer when generated.
    pub stop_sequences: Option<Vec<String>>,
    /// Answer with server-sent events.
    pub stream: Option<bool>,
    /// Sampling temperature in [0, 1].
    pub temperature: Option<f64>,
    /// Nucleus sampling mass in (0, 1].
    pub top_p: Option<f64>,
    /// Keep the k most likely tokens.
    pub top_k: Option<i64>,
    /// About the request: `user_id` is logged with it.
    pub metadata: Option<Metadata>,
    /// Tools the model may call.
    pub tools: Option<Value>,
    /// How the model picks a tool: auto, any, tool or none.
    pub tool_choice: Option<Value>,
    /// Extended thinking (refused unless disabled).
    pub thinking: Option<Value>,
}

/// The body of `POST /v1/messages/count_tokens`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountTokensRequest {
    /// The model id.
    pub model: Option<String>,
    /// The conversation.
    pub messages: Option<Vec<InputMessage>>,
    /// The system prompt.
    pub system: Option<Value>,
    /// Tools the model may call.
    pub tools: Option<Value>,
    /// How the model picks a tool.
    pub tool_choice: Option<Value>,
    /// Extended thinking (refused unless disabled).
    pub thinking: Option<Value>,
}

/// One turn of the conversation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// A string or an array of content blocks.
    pub content: Value,
}

/// `metadata`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// An opaque id of the end user, logged with the request.
    pub user_id: Option<String>,
}

/// The chat for the template, and an assistant prefill to continue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversation {
    /// System and turns, ending with a user turn.
    pub messages: Vec<ChatMessage>,
    /// The text of a last `assistant` turn, which the answer continues.
    pub prefill: Option<String>,
}

impl MessagesRequest {
    /// The model id; a missing or empty one is an error.
    pub fn model_id(&self) -> Result<&str, ApiError> {
        model_id(self.model.as_deref())
    }

    /// The system prompt and turns, checked.
    pub fn conversation(&self) -> Result<Conversation, ApiError> {
        refuse_thinking(&self.thinking)?;
        conversation(self.system.as_ref(), self.messages.as_deref())
    }

    /// The tools offered, checked.
    pub fn tool_set(&self) -> Result<Option<ToolSet>, ApiError> {
        tools::tool_set(self.tools.as_ref(), self.tool_choice.as_ref())
    }

    /// Checks every generation parameter; the error names the first bad one.
    pub fn params(&self) -> Result<Params, ApiError> {
        let max_tokens = match self.max_tokens {
            None => {
                return Err(ApiError::param(
                    "max_tokens",
                    "missing required parameter `max_tokens`; the Messages API needs the most tokens to generate, e.g. \"max_tokens\": 1024",
                ))
            }
            Some(m) if m < 1 => {
                return Err(ApiError::param(
                    "max_tokens",
                    format!("`max_tokens` must be at least 1 (got {m})"),
                ))
            }
            Some(m) => u32::try_from(m).unwrap_or(u32::MAX),
        };
        let defaults = Sampling::default();
        let sampling = Sampling {
            temperature: temperature(self.temperature)?,
            top_p: top_p(self.top_p)?,
            top_k: match self.top_k {
                None => defaults.top_k,
                Some(k) => u32::try_from(k).map_err(|_| {
                    ApiError::param(
                        "top_k",
                        format!("`top_k` must be 0 (off) or a positive number of tokens (got {k})"),
                    )
                })?,
            },
            seed: random_seed(),
            ..defaults
        };
        Ok(Params {
            sampling,
            max_tokens: Some(max_tokens),
            stop: stop_sequences(self.stop_sequences.as_deref())?,
            stream: self.stream.unwrap_or(false),
            include_usage: true,
            constraint: None,
            n: 1,
            logprobs: None,
            beside: None,
            context: None,
        })
    }

    /// `metadata.user_id`, if given.
    pub fn user_id(&self) -> Option<&str> {
        self.metadata.as_ref().and_then(|m| m.user_id.as_deref())
    }
}

impl CountTokensRequest {
    /// The model id; a missing or empty one is an error.
    pub fn model_id(&self) -> Result<&str, ApiError> {
        model_id(self.model.as_deref())
    }

    /// The system prompt and turns, checked.
    pub fn conversation(&self) -> Result<Conversation, ApiError> {
        refuse_thinking(&self.thinking)?;
        conversation(self.system.as_ref(), self.messages.as_deref())
    }

    /// The tools offered, checked.
    pub fn tool_set(&self) -> Result<Option<ToolSet>, ApiError> {
        tools::tool_set(self.tools.as_ref(), self.tool_choice.as_ref())
    }
}

fn model_id(model: Option<&str>) -> Result<&str, ApiError> {
    match model {
        Some(m) if !m.trim().is_empty() => Ok(m),
        _ => Err(ApiError::param(
            "model",
            "missing required parameter `model`; set it to one of the ids listed by GET /v1/models",
        )),
    }
}

/// Extended thinking is refused, naming the field, unless disabled.
fn refuse_thinking(thinking: &Option<Value>) -> Result<(), ApiError> {
    let disabled = thinking
        .as_ref()
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        == Some("disabled");
    if thinking.as_ref().is_some_and(|t| !t.is_null()) && !disabled {
        return Err(ApiError::param(
            "thinking",
            "extended `thinking` is not supported by this head; leave it out or set {\"type\":\"disabled\"}",
        ));
    }
    Ok(())
}

fn conversation(
    system: Option<&Value>,
    messages: Option<&[InputMessage]>,
) -> Result<Conversation, ApiError> {
    let Some(messages) = messages else {
        return Err(ApiError::param(
            "messages",
            "missing required parameter `messages`; give at least one {\"role\":\"user\",\"content\":\"...\"}",
        ));
    };
    if messages.is_empty() {
        return Err(ApiError::param(
            "messages",
            "`messages` is empty; give at least one user message",
        ));
    }
    let mut chat = Vec::with_capacity(messages.len() + 1);
    if let Some(system) = system {
        let text = blocks::text(system, "system")?;
        if !text.is_empty() {
            chat.push(ChatMessage::new("system", text));
        }
    }
    let mut names = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        let role = match m.role.as_str() {
            r @ ("user" | "assistant") => r,
            other => {
                return Err(ApiError::param(
                    format!("messages[{i}].role"),
                    format!("unknown role {other:?} in messages[{i}]; use user or assistant (the system prompt goes in `system`)"),
                ))
            }
        };
        let text = tools::turn_text(
            role,
            &m.content,
            &format!("messages[{i}].content"),
            &mut names,
        )?;
        chat.push(ChatMessage::new(role, text));
    }
    let prefill = match chat.last() {
        Some(last) if last.role == "assistant" => chat.pop().map(|m| m.content),
        _ => None,
    };
    if !chat.iter().any(|m| m.role == "user") {
        return Err(ApiError::param(
            "messages",
            "`messages` has no user turn; the conversation must start with a user message",
        ));
    }
    Ok(Conversation {
        messages: chat,
        prefill,
    })
}

fn temperature(value: Option<f64>) -> Result<f32, ApiError> {
    match value {
        None => Ok(1.0),
        Some(v) if (0.0..=1.0).contains(&v) => Ok(v as f32),
        Some(v) => Err(ApiError::param(
            "temperature",
            format!("`temperature` must be between 0 and 1 (got {v})"),
        )),
    }
}

fn top_p(value: Option<f64>) -> Result<f32, ApiError> {
    match value {
        None => Ok(1.0),
        Some(v) if v > 0.0 && v <= 1.0 => Ok(v as f32),
        Some(v) => Err(ApiError::param(
            "top_p",
            format!("`top_p` must be greater than 0 and at most 1 (got {v})"),
        )),
    }
}

fn stop_sequences(value: Option<&[String]>) -> Result<Vec<String>, ApiError> {
    let list = value.unwrap_or_default();
    if list.len() > MAX_STOP_SEQUENCES {
        return Err(ApiError::param(
            "stop_sequences",
            format!(
                "`stop_sequences` may hold at most {MAX_STOP_SEQUENCES} strings (got {})",
                list.len()
            ),
        ));
    }
    if let Some(i) = list.iter().position(String::is_empty) {
        return Err(ApiError::param(
            format!("stop_sequences[{i}]"),
            format!("`stop_sequences[{i}]` is empty; each stop sequence needs some text"),
        ));
    }
    Ok(list.to_vec())
}

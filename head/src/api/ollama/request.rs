//! The bodies of `/api/chat` and `/api/generate`, and their translation
//! into the OpenAI request that the one generation path validates.
//!
//! Unknown fields are refused naming them (`deny_unknown_fields`), and the
//! fields superfluid cannot honour are refused by [`refuse`].

use super::super::types::{CompletionRequest, RequestMessage};
use super::message::{self, Message};
use super::options::{self, Options};
use crate::api::ApiError;
use serde::Deserialize;
use serde_json::Value;

/// `POST /api/chat`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    /// The model id.
    pub model: Option<String>,
    /// The conversation; empty or absent only loads the model.
    #[serde(default)]
    pub messages: Vec<Message>,
    /// Functions the model may call, as OpenAI's `tools`; the model
    /// chooses whether to call one (Ollama has no `tool_choice`).
    pub tools: Option<Value>,
    /// `"json"` or a JSON schema.
    pub format: Option<Value>,
    /// Sampling and length settings.
    pub options: Option<Options>,
    /// NDJSON (the default) or one object.
    pub stream: Option<bool>,
    /// How long the model stays loaded.
    pub keep_alive: Option<Value>,
    /// Separate reasoning (not supported).
    pub think: Option<Value>,
}

/// `POST /api/generate`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateRequest {
    /// The model id.
    pub model: Option<String>,
    /// The prompt; empty or absent only loads the model.
    pub prompt: Option<String>,
    /// A system prompt for the chat template.
    pub system: Option<String>,
    /// Send `prompt` as it is, without the chat template.
    pub raw: Option<bool>,
    /// Text after the insertion point (not supported).
    pub suffix: Option<String>,
    /// A template to use instead of the model's (not supported).
    pub template: Option<String>,
    /// Token ids of an earlier answer (not supported).
    pub context: Option<Value>,
    /// Base64 images (not supported).
    pub images: Option<Value>,
    /// `"json"` or a JSON schema.
    pub format: Option<Value>,
    /// Sampling and length settings.
    pub options: Option<Options>,
    /// NDJSON (the default) or one object.
    pub stream: Option<bool>,
    /// How long the model stays loaded.
    pub keep_alive: Option<Value>,
    /// Separate reasoning (not supported).
    pub think: Option<Value>,
}

/// Refuses a field that asks for something superfluid does not do.
fn refuse(field: &str, asked: bool, instead: &str) -> Result<(), ApiError> {
    if asked {
        return Err(ApiError::param(
            field,
            format!("`{field}` is not supported: {instead}"),
        ));
    }
    Ok(())
}

/// Whether a value asks for anything: not null, empty, or false.
fn asks(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    }
}

/// The OpenAI request with the fields both endpoints share.
fn common(
    model: Option<&String>,
    format: Option<&Value>,
    opts: Option<&Options>,
    keep_alive: Option<&Value>,
    think: Option<&Value>,
) -> Result<CompletionRequest, ApiError> {
    super::keep_alive::parse(keep_alive)?;
    options::check_think(think)?;
    let mut req = CompletionRequest {
        // Ollama's clients name models `NAME:TAG`; every model here is
        // its one version, `latest`.
        model: model.map(|m| m.strip_suffix(":latest").unwrap_or(m).to_owned()),
        response_format: options::response_format(format)?,
        ..CompletionRequest::default()
    };
    if let Some(opts) = opts {
        opts.apply(&mut req)?;
    }
    Ok(req)
}

impl ChatRequest {
    /// The OpenAI chat request this one asks for.
    pub fn to_openai(&self) -> Result<CompletionRequest, ApiError> {
        let mut req = common(
            self.model.as_ref(),
            self.format.as_ref(),
            self.options.as_ref(),
            self.keep_alive.as_ref(),
            self.think.as_ref(),
        )?;
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.iter().enumerate() {
            let images_field = format!("messages[{i}].images");
            refuse(
                &images_field,
                asks(m.images.as_ref()),
                "the served models read text only; send the message without images",
            )?;
            let think_field = format!("messages[{i}].thinking");
            refuse(&think_field, asks(m.thinking.as_ref()), "superfluid does not separate a model's reasoning from its answer; send the message without `thinking`")?;
            if !matches!(m.role.as_str(), "system" | "user" | "assistant" | "tool") {
                return Err(ApiError::param(
                    format!("messages[{i}].role").as_str(),
                    format!(
                        "unknown role {:?} in messages[{i}]; use system, user, assistant or tool",
                        m.role
                    ),
                ));
            }
            messages.push(message::to_openai(i, m)?);
        }
        req.messages = Some(messages);
        req.tools = self.tools.clone();
        Ok(req)
    }

    /// Whether the answer is NDJSON.
    pub fn streams(&self) -> bool {
        self.stream.unwrap_or(true)
    }
}

impl GenerateRequest {
    /// The OpenAI request this one asks for: a completion of the raw
    /// prompt, or a chat of the system prompt and the prompt.
    pub fn to_openai(&self) -> Result<CompletionRequest, ApiError> {
        refuse(
            "images",
            asks(self.images.as_ref()),
            "the served models read text only; send the request without `images`",
        )?;
        refuse("template", self.template.as_deref().is_some_and(|t| !t.is_empty()), "each model's own chat template is used; send the request without `template`, or with `raw: true` and the prompt already templated")?;
        refuse(
            "suffix",
            self.suffix.as_deref().is_some_and(|t| !t.is_empty()),
            "fill-in-the-middle is not available; send the request without `suffix`",
        )?;
        refuse("context", asks(self.context.as_ref()), "answers carry no token context to continue from; use /api/chat with the earlier turns in `messages`")?;
        let mut req = common(
            self.model.as_ref(),
            self.format.as_ref(),
            self.options.as_ref(),
            self.keep_alive.as_ref(),
            self.think.as_ref(),
        )?;
        let prompt = self.prompt.clone().unwrap_or_default();
        if self.raw.unwrap_or(false) {
            if self.system.as_deref().is_some_and(|s| !s.is_empty()) {
                return Err(ApiError::param(
                    "system",
                    "`system` needs the chat template, which `raw: true` turns off; put the system prompt into `prompt`, or drop `raw`",
                ));
            }
            req.prompt = Some(Value::String(prompt));
        } else {
            let mut messages = Vec::new();
            if let Some(system) = self.system.as_ref().filter(|s| !s.is_empty()) {
                messages.push(RequestMessage {
                    role: "system".into(),
                    content: Value::String(system.clone()),
                    tool_calls: Value::Null,
                    tool_call_id: None,
                });
            }
            messages.push(RequestMessage {
                role: "user".into(),
                content: Value::String(prompt),
                tool_calls: Value::Null,
                tool_call_id: None,
            });
            req.messages = Some(messages);
        }
        Ok(req)
    }

    /// Whether the request only loads the model (no prompt).
    pub fn only_loads(&self) -> bool {
        self.prompt.as_deref().is_none_or(str::is_empty)
    }

    /// Whether the answer is NDJSON.
    pub fn streams(&self) -> bool {
        self.stream.unwrap_or(true)
    }

    /// Whether the prompt goes to the model without the chat template.
    pub fn is_raw(&self) -> bool {
        self.raw.unwrap_or(false)
    }
}

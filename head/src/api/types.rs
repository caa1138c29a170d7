//! The OpenAI request body and its validation into what the fleet needs.

use super::unsupported::Features;
use super::ApiError;
use crate::codec::ChatMessage;
use serde::Deserialize;
use serde_json::Value;
use superfluid_proto::{Constraint, Sampling};

/// The most stop strings one request may give.
const MAX_STOPS: usize = 16;

/// The body of `/v1/chat/completions` and `/v1/completions`; each endpoint
/// refuses the fields it does not take (see [`super::fields`]).
#[derive(Debug, Default, Deserialize)]
pub struct CompletionRequest {
    /// The model id.
    pub model: Option<String>,
    /// Chat turns (chat completions).
    pub messages: Option<Vec<RequestMessage>>,
    /// A string, or an array of one string (completions).
    pub prompt: Option<Value>,
    /// Answer with server-sent events.
    pub stream: Option<bool>,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// The most tokens to generate (legacy name).
    pub max_tokens: Option<i64>,
    /// The most tokens to generate.
    pub max_completion_tokens: Option<i64>,
    /// Sampling temperature in [0, 2].
    pub temperature: Option<f64>,
    /// Nucleus sampling mass in (0, 1].
    pub top_p: Option<f64>,
    /// Keep the k most likely tokens; 0 disables it.
    pub top_k: Option<i64>,
    /// Minimum probability relative to the most likely token, in [0, 1].
    pub min_p: Option<f64>,
    /// Seed of the random choice.
    pub seed: Option<i64>,
    /// Additive penalty on seen tokens, in [-2, 2].
    pub presence_penalty: Option<f64>,
    /// Additive penalty per occurrence, in [-2, 2].
    pub frequency_penalty: Option<f64>,
    /// Multiplicative penalty on recent tokens, > 0.
    #[serde(alias = "repeat_penalty")]
    pub repetition_penalty: Option<f64>,
    /// A stop string or an array of them.
    pub stop: Option<Value>,
    /// Choices to generate from the one prompt (see [`super::choices`]).
    pub n: Option<i64>,
    /// Functions the model may call (see [`super::tools`]).
    pub tools: Option<Value>,
    /// Whether to call one of `tools`; `"none"` turns them off.
    pub tool_choice: Option<Value>,
    /// Log probabilities of the chosen tokens: a boolean on chat, the
    /// number of alternatives on completions (see [`super::choices`]).
    pub logprobs: Option<Value>,
    /// How many of the most likely alternatives to report (chat).
    pub top_logprobs: Option<Value>,
    /// Biases on token ids (see [`super::bias`]).
    pub logit_bias: Option<Value>,
    /// The answer's format: `text`, `json_object` or `json_schema` (see
    /// [`super::structured`]).
    pub response_format: Option<Value>,
    /// Whether one answer may call several tools (see [`super::tools`]).
    pub parallel_tool_calls: Option<Value>,
    /// Answer with the prompt followed by the completion (completions).
    pub echo: Option<bool>,
    /// Text the completion should lead into (completions; refused).
    pub suffix: Option<Value>,
    /// Candidates to generate and rank (completions; 1 or `n` only).
    pub best_of: Option<i64>,
    /// An id of the end user, logged with the request.
    pub user: Option<String>,
    /// Every other field, refused by name in [`super::fields`].
    #[serde(flatten)]
    pub other: serde_json::Map<String, Value>,
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with the token usage.
    pub include_usage: Option<bool>,
}

/// One chat message as the client sent it.
#[derive(Debug, Deserialize)]
pub struct RequestMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// A string, an array of `{"type":"text","text":...}` parts, or null.
    #[serde(default)]
    pub content: Value,
    /// The calls an assistant message made.
    #[serde(default)]
    pub tool_calls: Value,
    /// The call a `tool` message answers.
    pub tool_call_id: Option<String>,
}

/// The endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
}

impl Endpoint {
    pub(crate) fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
        }
    }
}

/// The validated generation parameters common to both endpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Sampling for the node.
    pub sampling: Sampling,
    /// The client's token limit, if it gave one.
    pub max_tokens: Option<u32>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Answer with server-sent events.
    pub stream: bool,
    /// Send the usage chunk when streaming.
    pub include_usage: bool,
    /// What the generated text must match, compiled once already.
    pub constraint: Option<Constraint>,
    /// Choices to generate from the prompt, each with its own seed.
    pub n: u32,
    /// Each token's log-probability with this many alternatives, if asked.
    pub logprobs: Option<u8>,
    /// The id of a node to run on when it can take the generation: the `n`
    /// choices of one prompt go where the first went, so the node computes
    /// the prompt once and copies it to the others.
    pub beside: Option<String>,
    /// A context smaller than the model's that the request asked for
    /// (Ollama's `options.num_ctx`): the prompt and the answer must fit it.
    pub context: Option<u32>,
}

impl CompletionRequest {
    /// The model id; a missing or empty one is an error.
    pub fn model_id(&self) -> Result<&str, ApiError> {
        match self.model.as_deref() {
            Some(m) if !m.trim().is_empty() => Ok(m),
            _ => Err(ApiError::param(
                "model",
                "missing required parameter `model`; set it to one of the ids listed by GET /v1/models",
            )),
        }
    }

    /// Checks every generation parameter of an endpoint that answers one
    /// choice without log probabilities; the error names the first bad one.
    pub fn params(&self) -> Result<Params, ApiError> {
        self.features().check()?;
        if let Some(n) = self.n {
            if n != 1 {
                return Err(ApiError::param(
                    "n",
                    format!(
                        "`n` must be 1 here (got {n}); /v1/chat/completions and /v1/completions generate several choices"
                    ),
                ));
            }
        }
        self.sampling_params()
    }

    /// [`CompletionRequest::params`] for `/v1/chat/completions` and
    /// `/v1/completions`, which also take `n` and log probabilities.
    pub fn openai_params(&self, endpoint: Endpoint) -> Result<Params, ApiError> {
        let choices = self.choices(endpoint)?;
        Ok(Params {
            n: choices.n,
            logprobs: choices.logprobs,
            ..self.sampling_params()?
        })
    }

    /// The generation parameters every endpoint shares.
    fn sampling_params(&self) -> Result<Params, ApiError> {
        let defaults = Sampling::default();
        let sampling = Sampling {
            temperature: range(
                "temperature",
                self.temperature,
                0.0,
                2.0,
                defaults.temperature,
            )?,
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
            min_p: range("min_p", self.min_p, 0.0, 1.0, defaults.min_p)?,
            seed: self
                .seed
                .map_or_else(random_seed, |s| (s as u64 & 0xffff_ffff) as u32),
            repetition_penalty: repetition(self.repetition_penalty)?,
            presence_penalty: range("presence_penalty", self.presence_penalty, -2.0, 2.0, 0.0)?,
            frequency_penalty: range("frequency_penalty", self.frequency_penalty, -2.0, 2.0, 0.0)?,
            penalty_last_n: defaults.penalty_last_n,
            logit_bias: super::bias::parse(self.logit_bias.as_ref())?,
            generated: 0,
        };
        let max_tokens = match (self.max_completion_tokens, self.max_tokens) {
            (Some(m), _) => Some(positive("max_completion_tokens", m)?),
            (None, Some(m)) => Some(positive("max_tokens", m)?),
            (None, None) => None,
        };
        Ok(Params {
            sampling,
            max_tokens,
            stop: stops(self.stop.as_ref())?,
            stream: self.stream.unwrap_or(false),
            include_usage: self
                .stream_options
                .as_ref()
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
            constraint: super::structured::constraint(self.response_format.as_ref())?,
            n: 1,
            logprobs: None,
            beside: None,
            context: None,
        })
    }

    /// The fields that ask for optional features, for
    /// [`Features::check`].
    fn features(&self) -> Features<'_> {
        Features {
            logprobs: self.logprobs.as_ref(),
            top_logprobs: self.top_logprobs.as_ref(),
        }
    }

    /// The chat messages for the template; errors name the message at fault.
    pub fn chat_messages(&self) -> Result<Vec<ChatMessage>, ApiError> {
        let Some(messages) = &self.messages else {
            return Err(ApiError::param("messages", "missing required parameter `messages`; give at least one {\"role\":\"user\",\"content\":\"...\"}"));
        };
        if messages.is_empty() {
            return Err(ApiError::param(
                "messages",
                "`messages` is empty; give at least one message",
            ));
        }
        // The function each earlier call named, by call id, for the
        // results that answer them.
        let mut called = std::collections::HashMap::new();
        messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let role = match m.role.as_str() {
                    "system" | "developer" => "system",
                    r @ ("user" | "assistant" | "tool") => r,
                    other => {
                        return Err(ApiError::param(
                            format!("messages[{i}].role"),
                            format!("unknown role {other:?} in messages[{i}]; use system, developer, user, assistant or tool"),
                        ))
                    }
                };
                let text = content_text(&m.content, i)?;
                match role {
                    "assistant" => {
                        remember_calls(&m.tool_calls, &mut called);
                        let text = super::tools::prompt::assistant_calls(text, &m.tool_calls, i)?;
                        Ok(ChatMessage::new(role, text))
                    }
                    "tool" => {
                        let Some(id) = m.tool_call_id.as_deref() else {
                            return Err(ApiError::param(
                                format!("messages[{i}].tool_call_id"),
                                format!("messages[{i}] has role \"tool\" but no `tool_call_id`; give the id of the call it answers"),
                            ));
                        };
                        let name = called.get(id).map(String::as_str);
                        Ok(ChatMessage::new("user", super::tools::prompt::tool_result(name, &text)))
                    }
                    _ => Ok(ChatMessage::new(role, text)),
                }
            })
            .collect()
    }

    /// The raw completion prompt: a string or an array of one string.
    pub fn prompt_text(&self) -> Result<&str, ApiError> {
        let bad = || {
            ApiError::param(
                "prompt",
                "`prompt` must be a string or an array of exactly one string",
            )
        };
        match &self.prompt {
            None => Err(ApiError::param(
                "prompt",
                "missing required parameter `prompt`",
            )),
            Some(Value::String(s)) => Ok(s),
            Some(Value::Array(items)) => match items.as_slice() {
                [Value::String(s)] => Ok(s),
                _ => Err(bad()),
            },
            Some(_) => Err(bad()),
        }
    }
}

/// Notes the function each of an assistant message's calls named.
fn remember_calls(calls: &Value, called: &mut std::collections::HashMap<String, String>) {
    for call in calls.as_array().into_iter().flatten() {
        let id = call.get("id").and_then(Value::as_str);
        let name = call
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str);
        if let (Some(id), Some(name)) = (id, name) {
            called.insert(id.to_owned(), name.to_owned());
        }
    }
}

/// The text of a message's content: a string, text parts joined, or null.
fn content_text(content: &Value, i: usize) -> Result<String, ApiError> {
    let param = || format!("messages[{i}].content");
    match content {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    (kind, _) => {
                        return Err(ApiError::param(
                            param(),
                            format!("messages[{i}].content[{j}] is not supported (type {}); only {{\"type\":\"text\",\"text\":\"...\"}} parts are", kind.unwrap_or("missing")),
                        ))
                    }
                }
            }
            Ok(text)
        }
        _ => Err(ApiError::param(
            param(),
            format!("messages[{i}].content must be a string or an array of text parts"),
        )),
    }
}

/// A value in `[lo, hi]`, or the default.
fn range(name: &str, value: Option<f64>, lo: f64, hi: f64, default: f32) -> Result<f32, ApiError> {
    match value {
        None => Ok(default),
        Some(v) if (lo..=hi).contains(&v) => Ok(v as f32),
        Some(v) => Err(ApiError::param(
            name,
            format!("`{name}` must be between {lo} and {hi} (got {v})"),
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

fn repetition(value: Option<f64>) -> Result<f32, ApiError> {
    match value {
        None => Ok(1.0),
        Some(v) if v > 0.0 && v <= 10.0 => Ok(v as f32),
        Some(v) => Err(ApiError::param("repetition_penalty", format!("`repetition_penalty` must be greater than 0 and at most 10; 1 disables it (got {v})"))),
    }
}

fn positive(name: &str, value: i64) -> Result<u32, ApiError> {
    if value <= 0 {
        return Err(ApiError::param(
            name,
            format!("`{name}` must be at least 1 (got {value})"),
        ));
    }
    Ok(u32::try_from(value).unwrap_or(u32::MAX))
}

fn stops(value: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let bad = || {
        ApiError::param(
            "stop",
            format!("`stop` must be a string or an array of at most {MAX_STOPS} strings"),
        )
    };
    let list = match value {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if items.len() <= MAX_STOPS => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned).ok_or_else(bad))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad()),
    };
    Ok(list.into_iter().filter(|s| !s.is_empty()).collect())
}

/// A seed for requests that do not give one.
pub(crate) fn random_seed() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or(0);
    nanos.wrapping_mul(0x9e37_79b9)
}

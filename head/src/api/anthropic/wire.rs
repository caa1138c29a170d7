//! The Messages API's response bodies and stream events as serde types.

use crate::api::generate::{Generation, Usage};
use crate::api::output::FinishReason;
use serde::Serialize;

/// A whole answer: `{"type":"message", ...}`.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    /// `msg_...`.
    pub id: String,
    /// Always `message`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Always `assistant`.
    pub role: &'static str,
    /// The model id.
    pub model: String,
    /// The answer's blocks: text, then any `tool_use` blocks.
    pub content: Vec<ContentBlock>,
    /// Why the answer ended; `null` in `message_start`.
    pub stop_reason: Option<StopReason>,
    /// The stop sequence that ended it, if one did.
    pub stop_sequence: Option<String>,
    /// Token counts.
    pub usage: MessageUsage,
}

/// `{"type":"text","text":...}`.
#[derive(Debug, Clone, Serialize)]
pub struct TextBlock {
    /// Always `text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The text.
    pub text: String,
}

impl TextBlock {
    /// A text block holding `text`.
    pub fn new(text: String) -> Self {
        TextBlock { kind: "text", text }
    }
}

/// One block of an answer.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum ContentBlock {
    /// `{"type":"text", ...}`.
    Text(TextBlock),
    /// `{"type":"tool_use", ...}`.
    ToolUse(ToolUseBlock),
}

/// `{"type":"tool_use","id":"toolu_...","name":...,"input":{...}}`.
#[derive(Debug, Clone, Serialize)]
pub struct ToolUseBlock {
    /// Always `tool_use`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `toolu_...`, which the `tool_result` answering it names.
    pub id: String,
    /// The tool called.
    pub name: String,
    /// Its input, an object.
    pub input: serde_json::Value,
}

/// Why an answer ended, as Anthropic names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model ended its turn.
    EndTurn,
    /// `max_tokens` (or the context) ran out.
    MaxTokens,
    /// One of `stop_sequences` was generated.
    StopSequence,
    /// The model called tools.
    ToolUse,
}

/// Anthropic's usage. `input_tokens` counts the prompt tokens the node had
/// to read; those it found in its cache are `cache_read_input_tokens`, so
/// the whole prompt is their sum, as with Anthropic's prompt caching.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct MessageUsage {
    /// Prompt tokens not found in the node's cache.
    pub input_tokens: u32,
    /// Tokens generated.
    pub output_tokens: u32,
    /// Always 0: nodes cache prefixes as they go, without a write step.
    pub cache_creation_input_tokens: u32,
    /// Prompt tokens the node found in its KV cache.
    pub cache_read_input_tokens: u32,
}

impl From<Usage> for MessageUsage {
    fn from(usage: Usage) -> Self {
        MessageUsage {
            input_tokens: usage.prompt_tokens.saturating_sub(usage.cached_tokens),
            output_tokens: usage.completion_tokens,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: usage.cached_tokens,
        }
    }
}

/// The stop reason and sequence of a generation that ended with `finish`.
pub fn stop_of(generation: &Generation, finish: FinishReason) -> (StopReason, Option<String>) {
    match (finish, generation.stop_sequence()) {
        (FinishReason::Length, _) => (StopReason::MaxTokens, None),
        (FinishReason::Stop, Some(seq)) => (StopReason::StopSequence, Some(seq.to_owned())),
        (FinishReason::Stop, None) => (StopReason::EndTurn, None),
        (FinishReason::ToolCalls, _) => (StopReason::ToolUse, None),
    }
}

/// The answer of `POST /v1/messages/count_tokens`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TokenCount {
    /// Tokens in the rendered prompt.
    pub input_tokens: u32,
}

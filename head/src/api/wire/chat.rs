//! `/v1/chat/completions`: the whole answer and its stream chunks.

use super::{NoLogprobs, Object, Usage};
use crate::api::output::FinishReason;
use serde::{Deserialize, Serialize};

/// The whole, non-streamed chat answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatCompletion {
    /// `chatcmpl-...`.
    pub id: String,
    /// Always [`Object::ChatCompletion`].
    pub object: Object,
    /// Unix seconds.
    pub created: u64,
    /// The model id.
    pub model: String,
    /// The one choice generated.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    pub usage: Usage,
}

/// A choice of a whole chat answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatChoice {
    /// Its position; always 0, one choice is generated.
    pub index: u32,
    /// The assistant's message.
    pub message: AssistantMessage,
    /// Always `null`.
    pub logprobs: NoLogprobs,
    /// Why the generation ended.
    pub finish_reason: FinishReason,
}

/// The role of a message the server writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The model's turn.
    Assistant,
}

/// The message of a whole chat answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Always [`Role::Assistant`].
    pub role: Role,
    /// The generated text.
    pub content: String,
}

/// One server-sent event of a streamed chat answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatCompletionChunk {
    /// `chatcmpl-...`, the same in every chunk of one answer.
    pub id: String,
    /// Always [`Object::ChatCompletionChunk`].
    pub object: Object,
    /// Unix seconds.
    pub created: u64,
    /// The model id.
    pub model: String,
    /// One choice, or none in the usage chunk.
    pub choices: Vec<ChatChunkChoice>,
    /// Only in the last chunk, and only if the client asked for it with
    /// `stream_options.include_usage`; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// The choice of a chat chunk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatChunkChoice {
    /// Always 0.
    pub index: u32,
    /// What this chunk adds to the message.
    pub delta: Delta,
    /// Always `null`.
    pub logprobs: NoLogprobs,
    /// `null` until the last chunk with a choice.
    pub finish_reason: Option<FinishReason>,
}

/// A piece of the assistant's message; an empty object in the chunk that
/// only carries the finish reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// Only in the first chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The next text; absent in the chunk with the finish reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

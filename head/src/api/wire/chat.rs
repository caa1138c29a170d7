//! `/v1/chat/completions`: the whole answer and its stream chunks.

use super::logprobs::ChatLogprobs;
use super::{Object, Usage};
use crate::api::output::FinishReason;
use serde::{Deserialize, Serialize};

/// The whole, non-streamed chat answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletion {
    /// `chatcmpl-...`.
    pub id: String,
    /// Always [`Object::ChatCompletion`].
    pub object: Object,
    /// Unix seconds.
    pub created: u64,
    /// The model id.
    pub model: String,
    /// The `n` choices generated, by index.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    pub usage: Usage,
}

/// A choice of a whole chat answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChoice {
    /// Its position among the `n` choices.
    pub index: u32,
    /// The assistant's message.
    pub message: AssistantMessage,
    /// The tokens' log-probabilities when the request asked for them;
    /// `null` otherwise.
    pub logprobs: Option<ChatLogprobs>,
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
    /// The generated text; `null` when the answer is only tool calls.
    pub content: Option<String>,
    /// The tools the model called, if it called any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// One server-sent event of a streamed chat answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChunkChoice {
    /// Its position among the `n` choices.
    pub index: u32,
    /// What this chunk adds to the message.
    pub delta: Delta,
    /// The tokens' log-probabilities when the request asked for them;
    /// `null` otherwise.
    pub logprobs: Option<ChatLogprobs>,
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
    /// Pieces of tool calls: the first for a call carries its index, id,
    /// type and name, later ones more of its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// One call of a function the request offered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// `call_...`, what the `tool` message answering it names.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function and its arguments.
    pub function: FunctionCall,
}

/// The function a tool call names, with its arguments as JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// The arguments: a JSON object, as text.
    pub arguments: String,
}

/// A piece of a streamed tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    /// Which call of the message this piece belongs to.
    pub index: u32,
    /// The call's id, in its first piece only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `function`, in its first piece only.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The name (first piece) and the next part of the arguments.
    pub function: FunctionDelta,
}

/// The function part of a [`ToolCallDelta`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionDelta {
    /// The name, in the call's first piece only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The next part of the arguments' JSON text.
    pub arguments: String,
}

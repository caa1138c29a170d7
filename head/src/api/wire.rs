//! The OpenAI response bodies and stream chunks, as serde types.
//!
//! Each answer a client reads is one of these, serialized; tests parse
//! answers back into the same types. Which fields are always present (even
//! as `null`) and which are left out when empty is part of the contract
//! with clients and is spelled out on each field.
//!
//! - [`chat`]: `/v1/chat/completions` answers and chunks.
//! - [`completion`]: `/v1/completions` answers and chunks.
//! - [`logprobs`]: the log probabilities of a choice, in either shape.
//! - [`error`]: the error object, of an error answer or a stream's error
//!   event.
//! - [`models`]: the `/v1/models` list.

pub mod chat;
pub mod completion;
pub mod error;
pub mod logprobs;
pub mod models;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

/// The `object` field, which names what kind of object a body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Object {
    /// A whole chat answer.
    #[serde(rename = "chat.completion")]
    ChatCompletion,
    /// One streamed piece of a chat answer.
    #[serde(rename = "chat.completion.chunk")]
    ChatCompletionChunk,
    /// A text answer, whole or streamed (OpenAI uses one name for both).
    #[serde(rename = "text_completion")]
    TextCompletion,
    /// A list, such as the models.
    #[serde(rename = "list")]
    List,
    /// One model.
    #[serde(rename = "model")]
    Model,
}

/// Token counts of a generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
    /// Their sum.
    pub total_tokens: u32,
    /// How much of the prompt was already cached.
    pub prompt_tokens_details: PromptTokensDetails,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens the node found in its KV cache.
    pub cached_tokens: u32,
}

impl From<super::generate::Usage> for Usage {
    fn from(usage: super::generate::Usage) -> Self {
        Usage {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: usage.prompt_tokens.saturating_add(usage.completion_tokens),
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: usage.cached_tokens,
            },
        }
    }
}

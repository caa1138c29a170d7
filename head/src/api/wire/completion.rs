//! `/v1/completions`: the whole answer and its stream chunks.

use super::logprobs::TextLogprobs;
use super::{Object, Usage};
use crate::api::output::FinishReason;
use serde::{Deserialize, Serialize};

/// The whole, non-streamed text answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextCompletion {
    /// `cmpl-...`.
    pub id: String,
    /// Always [`Object::TextCompletion`].
    pub object: Object,
    /// Unix seconds.
    pub created: u64,
    /// The model id.
    pub model: String,
    /// The `n` choices generated, by index.
    pub choices: Vec<TextChoice>,
    /// Token counts.
    pub usage: Usage,
}

/// A choice of a whole text answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextChoice {
    /// Its position among the `n` choices.
    pub index: u32,
    /// The generated text.
    pub text: String,
    /// The tokens' log-probabilities when the request asked for them;
    /// `null` otherwise.
    pub logprobs: Option<TextLogprobs>,
    /// Why the generation ended.
    pub finish_reason: FinishReason,
}

/// One server-sent event of a streamed text answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextCompletionChunk {
    /// `cmpl-...`, the same in every chunk of one answer.
    pub id: String,
    /// Always [`Object::TextCompletion`], as OpenAI sends it.
    pub object: Object,
    /// Unix seconds.
    pub created: u64,
    /// The model id.
    pub model: String,
    /// One choice, or none in the usage chunk.
    pub choices: Vec<TextChunkChoice>,
    /// Only in the last chunk, and only if the client asked for it with
    /// `stream_options.include_usage`; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// The choice of a text chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextChunkChoice {
    /// Its position among the `n` choices.
    pub index: u32,
    /// The next text; empty in the chunk with the finish reason.
    pub text: String,
    /// The tokens' log-probabilities when the request asked for them;
    /// `null` otherwise.
    pub logprobs: Option<TextLogprobs>,
    /// `null` until the last chunk with a choice.
    pub finish_reason: Option<FinishReason>,
}

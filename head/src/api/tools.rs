//! Tool calling, for `/v1/chat/completions`, Ollama's `/api/chat` and
//! Anthropic's `/v1/messages`.
//!
//! - [`spec`]: `tools`, `tool_choice` and `parallel_tool_calls`, checked
//!   into a [`ToolSet`].
//! - [`prompt`]: the tools, the assistant's earlier calls and the tools'
//!   results as prompt text, in the Hermes format (`<tool_call>` and
//!   `<tool_response>` tags), for templates without a tool format of their
//!   own, as llama.cpp's server does.
//! - [`grammar`]: the Lark constraint that makes `required` and a named
//!   function produce a call whose arguments match the function's schema.
//! - [`parse`]: the calls read back out of the generated text; text that is
//!   not a readable call stays text.
//! - [`split`]: a streamed answer's text and the calls held back after it,
//!   for every API's streams.
//! - [`respond`]: the answer with `message.tool_calls`, whole or streamed as
//!   OpenAI's deltas.

pub mod grammar;
pub mod parse;
pub mod prompt;
pub mod respond;
pub mod spec;
pub mod split;

#[cfg(test)]
mod tests;

pub use spec::{Choice, Function, ToolSet};

use crate::api::types::CompletionRequest;
use crate::api::ApiError;

/// An OpenAI-shaped request's `tools`, `tool_choice` and
/// `parallel_tool_calls`, checked (OpenAI's chat, Ollama's chat).
///
/// # Errors
/// [`ApiError::InvalidParam`] naming the field at fault.
pub fn requested(req: &CompletionRequest) -> Result<Option<ToolSet>, ApiError> {
    ToolSet::from_request(
        req.tools.as_ref(),
        req.tool_choice.as_ref(),
        req.parallel_tool_calls.as_ref(),
    )
}

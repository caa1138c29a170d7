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

use crate::api::types::{CompletionRequest, Params};
use crate::api::ApiError;
use crate::codec::ChatMessage;

/// The request's tools, checked: the messages with the tools described,
/// and the constraint a required call needs set in `params`.
///
/// # Errors
/// [`ApiError::InvalidParam`] naming the field at fault, or
/// `response_format` when it is combined with a required call.
pub fn prepare(
    req: &CompletionRequest,
    messages: Vec<ChatMessage>,
    params: &mut Params,
) -> Result<(Vec<ChatMessage>, Option<ToolSet>), ApiError> {
    let tools = ToolSet::from_request(
        req.tools.as_ref(),
        req.tool_choice.as_ref(),
        req.parallel_tool_calls.as_ref(),
    )?;
    let Some(tools) = tools else {
        return Ok((messages, None));
    };
    if let Some(constraint) = grammar::constraint(&tools)? {
        if params.constraint.is_some() {
            return Err(ApiError::param(
                "response_format",
                "`response_format` cannot be combined with a `tool_choice` that requires a call; send one or the other",
            ));
        }
        params.constraint = Some(constraint);
    }
    Ok((prompt::with_tools(messages, &tools), Some(tools)))
}

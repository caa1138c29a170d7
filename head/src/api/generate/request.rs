//! The request every dialect's decoder produces: what to generate, in the
//! head's own terms, whichever API it came in. The path takes it from
//! here ([`prepare`](super::prepare)): one model check, one way tools are
//! offered and enforced, one session recording, one tokenizer, one context
//! check.

use serde_json::Value;

use super::prompt::Prompt;
use crate::api::tools::ToolSet;
use crate::api::types::Params;
use crate::sessions::SessionId;

/// One generation request, decoded from any dialect.
#[derive(Debug)]
///
/// The model is not in it: the path admits the model first (so that even a
/// request refused for its other fields is counted against its model), then
/// has the dialect decode the rest.
pub struct GenerationRequest {
    /// The conversation (neutral roles and content) or raw text.
    pub prompt: Prompt,
    /// The request field the prompt came from, named when it is at fault.
    pub field: &'static str,
    /// Sampling, limits, stop strings, `n`, log-probabilities, the output
    /// constraint, streaming.
    pub params: Params,
    /// The tools the model may call and the choice among them.
    pub tools: Option<ToolSet>,
    /// The session the turn is recorded in (`x-superfluid-session`).
    pub session: Option<SessionTurn>,
}

impl GenerationRequest {
    /// A request with nothing but its prompt and parameters.
    pub fn new(prompt: Prompt, field: &'static str, params: Params) -> Self {
        GenerationRequest {
            prompt,
            field,
            params,
            tools: None,
            session: None,
        }
    }
}

/// The session a chat request names, with the messages it adds to it: its
/// messages after the last assistant turn, system messages aside, as the
/// session stores them.
#[derive(Debug)]
pub struct SessionTurn {
    /// The session.
    pub id: SessionId,
    /// The new messages, each as a session `message` event's body.
    pub messages: Vec<Value>,
}

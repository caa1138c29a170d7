//! The output stage: what a generation hands to the dialect that answers
//! the client.
//!
//! [`Step`] is the one place a new kind of output is added (a tool call,
//! log probabilities). The JSON and the server-sent-event renderers in
//! [`respond`](super::respond) match on it without a wildcard arm, so a new
//! variant does not compile until every renderer either renders it or
//! refuses it.

use serde::{Deserialize, Serialize};

/// What the next step of a generation produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Text for the client.
    Text(String),
    /// The generation ended, for this reason.
    Done(FinishReason),
}

/// Why a generation ended, as OpenAI's `finish_reason` names it.
///
/// The serde names are the wire strings, the only place they are spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model ended its answer, or a stop string matched.
    Stop,
    /// The token limit (the client's or the context's) was reached.
    Length,
    /// The model called one or more of the request's tools.
    ToolCalls,
}

impl From<superfluid_proto::FinishReason> for FinishReason {
    /// A generation the node cancelled ended on the head's own request (a
    /// stop string matched), so the client sees `stop`.
    fn from(reason: superfluid_proto::FinishReason) -> Self {
        use superfluid_proto::FinishReason as Node;
        match reason {
            Node::Length => FinishReason::Length,
            Node::Stop | Node::Cancelled => FinishReason::Stop,
        }
    }
}

/// Token counts reported to the client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: u32,
    /// Prompt tokens the node found in its KV cache.
    pub cached_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
}

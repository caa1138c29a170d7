//! Answers a running [`Generation`] as one Messages API `message`; what
//! every answer of one request shares ([`Reply`]). The streamed answer is
//! [`stream`](super::stream).

use super::wire::{stop_of, ContentBlock, Message, MessageUsage, TextBlock};
use crate::api::generate::answer::Answer;
use crate::api::generate::Generation;
pub use crate::api::node_header::with_node;
use crate::api::ApiError;
use axum::response::Response;
use axum::Json;

/// What every event of one answer shares.
#[derive(Debug, Clone)]
pub struct Reply {
    /// `msg_...`.
    pub id: String,
    /// The model id.
    pub model: String,
}

impl Reply {
    /// A message holding `text` as its one text block.
    pub fn message(&self, text: Option<String>, usage: MessageUsage) -> Message {
        Message {
            id: self.id.clone(),
            kind: "message",
            role: "assistant",
            model: self.model.clone(),
            content: text
                .map(|t| ContentBlock::Text(TextBlock::new(t)))
                .into_iter()
                .collect(),
            stop_reason: None,
            stop_sequence: None,
            usage,
        }
    }

    /// The id of the `index`th `tool_use` block of this message.
    pub fn tool_use_id(&self, index: usize) -> String {
        format!("toolu_{}_{index}", self.id.trim_start_matches("msg_"))
    }
}

/// Runs the generation to its end and answers with one `message`.
pub async fn complete(generation: Generation, reply: Reply) -> Result<Response, ApiError> {
    let mut answer = Answer::new(generation, None);
    let whole = answer.whole().await?;
    let generation = answer.generation();
    let (stop_reason, stop_sequence) = stop_of(generation, whole.finish);
    let mut message = reply.message(Some(whole.text), generation.usage().into());
    message.stop_reason = Some(stop_reason);
    message.stop_sequence = stop_sequence;
    Ok(with_node(&generation.node, Json(message)))
}

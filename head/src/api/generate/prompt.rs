//! A request's prompt as its dialect decoded it, and the one way it
//! becomes the model's tokens: a conversation rendered with the model's
//! chat template (and any text the answer continues), or text as given.

use std::sync::Arc;

use superfluid_proto::TokenId;

use crate::api::ApiError;
use crate::codec::{ChatMessage, ModelCodec};

/// The prompt of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// A conversation, rendered with the assistant turn opened, then
    /// `prefill`: the text of a last assistant turn, which the answer
    /// continues (Anthropic's prefill).
    Chat {
        /// System, user, assistant and tool turns.
        messages: Vec<ChatMessage>,
        /// Text the answer continues.
        prefill: Option<String>,
    },
    /// Text given as it is (`/v1/completions`, Ollama's `raw`).
    Raw(String),
}

impl Prompt {
    /// A conversation with nothing to continue.
    pub fn chat(messages: Vec<ChatMessage>) -> Prompt {
        Prompt::Chat {
            messages,
            prefill: None,
        }
    }

    /// The prompt as the model's tokens.
    pub async fn tokens(self, codec: &Arc<ModelCodec>) -> Result<Vec<TokenId>, ApiError> {
        let text = match self {
            Prompt::Chat { messages, prefill } => {
                let mut text = codec.render_chat(&messages)?;
                if let Some(prefill) = prefill {
                    text.push_str(&prefill);
                }
                text
            }
            Prompt::Raw(text) => text,
        };
        tokenize(codec, text).await
    }
}

/// Prompts longer than this many bytes are tokenized on a blocking thread.
/// A megabyte takes about a quarter of a second, which on an async thread
/// would stall every stream that thread carries; a short prompt is quicker
/// inline than the hand-off.
const INLINE_TOKENIZE_BYTES: usize = 4096;

/// `text` as the model's tokens.
async fn tokenize(codec: &Arc<ModelCodec>, text: String) -> Result<Vec<TokenId>, ApiError> {
    if text.len() <= INLINE_TOKENIZE_BYTES {
        return Ok(codec.tokenize(&text));
    }
    let codec = codec.clone();
    tokio::task::spawn_blocking(move || codec.tokenize(&text))
        .await
        .map_err(|e| ApiError::Generation {
            message: format!("tokenizing the prompt failed ({e}); retry the request"),
        })
}

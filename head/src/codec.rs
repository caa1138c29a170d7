//! Chat templates, tokenization and detokenization, per model.
//!
//! A [`ModelCodec`] holds one model's vocabulary (loaded from its GGUF file
//! without the weights) and its chat template. The HTTP layer uses it to turn
//! a request into token ids and the node's token ids back into text:
//!
//! - [`template`]: renders the GGUF's `tokenizer.chat_template` with minijinja.
//! - [`model`]: [`ModelCodec`] itself: loading, tokenizing, token pieces.
//! - [`detok`]: [`Detokenizer`], text from a stream of token bytes that never
//!   splits a UTF-8 character.
//! - [`stop`]: [`StopMatcher`], cutting text at the first stop string.
//! - [`catalog`]: [`Catalog`], the models the head serves, by id.

pub mod catalog;
pub mod detok;
pub mod model;
pub mod stop;
pub mod template;

#[cfg(test)]
mod split_tests;
#[cfg(test)]
pub(crate) mod tests;

pub use catalog::Catalog;
pub use detok::Detokenizer;
pub use model::ModelCodec;
pub use stop::{StopMatcher, StopOutput};
pub use template::{ChatMessage, ChatTemplate};

use std::path::PathBuf;

/// Why a model's codec could not be loaded or could not encode a request.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The model file does not exist.
    #[error("model file {path:?} does not exist; check the path or download the model first")]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// llama.cpp could not read the file's vocabulary.
    #[error(
        "could not load the vocabulary of {path:?}: {reason}; check that it is a valid GGUF file"
    )]
    Load {
        /// The path given.
        path: PathBuf,
        /// What llama.cpp said.
        reason: String,
    },
    /// Two model files have the same id (file name without `.gguf`).
    #[error(
        "two models have the id {id:?}; rename one of the files so that every model id is unique"
    )]
    DuplicateId {
        /// The id both files share.
        id: String,
    },
    /// The model has no chat template, or its template does not compile.
    #[error("model {model:?} has no usable chat template ({reason}); use /v1/completions with a raw prompt instead")]
    NoTemplate {
        /// The model id.
        model: String,
        /// Why the template is missing or unusable.
        reason: String,
    },
    /// Rendering the chat template failed for these messages (for example the
    /// template raised an exception about the order of roles).
    #[error("the chat template of model {model:?} rejected the messages: {reason}")]
    Template {
        /// The model id.
        model: String,
        /// What the template engine said.
        reason: String,
    },
}

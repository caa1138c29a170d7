//! Embeddings over Link F, and which models can compute them.
//!
//! Every stream the head opens starts with one [`HeadStream`] frame. For
//! [`HeadStream::Embed`] the node answers with exactly one [`EmbedReply`]
//! and finishes the stream; resetting the stream cancels the request.
//!
//! Head and node decide whether a model embeds with the same rule,
//! [`embedding_pooling`], applied to the GGUF's own metadata, so the head
//! never routes an embedding to a node that would refuse it.

use serde::{Deserialize, Serialize};

use crate::messages::{FailureKind, GenerateRequest, TokenId};

/// The first frame of a stream the head opens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum HeadStream {
    /// Run a generation; [`crate::GenerateEvent`]s follow.
    Generate(GenerateRequest),
    /// Compute embeddings; one [`EmbedReply`] follows.
    Embed(EmbedRequest),
}

impl HeadStream {
    /// The generation this stream asks for, if it asks for one.
    pub fn into_generate(self) -> Option<GenerateRequest> {
        match self {
            Self::Generate(request) => Some(request),
            Self::Embed(_) => None,
        }
    }
}

/// The most inputs one [`EmbedRequest`] may carry (OpenAI's limit).
pub const MAX_EMBED_INPUTS: usize = 2048;

/// Embeddings of several inputs with one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbedRequest {
    /// Which of the node's models to run.
    pub model: String,
    /// The inputs, each already tokenized by the head (with the model's own
    /// start and end tokens), at most [`MAX_EMBED_INPUTS`] of them.
    pub inputs: Vec<Vec<TokenId>>,
}

/// The node's answer to an [`EmbedRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EmbedReply {
    /// One vector per input, in the inputs' order, each of the model's
    /// embedding length and of unit Euclidean length.
    Embeddings {
        /// The vectors.
        vectors: Vec<Vec<f32>>,
        /// Tokens computed, over all inputs.
        prompt_tokens: u32,
    },
    /// The request could not run; `message` says why.
    Failed {
        /// Whose fault it was (see [`FailureKind::is_request_error`]).
        kind: FailureKind,
        /// What went wrong, for the client.
        message: String,
    },
}

/// How a model pools its tokens' states into one vector, as GGUF's
/// `{arch}.pooling_type` numbers it (llama.cpp's `llama_pooling_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Pooling {
    /// The mean of every token's state.
    Mean,
    /// The first token's (`[CLS]`) state.
    Cls,
    /// The last token's state.
    Last,
}

impl Pooling {
    /// The pooling GGUF's number names; `None` for none (0), rank (4,
    /// which scores pairs rather than embedding one text) and unknown ones.
    pub fn from_gguf(value: i64) -> Option<Pooling> {
        match value {
            1 => Some(Self::Mean),
            2 => Some(Self::Cls),
            3 => Some(Self::Last),
            _ => None,
        }
    }

    /// The name users see in listings and errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mean => "mean",
            Self::Cls => "cls",
            Self::Last => "last",
        }
    }
}

/// The GGUF metadata key that holds `arch`'s pooling type.
pub fn pooling_key(arch: &str) -> String {
    format!("{arch}.pooling_type")
}

/// Whether a model embeds, and how, from its GGUF's
/// `general.architecture` and `{arch}.pooling_type` (as text, `None` when
/// absent). A model embeds exactly when its file names a pooling that
/// yields one vector per text: embedding models (BERT and its kin) carry
/// one; chat models carry none, and their per-token states pooled by a
/// guess would make poor embeddings, so they are refused rather than
/// served badly.
pub fn embedding_pooling(arch: &str, pooling_type: Option<&str>) -> Option<Pooling> {
    if arch.is_empty() {
        return None;
    }
    pooling_type
        .and_then(|v| v.trim().parse::<i64>().ok())
        .and_then(Pooling::from_gguf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, encode, LEN_PREFIX};

    #[test]
    fn bert_with_mean_pooling_embeds_and_a_chat_model_does_not() {
        assert_eq!(embedding_pooling("bert", Some("1")), Some(Pooling::Mean));
        assert_eq!(
            embedding_pooling("nomic-bert", Some("2")),
            Some(Pooling::Cls)
        );
        assert_eq!(embedding_pooling("llama", None), None);
        assert_eq!(embedding_pooling("bert", Some("0")), None);
        assert_eq!(embedding_pooling("bert", Some("4")), None);
        assert_eq!(embedding_pooling("bert", Some("mean")), None);
        assert_eq!(embedding_pooling("", Some("1")), None);
    }

    #[test]
    fn embed_frames_round_trip() {
        let msgs = [
            HeadStream::Embed(EmbedRequest {
                model: "m".into(),
                inputs: vec![vec![101, 7, 102], vec![]],
            }),
            HeadStream::Generate(GenerateRequest {
                model: "m".into(),
                prompt: vec![1, 2],
                sampling: crate::Sampling::default(),
                max_tokens: 3,
                slot: None,
                constraint: None,
                logprobs: None,
            }),
        ];
        for msg in msgs {
            let frame = encode(&msg).unwrap();
            assert_eq!(decode::<HeadStream>(&frame[LEN_PREFIX..]).unwrap(), msg);
        }
        let reply = EmbedReply::Embeddings {
            vectors: vec![vec![0.6, 0.8]],
            prompt_tokens: 3,
        };
        let frame = encode(&reply).unwrap();
        assert_eq!(decode::<EmbedReply>(&frame[LEN_PREFIX..]).unwrap(), reply);
    }
}

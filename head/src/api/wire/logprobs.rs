//! `choices[i].logprobs`: the chat shape (`content`, one entry per token)
//! and the legacy completions shape (parallel lists), built from the
//! node's [`TokenLogprob`]s.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use superfluid_proto::TokenLogprob;

/// The `logprobs` of a chat choice or chunk choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatLogprobs {
    /// One entry per generated token, in order.
    pub content: Vec<ChatTokenLogprob>,
    /// Always `null`: the served models do not refuse.
    pub refusal: Option<Vec<ChatTokenLogprob>>,
}

/// One generated token of a chat answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTokenLogprob {
    /// Its text.
    pub token: String,
    /// Its natural log-probability.
    pub logprob: f32,
    /// Its bytes (a token may hold part of a character).
    pub bytes: Option<Vec<u8>>,
    /// The most likely tokens at its position, most likely first.
    pub top_logprobs: Vec<ChatTopLogprob>,
}

/// One of the most likely tokens at a position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTopLogprob {
    /// Its text.
    pub token: String,
    /// Its natural log-probability.
    pub logprob: f32,
    /// Its bytes.
    pub bytes: Option<Vec<u8>>,
}

impl ChatLogprobs {
    /// The chat shape of `entries`.
    pub fn new(entries: &[TokenLogprob]) -> Self {
        let content = entries
            .iter()
            .map(|e| ChatTokenLogprob {
                token: e.text.clone(),
                logprob: e.logprob,
                bytes: Some(e.bytes.clone()),
                top_logprobs: e
                    .top
                    .iter()
                    .map(|t| ChatTopLogprob {
                        token: t.text.clone(),
                        logprob: t.logprob,
                        bytes: Some(t.bytes.clone()),
                    })
                    .collect(),
            })
            .collect();
        ChatLogprobs {
            content,
            refusal: None,
        }
    }
}

/// The `logprobs` of a legacy completions choice or chunk choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextLogprobs {
    /// Each generated token's text.
    pub tokens: Vec<String>,
    /// Each one's natural log-probability.
    pub token_logprobs: Vec<f32>,
    /// Per token, the most likely tokens' texts with their log-probabilities.
    pub top_logprobs: Vec<Map<String, Value>>,
    /// Where each token's text starts in the choice's text, in characters.
    pub text_offset: Vec<usize>,
}

impl TextLogprobs {
    /// The legacy shape of `entries`, whose text starts `*offset`
    /// characters into the choice's text; moves `offset` past them.
    pub fn new(entries: &[TokenLogprob], offset: &mut usize) -> Self {
        let mut out = TextLogprobs {
            tokens: Vec::with_capacity(entries.len()),
            token_logprobs: Vec::with_capacity(entries.len()),
            top_logprobs: Vec::with_capacity(entries.len()),
            text_offset: Vec::with_capacity(entries.len()),
        };
        for e in entries {
            out.tokens.push(e.text.clone());
            out.token_logprobs.push(e.logprob);
            out.top_logprobs.push(
                e.top
                    .iter()
                    .map(|t| (t.text.clone(), Value::from(f64::from(t.logprob))))
                    .collect(),
            );
            out.text_offset.push(*offset);
            *offset += e.text.chars().count();
        }
        out
    }
}

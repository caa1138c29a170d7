//! Link F message types.

use serde::{Deserialize, Serialize};

use crate::blocks::BlockHash;

/// A token id in the model's vocabulary.
pub type TokenId = u32;

/// One model a node can serve.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelDescription {
    /// The model id clients name (the GGUF file stem).
    pub id: String,
    /// Tokens one sequence may hold (prompt plus generated).
    pub ctx: u32,
    /// Sequences the node runs at once for this model.
    pub slots: u32,
    /// The sha256 of the GGUF file's content as lowercase hex; empty if unknown.
    /// The head routes only to nodes whose file matches its own.
    #[serde(default)]
    pub sha256: String,
    /// The type the engine stores its KV cache in (`f16`, `q8_0`, `q4_0`);
    /// empty if unknown or the model keeps no KV cache.
    #[serde(default)]
    pub kv_cache_type: String,
    /// Bytes the engine's KV cache takes for all its slots at their full
    /// context; 0 if unknown or the model keeps no KV cache.
    #[serde(default)]
    pub kv_bytes: u64,
}

/// What a node says about itself when it connects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeHello {
    /// The node's [`crate::PROTOCOL_VERSION`].
    pub version: u32,
    /// A human name for logs and listings.
    pub name: String,
    /// Models this node serves.
    pub models: Vec<ModelDescription>,
    /// The whole join token text, sent only when joining the fleet for the
    /// first time; an enrolled node sends `None`.
    #[serde(default)]
    pub join_token: Option<String>,
    /// A short description of the node's machine (CPU model and cores, RAM,
    /// GPU backend) for listings and metrics; the head keeps at most
    /// [`crate::hardware::MAX_HARDWARE_LEN`] bytes of it
    /// ([`crate::hardware::bounded`]).
    #[serde(default)]
    pub hardware: String,
    /// Memory the machine has free for a model, in bytes; 0 if unknown.
    #[serde(default)]
    pub free_memory: u64,
    /// The sha256 of each verified model file the node has on disk (see
    /// [`crate::placement::ModelsReport::on_disk`]).
    #[serde(default)]
    pub on_disk: Vec<String>,
}

/// The head's answer to a [`NodeHello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HeadReply {
    /// The node is part of the fleet and may receive generations.
    Welcome {
        /// The head's [`crate::PROTOCOL_VERSION`].
        version: u32,
        /// The id the head knows this node by.
        node_id: String,
        /// The head's models, which the node may fetch by sha256 (see
        /// [`crate::transfer`]); a node with no model of its own serves these.
        models: Vec<crate::transfer::ModelOffer>,
    },
    /// The head will not take this node; `reason` says why and what to do.
    Refused {
        /// A message for the node's operator.
        reason: String,
    },
}

/// Messages on the control stream after the hello.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControlMsg {
    /// Liveness, sent by both sides at a fixed interval.
    Heartbeat,
    /// Node to head: changes to a model's KV caches, in the order they
    /// happened. Right after the hello a node sends its whole cache state
    /// this way (a `Cleared` and a `Stored` per slot).
    Kv(KvUpdate),
    /// Node to head: how busy a model's engine is and how fast it runs.
    Load(LoadReport),
    /// Node to head: how far the download of a model it lacks has come.
    Fetching(crate::transfer::FetchProgress),
    /// Head to node: load or unload a model ([`crate::placement`]).
    Place(crate::placement::Placement),
    /// Node to head: the models it serves now, replacing its hello's list.
    Models(crate::placement::ModelsReport),
}

/// Changes to the KV caches of one of a node's models.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvUpdate {
    /// The model whose slots changed.
    pub model: String,
    /// What changed, oldest first.
    pub events: Vec<KvEvent>,
}

/// One change to one slot's cached blocks (see [`crate::blocks`]). A slot's
/// cache is a chain of block hashes from the start of its sequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvEvent {
    /// These blocks were appended, in order, to the slot's chain.
    Stored {
        /// The slot (KV sequence) index.
        slot: u32,
        /// The new blocks' hashes.
        blocks: Vec<BlockHash>,
    },
    /// These blocks, the last ones of the slot's chain, were dropped.
    Removed {
        /// The slot (KV sequence) index.
        slot: u32,
        /// The dropped blocks' hashes, in chain order.
        blocks: Vec<BlockHash>,
    },
    /// The slot holds nothing any more.
    Cleared {
        /// The slot (KV sequence) index.
        slot: u32,
    },
}

/// How busy one of a node's engines is, and its measured speed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// The model this engine serves.
    pub model: String,
    /// Sequences in a slot now (prefilling or decoding).
    pub running: u32,
    /// Requests waiting for a free slot.
    pub queued: u32,
    /// Prompt tokens still to compute, over queued and prefilling requests.
    pub queued_prompt_tokens: u64,
    /// Measured prompt tokens computed per second; 0 until measured.
    pub prefill_tokens_per_sec: f32,
    /// Measured tokens generated per second by one stream; 0 until measured.
    pub decode_tokens_per_sec: f32,
}

/// How to pick each next token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// 0 picks the most likely token (greedy).
    pub temperature: f32,
    /// Nucleus sampling mass; 1.0 disables it.
    pub top_p: f32,
    /// Keep only the k most likely tokens; 0 disables it.
    pub top_k: u32,
    /// Drop tokens less likely than `min_p` times the most likely; 0 disables it.
    pub min_p: f32,
    /// Seed of the random choice; the same seed and prompt give the same text.
    pub seed: u32,
    /// Multiplicative penalty on recently seen tokens; 1.0 disables it.
    pub repetition_penalty: f32,
    /// Additive penalty on tokens seen at least once; 0 disables it.
    pub presence_penalty: f32,
    /// Additive penalty per occurrence of a token; 0 disables it.
    pub frequency_penalty: f32,
    /// How many recent tokens the penalties look back over.
    pub penalty_last_n: u32,
    /// Added to these tokens' logits before any other stage, as (token id,
    /// bias) pairs; ids outside the vocabulary are skipped.
    pub logit_bias: Vec<(u32, f32)>,
    /// How many of the prompt's last tokens this answer generated already:
    /// non-zero only for a continuation, an answer the head moved from a
    /// lost node. The random draw for each generated token comes from
    /// `seed` and the token's position in the whole answer, so the
    /// continuation draws what the first node would have; the penalties
    /// and the `constraint` replay those tokens before the first pick.
    pub generated: u32,
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            seed: 0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            logit_bias: Vec::new(),
            generated: 0,
        }
    }
}

/// One generation, sent by the head as the first frame of a generation stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateRequest {
    /// Which of the node's models to run.
    pub model: String,
    /// The whole prompt, already tokenized by the head.
    pub prompt: Vec<TokenId>,
    /// Sampling parameters.
    pub sampling: Sampling,
    /// The most tokens to generate.
    pub max_tokens: u32,
    /// The slot the head expects to hold the prompt's longest cached prefix;
    /// the node runs the request there when that slot is free.
    pub slot: Option<u32>,
    /// What the generated text must match, if anything. The head has
    /// compiled it once already; a node that still cannot build it fails
    /// the generation with [`FailureKind::InvalidConstraint`].
    #[serde(default)]
    pub constraint: Option<Constraint>,
    /// Report each generated token's log-probability, with this many of
    /// the most likely alternatives (at most [`MAX_TOP_LOGPROBS`]), as a
    /// [`GenerateEvent::Logprobs`] before its `Tokens`; `None` reports none.
    #[serde(default)]
    pub logprobs: Option<u8>,
}

/// The most alternatives a [`GenerateRequest::logprobs`] may ask for.
pub const MAX_TOP_LOGPROBS: u8 = 20;

/// The log-probability of one generated token, after the sampler's logit
/// biases and penalties and before top-k, top-p, min-p and temperature:
/// a log-softmax over the candidates the sampler saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// The token picked.
    pub token: TokenId,
    /// Its text (its bytes, invalid UTF-8 replaced).
    pub text: String,
    /// Its bytes as the model's vocabulary spells them.
    pub bytes: Vec<u8>,
    /// Its natural log-probability (at most 0).
    pub logprob: f32,
    /// The most likely tokens at this position, most likely first; as many
    /// as the request asked for, fewer only if fewer had any probability.
    pub top: Vec<TopLogprob>,
}

/// One of the most likely tokens at a position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    /// The token.
    pub token: TokenId,
    /// Its text (its bytes, invalid UTF-8 replaced).
    pub text: String,
    /// Its bytes as the model's vocabulary spells them.
    pub bytes: Vec<u8>,
    /// Its natural log-probability (at most 0).
    pub logprob: f32,
}

/// A grammar the generated text must follow, enforced token by token while
/// sampling: only tokens that keep the text a prefix of a match may be
/// picked, and the end of generation only where the text is a whole match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Constraint {
    /// JSON that validates against this JSON Schema, given as its JSON text
    /// (Link F's encoding is not self-describing, so the schema travels as
    /// text). `{"type":"object"}` asks for any JSON object.
    JsonSchema(String),
    /// Text that matches this Lark grammar, as llguidance reads it: rules,
    /// regex terminals, and JSON Schemas embedded with `%json { ... }`.
    /// A tool call is `start: "<tool_call>" %json{...} "</tool_call>"`.
    Lark(String),
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FinishReason {
    /// The model produced an end-of-generation token.
    Stop,
    /// `max_tokens` or the context's end was reached.
    Length,
    /// The head cancelled it.
    Cancelled,
}

/// The final account of a generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// Why it ended.
    pub finish: FinishReason,
    /// Tokens in the prompt.
    pub prompt_tokens: u32,
    /// Prompt tokens that were already in the KV cache and not computed again.
    pub cached_tokens: u32,
    /// Tokens generated (the end-of-generation token is not counted).
    pub generated_tokens: u32,
}

/// What a node sends back on a generation stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum GenerateEvent {
    /// Newly generated tokens, in order. End-of-generation tokens are not sent.
    Tokens(Vec<TokenId>),
    /// The log-probabilities of the tokens of the `Tokens` event that comes
    /// next, in the same order; sent only when the request asked for
    /// [`GenerateRequest::logprobs`].
    Logprobs(Vec<TokenLogprob>),
    /// The generation ended; no frame follows.
    Finished(Outcome),
    /// The generation could not run; no frame follows.
    Failed {
        /// Whose fault it was, so the head can answer the client's mistakes
        /// as such and its own as a server error.
        kind: FailureKind,
        /// What went wrong, for the client.
        message: String,
    },
}

/// Why a node could not run a generation. The first kinds are mistakes in
/// the request, which another node would refuse too; the last are the
/// node's own failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FailureKind {
    /// The prompt plus one generated token does not fit in the model's context.
    PromptTooLong,
    /// The node does not serve the requested model.
    UnknownModel,
    /// The prompt has no tokens.
    EmptyPrompt,
    /// A prompt token is not in the model's vocabulary.
    InvalidToken,
    /// The engine failed while running the generation (a decode error, out
    /// of memory); the request itself may be fine.
    Engine,
    /// The engine has stopped (the node is shutting down or its engine
    /// thread died).
    Stopped,
    /// The output constraint could not be built on this node, or could not
    /// be enforced while sampling (its grammar ran past the parser's limits).
    InvalidConstraint,
}

impl FailureKind {
    /// True for the kinds that are the request's fault rather than the node's.
    pub fn is_request_error(self) -> bool {
        matches!(
            self,
            Self::PromptTooLong
                | Self::UnknownModel
                | Self::EmptyPrompt
                | Self::InvalidToken
                | Self::InvalidConstraint
        )
    }
}

/// The id clients use for a model file: its file name without `.gguf`.
///
/// Head and node derive ids the same way, so a node's model matches the
/// head's when both load the same file name.
pub fn model_id_from_path(path: &std::path::Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    name.strip_suffix(".gguf")
        .map(str::to_owned)
        .unwrap_or(name)
}

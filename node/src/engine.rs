//! The engine contract: what the node agent and benchmarks call.

use std::sync::Arc;

use superfluid_proto::{
    EmbedReply, EmbedRequest, FailureKind, GenerateEvent, GenerateRequest, ModelDescription,
};
use tokio::sync::{mpsc, oneshot};

use crate::ledger::Ledger;

/// What an engine serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineInfo {
    /// The model id (GGUF file stem) and its limits.
    pub model: ModelDescription,
}

/// A running generation. Events arrive in order and end with
/// [`GenerateEvent::Finished`] or [`GenerateEvent::Failed`].
///
/// Dropping it cancels the generation: the engine notices the closed channel
/// at its next step and frees the slot.
#[derive(Debug)]
pub struct Generation {
    /// The generation's events.
    pub events: mpsc::UnboundedReceiver<GenerateEvent>,
}

/// Why the engine could not start or take a request.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The model file could not be loaded.
    #[error("could not load model {path}: {reason}; check the path, or run scripts/setup to install the default model")]
    Load {
        /// The model file.
        path: String,
        /// What llama.cpp said.
        reason: String,
    },
    /// The context could not be created (usually too little memory for `--ctx` x `--slots`).
    #[error("could not create a context of {ctx} tokens x {slots} slots: {reason}; lower --ctx or --slots")]
    Context {
        /// Tokens per slot.
        ctx: u32,
        /// Slots.
        slots: u32,
        /// What llama.cpp said.
        reason: String,
    },
    /// Offload settings llama.cpp would refuse, or this build cannot apply.
    #[error(transparent)]
    Offload(#[from] crate::offload::OffloadError),
    /// The request names a model this engine does not run.
    #[error("this node does not serve model {requested:?}; it serves {served:?}")]
    UnknownModel {
        /// The model asked for.
        requested: String,
        /// The model this engine runs.
        served: String,
    },
    /// The prompt plus at least one generated token does not fit in a slot.
    #[error("this model's maximum context length is {max} tokens, but your request has {len} tokens; shorten the prompt or drop earlier turns")]
    TooLong {
        /// Prompt tokens.
        len: u32,
        /// Tokens per slot.
        max: u32,
    },
    /// The prompt is empty.
    #[error("the prompt is empty; send at least one token")]
    EmptyPrompt,
    /// The engine thread has stopped.
    #[error("the engine has stopped")]
    Stopped,
    /// The model's engine host kept dying and the node gave up on it.
    #[error("model {model:?} is not served on this node: {reason}")]
    HostFailed {
        /// The model.
        model: String,
        /// Why its host was given up on.
        reason: String,
    },
    /// Embeddings were asked of a model that does not embed.
    #[error("model {model:?} cannot compute embeddings (its GGUF names no pooling type); use an embedding model such as all-MiniLM-L6-v2")]
    CannotEmbed {
        /// The model asked for.
        model: String,
    },
    /// A generation was asked of an embedding model.
    #[error("model {model:?} is an embedding model and cannot generate text; use it with /v1/embeddings")]
    CannotGenerate {
        /// The model asked for.
        model: String,
    },
}

impl EngineError {
    /// The kind the head is told in [`GenerateEvent::Failed`], so that it
    /// answers the request's mistakes as the client's and the rest as its own.
    pub fn failure_kind(&self) -> FailureKind {
        match self {
            Self::UnknownModel { .. } | Self::CannotEmbed { .. } | Self::CannotGenerate { .. } => {
                FailureKind::UnknownModel
            }
            Self::TooLong { .. } => FailureKind::PromptTooLong,
            Self::EmptyPrompt => FailureKind::EmptyPrompt,
            Self::Stopped => FailureKind::Stopped,
            Self::Load { .. } | Self::Context { .. } | Self::Offload(_) => FailureKind::Engine,
            // Another node may still serve the model: the head moves the
            // generation there.
            Self::HostFailed { .. } => FailureKind::Stopped,
        }
    }
}

/// An inference engine: takes generations and runs them, many at once.
pub trait Engine: Send + Sync + 'static {
    /// The model this engine serves and its limits.
    fn info(&self) -> &EngineInfo;

    /// Queues a generation. Returns at once; tokens arrive on the
    /// [`Generation`]'s channel as they are decoded.
    fn submit(&self, request: GenerateRequest) -> Result<Generation, EngineError>;

    /// Where the engine reports its KV caches and load, for the agent to
    /// relay to the head.
    fn ledger(&self) -> &Arc<Ledger>;

    /// Queues an embeddings request; its one reply arrives on the returned
    /// channel. Engines of models that do not embed refuse it.
    fn embed(&self, request: EmbedRequest) -> Result<Embedding, EngineError> {
        let _ = request;
        Err(EngineError::CannotEmbed {
            model: self.info().model.id.clone(),
        })
    }

    /// Why the engine can no longer serve, once it cannot (an engine host
    /// that kept dying); the agent then unloads the model.
    fn failure(&self) -> Option<String> {
        None
    }
}

/// A queued embeddings request: its reply, once computed. Dropping it
/// cancels the request if it has not started.
pub type Embedding = oneshot::Receiver<EmbedReply>;

//! The engine host protocol: what a node agent and its engine host (one
//! model's llama.cpp in a child process) say to each other over their Unix
//! socket.
//!
//! Frames are Link F's ([`crate::frame`]), and the messages carry Link F's
//! own types unchanged, so a generation's events reach the head exactly as
//! the engine made them. The agent numbers each request; the host tags
//! every event with that number. A host is as untrusted as a network peer:
//! a frame that does not decode, or is too long, ends it.

use serde::{Deserialize, Serialize};

use crate::{
    EmbedReply, EmbedRequest, GenerateEvent, GenerateRequest, KvUpdate, LoadReport,
    ModelDescription,
};

/// The host protocol's version. Host and agent are the same binary, but a
/// binary replaced on disk while its node runs would start hosts of the
/// new version; they are refused, with both versions named.
pub const HOST_PROTOCOL_VERSION: u32 = 2;

/// What the node agent sends its engine host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToHost {
    /// Run a generation; its events come back as [`FromHost::Event`] with `id`.
    Generate {
        /// The agent's number for it.
        id: u64,
        /// What to generate.
        request: GenerateRequest,
    },
    /// Stop generation `id` (its caller went away).
    Cancel {
        /// The generation.
        id: u64,
    },
    /// Compute embeddings; the reply comes back as [`FromHost::Embedded`].
    Embed {
        /// The agent's number for it.
        id: u64,
        /// The inputs.
        request: EmbedRequest,
    },
}

/// What an engine host sends its node agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromHost {
    /// The first frame: the model is loaded and the host takes requests.
    Ready {
        /// [`HOST_PROTOCOL_VERSION`] of the host.
        version: u32,
        /// The model it serves and its limits.
        model: ModelDescription,
    },
    /// The first and last frame when the model could not be loaded.
    LoadFailed {
        /// What went wrong, for the node's log and the head.
        message: String,
    },
    /// One event of generation `id`, in order.
    Event {
        /// The generation.
        id: u64,
        /// The event, as the engine made it.
        event: GenerateEvent,
    },
    /// The reply to embeddings request `id`.
    Embedded {
        /// The request.
        id: u64,
        /// Its reply.
        reply: EmbedReply,
    },
    /// Changes to the engine's KV caches.
    Kv(KvUpdate),
    /// The engine's load and measured rates.
    Load(LoadReport),
}

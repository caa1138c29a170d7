//! Model transfer: how a node gets a model file it lacks from the head.
//!
//! The head's welcome names its models as [`ModelOffer`]s. A node that
//! lacks one opens a bidirectional stream of its own and writes one
//! [`NodeStream::Fetch`]; the head answers with one [`FetchReply`] frame
//! and, if it sends, the file's bytes from the requested offset, raw (not
//! framed), then finishes the stream. The node names the file by its
//! sha256, never by path, so it can only ever read the head's model files.

use serde::{Deserialize, Serialize};

/// A model file the head serves, as nodes can fetch it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelOffer {
    /// The model id clients name (the GGUF file stem).
    pub id: String,
    /// The sha256 of the file's content as lowercase hex.
    pub sha256: String,
    /// The file's length in bytes.
    pub size: u64,
}

/// The first frame of a stream the node opens (the control stream is the
/// first one and carries the hello instead).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeStream {
    /// Send the bytes of a model file from an offset.
    Fetch(FetchRequest),
}

/// Which file, and from where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchRequest {
    /// The sha256 (lowercase hex) of one of the head's model files.
    pub sha256: String,
    /// The first byte to send: the length the node already holds.
    pub offset: u64,
}

/// The head's answer to a [`FetchRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FetchReply {
    /// The bytes from the offset to the end of the file follow.
    Sending {
        /// The whole file's length; `size - offset` bytes follow.
        size: u64,
    },
    /// Nothing follows; `reason` says why and what to do.
    Refused {
        /// A message for the node's operator.
        reason: String,
    },
}

/// Node to head, on the control stream: how far a model's download is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchProgress {
    /// The model id.
    pub model: String,
    /// Bytes the node holds.
    pub done: u64,
    /// The file's length.
    pub total: u64,
}

impl FetchProgress {
    /// Whole percent done, 0 to 100 (100 for an empty file).
    pub fn percent(&self) -> u64 {
        if self.total == 0 {
            return 100;
        }
        (u128::from(self.done.min(self.total)) * 100 / u128::from(self.total)) as u64
    }
}

#[cfg(test)]
mod tests;

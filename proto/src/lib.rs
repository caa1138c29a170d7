//! Link F: the messages head and nodes exchange, and how they are framed.
//!
//! This crate holds no I/O. A connection carries one control stream, opened
//! by the node, on which the node says [`NodeHello`] and the head answers with
//! [`HeadReply`]; after that each side may send [`ControlMsg`]s. Every
//! generation runs on its own bidirectional stream: the head writes one
//! [`HeadStream::Generate`], the node answers with [`GenerateEvent`]s ending
//! in [`GenerateEvent::Finished`] or [`GenerateEvent::Failed`]. Resetting
//! the stream cancels the generation. Embeddings run the same way: one
//! [`HeadStream::Embed`], answered by one [`EmbedReply`] ([`embed`]).
//!
//! The node also reports its KV caches as block hashes ([`blocks`],
//! [`KvUpdate`]) and its load ([`LoadReport`]) on the control stream, so the
//! head can route each prompt to the node that holds its prefix.
//!
//! A node that lacks a model the head serves fetches its file on a stream
//! it opens itself ([`transfer`]). The head decides which models each node
//! keeps loaded ([`placement`]).
//!
//! Frames are postcard-encoded and prefixed with their length as a `u32`
//! big-endian; see [`frame`].
#![forbid(unsafe_code)]

pub mod blocks;
pub mod embed;
pub mod frame;
pub mod hardware;
pub mod host;
pub mod messages;
pub mod placement;
pub mod token;
pub mod transfer;
pub mod watchdog;

pub use blocks::{block_hashes, model_seed, BlockHash, BLOCK_TOKENS};
pub use embed::{
    embedding_pooling, EmbedReply, EmbedRequest, HeadStream, Pooling, MAX_EMBED_INPUTS,
};
pub use frame::{decode, encode, FrameError, FrameReader, LEN_PREFIX, MAX_FRAME};
pub use messages::*;
pub use placement::{ModelsReport, Placement};
pub use token::JoinClaims;
pub use transfer::{FetchProgress, FetchReply, FetchRequest, ModelOffer, NodeStream};

/// The Link F protocol version spoken by this build. Peers with another
/// version are refused with a message that names both.
pub const PROTOCOL_VERSION: u32 = 13;

/// The ALPN identifier of Link F over QUIC.
pub const ALPN: &[u8] = b"superfluid-linkf/1";

/// The ALPN identifier of Link F's model transfers over TLS on TCP (the
/// head's Link F port, on TCP; see `superfluid_link::transfer`).
pub const TRANSFER_ALPN: &[u8] = b"superfluid-transfer/1";

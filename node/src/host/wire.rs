//! The engine host protocol: what a node agent and its engine host say to
//! each other over their Unix socket, and how it is framed.
//!
//! Frames are Link F's (a `u32` big-endian length, then postcard, at most
//! [`MAX_FRAME`] bytes), and the messages carry Link F's own types
//! unchanged, so a generation's events reach the head exactly as the
//! engine made them. The agent numbers each request; the host tags every
//! event with that number. A host is as untrusted as a network peer: a
//! frame that does not decode, or is too long, ends it.

use serde::{Deserialize, Serialize};
use superfluid_proto::{
    encode, EmbedReply, EmbedRequest, FrameError, FrameReader, GenerateEvent, GenerateRequest,
    KvUpdate, LoadReport, ModelDescription,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The host protocol's version. Host and agent are the same binary, but a
/// binary replaced on disk while its node runs would start hosts of the
/// new version; they are refused, with both versions named.
pub const HOST_PROTOCOL_VERSION: u32 = 1;

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

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed.
    #[error("the engine host's socket failed: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent a frame that is too long or does not decode.
    #[error("a bad frame on the engine host's socket: {0}")]
    Frame(#[from] FrameError),
}

/// Reads frames of `T` from a byte stream.
#[derive(Debug)]
pub struct FrameSource<R> {
    io: R,
    frames: FrameReader,
    buf: Box<[u8]>,
}

impl<R: AsyncRead + Unpin> FrameSource<R> {
    /// Frames from `io`.
    pub fn new(io: R) -> Self {
        Self {
            io,
            frames: FrameReader::default(),
            buf: vec![0; 64 * 1024].into_boxed_slice(),
        }
    }

    /// The next frame, or `None` once the peer has closed its side.
    ///
    /// # Errors
    /// [`WireError::Frame`] for a frame over the size cap or one that does
    /// not decode, [`WireError::Io`] when reading fails.
    pub async fn next<T: serde::de::DeserializeOwned>(&mut self) -> Result<Option<T>, WireError> {
        loop {
            if let Some(frame) = self.frames.next_frame()? {
                return Ok(Some(frame));
            }
            let n = self.io.read(&mut self.buf).await?;
            if n == 0 {
                return Ok(None);
            }
            self.frames.push(&self.buf[..n]);
        }
    }
}

/// Writes `messages` to `io` as frames until the channel closes, flushing
/// whenever no further message is waiting, so that one step's events leave
/// in one write.
///
/// # Errors
/// When the socket fails or a message cannot be encoded.
pub async fn write_all<T: Serialize, W: AsyncWrite + Unpin>(
    io: W,
    mut messages: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> Result<(), WireError> {
    let mut io = tokio::io::BufWriter::with_capacity(64 * 1024, io);
    while let Some(first) = messages.recv().await {
        io.write_all(&encode(&first)?).await?;
        while let Ok(next) = messages.try_recv() {
            io.write_all(&encode(&next)?).await?;
        }
        io.flush().await?;
    }
    io.shutdown().await?;
    Ok(())
}

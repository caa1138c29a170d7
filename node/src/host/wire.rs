//! Frame I/O on an engine host's socket. The messages are
//! [`superfluid_proto::host`]'s: Link F's framing (a `u32` big-endian
//! length, then postcard, at most [`superfluid_proto::MAX_FRAME`] bytes)
//! carrying Link F's own types.

use serde::Serialize;
pub use superfluid_proto::host::{FromHost, ToHost, HOST_PROTOCOL_VERSION};
use superfluid_proto::{encode, FrameError, FrameReader};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

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

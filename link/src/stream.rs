//! One frame at a time on quinn streams.
//!
//! A bad frame (over [`superfluid_proto::MAX_FRAME`], or not decoding) is a
//! [`FrameIoError::Frame`]; the caller closes that stream with a reason.

use crate::FrameIoError;
use quinn::{ReadExactError, RecvStream, SendStream};
use serde::{de::DeserializeOwned, Serialize};
use superfluid_proto::{decode, encode, frame::body_len, LEN_PREFIX};

/// Writes `msg` as one frame.
pub async fn write_frame<T: Serialize>(send: &mut SendStream, msg: &T) -> Result<(), FrameIoError> {
    let bytes = encode(msg)?;
    send.write_all(&bytes).await.map_err(FrameIoError::Write)
}

/// Reads one frame; `Ok(None)` when the peer finished the stream cleanly between frames.
pub async fn read_frame<T: DeserializeOwned>(
    recv: &mut RecvStream,
) -> Result<Option<T>, FrameIoError> {
    match read_frame_body(recv).await? {
        None => Ok(None),
        Some(body) => decode(&body).map(Some).map_err(FrameIoError::Frame),
    }
}

/// Reads one frame's body without decoding it, for a caller that looks at
/// its start first (the hello's version); `Ok(None)` as [`read_frame`].
pub async fn read_frame_body(recv: &mut RecvStream) -> Result<Option<Vec<u8>>, FrameIoError> {
    let mut prefix = [0u8; LEN_PREFIX];
    match recv.read_exact(&mut prefix).await {
        Ok(()) => {}
        Err(ReadExactError::FinishedEarly(0)) => return Ok(None),
        Err(ReadExactError::FinishedEarly(got)) => {
            return Err(FrameIoError::Truncated {
                got,
                want: LEN_PREFIX,
            })
        }
        Err(ReadExactError::ReadError(e)) => return Err(FrameIoError::Read(e)),
    }
    let len = body_len(prefix)?;
    let mut body = vec![0u8; len];
    match recv.read_exact(&mut body).await {
        Ok(()) => {}
        Err(ReadExactError::FinishedEarly(got)) => {
            return Err(FrameIoError::Truncated { got, want: len })
        }
        Err(ReadExactError::ReadError(e)) => return Err(FrameIoError::Read(e)),
    }
    Ok(Some(body))
}

/// Writes raw bytes, for tests that play a broken peer.
#[doc(hidden)]
pub async fn write_raw(send: &mut SendStream, bytes: &[u8]) -> Result<(), FrameIoError> {
    send.write_all(bytes).await.map_err(FrameIoError::Write)
}

//! Length-prefixed postcard frames with a hard size cap.
//!
//! A frame is a `u32` big-endian length followed by that many bytes of
//! postcard. Decoding never panics on untrusted bytes: a frame over
//! [`MAX_FRAME`] or one that does not decode is an error the caller turns into
//! closing the stream with a reason.

use serde::{de::DeserializeOwned, Serialize};

/// Bytes of the length prefix.
pub const LEN_PREFIX: usize = 4;

/// The largest frame body accepted, in bytes (4 MiB: about a million token ids).
pub const MAX_FRAME: usize = 4 << 20;

/// Why a frame could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer announced a frame larger than [`MAX_FRAME`].
    #[error("frame of {len} bytes is over the {max}-byte limit")]
    TooLarge {
        /// The announced length.
        len: usize,
        /// [`MAX_FRAME`].
        max: usize,
    },
    /// The bytes are not a valid message of the expected type.
    #[error("undecodable frame: {0}")]
    Decode(#[source] postcard::Error),
    /// A message could not be encoded (a bug, not peer input).
    #[error("could not encode frame: {0}")]
    Encode(#[source] postcard::Error),
}

/// Encodes `msg` as one frame: length prefix and body.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let mut out = vec![0u8; LEN_PREFIX];
    let mut out = postcard::to_extend(msg, std::mem::take(&mut out)).map_err(FrameError::Encode)?;
    let len = out.len() - LEN_PREFIX;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge {
            len,
            max: MAX_FRAME,
        });
    }
    let prefix = u32::try_from(len).map_err(|_| FrameError::TooLarge {
        len,
        max: MAX_FRAME,
    })?;
    out[..LEN_PREFIX].copy_from_slice(&prefix.to_be_bytes());
    Ok(out)
}

/// Decodes one frame body (without its prefix). Trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLarge {
            len: body.len(),
            max: MAX_FRAME,
        });
    }
    let (msg, rest) = postcard::take_from_bytes(body).map_err(FrameError::Decode)?;
    if !rest.is_empty() {
        return Err(FrameError::Decode(postcard::Error::DeserializeBadEncoding));
    }
    Ok(msg)
}

/// The protocol version a hello body starts with, read without the rest:
/// every version's [`crate::NodeHello`] starts with it, so a peer whose hello
/// is laid out differently can still be told which version it speaks.
pub fn hello_version(body: &[u8]) -> Option<u32> {
    postcard::take_from_bytes::<u32>(body)
        .ok()
        .map(|(version, _)| version)
}

/// Reads the body length from a prefix, refusing lengths over [`MAX_FRAME`].
pub fn body_len(prefix: [u8; LEN_PREFIX]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(prefix) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge {
            len,
            max: MAX_FRAME,
        });
    }
    Ok(len)
}

/// Splits frames out of a byte stream that arrives in arbitrary pieces.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// Appends bytes received from the peer.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Returns the next whole frame, `Ok(None)` if more bytes are needed.
    pub fn next_frame<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        let Some(prefix) = self.buf.first_chunk::<LEN_PREFIX>() else {
            return Ok(None);
        };
        let len = body_len(*prefix)?;
        let end = LEN_PREFIX + len;
        if self.buf.len() < end {
            return Ok(None);
        }
        let msg = decode(&self.buf[LEN_PREFIX..end]);
        self.buf.drain(..end);
        msg.map(Some)
    }
}

#[cfg(test)]
mod tests;

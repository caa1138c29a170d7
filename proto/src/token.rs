//! What a join token says. Minting, signing and checking live in
//! `superfluid-link` (`token` module); this is only the signed data.

use serde::{Deserialize, Serialize};

/// The signed content of a join token: which fleet, which head, until when,
/// how often, and the labels the joining node gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinClaims {
    /// The fleet's id (`fleet-<8 hex>`), as the head's `fleet.id` holds it.
    pub fleet_id: String,
    /// The head's key fingerprint as 64 hex digits; the node pins it.
    pub head_fingerprint: String,
    /// The head's Link F (UDP) addresses, `ip:port`, tried in order when
    /// discovery finds nothing.
    pub head_addrs: Vec<String>,
    /// Seconds since the Unix epoch after which the head refuses the token.
    pub expires_unix: u64,
    /// 16 random bytes as hex; the head remembers each nonce it has accepted.
    pub nonce: String,
    /// How many nodes may join with this token (1: single use).
    pub uses: u32,
    /// Labels given to nodes that join with this token.
    pub labels: Vec<(String, String)>,
}

impl JoinClaims {
    /// The postcard bytes that the fleet key signs.
    pub fn to_bytes(&self) -> Result<Vec<u8>, crate::FrameError> {
        postcard::to_stdvec(self).map_err(crate::FrameError::Encode)
    }

    /// Claims from their postcard bytes; trailing bytes are an error, so one
    /// claims value has exactly one encoding.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, crate::FrameError> {
        let (claims, rest) =
            postcard::take_from_bytes::<Self>(bytes).map_err(crate::FrameError::Decode)?;
        if rest.is_empty() {
            Ok(claims)
        } else {
            Err(crate::FrameError::Decode(
                postcard::Error::DeserializeUnexpectedEnd,
            ))
        }
    }
}

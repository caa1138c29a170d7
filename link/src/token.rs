//! Join tokens: signed, expiring claims a node presents the first time it
//! joins a fleet.
//!
//! The text is `sfj1.` + base64url(postcard([`JoinClaims`])) + `.` +
//! base64url(ed25519 signature of the postcard bytes by the fleet key),
//! base64url without padding, so a token is one copy-pasteable word.
//! [`parse`] reads the claims without checking anything (a node learns where
//! the head is from it); [`verify`] checks the signature and the expiry.
//! Neither panics on any input.

mod base64url;

use crate::Identity;
use superfluid_proto::JoinClaims;

/// The prefix naming the token format and its version.
pub const PREFIX: &str = "sfj1.";

/// The longest token text accepted; anything longer is refused unread.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;

/// Why a token could not be made, read or trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The text is not a join token of any version this build knows.
    #[error("this is not a superfluid join token (it should start with `sfj1.`); copy the whole line printed by `superfluid fleet token`")]
    NotAToken,
    /// The text starts like a token but does not decode.
    #[error("the join token is damaged ({reason}); copy the whole line printed by `superfluid fleet token` again")]
    Malformed {
        /// What did not decode.
        reason: String,
    },
    /// The signature does not match: the token was altered or signed by another key.
    #[error("the join token's signature does not match this fleet's key: it was altered or minted by another head; mint a new one with `superfluid fleet token`")]
    BadSignature,
    /// The token's expiry has passed.
    #[error("the join token expired {ago} s ago (at unix time {expires_unix}); mint a new one with `superfluid fleet token`")]
    Expired {
        /// When it expired, in seconds since the Unix epoch.
        expires_unix: u64,
        /// How long ago that was, in seconds.
        ago: u64,
    },
    /// The claims could not be encoded (a bug).
    #[error("could not encode the join token: {0}; this is a bug, please report it")]
    Encode(String),
    /// The claims make a token longer than [`MAX_TOKEN_LEN`], which no node
    /// would accept.
    #[error("the join token would be {len} characters, more than the {MAX_TOKEN_LEN} a node accepts; give fewer or shorter labels")]
    TooLong {
        /// The token's length in characters.
        len: usize,
    },
}

/// Signs `claims` with the fleet key and returns the token text.
pub fn mint(fleet: &Identity, claims: &JoinClaims) -> Result<String, TokenError> {
    let body = claims
        .to_bytes()
        .map_err(|e| TokenError::Encode(e.to_string()))?;
    let signature = fleet.sign(&body);
    let text = format!(
        "{PREFIX}{}.{}",
        base64url::encode(&body),
        base64url::encode(&signature)
    );
    if text.len() > MAX_TOKEN_LEN {
        return Err(TokenError::TooLong { len: text.len() });
    }
    Ok(text)
}

/// The claims of a token, without checking its signature or expiry.
pub fn parse(text: &str) -> Result<JoinClaims, TokenError> {
    split(text).map(|(claims, _, _)| claims)
}

/// The claims of a token signed by `fleet` that has not expired at `now_unix`.
pub fn verify(text: &str, fleet: &Identity, now_unix: u64) -> Result<JoinClaims, TokenError> {
    let (claims, body, signature) = split(text)?;
    if !fleet.verify(&body, &signature) {
        return Err(TokenError::BadSignature);
    }
    if now_unix >= claims.expires_unix {
        return Err(TokenError::Expired {
            expires_unix: claims.expires_unix,
            ago: now_unix - claims.expires_unix,
        });
    }
    Ok(claims)
}

/// Claims, signed bytes and signature of a token.
fn split(text: &str) -> Result<(JoinClaims, Vec<u8>, Vec<u8>), TokenError> {
    let text = text.trim();
    if text.len() > MAX_TOKEN_LEN {
        return Err(TokenError::Malformed {
            reason: format!("{} characters, more than {MAX_TOKEN_LEN}", text.len()),
        });
    }
    let rest = text.strip_prefix(PREFIX).ok_or(TokenError::NotAToken)?;
    let malformed = |reason: &str| TokenError::Malformed {
        reason: reason.to_owned(),
    };
    let (body, signature) = rest
        .split_once('.')
        .ok_or_else(|| malformed("no signature part"))?;
    let body = base64url::decode(body).ok_or_else(|| malformed("the claims are not base64url"))?;
    let signature =
        base64url::decode(signature).ok_or_else(|| malformed("the signature is not base64url"))?;
    let claims = JoinClaims::from_bytes(&body)
        .map_err(|e| malformed(&format!("the claims do not decode: {e}")))?;
    Ok((claims, body, signature))
}

/// `n` random bytes from the operating system, as lowercase hex.
pub fn random_hex(n: usize) -> Result<String, TokenError> {
    use ring::rand::{SecureRandom, SystemRandom};
    let mut bytes = vec![0u8; n];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| TokenError::Encode("the system random source failed".into()))?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests;

//! Making key secrets and hashing them.

use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};

use super::KeysError;

/// What every key made by the head starts with.
pub const SECRET_PREFIX: &str = "sk-sf-";

/// Random bytes in a new key: 256 bits.
const SECRET_BYTES: usize = 32;

/// The SHA-256 of a key's secret; the only form the head keeps.
pub type KeyHash = [u8; 32];

/// A new secret: [`SECRET_PREFIX`] and 32 random bytes in hex.
pub fn new_secret() -> Result<String, KeysError> {
    let mut bytes = [0u8; SECRET_BYTES];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| KeysError::Random)?;
    Ok(format!("{SECRET_PREFIX}{}", hex::encode(bytes)))
}

/// The SHA-256 of `secret`. A plain hash is right for keys of 256 random
/// bits: there is nothing to guess that a slow hash would protect.
pub fn hash_secret(secret: &str) -> KeyHash {
    Sha256::digest(secret.as_bytes()).into()
}

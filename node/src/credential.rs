//! What a node remembers about its fleet, in its data dir.
//!
//! Layout: `node.key` (the node's ed25519 key, PKCS#8 PEM, mode 0600) and
//! `node.json` (a [`Credential`]: fleet id, pinned head fingerprint, head
//! addresses, node name). `node.json` is written once the head has welcomed
//! the node with its join token; from then on the node reconnects with its
//! key alone.

use serde::{Deserialize, Serialize};
use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};
use superfluid_link::private_file::write_private_atomic;
use superfluid_link::{Fingerprint, Identity, IdentityError};
use superfluid_proto::JoinClaims;

/// The node key's file name in the data dir.
pub const NODE_KEY_FILE: &str = "node.key";
/// The credential's file name in the data dir.
pub const CREDENTIAL_FILE: &str = "node.json";

/// Why the node's data dir could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// A file could not be read or written.
    #[error("could not access {path}: {source}; check that the node's data dir exists and is writable by this user")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// No credential yet: the node never joined a fleet.
    #[error("this node has not joined a fleet yet (no {path}); join with `superfluid fleet join TOKEN`, using a token from `superfluid fleet token` on the head")]
    NotJoined {
        /// The missing file.
        path: PathBuf,
    },
    /// The credential file does not hold a credential.
    #[error("{path} is damaged ({reason}); delete it and node.key, then join again with `superfluid fleet join TOKEN`")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The join token names a head this node cannot use.
    #[error("the join token is unusable ({reason}); mint a new one with `superfluid fleet token`")]
    BadClaims {
        /// What was wrong.
        reason: String,
    },
    /// The node key could not be loaded or made.
    #[error("node key: {0}")]
    Key(#[from] IdentityError),
}

/// A node's membership of one fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// The fleet's id.
    pub fleet_id: String,
    /// The head's key; any other server key is refused.
    pub head_fingerprint: Fingerprint,
    /// The head's Link F addresses, tried in order.
    pub head_addrs: Vec<SocketAddr>,
    /// This node's name in the fleet.
    pub name: String,
}

/// `node.json` as stored.
#[derive(Serialize, Deserialize)]
struct Stored {
    fleet_id: String,
    head_fingerprint: String,
    head_addrs: Vec<SocketAddr>,
    name: String,
}

impl Credential {
    /// The credential a token's (unverified) claims describe, for a node called `name`.
    pub fn from_claims(claims: &JoinClaims, name: &str) -> Result<Credential, CredentialError> {
        let head_fingerprint =
            claims
                .head_fingerprint
                .parse()
                .map_err(|_| CredentialError::BadClaims {
                    reason: "the head fingerprint is not 64 hex digits".into(),
                })?;
        let head_addrs = claims
            .head_addrs
            .iter()
            .map(|a| a.parse())
            .collect::<Result<Vec<SocketAddr>, _>>()
            .map_err(|e| CredentialError::BadClaims {
                reason: format!("a head address does not parse: {e}"),
            })?;
        Ok(Credential {
            fleet_id: claims.fleet_id.clone(),
            head_fingerprint,
            head_addrs,
            name: name.to_owned(),
        })
    }

    /// Whether `dir` holds a credential.
    pub fn exists(dir: &Path) -> bool {
        dir.join(CREDENTIAL_FILE).is_file()
    }

    /// Reads `dir/node.json`.
    pub fn load(dir: &Path) -> Result<Credential, CredentialError> {
        let path = dir.join(CREDENTIAL_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(CredentialError::NotJoined { path })
            }
            Err(source) => return Err(CredentialError::Io { path, source }),
        };
        let corrupt = |reason: String| CredentialError::Corrupt {
            path: path.clone(),
            reason,
        };
        let stored: Stored = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        let head_fingerprint = stored
            .head_fingerprint
            .parse()
            .map_err(|e: IdentityError| corrupt(e.to_string()))?;
        Ok(Credential {
            fleet_id: stored.fleet_id,
            head_fingerprint,
            head_addrs: stored.head_addrs,
            name: stored.name,
        })
    }

    /// Writes `dir/node.json` atomically, readable only by this user.
    pub fn save(&self, dir: &Path) -> Result<(), CredentialError> {
        let path = dir.join(CREDENTIAL_FILE);
        let io = |source| CredentialError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let stored = Stored {
            fleet_id: self.fleet_id.clone(),
            head_fingerprint: self.head_fingerprint.to_string(),
            head_addrs: self.head_addrs.clone(),
            name: self.name.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&stored).map_err(|e| CredentialError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        write_private_atomic(dir, CREDENTIAL_FILE, &bytes).map_err(io)?;
        Ok(())
    }
}

/// The node's key in `dir` (`node.key`), made on first use with mode 0600.
pub fn load_or_create_identity(dir: &Path) -> Result<Identity, CredentialError> {
    Ok(Identity::load_or_create(&dir.join(NODE_KEY_FILE))?)
}

#[cfg(test)]
mod tests;

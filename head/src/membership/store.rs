//! The membership files in the head's data dir and their atomic writes.
//!
//! Layout: `fleet.key` (PKCS#8 PEM, 0600), `admin.key` (64 hex digits, 0600),
//! `fleet.id` (`fleet-<8 hex>`), `members.json` ([`State`]: enrolled keys,
//! revoked keys, used nonces). Every write goes to a temporary file that is
//! fsynced and renamed over the old one, then the directory is fsynced.

use super::MembershipError;
use serde::{Deserialize, Serialize};
use std::{collections::BTreeMap, path::Path};
use superfluid_link::private_file::write_private_atomic;

/// The file holding [`State`].
pub(super) const STATE_FILE: &str = "members.json";

/// One enrolled node key, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct EnrolledRecord {
    pub(super) fingerprint: String,
    pub(super) name: String,
    pub(super) enrolled_unix: u64,
    #[serde(default)]
    pub(super) labels: Vec<(String, String)>,
}

/// One revoked node key, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct RevokedRecord {
    pub(super) fingerprint: String,
    pub(super) revoked_unix: u64,
}

/// A nonce the head accepted: how many more joins it allows, and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct NonceRecord {
    pub(super) remaining: u32,
    pub(super) uses: u32,
    pub(super) expires_unix: u64,
}

/// Everything membership must remember across restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct State {
    #[serde(default)]
    pub(super) enrolled: Vec<EnrolledRecord>,
    #[serde(default)]
    pub(super) revoked: Vec<RevokedRecord>,
    #[serde(default)]
    pub(super) nonces: BTreeMap<String, NonceRecord>,
}

impl State {
    /// Reads the state, or an empty one if the file does not exist yet.
    pub(super) fn load(dir: &Path) -> Result<State, MembershipError> {
        let path = dir.join(STATE_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| MembershipError::Corrupt {
                path,
                reason: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
            Err(source) => Err(MembershipError::Io { path, source }),
        }
    }

    /// Writes the state atomically. Nonces of expired tokens are dropped
    /// first: such a token is refused as expired anyway.
    pub(super) fn save(&mut self, dir: &Path, now_unix: u64) -> Result<(), MembershipError> {
        self.nonces.retain(|_, n| n.expires_unix > now_unix);
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| MembershipError::Corrupt {
            path: dir.join(STATE_FILE),
            reason: e.to_string(),
        })?;
        write_atomic(dir, STATE_FILE, &bytes)
    }
}

/// Writes `name` in `dir`, readable only by this user, atomically.
pub(super) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), MembershipError> {
    write_private_atomic(dir, name, bytes).map_err(|source| MembershipError::Io {
        path: dir.join(name),
        source,
    })
}

/// Reads a small text file, trimmed; `None` if it does not exist.
pub(super) fn read_text(dir: &Path, name: &str) -> Result<Option<String>, MembershipError> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text.trim().to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(MembershipError::Io { path, source }),
    }
}

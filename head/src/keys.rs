//! API keys for the client APIs.
//!
//! A key is `sk-sf-` and 32 random bytes in hex, shown once when it is
//! made. The head keeps only its SHA-256: in memory, a map from hash to
//! [`ApiKey`] that every request reads, and on disk `keys.db` in the head's
//! data dir ([`db`]), which the map is loaded from at start and written
//! through on create and revoke, so a revoked key is refused on the very
//! next request. Usage is counted in memory and written back by
//! [`Keys::flush`] every few seconds and at shutdown.
//!
//! A stored key may carry limits of requests and tokens per minute, kept
//! in its in-memory record ([`limiter`]), so that checking them takes only
//! that key's lock. Static keys (`--api-key`) live only in memory: they may
//! use every model and carry no limits.

mod db;
pub mod limiter;
mod record;
mod secret;
#[cfg(test)]
mod tests;

pub use record::{ApiKey, KeyRecord, KeyUsage, UsageSnapshot};
pub use secret::{hash_secret, new_secret, KeyHash, SECRET_PREFIX};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use superfluid_link::sync::lock;

use db::Db;

/// The key database's file name in the head's data dir.
pub const DB_FILE: &str = "keys.db";

/// How often counted usage is written to the key database.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);

/// Why a key operation failed.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    /// The key database could not be opened, read or written.
    #[error("the key database {path} could not be used: {source}; check that the head's data dir is writable")]
    Db {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
    /// A stored row is not a key record this head understands.
    #[error("the key database {path} holds a bad row for key {name:?}: {what}; revoke the key and create it again")]
    BadRow {
        /// The database file.
        path: PathBuf,
        /// The key's name.
        name: String,
        /// What is wrong with the row.
        what: String,
    },
    /// A key with this name exists already.
    #[error("a key named {name:?} exists; pick another name, or revoke it first with `superfluid keys revoke {name}`")]
    NameTaken {
        /// The name asked for.
        name: String,
    },
    /// No stored key has this name.
    #[error("no key is named {name:?}; `superfluid keys list` shows the keys")]
    UnknownName {
        /// The name asked for.
        name: String,
    },
    /// The name is empty, too long, or has characters other than letters,
    /// digits, `-`, `_` and `.`.
    #[error("key name {name:?} is not allowed; use 1 to 64 letters, digits, `-`, `_` or `.`")]
    BadName {
        /// The name asked for.
        name: String,
    },
    /// This head keeps no key database.
    #[error("this server keeps no key database; run `superfluid head` to manage keys, or give `superfluid serve` a key with --api-key")]
    NoStore,
    /// A per-key limit of zero was asked for, which no request could pass.
    #[error("{what} must be at least 1; leave it out for no limit")]
    ZeroLimit {
        /// The limit asked for (`rpm` or `tpm`).
        what: &'static str,
    },
    /// A static key is not a usable secret.
    #[error("an --api-key value is empty or has spaces or control characters; give a key of printable characters")]
    BadStaticKey,
    /// The random generator failed.
    #[error("could not draw random bytes for a new key; retry")]
    Random,
}

/// Why a presented key is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No key matches what was presented.
    #[error("no key matches")]
    Unknown,
    /// The key matches but its expiry has passed.
    #[error("key {name} expired")]
    Expired {
        /// The key's name.
        name: String,
    },
}

/// What a new key is made with.
#[derive(Debug, Clone, Default)]
pub struct NewKey {
    /// Its unique name.
    pub name: String,
    /// How long it stays valid; `None` for ever.
    pub expires_in: Option<Duration>,
    /// The models it may use; `None` for all.
    pub models: Option<Vec<String>>,
    /// Requests per minute; `None` for no limit.
    pub rpm: Option<u32>,
    /// Prompt and completion tokens per minute; `None` for no limit.
    pub tpm: Option<u32>,
}

/// The head's API keys; cheap to clone, shared by the auth layer and the
/// admin API.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_hash: RwLock<HashMap<KeyHash, Arc<ApiKey>>>,
    db: Option<Mutex<Db>>,
    /// Keys are required even when none is left (see [`check_bind`]).
    always: AtomicBool,
}

impl Keys {
    /// Static keys only, no database (`superfluid serve`).
    pub fn in_memory(static_keys: &[String]) -> Result<Keys, KeysError> {
        let keys = Keys::default();
        keys.add_static(static_keys)?;
        Ok(keys)
    }

    /// The keys stored in `data_dir/keys.db` (created if missing) and
    /// `static_keys`.
    pub fn open(data_dir: &Path, static_keys: &[String]) -> Result<Keys, KeysError> {
        let db = Db::open(&data_dir.join(DB_FILE))?;
        let stored = db.load()?;
        let keys = Keys {
            inner: Arc::new(Inner {
                by_hash: RwLock::new(HashMap::new()),
                db: Some(Mutex::new(db)),
                always: AtomicBool::new(false),
            }),
        };
        {
            let mut map = keys.write();
            for (hash, key) in stored {
                map.insert(hash, Arc::new(key));
            }
        }
        keys.add_static(static_keys)?;
        Ok(keys)
    }

    fn add_static(&self, secrets: &[String]) -> Result<(), KeysError> {
        let mut map = self.write();
        for (i, secret) in secrets.iter().enumerate() {
            let secret = secret.trim();
            if secret.is_empty() || secret.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(KeysError::BadStaticKey);
            }
            let record = KeyRecord {
                name: format!("api-key-{}", i + 1),
                created: unix_now(),
                expires: None,
                models: None,
                rpm: None,
                tpm: None,
            };
            map.insert(hash_secret(secret), Arc::new(ApiKey::fixed(record)));
        }
        Ok(())
    }

    /// Whether every client request must present a key: once any key
    /// exists, static or stored, and on a reachable address for good.
    pub fn required(&self) -> bool {
        self.inner.always.load(Ordering::Relaxed) || !self.read().is_empty()
    }

    /// Keeps keys required from now on, even after the last one is revoked
    /// (as [`check_bind`] does for a reachable address).
    pub fn keep_required(&self) {
        self.inner.always.store(true, Ordering::Relaxed);
    }

    /// The key `secret` is, if it is one and has not expired.
    ///
    /// The secret is hashed first and the map is searched by digest: a
    /// timing difference in the search can only tell an attacker about the
    /// SHA-256 of their guess, never about a stored key's bytes
    /// (hash-then-compare of fixed-length digests).
    pub fn authenticate(&self, secret: &str, now: u64) -> Result<Arc<ApiKey>, Refusal> {
        let hash = hash_secret(secret);
        let key = self.read().get(&hash).cloned().ok_or(Refusal::Unknown)?;
        if key.expired_at(now) {
            return Err(Refusal::Expired {
                name: key.record.name.clone(),
            });
        }
        Ok(key)
    }

    /// Makes and stores a key; returns the secret (shown once) and its record.
    pub fn create(&self, new: NewKey) -> Result<(String, KeyRecord), KeysError> {
        if new.rpm == Some(0) {
            return Err(KeysError::ZeroLimit { what: "rpm" });
        }
        if new.tpm == Some(0) {
            return Err(KeysError::ZeroLimit { what: "tpm" });
        }
        check_name(&new.name)?;
        let db = self.inner.db.as_ref().ok_or(KeysError::NoStore)?;
        let created = unix_now();
        let record = KeyRecord {
            name: new.name,
            created,
            expires: new
                .expires_in
                .map(|d| created.saturating_add(d.as_secs().max(1))),
            models: new.models,
            rpm: new.rpm,
            tpm: new.tpm,
        };
        let secret = new_secret()?;
        let hash = hash_secret(&secret);
        // Hold the map's lock across the insert so a concurrent create of
        // the same name cannot pass the database and miss the map.
        let mut map = self.write();
        lock(db).insert(&hash, &record)?;
        map.insert(hash, Arc::new(ApiKey::stored(record.clone())));
        Ok((secret, record))
    }

    /// Deletes the stored key `name`; it is refused from the next request on.
    pub fn revoke(&self, name: &str) -> Result<KeyRecord, KeysError> {
        let db = self.inner.db.as_ref().ok_or(KeysError::NoStore)?;
        let mut map = self.write();
        let hash = map
            .iter()
            .find(|(_, k)| k.is_stored() && k.record.name == name)
            .map(|(h, _)| *h)
            .ok_or_else(|| KeysError::UnknownName {
                name: name.to_owned(),
            })?;
        lock(db).delete(name)?;
        let removed = map.remove(&hash).ok_or_else(|| KeysError::UnknownName {
            name: name.to_owned(),
        })?;
        Ok(removed.record.clone())
    }

    /// The stored keys with their usage, by name.
    pub fn list(&self) -> Vec<(KeyRecord, UsageSnapshot)> {
        let mut all: Vec<_> = self
            .read()
            .values()
            .filter(|k| k.is_stored())
            .map(|k| (k.record.clone(), k.usage.snapshot()))
            .collect();
        all.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        all
    }

    /// Writes the usage counted since the last flush to the key database.
    pub fn flush(&self) -> Result<(), KeysError> {
        let Some(db) = self.inner.db.as_ref() else {
            return Ok(());
        };
        let changed: Vec<(String, UsageSnapshot)> = self
            .read()
            .values()
            .filter(|k| k.is_stored() && k.usage.take_dirty())
            .map(|k| (k.record.name.clone(), k.usage.snapshot()))
            .collect();
        if changed.is_empty() {
            return Ok(());
        }
        lock(db).write_usage(&changed)
    }

    /// Flushes usage every [`FLUSH_EVERY`] until the process ends.
    pub fn spawn_flusher(&self) -> tokio::task::JoinHandle<()> {
        let keys = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_EVERY);
            tick.tick().await;
            loop {
                tick.tick().await;
                let keys = keys.clone();
                let flushed = tokio::task::spawn_blocking(move || keys.flush()).await;
                match flushed {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, "could not save key usage"),
                    Err(e) => tracing::warn!(error = %e, "saving key usage stopped"),
                }
            }
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<KeyHash, Arc<ApiKey>>> {
        superfluid_link::sync::read(&self.inner.by_hash)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<KeyHash, Arc<ApiKey>>> {
        superfluid_link::sync::write(&self.inner.by_hash)
    }
}

/// Why an HTTP address may not be served as it is configured.
#[derive(Debug, thiserror::Error)]
#[error("refusing to serve the HTTP API on {addr} with no key: anyone who can reach it could use the fleet. {how}; or pass --insecure-no-auth to serve an open API on purpose")]
pub struct OpenBind {
    /// The address asked for.
    pub addr: SocketAddr,
    /// How to give clients a key with this command.
    how: &'static str,
}

/// Refuses a non-loopback HTTP address with no key unless `insecure` says
/// an open API is meant; warns when it is. Without `insecure`, such an
/// address keeps requiring keys even after the last one is revoked: the
/// API must not open by itself.
pub fn check_bind(addr: SocketAddr, keys: &Keys, insecure: bool) -> Result<(), OpenBind> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    if keys.required() {
        if !insecure {
            keys.inner.always.store(true, Ordering::Relaxed);
        }
        return Ok(());
    }
    if !insecure {
        let how = if keys.inner.db.is_some() {
            "Pass --api-key KEY, or start the head on loopback (the default --http), create a key with `superfluid keys create NAME`, and start it here again"
        } else {
            "Pass --api-key KEY (`superfluid keys create` keeps keys for `superfluid head`, not for serve)"
        };
        return Err(OpenBind { addr, how });
    }
    tracing::warn!(%addr, "serving an open API with no key (--insecure-no-auth): anyone who can reach this address can use the fleet");
    Ok(())
}

fn check_name(name: &str) -> Result<(), KeysError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(KeysError::BadName {
            name: name.to_owned(),
        })
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

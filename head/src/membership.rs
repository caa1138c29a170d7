//! Fleet membership: the fleet key, join tokens, and which node keys belong.
//!
//! [`Membership::open`] loads (or creates on first start) the head's data
//! dir: the fleet key, which is also the head's Link F TLS key, the admin
//! key of the HTTP admin API, the fleet id, and `members.json` (see
//! `membership/store.rs`). [`Membership::mint`] signs join tokens;
//! [`Membership::admit`] decides at each node's hello: an enrolled key is
//! welcome without a token, a new key needs a valid token, a revoked key
//! never. What must survive a restart is written before `admit` returns.

mod refusal;
mod store;

pub use refusal::{utc, Refusal, REFUSAL_LABELS};

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::{Duration, SystemTime},
};
use store::{EnrolledRecord, NonceRecord, RevokedRecord, State};
use superfluid_link::sync::lock;
use superfluid_link::{
    token::{self, TokenError},
    Fingerprint, Identity, IdentityError,
};
use superfluid_proto::JoinClaims;

/// The fleet key's file name in the data dir.
pub const FLEET_KEY_FILE: &str = "fleet.key";
/// The admin key's file name in the data dir.
pub const ADMIN_KEY_FILE: &str = "admin.key";
/// The fleet id's file name in the data dir.
pub const FLEET_ID_FILE: &str = "fleet.id";

/// Why the membership data dir could not be used.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// A file in the data dir could not be read or written.
    #[error("could not access {path}: {source}; check that the head's data dir exists and is writable by this user")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file in the data dir does not hold what it should.
    #[error("{path} is damaged ({reason}); restore it from a backup, or delete the data dir to start a new fleet (every node must then join again)")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The fleet key could not be loaded or made.
    #[error("fleet key: {0}")]
    Key(#[from] IdentityError),
    /// A token could not be minted.
    #[error("could not mint a join token: {0}")]
    Token(#[from] TokenError),
}

/// An enrolled node key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enrolment {
    /// The node's key.
    pub fingerprint: Fingerprint,
    /// The name it had when it enrolled.
    pub name: String,
    /// When it enrolled, seconds since the Unix epoch.
    pub enrolled_unix: u64,
    /// Labels from the token it joined with.
    pub labels: Vec<(String, String)>,
}

/// The membership of one fleet. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Membership {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    identity: Identity,
    fleet_id: String,
    admin_key: String,
    state: Mutex<State>,
    refusals: [AtomicU64; REFUSAL_LABELS.len()],
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("dir", &self.inner.dir)
            .field("fleet_id", &self.inner.fleet_id)
            .field("fingerprint", &self.inner.identity.fingerprint())
            .finish_non_exhaustive()
    }
}

/// Seconds since the Unix epoch now.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Membership {
    /// Opens the data dir `dir`, creating it and its keys on first start.
    pub fn open(dir: &Path) -> Result<Membership, MembershipError> {
        create_private_dir(dir)?;
        let identity = Identity::load_or_create(&dir.join(FLEET_KEY_FILE))?;
        let admin_key = match store::read_text(dir, ADMIN_KEY_FILE)? {
            Some(key) if key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()) => key,
            Some(_) => {
                return Err(MembershipError::Corrupt {
                    path: dir.join(ADMIN_KEY_FILE),
                    reason: "not 64 hex digits".into(),
                })
            }
            None => {
                let key = token::random_hex(32)?;
                store::write_atomic(dir, ADMIN_KEY_FILE, format!("{key}\n").as_bytes())?;
                key
            }
        };
        let fleet_id = match store::read_text(dir, FLEET_ID_FILE)? {
            Some(id) if !id.is_empty() => id,
            _ => {
                let id = format!("fleet-{}", token::random_hex(4)?);
                store::write_atomic(dir, FLEET_ID_FILE, format!("{id}\n").as_bytes())?;
                id
            }
        };
        let state = State::load(dir)?;
        Ok(Membership {
            inner: Arc::new(Inner {
                dir: dir.to_owned(),
                identity,
                fleet_id,
                admin_key,
                state: Mutex::new(state),
                refusals: Default::default(),
            }),
        })
    }

    /// The fleet key; the head's Link F endpoint must use it.
    pub fn identity(&self) -> Identity {
        self.inner.identity.clone()
    }

    /// The fleet id, `fleet-<8 hex>`.
    pub fn fleet_id(&self) -> String {
        self.inner.fleet_id.clone()
    }

    /// The admin key (64 hex digits) the admin HTTP API requires.
    pub fn admin_key(&self) -> String {
        self.inner.admin_key.clone()
    }

    /// The data dir.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// A join token valid for `ttl`, admitting `uses` nodes (0 counts as 1),
    /// giving them `labels`, pointing them at `head_addrs`.
    pub fn mint(
        &self,
        ttl: Duration,
        uses: u32,
        labels: Vec<(String, String)>,
        head_addrs: Vec<SocketAddr>,
    ) -> Result<String, MembershipError> {
        let claims = JoinClaims {
            fleet_id: self.fleet_id(),
            head_fingerprint: self.inner.identity.fingerprint().to_string(),
            head_addrs: head_addrs.iter().map(ToString::to_string).collect(),
            expires_unix: now_unix().saturating_add(ttl.as_secs().max(1)),
            nonce: token::random_hex(16)?,
            uses: uses.max(1),
            labels,
        };
        Ok(token::mint(&self.inner.identity, &claims)?)
    }

    /// Decides whether the node with key `fingerprint` may join. Refusals are
    /// counted and logged; an enrolment is on disk before `Ok` is returned.
    pub fn admit(
        &self,
        fingerprint: &Fingerprint,
        node_name: &str,
        join_token: Option<&str>,
        now_unix: u64,
    ) -> Result<Enrolment, Refusal> {
        let result = self.decide(fingerprint, node_name, join_token, now_unix);
        if let Err(refusal) = &result {
            self.record_refusal(refusal);
            tracing::warn!(node = %node_name, %fingerprint, reason = refusal.label(), %refusal, "refused a node");
        }
        result
    }

    fn decide(
        &self,
        fingerprint: &Fingerprint,
        node_name: &str,
        join_token: Option<&str>,
        now_unix: u64,
    ) -> Result<Enrolment, Refusal> {
        let fp = fingerprint.to_string();
        let fleet = self.fleet_id();
        let mut state = self.lock();
        if state.revoked.iter().any(|r| r.fingerprint == fp) {
            return Err(Refusal::Revoked {
                fingerprint: *fingerprint,
                fleet,
            });
        }
        if let Some(e) = state.enrolled.iter().find(|e| e.fingerprint == fp) {
            return Ok(enrolment(e, *fingerprint));
        }
        let Some(text) = join_token else {
            return Err(Refusal::UnknownNode {
                fingerprint: *fingerprint,
                fleet,
            });
        };
        let claims = check_token(text, &self.inner.identity, &fleet, now_unix)?;
        let mut next = state.clone();
        let uses = claims.uses.max(1);
        let nonce = next
            .nonces
            .entry(claims.nonce.clone())
            .or_insert(NonceRecord {
                remaining: uses,
                uses,
                expires_unix: claims.expires_unix,
            });
        if nonce.remaining == 0 {
            return Err(if uses == 1 {
                Refusal::NonceUsed
            } else {
                Refusal::UsesExhausted { uses }
            });
        }
        nonce.remaining -= 1;
        let record = EnrolledRecord {
            fingerprint: fp,
            name: node_name.to_owned(),
            enrolled_unix: now_unix,
            labels: claims.labels,
        };
        next.enrolled.push(record.clone());
        next.save(&self.inner.dir, now_unix)
            .map_err(|e| Refusal::Storage {
                reason: e.to_string(),
            })?;
        *state = next;
        tracing::info!(node = %node_name, %fingerprint, fleet = %self.inner.fleet_id, "enrolled a node with a join token");
        Ok(enrolment(&record, *fingerprint))
    }

    /// Revokes a node key: it is no longer enrolled and is refused from now
    /// on, even with a token. Closing its connection is the fleet's job
    /// (`Fleet::revoke` does both).
    pub fn revoke(&self, fingerprint: &Fingerprint) -> Result<(), MembershipError> {
        let fp = fingerprint.to_string();
        let now = now_unix();
        let mut state = self.lock();
        let mut next = state.clone();
        next.enrolled.retain(|e| e.fingerprint != fp);
        if !next.revoked.iter().any(|r| r.fingerprint == fp) {
            next.revoked.push(RevokedRecord {
                fingerprint: fp,
                revoked_unix: now,
            });
        }
        next.save(&self.inner.dir, now)?;
        *state = next;
        tracing::info!(%fingerprint, "revoked a node key");
        Ok(())
    }

    /// Whether `fingerprint` was revoked.
    pub fn is_revoked(&self, fingerprint: &Fingerprint) -> bool {
        let fp = fingerprint.to_string();
        self.lock().revoked.iter().any(|r| r.fingerprint == fp)
    }

    /// The enrolled node keys, in the order they enrolled.
    pub fn enrolled(&self) -> Vec<Enrolment> {
        self.lock()
            .enrolled
            .iter()
            .filter_map(|e| Some(enrolment(e, e.fingerprint.parse().ok()?)))
            .collect()
    }

    /// How many nodes were refused for each reason since the head started,
    /// every label of [`REFUSAL_LABELS`] listed.
    pub fn refusals(&self) -> Vec<(&'static str, u64)> {
        REFUSAL_LABELS
            .iter()
            .zip(&self.inner.refusals)
            .map(|(label, n)| (*label, n.load(Ordering::Relaxed)))
            .collect()
    }

    /// Counts a refusal decided elsewhere (the fleet's `duplicate`).
    pub fn record_refusal(&self, refusal: &Refusal) {
        if let Some(i) = REFUSAL_LABELS.iter().position(|l| *l == refusal.label()) {
            self.inner.refusals[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // State is replaced whole after a successful write, so it is never half-updated.
        lock(&self.inner.state)
    }
}

/// The claims of `text` if it is a valid, unexpired token of this fleet.
fn check_token(
    text: &str,
    identity: &Identity,
    fleet: &str,
    now_unix: u64,
) -> Result<JoinClaims, Refusal> {
    let bad = |e: TokenError| Refusal::BadSignature {
        detail: match e {
            TokenError::NotAToken => "it is not a superfluid join token".into(),
            TokenError::Malformed { reason } => format!("it is damaged ({reason})"),
            other => other.to_string(),
        },
    };
    let claims = token::parse(text).map_err(bad)?;
    if claims.fleet_id != fleet {
        return Err(Refusal::WrongFleet {
            token_fleet: claims.fleet_id,
            fleet: fleet.to_owned(),
        });
    }
    token::verify(text, identity, now_unix).map_err(|e| match e {
        TokenError::Expired { expires_unix, ago } => Refusal::Expired {
            expired_at: utc(expires_unix),
            ago,
        },
        TokenError::BadSignature => Refusal::BadSignature {
            detail:
                "its signature does not match this fleet's key (altered, or minted by another head)"
                    .into(),
        },
        other => bad(other),
    })
}

fn enrolment(record: &EnrolledRecord, fingerprint: Fingerprint) -> Enrolment {
    Enrolment {
        fingerprint,
        name: record.name.clone(),
        enrolled_unix: record.enrolled_unix,
        labels: record.labels.clone(),
    }
}

fn create_private_dir(dir: &Path) -> Result<(), MembershipError> {
    let io = |source| MembershipError::Io {
        path: dir.to_owned(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;

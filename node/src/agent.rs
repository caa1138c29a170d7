//! The node agent: dials the head over Link F and serves generation streams.
//!
//! [`run`] connects, says [`NodeHello`], and after the head's `Welcome`
//! answers every bidirectional stream the head opens with one generation
//! (see `agent/serve.rs`). On the control stream the node then sends its
//! engine's whole KV cache state and load, and from then on heartbeats, cache
//! changes and load reports (see `agent/control.rs`); the head sends heartbeats.
//! When the connection is lost, or the head refuses the node, the agent
//! reconnects with exponential backoff and jitter, forever.
//!
//! A node started without a model first runs [`fetch_models`]
//! (`agent/provision.rs`): it joins offering nothing, fetches the head's
//! model into its cache, and then serves it as above.

mod control;
mod drain;
mod endpoints;
mod place;
mod provision;
mod serve;
mod session;

use crate::engine::Engine;
use crate::models::ModelSet;
use drain::Drain;
pub use drain::DRAIN_GRACE;
use endpoints::Endpoints;
pub use provision::{fetch_models, Fetched};
use session::{session, Ended, SessionError};
use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};
use superfluid_link::{quinn, DialError, EndpointError, Fingerprint, Identity};

/// Where the head is and who this node is.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The head's Link F (UDP) addresses, tried in order on each attempt.
    pub head_addrs: Vec<SocketAddr>,
    /// The head's key fingerprint; any other server key is refused.
    pub head_fingerprint: Fingerprint,
    /// This node's identity; the head must authorize or enrol its fingerprint.
    pub identity: Identity,
    /// A human name for the head's logs and listings.
    pub name: String,
    /// A join token, presented in the hello until the head first welcomes
    /// this node; after that the node's key is enrolled and none is sent.
    pub join_token: Option<String>,
    /// The sha256 (hex) of the model file, told to the head in the hello
    /// when the engine does not know it (see [`superfluid_link::digest`]);
    /// used by [`run_until`], whose one engine it describes.
    pub model_sha256: Option<String>,
    /// Where to save the [`Credential`] (`node.json`) once the head has
    /// welcomed this node with its join token.
    pub credential_dir: Option<PathBuf>,
    /// Stop once the head has welcomed this node (and its credential is
    /// saved), closing the connection cleanly: `fleet join --no-run`.
    pub join_only: bool,
}

impl AgentConfig {
    /// The client for the head's transfer port, presenting this node's key
    /// and trusting only the pinned head; `None` (fetches go over QUIC) if
    /// its TLS configuration cannot be built.
    pub(crate) fn transfer_client(&self) -> Option<superfluid_link::transfer::TransferClient> {
        superfluid_link::transfer::TransferClient::new(&self.identity, self.head_fingerprint)
            .map_err(|e| tracing::warn!(error = %e, "model files will come over QUIC"))
            .ok()
    }
}

/// Why the agent could not run at all. Connection problems are not errors:
/// the agent logs them and reconnects.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The local QUIC endpoint could not be created.
    #[error("could not set up the node's Link F endpoint: {0}")]
    Setup(#[source] EndpointError),
    /// No head address was given.
    #[error("no head address to dial; pass the head's Link F address or join with a token that names it")]
    NoHeadAddress,
    /// The head refused the join token; retrying with it cannot succeed.
    #[error("the head refused to let this node join: {reason}")]
    Refused {
        /// The head's reason, which says what to do.
        reason: String,
    },
    /// The head welcomed the node but its credential could not be saved.
    #[error("joined the fleet but could not save the credential: {0}")]
    Credential(#[source] crate::credential::CredentialError),
    /// The head serves no model for a node without one to fetch.
    #[error("the head serves no model to fetch; start the head with --model, or the node with --model PATH")]
    NoModelOffered,
    /// The head's model cannot be fetched into the cache, and retrying
    /// cannot help (too little disk space, an unwritable directory).
    #[error("could not fetch the head's model")]
    Fetch(#[source] crate::model_cache::FetchError),
}

/// The shortest and longest wait between connection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Serves `engine` to the head described by `config`, reconnecting forever.
/// Returns only if the local endpoint cannot be set up, the head refuses
/// the join token (which retrying cannot fix), or `join_only` is set and the
/// node has joined.
pub async fn run(engine: Arc<dyn Engine>, config: AgentConfig) -> Result<(), AgentError> {
    run_until(engine, config, std::future::pending).await
}

/// [`run`], until the future `shutdown()` returns completes. Then the node
/// drains: it refuses new generations, which the head sends to another
/// node, and lets the running ones finish, for [`DRAIN_GRACE`] at most or
/// until a second `shutdown()` completes. Then the connection to the head
/// is closed with a reason, so that the head stops routing to this node at
/// once rather than after Link F's idle timeout.
pub async fn run_until<F>(
    engine: Arc<dyn Engine>,
    config: AgentConfig,
    shutdown: impl Fn() -> F,
) -> Result<(), AgentError>
where
    F: std::future::Future<Output = ()>,
{
    let models = Arc::new(ModelSet::single(engine, config.model_sha256.clone()));
    run_models_until(models, config, shutdown).await
}

/// [`run_until`] for a node with several models, or one that loads the
/// models the head places on it: `models` says which it serves now.
pub async fn run_models_until<F>(
    models: Arc<ModelSet>,
    config: AgentConfig,
    shutdown: impl Fn() -> F,
) -> Result<(), AgentError>
where
    F: std::future::Future<Output = ()>,
{
    let endpoints = Endpoints::new(&config)?;
    let drain = Drain::default();
    let serving = serve_heads(&models, &config, &endpoints, &drain);
    tokio::pin!(serving);
    tokio::select! {
        ended = &mut serving => return ended,
        () = shutdown() => {}
    }
    let running = drain.start();
    if running > 0 {
        tracing::info!(running, grace = ?DRAIN_GRACE, "shutting down: finishing the running generations first (stop again to end them now)");
        tokio::select! {
            ended = &mut serving => ended?,
            () = drain.finished() => tracing::info!("the running generations finished"),
            () = tokio::time::sleep(DRAIN_GRACE) => tracing::warn!(running = drain.running(), "the running generations did not finish in time; ending them"),
            () = shutdown() => tracing::warn!(running = drain.running(), "stopping now; ending the running generations"),
        }
    }
    tracing::info!("shutting down; closing the connection to the head");
    endpoints.close(b"the node is shutting down").await;
    Ok(())
}

/// The body of [`run`] once the endpoints exist.
async fn serve_heads(
    models: &Arc<ModelSet>,
    config: &AgentConfig,
    endpoints: &Endpoints,
    drain: &Drain,
) -> Result<(), AgentError> {
    tracing::info!(heads = ?config.head_addrs, pinned = %config.head_fingerprint, fingerprint = %config.identity.fingerprint(), joining = config.join_token.is_some(), "node agent starting");
    let mut token = config.join_token.clone();
    let mut failures: u32 = 0;
    loop {
        let end = session(models, config, endpoints, drain, &mut token).await?;
        if end.welcomed {
            failures = 0;
        }
        failures = failures.saturating_add(1);
        let delay = backoff(failures);
        let head = end.addr.map(|a| a.to_string()).unwrap_or_default();
        match &end.why {
            Ended::Joined => return Ok(()),
            Ended::Refused(reason) if token.is_some() => {
                return Err(AgentError::Refused {
                    reason: reason.clone(),
                })
            }
            Ended::Refused(reason) => {
                tracing::warn!(%head, %reason, retry_in = ?delay, "the head refused this node")
            }
            Ended::Lost(e) if token.is_some() && is_pin_mismatch(e) => {
                return Err(AgentError::Refused {
                    reason: format!(
                        "the head at {} is not the head that minted this token: its key is not {}; \
                         the token may be for another fleet, or another head now uses that address; \
                         get a token from the head you mean to join",
                        config.head_addrs.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
                        config.head_fingerprint
                    ),
                })
            }
            Ended::Lost(e) if end.welcomed => {
                tracing::warn!(%head, error = %e, retry_in = ?delay, "lost the connection to the head")
            }
            Ended::Lost(e) => tracing::warn!(
                heads = ?config.head_addrs, error = %e, attempt = failures, retry_in = ?delay,
                "could not join the head; check the address, that the head's fingerprint is {} and that it authorizes this node's {}",
                config.head_fingerprint, config.identity.fingerprint()
            ),
        }
        tokio::time::sleep(delay).await;
    }
}

/// Whether the handshake failed because the head's key is not the pinned
/// one (our verifier refuses it with TLS alert `access_denied`, 49).
fn is_pin_mismatch(e: &SessionError) -> bool {
    const ACCESS_DENIED: u8 = 49;
    matches!(e, SessionError::Dial(DialError::Handshake(quinn::ConnectionError::TransportError(t)))
        if t.code == quinn::TransportErrorCode::crypto(ACCESS_DENIED))
}

/// The wait before attempt `failures + 1`: doubling from [`BACKOFF_MIN`] up to
/// [`BACKOFF_MAX`], scaled by a random factor in [0.5, 1] so restarts spread out.
fn backoff(failures: u32) -> Duration {
    let doubled = BACKOFF_MIN.saturating_mul(1u32 << failures.saturating_sub(1).min(10));
    let base = doubled.min(BACKOFF_MAX);
    base.mul_f64(0.5 + 0.5 * jitter())
}

/// A number in [0, 1), from the standard library's randomly keyed hasher.
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests;

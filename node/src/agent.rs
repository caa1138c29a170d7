//! The node agent: dials the head over Link F and serves generation streams.
//!
//! [`run`] connects, says [`NodeHello`], and after the head's `Welcome`
//! answers every bidirectional stream the head opens with one generation
//! (see `agent/serve.rs`). Both sides send heartbeats on the control stream.
//! When the connection is lost, or the head refuses the node, the agent
//! reconnects with exponential backoff and jitter, forever.

mod serve;

use crate::engine::Engine;
use std::{net::SocketAddr, sync::Arc, time::Duration};
use superfluid_link::{
    client_endpoint, connect,
    control::{HEARTBEAT_INTERVAL, HELLO_TIMEOUT},
    quinn::{self, RecvStream, SendStream},
    read_frame, write_frame, Fingerprint, Identity, LinkError,
};
use superfluid_proto::{ControlMsg, HeadReply, NodeHello, PROTOCOL_VERSION};

/// Where the head is and who this node is.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The head's Link F (UDP) address.
    pub head_addr: SocketAddr,
    /// The head's key fingerprint; any other server key is refused.
    pub head_fingerprint: Fingerprint,
    /// This node's identity; the head must authorize its fingerprint.
    pub identity: Identity,
    /// A human name for the head's logs and listings.
    pub name: String,
}

/// Why the agent could not run at all. Connection problems are not errors:
/// the agent logs them and reconnects.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The local QUIC endpoint could not be created.
    #[error("could not set up the node's Link F endpoint: {0}")]
    Setup(#[source] LinkError),
}

/// The shortest and longest wait between connection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Serves `engine` to the head described by `config`, reconnecting forever.
/// Returns only if the local endpoint cannot be set up.
pub async fn run(engine: Arc<dyn Engine>, config: AgentConfig) -> Result<(), AgentError> {
    let endpoint = client_endpoint(config.head_addr, &config.identity, config.head_fingerprint)
        .map_err(AgentError::Setup)?;
    tracing::info!(head = %config.head_addr, pinned = %config.head_fingerprint, fingerprint = %config.identity.fingerprint(), "node agent starting");
    let mut failures: u32 = 0;
    loop {
        let end = session(&engine, &config, &endpoint).await;
        if end.welcomed {
            failures = 0;
        }
        failures = failures.saturating_add(1);
        let delay = backoff(failures);
        match &end.why {
            Ended::Refused(reason) => {
                tracing::warn!(head = %config.head_addr, %reason, retry_in = ?delay, "the head refused this node")
            }
            Ended::Lost(e) if end.welcomed => {
                tracing::warn!(head = %config.head_addr, error = %e, retry_in = ?delay, "lost the connection to the head")
            }
            Ended::Lost(e) => tracing::warn!(
                head = %config.head_addr, error = %e, attempt = failures, retry_in = ?delay,
                "could not join the head; check the address, that the head's fingerprint is {} and that it authorizes this node's {}",
                config.head_fingerprint, config.identity.fingerprint()
            ),
        }
        tokio::time::sleep(delay).await;
    }
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

enum Ended {
    Refused(String),
    Lost(LinkError),
}

struct SessionEnd {
    welcomed: bool,
    why: Ended,
}

/// One connection: hello, then serve streams until the connection ends.
async fn session(
    engine: &Arc<dyn Engine>,
    config: &AgentConfig,
    endpoint: &quinn::Endpoint,
) -> SessionEnd {
    let lost = |e| SessionEnd {
        welcomed: false,
        why: Ended::Lost(e),
    };
    let conn = match connect(endpoint, config.head_addr).await {
        Ok(conn) => conn,
        Err(e) => return lost(e),
    };
    let (send, recv) = match hello(&conn, engine, config).await {
        Ok(Ok(streams)) => streams,
        Ok(Err(reason)) => {
            return SessionEnd {
                welcomed: false,
                why: Ended::Refused(reason),
            }
        }
        Err(e) => {
            conn.close(
                superfluid_link::control::CLOSE_PROTOCOL,
                e.to_string().as_bytes(),
            );
            return lost(e);
        }
    };
    let heartbeat = tokio::spawn(heartbeats(send));
    let control = tokio::spawn(control_reader(conn.clone(), recv));
    let error = loop {
        match conn.accept_bi().await {
            Ok((send, recv)) => {
                tokio::spawn(serve::serve_stream(engine.clone(), send, recv));
            }
            Err(e) => break LinkError::Connection(e),
        }
    };
    heartbeat.abort();
    control.abort();
    SessionEnd {
        welcomed: true,
        why: Ended::Lost(error),
    }
}

/// Says hello; `Ok(Err(reason))` if the head refused this node.
async fn hello(
    conn: &quinn::Connection,
    engine: &Arc<dyn Engine>,
    config: &AgentConfig,
) -> Result<Result<(SendStream, RecvStream), String>, LinkError> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(LinkError::Connection)?;
    let hello = NodeHello {
        version: PROTOCOL_VERSION,
        name: config.name.clone(),
        models: vec![engine.info().model.clone()],
    };
    write_frame(&mut send, &hello).await?;
    let reply = match tokio::time::timeout(HELLO_TIMEOUT, read_frame::<HeadReply>(&mut recv)).await
    {
        Ok(reply) => reply,
        Err(_) => return Err(LinkError::Connection(quinn::ConnectionError::TimedOut)),
    };
    match reply {
        Ok(Some(HeadReply::Welcome { version, node_id })) => {
            tracing::info!(head = %config.head_addr, %node_id, head_version = version, model = %hello.models[0].id, "joined the fleet");
            Ok(Ok((send, recv)))
        }
        Ok(Some(HeadReply::Refused { reason })) => {
            conn.close(superfluid_link::control::CLOSE_NORMAL, b"refused");
            Ok(Err(reason))
        }
        // A head that refuses may close before its reply is read; its close reason says why.
        Err(LinkError::Read(quinn::ReadError::ConnectionLost(
            quinn::ConnectionError::ApplicationClosed(close),
        ))) if close.error_code == superfluid_link::control::CLOSE_REFUSED => {
            Ok(Err(String::from_utf8_lossy(&close.reason).into_owned()))
        }
        Ok(None) => Err(LinkError::Truncated {
            got: 0,
            want: superfluid_proto::LEN_PREFIX,
        }),
        Err(e) => Err(e),
    }
}

async fn heartbeats(mut send: SendStream) {
    let mut tick = tokio::time::interval(HEARTBEAT_INTERVAL);
    loop {
        tick.tick().await;
        if write_frame(&mut send, &ControlMsg::Heartbeat)
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Reads the head's control messages; a bad one closes the connection.
async fn control_reader(conn: quinn::Connection, mut recv: RecvStream) {
    loop {
        match read_frame::<ControlMsg>(&mut recv).await {
            Ok(Some(ControlMsg::Heartbeat)) => {}
            Ok(None) => {
                conn.close(
                    superfluid_link::control::CLOSE_NORMAL,
                    b"the head ended the control stream",
                );
                return;
            }
            Err(LinkError::Frame(e)) => {
                let reason = format!("bad control frame from the head: {e}");
                tracing::warn!(%reason);
                conn.close(superfluid_link::control::CLOSE_PROTOCOL, reason.as_bytes());
                return;
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests;

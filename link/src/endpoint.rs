//! quinn endpoints for the head (server) and nodes (client).

use crate::{tls, Authorizer, DialError, EndpointError, Fingerprint, Identity, PeerIdentityError};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use std::{
    net::{Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
    time::Duration,
};

/// The server name nodes put in their TLS hello. It is not checked: the head is pinned by key.
pub const SERVER_NAME: &str = "superfluid";

/// How often an idle connection sends a keep-alive: four fit in
/// [`IDLE_TIMEOUT`], so a few lost packets do not drop a healthy peer.
pub const KEEP_ALIVE: Duration = Duration::from_millis(500);

/// How long a silent connection lives before it is considered lost.
///
/// QUIC restarts the idle timer not only on each packet received but also
/// on the first ack-eliciting packet sent after it (RFC 9000 §10.1): when a
/// peer goes silent, our own keep-alive, sent [`KEEP_ALIVE`] after its last
/// packet, starts the timer again. A peer killed or cut off mid-answer is
/// therefore given up at most [`SILENT_PEER_DROPPED_WITHIN`] after its last
/// packet (2.5 s; with 1 s and 3 s it was 4 s), and its generations move to
/// another node (see `docs/operations.md`).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest a silent peer keeps its connection: the idle timeout counted
/// from our keep-alive after its last packet. Kept under 3 s.
pub const SILENT_PEER_DROPPED_WITHIN: Duration =
    Duration::from_millis(IDLE_TIMEOUT.as_millis() as u64 + KEEP_ALIVE.as_millis() as u64);

const _: () = assert!(SILENT_PEER_DROPPED_WITHIN.as_millis() < 3000);

/// Streams one side may have open towards the other (one per generation).
const MAX_STREAMS: u32 = 4096;

/// Bytes a peer may send on one stream ahead of what this side has read.
///
/// quinn's default (1.25 MB, sized for 100 Mbit/s at 100 ms) held a model
/// transfer to a fraction of the link: the sender stopped whenever the node
/// paused to write a chunk to disk. Token streams never come near it.
const STREAM_WINDOW: u32 = 32 << 20;

/// Bytes this side keeps in flight or queued across its streams; one
/// transfer stream's window.
const SEND_WINDOW: u64 = STREAM_WINDOW as u64;

/// Packets a peer on another machine may receive before it must acknowledge them.
const ACK_ELICITING_THRESHOLD: u32 = 4;

/// The transport settings both sides use: keep-alive, idle timeout, stream
/// limits and windows, and how often the peer acknowledges ([`ack_frequency`]).
pub fn transport_config(peer_on_this_machine: bool) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.keep_alive_interval(Some(KEEP_ALIVE));
    // 2 s always fits in a QUIC varint of milliseconds.
    t.max_idle_timeout(quinn::IdleTimeout::try_from(IDLE_TIMEOUT).ok());
    t.max_concurrent_bidi_streams(MAX_STREAMS.into());
    t.max_concurrent_uni_streams(0u32.into());
    t.ack_frequency_config(ack_frequency(peer_on_this_machine));
    t.stream_receive_window(STREAM_WINDOW.into());
    t.send_window(SEND_WINDOW);
    Arc::new(t)
}

/// What the peer is asked about acknowledgements: nothing (quinn's default,
/// every second packet) when it is on this machine, every fifth across a
/// network.
///
/// A generation streams one small packet per token. Across a network every
/// acknowledgement is a packet (and a system call on each side), so ask for
/// one every fifth packet or after the usual delay. Five stays well under the
/// initial congestion window, so a long prompt never waits on a delayed ACK.
///
/// On one machine (`superfluid serve`, a node beside its head) an
/// acknowledgement costs no network, but one held back costs a timer: quinn
/// asks for a delay of at most 25 ms on so short a path, and at a token every
/// 9 ms fewer than five packets arrive in that time, so most acknowledgements
/// went out when the timer fired, each waking the process in the middle of a
/// decode step. At every second packet they leave on the wakeup that carries
/// a token.
fn ack_frequency(peer_on_this_machine: bool) -> Option<quinn::AckFrequencyConfig> {
    if peer_on_this_machine {
        return None;
    }
    let mut acks = quinn::AckFrequencyConfig::default();
    acks.ack_eliciting_threshold(ACK_ELICITING_THRESHOLD.into());
    Some(acks)
}

/// The head's endpoint: listens on `addr` (port 0 picks one; see `local_addr`)
/// and accepts nodes whose key `authorizer` approves.
pub fn server_endpoint(
    addr: SocketAddr,
    identity: &Identity,
    authorizer: Authorizer,
) -> Result<quinn::Endpoint, EndpointError> {
    let tls = tls::server_config(identity, authorizer)?;
    let crypto = QuicServerConfig::try_from(tls).map_err(EndpointError::QuicTls)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    // Nodes reach a head that listens on loopback from this machine only.
    config.transport_config(transport_config(addr.ip().is_loopback()));
    let socket =
        std::net::UdpSocket::bind(addr).map_err(|source| EndpointError::Bind { addr, source })?;
    let mut endpoint_config = quinn::EndpointConfig::new(reset_key(identity));
    // Connection ids a restarted head still recognises as its own, so that it
    // answers them with a stateless reset instead of dropping them.
    let cid_key = cid_key(identity);
    endpoint_config.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    quinn::Endpoint::new(
        endpoint_config,
        Some(config),
        socket,
        Arc::new(quinn::TokioRuntime),
    )
    .map_err(|source| EndpointError::Bind { addr, source })
}

/// The key of the head's connection id checks, derived from its identity.
fn cid_key(identity: &Identity) -> u64 {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    hash.update(b"superfluid link f connection ids\0");
    hash.update(identity.private_key().secret_der());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

/// The key of the head's QUIC stateless resets, derived from its identity.
///
/// A head that restarts with the same key answers packets of connections it
/// no longer knows with a reset its nodes can verify, so they notice at
/// once and reconnect, instead of waiting out the idle timeout.
fn reset_key(identity: &Identity) -> Arc<dyn quinn::crypto::HmacKey> {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    hash.update(b"superfluid link f stateless reset\0");
    hash.update(identity.private_key().secret_der());
    Arc::new(ring::hmac::Key::new(
        ring::hmac::HMAC_SHA256,
        &hash.finalize(),
    ))
}

/// A node's endpoint for dialing a head at an address of `head_addr`'s family,
/// presenting `identity` and trusting only `head`.
pub fn client_endpoint(
    head_addr: SocketAddr,
    identity: &Identity,
    head: Fingerprint,
) -> Result<quinn::Endpoint, EndpointError> {
    let tls = tls::client_config(identity, head)?;
    let crypto = QuicClientConfig::try_from(tls).map_err(EndpointError::QuicTls)?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(transport_config(head_addr.ip().is_loopback()));
    let bind: SocketAddr = if head_addr.is_ipv6() {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let mut endpoint = quinn::Endpoint::client(bind)
        .map_err(|source| EndpointError::Bind { addr: bind, source })?;
    endpoint.set_default_client_config(config);
    Ok(endpoint)
}

/// Dials the head at `addr` and completes the handshake.
pub async fn connect(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
) -> Result<quinn::Connection, DialError> {
    let connecting = endpoint
        .connect(addr, SERVER_NAME)
        .map_err(DialError::Start)?;
    connecting.await.map_err(DialError::Handshake)
}

/// The fingerprint of the key the peer proved it holds during the handshake.
pub fn peer_fingerprint(connection: &quinn::Connection) -> Result<Fingerprint, PeerIdentityError> {
    let identity = connection
        .peer_identity()
        .ok_or(PeerIdentityError::Missing)?;
    let certs = identity
        .downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
        .map_err(|_| PeerIdentityError::Missing)?;
    certs
        .first()
        .and_then(Fingerprint::of_certificate)
        .ok_or(PeerIdentityError::Missing)
}

#[cfg(test)]
mod tests {
    use super::ack_frequency;

    #[test]
    fn only_a_peer_across_a_network_is_asked_to_acknowledge_less_often() {
        // Beside its head, a node's token packets are acknowledged at quinn's
        // default cadence, on the wakeups that carry tokens, not from a timer.
        assert!(ack_frequency(true).is_none());
        assert!(ack_frequency(false).is_some());
    }
}

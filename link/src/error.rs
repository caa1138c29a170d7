//! What can go wrong in the Link F transport: one error per operation, each
//! with what to do.

use std::{net::SocketAddr, path::PathBuf};

/// Why an identity could not be loaded, saved, generated or named.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The identity key file could not be read or written.
    #[error("could not access identity key file {path}: {source}; check that the directory exists and is writable by this user")]
    KeyFile {
        /// The key file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The key file does not hold an ed25519 PKCS#8 key.
    #[error("identity key {path} is not an ed25519 PKCS#8 key ({reason}); delete it to have a new identity generated, or restore the right file")]
    BadKey {
        /// The key file, or `<memory>`.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// Generating a key or certificate failed (a bug or a broken crypto provider).
    #[error(
        "could not generate the identity key or certificate: {0}; this is a bug, please report it"
    )]
    Generate(#[source] rcgen::Error),
    /// A fingerprint string is not 64 hex digits.
    #[error("{input:?} is not a fingerprint; expected 64 hex digits as printed by the other side's `identity` output")]
    BadFingerprint {
        /// What was given.
        input: String,
    },
}

/// Why a QUIC endpoint could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The TLS configuration could not be built (a bug).
    #[error("could not build the TLS configuration: {0}; this is a bug, please report it")]
    Tls(#[source] rustls::Error),
    /// The TLS configuration is not usable by QUIC (a bug).
    #[error("TLS configuration unusable for QUIC: {0}; this is a bug, please report it")]
    QuicTls(#[source] quinn::crypto::rustls::NoInitialCipherSuite),
    /// The UDP socket could not be bound, or its address not read back.
    #[error("could not bind UDP {addr}: {source}; pick a free port or address")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Why dialing a head did not give a connection.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The connection could not be started (a bad address for this endpoint,
    /// or the endpoint is closing).
    #[error("could not start a connection: {0}; check the head address")]
    Start(#[source] quinn::ConnectError),
    /// The QUIC or TLS handshake failed: the head did not answer, or one side
    /// refused the other's key.
    #[error("the handshake with the head failed: {0}; check that the head runs at that address, that its key is the one pinned, and that it accepts this node's key")]
    Handshake(#[source] quinn::ConnectionError),
}

/// Why a connection's peer has no identity to name.
#[derive(Debug, thiserror::Error)]
pub enum PeerIdentityError {
    /// The handshake left no ed25519 certificate of the peer.
    #[error("the peer presented no ed25519 certificate; it is not a superfluid peer")]
    Missing,
}

/// Why a frame could not be written to or read from a stream.
#[derive(Debug, thiserror::Error)]
pub enum FrameIoError {
    /// Writing to the stream failed (the peer reset it or the connection dropped).
    #[error("could not write to the stream: {0}; the peer cancelled it or the connection dropped")]
    Write(#[source] quinn::WriteError),
    /// Reading from the stream failed (the peer reset it or the connection dropped).
    #[error(
        "could not read from the stream: {0}; the peer cancelled it or the connection dropped"
    )]
    Read(#[source] quinn::ReadError),
    /// Reading or writing a byte stream (a transfer over TCP) failed.
    #[error("the transfer connection failed: {0}; the peer closed it or the network dropped")]
    Io(#[source] std::io::Error),
    /// The stream ended in the middle of a frame.
    #[error("the stream ended inside a frame ({got} of {want} bytes); the peer crashed or speaks another protocol")]
    Truncated {
        /// Bytes received.
        got: usize,
        /// Bytes expected.
        want: usize,
    },
    /// A frame was over the size limit or did not encode or decode.
    #[error(
        "bad frame: {0}; the peer speaks another protocol version or is broken; close the stream"
    )]
    Frame(#[source] superfluid_proto::FrameError),
}

impl From<superfluid_proto::FrameError> for FrameIoError {
    fn from(e: superfluid_proto::FrameError) -> Self {
        Self::Frame(e)
    }
}

impl FrameIoError {
    /// Whether the peer sent something that is not a frame of the expected
    /// message: the stream is to be closed with a reason, not retried.
    pub fn is_bad_frame(&self) -> bool {
        matches!(self, Self::Frame(_))
    }

    /// The connection's error, if the read failed because the connection
    /// was lost rather than the stream reset.
    pub fn connection_lost(&self) -> Option<&quinn::ConnectionError> {
        match self {
            Self::Read(quinn::ReadError::ConnectionLost(e))
            | Self::Write(quinn::WriteError::ConnectionLost(e)) => Some(e),
            _ => None,
        }
    }
}

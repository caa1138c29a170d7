//! Everything that can go wrong in the Link F transport, each with what to do.

use std::{net::SocketAddr, path::PathBuf};

/// Why a Link F operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
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
    /// The TLS configuration could not be built (a bug).
    #[error("could not build the TLS configuration: {0}; this is a bug, please report it")]
    Tls(#[source] rustls::Error),
    /// The TLS configuration is not usable by QUIC (a bug).
    #[error("TLS configuration unusable for QUIC: {0}; this is a bug, please report it")]
    QuicTls(#[source] quinn::crypto::rustls::NoInitialCipherSuite),
    /// The UDP socket could not be bound.
    #[error("could not bind UDP {addr}: {source}; pick a free port or address")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A connection could not be started.
    #[error("could not start a connection: {0}; check the head address")]
    Connect(#[source] quinn::ConnectError),
    /// The connection failed or was closed by the peer.
    #[error("connection lost: {0}; the peer may have restarted, refused our key, or the network is down")]
    Connection(#[source] quinn::ConnectionError),
    /// Writing to a stream failed (the peer reset it or the connection dropped).
    #[error("could not write to the stream: {0}; the peer cancelled it or the connection dropped")]
    Write(#[source] quinn::WriteError),
    /// Reading from a stream failed (the peer reset it or the connection dropped).
    #[error(
        "could not read from the stream: {0}; the peer cancelled it or the connection dropped"
    )]
    Read(#[source] quinn::ReadError),
    /// The stream ended in the middle of a frame.
    #[error("the stream ended inside a frame ({got} of {want} bytes); the peer crashed or speaks another protocol")]
    Truncated {
        /// Bytes received.
        got: usize,
        /// Bytes expected.
        want: usize,
    },
    /// A frame was over the size limit or did not decode.
    #[error("bad frame from the peer: {0}; the peer speaks another protocol version or is broken; close the stream")]
    Frame(#[source] superfluid_proto::FrameError),
    /// The stream was already finished or reset locally.
    #[error("the stream is already closed: {0}; this is a bug, please report it")]
    Closed(#[source] quinn::ClosedStream),
    /// The connection has no usable peer certificate.
    #[error("the peer presented no ed25519 certificate; it is not a superfluid peer")]
    NoPeerIdentity,
}

impl From<superfluid_proto::FrameError> for LinkError {
    fn from(e: superfluid_proto::FrameError) -> Self {
        Self::Frame(e)
    }
}

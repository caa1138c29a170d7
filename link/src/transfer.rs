//! Model files over TLS on TCP: the head listens on its Link F port on TCP
//! too, and a node fetches model files there, authenticated exactly as on
//! QUIC (the node's key in a client certificate, the head's key pinned).
//!
//! Bulk bytes move several times faster this way on the same machine:
//! the kernel acknowledges, paces and copies TCP segments, where QUIC does
//! that work per 1,452-byte packet in user space (see `docs/models.md`).
//! Messages are the same frames as on Link F's streams ([`read_frame_from`],
//! [`write_frame_to`]). A node that cannot reach the TCP port (a firewall
//! that opens only UDP, an older head) fetches over a QUIC stream instead.

use crate::{tls, Authorizer, EndpointError, Fingerprint, FrameIoError, Identity};
use rustls::pki_types::ServerName;
use serde::{de::DeserializeOwned, Serialize};
use std::{net::SocketAddr, sync::Arc, time::Duration};
use superfluid_proto::{
    decode, encode,
    frame::{body_len, FrameError},
    LEN_PREFIX, TRANSFER_ALPN,
};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;

pub use tokio_rustls::{client, server, TlsAcceptor};

/// How long a node waits for the head's TCP port to answer and the TLS
/// handshake to finish before it fetches over QUIC instead.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The largest frame either side reads on the transfer port: a request and
/// a reply are a hash, an offset or a reason, far below Link F's
/// `MAX_FRAME`, and a peer that is not yet known to be a member makes the
/// head set aside no more than this.
pub const MAX_TRANSFER_FRAME: usize = 64 << 10;

/// A node's connection to the transfer port.
pub type ClientStream = client::TlsStream<TcpStream>;

/// The head's side: a TLS acceptor that asks `authorizer` about each key,
/// as the QUIC endpoint does, with the transfer ALPN.
pub fn acceptor(identity: &Identity, authorizer: Authorizer) -> Result<TlsAcceptor, EndpointError> {
    let mut config = tls::server_config(identity, authorizer)?;
    config.alpn_protocols = vec![TRANSFER_ALPN.to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The fingerprint of the key a node proved it holds in the handshake.
pub fn peer_of(stream: &server::TlsStream<TcpStream>) -> Option<Fingerprint> {
    let (_, conn) = stream.get_ref();
    conn.peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(Fingerprint::of_certificate)
}

/// A node's side: dials the head's transfer port as `identity`, trusting
/// only `head`.
#[derive(Clone)]
pub struct TransferClient {
    connector: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for TransferClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransferClient").finish_non_exhaustive()
    }
}

impl TransferClient {
    /// A client presenting `identity` to the head whose key is `head`.
    ///
    /// # Errors
    /// [`EndpointError::Tls`] if the TLS configuration cannot be built (a bug).
    pub fn new(identity: &Identity, head: Fingerprint) -> Result<Self, EndpointError> {
        let mut config = tls::client_config(identity, head)?;
        config.alpn_protocols = vec![TRANSFER_ALPN.to_vec()];
        Ok(Self {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// Connects to the head's transfer port at `addr` (its Link F address)
    /// and completes the handshake, within [`CONNECT_TIMEOUT`].
    ///
    /// # Errors
    /// The I/O error of the connection or handshake, or `TimedOut`.
    pub async fn connect(&self, addr: SocketAddr) -> std::io::Result<ClientStream> {
        let dial = async {
            let tcp = TcpStream::connect(addr).await?;
            self.connector
                .connect(ServerName::IpAddress(addr.ip().into()), tcp)
                .await
        };
        tokio::time::timeout(CONNECT_TIMEOUT, dial)
            .await
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no TLS handshake within {CONNECT_TIMEOUT:?}"),
                )
            })?
    }
}

/// Writes `msg` as one frame to any byte stream.
///
/// # Errors
/// [`FrameIoError::Frame`] if it does not encode, [`FrameIoError::Io`] if
/// the write fails.
pub async fn write_frame_to<T: Serialize, W: AsyncWrite + Unpin>(
    w: &mut W,
    msg: &T,
) -> Result<(), FrameIoError> {
    let bytes = encode(msg)?;
    w.write_all(&bytes).await.map_err(FrameIoError::Io)?;
    w.flush().await.map_err(FrameIoError::Io)
}

/// Reads one frame of at most [`MAX_TRANSFER_FRAME`] bytes from any byte
/// stream; `Ok(None)` when it ended cleanly before the frame began.
///
/// # Errors
/// [`FrameIoError::Truncated`] if it ends inside the frame,
/// [`FrameIoError::Frame`] for a frame over the limit or not decoding,
/// [`FrameIoError::Io`] if the read fails.
pub async fn read_frame_from<T: DeserializeOwned, R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<Option<T>, FrameIoError> {
    let mut prefix = [0u8; LEN_PREFIX];
    let got = read_full(r, &mut prefix).await?;
    if got == 0 {
        return Ok(None);
    }
    if got < LEN_PREFIX {
        return Err(FrameIoError::Truncated {
            got,
            want: LEN_PREFIX,
        });
    }
    let len = body_len(prefix)?;
    if len > MAX_TRANSFER_FRAME {
        return Err(FrameIoError::Frame(FrameError::TooLarge {
            len,
            max: MAX_TRANSFER_FRAME,
        }));
    }
    let mut body = vec![0u8; len];
    let got = read_full(r, &mut body).await?;
    if got < len {
        return Err(FrameIoError::Truncated { got, want: len });
    }
    decode(&body).map(Some).map_err(FrameIoError::Frame)
}

/// Fills `buf` unless the stream ends first; how many bytes it got.
async fn read_full<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> Result<usize, FrameIoError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]).await {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(FrameIoError::Io(e)),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use superfluid_proto::{FetchRequest, NodeStream};

    #[tokio::test]
    async fn a_frame_reads_back_and_an_oversized_or_cut_one_is_an_error() {
        let request = NodeStream::Fetch(FetchRequest {
            sha256: "ab".repeat(32),
            offset: 7,
        });
        let mut wire = Vec::new();
        write_frame_to(&mut wire, &request).await.unwrap();
        let got: Option<NodeStream> = read_frame_from(&mut wire.as_slice()).await.unwrap();
        assert_eq!(got, Some(request));
        let empty: Option<NodeStream> = read_frame_from(&mut &[][..]).await.unwrap();
        assert_eq!(empty, None, "a clean end before a frame");
        let cut = read_frame_from::<NodeStream, _>(&mut &wire[..wire.len() - 1]).await;
        assert!(
            matches!(cut, Err(FrameIoError::Truncated { .. })),
            "{cut:?}"
        );
        // A length over the transfer limit is refused before anything is read.
        let huge = ((MAX_TRANSFER_FRAME + 1) as u32).to_be_bytes();
        let over = read_frame_from::<NodeStream, _>(&mut &huge[..]).await;
        assert!(
            matches!(over, Err(FrameIoError::Frame(FrameError::TooLarge { .. }))),
            "{over:?}"
        );
    }
}

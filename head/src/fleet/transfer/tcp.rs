//! The head's transfer port: Link F's port number on TCP, where nodes
//! fetch model files over TLS (see `superfluid_link::transfer`).
//!
//! The handshake asks the listener's authorizer about the node's key, as
//! QUIC's does; then only a key with a Link F connection to this head (a
//! node the hello admitted) is served. The request and the reply are the
//! frames of a QUIC transfer stream, and the file follows the same way.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use superfluid_link::transfer::{peer_of, read_frame_from, write_frame_to, TlsAcceptor};
use superfluid_proto::NodeStream;
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::{record, refused, send_file, REQUEST_TIMEOUT};
use crate::fleet::Fleet;
use crate::metrics::{LinkRefusal, TransferOutcome, Transport};

/// Transfer connections open at once, at most (handshakes included); more
/// are closed as they come. Each holds at most a few chunks of a file.
const MAX_CONNECTIONS: usize = 64;

/// Binds the transfer port on `addr` (the Link F address actually bound)
/// and serves it in the background; `None` when TCP `addr` is taken, so
/// that nodes fetch over QUIC instead.
pub(crate) async fn serve(
    fleet: Fleet,
    addr: SocketAddr,
    acceptor: TlsAcceptor,
) -> Option<JoinHandle<()>> {
    let listener = match TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(e) => {
            tracing::warn!(%addr, error = %e, "could not listen on TCP for model transfers; nodes fetch models over QUIC, which is slower");
            return None;
        }
    };
    tracing::info!(%addr, "listening for model transfers (TLS over TCP)");
    let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    Some(tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((tcp, from)) => {
                    let Ok(permit) = open.clone().try_acquire_owned() else {
                        tracing::warn!(%from, "refused a transfer connection: {MAX_CONNECTIONS} are open");
                        continue;
                    };
                    let (fleet, acceptor) = (fleet.clone(), acceptor.clone());
                    tokio::spawn(async move {
                        serve_connection(fleet, acceptor, tcp, from).await;
                        drop(permit);
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait, then go on.
                    tracing::warn!(error = %e, "could not accept a transfer connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }))
}

async fn serve_connection(fleet: Fleet, acceptor: TlsAcceptor, tcp: TcpStream, from: SocketAddr) {
    let mut tls = match tokio::time::timeout(REQUEST_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::info!(%from, error = %e, "a transfer connection's TLS handshake failed (is the node's key authorized?)");
            fleet.metrics().record_link_refusal(LinkRefusal::Handshake);
            return;
        }
        Err(_) => return,
    };
    // The request is read before any refusal, so that the node's bytes are
    // not left unread (closing over them would reset the connection).
    let request =
        match tokio::time::timeout(REQUEST_TIMEOUT, read_frame_from::<NodeStream, _>(&mut tls))
            .await
        {
            Ok(Ok(Some(NodeStream::Fetch(request)))) => request,
            Ok(Ok(None)) | Err(_) => return,
            Ok(Err(e)) => {
                let _ =
                    write_frame_to(&mut tls, &refused(format!("bad transfer request: {e}"))).await;
                record(&fleet, Transport::Tcp, TransferOutcome::Refused);
                let _ = tls.shutdown().await;
                return;
            }
        };
    let member = peer_of(&tls).is_some_and(|key| !fleet.inner.with_key(&key).is_empty());
    if !member {
        let reply = refused(
            "this key has no Link F connection to the head; a node fetches models after the head welcomed it".into(),
        );
        let _ = write_frame_to(&mut tls, &reply).await;
        record(&fleet, Transport::Tcp, TransferOutcome::Refused);
        let _ = tls.shutdown().await;
        return;
    }
    match send_file(&fleet, Transport::Tcp, &mut tls, &request).await {
        Ok(outcome) => record(&fleet, Transport::Tcp, outcome),
        Err(e) => {
            tracing::info!(%from, sha256 = %request.sha256, offset = request.offset, error = %e, "a model transfer ended early");
            record(&fleet, Transport::Tcp, TransferOutcome::Cut);
            return;
        }
    }
    let _ = tls.shutdown().await;
}

//! Model files to nodes: the streams a node opens after its welcome, the
//! same requests on the head's transfer port over TCP ([`tcp`]), and how
//! far each node's download has come.
//!
//! Only a node the hello admitted gets here (the streams are accepted on
//! its connection after the welcome; the TCP port serves only keys with a
//! Link F connection), and it can name a file only by the sha256 of one of
//! the head's models (see [`super::model_store::ModelStore`]).

use std::collections::HashMap;
use std::io::{Read as _, Seek as _};
use std::sync::Mutex;

use superfluid_link::sync::lock;
use superfluid_link::{
    quinn::{self, RecvStream, SendStream},
    read_frame,
    transfer::write_frame_to,
};
use superfluid_proto::{FetchProgress, FetchReply, FetchRequest, NodeStream};
use tokio::io::{AsyncWrite, AsyncWriteExt as _};

use super::Fleet;
use crate::metrics::{TransferOutcome, Transport};

pub(super) mod tcp;

/// Bytes read from the file and written to the stream at a time.
const CHUNK: usize = 1 << 20;

/// Chunks read from the file before the sender takes them, at most.
const READ_AHEAD: usize = 4;

/// How long a node may take to say what it wants on a stream it opened.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a chunk may wait for the node to take it before the head gives
/// up on the transfer (a node that stopped reading without closing).
const WRITE_STALL: std::time::Duration = std::time::Duration::from_secs(30);

/// Answers the streams `conn`'s node opens until the connection ends.
pub(super) async fn serve_node_streams(fleet: Fleet, conn: quinn::Connection) {
    while let Ok((send, recv)) = conn.accept_bi().await {
        tokio::spawn(serve_stream(fleet.clone(), send, recv));
    }
}

async fn serve_stream(fleet: Fleet, mut send: SendStream, mut recv: RecvStream) {
    let request =
        match tokio::time::timeout(REQUEST_TIMEOUT, read_frame::<NodeStream>(&mut recv)).await {
            Ok(Ok(Some(NodeStream::Fetch(request)))) => request,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                let reply = refused(format!("bad stream request: {e}"));
                let _ = write_frame_to(&mut send, &reply).await;
                let _ = send.finish();
                record(&fleet, Transport::Quic, TransferOutcome::Refused);
                return;
            }
            Err(_) => {
                let _ = send.reset(superfluid_link::control::STREAM_BAD_FRAME);
                return;
            }
        };
    match send_file(&fleet, Transport::Quic, &mut send, &request).await {
        Ok(outcome) => record(&fleet, Transport::Quic, outcome),
        Err(e) => {
            tracing::info!(sha256 = %request.sha256, offset = request.offset, error = %e, "a model transfer ended early");
            record(&fleet, Transport::Quic, TransferOutcome::Cut);
            let _ = send.reset(superfluid_link::control::STREAM_CANCELLED);
            return;
        }
    }
    let _ = send.finish();
    // Wait until the node has every byte, or has stopped reading.
    let _ = send.stopped().await;
}

/// Counts a transfer that ended, on the fleet's metrics.
fn record(fleet: &Fleet, over: Transport, outcome: TransferOutcome) {
    fleet.metrics().transfer.record_transfer(over, outcome);
}

fn refused(reason: String) -> FetchReply {
    FetchReply::Refused { reason }
}

/// Sends the reply and, if the request is good, the file from its offset,
/// on a QUIC stream or a TLS connection alike, counting the bytes sent;
/// whether it sent the file or refused.
async fn send_file<W: AsyncWrite + Unpin>(
    fleet: &Fleet,
    over: Transport,
    send: &mut W,
    request: &FetchRequest,
) -> Result<TransferOutcome, TransferError> {
    let store = &fleet.store;
    let Some(file) = store.by_sha256(&request.sha256) else {
        let reason = format!(
            "this head has no model file with sha256 {}; it serves {}",
            request.sha256,
            store
                .offers()
                .iter()
                .map(|o| o.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        return write_frame_to(send, &refused(reason))
            .await
            .map(|()| TransferOutcome::Refused)
            .map_err(TransferError::Frame);
    };
    if request.offset > file.size {
        let reason = format!(
            "offset {} is past the end of {} ({} bytes); delete the node's partial file and fetch again",
            request.offset, file.id, file.size
        );
        return write_frame_to(send, &refused(reason))
            .await
            .map(|()| TransferOutcome::Refused)
            .map_err(TransferError::Frame);
    }
    let mut reader = std::fs::File::open(&file.path).map_err(TransferError::Read)?;
    reader
        .seek(std::io::SeekFrom::Start(request.offset))
        .map_err(TransferError::Read)?;
    write_frame_to(send, &FetchReply::Sending { size: file.size })
        .await
        .map_err(TransferError::Frame)?;
    tracing::info!(model = %file.id, offset = request.offset, size = file.size, "sending a model file to a node");
    let mut chunks = read_ahead(reader, file.size - request.offset);
    let sent = &fleet.metrics().transfer;
    while let Some(chunk) = chunks.recv().await {
        let chunk = chunk?;
        tokio::time::timeout(WRITE_STALL, send.write_all(&chunk))
            .await
            .map_err(|_| TransferError::Stalled)?
            .map_err(TransferError::Write)?;
        sent.record_bytes(&file.id, over, chunk.len() as u64);
    }
    Ok(TransferOutcome::Sent)
}

/// Reads `len` bytes of `file` on a blocking thread, [`READ_AHEAD`] chunks
/// ahead of the sender, so that the disk and the link work at once; the
/// thread stops when the receiver is dropped.
fn read_ahead(
    mut file: std::fs::File,
    len: u64,
) -> tokio::sync::mpsc::Receiver<Result<Vec<u8>, TransferError>> {
    let (chunks, read) = tokio::sync::mpsc::channel(READ_AHEAD);
    tokio::task::spawn_blocking(move || {
        let mut left = len;
        while left > 0 {
            let want = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
            let mut buf = vec![0u8; want];
            let chunk = match file.read_exact(&mut buf) {
                Ok(()) => Ok(buf),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    Err(TransferError::Shrunk)
                }
                Err(e) => Err(TransferError::Read(e)),
            };
            let failed = chunk.is_err();
            if chunks.blocking_send(chunk).is_err() || failed {
                return;
            }
            left -= want as u64;
        }
    });
    read
}

/// Why a transfer stopped before its end.
#[derive(Debug, thiserror::Error)]
enum TransferError {
    /// The reply frame could not be written.
    #[error("could not answer the node: {0}")]
    Frame(#[source] superfluid_link::FrameIoError),
    /// The model file could not be read.
    #[error("could not read the model file: {0}")]
    Read(#[source] std::io::Error),
    /// The model file is shorter than when it was hashed.
    #[error("the model file is shorter than when the head started; restart the head so it hashes the file again")]
    Shrunk,
    /// The node stopped reading or the connection was lost.
    #[error("the stream to the node failed: {0}")]
    Write(#[source] std::io::Error),
    /// The node took nothing for [`WRITE_STALL`].
    #[error("the node took no bytes for {WRITE_STALL:?}")]
    Stalled,
}

/// How far each connected node's downloads have come, by node id.
#[derive(Debug, Default)]
pub(crate) struct FetchBoard {
    nodes: Mutex<HashMap<String, FetchProgress>>,
}

impl FetchBoard {
    /// Records a node's latest progress report; a finished download is
    /// taken off the board.
    pub(crate) fn report(&self, node_id: &str, progress: FetchProgress) {
        let mut nodes = lock(&self.nodes);
        if progress.done >= progress.total {
            nodes.remove(node_id);
        } else {
            nodes.insert(node_id.to_owned(), progress);
        }
    }

    /// Forgets a node that left.
    pub(crate) fn forget(&self, node_id: &str) {
        lock(&self.nodes).remove(node_id);
    }

    /// The download in progress on a node, if any.
    pub(crate) fn progress(&self, node_id: &str) -> Option<FetchProgress> {
        lock(&self.nodes).get(node_id).cloned()
    }
}

#[cfg(test)]
mod tests;

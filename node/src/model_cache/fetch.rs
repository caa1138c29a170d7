//! Fetching a model file from the head: one [`FetchRequest`] naming the
//! file by sha256 and the offset to start at, then the bytes (see
//! [`superfluid_proto::transfer`]), over a TLS connection to the head's
//! transfer port (its Link F port on TCP; see
//! [`superfluid_link::transfer`]), or, where that port does not answer, a
//! stream the node opens on its Link F connection.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, Instant};

use superfluid_link::transfer::{read_frame_from, write_frame_to, TransferClient};
use superfluid_link::{quinn, FrameIoError};
use superfluid_proto::{FetchProgress, FetchReply, FetchRequest, ModelOffer, NodeStream};
use tokio::io::{AsyncRead, AsyncReadExt as _};

use super::{free_bytes, CacheError, ModelCache, Progress};

/// The most bytes taken from the stream at a time.
const CHUNK: usize = 1 << 20;

/// Chunks received but not yet written, at most (each at most [`CHUNK`]).
const WRITE_QUEUE: usize = 32;

/// How often the head is told how far the download has come.
const REPORT_EVERY: Duration = Duration::from_millis(500);

/// How long the bytes may stop coming before the transfer counts as cut.
const READ_STALL: Duration = Duration::from_secs(30);

/// The bytes of a file as they come, over TCP or QUIC.
type Incoming = Box<dyn AsyncRead + Unpin + Send>;

/// Why a model could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The cache could not take the file (disk space, I/O, verification).
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The transfer stream could not be opened.
    #[error("could not open a transfer stream to the head: {0}; the connection was lost, the node retries")]
    Open(#[source] quinn::ConnectionError),
    /// The request or the head's reply could not be written or read.
    #[error("the transfer of {model} failed: {source}")]
    Frame {
        /// The model id.
        model: String,
        /// What went wrong on the stream.
        #[source]
        source: FrameIoError,
    },
    /// The head ended the stream without a reply.
    #[error("the head ended the transfer of {model} without answering; it may be shutting down")]
    NoReply {
        /// The model id.
        model: String,
    },
    /// The head would not send the file.
    #[error("the head would not send {model}: {reason}")]
    Refused {
        /// The model id.
        model: String,
        /// The head's reason.
        reason: String,
    },
    /// The head's file is not the length it announced in the welcome.
    #[error("the head's {model} is {sent} bytes, not the {offered} it announced; the head's file changed, reconnecting")]
    SizeChanged {
        /// The model id.
        model: String,
        /// The length in the welcome.
        offered: u64,
        /// The length in the reply.
        sent: u64,
    },
    /// The bytes stopped coming (the connection was cut).
    #[error(
        "the transfer of {model} was cut: {source}; the next attempt resumes from the partial file"
    )]
    Cut {
        /// The model id.
        model: String,
        /// What the connection said.
        #[source]
        source: std::io::Error,
    },
    /// A blocking cache task died.
    #[error("a model cache task failed: {0}; this is a bug, please report it")]
    Task(#[source] tokio::task::JoinError),
}

/// Fetches `offer` from the head on `conn` into `cache`, resuming a partial
/// file, and returns the verified file's path (at once if it is cached).
/// With `tcp`, the bytes come over the head's transfer port when it
/// answers. `report` is told how far the download has come, at most every
/// [`REPORT_EVERY`] and at its end.
///
/// # Errors
/// See [`FetchError`]; a cut leaves the partial file for the next attempt.
pub async fn fetch(
    conn: &quinn::Connection,
    tcp: Option<&TransferClient>,
    cache: &ModelCache,
    offer: &ModelOffer,
    mut report: impl FnMut(FetchProgress),
) -> Result<PathBuf, FetchError> {
    if let Some(path) = cache.cached(offer) {
        tracing::info!(model = %offer.id, path = %path.display(), "the model is in the cache");
        return Ok(path);
    }
    let starting = (cache.clone(), offer.clone());
    let download = tokio::task::spawn_blocking(move || starting.0.start(&starting.1, free_bytes))
        .await
        .map_err(FetchError::Task)??;
    // Another process may have fetched it while this one waited for the lock.
    if let Some(path) = cache.cached(offer) {
        return Ok(path);
    }
    let offset = download.offset();
    if offset > 0 {
        tracing::info!(model = %offer.id, offset, size = offer.size, "resuming the model's download from byte {offset}");
    } else {
        tracing::info!(model = %offer.id, size = offer.size, sha256 = %offer.sha256, "fetching the model from the head");
    }
    let model = offer.id.clone();
    let frame_error = |source| FetchError::Frame {
        model: model.clone(),
        source,
    };
    let request = NodeStream::Fetch(FetchRequest {
        sha256: offer.sha256.clone(),
        offset,
    });
    let mut recv = open(conn, tcp, &request).await.map_err(|e| match e {
        Opening::Connection(e) => FetchError::Open(e),
        Opening::Frame(e) => frame_error(e),
    })?;
    match read_frame_from::<FetchReply, _>(&mut recv)
        .await
        .map_err(frame_error)?
    {
        None => return Err(FetchError::NoReply { model }),
        Some(FetchReply::Refused { reason }) => return Err(FetchError::Refused { model, reason }),
        Some(FetchReply::Sending { size }) if size != offer.size => {
            return Err(FetchError::SizeChanged {
                model,
                offered: offer.size,
                sent: size,
            })
        }
        Some(FetchReply::Sending { .. }) => {}
    }
    let progress_of = |done| FetchProgress {
        model: offer.id.clone(),
        done,
        total: offer.size,
    };
    let mut progress = Progress::new(&offer.id, offer.size, offset);
    let mut reported = Instant::now();
    report(progress_of(offset));
    // The disk writes and the hashing run on their own thread, so the
    // stream is read (and acknowledged) while a chunk is being written.
    // A read yields a packet's or a record's worth of bytes; they are
    // gathered into chunks of [`CHUNK`] bytes, so the writer makes one
    // write call and one hand-over per chunk rather than per packet.
    let (chunks, mut queued) = tokio::sync::mpsc::channel::<Vec<u8>>(WRITE_QUEUE);
    let writer = tokio::task::spawn_blocking(move || {
        let mut download = download;
        while let Some(chunk) = queued.blocking_recv() {
            download.write_chunk(chunk)?;
        }
        Ok::<_, CacheError>(download)
    });
    let mut got = offset;
    // Read into initialised memory: a TLS stream's reads zero whatever
    // part of the buffer they are given that is not yet initialised.
    let mut gathered = vec![0u8; CHUNK];
    let mut filled = 0;
    // The transfer port serves a node with a Link F connection: when that
    // connection is lost (a pulled cable shows as its idle timeout, within
    // seconds), the transfer is cut too, and resumes on the next one.
    let link_lost = conn.closed();
    tokio::pin!(link_lost);
    let received = loop {
        match read_some(&mut recv, &mut gathered[filled..], link_lost.as_mut()).await {
            Ok(0) => break Ok(()),
            Ok(n) => {
                got += n as u64;
                filled += n;
                if filled == CHUNK {
                    filled = 0;
                    let full = std::mem::replace(&mut gathered, vec![0u8; CHUNK]);
                    if chunks.send(full).await.is_err() {
                        // The writer stopped: its error is the one to report.
                        break Ok(());
                    }
                }
                progress.set(got);
                if reported.elapsed() >= REPORT_EVERY {
                    reported = Instant::now();
                    report(progress_of(got));
                }
            }
            Err(source) => {
                break Err(FetchError::Cut {
                    model: model.clone(),
                    source,
                })
            }
        }
    };
    // What came before an end or a cut is written too: a cut download
    // resumes after every byte received.
    if filled > 0 {
        gathered.truncate(filled);
        let _ = chunks.send(gathered).await;
    }
    drop(chunks);
    progress.finish();
    let download = writer.await.map_err(FetchError::Task)??;
    received?;
    let done = download.written();
    let path = tokio::task::spawn_blocking(move || download.finish())
        .await
        .map_err(FetchError::Task)??;
    report(progress_of(done));
    tracing::info!(model = %offer.id, path = %path.display(), "fetched and verified the model");
    Ok(path)
}

/// Reads the next bytes into `buf` (0 at the end of the file), or says
/// why none come: they stopped for [`READ_STALL`], or the Link F
/// connection (`link_lost`) was lost.
async fn read_some(
    recv: &mut Incoming,
    buf: &mut [u8],
    link_lost: Pin<&mut impl Future<Output = quinn::ConnectionError>>,
) -> std::io::Result<usize> {
    tokio::select! {
        read = tokio::time::timeout(READ_STALL, recv.read(buf)) => read.unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no bytes for {READ_STALL:?}"),
            ))
        }),
        lost = link_lost => Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            format!("the Link F connection to the head was lost ({lost})"),
        )),
    }
}

/// Why a transfer could not be started.
enum Opening {
    Connection(quinn::ConnectionError),
    Frame(FrameIoError),
}

/// Sends `request` over the head's transfer port if `tcp` reaches it, else
/// on a new stream of `conn`, and gives what the head answers.
async fn open(
    conn: &quinn::Connection,
    tcp: Option<&TransferClient>,
    request: &NodeStream,
) -> Result<Incoming, Opening> {
    if let Some(client) = tcp {
        let addr = conn.remote_address();
        match client.connect(addr).await {
            Ok(mut tls) => {
                tracing::info!(%addr, "fetching over the head's transfer port (TLS over TCP)");
                write_frame_to(&mut tls, request)
                    .await
                    .map_err(Opening::Frame)?;
                return Ok(Box::new(tls));
            }
            Err(e) => {
                tracing::info!(%addr, error = %e, "the head's transfer port (TCP) did not answer; fetching over Link F's QUIC connection, which is slower");
            }
        }
    }
    let (mut send, recv) = conn.open_bi().await.map_err(Opening::Connection)?;
    write_frame_to(&mut send, request)
        .await
        .map_err(Opening::Frame)?;
    let _ = send.finish();
    Ok(Box::new(recv))
}

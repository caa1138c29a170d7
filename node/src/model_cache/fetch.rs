//! Fetching a model file from the head over Link F: a stream the node
//! opens on its connection, one [`FetchRequest`] naming the file by sha256
//! and the offset to start at, then the bytes (see
//! [`superfluid_proto::transfer`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use superfluid_link::{quinn, read_frame, write_frame, FrameIoError};
use superfluid_proto::{FetchProgress, FetchReply, FetchRequest, ModelOffer, NodeStream};

use super::{free_bytes, CacheError, ModelCache, Progress};

/// The most bytes taken from the stream at a time.
const CHUNK: usize = 1 << 20;

/// Chunks received but not yet written, at most (each at most [`CHUNK`]).
const WRITE_QUEUE: usize = 32;

/// How often the head is told how far the download has come.
const REPORT_EVERY: Duration = Duration::from_millis(500);

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
        /// What the stream said.
        #[source]
        source: quinn::ReadError,
    },
    /// A blocking cache task died.
    #[error("a model cache task failed: {0}; this is a bug, please report it")]
    Task(#[source] tokio::task::JoinError),
}

/// Fetches `offer` from the head on `conn` into `cache`, resuming a partial
/// file, and returns the verified file's path (at once if it is cached).
/// `report` is told how far the download has come, at most every
/// [`REPORT_EVERY`] and at its end.
///
/// # Errors
/// See [`FetchError`]; a cut leaves the partial file for the next attempt.
pub async fn fetch(
    conn: &quinn::Connection,
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
    let (mut send, mut recv) = conn.open_bi().await.map_err(FetchError::Open)?;
    let request = NodeStream::Fetch(FetchRequest {
        sha256: offer.sha256.clone(),
        offset,
    });
    write_frame(&mut send, &request)
        .await
        .map_err(frame_error)?;
    let _ = send.finish();
    match read_frame::<FetchReply>(&mut recv)
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
    // The stream yields a packet's worth of bytes at a time; they are
    // gathered into chunks of [`CHUNK`] bytes, so the writer makes one
    // write call and one hand-over per chunk rather than per packet.
    let (chunks, mut queued) = tokio::sync::mpsc::channel::<Vec<u8>>(WRITE_QUEUE);
    let writer = tokio::task::spawn_blocking(move || {
        let mut download = download;
        while let Some(chunk) = queued.blocking_recv() {
            download.write(&chunk)?;
        }
        Ok::<_, CacheError>(download)
    });
    let mut got = offset;
    let mut gathered = Vec::with_capacity(CHUNK);
    let received = loop {
        match recv.read_chunk(CHUNK - gathered.len(), true).await {
            Ok(Some(chunk)) => {
                got += chunk.bytes.len() as u64;
                gathered.extend_from_slice(&chunk.bytes);
                if gathered.len() >= CHUNK {
                    let full = std::mem::replace(&mut gathered, Vec::with_capacity(CHUNK));
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
            Ok(None) => break Ok(()),
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
    if !gathered.is_empty() {
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

//! A bound on the HTTP connections the head holds open at once.
//!
//! Each connection costs a file descriptor and a task; without a bound, a
//! client that opens connections and never closes them can exhaust the
//! head's descriptors, and then nodes' model files and the key store fail
//! too. Once [`max`](ConnectionLimit::new) connections are open the head
//! stops accepting: new ones wait in the kernel's listen queue until one
//! closes, so a burst slows down instead of failing.

use axum::serve::Listener;
use std::io;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections a head holds open at once unless told otherwise; well under
/// the usual 1024 open files, with room for the head's own.
pub const DEFAULT_MAX_CONNECTIONS: NonZeroUsize = match NonZeroUsize::new(512) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};

/// A listener that accepts a connection only while fewer than its limit
/// are open.
#[derive(Debug)]
pub struct ConnectionLimit<L> {
    inner: L,
    open: Arc<Semaphore>,
    max: usize,
    /// Whether the last accept found the limit reached, so that an
    /// operator is warned once per episode, not once per connection.
    saturated: bool,
}

impl<L> ConnectionLimit<L> {
    /// `inner`, accepting at most `max` connections at once.
    pub fn new(inner: L, max: NonZeroUsize) -> Self {
        Self {
            inner,
            open: Arc::new(Semaphore::new(max.get())),
            max: max.get(),
            saturated: false,
        }
    }
}

impl<L: Listener> Listener for ConnectionLimit<L> {
    type Io = Counted<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let saturated = self.open.available_permits() == 0;
        if saturated && !self.saturated {
            tracing::warn!(
                max = self.max,
                "HTTP connection limit reached; new connections wait until one closes (raise it with --max-connections)"
            );
        }
        self.saturated = saturated;
        // The semaphore is never closed, so this waits for a permit; were
        // it closed, connections would go uncounted rather than refused.
        let permit = Arc::clone(&self.open).acquire_owned().await.ok();
        let (io, addr) = self.inner.accept().await;
        (
            Counted {
                io,
                _permit: permit,
            },
            addr,
        )
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// An accepted connection; closing it frees its place under the limit.
#[derive(Debug)]
pub struct Counted<Io> {
    io: Io,
    _permit: Option<OwnedSemaphorePermit>,
}

impl<Io: AsyncRead + Unpin> AsyncRead for Counted<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Counted<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;

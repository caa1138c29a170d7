//! `--ollama-port`: the head's router on a second port, for tools that
//! assume Ollama's port (11434) and cannot be told another.

use super::{connections, without_nagle, HeadError};
use axum::Router;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use tokio::sync::watch;

/// Binds `addr` and serves `app` there, under the same connection limit,
/// until `stopping` turns true. Returns where it listens.
pub async fn serve(
    addr: SocketAddr,
    app: Router,
    max_connections: NonZeroUsize,
    mut stopping: watch::Receiver<bool>,
) -> Result<SocketAddr, HeadError> {
    let bound = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| HeadError::OllamaPort { addr, source })?;
    let local = bound
        .local_addr()
        .map_err(|source| HeadError::OllamaPort { addr, source })?;
    let listener = connections::ConnectionLimit::new(without_nagle(bound), max_connections);
    let stopped = async move {
        if stopping.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await
        {
            tracing::warn!(error = %e, "the Ollama port stopped serving");
        }
    });
    Ok(local)
}

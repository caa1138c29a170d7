//! What the long-running commands share: the async runtime, waiting for
//! shutdown, hashing a model file off the async threads.

use std::future::Future;
use std::path::Path;

use anyhow::{bail, Context, Result};
use tokio::task::JoinHandle;

/// Runs `work` on a multi-threaded tokio runtime.
pub fn block_on<F: Future<Output = Result<()>>>(work: F) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(work)
}

/// Says how a task ended.
pub fn describe<E: std::fmt::Display, F: std::fmt::Display>(
    ended: Result<Result<(), E>, F>,
) -> String {
    match ended {
        Ok(Ok(())) => "it ended".into(),
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    }
}

/// Waits for Ctrl-C or SIGTERM, or fails when the HTTP server or the node stops.
pub async fn until_shutdown<E: std::fmt::Display>(
    http: JoinHandle<std::io::Result<()>>,
    node: Option<JoinHandle<Result<(), E>>>,
) -> Result<()> {
    let node = async move {
        match node {
            Some(node) => describe(node.await),
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        ended = http => bail!("the HTTP server stopped: {}", describe(ended)),
        why = node => bail!("the node stopped: {why}"),
        () = shutdown_signal() => {
            tracing::info!("shutting down");
            Ok(())
        }
    }
}

/// Completes on Ctrl-C or, on Unix, SIGTERM (what `kill` and service
/// managers send). A signal that cannot be watched never completes.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// The sha256 (hex) of a model file, which head and node compare.
pub async fn hash_model(path: &Path) -> Result<String> {
    let owned = path.to_owned();
    tokio::task::spawn_blocking(move || superfluid_link::digest::sha256_file(&owned))
        .await
        .context("hashing the model file")?
        .with_context(|| format!("reading {} to hash it", path.display()))
}

//! What the long-running commands share: the async runtime, waiting for
//! shutdown, hashing a model file off the async threads.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use superfluid_head::server::RunningHead;
use tokio::task::JoinHandle;

/// Runs `work` on a tokio runtime of `workers` threads (tokio's default,
/// one per core, if `None`; `TOKIO_WORKER_THREADS` overrides both).
///
/// One worker means tokio's current-thread runtime, which runs woken tasks
/// first come, first served. The multi-threaded runtime runs the task a
/// task wakes next, so there each generation stream's write woke the Link F
/// connection at once and its token left in a packet of its own; here the
/// streams that got tokens in the same engine step all write before the
/// connection sends them, together.
pub fn block_on<F: Future<Output = Result<()>>>(workers: Option<usize>, work: F) -> Result<()> {
    let workers = workers.filter(|_| std::env::var_os("TOKIO_WORKER_THREADS").is_none());
    let mut builder = match workers {
        Some(n) if n <= 1 => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(n);
            builder
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = builder
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(work)
}

/// Async worker threads beside an engine computing on `engine_threads` of
/// `cores`: the cores it leaves free, at least one.
///
/// The async work of a node is light (a few wakeups per token), but each
/// wakeup on a core the engine computes on preempts a compute thread, and
/// llama.cpp's threads wait for each other at every step. More workers
/// than free cores only spread the same work over more wakeups.
pub fn workers_beside(engine_threads: usize, cores: usize) -> usize {
    cores.saturating_sub(engine_threads).max(1)
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

/// The longest a stopping head waits for its open requests.
const HTTP_GRACE: Duration = superfluid_node::agent::DRAIN_GRACE;

/// Serves until Ctrl-C or SIGTERM, or fails when the HTTP server or the
/// node stops on its own. On the signal the head stops gracefully: it takes
/// no new connections, answers the requests it has (streams run to their
/// end), for [`HTTP_GRACE`] at most or until a second signal, and then
/// closes its Link F connections with a reason. `node`, the node of
/// `superfluid serve`, drains on the same signal (see
/// [`superfluid_node::agent::run_until`]); the head waits for it too.
pub async fn until_shutdown<E: std::fmt::Display>(
    mut head: RunningHead,
    mut node: Option<JoinHandle<Result<(), E>>>,
) -> Result<()> {
    let node_ended = async {
        match node.as_mut() {
            Some(node) => node.await,
            None => std::future::pending().await,
        }
    };
    let drained = tokio::select! {
        ended = &mut head.http => bail!("the HTTP server stopped: {}", describe(ended)),
        // A node ends well only once it has drained on the signal.
        ended = node_ended => match ended {
            Ok(Ok(())) => true,
            ended => bail!("the node stopped: {}", describe(ended)),
        },
        () = shutdown_signal() => false,
    };
    let node = node.filter(|_| !drained);
    tracing::info!("shutting down: taking no new requests and answering the open ones first (stop again to end them now)");
    head.stop_http();
    let finished = async {
        if let Some(node) = node {
            match node.await {
                Ok(Ok(())) => {}
                ended => tracing::warn!("the node did not stop cleanly: {}", describe(ended)),
            }
        }
        let _ = (&mut head.http).await;
    };
    tokio::select! {
        () = finished => tracing::info!("the open requests are answered"),
        () = tokio::time::sleep(HTTP_GRACE) => tracing::warn!("the open requests were not answered in time; ending them"),
        () = shutdown_signal() => tracing::warn!("stopping now; ending the open requests"),
    }
    head.close_link_and_wait().await;
    if let Err(e) = head.keys.flush() {
        tracing::warn!(error = %e, "could not save the API keys' last usage");
    }
    tracing::info!("stopped");
    Ok(())
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

/// The sha256 (hex) of a model file, which head and node compare: read
/// from the record beside the file while the file is unchanged, otherwise
/// computed and recorded (see [`superfluid_link::hash_cache`]).
pub async fn hash_model(path: &Path) -> Result<String> {
    superfluid_link::hash_cache::sha256_file_cached_async(path, None)
        .await
        .map(|hashed| hashed.sha256)
        .with_context(|| format!("reading {} to hash it", path.display()))
}

#[cfg(test)]
mod tests {
    use super::{block_on, workers_beside};
    use tokio::runtime::{Handle, RuntimeFlavor};

    fn flavor_for(workers: Option<usize>) -> RuntimeFlavor {
        let mut seen = None;
        block_on(workers, async {
            seen = Some(Handle::current().runtime_flavor());
            Ok(())
        })
        .expect("the runtime starts");
        seen.expect("the work ran")
    }

    #[test]
    fn one_worker_is_the_current_thread_runtime() {
        let one = if std::env::var_os("TOKIO_WORKER_THREADS").is_some() {
            RuntimeFlavor::MultiThread
        } else {
            RuntimeFlavor::CurrentThread
        };
        assert_eq!(flavor_for(Some(1)), one);
        assert_eq!(flavor_for(Some(2)), RuntimeFlavor::MultiThread);
        assert_eq!(flavor_for(None), RuntimeFlavor::MultiThread);
    }

    #[test]
    fn the_async_runtime_gets_the_cores_the_engine_leaves() {
        // An engine on every core (the default) leaves one worker.
        assert_eq!(workers_beside(2, 2), 1);
        assert_eq!(workers_beside(16, 16), 1);
        // More engine threads than cores still leave one.
        assert_eq!(workers_beside(8, 4), 1);
        assert_eq!(workers_beside(8, 16), 8);
        assert_eq!(workers_beside(1, 2), 1);
    }
}

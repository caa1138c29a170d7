//! A node with no model of its own: join the head, learn its models from
//! the welcome, and fetch the first into the model cache, before any engine
//! exists.
//!
//! This runs on a connection of its own, which offers no model (so the head
//! routes nothing to it) and reports the download's progress on its control
//! stream, where `superfluid fleet nodes` shows it. Once the file is
//! verified the connection is closed and the node starts its engine and
//! connects again to serve, with its key alone. A cut connection is retried
//! with the usual backoff and the download resumes from its partial file.

use std::path::PathBuf;
use std::time::Duration;

use superfluid_link::{
    control::{CLOSE_NORMAL, HEARTBEAT_INTERVAL},
    quinn::SendStream,
    write_frame,
};
use superfluid_proto::{ControlMsg, ModelOffer};
use tokio::sync::mpsc;

use super::endpoints::Endpoints;
use super::session::{self, SessionError, Welcomed};
use super::{backoff, AgentConfig, AgentError};
use crate::model_cache::{fetch, CacheError, FetchError, ModelCache};

/// A model file the head offered, verified in the node's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// What the head offered: id, sha256, size.
    pub offer: ModelOffer,
    /// The verified file.
    pub path: PathBuf,
}

/// How one attempt ended.
enum Attempt {
    /// The model is in the cache (none with `join_only`).
    Done(Vec<Fetched>),
    /// The head refused this node, for this reason.
    Refused(String),
}

/// Why one attempt failed; the agent tries again unless the fetch error
/// is one that retrying cannot fix.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// Fatal: retrying cannot help.
    #[error(transparent)]
    Fatal(AgentError),
}

/// Joins the head in `config` and fetches the first model it serves into
/// `cache`, retrying a lost connection or a cut transfer forever. With
/// `join_only`, stops once joined and fetches nothing.
///
/// # Errors
/// The head refused the join token; the head serves no model; the cache
/// cannot hold the file (disk space, permissions); the credential cannot
/// be saved.
pub async fn fetch_models(
    config: &AgentConfig,
    cache: &ModelCache,
) -> Result<Vec<Fetched>, AgentError> {
    let endpoints = Endpoints::new(config)?;
    let mut token = config.join_token.clone();
    let mut failures: u32 = 0;
    loop {
        let ended = attempt(config, &endpoints, cache, &mut token).await;
        failures = failures.saturating_add(1);
        let delay = backoff(failures);
        match ended {
            Ok(Attempt::Done(fetched)) => {
                endpoints
                    .close(b"the node has its model and reconnects to serve it")
                    .await;
                return Ok(fetched);
            }
            Ok(Attempt::Refused(reason)) if token.is_some() => {
                return Err(AgentError::Refused { reason })
            }
            Ok(Attempt::Refused(reason)) => {
                tracing::warn!(%reason, retry_in = ?delay, "the head refused this node");
            }
            Err(AttemptError::Fetch(FetchError::Cache(
                e @ (CacheError::NoSpace { .. } | CacheError::Io { .. }),
            ))) => return Err(AgentError::Fetch(FetchError::Cache(e))),
            Err(AttemptError::Fatal(e)) => return Err(e),
            Err(AttemptError::Fetch(e)) => {
                tracing::warn!(error = %e, retry_in = ?delay, "could not fetch the model; trying again");
            }
            Err(AttemptError::Session(e)) => tracing::warn!(
                heads = ?config.head_addrs, error = %e, retry_in = ?delay,
                "could not reach the head to fetch its model"
            ),
        }
        tokio::time::sleep(delay).await;
    }
}

/// One connection: hello offering nothing, then the first model's fetch.
async fn attempt(
    config: &AgentConfig,
    endpoints: &Endpoints,
    cache: &ModelCache,
    token: &mut Option<String>,
) -> Result<Attempt, AttemptError> {
    let (conn, addr) = session::dial(config, endpoints).await?;
    let welcomed = match session::hello(
        &conn,
        (Vec::new(), Vec::new()),
        config,
        addr,
        token.as_deref(),
    )
    .await
    {
        Ok(Ok(welcomed)) => welcomed,
        Ok(Err(reason)) => return Ok(Attempt::Refused(reason)),
        Err(e) => {
            conn.close(
                superfluid_link::control::CLOSE_PROTOCOL,
                e.to_string().as_bytes(),
            );
            return Err(e.into());
        }
    };
    if token.take().is_some() {
        if let Err(e) = session::save_credential(config) {
            conn.close(CLOSE_NORMAL, b"the node cannot save its credential");
            return Err(AttemptError::Fatal(e));
        }
    }
    let Welcomed { send, recv, offers } = welcomed;
    if config.join_only {
        return Ok(Attempt::Done(Vec::new()));
    }
    // Later the head will say which of its models each node serves; for
    // now a node without a model serves the head's first.
    let Some(offer) = offers.into_iter().next() else {
        conn.close(CLOSE_NORMAL, b"the head serves no model");
        return Err(AttemptError::Fatal(AgentError::NoModelOffered));
    };
    let (report, reports) = mpsc::channel(16);
    let writer = tokio::spawn(write_control(send, reports));
    let reader = tokio::spawn(session::control_reader(conn.clone(), recv, None));
    let transfers = config.transfer_client();
    let fetched = fetch(&conn, transfers.as_ref(), cache, &offer, |progress| {
        // A full queue only drops a report; a later one says more.
        let _ = report.try_send(ControlMsg::Fetching(progress));
    })
    .await;
    drop(report);
    // Let the last report reach the head before the connection closes.
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
    reader.abort();
    let path = fetched?;
    Ok(Attempt::Done(vec![Fetched { offer, path }]))
}

/// Writes heartbeats and progress reports until the reports end.
async fn write_control(mut send: SendStream, mut reports: mpsc::Receiver<ControlMsg>) {
    let mut heartbeat = tokio::time::interval(HEARTBEAT_INTERVAL);
    loop {
        let msg = tokio::select! {
            _ = heartbeat.tick() => ControlMsg::Heartbeat,
            msg = reports.recv() => match msg {
                Some(msg) => msg,
                None => return,
            },
        };
        if write_frame(&mut send, &msg).await.is_err() {
            return;
        }
    }
}

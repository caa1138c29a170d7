//! One generation on one node: the Link F stream, and the bookkeeping that
//! ends with it (the router's ticket, which counts it in flight; the node's
//! served count; metrics).

use std::sync::Arc;
use std::time::Instant;

use superfluid_link::{
    control::{STREAM_BAD_FRAME, STREAM_CANCELLED, STREAM_NODE_STOPPING},
    quinn::{ReadError, RecvStream, SendStream},
    read_frame, write_frame, FrameIoError,
};
use superfluid_proto::{GenerateEvent, GenerateRequest};

use super::error::FleetError;
use super::registry::NodeEntry;
use super::shared_router::SharedRouter;
use crate::metrics::Metrics;
use crate::routing::Ticket;

/// The router's record of one dispatched generation, returned when it ends.
#[derive(Debug)]
pub(crate) struct Routing {
    pub(crate) router: SharedRouter,
    pub(crate) ticket: Option<Ticket>,
    pub(crate) metrics: Arc<Metrics>,
}

impl Routing {
    fn first_token(&mut self) {
        if let Some(ticket) = self.ticket.as_mut() {
            self.router.lock().first_token(ticket, now());
        }
    }

    fn finished(&mut self, completed: bool) {
        if let Some(ticket) = self.ticket.take() {
            self.router.lock().finished(ticket, completed, now());
        }
    }
}

/// Now, on tokio's clock where it runs (so paused time reaches the router).
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl Drop for Routing {
    fn drop(&mut self) {
        self.finished(false);
    }
}

/// Opens a stream to the node and writes the request; on failure, the node's id and the error.
pub(crate) async fn dispatch(
    node: Arc<NodeEntry>,
    routing: Routing,
    request: &GenerateRequest,
) -> Result<RemoteGeneration, (String, FleetError)> {
    let lost = |reason: String| {
        let error = FleetError::NodeLost {
            node: node.name.clone(),
            reason,
        };
        (node.node_id.clone(), error)
    };
    let (mut send, recv) = node.connection.open_bi().await.map_err(|e| {
        lost(format!(
            "connection lost: {e}; the node may have restarted or the network is down"
        ))
    })?;
    write_frame(&mut send, request)
        .await
        .map_err(|e| lost(e.to_string()))?;
    // The request is the only frame the head writes; cancelling is a stream reset/stop.
    send.finish()
        .map_err(|e| lost(format!("could not finish the request: {e}")))?;
    tracing::debug!(node = %node.name, model = %request.model, prompt = request.prompt.len(), slot = ?request.slot, "dispatched generation");
    Ok(RemoteGeneration {
        node_name: node.name.clone(),
        node_id: node.node_id.clone(),
        node,
        send,
        recv,
        routing,
        first_token: false,
        ended: false,
    })
}

/// A generation running on a node. Dropping it cancels the generation
/// (the Link F stream is reset).
#[derive(Debug)]
pub struct RemoteGeneration {
    /// The name of the node serving it.
    pub node_name: String,
    /// That node's id, unique in the fleet.
    pub node_id: String,
    node: Arc<NodeEntry>,
    send: SendStream,
    recv: RecvStream,
    /// Holds the router's ticket, which counts the generation in flight
    /// until it ends or is dropped.
    routing: Routing,
    first_token: bool,
    /// A final event was received, or the stream failed.
    ended: bool,
}

impl RemoteGeneration {
    /// The next event; `Ok(None)` once the stream has ended after
    /// [`GenerateEvent::Finished`] or [`GenerateEvent::Failed`].
    pub async fn next_event(&mut self) -> Result<Option<GenerateEvent>, FleetError> {
        if self.ended {
            return Ok(None);
        }
        let result = read_frame::<GenerateEvent>(&mut self.recv).await;
        match result {
            Ok(Some(event)) => {
                match &event {
                    GenerateEvent::Tokens(_) => {
                        if !self.first_token {
                            self.first_token = true;
                            self.routing.first_token();
                        }
                    }
                    GenerateEvent::Finished(outcome) => {
                        self.routing
                            .metrics
                            .record_finished(outcome.prompt_tokens, outcome.cached_tokens);
                        self.end(true);
                    }
                    GenerateEvent::Failed { .. } => self.end(false),
                }
                Ok(Some(event))
            }
            Ok(None) => {
                self.end(false);
                Err(self.lost("the node ended the generation stream without a final event".into()))
            }
            Err(e) => {
                if e.is_bad_frame() {
                    let _ = self.recv.stop(STREAM_BAD_FRAME);
                }
                if matches!(e, FrameIoError::Read(ReadError::Reset(code)) if code == STREAM_NODE_STOPPING)
                {
                    self.node_stopping();
                }
                self.end(false);
                Err(self.lost(e.to_string()))
            }
        }
    }

    fn end(&mut self, served: bool) {
        self.ended = true;
        if !served {
            self.routing.metrics.record_failed();
        }
        self.routing.finished(served);
        if served {
            self.node.served();
        }
    }

    /// The node turned the generation away because it is stopping: route
    /// nothing more to it while it finishes its running generations.
    fn node_stopping(&self) {
        let node = &self.node;
        node.set_draining(true);
        tracing::info!(node = %node.name, node_id = %node.node_id, "the node is stopping: no new generations go there");
    }

    fn lost(&self, reason: String) -> FleetError {
        FleetError::NodeLost {
            node: self.node_name.clone(),
            reason,
        }
    }
}

impl Drop for RemoteGeneration {
    fn drop(&mut self) {
        if !self.ended {
            // Still running on the node (or the caller gave up early): cancel it.
            let _ = self.send.reset(STREAM_CANCELLED);
            let _ = self.recv.stop(STREAM_CANCELLED);
        }
    }
}

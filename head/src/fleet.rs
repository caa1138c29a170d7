//! The fleet as the head sees it: connected nodes and dispatch to them.
//!
//! - [`listen`] (in `fleet/listen.rs`) accepts nodes over Link F, runs the
//!   hello handshake and keeps each node registered while it is connected.
//! - the registry (`fleet/registry.rs`) knows each node's models, slots and
//!   load; [`Fleet::generate`] sends a request to the least busy node serving
//!   its model, on a fresh QUIC stream.
//!
//! The API of [`Fleet`], [`FleetError`] and [`RemoteGeneration`] is the
//! contract the HTTP layer relies on.

mod admin;
pub mod listen;
mod models;
mod registry;

pub use admin::Revoked;
pub use listen::{listen, LinkListenConfig, LinkListener};
pub use registry::{NodeSnapshot, NodeState};

use crate::membership::{Membership, MembershipError};
use superfluid_proto::ModelDescription;

use registry::{InFlight, Registry};
use std::sync::Arc;
use superfluid_link::{
    control::{STREAM_BAD_FRAME, STREAM_CANCELLED},
    quinn::{RecvStream, SendStream},
    read_frame, write_frame, LinkError,
};
use superfluid_proto::{GenerateEvent, GenerateRequest};

/// Why a generation could not be dispatched or did not complete.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// No connected node serves the model; the request may succeed later.
    #[error("no node in the fleet serves model {model:?} right now; start a node with this model or wait for one to reconnect")]
    NoNode {
        /// The model asked for.
        model: String,
    },
    /// The node's connection failed mid-generation.
    #[error("lost the connection to node {node}: {reason}")]
    NodeLost {
        /// The node's name.
        node: String,
        /// What the transport said.
        reason: String,
    },
    /// No connected (or, for revoke, enrolled) node has this id, name or key.
    #[error("no node {node:?} in the fleet; list the nodes with `superfluid fleet nodes` and name one by its id, name or key fingerprint")]
    UnknownNode {
        /// What was asked for.
        node: String,
    },
    /// A name matches several connected nodes.
    #[error("{node:?} names {count} connected nodes; name one by its id ({ids})")]
    Ambiguous {
        /// The name asked for.
        node: String,
        /// How many nodes have it.
        count: usize,
        /// Their ids, comma-separated.
        ids: String,
    },
    /// The head runs without membership (`superfluid serve`), so nodes cannot be revoked.
    #[error("this head runs without fleet membership (as `superfluid serve` does); revoking needs a head started with a data dir")]
    NoMembership,
    /// The membership files could not be updated.
    #[error(transparent)]
    Membership(#[from] MembershipError),
}

/// The connected nodes. Cheap to clone; all clones share one registry.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    inner: Arc<Registry>,
    membership: Option<Membership>,
    models: Arc<Vec<ModelDescription>>,
}

impl Fleet {
    /// An empty fleet.
    pub fn new() -> Self {
        Self::default()
    }

    /// This fleet admits nodes through `membership`: tokens on first join,
    /// enrolled keys after, revoked keys never, one connection per key.
    pub fn with_membership(mut self, membership: Membership) -> Self {
        self.membership = Some(membership);
        self
    }

    /// The head's own models, with their files' sha256. Generations go only
    /// to nodes whose model id and sha256 match one of these. Without this
    /// call every node's models are routed as they are.
    pub fn with_models(mut self, models: Vec<ModelDescription>) -> Self {
        self.models = Arc::new(models);
        self
    }

    /// The membership, if this fleet has one.
    pub fn membership(&self) -> Option<&Membership> {
        self.membership.as_ref()
    }

    /// The head's own models, as given to [`Fleet::with_models`].
    pub fn models(&self) -> &[ModelDescription] {
        &self.models
    }

    /// The tokens one sequence may hold on the nodes serving `model`
    /// (the smallest among them), or `None` while no node serves it.
    pub fn context_len(&self, model: &str) -> Option<u32> {
        self.inner.context_len(model)
    }

    /// The connected nodes, in the order they joined, with their load, how
    /// many generations each has served, state and eligibility.
    pub fn nodes(&self) -> Vec<NodeSnapshot> {
        self.inner.snapshot()
    }

    /// Sends one generation to a node that serves its model: the one with
    /// the fewest generations in flight per slot. If that node's connection
    /// fails before the request is sent, the next best node is tried.
    pub async fn generate(&self, request: GenerateRequest) -> Result<RemoteGeneration, FleetError> {
        let mut tried = Vec::new();
        let mut last_error = None;
        while let Some(in_flight) = self.inner.pick(&request.model, &tried) {
            match dispatch(in_flight, &request).await {
                Ok(generation) => return Ok(generation),
                Err((node_id, error)) => {
                    tracing::warn!(%node_id, %error, "could not dispatch to a node; trying another");
                    tried.push(node_id);
                    last_error = Some(error);
                }
            }
        }
        Err(last_error.unwrap_or(FleetError::NoNode {
            model: request.model,
        }))
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.inner
    }
}

/// Opens a stream to the node and writes the request; on failure, the node's id and the error.
async fn dispatch(
    in_flight: InFlight,
    request: &GenerateRequest,
) -> Result<RemoteGeneration, (String, FleetError)> {
    let node = in_flight.node().clone();
    let lost = |e: LinkError| {
        let error = FleetError::NodeLost {
            node: node.name.clone(),
            reason: e.to_string(),
        };
        (node.node_id.clone(), error)
    };
    let (mut send, recv) = node
        .connection
        .open_bi()
        .await
        .map_err(|e| lost(LinkError::Connection(e)))?;
    write_frame(&mut send, request).await.map_err(lost)?;
    // The request is the only frame the head writes; cancelling is a stream reset/stop.
    send.finish().map_err(|e| lost(LinkError::Closed(e)))?;
    tracing::debug!(node = %node.name, model = %request.model, prompt = request.prompt.len(), "dispatched generation");
    Ok(RemoteGeneration {
        node_name: node.name.clone(),
        send,
        recv,
        in_flight: Some(in_flight),
        ended: false,
    })
}

/// A generation running on a node. Dropping it cancels the generation
/// (the Link F stream is reset).
#[derive(Debug)]
pub struct RemoteGeneration {
    /// The name of the node serving it.
    pub node_name: String,
    send: SendStream,
    recv: RecvStream,
    /// Counts the generation as in flight until it ends or is dropped.
    in_flight: Option<InFlight>,
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
                    GenerateEvent::Tokens(_) => {}
                    GenerateEvent::Finished(_) => self.end(true),
                    GenerateEvent::Failed { .. } => self.end(false),
                }
                Ok(Some(event))
            }
            Ok(None) => {
                self.end(false);
                Err(self.lost("the node ended the generation stream without a final event".into()))
            }
            Err(e) => {
                if matches!(e, LinkError::Frame(_)) {
                    let _ = self.recv.stop(STREAM_BAD_FRAME);
                }
                self.end(false);
                Err(self.lost(e.to_string()))
            }
        }
    }

    fn end(&mut self, served: bool) {
        self.ended = true;
        if let Some(in_flight) = self.in_flight.take() {
            if served {
                in_flight.served();
            }
        }
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
        if self.in_flight.is_some() {
            // Still running on the node (or the caller gave up early): cancel it.
            let _ = self.send.reset(STREAM_CANCELLED);
            let _ = self.recv.stop(STREAM_CANCELLED);
        }
    }
}

#[cfg(test)]
mod join_tests;
#[cfg(test)]
mod tests;

//! The fleet as the head sees it: connected nodes and dispatch to them.
//!
//! The API below is the contract the HTTP layer relies on; the Link F side
//! fills in how nodes connect and how a generation reaches one.

use std::sync::Arc;
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
}

/// The connected nodes. Cheap to clone; all clones share one registry.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    _inner: Arc<()>,
}

impl Fleet {
    /// An empty fleet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The tokens one sequence may hold on the nodes serving `model`
    /// (the smallest among them), or `None` while no node serves it.
    pub fn context_len(&self, _model: &str) -> Option<u32> {
        None
    }

    /// Sends one generation to a node that serves its model.
    pub async fn generate(&self, request: GenerateRequest) -> Result<RemoteGeneration, FleetError> {
        Err(FleetError::NoNode { model: request.model })
    }
}

/// A generation running on a node. Dropping it cancels the generation
/// (the Link F stream is reset).
#[derive(Debug)]
pub struct RemoteGeneration {
    /// The name of the node serving it.
    pub node_name: String,
}

impl RemoteGeneration {
    /// The next event; `Ok(None)` once the stream has ended after
    /// [`GenerateEvent::Finished`] or [`GenerateEvent::Failed`].
    pub async fn next_event(&mut self) -> Result<Option<GenerateEvent>, FleetError> {
        Ok(None)
    }
}

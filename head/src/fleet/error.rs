//! What can go wrong dispatching a generation or acting on a node.

use crate::membership::MembershipError;

/// Why a generation could not be dispatched or did not complete.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// No connected node serves the model; the request may succeed later.
    #[error("no node in the fleet serves model {model:?} right now; start a node with this model or wait for one to reconnect")]
    NoNode {
        /// The model asked for.
        model: String,
    },
    /// The head serves the model but no node has it loaded, and none could
    /// load it in time; `reason` says why.
    #[error("model {model:?} is not loaded on any node and could not be loaded: {reason}")]
    NotLoaded {
        /// The model asked for.
        model: String,
        /// Why: the node's error, or the timeout.
        reason: String,
    },
    /// Nodes serve the model, but every one is draining: it finishes what it
    /// runs and takes nothing new. The request may succeed later.
    #[error("every node that serves model {model:?} is draining: it finishes the generations it runs and takes no new ones (it is shutting down, or was drained with `superfluid fleet drain`); retry in a moment, or start another node with this model")]
    Draining {
        /// The model asked for.
        model: String,
    },
    /// Every node that serves the model holds as many generations as its
    /// slots and queue take (`--max-queue`); the request is refused at once
    /// rather than queued without end.
    #[error("every node that serves model {model:?} is busy: their slots are full and {queued} requests wait for one; retry after {retry_after_secs} s, or add nodes to the fleet")]
    Busy {
        /// The model asked for.
        model: String,
        /// Generations waiting for a slot on those nodes.
        queued: u32,
        /// Whole seconds after which a slot is likely free.
        retry_after_secs: u64,
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

//! The fleet as the head sees it: connected nodes and dispatch to them.
//!
//! - [`listen`] (in `fleet/listen.rs`) accepts nodes over Link F, runs the
//!   hello handshake and keeps each node registered while it is connected.
//! - the registry (`fleet/registry.rs`) knows each node's models, slots and
//!   state; the [`crate::routing::Router`] knows which prompt blocks each node
//!   holds in cache and how busy and fast it is. [`Fleet::generate`] asks the
//!   router for a node and sends the request there on a fresh QUIC stream
//!   (`fleet/remote.rs`).
//!
//! The API of [`Fleet`], [`FleetError`] and [`RemoteGeneration`] is the
//! contract the HTTP layer relies on.

mod admin;
pub mod listen;
mod models;
mod registry;
mod remote;

pub use admin::Revoked;
pub use listen::{listen, LinkListenConfig, LinkListener};
pub use registry::{NodeLoadSnapshot, NodeSnapshot, NodeState};
pub use remote::RemoteGeneration;

use crate::membership::{Membership, MembershipError};
use crate::metrics::Metrics;
use crate::routing::{RoutePolicy, Router};
use superfluid_proto::{GenerateRequest, ModelDescription};

use registry::{InFlight, Registry};
use remote::{dispatch, lock, Routing};
use std::sync::{Arc, Mutex};

/// Why a generation could not be dispatched or did not complete.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// No connected node serves the model; the request may succeed later.
    #[error("no node in the fleet serves model {model:?} right now; start a node with this model or wait for one to reconnect")]
    NoNode {
        /// The model asked for.
        model: String,
    },
    /// Nodes serve the model, but every one is draining: it finishes what it
    /// runs and takes nothing new. The request may succeed later.
    #[error("every node that serves model {model:?} is draining: it finishes the generations it runs and takes no new ones (it is shutting down, or was drained with `superfluid fleet drain`); retry in a moment, or start another node with this model")]
    Draining {
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

/// The connected nodes. Cheap to clone; all clones share one registry,
/// router and set of metrics.
#[derive(Debug, Clone)]
pub struct Fleet {
    inner: Arc<Registry>,
    membership: Option<Membership>,
    models: Arc<Vec<ModelDescription>>,
    router: Arc<Mutex<Router>>,
    metrics: Arc<Metrics>,
}

impl Default for Fleet {
    fn default() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x5eed, |d| d.as_nanos() as u64);
        Self {
            inner: Arc::default(),
            membership: None,
            models: Arc::default(),
            router: Arc::new(Mutex::new(Router::new(RoutePolicy::default(), seed))),
            metrics: Arc::default(),
        }
    }
}

impl Fleet {
    /// An empty fleet that routes with the default policy
    /// ([`RoutePolicy::LeastTtft`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Routes generations with `policy`.
    pub fn with_policy(self, policy: RoutePolicy) -> Self {
        lock(&self.router).set_policy(policy);
        self
    }

    /// The routing policy in use.
    pub fn policy(&self) -> RoutePolicy {
        lock(&self.router).policy()
    }

    /// The head's counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
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

    /// The connected nodes, in the order they joined, with their load and
    /// measured speed, how many generations each has served, state and
    /// eligibility.
    pub fn nodes(&self) -> Vec<NodeSnapshot> {
        let mut nodes = self.inner.snapshot();
        let loads = lock(&self.router).nodes();
        for (key, node) in &mut nodes {
            if let Some(load) = loads.iter().find(|l| l.key == *key) {
                node.load = NodeLoadSnapshot::new(load, node.slots);
            }
        }
        nodes.into_iter().map(|(_, node)| node).collect()
    }

    /// Sends one generation to a node that serves its model, the one the
    /// router picks (by default the one with the least predicted time to
    /// first token), and tells the node which of its slots holds the
    /// prompt's cached prefix. If that node's connection fails before the
    /// request is sent, the router picks again among the others.
    pub async fn generate(
        &self,
        request: &mut GenerateRequest,
    ) -> Result<RemoteGeneration, FleetError> {
        self.generate_except(request, &[]).await
    }

    /// [`Fleet::generate`] again for a generation whose node was lost
    /// before its first token: any node but those in `tried` (node ids).
    /// Counted in `superfluid_generations_retried_total` once a node takes it.
    pub async fn retry(
        &self,
        request: &mut GenerateRequest,
        tried: &[String],
    ) -> Result<RemoteGeneration, FleetError> {
        let sent = self.generate_except(request, tried).await;
        if sent.is_ok() {
            self.metrics.record_retried();
        }
        sent
    }

    async fn generate_except(
        &self,
        request: &mut GenerateRequest,
        skip: &[String],
    ) -> Result<RemoteGeneration, FleetError> {
        let mut tried = skip.to_vec();
        let mut last_error = None;
        while let Some((in_flight, routing)) = self.route(request, &tried) {
            match dispatch(in_flight, routing, request).await {
                Ok(generation) => return Ok(generation),
                Err((node_id, error)) => {
                    tracing::warn!(%node_id, %error, "could not dispatch to a node; trying another");
                    tried.push(node_id);
                    last_error = Some(error);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| self.unserved(&request.model, &tried)))
    }

    /// Why no node but those in `skip` takes a generation of `model`.
    fn unserved(&self, model: &str, skip: &[String]) -> FleetError {
        let model = model.to_owned();
        if self.inner.only_draining(&model, skip) {
            FleetError::Draining { model }
        } else {
            FleetError::NoNode { model }
        }
    }

    /// Whether nodes serve `model` and every one of them is draining.
    pub fn only_draining(&self, model: &str) -> bool {
        self.inner.only_draining(model, &[])
    }

    /// Picks a node for `request` among those serving its model, except
    /// `skip`; sets the request's slot hint and counts the decision.
    fn route(&self, request: &mut GenerateRequest, skip: &[String]) -> Option<(InFlight, Routing)> {
        let candidates = self.inner.candidates(&request.model, skip);
        let keys: Vec<_> = candidates.iter().map(|n| n.key).collect();
        let (routed, policy) = {
            let mut router = lock(&self.router);
            let now = tokio::time::Instant::now().into_std();
            let routed = router.route(&request.model, &request.prompt, &keys, now)?;
            (routed, router.policy())
        };
        let routing = Routing {
            router: self.router.clone(),
            ticket: Some(routed.ticket),
            metrics: self.metrics.clone(),
        };
        let node = candidates.into_iter().find(|n| n.key == routed.node)?;
        self.metrics
            .record_route(policy, routed.reason, routed.cached_tokens);
        tracing::debug!(node = %node.name, reason = routed.reason.as_str(), cached = routed.cached_tokens, predicted_ttft_ms = routed.predicted_ttft_secs * 1e3, "routed a generation");
        request.slot = routed.slot;
        Some((InFlight::new(node), routing))
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.inner
    }

    pub(crate) fn router(&self) -> &Mutex<Router> {
        &self.router
    }
}

#[cfg(test)]
mod join_tests;
#[cfg(test)]
mod tests;

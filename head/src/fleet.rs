//! The fleet as the head sees it: connected nodes and dispatch to them.
//!
//! - [`listen`] (in `fleet/listen.rs`) accepts nodes over Link F, runs the
//!   hello handshake and holds each node's membership (`fleet/member.rs`)
//!   while it is connected: joining enters the node in the registry and the
//!   router together, and dropping the membership takes it out of both.
//!   Hellos that present a join token are bounded per source address
//!   (`fleet/join_limit.rs`).
//! - the registry (`fleet/registry.rs`) knows each node's models, slots and
//!   state; the [`crate::routing::Router`] knows which prompt blocks each node
//!   holds in cache and how busy and fast it is, and counts the generations
//!   in flight on it (its open tickets). [`Fleet::generate`] asks the router
//!   for a node and sends the request there on a fresh QUIC stream
//!   (`fleet/remote.rs`).
//!
//! - [`Fleet::embed`] (in `fleet/embed.rs`) routes an embeddings request
//!   the same way and reads its one reply.
//! - a node that lacks a model fetches its file from the head's
//!   [`model_store::ModelStore`] on a stream of its own (`fleet/transfer.rs`).
//!
//! The API of [`Fleet`], [`FleetError`] and [`RemoteGeneration`] is the
//! contract the HTTP layer relies on.

mod admin;
mod embed;
mod error;
mod join_limit;
pub mod listen;
mod member;
pub mod model_store;
mod models;
pub mod placement;
mod placement_admin;
mod registry;
mod remote;
mod serving;
mod shared_router;
mod transfer;

pub use admin::Revoked;
pub use embed::Embedded;
pub use error::FleetError;
pub use listen::{listen, LinkListenConfig, LinkListener};
pub use placement_admin::ModelPlacement;
pub use registry::{NodeLoadSnapshot, NodeSnapshot, NodeState};
pub use remote::RemoteGeneration;

use crate::membership::Membership;
use crate::metrics::{Metrics, Refusal};
use crate::routing::{Admission, RoutePolicy, Router};
use superfluid_proto::{GenerateRequest, ModelDescription};

use member::Member;
use model_store::ModelStore;
use registry::{Joining, NodeEntry, Registry, Taken};
use remote::{dispatch, Routing};
use shared_router::SharedRouter;
use std::sync::Arc;
use superfluid_proto::FetchProgress;
use transfer::FetchBoard;

/// The connected nodes. Cheap to clone; all clones share one registry,
/// router and set of metrics.
#[derive(Debug, Clone)]
pub struct Fleet {
    inner: Arc<Registry>,
    membership: Option<Membership>,
    models: Arc<Vec<ModelDescription>>,
    store: Arc<ModelStore>,
    fetches: Arc<FetchBoard>,
    router: SharedRouter,
    metrics: Arc<Metrics>,
    admission: Admission,
    placements: Arc<placement::Placements>,
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
            store: Arc::default(),
            fetches: Arc::default(),
            router: SharedRouter::new(Router::new(RoutePolicy::default(), seed)),
            metrics: Arc::default(),
            admission: Admission::default(),
            placements: Arc::default(),
        }
    }
}

impl Fleet {
    /// An empty fleet that routes with the default policy
    /// ([`RoutePolicy::LeastTtft`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Places models on nodes as `config` says (see `fleet/placement.rs`).
    pub fn with_placement(mut self, config: placement::PlacementConfig) -> Self {
        self.placements = Arc::new(placement::Placements::new(config));
        self
    }

    /// Routes generations with `policy`.
    pub fn with_policy(self, policy: RoutePolicy) -> Self {
        self.router.lock().set_policy(policy);
        self
    }

    /// Each node queues at most `max_queue` generations beyond its slots
    /// (`None`: two per slot); past that, requests are refused at once
    /// with [`FleetError::Busy`]. See [`crate::routing::admission`].
    pub fn with_max_queue(mut self, max_queue: Option<u32>) -> Self {
        self.admission = Admission::new(max_queue);
        self
    }

    /// The routing policy in use.
    pub fn policy(&self) -> RoutePolicy {
        self.router.lock().policy()
    }

    /// The head's counters and histograms.
    pub fn metrics(&self) -> &Arc<Metrics> {
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

    /// The head's model files: nodes must match them, and may fetch them.
    pub fn with_model_store(mut self, store: ModelStore) -> Self {
        self.models = Arc::new(store.descriptions());
        self.store = Arc::new(store);
        self
    }

    /// How far `node_id`'s download of a model has come, while it runs.
    pub fn fetching(&self, node_id: &str) -> Option<FetchProgress> {
        self.fetches.progress(node_id)
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
        // The registry first: a node it lists is in the router until after
        // it leaves the registry, so every node listed has its load.
        let entries = self.inner.entries();
        let loads = self.router.lock().nodes();
        entries
            .iter()
            .map(|entry| match loads.iter().find(|l| l.key == entry.key) {
                Some(load) => {
                    let mut node = entry.snapshot(load.in_flight);
                    node.load = NodeLoadSnapshot::new(load, node.slots);
                    node
                }
                None => entry.snapshot(0),
            })
            .collect()
    }

    /// `entry` as listings show it, with the generations the router has in
    /// flight there.
    pub(crate) fn snapshot(&self, entry: &NodeEntry) -> NodeSnapshot {
        entry.snapshot(self.router.lock().in_flight(entry.key))
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
        let sent = self.generate_except(request, &[]).await;
        if matches!(sent, Err(FleetError::Busy { .. })) {
            self.metrics.overload.record_refused(Refusal::FleetBusy);
        }
        sent
    }

    /// [`Fleet::generate`] on the node with id `node` when it serves the
    /// model and can take the generation, else wherever the router picks:
    /// the `n` choices of one prompt share the node, which then computes
    /// the prompt once for all of them.
    pub async fn generate_beside(
        &self,
        request: &mut GenerateRequest,
        node: &str,
    ) -> Result<RemoteGeneration, FleetError> {
        let others: Vec<String> = self
            .inner
            .candidates(&request.model, &[])
            .iter()
            .map(|n| n.node_id.clone())
            .filter(|id| id != node)
            .collect();
        match self.generate_except(request, &others).await {
            Ok(generation) => Ok(generation),
            Err(_) => self.generate(request).await,
        }
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

    /// [`Fleet::generate`] for a generation moved off a node that was lost
    /// or stalled: any node but those in `skip` (node ids). The caller
    /// counts it.
    pub async fn take_over(
        &self,
        request: &mut GenerateRequest,
        skip: &[String],
    ) -> Result<RemoteGeneration, FleetError> {
        self.generate_except(request, skip).await
    }

    async fn generate_except(
        &self,
        request: &mut GenerateRequest,
        skip: &[String],
    ) -> Result<RemoteGeneration, FleetError> {
        let mut tried = skip.to_vec();
        let mut last_error = None;
        while let Some((node, routing)) = self.route(request, &tried) {
            match dispatch(node, routing, request).await {
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
        if let Some(busy) = self.busy(model, skip) {
            return busy;
        }
        let model = model.to_owned();
        if self.inner.only_draining(&model, skip) {
            FleetError::Draining { model }
        } else {
            FleetError::NoNode { model }
        }
    }

    /// [`FleetError::Busy`] if nodes but those in `skip` take `model` and
    /// routing found none: each holds all its slots and queue take.
    fn busy(&self, model: &str, skip: &[String]) -> Option<FleetError> {
        let candidates = self.inner.candidates(model, skip);
        let router = self.router.lock();
        let loads: Vec<_> = candidates
            .iter()
            .filter_map(|n| router.load(n.key))
            .collect();
        if loads.is_empty() {
            return None;
        }
        let busy = self.admission.busy(&loads);
        Some(FleetError::Busy {
            model: model.to_owned(),
            queued: busy.queued,
            retry_after_secs: busy.retry_after_secs,
        })
    }

    /// Whether nodes serve `model` and every one of them is draining.
    pub fn only_draining(&self, model: &str) -> bool {
        self.inner.only_draining(model, &[])
    }

    /// Picks a node for `request` among those serving its model, except
    /// `skip`; sets the request's slot hint and counts the decision.
    fn route(
        &self,
        request: &mut GenerateRequest,
        skip: &[String],
    ) -> Option<(Arc<NodeEntry>, Routing)> {
        let (node, routing, slot) = self.route_prompt(&request.model, &request.prompt, skip)?;
        request.slot = slot;
        Some((node, routing))
    }

    /// Picks a node for a prompt of `model` among those serving it, except
    /// `skip`, and counts the decision; with the slot holding the prompt's
    /// cached prefix, if one does.
    pub(crate) fn route_prompt(
        &self,
        model: &str,
        prompt: &[u32],
        skip: &[String],
    ) -> Option<(Arc<NodeEntry>, Routing, Option<u32>)> {
        let candidates = self.inner.candidates(model, skip);
        let keys: Vec<_> = candidates.iter().map(|n| n.key).collect();
        let (routed, policy) = {
            let mut router = self.router.lock();
            let now = tokio::time::Instant::now().into_std();
            // Only nodes with room in their slots and queue.
            let admitted: Vec<_> = keys
                .into_iter()
                .filter(|&k| router.load(k).is_none_or(|l| self.admission.admits(&l)))
                .collect();
            let routed = router.route(model, prompt, &admitted, now)?;
            (routed, router.policy())
        };
        let routing = Routing {
            router: self.router.clone(),
            ticket: Some(routed.ticket),
            metrics: self.metrics.clone(),
        };
        let node = candidates.into_iter().find(|n| n.key == routed.node)?;
        node.used(model);
        self.metrics
            .record_route(policy, routed.reason, routed.cached_tokens);
        tracing::debug!(node = %node.name, reason = routed.reason.as_str(), cached = routed.cached_tokens, predicted_ttft_ms = routed.predicted_ttft_secs * 1e3, "routed a generation");
        Some((node, routing, routed.slot))
    }

    /// Enters a node that passed the hello in the registry and the router;
    /// it stays in both until the returned [`Member`] is dropped.
    pub(crate) fn join(&self, joining: Joining) -> Result<Member, Taken> {
        let unique = self.membership.is_some();
        let name = joining.name.clone();
        let member = Member::join(
            self.inner.clone(),
            self.router.clone(),
            joining,
            &self.models,
            unique,
        )?;
        self.metrics.record_join(&name);
        Ok(member)
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.inner
    }

    pub(crate) fn router(&self) -> &SharedRouter {
        &self.router
    }
}

#[cfg(test)]
mod join_tests;
#[cfg(test)]
mod member_tests;
#[cfg(test)]
mod placement_tests;
#[cfg(test)]
mod tests;

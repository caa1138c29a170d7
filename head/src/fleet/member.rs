//! A node's membership of the fleet: the one value that puts a connected
//! node in the registry and the router, and takes it out of both.

use super::registry::{Joining, NodeEntry, Registry, Taken};
use super::shared_router::SharedRouter;
use std::sync::Arc;
use superfluid_proto::ModelDescription;

/// A connected node's place in the fleet. While it lives, the node is in
/// the registry (listings, candidates) and the router (load, cached
/// blocks); dropping it takes the node out of both, however its
/// connection ended.
#[derive(Debug)]
pub(crate) struct Member {
    registry: Arc<Registry>,
    router: SharedRouter,
    entry: Arc<NodeEntry>,
}

impl Member {
    /// Gives the node a fresh key and id and enters it in `router`, then
    /// in `registry` (see [`Registry::register`] for `expected` and
    /// `unique`). A node whose key another live connection holds is
    /// [`Taken`] and left out of both.
    pub(crate) fn join(
        registry: Arc<Registry>,
        router: SharedRouter,
        joining: Joining,
        expected: &[ModelDescription],
        unique: bool,
    ) -> Result<Self, Taken> {
        let (key, node_id) = registry.next_node();
        // Saturating: the counts are the node's word, and may add up past u32.
        let slots = joining
            .models
            .iter()
            .fold(0u32, |sum, m| sum.saturating_add(m.slots));
        // The router knows the node before the registry shows it: a request
        // that finds the node among the candidates can always be routed to it.
        {
            let mut router = router.lock();
            router.add_node(key, slots);
            router.describe_node(key, &joining.models);
        }
        match registry.register((key, node_id), joining, expected, unique) {
            Ok(entry) => Ok(Self {
                registry,
                router,
                entry,
            }),
            Err(taken) => {
                router.lock().remove_node(key);
                Err(taken)
            }
        }
    }

    /// The node as the registry holds it.
    pub(crate) fn entry(&self) -> &Arc<NodeEntry> {
        &self.entry
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        leave(&self.registry, &self.router, &self.entry);
    }
}

/// Takes `entry` out of the registry, then out of the router, so no request
/// finds it a candidate the router no longer knows. Its cache is gone with
/// it: the index forgets every block it held. Doing it again does nothing.
pub(crate) fn leave(registry: &Registry, router: &SharedRouter, entry: &NodeEntry) {
    registry.remove(&entry.node_id);
    router.lock().remove_node(entry.key);
}

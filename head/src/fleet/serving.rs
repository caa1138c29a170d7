//! What a connected node serves now: the models of its hello, then of its
//! models reports (see `fleet/placement.rs`), which of them the head routes
//! to it, and when each was last asked for.

use std::time::Instant;

use superfluid_link::sync::lock;
use superfluid_proto::ModelDescription;

use super::registry::NodeEntry;

/// The models a node serves, and which of them the head routes to it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Served {
    pub(crate) models: Vec<ModelDescription>,
    /// Model ids the head routes to this node (id and file match the head's).
    pub(crate) eligible: Vec<String>,
    pub(crate) ineligible: Option<String>,
    /// Memory the node has free for another model, in bytes; 0 if unknown.
    pub(crate) free_memory: u64,
    /// The sha256 of the model files it has on disk.
    pub(crate) on_disk: Vec<String>,
}

impl NodeEntry {
    /// What the node serves now.
    pub(crate) fn serving(&self) -> Served {
        lock(&self.serving).clone()
    }

    /// Replaces what the node serves (after it loaded or unloaded a model),
    /// checked against `expected` as at its hello; returns what it served
    /// before.
    pub(crate) fn set_models(
        &self,
        report: superfluid_proto::ModelsReport,
        expected: &[ModelDescription],
    ) -> Served {
        let superfluid_proto::ModelsReport {
            models,
            free_memory,
            mut on_disk,
            ..
        } = report;
        on_disk.truncate(superfluid_proto::placement::MAX_ON_DISK);
        let (eligible, ineligible) = super::models::eligibility(&models, expected);
        let now = Instant::now();
        {
            let mut used = lock(&self.used);
            used.retain(|id, _| models.iter().any(|m| &m.id == id));
            for m in &models {
                used.entry(m.id.clone()).or_insert(now);
            }
        }
        std::mem::replace(
            &mut *lock(&self.serving),
            Served {
                models,
                eligible,
                ineligible,
                free_memory,
                on_disk,
            },
        )
    }

    /// Records that a generation of `model` was routed here now.
    pub(crate) fn used(&self, model: &str) {
        let now = Instant::now();
        let mut used = lock(&self.used);
        // Called on every routed request: no allocation once the model is known.
        match used.get_mut(model) {
            Some(at) => *at = now,
            None => {
                used.insert(model.to_owned(), now);
            }
        }
    }

    /// Whether the head routes `model` here (draining or not).
    pub(crate) fn serves(&self, model: &str) -> bool {
        lock(&self.serving).eligible.iter().any(|m| m == model)
    }
}

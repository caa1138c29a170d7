//! What a connected node serves now: the models of its hello, then of its
//! models reports (see `fleet/placement.rs`), which of them the head routes
//! to it, and when each was last asked for.

use std::sync::Mutex;
use std::time::Instant;

use superfluid_link::sync::lock;
use superfluid_proto::ModelDescription;

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

/// When each model was last routed to a node (or loaded there).
pub(crate) type LastUsed = std::collections::HashMap<String, Instant>;

/// Replaces what a node serves (after it loaded or unloaded a model),
/// checked against `expected` as at its hello, and keeps `used` to the
/// models it serves; returns what it served before.
pub(super) fn replace_models(
    serving: &Mutex<Served>,
    used: &Mutex<LastUsed>,
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
        let mut used = lock(used);
        used.retain(|id, _| models.iter().any(|m| &m.id == id));
        for m in &models {
            used.entry(m.id.clone()).or_insert(now);
        }
    }
    std::mem::replace(
        &mut *lock(serving),
        Served {
            models,
            eligible,
            ineligible,
            free_memory,
            on_disk,
        },
    )
}

/// Records that a generation of `model` was routed to the node now.
pub(super) fn mark_used(used: &Mutex<LastUsed>, model: &str) {
    let now = Instant::now();
    let mut used = lock(used);
    // Called on every routed request: no allocation once the model is known.
    match used.get_mut(model) {
        Some(at) => *at = now,
        None => {
            used.insert(model.to_owned(), now);
        }
    }
}

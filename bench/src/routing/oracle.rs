//! The oracle: routing that knows every node's cache exactly and at once.
//!
//! Before each decision it reads what every fake engine's slots hold
//! ([`FakeEngine::resident`]: an admitted prompt counts as cached at once,
//! before it is prefilled) and makes the router's block index equal to it,
//! then the router decides with least-ttft. So the oracle uses the same
//! time-to-first-token model and the same load bookkeeping as the default
//! policy; only its knowledge of the caches is perfect and instant, where
//! the default learns of blocks once a node has computed and reported them.

use std::sync::Arc;

use superfluid_head::routing::{NodeKey, Router};
use superfluid_node::fake::FakeEngine;
use superfluid_proto::{block_hashes, model_seed, BlockHash, KvEvent, KvUpdate};

/// What the oracle last told the router each slot holds.
#[derive(Debug)]
pub struct Oracle {
    model: String,
    seed: BlockHash,
    /// Per node, per slot: the tokens last indexed.
    known: Vec<Vec<Vec<u32>>>,
}

impl Oracle {
    /// An oracle for `nodes` nodes of model `model`; the router's index
    /// starts empty, as every slot does.
    pub fn new(model: &str, nodes: usize) -> Self {
        Self {
            model: model.to_owned(),
            seed: model_seed(model),
            known: vec![Vec::new(); nodes],
        }
    }

    /// Makes `router`'s index hold exactly what `engines` (keyed by
    /// `keys`) hold now: a slot whose tokens changed is cleared and stored
    /// again in full.
    pub fn sync(&mut self, router: &mut Router, keys: &[NodeKey], engines: &[Arc<FakeEngine>]) {
        for ((known, &key), engine) in self.known.iter_mut().zip(keys).zip(engines) {
            let resident = engine.resident();
            known.resize(resident.len(), Vec::new());
            let mut events = Vec::new();
            for (slot, (now, was)) in resident.into_iter().zip(known.iter_mut()).enumerate() {
                if now == *was {
                    continue;
                }
                let slot = slot as u32;
                events.push(KvEvent::Cleared { slot });
                let blocks = block_hashes(self.seed, &now);
                if !blocks.is_empty() {
                    events.push(KvEvent::Stored { slot, blocks });
                }
                *was = now;
            }
            if !events.is_empty() {
                let update = KvUpdate {
                    model: self.model.clone(),
                    events,
                };
                router.apply_kv(key, &update);
            }
        }
    }
}

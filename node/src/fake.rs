//! A fake engine with modelled prefill and decode costs, for fleet-logic tests.
//!
//! It runs the llama.cpp engine's scheduler ([`crate::schedule`]: the same
//! slots, queue, admission, prefix copies and step sharing) over a backend
//! that computes nothing, as a tokio task that waits on tokio's clock for
//! the time each step would take (until the step's end in modelled time, so
//! that wakeups which come late do not add up). Under tokio's paused clock
//! it therefore runs in virtual time: deterministically, with seconds of
//! modelled work taking milliseconds. Its tokens are a hash of the sequence
//! so far (its length and last tokens), so the same prompt and sampling
//! always give the same tokens, whatever the batching or the cache state.

mod backend;
mod sim;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};
use superfluid_link::sync::lock;

use superfluid_proto::{GenerateRequest, ModelDescription};
use tokio::sync::mpsc;

use crate::engine::{Engine, EngineError, EngineInfo, Generation};
use crate::ledger::Ledger;
use crate::schedule::{slots, validate, Job, Limits, Scheduler};
use backend::FakeBackend;

/// Prompt tokens evaluated per step, shared by the prefilling slots.
const PREFILL_CHUNK: usize = 512;

/// How fast the simulated hardware is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FakeCosts {
    /// Prompt tokens evaluated per second.
    pub prefill_tokens_per_sec: f64,
    /// Decode steps per second. One step yields a token for every decoding
    /// slot at once, as batched decoding does on real hardware.
    pub decode_tokens_per_sec: f64,
}

impl Default for FakeCosts {
    /// Roughly SmolLM2-135M on two CPU cores.
    fn default() -> Self {
        Self {
            prefill_tokens_per_sec: 330.0,
            decode_tokens_per_sec: 165.0,
        }
    }
}

/// An engine that models costs and slots without running a model.
pub struct FakeEngine {
    info: EngineInfo,
    jobs: mpsc::UnboundedSender<Job>,
    ledger: Arc<Ledger>,
    resident: backend::Resident,
}

impl FakeEngine {
    /// Starts the simulation task for `model` (its `ctx` and `slots` are
    /// honoured like a real engine's) on the current tokio runtime. The task
    /// ends once the engine is dropped and its work is done.
    ///
    /// # Panics
    /// When called outside a tokio runtime.
    pub fn new(model: ModelDescription, costs: FakeCosts) -> FakeEngine {
        let model = ModelDescription {
            slots: model.slots.max(1),
            ctx: model.ctx.max(2),
            ..model
        };
        let (jobs, rx) = mpsc::unbounded_channel();
        let slots = model.slots as usize;
        let ledger = Arc::new(Ledger::new(&model.id, slots));
        let resident = Arc::new(Mutex::new(vec![Vec::new(); slots]));
        let limits = Limits {
            slots,
            ctx: model.ctx as usize,
            prefill_chunk: PREFILL_CHUNK,
            // The fake models one KV stream per slot, the real engine's
            // default, so copies must save as much as they do there.
            min_copy_gain: slots::min_copy_gain(model.ctx as usize, false),
        };
        // The fake keeps the real engine's preference for a slot beside a
        // running one, though its costs model no passes over the weights:
        // so it picks the slots, and keeps the caches, that the real engine
        // would, which is what a routing simulation needs to be faithful to.
        let scheduler = Scheduler::new(limits, ledger.clone());
        let backend = FakeBackend {
            resident: resident.clone(),
        };
        tokio::spawn(sim::serve(scheduler, backend, rx, costs));
        FakeEngine {
            info: EngineInfo { model },
            jobs,
            ledger,
            resident,
        }
    }

    /// Each slot's tokens as they will be cached once prefilled: an admitted
    /// request's whole prompt, or an idle slot's cached tokens. Benchmarks
    /// use it as an oracle that knows every cache.
    pub fn resident(&self) -> Vec<Vec<u32>> {
        lock(&self.resident).clone()
    }
}

impl Engine for FakeEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn submit(&self, request: GenerateRequest) -> Result<Generation, EngineError> {
        validate(&self.info.model, &request)?;
        let (events, rx) = mpsc::unbounded_channel();
        self.jobs
            .send(Job { request, events })
            .map_err(|_| EngineError::Stopped)?;
        Ok(Generation { events: rx })
    }

    fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }
}

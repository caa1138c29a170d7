//! A fake engine with modelled prefill and decode costs, for fleet-logic tests.
//!
//! It runs the same slot discipline as the llama.cpp engine (continuous
//! batching, finished sequences kept resident, longest-common-prefix slot
//! choice, FIFO queue) on its own thread, sleeps for the time each step would
//! take (while busy, until the end of the step in modelled time, so that
//! sleeps which overshoot do not add up), and emits tokens derived from a
//! hash of the sequence so far. The same
//! prompt and sampling always give the same tokens, whatever the batching or
//! the cache state.

mod sim;
#[cfg(test)]
mod tests;

use std::sync::{mpsc as std_mpsc, Arc, Mutex, PoisonError};

use superfluid_proto::{GenerateRequest, ModelDescription};
use tokio::sync::mpsc;

use crate::engine::{Engine, EngineError, EngineInfo, Generation};
use crate::ledger::Ledger;
use crate::llama::validate;

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
    jobs: std_mpsc::Sender<sim::Job>,
    ledger: Arc<Ledger>,
    resident: sim::Resident,
}

impl FakeEngine {
    /// Starts the simulation thread for `model` (its `ctx` and `slots` are
    /// honoured like a real engine's).
    pub fn new(model: ModelDescription, costs: FakeCosts) -> FakeEngine {
        let model = ModelDescription {
            slots: model.slots.max(1),
            ctx: model.ctx.max(2),
            ..model
        };
        let (jobs, rx) = std_mpsc::channel();
        let slots = model.slots as usize;
        let ledger = Arc::new(Ledger::new(&model.id, slots));
        let resident = Arc::new(Mutex::new(vec![Vec::new(); slots]));
        let sim = sim::Sim::new(&model, costs, ledger.clone(), resident.clone());
        // If the thread cannot start, `submit` reports `Stopped`.
        let _ = std::thread::Builder::new()
            .name(format!("fake-{}", model.id))
            .spawn(move || sim.serve(&rx));
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
        self.resident
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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
            .send(sim::Job { request, events })
            .map_err(|_| EngineError::Stopped)?;
        Ok(Generation { events: rx })
    }

    fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }
}

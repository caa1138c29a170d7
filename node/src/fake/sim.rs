//! The fake engine's thread: slots, queue and modelled step times.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use superfluid_proto::{
    FinishReason, GenerateEvent, GenerateRequest, ModelDescription, Outcome, Sampling,
};
use tokio::sync::mpsc::UnboundedSender;

use super::FakeCosts;
use crate::ledger::Ledger;
use crate::llama::{share, slots};

/// Each slot's tokens as they will be cached once prefilled.
pub type Resident = Arc<Mutex<Vec<Vec<u32>>>>;

/// Prompt tokens evaluated per step, shared by the prefilling slots.
const PREFILL_CHUNK: usize = 512;
/// Size of the fake vocabulary tokens are drawn from.
pub const VOCAB: u32 = 32_000;

pub struct Job {
    pub request: GenerateRequest,
    pub events: UnboundedSender<GenerateEvent>,
}

struct Running {
    events: UnboundedSender<GenerateEvent>,
    sampling: Sampling,
    max_tokens: u32,
    prompt_tokens: u32,
    cached_tokens: u32,
    generated: u32,
    fed: usize,
    /// Its place in the order of admission: prompts are computed first
    /// come, first served, as the llama.cpp engine does.
    admitted: u64,
}

/// `tokens[..n_past]` are "in the cache"; a running slot evaluates the rest.
struct Slot {
    tokens: Vec<u32>,
    n_past: usize,
    last_used: u64,
    running: Option<Running>,
}

pub struct Sim {
    costs: FakeCosts,
    ctx: usize,
    slots: Vec<Slot>,
    queue: VecDeque<Job>,
    step: u64,
    /// Shares each step's tokens among the slots, as the real engine does.
    sharer: share::Sharer,
    /// Generations admitted so far.
    admitted: u64,
    /// When the last step ends in modelled time, while the engine is busy:
    /// the next step starts there, not when the thread woke, so that sleeps
    /// that overshoot do not add up.
    clock: Option<Instant>,
    ledger: Arc<Ledger>,
    resident: Resident,
}

/// The most a busy engine catches up on: a thread kept off the CPU for
/// longer loses the time instead of rushing the steps after it.
const MAX_CATCH_UP: Duration = Duration::from_millis(20);

/// When a step of `cost` that begins at `now` ends in modelled time: after
/// the previous step's end `last` if the engine is still busy and not more
/// than [`MAX_CATCH_UP`] behind, else after `now`.
pub(super) fn step_end(last: Option<Instant>, now: Instant, cost: Duration) -> Instant {
    let start = last
        .filter(|&end| now.saturating_duration_since(end) <= MAX_CATCH_UP)
        .unwrap_or(now);
    start + cost
}

impl Sim {
    pub fn new(
        model: &ModelDescription,
        costs: FakeCosts,
        ledger: Arc<Ledger>,
        resident: Resident,
    ) -> Self {
        let slots = (0..model.slots).map(|_| Slot {
            tokens: Vec::new(),
            n_past: 0,
            last_used: 0,
            running: None,
        });
        Self {
            costs,
            ctx: model.ctx as usize,
            slots: slots.collect(),
            queue: VecDeque::new(),
            step: 0,
            sharer: share::Sharer::default(),
            admitted: 0,
            clock: None,
            ledger,
            resident,
        }
    }

    fn set_resident(&self, index: usize, tokens: &[u32]) {
        let mut resident = self.resident.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = resident.get_mut(index) {
            slot.clear();
            slot.extend_from_slice(tokens);
        }
    }

    /// Tells the ledger how busy the engine is, as the llama.cpp engine does.
    fn report_load(&self) {
        let running = self.slots.iter().filter(|s| s.running.is_some());
        self.ledger.set_load_of(
            running.map(|s| s.tokens.len() - s.n_past),
            self.queue.iter().map(|j| j.request.prompt.len()),
        );
    }

    fn busy(&self) -> bool {
        !self.queue.is_empty() || self.slots.iter().any(|s| s.running.is_some())
    }

    pub fn serve(mut self, jobs: &Receiver<Job>) {
        let mut open = true;
        loop {
            if !self.busy() {
                self.clock = None;
                match jobs.recv() {
                    Ok(job) if open => self.queue.push_back(job),
                    _ => return,
                }
            }
            while open {
                match jobs.try_recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => open = false,
                }
            }
            self.queue.retain(|job| !job.events.is_closed());
            for index in 0..self.slots.len() {
                let slot = &mut self.slots[index];
                if slot.running.as_ref().is_some_and(|r| r.events.is_closed()) {
                    slot.running = None;
                    // The cache (and the ledger's chain) keeps tokens[..n_past].
                    slot.tokens.truncate(slot.n_past);
                    self.set_resident(index, &self.slots[index].tokens);
                }
            }
            self.admit();
            self.report_load();
            self.step();
            self.report_load();
        }
    }

    fn admit(&mut self) {
        while let Some(job) = self.queue.pop_front() {
            if job.request.max_tokens == 0 {
                let prompt_tokens = job.request.prompt.len() as u32;
                let outcome = Outcome {
                    finish: FinishReason::Length,
                    prompt_tokens,
                    cached_tokens: 0,
                    generated_tokens: 0,
                };
                let _ = job.events.send(GenerateEvent::Finished(outcome));
                continue;
            }
            let idle = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.running.is_none());
            let candidates = idle.map(|(index, s)| slots::Candidate {
                index,
                cached: &s.tokens[..],
                last_used: s.last_used,
                // The model has no passes over the weights to save.
                beside_running: false,
            });
            let hint = job.request.slot.map(|s| s as usize);
            let Some(choice) = slots::choose_hinted(candidates, &job.request.prompt, hint) else {
                self.queue.push_front(job);
                return;
            };
            let computed = self
                .slots
                .iter()
                .enumerate()
                .map(|(i, s)| (i, &s.tokens[..s.n_past]));
            let prompt = &job.request.prompt;
            let reuse = match slots::donor(computed, choice.index, prompt, choice.reuse) {
                // As the llama.cpp engine does: copy the longer prefix another
                // slot holds rather than cut into this slot's sequence.
                Some((_, len)) => {
                    self.ledger.clear(choice.index);
                    self.ledger.extend(choice.index, &prompt[..len]);
                    len
                }
                None => {
                    self.ledger.truncate(choice.index, choice.reuse);
                    choice.reuse
                }
            };
            self.set_resident(choice.index, &job.request.prompt);
            let slot = &mut self.slots[choice.index];
            slot.tokens.clear();
            slot.tokens.extend_from_slice(&job.request.prompt);
            slot.n_past = reuse;
            slot.running = Some(Running {
                events: job.events,
                sampling: job.request.sampling,
                max_tokens: job.request.max_tokens,
                prompt_tokens: job.request.prompt.len() as u32,
                cached_tokens: reuse as u32,
                generated: 0,
                fed: 0,
                admitted: self.admitted,
            });
            self.admitted += 1;
        }
    }

    /// Feeds one token per decoding slot and prompt chunks under the budget,
    /// sleeps for what that costs, then emits a token for each ready slot.
    fn step(&mut self) {
        let work = self.slots.iter().map(|s| {
            s.running.as_ref().map(|r| share::Work {
                admitted: r.admitted,
                pending: s.tokens.len() - s.n_past,
            })
        });
        let shared = self.sharer.share(work, PREFILL_CHUNK);
        for (slot, &fed) in self.slots.iter_mut().zip(self.sharer.fed()) {
            if let Some(running) = slot.running.as_mut() {
                running.fed = fed;
            }
        }
        let (decoded, prefilled) = (shared.decoding, shared.prompt_tokens);
        if decoded + prefilled == 0 {
            return;
        }
        self.step += 1;
        let mut seconds =
            prefilled as f64 / self.costs.prefill_tokens_per_sec.max(f64::MIN_POSITIVE);
        if decoded > 0 {
            seconds += 1.0 / self.costs.decode_tokens_per_sec.max(f64::MIN_POSITIVE);
        }
        let seconds = seconds.min(3600.0);
        let now = Instant::now();
        let end = step_end(self.clock, now, Duration::from_secs_f64(seconds));
        std::thread::sleep(end.saturating_duration_since(now));
        self.clock = Some(end);
        // The modelled time is what a real engine would measure.
        if prefilled > 0 {
            self.ledger.record_prefill(prefilled, seconds);
        } else {
            self.ledger.record_decode(seconds);
        }
        for index in 0..self.slots.len() {
            let slot = &mut self.slots[index];
            let Some(running) = slot.running.as_mut() else {
                continue;
            };
            let fed = std::mem::take(&mut running.fed);
            slot.n_past += fed;
            slot.last_used = self.step;
            if fed > 0 {
                self.ledger.extend(index, &slot.tokens[..slot.n_past]);
            }
            if slot.n_past == slot.tokens.len() {
                self.emit(index);
            }
        }
    }

    /// Emits the next token of slot `index`, whose sequence is all evaluated.
    /// A slot that goes idle shows its cached tokens in `resident` before
    /// its caller hears that the generation finished.
    fn emit(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        let Some(running) = slot.running.as_mut() else {
            return;
        };
        let token = next_token(&slot.tokens, &running.sampling);
        running.generated += 1;
        if running
            .events
            .send(GenerateEvent::Tokens(vec![token]))
            .is_err()
        {
            slot.running = None;
            self.set_resident(index, &self.slots[index].tokens);
            return;
        }
        slot.tokens.push(token);
        if running.generated < running.max_tokens && slot.tokens.len() < self.ctx {
            return;
        }
        let outcome = Outcome {
            finish: FinishReason::Length,
            prompt_tokens: running.prompt_tokens,
            cached_tokens: running.cached_tokens,
            generated_tokens: running.generated,
        };
        let finished = slot.running.take();
        slot.tokens.truncate(slot.n_past);
        self.set_resident(index, &self.slots[index].tokens);
        if let Some(finished) = finished {
            let _ = finished.events.send(GenerateEvent::Finished(outcome));
        }
    }
}

/// The token that follows `tokens`: an FNV-1a hash of the sequence (and of
/// the seed when sampling is random), so it depends on nothing else.
pub fn next_token(tokens: &[u32], sampling: &Sampling) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let seed = if sampling.temperature > 0.0 {
        sampling.seed
    } else {
        0
    };
    for value in std::iter::once(seed).chain(tokens.iter().copied()) {
        for byte in value.to_le_bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    (hash % u64::from(VOCAB)) as u32
}

//! The slot scheduler both engines run.
//!
//! A [`Scheduler`] owns the slots (one KV sequence each), the queue of
//! requests waiting for a slot, and every rule about them: which requests
//! are refused, which slot a request takes and what prefix it reuses or
//! copies ([`slots`]), how one step's tokens are shared among the running
//! slots ([`share`]), cancellation, finishing, the load reports and the
//! ledger's KV events. What differs between engines is behind [`Backend`]:
//! computing a batch, moving KV prefixes, sampling. The llama.cpp engine and
//! the fake engine each implement it and drive the scheduler on their own
//! clock: a step is [`Scheduler::plan`]ned, then [`Scheduler::finish_step`]
//! decodes it and delivers its tokens, and the driver owns the time between.

mod admit;
pub mod share;
pub mod slots;
mod step;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::Arc;

use superfluid_proto::{Constraint, GenerateEvent, GenerateRequest, Sampling, TokenLogprob};
use tokio::sync::mpsc::UnboundedSender;

use crate::ledger::Ledger;

pub use admit::validate;

/// A request on its way to an engine's scheduler.
#[derive(Debug)]
pub struct Job {
    /// What to generate.
    pub request: GenerateRequest,
    /// Where its events go; closed when the caller drops the generation.
    pub events: UnboundedSender<GenerateEvent>,
}

/// One token of a step's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fed {
    /// The token.
    pub token: u32,
    /// The slot (KV sequence) it extends.
    pub slot: usize,
    /// Its position in that sequence.
    pub pos: usize,
    /// Whether the next token is sampled from its logits.
    pub logits: bool,
}

/// Why a backend could not compute a batch.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The batch could not be decoded; the generations fed in it fail and
    /// their sequences are dropped, and the others carry on.
    #[error("{backend} could not decode the batch: {source}")]
    Decode {
        /// Which backend failed.
        backend: &'static str,
        /// What it said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A generation's output constraint could not be compiled, or could not
    /// be enforced at a step (its grammar ran past the parser's limits);
    /// that generation fails as the request's fault and the others carry on.
    #[error("the output constraint cannot be enforced: {source}; simplify the schema or send the request without `response_format`")]
    Constraint {
        /// What the grammar compiler said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// What an engine computes with: the KV sequences of its slots, and the
/// model's logits. The [`Scheduler`] decides what it computes.
pub trait Backend {
    /// One generation's sampling state.
    type Sampler;

    /// The sampler for a generation with `sampling`, held to `constraint`,
    /// that scores each pick with `logprobs` alternatives when asked (see
    /// [`Backend::logprobs`]). `generated` are the tokens of the answer
    /// produced already, the end of the prompt of a continuation (see
    /// [`Sampling::generated`]): the sampler takes up from after them.
    ///
    /// # Errors
    /// [`BackendError::Constraint`] when the constraint cannot be built or
    /// does not accept `generated`.
    fn sampler(
        &mut self,
        sampling: &Sampling,
        constraint: Option<&Constraint>,
        logprobs: Option<u8>,
        generated: &[u32],
    ) -> Result<Self::Sampler, BackendError>;

    /// Computes `batch` (in slot order), extending each token's sequence.
    ///
    /// # Errors
    /// [`BackendError::Decode`] when the batch could not be computed.
    fn decode(&mut self, batch: &[Fed]) -> Result<(), BackendError>;

    /// Replaces sequence `to` with the first `len` positions of sequence
    /// `from`. Returns false when it could not; `to` is then empty.
    fn copy_prefix(&mut self, from: usize, to: usize, len: usize) -> bool;

    /// Drops sequence `slot` after its first `len` positions. Returns false
    /// when it could not; `slot` is then empty.
    fn keep_prefix(&mut self, slot: usize, len: usize) -> bool;

    /// Empties sequence `slot`.
    fn clear(&mut self, slot: usize);

    /// The token that follows `sequence`, from the logits at `batch_index`
    /// of the last decode.
    ///
    /// # Errors
    /// [`BackendError::Constraint`] when the sampler's constraint fails.
    fn sample(
        &mut self,
        sampler: &mut Self::Sampler,
        batch_index: usize,
        sequence: &[u32],
    ) -> Result<u32, BackendError>;

    /// The log-probabilities of `token`, which `sampler` just picked, if its
    /// generation asked for them.
    fn logprobs(&mut self, _sampler: &mut Self::Sampler, _token: u32) -> Option<TokenLogprob> {
        None
    }

    /// Whether `token` ends a generation.
    fn is_end_of_generation(&self, token: u32) -> bool;

    /// Tokens are ids below this.
    fn vocab_size(&self) -> u32;

    /// Slot `slot` will hold `tokens` once prefilled: an admitted prompt, or
    /// what an idle slot keeps cached. Called before the generation's caller
    /// hears that it finished. Only the fake engine shows it.
    fn resident(&mut self, _slot: usize, _tokens: &[u32]) {}
}

/// The scheduler's fixed sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Slots (KV sequences).
    pub slots: usize,
    /// Tokens per slot.
    pub ctx: usize,
    /// Prompt tokens per step, shared by the prefilling slots.
    pub prefill_chunk: usize,
    /// The fewest prompt tokens a copy from another slot must save
    /// (see [`slots::min_copy_gain`]).
    pub min_copy_gain: usize,
}

/// What a planned step feeds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepPlan {
    /// Slots decoding one token.
    pub decoded: usize,
    /// Prompt tokens computed.
    pub prefilled: usize,
}

/// The generation running in a slot.
struct Running<S> {
    events: UnboundedSender<GenerateEvent>,
    sampler: S,
    max_tokens: u32,
    prompt_tokens: u32,
    cached_tokens: u32,
    generated: u32,
    /// Tokens put in the planned batch.
    fed: usize,
    /// Its place in the order of admission: prompts are computed first
    /// come, first served.
    admitted: u64,
}

/// One KV sequence. `tokens[..n_past]` are in the KV cache; a running slot
/// still has to evaluate `tokens[n_past..]`.
struct Slot<S> {
    tokens: Vec<u32>,
    n_past: usize,
    last_used: u64,
    running: Option<Running<S>>,
}

/// Slots, queue and steps of one engine; see the module docs.
pub struct Scheduler<B: Backend> {
    slots: Vec<Slot<B::Sampler>>,
    queue: VecDeque<Job>,
    limits: Limits,
    /// Steps decoded so far; a slot's `last_used` is one of them.
    step: u64,
    /// Generations admitted so far.
    admitted: u64,
    sharer: share::Sharer,
    /// The planned step's tokens, in slot order.
    batch: Vec<Fed>,
    planned: StepPlan,
    /// (slot, batch index) pairs whose logits are sampled after the decode.
    to_sample: Vec<(usize, usize)>,
    /// (slot, token, its scores if asked) picked from those logits,
    /// delivered together.
    picked: Vec<(usize, u32, Option<TokenLogprob>)>,
    /// Where every change to the KV sequences, and the load, is reported.
    ledger: Arc<Ledger>,
}

impl<B: Backend> Scheduler<B> {
    /// Empty slots and queue, reporting to `ledger`.
    pub fn new(limits: Limits, ledger: Arc<Ledger>) -> Self {
        let limits = Limits {
            slots: limits.slots.max(1),
            prefill_chunk: limits.prefill_chunk.max(1),
            min_copy_gain: limits.min_copy_gain.max(1),
            ..limits
        };
        let slots = (0..limits.slots)
            .map(|_| Slot {
                tokens: Vec::new(),
                n_past: 0,
                last_used: 0,
                running: None,
            })
            .collect();
        Self {
            slots,
            queue: VecDeque::new(),
            limits,
            step: 0,
            admitted: 0,
            sharer: share::Sharer::default(),
            batch: Vec::with_capacity(limits.prefill_chunk + limits.slots),
            planned: StepPlan::default(),
            to_sample: Vec::with_capacity(limits.slots),
            picked: Vec::with_capacity(limits.slots),
            ledger,
        }
    }

    /// Queues a request; it is admitted at the next [`Scheduler::plan`].
    pub fn push(&mut self, job: Job) {
        self.queue.push_back(job);
    }

    /// Whether a request waits or a generation runs.
    pub fn busy(&self) -> bool {
        !self.queue.is_empty() || self.slots.iter().any(|s| s.running.is_some())
    }

    /// The planned step's tokens, in slot order.
    pub fn batch(&self) -> &[Fed] {
        &self.batch
    }

    /// Tells the ledger how many sequences run, how many requests wait, and
    /// how many prompt tokens are still to compute over both.
    fn report_load(&self) {
        let running = self.slots.iter().filter(|s| s.running.is_some());
        self.ledger.set_load_of(
            running.map(|s| s.tokens.len() - s.n_past),
            self.queue.iter().map(|j| j.request.prompt.len()),
        );
    }
}

//! Continuous batching: one decode per step over every running slot.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::vocab::LlamaVocab;
use superfluid_proto::{FailureKind, FinishReason, GenerateEvent, GenerateRequest, Outcome};
use tokio::sync::mpsc::UnboundedSender;

use super::sampler::Picker;
use super::{share, slots, LlamaConfig};
use crate::ledger::Ledger;

mod prefix;

/// A request on its way to the engine thread.
pub struct Job {
    pub request: GenerateRequest,
    pub events: UnboundedSender<GenerateEvent>,
}

/// The generation running in a slot.
struct Running {
    events: UnboundedSender<GenerateEvent>,
    picker: Picker,
    max_tokens: u32,
    prompt_tokens: u32,
    cached_tokens: u32,
    generated: u32,
    /// Tokens put in the current batch.
    fed: usize,
    /// Its place in the order of admission: prompts are computed first
    /// come, first served.
    admitted: u64,
}

/// One KV sequence. `tokens[..n_past]` are in the KV cache; a running slot
/// still has to evaluate `tokens[n_past..]`.
struct Slot {
    tokens: Vec<LlamaToken>,
    n_past: usize,
    last_used: u64,
    running: Option<Running>,
}

/// Continuous batching over the slots' KV sequences in one context.
pub struct Batcher<'m> {
    vocab: LlamaVocab<'m>,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    slots: Vec<Slot>,
    queue: VecDeque<Job>,
    /// (slot, batch index) pairs whose logits are sampled after the decode.
    to_sample: Vec<(usize, i32)>,
    /// (slot, token) picked from those logits, delivered together.
    picked: Vec<(usize, LlamaToken)>,
    ctx_len: usize,
    /// The fewest prompt tokens a copy from another slot must save.
    min_copy_gain: usize,
    prefill_chunk: usize,
    n_vocab: i32,
    step: u64,
    /// Generations admitted so far.
    admitted: u64,
    /// Shares each step's tokens among the slots.
    sharer: share::Sharer,
    /// Where every change to the KV sequences, and the load, is reported.
    ledger: Arc<Ledger>,
}

impl<'m> Batcher<'m> {
    pub fn new(
        model: &'m LlamaModel,
        ctx: LlamaContext<'m>,
        config: &LlamaConfig,
        n_batch: usize,
        ledger: Arc<Ledger>,
    ) -> Self {
        let n_slots = config.slots as usize;
        let slots = (0..n_slots)
            .map(|_| Slot {
                tokens: Vec::new(),
                n_past: 0,
                last_used: 0,
                running: None,
            })
            .collect();
        Self {
            vocab: model.vocab(),
            ctx,
            batch: LlamaBatch::new(n_batch, 1),
            slots,
            queue: VecDeque::new(),
            to_sample: Vec::with_capacity(n_slots),
            picked: Vec::with_capacity(n_slots),
            ctx_len: config.ctx as usize,
            min_copy_gain: slots::min_copy_gain(config.ctx as usize, config.shared_kv),
            prefill_chunk: config.prefill_chunk as usize,
            n_vocab: model.n_vocab(),
            step: 0,
            admitted: 0,
            sharer: share::Sharer::default(),
            ledger,
        }
    }

    fn busy(&self) -> bool {
        !self.queue.is_empty() || self.slots.iter().any(|s| s.running.is_some())
    }

    /// Serves jobs until every sender is gone and no work is left.
    pub fn serve(mut self, jobs: &Receiver<Job>) {
        let mut open = true;
        loop {
            if !self.busy() {
                if !open {
                    return;
                }
                match jobs.recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(_) => return,
                }
            }
            while open {
                match jobs.try_recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => open = false,
                }
            }
            self.drop_cancelled();
            self.admit();
            self.report_load();
            self.step();
            self.report_load();
        }
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

    /// Frees slots whose caller dropped its [`crate::Generation`]. Their
    /// sequences keep `tokens[..n_past]`, all the ledger ever covered.
    fn drop_cancelled(&mut self) {
        self.queue.retain(|job| !job.events.is_closed());
        for slot in &mut self.slots {
            if slot.running.as_ref().is_some_and(|r| r.events.is_closed()) {
                slot.running = None;
                slot.tokens.truncate(slot.n_past);
            }
        }
    }

    /// Moves queued jobs into idle slots, first come first served.
    fn admit(&mut self) {
        while let Some(job) = self.queue.pop_front() {
            let Some(job) = self.reject_invalid(job) else {
                continue;
            };
            let candidates = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.running.is_none())
                .map(|(index, s)| slots::Candidate {
                    index,
                    cached: &s.tokens[..],
                    last_used: s.last_used,
                    beside_running: slots::beside_running(index, |i| {
                        self.slots.get(i).is_some_and(|s| s.running.is_some())
                    }),
                });
            let prompt: Vec<LlamaToken> = job
                .request
                .prompt
                .iter()
                .map(|&t| LlamaToken(t as i32))
                .collect();
            let hint = job.request.slot.map(|s| s as usize);
            let Some(choice) = slots::choose_hinted(candidates, &prompt, hint) else {
                self.queue.push_front(job);
                return;
            };
            let beat = choice.reuse + self.min_copy_gain - 1;
            let reuse = match self.donor_prefix(&prompt, choice.index, beat) {
                Some((donor, len)) => self.copy_prefix(donor, choice.index, len),
                None => self.keep_prefix(choice.index, choice.reuse),
            };
            let slot = &mut self.slots[choice.index];
            slot.tokens.clear();
            slot.tokens.extend_from_slice(&prompt);
            slot.n_past = reuse;
            slot.running = Some(Running {
                events: job.events,
                picker: Picker::new(&job.request.sampling, self.n_vocab),
                max_tokens: job.request.max_tokens,
                prompt_tokens: prompt.len() as u32,
                cached_tokens: reuse as u32,
                generated: 0,
                fed: 0,
                admitted: self.admitted,
            });
            self.admitted += 1;
        }
    }

    /// Answers jobs that cannot run at all; returns the others.
    fn reject_invalid(&self, job: Job) -> Option<Job> {
        let prompt = &job.request.prompt;
        if let Some(bad) = prompt.iter().find(|&&t| t >= self.n_vocab as u32) {
            let message = format!(
                "token {bad} is not in the model's vocabulary of {} tokens",
                self.n_vocab
            );
            let _ = job.events.send(GenerateEvent::Failed {
                kind: FailureKind::InvalidToken,
                message,
            });
            return None;
        }
        if job.request.max_tokens == 0 {
            let outcome = Outcome {
                finish: FinishReason::Length,
                prompt_tokens: prompt.len() as u32,
                cached_tokens: 0,
                generated_tokens: 0,
            };
            let _ = job.events.send(GenerateEvent::Finished(outcome));
            return None;
        }
        Some(job)
    }

    /// One decode: a token for every decoding slot, then prompt chunks under
    /// the prefill budget; then samples every slot whose prompt is done.
    fn step(&mut self) {
        self.batch.clear();
        self.to_sample.clear();
        let prefilled = self.share_out_tokens();
        // Tokens go into the batch in slot order: llama.cpp computes
        // neighbouring KV streams together, so in this order every run of
        // busy slots is one pass over the weights.
        for (index, slot) in self.slots.iter().enumerate() {
            let Some(running) = slot.running.as_ref() else {
                continue;
            };
            for p in slot.n_past..slot.n_past + running.fed {
                let last = p + 1 == slot.tokens.len();
                if last {
                    self.to_sample.push((index, self.batch.n_tokens()));
                }
                // The batch holds `prefill_chunk + slots` tokens, so this cannot overflow.
                let _ = self
                    .batch
                    .add(slot.tokens[p], p as i32, &[index as i32], last);
            }
        }
        if self.batch.n_tokens() == 0 {
            return;
        }
        self.step += 1;
        let started = Instant::now();
        if let Err(e) = self.ctx.decode(&mut self.batch) {
            self.fail_fed(&format!("llama.cpp could not decode the batch: {e}"));
            return;
        }
        let secs = started.elapsed().as_secs_f64();
        if prefilled > 0 {
            self.ledger.record_prefill(prefilled, secs);
        } else {
            // One token per decoding stream.
            self.ledger.record_decode(secs);
        }
        for (index, slot) in self.slots.iter_mut().enumerate() {
            let Some(running) = slot.running.as_mut() else {
                continue;
            };
            let fed = std::mem::take(&mut running.fed);
            slot.n_past += fed;
            slot.last_used = self.step;
            if fed > 0 {
                let tokens = &slot.tokens;
                self.ledger
                    .extend_with(index, slot.n_past, |r| tokens[r].iter().map(|t| t.0 as u32));
            }
        }
        // Every slot's token is picked before any is sent: sent one by one
        // between samplings, each token would wake its reader alone, and on
        // Link F go out in a packet of its own.
        self.picked.clear();
        for &(index, batch_index) in &self.to_sample {
            if let Some(running) = self.slots[index].running.as_mut() {
                let token = running.picker.pick(&self.ctx, batch_index);
                self.picked.push((index, token));
            }
        }
        for i in 0..self.picked.len() {
            let (index, token) = self.picked[i];
            self.deliver(index, token);
        }
        // Sending a token woke whoever waits for it (the node's Link F task,
        // or an in-process caller). When it was woken onto this core, let it
        // run now, between two decodes: otherwise it preempts one of
        // llama.cpp's threads in the middle of the next decode, and every
        // other compute thread waits for that one at the next barrier.
        if !self.to_sample.is_empty() {
            std::thread::yield_now();
        }
    }

    /// Sets how many tokens each running slot feeds this step (see
    /// [`share`]); returns the prompt tokens fed.
    fn share_out_tokens(&mut self) -> usize {
        let work = self.slots.iter().map(|s| {
            s.running.as_ref().map(|r| share::Work {
                admitted: r.admitted,
                pending: s.tokens.len() - s.n_past,
            })
        });
        let shared = self.sharer.share(work, self.prefill_chunk);
        for (slot, &fed) in self.slots.iter_mut().zip(self.sharer.fed()) {
            if let Some(running) = slot.running.as_mut() {
                running.fed = fed;
            }
        }
        shared.prompt_tokens
    }

    /// Sends the token picked for a slot, or ends its generation.
    fn deliver(&mut self, index: usize, token: LlamaToken) {
        let slot = &mut self.slots[index];
        let Some(running) = slot.running.as_mut() else {
            return;
        };
        let finish = if self.vocab.is_eog(token) {
            Some(FinishReason::Stop)
        } else {
            running.generated += 1;
            if running
                .events
                .send(GenerateEvent::Tokens(vec![token.0 as u32]))
                .is_err()
            {
                slot.running = None;
                return;
            }
            slot.tokens.push(token);
            if running.generated >= running.max_tokens || slot.tokens.len() >= self.ctx_len {
                Some(FinishReason::Length)
            } else {
                None
            }
        };
        if let Some(finish) = finish {
            let outcome = Outcome {
                finish,
                prompt_tokens: running.prompt_tokens,
                cached_tokens: running.cached_tokens,
                generated_tokens: running.generated,
            };
            let _ = running.events.send(GenerateEvent::Finished(outcome));
            slot.running = None;
            // The KV cache (and the ledger's chain) keeps tokens[..n_past].
            slot.tokens.truncate(slot.n_past);
        }
    }

    /// A decode failed: fails every generation in the batch and drops their
    /// sequences, since their KV state is unknown.
    fn fail_fed(&mut self, message: &str) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            let Some(running) = slot.running.as_ref() else {
                continue;
            };
            if running.fed == 0 {
                continue;
            }
            let _ = running.events.send(GenerateEvent::Failed {
                kind: FailureKind::Engine,
                message: message.to_owned(),
            });
            slot.running = None;
            slot.tokens.clear();
            slot.n_past = 0;
            let _ = self.ctx.clear_kv_cache_seq(Some(index as u32), None, None);
            self.ledger.clear(index);
        }
    }
}

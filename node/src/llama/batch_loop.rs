//! Continuous batching: one decode per step over every running slot.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, TryRecvError};

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::vocab::LlamaVocab;
use superfluid_proto::{FinishReason, GenerateEvent, GenerateRequest, Outcome};
use tokio::sync::mpsc::UnboundedSender;

use super::sampler::Picker;
use super::{slots, LlamaConfig};

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
    ctx_len: usize,
    prefill_chunk: usize,
    n_vocab: i32,
    step: u64,
}

impl<'m> Batcher<'m> {
    pub fn new(
        model: &'m LlamaModel,
        ctx: LlamaContext<'m>,
        config: &LlamaConfig,
        n_batch: usize,
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
            ctx_len: config.ctx as usize,
            prefill_chunk: config.prefill_chunk as usize,
            n_vocab: model.n_vocab(),
            step: 0,
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
            self.step();
        }
    }

    /// Frees slots whose caller dropped its [`crate::Generation`].
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
                });
            let prompt: Vec<LlamaToken> = job
                .request
                .prompt
                .iter()
                .map(|&t| LlamaToken(t as i32))
                .collect();
            let Some(choice) = slots::choose(candidates, &prompt) else {
                self.queue.push_front(job);
                return;
            };
            let reuse = match self.running_prefix(&prompt, choice.reuse) {
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
            });
        }
    }

    /// A running slot whose evaluated tokens share a longer prefix with
    /// `prompt` than `beat`: its index and the prefix length.
    fn running_prefix(&self, prompt: &[LlamaToken], beat: usize) -> Option<(usize, usize)> {
        let limit = prompt.len().saturating_sub(1);
        let running = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.running.is_some());
        running
            .map(|(i, s)| {
                (
                    i,
                    slots::common_prefix(&s.tokens[..s.n_past], prompt).min(limit),
                )
            })
            .filter(|&(_, len)| len > beat)
            .max_by_key(|&(_, len)| len)
    }

    /// Replaces sequence `to` with the first `len` positions of sequence
    /// `from`; returns the tokens kept.
    fn copy_prefix(&mut self, from: usize, to: usize, len: usize) -> usize {
        let _ = self.ctx.clear_kv_cache_seq(Some(to as u32), None, None);
        match self
            .ctx
            .copy_kv_cache_seq(from as i32, to as i32, Some(0), Some(len as u32))
        {
            Ok(()) => len,
            Err(_) => {
                let _ = self.ctx.clear_kv_cache_seq(Some(to as u32), None, None);
                0
            }
        }
    }

    /// Drops sequence `seq` after its first `len` positions; returns the tokens kept.
    fn keep_prefix(&mut self, seq: usize, len: usize) -> usize {
        let kept = self
            .ctx
            .clear_kv_cache_seq(Some(seq as u32), Some(len as u32), None);
        if kept == Ok(true) {
            len
        } else {
            // Partial removal failed: start the sequence over.
            let _ = self.ctx.clear_kv_cache_seq(Some(seq as u32), None, None);
            0
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
            let _ = job.events.send(GenerateEvent::Failed { message });
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
        let mut budget = self.prefill_chunk;
        // Decoding slots (one pending token) first, so prefill never stalls them.
        for pass in 0..2 {
            for (index, slot) in self.slots.iter_mut().enumerate() {
                let Some(running) = slot.running.as_mut() else {
                    continue;
                };
                let pending = slot.tokens.len() - slot.n_past;
                let take = match pass {
                    0 if pending == 1 => 1,
                    1 if pending > 1 => pending.min(budget),
                    _ => continue,
                };
                if pass == 1 {
                    budget -= take;
                }
                for p in slot.n_past..slot.n_past + take {
                    let last = p + 1 == slot.tokens.len();
                    if last {
                        self.to_sample.push((index, self.batch.n_tokens()));
                    }
                    // The batch holds `prefill_chunk + slots` tokens, so this cannot overflow.
                    let _ = self
                        .batch
                        .add(slot.tokens[p], p as i32, &[index as i32], last);
                }
                running.fed = take;
            }
        }
        if self.batch.n_tokens() == 0 {
            return;
        }
        self.step += 1;
        if let Err(e) = self.ctx.decode(&mut self.batch) {
            self.fail_fed(&format!("llama.cpp could not decode the batch: {e}"));
            return;
        }
        for slot in &mut self.slots {
            if let Some(running) = slot.running.as_mut() {
                slot.n_past += running.fed;
                running.fed = 0;
                slot.last_used = self.step;
            }
        }
        for i in 0..self.to_sample.len() {
            let (index, batch_index) = self.to_sample[i];
            self.sample(index, batch_index);
        }
    }

    fn sample(&mut self, index: usize, batch_index: i32) {
        let slot = &mut self.slots[index];
        let Some(running) = slot.running.as_mut() else {
            return;
        };
        let token = running.picker.pick(&self.ctx, batch_index);
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
                message: message.to_owned(),
            });
            slot.running = None;
            slot.tokens.clear();
            slot.n_past = 0;
            let _ = self.ctx.clear_kv_cache_seq(Some(index as u32), None, None);
        }
    }
}

//! Admission: refusing what cannot run, choosing a slot, and reusing a
//! cached prefix there (trimming the slot's own sequence, or copying the
//! longer prefix another slot holds). Every change is reported to the
//! ledger.

use superfluid_proto::{
    FailureKind, FinishReason, GenerateEvent, GenerateRequest, ModelDescription, Outcome,
};

use super::{slots, Backend, Job, Running, Scheduler};
use crate::engine::EngineError;

/// The checks every engine makes before queueing a request: the model id,
/// a non-empty prompt, and room for the prompt plus one generated token.
///
/// # Errors
/// [`EngineError::UnknownModel`], [`EngineError::EmptyPrompt`] or [`EngineError::TooLong`].
pub fn validate(model: &ModelDescription, request: &GenerateRequest) -> Result<(), EngineError> {
    if request.model != model.id {
        return Err(EngineError::UnknownModel {
            requested: request.model.clone(),
            served: model.id.clone(),
        });
    }
    if request.prompt.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    let len = u32::try_from(request.prompt.len()).unwrap_or(u32::MAX);
    if len.saturating_add(1) > model.ctx {
        return Err(EngineError::TooLong {
            len,
            max: model.ctx,
        });
    }
    Ok(())
}

impl<B: Backend> Scheduler<B> {
    /// Frees slots whose caller dropped its [`crate::Generation`]. Their
    /// sequences keep `tokens[..n_past]`, all the ledger ever covered.
    pub(super) fn drop_cancelled(&mut self, backend: &mut B) {
        self.queue.retain(|job| !job.events.is_closed());
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if slot.running.as_ref().is_some_and(|r| r.events.is_closed()) {
                slot.running = None;
                slot.tokens.truncate(slot.n_past);
                backend.resident(index, &slot.tokens);
            }
        }
    }

    /// Moves queued jobs into idle slots, first come first served; a job
    /// whose prompt's prefix a running slot is still prefilling waits for
    /// it, in order, and then copies it (see [`Scheduler::waits_for_prefill`]).
    pub(super) fn admit(&mut self, backend: &mut B) {
        let mut waiting = Vec::new();
        self.admit_queued(backend, &mut waiting);
        for job in waiting.into_iter().rev() {
            self.queue.push_front(job);
        }
    }

    fn admit_queued(&mut self, backend: &mut B, waiting: &mut Vec<Job>) {
        while let Some(job) = self.queue.pop_front() {
            let Some(job) = self.reject_invalid(backend, job) else {
                continue;
            };
            let all = &self.slots;
            let candidates = all
                .iter()
                .enumerate()
                .filter(|(_, s)| s.running.is_none())
                .map(|(index, s)| slots::Candidate {
                    index,
                    cached: &s.tokens[..],
                    last_used: s.last_used,
                    beside_running: slots::beside_running(index, |i| {
                        all.get(i).is_some_and(|s| s.running.is_some())
                    }),
                });
            let prompt = &job.request.prompt;
            let hint = job.request.slot.map(|s| s as usize);
            let Some(choice) = slots::choose_hinted(candidates, prompt, hint) else {
                self.queue.push_front(job);
                return;
            };
            let beat = choice.reuse + self.limits.min_copy_gain - 1;
            let donor = self.donor_prefix(prompt, choice.index, beat);
            let ready = donor.map_or(choice.reuse, |(_, len)| len);
            if self.waits_for_prefill(prompt, ready) {
                waiting.push(job);
                continue;
            }
            let request = &job.request;
            let generated = request.sampling.generated as usize;
            let answered = &request.prompt[request.prompt.len().saturating_sub(generated)..];
            let sampler = match backend.sampler(
                &request.sampling,
                request.constraint.as_ref(),
                request.logprobs,
                answered,
            ) {
                Ok(sampler) => sampler,
                Err(e) => {
                    let _ = job.events.send(GenerateEvent::Failed {
                        kind: FailureKind::InvalidConstraint,
                        message: e.to_string(),
                    });
                    continue;
                }
            };
            let reuse = match donor {
                Some((donor, len)) => self.copy_prefix(backend, donor, choice.index, len),
                None => self.keep_prefix(backend, choice.index, choice.reuse),
            };
            backend.resident(choice.index, prompt);
            let slot = &mut self.slots[choice.index];
            slot.tokens.clear();
            slot.tokens.extend_from_slice(&job.request.prompt);
            slot.n_past = reuse;
            slot.running = Some(Running {
                events: job.events,
                sampler,
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

    /// Answers jobs that cannot run at all; returns the others. The engine
    /// checked them with [`validate`] already; these rules need the slots or
    /// the model, and apply to every backend alike.
    fn reject_invalid(&self, backend: &B, job: Job) -> Option<Job> {
        let prompt = &job.request.prompt;
        let n_vocab = backend.vocab_size();
        if let Some(bad) = prompt.iter().find(|&&t| t >= n_vocab) {
            let message =
                format!("token {bad} is not in the model's vocabulary of {n_vocab} tokens");
            let _ = job.events.send(GenerateEvent::Failed {
                kind: FailureKind::InvalidToken,
                message,
            });
            return None;
        }
        let len = u32::try_from(prompt.len()).unwrap_or(u32::MAX);
        if prompt.is_empty() || prompt.len() >= self.limits.ctx {
            let error = if prompt.is_empty() {
                EngineError::EmptyPrompt
            } else {
                EngineError::TooLong {
                    len,
                    max: u32::try_from(self.limits.ctx).unwrap_or(u32::MAX),
                }
            };
            let _ = job.events.send(GenerateEvent::Failed {
                kind: error.failure_kind(),
                message: error.to_string(),
            });
            return None;
        }
        let generated = job.request.sampling.generated;
        if generated > len {
            // Only a head out of step with this node sends it: its client
            // is not at fault.
            let message = format!("the request says {generated} tokens of its answer were generated already, but its prompt has only {len}; the head and this node disagree about the request");
            let _ = job.events.send(GenerateEvent::Failed {
                kind: FailureKind::Engine,
                message,
            });
            return None;
        }
        if job.request.max_tokens == 0 {
            let outcome = Outcome {
                finish: FinishReason::Length,
                prompt_tokens: len,
                cached_tokens: 0,
                generated_tokens: 0,
            };
            let _ = job.events.send(GenerateEvent::Finished(outcome));
            return None;
        }
        Some(job)
    }

    /// Whether `prompt` should wait for a running slot that has yet to
    /// compute a prefix of it at least `min_copy_gain` tokens longer than
    /// the `ready` tokens it could reuse now: once computed, that prefix is
    /// copied rather than computed twice. So the `n` choices of one prompt,
    /// or users who send one system prompt at the same moment, share a
    /// single prefill. The wait costs the job little: prefill is shared out
    /// first come, first served, so the earlier prompt's chunks come first
    /// either way.
    fn waits_for_prefill(&self, prompt: &[u32], ready: usize) -> bool {
        let limit = prompt.len().saturating_sub(1);
        self.slots.iter().any(|s| {
            let shared = slots::common_prefix(&s.tokens, prompt).min(limit);
            s.running.is_some() && s.n_past < shared && shared >= ready + self.limits.min_copy_gain
        })
    }

    /// Another slot (running or idle) whose computed tokens share a longer
    /// prefix with `prompt` than `beat`: its index and the prefix length.
    fn donor_prefix(&self, prompt: &[u32], target: usize, beat: usize) -> Option<(usize, usize)> {
        let computed = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| (i, &s.tokens[..s.n_past]));
        slots::donor(computed, target, prompt, beat)
    }

    /// Replaces sequence `to` with the first `len` positions of sequence
    /// `from`; returns the tokens kept.
    fn copy_prefix(&mut self, backend: &mut B, from: usize, to: usize, len: usize) -> usize {
        self.ledger.clear(to);
        if backend.copy_prefix(from, to, len) {
            self.ledger.extend(to, &self.slots[from].tokens[..len]);
            len
        } else {
            0
        }
    }

    /// Drops sequence `slot` after its first `len` positions; returns the
    /// tokens kept.
    fn keep_prefix(&mut self, backend: &mut B, slot: usize, len: usize) -> usize {
        if backend.keep_prefix(slot, len) {
            self.ledger.truncate(slot, len);
            len
        } else {
            self.ledger.clear(slot);
            0
        }
    }
}

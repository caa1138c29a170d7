//! One step: planning what is fed, then decoding it, recording it and
//! delivering the tokens it yields.

use superfluid_proto::{FailureKind, FinishReason, GenerateEvent, Outcome, TokenLogprob};

use super::{share, Backend, Fed, Scheduler, StepPlan};

impl<B: Backend> Scheduler<B> {
    /// Frees cancelled slots, admits queued requests, reports the load, and
    /// plans the next step: one token for every decoding slot, then prompt
    /// chunks under the prefill budget (see [`share`]). `None` when nothing
    /// runs, so nothing is fed.
    pub fn plan(&mut self, backend: &mut B) -> Option<StepPlan> {
        self.drop_cancelled(backend);
        self.admit(backend);
        self.report_load();
        let work = self.slots.iter().map(|s| {
            s.running.as_ref().map(|r| share::Work {
                admitted: r.admitted,
                pending: s.tokens.len() - s.n_past,
            })
        });
        let shared = self.sharer.share(work, self.limits.prefill_chunk);
        self.batch.clear();
        self.to_sample.clear();
        // Tokens go into the batch in slot order: llama.cpp computes
        // neighbouring KV streams together, so in this order every run of
        // busy slots is one pass over the weights.
        for ((index, slot), &fed) in self.slots.iter_mut().enumerate().zip(self.sharer.fed()) {
            let Some(running) = slot.running.as_mut() else {
                continue;
            };
            running.fed = fed;
            for pos in slot.n_past..slot.n_past + fed {
                let logits = pos + 1 == slot.tokens.len();
                if logits {
                    self.to_sample.push((index, self.batch.len()));
                }
                self.batch.push(Fed {
                    token: slot.tokens[pos],
                    slot: index,
                    pos,
                    logits,
                });
            }
        }
        self.planned = StepPlan {
            decoded: shared.decoding,
            prefilled: shared.prompt_tokens,
        };
        (!self.batch.is_empty()).then_some(self.planned)
    }

    /// Decodes the planned batch, records the step in the ledger as taking
    /// `seconds()` (read as soon as the decode returns), and delivers the
    /// tokens it yields: every slot's token is picked before any is sent.
    /// A failed decode fails only the generations fed in it. Returns whether
    /// any token was picked.
    pub fn finish_step(&mut self, backend: &mut B, seconds: impl FnOnce() -> f64) -> bool {
        if self.batch.is_empty() {
            return false;
        }
        self.step += 1;
        let decoded = backend.decode(&self.batch);
        self.batch.clear();
        if let Err(e) = decoded {
            self.fail_fed(backend, &e.to_string());
            self.report_load();
            return false;
        }
        let secs = seconds();
        if self.planned.prefilled > 0 {
            self.ledger.record_prefill(self.planned.prefilled, secs);
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
                self.ledger.extend(index, &slot.tokens[..slot.n_past]);
            }
        }
        // Every slot's token is picked before any is sent: sent one by one
        // between samplings, each token would wake its reader alone, and on
        // Link F go out in a packet of its own.
        self.picked.clear();
        for &(index, batch_index) in &self.to_sample {
            let slot = &mut self.slots[index];
            let Some(running) = slot.running.as_mut() else {
                continue;
            };
            match backend.sample(&mut running.sampler, batch_index, &slot.tokens) {
                Ok(token) => {
                    let scores = backend.logprobs(&mut running.sampler, token);
                    self.picked.push((index, token, scores));
                }
                Err(e) => {
                    // Only this generation's sampler failed: its sequence is
                    // as sound as a finished one's and stays cached.
                    if let Some(failed) = slot.running.take() {
                        let _ = failed.events.send(GenerateEvent::Failed {
                            kind: FailureKind::InvalidConstraint,
                            message: e.to_string(),
                        });
                    }
                    slot.tokens.truncate(slot.n_past);
                    backend.resident(index, &slot.tokens);
                }
            }
        }
        let mut picked = std::mem::take(&mut self.picked);
        let any = !picked.is_empty();
        for (index, token, scores) in picked.drain(..) {
            self.deliver(backend, index, token, scores);
        }
        // The list goes back empty, keeping its room for the next step.
        self.picked = picked;
        self.report_load();
        any
    }

    /// Sends the token picked for a slot, after its scores if it has any,
    /// or ends its generation (an end token is neither sent nor scored).
    fn deliver(&mut self, backend: &mut B, index: usize, token: u32, scores: Option<TokenLogprob>) {
        let ctx = self.limits.ctx;
        let slot = &mut self.slots[index];
        let Some(running) = slot.running.as_mut() else {
            return;
        };
        let finish = if backend.is_end_of_generation(token) {
            Some(FinishReason::Stop)
        } else {
            running.generated += 1;
            let scored = scores.map_or(Ok(()), |scores| {
                running.events.send(GenerateEvent::Logprobs(vec![scores]))
            });
            if scored.is_err()
                || running
                    .events
                    .send(GenerateEvent::Tokens(vec![token]))
                    .is_err()
            {
                slot.running = None;
                backend.resident(index, &slot.tokens);
                return;
            }
            slot.tokens.push(token);
            if running.generated >= running.max_tokens || slot.tokens.len() >= ctx {
                Some(FinishReason::Length)
            } else {
                None
            }
        };
        let Some(finish) = finish else {
            return;
        };
        let Some(finished) = slot.running.take() else {
            return;
        };
        // The KV cache (and the ledger's chain) keeps tokens[..n_past]; the
        // slot shows so before its caller hears that the generation ended.
        slot.tokens.truncate(slot.n_past);
        backend.resident(index, &slot.tokens);
        let outcome = Outcome {
            finish,
            prompt_tokens: finished.prompt_tokens,
            cached_tokens: finished.cached_tokens,
            generated_tokens: finished.generated,
        };
        let _ = finished.events.send(GenerateEvent::Finished(outcome));
    }

    /// A decode failed: fails every generation in the batch and drops their
    /// sequences, since their KV state is unknown.
    fn fail_fed(&mut self, backend: &mut B, message: &str) {
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
            backend.clear(index);
            backend.resident(index, &[]);
            self.ledger.clear(index);
        }
    }
}

//! The scheduler's [`Backend`] over one llama.cpp context: a KV sequence per
//! slot, decoded in one batch per step.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::vocab::LlamaVocab;
use superfluid_proto::{Constraint, Sampling, TokenLogprob, TopLogprob, MAX_TOP_LOGPROBS};

use super::grammar::Grammars;
use super::sampler::Picker;
use crate::schedule::{Backend, BackendError, Fed};

/// The model's vocabulary, its context, and a reusable batch.
pub struct ContextBackend<'m> {
    model: &'m LlamaModel,
    vocab: LlamaVocab<'m>,
    /// Built on the first constrained request (it walks the vocabulary).
    grammars: Option<Grammars>,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    n_vocab: i32,
}

impl<'m> ContextBackend<'m> {
    /// Decodes batches of up to `n_batch` tokens in `ctx`.
    pub fn new(model: &'m LlamaModel, ctx: LlamaContext<'m>, n_batch: usize) -> Self {
        Self {
            model,
            vocab: model.vocab(),
            grammars: None,
            ctx,
            batch: LlamaBatch::new(n_batch, 1),
            n_vocab: model.n_vocab(),
        }
    }

    /// A token's text and bytes; control tokens have none.
    fn piece(&self, token: u32) -> (String, Vec<u8>) {
        let valid = i32::try_from(token)
            .ok()
            .filter(|&t| t < self.n_vocab)
            .map(LlamaToken);
        let bytes = valid.map_or_else(Vec::new, |t| self.vocab.token_to_piece(t, false, None));
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    }

    fn clear_seq(&mut self, slot: usize) {
        let _ = self.ctx.clear_kv_cache_seq(Some(slot as u32), None, None);
    }
}

impl Backend for ContextBackend<'_> {
    type Sampler = Picker;

    fn sampler(
        &mut self,
        sampling: &Sampling,
        constraint: Option<&Constraint>,
        logprobs: Option<u8>,
        generated: &[u32],
    ) -> Result<Picker, BackendError> {
        let matcher = match constraint {
            None => None,
            Some(constraint) => {
                let grammars = match &mut self.grammars {
                    Some(grammars) => grammars,
                    unbuilt => unbuilt.insert(Grammars::new(self.model)?),
                };
                Some(grammars.matcher(constraint)?)
            }
        };
        let mut picker = match (logprobs, matcher) {
            (Some(top), matcher) => {
                Picker::scored(sampling, self.n_vocab, matcher, top.min(MAX_TOP_LOGPROBS))
            }
            (None, Some(matcher)) => Picker::constrained(sampling, self.n_vocab, matcher),
            (None, None) => Picker::new(sampling, self.n_vocab),
        };
        picker.resume(generated)?;
        Ok(picker)
    }

    fn logprobs(&mut self, picker: &mut Picker, token: u32) -> Option<TokenLogprob> {
        let scores = picker.take_scores(token)?;
        let (text, bytes) = self.piece(token);
        Some(TokenLogprob {
            token,
            text,
            bytes,
            logprob: scores.chosen,
            top: scores
                .top
                .into_iter()
                .map(|(token, logprob)| {
                    let (text, bytes) = self.piece(token);
                    TopLogprob {
                        token,
                        text,
                        bytes,
                        logprob,
                    }
                })
                .collect(),
        })
    }

    fn decode(&mut self, batch: &[Fed]) -> Result<(), BackendError> {
        self.batch.clear();
        for fed in batch {
            // The batch holds `prefill_chunk + slots` tokens, as many as a
            // step feeds, so this cannot overflow.
            let _ = self.batch.add(
                LlamaToken(fed.token as i32),
                fed.pos as i32,
                &[fed.slot as i32],
                fed.logits,
            );
        }
        self.ctx
            .decode(&mut self.batch)
            .map_err(|e| BackendError::Decode {
                backend: "llama.cpp",
                source: Box::new(e),
            })
    }

    fn copy_prefix(&mut self, from: usize, to: usize, len: usize) -> bool {
        self.clear_seq(to);
        // Each slot is its own KV stream, and llama.cpp copies between
        // streams only whole: copy all of `from`, then drop what follows the
        // prefix. (A partial range across streams aborts the process.)
        let copied = self
            .ctx
            .copy_kv_cache_seq(from as i32, to as i32, None, None)
            .is_ok()
            && self
                .ctx
                .clear_kv_cache_seq(Some(to as u32), Some(len as u32), None)
                == Ok(true);
        if !copied {
            self.clear_seq(to);
        }
        copied
    }

    fn keep_prefix(&mut self, slot: usize, len: usize) -> bool {
        let kept = self
            .ctx
            .clear_kv_cache_seq(Some(slot as u32), Some(len as u32), None)
            == Ok(true);
        if !kept {
            // Partial removal failed: start the sequence over.
            self.clear_seq(slot);
        }
        kept
    }

    fn clear(&mut self, slot: usize) {
        self.clear_seq(slot);
    }

    fn sample(
        &mut self,
        picker: &mut Picker,
        batch_index: usize,
        _sequence: &[u32],
    ) -> Result<u32, BackendError> {
        let batch_index = i32::try_from(batch_index).unwrap_or(i32::MAX);
        Ok(picker.pick(&self.ctx, batch_index)?.0 as u32)
    }

    fn is_end_of_generation(&self, token: u32) -> bool {
        self.vocab.is_eog(LlamaToken(token as i32))
    }

    fn vocab_size(&self) -> u32 {
        u32::try_from(self.n_vocab).unwrap_or(0)
    }
}

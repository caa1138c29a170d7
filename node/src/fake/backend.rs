//! The fake engine's [`Backend`]: sequences that cost nothing to keep, and
//! tokens that are a pure function of the sequence so far.

use std::sync::{Arc, Mutex};
use superfluid_link::sync::lock;

use superfluid_proto::{Constraint, Sampling, TokenLogprob, TopLogprob, MAX_TOP_LOGPROBS};

use crate::schedule::{Backend, BackendError, Fed};

/// Each slot's tokens as they will be cached once prefilled.
pub type Resident = Arc<Mutex<Vec<Vec<u32>>>>;

/// Size of the fake vocabulary tokens are drawn from: the default model's
/// (SmolLM2's 49,152), so a head that tokenizes with the real model can
/// send fake nodes any prompt it makes.
pub const VOCAB: u32 = 49_152;

/// Computes nothing; shows each slot's tokens in `resident`.
pub struct FakeBackend {
    pub resident: Resident,
}

impl Backend for FakeBackend {
    /// Only the seed, and whether it is used, matter to [`next_token`];
    /// and how many alternatives to score, if asked.
    type Sampler = (Sampling, Option<u8>);

    fn sampler(
        &mut self,
        sampling: &Sampling,
        constraint: Option<&Constraint>,
        logprobs: Option<u8>,
        // The fake's tokens are a function of the sequence so far, so a
        // continuation picks what an uninterrupted run would without help.
        _generated: &[u32],
    ) -> Result<Self::Sampler, BackendError> {
        // The fake's tokens are not text, so no grammar can hold over them:
        // refusing says so, where ignoring it would pretend to enforce it.
        if constraint.is_some() {
            return Err(BackendError::Constraint {
                source:
                    "the fake engine generates no text to constrain; serve the model with llama.cpp"
                        .into(),
            });
        }
        Ok((sampling.clone(), logprobs))
    }

    fn decode(&mut self, _batch: &[Fed]) -> Result<(), BackendError> {
        Ok(())
    }

    fn copy_prefix(&mut self, _from: usize, _to: usize, _len: usize) -> bool {
        true
    }

    fn keep_prefix(&mut self, _slot: usize, _len: usize) -> bool {
        true
    }

    fn clear(&mut self, _slot: usize) {}

    fn sample(
        &mut self,
        sampler: &mut Self::Sampler,
        _batch_index: usize,
        sequence: &[u32],
    ) -> Result<u32, BackendError> {
        Ok(next_token(sequence, &sampler.0))
    }

    /// The fake picks its token with certainty: log-probability 0, and
    /// the alternatives after it (the next ids) impossible. Its tokens are
    /// not text, so they have none.
    fn logprobs(&mut self, sampler: &mut Self::Sampler, token: u32) -> Option<TokenLogprob> {
        let top = sampler.1?.min(MAX_TOP_LOGPROBS);
        Some(TokenLogprob {
            token,
            text: String::new(),
            bytes: Vec::new(),
            logprob: 0.0,
            top: (0..u32::from(top))
                .map(|i| TopLogprob {
                    token: (token + i) % VOCAB,
                    text: String::new(),
                    bytes: Vec::new(),
                    logprob: if i == 0 { 0.0 } else { crate::scoring::FLOOR },
                })
                .collect(),
        })
    }

    fn is_end_of_generation(&self, _token: u32) -> bool {
        false
    }

    fn vocab_size(&self) -> u32 {
        VOCAB
    }

    fn resident(&mut self, slot: usize, tokens: &[u32]) {
        let mut resident = lock(&self.resident);
        if let Some(cached) = resident.get_mut(slot) {
            cached.clear();
            cached.extend_from_slice(tokens);
        }
    }
}

/// Tokens at the end of a sequence that [`next_token`] hashes.
const HASHED_TAIL: usize = 64;

/// The token that follows `tokens`: an FNV-1a hash of the sequence's length
/// and its last [`HASHED_TAIL`] tokens (and of the seed when sampling is
/// random), so it depends on nothing else. Only the tail, so that a token
/// costs the same however long the history: hashing a whole 4000-token
/// conversation for every new token was most of a simulated fleet's time.
pub fn next_token(tokens: &[u32], sampling: &Sampling) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let seed = if sampling.temperature > 0.0 {
        sampling.seed
    } else {
        0
    };
    let len = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
    let tail = &tokens[tokens.len().saturating_sub(HASHED_TAIL)..];
    for value in [seed, len].into_iter().chain(tail.iter().copied()) {
        for byte in value.to_le_bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    (hash % u64::from(VOCAB)) as u32
}

//! Reusing a cached prefix at admission: trimming a slot's sequence, or
//! copying the prefix another slot holds. Every change is reported to the
//! ledger.

use llama_cpp_2::token::LlamaToken;

use super::{slots, Batcher};

impl Batcher<'_> {
    /// Another slot (running or idle) whose computed tokens share a longer
    /// prefix with `prompt` than `beat`: its index and the prefix length.
    pub(super) fn donor_prefix(
        &self,
        prompt: &[LlamaToken],
        target: usize,
        beat: usize,
    ) -> Option<(usize, usize)> {
        let computed = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| (i, &s.tokens[..s.n_past]));
        slots::donor(computed, target, prompt, beat)
    }

    /// Replaces sequence `to` with the first `len` positions of sequence
    /// `from`; returns the tokens kept.
    pub(super) fn copy_prefix(&mut self, from: usize, to: usize, len: usize) -> usize {
        let _ = self.ctx.clear_kv_cache_seq(Some(to as u32), None, None);
        self.ledger.clear(to);
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
        if copied {
            let donor = &self.slots[from].tokens;
            self.ledger
                .extend_with(to, len, |r| donor[r].iter().map(|t| t.0 as u32));
            len
        } else {
            let _ = self.ctx.clear_kv_cache_seq(Some(to as u32), None, None);
            0
        }
    }

    /// Drops sequence `seq` after its first `len` positions; returns the tokens kept.
    pub(super) fn keep_prefix(&mut self, seq: usize, len: usize) -> usize {
        let kept = self
            .ctx
            .clear_kv_cache_seq(Some(seq as u32), Some(len as u32), None);
        if kept == Ok(true) {
            self.ledger.truncate(seq, len);
            len
        } else {
            // Partial removal failed: start the sequence over.
            let _ = self.ctx.clear_kv_cache_seq(Some(seq as u32), None, None);
            self.ledger.clear(seq);
            0
        }
    }
}

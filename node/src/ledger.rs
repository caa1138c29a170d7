//! The cache ledger: what each slot's KV sequence holds, as block hashes, and
//! how busy the engine is.
//!
//! An engine's thread reports every change to its KV sequences here (cheap,
//! synchronous calls); the agent reads the full state when it connects to
//! the head ([`Ledger::snapshot`]) and then the changes as they happen
//! ([`Ledger::changed`], [`Ledger::take`]), so the head's index mirrors the
//! node's caches. A slot's chain covers only tokens already in its KV cache,
//! and only whole blocks of [`BLOCK_TOKENS`] tokens (see
//! [`superfluid_proto::blocks`]).

mod mirror;
#[cfg(test)]
mod tests;

pub use mirror::MirrorError;

use std::ops::Range;
use std::sync::{Mutex, MutexGuard};
use superfluid_link::sync::lock;

use superfluid_proto::blocks::{chain_block, model_seed, BlockHash, BLOCK_TOKENS};
use superfluid_proto::{KvEvent, KvUpdate, LoadReport, TokenId};
use tokio::sync::Notify;

/// Events kept for the agent before the ledger drops them and owes it the
/// full state instead: bounds memory while no head is connected.
pub const MAX_PENDING: usize = 4096;

/// Weight of a new measurement in the rates' moving averages.
const ALPHA: f32 = 0.2;

/// The block-hash chains of one engine's slots, the changes not yet sent to
/// the head, and the engine's load. Share it with an `Arc`.
#[derive(Debug)]
pub struct Ledger {
    model: String,
    seed: BlockHash,
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug)]
struct State {
    /// Per slot, the hashes of the whole blocks in its KV sequence.
    chains: Vec<Vec<BlockHash>>,
    /// Changes not yet taken by the agent, oldest first.
    pending: Vec<KvEvent>,
    /// Per slot, the index in `pending` of its latest event.
    last_event: Vec<Option<usize>>,
    /// `pending` overflowed and was dropped: the next update is the full state.
    resync: bool,
    running: u32,
    queued: u32,
    queued_prompt_tokens: u64,
    prefill_rate: f32,
    decode_rate: f32,
}

impl State {
    /// Queues `event` for `slot`, merging it into the slot's latest pending
    /// event when both append (or both drop) blocks. Events of other slots
    /// commute with it, so each slot's changes stay in order.
    fn push(&mut self, slot: usize, event: KvEvent) {
        if self.resync {
            return;
        }
        if let Some(i) = self.last_event[slot] {
            match (&mut self.pending[i], event) {
                (KvEvent::Stored { blocks: old, .. }, KvEvent::Stored { blocks, .. }) => {
                    old.extend_from_slice(&blocks);
                    return;
                }
                (KvEvent::Removed { blocks: old, .. }, KvEvent::Removed { mut blocks, .. }) => {
                    // The later removal dropped blocks before the earlier one's.
                    blocks.extend_from_slice(old);
                    *old = blocks;
                    return;
                }
                (_, event) => return self.append(slot, event),
            }
        }
        self.append(slot, event);
    }

    fn append(&mut self, slot: usize, event: KvEvent) {
        if self.pending.len() >= MAX_PENDING {
            self.forget_pending();
            self.resync = true;
            return;
        }
        self.last_event[slot] = Some(self.pending.len());
        self.pending.push(event);
    }

    fn forget_pending(&mut self) {
        self.pending.clear();
        self.last_event.fill(None);
    }

    fn has_pending(&self) -> bool {
        self.resync || !self.pending.is_empty()
    }

    /// The whole state as events: per slot `Cleared`, then `Stored` with
    /// its chain when it has one.
    fn full(&self) -> Vec<KvEvent> {
        let mut events = Vec::with_capacity(self.chains.len() * 2);
        for (slot, chain) in self.chains.iter().enumerate() {
            let slot = slot as u32;
            events.push(KvEvent::Cleared { slot });
            if !chain.is_empty() {
                events.push(KvEvent::Stored {
                    slot,
                    blocks: chain.clone(),
                });
            }
        }
        events
    }
}

/// Folds a measured rate into a moving average (the first one is taken as is).
fn ewma(current: &mut f32, measured: f64) {
    let measured = measured as f32;
    if !measured.is_finite() || measured <= 0.0 {
        return;
    }
    if *current > 0.0 {
        *current += ALPHA * (measured - *current);
    } else {
        *current = measured;
    }
}

impl Ledger {
    /// An empty ledger for `slots` slots of model `model_id`.
    pub fn new(model_id: &str, slots: usize) -> Ledger {
        Ledger {
            model: model_id.to_owned(),
            seed: model_seed(model_id),
            state: Mutex::new(State {
                chains: vec![Vec::new(); slots],
                pending: Vec::new(),
                last_event: vec![None; slots],
                resync: false,
                running: 0,
                queued: 0,
                queued_prompt_tokens: 0,
                prefill_rate: 0.0,
                decode_rate: 0.0,
            }),
            changed: Notify::new(),
        }
    }

    /// The model id.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The hash the model's chains start from ([`model_seed`]).
    pub fn seed(&self) -> BlockHash {
        self.seed
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Wakes the agent if `state` has changes for it.
    fn notify_if_pending(&self, state: &State) {
        if state.has_pending() {
            self.changed.notify_one();
        }
    }

    // ---- engine side ----

    /// Slot `slot` now keeps only its first `keep_tokens` tokens: its chain is
    /// cut to `keep_tokens / BLOCK_TOKENS` blocks, and the dropped ones are
    /// reported as `Removed`.
    pub fn truncate(&self, slot: usize, keep_tokens: usize) {
        let keep = keep_tokens / BLOCK_TOKENS;
        let mut state = self.lock();
        let Some(chain) = state.chains.get_mut(slot) else {
            return;
        };
        if chain.len() <= keep {
            return;
        }
        let blocks = chain.split_off(keep);
        let event = KvEvent::Removed {
            slot: slot as u32,
            blocks,
        };
        state.push(slot, event);
        self.notify_if_pending(&state);
    }

    /// Slot `slot` holds nothing any more. Reported as `Cleared` only when
    /// its chain was not already empty (the head's copy is then empty too).
    pub fn clear(&self, slot: usize) {
        let mut state = self.lock();
        let Some(chain) = state.chains.get_mut(slot) else {
            return;
        };
        if chain.is_empty() {
            return;
        }
        chain.clear();
        state.push(slot, KvEvent::Cleared { slot: slot as u32 });
        self.notify_if_pending(&state);
    }

    /// Slot `slot`'s KV cache now holds `cached` (all its tokens so far):
    /// hashes its new whole blocks and reports them as `Stored`.
    pub fn extend(&self, slot: usize, cached: &[TokenId]) {
        self.extend_with(slot, cached.len(), |range| cached[range].iter().copied());
    }

    /// [`Ledger::extend`] for engines that hold their tokens in another type:
    /// slot `slot` caches `cached_len` tokens, and `tokens(range)` yields the
    /// ones in `range` (only tokens of new whole blocks are asked for).
    /// Without a new whole block this neither allocates nor hashes.
    pub fn extend_with<I>(
        &self,
        slot: usize,
        cached_len: usize,
        tokens: impl FnOnce(Range<usize>) -> I,
    ) where
        I: IntoIterator<Item = TokenId>,
    {
        let full = cached_len / BLOCK_TOKENS;
        let mut state = self.lock();
        let Some(chain) = state.chains.get_mut(slot) else {
            return;
        };
        let have = chain.len();
        if full <= have {
            return;
        }
        let mut prev = chain.last().copied().unwrap_or(self.seed);
        let mut added = Vec::with_capacity(full - have);
        let mut block = [0; BLOCK_TOKENS];
        let mut filled = 0;
        for token in tokens(have * BLOCK_TOKENS..full * BLOCK_TOKENS) {
            block[filled] = token;
            filled += 1;
            if filled == BLOCK_TOKENS {
                prev = chain_block(prev, &block);
                added.push(prev);
                filled = 0;
                if added.len() == full - have {
                    break;
                }
            }
        }
        if added.is_empty() {
            return;
        }
        chain.extend_from_slice(&added);
        let event = KvEvent::Stored {
            slot: slot as u32,
            blocks: added,
        };
        state.push(slot, event);
        self.notify_if_pending(&state);
    }

    /// How busy the engine is: sequences in a slot, requests waiting for
    /// one, and prompt tokens still to compute over both.
    pub fn set_load(&self, running: u32, queued: u32, queued_prompt_tokens: u64) {
        let mut state = self.lock();
        state.running = running;
        state.queued = queued;
        state.queued_prompt_tokens = queued_prompt_tokens;
    }

    /// [`Ledger::set_load`] from the engine's state: for each running slot,
    /// the tokens it has still to evaluate (a decoding slot's one pending
    /// token is not prompt), and each queued request's prompt length.
    pub fn set_load_of(
        &self,
        running_left: impl IntoIterator<Item = usize>,
        queued_prompts: impl IntoIterator<Item = usize>,
    ) {
        let (mut running, mut pending) = (0u32, 0u64);
        for left in running_left {
            running += 1;
            if left > 1 {
                pending += left as u64;
            }
        }
        let (mut queued, mut queued_tokens) = (0u32, 0u64);
        for len in queued_prompts {
            queued += 1;
            queued_tokens += len as u64;
        }
        self.set_load(running, queued, queued_tokens + pending);
    }

    /// A step computed `tokens` prompt tokens in `secs` seconds. Zero or
    /// non-finite measurements are ignored.
    pub fn record_prefill(&self, tokens: usize, secs: f64) {
        if tokens == 0 || !secs.is_finite() || secs <= 0.0 {
            return;
        }
        ewma(&mut self.lock().prefill_rate, tokens as f64 / secs);
    }

    /// A decode-only step took `secs_per_token` seconds (one token per
    /// stream). Zero or non-finite measurements are ignored.
    pub fn record_decode(&self, secs_per_token: f64) {
        if !secs_per_token.is_finite() || secs_per_token <= 0.0 {
            return;
        }
        ewma(&mut self.lock().decode_rate, 1.0 / secs_per_token);
    }

    // ---- agent side ----

    /// The full state, as a `Cleared` per slot followed by a `Stored` of its
    /// whole chain when it has one. Pending changes are dropped, atomically:
    /// the snapshot covers them.
    pub fn snapshot(&self) -> KvUpdate {
        let mut state = self.lock();
        state.forget_pending();
        state.resync = false;
        KvUpdate {
            model: self.model.clone(),
            events: state.full(),
        }
    }

    /// The changes since the last snapshot or take, oldest first (each
    /// slot's in order), or `None` when there are none. If too many piled up
    /// (no head was connected), the full state instead, as in
    /// [`Ledger::snapshot`].
    pub fn take(&self) -> Option<KvUpdate> {
        let mut state = self.lock();
        let events = if state.resync {
            state.resync = false;
            state.full()
        } else if state.pending.is_empty() {
            return None;
        } else {
            state.last_event.fill(None);
            std::mem::take(&mut state.pending)
        };
        Some(KvUpdate {
            model: self.model.clone(),
            events,
        })
    }

    /// The engine's load and measured rates now.
    pub fn load_report(&self) -> LoadReport {
        let state = self.lock();
        LoadReport {
            model: self.model.clone(),
            running: state.running,
            queued: state.queued,
            queued_prompt_tokens: state.queued_prompt_tokens,
            prefill_tokens_per_sec: state.prefill_rate,
            decode_tokens_per_sec: state.decode_rate,
        }
    }

    /// Waits until there are changes for [`Ledger::take`]. Cancel-safe.
    pub async fn changed(&self) {
        loop {
            let notified = self.changed.notified();
            if self.lock().has_pending() {
                return;
            }
            notified.await;
        }
    }

    /// Each slot's chain now (for tests and benchmarks).
    pub fn chains(&self) -> Vec<Vec<BlockHash>> {
        self.lock().chains.clone()
    }
}

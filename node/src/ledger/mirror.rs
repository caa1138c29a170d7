//! A ledger that mirrors another process's: the node agent's copy of an
//! engine host's ledger, fed with the updates the host sends.
//!
//! The host's events are replayed as its own engine would have made them,
//! so the agent relays them to the head unchanged. They come from another
//! process and are checked like a network peer's: an event for a slot the
//! model does not have, or a removal of blocks the slot does not hold, is
//! refused, and the caller ends the host that sent it.

use superfluid_proto::{KvEvent, LoadReport};

use super::{Ledger, State};

/// Why a host's update cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MirrorError {
    /// The event names a slot the model does not have.
    #[error("a KV event names slot {slot}, but the model has {slots} slots")]
    NoSuchSlot {
        /// The slot named.
        slot: u32,
        /// Slots the model has.
        slots: usize,
    },
    /// A removal names more blocks than the slot holds, or other blocks.
    #[error("a KV event removes blocks that slot {slot} does not hold")]
    NotHeld {
        /// The slot named.
        slot: u32,
    },
    /// The update is for another model.
    #[error("an update for model {got:?} reached the ledger of {want:?}")]
    OtherModel {
        /// The model the update names.
        got: String,
        /// This ledger's model.
        want: String,
    },
}

impl Ledger {
    /// Replays `events` (another ledger's, in order) on this one, each as
    /// the engine side would have made it. Stops at the first event that
    /// cannot be right; those before it are applied.
    ///
    /// # Errors
    /// [`MirrorError`] when an event names a slot out of range or removes
    /// blocks the slot does not hold.
    pub fn apply(&self, model: &str, events: Vec<KvEvent>) -> Result<(), MirrorError> {
        if model != self.model {
            return Err(MirrorError::OtherModel {
                got: model.to_owned(),
                want: self.model.clone(),
            });
        }
        let mut state = self.lock();
        let slots = state.chains.len();
        let result = events
            .into_iter()
            .try_for_each(|event| apply_one(&mut state, slots, event));
        self.notify_if_pending(&state);
        result
    }

    /// Takes another ledger's load and measured rates as this one's.
    pub fn set_report(&self, report: &LoadReport) {
        let mut state = self.lock();
        state.running = report.running;
        state.queued = report.queued;
        state.queued_prompt_tokens = report.queued_prompt_tokens;
        state.prefill_rate = report.prefill_tokens_per_sec;
        state.decode_rate = report.decode_tokens_per_sec;
    }

    /// Every slot is empty and nothing runs: what an engine that died
    /// leaves. The measured rates stay; the next engine runs on the same
    /// hardware.
    pub fn reset(&self) {
        let slots = self.lock().chains.len();
        for slot in 0..slots {
            self.clear(slot);
        }
        self.set_load(0, 0, 0);
    }
}

fn apply_one(state: &mut State, slots: usize, event: KvEvent) -> Result<(), MirrorError> {
    let slot = match &event {
        KvEvent::Stored { slot, .. }
        | KvEvent::Removed { slot, .. }
        | KvEvent::Cleared { slot } => *slot,
    };
    let index = usize::try_from(slot)
        .ok()
        .filter(|&i| i < slots)
        .ok_or(MirrorError::NoSuchSlot { slot, slots })?;
    let chain = &mut state.chains[index];
    match &event {
        KvEvent::Stored { blocks, .. } => {
            if blocks.is_empty() {
                return Ok(());
            }
            chain.extend_from_slice(blocks);
        }
        KvEvent::Removed { blocks, .. } => {
            let keep = chain
                .len()
                .checked_sub(blocks.len())
                .filter(|&keep| chain[keep..] == blocks[..])
                .ok_or(MirrorError::NotHeld { slot })?;
            if blocks.is_empty() {
                return Ok(());
            }
            chain.truncate(keep);
        }
        KvEvent::Cleared { .. } => {
            if chain.is_empty() {
                return Ok(());
            }
            chain.clear();
        }
    }
    state.push(index, event);
    Ok(())
}

//! Per-node admission: how many generations a node may hold at once.
//!
//! A node runs as many generations as it has slots and queues the rest
//! itself (its scheduler admits them first come, first served). The head
//! bounds that queue: a node takes at most `slots + max_queue` generations
//! in flight, and is no candidate for routing while it holds that many.
//! When every node serving a model is full, the request is refused at once
//! (HTTP 429 with `Retry-After`) instead of waiting without end.
//!
//! A queued generation is an open stream to its node: a client that gives
//! up drops it, the stream is reset, and the node's scheduler removes it
//! from its queue at its next step; the head's count drops with it.
//!
//! Pure code: the decision reads a snapshot of the nodes' load
//! ([`NodeLoad`]) and never the clock.

use super::NodeLoad;

/// Queue places per slot when `--max-queue` is not given.
pub const DEFAULT_QUEUE_PER_SLOT: u32 = 2;

/// Shortest and longest `Retry-After` a busy fleet answers with, seconds.
const RETRY_AFTER_SECS: (u64, u64) = (1, 60);

/// How long a generation holds a slot on a node that has not finished one
/// yet, for the `Retry-After` estimate.
const UNMEASURED_GENERATION_SECS: f64 = 1.0;

/// The admission rule of a fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Admission {
    /// Generations each node may queue beyond its slots; `None`:
    /// [`DEFAULT_QUEUE_PER_SLOT`] per slot.
    pub max_queue: Option<u32>,
}

/// Why a generation was refused: every node serving its model is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    /// Generations waiting for a slot on those nodes.
    pub queued: u32,
    /// Whole seconds after which a slot is likely free.
    pub retry_after_secs: u64,
}

impl Admission {
    /// Each node queues at most `max_queue` generations beyond its slots
    /// (`None`: [`DEFAULT_QUEUE_PER_SLOT`] per slot).
    pub fn new(max_queue: Option<u32>) -> Self {
        Self { max_queue }
    }

    /// Generations a node with `slots` slots may queue.
    pub fn queue_len(&self, slots: u32) -> u32 {
        self.max_queue
            .unwrap_or_else(|| slots.max(1).saturating_mul(DEFAULT_QUEUE_PER_SLOT))
    }

    /// Generations a node with `slots` slots may hold in flight.
    pub fn capacity(&self, slots: u32) -> u32 {
        slots.max(1).saturating_add(self.queue_len(slots))
    }

    /// Whether the node whose load is `load` takes one more generation.
    pub fn admits(&self, load: &NodeLoad) -> bool {
        load.in_flight < self.capacity(load.slots)
    }

    /// What to tell a client when none of `loads` admits its generation:
    /// how many wait, and when a place is likely free: a full node takes
    /// one more when one of its generations ends, which is every mean
    /// generation time divided by its slots.
    pub fn busy(&self, loads: &[NodeLoad]) -> Busy {
        let queued = loads.iter().map(queued).fold(0u32, u32::saturating_add);
        let soonest = loads
            .iter()
            .map(|load| {
                let per_generation = load
                    .mean_generation_secs
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .unwrap_or(UNMEASURED_GENERATION_SECS);
                per_generation / f64::from(load.slots.max(1))
            })
            .fold(f64::INFINITY, f64::min);
        let (min, max) = RETRY_AFTER_SECS;
        let retry_after_secs = if soonest.is_finite() {
            (soonest.ceil() as u64).clamp(min, max)
        } else {
            min
        };
        Busy {
            queued,
            retry_after_secs,
        }
    }
}

/// Generations the head has sent to a node beyond its slots: those waiting
/// in its queue.
pub fn queued(load: &NodeLoad) -> u32 {
    load.in_flight.saturating_sub(load.slots.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(slots: u32, in_flight: u32, mean: Option<f64>) -> NodeLoad {
        NodeLoad {
            key: 1,
            slots,
            in_flight,
            pending_prefill_tokens: 0,
            reported_running: 0,
            reported_queued: 0,
            reported_queued_prompt_tokens: 0,
            prefill_tokens_per_sec: None,
            decode_tokens_per_sec: None,
            mean_generation_secs: mean,
            mean_decode_secs: None,
            indexed_blocks: 0,
        }
    }

    #[test]
    fn a_node_takes_its_slots_and_two_queued_per_slot_by_default() {
        let admission = Admission::default();
        assert_eq!(admission.capacity(4), 12);
        assert!(admission.admits(&load(4, 11, None)));
        assert!(!admission.admits(&load(4, 12, None)));
    }

    #[test]
    fn max_queue_bounds_each_node_and_zero_means_slots_only() {
        assert_eq!(Admission::new(Some(3)).capacity(4), 7);
        let none = Admission::new(Some(0));
        assert!(none.admits(&load(2, 1, None)));
        assert!(!none.admits(&load(2, 2, None)));
    }

    #[test]
    fn busy_counts_the_queued_and_waits_for_the_soonest_place() {
        let admission = Admission::new(Some(2));
        let busy = admission.busy(&[load(1, 3, Some(4.0)), load(2, 4, Some(5.0))]);
        assert_eq!(busy.queued, 4);
        // The second node: a 5 s generation on each of 2 slots ends every 2.5 s.
        assert_eq!(busy.retry_after_secs, 3);
    }

    #[test]
    fn retry_after_is_at_least_one_second_and_at_most_a_minute() {
        let admission = Admission::default();
        assert_eq!(
            admission.busy(&[load(1, 3, Some(0.01))]).retry_after_secs,
            1
        );
        assert_eq!(
            admission.busy(&[load(1, 3, Some(1e6))]).retry_after_secs,
            60
        );
        assert_eq!(admission.busy(&[]).retry_after_secs, 1);
    }
}

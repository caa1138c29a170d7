//! The time-to-first-token prediction behind least-ttft (the model is
//! documented in [`super::policy`]).

use super::policy::{NodeView, DEFAULT_DECODE_TOKENS_PER_SEC, DEFAULT_PREFILL_TOKENS_PER_SEC};

/// Generated tokens assumed per generation when a node has no measured mean
/// generation time.
const ASSUMED_GENERATION_TOKENS: f64 = 128.0;

/// The rates used for nodes that have not measured their own.
pub(crate) struct Rates {
    prefill: f64,
    decode: f64,
}

impl Rates {
    pub(crate) fn of(nodes: &[NodeView]) -> Self {
        Self {
            prefill: median(nodes.iter().map(|n| n.prefill_tokens_per_sec))
                .unwrap_or(DEFAULT_PREFILL_TOKENS_PER_SEC),
            decode: median(nodes.iter().map(|n| n.decode_tokens_per_sec))
                .unwrap_or(DEFAULT_DECODE_TOKENS_PER_SEC),
        }
    }

    /// Predicted time to first token for a prompt of `prompt` tokens of
    /// which `cached` are cached on `node`.
    pub(crate) fn ttft(&self, node: &NodeView, prompt: usize, cached: usize) -> f64 {
        let prefill = known(node.prefill_tokens_per_sec).unwrap_or(self.prefill);
        let decode = known(node.decode_tokens_per_sec).unwrap_or(self.decode);
        let generation =
            known(node.mean_generation_secs).unwrap_or(ASSUMED_GENERATION_TOKENS / decode);
        let slots = node.slots.max(1);
        let slot_wait = if node.in_flight < slots {
            0.0
        } else {
            f64::from(node.in_flight - slots + 1) / f64::from(slots) * generation
        };
        let queue_wait = node.pending_prefill_tokens as f64 / prefill + slot_wait;
        queue_wait + prompt.saturating_sub(cached) as f64 / prefill
    }
}

/// `x` if it is a usable measurement (finite and positive).
fn known(x: f64) -> Option<f64> {
    (x.is_finite() && x > 0.0).then_some(x)
}

/// The median of the usable measurements among `xs` (the mean of the middle
/// two for an even count).
fn median(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = xs.filter_map(known).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

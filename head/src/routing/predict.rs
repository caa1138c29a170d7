//! The time-to-first-token prediction behind least-ttft (the model is
//! documented in [`super::policy`]), and the view of a candidate node it
//! predicts from.

use super::NodeKey;

/// Prompt tokens per second assumed before any node has measured its own
/// (SmolLM2-135M on two CPU cores).
pub const DEFAULT_PREFILL_TOKENS_PER_SEC: f64 = 330.0;
/// Tokens per second of one stream assumed before any node has measured its
/// own (SmolLM2-135M on two CPU cores).
pub const DEFAULT_DECODE_TOKENS_PER_SEC: f64 = 165.0;

/// One candidate node as routing sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    /// The node.
    pub key: NodeKey,
    /// Sequences its engine runs at once (0 is read as 1).
    pub slots: u32,
    /// Generations sent to it that have not finished.
    pub in_flight: u32,
    /// Uncached prompt tokens of generations sent to it that have not
    /// produced a first token.
    pub pending_prefill_tokens: u64,
    /// Measured prompt tokens per second; 0 if unknown.
    pub prefill_tokens_per_sec: f64,
    /// Measured tokens per second of one stream; 0 if unknown.
    pub decode_tokens_per_sec: f64,
    /// Measured mean time from a generation's first token to its last; 0
    /// if unknown.
    pub mean_decode_secs: f64,
    /// How long each generation sent to it that has produced its first
    /// token has been decoding, in seconds. The others in flight are
    /// prefilling or queued. Only read while every slot is taken, so the
    /// router fills it only then.
    pub decoding_secs: Vec<f64>,
}

/// Generated tokens assumed per generation when a node has no measured mean
/// decoding time.
const ASSUMED_GENERATION_TOKENS: f64 = 128.0;

/// How many times least-ttft counts a queue wait.
const QUEUE_WEIGHT: f64 = 2.0;

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
        let (queue_wait, prefill) = self.parts(node, prompt, cached);
        queue_wait + prefill
    }

    /// What least-ttft minimises: the predicted time to first token with
    /// its queue wait counted [`QUEUE_WEIGHT`] times.
    pub(crate) fn cost(&self, node: &NodeView, prompt: usize, cached: usize) -> f64 {
        let (queue_wait, prefill) = self.parts(node, prompt, cached);
        QUEUE_WEIGHT * queue_wait + prefill
    }

    /// The predicted queue wait and prefill time, in seconds.
    fn parts(&self, node: &NodeView, prompt: usize, cached: usize) -> (f64, f64) {
        let prefill = known(node.prefill_tokens_per_sec).unwrap_or(self.prefill);
        let decode = known(node.mean_decode_secs).unwrap_or_else(|| {
            ASSUMED_GENERATION_TOKENS / known(node.decode_tokens_per_sec).unwrap_or(self.decode)
        });
        let prefill_wait = node.pending_prefill_tokens as f64 / prefill;
        let queue_wait = prefill_wait.max(slot_wait(node, prefill_wait, decode));
        (queue_wait, prompt.saturating_sub(cached) as f64 / prefill)
    }
}

/// Seconds until one of `node`'s slots is free for a new generation, given
/// the seconds its pending prompts take (`prefill_wait`) and the mean
/// seconds a generation decodes (`decode`).
///
/// A generation decoding for `t` seconds frees its slot in `decode - t`
/// (at least 0); one still waiting for its first token holds a slot for its
/// share of `prefill_wait` and then `decode`. The waiting ones take slots
/// first come, first served, each as the earliest slot frees.
fn slot_wait(node: &NodeView, prefill_wait: f64, decode: f64) -> f64 {
    let slots = node.slots.max(1) as usize;
    let in_flight = node.in_flight as usize;
    if in_flight < slots {
        return 0.0;
    }
    let decoding = node.decoding_secs.len().min(in_flight);
    let waiting = in_flight - decoding;
    let waiting_hold = prefill_wait / waiting.max(1) as f64 + decode;
    // When each slot frees: decoding generations first, then the waiting
    // ones already holding a slot.
    let mut free: Vec<f64> = node
        .decoding_secs
        .iter()
        .take(slots)
        .map(|&t| (decode - t).max(0.0))
        .collect();
    let seated = (slots - free.len()).min(waiting);
    free.extend(std::iter::repeat_n(waiting_hold, seated));
    free.resize(slots, 0.0);
    // Every generation queued at the node takes the earliest free slot.
    for _ in 0..waiting - seated {
        let Some(earliest) = free.iter_mut().min_by(|a, b| a.total_cmp(b)) else {
            break;
        };
        *earliest += waiting_hold;
    }
    free.into_iter().fold(f64::INFINITY, f64::min)
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

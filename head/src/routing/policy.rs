//! Routing policies and the pure function that applies one.
//!
//! # The time-to-first-token model
//!
//! For each candidate node, [`route`] predicts how long a new generation
//! would wait for its first token there:
//!
//! ```text
//! predicted_ttft = queue_wait + (prompt_tokens - cached_tokens) / prefill_rate
//! queue_wait     = max(pending_prefill_tokens / prefill_rate, slot_wait)
//! ```
//!
//! - `cached_tokens` is the longest prefix of the prompt the node holds in
//!   one slot, per the [`BlockIndex`], at most `prompt_tokens - 1` (a node
//!   computes at least one token).
//! - `pending_prefill_tokens` are the uncached prompt tokens of generations
//!   already sent there that have not produced a first token: they are
//!   computed before the new prompt.
//! - `slot_wait` is 0 while a slot is free. With every slot taken, it is
//!   when the next slot frees: a generation decoding for `t` seconds frees
//!   its slot in `mean_decode_secs - t` (at least 0); one still waiting for
//!   its first token holds a slot for its share of the pending prompts and
//!   then `mean_decode_secs`. Generations queued at the node take the
//!   earliest free slots in turn; the new one gets the next.
//! - The two waits overlap (the node computes the prompts ahead while the
//!   others decode), hence the larger of them.
//! - A rate the node has not measured yet is the median of the rates the
//!   other candidates measured, or with none measured,
//!   [`super::DEFAULT_PREFILL_TOKENS_PER_SEC`] and
//!   [`super::DEFAULT_DECODE_TOKENS_PER_SEC`].
//!   An unknown mean decoding time is 128 tokens at the decode rate.
//!
//! `least-ttft` picks the node with the lowest cost, the prediction with
//! its queue wait counted twice:
//!
//! ```text
//! cost = 2 x queue_wait + (prompt_tokens - cached_tokens) / prefill_rate
//! ```
//!
//! A generation that joins a queue also delays every generation sent to
//! that node after it, while one computed at once on an idle node delays no
//! one. Counting the wait once makes long prompts pile up on the fastest
//! nodes until their queues are as slow as the idle nodes, and then every
//! generation there waits.
//!
//! Costs within 1% or 1 ms of each other are ties, won by the node with fewer generations in flight
//! per slot, and then in turn, so equal idle nodes share the work. When no
//! node holds any of the prompt, every node whose cost is at most twice the
//! best is tied: the costs then differ only by predicted queues and speeds,
//! and such a generation goes to the least loaded of those nodes, which
//! keeps the fast nodes' queues short, while a node predicted more than
//! twice as slow never gets it (near saturation with nothing to reuse, this
//! took the median TTFT down by about 6 % and left the tail as it was).

use super::index::{BlockIndex, Match};
use super::predict::{NodeView, Rates};
use std::fmt;
use std::str::FromStr;
use superfluid_proto::{BlockHash, BLOCK_TOKENS};

/// Predictions closer than this fraction of the best are ties.
const TIE_RELATIVE: f64 = 0.01;
/// Predictions closer than this fraction of the best are ties when no node
/// holds any of the prompt: the costs then differ only by the predicted
/// queues and speeds. 1.0: any node predicted at most twice the best's cost.
const COLD_TIE_RELATIVE: f64 = 1.0;
/// Predictions closer than this many seconds are ties.
const TIE_ABSOLUTE_SECS: f64 = 0.001;

/// How the head picks a node for a generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RoutePolicy {
    /// The lowest predicted time to first token, counting cached prefixes,
    /// queued work and each node's speed.
    #[default]
    LeastTtft,
    /// Each node in turn.
    RoundRobin,
    /// The fewest generations in flight per slot.
    LeastLoaded,
    /// A node at random.
    Random,
}

impl RoutePolicy {
    /// Every policy.
    pub const ALL: [RoutePolicy; 4] = [
        RoutePolicy::LeastTtft,
        RoutePolicy::RoundRobin,
        RoutePolicy::LeastLoaded,
        RoutePolicy::Random,
    ];

    /// The policy's name, as [`FromStr`] accepts it.
    pub fn as_str(&self) -> &'static str {
        match self {
            RoutePolicy::LeastTtft => "least-ttft",
            RoutePolicy::RoundRobin => "round-robin",
            RoutePolicy::LeastLoaded => "least-loaded",
            RoutePolicy::Random => "random",
        }
    }
}

impl fmt::Display for RoutePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RoutePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(RoutePolicy::as_str).collect();
                format!(
                    "unknown routing policy {s:?}; valid policies are {}",
                    names.join(", ")
                )
            })
    }
}

/// Why a node was picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Least-ttft picked the node holding the longest cached prefix.
    Warm,
    /// No candidate held any block of the prompt.
    Cold,
    /// A candidate held a longer prefix but was predicted slower (busy or
    /// slow), so another won.
    Load,
    /// The round-robin policy.
    RoundRobin,
    /// The least-loaded policy.
    LeastLoaded,
    /// The random policy.
    Random,
}

impl Reason {
    /// Every reason.
    pub const ALL: [Reason; 6] = [
        Reason::Warm,
        Reason::Cold,
        Reason::Load,
        Reason::RoundRobin,
        Reason::LeastLoaded,
        Reason::Random,
    ];

    /// The reason's name, as metrics label it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::Warm => "warm",
            Reason::Cold => "cold",
            Reason::Load => "load",
            Reason::RoundRobin => "round_robin",
            Reason::LeastLoaded => "least_loaded",
            Reason::Random => "random",
        }
    }
}

/// The generation to route.
#[derive(Debug, Clone, Copy)]
pub struct RouteRequest<'a> {
    /// The prompt's block hashes (see [`superfluid_proto::block_hashes`]).
    pub blocks: &'a [BlockHash],
    /// The prompt's length in tokens.
    pub prompt_tokens: usize,
}

/// The mutable part of routing: the round-robin counter and the random
/// generator's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterState {
    /// Decisions taken in turn so far; picks the next node in rotations.
    pub next: u64,
    /// Xorshift state; never 0.
    pub rng: u64,
}

impl RouterState {
    /// A fresh state; `seed` seeds the random policy.
    pub fn new(seed: u64) -> Self {
        let rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x2545_f491_4f6c_dd1d;
        Self {
            next: 0,
            rng: if rng == 0 { 1 } else { rng },
        }
    }

    /// The next index in turn among `n` (0 if `n` is 0).
    fn rotate(&mut self, n: usize) -> usize {
        let i = (self.next % n.max(1) as u64) as usize;
        self.next = self.next.wrapping_add(1);
        i
    }

    /// The next of `tied` in turn, or `fallback` if there are none.
    fn among(&mut self, tied: &[usize], fallback: usize) -> usize {
        let i = self.rotate(tied.len());
        tied.get(i).copied().unwrap_or(fallback)
    }

    /// A pseudo-random index below `n` (xorshift64*; 0 if `n` is 0).
    fn random(&mut self, n: usize) -> usize {
        if self.rng == 0 {
            self.rng = 1;
        }
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as usize % n.max(1)
    }
}

/// Where a generation goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Index of the chosen node's view in the `nodes` slice given to
    /// [`route`] (not its key).
    pub index: usize,
    /// The chosen node's slot holding the longest prefix of the prompt, if
    /// it holds any.
    pub slot: Option<u32>,
    /// Prompt tokens the chosen node holds cached (at most all but one).
    pub cached_tokens: usize,
    /// Predicted time to first token on the chosen node.
    pub predicted_ttft_secs: f64,
    /// Why it was chosen.
    pub reason: Reason,
}

/// Picks a node among `nodes` for `request` under `policy`; `None` iff
/// `nodes` is empty. Only `nodes` are candidates, whatever else `index`
/// holds. See the module documentation for the prediction.
pub fn route(
    policy: RoutePolicy,
    request: &RouteRequest,
    nodes: &[NodeView],
    index: &BlockIndex,
    state: &mut RouterState,
) -> Option<Decision> {
    if nodes.is_empty() {
        return None;
    }
    let mut found = Vec::new();
    index.matches(request.blocks, &mut found);
    found.sort_unstable_by_key(|m| m.node);
    let rates = Rates::of(nodes);
    let cached_max = request.prompt_tokens.saturating_sub(1);
    let warmth = |view: &NodeView| -> (Option<u32>, usize) {
        match found.binary_search_by_key(&view.key, |m: &Match| m.node) {
            Ok(at) => {
                let m = found[at];
                (Some(m.slot), (m.blocks * BLOCK_TOKENS).min(cached_max))
            }
            Err(_) => (None, 0),
        }
    };
    let decide = |i: usize, reason: Reason| {
        let (slot, cached_tokens) = warmth(&nodes[i]);
        Decision {
            index: i,
            slot,
            cached_tokens,
            predicted_ttft_secs: rates.ttft(&nodes[i], request.prompt_tokens, cached_tokens),
            reason,
        }
    };
    let (chosen, reason) = match policy {
        RoutePolicy::RoundRobin => (state.rotate(nodes.len()), Reason::RoundRobin),
        RoutePolicy::Random => (state.random(nodes.len()), Reason::Random),
        RoutePolicy::LeastLoaded => (
            least_loaded_in_turn(0..nodes.len(), nodes, state),
            Reason::LeastLoaded,
        ),
        RoutePolicy::LeastTtft => {
            let scored: Vec<(usize, f64)> = nodes
                .iter()
                .map(|v| {
                    let (_, cached) = warmth(v);
                    (cached, rates.cost(v, request.prompt_tokens, cached))
                })
                .collect();
            let best = scored.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
            let warmest = scored.iter().map(|s| s.0).max().unwrap_or(0);
            let relative = if warmest == 0 {
                COLD_TIE_RELATIVE
            } else {
                TIE_RELATIVE
            };
            let margin = (best * relative).max(TIE_ABSOLUTE_SECS);
            let near = (0..nodes.len()).filter(|&i| scored[i].1 <= best + margin);
            let chosen = least_loaded_in_turn(near, nodes, state);
            let reason = if warmest == 0 {
                Reason::Cold
            } else if scored.get(chosen).is_some_and(|s| s.0 == warmest) {
                Reason::Warm
            } else {
                Reason::Load
            };
            (chosen, reason)
        }
    };
    Some(decide(chosen, reason))
}

/// Among the nodes at `candidates` (indices into `nodes`), those with the
/// fewest generations in flight per slot, and of those the next in turn.
/// Index 0 if there are no candidates.
fn least_loaded_in_turn(
    candidates: impl Iterator<Item = usize>,
    nodes: &[NodeView],
    state: &mut RouterState,
) -> usize {
    let candidates: Vec<usize> = candidates.collect();
    let Some(least) = candidates
        .iter()
        .copied()
        .min_by(|&a, &b| load_cmp(&nodes[a], &nodes[b]))
    else {
        return 0;
    };
    let tied: Vec<usize> = candidates
        .into_iter()
        .filter(|&i| load_cmp(&nodes[i], &nodes[least]).is_eq())
        .collect();
    state.among(&tied, least)
}

/// Orders nodes by generations in flight per slot, exactly.
fn load_cmp(a: &NodeView, b: &NodeView) -> std::cmp::Ordering {
    let lhs = u64::from(a.in_flight) * u64::from(b.slots.max(1));
    let rhs = u64::from(b.in_flight) * u64::from(a.slots.max(1));
    lhs.cmp(&rhs)
}

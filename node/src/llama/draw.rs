//! The random pick of a sampled generation, drawn per position.
//!
//! llama.cpp's `dist` sampler keeps one random stream per generation, so a
//! generation that starts over on another node from the middle of its
//! answer (a continuation) would draw from the start of that stream again.
//! Here the draw for the answer's token number `i` is a pure function of the
//! request's seed and `i`: the `i`-th output of a SplitMix64 stream seeded
//! from the seed. A continuation that starts at position `k` draws what the
//! uninterrupted generation drew at `k`, whichever node runs it.

use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::LlamaToken;

/// SplitMix64's increment (the golden ratio in 64 bits).
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// The random draws of one generation, from its seed, at the next position.
#[derive(Debug, Clone)]
pub struct Draw {
    /// The stream's start, mixed from the request's seed.
    base: u64,
    /// The position in the answer of the next token drawn.
    position: u64,
}

impl Draw {
    /// The draws of a generation seeded with `seed`, from its first token.
    pub fn new(seed: u32) -> Self {
        Self {
            base: mix(u64::from(seed)),
            position: 0,
        }
    }

    /// Moves past `tokens` positions another node already drew.
    pub fn skip(&mut self, tokens: usize) {
        self.position = self.position.wrapping_add(tokens as u64);
    }

    /// The uniform number in `[0, 1)` for the next position, and moves on.
    fn next_unit(&mut self) -> f64 {
        let bits = mix(self.base.wrapping_add(self.position.wrapping_mul(GOLDEN)));
        self.position = self.position.wrapping_add(1);
        // The top 53 bits, as many as a double holds exactly.
        (bits >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Picks one of `candidates` at random by the softmax of their logits
    /// (the sampler chain has applied its temperature to them already),
    /// marks it selected and returns it; `None` when no candidate has a
    /// finite logit.
    pub fn pick(&mut self, candidates: &mut LlamaTokenDataArray) -> Option<LlamaToken> {
        let unit = self.next_unit();
        let index = choose(candidates.data.iter().map(|c| c.logit()), unit)?;
        candidates.selected = Some(index);
        candidates.data.get(index).map(|c| c.id())
    }
}

/// SplitMix64's output function.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The index whose share of the softmax of `logits` covers `unit` (in
/// `[0, 1)`), counting in the order given; `None` when no logit is finite.
fn choose(logits: impl Iterator<Item = f32> + Clone, unit: f64) -> Option<usize> {
    let max = logits
        .clone()
        .filter(|l| l.is_finite())
        .fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return None;
    }
    let weight = |l: f32| {
        if l.is_finite() {
            f64::from(l - max).exp()
        } else {
            0.0
        }
    };
    let total: f64 = logits.clone().map(weight).sum();
    let target = unit * total;
    let mut sum = 0.0;
    let mut last = None;
    for (index, logit) in logits.enumerate() {
        let w = weight(logit);
        if w > 0.0 {
            sum += w;
            last = Some(index);
            if sum > target {
                return last;
            }
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draw_depends_on_the_seed_and_position_alone() {
        let mut whole = Draw::new(42);
        let units: Vec<f64> = (0..8).map(|_| whole.next_unit()).collect();
        let mut resumed = Draw::new(42);
        resumed.skip(5);
        assert_eq!(resumed.next_unit(), units[5]);
        assert_eq!(resumed.next_unit(), units[6]);
        assert_ne!(Draw::new(43).next_unit(), units[0]);
        assert!(units.iter().all(|u| (0.0..1.0).contains(u)));
        assert!(units.windows(2).all(|w| w[0] != w[1]));
    }

    #[test]
    fn the_pick_follows_the_softmax() {
        let logits = [0.0f32, f32::NEG_INFINITY, 0.0, 0.0];
        // Three equal weights; the second candidate has none.
        assert_eq!(choose(logits.iter().copied(), 0.0), Some(0));
        assert_eq!(choose(logits.iter().copied(), 0.34), Some(2));
        assert_eq!(choose(logits.iter().copied(), 0.99), Some(3));
        assert_eq!(choose([f32::NEG_INFINITY].into_iter(), 0.5), None);
        // A logit 20 above the rest wins nearly every draw.
        assert_eq!(choose([0.0, 20.0, 0.0].into_iter(), 0.5), Some(1));
    }

    #[test]
    fn draws_spread_as_the_probabilities_say() {
        let logits = [2.0f32.ln(), 0.0]; // two to one
        let mut draw = Draw::new(7);
        let first = (0..3000)
            .filter(|_| choose(logits.iter().copied(), draw.next_unit()) == Some(0))
            .count();
        assert!((1850..2150).contains(&first), "{first} of 3000");
    }
}

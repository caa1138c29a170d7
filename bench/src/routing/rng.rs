//! A small seeded generator (SplitMix64) and the distributions the routing
//! workloads draw from. Fixed seeds make every policy see the same requests.

/// Token ids are drawn from `0..VOCAB`, the fake engine's vocabulary.
pub const VOCAB: u32 = 32_000;

/// SplitMix64: fast, statistically sound for workload generation, and
/// reproducible across builds.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// An independent generator for stream `stream` of seed `seed`.
    pub fn derive(seed: u64, stream: u64) -> Self {
        let mut r = Self(seed ^ stream.wrapping_mul(0xd134_2543_de82_ef95));
        r.next_u64();
        r
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        let span = u64::from(hi.saturating_sub(lo)) + 1;
        lo + (self.next_u64() % span) as u32
    }

    /// Exponentially distributed with mean `mean`.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// `n` random token ids.
    pub fn tokens(&mut self, n: usize) -> Vec<u32> {
        (0..n)
            .map(|_| (self.next_u64() % u64::from(VOCAB)) as u32)
            .collect()
    }

    /// One of `items`, uniformly.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next_u64() % items.len().max(1) as u64) as usize]
    }
}

/// Zipf-distributed ranks `0..n`: rank `k` has weight `1 / (k + 1)^s`.
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// Ranks `0..n` with exponent `s`.
    pub fn new(n: usize, s: f64) -> Self {
        let weights: Vec<f64> = (1..=n.max(1)).map(|k| 1.0 / (k as f64).powf(s)).collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let cdf = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        Self { cdf }
    }

    /// A rank.
    pub fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf
            .iter()
            .position(|&c| u < c)
            .unwrap_or(self.cdf.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_stream() {
        let (mut a, mut b) = (Rng::derive(0, 5), Rng::derive(0, 5));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(Rng::derive(5, 1).next_u64(), Rng::derive(5, 2).next_u64());
    }

    #[test]
    fn distributions_stay_in_range() {
        let mut r = Rng::derive(0, 1);
        for _ in 0..1000 {
            let x = r.range(20, 200);
            assert!((20..=200).contains(&x));
            assert!(r.unit() < 1.0);
            assert!(r.exp(0.5) >= 0.0);
        }
        assert!(r.tokens(100).iter().all(|&t| t < VOCAB));
    }

    #[test]
    fn zipf_favours_low_ranks() {
        let z = Zipf::new(8, 1.0);
        let mut counts = [0usize; 8];
        let mut r = Rng::derive(0, 3);
        for _ in 0..10_000 {
            counts[z.sample(&mut r)] += 1;
        }
        assert!(counts[0] > counts[1] && counts[1] > counts[7]);
    }
}

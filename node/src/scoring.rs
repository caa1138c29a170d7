//! Log-probabilities of a sampled token and its most likely alternatives.
//!
//! Pure arithmetic over the candidates a sampler saw (token id, logit),
//! after its logit biases and penalties: a log-softmax, the picked token's
//! value, and the `k` largest. Only generations that ask for log
//! probabilities pay for it; the others never build the candidate list.

/// The lowest log-probability reported: a token the sampler could not
/// pick (absent from the candidates, or with no probability at all) gets
/// this rather than minus infinity, which JSON cannot carry.
pub const FLOOR: f32 = -9999.0;

/// The scores at one position.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// The picked token's log-probability.
    pub chosen: f32,
    /// The most likely tokens with their log-probabilities, most likely
    /// first (ties by lower id).
    pub top: Vec<(u32, f32)>,
}

/// Scores `chosen` and the `k` most likely of `candidates` (id, logit)
/// under a softmax over all of them. Logits that are not finite (a token a
/// grammar or a ban ruled out) count as impossible.
pub fn score(candidates: &[(u32, f32)], chosen: u32, k: usize) -> Scores {
    let max = candidates
        .iter()
        .map(|&(_, l)| l)
        .filter(|l| l.is_finite())
        .fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return Scores {
            chosen: FLOOR,
            top: Vec::new(),
        };
    }
    // In f64: a sum over a whole vocabulary loses digits in f32.
    let sum: f64 = candidates
        .iter()
        .filter(|(_, l)| l.is_finite())
        .map(|&(_, l)| f64::from(l - max).exp())
        .sum();
    let log_norm = f64::from(max) + sum.ln();
    let logprob = |logit: f32| -> f32 {
        if !logit.is_finite() {
            return FLOOR;
        }
        ((f64::from(logit) - log_norm).min(0.0) as f32).max(FLOOR)
    };
    let chosen = candidates
        .iter()
        .find(|&&(id, _)| id == chosen)
        .map_or(FLOOR, |&(_, l)| logprob(l));
    let top = top_k(candidates, k)
        .into_iter()
        .map(|(id, l)| (id, logprob(l)))
        .collect();
    Scores { chosen, top }
}

/// The `k` candidates with the largest finite logits, largest first, ties
/// by lower id. One pass, keeping a sorted list of at most `k`.
fn top_k(candidates: &[(u32, f32)], k: usize) -> Vec<(u32, f32)> {
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    if k == 0 {
        return best;
    }
    let before = |a: &(u32, f32), b: &(u32, f32)| a.1 > b.1 || (a.1 == b.1 && a.0 < b.0);
    for &c in candidates {
        if !c.1.is_finite() {
            continue;
        }
        if best.len() == k && best.last().is_some_and(|last| !before(&c, last)) {
            continue;
        }
        let at = best
            .iter()
            .position(|b| before(&c, b))
            .unwrap_or(best.len());
        best.insert(at, c);
        best.truncate(k);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_a_log_softmax() {
        let candidates = [(0, 1.0), (1, 2.0), (2, 3.0)];
        let s = score(&candidates, 1, 3);
        let norm = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
        assert!((f64::from(s.chosen) - (2.0 - norm)).abs() < 1e-5);
        let total: f64 = s.top.iter().map(|&(_, l)| f64::from(l).exp()).sum();
        assert!((total - 1.0).abs() < 1e-5, "{total}");
        assert_eq!(s.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![2, 1, 0]);
    }

    #[test]
    fn top_is_the_k_largest_sorted_with_ties_by_id() {
        let candidates: Vec<(u32, f32)> = (0..100).map(|i| (i, (i % 10) as f32)).collect();
        let s = score(&candidates, 9, 4);
        let ids: Vec<u32> = s.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![9, 19, 29, 39]);
        assert!(s.top.windows(2).all(|w| w[0].1 >= w[1].1));
        assert_eq!(s.top[0].1, s.chosen);
    }

    #[test]
    fn impossible_tokens_get_the_floor_never_infinity() {
        let candidates = [(0, f32::NEG_INFINITY), (1, 0.0), (2, -1e30)];
        let s = score(&candidates, 0, 5);
        assert_eq!(s.chosen, FLOOR);
        assert_eq!(s.top.len(), 2, "{:?}", s.top);
        assert!(s.top.iter().all(|t| t.1.is_finite() && t.1 <= 0.0));
        let absent = score(&candidates, 7, 0);
        assert_eq!(absent.chosen, FLOOR);
        assert!(absent.top.is_empty());
        let none = score(&[], 0, 3);
        assert_eq!(none.chosen, FLOOR);
    }
}

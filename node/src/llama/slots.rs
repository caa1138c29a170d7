//! Which slot a new request should run in.
//!
//! Both engines keep finished sequences resident and hand a new request the
//! idle slot whose cached tokens share the longest prefix with its prompt, so
//! that only the rest of the prompt is computed. Ties and misses go to the
//! slot the head suggested, if idle, else to the least recently used slot.

/// Length of the common prefix of `a` and `b`.
pub fn common_prefix<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// An idle slot a request could take.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a, T> {
    /// The slot's index.
    pub index: usize,
    /// The tokens resident in the slot's sequence.
    pub cached: &'a [T],
    /// When the slot was last used (a step counter; lower is older).
    pub last_used: u64,
}

/// The slot chosen for a prompt and how many of its cached tokens to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// The slot's index.
    pub index: usize,
    /// Cached tokens to keep; always less than the prompt length, so at least
    /// one prompt token is evaluated and yields logits.
    pub reuse: usize,
}

/// Picks the idle slot with the longest reusable prefix of `prompt`; among
/// equals (including no reuse at all) the least recently used one.
/// Returns `None` when there is no idle slot.
pub fn choose<'a, T: PartialEq + 'a>(
    idle: impl IntoIterator<Item = Candidate<'a, T>>,
    prompt: &[T],
) -> Option<Choice> {
    choose_hinted(idle, prompt, None)
}

/// [`choose`], except that among the idle slots with the longest reusable
/// prefix the one numbered `hint` (the slot the head expects to hold the
/// prompt's prefix) wins, if it is one of them.
pub fn choose_hinted<'a, T: PartialEq + 'a>(
    idle: impl IntoIterator<Item = Candidate<'a, T>>,
    prompt: &[T],
    hint: Option<usize>,
) -> Option<Choice> {
    let limit = prompt.len().saturating_sub(1);
    idle.into_iter()
        .map(|c| {
            let reuse = common_prefix(c.cached, prompt).min(limit);
            (reuse, Some(c.index) == hint, c.last_used, c.index)
        })
        .max_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)).then(b.2.cmp(&a.2)))
        .map(|(reuse, _, _, index)| Choice { index, reuse })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(index: usize, cached: &[u32], last_used: u64) -> Candidate<'_, u32> {
        Candidate {
            index,
            cached,
            last_used,
        }
    }

    #[test]
    fn longest_prefix_wins() {
        let a = [1, 2, 3];
        let b = [1, 2, 9];
        let c = cand(0, &a, 5);
        let d = cand(1, &b, 1);
        let got = choose([d, c], &[1, 2, 3, 4]);
        assert_eq!(got, Some(Choice { index: 0, reuse: 3 }));
    }

    #[test]
    fn whole_prompt_cached_keeps_one_token_to_evaluate() {
        let a = [1, 2, 3, 4];
        let got = choose([cand(0, &a, 0)], &[1, 2, 3]);
        assert_eq!(got, Some(Choice { index: 0, reuse: 2 }));
    }

    #[test]
    fn no_match_takes_least_recently_used() {
        let a = [7];
        let b = [8];
        let got = choose([cand(0, &a, 9), cand(1, &b, 3)], &[1, 2]);
        assert_eq!(got, Some(Choice { index: 1, reuse: 0 }));
    }

    #[test]
    fn the_hint_breaks_ties_but_never_beats_a_longer_prefix() {
        let a = [7];
        let b = [8];
        let c = [1, 2];
        let idle = || [cand(0, &a, 9), cand(1, &b, 3), cand(2, &c, 5)];
        // A cold prompt: every idle slot reuses nothing, so the hint wins over LRU.
        let cold = [5, 6, 7];
        assert_eq!(
            choose_hinted(idle(), &cold, Some(0)),
            Some(Choice { index: 0, reuse: 0 })
        );
        assert_eq!(
            choose_hinted(idle(), &cold, None),
            Some(Choice { index: 1, reuse: 0 })
        );
        // A slot with a longer prefix wins over the hint.
        let warm = [1, 2, 3];
        assert_eq!(
            choose_hinted(idle(), &warm, Some(0)),
            Some(Choice { index: 2, reuse: 2 })
        );
        // A hint naming no idle slot changes nothing.
        assert_eq!(
            choose_hinted(idle(), &cold, Some(7)),
            Some(Choice { index: 1, reuse: 0 })
        );
    }

    #[test]
    fn no_idle_slot_gives_none() {
        assert_eq!(choose(Vec::<Candidate<'_, u32>>::new(), &[1]), None);
    }
}

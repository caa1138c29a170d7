//! Which slot a new request should run in.
//!
//! Both engines keep finished sequences resident so that a conversation's
//! next turn computes only what is new. A new request therefore takes:
//!
//! 1. an idle slot whose whole cached sequence is a prefix of the prompt (the
//!    conversation continues there, nothing cached is lost), the longest one;
//! 2. otherwise the idle slot that loses least: an empty one, then the one the
//!    head suggested, then one beside a running slot (see [`beside_running`]),
//!    then the least recently used. Its own common prefix
//!    with the prompt is kept, and the caller may copy a longer prefix from
//!    another slot (see [`donor`]) rather than cut into that slot's sequence.
//!
//! So a new conversation that shares only a system prompt, or a template's
//! first few tokens, with a resident one never overwrites it while a slot
//! holding less is idle.

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
    /// Whether a neighbouring slot is running (see [`beside_running`]).
    pub beside_running: bool,
}

/// Whether a slot next to `index` is running. Each slot is its own KV
/// stream, and llama.cpp computes neighbouring streams in one pass over the
/// weights: a generation beside a running one joins its pass, while one
/// across an idle slot costs a second pass every step.
pub fn beside_running(index: usize, running: impl Fn(usize) -> bool) -> bool {
    (index > 0 && running(index - 1)) || running(index + 1)
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

/// [`choose_hinted`] without a hint.
pub fn choose<'a, T: PartialEq + 'a>(
    idle: impl IntoIterator<Item = Candidate<'a, T>>,
    prompt: &[T],
) -> Option<Choice> {
    choose_hinted(idle, prompt, None)
}

/// Picks the idle slot for `prompt` as the module explains; `hint` is the
/// slot the head expects to hold the prompt's prefix, preferred among equals.
/// Returns `None` when there is no idle slot.
pub fn choose_hinted<'a, T: PartialEq + 'a>(
    idle: impl IntoIterator<Item = Candidate<'a, T>>,
    prompt: &[T],
    hint: Option<usize>,
) -> Option<Choice> {
    let limit = prompt.len().saturating_sub(1);
    let scored: Vec<_> = idle
        .into_iter()
        .map(|c| {
            let reuse = common_prefix(c.cached, prompt).min(limit);
            // Nothing cached is lost: the prompt extends the whole sequence
            // (or is the sequence itself, when asked again).
            let continues = !c.cached.is_empty() && reuse >= c.cached.len().min(limit);
            (c, reuse, continues)
        })
        .collect();
    let hinted = |c: &Candidate<'_, T>| Some(c.index) == hint;
    let continuation = scored.iter().filter(|s| s.2).max_by(|a, b| {
        a.1.cmp(&b.1)
            .then(hinted(&a.0).cmp(&hinted(&b.0)))
            .then(b.0.last_used.cmp(&a.0.last_used))
    });
    let (c, reuse, _) = match continuation {
        Some(best) => best,
        None => scored.iter().max_by(|a, b| {
            a.0.cached
                .is_empty()
                .cmp(&b.0.cached.is_empty())
                .then(hinted(&a.0).cmp(&hinted(&b.0)))
                .then(a.0.beside_running.cmp(&b.0.beside_running))
                .then(b.0.last_used.cmp(&a.0.last_used))
        })?,
    };
    Some(Choice {
        index: c.index,
        reuse: *reuse,
    })
}

/// The fewest prompt tokens a copy from another slot must save to be made,
/// with `ctx` tokens per slot. With one KV stream per slot, llama.cpp copies
/// between streams only whole, so a copy costs as much for 3 tokens as for
/// 3000: at 2048 tokens per slot, about what 4 prompt tokens of the default
/// model take to compute on 2 CPU cores (about 17 ms, measured 2026-12-04).
/// Within one shared KV cache a copy only relabels cells, so any gain pays.
pub fn min_copy_gain(ctx: usize, shared_kv: bool) -> usize {
    if shared_kv {
        1
    } else {
        (ctx / 512).max(1)
    }
}

/// Among `slots` (index and cached tokens, any state), the one other than
/// `target` sharing the longest prefix with `prompt`, if longer than `beat`:
/// its index and the prefix length (at most the prompt's length minus one).
pub fn donor<'a, T: PartialEq + 'a>(
    slots: impl IntoIterator<Item = (usize, &'a [T])>,
    target: usize,
    prompt: &[T],
    beat: usize,
) -> Option<(usize, usize)> {
    let limit = prompt.len().saturating_sub(1);
    slots
        .into_iter()
        .filter(|&(i, _)| i != target)
        .map(|(i, cached)| (i, common_prefix(cached, prompt).min(limit)))
        .filter(|&(_, len)| len > beat)
        .max_by_key(|&(_, len)| len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(index: usize, cached: &[u32], last_used: u64) -> Candidate<'_, u32> {
        Candidate {
            index,
            cached,
            last_used,
            beside_running: false,
        }
    }

    #[test]
    fn a_new_conversation_joins_the_running_slots_pass_before_taking_the_oldest() {
        let (a, b) = ([1, 2], [3, 4]);
        let beside = Candidate {
            beside_running: true,
            ..cand(2, &b, 9)
        };
        let got = choose([cand(0, &a, 1), beside], &[7, 8]);
        assert_eq!(got, Some(Choice { index: 2, reuse: 0 }));
        // A reusable prefix still wins.
        let got = choose([cand(0, &a, 1), beside], &[1, 2, 9]);
        assert_eq!(got, Some(Choice { index: 0, reuse: 2 }));
    }

    #[test]
    fn only_a_slot_next_to_a_running_one_is_beside_it() {
        let running = |i: usize| i == 1;
        let beside: Vec<bool> = (0..4).map(|i| beside_running(i, running)).collect();
        assert_eq!(beside, [true, false, true, false]);
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
    fn a_new_conversation_never_overwrites_a_resident_one_while_an_empty_slot_is_idle() {
        // Slot 0 holds a conversation sharing its first tokens (a template)
        // with the new prompt; slot 1 is empty.
        let conversation = [1, 2, 3, 4, 5, 6];
        let empty: [u32; 0] = [];
        let got = choose(
            [cand(0, &conversation, 5), cand(1, &empty, 0)],
            &[1, 2, 9, 9],
        );
        assert_eq!(got, Some(Choice { index: 1, reuse: 0 }));
        // Its next turn goes back to slot 0 and keeps all of it.
        let next = [1, 2, 3, 4, 5, 6, 7, 8];
        let got = choose([cand(0, &conversation, 5), cand(1, &empty, 0)], &next);
        assert_eq!(got, Some(Choice { index: 0, reuse: 6 }));
    }

    #[test]
    fn a_copy_between_streams_must_save_more_the_larger_the_stream() {
        assert_eq!(min_copy_gain(512, false), 1);
        assert_eq!(min_copy_gain(2048, false), 4);
        assert_eq!(min_copy_gain(4096, false), 8);
        assert_eq!(min_copy_gain(100, false), 1);
        // Within one shared cache a copy is cheap at any size.
        assert_eq!(min_copy_gain(4096, true), 1);
        // A donor 3 tokens ahead is not copied at 4096 tokens per slot.
        let beat = min_copy_gain(4096, false) - 1;
        let cached: [&[u32]; 2] = [&[1, 2, 3, 4], &[]];
        let slots = || cached.iter().enumerate().map(|(i, c)| (i, *c));
        assert_eq!(donor(slots(), 1, &[1, 2, 3, 4, 5], beat), None);
        assert_eq!(donor(slots(), 1, &[1, 2, 3, 4, 5], 0), Some((0, 4)));
    }

    #[test]
    fn the_donor_is_the_longest_prefix_in_another_slot() {
        let a = [1, 2, 3, 4];
        let b = [1, 2];
        let slots = || [(0, &a[..]), (1, &b[..])];
        assert_eq!(donor(slots(), 1, &[1, 2, 3, 9], 0), Some((0, 3)));
        assert_eq!(donor(slots(), 0, &[1, 2, 3, 9], 0), Some((1, 2)));
        assert_eq!(donor(slots(), 1, &[1, 2, 3, 9], 3), None);
        // At least one prompt token is left to compute.
        assert_eq!(donor(slots(), 1, &[1, 2, 3], 0), Some((0, 2)));
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

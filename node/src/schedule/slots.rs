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
mod tests;

//! Prompts that arrive together and share a prefix prefill it once: the
//! later ones wait for the first to compute it, then copy it.

use super::{job, outcome, run_all, scheduler, step, Op, Recorder};

/// Prompt tokens fed to `slot` over every batch so far.
fn fed_to(b: &Recorder, slot: usize) -> usize {
    b.batches
        .iter()
        .flatten()
        .filter(|f| f.slot == slot)
        .count()
}

#[test]
fn the_same_prompt_sent_three_times_at_once_is_prefilled_once() {
    let (mut s, mut b) = (scheduler(3, 4), Recorder::default());
    let prompt: Vec<u32> = (1..=40).collect();
    let (a, mut a_rx) = job(&prompt, 2, Some(0));
    let (c, mut c_rx) = job(&prompt, 2, Some(1));
    let (d, mut d_rx) = job(&prompt, 2, Some(2));
    s.push(a);
    s.push(c);
    s.push(d);
    run_all(&mut s, &mut b);
    assert_eq!(outcome(&mut a_rx).cached_tokens, 0);
    assert_eq!(outcome(&mut c_rx).cached_tokens, 39);
    assert_eq!(outcome(&mut d_rx).cached_tokens, 39);
    for to in [1, 2] {
        let copied = b
            .ops
            .iter()
            .any(|op| matches!(op, Op::Copy { to: t, len: 39, .. } if *t == to));
        assert!(copied, "{:?}", b.ops);
    }
    // The first computes all 40 (and feeds its one generated token); the
    // others their last prompt token and their generated one.
    assert_eq!(fed_to(&b, 0), 41);
    assert_eq!(fed_to(&b, 1), 2);
    assert_eq!(fed_to(&b, 2), 2);
}

#[test]
fn a_shared_system_prompt_is_waited_for_only_until_it_is_computed() {
    let (mut s, mut b) = (scheduler(2, 4), Recorder::default());
    let first: Vec<u32> = (1..=40).collect();
    let mut second: Vec<u32> = (1..=20).collect();
    second.extend(100..110);
    let (a, _a_rx) = job(&first, 1, Some(0));
    let (c, mut c_rx) = job(&second, 1, Some(1));
    s.push(a);
    s.push(c);
    // Chunks of 16: after two steps the first prompt has 32 computed, past
    // the 20 they share, and the second starts from a copy of those.
    step(&mut s, &mut b);
    step(&mut s, &mut b);
    assert_eq!(fed_to(&b, 1), 0);
    step(&mut s, &mut b);
    assert!(b.ops.contains(&Op::Copy {
        from: 0,
        to: 1,
        len: 20
    }));
    run_all(&mut s, &mut b);
    assert_eq!(outcome(&mut c_rx).cached_tokens, 20);
}

#[test]
fn a_prompt_sharing_less_than_a_copy_saves_does_not_wait() {
    let (mut s, mut b) = (scheduler(2, 4), Recorder::default());
    let first: Vec<u32> = (1..=40).collect();
    let (a, _a_rx) = job(&first, 1, Some(0));
    let (c, mut c_rx) = job(&[1, 2, 3, 70, 71, 72], 1, Some(1));
    s.push(a);
    s.push(c);
    // The first prompt takes each step's whole budget until its last 8
    // tokens; the second, admitted at once, is fed beside them.
    step(&mut s, &mut b);
    step(&mut s, &mut b);
    step(&mut s, &mut b);
    assert_eq!(fed_to(&b, 1), 6);
    run_all(&mut s, &mut b);
    assert_eq!(outcome(&mut c_rx).cached_tokens, 0);
}

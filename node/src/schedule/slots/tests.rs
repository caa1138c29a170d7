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

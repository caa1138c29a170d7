//! What the real engine reports to its ledger: block hashes of exactly the
//! tokens in each slot's KV cache, the slot hint, and measured rates.

use superfluid_proto::{block_hashes, model_seed, FinishReason, GenerateRequest, KvEvent};

use super::{engine, greedy, run, PROMPTS};
use crate::engine::Engine;

fn hinted(text: &str, max_tokens: u32, slot: u32) -> GenerateRequest {
    GenerateRequest {
        slot: Some(slot),
        ..greedy(text, max_tokens)
    }
}

/// The tokens a finished generation left in its slot's KV cache: all but a
/// last token that hit the length limit (it was never fed back).
fn cached(prompt: &[u32], generated: &[u32], finish: FinishReason) -> Vec<u32> {
    let mut all: Vec<u32> = prompt.iter().chain(generated).copied().collect();
    if finish == FinishReason::Length {
        all.pop();
    }
    all
}

#[test]
fn the_ledger_mirrors_the_kv_cache_and_the_hint_picks_the_slot() {
    let engine = engine(2, 1024, 64);
    let ledger = engine.ledger().clone();
    let seed = model_seed(&engine.info().model.id);
    assert_eq!(ledger.seed(), seed);
    let text = PROMPTS.join(" ").repeat(3);

    // A cold prompt goes to the hinted slot (without a hint, ties go to slot 1).
    let first = hinted(&text, 40, 0);
    assert!(first.prompt.len() >= 3 * 32, "{}", first.prompt.len());
    let (generated, outcome) = run(&engine, first.clone());
    let kept = cached(&first.prompt, &generated, outcome.finish);
    let chains = ledger.chains();
    assert_eq!(chains[0], block_hashes(seed, &kept));
    assert!(chains[0].starts_with(&block_hashes(seed, &first.prompt)));
    assert!(chains[1].is_empty());

    // The head sees the whole state, then only what changes.
    let snapshot = ledger.snapshot();
    assert_eq!(snapshot.events[0], KvEvent::Cleared { slot: 0 });
    assert!(ledger.take().is_none());

    // The conversation's next turn (its prompt, answer and more), hinted to
    // the same slot, continues there.
    let mut next: Vec<u32> = first.prompt.iter().chain(&generated).copied().collect();
    next.extend_from_slice(&first.prompt[..20]);
    let follow = GenerateRequest {
        prompt: next,
        ..hinted(&text, 8, 0)
    };
    let (generated, outcome) = run(&engine, follow.clone());
    assert_eq!(outcome.cached_tokens as usize, kept.len(), "{outcome:?}");
    let kept_now = cached(&follow.prompt, &generated, outcome.finish);
    assert_eq!(ledger.chains()[0], block_hashes(seed, &kept_now));
    let update = ledger.take().expect("the follow-up changed slot 0");
    let mut chain = chains[0].clone();
    for event in update.events {
        match event {
            KvEvent::Stored { slot: 0, blocks } => chain.extend(blocks),
            KvEvent::Removed { slot: 0, blocks } => {
                assert!(chain.ends_with(&blocks));
                chain.truncate(chain.len() - blocks.len());
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(chain, ledger.chains()[0]);

    // Another conversation sharing only the first 64 tokens takes the empty
    // slot, with that prefix copied, and leaves slot 0's conversation whole.
    let before = ledger.chains()[0].clone();
    let mut branch = first.prompt[..64].to_vec();
    branch.extend_from_slice(&first.prompt[70..100]);
    let other = GenerateRequest {
        prompt: branch.clone(),
        ..greedy(&text, 4)
    };
    let (generated, outcome) = run(&engine, other);
    assert_eq!(outcome.cached_tokens, 64, "{outcome:?}");
    let chains = ledger.chains();
    assert_eq!(chains[0], before, "slot 0 must keep its conversation");
    assert_eq!(
        chains[1],
        block_hashes(seed, &cached(&branch, &generated, outcome.finish))
    );

    // Several chunked prefill steps and decode steps were timed; the load is
    // set right after the step that finished the generation.
    let start = std::time::Instant::now();
    while ledger.load_report().running != 0 {
        assert!(start.elapsed().as_secs() < 5, "the slot never went idle");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let load = ledger.load_report();
    assert!(load.prefill_tokens_per_sec > 0.0, "{load:?}");
    assert!(load.decode_tokens_per_sec > 0.0, "{load:?}");
    assert_eq!((load.queued, load.queued_prompt_tokens), (0, 0));
}

#[test]
fn a_prefix_copied_from_a_running_slot_is_reported_for_the_new_slot() {
    let engine = engine(2, 1024, 512);
    let ledger = engine.ledger().clone();
    let seed = ledger.seed();
    let prefix = PROMPTS.join(" ").repeat(3);
    let mut running = engine
        .submit(hinted(&format!("{prefix} Tell me a long story."), 300, 0))
        .expect("submit");
    assert!(matches!(
        running.events.blocking_recv(),
        Some(superfluid_proto::GenerateEvent::Tokens(_))
    ));
    let req = hinted(&format!("{prefix} Name a planet."), 4, 1);
    let (generated, outcome) = run(&engine, req.clone());
    drop(running);
    assert!(outcome.cached_tokens >= 3 * 32, "{outcome:?}");
    let kept = cached(&req.prompt, &generated, outcome.finish);
    assert_eq!(ledger.chains()[1], block_hashes(seed, &kept));
}

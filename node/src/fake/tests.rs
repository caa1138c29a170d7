use std::time::{Duration, Instant};

use superfluid_proto::{
    block_hashes, model_seed, FinishReason, GenerateEvent, GenerateRequest, KvEvent,
    ModelDescription, Outcome, Sampling,
};

use super::{FakeCosts, FakeEngine};
use crate::engine::{Engine, EngineError, Generation};

const FAST: FakeCosts = FakeCosts {
    prefill_tokens_per_sec: 1e6,
    decode_tokens_per_sec: 1e5,
};

fn engine(slots: u32, ctx: u32, costs: FakeCosts) -> FakeEngine {
    FakeEngine::new(
        ModelDescription {
            id: "fake".into(),
            ctx,
            slots,
            sha256: String::new(),
        },
        costs,
    )
}

fn request(prompt: Vec<u32>, max_tokens: u32) -> GenerateRequest {
    GenerateRequest {
        model: "fake".into(),
        prompt,
        sampling: Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        max_tokens,
        slot: None,
    }
}

fn collect(mut generation: Generation) -> (Vec<u32>, Outcome) {
    let mut tokens = Vec::new();
    while let Some(event) = generation.events.blocking_recv() {
        match event {
            GenerateEvent::Tokens(t) => tokens.extend(t),
            GenerateEvent::Finished(outcome) => return (tokens, outcome),
            GenerateEvent::Failed { message, .. } => panic!("failed: {message}"),
        }
    }
    panic!("no final event");
}

fn run(engine: &FakeEngine, req: GenerateRequest) -> (Vec<u32>, Outcome) {
    collect(engine.submit(req).expect("submit"))
}

#[test]
fn same_prompt_gives_same_tokens_and_reuses_the_cache() {
    let engine = engine(2, 256, FAST);
    let (first, cold) = run(&engine, request(vec![1, 2, 3, 4], 8));
    let (second, warm) = run(&engine, request(vec![1, 2, 3, 4], 8));
    assert_eq!(first, second);
    assert_eq!(first.len(), 8);
    assert_eq!(cold.cached_tokens, 0);
    assert_eq!(warm.cached_tokens, 3);
}

#[test]
fn shared_prefix_is_reported_and_output_matches_a_cold_engine() {
    let warm = engine(2, 256, FAST);
    run(&warm, request(vec![5, 6, 7, 8, 9], 4));
    let (warm_tokens, outcome) = run(&warm, request(vec![5, 6, 7, 1], 4));
    assert_eq!(outcome.cached_tokens, 3);
    let (cold_tokens, _) = run(&engine(1, 256, FAST), request(vec![5, 6, 7, 1], 4));
    assert_eq!(warm_tokens, cold_tokens);
}

#[test]
fn prefill_and_decode_take_the_modelled_time() {
    let costs = FakeCosts {
        prefill_tokens_per_sec: 2000.0,
        decode_tokens_per_sec: 100.0,
    };
    let engine = engine(1, 1024, costs);
    let start = Instant::now();
    run(&engine, request(vec![3; 400], 1));
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "{:?}",
        start.elapsed()
    );
    let start = Instant::now();
    run(&engine, request(vec![4; 1], 20));
    assert!(
        start.elapsed() >= Duration::from_millis(190),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn slots_decode_together_and_extra_requests_queue() {
    let costs = FakeCosts {
        prefill_tokens_per_sec: 1e6,
        decode_tokens_per_sec: 100.0,
    };
    let engine = engine(2, 256, costs);
    let start = Instant::now();
    let both: Vec<_> = (0..2)
        .map(|i| engine.submit(request(vec![i, 9], 30)).expect("submit"))
        .collect();
    let queued = engine.submit(request(vec![7, 9], 30)).expect("submit");
    for generation in both {
        assert_eq!(collect(generation).0.len(), 30);
    }
    let batched = start.elapsed();
    // Two streams share each step: ~0.3 s, not 0.6 s.
    assert!(batched < Duration::from_millis(550), "{batched:?}");
    assert_eq!(collect(queued).0.len(), 30);
    assert!(
        start.elapsed() >= Duration::from_millis(580),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn dropping_a_generation_frees_its_slot() {
    let engine = engine(
        1,
        4096,
        FakeCosts {
            prefill_tokens_per_sec: 1e6,
            decode_tokens_per_sec: 1000.0,
        },
    );
    let mut long = engine.submit(request(vec![1], 4000)).expect("submit");
    assert!(matches!(
        long.events.blocking_recv(),
        Some(GenerateEvent::Tokens(_))
    ));
    drop(long);
    let start = Instant::now();
    let (tokens, _) = run(&engine, request(vec![2], 3));
    assert_eq!(tokens.len(), 3);
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn bad_requests_are_refused() {
    let engine = engine(1, 8, FAST);
    assert!(matches!(
        engine.submit(request(vec![], 1)),
        Err(EngineError::EmptyPrompt)
    ));
    assert!(matches!(
        engine.submit(request(vec![1; 8], 1)),
        Err(EngineError::TooLong { len: 8, max: 8 })
    ));
    let mut other = request(vec![1], 1);
    other.model = "other".into();
    assert!(matches!(
        engine.submit(other),
        Err(EngineError::UnknownModel { .. })
    ));
}

#[test]
fn max_tokens_and_a_full_context_end_with_length() {
    let engine = engine(1, 8, FAST);
    let (tokens, outcome) = run(&engine, request(vec![1, 2], 3));
    assert_eq!((tokens.len(), outcome.finish), (3, FinishReason::Length));
    let (tokens, outcome) = run(&engine, request(vec![1, 2], 100));
    assert_eq!((tokens.len(), outcome.finish), (6, FinishReason::Length));
}

#[test]
fn seeds_change_sampled_tokens_reproducibly() {
    let engine = engine(1, 64, FAST);
    let sampled = |seed| {
        let mut req = request(vec![1, 2], 8);
        req.sampling = Sampling {
            temperature: 1.0,
            seed,
            ..Sampling::default()
        };
        req
    };
    let a = run(&engine, sampled(1)).0;
    assert_eq!(a, run(&engine, sampled(1)).0);
    assert_ne!(a, run(&engine, sampled(2)).0);
}

fn hinted(prompt: Vec<u32>, max_tokens: u32, slot: u32) -> GenerateRequest {
    GenerateRequest {
        slot: Some(slot),
        ..request(prompt, max_tokens)
    }
}

#[test]
fn the_ledger_holds_the_hashes_of_each_slots_cached_blocks() {
    let engine = engine(2, 512, FAST);
    let ledger = engine.ledger().clone();
    let prompt: Vec<u32> = (0..90).map(|i| i * 7 + 3).collect();
    let (generated, outcome) = run(&engine, hinted(prompt.clone(), 10, 1));
    assert_eq!(outcome.finish, FinishReason::Length);
    // The last generated token was never fed back, so it is not cached.
    let all: Vec<u32> = prompt.iter().chain(&generated).copied().collect();
    let cached = &all[..all.len() - 1];
    let chains = ledger.chains();
    assert!(chains[0].is_empty());
    assert_eq!(chains[1], block_hashes(model_seed("fake"), cached));
    assert_eq!(chains[1].len(), 3);
    assert_eq!(engine.resident()[1], cached);

    // The whole state, then nothing stale; a shorter prompt sharing one block
    // trims the chain and reports exactly that.
    let snapshot = ledger.snapshot();
    assert_eq!(snapshot.events.len(), 3, "{:?}", snapshot.events);
    assert!(ledger.take().is_none());
    let (_, outcome) = run(&engine, request(prompt[..40].to_vec(), 1));
    assert_eq!(outcome.cached_tokens, 39);
    let update = ledger.take().expect("the trim is reported");
    assert_eq!(
        update.events[0],
        KvEvent::Removed {
            slot: 1,
            blocks: chains[1][1..].to_vec()
        }
    );
    assert_eq!(ledger.chains()[1], chains[1][..1]);
}

#[test]
fn the_slot_hint_breaks_ties_but_a_longer_cached_prefix_wins() {
    let engine = engine(3, 256, FAST);
    // Cold prompts: the hinted slot takes them.
    run(&engine, hinted(vec![1, 2, 3, 4], 2, 2));
    assert_eq!(engine.resident()[2][..4], [1, 2, 3, 4]);
    run(&engine, hinted(vec![9, 8, 7], 2, 0));
    assert_eq!(engine.resident()[0][..3], [9, 8, 7]);
    // Slot 2 holds a prefix of this prompt: it wins over the hint.
    let (_, outcome) = run(&engine, hinted(vec![1, 2, 3, 5], 2, 1));
    assert_eq!(outcome.cached_tokens, 3);
    assert_eq!(engine.resident()[2][..4], [1, 2, 3, 5]);
    // A hint naming no slot is ignored.
    let (tokens, _) = run(&engine, hinted(vec![6], 2, 99));
    assert_eq!(tokens.len(), 2);
}

/// Polls `done` every millisecond for up to five seconds.
fn wait_for(done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(5), "timed out");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn resident_shows_an_admitted_prompt_before_it_is_prefilled() {
    let slow = FakeCosts {
        prefill_tokens_per_sec: 100.0,
        decode_tokens_per_sec: 1e5,
    };
    let engine = engine(1, 512, slow);
    let prompt: Vec<u32> = (0..50).collect();
    let generation = engine.submit(request(prompt.clone(), 1)).expect("submit");
    wait_for(|| engine.resident()[0] == prompt);
    // Mid-prefill (0.5 s): nothing is cached yet, and the load says so.
    wait_for(|| engine.ledger().load_report().running == 1);
    assert!(engine.ledger().chains()[0].is_empty());
    assert_eq!(engine.ledger().load_report().queued_prompt_tokens, 50);
    collect(generation);
    assert_eq!(engine.resident()[0], prompt);
    wait_for(|| engine.ledger().load_report().running == 0);
    let load = engine.ledger().load_report();
    assert_eq!((load.queued, load.queued_prompt_tokens), (0, 0));
    assert!(
        (load.prefill_tokens_per_sec - 100.0).abs() < 1.0,
        "{load:?}"
    );
}

#[test]
fn decode_steps_set_the_decode_rate() {
    let costs = FakeCosts {
        prefill_tokens_per_sec: 1e6,
        decode_tokens_per_sec: 500.0,
    };
    let engine = engine(1, 256, costs);
    run(&engine, request(vec![1, 2, 3], 5));
    let load = engine.ledger().load_report();
    assert!((load.decode_tokens_per_sec - 500.0).abs() < 1.0, "{load:?}");
    assert!(load.prefill_tokens_per_sec > 0.0);
}

/// Seconds from submitting to the first token.
fn first_token_after(mut generation: Generation, sent: Instant) -> Duration {
    while let Some(event) = generation.events.blocking_recv() {
        if let GenerateEvent::Tokens(_) = event {
            return sent.elapsed();
        }
    }
    panic!("no token");
}

#[test]
fn prompts_are_computed_in_the_order_they_arrived() {
    // 20 ms per 512-token chunk.
    let costs = FakeCosts {
        prefill_tokens_per_sec: 25_600.0,
        decode_tokens_per_sec: 1e5,
    };
    let engine = engine(2, 4096, costs);
    // Two finished conversations: the older in slot 1, the newer in slot
    // 0. A long prompt then takes slot 1, the least recently used, and the
    // newer conversation's next turn, sent just after it, slot 0.
    run(&engine, request((100..164).collect(), 1));
    let conversation: Vec<u32> = (1..=64).collect();
    run(&engine, request(conversation.clone(), 1));
    let long: Vec<u32> = (10_000..12_000).collect();
    let sent = Instant::now();
    let first = engine.submit(request(long, 1)).expect("submit");
    let mut next_turn = conversation;
    next_turn.extend(20_000..20_600);
    let second = engine.submit(request(next_turn, 1)).expect("submit");
    let (first, second) = (
        std::thread::spawn(move || first_token_after(first, sent)),
        std::thread::spawn(move || first_token_after(second, sent)),
    );
    let (first, second) = (first.join().unwrap(), second.join().unwrap());
    // First come, first served: the 2000-token prompt (4 chunks) is done
    // before the later 600 tokens (2 chunks) in the lower slot.
    assert!(first < second, "{first:?} vs {second:?}");
}

#[test]
fn a_busy_engine_makes_up_for_sleeps_that_overshoot() {
    let ms = Duration::from_millis;
    let t0 = Instant::now();
    let step = ms(1);
    // Idle before: the step starts now.
    assert_eq!(super::sim::step_end(None, t0, step), t0 + step);
    // Woke 0.3 ms after the last step ended: the next ends 1 ms after that
    // end, not after the late wake, so steps keep their modelled rate.
    let late = t0 + Duration::from_micros(300);
    assert_eq!(super::sim::step_end(Some(t0), late, step), t0 + step);
    // Kept off the CPU for longer than the catch-up limit: the time is lost.
    let stalled = t0 + ms(50);
    assert_eq!(
        super::sim::step_end(Some(t0), stalled, step),
        stalled + step
    );
}

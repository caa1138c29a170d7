use std::time::{Duration, Instant};

use superfluid_proto::{
    FinishReason, GenerateEvent, GenerateRequest, ModelDescription, Outcome, Sampling,
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
    }
}

fn collect(mut generation: Generation) -> (Vec<u32>, Outcome) {
    let mut tokens = Vec::new();
    while let Some(event) = generation.events.blocking_recv() {
        match event {
            GenerateEvent::Tokens(t) => tokens.extend(t),
            GenerateEvent::Finished(outcome) => return (tokens, outcome),
            GenerateEvent::Failed { message } => panic!("failed: {message}"),
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

use std::time::Duration;

use tokio::time::Instant;

use superfluid_proto::{
    block_hashes, model_seed, Constraint, FailureKind, FinishReason, GenerateEvent,
    GenerateRequest, KvEvent, ModelDescription, Outcome, Sampling,
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
            ..Default::default()
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
        constraint: None,
        logprobs: None,
    }
}

async fn collect(mut generation: Generation) -> (Vec<u32>, Outcome) {
    let mut tokens = Vec::new();
    while let Some(event) = generation.events.recv().await {
        match event {
            GenerateEvent::Tokens(t) => tokens.extend(t),
            GenerateEvent::Logprobs(_) => {}
            GenerateEvent::Finished(outcome) => return (tokens, outcome),
            GenerateEvent::Failed { message, .. } => panic!("failed: {message}"),
        }
    }
    panic!("no final event");
}

async fn run(engine: &FakeEngine, req: GenerateRequest) -> (Vec<u32>, Outcome) {
    collect(engine.submit(req).expect("submit")).await
}

#[tokio::test(start_paused = true)]
async fn same_prompt_gives_same_tokens_and_reuses_the_cache() {
    let engine = engine(2, 256, FAST);
    let (first, cold) = run(&engine, request(vec![1, 2, 3, 4], 8)).await;
    let (second, warm) = run(&engine, request(vec![1, 2, 3, 4], 8)).await;
    assert_eq!(first, second);
    assert_eq!(first.len(), 8);
    assert_eq!(cold.cached_tokens, 0);
    assert_eq!(warm.cached_tokens, 3);
}

#[tokio::test(start_paused = true)]
async fn shared_prefix_is_reported_and_output_matches_a_cold_engine() {
    let warm = engine(2, 256, FAST);
    run(&warm, request(vec![5, 6, 7, 8, 9], 4)).await;
    let (warm_tokens, outcome) = run(&warm, request(vec![5, 6, 7, 1], 4)).await;
    assert_eq!(outcome.cached_tokens, 3);
    let (cold_tokens, _) = run(&engine(1, 256, FAST), request(vec![5, 6, 7, 1], 4)).await;
    assert_eq!(warm_tokens, cold_tokens);
}

#[tokio::test(start_paused = true)]
async fn prefill_and_decode_take_the_modelled_time() {
    let costs = FakeCosts {
        prefill_tokens_per_sec: 2000.0,
        decode_tokens_per_sec: 100.0,
    };
    let engine = engine(1, 1024, costs);
    // 400 prompt tokens at 2000 per second, and the first token with them.
    let start = Instant::now();
    run(&engine, request(vec![3; 400], 1)).await;
    assert_eq!(start.elapsed(), ms(200));
    // A one-token prompt decodes at once: 20 steps of 10 ms.
    let start = Instant::now();
    run(&engine, request(vec![4; 1], 20)).await;
    assert_eq!(start.elapsed(), ms(200));
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn slots_decode_together_and_extra_requests_queue() {
    let costs = FakeCosts {
        prefill_tokens_per_sec: 1000.0,
        decode_tokens_per_sec: 100.0,
    };
    let engine = engine(2, 256, costs);
    let start = Instant::now();
    let both: Vec<_> = (0..2)
        .map(|i| engine.submit(request(vec![i, 9], 30)).expect("submit"))
        .collect();
    let queued = engine.submit(request(vec![7, 9], 30)).expect("submit");
    for generation in both {
        assert_eq!(collect(generation).await.0.len(), 30);
    }
    // Two streams share each step: both prompts (4 ms) then 29 steps of
    // 10 ms, not twice that.
    assert_eq!(start.elapsed(), ms(4 + 290));
    // The third waited for a slot, then ran alone: 2 ms, then 29 steps.
    assert_eq!(collect(queued).await.0.len(), 30);
    assert_eq!(start.elapsed(), ms(4 + 290 + 2 + 290));
}

#[tokio::test(start_paused = true)]
async fn dropping_a_generation_frees_its_slot() {
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
        long.events.recv().await,
        Some(GenerateEvent::Tokens(_))
    ));
    drop(long);
    // The step under way ends, then the next request takes the freed slot:
    // three steps of 1 ms.
    let start = Instant::now();
    let (tokens, _) = run(&engine, request(vec![2], 3)).await;
    assert_eq!(tokens.len(), 3);
    assert_eq!(start.elapsed(), ms(1 + 3));
    assert_eq!(engine.resident()[0][..1], [2]);
}

#[tokio::test(start_paused = true)]
async fn bad_requests_are_refused() {
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

#[tokio::test(start_paused = true)]
async fn max_tokens_and_a_full_context_end_with_length() {
    let engine = engine(1, 8, FAST);
    let (tokens, outcome) = run(&engine, request(vec![1, 2], 3)).await;
    assert_eq!((tokens.len(), outcome.finish), (3, FinishReason::Length));
    let (tokens, outcome) = run(&engine, request(vec![1, 2], 100)).await;
    assert_eq!((tokens.len(), outcome.finish), (6, FinishReason::Length));
}

#[tokio::test(start_paused = true)]
async fn seeds_change_sampled_tokens_reproducibly() {
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
    let a = run(&engine, sampled(1)).await.0;
    assert_eq!(a, run(&engine, sampled(1)).await.0);
    assert_ne!(a, run(&engine, sampled(2)).await.0);
}

fn hinted(prompt: Vec<u32>, max_tokens: u32, slot: u32) -> GenerateRequest {
    GenerateRequest {
        slot: Some(slot),
        ..request(prompt, max_tokens)
    }
}

#[tokio::test(start_paused = true)]
async fn the_ledger_holds_the_hashes_of_each_slots_cached_blocks() {
    let engine = engine(2, 512, FAST);
    let ledger = engine.ledger().clone();
    let prompt: Vec<u32> = (0..90).map(|i| i * 7 + 3).collect();
    let (generated, outcome) = run(&engine, hinted(prompt.clone(), 10, 1)).await;
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
    let (_, outcome) = run(&engine, request(prompt[..40].to_vec(), 1)).await;
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

#[tokio::test(start_paused = true)]
async fn the_slot_hint_breaks_ties_but_a_longer_cached_prefix_wins() {
    let engine = engine(3, 256, FAST);
    // Cold prompts: the hinted slot takes them.
    run(&engine, hinted(vec![1, 2, 3, 4], 2, 2)).await;
    assert_eq!(engine.resident()[2][..4], [1, 2, 3, 4]);
    run(&engine, hinted(vec![9, 8, 7], 2, 0)).await;
    assert_eq!(engine.resident()[0][..3], [9, 8, 7]);
    // Slot 2 holds a prefix of this prompt: it wins over the hint.
    let (_, outcome) = run(&engine, hinted(vec![1, 2, 3, 5], 2, 1)).await;
    assert_eq!(outcome.cached_tokens, 3);
    assert_eq!(engine.resident()[2][..4], [1, 2, 3, 5]);
    // A hint naming no slot is ignored.
    let (tokens, _) = run(&engine, hinted(vec![6], 2, 99)).await;
    assert_eq!(tokens.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn resident_shows_an_admitted_prompt_before_it_is_prefilled() {
    let slow = FakeCosts {
        prefill_tokens_per_sec: 100.0,
        decode_tokens_per_sec: 1e5,
    };
    let engine = engine(1, 512, slow);
    let prompt: Vec<u32> = (0..50).collect();
    let generation = engine.submit(request(prompt.clone(), 1)).expect("submit");
    // 1 ms into a prefill of 0.5 s: admitted, nothing cached yet, and the
    // load says so.
    tokio::time::sleep(ms(1)).await;
    assert_eq!(engine.resident()[0], prompt);
    let load = engine.ledger().load_report();
    assert_eq!((load.running, load.queued_prompt_tokens), (1, 50));
    assert!(engine.ledger().chains()[0].is_empty());
    collect(generation).await;
    assert_eq!(engine.resident()[0], prompt);
    let load = engine.ledger().load_report();
    assert_eq!(
        (load.running, load.queued, load.queued_prompt_tokens),
        (0, 0, 0)
    );
    assert!(
        (load.prefill_tokens_per_sec - 100.0).abs() < 1e-9,
        "{load:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn decode_steps_set_the_decode_rate() {
    let costs = FakeCosts {
        prefill_tokens_per_sec: 1e6,
        decode_tokens_per_sec: 500.0,
    };
    let engine = engine(1, 256, costs);
    run(&engine, request(vec![1, 2, 3], 5)).await;
    let load = engine.ledger().load_report();
    assert!((load.decode_tokens_per_sec - 500.0).abs() < 1.0, "{load:?}");
    assert!(load.prefill_tokens_per_sec > 0.0);
}

/// Time from `sent` to the first token.
async fn first_token_after(mut generation: Generation, sent: Instant) -> Duration {
    while let Some(event) = generation.events.recv().await {
        if let GenerateEvent::Tokens(_) = event {
            return sent.elapsed();
        }
    }
    panic!("no token");
}

#[tokio::test(start_paused = true)]
async fn prompts_are_computed_in_the_order_they_arrived() {
    // 20 ms per 512-token chunk.
    let costs = FakeCosts {
        prefill_tokens_per_sec: 25_600.0,
        decode_tokens_per_sec: 1e5,
    };
    let engine = engine(2, 4096, costs);
    // Two finished conversations: the older in slot 1, the newer in slot
    // 0. A long prompt then takes slot 1, the least recently used, and the
    // newer conversation's next turn, sent just after it, slot 0.
    run(&engine, request((100..164).collect(), 1)).await;
    let conversation: Vec<u32> = (1..=64).collect();
    run(&engine, request(conversation.clone(), 1)).await;
    let long: Vec<u32> = (10_000..12_000).collect();
    let sent = Instant::now();
    let first = engine.submit(request(long, 1)).expect("submit");
    let mut next_turn = conversation;
    next_turn.extend(20_000..20_560);
    let second = engine.submit(request(next_turn, 1)).expect("submit");
    let (first, second) = tokio::join!(
        first_token_after(first, sent),
        first_token_after(second, sent)
    );
    // First come, first served: the 2000-token prompt is done in 4 chunks,
    // the last shared with the later 560 tokens in the lower slot, which
    // need one more.
    assert_eq!(first, ms(80));
    assert_eq!(second, ms(100));
    assert_eq!(engine.resident()[1][..2], [10_000, 10_001]);
}

#[tokio::test(start_paused = true)]
async fn a_busy_engine_makes_up_for_sleeps_that_overshoot() {
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

#[tokio::test(start_paused = true)]
async fn a_prefix_in_another_slot_is_copied_only_when_it_saves_enough() {
    // At 4096 tokens per slot a copy must save 8 prompt tokens, as in the
    // llama.cpp engine with a KV stream per slot.
    let engine = engine(2, 4096, FAST);
    let system: Vec<u32> = (1..=20).collect();
    run(&engine, hinted(system.clone(), 1, 0)).await;
    // 5 tokens in common: computed again in the empty slot.
    let mut short = system[..5].to_vec();
    short.extend([900, 901]);
    let (_, outcome) = run(&engine, hinted(short, 1, 1)).await;
    assert_eq!(outcome.cached_tokens, 0);
    // Into slot 1 again, which keeps 5 of its own: 16 in slot 0 save 11
    // more, so they are copied.
    let mut long = system[..16].to_vec();
    long.extend([700, 701]);
    let (_, outcome) = run(&engine, hinted(long.clone(), 1, 1)).await;
    assert_eq!(outcome.cached_tokens, 16);
    assert_eq!(engine.resident()[1], long);
}

#[tokio::test(start_paused = true)]
async fn a_constrained_request_is_refused_by_the_fake_and_the_next_one_runs() {
    let engine = engine(1, 512, FAST);
    let constrained = GenerateRequest {
        constraint: Some(Constraint::JsonSchema(r#"{"type":"object"}"#.into())),
        ..request(vec![1, 2], 4)
    };
    let mut generation = engine.submit(constrained).expect("submit");
    match generation.events.recv().await {
        Some(GenerateEvent::Failed { kind, message }) => {
            assert_eq!(kind, FailureKind::InvalidConstraint);
            assert!(message.contains("fake engine"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(run(&engine, request(vec![1, 2], 4)).await.0.len(), 4);
}

#[tokio::test(start_paused = true)]
async fn asked_logprobs_come_before_each_token_and_unasked_never() {
    let engine = engine(1, 512, FAST);
    let scored = GenerateRequest {
        logprobs: Some(3),
        ..request(vec![1, 2], 4)
    };
    let mut generation = engine.submit(scored).expect("submit");
    let mut pending = None;
    let mut tokens = 0;
    while let Some(event) = generation.events.recv().await {
        match event {
            GenerateEvent::Logprobs(entries) => {
                assert!(pending.is_none(), "two Logprobs events for one token");
                pending = Some(entries);
            }
            GenerateEvent::Tokens(ids) => {
                let entries = pending.take().expect("Logprobs before every Tokens");
                assert_eq!(entries.len(), ids.len());
                for (entry, id) in entries.iter().zip(&ids) {
                    assert_eq!(entry.token, *id);
                    assert_eq!(entry.top.len(), 3);
                    assert_eq!(entry.top[0].token, *id);
                    assert!(entry.logprob <= 0.0);
                }
                tokens += ids.len();
            }
            GenerateEvent::Finished(_) => break,
            GenerateEvent::Failed { message, .. } => panic!("failed: {message}"),
        }
    }
    assert_eq!(tokens, 4);
    let mut plain = engine.submit(request(vec![1, 2], 4)).expect("submit");
    while let Some(event) = plain.events.recv().await {
        assert!(
            !matches!(event, GenerateEvent::Logprobs(_)),
            "unasked logprobs"
        );
    }
}

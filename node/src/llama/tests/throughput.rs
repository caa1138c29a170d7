//! Throughput of the real engine (ignored by default).

use std::time::Instant;

use superfluid_proto::{GenerateEvent, Sampling};

use super::{collect, engine, greedy, request, run, tokenize, PROMPTS};
use crate::engine::{Engine, Generation};

/// Throughput on this machine; run with
/// `cargo test -p superfluid-node --release -- --ignored --nocapture throughput`.
#[test]
#[ignore]
fn throughput() {
    let long = |i: usize| {
        let mut req = greedy(&format!("{} {i}", PROMPTS[2]), 256);
        req.sampling.seed = i as u32;
        req
    };
    let engine = engine(4, 2048, 512);
    let (tokens, elapsed) = decode_timed(engine.submit(long(0)).expect("submit"));
    println!(
        "decode, 1 stream, empty cache: {:.0} tokens/s",
        tokens as f64 / elapsed
    );

    let prompt = tokenize(&PROMPTS.join(" ").repeat(12));
    let start = Instant::now();
    let (_, outcome) = run(
        &engine,
        request(
            prompt,
            1,
            Sampling {
                temperature: 0.0,
                ..Sampling::default()
            },
        ),
    );
    let prefill = outcome.prompt_tokens as f64 / start.elapsed().as_secs_f64();
    println!(
        "prefill: {} tokens, {prefill:.0} tokens/s",
        outcome.prompt_tokens
    );

    let (tokens, elapsed) = decode_timed(engine.submit(long(1)).expect("submit"));
    println!(
        "decode, 1 stream, other sequences resident: {:.0} tokens/s",
        tokens as f64 / elapsed
    );

    let start = Instant::now();
    let generations: Vec<_> = (2..6)
        .map(|i| engine.submit(long(i)).expect("submit"))
        .collect();
    let total: usize = generations.into_iter().map(|g| collect(g).0.len()).sum();
    let aggregate = total as f64 / start.elapsed().as_secs_f64();
    println!("decode, 4 streams: {aggregate:.0} tokens/s aggregate (prefill included)");

    // Each slot is a KV stream and llama.cpp computes neighbouring streams
    // in one pass, so two streams in slots 0 and 2 take two passes a step.
    for slots in [[0, 1], [0, 2]] {
        let engine = super::engine(4, 2048, 512);
        let start = Instant::now();
        let generations: Vec<_> = slots
            .iter()
            .map(|&slot| {
                let mut req = long(slot as usize + 10);
                req.slot = Some(slot);
                engine.submit(req).expect("submit")
            })
            .collect();
        let counts: Vec<usize> = generations
            .into_iter()
            .map(|g| collect(g).0.len())
            .collect();
        let aggregate = counts.iter().sum::<usize>() as f64 / start.elapsed().as_secs_f64();
        println!(
            "decode, 2 streams in slots {slots:?}: {aggregate:.0} tokens/s aggregate {counts:?}"
        );
    }
}

/// Tokens after the first and the seconds they took, so prefill is not counted.
fn decode_timed(mut generation: Generation) -> (usize, f64) {
    let mut first = None;
    let mut tokens = 0;
    while let Some(GenerateEvent::Tokens(t)) = generation.events.blocking_recv() {
        if first.is_none() {
            first = Some(Instant::now());
        } else {
            tokens += t.len();
        }
    }
    (tokens, first.map_or(0.0, |f| f.elapsed().as_secs_f64()))
}

//! Tests against the real model (`SUPERFLUID_MODEL` or the default install path).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use superfluid_proto::{
    model_id_from_path, FinishReason, GenerateEvent, GenerateRequest, Outcome, Sampling,
};

use super::{LlamaConfig, LlamaEngine};
use crate::offload::Offload;

mod continuation;
mod kv_cache;
mod ledger;
mod scoring;
mod structured;
mod throughput;
use crate::engine::{Engine, EngineError, Generation};

static BACKEND: OnceLock<Arc<LlamaBackend>> = OnceLock::new();
static TOKENIZER: OnceLock<LlamaModel> = OnceLock::new();

fn backend() -> Arc<LlamaBackend> {
    BACKEND
        .get_or_init(|| {
            let mut backend = LlamaBackend::init().expect("llama backend");
            backend.void_logs();
            Arc::new(backend)
        })
        .clone()
}

fn model_path() -> PathBuf {
    std::env::var_os("SUPERFLUID_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from("/root/.cache/superfluid/models/SmolLM2-135M-Instruct.Q4_1.gguf")
        })
}

fn tokenize(text: &str) -> Vec<u32> {
    let model = TOKENIZER.get_or_init(|| {
        LlamaModel::load_from_file(&backend(), model_path(), &LlamaModelParams::default())
            .expect("model")
    });
    model
        .vocab()
        .tokenize(text.as_bytes(), true, false)
        .into_iter()
        .map(|t| t.0 as u32)
        .collect()
}

fn engine(slots: u32, ctx: u32, prefill_chunk: u32) -> LlamaEngine {
    engine_with_kv(slots, ctx, prefill_chunk, false)
}

fn engine_with_kv(slots: u32, ctx: u32, prefill_chunk: u32, shared_kv: bool) -> LlamaEngine {
    let config = LlamaConfig {
        model_path: model_path(),
        slots,
        ctx,
        threads: 2,
        prefill_chunk,
        shared_kv,
        model_id: None,
        offload: Offload::default(),
    };
    LlamaEngine::start(backend(), config).expect("engine starts")
}

fn request(prompt: Vec<u32>, max_tokens: u32, sampling: Sampling) -> GenerateRequest {
    GenerateRequest {
        model: model_id_from_path(&model_path()),
        prompt,
        sampling,
        max_tokens,
        slot: None,
        constraint: None,
        logprobs: None,
    }
}

fn greedy(text: &str, max_tokens: u32) -> GenerateRequest {
    request(
        tokenize(text),
        max_tokens,
        Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
    )
}

/// Waits for the end of a generation: its tokens and final outcome.
fn collect(mut generation: Generation) -> (Vec<u32>, Outcome) {
    let mut tokens = Vec::new();
    while let Some(event) = generation.events.blocking_recv() {
        match event {
            GenerateEvent::Tokens(t) => tokens.extend(t),
            GenerateEvent::Logprobs(_) => {}
            GenerateEvent::Finished(outcome) => {
                assert_eq!(outcome.generated_tokens as usize, tokens.len());
                return (tokens, outcome);
            }
            GenerateEvent::Failed { message, .. } => panic!("generation failed: {message}"),
        }
    }
    panic!("generation ended without a final event");
}

fn run(engine: &LlamaEngine, req: GenerateRequest) -> (Vec<u32>, Outcome) {
    collect(engine.submit(req).expect("submit"))
}

const PROMPTS: [&str; 4] = [
    "The history of the Roman Empire begins with",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "Water boils at",
];

#[test]
fn greedy_generation_is_deterministic() {
    let engine = engine(2, 512, 512);
    let (first, _) = run(&engine, greedy(PROMPTS[0], 24));
    let (second, _) = run(&engine, greedy(PROMPTS[0], 24));
    assert!(!first.is_empty());
    assert_eq!(first, second);
}

#[test]
fn shared_prefix_is_reused_and_matches_a_cold_run() {
    let prefix = "You are a helpful assistant. Answer briefly and precisely. Question: ";
    let warm = engine(2, 512, 512);
    let (_, first) = run(
        &warm,
        greedy(&format!("{prefix}What is the capital of France?"), 8),
    );
    assert_eq!(first.cached_tokens, 0);
    let second_req = greedy(&format!("{prefix}Name a large planet."), 16);
    let (warm_tokens, second) = run(&warm, second_req.clone());
    assert!(second.cached_tokens > 0, "{second:?}");
    assert!(second.cached_tokens < second.prompt_tokens);

    let cold = engine(1, 512, 512);
    let (cold_tokens, outcome) = run(&cold, second_req);
    assert_eq!(outcome.cached_tokens, 0);
    assert_eq!(warm_tokens, cold_tokens);
}

const SHARED_PREFIX: &str = "You are a helpful assistant. Answer briefly and precisely. Question: ";

fn planet() -> GenerateRequest {
    greedy(&format!("{SHARED_PREFIX}Name a large planet."), 16)
}

/// Runs [`planet`] while another slot generates from the same prefix, so
/// the prefix is copied from a running generation.
fn planet_beside_a_running_story(engine: &LlamaEngine) -> (Vec<u32>, Outcome) {
    let mut running = engine
        .submit(greedy(
            &format!("{SHARED_PREFIX}Tell me a long story."),
            200,
        ))
        .expect("submit");
    assert!(matches!(
        running.events.blocking_recv(),
        Some(GenerateEvent::Tokens(_))
    ));
    let (tokens, outcome) = run(engine, planet());
    drop(running);
    assert!(outcome.cached_tokens > 0, "{outcome:?}");
    (tokens, outcome)
}

#[test]
fn a_prefix_held_by_a_running_generation_is_copied_to_a_new_slot() {
    let (warm_tokens, _) = planet_beside_a_running_story(&engine(2, 512, 512));
    let (cold_tokens, _) = run(&engine(1, 512, 512), planet());
    assert_eq!(warm_tokens, cold_tokens);
}

#[test]
fn whole_prompt_cached_still_generates_the_same_tokens() {
    let engine = engine(1, 512, 512);
    let req = greedy(PROMPTS[2], 12);
    let (first, _) = run(&engine, req.clone());
    let (second, outcome) = run(&engine, req.clone());
    assert_eq!(outcome.cached_tokens, outcome.prompt_tokens - 1);
    assert_eq!(first, second);
}

#[test]
fn concurrent_generations_match_sequential_greedy() {
    let sequential_engine = engine(1, 512, 512);
    let expected: Vec<_> = PROMPTS
        .iter()
        .map(|p| run(&sequential_engine, greedy(p, 24)).0)
        .collect();
    drop(sequential_engine);

    // A small prefill budget mixes prompt chunks with decoding in the same steps.
    let batched = engine(4, 512, 8);
    let generations: Vec<_> = PROMPTS
        .iter()
        .map(|p| batched.submit(greedy(p, 24)).expect("submit"))
        .collect();
    let got: Vec<_> = generations.into_iter().map(|g| collect(g).0).collect();
    assert_eq!(got, expected);
}

#[test]
fn a_shared_kv_cache_generates_what_one_stream_per_slot_does() {
    let outputs = |shared_kv: bool| {
        // A small prefill budget mixes prompt chunks with decoding.
        let engine = engine_with_kv(4, 512, 8, shared_kv);
        let generations: Vec<_> = PROMPTS
            .iter()
            .map(|p| engine.submit(greedy(p, 16)).expect("submit"))
            .collect();
        let mut got: Vec<_> = generations.into_iter().map(|g| collect(g).0).collect();
        got.push(planet_beside_a_running_story(&engine).0);
        got
    };
    assert_eq!(outputs(true), outputs(false));
}

#[test]
fn prompts_longer_than_the_prefill_chunk_match_a_single_chunk_run() {
    let text = PROMPTS.join(" ").repeat(3);
    let (whole, _) = run(&engine(1, 1024, 512), greedy(&text, 12));
    let (chunked, outcome) = run(&engine(1, 1024, 7), greedy(&text, 12));
    assert!(outcome.prompt_tokens > 7 * 3);
    assert_eq!(whole, chunked);
}

#[test]
fn requests_beyond_the_slots_wait_their_turn() {
    let engine = engine(1, 512, 512);
    let generations: Vec<_> = PROMPTS
        .iter()
        .map(|p| engine.submit(greedy(p, 6)).expect("submit"))
        .collect();
    for generation in generations {
        let (_, outcome) = collect(generation);
        assert!(outcome.generated_tokens > 0);
    }
}

#[test]
fn dropping_a_generation_frees_its_slot() {
    let engine = engine(1, 512, 512);
    let mut long = engine.submit(greedy(PROMPTS[2], 400)).expect("submit");
    assert!(matches!(
        long.events.blocking_recv(),
        Some(GenerateEvent::Tokens(_))
    ));
    drop(long);
    let (tokens, outcome) = run(&engine, greedy(PROMPTS[1], 4));
    assert_eq!(tokens.len(), outcome.generated_tokens as usize);
    assert!(outcome.generated_tokens > 0);
}

#[test]
fn bad_requests_are_refused_at_submit() {
    let engine = engine(1, 64, 512);
    let empty = engine.submit(greedy("", 4).tap_prompt(Vec::new()));
    assert!(matches!(empty, Err(EngineError::EmptyPrompt)));
    let too_long = engine.submit(greedy("x", 4).tap_prompt(vec![1; 64]));
    assert!(matches!(
        too_long,
        Err(EngineError::TooLong { len: 64, max: 64 })
    ));
    let mut unknown = greedy("hello", 4);
    unknown.model = "no-such-model".into();
    assert!(matches!(
        engine.submit(unknown),
        Err(EngineError::UnknownModel { .. })
    ));
    // The longest prompt that fits still runs.
    let fits = engine
        .submit(greedy("x", 4).tap_prompt(vec![28; 63]))
        .expect("fits");
    let (_, outcome) = collect(fits);
    assert_eq!(outcome.generated_tokens, 1);
    assert_eq!(outcome.finish, FinishReason::Length);
}

#[test]
fn tokens_outside_the_vocabulary_fail_the_generation() {
    let engine = engine(1, 64, 512);
    let mut generation = engine
        .submit(greedy("x", 4).tap_prompt(vec![u32::MAX / 2]))
        .expect("submit");
    assert!(matches!(
        generation.events.blocking_recv(),
        Some(GenerateEvent::Failed { .. })
    ));
}

#[test]
fn seeded_sampling_is_reproducible() {
    let engine = engine(2, 512, 512);
    let sampling = Sampling {
        temperature: 0.9,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        seed: 42,
        ..Sampling::default()
    };
    let req = request(tokenize(PROMPTS[2]), 24, sampling);
    let (first, _) = run(&engine, req.clone());
    let (second, _) = run(&engine, req);
    assert!(!first.is_empty());
    assert_eq!(first, second);
}

#[test]
fn logit_bias_bans_the_greedy_token_and_forces_another() {
    let engine = engine(1, 512, 512);
    let prompt = tokenize("The capital of France is");
    let (plain, _) = run(&engine, request(prompt.clone(), 1, greedy_sampling()));
    let greedy_first = plain[0];
    let ban = Sampling {
        logit_bias: vec![(greedy_first, -1.0e30)],
        ..greedy_sampling()
    };
    let (other, _) = run(&engine, request(prompt.clone(), 1, ban));
    assert_ne!(other[0], greedy_first, "the banned token was picked");
    let force = Sampling {
        temperature: 0.8,
        seed: 7,
        logit_bias: vec![(1000, 100.0)],
        ..Sampling::default()
    };
    let (forced, _) = run(&engine, request(prompt, 3, force));
    assert_eq!(forced, vec![1000, 1000, 1000]);
}

fn greedy_sampling() -> Sampling {
    Sampling {
        temperature: 0.0,
        ..Sampling::default()
    }
}

#[test]
fn penalties_change_nothing_about_reproducibility() {
    let engine = engine(1, 512, 512);
    let sampling = Sampling {
        temperature: 0.0,
        repetition_penalty: 1.3,
        frequency_penalty: 0.5,
        presence_penalty: 0.5,
        ..Sampling::default()
    };
    let req = request(tokenize("1, 2, 1, 2, 1, 2, 1, 2,"), 16, sampling);
    assert_eq!(run(&engine, req.clone()).0, run(&engine, req).0);
}

#[test]
fn max_tokens_is_honoured() {
    let engine = engine(1, 512, 512);
    let (tokens, outcome) = run(&engine, greedy("Count: 1, 2, 3, 4, 5,", 5));
    assert_eq!(tokens.len(), 5);
    assert_eq!(outcome.finish, FinishReason::Length);
}

#[test]
fn a_full_context_ends_with_length() {
    let engine = engine(1, 24, 512);
    let req = greedy("Count: 1, 2, 3, 4, 5,", 100);
    let prompt_len = req.prompt.len() as u32;
    let (_, outcome) = run(&engine, req);
    assert_eq!(outcome.finish, FinishReason::Length);
    assert_eq!(outcome.generated_tokens, 24 - prompt_len);
}

trait TapPrompt {
    fn tap_prompt(self, prompt: Vec<u32>) -> Self;
}

impl TapPrompt for GenerateRequest {
    fn tap_prompt(mut self, prompt: Vec<u32>) -> Self {
        self.prompt = prompt;
        self
    }
}

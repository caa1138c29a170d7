//! A generation taken up on another node from the middle of its answer (a
//! continuation: the prompt followed by the tokens generated so far, with
//! `Sampling::generated` saying how many) goes on as if never moved.

use superfluid_proto::{FailureKind, FinishReason, GenerateEvent, GenerateRequest, Sampling};

use super::structured::{assert_person, constrained, person_schema, text_of};
use super::{engine, request, run, tokenize, PROMPTS};
use crate::engine::Engine;

/// `whole` taken up after its first `k` generated tokens.
fn continued(whole: &GenerateRequest, generated: &[u32], k: usize) -> GenerateRequest {
    GenerateRequest {
        prompt: [whole.prompt.as_slice(), &generated[..k]].concat(),
        max_tokens: whole.max_tokens - k as u32,
        sampling: Sampling {
            generated: k as u32,
            ..whole.sampling.clone()
        },
        ..whole.clone()
    }
}

#[test]
fn a_seeded_answer_continued_elsewhere_samples_what_it_would_have() {
    let first = engine(1, 512, 512);
    let other = engine(1, 512, 512);
    let sampling = Sampling {
        temperature: 1.0,
        seed: 42,
        repetition_penalty: 1.3,
        ..Sampling::default()
    };
    let whole = request(tokenize(PROMPTS[2]), 32, sampling);
    let (tokens, outcome) = run(&first, whole.clone());
    assert_eq!(outcome.finish, FinishReason::Length, "{}", text_of(&tokens));
    for k in [1, 9, 20] {
        let (rest, outcome) = run(&other, continued(&whole, &tokens, k));
        assert_eq!(rest, tokens[k..], "continued after {k} tokens");
        assert_eq!(outcome.generated_tokens as usize, tokens.len() - k);
    }
    // Top-k, top-p and min-p keep it too.
    let narrowed = Sampling {
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        ..whole.sampling.clone()
    };
    let whole = request(tokenize(PROMPTS[0]), 24, narrowed);
    let (tokens, _) = run(&first, whole.clone());
    let (rest, _) = run(&other, continued(&whole, &tokens, 11));
    assert_eq!(rest, tokens[11..]);
    // Told nothing, the node draws from the start of the seed's stream
    // again: the text after the seam would be another.
    let blind = GenerateRequest {
        sampling: whole.sampling.clone(),
        ..continued(&whole, &tokens, 11)
    };
    assert_ne!(run(&other, blind).0, tokens[11..]);
}

#[test]
fn a_constrained_answer_continued_elsewhere_stays_valid_and_unchanged() {
    let first = engine(1, 512, 512);
    let other = engine(1, 512, 512);
    let prompt = "Describe a person. Answer in JSON.";
    let greedy = constrained(prompt, 96, &person_schema());
    let seeded = GenerateRequest {
        sampling: Sampling {
            temperature: 1.0,
            seed: 5,
            ..Sampling::default()
        },
        ..greedy.clone()
    };
    for whole in [greedy, seeded] {
        let (tokens, outcome) = run(&first, whole.clone());
        assert_eq!(outcome.finish, FinishReason::Stop, "{}", text_of(&tokens));
        assert_person(&text_of(&tokens));
        for k in [1, tokens.len() / 2, tokens.len() - 1] {
            let (rest, outcome) = run(&other, continued(&whole, &tokens, k));
            assert_eq!(outcome.finish, FinishReason::Stop);
            let text = text_of(&[&tokens[..k], rest.as_slice()].concat());
            assert_person(&text);
            assert_eq!(rest, tokens[k..], "continued after {k} tokens: {text}");
        }
    }
}

#[test]
fn a_continuation_the_grammar_cannot_follow_fails_as_the_constraint() {
    let engine = engine(1, 512, 512);
    let whole = constrained("Describe a person.", 32, &person_schema());
    let prose = tokenize("Hello there");
    let mut generation = engine
        .submit(continued(&whole, &prose, prose.len()))
        .expect("submitted");
    match generation.events.blocking_recv() {
        Some(GenerateEvent::Failed { kind, message }) => {
            assert_eq!(kind, FailureKind::InvalidConstraint, "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn more_generated_tokens_than_prompt_is_refused() {
    let engine = engine(1, 512, 512);
    let mut req = request(tokenize("Hello"), 4, Sampling::default());
    req.sampling.generated = req.prompt.len() as u32 + 1;
    let mut generation = engine.submit(req).expect("submitted");
    match generation.events.blocking_recv() {
        Some(GenerateEvent::Failed { kind, message }) => {
            assert_eq!(kind, FailureKind::Engine);
            assert!(message.contains("generated already"), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

//! Log-probabilities of the real model's picks: after the penalties and
//! biases, so the greedy pick is always the most likely alternative.

use superfluid_proto::{GenerateEvent, GenerateRequest, Sampling, TokenLogprob};

use super::{engine, greedy, request, run, tokenize};
use crate::engine::Engine;
use crate::llama::LlamaEngine;

/// The tokens and each one's scores.
fn scored(engine: &LlamaEngine, req: GenerateRequest) -> (Vec<u32>, Vec<TokenLogprob>) {
    let mut generation = engine.submit(req).expect("submit");
    let (mut tokens, mut scores) = (Vec::new(), Vec::new());
    while let Some(event) = generation.events.blocking_recv() {
        match event {
            GenerateEvent::Logprobs(entries) => scores.extend(entries),
            GenerateEvent::Tokens(ids) => {
                tokens.extend(ids);
                assert_eq!(
                    scores.len(),
                    tokens.len(),
                    "scores come before their tokens"
                );
            }
            GenerateEvent::Finished(_) => return (tokens, scores),
            GenerateEvent::Failed { message, .. } => panic!("generation failed: {message}"),
        }
    }
    panic!("generation ended without a final event");
}

fn check_greedy(tokens: &[u32], scores: &[TokenLogprob], top: usize) {
    assert_eq!(tokens.len(), scores.len());
    for (token, score) in tokens.iter().zip(scores) {
        assert_eq!(score.token, *token);
        assert!(
            score.logprob.is_finite() && score.logprob <= 0.0,
            "{score:?}"
        );
        assert_eq!(score.top.len(), top, "{score:?}");
        assert_eq!(
            score.top[0].token, *token,
            "the greedy pick is not on top: {score:?}"
        );
        assert!((score.top[0].logprob - score.logprob).abs() < 1e-6);
        assert!(score.top.windows(2).all(|w| w[0].logprob >= w[1].logprob));
        let mass: f32 = score.top.iter().map(|t| t.logprob.exp()).sum();
        assert!(mass <= 1.0 + 1e-4, "{mass}");
        assert_eq!(String::from_utf8_lossy(&score.bytes), score.text);
    }
    assert!(
        scores.iter().any(|s| s.logprob < -1e-3),
        "every token certain: not the model's probabilities"
    );
}

#[test]
fn greedy_picks_are_the_top_alternative_and_scoring_changes_no_token() {
    let engine = engine(2, 512, 64);
    let text = "Here is a list of fruits: apple,";
    let (plain, _) = run(&engine, greedy(text, 12));
    let asked = GenerateRequest {
        logprobs: Some(5),
        ..greedy(text, 12)
    };
    let (tokens, scores) = scored(&engine, asked);
    assert_eq!(tokens, plain, "asking for scores changed the text");
    check_greedy(&tokens, &scores, 5);
}

#[test]
fn scores_are_taken_after_the_penalties_and_biases() {
    let engine = engine(1, 512, 64);
    let prompt = tokenize("one one one one one one one one");
    let (plain, _) = run(&engine, greedy("one one one one one one one one", 1));
    let sampling = Sampling {
        temperature: 0.0,
        repetition_penalty: 1.8,
        logit_bias: vec![(plain[0], -1e30)],
        ..Sampling::default()
    };
    let asked = GenerateRequest {
        logprobs: Some(3),
        ..request(prompt, 6, sampling)
    };
    let (tokens, scores) = scored(&engine, asked);
    assert_ne!(tokens[0], plain[0], "the banned token was picked");
    for score in &scores {
        assert_eq!(score.top[0].token, score.token, "{score:?}");
        assert!(score
            .top
            .iter()
            .all(|t| t.token != plain[0] || t.logprob <= -1e3));
    }
    assert_eq!(scores.len(), tokens.len());
    assert!(scores[0].top.iter().all(|t| t.token != plain[0]));
}

//! Generations held to a JSON Schema by the real model.

use serde_json::{json, Value};
use superfluid_proto::{Constraint, FailureKind, FinishReason, GenerateEvent, GenerateRequest};

use super::{engine, greedy, run, tokenize, TOKENIZER};
use crate::engine::Engine;

pub(super) fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer"},
            "colors": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
        },
        "required": ["name", "age", "colors"],
        "additionalProperties": false,
    })
}

pub(super) fn constrained(text: &str, max_tokens: u32, schema: &Value) -> GenerateRequest {
    GenerateRequest {
        constraint: Some(Constraint::JsonSchema(schema.to_string())),
        ..greedy(text, max_tokens)
    }
}

pub(super) fn text_of(tokens: &[u32]) -> String {
    let _ = tokenize("");
    let model = TOKENIZER.get().expect("tokenizer loaded");
    let mut bytes = Vec::new();
    for &t in tokens {
        bytes.extend(model.vocab().token_to_piece(
            llama_cpp_2::token::LlamaToken(t as i32),
            false,
            None,
        ));
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(super) fn assert_person(text: &str) {
    let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    let object = value.as_object().expect("an object");
    let mut keys: Vec<_> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["age", "colors", "name"], "{text}");
    assert!(object["name"].is_string(), "{text}");
    assert!(object["age"].is_i64() || object["age"].is_u64(), "{text}");
    for color in object["colors"].as_array().expect("an array") {
        assert!(
            ["red", "green", "blue"].contains(&color.as_str().unwrap_or("")),
            "{text}"
        );
    }
}

#[test]
fn a_constrained_generation_is_json_valid_for_its_schema() {
    let engine = engine(2, 512, 512);
    for prompt in [
        "Tell me a story about a dragon.",
        "The history of Rome begins with",
    ] {
        let (tokens, outcome) = run(&engine, constrained(prompt, 96, &person_schema()));
        assert_eq!(outcome.finish, FinishReason::Stop, "{}", text_of(&tokens));
        assert_person(&text_of(&tokens));
    }
}

#[test]
fn a_reused_prefix_starts_the_grammar_at_the_first_generated_token() {
    let engine = engine(1, 512, 512);
    let prompt = "Describe a person. Answer in JSON.";
    let (free, _) = run(&engine, greedy(prompt, 16));
    let (tokens, outcome) = run(&engine, constrained(prompt, 96, &person_schema()));
    assert!(outcome.cached_tokens > 0, "{outcome:?}");
    assert_ne!(free, tokens);
    assert_person(&text_of(&tokens));
}

#[test]
fn max_tokens_cuts_a_constrained_generation_by_length() {
    let engine = engine(1, 512, 512);
    let (tokens, outcome) = run(&engine, constrained("A person:", 3, &person_schema()));
    assert_eq!(outcome.finish, FinishReason::Length);
    assert_eq!(tokens.len(), 3);
    assert!(text_of(&tokens).starts_with('{'));
}

#[test]
fn a_constraint_that_does_not_compile_fails_its_generation_and_the_engine_serves_on() {
    let engine = engine(1, 512, 512);
    let bad = json!({"type": "string", "pattern": "a(b"});
    let mut generation = engine
        .submit(constrained("Hello", 8, &bad))
        .expect("submitted");
    match generation.events.blocking_recv() {
        Some(GenerateEvent::Failed { kind, message }) => {
            assert_eq!(kind, FailureKind::InvalidConstraint);
            assert!(message.contains("constraint"), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    let (tokens, _) = run(&engine, greedy("Hello", 4));
    assert_eq!(tokens.len(), 4);
}

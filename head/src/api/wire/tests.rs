//! The wire types read back what they write.

use super::chat::{ChatChunkChoice, ChatCompletionChunk, Delta, Role};
use super::completion::{TextChoice, TextCompletion};
use super::models::{ModelCard, ModelList};
use super::{Object, PromptTokensDetails, Usage};
use crate::api::output::FinishReason;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;
use std::fmt::Debug;

fn round_trips<T: Serialize + DeserializeOwned + PartialEq + Debug>(value: &T) {
    let text = match serde_json::to_string(value) {
        Ok(t) => t,
        Err(e) => panic!("{value:?} does not serialize: {e}"),
    };
    let back: T = match serde_json::from_str(&text) {
        Ok(b) => b,
        Err(e) => panic!("{text} does not read back: {e}"),
    };
    assert_eq!(&back, value, "{text}");
}

fn usage() -> Usage {
    Usage {
        prompt_tokens: 7,
        completion_tokens: 2,
        total_tokens: 9,
        prompt_tokens_details: PromptTokensDetails { cached_tokens: 3 },
    }
}

fn chat_chunk(delta: Delta, finish: Option<FinishReason>) -> ChatCompletionChunk {
    ChatCompletionChunk {
        id: "chatcmpl-1".into(),
        object: Object::ChatCompletionChunk,
        created: 1,
        model: "m".into(),
        choices: vec![ChatChunkChoice {
            index: 0,
            delta,
            logprobs: None,
            finish_reason: finish,
        }],
        usage: None,
    }
}

#[test]
fn finish_reasons_have_their_openai_names() {
    for (reason, name) in [
        (FinishReason::Stop, "stop"),
        (FinishReason::Length, "length"),
        (FinishReason::ToolCalls, "tool_calls"),
    ] {
        assert_eq!(serde_json::to_value(reason).ok(), Some(json!(name)));
        round_trips(&reason);
    }
}

#[test]
fn chat_chunks_round_trip_with_and_without_each_optional_field() {
    let first = Delta {
        role: Some(Role::Assistant),
        content: Some(String::new()),
        ..Delta::default()
    };
    let text = Delta {
        role: None,
        content: Some("日本 🦀".into()),
        ..Delta::default()
    };
    round_trips(&chat_chunk(first, None));
    round_trips(&chat_chunk(text, None));
    round_trips(&chat_chunk(Delta::default(), Some(FinishReason::Length)));
    let mut usage_only = chat_chunk(Delta::default(), None);
    usage_only.choices.clear();
    usage_only.usage = Some(usage());
    round_trips(&usage_only);
}

#[test]
fn absent_and_null_fields_are_what_clients_expect() {
    let chunk = serde_json::to_value(chat_chunk(Delta::default(), None)).unwrap_or_default();
    assert!(chunk.get("usage").is_none(), "{chunk}");
    assert_eq!(chunk["choices"][0]["delta"], json!({}));
    assert_eq!(chunk["choices"][0]["logprobs"], json!(null));
    assert_eq!(chunk["choices"][0]["finish_reason"], json!(null));
}

#[test]
fn text_completions_and_the_model_list_round_trip() {
    round_trips(&TextCompletion {
        id: "cmpl-1".into(),
        object: Object::TextCompletion,
        created: 1,
        model: "m".into(),
        choices: vec![TextChoice {
            index: 0,
            text: "Once".into(),
            logprobs: None,
            finish_reason: FinishReason::Stop,
        }],
        usage: usage(),
    });
    round_trips(&ModelList {
        object: Object::List,
        data: vec![ModelCard {
            id: "m".into(),
            object: Object::Model,
            created: 1,
            owned_by: "superfluid".into(),
            loaded_on: vec!["node-a".into()],
        }],
    });
}

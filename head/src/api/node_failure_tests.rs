//! A node's failures, by kind, as the HTTP client sees them: the request's
//! mistakes as the client's (400, 404), the node's own as a 502, each with
//! the node's message.

use super::node_tests::{app, failure_message, fleet, post, stub, wait_for, Stub};
use super::tests::MODEL;
use axum::http::StatusCode;
use serde_json::{json, Value};
use superfluid_proto::FailureKind;

/// Sends a chat and a completion to a fleet whose only node fails every
/// generation as `kind`; the status and error body of each, with the
/// prompt's field.
async fn answers_to(kind: FailureKind) -> Vec<(StatusCode, Value, &'static str)> {
    let (fleet, identity, addr) = fleet().await;
    stub(addr, &identity, "stub", 512, Stub::Fail(kind)).await;
    wait_for(&fleet, 1, 512).await;
    let app = app(fleet);
    let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]});
    let completion = json!({"model": MODEL, "prompt": "Hi"});
    let mut answers = Vec::new();
    for (path, body, param) in [
        ("/v1/chat/completions", chat, "messages"),
        ("/v1/completions", completion, "prompt"),
    ] {
        let (status, _, text) = post(app.clone(), path, body).await;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        answers.push((status, body["error"].clone(), param));
    }
    answers
}

#[tokio::test]
async fn a_nodes_prompt_too_long_is_a_400_context_length_exceeded_with_its_message() {
    for (status, error, param) in answers_to(FailureKind::PromptTooLong).await {
        assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
        assert_eq!(
            error["message"],
            failure_message(FailureKind::PromptTooLong)
        );
        assert_eq!(error["type"], "invalid_request_error");
        assert_eq!(error["code"], "context_length_exceeded");
        assert_eq!(error["param"], param);
    }
}

#[tokio::test]
async fn a_nodes_unknown_model_is_a_404_model_not_found_with_its_message() {
    for (status, error, _) in answers_to(FailureKind::UnknownModel).await {
        assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
        assert_eq!(error["message"], failure_message(FailureKind::UnknownModel));
        assert_eq!(error["code"], "model_not_found");
        assert_eq!(error["param"], "model");
    }
}

#[tokio::test]
async fn a_nodes_invalid_token_or_empty_prompt_is_a_400_naming_the_prompt() {
    for kind in [FailureKind::InvalidToken, FailureKind::EmptyPrompt] {
        for (status, error, param) in answers_to(kind).await {
            assert_eq!(status, StatusCode::BAD_REQUEST, "{kind:?}: {error}");
            assert_eq!(error["message"], failure_message(kind));
            assert_eq!(error["param"], param);
        }
    }
}

#[tokio::test]
async fn a_nodes_own_failure_is_a_502_passing_its_message_on() {
    for kind in [FailureKind::Engine, FailureKind::Stopped] {
        for (status, error, _) in answers_to(kind).await {
            assert_eq!(status, StatusCode::BAD_GATEWAY, "{kind:?}: {error}");
            assert_eq!(error["type"], "server_error");
            let message = error["message"].as_str().unwrap_or_default();
            assert!(message.contains(&failure_message(kind)), "{message}");
        }
    }
}

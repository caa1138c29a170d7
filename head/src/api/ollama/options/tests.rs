use super::super::request::{ChatRequest, GenerateRequest};
use super::*;
use crate::api::extract::parse;
use crate::api::ApiError;
use serde_json::json;

fn chat(body: Value) -> Result<CompletionRequest, ApiError> {
    let req: ChatRequest = parse(body.to_string().as_bytes())?;
    req.to_openai()
}

fn generate(body: Value) -> Result<CompletionRequest, ApiError> {
    let req: GenerateRequest = parse(body.to_string().as_bytes())?;
    req.to_openai()
}

/// The field a refusal names, and its message.
fn refusal(result: Result<CompletionRequest, ApiError>) -> (String, String) {
    match result {
        Err(ApiError::InvalidParam { param, message }) => (param, message),
        Err(ApiError::BadJson { message, .. }) => (String::new(), message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn options_become_the_sampling_the_node_runs() {
    let req = chat(json!({
        "model": "m:latest",
        "messages": [{"role": "user", "content": "hi"}],
        "options": {"temperature": 0.5, "top_p": 0.9, "top_k": 7, "min_p": 0.1, "seed": 42,
                    "num_predict": 12, "stop": ["\n"], "repeat_penalty": 1.2,
                    "presence_penalty": 0.5, "frequency_penalty": 0.25},
    }))
    .expect("accepted");
    assert_eq!(req.model.as_deref(), Some("m"));
    let params = req.params().expect("valid");
    assert_eq!(params.sampling.temperature, 0.5);
    assert_eq!(params.sampling.top_p, 0.9);
    assert_eq!(params.sampling.top_k, 7);
    assert_eq!(params.sampling.min_p, 0.1);
    assert_eq!(params.sampling.seed, 42);
    assert_eq!(params.sampling.repetition_penalty, 1.2);
    assert_eq!(params.sampling.presence_penalty, 0.5);
    assert_eq!(params.sampling.frequency_penalty, 0.25);
    assert_eq!(params.max_tokens, Some(12));
    assert_eq!(params.stop, vec!["\n".to_owned()]);
}

#[test]
fn num_predict_minus_one_means_the_context() {
    let req = generate(json!({"model": "m", "prompt": "x", "options": {"num_predict": -1}}))
        .expect("accepted");
    assert_eq!(req.params().expect("valid").max_tokens, None);
    let (param, _) = refusal(generate(
        json!({"model": "m", "prompt": "x", "options": {"num_predict": 0}}),
    ));
    assert_eq!(param, "options.num_predict");
}

#[test]
fn a_bad_option_is_named_as_the_client_wrote_it() {
    let req =
        chat(json!({"model": "m", "messages": [], "options": {"temperature": 9}})).expect("parsed");
    match rename(req.params().expect_err("refused")) {
        ApiError::InvalidParam { param, message } => {
            assert_eq!(param, "options.temperature");
            assert!(message.contains("`options.temperature`"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_fields_and_options_are_refused_by_name() {
    for (body, name) in [
        (json!({"model": "m", "messages": [], "bogus": 1}), "bogus"),
        (
            json!({"model": "m", "messages": [], "options": {"mirostat": 1}}),
            "mirostat",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x", "extra": 1}]}),
            "extra",
        ),
    ] {
        let (_, message) = refusal(chat(body));
        assert!(message.contains(name), "{message}");
    }
}

#[test]
fn features_superfluid_lacks_are_refused_naming_the_field() {
    for (result, field) in [
        (
            chat(
                json!({"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}]}),
            ),
            "messages[0].tool_calls",
        ),
        (
            chat(
                json!({"model": "m", "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}),
            ),
            "messages[0].images",
        ),
        (
            chat(json!({"model": "m", "messages": [], "think": true})),
            "think",
        ),
        (
            chat(json!({"model": "m", "messages": [], "keep_alive": "soon"})),
            "keep_alive",
        ),
        (
            chat(json!({"model": "m", "messages": [], "keep_alive": true})),
            "keep_alive",
        ),
        (
            generate(json!({"model": "m", "prompt": "x", "template": "{{ .Prompt }}"})),
            "template",
        ),
        (
            generate(json!({"model": "m", "prompt": "x", "images": ["aGk="]})),
            "images",
        ),
        (
            generate(json!({"model": "m", "prompt": "x", "suffix": "y"})),
            "suffix",
        ),
        (
            generate(json!({"model": "m", "prompt": "x", "context": [1, 2]})),
            "context",
        ),
        (
            generate(json!({"model": "m", "prompt": "x", "raw": true, "system": "s"})),
            "system",
        ),
        (
            chat(json!({"model": "m", "messages": [], "format": 3})),
            "format",
        ),
    ] {
        let (param, message) = refusal(result);
        assert_eq!(param, field, "{message}");
        assert!(
            message.contains(&format!("`{}`", field.rsplit('.').next().unwrap_or(field)))
                || message.contains(field),
            "{message}"
        );
    }
}

#[test]
fn the_off_values_clients_send_are_accepted() {
    chat(json!({"model": "m", "messages": [], "tools": [], "think": false, "keep_alive": "5m", "format": ""}))
        .expect("accepted");
    generate(json!({"model": "m", "prompt": "x", "images": [], "context": [], "raw": false, "keep_alive": -1}))
        .expect("accepted");
}

#[test]
fn format_asks_for_structured_output() {
    let json_mode = chat(json!({"model": "m", "messages": [], "format": "json"})).expect("ok");
    assert!(json_mode.params().expect("valid").constraint.is_some());
    let schema =
        json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]});
    let with_schema = chat(json!({"model": "m", "messages": [], "format": schema})).expect("ok");
    assert!(with_schema.params().expect("valid").constraint.is_some());
}

#[test]
fn generate_uses_the_template_unless_raw() {
    let templated =
        generate(json!({"model": "m", "prompt": "hi", "system": "be brief"})).expect("ok");
    let messages = templated.chat_messages().expect("messages");
    assert_eq!(messages.len(), 2);
    let raw = generate(json!({"model": "m", "prompt": "hi", "raw": true})).expect("ok");
    assert_eq!(raw.prompt_text().expect("prompt"), "hi");
    assert!(raw.messages.is_none());
}

#[test]
fn num_ctx_is_honoured_up_to_the_nodes_context() {
    let options = Options {
        num_ctx: Some(512),
        ..Options::default()
    };
    assert_eq!(options.context(2048).expect("fits"), 512);
    let too_big = Options {
        num_ctx: Some(4096),
        ..Options::default()
    };
    match too_big.context(2048) {
        Err(ApiError::InvalidParam { param, message }) => {
            assert_eq!(param, "options.num_ctx");
            assert!(message.contains("2048"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

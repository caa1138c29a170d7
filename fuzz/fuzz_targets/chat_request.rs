//! `POST /v1/chat/completions` bodies: any bytes go through the same
//! parsing and validation as the handler's (JSON into `CompletionRequest`,
//! then the model id, generation parameters and chat messages). Each is an
//! answer or an OpenAI error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use superfluid_head::api::extract::parse;
use superfluid_head::api::types::CompletionRequest;

fuzz_target!(|data: &[u8]| {
    let Ok(request) = parse::<CompletionRequest>(data) else {
        return;
    };
    let _ = request.model_id();
    if let Ok(params) = request.params() {
        assert!(params.stop.iter().all(|s| !s.is_empty()));
        assert!(params.max_tokens.is_none_or(|m| m >= 1));
    }
    if let Ok(messages) = request.chat_messages() {
        assert!(!messages.is_empty());
        assert!(messages
            .iter()
            .all(|m| matches!(m.role.as_str(), "system" | "user" | "assistant" | "tool")));
    }
});

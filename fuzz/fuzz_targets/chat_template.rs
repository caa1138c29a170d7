//! Hostile chat messages through the default model's own chat template and
//! tokenizer, as `/v1/chat/completions` renders and tokenizes them: the
//! codec is loaded from the GGUF (vocabulary and template, no weights) once.
//! Any role the API admits and any content renders to text or a template
//! error, and the text tokenizes, never a panic.
//!
//! The model is `$SUPERFLUID_MODEL`, or the default model that
//! `scripts/setup` installs.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;
use superfluid_head::codec::{ChatMessage, ModelCodec};

/// The roles `CompletionRequest::chat_messages` hands to the template.
const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

#[derive(Debug, Arbitrary)]
struct Message {
    role: u8,
    content: String,
}

fn model_path() -> PathBuf {
    if let Some(path) = std::env::var_os("SUPERFLUID_MODEL") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("SUPERFLUID_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/superfluid")))
        .unwrap_or_default();
    home.join("models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn codec() -> &'static ModelCodec {
    static CODEC: OnceLock<ModelCodec> = OnceLock::new();
    CODEC.get_or_init(|| {
        // llama.cpp's load report would bury libFuzzer's output.
        llama_cpp_2::send_logs_to_tracing(
            llama_cpp_2::LogOptions::default().with_logs_enabled(false),
        );
        let backend = Box::leak(Box::new(
            llama_cpp_2::llama_backend::LlamaBackend::init().expect("llama.cpp initialises"),
        ));
        let path = model_path();
        ModelCodec::load(backend, &path).unwrap_or_else(|e| {
            panic!("the chat_template target needs the default model (run scripts/setup): {e}")
        })
    })
}

fuzz_target!(|messages: Vec<Message>| {
    let codec = codec();
    let messages: Vec<ChatMessage> = messages
        .into_iter()
        .map(|m| ChatMessage::new(ROLES[usize::from(m.role) % ROLES.len()], m.content))
        .collect();
    if let Ok(text) = codec.render_chat(&messages) {
        for message in &messages {
            assert!(
                text.contains(&message.content),
                "a message's text is missing from the prompt"
            );
        }
        let tokens = codec.tokenize(&text);
        assert!(tokens.iter().all(|&t| t < codec.vocab_size()));
    }
});

//! Codec behaviour with the real SmolLM2 model file.

use super::*;
use llama_cpp_2::llama_backend::LlamaBackend;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The default model every head test loads.
pub(crate) fn model_path() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache/superfluid/models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// llama.cpp's backend may be initialised once per process; tests share it.
pub(crate) fn backend() -> &'static LlamaBackend {
    static BACKEND: OnceLock<LlamaBackend> = OnceLock::new();
    BACKEND.get_or_init(|| match LlamaBackend::init() {
        Ok(mut backend) => {
            backend.void_logs();
            backend
        }
        Err(e) => panic!("llama.cpp backend init failed: {e}"),
    })
}

/// The SmolLM2 codec, loaded once per test process.
pub(crate) fn smollm() -> &'static ModelCodec {
    static CODEC: OnceLock<ModelCodec> = OnceLock::new();
    CODEC.get_or_init(|| match ModelCodec::load(backend(), &model_path()) {
        Ok(codec) => codec,
        Err(e) => panic!("{e}"),
    })
}

#[test]
fn codec_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ModelCodec>();
    assert_send_sync::<Catalog>();
}

#[test]
fn id_is_the_file_stem() {
    assert_eq!(smollm().id(), "SmolLM2-135M-Instruct.Q4_1");
}

#[test]
fn missing_file_is_a_clear_error() {
    let err = ModelCodec::load(backend(), std::path::Path::new("/nonexistent/x.gguf"));
    assert!(matches!(err, Err(CodecError::NotFound { .. })), "{err:?}");
}

#[test]
fn smollm_template_renders_system_and_generation_prompt() {
    let text = smollm().render_chat(&[
        ChatMessage::new("system", "You are a helpful assistant."),
        ChatMessage::new("user", "What is 2+2?"),
    ]);
    assert_eq!(
        text.ok().as_deref(),
        Some(
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n\
             <|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
        )
    );
}

#[test]
fn rendered_chat_tokenizes_special_tokens_as_single_ids() {
    let codec = smollm();
    let text = codec
        .render_chat(&[ChatMessage::new("user", "Hi")])
        .unwrap_or_default();
    let ids = codec.tokenize(&text);
    let im_start = codec.tokenize("<|im_start|>");
    assert_eq!(im_start.len(), 1, "{im_start:?}");
    assert_eq!(ids.first(), im_start.first());
    // Plain tokenization must not turn the markup into the special token.
    assert!(codec.tokenize_plain("<|im_start|>").len() > 1);
}

#[test]
fn round_trips_multibyte_text_one_token_at_a_time() {
    let codec = smollm();
    let text = "Héllo, 日本語 wörld! 🦀🎉 naïve café — done.";
    let ids = codec.tokenize_plain(text);
    assert!(!ids.is_empty());
    let mut detok = Detokenizer::new();
    let mut out = String::new();
    for id in &ids {
        let piece = detok.feed(codec, std::slice::from_ref(id));
        assert!(
            !piece.contains(char::REPLACEMENT_CHARACTER),
            "broken char at {id}"
        );
        out.push_str(&piece);
    }
    assert!(!detok.has_pending());
    assert_eq!(out, text);
}

#[test]
fn an_emoji_spans_several_tokens_and_is_held_back() {
    let codec = smollm();
    let ids = codec.tokenize_plain("🦀");
    assert!(ids.len() > 1, "expected byte-level pieces, got {ids:?}");
    let mut detok = Detokenizer::new();
    let (last, first) = ids.split_last().unwrap_or((&0, &[]));
    assert_eq!(detok.feed(codec, first), "");
    assert_eq!(detok.feed(codec, std::slice::from_ref(last)), "🦀");
}

#[test]
fn out_of_range_ids_give_no_text_instead_of_aborting() {
    let codec = smollm();
    assert!(codec.piece(u32::MAX).is_empty());
    assert!(codec.piece(codec.vocab_size()).is_empty());
    assert!(!codec.is_eog(u32::MAX));
}

#[test]
fn stop_string_split_across_real_tokens_is_cut() {
    let codec = smollm();
    let ids = codec.tokenize_plain("The answer is 4.\nUser: thanks");
    let mut detok = Detokenizer::new();
    let mut stop = StopMatcher::new(["\nUser:".to_string()]);
    let mut out = String::new();
    let mut stopped = false;
    for id in &ids {
        let o = stop.push(&detok.feed(codec, std::slice::from_ref(id)));
        out.push_str(&o.text);
        if o.stopped {
            stopped = true;
            break;
        }
    }
    assert!(stopped);
    assert_eq!(out, "The answer is 4.");
}

#[test]
fn catalog_finds_models_and_rejects_duplicate_ids() {
    let catalog = Catalog::load(backend(), [model_path()]);
    let catalog = match catalog {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(
        catalog.ids(),
        vec!["SmolLM2-135M-Instruct.Q4_1".to_string()]
    );
    assert!(catalog.get("nope").is_none());
    let dup = Catalog::load(backend(), [model_path(), model_path()]);
    assert!(matches!(dup, Err(CodecError::DuplicateId { .. })));
}

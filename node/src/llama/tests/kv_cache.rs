//! The KV cache's type: the engine stores it as asked, reports its bytes,
//! and still generates; a setting llama.cpp refuses is refused first.

use super::*;
use crate::offload::{FlashAttn, KvCacheType};

fn engine_with(offload: Offload) -> Result<LlamaEngine, EngineError> {
    let config = LlamaConfig {
        model_path: model_path(),
        slots: 2,
        ctx: 512,
        threads: 2,
        offload,
        ..LlamaConfig::default()
    };
    LlamaEngine::start(backend(), config)
}

fn with_kv(kv_cache_type: KvCacheType) -> LlamaEngine {
    engine_with(Offload {
        kv_cache_type,
        ..Offload::default()
    })
    .expect("engine starts")
}

#[test]
fn quantized_kv_caches_report_their_type_and_take_fewer_bytes() {
    let f16 = with_kv(KvCacheType::F16);
    let q8 = with_kv(KvCacheType::Q8_0);
    let q4 = with_kv(KvCacheType::Q4_0);
    let bytes = |e: &LlamaEngine| e.info().model.kv_bytes as f64;
    assert_eq!(f16.info().model.kv_cache_type, "f16");
    assert_eq!(q8.info().model.kv_cache_type, "q8_0");
    assert_eq!(q4.info().model.kv_cache_type, "q4_0");
    // SmolLM2-135M: 1024 cells x 30 layers x (K + V) x 192 values x 2 bytes.
    assert_eq!(f16.info().model.kv_bytes, 1024 * 30 * 2 * 192 * 2);
    assert!((bytes(&q8) / bytes(&f16) - 8.5 / 16.0).abs() < 1e-9);
    assert!((bytes(&q4) / bytes(&f16) - 4.5 / 16.0).abs() < 1e-9);
}

#[test]
fn quantized_kv_caches_generate_with_flash_attention_left_on_auto() {
    for kv in [KvCacheType::Q8_0, KvCacheType::Q4_0] {
        let engine = with_kv(kv);
        let (tokens, outcome) = run(&engine, greedy(PROMPTS[3], 8));
        assert!(!tokens.is_empty(), "{kv}: {outcome:?}");
    }
}

#[test]
fn a_quantized_kv_cache_with_flash_attention_off_is_refused_with_what_to_change() {
    let refused = engine_with(Offload {
        kv_cache_type: KvCacheType::Q8_0,
        flash_attn: FlashAttn::Off,
        ..Offload::default()
    });
    let Err(error) = refused else {
        panic!("llama.cpp keeps a quantized V cache only with flash attention");
    };
    assert!(
        error.to_string().contains("--flash-attn auto or on"),
        "{error}"
    );
}

#[test]
fn f16_with_flash_attention_off_generates() {
    let engine = engine_with(Offload {
        flash_attn: FlashAttn::Off,
        ..Offload::default()
    })
    .expect("engine starts");
    let (tokens, _) = run(&engine, greedy(PROMPTS[3], 4));
    assert!(!tokens.is_empty());
}

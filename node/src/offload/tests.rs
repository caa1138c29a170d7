use super::*;

#[test]
fn every_setting_prints_back_as_the_text_it_parses_from() {
    for text in ["auto", "0", "33", "999"] {
        assert_eq!(
            text.parse::<GpuLayers>().map(|v| v.to_string()),
            Ok(text.into())
        );
    }
    for text in ["layer", "row", "none"] {
        assert_eq!(
            text.parse::<SplitMode>().map(|v| v.to_string()),
            Ok(text.into())
        );
    }
    for text in ["f16", "q8_0", "q4_0"] {
        assert_eq!(
            text.parse::<KvCacheType>().map(|v| v.to_string()),
            Ok(text.into())
        );
    }
    for text in ["auto", "on", "off"] {
        assert_eq!(
            text.parse::<FlashAttn>().map(|v| v.to_string()),
            Ok(text.into())
        );
    }
    let split: TensorSplit = "3,1.5,0".parse().expect("a split");
    assert_eq!(split.0, vec![3.0, 1.5, 0.0]);
    assert_eq!(split.to_string().parse::<TensorSplit>(), Ok(split));
}

#[test]
fn names_parse_in_any_case() {
    assert_eq!("Q8_0".parse(), Ok(KvCacheType::Q8_0));
    assert_eq!("AUTO".parse(), Ok(GpuLayers::Auto));
    assert_eq!("Row".parse(), Ok(SplitMode::Row));
}

#[test]
fn an_unknown_value_is_refused_naming_the_choices() {
    let e = "q5_1"
        .parse::<KvCacheType>()
        .expect_err("not a choice")
        .to_string();
    assert!(
        e.contains("\"q5_1\"") && e.contains("f16, q8_0, q4_0"),
        "{e}"
    );
    let e = "tensor"
        .parse::<SplitMode>()
        .expect_err("not a choice")
        .to_string();
    assert!(e.contains("layer, row, none"), "{e}");
    let e = "yes"
        .parse::<FlashAttn>()
        .expect_err("not a choice")
        .to_string();
    assert!(e.contains("auto, on, off"), "{e}");
    let e = "all"
        .parse::<GpuLayers>()
        .expect_err("not a choice")
        .to_string();
    assert!(e.contains("auto, or a number of layers"), "{e}");
    assert!("-1".parse::<GpuLayers>().is_err());
}

#[test]
fn a_tensor_split_needs_non_negative_parts_and_one_above_zero() {
    for bad in ["", "a,b", "1,-1", "0,0", "1,,2", "inf", "NaN"] {
        assert!(bad.parse::<TensorSplit>().is_err(), "{bad:?} was taken");
    }
    let many = vec!["1"; MAX_DEVICES + 1].join(",");
    assert_eq!(
        many.parse::<TensorSplit>(),
        Err(OffloadError::TooManyDevices {
            given: MAX_DEVICES + 1
        })
    );
    assert_eq!(
        "1/1".parse::<TensorSplit>(),
        Ok(TensorSplit(vec![1.0, 1.0]))
    );
}

#[test]
fn a_quantized_kv_cache_without_flash_attention_is_refused() {
    let offload = Offload {
        kv_cache_type: KvCacheType::Q8_0,
        flash_attn: FlashAttn::Off,
        ..Offload::default()
    };
    let e = offload
        .check()
        .expect_err("llama.cpp refuses it")
        .to_string();
    assert!(e.contains("--flash-attn auto or on"), "{e}");
    for flash_attn in [FlashAttn::Auto, FlashAttn::On] {
        assert_eq!(
            Offload {
                flash_attn,
                ..offload.clone()
            }
            .check(),
            Ok(())
        );
    }
    let f16_off = Offload {
        flash_attn: FlashAttn::Off,
        ..Offload::default()
    };
    assert_eq!(f16_off.check(), Ok(()));
}

#[test]
fn a_tensor_split_is_refused_until_the_binding_can_pass_it() {
    let offload = Offload {
        tensor_split: TensorSplit(vec![1.0, 1.0]),
        ..Offload::default()
    };
    assert_eq!(offload.check(), Err(OffloadError::TensorSplitUnsupported));
}

#[test]
fn rows_take_ggml_block_sizes() {
    // SmolLM2-135M: 3 KV heads of 64 values.
    assert_eq!(KvCacheType::F16.row_bytes(192), Some(384));
    assert_eq!(KvCacheType::Q8_0.row_bytes(192), Some(204));
    assert_eq!(KvCacheType::Q4_0.row_bytes(192), Some(108));
    assert_eq!(KvCacheType::Q8_0.row_bytes(100), None);
}

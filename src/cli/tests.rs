//! The command line: values parsed, and bad ones refused with why.

use super::admin::{parse_duration, parse_label};
use super::*;
use std::time::Duration;
use superfluid_node::offload::{
    FlashAttn, GpuLayers, KvCacheType, Offload, SplitMode, TensorSplit,
};

#[test]
fn durations_parse_with_units_and_bad_ones_say_why() {
    assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
    assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172800)));
    assert!(parse_duration("1w").unwrap_err().contains("unknown unit"));
    assert!(parse_duration("soon")
        .unwrap_err()
        .contains("not a duration"));
    assert!(parse_duration("0s").is_err());
}

#[test]
fn route_policy_is_named_and_a_bad_one_lists_the_choices() {
    let cli = Cli::try_parse_from(["superfluid", "serve", "--route-policy", "round-robin"]);
    let Ok(Cli {
        command: Command::Serve(flags),
    }) = cli
    else {
        panic!("serve --route-policy round-robin should parse: {cli:?}");
    };
    assert_eq!(flags.route_policy, RoutePolicy::RoundRobin);
    let bad = Cli::try_parse_from(["superfluid", "head", "--route-policy", "warmest"])
        .expect_err("an unknown policy is an error")
        .to_string();
    for name in ["least-ttft", "round-robin", "least-loaded", "random"] {
        assert!(bad.contains(name), "the error should list {name}: {bad}");
    }
}

#[test]
fn one_kv_stream_per_slot_unless_shared_kv_is_asked_for() {
    let shared = |args: &[&str]| match Cli::try_parse_from(args) {
        Ok(Cli {
            command: Command::Serve(flags),
        }) => flags.engine.shared_kv,
        other => panic!("{args:?} should parse: {other:?}"),
    };
    assert!(!shared(&["superfluid", "serve"]));
    assert!(shared(&["superfluid", "serve", "--shared-kv"]));
}

#[test]
fn api_keys_repeat_or_come_comma_separated() {
    let cli = Cli::try_parse_from([
        "superfluid",
        "head",
        "--api-key",
        "one",
        "--api-key",
        "two,three",
    ]);
    let Ok(Cli {
        command: Command::Head(flags),
    }) = cli
    else {
        panic!("head --api-key should parse: {cli:?}");
    };
    assert_eq!(flags.access.api_keys, ["one", "two", "three"]);
    assert!(!flags.access.insecure_no_auth);
}

#[test]
fn browser_flags_repeat_or_come_comma_separated_on_serve_and_head() {
    let args = [
        "--cors-origin",
        "http://localhost:3000,https://chat.example.com",
        "--allowed-host",
        "chat.example.lan",
        "--allowed-host",
        "llm.lan",
    ];
    for command in ["serve", "head"] {
        let browser = match Cli::try_parse_from(["superfluid", command].iter().chain(&args)) {
            Ok(Cli {
                command: Command::Serve(flags),
            }) => flags.browser,
            Ok(Cli {
                command: Command::Head(flags),
            }) => flags.browser,
            other => panic!("{command} with browser flags should parse: {other:?}"),
        };
        assert_eq!(
            browser.cors_origins,
            ["http://localhost:3000", "https://chat.example.com"]
        );
        assert_eq!(browser.allowed_hosts, ["chat.example.lan", "llm.lan"]);
    }
}

#[test]
fn labels_are_key_value() {
    assert_eq!(parse_label("gpu=4090"), Ok(("gpu".into(), "4090".into())));
    assert!(parse_label("gpu").is_err());
    assert!(parse_label("=x").is_err());
}

#[test]
fn serve_node_and_fleet_join_take_the_offload_flags() {
    let flags = [
        "--gpu-layers",
        "20",
        "--split-mode",
        "none",
        "--main-gpu",
        "1",
        "--kv-cache-type",
        "q4_0",
        "--flash-attn",
        "on",
    ];
    for command in [
        &["serve"][..],
        &["node"][..],
        &["fleet", "join", "sfj1.x"][..],
    ] {
        let args: Vec<&str> = ["superfluid"]
            .iter()
            .chain(command)
            .chain(&flags)
            .copied()
            .collect();
        let cli = Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let offload = cli
            .command
            .engine()
            .expect("an engine command")
            .offload
            .offload()
            .expect("settings llama.cpp takes");
        assert_eq!(offload.gpu_layers, GpuLayers::Count(20), "{args:?}");
        assert_eq!(offload.split_mode, SplitMode::None);
        assert_eq!(offload.main_gpu, 1);
        assert_eq!(offload.kv_cache_type, KvCacheType::Q4_0);
        assert_eq!(offload.flash_attn, FlashAttn::On);
    }
}

#[test]
fn offload_flags_default_to_llama_cpps_own_settings() {
    let Ok(Cli {
        command: Command::Serve(flags),
    }) = Cli::try_parse_from(["superfluid", "serve"])
    else {
        panic!("serve parses");
    };
    assert_eq!(flags.engine.offload.offload(), Ok(Offload::default()));
}

#[test]
fn an_offload_value_llama_cpp_cannot_take_is_refused_naming_the_choices() {
    for (flag, value, choices) in [
        ("--kv-cache-type", "q5_1", "f16, q8_0, q4_0"),
        ("--split-mode", "tensor", "layer, row, none"),
        ("--flash-attn", "yes", "auto, on, off"),
        ("--gpu-layers", "-1", "auto, or a number of layers"),
        ("--tensor-split", "1,-2", "non-negative proportions"),
    ] {
        // `--flag=value`, so that clap takes `-1` as a value, not a flag.
        let error = Cli::try_parse_from(["superfluid", "serve", &format!("{flag}={value}")])
            .expect_err("refused")
            .to_string();
        assert!(error.contains(choices), "{flag} {value}: {error}");
    }
}

#[test]
fn the_engine_host_takes_the_offload_the_node_passes_it() {
    let offload = Offload {
        gpu_layers: GpuLayers::Count(7),
        split_mode: SplitMode::Row,
        tensor_split: TensorSplit(vec![3.0, 1.0]),
        main_gpu: 2,
        kv_cache_type: KvCacheType::Q8_0,
        flash_attn: FlashAttn::Auto,
    };
    let mut args: Vec<String> = [
        "superfluid",
        "engine-host",
        "--model",
        "m.gguf",
        "--model-id",
        "m",
        "--slots",
        "1",
        "--ctx",
        "64",
        "--threads",
        "1",
    ]
    .map(String::from)
    .to_vec();
    for (flag, value) in OffloadFlags::args(&offload) {
        args.extend([flag.to_owned(), value]);
    }
    let Ok(Cli {
        command: Command::EngineHost(host),
    }) = Cli::try_parse_from(&args)
    else {
        panic!("the engine host should parse {args:?}");
    };
    assert_eq!(host.gpu_layers, offload.gpu_layers);
    assert_eq!(host.split_mode, offload.split_mode);
    assert_eq!(host.tensor_split, Some(offload.tensor_split.clone()));
    assert_eq!(host.main_gpu, offload.main_gpu);
    assert_eq!(host.kv_cache_type, offload.kv_cache_type);
    assert_eq!(host.flash_attn, offload.flash_attn);
}

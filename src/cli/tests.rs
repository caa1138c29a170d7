//! The command line: values parsed, and bad ones refused with why.

use super::admin::{parse_duration, parse_label};
use super::*;
use std::time::Duration;

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

//! The page's text: the counters' families, and one sample per node figure.

use super::*;
use crate::fleet::{NodeLoadSnapshot, NodeState};
use crate::routing::{Reason, RoutePolicy};
use std::time::{Duration, SystemTime};
use superfluid_link::Identity;
use superfluid_proto::ModelDescription;

fn node(name: &str, node_id: &str, state: NodeState, load: NodeLoadSnapshot) -> NodeSnapshot {
    NodeSnapshot {
        node_id: node_id.to_owned(),
        name: name.to_owned(),
        fingerprint: Identity::generate().unwrap().fingerprint(),
        address: "127.0.0.1:4000".parse().unwrap(),
        models: vec![ModelDescription {
            id: "smol".into(),
            ctx: 512,
            slots: 4,
            sha256: String::new(),
            ..Default::default()
        }],
        hardware: "Test CPU, 4 cores, 8 GiB RAM".into(),
        connected_since: SystemTime::UNIX_EPOCH,
        in_flight: 3,
        served: 9,
        state,
        last_heartbeat: SystemTime::UNIX_EPOCH,
        slots: 4,
        ctx: 512,
        labels: Vec::new(),
        ineligible: None,
        load,
        link_rtt: Duration::from_micros(1500),
    }
}

/// The sample lines of family `name`.
fn lines<'a>(page: &'a str, name: &str) -> Vec<&'a str> {
    page.lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .collect()
}

#[test]
fn every_sample_has_help_and_type_and_the_prefix() {
    let fleet = Fleet::new();
    fleet
        .metrics()
        .record_route(RoutePolicy::LeastTtft, Reason::Cold, 0);
    fleet.metrics().record_finished("smol", 100, 64);
    let page = render(&fleet, &Keys::default());
    assert!(page
        .contains("superfluid_route_decisions_total{policy=\"least-ttft\",reason=\"cold\"} 1\n"));
    assert!(page.contains("superfluid_prompt_tokens_total{model=\"smol\",source=\"cached\"} 64\n"));
    assert!(page.contains("superfluid_nodes{state=\"up\"} 0\n"));
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        assert!(name.starts_with("superfluid_"), "{line}");
        let family = name
            .strip_suffix("_bucket")
            .or_else(|| name.strip_suffix("_sum"))
            .or_else(|| name.strip_suffix("_count"))
            .filter(|f| page.contains(&format!("# TYPE {f} histogram")))
            .unwrap_or(name);
        assert!(
            page.contains(&format!("# TYPE {family} ")),
            "{name} has no TYPE line"
        );
    }
}

#[test]
fn each_node_figure_is_one_sample_per_connected_node_that_has_it() {
    let measured = NodeLoadSnapshot {
        busy_slots: 2,
        idle_slots: 2,
        queued: 1,
        queued_prompt_tokens: 40,
        prefill_tokens_per_sec: Some(512.5),
        decode_tokens_per_sec: Some(80.0),
        mean_generation_secs: Some(1.5),
        cached_blocks: 12,
    };
    let nodes = [
        node("gpu \"one\"", "node-1", NodeState::Up, measured),
        node(
            "cpu",
            "node-2",
            NodeState::Draining,
            NodeLoadSnapshot::default(),
        ),
        node("away", "", NodeState::Down, NodeLoadSnapshot::default()),
    ];
    let scraped = Scraped {
        nodes: &nodes,
        ..Scraped::default()
    };
    let page = page(&Metrics::default(), scraped);
    let one = "{node=\"gpu \\\"one\\\"\",node_id=\"node-1\"}";
    let two = "{node=\"cpu\",node_id=\"node-2\"}";
    assert_eq!(
        lines(&page, "superfluid_nodes"),
        [
            "superfluid_nodes{state=\"up\"} 1",
            "superfluid_nodes{state=\"draining\"} 1",
            "superfluid_nodes{state=\"down\"} 1",
        ]
    );
    let expect = |name: &str, values: &[(&str, &str)]| {
        let want: Vec<String> = values
            .iter()
            .map(|(labels, v)| format!("{name}{labels} {v}"))
            .collect();
        assert_eq!(lines(&page, name), want, "{name}");
    };
    expect("superfluid_node_slots", &[(one, "4"), (two, "4")]);
    expect("superfluid_node_busy_slots", &[(one, "2"), (two, "0")]);
    expect("superfluid_node_queued", &[(one, "1"), (two, "0")]);
    expect(
        "superfluid_node_queued_prompt_tokens",
        &[(one, "40"), (two, "0")],
    );
    expect("superfluid_node_kv_cells", &[(one, "2048"), (two, "2048")]);
    expect("superfluid_node_kv_cells_used", &[(one, "384"), (two, "0")]);
    expect(
        "superfluid_node_prefill_tokens_per_second",
        &[(one, "512.5")],
    );
    expect("superfluid_node_decode_tokens_per_second", &[(one, "80")]);
    expect(
        "superfluid_node_link_rtt_seconds",
        &[(one, "0.0015"), (two, "0.0015")],
    );
    expect(
        "superfluid_node_generations_served_total",
        &[(one, "9"), (two, "9")],
    );
    let info = lines(&page, "superfluid_node_info");
    assert_eq!(info.len(), 2, "{info:?}");
    assert!(
        info[1].contains("models=\"smol\"") && info[1].ends_with(" 1"),
        "{info:?}"
    );
}

fn key_usage(name: &str, requests: u64) -> (KeyRecord, UsageSnapshot) {
    let record = KeyRecord {
        name: name.to_owned(),
        created: 0,
        expires: None,
        models: None,
        rpm: None,
        tpm: None,
    };
    let usage = UsageSnapshot {
        requests,
        prompt_tokens: 100,
        cached_tokens: 40,
        completion_tokens: 7,
        last_used: None,
    };
    (record, usage)
}

#[test]
fn usage_is_listed_by_key_name_and_not_without_keys() {
    let keys = [key_usage("alice", 3), key_usage("bob", 0)];
    let scraped = Scraped {
        key_usage: &keys,
        ..Scraped::default()
    };
    let page = page(&Metrics::default(), scraped);
    assert_eq!(
        lines(&page, "superfluid_api_key_requests_total"),
        [
            "superfluid_api_key_requests_total{key=\"alice\"} 3",
            "superfluid_api_key_requests_total{key=\"bob\"} 0",
        ]
    );
    assert!(page.contains("superfluid_api_key_completion_tokens_total{key=\"alice\"} 7\n"));
    let without = super::page(&Metrics::default(), Scraped::default());
    assert!(!without.contains("superfluid_api_key"), "{without}");
}

#[test]
fn join_refusals_are_listed_by_reason_where_the_head_has_a_membership() {
    let refusals = [("expired", 2), ("revoked", 0)];
    let scraped = Scraped {
        join_refusals: Some(&refusals),
        ..Scraped::default()
    };
    let page = page(&Metrics::default(), scraped);
    assert_eq!(
        lines(&page, "superfluid_join_refusals_total"),
        [
            "superfluid_join_refusals_total{reason=\"expired\"} 2",
            "superfluid_join_refusals_total{reason=\"revoked\"} 0",
        ]
    );
    let without = super::page(&Metrics::default(), Scraped::default());
    assert!(!without.contains("superfluid_join_refusals_total"));
}

#[test]
fn every_family_on_a_page_is_among_the_exported_names() {
    let metrics = Metrics::default();
    metrics.record_request("/health", "", 200);
    metrics.latency("smol").ttft.observe(0.1);
    let nodes = [node(
        "n",
        "node-1",
        NodeState::Up,
        NodeLoadSnapshot::default(),
    )];
    let keys = [key_usage("ci", 0)];
    let scraped = Scraped {
        nodes: &nodes,
        join_refusals: Some(&[("expired", 1)]),
        key_usage: &keys,
    };
    let page = page(&metrics, scraped);
    let names = exported_names();
    for line in page.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let name = line.split(' ').next().unwrap_or_default();
        assert!(
            names.iter().any(|n| n == name),
            "{name} is not in {names:?}"
        );
    }
}

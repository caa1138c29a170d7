//! The page's text: counters, families, and one sample per node figure.

use super::*;
use crate::fleet::{NodeLoadSnapshot, NodeState};
use std::time::SystemTime;
use superfluid_link::Identity;

fn node(name: &str, node_id: &str, load: NodeLoadSnapshot) -> NodeSnapshot {
    NodeSnapshot {
        node_id: node_id.to_owned(),
        name: name.to_owned(),
        fingerprint: Identity::generate().unwrap().fingerprint(),
        address: "127.0.0.1:4000".parse().unwrap(),
        models: Vec::new(),
        connected_since: SystemTime::UNIX_EPOCH,
        in_flight: 3,
        served: 9,
        state: NodeState::Up,
        last_heartbeat: SystemTime::UNIX_EPOCH,
        slots: 4,
        ctx: 512,
        labels: Vec::new(),
        ineligible: None,
        load,
    }
}

#[test]
fn labels_are_escaped() {
    assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

#[test]
fn the_page_has_every_family_with_help_and_type() {
    let fleet = Fleet::new();
    fleet
        .metrics()
        .record_route(RoutePolicy::LeastTtft, Reason::Cold, 0);
    fleet.metrics().record_finished(100, 64);
    let page = render(&fleet);
    assert!(page
        .contains("superfluid_route_decisions_total{policy=\"least-ttft\",reason=\"cold\"} 1\n"));
    assert!(page.contains("superfluid_prompt_tokens_total 100\n"));
    assert!(page.contains("superfluid_cached_prompt_tokens_total 64\n"));
    assert!(page.contains("superfluid_nodes 0\n"));
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        assert!(
            page.contains(&format!("# TYPE {name} ")),
            "{name} has no TYPE line"
        );
    }
}

#[test]
fn each_node_figure_is_one_sample_per_node_that_has_it() {
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
        node("gpu \"one\"", "node-1", measured),
        node("cpu", "node-2", NodeLoadSnapshot::default()),
    ];
    let page = page(&Metrics::default(), &nodes);
    let gauges = &page[page.find("# HELP superfluid_nodes ").unwrap()..];
    let one = "{node=\"gpu \\\"one\\\"\",node_id=\"node-1\"}";
    let two = "{node=\"cpu\",node_id=\"node-2\"}";
    let expected = format!(
        "# HELP superfluid_nodes Connected nodes.
# TYPE superfluid_nodes gauge
superfluid_nodes 2
# HELP superfluid_node_slots Sequences the node runs at once.
# TYPE superfluid_node_slots gauge
superfluid_node_slots{one} 4
superfluid_node_slots{two} 4
# HELP superfluid_node_in_flight Generations the head has sent to the node that have not ended.
# TYPE superfluid_node_in_flight gauge
superfluid_node_in_flight{one} 3
superfluid_node_in_flight{two} 3
# HELP superfluid_node_busy_slots Slots running a sequence, as the node last reported.
# TYPE superfluid_node_busy_slots gauge
superfluid_node_busy_slots{one} 2
superfluid_node_busy_slots{two} 0
# HELP superfluid_node_queued Requests waiting for a slot on the node, as it last reported.
# TYPE superfluid_node_queued gauge
superfluid_node_queued{one} 1
superfluid_node_queued{two} 0
# HELP superfluid_node_prefill_tokens_per_second The node's measured prompt processing speed.
# TYPE superfluid_node_prefill_tokens_per_second gauge
superfluid_node_prefill_tokens_per_second{one} 512.5
# HELP superfluid_node_decode_tokens_per_second The node's measured generation speed of one stream.
# TYPE superfluid_node_decode_tokens_per_second gauge
superfluid_node_decode_tokens_per_second{one} 80
# HELP superfluid_node_cached_blocks Prompt blocks the head's index knows the node holds in KV cache.
# TYPE superfluid_node_cached_blocks gauge
superfluid_node_cached_blocks{one} 12
superfluid_node_cached_blocks{two} 0
"
    );
    assert_eq!(gauges, expected);
}

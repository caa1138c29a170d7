//! The page `GET /metrics` serves: the head's counters and each connected
//! node's gauges in the Prometheus text exposition format.
//!
//! It reads the fleet from above (its counters and a snapshot of its
//! nodes); the counters themselves ([`crate::metrics`]) sit below the fleet,
//! which updates them.

use std::fmt::Write as _;

use crate::fleet::{Fleet, NodeSnapshot};
use crate::metrics::Metrics;
use crate::routing::{Reason, RoutePolicy};

/// The metrics page for `fleet` as it is now.
pub fn render(fleet: &Fleet) -> String {
    page(fleet.metrics(), &fleet.nodes())
}

/// The metrics page: `metrics`' counters and a gauge family per node figure
/// of `nodes`.
pub fn page(metrics: &Metrics, nodes: &[NodeSnapshot]) -> String {
    let mut out = String::with_capacity(4096);
    let name = "superfluid_route_decisions_total";
    family(
        &mut out,
        name,
        "counter",
        "Generations routed, by policy and the reason for the node chosen.",
    );
    for policy in RoutePolicy::ALL {
        for reason in Reason::ALL {
            let n = metrics.decisions(policy, reason);
            let _ = writeln!(
                out,
                "{name}{{policy=\"{policy}\",reason=\"{}\"}} {n}",
                reason.as_str()
            );
        }
    }
    let counters = [
        (
            "superfluid_route_predicted_cached_tokens_total",
            "Prompt tokens the router expected the chosen nodes to hold in cache.",
            metrics.predicted_cached_tokens(),
        ),
        (
            "superfluid_prompt_tokens_total",
            "Prompt tokens of generations that finished.",
            metrics.prompt_tokens(),
        ),
        (
            "superfluid_cached_prompt_tokens_total",
            "Prompt tokens nodes found in their KV cache and did not compute again.",
            metrics.cached_tokens(),
        ),
        (
            "superfluid_generations_total",
            "Generations that finished on a node.",
            metrics.generations(),
        ),
        (
            "superfluid_generations_failed_total",
            "Generations that failed on a node or lost their node.",
            metrics.failed(),
        ),
        (
            "superfluid_generations_retried_total",
            "Generations sent to another node because theirs was lost before the first token.",
            metrics.retried(),
        ),
    ];
    for (name, help, value) in counters {
        family(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {value}");
    }
    family(&mut out, "superfluid_nodes", "gauge", "Connected nodes.");
    let _ = writeln!(out, "superfluid_nodes {}", nodes.len());
    node_gauges(&mut out, nodes);
    out
}

/// Escapes a label value for the text format.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

type Gauge = (&'static str, &'static str, fn(&NodeSnapshot) -> Option<f64>);

/// One family per node figure, one sample per node that has it.
fn node_gauges(out: &mut String, nodes: &[NodeSnapshot]) {
    let gauges: [Gauge; 7] = [
        (
            "superfluid_node_slots",
            "Sequences the node runs at once.",
            |n| Some(f64::from(n.slots)),
        ),
        (
            "superfluid_node_in_flight",
            "Generations the head has sent to the node that have not ended.",
            |n| Some(f64::from(n.in_flight)),
        ),
        (
            "superfluid_node_busy_slots",
            "Slots running a sequence, as the node last reported.",
            |n| Some(f64::from(n.load.busy_slots)),
        ),
        (
            "superfluid_node_queued",
            "Requests waiting for a slot on the node, as it last reported.",
            |n| Some(f64::from(n.load.queued)),
        ),
        (
            "superfluid_node_prefill_tokens_per_second",
            "The node's measured prompt processing speed.",
            |n| n.load.prefill_tokens_per_sec,
        ),
        (
            "superfluid_node_decode_tokens_per_second",
            "The node's measured generation speed of one stream.",
            |n| n.load.decode_tokens_per_sec,
        ),
        (
            "superfluid_node_cached_blocks",
            "Prompt blocks the head's index knows the node holds in KV cache.",
            |n| Some(n.load.cached_blocks as f64),
        ),
    ];
    for (name, help, get) in gauges {
        family(out, name, "gauge", help);
        for n in nodes {
            if let Some(v) = get(n) {
                let _ = writeln!(
                    out,
                    "{name}{{node=\"{}\",node_id=\"{}\"}} {v}",
                    label(&n.name),
                    label(&n.node_id)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
